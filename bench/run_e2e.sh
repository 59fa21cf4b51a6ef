#!/usr/bin/env bash
# End-to-end load benchmark: ctstream vs safetensors, compressed-tensors, runai-model-streamer and
# fastsafetensors on the same generated 2.16 GiB Llama-shaped model and its int4 / 2:4 / bitmask
# versions (see bench/e2e.py for exactly what is timed).
#   bench/run_e2e.sh                 # full run, writes bench/RESULTS.md (section <!-- e2e:begin/end -->)
#   bench/run_e2e.sh --small         # ~230 MB model, quick pipeline check, writes nothing
#   bench/run_e2e.sh --only ctstream,safetensors --threads 1 --caches warm   (writes nothing)
# Configures build/ (Release) if needed and brings build/bin/ctstream up to date (incremental;
# SKIP_BUILD=1 skips this when build/bin/ctstream exists); installs the peer loaders into .venv when
# missing (versions pinned below: the ones the script was written against). Models are cached in
# bench/out/ (git-ignored); the first run also builds them (~3 min). Full run ~15-20 min on 2 cores:
# run it on a quiet machine, nothing else competes for the cores in these timings.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
[[ -x $PY ]] || { echo "missing $PY: run tools/setup_python.sh first" >&2; exit 1; }
if [[ ${SKIP_BUILD:-0} != 1 || ! -x build/bin/ctstream ]]; then
  [[ -f build/CMakeCache.txt ]] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j2 --target ctstream_cli
fi
for spec in runai_model_streamer=runai-model-streamer==0.17.0 fastsafetensors=fastsafetensors==0.5.0; do
  mod=${spec%%=*}
  "$PY" -c "import $mod" 2>/dev/null || "$PY" -m pip install --quiet "${spec#*=}"
done
command -v fincore >/dev/null || echo "note: fincore (util-linux) missing: cold runs will not report residency" >&2
exec "$PY" bench/e2e.py "$@"
