"""Loads `ctstream decompress` output with the real safetensors + torch and compares it with
the source checkpoint loaded by safetensors, cast with torch's .to(dtype)."""
import glob
import os
import sys

import torch
from safetensors import safe_open

src_dir, out_file, dtype = sys.argv[1], sys.argv[2], sys.argv[3]
want_dtype = {"native": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
src = {}
for f in sorted(glob.glob(os.path.join(src_dir, "*.safetensors"))):
    with safe_open(f, "pt") as h:
        for k in h.keys():
            src[k] = h.get_tensor(k)
with safe_open(out_file, "pt") as h:
    keys = set(h.keys())
    assert keys == set(src), f"tensor names differ: {sorted(keys ^ set(src))}"
    for k in keys:
        got, ref = h.get_tensor(k), src[k]
        if want_dtype is not None and ref.is_floating_point():
            ref = ref.to(want_dtype)
        assert got.dtype == ref.dtype, f"{k}: dtype {got.dtype} != {ref.dtype}"
        assert got.shape == ref.shape, f"{k}: shape {got.shape} != {ref.shape}"
        same = torch.equal(got, ref) if not got.is_floating_point() else bool(
            ((got == ref) | (got.isnan() & ref.isnan())).all())
        assert same, f"{k}: values differ"
print(f"python safetensors: {len(keys)} tensors of {os.path.basename(out_file)} equal the source ({dtype})")
