#!/usr/bin/env bash
# Packaging test: `cmake --install` the build tree into a temporary prefix, then build against it
#  - loaders/examples (find_package(ctstream); ctstream::ctstream from C++, ctstream::ctstream_c from C)
#  - tests/consumer/c_only (a project that enables only C)
# and run them on a fixture: the C and C++ examples print the same lines, one per tensor.
#   run.sh BUILD_DIR
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$ROOT/build}" && pwd)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
step() {  # step DESC cmd...
  local desc=$1; shift
  if "$@" >"$TMP/log" 2>&1; then ok; else bad "$desc"; tail -30 "$TMP/log"; echo "consumer: $pass passed, $fail failed"; exit 1; fi
}
step "cmake --install" cmake --install "$BUILD" --prefix "$TMP/prefix"
for f in include/ctstream/ctstream.hpp include/ctstream.h lib/cmake/ctstream/ctstreamConfig.cmake bin/ctstream; do
  [ -e "$TMP/prefix/$f" ] && ok || bad "installed $f missing"
done
# The writer is a target of its own (ctstream::ctstream_writer); a reader-only program links none of it.
grep -q "ctstream::ctstream_writer" "$TMP/prefix/lib/cmake/ctstream/ctstreamTargets.cmake" && ok || bad "ctstream::ctstream_writer not exported"
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
step "configure loaders/examples" cmake -S "$ROOT/loaders/examples" -B "$TMP/ex" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$TMP/prefix" -DCMAKE_BUILD_TYPE=Release
step "build loaders/examples" cmake --build "$TMP/ex" -j2
step "configure C-only consumer" cmake -S "$ROOT/tests/consumer/c_only" -B "$TMP/c" "${gen[@]}" \
  -DCMAKE_PREFIX_PATH="$TMP/prefix" -DCMAKE_BUILD_TYPE=Release
step "build C-only consumer" cmake --build "$TMP/c" -j2

if nm -C "$TMP/ex/example_cpp" | grep -Eq "ctstream::compress_checkpoint|BDCSVD"; then bad "the reader-only example_cpp links the writer"; else ok; fi

MODEL=$ROOT/tests/fixtures/ct/v020_mixed_int4g32_fp8ch_bf16
export OMP_NUM_THREADS=2
step "example_cpp" "$TMP/ex/example_cpp" "$MODEL"; cp "$TMP/log" "$TMP/cpp.out"
"$TMP/ex/example_c" "$MODEL" >"$TMP/c.out" && ok || bad "example_c"
"$TMP/c/example_c" "$MODEL" >"$TMP/c_only.out" && ok || bad "C-only example_c"
grep -v '^shard of' "$TMP/cpp.out" >"$TMP/cpp.lines"
cmp -s "$TMP/cpp.lines" "$TMP/c.out" && ok || { bad "C and C++ examples differ"; diff "$TMP/cpp.lines" "$TMP/c.out" | head; }
cmp -s "$TMP/c.out" "$TMP/c_only.out" && ok || bad "C-only consumer output differs"
n=$("$TMP/prefix/bin/ctstream" inspect "$MODEL" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["totals"]["tensors"])')
grep -qx "$n tensors" "$TMP/c.out" && ok || bad "example_c did not list $n tensors"
grep -q "pack-quantized" "$TMP/c.out" && grep -q "float-quantized" "$TMP/c.out" && ok || bad "formats missing in output"
rc=0; "$TMP/ex/example_c" "$ROOT/tests/fixtures/no/such/model" >/dev/null 2>"$TMP/err" || rc=$?
[ "$rc" = 1 ] && grep -q "error:" "$TMP/err" && ok || bad "example_c on a missing model: exit $rc"
echo "consumer: $pass passed, $fail failed"
[ "$fail" = 0 ]
