#!/usr/bin/env python3
"""Loading from S3 (issue 29, step 14): ctstream vs Run:ai Model Streamer vs a plain boto3 GET, on
bench/e2e.py's generated 2.16 GiB Llama-shaped model (dense bf16) and its int4 / fp8 / bitmask
versions, served by `rclone serve s3` on loopback (optionally through bench/rate_proxy.py: a
throttled link). Each figure is one fresh process: time until every tensor is in the caller's
memory (for ctstream: decoded to bf16), and that process's peak RSS (ru_maxrss from wait4).

  ctstream  build/bin/ctstream bench s3://bkt/MODEL --json --dtype bf16 --budget B (a Stream: read
            ahead within CTSTREAM_S3_PREFETCH_BYTES, decode, copy each item into one caller
            buffer of the largest tensor's size); open included
  runai     runai_model_streamer.SafetensorsStreamer().stream_files([s3://...shards], device="cpu"),
            every tensor copy_'d into one caller buffer of the largest tensor's size
  boto3     get_object(...)["Body"].read(8 MiB) until the end, one object after another (raw
            bytes only: no tensors)
  --tp      ctstream bench --tp R/2 (--tp-dim 0 rows, 1 columns): bytes fetched per rank

Run through bench/run_remote.sh (it sets up the Run:ai / boto3 packages). Prints a markdown table
and writes bench/out/remote_results.json.
"""
import argparse
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEY, SECRET = "bench-key", "bench-secret"


def child(p):
    """Runs one loader in this (fresh) process; prints a JSON line."""
    import torch

    urls, largest = p["urls"], p["largest"]
    buf = torch.empty(largest // 2, dtype=torch.bfloat16)  # the caller's memory, as ctstream bench
    buf.zero_()
    t0 = time.perf_counter()
    n_bytes = n_tensors = 0
    if p["loader"] == "runai":
        from runai_model_streamer import SafetensorsStreamer

        with SafetensorsStreamer() as s:
            s.stream_files(urls, device="cpu")
            for _, t in s.get_tensors():
                flat = t.reshape(-1).view(torch.uint8)
                buf.view(torch.uint8)[: flat.numel()].copy_(flat)
                n_bytes += flat.numel()
                n_tensors += 1
    elif p["loader"] == "boto3":
        import boto3
        from botocore.config import Config

        c = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"],
                         config=Config(s3={"addressing_style": "path"}))
        for u in urls:
            bucket, key = u[len("s3://"):].split("/", 1)
            body = c.get_object(Bucket=bucket, Key=key)["Body"]
            while True:
                b = body.read(8 << 20)
                if not b:
                    break
                n_bytes += len(b)
    secs = time.perf_counter() - t0
    print(json.dumps(dict(seconds=secs, bytes=n_bytes, tensors=n_tensors,
                          maxrss=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)))


def maxrss_of(cmd, env):
    """Runs cmd; returns (stdout, peak RSS bytes, wall seconds) using wait4 on its pid."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        pr = subprocess.Popen(cmd, env=env, stdout=fo, stderr=fe)
        _, status, ru = os.wait4(pr.pid, 0)
        pr.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - t0
        fo.seek(0), fe.seek(0)
        out, err = fo.read(), fe.read()
    if pr.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: rc {pr.returncode}: {err[-2000:]}")
    return out, ru.ru_maxrss * 1024, wall


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, what):
    for _ in range(200):
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited: rc {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


def shards(d: Path):
    idx = d / "model.safetensors.index.json"
    if idx.exists():
        return sorted(set(json.loads(idx.read_text())["weight_map"].values()))
    return sorted(p.name for p in d.glob("*.safetensors"))


def largest_tensor_bytes(d: Path):
    """Largest dense bf16 tensor (Run:ai / the caller buffer); ctstream reports its own."""
    best = 0
    for f in shards(d):
        with open(d / f, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            h = json.loads(fh.read(n))
        for k, v in h.items():
            if k != "__metadata__":
                best = max(best, v["data_offsets"][1] - v["data_offsets"][0])
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--models", nargs="*", default=[str(ROOT / "bench/out"), "/work/main/bench/out"],
                    help="folders searched for e2e_dense, e2e_int4, e2e_fp8, e2e_bitmask")
    ap.add_argument("--ctstream", default=str(ROOT / "build/bin/ctstream"))
    ap.add_argument("--budget", default="256MiB", help="ctstream Stream budget")
    ap.add_argument("--rate", default="100M", help="throttled-link rows: bytes/s through rate_proxy.py ('' skips)")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each row (interleaved); the best is shown")
    ap.add_argument("--skip", default="", help="comma list of row keys to skip")
    a = ap.parse_args()
    if a.child:
        return child(json.loads(a.child))

    models = {}
    for name in ("dense", "int4", "fp8", "bitmask"):
        for base in a.models:
            d = Path(base) / f"e2e_{name}"
            if (d / "config.json").exists() and shards(d):
                models[name] = d
                break
    if "dense" not in models:
        sys.exit("no e2e_dense model found: run bench/run_e2e.sh once (it builds bench/out/e2e_*)")
    rclone = os.environ.get("CTSTREAM_RCLONE") or next(
        (str(p) for p in (ROOT / ".venv/bin/rclone", Path("/work/main/.venv/bin/rclone")) if p.exists()),
        shutil.which("rclone"))
    if not rclone:
        sys.exit("rclone not found (CTSTREAM_RCLONE)")

    root = Path(tempfile.mkdtemp(prefix="ctstream-remote-bench-"))
    (root / "bkt").mkdir()
    for name, d in models.items():
        (root / "bkt" / name).symlink_to(d.resolve())
    port = free_port()
    # rclone's ETag is the object's MD5 (ctstream refuses the empty `""` of --etag-hash ''): it
    # hashes each file on its first request; every object is requested once before timing.
    procs = []
    try:
        srv = subprocess.Popen([rclone, "serve", "s3", "--addr", f"127.0.0.1:{port}", "--auth-key", f"{KEY},{SECRET}",
                                "--config", "/dev/null", "--copy-links", "--dir-cache-time", "1h",
                                # rclone's VFS would hold a read not at a handle's current offset up
                                # to 20 ms for an in-sequence one (ranged GETs in flight at once)
                                "--vfs-read-wait", "0s",
                                "--log-level", "ERROR", str(root)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
        procs.append(srv)
        wait_port(port, srv, "rclone")
        endpoints = {"loopback": f"http://127.0.0.1:{port}"}
        for m in models:  # untimed: rclone hashes each object on its first request
            subprocess.run([a.ctstream, "inspect", f"s3://bkt/{m}"], env=dict(
                os.environ, AWS_ENDPOINT_URL=endpoints["loopback"], AWS_ACCESS_KEY_ID=KEY,
                AWS_SECRET_ACCESS_KEY=SECRET, AWS_REGION="us-east-1"), stdout=subprocess.DEVNULL, check=True)
        if a.rate:
            pport = free_port()
            px = subprocess.Popen([sys.executable, str(ROOT / "bench/rate_proxy.py"), "--listen", str(pport),
                                   "--target", f"127.0.0.1:{port}", "--rate", a.rate], stdout=subprocess.DEVNULL)
            procs.append(px)
            wait_port(pport, px, "rate_proxy")
            endpoints[f"{a.rate}B/s"] = f"http://127.0.0.1:{pport}"

        def env_for(ep):
            return dict(os.environ, AWS_ENDPOINT_URL=ep, AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET,
                        AWS_REGION="us-east-1", AWS_DEFAULT_REGION="us-east-1", AWS_EC2_METADATA_DISABLED="true",
                        RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING="0", AWS_SHARED_CREDENTIALS_FILE="/nonexistent/aws/credentials",
                        AWS_CONFIG_FILE="/nonexistent/aws/config",
                        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / ".venv-bench/site"),
                                                                 os.environ.get("PYTHONPATH")])))

        def file_bytes(m):
            return sum((models[m] / f).stat().st_size for f in shards(models[m]))

        rows = []  # (key, link, loader, model, cmd-maker)
        for link, ep in endpoints.items():
            throttled = link != "loopback"
            for m in (["dense"] if throttled else ["dense"]):
                rows.append((f"boto3-{m}-{link}", link, "boto3 GET (raw bytes)", m, ep))
                rows.append((f"runai-{m}-{link}", link, "Run:ai streamer", m, ep))
            for m in (["dense", "int4"] if throttled else ["dense", "int4", "fp8", "bitmask"]):
                if m in models:
                    rows.append((f"ctstream-{m}-{link}", link, "ctstream (stream)", m, ep))
        if not a.skip or "tp" not in a.skip.split(","):
            for m in ("dense", "int4"):
                for dim in (0, 1):
                    for r in (0, 1):
                        if m in models:
                            rows.append((f"tp-{m}-d{dim}-r{r}", "loopback", f"ctstream TP rank {r}/2 dim {dim}", m,
                                         endpoints["loopback"]))
        skip = set(filter(None, a.skip.split(",")))
        rows = [r for r in rows if r[0] not in skip]

        results = {}
        for rep in range(a.repeat):
            for key, link, loader, m, ep in rows:
                env = env_for(ep)
                d = models[m]
                url = f"s3://bkt/{m}"
                if key.startswith(("ctstream", "tp")):
                    cmd = [a.ctstream, "bench", url, "--json", "--dtype", "bf16"]
                    if key.startswith("tp"):
                        dim, r = key.split("-")[2][1:], key.split("-")[3][1:]
                        cmd += ["--tp", f"{r}/2", "--tp-dim", dim]
                    else:
                        cmd += ["--budget", a.budget]
                    out, rss, wall = maxrss_of(cmd, env)
                    j = json.loads(out)
                    res = dict(seconds=j["open_seconds"] + j["load_seconds"], wall=wall, rss=rss,
                               out_bytes=j["output_bytes"], largest=j["largest_tensor_bytes"],
                               budget=j.get("budget_bytes"), remote=j.get("remote"), tensors=j["tensors"])
                else:
                    p = dict(loader=key.split("-")[0], urls=[f"{url}/{f}" for f in shards(d)],
                             largest=largest_tensor_bytes(d))
                    out, rss, wall = maxrss_of([sys.executable, __file__, "--child", json.dumps(p)], env)
                    j = json.loads(out.strip().splitlines()[-1])
                    res = dict(seconds=j["seconds"], wall=wall, rss=rss, out_bytes=j["bytes"], tensors=j["tensors"])
                res.update(link=link, loader=loader, model=m, file_bytes=file_bytes(m))
                print(f"[{rep + 1}/{a.repeat}] {key}: {res['seconds']:.2f} s, RSS {rss / 2**20:.0f} MiB", flush=True)
                if key not in results or res["seconds"] < results[key]["seconds"]:
                    results[key] = res
    finally:
        for p in reversed(procs):
            p.terminate()
            p.wait()
        shutil.rmtree(root, ignore_errors=True)

    (ROOT / "bench/out").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench/out/remote_results.json").write_text(json.dumps(results, indent=1))
    mib = 2 ** 20
    print("\n| link | loader | model | file | time (s) | file GB/s | output GB/s | peak RSS (MiB) | RSS bound (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for key, r in results.items():
        if key.startswith("tp"):
            continue
        bound = ""
        if r.get("budget"):
            bound = f"{(r['budget'] + r['largest']) / mib + 64:.0f}"
        print(f"| {r['link']} | {r['loader']} | {r['model']} | {r['file_bytes'] / 2**30:.2f} GiB | {r['seconds']:.2f} | "
              f"{r['file_bytes'] / r['seconds'] / 1e9:.2f} | {r['out_bytes'] / r['seconds'] / 1e9:.2f} | "
              f"{r['rss'] / mib:.0f} | {bound} |")
    tp = {k: r for k, r in results.items() if k.startswith("tp")}
    if tp:
        print("\n| model | slice | rank | fetched | of file | requests | time (s) |")
        print("|---|---|---|---|---|---|---|")
        for key, r in tp.items():
            _, m, d, rk = key.split("-")
            rem = r["remote"] or {}
            print(f"| {m} | {'rows' if d == 'd0' else 'columns'} | {rk[1:]}/2 | {rem.get('bytes_fetched', 0) / mib:.0f} MiB | "
                  f"{rem.get('bytes_fetched', 0) / max(1, rem.get('file_bytes', 1)):.3f} | {rem.get('requests')} | "
                  f"{r['seconds']:.2f} |")


if __name__ == "__main__":
    main()
