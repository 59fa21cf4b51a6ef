"""Reference side of the `ctstream compress` cross-check: the compressed-tensors library itself.

Used by test_writer_crosscheck.py. Two parts:

* 0.20 line (imported normally): build a generic torch model from a dense state dict (every
  module holding a 2-D `.weight` is an nn.Linear), apply the QuantizationConfig that ctstream wrote,
  calibrate the weights the way llm-compressor's memoryless min-max observer does
  (observers/helpers.py `flatten_for_calibration` + `torch.amin/amax(dim=(0, -1))`, then
  compressed_tensors `calculate_qparams` / `generate_gparam`; nvfp4 global scales fused over q/k/v
  and gate/up as `fuse_weight_observers` does), compress with `ModelCompressor.compress_model`, and
  decompress ctstream's output with `ModelCompressor.decompress_model` and with the model-free
  `CompressedTensorsDequantizer`.
* 0.12 line (sparse formats; a separate interpreter, see tests/fixtures/gen/ctlib.py):
  `python writer_ref.py lib012 SPEC.json` compresses the input with the config's sparsity
  compressor and decompresses ctstream's output with it; it prints a JSON verdict.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "gen"))

FUSED = [("gate_proj", "up_proj"), ("q_proj", "k_proj", "v_proj"), ("q_a_proj", "kv_a_proj_with_mqa"), ("w1", "w3")]


def bits_view(t):
    import torch
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(ints)


def diff(got, want) -> str | None:
    """None when bitwise equal (NaN == NaN for floats), else a short description."""
    import torch
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        return f"{got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}"
    if got.numel() == 0:
        return None
    g, w = bits_view(got), bits_view(want)
    eq = g == w
    if want.is_floating_point() and want.element_size() > 1:
        eq |= got.isnan() & want.isnan()
    if bool(eq.all()):
        return None
    bad = (~eq).nonzero()
    i = tuple(bad[0].tolist())
    return f"{int((~eq).sum())} of {want.numel()} elements differ, first at {list(i)}: {got[i].item()} != {want[i].item()}"


def load_dir(d: Path) -> dict:
    from safetensors.torch import load_file
    sd = {}
    for f in sorted(Path(d).glob("*.safetensors")):
        sd.update(load_file(str(f)))
    return sd


# ---------------------------------------------------------------------------------- 0.20 line

def build_model(sd: dict):
    """Module tree from a state dict; modules with a 2-D `weight` become nn.Linear."""
    import torch
    from torch import nn

    root = nn.Module()
    linear = {}
    for name, t in sd.items():
        mod, _, p = name.rpartition(".")
        if p == "weight" and t.ndim == 2:
            linear[mod] = t

    def get(path: str, create_linear=None):
        m = root
        parts = path.split(".") if path else []
        for i, part in enumerate(parts):
            if not hasattr(m, part):
                if i == len(parts) - 1 and create_linear is not None:
                    w = create_linear
                    bias = (path + ".bias") in sd
                    m.add_module(part, nn.Linear(w.shape[1], w.shape[0], bias=bias, dtype=w.dtype))
                else:
                    m.add_module(part, nn.Module())
            m = getattr(m, part)
        return m

    for mod, w in linear.items():
        get(mod, create_linear=w)
    with torch.no_grad():
        for name, t in sd.items():
            mod, _, p = name.rpartition(".")
            m = get(mod)
            if isinstance(getattr(m, p, None), torch.Tensor):
                getattr(m, p).data = t.clone()
            elif t.is_floating_point():
                m.register_parameter(p, nn.Parameter(t.clone(), requires_grad=False))
            else:  # e.g. BERT's embeddings.position_ids
                m.register_buffer(p, t.clone())
    return root


def observe(w, args):
    """llm-compressor memoryless min-max: flatten_for_calibration(weight) + amin/amax(dim=(0,-1))."""
    import torch
    from compressed_tensors.quantization.utils import maybe_pad_tensor_for_block_quant
    s = str(getattr(args.strategy, "value", args.strategy))
    if s == "tensor":
        x = w.reshape((1, 1, -1))
    elif s == "channel":
        x = w.unsqueeze(-2).unsqueeze(0)
    elif s in ("group", "tensor_group"):
        x = w.unflatten(-1, (-1, args.group_size)).unsqueeze(0)
    elif s == "block":
        bh, bw = args.block_structure
        v = maybe_pad_tensor_for_block_quant(w, args.block_structure)
        r, c = v.shape
        x = v.reshape(r // bh, bh, c // bw, bw).transpose(1, 2).flatten(-2, -1).unsqueeze(0)
    else:
        raise ValueError(s)
    return torch.amin(x, dim=(0, -1)), torch.amax(x, dim=(0, -1))


def calibrate(model, fuse=True):
    import torch
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

    mods = {n: m for n, m in model.named_modules() if getattr(m, "quantization_scheme", None) is not None
            and m.quantization_scheme.weights is not None}
    gscales = {}
    for n, m in mods.items():
        s = m.quantization_scheme.weights.strategy
        if str(getattr(s, "value", s)) == "tensor_group":
            w = m.weight.data
            gscales[n] = (w.reshape(1, 1, -1).amin(dim=(0, -1)), w.reshape(1, 1, -1).amax(dim=(0, -1)))
    glob = {n: generate_gparam(*mm) for n, mm in gscales.items()}
    if fuse:
        for n in gscales:
            parent, _, last = n.rpartition(".")
            for group in FUSED:
                if group[0] != last:
                    continue
                names = [f"{parent}.{g}" if parent else g for g in group]
                if not all(x in gscales for x in names):
                    continue
                lo = torch.stack([gscales[x][0] for x in names]).amin(dim=0)
                hi = torch.stack([gscales[x][1] for x in names]).amax(dim=0)
                g = generate_gparam(lo, hi)
                for x in names:
                    glob[x] = g
    with torch.no_grad():
        for n, m in mods.items():
            args = m.quantization_scheme.weights
            mn, mx = observe(m.weight.data, args)
            gs = glob.get(n)
            scale, zp = calculate_qparams(mn, mx, args, global_scale=gs)
            m.weight_scale.data.copy_(scale.reshape(m.weight_scale.shape))
            if hasattr(m, "weight_zero_point"):
                m.weight_zero_point.data.copy_(zp.reshape(m.weight_zero_point.shape))
            if gs is not None:
                m.weight_global_scale.data.copy_(gs)


def lib_compress_020(sd: dict, qcfg: dict, fuse=True) -> dict:
    """The library's compressed state dict for dense `sd` under ctstream's quantization_config."""
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, QuantizationStatus, apply_quantization_config

    qc = QuantizationConfig.model_validate(qcfg)
    # llm-compressor applies a fresh config (status "initialized"), so every module also gets a
    # zeros zero-point (force_zero_point) that `_quantize` adds: -0.0 / s + 0 -> +0.0 (fp8 0x00).
    qc.quantization_status = QuantizationStatus.INITIALIZED
    model = build_model(sd)
    apply_quantization_config(model, qc)
    qc.quantization_status = QuantizationStatus.COMPRESSED
    calibrate(model, fuse=fuse)
    ModelCompressor(quantization_config=qc).compress_model(model)
    return {k: v.detach().contiguous() for k, v in model.state_dict().items()}


def lib_decompress_020(sd_dense: dict, qcfg: dict, disk: dict) -> dict:
    """ModelCompressor.decompress_model of ctstream's tensors `disk` (loaded strict=True into the
    compressed module layout the library itself builds)."""
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config

    qc = QuantizationConfig.model_validate(qcfg)
    m2 = build_model(sd_dense)
    apply_quantization_config(m2, qc)
    with torch.no_grad():
        for n, p in m2.named_parameters():
            if n.endswith("_scale"):
                p.data.fill_(1.0)
    mc = ModelCompressor(quantization_config=qc)
    mc.compress_model(m2)
    m2.load_state_dict(disk, strict=True, assign=True)
    mc.decompress_model(m2)
    return {k: v.detach() for k, v in m2.state_dict().items()}


def lib_dequantizer_020(out_dir: Path) -> dict:
    """The model-free loader: compressed_tensors.entrypoints.convert CompressedTensorsDequantizer."""
    import torch
    from compressed_tensors.entrypoints.convert.converters.ct_dequantizer import CompressedTensorsDequantizer
    deq = CompressedTensorsDequantizer(str(out_dir), dtype=torch.float32)
    return deq.process(load_dir(out_dir))


# ---------------------------------------------------------------------------------- 0.12 line

def lib012(spec_path: str) -> int:
    """spec: {"input": file, "out_dir": dir, "ctstream_decoded": file, "modules": [...], "dtype": str|None}"""
    import ctlib
    ctlib.use_line("0.12")
    import torch
    from compressed_tensors.compressors import ModelCompressor
    from safetensors.torch import load_file

    spec = json.loads(Path(spec_path).read_text())
    out_dir = Path(spec["out_dir"])
    cfg = json.loads((out_dir / "config.json").read_text())["quantization_config"]
    mc = ModelCompressor.from_compression_config(cfg)
    sc = mc.sparsity_compressor
    problems = []
    sd = load_dir(Path(spec["input"])) if Path(spec["input"]).is_dir() else load_file(spec["input"])
    if spec.get("dtype"):
        d = getattr(torch, spec["dtype"])
        sd = {k: (v.to(d) if v.is_floating_point() else v) for k, v in sd.items()}
    lib = sc.compress(sd, compression_targets=set(spec["modules"]))
    ours = load_dir(out_dir)
    if set(lib) != set(ours):
        problems.append(f"key sets differ: only library {sorted(set(lib) - set(ours))[:5]}, "
                        f"only ctstream {sorted(set(ours) - set(lib))[:5]}")
    for k in sorted(set(lib) & set(ours)):
        d = diff(ours[k], lib[k].contiguous())
        if d:
            problems.append(f"compress {k}: {d}")
    dec = dict(sc.decompress(str(out_dir)))
    ct = load_file(spec["ctstream_decoded"])
    for k, v in ct.items():
        if k not in dec:
            problems.append(f"library decompression lacks {k}")
            continue
        want = dec[k].float() if dec[k].is_floating_point() else dec[k]
        got = v.float() if v.is_floating_point() else v
        d = diff(got, want)
        if d:
            problems.append(f"decompress {k}: {d}")
    print(json.dumps({"ok": not problems, "problems": problems[:20], "compressed": len(spec["modules"]),
                      "version": __import__("compressed_tensors").__version__}))
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "lib012":
        sys.exit(lib012(sys.argv[2]))
    print(__doc__)
    sys.exit(2)
