#!/usr/bin/env bash
# Decompression benchmark: ctstream vs the compressed-tensors library (see bench/python_reference.py).
#   bench/run_reference_bench.sh [python_reference.py options, e.g. --only nvfp4 --no-write]
# Builds ctstream (Release) if build/bin/ctstream is missing, then runs the benchmark with the venv
# python. Test checkpoints are cached in bench/out/ (git-ignored); results go to bench/RESULTS.md.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[[ -x $PY ]] || { echo "missing $PY: run tools/setup_python.sh" >&2; exit 1; }
if [[ ! -x build/bin/ctstream ]]; then
  cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j2
fi
exec "$PY" bench/python_reference.py "$@"
