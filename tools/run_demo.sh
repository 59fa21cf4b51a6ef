#!/usr/bin/env bash
# One command for a new user: installs what is missing, builds, and runs the default job
# (`ctstream demo`: generate a small Llama-shaped checkpoint, stream it back, print a table).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh build >/dev/null
exec build/bin/ctstream demo "$@"
