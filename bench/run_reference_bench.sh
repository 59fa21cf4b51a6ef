#!/usr/bin/env bash
# Decompression benchmark: ctstream vs the compressed-tensors library (see bench/python_reference.py).
#   bench/run_reference_bench.sh [python_reference.py options, e.g. --only nvfp4 --no-write]
# Configures build/ (Release) if it is not configured yet, brings build/bin/ctstream up to date
# (incremental; SKIP_BUILD=1 skips this when build/bin/ctstream exists), then runs the benchmark with
# the venv python. Test checkpoints are cached in bench/out/ (git-ignored); results go to
# bench/RESULTS.md (section between <!-- reference-decode:begin/end -->). Full run: ~3-5 min on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[[ -x $PY ]] || { echo "missing $PY: run tools/setup_python.sh" >&2; exit 1; }
if [[ ${SKIP_BUILD:-0} != 1 || ! -x build/bin/ctstream ]]; then
  [[ -f build/CMakeCache.txt ]] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j2 --target ctstream_cli
fi
exec "$PY" bench/python_reference.py "$@"
