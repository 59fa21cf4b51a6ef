#!/usr/bin/env bash
# Interleaved A/B of two ctstream binaries loading the same models (`ctstream bench`, best of 3 in
# one process), pair by pair: A B A B ... so that a drift of the machine's speed hits both alike.
#   bench/ab_loads.sh BEFORE_CLI AFTER_CLI [PAIRS=7] [THREADS="1 2"] [MODELS="e2e_int4 ..."]
# Models are the e2e ones (bench/run_e2e.sh builds them into bench/out/). Prints one line per
# model and thread count: each side's median and the median (min-max) of the per-pair ratios.
set -euo pipefail
A=$1 B=$2
PAIRS=${3:-7}
THREADS=${THREADS:-1 2}
MODELS=${MODELS:-e2e_int4 e2e_bitmask e2e_sparse24 e2e_dense}
cd "$(dirname "$0")/out"
load() { "$1" bench "$2" --threads "$3" --repeat 3 2>&1 | grep -o 'load [0-9.]* s' | awk '{print $2}'; }
for m in $MODELS; do
  for t in $THREADS; do
    for _ in $(seq "$PAIRS"); do echo "$(load "$A" "$m" "$t") $(load "$B" "$m" "$t")"; done |
      python3 -c '
import statistics, sys
p = [tuple(map(float, l.split())) for l in sys.stdin]
r = [b / a for a, b in p]
print(f"{sys.argv[1]:14s} t{sys.argv[2]}  before {statistics.median(a for a, _ in p) * 1e3:6.1f} ms  "
      f"after {statistics.median(b for _, b in p) * 1e3:6.1f} ms  after/before {statistics.median(r):.3f} "
      f"[{min(r):.2f}-{max(r):.2f}] n={len(r)}")' "$m" "$t"
  done
done
