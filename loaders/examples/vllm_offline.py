"""Offline generation with vLLM, weights read by ctstream (the `ctstream` load format is there
because `pip install ctstream` declares a vllm.general_plugins entry point; nothing to register).
   python loaders/examples/vllm_offline.py MODEL_DIR [--dense]
MODEL_DIR: a compressed-tensors checkpoint. Quantized formats vLLM runs are loaded as their stored
parts into vLLM's own kernels; sparse ones (vLLM refuses them) are decoded into a dense model;
--dense decodes any checkpoint into a dense model."""
import sys

from vllm import LLM, SamplingParams

if __name__ == "__main__":  # vLLM's CPU and spawn-based platforms re-import this file
    model_dir = sys.argv[1]
    kwargs = dict(model=model_dir, load_format="ctstream",
                  model_loader_extra_config={"threads": 2, "budget": "512MB"})
    if "--dense" in sys.argv:
        kwargs["quantization"] = "ctstream"  # build the model unquantized
    llm = LLM(**kwargs, skip_tokenizer_init=True, enforce_eager=True, max_model_len=128)
    out = llm.generate([{"prompt_token_ids": [1, 5, 17, 42]}],
                       SamplingParams(temperature=0, max_tokens=8, detokenize=False), use_tqdm=False)
    print("tokens:", list(out[0].outputs[0].token_ids))
