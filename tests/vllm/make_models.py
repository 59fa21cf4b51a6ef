"""Checkpoints for the vLLM engine tests (run with the vLLM venv's python; needs the ctstream CLI).

    make_models.py OUT_DIR CTSTREAM_CLI

OUT_DIR/
  dense/           a tiny Llama (random weights, seed 0), bf16, Linear weights 50 % magnitude-pruned
                   (so that sparse-bitmask is lossless and 2:4 ... stays meaningful)
  sparse/          `ctstream compress dense --format sparse-bitmask` (compressed-tensors 0.12 layout)
  int4/ int8/ fp8/ `ctstream compress`: W4A16 pack-quantized g32, W8A8 int8 channel (dynamic acts),
                   FP8 channel (dynamic acts)
  fp8_static/      fp8 with static per-tensor input scales (`input_scale` entries, input_activations
                   dynamic=false), as llm-compressor's FP8 (static) scheme writes them
  int4_lib/ int8_lib/ fp8_lib/  the compressed-tensors library's own decompression of int4/int8/
                   fp8 (compressors' decompress classmethods, model-free), saved as plain bf16
                   checkpoints without quantization_config
  lowrank/         `ctstream compress dense --format low-rank --rank 32` (ptdeco layout)
  lowrank_dense/   its original-architecture weights (`ctstream decompress`) as a plain checkpoint
"""
import json
import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file, save_file

OUT, CLI = sys.argv[1], sys.argv[2]


def tiny_llama(d):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=32, vocab_size=512, max_position_embeddings=256,
                      tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(0)
    m = LlamaForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("proj.weight"):  # 50 % magnitude pruning, row by row
                p.normal_(0, 0.05)
                k = p.shape[1] // 2
                thr = p.abs().kthvalue(k, dim=1, keepdim=True).values
                p.masked_fill_(p.abs() <= thr, 0)
            elif "embed" in name or "lm_head" in name:
                p.normal_(0, 0.5)
    m.save_pretrained(d, safe_serialization=True)


def compress(src, dst, *args):
    subprocess.run([CLI, "compress", src, dst, "--quiet", "--overwrite", *args], check=True)


def fp8_static(src, dst):
    shutil.copytree(src, dst)
    f = os.path.join(dst, "model.safetensors")
    sd = load_file(f)
    for k in list(sd):
        if k.endswith(".weight_scale"):  # one static per-tensor input scale per quantized Linear
            sd[k[: -len("weight_scale")] + "input_scale"] = torch.tensor([0.02], dtype=torch.bfloat16)
    save_file(sd, f, metadata={"format": "pt"})
    cfg = json.load(open(os.path.join(dst, "config.json")))
    for g in cfg["quantization_config"]["config_groups"].values():
        g["input_activations"] = {"dynamic": False, "num_bits": 8, "strategy": "tensor", "symmetric": True,
                                  "type": "float", "group_size": None}
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)


def library_decompression(src, dst):
    """The compressed-tensors library's per-module decompression (model-free), saved dense."""
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    cfg = json.load(open(os.path.join(src, "config.json")))
    qc = QuantizationConfig.model_validate(cfg["quantization_config"])
    scheme = next(iter(qc.config_groups.values()))
    fmt = scheme.format or qc.format
    comp = BaseCompressor.get_value_from_registry(fmt)
    sd = load_file(os.path.join(src, "model.safetensors"))
    params = ("weight", "weight_packed", "weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx",
              "weight_global_scale", "input_scale", "input_zero_point")
    modules = {k.rsplit(".", 1)[0] for k in sd if k.endswith(".weight_scale")}
    out = {k: v for k, v in sd.items() if k.rsplit(".", 1)[0] not in modules}
    for m in modules:
        local = {k[len(m) + 1:]: v for k, v in sd.items() if k.startswith(m + ".") and k[len(m) + 1:] in params}
        out[m + ".weight"] = comp.decompress(local, scheme)["weight"].to(torch.bfloat16).contiguous()
    os.makedirs(dst, exist_ok=True)
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    del cfg["quantization_config"]
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    for f in os.listdir(src):
        if f.startswith("generation_config"):
            shutil.copy(os.path.join(src, f), dst)


os.makedirs(OUT, exist_ok=True)
dense = os.path.join(OUT, "dense")
tiny_llama(dense)
compress(dense, os.path.join(OUT, "sparse"), "--format", "sparse-bitmask")
compress(dense, os.path.join(OUT, "int4"), "--format", "pack-quantized", "--bits", "4", "--group-size", "32")
compress(dense, os.path.join(OUT, "int8"), "--format", "int-quantized")
compress(dense, os.path.join(OUT, "fp8"), "--format", "float-quantized")
fp8_static(os.path.join(OUT, "fp8"), os.path.join(OUT, "fp8_static"))
for q in ("int4", "int8", "fp8"):
    library_decompression(os.path.join(OUT, q), os.path.join(OUT, q + "_lib"))
# low-rank (ptdeco layout): rank-32 factors of every Linear, and the same weights multiplied out
# into a plain checkpoint for vLLM's own loader (the products' exactness against torch is tested
# in tests/python/test_low_rank.py and tests/unit/test_low_rank.cpp; here: the engine integration)
lowrank = os.path.join(OUT, "lowrank")
compress(dense, lowrank, "--format", "low-rank", "--rank", "32")
shutil.copytree(lowrank, os.path.join(OUT, "lowrank_dense"), ignore=shutil.ignore_patterns("*.safetensors", "decompose_config.json"))
subprocess.run([CLI, "decompress", lowrank, os.path.join(OUT, "lowrank_dense", "model.safetensors"), "--quiet"],
               check=True)
print("models written to", OUT)
