"""safetensors' own Python test suite, run against ctstream's drop-in.

The suite ships in safetensors' sdist (bindings/python/tests), which tools/setup_python.sh caches
for the installed version (tools/fetch_sdist.py). It runs twice in subprocesses: as shipped, then
with safetensors.safe_open, safetensors.torch / safetensors.numpy safe_open and load_file replaced
by ctstream's (the writers stay safetensors': ctstream reads). Every test that passes as shipped
must pass patched, and the patched run must really have gone through ctstream (a count of the
safe_open and load_file calls it made). Frameworks this venv lacks (flax, tf, mlx, paddle) are left out, and
tests that need a GPU or another accelerator skip themselves in both runs.
"""
import os
import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET

import pytest

safetensors = pytest.importorskip("safetensors")
pytest.importorskip("ctstream")
pytest.importorskip("torch")

CACHE = os.environ.get("CTSTREAM_SDIST_CACHE", os.path.expanduser("~/.cache/ctstream/sdist"))

CONFTEST = '''
import atexit, os
if os.environ.get("CTSTREAM_PATCH") == "1":
    import safetensors, safetensors.numpy, safetensors.torch
    import ctstream, ctstream.numpy, ctstream.torch
    calls = [0]
    class counted(ctstream.safe_open):
        def __init__(self, *a, **k):
            calls[0] += 1
            super().__init__(*a, **k)
    def counting(load):
        def load_file(*a, **k):
            calls[0] += 1
            return load(*a, **k)
        return load_file
    safetensors.safe_open = safetensors.torch.safe_open = safetensors.numpy.safe_open = counted
    safetensors.torch.load_file = counting(ctstream.torch.load_file)
    safetensors.numpy.load_file = counting(ctstream.numpy.load_file)
    atexit.register(lambda: open(os.environ["CTSTREAM_CALLS"], "w").write(str(calls[0])))
'''
LEFT_OUT = ["test_flax_comparison.py", "test_tf_comparison.py", "test_mlx_comparison.py", "test_paddle_comparison.py"]


def run_suite(root, patched, tmp_path):
    tag = "patched" if patched else "shipped"
    xml = tmp_path / f"{tag}.xml"
    env = dict(os.environ, CTSTREAM_PATCH="1" if patched else "0", CTSTREAM_CALLS=str(tmp_path / "calls"))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", f"--junitxml={xml}",
           "tests"] + [f"--ignore=tests/{t}" for t in LEFT_OUT]
    out = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    results = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        results[name] = "failed" if kinds & {"failure", "error"} else "skipped" if "skipped" in kinds else "passed"
    return results, out.stdout[-3000:]


def test_safetensors_suite_passes_with_ctstream(tmp_path):
    version = safetensors.__version__
    sdist = os.path.join(CACHE, f"safetensors-{version}.tar.gz")
    assert os.path.exists(sdist), f"{sdist} missing: tools/setup_python.sh fetches it (tools/fetch_sdist.py)"
    prefix = f"safetensors-{version}/bindings/python/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix + "tests/")]
        tar.extractall(tmp_path, members=members, filter="data")
    root = tmp_path / prefix
    (root / "tests" / "conftest.py").write_text(CONFTEST)

    shipped, log_shipped = run_suite(root, False, tmp_path)
    patched, log_patched = run_suite(root, True, tmp_path)
    passed = sorted(k for k, v in shipped.items() if v == "passed")
    assert len(passed) >= 50, f"the suite as shipped passed only {len(passed)} tests:\n{log_shipped}"
    broken = [k for k in passed if patched.get(k) != "passed"]
    assert not broken, f"pass as shipped, not with ctstream: {broken}\n{log_patched}"
    calls = int((tmp_path / "calls").read_text())
    assert calls >= 50, f"only {calls} ctstream safe_open / load_file calls: the patch did not reach the suite"
