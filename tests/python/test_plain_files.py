"""A file that is not a compressed-tensors checkpoint reads exactly as safetensors reads it (issue 27):
no config.json, a config.json without quantization_config, or one of another quant_method (AutoFP8's
"fp8", GPTQ). Checked against the real safetensors library on real compressed-tensors files stripped
of their config (their fp8 weight + weight_scale, sparse bitmask parts, packed int4 + zero points
would be grouped under a compressed-tensors config), through ctstream.safe_open, ctstream.open and
the CLI's inspect; both io modes."""
import json
import os
import shutil
import subprocess

import pytest

ctstream = pytest.importorskip("ctstream")
torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
from safetensors import safe_open as st_safe_open  # noqa: E402

import ctstream.torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CT = os.path.join(ROOT, "tests", "fixtures", "ct")
FIXTURES = ["v020_fp8_channel_dynamic_bf16", "v012_sparse_bitmask_bf16", "v020_pack_w4_g32_asym_bf16",
            "v020_int8_w8a8_channel_sym_bf16", "v020_nvfp4a16_bf16"]
CONFIGS = {
    "none": None,
    "no_quantization": {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    "autofp8": {"quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic"}},
}


def same_bits(a, b):
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8)) if a.numel() else True


@pytest.fixture(params=[(f, c) for f in FIXTURES for c in CONFIGS], ids=lambda p: f"{p[0]}-{p[1]}")
def plain_dir(request, tmp_path):
    name, cfg = request.param
    shutil.copy(os.path.join(CT, name, "model.safetensors"), tmp_path / "model.safetensors")
    if CONFIGS[cfg] is not None:
        (tmp_path / "config.json").write_text(json.dumps(CONFIGS[cfg]))
    return tmp_path


@pytest.mark.parametrize("backend", ["mmap", "pread"])
def test_safe_open_reads_it_as_safetensors_does(plain_dir, backend):
    f = str(plain_dir / "model.safetensors")
    with st_safe_open(f, framework="pt") as ref, ctstream.safe_open(f, framework="pt", backend=backend) as got:
        assert list(got.keys()) == list(ref.keys())
        for k in ref.keys():
            assert same_bits(got.get_tensor(k), ref.get_tensor(k)), k


def test_open_and_load_file_yield_every_entry_as_stored(plain_dir):
    f = str(plain_dir / "model.safetensors")
    with st_safe_open(f, framework="pt") as ref:
        want = {k: ref.get_tensor(k) for k in ref.keys()}
    ck = ctstream.open(str(plain_dir), framework="pt")
    assert ck.config_info["compressed_tensors"] is False
    got = dict(ck.tensors())
    assert sorted(got) == sorted(want)
    for k, v in want.items():
        assert same_bits(got[k], v), k
    loaded = ctstream.torch.load_file(f)
    assert sorted(loaded) == sorted(want)
    assert all(same_bits(loaded[k], want[k]) for k in want)


def test_inspect_says_which_config_it_used(plain_dir):
    cli = os.environ.get("CTSTREAM_CLI")
    if not cli:
        pytest.skip("set CTSTREAM_CLI")
    j = json.loads(subprocess.run([cli, "inspect", str(plain_dir), "--json"], check=True, capture_output=True,
                                  text=True).stdout)
    assert j["config"]["compressed_tensors"] is False
    text = subprocess.run([cli, "inspect", str(plain_dir)], check=True, capture_output=True, text=True).stdout
    assert "config: plain safetensors" in text


def test_the_same_file_with_its_own_config_is_decoded():
    # The cases above can fail: under its compressed-tensors config the same file groups its parts.
    ck = ctstream.open(os.path.join(CT, "v020_pack_w4_g32_asym_bf16"), framework="pt")
    info = ck.config_info
    assert info["compressed_tensors"] is True and "compressed-tensors 0.20" in info["description"]
    assert info["file"].endswith("config.json")
    assert not any(k.endswith(".weight_packed") for k in ck.keys())
