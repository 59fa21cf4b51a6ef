"""loaders/README.md: every code block marked `<!-- file: PATH -->` is exactly that file, and the
Python example runs (with torch, and with torch hidden: numpy arrays). The C and C++ examples
are built and run by tests/consumer/run.sh (ctest `consumer`)."""
from __future__ import annotations

import os
import py_compile
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "loaders" / "README.md"
BLOCK = re.compile(r"<!-- file: (?P<path>[^ ]+) -->\n```[a-z]*\n(?P<body>.*?)```\n", re.S)
FIXTURE = ROOT / "tests" / "fixtures" / "ct" / "v020_pack_w4_g32_asym_bf16"


def test_readme_blocks_are_the_example_files():
    blocks = list(BLOCK.finditer(README.read_text()))
    paths = {b["path"] for b in blocks}
    assert {"loaders/examples/example.py", "loaders/examples/example.c", "loaders/examples/example.cpp",
            "loaders/examples/CMakeLists.txt", "loaders/examples/vllm_offline.py"} <= paths
    for b in blocks:
        assert b["body"] == (ROOT / b["path"]).read_text(), f"README block differs from {b['path']}"


def _run(args):
    if os.environ.get("CTSTREAM_REQUIRE_MODULE") != "1":
        pytest.importorskip("ctstream", reason="ctstream not installed: pip install .")
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_python_example_runs():
    pytest.importorskip("torch")
    r = _run([str(ROOT / "loaders" / "examples" / "example.py"), str(FIXTURE)])
    assert r.returncode == 0, r.stderr
    assert "decoded 8 tensors (pt)" in r.stdout
    assert "pack-quantized, 4 bits" in r.stdout and "rank 1 of 2" in r.stdout and "weight_packed" in r.stdout
    assert "error kind: not_found" in r.stdout


def test_python_example_runs_without_torch():
    code = ("import sys; sys.modules['torch'] = None; sys.argv = ['example.py', sys.argv[1]]; "
            "exec(compile(open(%r).read(), 'example.py', 'exec'))"
            % str(ROOT / "loaders" / "examples" / "example.py"))
    r = _run(["-c", code, str(ROOT / "tests" / "fixtures" / "ct" / "v020_nvfp4a16_bf16")])
    assert r.returncode == 0, r.stderr
    assert "decoded 8 tensors (np)" in r.stdout and "nvfp4-pack-quantized" in r.stdout


def test_vllm_example_compiles():  # it runs on a real vLLM in tests/vllm
    py_compile.compile(str(ROOT / "loaders" / "examples" / "vllm_offline.py"), doraise=True)
