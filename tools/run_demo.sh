#!/usr/bin/env bash
# One command for a new user: installs what is missing, builds, and runs the default job
# (`ctstream demo`: generate a dense Llama-shaped model, write int4 / fp8 / sparse-bitmask versions
# with the writer, stream each back into one reused buffer, check every value against the dense
# original, print size ratio, decode GB/s next to memcpy, time to first tensor and peak RSS).
set -euo pipefail
cd "$(dirname "$0")/.."
CTSTREAM_NO_CROSS=1 bash tools/setup.sh  # the demo needs no AArch64 cross toolchain
bash tools/build.sh build >/dev/null
exec build/bin/ctstream demo "$@"
