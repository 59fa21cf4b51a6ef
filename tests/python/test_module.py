"""The Python module `ctstream` (loaders/python): decode equals the compressed-tensors library's
decompression (committed expected files and a live call of the library) and the C++ CLI's
output; torch / numpy return types; out= checks; slices; packed parts; errors; budget parsing."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

if os.environ.get("CTSTREAM_REQUIRE_MODULE") == "1":
    import ctstream  # noqa: F401  (tools/run_tests.sh installs it: a failure must fail)
else:
    ctstream = pytest.importorskip("ctstream", reason="ctstream not installed: pip install .")

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures"
CT = FIX / "ct"
MANIFEST = json.loads((CT / "manifest.json").read_text())
CASES = MANIFEST["cases"] if isinstance(MANIFEST, dict) else MANIFEST
DECODABLE = [c["case"] for c in CASES if (CT / c["case"] / "expected" / "expected_bf16.safetensors").exists()]
LEFTOVER = (".input_scale", ".input_zero_point", ".input_global_scale", ".output_scale", ".output_zero_point",
            ".k_scale", ".v_scale")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
W = "model.layers.0.mlp.down_proj.weight"
PACK = CT / "v020_pack_w4_g32_asym_bf16"


def same(got: "torch.Tensor", want: "torch.Tensor") -> bool:
    """Bitwise equal, except NaN == NaN (torch's NaN payloads are path-dependent)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if not want.is_floating_point():
        return torch.equal(got, want)
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
    if want.element_size() == 1:  # fp8: bits
        return torch.equal(got.view(ints), want.view(ints))
    both_nan = got.isnan() & want.isnan()
    return bool(((got.view(ints) == want.view(ints)) | both_nan).all())


def test_import_has_no_torch_dependency():
    code = ("import sys, ctstream; assert 'torch' not in sys.modules, 'import ctstream imported torch'; "
            f"ck = ctstream.open({str(PACK)!r}, framework='np'); a = ck.get({W!r}, dtype='float32'); "
            "assert type(a).__module__ == 'numpy' and 'torch' not in sys.modules; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


@pytest.mark.parametrize("case", DECODABLE)
def test_fixture_equals_library_decompression(case):
    """Every tensor of expected_{bf16,fp16,fp32} (the library's decompression cast with .to())
    equals ckpt.get(name, dtype) and ckpt.tensors(dtype); the natural dtype equals expected."""
    d = CT / case
    with ctstream.open(d, threads=2) as ck:
        native = load_file(str(d / "expected" / "expected.safetensors"))
        for name, want in native.items():
            got = ck.get(name)
            assert same(got, want), f"{case}: {name} natural dtype"
        for tag, dt in DTYPES.items():
            ref = load_file(str(d / "expected" / f"expected_{tag}.safetensors"))
            seen = {}
            for name, t in ck.tensors(dtype=dt):
                seen[name] = t
            extra = [n for n in seen if n not in ref and not n.endswith(LEFTOVER)]
            assert not extra, f"{case}: unexpected tensors {extra}"
            for name, want in ref.items():
                assert name in seen, f"{case}: {name} not yielded"
                assert same(seen[name], want), f"{case}: {name} as {tag} (tensors())"
                if want.is_floating_point():
                    assert same(ck.get(name, dtype=tag), want), f"{case}: {name} as {tag} (get)"


def _single_group_cases():
    out = []
    for c in CASES:
        d = CT / c["case"]
        if not c["case"].startswith("v020_") or c["case"] not in DECODABLE:
            continue
        q = json.loads((d / "config.json").read_text()).get("quantization_config") or {}
        if len(q.get("config_groups") or {}) == 1 and not q.get("sparsity_config"):
            out.append(c["case"])
    return out


LIVE = _single_group_cases()


@pytest.mark.parametrize("case", LIVE)
def test_fixture_equals_live_library_call(case):
    """The compressed-tensors 0.20 library, called now on the stored parts of each module
    (compressor.decompress(parts, scheme)), returns what ctstream decodes."""
    ctlib = pytest.importorskip("compressed_tensors")
    if not ctlib.__version__.startswith("0.20"):
        pytest.skip(f"compressed-tensors {ctlib.__version__} is not the 0.20 line")
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationConfig

    d = CT / case
    qc = QuantizationConfig.model_validate(json.loads((d / "config.json").read_text())["quantization_config"])
    (scheme,) = qc.config_groups.values()
    fmt = scheme.format or qc.format
    fmt = getattr(fmt, "value", fmt)
    comp = BaseCompressor.get_value_from_registry(fmt)
    disk = load_file(str(d / "model.safetensors"))
    checked, library_errors = 0, []
    with ctstream.open(d) as ck:
        for info in ck.infos():
            if info.format == "dense" or not info.name.endswith(".weight"):
                continue
            module = info.name[: -len(".weight")]
            local = {k[len(module) + 1:]: v for k, v in disk.items() if k.startswith(module + ".")}
            try:
                want = comp.decompress(local, scheme)["weight"]
            except Exception as e:  # the library's model-free path has its own limits (see notes.txt)
                library_errors.append(f"{info.name}: {type(e).__name__}: {e}")
                continue
            assert same(ck.get(info.name), want), f"{case}: {info.name}"
            checked += 1
    if not checked:
        pytest.skip("the library's per-module decompress fails here: " + "; ".join(library_errors))


@pytest.mark.parametrize("case", ["v020_pack_w4_g128_asym_bf16", "v020_nvfp4a16_fp16", "v012_sparse_bitmask_fp16",
                                  "v020_mixed_int4g32_fp8ch_bf16", "v012_pack_w4_g32_actorder_bf16"])
def test_equals_cli_decompress(case, tmp_path):
    """ckpt.tensors(dtype) yields exactly what `ctstream decompress --dtype` writes."""
    cli = os.environ.get("CTSTREAM_CLI") or str(ROOT / "build" / "bin" / "ctstream")
    if not os.access(cli, os.X_OK):
        cli = shutil.which("ctstream")
    if not cli:
        pytest.skip("the ctstream CLI is not built (tools/build.sh)")
    for tag, dt in DTYPES.items():
        out = tmp_path / f"{case}_{tag}.safetensors"
        subprocess.run([cli, "decompress", str(CT / case), str(out), "--dtype", tag], check=True,
                       capture_output=True)
        ref = load_file(str(out))
        with ctstream.open(CT / case) as ck:
            got = dict(ck.tensors(dtype=dt))
            assert list(got) == ck.keys()
        assert set(got) == set(ref)
        for name in ref:
            assert same(got[name], ref[name]), f"{case}: {name} as {tag}"


def test_metadata_and_info():
    with ctstream.open(PACK) as ck:
        assert len(ck) == len(ck.keys()) > 0 and W in ck and "nope" not in ck and 3 not in ck
        assert list(ck) == ck.keys()
        i = ck.info(W)
        assert (i.name, i.format, i.quantized, i.num_bits, i.group_size, i.strategy, i.symmetric) == (
            W, "pack-quantized", True, 4, 32, "group", False)
        assert i.dtype == "BF16" and i.numel == i.shape[0] * i.shape[1]
        assert i.decoded_bytes() == 2 * i.numel and i.decoded_bytes("float32") == 4 * i.numel
        assert [p.role for p in i.parts][:2] == ["weight_packed", "weight_scale"]
        assert i.stored_bytes == sum(p.nbytes for p in i.parts)
        assert ck.config["quantization_config"]["format"] == "pack-quantized"
        assert ck.files[0].endswith("model.safetensors") and ck.metadata(0).get("format") == "pt"
        assert ck.framework == "pt" and "Checkpoint" in repr(ck)
        with pytest.raises(IndexError):
            ck.metadata(5)
    with ctstream.open(PACK, order="name") as ck:
        assert ck.keys() == sorted(ck.keys())


def test_sharded_dense_and_pread():
    d = FIX / "st" / "sharded"
    with ctstream.open(d, io="pread") as a, ctstream.open(d) as b:
        assert len(a.files) == 3 and a.keys() == b.keys()
        for (n1, t1), (n2, t2) in zip(a.tensors(), b.tensors()):
            assert n1 == n2 and same(t1, t2)


def test_return_types_numpy():
    with ctstream.open(PACK, framework="np") as ck:
        assert ck.framework == "np"
        a = ck.get(W, dtype="float32")
        assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.flags.c_contiguous and a.flags.writeable
        t = torch.from_numpy(a)
        with ctstream.open(PACK) as ckt:
            assert same(t, ckt.get(W, dtype=torch.float32))
            bf = ck.get(W)  # bfloat16: ml_dtypes.bfloat16 if installed, else the raw uint16 bits
            want = ckt.get(W)
            raw = bf.view(np.uint16) if bf.dtype != np.uint16 else bf
            assert torch.equal(torch.from_numpy(raw.copy()).view(torch.bfloat16), want)
        h = ck.get(W, dtype=np.float16)
        assert h.dtype == np.float16
        for name, arr in ck.tensors(dtype="float32"):
            assert isinstance(arr, np.ndarray) and arr.dtype in (np.float32, np.int64, np.int32, np.int8, np.bool_)
    with pytest.raises(ValueError, match="framework"):
        ctstream.open(PACK, framework="jax")


def test_dtype_spellings_and_integer_tensors():
    d = CT / "v020_pack_w4_g32_asym_bf16"
    with ctstream.open(d) as ck:
        for spelling in ("bfloat16", "bf16", "BF16", torch.bfloat16, np.dtype("float16"), "float32", "fp32", "half"):
            t = ck.get(W, dtype=spelling)
            assert t.is_floating_point()
        with pytest.raises(ValueError, match="bfloat16, float16 or float32"):
            ck.get(W, dtype="int8")
        with pytest.raises(ValueError, match="unknown dtype"):
            ck.get(W, dtype="int3")
        with pytest.raises(TypeError):
            ck.get(W, dtype=3.5)
        # weight_shape-like integer tensors keep their stored dtype whatever dtype= says
        packed = ck.packed(W)
        assert packed["weight_shape"].dtype == torch.int64
        assert packed["weight_shape"].tolist() == list(ck.info(W).shape)


def test_out_writes_into_caller_memory():
    with ctstream.open(PACK) as ck:
        want = ck.get(W, dtype="float16")
        out = torch.full(tuple(want.shape), 7.0, dtype=torch.float16)
        r = ck.get(W, out=out)  # dtype from out
        assert r is out and same(out, want)
        p = torch.nn.Parameter(torch.zeros(want.shape, dtype=torch.bfloat16), requires_grad=True)
        ck.get(W, out=p)
        assert same(p.detach(), ck.get(W))
        a = np.zeros(tuple(want.shape), np.float32)
        assert ck.get(W, dtype="float32", out=a) is a
        assert same(torch.from_numpy(a), ck.get(W, dtype="float32"))
        raw = np.zeros(tuple(want.shape), np.uint16)  # bfloat16 bits into numpy
        ck.get(W, dtype="bfloat16", out=raw)
        assert torch.equal(torch.from_numpy(raw).view(torch.bfloat16), ck.get(W))
        # slices into out
        s = torch.empty((3, want.shape[1]), dtype=torch.float16)
        ck.get_slice(W, dtype="float16").get(slice(2, 5), out=s)
        assert same(s, want[2:5])
        big = torch.zeros((want.shape[0] + 2, want.shape[1]), dtype=torch.float16)
        ck.get(W, out=big[1:-1])  # a contiguous row block of a bigger tensor
        assert same(big[1:-1], want) and not big[0].any() and not big[-1].any()


def test_out_errors_are_clear():
    with ctstream.open(PACK) as ck:
        shape = tuple(ck.info(W).shape)
        with pytest.raises(ValueError, match=r"has shape \(24, 95\), expected \(24, 96\)"):
            ck.get(W, out=torch.empty((24, 95), dtype=torch.bfloat16))
        with pytest.raises(ValueError, match="not C-contiguous"):
            ck.get(W, out=torch.empty(shape[::-1], dtype=torch.bfloat16).t())
        with pytest.raises(ValueError, match="not C-contiguous"):
            ck.get(W, out=np.empty((shape[0], shape[1] * 2), np.float32)[:, ::2])
        with pytest.raises(TypeError, match="has dtype int32, but the tensor decodes as BF16"):
            ck.get(W, out=np.empty(shape, np.int32))
        with pytest.raises(TypeError, match="has dtype float32, but the tensor decodes as F16"):
            ck.get(W, dtype="float16", out=np.empty(shape, np.float32))
        ro = np.empty(shape, np.float32)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="read-only"):
            ck.get(W, out=ro)
        with pytest.raises(TypeError, match="must be a torch.Tensor or numpy.ndarray"):
            ck.get(W, out=[0.0] * 10)
        with pytest.raises(ValueError, match="one dimension"):
            ck.get_slice(W).get((slice(0, 2), slice(0, 2)), out=torch.empty((2, 2)))
        # torch's lazy conj / neg views read their storage through a flag: bytes written there read
        # back conjugated / negated (they were accepted, and the values came back wrong)
        with pytest.raises(ValueError, match="lazy neg view"):
            ck.get(W, out=torch.empty(shape, dtype=torch.bfloat16)._neg_view())
        with pytest.raises(ValueError, match="lazy conj view"):
            ck.get(W, out=torch.empty(shape, dtype=torch.complex64).conj())


def test_slices_equal_slicing_the_full_tensor():
    with ctstream.open(CT / "v020_nvfp4a16_bf16") as ck:
        for info in ck.infos():
            if len(info.shape) != 2:
                continue
            full = ck.get(info.name)
            s = ck.get_slice(info.name)
            R, C = info.shape
            assert s.get_shape() == [R, C] and len(s) == R and s.get_dtype() == info.dtype
            for key in [slice(1, R // 2), (slice(None), slice(C // 3, C)), (slice(1, 3), slice(2, 5)), 0, -1,
                        (Ellipsis, slice(0, 2)), (slice(None), 1), slice(R, R), slice(None), (1, 2), slice(None, None, 2),
                        (slice(None), slice(1, None, 3)), None, (None, slice(1, 3)), True, [0, 2], [], (slice(None), [1, 0]),
                        torch.tensor([1, 0]), (Ellipsis, -2), slice(-3, None), slice(1, 10**6)]:
                got = s[key]
                want = full[key]  # torch's own indexing of the whole decoded tensor
                assert got.shape == want.shape and same(got.contiguous(), want.contiguous()), f"{info.name}[{key}]"
            for bad, exc in [(R, IndexError), ((0, 0, 0), IndexError), (slice(None, None, -1), ValueError), (1.5, IndexError)]:
                with pytest.raises(exc) as e:  # torch's error type and message, as a ctstream.Error
                    s[bad]
                assert isinstance(e.value, ctstream.Error)
            assert ck.get_slice(info.name, dtype="float32")[0:2].dtype == torch.float32


def test_tensor_parallel_shards_cover_the_tensor():
    with ctstream.open(CT / "v020_pack_w4_g128_asym_bf16") as ck:
        for info in ck.infos():
            if info.format == "dense":
                continue
            rows = info.shape[0]
            tp = 2
            per = (rows + tp - 1) // tp
            shards = [ck.get_slice(info.name)[r * per:(r + 1) * per] for r in range(tp)]
            assert same(torch.cat(shards), ck.get(info.name))


def test_packed_equals_the_stored_entries():
    d = CT / "v020_mixed_int4g32_fp8ch_bf16"
    stored = load_file(str(d / "model.safetensors"))
    seen = set()
    with ctstream.open(d) as ck:
        for info in ck.infos():
            parts = ck.packed(info.name)
            assert list(parts) == [p.role for p in info.parts]
            for p in info.parts:
                assert torch.equal(parts[p.role], stored[p.key]) and parts[p.role].dtype == stored[p.key].dtype
                seen.add(p.key)
    assert seen == set(stored)


def test_errors():
    with pytest.raises(FileNotFoundError) as e:  # the builtin, and a ctstream.Error
        ctstream.open(FIX / "no" / "such" / "model")
    assert isinstance(e.value, ctstream.Error) and isinstance(e.value, ctstream.FileNotFoundError)
    assert e.value.kind == "file_not_found" and "no/such/model" in str(e.value)
    with ctstream.open(PACK) as ck:
        with pytest.raises(KeyError) as e:
            ck.get("no.such.tensor")
        assert isinstance(e.value, ctstream.NotFoundError) and isinstance(e.value, ctstream.Error)
        assert e.value.kind == "not_found" and e.value.tensor == "no.such.tensor"
        with pytest.raises(ctstream.NotFoundError):
            ck.info("no.such.tensor")
        with pytest.raises(KeyError, match="no stored part"):
            ck._n.read_part(W, "bitmask")
    with pytest.raises(ValueError, match="closed") as e:
        ck.get(W)
    assert isinstance(e.value, ctstream.ClosedError) and e.value.kind == "closed"
    with pytest.raises(ValueError, match="io must be"):
        ctstream.open(PACK, io="aio")
    with pytest.raises(ValueError, match="order must be"):
        ctstream.open(PACK, order="random")
    with pytest.raises(ValueError, match="threads"):
        ctstream.open(PACK, threads=-1)
    corrupt = sorted((FIX / "corrupt").glob("*.safetensors"))
    assert corrupt
    kinds = set()
    for f in corrupt:
        try:
            with ctstream.open(f) as ck:
                for _ in ck.tensors():
                    pass
        except ctstream.Error as err:
            kinds.add(err.kind)
            assert str(err)
    assert len(kinds) >= 3
    with ctstream.open(CT / "v012_marlin24_w4_g128_bf16") as ck:
        name = next(i.name for i in ck.infos() if i.format == "marlin-24")
        with pytest.raises(ctstream.Error) as e:
            ck.get(name)
        assert e.value.kind == "unsupported"
        assert ck.packed(name)  # keep-packed passthrough still works


def test_tensors_names_empty_means_none():
    """names=None is every tensor; names=[] is none (it was every tensor, decoded ahead), and a
    list is exactly those, in that order."""
    with ctstream.open(PACK) as ck:
        it = ck.tensors(names=[])
        assert it.__length_hint__() == 0 and list(it) == []
        assert [n for n, _ in ck.tensors(names=())] == []
        every = [n for n, _ in ck.tensors()]
        assert every == ck.keys() and len(every) > 1
        assert [n for n, _ in ck.tensors(names=every[::-1])] == every[::-1]
        with pytest.raises(TypeError, match="a list of tensor names"):  # was a list of its characters
            ck.tensors(names=every[0])


def test_tensors_names_repeated():
    """A name listed twice is decoded and yielded twice (the iterator's buffer bookkeeping was keyed
    by tensor: the second copy crashed the process)."""
    with ctstream.open(PACK) as ck:
        names = ck.keys()[:3]
        order = [names[0], names[1], names[0], names[2], names[2]]
        got = list(ck.tensors(names=order))
        assert [n for n, _ in got] == order
        for n, t in got:
            assert torch.equal(t, ck.get(n))


def test_thread_counts_past_the_cap_are_refused():
    # threads=100000 made 2048 OS threads for one decode, kept for the life of the process
    with pytest.raises(ValueError, match="at most 1024"):
        ctstream.open(PACK, threads=100000)


def test_tensors_go_on_after_a_tensor_fails():
    """A tensor whose decode raises raises at its place, and the iterator goes on with the next one,
    as the core's Stream does. Its buffer was left at the head of the iterator's queue: every later
    tensor then failed ("delivered without its buffer") while its buffer was kept until the end."""
    with ctstream.open(CT / "v012_marlin24_w4_g128_bf16") as ck:
        names = ck.keys()
        fails = set()
        for n in names:
            try:
                ck.get(n)
            except ctstream.Error:
                fails.add(n)
        assert fails and len(fails) < len(names)  # marlin 2:4 tiles have no decoder; the rest decode
        for order in (names, names[::-1], names + names):
            it = ck.tensors(names=order)
            got, raised = [], []
            for _ in range(len(order) + 1):
                try:
                    n, t = next(it)
                except StopIteration:
                    break
                except ctstream.Error as e:
                    raised.append(e.tensor)
                    assert it.__length_hint__() == len(order) - len(got) - len(raised)
                else:
                    got.append(n)
                    assert torch.equal(t, ck.get(n))
            assert got == [n for n in order if n not in fails]
            assert raised == [n for n in order if n in fails]


def test_tensors_stay_valid_after_close():
    ck = ctstream.open(PACK)
    n = len(ck)
    it = ck.tensors()
    name, first = next(it)
    w = ck.get(W)
    ck.close()
    assert ck.closed and "closed" in repr(ck)
    assert float(w.float().abs().sum()) > 0 and first.numel() > 0
    with pytest.raises(ValueError, match="closed"):
        ck.keys()
    rest = list(it)  # an iterator already started keeps the files open
    assert len(rest) == n - 1 and name == ctstream.open(PACK).keys()[0]


@pytest.mark.parametrize("text,value", [("512MB", 512 * 10**6), ("2GiB", 2 * 2**30), ("1.5G", 1_500_000_000),
                                        ("1048576", 1048576), ("64 kib", 65536), (4096, 4096), (None, 0),
                                        ("3TB", 3 * 10**12), ("10b", 10)])
def test_parse_budget(text, value):
    assert ctstream.parse_budget(text) == value


@pytest.mark.parametrize("bad", ["", "MB", "12 parsecs", "-5MB", "0", 0, -1, "1e9", "0.0001"])
def test_parse_budget_rejects(bad):
    with pytest.raises(ValueError):
        ctstream.parse_budget(bad)


@pytest.mark.parametrize("bad", [True, 1.5, [1]])
def test_parse_budget_types(bad):
    with pytest.raises(TypeError):
        ctstream.parse_budget(bad)


def test_open_options_are_kept():
    with ctstream.open(PACK, threads=2, budget="2GiB") as ck:
        assert ck.budget == 2 * 2**30 and ck.threads == 2
    with pytest.raises(ValueError):
        ctstream.open(PACK, budget="lots")


def test_threads_share_a_checkpoint():
    """Several Python threads decode from one checkpoint at once (the GIL is released)."""
    d = CT / "v020_mixed_int4g32_fp8ch_bf16"
    with ctstream.open(d, threads=1) as ck:
        want = {n: t for n, t in ck.tensors(dtype="float32")}
        errors = []

        def work():
            try:
                for _ in range(20):
                    for n in want:
                        assert same(ck.get(n, dtype="float32"), want[n])
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        ts = [threading.Thread(target=work) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert not errors, errors


def test_safetensors_compat_spellings():
    f = FIX / "st" / "all_dtypes.safetensors"
    with ctstream.open(f) as ck, safe_open(str(f), "pt") as ref:
        assert set(ck.keys()) == set(ref.keys())
        for k in ref.keys():
            want = ref.get_tensor(k)
            got = ck.get_tensor(k)
            if want.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
                assert got.dtype == want.dtype and torch.equal(got.view(torch.uint8), want.view(torch.uint8)), k
            elif got.dtype == want.dtype:
                assert same(got, want), k
            sl = ref.get_slice(k)
            assert ck.get_slice(k).get_shape() == list(sl.get_shape()), k
