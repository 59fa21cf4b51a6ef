#!/usr/bin/env python3
"""End-to-end load benchmark: ctstream vs safetensors, compressed-tensors, runai-model-streamer and
fastsafetensors, all on the same files, in one run.

    bench/run_e2e.sh                         # build ctstream if needed, install peers, run this
    .venv/bin/python bench/e2e.py            # the full run (writes bench/RESULTS.md, e2e section)
    .venv/bin/python bench/e2e.py --small    # a ~230 MB model: quick check of the whole pipeline
    .venv/bin/python bench/e2e.py --only ctstream,safetensors --no-write

Models (built once into bench/out/e2e_*/, rebuilt only when bench/out/e2e_<name>.params.json
differs from the spec below or a file is missing; bench/out is git-ignored):
  dense     `ctstream synth` Llama-shaped, bf16: 20 layers, hidden 2048, intermediate 5632,
            vocab 32000, 2 shards = 2.16 GiB, 183 tensors (largest: embed / lm_head, 125 MiB)
  int4      `ctstream compress dense --format pack-quantized --bits 4 --group-size 128`
  sparse24  `ctstream compress dense --format sparse-24-bitmask --prune-24`
  bitmask   `ctstream compress P --format sparse-bitmask`, P = the 2:4-pruned weights
            (`ctstream decompress sparse24`), i.e. 50% zeros: the bitmask of the unpruned random
            model would hold no zeros at all
  t1000     `ctstream synth --layers 111 --hidden 256 --intermediate 688 --vocab 4096`: 1,002
            tensors, for time to first tensor

Every measurement runs in its own fresh process; peak RSS is that process's ru_maxrss (os.wait4),
i.e. the loader's own high-water mark, interpreter and torch included for Python loaders.
Work per run: every tensor of the model produced as bf16 in memory the caller owns:
  * ctstream CLI: `ctstream bench DIR --dtype bf16 --repeat 1 --json --threads T [--budget 256MiB]`
    decodes every tensor into ONE reused caller buffer (size of the largest tensor, zeroed before
    the clock starts); time = open_seconds + load_seconds (open is included as it is for the
    Python loaders); "direct" = decode_into, "stream" = Stream with a 256 MiB budget (decode ahead
    on a worker, then memcpy into the caller's buffer).
  * Python loaders: the caller preallocates one torch tensor per model tensor (bf16, logical
    shape) and touches it (zero_) before the clock starts; the timed region opens the files and
    copy_()s every tensor into its destination, in file-offset order:
      safetensors  safe_open(f, "pt") per shard, dst.copy_(h.get_slice(k)[:])  (torch threads = T)
      runai        runai_model_streamer.SafetensorsStreamer: stream_files(shards, owned=False),
                   get_tensors() -> copy_ (RUNAI_STREAMER_CONCURRENCY = T, defaults otherwise)
      fastsafet.   fastsafetensors.SafeTensorsFileLoader(None, "cpu", nogds=True, max_threads=T),
                   copy_files_to_device() -> get_tensor -> copy_
      ctstream-py  ctstream.open(DIR, threads=T, budget="256MB"), tensors(dtype="bfloat16") -> copy_
  * compressed-tensors (the library's own decompression; its output is the model's parameters,
    allocated by the library): 0.20.0 for int4 -- model skeleton built UNTIMED on the meta device
    (apply_quantization_config + compress_model), TIMED safetensors.torch.load_file (every shard) +
    load_state_dict(assign=True) + ModelCompressor.decompress_model; 0.12.2 for sparse24/bitmask --
    dense skeleton allocated untimed (meta -> to_empty), TIMED from_compression_config +
    ModelCompressor.decompress(DIR, model). Run fully on the whole model, best of --lib-repeat
    (default 3; after one untimed warm-up run), warm page cache only. Every output checked: bf16, logical shape, all
    183 tensors.
Cache states:
  warm  the parent reads every file once, then the loader runs once untimed in the same process
        (a separate untimed process for the ctstream CLI), then the timed runs; best of N.
  cold  right before each timed run: fdatasync + posix_fadvise(POSIX_FADV_DONTNEED) on every file
        of the model (clean page-cache pages dropped; `fincore` confirms ~0 bytes resident), and the
        ctstream CLI also gets --cold (it drops its own pages after open). The VM's host may still
        cache the disk, so "cold" is the guest page cache only: reads go to the virtual disk.
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
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "out"
RESULTS_MD = REPO / "bench" / "RESULTS.md"
CTSTREAM_BUILT = REPO / "build" / "bin" / "ctstream"
CT012_DIR = REPO / ".venv" / "ct012"
BEGIN, END = "<!-- e2e:begin -->", "<!-- e2e:end -->"
GEN_VERSION = 1
BUDGET, BUDGET_BYTES, BUDGET_PY = "256MiB", 256 << 20, "256MB"
FIRST_TENSOR_GOAL_S = 0.005
MiB = 1 << 20

MODEL_SETS = {
    "full": {
        "dense": dict(kind="synth", layers=20, hidden=2048, intermediate=5632, vocab=32000, shards=2),
        "int4": dict(kind="compress", src="dense",
                     args=["--format", "pack-quantized", "--bits", "4", "--group-size", "128"]),
        "sparse24": dict(kind="compress", src="dense", args=["--format", "sparse-24-bitmask", "--prune-24"]),
        "bitmask": dict(kind="compress_decompressed", src="sparse24", args=["--format", "sparse-bitmask"]),
        "t1000": dict(kind="synth", layers=111, hidden=256, intermediate=688, vocab=4096, shards=1),
    },
}
# --small: the same models from a 4-layer, hidden-1024 dense one (~230 MB).
MODEL_SETS["small"] = dict(MODEL_SETS["full"],
                           dense=dict(kind="synth", layers=4, hidden=1024, intermediate=2816, vocab=32000, shards=2))
FORMAT_LABEL = {"dense": "dense bf16", "int4": "int4 g128 (pack-quantized)",
                "sparse24": "2:4 (sparse-24-bitmask)", "bitmask": "bitmask 50% (sparse-bitmask)",
                "t1000": "dense bf16, 1,002 tensors"}
LOADERS = ["ctstream", "ctstream-stream", "ctstream-py", "ctstream-py-out", "safetensors", "runai", "fastsafetensors", "ct-lib"]
LOADER_LABEL = {"ctstream": "ctstream CLI (direct)", "ctstream-stream": f"ctstream CLI (stream, budget {BUDGET})",
                "ctstream-py": f"ctstream Python tensors() (budget {BUDGET_PY})",
                "ctstream-py-out": "ctstream Python get(out=)", "safetensors": "safetensors safe_open",
                "runai": "runai-model-streamer", "fastsafetensors": "fastsafetensors (CPU, nogds)",
                "ct-lib": "compressed-tensors"}


# ------------------------------------------------------------------------------------------------
# helpers shared by parent and children
# ------------------------------------------------------------------------------------------------

def st_files(d: Path):
    return sorted(p for p in Path(d).glob("*.safetensors"))


def all_files(d: Path):
    return sorted(p for p in Path(d).iterdir() if p.is_file())


def st_header(path):
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def dense_layout(d: Path):
    """[(file, name, dtype, shape)] in file-offset order, for a dense checkpoint."""
    out = []
    for f in st_files(d):
        h = st_header(f)
        for k, v in sorted(h.items(), key=lambda kv: kv[1]["data_offsets"][0]):
            out.append((str(f), k, v["dtype"], v["shape"]))
    return out


def evict(paths):
    """Drop the clean page-cache pages of these files (dirty ones are written back first)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def resident_bytes(paths):
    """Page-cache bytes of these files (util-linux fincore); -1 if unavailable."""
    try:
        r = subprocess.run(["fincore", "--bytes", "--noheadings", "--output", "RES", *map(str, paths)],
                           capture_output=True, text=True, check=True)
        return sum(int(x) for x in r.stdout.split())
    except Exception:
        return -1


def warm_files(paths):
    for p in paths:
        with open(p, "rb") as f:
            while f.read(1 << 24):
                pass


def proc_status(key):
    m = re.search(rf"^{key}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    return int(m.group(1)) * 1024 if m else 0


# ------------------------------------------------------------------------------------------------
# child: one loader, one model, one thread count, one cache state
# ------------------------------------------------------------------------------------------------

def llama_skeleton(torch, nn, cfg, device):
    """Module tree named like `ctstream synth` (and HF Llama): Embedding, Linear projections,
    norms with a weight only."""
    h, i, v, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    dt = torch.bfloat16

    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(h, dtype=dt, device=device))

    def lin(cin, cout):
        return nn.Linear(cin, cout, bias=False, dtype=dt, device=device)

    root = nn.Module()
    root.model = nn.Module()
    root.model.embed_tokens = nn.Embedding(v, h, dtype=dt, device=device)
    layers = nn.ModuleList()
    for _ in range(L):
        layer = nn.Module()
        layer.self_attn = nn.Module()
        for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
            layer.self_attn.add_module(n, lin(h, h))
        layer.mlp = nn.Module()
        layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj = lin(h, i), lin(h, i), lin(i, h)
        layer.input_layernorm, layer.post_attention_layernorm = Norm(), Norm()
        layers.append(layer)
    root.model.layers = layers
    root.model.norm = Norm()
    root.lm_head = lin(h, v)
    return root


def child_main(p):
    loader, T, cache, model_dir = p["loader"], p["threads"], p["cache"], Path(p["model_dir"])
    files = [str(f) for f in all_files(model_dir)]
    res = dict(times=[], first=[], resident_after_evict=[])
    if loader == "ct-lib":
        line = p["ct_line"]
        if line == "0.12":
            sys.path.insert(0, str(CT012_DIR))
        try:  # progress bars off
            import functools
            import tqdm
            tqdm.tqdm.__init__ = functools.partialmethod(tqdm.tqdm.__init__, disable=True)
        except ImportError:
            pass
        import compressed_tensors
        res["library_version"] = compressed_tensors.__version__
        if not compressed_tensors.__version__.startswith(line + "."):
            raise RuntimeError(f"wanted compressed-tensors {line}, got {compressed_tensors.__version__}")
    import torch
    from torch import nn
    torch.set_num_threads(T)
    gc.collect()
    res["baseline_rss"] = proc_status("VmRSS")

    dst, layout = {}, None
    if loader == "ct-lib":
        cfg = json.loads((model_dir / "config.json").read_text())
        dense_dir = Path(p["dense_dir"])
        expect = {k: tuple(s) for _, k, _, s in dense_layout(dense_dir)}
        if line == "0.20":
            from safetensors.torch import load_file
            from compressed_tensors.compressors import ModelCompressor
            from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config
            def prepare():  # a fresh config each time: decompress_model changes its status
                qc = QuantizationConfig.model_validate(cfg["quantization_config"])
                m = llama_skeleton(torch, nn, cfg, "meta")
                apply_quantization_config(m, qc)
                mc = ModelCompressor(quantization_config=qc)
                mc.compress_model(m)
                return m, mc

            def run(state, first):
                m, mc = state
                sd = {}
                for f in st_files(model_dir):
                    sd.update(load_file(str(f)))
                m.load_state_dict(sd, strict=True, assign=True)
                del sd
                mc.decompress_model(m)
                return dict(m.state_dict())
        else:
            from compressed_tensors.compressors import ModelCompressor

            def prepare():
                m = llama_skeleton(torch, nn, cfg, "meta")
                m.to_empty(device="cpu")
                return m, None

            def run(state, first):
                m, _ = state
                mc = ModelCompressor.from_compression_config(cfg["quantization_config"])
                mc.decompress(str(model_dir), m)
                return dict(m.state_dict())

        def check(out):
            bad = [k for k, s in expect.items()
                   if k not in out or out[k].dtype != torch.bfloat16 or tuple(out[k].shape) != s]
            if bad:
                raise RuntimeError(f"library output wrong for {len(bad)} tensors, e.g. {bad[:3]}")
            return sum(out[k].numel() * 2 for k in expect)

        # warm-up (untimed), then the timed run(s)
        runs = p["repeat"] + 1
        for r in range(runs):
            state = prepare()
            gc.collect()
            t0 = time.perf_counter()
            out = run(state, None)
            dt = time.perf_counter() - t0
            res["output_bytes"] = check(out)
            res["extra_outputs"] = len(set(out) - set(expect))
            if r > 0:
                res["times"].append(dt)
            else:
                res["warmup_time"] = dt
            if r < runs - 1:
                del out, state
                gc.collect()
        res["peak_rss_self"] = proc_status("VmHWM")
        res["verify"] = verify_samples(torch, out.__getitem__, model_dir, list(expect))
        return res

    # ---- loaders that fill caller-preallocated tensors
    if loader.startswith("ctstream-py"):
        import ctstream
        res["module_version"] = getattr(ctstream, "__version__", "?")
        with ctstream.open(str(model_dir), threads=T) as ck:
            for ti in ck.infos():
                dst[ti.name] = torch.empty(tuple(ti.shape), dtype=torch.bfloat16)

        if loader == "ctstream-py":
            def load(first):
                with ctstream.open(str(model_dir), threads=T, budget=BUDGET_PY) as ck:
                    for name, t in ck.tensors(dtype="bfloat16"):
                        dst[name].copy_(t)
                        first()
        else:  # ctstream-py-out: decode straight into the caller's tensors, no decode-ahead
            def load(first):
                with ctstream.open(str(model_dir), threads=T) as ck:
                    for name in ck.keys():
                        ck.get(name, dtype="bfloat16", out=dst[name])
                        first()
    else:
        layout = dense_layout(model_dir)
        tdt = {"BF16": torch.bfloat16, "F16": torch.bfloat16, "F32": torch.bfloat16}
        for _, k, dtype, shape in layout:
            dst[k] = torch.empty(tuple(shape), dtype=tdt.get(dtype, torch.bfloat16))
        shards = [str(f) for f in st_files(model_dir)]
        if loader == "safetensors":
            from safetensors import safe_open

            def load(first):
                cur, h = None, None
                for f, k, _, _ in layout:
                    if f != cur:
                        if h is not None:
                            h.__exit__(None, None, None)
                        h = safe_open(f, framework="pt", device="cpu").__enter__()
                        cur = f
                    dst[k].copy_(h.get_slice(k)[:])
                    first()
                if h is not None:
                    h.__exit__(None, None, None)
        elif loader == "runai":
            from runai_model_streamer import SafetensorsStreamer

            def load(first):
                with SafetensorsStreamer() as s:
                    s.stream_files(shards, device="cpu", owned=False)
                    for name, t in s.get_tensors():
                        dst[name].copy_(t)
                        first()
        elif loader == "fastsafetensors":
            from fastsafetensors import SafeTensorsFileLoader

            def load(first):
                fl = SafeTensorsFileLoader(None, "cpu", nogds=True, max_threads=T)
                try:
                    fl.add_filenames({0: shards})
                    fb = fl.copy_files_to_device()
                    try:
                        for _, k, _, _ in layout:
                            dst[k].copy_(fb.get_tensor(k))
                            first()
                    finally:
                        fb.close()
                finally:
                    fl.close()
        else:
            raise ValueError(loader)
    for t in dst.values():
        t.zero_()  # the caller's memory exists (and is faulted in) before loading starts
    res["output_bytes"] = sum(t.numel() * t.element_size() for t in dst.values())
    res["tensors"] = len(dst)

    def timed():
        state = {"t0": time.perf_counter(), "first": None}

        def first():
            if state["first"] is None:
                state["first"] = time.perf_counter() - state["t0"]
        state["t0"] = time.perf_counter()
        load(first)
        return time.perf_counter() - state["t0"], state["first"]

    if cache == "warm":
        res["warmup_time"] = timed()[0]
        for _ in range(p["repeat"]):
            gc.collect()
            dt, ft = timed()
            res["times"].append(dt)
            res["first"].append(ft)
    else:
        for _ in range(p["repeat"]):
            gc.collect()
            evict(files)
            res["resident_after_evict"].append(resident_bytes(files))
            dt, ft = timed()
            res["times"].append(dt)
            res["first"].append(ft)
    res["peak_rss_self"] = proc_status("VmHWM")  # before the check below allocates anything
    if loader.startswith("ctstream-py"):
        res["verify"] = "(is the reference)"
    else:
        res["verify"] = verify_samples(torch, dst.__getitem__, model_dir, list(dst))
    return res


def cpu_busy(seconds=3.0):
    """Fraction of all CPUs' time spent not idle over `seconds` (/proc/stat), sampled while this
    script itself sleeps: what other processes use. (The load average is a 1-minute decaying mean
    and stays high for a minute after anything else stops.) None where /proc/stat is missing."""
    def snap():
        f = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        return sum(f), f[3] + (f[4] if len(f) > 4 else 0)
    try:
        t0, i0 = snap()
        time.sleep(seconds)
        t1, i1 = snap()
    except OSError:
        return None
    return 1.0 - (i1 - i0) / max(1, t1 - t0)

def verify_samples(torch, get, model_dir, names, n=12):
    """Compares n tensors spread over the model (first, last, every k-th) with what the ctstream
    Python module decodes from the same files, bit for bit."""
    try:
        import ctstream
    except ImportError:
        return "not checked (ctstream Python module not importable)"
    pick = sorted({names[round(i * (len(names) - 1) / (n - 1))] for i in range(n)})
    bad = []
    with ctstream.open(str(model_dir), threads=1) as ck:
        for k in pick:
            ref = ck.get(k, dtype="bfloat16")
            got = get(k)
            if got.dtype != torch.bfloat16 or got.shape != ref.shape or not torch.equal(
                    got.view(torch.int16), ref.view(torch.int16)):
                bad.append(k)
    return f"bit-equal on {len(pick)}/{len(pick)} sampled tensors" if not bad else f"DIFFERS: {bad}"


# ------------------------------------------------------------------------------------------------
# parent
# ------------------------------------------------------------------------------------------------

def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()


def spawn(cmd, env=None, timeout=None):
    """Runs cmd in a fresh process; returns (rc, stdout, stderr, ru_maxrss bytes, wall)."""
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        t0 = time.perf_counter()
        pr = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env)
        try:
            _, status, ru = os.wait4(pr.pid, 0)
        except KeyboardInterrupt:
            pr.kill()
            raise
        pr.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        fo.seek(0)
        fe.seek(0)
        return pr.returncode, fo.read(), fe.read(), ru.ru_maxrss * 1024, wall


class Bench:
    def __init__(self, a):
        self.a = a
        self.models = MODEL_SETS["small" if a.small else "full"]
        self.prefix = "e2e_small_" if a.small else "e2e_"
        self.rows = []      # measured rows
        self.notes = []     # things that did not work / caveats
        self.ft_rows = []   # first-tensor rows
        self.log = OUT / f"{self.prefix}log.txt"

    def say(self, msg):
        print(msg, flush=True)
        with open(self.log, "a") as f:
            f.write(msg + "\n")

    def mdir(self, name):
        return OUT / f"{self.prefix}{name}"

    # ---------------------------------------------------------------- models
    def stamp(self, name):
        spec = dict(self.models[name])
        s = dict(gen_version=GEN_VERSION, name=name, spec=spec)
        if "src" in spec:
            s["src_stamp"] = self.stamp(spec["src"])
        return s

    def build(self, name):
        d = self.mdir(name)
        stamp_file = OUT / f"{self.prefix}{name}.params.json"
        want = self.stamp(name)
        spec = self.models[name]
        if "src" in spec:
            self.build(spec["src"])
        if (stamp_file.exists() and json.loads(stamp_file.read_text()) == want and d.is_dir()
                and st_files(d) and (d / "config.json").exists()):
            return
        t0 = time.perf_counter()
        if d.exists():
            shutil.rmtree(d)
        stamp_file.unlink(missing_ok=True)
        ct = str(self.ct)
        if spec["kind"] == "synth":
            cmd = [ct, "synth", str(d), "--layers", str(spec["layers"]), "--hidden", str(spec["hidden"]),
                   "--intermediate", str(spec["intermediate"]), "--vocab", str(spec["vocab"]),
                   "--shards", str(spec["shards"])]
            self.check_run(cmd)
        elif spec["kind"] == "compress":
            self.check_run([ct, "compress", str(self.mdir(spec["src"])), str(d), *spec["args"],
                            "--no-errors", "--quiet"])
        elif spec["kind"] == "compress_decompressed":
            tmp = OUT / f"{self.prefix}_tmp_decompressed"
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            self.check_run([ct, "decompress", str(self.mdir(spec["src"])), str(tmp / "model.safetensors"),
                            "--dtype", "bf16"])
            cfg = json.loads((self.mdir("dense") / "config.json").read_text())
            (tmp / "config.json").write_text(json.dumps(cfg, indent=2))
            self.check_run([ct, "compress", str(tmp), str(d), *spec["args"], "--no-errors", "--quiet"])
            shutil.rmtree(tmp)
        else:
            raise ValueError(spec["kind"])
        size = sum(f.stat().st_size for f in st_files(d))
        self.say(f"  built {d.name}: {size / MiB:.1f} MiB in {time.perf_counter() - t0:.1f} s")
        stamp_file.write_text(json.dumps(want, indent=1))

    def check_run(self, cmd):
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
        return r.stdout

    # ---------------------------------------------------------------- measurements
    def ct_bench(self, model, T, cache, stream, repeat, first_only=False):
        d = self.mdir(model)
        files = all_files(d)
        cmd = [str(self.ct), "bench", str(d), "--dtype", "bf16", "--repeat", "1", "--json", "--threads", str(T)]
        if stream:
            cmd += ["--budget", BUDGET]
        runs, resident = [], []
        if cache == "warm":
            warm_files(files)
            spawn(cmd)  # untimed warm-up process
        else:
            cmd.append("--cold")
        for _ in range(repeat):
            if cache == "cold":
                evict(files)
                resident.append(resident_bytes(files))
            rc, so, se, rss, _ = spawn(cmd)
            if rc != 0:
                raise RuntimeError(f"{' '.join(cmd)}: rc {rc}: {se[-1500:]}")
            j = json.loads(so)
            j["ru_maxrss"] = rss
            runs.append(j)
        return runs, resident

    def measure_ctstream(self, loader, model, T, cache):
        stream = loader == "ctstream-stream"
        runs, resident = self.ct_bench(model, T, cache, stream, self.a.repeat)
        times = [r["open_seconds"] + r["load_seconds"] for r in runs]
        j = runs[0]
        return dict(times=times, first=[r["first_tensor_seconds"] for r in runs],
                    peak_rss=max(r["ru_maxrss"] for r in runs), output_bytes=j["output_bytes"],
                    caller_bytes=j["largest_tensor_bytes"], largest=j["largest_tensor_bytes"],
                    tensors=j["tensors"], isa=j["isa"], resident_after_evict=resident,
                    baseline_rss=None)

    def measure_child(self, loader, model, T, cache):
        d = self.mdir(model)
        params = dict(loader=loader, threads=T, cache=cache, model_dir=str(d), dense_dir=str(self.mdir("dense")),
                      repeat=self.a.lib_repeat if loader == "ct-lib" else self.a.repeat)
        if loader == "ct-lib":
            params["ct_line"] = "0.20" if model == "int4" else "0.12"
        if cache == "warm":
            warm_files(all_files(d))
        env = dict(os.environ, TQDM_DISABLE="1", OMP_NUM_THREADS=str(T), RUNAI_STREAMER_CONCURRENCY=str(T),
                   PYTHONUNBUFFERED="1")
        with tempfile.NamedTemporaryFile("r", suffix=".json") as rf:
            params["result"] = rf.name
            rc, so, se, rss, wall = spawn([sys.executable, __file__, "--child", json.dumps(params)], env=env)
            if rc != 0:
                tail = "\n".join((se or so).strip().splitlines()[-6:])
                raise RuntimeError(f"child rc {rc}: {tail}")
            res = json.loads(Path(rf.name).read_text())
        res["peak_rss"] = res.get("peak_rss_self") or rss  # VmHWM before the sample check
        res["process_maxrss"] = rss
        res["caller_bytes"] = res["output_bytes"] if loader != "ct-lib" else None
        res["child_wall"] = wall
        return res

    def measure(self, loader, model, T, cache):
        key = f"{loader} {model} t{T} {cache}"
        t0 = time.perf_counter()
        try:
            if loader in ("ctstream", "ctstream-stream"):
                r = self.measure_ctstream(loader, model, T, cache)
            else:
                r = self.measure_child(loader, model, T, cache)
        except Exception as e:  # noqa: BLE001 -- a peer that cannot run here is recorded, not fatal
            msg = str(e).strip().splitlines()
            self.say(f"  {key}: FAILED: {msg[-1] if msg else e}")
            self.notes.append(f"`{LOADER_LABEL[loader]}` on {model}, {T} thread(s), {cache}: failed: "
                              f"{' / '.join(msg[-3:])[:400]}")
            return None
        r.update(loader=loader, model=model, threads=T, cache=cache, best=min(r["times"]))
        self.rows.append(r)
        ft = [x for x in r.get("first", []) if x is not None]
        self.say(f"  {key}: best {r['best']:.3f} s of {['%.3f' % x for x in r['times']]}, "
                 f"{r['output_bytes'] / r['best'] / 1e9:.2f} GB/s, peak RSS {r['peak_rss'] / MiB:.0f} MiB"
                 + (f", first tensor {min(ft) * 1e3:.1f} ms" if ft else "")
                 + (f", {r['verify']}" if r.get("verify") else "")
                 + f" [{time.perf_counter() - t0:.1f} s]")
        if "DIFFERS" in str(r.get("verify")):
            self.notes.append(f"`{LOADER_LABEL[loader]}` on {model}, {T}t, {cache}: output {r['verify']}")
        return r

    def measure_first_tensor(self, T, cache, stream):
        n = self.a.ft_repeat
        runs, resident = self.ct_bench("t1000", T, cache, stream, n)
        ft = [r["first_tensor_seconds"] for r in runs]
        row = dict(threads=T, cache=cache, stream=stream, first=ft, open=[r["open_seconds"] for r in runs],
                   tensors=runs[0]["tensors"], peak_rss=max(r["ru_maxrss"] for r in runs),
                   largest=runs[0]["largest_tensor_bytes"], median=statistics.median(ft),
                   resident_after_evict=resident)
        self.ft_rows.append(row)
        self.say(f"  first tensor t1000 t{T} {cache} {'stream' if stream else 'direct'}: median "
                 f"{row['median'] * 1e3:.2f} ms of {['%.2f' % (x * 1e3) for x in ft]} (open median "
                 f"{statistics.median(row['open']) * 1e3:.2f} ms)")

    # ---------------------------------------------------------------- main
    def run(self):
        a = self.a
        OUT.mkdir(parents=True, exist_ok=True)
        self.log.write_text("")
        t_start = time.perf_counter()
        self.load_start = os.getloadavg()
        self.busy_start = cpu_busy()
        self.started = datetime.datetime.now()
        if not CTSTREAM_BUILT.exists():
            raise SystemExit(f"{CTSTREAM_BUILT} missing: run bench/run_e2e.sh (or cmake --build build)")
        # snapshot the binary: other people may rebuild build/ while this runs
        self.ct = OUT / f"{self.prefix}ctstream_snapshot"
        shutil.copy2(CTSTREAM_BUILT, self.ct)
        if "compress" not in sh(f"{self.ct} --help 2>&1"):
            raise SystemExit("this ctstream has no `compress` command (the writer): cannot build the models")
        self.say(f"[1/4] models (cached in {OUT})")
        for m in self.models:
            self.build(m)
        for m in self.models:
            d = self.mdir(m)
            self.say(f"  {d.name}: {sum(f.stat().st_size for f in st_files(d)) / MiB:.1f} MiB in "
                     f"{len(st_files(d))} file(s)")
        self.sizes = {m: sum(f.stat().st_size for f in st_files(self.mdir(m))) for m in self.models}

        only = set(a.only.split(",")) if a.only else set(LOADERS)
        threads = [int(x) for x in a.threads.split(",")]
        caches = a.caches.split(",")
        fmts = ["dense", "int4", "sparse24", "bitmask"]
        self.say("[2/4] ctstream")
        for model in fmts:
            for T in threads:
                for cache in caches:
                    for loader in ("ctstream", "ctstream-stream"):
                        if loader in only:
                            self.measure(loader, model, T, cache)
        if "ctstream" in only or "first" in only:
            for T in threads:
                for cache in caches:
                    for stream in (False, True):
                        self.measure_first_tensor(T, cache, stream)
        self.say("[3/4] Python loaders (one fresh process each)")
        self.py_ctstream = None
        if {"ctstream-py", "ctstream-py-out"} & only:
            r = subprocess.run([sys.executable, "-c", "import ctstream, os; print(os.path.dirname(ctstream.__file__))"],
                               capture_output=True, text=True)
            if r.returncode != 0:
                self.notes.append("ctstream Python module: `import ctstream` fails in the venv -- rows skipped: "
                                  + (r.stderr.strip().splitlines() or ["?"])[-1])
                only -= {"ctstream-py", "ctstream-py-out"}
            else:
                self.py_ctstream = r.stdout.strip()
        for T in threads:
            for cache in caches:
                for loader in ("safetensors", "runai", "fastsafetensors"):
                    if loader in only:
                        self.measure(loader, "dense", T, cache)
                for loader in ("ctstream-py", "ctstream-py-out"):
                    if loader in only:
                        for model in fmts:
                            self.measure(loader, model, T, cache)
        self.say(f"[4/4] compressed-tensors (the library's own decompression, warm, best of {self.a.lib_repeat})")
        if "ct-lib" in only:
            for model in ("int4", "sparse24", "bitmask"):
                for T in threads:
                    self.measure("ct-lib", model, T, "warm")
        self.load_end = os.getloadavg()
        self.total = time.perf_counter() - t_start
        md = self.render()
        print(md)
        (OUT / f"{self.prefix}results.json").write_text(json.dumps(
            dict(rows=self.rows, first_tensor=self.ft_rows, notes=self.notes, meta=self.meta()), indent=1,
                 default=str))
        if a.no_write or a.only or a.small:
            self.say(f"(not written to {RESULTS_MD}: --no-write / --only / --small)")
        else:
            write_section(md)
            self.say(f"wrote {RESULTS_MD} ({BEGIN} ... {END})")
        self.say(f"total {self.total / 60:.1f} min")

    # ---------------------------------------------------------------- report
    def meta(self):
        return dict(started=self.started.isoformat(), total=self.total, load_start=list(self.load_start),
                    busy_start=self.busy_start,
                    load_end=list(self.load_end), sizes=self.sizes, py_ctstream=self.py_ctstream,
                    argv=sys.argv[1:], ct=str(self.ct))

    def render_saved(self, path):
        """Re-renders a saved results JSON (no measurement)."""
        j = json.loads(Path(path).read_text())
        self.rows, self.ft_rows, self.notes = j["rows"], j["first_tensor"], j["notes"]
        m = j["meta"]
        self.started = datetime.datetime.fromisoformat(m["started"])
        self.total, self.load_start, self.load_end = m["total"], m["load_start"], m["load_end"]
        self.busy_start = m.get("busy_start")
        self.sizes, self.py_ctstream, self.ct = m["sizes"], m["py_ctstream"], Path(m["ct"])
        sys.argv[1:] = m["argv"]
        md = self.render()
        print(md)
        if not self.a.no_write:
            write_section(md)
            print(f"wrote {RESULTS_MD}")

    def find(self, loader, model, T, cache):
        for r in self.rows:
            if (r["loader"], r["model"], r["threads"], r["cache"]) == (loader, model, T, cache):
                return r
        return None

    def versions(self):
        def v(mod, py=sys.executable, path=None):
            pre = f"import sys; sys.path.insert(0, {str(path)!r}); " if path else ""
            r = subprocess.run([py, "-c", pre + f"import {mod} as m; print(m.__version__)"],
                               capture_output=True, text=True)
            return r.stdout.strip() if r.returncode == 0 else "not importable"
        out = {
            "python": platform.python_version(),
            "torch": v("torch"),
            "safetensors": v("safetensors"),
            "compressed-tensors": f"{v('compressed_tensors')} / {v('compressed_tensors', path=CT012_DIR)}",
            "runai-model-streamer": sh(f"{sys.executable} -m pip show runai-model-streamer 2>/dev/null | "
                                       "sed -n 's/^Version: //p'") or "not installed",
            "fastsafetensors": v("fastsafetensors"),
        }
        return out

    def render(self):
        a = self.a
        cpu = sh("lscpu | sed -n 's/^Model name:[ \\t]*//p'") or platform.processor()
        mem = int(re.search(r"MemTotal:\s+(\d+)", Path("/proc/meminfo").read_text()).group(1)) * 1024
        git = sh(f"cd {REPO} && git rev-parse --short HEAD")
        dirty = " + uncommitted changes" if sh(f"cd {REPO} && git status --porcelain -- src include tools loaders") else ""
        ver = sh(f"{self.ct} --version 2>&1 | head -1")
        vs = self.versions()
        cmdline = "bench/run_e2e.sh" + ("" if not sys.argv[1:] else " " + " ".join(sys.argv[1:]))
        L = []
        L.append("## End to end: loading a 2 GB model into bf16 caller memory, every loader on the same files")
        L.append("")
        L.append(f"Generated by `{cmdline}` (= `.venv/bin/python bench/e2e.py`) on "
                 f"{self.started:%Y-%m-%d %H:%M}, total run {self.total / 60:.1f} min. Machine: {cpu}, nproc "
                 f"{os.cpu_count()}, {mem / (1 << 30):.1f} GiB RAM, Linux {platform.release()}; 1-min load average "
                 f"at start / end {self.load_start[0]:.2f} / {self.load_end[0]:.2f}"
                 + (f"; CPU busy in the 3 s before the run: {self.busy_start * 100:.0f} %"
                    if self.busy_start is not None else "") + "."
                 + (" **The machine was not quiet when this started (other processes used more than 20 % of the "
                    "CPUs in the 3 s before it): the 2-thread rows and the ratios are unreliable; rerun on an idle "
                    "machine.**" if self.busy_start is not None and self.busy_start > 0.2 else ""))
        L.append(f"Versions: ctstream {ver.replace('ctstream ', '')} (build/bin/ctstream, git {git}{dirty}), "
                 + ", ".join(f"{k} {v}" for k, v in vs.items())
                 + (f", ctstream Python module from {self.py_ctstream}" if self.py_ctstream else "") + ".")
        L.append("")
        dense_out = next((r["output_bytes"] for r in self.rows if r["model"] == "dense"), None)
        self.n_tensors = next((r["tensors"] for r in self.rows if r["model"] == "dense" and r.get("tensors")), "?")
        self.largest = max((r.get("largest") or 0 for r in self.rows), default=0)
        L.append("Models (built by the writer, cached in bench/out/): "
                 + "; ".join(f"{m} = {FORMAT_LABEL[m]} {self.sizes[m] / MiB:.0f} MiB on disk"
                             for m in self.models if m != "t1000")
                 + (f"; every one decodes to the same {dense_out / 1e9:.3f} GB of bf16 ({self.n_tensors} tensors, largest "
                    f"{self.largest / MiB:.0f} MiB: embed_tokens / lm_head)" if dense_out else "")
                 + ". Generator: `ctstream synth --layers 20 --hidden 2048 --intermediate 5632 --vocab 32000 "
                   "--shards 2`; int4 = `compress --format pack-quantized --bits 4 --group-size 128`; 2:4 = "
                   "`--format sparse-24-bitmask --prune-24`; bitmask = `--format sparse-bitmask` of the 2:4-pruned "
                   "weights (50% zeros). Embeddings, norms and lm_head stay dense bf16 in every format.")
        L.append("")
        L.append(f"Time = best of {a.repeat} runs (compressed-tensors: best of {a.lib_repeat} after one untimed warm-up), each "
                 "from opening the files to the last tensor in caller memory. GB/s = bf16 output bytes / time. "
                 "Peak RSS = ru_maxrss of that loader's own fresh process (Python rows include the interpreter + "
                 "torch, and the caller's preallocated output tensors: the \"caller buffers\" column). "
                 "Ratio = this row's time / ctstream CLI (direct) time for the same format, threads and cache "
                 "state (> 1: ctstream is faster). *warm*: files read once by the parent, then one untimed load in "
                 "the same process before the timed ones. *cold*: before every timed run, fdatasync + "
                 "`posix_fadvise(DONTNEED)` on every file of the model (guest page cache dropped for clean pages: "
                 "the 'resident after evict' check below; the VM host may still cache the virtual disk).")
        L.append("")
        # ---- goals: one row per goal (and loader), one cell per (threads, cache)
        present = {(r["threads"], r["cache"]) for r in self.rows} | {(f["threads"], f["cache"]) for f in self.ft_rows}
        combos = [(T, c) for T in sorted({t for t, _ in present}) for c in ("warm", "cold") if (T, c) in present]
        L.append("### Goals")
        L.append("")
        L.append("Each cell: the measured ratio or value, then PASS / FAIL against the goal; — = not measured.")
        L.append("")
        L.append("| goal | " + " | ".join(f"{T}t {c}" for T, c in combos) + " |")
        L.append("|---|" + "---|" * len(combos))

        def speed_row(label, num, den, model_num, model_den, goal):
            cells = []
            for T, c in combos:
                a, b = self.find(num, model_num, T, c), self.find(den, model_den, T, c)
                if not (a and b):
                    cells.append("—")
                    continue
                ratio = a["best"] / b["best"]
                verdict = "" if goal is None else (" PASS" if ratio >= goal else " FAIL")
                cells.append(f"{ratio:.2f}× ({a['best']:.3f} / {b['best']:.3f} s){verdict}")
            if any(x != "—" for x in cells):
                L.append(f"| {label} | " + " | ".join(cells) + " |")

        for who in ("ctstream", "ctstream-stream", "ctstream-py-out", "ctstream-py"):
            speed_row(f"int4 → bf16 ≥ 2× faster than safetensors loading the dense bf16 model: {LOADER_LABEL[who]} "
                      "(safetensors dense time / int4 time)", "safetensors", who, "dense", "int4", 2)
        for who in ("ctstream", "ctstream-py-out"):
            speed_row(f"≥ 30× faster than the compressed-tensors library on int4: {LOADER_LABEL[who]} "
                      "(library time / ctstream time)", "ct-lib", who, "int4", "int4", 30)
        for model in ("sparse24", "bitmask"):
            speed_row(f"(no goal) {FORMAT_LABEL[model]}: library time / ctstream CLI (direct) time",
                      "ct-lib", "ctstream", model, model, None)
        for model in ("dense", "int4", "sparse24", "bitmask", "t1000"):
            cells = []
            for T, c in combos:
                if model == "t1000":
                    r = next((f for f in self.ft_rows if f["stream"] and f["threads"] == T and f["cache"] == c), None)
                else:
                    r = self.find("ctstream-stream", model, T, c)
                if not r:
                    cells.append("—")
                    continue
                lim = BUDGET_BYTES + r["largest"] + 64 * MiB
                cells.append(f"{r['peak_rss'] / MiB:.0f} MiB (limit {lim / MiB:.0f}) "
                             f"{'PASS' if r['peak_rss'] <= lim else 'FAIL'}")
            if any(x != "—" for x in cells):
                L.append(f"| peak RSS ≤ budget + largest tensor + 64 MiB, ctstream CLI `--budget {BUDGET}`: "
                         f"{FORMAT_LABEL[model]} | " + " | ".join(cells) + " |")
        for stream in (False, True):
            cells = []
            for T, c in combos:
                f = next((f for f in self.ft_rows if f["stream"] == stream and f["threads"] == T and f["cache"] == c), None)
                if not f:
                    cells.append("—")
                    continue
                cells.append(f"{f['median'] * 1e3:.2f} ms (min {min(f['first']) * 1e3:.2f}, max "
                             f"{max(f['first']) * 1e3:.2f}) {'PASS' if f['median'] < FIRST_TENSOR_GOAL_S else 'FAIL'}")
            n = self.ft_rows[0]["tensors"] if self.ft_rows else "?"
            L.append(f"| time to first tensor < 5 ms, {n}-tensor model, ctstream CLI "
                     f"{'stream' if stream else 'direct'} (open + first tensor; median of "
                     f"{max((len(f['first']) for f in self.ft_rows), default=0)} processes) | " + " | ".join(cells) + " |")
        L.append("")

        # ---- full table
        L.append("### All rows")
        L.append("")
        L.append("| loader | model / format | threads | cache | wall s (best of n) | output GB/s | first tensor ms | "
                 "peak RSS MiB | caller buffers MiB | ratio to ctstream |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        order = {l: i for i, l in enumerate(LOADERS)}
        fmt_order = {m: i for i, m in enumerate(["dense", "int4", "sparse24", "bitmask"])}
        for r in sorted(self.rows, key=lambda r: (fmt_order[r["model"]], r["threads"], r["cache"] != "warm",
                                                  order[r["loader"]])):
            base = self.find("ctstream", r["model"], r["threads"], r["cache"])
            ratio = f"{r['best'] / base['best']:.2f}" if base else "—"
            if r["loader"] == "ctstream":
                ratio = "1"
            ft = [x for x in r.get("first", []) if x is not None]
            L.append(f"| {LOADER_LABEL[r['loader']]} | {FORMAT_LABEL[r['model']]} | {r['threads']} | {r['cache']} | "
                     f"{r['best']:.3f} ({len(r['times'])}) | {r['output_bytes'] / r['best'] / 1e9:.2f} | "
                     f"{(min(ft) * 1e3):.1f} | {r['peak_rss'] / MiB:.0f} | "
                     f"{'—' if r['caller_bytes'] is None else '%.0f' % (r['caller_bytes'] / MiB)} | {ratio} |"
                     if ft else
                     f"| {LOADER_LABEL[r['loader']]} | {FORMAT_LABEL[r['model']]} | {r['threads']} | {r['cache']} | "
                     f"{r['best']:.3f} ({len(r['times'])}) | {r['output_bytes'] / r['best'] / 1e9:.2f} | — | "
                     f"{r['peak_rss'] / MiB:.0f} | "
                     f"{'— (library-owned)' if r['caller_bytes'] is None else '%.0f' % (r['caller_bytes'] / MiB)} | {ratio} |")
        L.append("")
        res = [x for r in self.rows for x in r.get("resident_after_evict", [])]
        res += [x for f in self.ft_rows for x in f.get("resident_after_evict", [])]
        if res:
            L.append(f"Resident after evict (fincore, summed over the model's files, every cold run): max "
                     f"{max(res) / MiB:.1f} MiB.")
        base = {}
        for r in self.rows:
            if r.get("baseline_rss"):
                base[r["loader"]] = max(base.get(r["loader"], 0), r["baseline_rss"])
        if base:
            L.append("Python process baseline included in their peak RSS (RSS after imports, before allocating "
                     "outputs, max over rows): " + ", ".join(f"{LOADER_LABEL[k]} {v / MiB:.0f} MiB"
                                                           for k, v in base.items()) + ".")
        ver = {}
        for r in self.rows:
            if r.get("verify"):
                ver.setdefault(r["verify"], []).append(f"{r['loader']}/{r['model']}")
        if ver:
            L.append("Output check (12 tensors spread over the model, after the timed runs, compared with what the "
                     "ctstream Python module decodes, int16 views): "
                     + "; ".join(f"{k}: {len(v)} rows" for k, v in ver.items()) + ".")
        L.append("First tensor: ctstream CLI = open + first tensor decoded (first_tensor_seconds); Python rows = "
                 "from the start of the timed load to the first tensor copied. The first tensor of these "
                 "models is embed_tokens (the largest).")
        L.append("`ctstream Python tensors()` is the module's streaming iterator (decode ahead on a worker "
                 "within the budget, each tensor a fresh array that the caller copy_()s into its own); "
                 "`get(out=)` decodes each tensor straight into the caller's tensor, one at a time.")
        L.append("Threads: ctstream `--threads T` decodes one tensor on T threads (stream mode adds one read-ahead "
                 "worker); Python rows: `torch.set_num_threads(T)` and OMP_NUM_THREADS=T; runai "
                 "RUNAI_STREAMER_CONCURRENCY=T; fastsafetensors max_threads=T; ctstream Python threads=T.")
        for n in self.notes:
            L.append("")
            L.append("Note: " + n)
        return "\n".join(L)


def write_section(md):
    text = RESULTS_MD.read_text() if RESULTS_MD.exists() else "# ctstream benchmark results\n"
    block = f"{BEGIN}\n{md}\n{END}"
    if BEGIN in text and END in text:
        pre, rest = text.split(BEGIN, 1)
        _, post = rest.split(END, 1)
        text = pre + block + post
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    RESULTS_MD.write_text(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--small", action="store_true", help="a ~230 MB model instead of 2.16 GiB (never written)")
    ap.add_argument("--only", help="comma list of: " + ",".join(LOADERS) + ",first (implies --no-write)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--caches", default="warm,cold")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per row (best is reported); default 3")
    ap.add_argument("--lib-repeat", type=int, default=3,
                    help="timed runs per compressed-tensors row (its times swing 4x run to run); default 3")
    ap.add_argument("--ft-repeat", type=int, default=7, help="processes per time-to-first-tensor row")
    ap.add_argument("--no-write", action="store_true")
    ap.add_argument("--render", metavar="RESULTS_JSON", help="only re-render a saved bench/out/e2e_results.json")
    a = ap.parse_args()
    if a.child:
        p = json.loads(a.child)
        res = child_main(p)
        Path(p["result"]).write_text(json.dumps(res))
        return
    if a.render:
        Bench(a).render_saved(a.render)
        return
    Bench(a).run()


if __name__ == "__main__":
    main()
