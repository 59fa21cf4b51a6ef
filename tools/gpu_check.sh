#!/usr/bin/env bash
# The CUDA checks on a lent GPU machine (the `device` tool; see HACKING.md "GPU").
#
#   bash tools/gpu_check.sh pack      # here: copy the CUDA build's binaries and their shared
#                                     # libraries into .devpack.tgz (git-ignored via .git/info/exclude)
#   bash tools/gpu_check.sh run [--small]   # there (run with carry [".devpack.tgz"]): the device
#                                     # tests, the same under compute-sanitizer, then bench/run_gpu.sh
#   FILTER=... bash tools/gpu_check.sh kernels  # there: the CPU kernel bench on two quiet cores
#   FILTER=... ROUNDS=3 bash tools/gpu_check.sh ab  # there: alternating passes of every kernel
#                                     # binary into one file; here: python3 bench/ab_compare.py ab.txt
#   bash tools/gpu_check.sh cold      # there: bench/cold_loads.py on two cores, every ctstream_cold_*
#                                     # binary (or wrapper script) in .devpack/bin as one A/B side
#
# The GPU machine has nvcc and CMake but none of our Debian packages (nlohmann-json, Catch2,
# PCRE2, libcurl) and no network, so the binaries are built here (x86-64, nvcc 13, sm_80 + sm_90)
# and travel with their libraries. The tests find the fixtures by the absolute path they were
# built with; `run` links that path to this checkout.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
# There: the carried binaries unpacked once, their libraries first on the loader's path.
unpack() {
  [[ -d $here/.devpack ]] || tar -C "$here" -xzf "$here/.devpack.tgz"
  export LD_LIBRARY_PATH=$here/.devpack/lib
}
# There, for the CPU benches: $out made, the binaries unpacked, the CPU named, and $cpus = two
# CPUs of distinct cores as the guest sees them (a 2-vCPU machine's pair).
on_two_cores() {
  out=${OUT:-/tmp/gpu_out}
  mkdir -p "$out"
  unpack
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|L3' || true
  cpus=$(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -u | head -2 | cut -d, -f1 | paste -sd,)
  echo "pinned to CPUs $cpus (distinct cores)"
}
shift || true
case "$mode" in
pack)
  build=${BUILD:-$here/build}
  rm -rf "$here/.devpack" && mkdir -p "$here/.devpack/bin" "$here/.devpack/lib"
  for b in ctstream ctstream_cuda_tests ctstream_bench_cuda ctstream_bench_kernels; do
    [[ -x $build/bin/$b ]] && cp "$build/bin/$b" "$here/.devpack/bin/"
  done
  # EXTRA="PATH=NAME ...": more files for .devpack/bin (an A/B's other binary, a wrapper script).
  for x in ${EXTRA:-}; do cp "${x%%=*}" "$here/.devpack/bin/${x##*=}"; done
  # Every shared library but glibc's own (the GPU machine's glibc is newer than Debian 12's).
  for l in $(ldd "$here"/.devpack/bin/* 2>/dev/null | awk '/=>/ {print $3}' | sort -u); do
    case $(basename "$l") in libc.so* | libm.so* | libresolv* | ld-linux* | libpthread* | libdl*) ;;
    *) cp -L "$l" "$here/.devpack/lib/" ;;
    esac
  done
  # The fixtures' absolute path as the tests were compiled with it (any generator: the compile
  # database is exported by the top-level CMakeLists).
  grep -o 'CTSTREAM_FIXTURES=[^ ]*' "$build/compile_commands.json" | head -1 |
    sed 's/\\//g; s/^CTSTREAM_FIXTURES=//; s/"//g' >"$here/.devpack/fixtures_path"
  # The working tree travels as a tar of tracked files (~39 MB with the fixtures' block padding)
  # under a 64 MiB limit: the binaries travel compressed.
  tar -C "$here" -czf "$here/.devpack.tgz" .devpack
  du -sh "$here/.devpack.tgz"
  ;;
run)
  out=${OUT:-/tmp/gpu_out}
  mkdir -p "$out"
  unpack
  fx=$(cat "$here/.devpack/fixtures_path")
  if [[ ! -e $fx ]]; then
    root=$(dirname "$(dirname "$fx")")  # <checkout>/tests/fixtures -> <checkout>
    mkdir -p "$(dirname "$root")"
    ln -sfn "$here" "$root"
  fi
  nvidia-smi -L || true
  rc=0
  echo "== device tests"
  (cd "$here" && timeout 300 .devpack/bin/ctstream_cuda_tests --reporter compact --durations yes 2>&1 | tee "$out/cuda_tests.log") || rc=1
  echo "== device tests under compute-sanitizer memcheck ([moe] and [dense])"
  if command -v compute-sanitizer >/dev/null; then
    (cd "$here" && timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 \
      .devpack/bin/ctstream_cuda_tests "[moe],[dense]" --reporter compact 2>&1 | tail -30 | tee "$out/memcheck.log") || rc=1
  fi
  if [[ -x $here/.devpack/bin/ctstream_bench_cuda ]]; then
    echo "== GPU bench (bench/run_gpu.sh)"
    (cd "$here" && timeout 400 bash bench/run_gpu.sh /tmp/ctgpu "$@" 2>&1 | tee "$out/bench_gpu.log") || rc=1
  fi
  exit $rc
  ;;
kernels)
  # The CPU kernel benchmark on the GPU machine's quiet Xeon, two distinct physical cores: each
  # ctstream_bench_kernels* in .devpack/bin (e.g. a _before copy for an A/B), the AVX-512 rows.
  on_two_cores
  filter=${FILTER:-'BM_memset|BM_dequant.*_avx512|BM_bitmask.*_avx512'}
  for b in "$here"/.devpack/bin/ctstream_bench_kernels*; do
    echo "== $(basename "$b")"
    taskset -c "$cpus" "$b" --benchmark_filter="$filter" --benchmark_min_time=0.2 --benchmark_repetitions=3 \
      --benchmark_report_aggregates_only=true 2>&1 | sed -n '/^roofline/,$p' | tee "$out/$(basename "$b").txt"
  done
  ;;
ab)
  # An A/B of kernel binaries on the Xeon: every ctstream_bench_kernels* in .devpack/bin, ROUNDS
  # (default 3) alternating passes of FILTER, all in one file ($OUT/ab.txt: the device tool brings
  # back only a few files a call), read here with `python3 bench/ab_compare.py ab.txt`.
  on_two_cores
  for r in $(seq 1 "${ROUNDS:-3}"); do
    for b in "$here"/.devpack/bin/ctstream_bench_kernels*; do
      echo "== $(basename "$b") $r"
      taskset -c "$cpus" "$b" --benchmark_filter="${FILTER:?FILTER=regex}" --benchmark_min_time="${MIN_TIME:-0.3}" 2>&1 |
        sed 's/\x1b\[[0-9;]*m//g' | sed -n '/^roofline/,$p'
    done
  done >"$out/ab.txt"
  ;;
cold)
  # Cold loads against the read limit (bench/cold_loads.py) on two distinct cores of the GPU
  # machine's host, as on a 2-vCPU machine: the small (4 layers, hidden 1024) and ~1 GB (20
  # layers, hidden 2048) models as int4 g128, fp8 channel and bitmask (2:4-pruned), built here.
  on_two_cores
  ct=$here/.devpack/bin/ctstream
  df -h /tmp | tail -1
  work=/tmp/ctcold
  t0=$(date +%s)
  for size in small full; do
    if [[ $size == small ]]; then shape="--layers 4 --hidden 1024 --intermediate 2816"; else shape="--layers 20 --hidden 2048 --intermediate 5632"; fi
    d=$work/${size}_dense q="--no-errors --quiet"
    # shellcheck disable=SC2086
    [[ -f $d/config.json ]] || "$ct" synth "$d" $shape --vocab 32000 --shards 1 >/dev/null
    "$ct" compress "$d" "$work/${size}_int4" --format pack-quantized --bits 4 --group-size 128 $q
    "$ct" compress "$d" "$work/${size}_fp8" --format float-quantized --strategy channel $q
    "$ct" compress "$d" "$work/${size}_24" --format sparse-24-bitmask --prune-24 $q
    mkdir -p "$work/pruned" && "$ct" decompress "$work/${size}_24" "$work/pruned/model.safetensors" --dtype bf16 >/dev/null
    cp "$d/config.json" "$work/pruned/"
    "$ct" compress "$work/pruned" "$work/${size}_bitmask" --format sparse-bitmask $q
    rm -rf "$work/pruned" "$work/${size}_24" "$d"
  done
  echo "models built in $(($(date +%s) - t0)) s, pinned to CPUs $cpus"
  du -sh "$work"/*
  sides=()
  for b in "$here"/.devpack/bin/ctstream_cold_*; do sides+=(--ctstream "$b=${b##*/ctstream_cold_}"); done
  taskset -c "$cpus" python3 "$here/bench/cold_loads.py" "$work"/small_{int4,fp8,bitmask} "$work"/full_{int4,fp8,bitmask} \
    "${sides[@]}" --runs "${RUNS:-5}" 2>&1 | tee "$out/cold.txt"
  ;;
*)
  echo "usage: $0 pack|run|kernels|ab|cold" >&2
  exit 2
  ;;
esac
