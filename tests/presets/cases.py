"""Case table: presets as users apply them, plus variations."""

PRESETS = ["W4A16_ASYM", "W8A8", "INT8", "W4AFP8", "FP8", "FP8_DYNAMIC", "FP8_BLOCK", "NVFP4A16", "NVFP4",
           "MXFP4A16", "MXFP4", "MXFP4XFP8", "MXFP6A16", "MXFP6A8", "MXFP8A16", "MXFP8",
           "W2A4", "W2A8", "W2A16", "W3A4", "W3A8", "W3A16", "W4A4", "W4A8", "W4A16", "W5A8", "W5A16",
           "W6A8", "W6A16", "W7A8", "W7A16", "W8A16", "UNQUANTIZED"]

# "even": every dim a multiple of 128; "ragged": hidden 96 / inter 320 (group 128 and block 128 ragged)
MODELS = {
    "even": dict(hidden=128, inter=256, heads=2, kv_heads=1, vocab=256),
    "ragged": dict(hidden=96, inter=320, heads=2, kv_heads=1, vocab=200),
}

CASES = {}
for p in PRESETS:
    for mn, m in MODELS.items():
        CASES[f"preset_{p}_{mn}"] = dict(groups={"group_0": dict(targets=["Linear"], preset=p)}, model=m)


def W(bits, strategy, sym=True, typ="int", **kw):
    return dict(num_bits=bits, type=typ, symmetric=sym, strategy=strategy, dynamic=False, **kw)


EVEN = MODELS["even"]
# int weight-only variations
for bits in (4, 8):
    for sym in (True, False):
        sa = "sym" if sym else "asym"
        for strat, kw in (("tensor", {}), ("channel", {}), ("group", dict(group_size=32)),
                          ("group", dict(group_size=64)), ("block", dict(block_structure=[32, 64]))):
            tag = strat + (str(kw.get("group_size", "")) if strat == "group" else "")
            CASES[f"w{bits}_{tag}_{sa}"] = dict(groups={"group_0": dict(targets=["Linear"], weights=W(bits, strat, sym, **kw))},
                                                model=EVEN)
# actorder "weight" (the only kind 0.20 accepts)
CASES["w4a16_actorder_weight"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16",
                                                               weights=dict(actorder="weight"))}, model=EVEN)
CASES["w4a16_asym_actorder_static"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16_ASYM",
                                                                    weights=dict(actorder="static"))},
                                           model=EVEN)
# dtypes
for dt in ("float16", "float32"):
    for p in ("W4A16_ASYM", "FP8_DYNAMIC", "NVFP4A16", "FP8_BLOCK", "MXFP4A16", "W8A8"):
        CASES[f"dtype_{dt}_{p}"] = dict(groups={"group_0": dict(targets=["Linear"], preset=p)}, model=EVEN, dtype=dt)
# several groups, regex targets, regex ignore
CASES["multi_regex_w4_fp8"] = dict(groups={
    "group_0": dict(targets=["re:.*mlp\\.(gate|up)_proj$"], preset="W4A16"),
    "group_1": dict(targets=["re:.*self_attn\\.(q|k|v|o)_proj$"], preset="FP8_DYNAMIC"),
    "group_2": dict(targets=["re:.*down_proj$"], preset="W8A16")}, model=EVEN)
CASES["multi_regex_ignore"] = dict(groups={
    "group_0": dict(targets=["Linear"], preset="W4A16_ASYM")},
    ignore=["lm_head", "re:.*down_proj", "model.layers.1.self_attn.o_proj"], model=EVEN)
CASES["multi_nvfp4_mxfp4_fp8block"] = dict(groups={
    "group_0": dict(targets=["re:.*mlp.*"], preset="NVFP4"),
    "group_1": dict(targets=["re:.*self_attn\\.(q|k|v)_proj"], preset="MXFP4"),
    "group_2": dict(targets=["re:.*o_proj"], preset="FP8_BLOCK")}, model=EVEN)
CASES["multi_layer_specific"] = dict(groups={
    "group_0": dict(targets=["re:model\\.layers\\.0\\..*"], preset="W8A8"),
    "group_1": dict(targets=["re:model\\.layers\\.1\\..*"], preset="W4A16_ASYM")}, model=EVEN)
# exact-name target overriding the class target (exact names first)
CASES["exact_name_overrides_class"] = dict(groups={
    "group_0": dict(targets=["Linear"], preset="W4A16"),
    "group_1": dict(targets=["model.layers.0.mlp.down_proj"], preset="W8A8")}, model=EVEN)
# lm_head and embeddings quantized too
CASES["lm_head_quantized"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W8A16")}, ignore=[], model=EVEN)
CASES["embedding_and_linear"] = dict(groups={
    "group_0": dict(targets=["Embedding"], weights=W(8, "channel", False)),
    "group_1": dict(targets=["Linear"], preset="FP8_DYNAMIC")}, model=EVEN)
CASES["tied_embeddings_w4"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16")},
                                   model=dict(EVEN, tie=True))
# kv cache schemes
FP8_KV = dict(num_bits=8, type="float", strategy="tensor", dynamic=False, symmetric=True)
CASES["kv_fp8_with_fp8"] = dict(groups={"group_0": dict(targets=["Linear"], preset="FP8")}, kv_cache_scheme=FP8_KV,
                                model=EVEN)
CASES["kv_fp8_with_w4a16"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16")},
                                  kv_cache_scheme=FP8_KV, model=EVEN)
CASES["kv_int8_asym"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W8A8")},
                             kv_cache_scheme=dict(num_bits=8, type="int", strategy="tensor", dynamic=False,
                                                  symmetric=False), model=EVEN)
CASES["kv_fp8_attn_head"] = dict(groups={"group_0": dict(targets=["Linear"], preset="FP8_DYNAMIC")},
                                 kv_cache_scheme=dict(num_bits=8, type="float", strategy="attn_head", dynamic=False,
                                                      symmetric=True), model=EVEN)
# attention (q) quantization group + Linear group
CASES["attn_group_plus_linear"] = dict(groups={
    "group_0": dict(targets=["LlamaAttention"], input_activations=FP8_KV),
    "group_1": dict(targets=["Linear"], preset="W4A16")}, model=EVEN)
# forced formats
CASES["force_naive_w4a16"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16")},
                                  quant_format="naive-quantized", model=EVEN)
CASES["force_pack_w4a8"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A8")},
                                quant_format="pack-quantized", model=EVEN)
CASES["force_float_fp8_weightonly"] = dict(groups={"group_0": dict(targets=["Linear"],
                                                                   weights=W(8, "channel", typ="float"))},
                                           quant_format="float-quantized", model=EVEN)
CASES["group_format_field_int"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W8A16",
                                                               format="int-quantized")}, model=EVEN)
# sharded save
CASES["sharded_w4a16_asym"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16_ASYM")},
                                   shard="100KB", model=EVEN)
CASES["sharded_nvfp4"] = dict(groups={"group_0": dict(targets=["Linear"], preset="NVFP4")},
                              shard="60KB", model=EVEN)
# attention bias present
CASES["attn_bias_w4a16_asym"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16_ASYM")},
                                     model=dict(EVEN, attention_bias=True))
# asymmetric fp8 (int asym is covered above)
CASES["fp8_asym_channel"] = dict(groups={"group_0": dict(targets=["Linear"], weights=W(8, "channel", False, typ="float"),
                                                         input_activations=dict(num_bits=8, type="float", strategy="token",
                                                                                dynamic=True, symmetric=True))},
                                 model=EVEN)
CASES["fp8_group128_weight"] = dict(groups={"group_0": dict(targets=["Linear"], weights=W(8, "group", typ="float",
                                                                                           group_size=128))},
                                    model=EVEN)
# output activations (rare but a config option)
CASES["output_acts_fp8"] = dict(groups={"group_0": dict(targets=["Linear"], preset="FP8",
                                                        output_activations=dict(num_bits=8, type="float",
                                                                                strategy="tensor", dynamic=False,
                                                                                symmetric=True))}, model=EVEN)

# ---- target precedence: regex alphabetical order, exact > regex > class, same target in 2 groups ----
def FB(bh):
    return dict(targets=None, weights=W(8, "block", typ="float", block_structure=[bh, 128]),
                input_activations=dict(num_bits=8, type="float", strategy="group", group_size=128, dynamic=True,
                                       symmetric=True))


def G(targets, bh):
    g = FB(bh)
    g["targets"] = targets
    return g


# down_proj [128, 256]: blocks [64,128] and [96,128] both store [2, 2] scales; only matching decides
CASES["order_regex_alpha_later_group"] = dict(groups={
    "group_0": G(["re:.*mlp.*"], 64), "group_1": G(["re:.*down_proj"], 96)}, model=EVEN)
CASES["order_regex_alpha_first_group"] = dict(groups={
    "group_0": G(["re:.*down_proj"], 96), "group_1": G(["re:.*mlp.*"], 64)}, model=EVEN)
CASES["order_regex_alpha_same_group_list"] = dict(groups={
    "group_0": G(["re:.*self_attn.*", "re:.*mlp.*"], 64), "group_1": G(["re:.*down_proj", "re:.*o_proj"], 96)},
    model=EVEN)
CASES["order_exact_vs_regex"] = dict(groups={
    "group_0": G(["re:.*down_proj"], 64), "group_1": G(["model.layers.1.mlp.down_proj"], 96)}, model=EVEN)
CASES["order_regex_vs_class"] = dict(groups={
    "group_0": G(["re:.*mlp\\.down_proj$"], 96), "group_1": G(["Linear"], 64)}, model=EVEN)
CASES["order_class_vs_regex_reversed"] = dict(groups={
    "group_0": G(["Linear"], 64), "group_1": G(["re:.*mlp\\.down_proj$"], 96)}, model=EVEN)
# the same target string in two groups: the later group's scheme wins (target_to_scheme dict)
CASES["order_same_target_two_groups"] = dict(groups={
    "group_0": G(["Linear"], 64), "group_1": G(["Linear"], 96)}, model=EVEN)
CASES["order_same_regex_two_groups"] = dict(groups={
    "group_0": G(["re:.*mlp.*"], 96), "group_1": G(["re:.*mlp.*"], 64)}, model=EVEN)
# re: uses re.match (anchored at start): "re:mlp\\.down_proj" matches nothing -> Linear group applies
CASES["regex_match_not_search"] = dict(groups={
    "group_0": G(["Linear"], 64), "group_1": G(["re:mlp\\.down_proj"], 96)}, model=EVEN)
# unanchored end: "re:model\\.layers\\.1" also matches every module under layer 1 (prefix)
CASES["regex_prefix_no_end_anchor"] = dict(groups={
    "group_0": G(["Linear"], 64), "group_1": G(["re:model\\.layers\\.1\\.mlp"], 96)}, model=EVEN)
# ignore by class name / regex prefix
CASES["ignore_regex_prefix"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16")},
                                    ignore=["lm_head", "re:model\\.layers\\.0\\.self_attn"], model=EVEN)
# int: two W4 groups that differ only in group size yield different scale shapes (sanity) and in
# symmetric-ness (zero point present or not)
CASES["order_int_pack_sym_vs_asym"] = dict(groups={
    "group_0": dict(targets=["re:.*proj"], preset="W4A16"),
    "group_1": dict(targets=["re:.*down_proj"], preset="W4A16_ASYM")}, model=EVEN)

# ---- round 3 ----
R16 = dict(hidden=72, inter=200, heads=2, kv_heads=1, vocab=200, head_dim=36)  # cols % 16 and % 32 ragged
for p in ("NVFP4A16", "NVFP4", "MXFP4A16", "MXFP6A16", "MXFP8A16"):
    CASES[f"r16_{p}"] = dict(groups={"group_0": dict(targets=["Linear"], preset=p)}, model=R16)
RAG = MODELS["ragged"]
for bits in (4, 8):
    for sym in (True, False):
        CASES[f"rag_w{bits}_block_{'sym' if sym else 'asym'}"] = dict(
            groups={"group_0": dict(targets=["Linear"], weights=W(bits, "block", sym, block_structure=[32, 64]))}, model=RAG)
    CASES[f"rag_w{bits}_channel_asym"] = dict(groups={"group_0": dict(targets=["Linear"], weights=W(bits, "channel", False))},
                                             model=RAG)
    CASES[f"rag_w{bits}_tensor_asym"] = dict(groups={"group_0": dict(targets=["Linear"], weights=W(bits, "tensor", False))},
                                            model=RAG)
CASES["rag_fp8_block_asym_weightonly"] = dict(groups={"group_0": dict(targets=["Linear"],
                                                                      weights=W(8, "block", False, typ="float", block_structure=[128, 128]))},
                                              model=RAG)
for p in ("NVFP4A16", "MXFP4A16", "W4A16_ASYM", "FP8_BLOCK", "W8A8"):
    CASES[f"embed_lm_head_{p}"] = dict(groups={"group_0": dict(targets=["Embedding", "Linear"], preset=p)}, ignore=[],
                                       model=EVEN)
# a group with only activation quantization on Linear (weights stay dense, input_scale stored)
CASES["act_only_group"] = dict(groups={"group_0": dict(targets=["Linear"], input_activations=dict(
    num_bits=8, type="float", strategy="tensor", dynamic=False, symmetric=True))}, model=EVEN)
CASES["act_only_plus_w4"] = dict(groups={
    "group_0": dict(targets=["re:.*self_attn.*"], input_activations=dict(num_bits=8, type="int", strategy="tensor",
                                                                          dynamic=False, symmetric=False)),
    "group_1": dict(targets=["re:.*mlp.*"], preset="W4A16")}, model=EVEN)
# int 2-/3-bit asym channel + asym group (dense cross-word packing with zero points)
for bits in (2, 3, 5, 6, 7):
    CASES[f"w{bits}_group32_asym"] = dict(groups={"group_0": dict(targets=["Linear"], weights=W(bits, "group", False, group_size=32))},
                                          model=EVEN)
    CASES[f"w{bits}_block_asym_rag"] = dict(groups={"group_0": dict(targets=["Linear"], weights=W(bits, "block", False, block_structure=[16, 32]))},
                                            model=RAG)

# ---- transforms (QuIP / SpinQuant-like) with quantization ----
def TR(typ, locs, randomize=False, head_dim=None):
    sch = {"type": typ, "randomize": randomize, "apply": [dict(targets=["Linear"], ignore=["lm_head"], location=l,
                                                               inverse=inv) for l, inv in locs]}
    if head_dim:
        sch["head_dim"] = head_dim
    return {"config_groups": {"u": sch}}


QUIP_U = [("input", False), ("weight_input", True)]
CASES["transform_hadamard_online_w4a16"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16")},
                                                transform=TR("hadamard", QUIP_U), model=EVEN)
CASES["transform_randhad_online_w4a16_asym"] = dict(groups={"group_0": dict(targets=["Linear"], preset="W4A16_ASYM")},
                                                    transform=TR("random-hadamard", QUIP_U, randomize=True), model=EVEN)
CASES["transform_hadamard_fused_only_nvfp4"] = dict(groups={"group_0": dict(targets=["Linear"], preset="NVFP4A16")},
                                                    transform=TR("hadamard", [("weight_input", False)]), model=EVEN)
CASES["transform_hadamard_headdim_fp8"] = dict(groups={"group_0": dict(targets=["Linear"], preset="FP8_DYNAMIC")},
                                               transform=TR("hadamard", QUIP_U, head_dim=32), model=EVEN)

# ---- save_compressed=False style: format "dense" (weights fake-quantized? no: stored as is) with qparams ----
for p in ("W4A16_ASYM", "FP8_DYNAMIC", "NVFP4A16", "W8A8"):
    CASES[f"dense_format_{p}"] = dict(groups={"group_0": dict(targets=["Linear"], preset=p)}, quant_format="dense",
                                      model=EVEN)

# ---- scheme fields that change what the library stores (a fifth red-team pass, 2026-11-28) ----
def WF(bits, strategy, symmetric=True, **kw):
    return dict(num_bits=bits, type="float", symmetric=symmetric, strategy=strategy, dynamic=False, **kw)


# FP4 tensor_group with groups of 32: inferred mxfp4-pack-quantized (MXFP4PackedCompressor.can_compress
# checks bits / type / group size only) with a weight_global_scale, which NVFP4's decompress (inherited)
# divides the scales by: decoded so (before: the division was skipped, every value off by the factor).
CASES["fp4_tensor_group32_as_mxfp4"] = dict(groups={"group_0": dict(targets=["Linear"], weights=WF(4, "tensor_group", group_size=32))},
                                            model=EVEN)
# NVFP4 with bf16 scales (scale_dtype): exact in bf16, as the default fp8 ones
CASES["nvfp4_scale_bf16"] = dict(groups={"group_0": dict(targets=["Linear"], preset="NVFP4A16",
                                                         weights=dict(scale_dtype="torch.bfloat16"))}, model=EVEN)
# FP4 strategy "group" (16): NVFP4 layout without a global scale, which the library then does not divide by
CASES["fp4_group16_no_global"] = dict(groups={"group_0": dict(targets=["Linear"], weights=WF(4, "group", group_size=16))},
                                      model=EVEN)
# Refused, naming why (ErrorKind unsupported): what the library writes but ctstream would not decode as it does
# - MX scales stored as F8_E8M0: the library converts the biased exponent by value and reads it back by value
CASES["mxfp4_scale_e8m0_refused"] = dict(groups={"group_0": dict(targets=["Linear"], preset="MXFP4A16",
                                                                 weights=dict(scale_dtype="torch.float8_e8m0fnu"))},
                                         model=EVEN, refused="unsupported")
# - NVFP4 scales stored as F32 (rounded to bf16 by the library before use)
CASES["nvfp4_scale_f32_refused"] = dict(groups={"group_0": dict(targets=["Linear"], preset="NVFP4A16",
                                                                weights=dict(scale_dtype="torch.float32"))},
                                        model=EVEN, refused="unsupported")
# - INT weights of more than 8 bits: naive-quantized int16 / int32 codes (before: the raw codes read as the weight)
CASES["w16_channel_asym_refused"] = dict(groups={"group_0": dict(targets=["Linear"], weights=W(16, "channel", False))},
                                         model=EVEN, refused="unsupported")
