"""Serve a compressed-tensors checkpoint with vLLM, its weights read by ctstream.
   python loaders/examples/vllm_loader.py MODEL_DIR        (needs vLLM and a GPU)"""
import sys

import ctstream.vllm
from vllm import LLM

# packed=True: the stored tensors as they are, for vLLM's own compressed-tensors kernels
ctstream.vllm.register("ctstream", packed=True, threads=4)
# decoded weights for a dense model instead: the model must be built without quantization
ctstream.vllm.register("ctstream-dense", dtype="bfloat16", threads=4)

model_dir = sys.argv[1]
if len(sys.argv) > 2 and sys.argv[2] == "--dense":
    llm = LLM(model=model_dir, load_format="ctstream-dense", hf_overrides={"quantization_config": None})
else:
    llm = LLM(model=model_dir, load_format="ctstream")
print(llm.generate(["The capital of France is"])[0].outputs[0].text)
