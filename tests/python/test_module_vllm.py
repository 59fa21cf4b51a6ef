"""ctstream.vllm: weights_iterator yields (name, torch.Tensor) like vLLM's
safetensors_weights_iterator; packed=True is byte for byte that iterator's output; register()
installs a DefaultModelLoader subclass (checked against a stand-in of vLLM's loader API, since
vLLM itself needs a GPU build)."""
from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

if os.environ.get("CTSTREAM_REQUIRE_MODULE") == "1":
    import ctstream
    import ctstream.vllm as cv
else:
    ctstream = pytest.importorskip("ctstream", reason="ctstream not installed: pip install .")
    import ctstream.vllm as cv

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CT = ROOT / "tests" / "fixtures" / "ct"
SHARDED = ROOT / "tests" / "fixtures" / "st" / "sharded"
LEFTOVER = (".input_scale", ".input_zero_point", ".input_global_scale", ".output_scale", ".output_zero_point")


def safetensors_weights_iterator(hf_weights_files, use_tqdm_on_load=False):
    """vLLM's safetensors_weights_iterator (lazy strategy), minus tqdm."""
    for st_file in hf_weights_files:
        with safe_open(st_file, framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def files_of(d: Path):
    return sorted(str(p) for p in d.glob("*.safetensors"))


def bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("case", ["v020_mixed_int4g32_fp8ch_bf16", "v020_nvfp4a16_bf16", "v012_sparse24_fp8_bf16"])
def test_packed_is_safetensors_weights_iterator(case):
    d = CT / case
    want = dict(safetensors_weights_iterator(files_of(d)))
    got = list(cv.weights_iterator(files_of(d), False, packed=True))
    assert len(got) == len(want) and {n for n, _ in got} == set(want)
    for name, t in got:
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
        assert t.dtype == want[name].dtype and t.shape == want[name].shape, name
        assert torch.equal(bits(t), bits(want[name])), name


def test_decoded_is_the_library_decompression():
    d = CT / "v020_pack_w4_g64_asym_bf16"
    ref = load_file(str(d / "expected" / "expected.safetensors"))
    got = dict(cv.weights_iterator(files_of(d), use_tqdm_on_load=False))
    assert set(ref) <= set(got) and all(n.endswith(LEFTOVER) for n in set(got) - set(ref))
    for name, want in ref.items():
        assert got[name].dtype == want.dtype and torch.equal(bits(got[name]), bits(want)), name
    f16 = dict(cv.weights_iterator(str(d), dtype=torch.float16))
    ref16 = load_file(str(d / "expected" / "expected_fp16.safetensors"))
    for name, want in ref16.items():
        assert torch.equal(bits(f16[name]), bits(want)), name


def test_shard_subset_and_sources():
    files = files_of(SHARDED)
    assert len(files) == 3
    every = dict(safetensors_weights_iterator(files))
    ours = dict(cv.weights_iterator(files))
    assert set(ours) == set(every)
    first = dict(cv.weights_iterator(files[:1]))  # vLLM may pass a filtered list of shards
    assert set(first) == set(dict(safetensors_weights_iterator(files[:1])))
    assert dict(cv.weights_iterator(SHARDED)).keys() == ours.keys()  # the directory itself
    with pytest.raises(ValueError, match="several directories"):
        list(cv.weights_iterator([files[0], str(CT / "v020_nvfp4a16_bf16" / "model.safetensors")]))
    with pytest.raises(ValueError, match="empty"):
        list(cv.weights_iterator([]))


def test_load_weights_like_vllm():
    """A model's load_weights loop (default_weight_loader: param.data.copy_(w)) over the
    iterator fills every parameter with the library's decompression."""
    d = CT / "v020_int8_w8a8_channel_sym_bf16"
    ref = load_file(str(d / "expected" / "expected_bf16.safetensors"))
    params = {n: torch.nn.Parameter(torch.zeros_like(t), requires_grad=False) for n, t in ref.items()}
    loaded = set()
    for name, w in cv.weights_iterator(files_of(d), use_tqdm_on_load=True):
        if name not in params:
            assert name.endswith(LEFTOVER), name  # activation qparams: no dense parameter
            continue
        params[name].data.copy_(w)
        loaded.add(name)
    assert loaded == set(params)
    for n, p in params.items():
        assert torch.equal(bits(p.data), bits(ref[n])), n


def test_register_with_vllm_loader_api(monkeypatch):
    registry = {}

    class DefaultModelLoader:  # stand-in: vLLM's constructor takes a LoadConfig
        def __init__(self, load_config):
            self.load_config = load_config

    def register_model_loader(load_format):
        def wrap(cls):
            registry[load_format] = cls
            return cls
        return wrap

    ml = types.ModuleType("vllm.model_executor.model_loader")
    ml.register_model_loader = register_model_loader
    dl = types.ModuleType("vllm.model_executor.model_loader.default_loader")
    dl.DefaultModelLoader = DefaultModelLoader
    for name, mod in [("vllm", types.ModuleType("vllm")), ("vllm.model_executor", types.ModuleType("vllm.model_executor")),
                      ("vllm.model_executor.model_loader", ml), ("vllm.model_executor.model_loader.default_loader", dl)]:
        monkeypatch.setitem(sys.modules, name, mod)

    cls = cv.register("ctstream", dtype="bfloat16")
    assert registry["ctstream"] is cls and issubclass(cls, DefaultModelLoader)
    loader = cls(types.SimpleNamespace(use_tqdm_on_load=False))
    d = CT / "v020_fp8_channel_dynamic_bf16"
    model_config = types.SimpleNamespace(model=str(d), revision=None)
    got = dict(loader.get_all_weights(model_config, model=None))
    want = dict(cv.weights_iterator(str(d), dtype="bfloat16"))
    assert got.keys() == want.keys() and all(torch.equal(bits(got[k]), bits(want[k])) for k in got)
    with pytest.raises(ValueError, match="local model directory"):
        list(loader.get_all_weights(types.SimpleNamespace(model="org/model-on-the-hub"), model=None))
