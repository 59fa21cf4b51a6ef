"""vLLM model load with ctstream vs vLLM's own loader (bench/RESULTS.md, "vLLM").

    <vllm venv>/bin/python bench/vllm_load.py MODELS_DIR [--repeat 3] [--tp 1]

MODELS_DIR holds `dense/` (`ctstream synth --layers 20 --hidden 2048 --intermediate 5632 --vocab
32000 --shards 2`, bf16, 2.3 GB) and `int4/` (`ctstream compress dense int4 --format
pack-quantized --bits 4 --group-size 128`); bench/run_vllm_load.sh makes them. Each row is one
engine start in a fresh process (engine in-process: VLLM_ENABLE_V1_MULTIPROCESSING=0), best of
--repeat: vLLM's own "Loading weights took" figure, the whole LLM() construction, and the
process's peak RSS (which includes vLLM's 1 GiB KV cache and the model itself).
"""
import argparse
import json
import os
import re
import subprocess
import sys

CHILD = r"""
import os, resource, sys, time, json
os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
from vllm import LLM
kw = json.loads(sys.argv[1])
t0 = time.perf_counter()
llm = LLM(**kw)
init = time.perf_counter() - t0
print("RESULT " + json.dumps({"init_s": init, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}),
      flush=True)
os._exit(0)
"""


def one(kw):
    p = subprocess.run([sys.executable, "-c", CHILD, json.dumps(kw)], capture_output=True, text=True, timeout=1800)
    out = p.stdout + p.stderr
    m = re.search(r"Loading weights took ([0-9.]+) seconds", out)
    r = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if not r or not m:
        raise RuntimeError(f"run failed: {kw}\n{out[-3000:]}")
    res = json.loads(r[-1][7:])
    res["load_s"] = float(m.group(1))
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tp", type=int, default=1)
    a = ap.parse_args()
    base = dict(skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_model_len=256,
                tensor_parallel_size=a.tp)
    rows = [
        ("dense bf16", "dense", "vLLM default (safetensors)", {}),
        ("dense bf16", "dense", "ctstream", {"load_format": "ctstream"}),
        ("int4 g128", "int4", "vLLM default (stored parts)", {}),
        ("int4 g128", "int4", "ctstream, stored parts", {"load_format": "ctstream"}),
        ("int4 g128", "int4", "ctstream, decoded to bf16 (--quantization ctstream)",
         {"load_format": "ctstream", "quantization": "ctstream"}),
        ("int4 g128", "int4", "ctstream, decoded to bf16, eager (`\"lazy\": false`)",
         {"load_format": "ctstream", "quantization": "ctstream", "model_loader_extra_config": {"lazy": False}}),
    ]
    print(f"| checkpoint | loader | weights load (vLLM's figure) | LLM() total | peak RSS |")
    print("|---|---|---|---|---|")
    for ckpt, d, name, extra in rows:
        runs = [one(dict(base, model=os.path.join(a.models, d), **extra)) for _ in range(a.repeat)]
        best = min(runs, key=lambda r: r["load_s"])
        all_runs = ", ".join("%.2f" % r["load_s"] for r in runs)
        init = min(r["init_s"] for r in runs)
        rss = min(r["peak_rss_mib"] for r in runs)
        print(f"| {ckpt} | {name} | {best['load_s']:.2f} s (runs: {all_runs}) | {init:.1f} s | {rss:.0f} MiB |", flush=True)


if __name__ == "__main__":
    main()
