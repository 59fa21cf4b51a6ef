"""Hostile checkpoints from Python: every case of tests/fixtures/hostile gives a ctstream.Error of
its kind (naming the file and the tensor) at its stage, in both io modes; files truncated after
open raise instead of killing the interpreter; several threads can advance one iterator; and the
CLI reports a damaged tensor without allocating its decoded size."""
import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import threading
import time

import pytest

ctstream = pytest.importorskip("ctstream")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
HOSTILE = os.path.join(FIX, "hostile")
CASES = json.load(open(os.path.join(HOSTILE, "manifest.json")))


def _decode_all(ck, only):
    for name in ck.keys():
        if only and name != only:
            continue
        info = ck.info(name)
        dtype = "float32" if info.quantized or info.dtype in ("F32", "F16", "BF16") else None
        t = ck.get(name, dtype=dtype)
        assert t is not None


@pytest.mark.parametrize("io", ["mmap", "pread"])
@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_hostile_case(case, io):
    path = os.path.join(HOSTILE, case["case"])
    t0 = time.monotonic()
    opened = False
    err = None
    try:
        with ctstream.open(path, io=io, threads=2, framework="np") as ck:
            opened = True
            _decode_all(ck, "" if case["kind"] == "ok" else case["tensor"])
    except ctstream.Error as e:
        err = e
    assert time.monotonic() - t0 < 5
    if case["kind"] == "ok":
        assert opened and err is None
        return
    assert err is not None, case["why"]
    assert isinstance(err, ctstream.Error)
    assert err.kind == case["kind"], (str(err), case["why"])
    assert opened == (case["stage"] == "decode"), str(err)
    assert err.file
    if case["tensor"]:
        assert err.tensor == case["tensor"]


@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_truncated_after_open(tmp_path, io):
    checked = 0
    for name in sorted(os.listdir(os.path.join(FIX, "ct"))):
        src = os.path.join(FIX, "ct", name)
        if not os.path.isdir(src):
            continue
        d = tmp_path / name
        shutil.copytree(src, d)
        f = d / "model.safetensors"
        with ctstream.open(str(d), io=io, framework="np") as ck:
            os.truncate(f, os.path.getsize(f) // 3)
            for key in ck.keys():
                info = ck.info(key)
                if info.format == "marlin-24":
                    continue
                try:
                    ck.get(key)
                except ctstream.Error as e:
                    assert e.kind == "truncated", str(e)
                    checked += 1
    assert checked > 50


def test_threads_share_one_iterator():
    path = os.path.join(FIX, "st", "sharded")
    for _ in range(10):
        with ctstream.open(path, budget=4096, framework="np") as ck:
            it = iter(ck.tensors())
            seen, errors = [], []
            lock = threading.Lock()

            def consume():
                try:
                    while True:
                        try:
                            name, _ = next(it)
                        except StopIteration:
                            return
                        with lock:
                            seen.append(name)
                except Exception as e:  # noqa: BLE001 - any exception is a failure
                    errors.append(e)

            ts = [threading.Thread(target=consume) for _ in range(4)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            assert not errors
            assert sorted(seen) == sorted(ck.keys())


def _st_file(path, tensors):
    header, data = {}, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


@pytest.mark.skipif(not os.environ.get("CTSTREAM_CLI"), reason="needs the CLI (CTSTREAM_CLI)")
@pytest.mark.parametrize("command", ["verify", "decompress"])
def test_damaged_tensor_is_reported_without_allocating_its_size(tmp_path, command):
    # A sparse tensor whose 4 MiB bitmask claims 32 Mi elements (64 MiB as BF16, 128 MiB as F32)
    # but whose values are 2 bytes: the CLI must refuse it without sizing a buffer for it. The
    # child runs under a 48 MiB data limit (RLIMIT_DATA: heap and private writable mappings), so
    # allocating the decoded size would fail with out-of-memory instead of the corrupt_tensor
    # report. (ru_maxrss cannot tell: it counts the forking interpreter's pages.)
    R, C = 4096, 8192
    d = tmp_path / "m"
    d.mkdir()
    _st_file(d / "model.safetensors", [
        ("m.shape", "I64", [2], struct.pack("<2q", R, C)),
        ("m.compressed", "BF16", [1], b"\x80\x3f"),
        ("m.bitmask", "U8", [R, C // 8], b"\xff" * (R * C // 8)),
    ])
    (d / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "compressed-tensors", "version": "0.12.2",
        "sparsity_config": {"format": "sparse-bitmask", "targets": ["Linear"]}}}))
    args = [os.environ["CTSTREAM_CLI"], command, str(d)] + ([str(tmp_path / "out.safetensors")] if command == "decompress" else [])
    limit = lambda: resource.setrlimit(resource.RLIMIT_DATA, (48 << 20, 48 << 20))  # noqa: E731
    ok = subprocess.run([os.environ["CTSTREAM_CLI"], "verify", os.path.join(FIX, "ct", "v012_sparse_bitmask_bf16")],
                        capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert ok.returncode == 0, "the limit leaves room for a normal run: " + ok.stdout + ok.stderr
    r = subprocess.run(args, capture_output=True, text=True, timeout=120, preexec_fn=limit)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "corrupt_tensor" in r.stdout + r.stderr
    assert "m.weight" in r.stdout + r.stderr
    assert "out_of_memory" not in r.stdout + r.stderr
    assert not (tmp_path / "out.safetensors").exists()
    assert not [p for p in os.listdir(tmp_path) if "ctstream-tmp" in p]
