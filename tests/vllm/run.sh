#!/usr/bin/env bash
# The vLLM engine tests: installs (or reuses) the vLLM CPU venv outside the clone
# (tools/setup_vllm.sh, ~3-5 min the first time), installs this tree's ctstream wheel into it
# (built with the reference venv's build backend into build-py/), then runs tests/vllm with pytest.
#   CTSTREAM_CLI   the ctstream binary (default build/bin/ctstream)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VENV=${CTSTREAM_VLLM_VENV:-$HOME/.cache/ctstream/vllm-venv}
bash tools/setup_vllm.sh
mkdir -p build-py/wheel
rm -f build-py/wheel/ctstream-*.whl
.venv/bin/python -m pip wheel -q --no-build-isolation --no-deps --config-settings=build-dir=build-py -w build-py/wheel .
"$VENV/bin/python" -m pip install -q --force-reinstall --no-deps build-py/wheel/ctstream-*.whl
CTSTREAM_CLI=${CTSTREAM_CLI:-$ROOT/build/bin/ctstream} VLLM_CPU_KVCACHE_SPACE=1 \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider tests/vllm "$@"
