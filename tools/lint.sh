#!/usr/bin/env bash
# Style and lint, as CI enforces them (part of tools/run_tests.sh):
#   1. clang-format (.clang-format) over every tracked C/C++ file: any difference fails;
#   2. clang-tidy (.clang-tidy: bug-prone patterns, needless copies; warnings are errors) over the
#      translation units of src/, tools/ and loaders/ in build/compile_commands.json.
#   tools/lint.sh --fix   reformats in place instead of checking (clang-tidy still only reports).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null && command -v clang-tidy >/dev/null || bash tools/setup.sh
mapfile -t files < <(git ls-files -co --exclude-standard '*.cpp' '*.hpp' '*.h' '*.c' '*.cu' '*.cuh')
if [ "${1:-}" = --fix ]; then
  clang-format -i "${files[@]}"
else
  clang-format --dry-run -Werror "${files[@]}"
  echo "clang-format: ${#files[@]} files formatted"
fi
[ -f build/compile_commands.json ] || bash tools/build.sh build >/dev/null
log=$(mktemp)
# CUDA sources (.cu) are left out of clang-tidy: their compile commands are nvcc's, which clang-tidy
# cannot replay; the per-element code they call (src/codecs/element.hpp) is checked through the
# C++ files that include it. tools/tidy_cached.py runs clang-tidy on each unit, except those it
# already passed with the same preprocessed text, flags, version and .clang-tidy (a cache under
# ~/.cache; CTSTREAM_TIDY_CACHE=off runs them all).
if ! python3 tools/tidy_cached.py build "^$PWD/(src|tools|loaders)/.*(?<!\.cu)$" --jobs "$(nproc)" \
    --extra-arg=-Wno-unknown-warning-option >"$log" 2>&1; then
  grep -E "(warning|error):" "$log" | sed 's/\x1b\[[0-9;]*m//g' | sort -u
  tail -n 1 "$log"
  echo "clang-tidy: findings above (config .clang-tidy)"; rm -f "$log"; exit 1
fi
tail -n 1 "$log"
rm -f "$log"
