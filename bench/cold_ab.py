"""Cold-load A/B of several ctstream binaries on one model: many alternating rounds, min and median.

    python3 bench/cold_ab.py MODEL_DIR --ctstream BIN[=LABEL]... [--threads 1,2] [--rounds 20]

Each round evicts the model's .safetensors files (fdatasync + POSIX_FADV_DONTNEED, as
bench/cold_loads.py) before every load and runs `ctstream bench MODEL --cold --threads T` once per
binary and thread count, the binaries alternating. Prints the load seconds' min and median per
binary and thread count, and the median system CPU time of the loads. On a VM whose host caches
the disk image, single cold loads vary by more than most changes to the cold path
(bench/RESULTS.md, "Cold loads: the read limit itself"); the median of many alternating rounds is
what can tell two binaries apart. bench/cold_loads.py gives the issue's figure (best of N against
the read limit).
"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from e2e import evict, st_files


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("--ctstream", action="append", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    bins = []
    for spec in a.ctstream:
        path, _, label = spec.partition("=")
        bins.append((path, label or Path(path).name))
    threads = [int(t) for t in a.threads.split(",")]
    paths = st_files(a.model)
    loads, sys_s = {}, {}
    for _ in range(a.rounds):
        for t in threads:
            for path, label in bins:
                evict(paths)
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime
                out = subprocess.run([path, "bench", str(a.model), "--threads", str(t), "--cold", "--json"],
                                     check=True, capture_output=True, text=True).stdout
                sys_s.setdefault((label, t), []).append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime - r0)
                loads.setdefault((label, t), []).append(json.loads(out)["load_seconds"])
    print(f"{a.model.name}, {a.rounds} alternating rounds")
    print("| binary | threads | min s | median s | median system CPU s |")
    print("|---|---|---|---|---|")
    for (label, t), v in loads.items():
        print(f"| {label} | {t} | {min(v):.3f} | {statistics.median(v):.3f} | "
              f"{statistics.median(sys_s[(label, t)]):.3f} |")


if __name__ == "__main__":
    sys.exit(main())
