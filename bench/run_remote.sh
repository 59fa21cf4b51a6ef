#!/usr/bin/env bash
# Loading from S3 (issue 29): ctstream vs Run:ai Model Streamer vs boto3 over `rclone serve s3` on
# loopback and through a rate-limited link (bench/remote_bench.py says what is timed).
#   bench/run_remote.sh [--repeat 2] [--rate 100M] [--budget 256M] [--skip KEY,...]
# Needs bench/out/e2e_{dense,int4,bitmask} (bench/run_e2e.sh builds them; /work/main/bench/out is
# searched too) and, if absent, builds bench/out/e2e_fp8 from the dense model with
# `ctstream compress --format float-quantized --strategy channel` (~1 min). Run:ai
# (runai-model-streamer + runai-model-streamer-s3 0.17.0) and boto3 go into .venv-bench/site
# (pip --target; torch / numpy come from the interpreter's own environment).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
[[ -x $PY ]] || PY=/work/main/.venv/bin/python
[[ -x $PY ]] || { echo "no Python with torch: set PY" >&2; exit 1; }
if [[ ${SKIP_BUILD:-0} != 1 || ! -x build/bin/ctstream ]]; then
  [[ -f build/CMakeCache.txt ]] || cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
  cmake --build build -j2 --target ctstream_cli
fi
if [[ ! -d .venv-bench/site/runai_model_streamer_s3 ]]; then
  "$PY" -m pip install --quiet --target .venv-bench/site --no-deps runai-model-streamer==0.17.0 \
    runai-model-streamer-s3==0.17.0 boto3 botocore s3transfer jmespath python-dateutil six urllib3 humanize
fi
dense=""
for d in bench/out/e2e_dense /work/main/bench/out/e2e_dense; do [[ -f $d/config.json ]] && { dense=$d; break; }; done
[[ -n $dense ]] || { echo "no e2e_dense model: run bench/run_e2e.sh first" >&2; exit 1; }
if [[ ! -f bench/out/e2e_fp8/config.json ]]; then
  build/bin/ctstream compress "$dense" bench/out/e2e_fp8 --format float-quantized --strategy channel --quiet --no-errors
fi
uptime
exec "$PY" bench/remote_bench.py "$@"
