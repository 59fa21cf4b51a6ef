#!/usr/bin/env bash
# vLLM load time / peak RSS, ctstream vs vLLM's loader (bench/vllm_load.py), on the e2e model:
#   bash bench/run_vllm_load.sh [MODELS_DIR]      (default bench/out/vllm; needs build/ and the vLLM venv)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
OUT=bench/out/vllm
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then OUT=$1; shift; fi
CT=build/bin/ctstream
VENV=${CTSTREAM_VLLM_VENV:-$HOME/.cache/ctstream/vllm-venv}
mkdir -p "$OUT"
[ -f "$OUT/dense/config.json" ] || "$CT" synth "$OUT/dense" --layers 20 --hidden 2048 --intermediate 5632 --vocab 32000 --shards 2 --dtype bf16
[ -f "$OUT/int4/config.json" ] || "$CT" compress "$OUT/dense" "$OUT/int4" --format pack-quantized --bits 4 --group-size 128 --quiet
echo "# $(date -u +%Y-%m-%dT%H:%MZ) $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
"$VENV/bin/python" bench/vllm_load.py "$OUT" "$@"
