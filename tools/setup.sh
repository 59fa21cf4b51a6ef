#!/usr/bin/env bash
# Installs the system packages ctstream builds with (Debian 12), if any is missing.
# Needs root (or sudo) only when something is missing.
#   the build: compilers, CMake, Ninja, nlohmann-json, Catch2, Google Benchmark, RE2, PCRE2, OpenMP, Eigen
#   (GEMM and SVD for low-rank weights; header-only), libcurl (s3:// and https:// checkpoints, CTSTREAM_REMOTE)
#   ccache: tools/run_tests.sh compiles each of its four builds through it (a cache under ~/.cache)
#   clang + compiler-rt: the libFuzzer targets (tools/fuzz.sh); clang-format / clang-tidy: tools/lint.sh
#   the AArch64 cross toolchain + qemu-user + arm64 RE2 and PCRE2: tools/cross_aarch64.sh (amd64 hosts only;
#   CTSTREAM_NO_CROSS=1 skips it)
set -euo pipefail
pkgs=(build-essential cmake ninja-build nlohmann-json3-dev catch2 libbenchmark-dev libre2-dev libpcre2-dev libeigen3-dev python3-venv
      libcurl4-openssl-dev ccache
      clang libclang-rt-14-dev libomp-dev clang-format clang-tidy)
cross=0
if [ "$(dpkg --print-architecture)" = amd64 ] && [ "${CTSTREAM_NO_CROSS:-0}" != 1 ]; then
  cross=1
  pkgs+=(g++-aarch64-linux-gnu qemu-user libre2-dev:arm64 libpcre2-dev:arm64 libgomp1:arm64 libstdc++6:arm64)
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  if [ $cross = 1 ] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $SUDO dpkg --add-architecture arm64  # libre2-dev:arm64, libpcre2-dev:arm64 for the cross build
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
