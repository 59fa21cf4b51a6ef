#!/usr/bin/env bash
# Builds the libFuzzer target with clang (+ ASan/UBSan) into build-fuzz and fuzzes the whole
# open + decode path for ${1:-60} seconds from the fixture seed corpus. Exit 1 on any finding.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v clang++ >/dev/null || { bash tools/setup.sh; }
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCTSTREAM_FUZZ=ON \
  -DCTSTREAM_BUILD_TESTS=OFF -DCTSTREAM_BUILD_BENCH=OFF >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_checkpoint >/dev/null
corpus=build-fuzz/corpus
bash tests/fuzz/make_corpus.sh "$corpus"
mkdir -p build-fuzz/findings
build-fuzz/bin/fuzz_checkpoint -max_total_time="$secs" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
  -artifact_prefix=build-fuzz/findings/ -print_final_stats=1 "$corpus" 2>&1 | tail -n 12
