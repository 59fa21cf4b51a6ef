#!/usr/bin/env bash
# Installs the system packages ctstream builds with (Debian 12), if any is missing.
# Needs root (or sudo) only when something is missing.
set -euo pipefail
pkgs=(build-essential cmake nlohmann-json3-dev catch2 libbenchmark-dev libre2-dev python3-venv
      clang libclang-rt-14-dev libomp-dev)  # clang + compiler-rt: the libFuzzer targets (tools/fuzz.sh)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
