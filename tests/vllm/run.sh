#!/usr/bin/env bash
# The vLLM engine tests: installs (or reuses) the vLLM CPU venv outside the clone
# (tools/setup_vllm.sh, ~3-5 min the first time), installs this tree's ctstream wheel into it
# (built with the reference venv's build backend into build-py/), then runs tests/vllm with pytest.
#   CTSTREAM_CLI        the ctstream binary (default build/bin/ctstream)
#   CTSTREAM_WHEEL_DIR  a directory holding the ctstream wheel to install (tools/run_tests.sh:
#                       the one its Python stage built and tested) instead of building one
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
VENV=${CTSTREAM_VLLM_VENV:-$HOME/.cache/ctstream/vllm-venv}
bash tools/setup_vllm.sh
wheels=${CTSTREAM_WHEEL_DIR:-}
if [ -z "$wheels" ]; then
  wheels=build-py/vllm-wheel
  rm -rf "$wheels"
  .venv/bin/python -m pip wheel -q --no-build-isolation --no-deps --config-settings=build-dir=build-py -w "$wheels" .
fi
"$VENV/bin/python" -m pip install -q --force-reinstall --no-deps "$wheels"/ctstream-*.whl
CLI=${CTSTREAM_CLI:-$ROOT/build/bin/ctstream}
# The checkpoints, made once for every pytest worker.
models=$(mktemp -d)
trap 'rm -rf "$models"' EXIT
"$VENV/bin/python" tests/vllm/make_models.py "$models" "$CLI" >/dev/null
# Two engine runs at a time: most of a run on these tiny models is one thread importing and
# starting vLLM. Tests that share a reference run are one xdist_group (the worker caches it); each
# worker's in-process engine runs fork from its zygote (tests/vllm/zygote.py: vLLM imported once).
CTSTREAM_CLI=$CLI CTSTREAM_VLLM_MODELS=$models VLLM_CPU_KVCACHE_SPACE=1 \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n "${CTSTREAM_VLLM_JOBS:-2}" --dist loadgroup --durations=8 \
  tests/vllm "$@"
