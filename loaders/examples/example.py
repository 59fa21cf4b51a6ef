"""ctstream Python example:  python loaders/examples/example.py MODEL_DIR"""
import sys

import ctstream

model_dir = sys.argv[1]
with ctstream.open(model_dir, threads=2, budget="512MB") as ckpt:
    # every tensor, decoded: torch tensors when torch is installed, else numpy arrays
    params = {}
    for name, tensor in ckpt.tensors(dtype="bfloat16"):
        params[name] = tensor
    print(f"decoded {len(params)} tensors ({ckpt.framework})")

    # one compressed 2-D weight and its metadata
    name = next(t.name for t in ckpt.infos() if t.format != "dense" and len(t.shape) == 2)
    info = ckpt.info(name)
    print(f"{name}: {info.format}, {info.num_bits} bits, shape {info.shape}, parts {[p.role for p in info.parts]}")

    # decode straight into memory you own (checked: dtype, shape, contiguity)
    if ckpt.framework == "pt":
        import torch
        preallocated = torch.empty(info.shape, dtype=torch.float16)
    else:
        import numpy as np
        preallocated = np.empty(info.shape, dtype=np.float16)
    w = ckpt.get(name, dtype="float16", out=preallocated)
    assert w is preallocated

    # tensor-parallel shard: rank 1 of 2 along the rows
    rank, world = 1, 2
    rows = (info.shape[0] + world - 1) // world
    s = ckpt.get_slice(name)[rank * rows:(rank + 1) * rows]
    print(f"rank {rank} of {world}: rows {rank * rows}..{rank * rows + s.shape[0]} of {info.shape[0]}")

    # keep-packed passthrough: the stored parts, undecoded (for engines with quantized kernels)
    parts = ckpt.packed(name)
    print("packed:", {role: (str(t.dtype), tuple(t.shape)) for role, t in parts.items()})

    try:
        ckpt.get("no.such.tensor")
    except KeyError as e:  # ctstream.NotFoundError: both a KeyError and a ctstream.Error
        print("error kind:", e.kind)
