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
  moe_dense/       a tiny Qwen3-MoE (4 experts, top-2, hidden 64, expert intermediate 32; random
                   weights, seed 0), bf16, as transformers' save_pretrained writes it
  moe_int4/        moe_dense quantized W4A16 asymmetric (int4 + zero points, group 32) by the
                   compressed-tensors library itself (model path; see moe_w4a16_asym), pack-quantized
  moe_int4_lib/    the library's decompression of moe_int4, as a plain bf16 checkpoint
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


def moe_w4a16_asym(dense_dir, dst):
    """A tiny Qwen3-MoE quantized W4A16 asymmetric by compressed-tensors' model path.

    Layout: vLLM 0.32 loads compressed-tensors MoE experts only under per-expert 2-D names
    (`mlp.experts.{e}.gate_proj.weight_packed`, ...): RoutedExperts.load_weights
    (vllm/model_executor/layers/fused_moe/routed_experts.py:981) maps `experts.{e}.{proj}.` to the
    layer's `w13_`/`w2_` parameters (make_expert_params_mapping, routed_experts.py:1251-1266), which
    CompressedTensorsWNA16MoEMethod.create_weights registers as w13_weight_packed /
    w13_weight_scale / w13_weight_zero_point / w13_weight_shape (compressed_tensors_moe_wna16.py:
    170-360); the fused entries (routed_experts.py:1229) map only a whole `experts.gate_up_proj`
    tensor to `w13_weight`, so a fused 3-D `experts.gate_up_proj.weight_packed` has no parameter.
    transformers 5 saves Qwen3-MoE's 3-D experts under those same per-expert names.

    Quantization: transformers 5 holds the experts as one Qwen3MoeExperts module with 3-D
    parameters, which compressed-tensors 0.17 cannot quantize (initialize_module_for_quantization
    takes only Linear / Embedding: compressed_tensors/quantization/lifecycle/initialize.py:76, else
    ValueError). So the experts are replaced by per-expert nn.Linear modules holding the weights
    transformers saved, and then the whole model goes through the library: apply_quantization_config
    -> min/max per group -> calculate_qparams -> ModelCompressor.compress_model -> update_config.
    """
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig, QuantizationScheme,
                                                 apply_quantization_config)
    from compressed_tensors.quantization.utils import calculate_qparams
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    # sizes: vLLM's WNA16 MoE needs hidden and expert intermediate sizes divisible by the group
    # size, and 2 * intermediate and hidden divisible by 8 for packed zero points
    # (compressed_tensors_moe_wna16.py:238-278); its CPU int4 Linear needs multiples of 32
    # (vllm/model_executor/kernels/linear/mixed_precision/cpu.py:45-57).
    cfg = Qwen3MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_experts=4,
                         num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
                         vocab_size=512, max_position_embeddings=256, tie_word_embeddings=False,
                         torch_dtype="bfloat16")
    torch.manual_seed(0)
    m = Qwen3MoeForCausalLM(cfg).to(torch.bfloat16)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if p.dim() >= 2:  # experts, attention, router, embeddings
                p.normal_(0, 0.5 if ("embed" in name or "lm_head" in name) else 0.05)
    m.save_pretrained(dense_dir, safe_serialization=True)
    saved = load_file(os.path.join(dense_dir, "model.safetensors"))
    for i, layer in enumerate(m.model.layers):
        experts = torch.nn.ModuleList()
        for e in range(cfg.num_experts):
            ex = torch.nn.Module()
            for proj in ("gate_proj", "up_proj", "down_proj"):
                w = saved[f"model.layers.{i}.mlp.experts.{e}.{proj}.weight"]
                lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
                with torch.no_grad():
                    lin.weight.copy_(w)
                ex.add_module(proj, lin)
            experts.append(ex)
        layer.mlp.experts = experts
    args = QuantizationArgs(num_bits=4, type="int", symmetric=False, strategy="group", group_size=32)
    # The router (vLLM: GateLinear, a ReplicatedLinear, would match "Linear") and lm_head stay dense.
    ignore = ["lm_head", "re:.*mlp[.]gate$"]
    qc = QuantizationConfig(config_groups={"group_0": QuantizationScheme(targets=["Linear"], weights=args)},
                            ignore=ignore)
    apply_quantization_config(m, qc)
    with torch.no_grad():
        for mod in m.modules():
            if getattr(mod, "quantization_scheme", None) is None:
                continue
            w = mod.weight.float().unflatten(-1, (-1, args.group_size))  # min/max observer, per group
            scale, zp = calculate_qparams(w.amin(-1), w.amax(-1), args)
            mod.weight_scale.copy_(scale)
            mod.weight_zero_point.copy_(zp)
    comp = ModelCompressor.from_pretrained_model(m, quantization_format="pack-quantized")
    comp.compress_model(m)
    # from_pretrained_model rebuilds `ignore` from the model's Linear modules: the transformers
    # router is no Linear, so it would be left out
    comp.quantization_config.ignore = ignore
    os.makedirs(dst, exist_ok=True)
    save_file({k: v.contiguous() for k, v in m.state_dict().items()}, os.path.join(dst, "model.safetensors"),
              metadata={"format": "pt"})
    for f in os.listdir(dense_dir):
        if f.endswith(".json"):
            shutil.copy(os.path.join(dense_dir, f), dst)
    comp.update_config(dst)
    sd = load_file(os.path.join(dst, "model.safetensors"))
    assert "model.layers.0.mlp.experts.3.down_proj.weight_zero_point" in sd, sorted(sd)[:20]
    assert "model.layers.0.mlp.gate.weight" in sd and "lm_head.weight" in sd


def ernie_fp32_router(dst):
    """A tiny plain Ernie-4.5-MoE whose router gate weight and e_score_correction_bias are stored
    in float32 with values bf16 cannot hold, as the released Ernie-4.5 MoE checkpoints store them;
    vLLM keeps both in float32 (vllm/model_executor/models/ernie45_moe.py: GateLinear
    params_dtype=torch.float32), so a loader that rounds them to the model dtype changes the logits."""
    from transformers import Ernie4_5_MoeConfig, Ernie4_5_MoeForCausalLM

    cfg = Ernie4_5_MoeConfig(hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=512,
                             max_position_embeddings=256, moe_num_experts=8, moe_k=2, moe_layer_start_index=0,
                             moe_num_shared_experts=0, tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(0)
    m = Ernie4_5_MoeForCausalLM(cfg)
    with torch.no_grad():
        for n, p in m.named_parameters():
            if "embed" in n or "lm_head" in n:
                p.normal_(0, 0.5)
            elif n.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0, 0.05)
    m.to(torch.bfloat16).save_pretrained(dst)
    g = torch.Generator().manual_seed(1)
    for f in os.listdir(dst):
        if f.endswith(".safetensors"):
            sd = load_file(os.path.join(dst, f))
            for k in list(sd):
                if k.endswith("mlp.gate.weight"):
                    sd[k] = torch.randn(sd[k].shape, generator=g) * 0.5
                elif "e_score_correction_bias" in k:
                    sd[k] = torch.randn(sd[k].shape, generator=g) * 0.01 + 0.5
            save_file(sd, os.path.join(dst, f), metadata={"format": "pt"})
    sd = load_file(os.path.join(dst, "model.safetensors"))
    gate = sd["model.layers.0.mlp.gate.weight"]
    assert gate.dtype == torch.float32 and not torch.equal(gate, gate.bfloat16().float())


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
moe_w4a16_asym(os.path.join(OUT, "moe_dense"), os.path.join(OUT, "moe_int4"))
library_decompression(os.path.join(OUT, "moe_int4"), os.path.join(OUT, "moe_int4_lib"))
ernie_fp32_router(os.path.join(OUT, "ernie_fp32_router"))
print("models written to", OUT)
