"""A model with weight files its index (or its single safetensors file) does not cover: a tiny
BGE-M3 (vllm/model_executor/models/roberta.py BgeM3EmbeddingModel), whose sparse / colbert heads
vLLM loads from sparse_linear.pt / colbert_linear.pt as secondary weight sources. Loaded with the
load format given, the heads' parameters are printed as one JSON line ("RESULT {...}").

    python bgem3_heads.py DIR FORMAT     # builds DIR first if it holds no model; FORMAT: auto | ctstream
"""
import json
import os
import sys

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
import torch  # noqa: E402

d, fmt = sys.argv[1], sys.argv[2]
if not os.path.exists(os.path.join(d, "config.json")):
    from transformers import XLMRobertaConfig, XLMRobertaModel

    cfg = XLMRobertaConfig(vocab_size=512, hidden_size=64, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=128, max_position_embeddings=130, pad_token_id=1)
    torch.manual_seed(0)
    XLMRobertaModel(cfg, add_pooling_layer=False).save_pretrained(d, safe_serialization=True)
    c = json.load(open(os.path.join(d, "config.json")))
    c["architectures"] = ["BgeM3EmbeddingModel"]
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
    g = torch.Generator().manual_seed(1)
    torch.save({"weight": torch.randn(1, 64, generator=g), "bias": torch.randn(1, generator=g)},
               os.path.join(d, "sparse_linear.pt"))
    torch.save({"weight": torch.randn(64, 64, generator=g), "bias": torch.randn(64, generator=g)},
               os.path.join(d, "colbert_linear.pt"))

from vllm import LLM  # noqa: E402

llm = LLM(model=d, runner="pooling", load_format=fmt, skip_tokenizer_init=True, enforce_eager=True,
          dtype="float32", max_model_len=128, seed=0)
heads = llm.apply_model(lambda m: {k: v.flatten().tolist() for k, v in m.named_parameters()
                                   if k.startswith(("sparse_linear", "colbert_linear"))})
print("RESULT", json.dumps(heads[0]), flush=True)
os._exit(0)
