#!/usr/bin/env bash
# The wheel as a user gets it: built by `python -m build` (isolated: the build backend comes from
# PyPI, not from .venv; or the one in CTSTREAM_WHEEL_DIR, which tools/run_tests.sh built so), installed with its declared dependencies into a fresh venv, then the
# Python tests of the package surface run against that install (never the source tree).
#
# torch, safetensors, transformers and compressed-tensors are test-only dependencies of several
# GB; the fresh venv borrows them from .venv through a .pth line placed after its own
# site-packages, so ctstream and numpy resolve to the fresh install (checked by the tests:
# CTSTREAM_EXPECT_PREFIX).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
if [ -n "${CTSTREAM_WHEEL_DIR:-}" ]; then
  mkdir -p "$work/dist"
  cp "$CTSTREAM_WHEEL_DIR"/ctstream-*.whl "$work/dist/"
else
  echo "building the wheel (python -m build --wheel)"
  if ! PIP_CONSTRAINT="$ROOT/tools/python-constraints.txt" .venv/bin/python -m build --wheel --outdir "$work/dist" . \
      >"$work/build.log" 2>&1; then
    tail -n 60 "$work/build.log"
    exit 1
  fi
fi
ls "$work"/dist
python3 -m venv "$work/venv"
V="$work/venv/bin/python"
"$V" -m pip install -q -c "$ROOT/tools/python-constraints.txt" "$work"/dist/ctstream-*.whl  # numpy: the pinned one
site=$("$V" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
ref=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$ref" > "$site/zz_ctstream_test_deps.pth"
"$V" -c "import ctstream, numpy; print('installed:', ctstream.__file__, 'numpy', numpy.__version__)"
cd "$work"
CTSTREAM_EXPECT_PREFIX="$work/venv" CTSTREAM_REQUIRE_MODULE=1 CTSTREAM_CLI="$ROOT/build/bin/ctstream" OMP_NUM_THREADS=2 \
  "$V" -m pytest -q -p no:cacheprovider --rootdir "$ROOT/tests/python" \
  "$ROOT/tests/python/test_packaging.py" "$ROOT/tests/python/test_module.py" "$ROOT/tests/python/test_safe_open.py" \
  "$ROOT/tests/python/test_save.py" "$ROOT/tests/python/test_hostile.py"
