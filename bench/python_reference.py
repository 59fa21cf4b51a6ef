#!/usr/bin/env python3
"""ctstream vs the compressed-tensors library itself: decompression of realistic checkpoints on CPU.

    .venv/bin/python bench/python_reference.py                 # build (cached) + time + write RESULTS.md
    .venv/bin/python bench/python_reference.py --only nvfp4    # substring filter (no RESULTS.md write)
    bench/run_reference_bench.sh                               # build ctstream if needed, then this

One run:
  1. builds (deterministically, cached) the checkpoints below into bench/out/<name>/ with the REAL
     library (compressed-tensors 0.20.0 in the venv; 0.12.2 from .venv/ct012 -- the two cannot share
     one interpreter, so each line runs in its own worker subprocess).  A checkpoint is rebuilt only
     when bench/out/<name>.params.json differs from its spec (or a file is missing).
  2. times the library's own decompression from disk to dense bf16 tensors on CPU, in one fresh
     subprocess per (checkpoint, torch threads), best of N, and reads that child's peak RSS;
  3. times `ctstream bench DIR --dtype bf16 --repeat 3 --json --threads T` (warm page cache);
  4. checks `ctstream decompress DIR OUT --dtype bf16` bit-for-bit against the library's output;
  5. prints a markdown table and writes it into bench/RESULTS.md between
     <!-- reference-decode:begin --> and <!-- reference-decode:end --> (full runs only).

What is timed on the library side (the load path tests/fixtures/gen/gen_compressed.py uses to
compute the fixtures' expected outputs, i.e. what transformers does for a compressed checkpoint):
  * 0.20.0 (quantized): the model skeleton is built UNTIMED on the meta device
    (nn.Module tree -> apply_quantization_config -> ModelCompressor.compress_model, giving the
    compressed parameter layout without allocating anything).  TIMED: safetensors.torch.load_file
    (model.safetensors -> CPU tensors) + model.load_state_dict(disk, strict=True, assign=True) +
    ModelCompressor.decompress_model(model) + collecting model.state_dict().
  * 0.12.2 (sparse): the dense skeleton is built UNTIMED (meta -> to_empty(cpu): allocated, never
    touched).  TIMED: ModelCompressor.from_compression_config(cfg) + mc.decompress(dir, model)
    (the library reads the safetensors file itself) + collecting model.state_dict().
  Every output tensor is checked to be bf16 with the logical shape.
Library peak RSS = VmHWM of the timing child, reset (/proc/self/clear_refs = 5) just before each
timed repetition, max over repetitions: the whole process, i.e. it includes the interpreter + torch +
compressed_tensors baseline (reported separately as "baseline").
ctstream side: `load_seconds` of its JSON = best of 3 passes of decoding every tensor into ONE
reused caller buffer (size of the largest tensor), mmap input, open time excluded (reported
separately); peak RSS = getrusage(RUSAGE_SELF) of that process (counts mmap'd file pages touched).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"
DECODED = OUT / "_ctstream_decoded"
RESULTS_MD = REPO / "bench" / "RESULTS.md"
CTSTREAM = REPO / "build" / "bin" / "ctstream"
CT_BIN = CTSTREAM  # replaced by a snapshot copy in main()
CT012_DIR = REPO / ".venv" / "ct012"
BEGIN, END = "<!-- reference-decode:begin -->", "<!-- reference-decode:end -->"
GEN_VERSION = 1           # bump to force a rebuild of every checkpoint
LIB_TIME_BUDGET_S = 75.0  # per (checkpoint, threads) child: stop repeating once this much was spent

# --------------------------------------------------------------------------------------------
# checkpoint specs (pure data).  modules: (path under model.layers.0, out_features, in_features)
# --------------------------------------------------------------------------------------------
Q = ("self_attn.q_proj", 4096, 4096)
UP = ("mlp.up_proj", 14336, 4096)
DOWN = ("mlp.down_proj", 4096, 14336)


def W(bits, strategy, sym=True, gs=None, typ="int", **extra):  # as gen_compressed.py W()
    d = dict(num_bits=bits, type=typ, symmetric=sym, strategy=strategy, dynamic=False)
    if gs is not None:
        d["group_size"] = gs
    d.update(extra)
    return d


DYN_TOKEN_FP8 = dict(num_bits=8, type="float", symmetric=True, strategy="token", dynamic=True)
NVFP4_W = dict(num_bits=4, type="float", symmetric=True, strategy="tensor_group", dynamic=False,
               group_size=16, scale_dtype="float8_e4m3fn", zp_dtype="float8_e4m3fn")

SPECS = [
    dict(name="v020_pack_w4_g128_sym_bf16", line="0.20", modules=[Q, UP, DOWN],
         groups={"group_0": dict(targets=["Linear"], weights=W(4, "group", True, 128))},
         label="(a) 0.20 pack-quantized int4 g128 sym"),
    dict(name="v012_sparse_bitmask_bf16", line="0.12", modules=[Q, UP],
         sparsity=dict(format="sparse-bitmask", prep="unstructured"),
         label="(b) 0.12 sparse-bitmask ~50% zeros"),
    dict(name="v012_sparse24_bitmask_bf16", line="0.12", modules=[Q, UP],
         sparsity=dict(format="sparse-24-bitmask", prep="2:4"),
         label="(c) 0.12 sparse-24-bitmask"),
    dict(name="v020_fp8_channel_bf16", line="0.20", modules=[DOWN],
         groups={"group_0": dict(targets=["Linear"], weights=W(8, "channel", True, typ="float"),
                                 input_activations=DYN_TOKEN_FP8)},
         label="(d) 0.20 float-quantized fp8 channel"),
    dict(name="v020_nvfp4a16_bf16", line="0.20", modules=[DOWN],
         groups={"group_0": dict(targets=["Linear"], weights=NVFP4_W)},
         label="(e) 0.20 nvfp4 (W4A16)"),
]
LINES = {"0.20": "0.20.", "0.12": "0.12."}


def spec_stamp(spec):
    return dict(spec, gen_version=GEN_VERSION)


# --------------------------------------------------------------------------------------------
# helpers usable in both parent and workers
# --------------------------------------------------------------------------------------------

def use_line(line):
    """Put the right compressed_tensors first on sys.path (copied from tests/fixtures/gen/ctlib.py)."""
    if "compressed_tensors" in sys.modules:
        raise RuntimeError("compressed_tensors already imported in this process")
    if line == "0.12":
        if not (CT012_DIR / "compressed_tensors").is_dir():
            raise RuntimeError(f"{CT012_DIR} missing: run tools/setup_python.sh")
        sys.path.insert(0, str(CT012_DIR))
    import compressed_tensors
    if not compressed_tensors.__version__.startswith(LINES[line]):
        raise RuntimeError(f"wanted compressed-tensors {line}.x, got {compressed_tensors.__version__}")
    return compressed_tensors


def proc_status_kb(key):
    m = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1)) * 1024 if m else 0


def reset_hwm():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def warm(path: Path):
    with open(path, "rb") as f:
        while f.read(1 << 24):
            pass


def run_worker(args, env_line):
    """Run this script as a worker for one release line; its stderr (library progress bars and
    warnings) goes to bench/out/_worker.log and is echoed only when the worker fails."""
    env = dict(os.environ, CTSTREAM_CT_LINE=env_line, TQDM_DISABLE="1")
    log = OUT / "_worker.log"
    with open(log, "w") as f:
        p = subprocess.run([sys.executable, __file__, *args], env=env, stderr=f)
    if p.returncode != 0:
        tail = log.read_text().splitlines()[-25:]
        print("\n".join("   | " + x for x in tail), flush=True)
    return p


# --------------------------------------------------------------------------------------------
# worker: model + build + library timing (runs inside one release line)
# --------------------------------------------------------------------------------------------

def worker_common(line):
    try:  # progress bars off (this tqdm ignores TQDM_DISABLE)
        import functools
        import tqdm
        tqdm.tqdm.__init__ = functools.partialmethod(tqdm.tqdm.__init__, disable=True)
    except ImportError:
        pass
    ct = use_line(line)
    import torch
    from torch import nn

    class Bench(nn.Module):
        """Only the Linear modules of one decoder layer, named like a Llama checkpoint."""

        def __init__(self, modules, dtype, device):
            super().__init__()
            self.model = nn.Module()
            layer = nn.Module()
            for path, R, C in modules:
                parent = layer
                for part in path.split(".")[:-1]:
                    if not hasattr(parent, part):
                        parent.add_module(part, nn.Module())
                    parent = getattr(parent, part)
                parent.add_module(path.split(".")[-1],
                                  nn.Linear(C, R, bias=False, dtype=dtype, device=device))
            self.model.layers = nn.ModuleList([layer])

    return ct, torch, Bench


def worker_build(spec, d: Path):
    """Build one checkpoint with the library's save path (logic copied from gen_compressed.py:
    fill_weights / observe / calibrate / run_020 / run_012, reduced to what these specs need)."""
    line = spec["line"]
    ct, torch, Bench = worker_common(line)
    from safetensors.torch import save_file
    from compressed_tensors.compressors import ModelCompressor
    torch.manual_seed(0)
    torch.set_num_threads(os.cpu_count() or 1)
    dtype = torch.bfloat16
    model = Bench(spec["modules"], dtype, "meta")
    model.to_empty(device="cpu")

    # ---- weights: N(0, 0.05) with a few outliers; sparsity pattern (gen_compressed.fill_weights)
    sp = spec.get("sparsity")
    with torch.no_grad():
        for n, p in model.named_parameters():
            g = torch.Generator().manual_seed(zlib.crc32(f"{spec['name']}/{n}".encode()))
            t = torch.randn(p.shape, generator=g) * 0.05
            t[0, 0] = 0.4
            t[-1, -1] = -0.3
            t[1] = t[1] * 3
            if sp and sp["prep"] == "unstructured":
                t[torch.rand(t.shape, generator=g) < 0.5] = 0.0
                t[2] = 0.0                      # one all-zero row
            elif sp and sp["prep"] == "2:4":
                R, C = t.shape
                t4 = t.view(R, C // 4, 4)
                keep = torch.rand(t4.shape, generator=g).argsort(-1)[..., :2]
                m = torch.zeros_like(t4, dtype=torch.bool).scatter_(-1, keep, True)
                t = (t4 * m).reshape(R, C)
            p.copy_(t.to(dtype))
            del t

    base_config = {"architectures": ["CtstreamBenchForCausalLM"], "model_type": "ctstream_bench",
                   "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 1,
                   "torch_dtype": "bfloat16"}
    if line == "0.20":
        from compressed_tensors.quantization import (QuantizationArgs, QuantizationConfig,
                                                     QuantizationScheme, apply_quantization_config)
        from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

        def scheme_from(gd):
            gd = dict(gd)
            kw = dict(targets=gd.pop("targets"))
            for k in ("weights", "input_activations"):
                if k in gd:
                    a = dict(gd.pop(k))
                    for dk in ("scale_dtype", "zp_dtype"):
                        if isinstance(a.get(dk), str):
                            a[dk] = getattr(torch, a[dk])
                    kw[k] = QuantizationArgs(**a)
            assert not gd, gd
            return QuantizationScheme(**kw)

        qc = QuantizationConfig(config_groups={k: scheme_from(v) for k, v in spec["groups"].items()},
                                ignore=[])
        apply_quantization_config(model, qc)
        # calibration: min/max per the strategy's reduction (gen_compressed.observe/calibrate)
        for name, m in model.named_modules():
            sch = getattr(m, "quantization_scheme", None)
            if sch is None or sch.weights is None:
                continue
            args, w = sch.weights, m.weight.data
            s = str(getattr(args.strategy, "value", args.strategy))
            if s == "channel":
                mn, mx = w.amin(-1, keepdim=True), w.amax(-1, keepdim=True)
            elif s in ("group", "tensor_group"):
                x = w.unflatten(-1, (w.shape[-1] // args.group_size, args.group_size))
                mn, mx = x.amin(-1), x.amax(-1)
            else:
                raise ValueError(s)
            gscale = None
            if s == "tensor_group":
                gscale = generate_gparam(w.amin(), w.amax())
                m.weight_global_scale.data.copy_(gscale)
            scale, zp = calculate_qparams(mn, mx, args, global_scale=gscale)
            m.weight_scale.data.copy_(scale.reshape(m.weight_scale.shape))
            if hasattr(m, "weight_zero_point"):
                m.weight_zero_point.data.copy_(zp.reshape(m.weight_zero_point.shape))
        compressor = ModelCompressor.from_pretrained_model(model)
        compressor.compress_model(model)
        sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    else:
        from compressed_tensors.config import SparsityCompressionConfig
        spc = SparsityCompressionConfig.load_from_registry(
            sp["format"], targets=["Linear"], ignore=[],
            sparsity_structure=("2:4" if sp["prep"] == "2:4" else "unstructured"), global_sparsity=0.5)
        compressor = ModelCompressor.from_pretrained_model(model, sparsity_config_or_format=spc)
        sd = compressor.compress(model)
        sd = {k: v.detach().contiguous() for k, v in sd.items()}
    d.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(d / "model.safetensors"), metadata={"format": "pt"})
    (d / "config.json").write_text(json.dumps(base_config, indent=2, sort_keys=True))
    compressor.update_config(str(d))
    return {"library_version": ct.__version__,
            "stored": {k: [str(v.dtype).removeprefix("torch."), list(v.shape)] for k, v in sd.items()}}


def worker_time(spec, d: Path, threads: int, repeats: int, compare: str | None):
    line = spec["line"]
    ct, torch, Bench = worker_common(line)
    from safetensors.torch import load_file
    from compressed_tensors.compressors import ModelCompressor
    torch.set_num_threads(threads)
    dtype = torch.bfloat16
    cfg = json.loads((d / "config.json").read_text())["quantization_config"]
    st = d / "model.safetensors"
    warm(st)
    gc.collect()
    baseline = proc_status_kb("VmRSS")

    if line == "0.20":
        from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
        qc2 = QuantizationConfig.model_validate(cfg)

        def skeleton():  # gen_compressed.run_020.fresh(), on the meta device
            m2 = Bench(spec["modules"], dtype, "meta")
            apply_quantization_config(m2, qc2)
            mc = ModelCompressor(quantization_config=qc2)
            mc.compress_model(m2)
            return m2, mc

        def timed(m2, mc):
            disk = load_file(str(st))
            m2.load_state_dict(disk, strict=True, assign=True)
            del disk
            mc.decompress_model(m2)
            return dict(m2.state_dict())
    else:
        def skeleton():
            m2 = Bench(spec["modules"], dtype, "meta")
            m2.to_empty(device="cpu")
            return m2, None

        def timed(m2, _):
            mc = ModelCompressor.from_compression_config(cfg)
            mc.decompress(str(d), m2)
            return dict(m2.state_dict())

    times, hwms, t_total, out = [], [], 0.0, None
    for _ in range(repeats):
        out = None
        gc.collect()
        m2, mc = skeleton()
        gc.collect()
        reset_hwm()
        t0 = time.perf_counter()
        out = timed(m2, mc)
        dt = time.perf_counter() - t0
        hwms.append(proc_status_kb("VmHWM"))
        times.append(dt)
        del m2, mc
        t_total += dt
        if t_total > LIB_TIME_BUDGET_S:
            break
    weights = {f"model.layers.0.{p}.weight": (R, C) for p, R, C in spec["modules"]}
    problems = []
    for k, shape in weights.items():
        v = out.get(k)
        if v is None:
            problems.append(f"{k} missing from the library's output")
        elif v.dtype != torch.bfloat16 or tuple(v.shape) != shape:
            problems.append(f"{k}: {v.dtype} {tuple(v.shape)}")
    extra = sorted(set(out) - set(weights))
    res = dict(library_version=ct.__version__, torch_version=torch.__version__, threads=threads,
               times=times, best=min(times), peak_rss=max(hwms), baseline_rss=baseline,
               output_bytes=sum(out[k].numel() * out[k].element_size() for k in weights if k in out),
               leftover_params=[f"{k}:{str(out[k].dtype).removeprefix('torch.')}{list(out[k].shape)}"
                                for k in extra], problems=problems)
    if compare:
        ref = load_file(compare)
        cmp = {}
        for k in weights:
            a, b = out.get(k), ref.get(k)
            if a is None or b is None:
                cmp[k] = "missing in " + ("library" if a is None else "ctstream")
            elif a.dtype != b.dtype or a.shape != b.shape:
                cmp[k] = f"dtype/shape differ: lib {a.dtype}{list(a.shape)} vs ctstream {b.dtype}{list(b.shape)}"
            else:
                ai, bi = a.view(torch.int16), b.view(torch.int16)
                nd = int((ai != bi).sum())
                cmp[k] = "bit-equal" if nd == 0 else f"{nd} of {a.numel()} elements differ"
        res["compare"] = cmp
        res["ctstream_extra_keys"] = sorted(set(ref) - set(weights))
    return res


def worker_main(a):
    spec = next(s for s in SPECS if s["name"] == a.name)
    d = OUT / spec["name"]
    if a.worker == "build":
        res = worker_build(spec, d)
    else:
        res = worker_time(spec, d, int(a.threads), a.repeats, a.compare)
    Path(a.results).write_text(json.dumps(res, indent=1))


# --------------------------------------------------------------------------------------------
# parent
# --------------------------------------------------------------------------------------------

def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def machine_info():
    model = sh("lscpu | sed -n 's/^Model name:[ \\t]*//p'") or platform.processor()
    mem = proc_meminfo = Path("/proc/meminfo").read_text()
    mt = int(re.search(r"MemTotal:\s+(\d+)", mem).group(1)) * 1024
    return dict(cpu=model, nproc=os.cpu_count(), mem_bytes=mt, kernel=platform.release())


def gb(x):
    return f"{x / 1e9:.2f}"


def mib(x):
    return f"{x / 2**20:.0f}"


CT_INVOCATIONS = 5  # the 2-vCPU VM is noisy at ~10 ms runs: best of 5 invocations (each best of 3 passes)


def ctstream_bench(d: Path, threads: int):
    cmd = [str(CT_BIN), "bench", str(d), "--dtype", "bf16", "--repeat", "3", "--json",
           "--threads", str(threads)]
    runs = []
    for _ in range(CT_INVOCATIONS):
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode != 0:
            return dict(error=f"rc={p.returncode}: {p.stderr.strip() or p.stdout.strip()}")
        runs.append(json.loads(p.stdout))
    best = min(runs, key=lambda j: j["load_seconds"])
    best["invocation_load_seconds"] = [j["load_seconds"] for j in runs]
    best["peak_rss_bytes"] = max(j["peak_rss_bytes"] for j in runs)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", action="append", help="substring filter on checkpoint names")
    ap.add_argument("--repeats", type=int, default=3, help="library repetitions (best of)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--no-write", action="store_true", help="do not touch bench/RESULTS.md")
    ap.add_argument("--worker", choices=["build", "time"], help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--results", help=argparse.SUPPRESS)
    ap.add_argument("--compare", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker_main(a)

    t_start = time.time()
    load_start = os.getloadavg()
    threads = [int(x) for x in a.threads.split(",")]
    specs = [s for s in SPECS if not a.only or any(o in s["name"] for o in a.only)]
    if not CTSTREAM.exists():
        sys.exit(f"{CTSTREAM} missing: run bench/run_reference_bench.sh (or build ctstream)")
    OUT.mkdir(parents=True, exist_ok=True)
    # one frozen copy of the binary for the whole run, so a rebuild of build/ meanwhile can't mix versions
    global CT_BIN
    CT_BIN = OUT / "_ctstream_snapshot"
    shutil.copy2(CTSTREAM, CT_BIN)
    a.ct_built = datetime.datetime.fromtimestamp(CTSTREAM.stat().st_mtime).strftime("%Y-%m-%d %H:%M")
    a.git = sh(f"git -C {REPO} rev-parse --short HEAD") + \
        (" + uncommitted changes" if sh(f"git -C {REPO} status --porcelain -- src include tools CMakeLists.txt") else "")
    DECODED.mkdir(parents=True, exist_ok=True)
    tmp = OUT / "_results.json"
    rows, notes = [], []

    for s in specs:
        d, stamp_file = OUT / s["name"], OUT / f"{s['name']}.params.json"
        stamp = spec_stamp(s)
        have = (d / "model.safetensors").exists() and (d / "config.json").exists() and \
            stamp_file.exists() and json.loads(stamp_file.read_text()) == json.loads(json.dumps(stamp))
        if have:
            print(f"[build] {s['name']}: cached", flush=True)
        else:
            stamp_file.unlink(missing_ok=True)
            t0 = time.time()
            p = run_worker(["--worker", "build", "--name", s["name"], "--results", str(tmp)], s["line"])
            if p.returncode != 0:
                msg = f"{s['name']}: the library could not produce it (build worker rc={p.returncode}); skipped"
                print("NOTE:", msg, flush=True)
                notes.append(msg)
                continue
            stamp_file.write_text(json.dumps(stamp, indent=1))
            print(f"[build] {s['name']}: built in {time.time() - t0:.0f} s", flush=True)

        row = dict(spec=s, stored=(d / "model.safetensors").stat().st_size, ct={}, lib={})
        warm(d / "model.safetensors")
        # ctstream: bench at each thread count, then a full decompress for the bit-equality check
        for T in threads:
            row["ct"][T] = r = ctstream_bench(d, T)
            print(f"[ctstream] {s['name']} T={T}: " +
                  (r["error"] if "error" in r else f"{r['load_seconds']:.3f} s, {r['output_gbps']:.2f} GB/s, "
                   f"peak RSS {mib(r['peak_rss_bytes'])} MiB; per invocation "
                   f"{', '.join(f'{x:.4f}' for x in r['invocation_load_seconds'])} s"), flush=True)
        dec = DECODED / f"{s['name']}.safetensors"
        dec.unlink(missing_ok=True)
        p = subprocess.run([str(CT_BIN), "decompress", str(d), str(dec), "--dtype", "bf16"],
                           capture_output=True, text=True)
        row["ct_decompress"] = "ok" if p.returncode == 0 else \
            f"rc={p.returncode}: {(p.stderr or p.stdout).strip()}"
        if p.returncode != 0:
            print(f"[ctstream] decompress {s['name']} FAILED: {row['ct_decompress']}", flush=True)
        # library: one fresh child per thread count; the bit-equality check rides on the last one
        for T in threads:
            args = ["--worker", "time", "--name", s["name"], "--results", str(tmp),
                    "--threads", str(T), "--repeats", str(a.repeats)]
            if T == threads[-1] and dec.exists():
                args += ["--compare", str(dec)]
            tmp.unlink(missing_ok=True)
            p = run_worker(args, s["line"])
            if p.returncode != 0 or not tmp.exists():
                row["lib"][T] = dict(error=f"library decompression failed (rc={p.returncode})")
                print(f"[library] {s['name']} T={T}: FAILED rc={p.returncode}", flush=True)
                continue
            row["lib"][T] = r = json.loads(tmp.read_text())
            print(f"[library] {s['name']} T={T}: best {r['best']:.3f} s of {len(r['times'])} "
                  f"({', '.join(f'{x:.2f}' for x in r['times'])}), peak RSS {mib(r['peak_rss'])} MiB "
                  f"(baseline {mib(r['baseline_rss'])})", flush=True)
            for pr in r["problems"]:
                print("   PROBLEM:", pr, flush=True)
            if "compare" in r:
                for k, v in r["compare"].items():
                    print(f"   ctstream decompress vs library {k}: {v}", flush=True)
        if dec.exists():
            dec.unlink()  # 0.1-0.3 GB each; the comparison is done
        rows.append(row)
    tmp.unlink(missing_ok=True)
    elapsed = time.time() - t_start
    if CTSTREAM.stat().st_mtime != CT_BIN.stat().st_mtime:
        print("note: build/bin/ctstream was rebuilt during the run; this run used the snapshot taken at its start")
    a.load = (load_start, os.getloadavg())
    md = render(rows, notes, threads, a, elapsed)
    print()
    print(md)
    if not a.no_write and not a.only:
        write_section(md)
        print(f"wrote {RESULTS_MD.relative_to(REPO)} ({BEGIN} ... {END})")


def render(rows, notes, threads, a, elapsed):
    mi = machine_info()
    libv = sorted({r["lib"][T].get("library_version", "?") for r in rows for T in r["lib"]})
    torchv = sorted({r["lib"][T].get("torch_version", "?") for r in rows for T in r["lib"]})
    isa = sorted({r["ct"][T].get("isa", "?") for r in rows for T in r["ct"]})
    ctv = sh(f"{CT_BIN} --help 2>&1 | head -1").split(" — ")[0]
    L = [BEGIN, "## Decompression: ctstream vs the compressed-tensors library (CPU, bf16 output)", ""]
    L.append(f"Generated by `bench/run_reference_bench.sh` (= `.venv/bin/python bench/python_reference.py`) on "
             f"{datetime.date.today().isoformat()}, total run {elapsed / 60:.1f} min. Machine: {mi['cpu']}, "
             f"nproc {mi['nproc']}, {mi['mem_bytes'] / 2**30:.1f} GiB RAM, Linux {mi['kernel']}. "
             f"torch {', '.join(torchv)}; compressed-tensors {', '.join(libv)}; {ctv} (build/bin/ctstream built {a.ct_built}, git {a.git}), ISA {', '.join(isa)}. "
             f"1-min load average at start / end: {a.load[0][0]:.2f} / {a.load[1][0]:.2f} "
             "(anything else running on the 2 cores shows up mostly in the ~10 ms ctstream numbers).")
    L.append("")
    L.append("Checkpoints are built by the library itself (`ModelCompressor` compress + save + `update_config`), "
             "bf16 weights N(0, 0.05) with a few outliers; shapes are out x in under `model.layers.0.*`: "
             "q_proj 4096x4096, up_proj 14336x4096, down_proj 4096x14336. Time = best of N, warm page cache; "
             "GB/s = bf16 output bytes / time; speed-up = library / ctstream at the same thread count.")
    L.append("")
    hdr = ["checkpoint", "weights (out x in)", "stored MB", "bf16 out MB"]
    for T in threads:
        hdr += [f"lib {T}t s (n)", f"ctstream {T}t s"]
    for T in threads:
        hdr += [f"lib {T}t GB/s", f"ctstream {T}t GB/s", f"speed-up {T}t"]
    hdr += ["lib peak RSS MiB (baseline)", "ctstream peak RSS MiB", "bit-equal"]
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "---|" * len(hdr))
    for r in rows:
        s = r["spec"]
        ct1 = next((r["ct"][T] for T in threads if "error" not in r["ct"][T]), {})
        lib_any = next((r["lib"][T] for T in threads if "error" not in r["lib"][T]), {})
        outb = ct1.get("output_bytes") or lib_any.get("output_bytes") or 0
        shapes = ", ".join(f"{m[1]}x{m[2]}" for m in s["modules"])
        cells = [f"{s['label']}<br>`{s['name']}`", shapes, f"{r['stored'] / 1e6:.1f}", f"{outb / 1e6:.1f}"]
        for T in threads:
            lt, ctt = r["lib"][T], r["ct"][T]
            cells.append("error" if "error" in lt else f"{lt['best']:.3f} ({len(lt['times'])})")
            cells.append("error" if "error" in ctt else f"{ctt['load_seconds']:.4f}")
        for T in threads:
            lt, ctt = r["lib"][T], r["ct"][T]
            lo = None if "error" in lt else lt["output_bytes"] / lt["best"]
            co = None if "error" in ctt else ctt["output_gbps"] * 1e9
            cells += [gb(lo) if lo else "-", gb(co) if co else "-",
                      f"{co / lo:.1f}x" if lo and co else "-"]
        pk = [r["lib"][T] for T in threads if "error" not in r["lib"][T]]
        cells.append(f"{mib(max(x['peak_rss'] for x in pk))} ({mib(pk[0]['baseline_rss'])})" if pk else "-")
        cp = [r["ct"][T]["peak_rss_bytes"] for T in threads if "error" not in r["ct"][T]]
        cells.append(mib(max(cp)) if cp else "-")
        cmp = next((r["lib"][T].get("compare") for T in threads if r["lib"][T].get("compare")), None)
        if r["ct_decompress"] != "ok":
            cells.append("ctstream decompress failed")
        elif cmp is None:
            cells.append("-")
        else:
            bad = {k: v for k, v in cmp.items() if v != "bit-equal"}
            cells.append(f"yes ({len(cmp)}/{len(cmp)} weights)" if not bad else
                         "NO: " + "; ".join(f"{k.split('.')[-2]}: {v}" for k, v in bad.items()))
        L.append("| " + " | ".join(cells) + " |")
    L.append("")
    L.append("What is timed. *Library*: a fresh subprocess per (checkpoint, torch threads), "
             "`torch.set_num_threads(T)`. 0.20.0 (quantized): model skeleton built untimed on the meta device "
             "(`apply_quantization_config` + `ModelCompressor.compress_model`); timed = "
             "`safetensors.torch.load_file` + `load_state_dict(assign=True)` + `ModelCompressor.decompress_model` "
             "(the path `tests/fixtures/gen/gen_compressed.py` uses for expected outputs). 0.12.2 (sparse): "
             "dense skeleton allocated untimed (meta -> `to_empty`); timed = `ModelCompressor.from_compression_config` "
             "+ `mc.decompress(dir, model)` (the library reads the file itself). All outputs checked bf16 with "
             "the logical shape. Library peak RSS = VmHWM of that process, reset just before each timed "
             "repetition (so it includes the interpreter/torch/library baseline shown in parentheses). "
             "*ctstream*: `build/bin/ctstream bench DIR --dtype bf16 --repeat 3 --json --threads T`, run "
             f"{CT_INVOCATIONS} times (best `load_seconds`; runs are ~10-100 ms and this 2-vCPU VM is noisy), "
             "`load_seconds` = best of 3 passes decoding every tensor into one reused caller buffer the size "
             "of the largest tensor (mmap input; open time excluded, it is < 1 ms here); peak RSS = getrusage "
             "of that process (includes touched pages of the mmap'd file). *bit-equal*: "
             "`ctstream decompress DIR OUT.safetensors --dtype bf16` compared with the library's tensors "
             "(int16 views, every weight tensor).")
    reps = {r["spec"]["name"]: {T: len(r["lib"][T]["times"]) for T in threads if "times" in r["lib"][T]}
            for r in rows}
    short = [f"`{n}` ({', '.join(f'{T}t: {k}' for T, k in v.items())})" for n, v in reps.items()
             if any(k < a.repeats for k in v.values())]
    if short:
        L.append("")
        L.append(f"Library repetitions were cut below {a.repeats} once a (checkpoint, threads) child had spent "
                 f"{LIB_TIME_BUDGET_S:.0f} s: " + ", ".join(short) + ".")
    extra = []
    for r in rows:
        lo = sorted({x for T in threads for x in r["lib"][T].get("leftover_params", [])})
        if lo:
            extra.append(f"`{r['spec']['name']}`: library output also holds {', '.join(lo)}")
        for T in threads:
            if "error" in r["ct"][T]:
                extra.append(f"`{r['spec']['name']}`: ctstream bench --threads {T} failed: {r['ct'][T]['error']}")
            for pr in r["lib"][T].get("problems", []):
                extra.append(f"`{r['spec']['name']}` library output problem: {pr}")
        if r["ct_decompress"] != "ok":
            extra.append(f"`{r['spec']['name']}`: ctstream decompress failed: {r['ct_decompress']}")
    for n in notes + extra:
        L.append("")
        L.append("Note: " + n)
    L.append(END)
    return "\n".join(L)


def write_section(md):
    if RESULTS_MD.exists():
        text = RESULTS_MD.read_text()
    else:
        text = "# ctstream benchmark results\n\nSections are written by the scripts in `bench/`; " \
               "each script rewrites only its own section (between its HTML-comment markers).\n"
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        post = rest.split(END, 1)[1]
        text = pre + md + post
    else:
        text = text.rstrip("\n") + "\n\n" + md + "\n"
    RESULTS_MD.write_text(text)


if __name__ == "__main__":
    if os.environ.get("CTSTREAM_CT_LINE") and "--worker" not in sys.argv:
        sys.exit("CTSTREAM_CT_LINE is set but no --worker given")
    main()
