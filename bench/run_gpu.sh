#!/usr/bin/env bash
# GPU load benchmark, run on a GPU machine from tools/gpu_check.sh (binaries from .devpack/):
# builds the e2e models (bench/e2e.py's shapes: Llama-shaped, 20 layers, hidden 2048, 2.16 GiB
# dense bf16) with the ctstream CLI, then
#   ctstream_bench_cuda  every model decoded into device memory vs the host->device link, and
#   bench/gpu_peers.py   safetensors.torch.load_file(device="cuda") of the dense model (the peer).
#   bench/run_gpu.sh [WORKDIR] [--small]      (WORKDIR default /tmp/ctgpu; needs ~8 GB of disk)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-/tmp/ctgpu}
shift || true
bin=$here/.devpack/bin
ct=$bin/ctstream
mkdir -p "$work"
layers=20 hidden=2048 inter=5632
[[ ${1:-} == --small ]] && layers=2 hidden=512 inter=1408
t0=$(date +%s)
if [[ ! -f $work/dense/config.json ]]; then
  "$ct" synth "$work/dense" --layers $layers --hidden $hidden --intermediate $inter --vocab 32000 --shards 2
  q="--no-errors --quiet"
  "$ct" compress "$work/dense" "$work/int4" --format pack-quantized --bits 4 --group-size 128 $q
  "$ct" compress "$work/dense" "$work/fp8" --format float-quantized --strategy channel $q
  "$ct" compress "$work/dense" "$work/int8" --format int-quantized --strategy channel $q
  "$ct" compress "$work/dense" "$work/sparse24" --format sparse-24-bitmask --prune-24 $q
  mkdir -p "$work/pruned"
  "$ct" decompress "$work/sparse24" "$work/pruned/model.safetensors" --dtype bf16
  cp "$work/dense/config.json" "$work/pruned/"
  "$ct" compress "$work/pruned" "$work/bitmask" --format sparse-bitmask $q
  rm -rf "$work/pruned"
fi
echo "models built in $(($(date +%s) - t0)) s"; du -sh "$work"/*
models=()
for m in dense int4 fp8 int8 sparse24 bitmask; do models+=("$work/$m"); done
if [[ -x $bin/ctstream_bench_cuda_before ]]; then  # an A/B: the same bench linked against main before a change
  echo "== before"
  "$bin/ctstream_bench_cuda_before" --reps 3 "${models[@]}"
  echo
fi
echo "== ctstream_bench_cuda"
"$bin/ctstream_bench_cuda" --reps 5 "${models[@]}"
echo
echo "== one host thread (OMP_NUM_THREADS=1)"
OMP_NUM_THREADS=1 "$bin/ctstream_bench_cuda" --reps 5 "$work/int4" "$work/dense"
echo
echo "== IoMode::pread"
"$bin/ctstream_bench_cuda" --reps 5 --pread "$work/int4" "$work/dense"
echo
python3 "$here/bench/gpu_peers.py" "$work/dense" || echo "peer bench failed: $?"
