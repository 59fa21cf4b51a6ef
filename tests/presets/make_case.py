#!/usr/bin/env python3
"""Build one checkpoint the way users make them with compressed-tensors 0.20 and decompress it with
the library (reference).  Run with the ref venv:

    .venv/bin/python tests/presets/make_case.py CASE_NAME OUT_ROOT

Writes OUT_ROOT/CASE_NAME/{config.json, *.safetensors, expected/expected.safetensors, ref.json}.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import sys
import traceback
import zlib
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import CASES  # noqa: E402


def observe(w, args):
    """min/max per strategy reduction (llm-compressor's memoryless min/max observer)."""
    s = str(getattr(args.strategy, "value", args.strategy))
    w = w.detach()
    if s == "tensor":
        return w.amin().reshape(1), w.amax().reshape(1)
    if s == "channel":
        return w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
    if s in ("group", "tensor_group"):
        gs = args.group_size
        chunks = torch.split(w, gs, dim=-1)  # ragged last group allowed
        mn = torch.stack([c.amin(-1) for c in chunks], -1)
        mx = torch.stack([c.amax(-1) for c in chunks], -1)
        return mn, mx
    if s == "block":
        bh, bw = args.block_structure
        R, C = w.shape
        nr, nc = -(-R // bh), -(-C // bw)
        mn = torch.empty(nr, nc, dtype=w.dtype)
        mx = torch.empty(nr, nc, dtype=w.dtype)
        for i in range(nr):
            for j in range(nc):
                blk = w[i * bh:(i + 1) * bh, j * bw:(j + 1) * bw]
                mn[i, j], mx[i, j] = blk.amin(), blk.amax()
        return mn, mx
    raise ValueError(s)


def build_qconfig(c):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationConfig, QuantizationScheme
    from compressed_tensors.quantization.quant_scheme import PRESET_SCHEMES
    import copy
    groups = {}
    for gname, gd in c["groups"].items():
        gd = dict(gd)
        kw = {"targets": gd.pop("targets")}
        if "preset" in gd:
            for k, v in copy.deepcopy(PRESET_SCHEMES[gd.pop("preset")]).items():
                kw[k] = v
        for k in ("weights", "input_activations", "output_activations"):
            if k in gd:
                v = gd.pop(k)
                if isinstance(v, dict) and isinstance(kw.get(k), QuantizationArgs):
                    v = {**kw[k].model_dump(), **v}
                kw[k] = QuantizationArgs(**v) if v is not None else None
        if "format" in gd:
            kw["format"] = gd.pop("format")
        assert not gd, gd
        groups[gname] = QuantizationScheme(**kw)
    kv = c.get("kv_cache_scheme")
    return QuantizationConfig(config_groups=groups, ignore=list(c.get("ignore", ["lm_head"])),
                              kv_cache_scheme=QuantizationArgs(**kv) if kv else None)


def make_model(c):
    from transformers import LlamaConfig, LlamaForCausalLM
    m = c.get("model", {})
    dtype = getattr(torch, c.get("dtype", "bfloat16"))
    H = m.get("hidden", 128)
    heads = m.get("heads", 2)
    cfg = LlamaConfig(vocab_size=m.get("vocab", 256), hidden_size=H, intermediate_size=m.get("inter", 256),
                      num_hidden_layers=m.get("layers", 2), num_attention_heads=heads,
                      num_key_value_heads=m.get("kv_heads", 1), head_dim=m.get("head_dim", H // heads),
                      tie_word_embeddings=m.get("tie", False), max_position_embeddings=64,
                      attention_bias=m.get("attention_bias", False), torch_dtype=c.get("dtype", "bfloat16"))
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(dtype)
    return cfg, model


def fill(model, name):
    g = torch.Generator().manual_seed(zlib.crc32(name.encode()))
    with torch.no_grad():
        for n, p in model.named_parameters():
            t = torch.randn(p.shape, generator=g) * 0.05
            if n.endswith("norm.weight"):
                t = 1.0 + t
            elif t.ndim == 2:
                t[0, 0], t[-1, -1] = 0.4, -0.3
                # a row with all-positive values and one all-zero group to stress asym zero points
                t[1] = t[1].abs()
            else:
                t = t * 0.1
            p.copy_(t.to(p.dtype))


def calibrate(model, seed_name):
    from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam
    g = torch.Generator().manual_seed(zlib.crc32((seed_name + "/act").encode()))
    for name, m in model.named_modules():
        sch = getattr(m, "quantization_scheme", None)
        if sch is None:
            continue
        args = sch.weights
        if args is not None and hasattr(m, "weight_scale"):
            w = m.weight.data
            mn, mx = observe(w, args)
            gscale = None
            if str(getattr(args.strategy, "value", args.strategy)) == "tensor_group":
                gscale = generate_gparam(w.amin(), w.amax())
                m.weight_global_scale.data.copy_(gscale)
            scale, zp = calculate_qparams(mn, mx, args, global_scale=gscale)
            m.weight_scale.data.copy_(scale.reshape(m.weight_scale.shape))
            if hasattr(m, "weight_zero_point"):
                m.weight_zero_point.data.copy_(zp.reshape(m.weight_zero_point.shape))
        # activation / attention qparams: deterministic values instead of torch.empty garbage
        for pn, p in list(m.named_parameters(recurse=False)):
            if pn.startswith("weight"):
                continue
            if pn.endswith("_scale") or pn.endswith("_global_scale"):
                v = (torch.rand(p.shape, generator=g) * 0.05 + 0.01)
                if pn.endswith("_global_scale"):
                    v = v * 1000
                p.data.copy_(v.to(p.dtype))
            elif pn.endswith("_zero_point"):
                if p.dtype.is_floating_point:
                    p.data.copy_(torch.zeros(p.shape).to(p.dtype))
                else:
                    p.data.copy_(torch.randint(-3, 4, p.shape, generator=g).to(p.dtype))


def main():
    name = sys.argv[1]
    root = Path(sys.argv[2])
    reref = os.environ.get("REREF")  # re-run only the reference on an edited directory
    c = CASES[os.environ.get("BASE_CASE", name)]
    d = root / name
    if d.exists() and not reref:
        shutil.rmtree(d)
    d.mkdir(parents=True, exist_ok=True)
    ref = {"case": name, "stage": "build"}
    try:
        from compressed_tensors.compressors import ModelCompressor
        from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
        from safetensors.torch import save_file, load_file
        cfg, model = make_model(c)
        fill(model, name)
        logical = list(model.state_dict().keys())
        if reref:
            shutil.rmtree(d / "expected", ignore_errors=True)
            return finish(d, c, cfg, logical, ref)
        if c.get("transform"):
            from compressed_tensors.transform import TransformConfig, apply_transform_config
            apply_transform_config(model, TransformConfig.model_validate(c["transform"]))
        qc = build_qconfig(c)
        apply_quantization_config(model, qc)
        calibrate(model, name)
        ref["stage"] = "compress"
        compressor = ModelCompressor.from_pretrained_model(model, quantization_format=c.get("quant_format"))
        compressor.compress_model(model)
        kw = {}
        if c.get("shard"):
            kw["max_shard_size"] = c["shard"]
        model.save_pretrained(str(d), **kw)
        compressor.update_config(str(d))
    except Exception as e:  # noqa: BLE001
        ref["error"] = f"{type(e).__name__}: {e}"
        ref["traceback"] = traceback.format_exc()
        (d / "ref.json").write_text(json.dumps(ref, indent=1))
        print(name, ref["stage"], ref.get("error", ""))
        return
    finish(d, c, cfg, logical, ref)


def finish(d, c, cfg, logical, ref):
    name = d.name
    ref["stage"] = "decompress"
    try:
        from compressed_tensors.compressors import ModelCompressor
        from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
        from safetensors.torch import save_file, load_file

        # The library's load path, from the files on disk (what CompressedTensorsHfQuantizer does):
        saved = json.loads((d / "config.json").read_text())["quantization_config"]
        qc2 = QuantizationConfig.model_validate(saved)
        from transformers import LlamaForCausalLM
        ref_model = LlamaForCausalLM(cfg).to(getattr(torch, c.get("dtype", "bfloat16")))
        tcfg = json.loads((d / "config.json").read_text())["quantization_config"].get("transform_config")
        if tcfg:
            from compressed_tensors.transform import TransformConfig, apply_transform_config
            apply_transform_config(ref_model, TransformConfig.model_validate(tcfg))
            ref["transform_applied_in_ref"] = True
        apply_quantization_config(ref_model, qc2)
        mc = ModelCompressor(quantization_config=qc2)
        mc.compress_model(ref_model)
        disk = {}
        for f in sorted(d.glob("*.safetensors")):
            disk.update(load_file(str(f)))
        missing, unexpected = ref_model.load_state_dict(disk, strict=False, assign=True)
        ref["load_missing"] = list(missing)
        ref["load_unexpected"] = list(unexpected)
        mc.decompress_model(ref_model)
        sd = ref_model.state_dict()
        exp = {}
        for k, v in sd.items():
            if (k in logical or (c.get("transform") and k in disk and k.endswith(".weight"))) and k in disk_names(disk, k):
                exp[k] = v.detach().contiguous().clone()
        # also names the library leaves in its decompressed state dict beyond the logical ones
        ref["leftover"] = sorted(k for k in sd if k not in logical)
        ref["logical_missing_from_file"] = sorted(k for k in logical if k not in exp)
        ref["stored"] = sorted(disk)
        ref["stored_dtypes"] = {k: str(v.dtype) for k, v in disk.items()}
        (d / "expected").mkdir()
        save_file(exp, str(d / "expected" / "expected.safetensors"))
        # passthrough leftovers (activation / kv qparams) as stored, for comparison; and the weight
        # parts the library's decompressed state dict still holds under their stored names, or
        # that its load left unconsumed (the "dense" format: the weights stay as stored, their
        # scales and zero points beside them, plain entries to ctstream as to safetensors)
        kept = set(sd) | set(unexpected)
        left = {k: disk[k].contiguous() for k in disk if k not in exp and (not is_weight_part(k) or k in kept)}
        save_file(left, str(d / "expected" / "stored_leftovers.safetensors"))
        ref["config_format"] = saved.get("format")
        ref["group_formats"] = {k: v.get("format") for k, v in saved["config_groups"].items()}
        ref["stage"] = "ok"
    except Exception as e:  # noqa: BLE001
        ref["error"] = f"{type(e).__name__}: {e}"
        ref["traceback"] = traceback.format_exc()
    (d / "ref.json").write_text(json.dumps(ref, indent=1))
    print(name, ref["stage"], ref.get("error", ""))


WEIGHT_PARTS = ("weight_packed", "weight_scale", "weight_zero_point", "weight_global_scale", "weight_shape",
                "weight_g_idx")


def is_weight_part(k):
    return k.rsplit(".", 1)[-1] in WEIGHT_PARTS


def disk_names(disk, k):
    # a logical tensor is expected when it (or its compressed parts) is in the files
    mod = k.rsplit(".", 1)[0]
    if k in disk:
        return {k}
    if k.endswith(".weight") and (f"{mod}.weight_packed" in disk or f"{mod}.weight_scale" in disk):
        return {k}
    return set()


if __name__ == "__main__":
    main()
