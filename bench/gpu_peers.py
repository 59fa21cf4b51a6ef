"""The peer of ctstream_bench_cuda: safetensors' own load of a dense model straight into GPU memory.

    python3 bench/gpu_peers.py MODEL_DIR [--reps N]

Times `safetensors.torch.load_file(f, device="cuda")` over every shard (files warm in the page
cache, one warm-up, median of --reps) until `torch.cuda.synchronize()` returns, and the same bytes
as one pinned host tensor copied with `.to("cuda")` (the link's limit as torch sees it).
Prints one Markdown row per method.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    import torch
    from safetensors.torch import load_file
    import safetensors

    files = sorted(Path(a.model).glob("*.safetensors"))
    total = sum(f.stat().st_size for f in files)
    for f in files:  # warm the page cache
        f.read_bytes()

    def timed(fn):
        fn()
        out = []
        for _ in range(a.reps):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            out.append(time.perf_counter() - t0)
        return statistics.median(out)

    def st_load():
        sd = {}
        for f in files:
            sd.update(load_file(str(f), device="cuda"))
        return sd

    pinned = torch.empty(total, dtype=torch.uint8, pin_memory=True)
    pinned.fill_(1)
    rows = [(f"safetensors {safetensors.__version__} load_file(device='cuda')", timed(st_load)),
            ("pinned tensor .to('cuda') (same bytes)", timed(lambda: pinned.to("cuda", non_blocking=True)))]
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; {Path(a.model).name}: "
          f"{total / 2**30:.3f} GiB; medians of {a.reps}\n")
    print("| method | s | GB/s |\n|---|---|---|")
    for name, s in rows:
        print(f"| {name} | {s:.4f} | {total / s / 1e9:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
