"""The package as installed: help() shows documentation for every public name, the native
module ships type stubs (py.typed + _ctstream.pyi) that a type checker uses, and - when run by
tools/test_wheel.sh from the wheel in a fresh venv - ctstream and numpy come from that venv."""
import os
import pydoc
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ctstream = pytest.importorskip("ctstream")


def test_installed_where_expected():
    prefix = os.environ.get("CTSTREAM_EXPECT_PREFIX")
    if not prefix:
        pytest.skip("set by tools/test_wheel.sh")
    import numpy

    assert ctstream.__file__.startswith(prefix), ctstream.__file__
    assert ctstream._ctstream.__file__.startswith(prefix)
    assert numpy.__file__.startswith(prefix), numpy.__file__  # the wheel's declared dependency, installed


def test_one_version_number():
    """CMakeLists.txt's project(VERSION) is the version of the native library, the C ABI's
    ctstream_version(), the CLI and the Python package metadata."""
    import importlib.metadata
    import re

    root = Path(__file__).resolve().parents[2]
    cmake = re.search(r"project\(ctstream VERSION ([0-9.]+)", (root / "CMakeLists.txt").read_text()).group(1)
    assert ctstream.__version__ == cmake
    assert importlib.metadata.version("ctstream") == cmake
    cli = os.environ.get("CTSTREAM_CLI")
    if cli:
        out = subprocess.run([cli, "--version"], capture_output=True, text=True, check=True).stdout
        assert out.startswith(f"ctstream {cmake} "), out
    changelog = (root / "CHANGELOG.md").read_text()
    assert f"## {cmake}" in changelog, "CHANGELOG.md has no section for the current version"


def test_every_public_name_is_documented():
    import ctstream.numpy
    import ctstream.torch
    import ctstream.vllm

    undocumented = []
    for mod in (ctstream, ctstream.torch, ctstream.numpy, ctstream.vllm):
        assert (mod.__doc__ or "").strip(), mod.__name__
        for name in getattr(mod, "__all__", []):
            obj = getattr(mod, name)
            if isinstance(obj, str):
                continue
            if not (obj.__doc__ or "").strip():
                undocumented.append(f"{mod.__name__}.{name}")
            if isinstance(obj, type):
                for m, v in vars(obj).items():
                    if not m.startswith("_") and callable(v) and not (v.__doc__ or "").strip():
                        undocumented.append(f"{mod.__name__}.{name}.{m}")
    assert not undocumented, undocumented
    text = pydoc.render_doc(ctstream.save_model, renderer=pydoc.plaintext)
    assert "compressed-tensors checkpoint" in text and "group_size" in text
    assert "safetensors" in pydoc.render_doc(ctstream.safe_open, renderer=pydoc.plaintext)


def test_type_stubs_are_shipped_and_used():
    pkg = Path(ctstream.__file__).parent
    assert (pkg / "py.typed").is_file() and (pkg / "_ctstream.pyi").is_file()
    stub = (pkg / "_ctstream.pyi").read_text()
    for name in ("class TensorInfo", "def active_isa", "def _compress_tensors", "class _Checkpoint"):
        assert name in stub, name
    try:
        import mypy  # noqa: F401
    except ImportError:
        pytest.skip("mypy not installed (tools/setup_python.sh installs it)")
    good = textwrap.dedent("""
        import ctstream
        from ctstream import _ctstream
        info: _ctstream.TensorInfo
        n: int = info.numel
        isa: str = ctstream.active_isa()
        ck = ctstream.open("model")
        names: list[str] = ck.keys()
    """)
    bad = good + "bits: str = _ctstream.dtype_bits('F4')\nck.get(3)\n"
    env = dict(os.environ, MYPYPATH="")
    for text, ok in ((good, True), (bad, False)):
        r = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull,
                            "--python-executable", sys.executable, "-c", text], capture_output=True, text=True, env=env)
        if ok:
            assert r.returncode == 0, r.stdout + r.stderr
        else:  # the stub's `int | None` and the package's `name: str` are what flag these
            assert r.returncode == 1 and 'Incompatible types in assignment' in r.stdout and 'Argument 1 to "get"' in r.stdout, \
                r.stdout + r.stderr
