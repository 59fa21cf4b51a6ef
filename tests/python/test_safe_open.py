"""ctstream.safe_open as a drop-in for safetensors.safe_open (safetensors 0.8 semantics).

* A differential check: for every dtype safetensors defines x shapes (0-d, empty, 1-3-D) x index
  forms, in both frameworks and both backends, ctstream.safe_open and safetensors.safe_open agree
  on values, dtype, shape and error type (ours is an instance of the class safetensors raised).
* One test per point where ctstream used to differ: F4 as float4_e2m1fn_x2 with the last dim
  halved, dtype= converting every floating dtype (checked against torch's .to()), torch's index
  forms ([True], lists, None) and errors, FileNotFoundError / KeyError / IndexError / ValueError
  subclasses that stay ctstream.Error, metadata() None, sorted keys(), use after close.
* Compressed-tensors checkpoints decode through it to the library's decompression; packed=True
  gives the stored entries; ctstream.torch / ctstream.numpy load_file.
"""
import json
import os
import random
import shutil
import struct

import numpy as np
import pytest

ctstream = pytest.importorskip("ctstream")
torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
from safetensors import SafetensorError  # noqa: E402
from safetensors import safe_open as st_safe_open  # noqa: E402
from safetensors.torch import load_file as st_load_file  # noqa: E402

import ctstream.numpy  # noqa: E402
import ctstream.torch  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CT = os.path.join(ROOT, "tests", "fixtures", "ct")

BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
        "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32,
        "F32": 32, "C64": 64, "F64": 64, "I64": 64, "U64": 64}
SHAPES = [[], [0], [5], [2, 0], [3, 4], [2, 3, 4]]


def shape_for(dtype, shape):
    """The shape adjusted so that it is a whole number of bytes (F4: even, F6: multiple of 4)."""
    b = BITS[dtype]
    if b == 4:
        return [*shape[:-1], shape[-1] * 2] if shape else [2]
    if b == 6:
        return [*shape[:-1], shape[-1] * 4] if shape else [4]
    return shape


def write_st(path, entries, metadata=None):
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def payload(dtype, shape, rng):
    n = 1
    for d in shape:
        n *= d
    nbytes = n * BITS[dtype] // 8
    if dtype == "BOOL":
        return bytes(rng.randrange(2) for _ in range(nbytes))
    return bytes(rng.randrange(256) for _ in range(nbytes))


@pytest.fixture(scope="module")
def all_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("st")
    rng = random.Random(7)
    files = []
    for dt in BITS:
        entries = []
        for i, sh in enumerate(SHAPES):
            s = shape_for(dt, sh)
            entries.append((f"t{i}", dt, s, payload(dt, s, rng)))
        p = str(d / f"{dt}.safetensors")
        write_st(p, entries, metadata={"format": "pt", "dtype": dt} if dt != "U8" else None)
        files.append(p)
    return files


def pt_index_forms():
    return [slice(None), 0, -1, 1, slice(1, None), slice(None, 2), slice(1, 10), slice(2, 1), slice(None, None, 2),
            (Ellipsis, 0), None, (slice(None), None), True, False, [0], [], [0, 1], torch.tensor(1), np.int64(1), (0,),
            (), (0, 0), -9, 9, 1.0, "a", (Ellipsis, Ellipsis), (slice(None),) * 4, slice(None, None, -1),
            slice(-2, None), (slice(None), slice(1, 3)), torch.tensor([True, False, True, False, True]),
            (slice(None), slice(None, None, 2**63 - 1)), slice(None, None, -2**63), 2**63, (Ellipsis, 2**64)]


def np_index_forms():
    return [slice(None), 0, -1, 1, slice(1, None), slice(None, 2), slice(1, 10), slice(None, None, 2), (Ellipsis, 0),
            None, True, [0], [], np.int64(1), (0,), (), (0, 0), -9, 9, 1.0, (Ellipsis, Ellipsis), (slice(None),) * 4,
            slice(None, None, -1), slice(-2, None), (slice(None), slice(1, 3)), 2**31, slice(2, 1), slice(1, None, 2),
            (slice(None), slice(None, None, 3)), (Ellipsis, slice(1, 2)), slice(0, 0), (slice(None), 0, slice(None, None, 2)),
            # Python ints past the Rust integer each slice field is extracted as (usize, isize)
            slice(None, None, 2**63 - 1), slice(None, None, 2**63), slice(None, None, -2**63), slice(None, None, -2**63 - 1),
            slice(2**64, None), slice(None, 2**64), slice(2**63, None), (slice(None), slice(None, None, 2**64)),
            slice(-1, None, 2**64), 2**63, 2**64]


def outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - compared below
        return None, e


def same_values(a, b, fw):
    if fw == "pt":
        if a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
            return False
        # bytes, copied into fresh standard strides (a size-1 dim may carry any stride, which
        # contiguous() keeps and view(uint8) refuses)
        raw = lambda t: torch.empty(t.shape, dtype=t.dtype).copy_(t).reshape(-1).view(torch.uint8)  # noqa: E731
        return torch.equal(raw(a), raw(b)) if a.numel() else True
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check_same(theirs, ours, what):
    (tv, te), (ov, oe) = theirs, ours
    if te is not None:
        assert oe is not None, f"{what}: safetensors raised {type(te).__name__}: {te}; ctstream returned a value"
        assert isinstance(oe, ctstream.Error), f"{what}: {type(oe)} is not a ctstream.Error"
        if isinstance(te, SystemError):  # safetensors' own bug for stop < start (np): ours is an IndexError
            assert isinstance(oe, IndexError), what
            return
        assert isinstance(oe, type(te)), f"{what}: safetensors raised {type(te).__name__} ({te}), ctstream {type(oe).__mro__}"
        return
    assert oe is None, f"{what}: safetensors returned a value, ctstream raised {type(oe).__name__}: {oe}"
    return tv, ov


@pytest.mark.parametrize("fw,backend", [("pt", "mmap"), ("np", "mmap"), ("pt", "pread"), ("np", "pread")])
def test_differential_against_safetensors(all_files, fw, backend):
    forms = pt_index_forms() if fw == "pt" and backend == "mmap" else np_index_forms()
    cases = 0
    for path in all_files:
        st = st_safe_open(path, framework=fw, backend=backend)
        ct = ctstream.safe_open(path, framework=fw, backend=backend)
        assert ct.keys() == st.keys()
        assert ct.metadata() == st.metadata()
        # offset order, up to the order of tied zero-size tensors (random in safetensors)
        assert [k for k in ct.offset_keys()] == sorted(ct.offset_keys(), key=lambda k: st.offset_keys().index(k)) or \
            set(ct.offset_keys()) == set(st.offset_keys())
        for name in st.keys():
            f4_bug = fw == "pt" and ct.get_slice(name).get_dtype() == "F4"  # see test_f4_slices_stay_packed...
            if f4_bug and backend == "pread":  # safetensors' pread get_tensor fails on F4 too: its mmap one is the reference
                st = st_safe_open(path, framework=fw)
            r = check_same(outcome(lambda: st.get_tensor(name)), outcome(lambda: ct.get_tensor(name)), f"{path}:{name}")
            if r:
                assert same_values(*r, fw), f"{path}:{name} get_tensor differs"
            ss, cs = st.get_slice(name), ct.get_slice(name)
            assert cs.get_shape() == ss.get_shape() and cs.get_dtype() == ss.get_dtype()
            for key in forms:
                if f4_bug:
                    continue
                r = check_same(outcome(lambda: ss[key]), outcome(lambda: cs[key]), f"{path}:{name}[{key!r}] ({fw}/{backend})")
                if r:
                    assert same_values(*r, fw), f"{path}:{name}[{key!r}] values differ ({fw}/{backend})"
                cases += 1
    assert cases > 2000


def test_f4_is_float4_x2_with_the_last_dim_halved(tmp_path):
    p = str(tmp_path / "f4.safetensors")
    write_st(p, [("w", "F4", [3, 8], bytes(range(12)))])
    want = st_load_file(p)["w"]
    with ctstream.safe_open(p, "pt") as f:
        got = f.get_tensor("w")
        assert got.dtype == torch.float4_e2m1fn_x2 and list(got.shape) == [3, 4] == list(want.shape)
        assert torch.equal(got.view(torch.uint8), want.view(torch.uint8))
        assert f.get_slice("w").get_shape() == [3, 8] and f.get_slice("w").get_dtype() == "F4"
    with ctstream.open(p, framework="pt") as ck:  # the native API too: shape kept, not flat bytes
        assert ck.get("w").dtype == torch.float4_e2m1fn_x2 and list(ck.get("w").shape) == [3, 4]


def f4_codes(t):
    """The 4-bit codes of a packed float4_e2m1fn_x2 tensor, low nibble first (safetensors' order),
    in the logical shape (last dim doubled)."""
    b = t.contiguous().view(torch.uint8).numpy()
    return np.stack([b & 0xF, b >> 4], axis=-1).reshape(*b.shape[:-1], b.shape[-1] * 2)


def test_f4_slices_stay_packed_where_safetensors_fails(tmp_path):
    # safetensors 0.8 views F4 bytes with the logical shape before slicing and raises on every F4
    # slice (torch: "shape [3, 8] is invalid for input of size 12"); ours slices on byte
    # boundaries and keeps the packed form. Reference: numpy indexing of the unpacked codes of
    # safetensors' own get_tensor.
    p = str(tmp_path / "f4.safetensors")
    write_st(p, [("w", "F4", [3, 8], bytes(range(12)))])
    codes = f4_codes(st_load_file(p)["w"])
    for backend in ("mmap", "pread"):
        with ctstream.safe_open(p, "pt", backend=backend) as f, st_safe_open(p, "pt", backend=backend) as st:
            for key in [slice(None), slice(1, 3), 1, (slice(None), slice(2, 6)), (Ellipsis, slice(0, 4)), (), (2, slice(4, 8))]:
                with pytest.raises(RuntimeError):
                    st.get_slice("w")[key]
                got = f.get_slice("w")[key]
                assert got.dtype == torch.float4_e2m1fn_x2
                assert np.array_equal(f4_codes(got), codes[key]), (backend, key)
            for key in [(slice(None), slice(1, 4)), (slice(None), 3), (0, 1)]:  # not on a byte boundary
                with pytest.raises(ctstream.InvalidArgumentError, match="byte boundary"):
                    f.get_slice("w")[key]


E2M1 = [0, 0.5, 1, 1.5, 2, 3, 4, 6]


@pytest.mark.parametrize("dt", ["F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "F4", "F32", "F16",
                                "BF16"])
@pytest.mark.parametrize("out", ["float32", "bfloat16", "float16"])
def test_dtype_converts_every_floating_dtype(tmp_path, dt, out):
    rng = random.Random(3)
    shape = [4, 64]
    raw = payload(dt, shape, rng)
    p = str(tmp_path / "x.safetensors")
    write_st(p, [("x", dt, shape, raw)])
    tout = getattr(torch, out)
    if dt == "F4":  # torch cannot convert float4_e2m1fn_x2: the nibbles, low one first
        b = np.frombuffer(raw, dtype=np.uint8)
        codes = np.stack([b & 0xF, b >> 4], axis=1).reshape(-1)
        vals = [(-1 if c & 8 else 1) * E2M1[c & 7] for c in codes]
        want = torch.tensor(vals, dtype=torch.float32).reshape(shape).to(tout)
    else:
        want = st_load_file(p)["x"].to(torch.float32 if dt == "F64" else getattr(torch, out)).to(tout)
        if dt == "F64":  # torch converts F64 -> F16 / BF16 through F32
            want = st_load_file(p)["x"].to(torch.float32).to(tout)
    with ctstream.open(p, framework="pt") as ck:
        got = ck.get("x", dtype=out)
        assert got.dtype == tout and list(got.shape) == shape
        assert torch.equal(got.isnan(), want.isnan())
        m = ~want.isnan()
        assert torch.equal(got[m].float(), want[m].float())
        got_slice = ck.get_slice("x", dtype=out)[1:3]
        assert torch.equal(got_slice.nan_to_num(), want[1:3].nan_to_num())
    with ctstream.safe_open(p, "pt") as f:  # ctstream extension: get_tensor(dtype=)
        assert f.get_tensor("x", dtype=out).dtype == tout


def test_f6_is_refused_not_ignored(tmp_path):
    p = str(tmp_path / "f6.safetensors")
    write_st(p, [("x", "F6_E2M3", [8], bytes(6))])
    with ctstream.open(p) as ck:
        with pytest.raises(ValueError, match="no element order"):
            ck.get("x", dtype="float32")
    with ctstream.safe_open(p, "pt") as f:
        with pytest.raises(SafetensorError, match="Dtype not understood: F6_E2M3"):
            f.get_tensor("x")


def test_torch_index_forms(tmp_path):
    p = str(tmp_path / "m.safetensors")
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    write_st(p, [("x", "F32", [3, 4], x.numpy().tobytes())])
    with ctstream.safe_open(p, "pt") as f:
        s = f.get_slice("x")
        assert torch.equal(s[True], x[True]) and list(s[True].shape) == [1, 3, 4]  # a bool index, not row 1
        assert torch.equal(s[[]], x[[]]) and torch.equal(s[[0, 2]], x[[0, 2]]) and torch.equal(s[[[0, 1]]], x[[[0, 1]]])
        assert torch.equal(s[None], x[None]) and torch.equal(s[:, None, 1:3], x[:, None, 1:3])
        assert torch.equal(s[-2:, ::2], x[-2:, ::2]) and torch.equal(s[1:100], x[1:100])
        with pytest.raises(IndexError) as e:
            s[3]
        assert isinstance(e.value, ctstream.Error) and "out of bounds" in str(e.value)
        with pytest.raises(ValueError):
            s[::-1]
    with ctstream.open(p, framework="pt") as ck:  # the native API follows the same rules
        assert torch.equal(ck.get_slice("x")[True], x[True]) and torch.equal(ck.get_slice("x")[[2, 0]], x[[2, 0]])


def test_errors_are_the_types_people_catch(tmp_path):
    p = str(tmp_path / "m.safetensors")
    write_st(p, [("x", "F32", [2], bytes(8))])
    with pytest.raises(FileNotFoundError, match="No such file or directory: nope.safetensors") as e:
        ctstream.safe_open("nope.safetensors", "pt")
    assert isinstance(e.value, ctstream.Error)
    with pytest.raises(FileNotFoundError):
        ctstream.open("nope.safetensors")
    f = ctstream.safe_open(p, "pt")
    with pytest.raises(KeyError) as e:
        f.get_tensor("y")
    assert isinstance(e.value, ctstream.Error) and isinstance(e.value, SafetensorError)
    assert str(e.value) == "File does not contain tensor y"
    with pytest.raises(SafetensorError):
        f.get_slice("y")
    s = f.get_slice("x")
    with f:
        pass
    for call in (f.keys, f.metadata, lambda: f.get_tensor("x"), lambda: f.get_slice("x"), f.offset_keys):
        with pytest.raises(SafetensorError, match="File is closed") as e:
            call()
        assert isinstance(e.value, ctstream.ClosedError)
    assert s[0:1].shape == (1,) or list(s[0:1].shape) == [1]  # slices obtained before close still work
    for fw in (None, 1, b"pt"):  # argument extraction: a TypeError, as safetensors raises
        with pytest.raises(TypeError):
            st_safe_open(p, fw)
        with pytest.raises(TypeError, match="argument 'framework': .* is not an instance of 'str'") as e:
            ctstream.safe_open(p, fw)
        assert isinstance(e.value, ctstream.Error)
    with pytest.raises(SafetensorError, match="framework PT is invalid"):
        ctstream.safe_open(p, "PT")
    with pytest.raises(SafetensorError, match="is not supported for framework numpy"):
        ctstream.safe_open(p, "np", device="cuda:0")
    with pytest.raises(SafetensorError, match='backend "aio" is invalid'):
        ctstream.safe_open(p, "pt", backend="aio")
    bad = str(tmp_path / "bad.safetensors")
    with open(bad, "wb") as fh:
        fh.write(struct.pack("<Q", 4) + b"{]]]")
    with pytest.raises(SafetensorError) as e:
        ctstream.safe_open(bad, "pt")
    assert isinstance(e.value, ctstream.Error) and e.value.kind == "invalid_header"


def test_metadata_none_and_sorted_keys(tmp_path):
    p = str(tmp_path / "m.safetensors")
    write_st(p, [("b", "F32", [1], bytes(4)), ("a.x", "F32", [1], bytes(4)), ("B", "F32", [1], bytes(4))])
    with ctstream.safe_open(p, "np") as f:
        assert f.metadata() is None
        assert f.keys() == sorted(["b", "a.x", "B"]) and f.offset_keys() == ["b", "a.x", "B"]
    with ctstream.open(p) as ck:
        assert ck.metadata() is None
    write_st(p, [("a", "F32", [1], bytes(4))], metadata={})
    with ctstream.safe_open(p, "np") as f:
        assert f.metadata() == {}


@pytest.mark.parametrize("case", ["v020_pack_w4_g32_asym_bf16", "v012_sparse_bitmask_bf16", "v020_nvfp4a16_bf16",
                                  "v020_fp8_block128_bf16"])
def test_compressed_checkpoints_decode_through_safe_open(case):
    d = os.path.join(CT, case)
    want = st_load_file(os.path.join(d, "expected", "expected.safetensors"))
    leftovers = (".input_scale", ".input_zero_point", ".input_global_scale", ".output_scale", ".output_zero_point")
    with ctstream.safe_open(os.path.join(d, "model.safetensors"), "pt") as f:
        assert set(want) <= set(f.keys()) and all(k.endswith(leftovers) for k in set(f.keys()) - set(want))
        for k, w in want.items():
            g = f.get_tensor(k)
            assert g.dtype == w.dtype and torch.equal(g.view(torch.int16) if g.dtype == torch.bfloat16 else g,
                                                       w.view(torch.int16) if w.dtype == torch.bfloat16 else w), k
        name = next(k for k in sorted(want) if k.endswith("proj.weight"))  # a decoded (compressed) weight
        assert torch.equal(f.get_slice(name)[2:5, 1:], want[name][2:5, 1:])
    stored = st_load_file(os.path.join(d, "model.safetensors"))
    with ctstream.safe_open(d, "pt", packed=True) as f:  # a directory, its stored entries
        assert f.keys() == sorted(stored)
        for k, v in stored.items():  # bit for bit (NaN payloads included)
            g = f.get_tensor(k)
            assert g.dtype == v.dtype and g.shape == v.shape, k
            assert torch.equal(g.reshape(-1).view(torch.uint8), v.reshape(-1).view(torch.uint8)), k
    got = ctstream.torch.load_file(os.path.join(d, "model.safetensors"))
    assert list(got) == ctstream.safe_open(os.path.join(d, "model.safetensors"), "pt").offset_keys()
    if any(w.dtype == torch.bfloat16 for w in got.values()):  # numpy has no bfloat16: as safetensors.numpy
        with pytest.raises(TypeError, match="bfloat16"):
            ctstream.numpy.load_file(os.path.join(d, "model.safetensors"))
    else:
        arrs = ctstream.numpy.load_file(os.path.join(d, "model.safetensors"))
        assert set(arrs) == set(got) and all(np.array_equal(arrs[k], got[k].numpy()) for k in got)


def test_numpy_index_arrays_and_0d_numpy_slices_as_safetensors(tmp_path):
    # Index arrays are compared by identity with Ellipsis (numpy answers == element-wise: an
    # ambiguous-truth error before); a 0-d tensor sliced with () / ... stays a 0-d numpy array.
    from safetensors.torch import save_file as st_save_file
    p = str(tmp_path / "a.safetensors")
    st_save_file({"x": torch.arange(60, dtype=torch.float32).reshape(3, 4, 5), "s": torch.tensor(2.5)}, p)
    keys = [np.array([0, 2]), np.array([True, False, True]), (slice(None), np.array([0, 3])),
            (np.array([1]), Ellipsis)]
    with st_safe_open(p, "pt") as ref, ctstream.safe_open(p, framework="pt") as got:
        for k in keys:
            assert torch.equal(got.get_slice("x")[k], ref.get_slice("x")[k]), k
    with st_safe_open(p, "np") as ref, ctstream.safe_open(p, framework="np") as got:
        for k in [(), Ellipsis, (Ellipsis,)]:
            a, b = got.get_slice("s")[k], ref.get_slice("s")[k]
            assert type(a) is type(b) is np.ndarray and a.shape == b.shape == () and a == b


def test_empty_tensor_numpy_cannot_hold_is_a_ctstream_error(tmp_path):
    # [0, 2^32, 2^32] F32 is valid safetensors (0 bytes) but no numpy array: a ctstream error, not
    # numpy's bare ValueError at conversion
    hdr = json.dumps({"z": {"dtype": "F32", "shape": [0, 2 ** 32, 2 ** 32], "data_offsets": [0, 0]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    p = tmp_path / "z.safetensors"
    p.write_bytes(struct.pack("<Q", len(hdr)) + hdr)
    with ctstream.safe_open(str(p), framework="pt") as f:
        with pytest.raises(ctstream.Error):
            f.get_tensor("z")


def test_a_directory_without_safetensors_is_an_oserror(tmp_path):
    # safetensors raises OSError for a directory; ctstream opens one that holds a checkpoint, and
    # one that holds none raised a NotFoundError (a KeyError), which `except OSError` missed
    (tmp_path / "README.md").write_text("no weights here")
    with pytest.raises(OSError):
        ctstream.safe_open(str(tmp_path), framework="pt")
    with pytest.raises(FileNotFoundError, match="holds no"):
        ctstream.open(str(tmp_path))


@pytest.mark.parametrize("rank", [65, 129])
@pytest.mark.parametrize("fw", ["pt", "np"])
def test_more_dims_than_numpy_holds_is_a_ctstream_error(tmp_path, rank, fw):
    # numpy holds at most 64 dims. A valid one-byte tensor of shape [1] * 65 came back as a 0-d
    # object array (np) or a TypeError (pt); past 128 dims nanobind aborted the process.
    hdr = json.dumps({"r": {"dtype": "U8", "shape": [1] * rank, "data_offsets": [0, 1]}}).encode()
    hdr += b" " * (-len(hdr) % 8)
    p = tmp_path / "r.safetensors"
    p.write_bytes(struct.pack("<Q", len(hdr)) + hdr + b"\x07")
    with ctstream.safe_open(str(p), framework=fw) as f:
        assert f.get_slice("r").get_shape() == [1] * rank
        with pytest.raises(ctstream.Error, match=f"'r' has {rank} dims"):
            f.get_tensor("r")
    ck = ctstream.open(str(p))
    with pytest.raises(ctstream.Error, match="at most 64"):
        ck.get("r")
    with pytest.raises(ctstream.Error, match="at most 64"):
        next(iter(ck.tensors()))
    with pytest.raises(ctstream.Error, match="at most 64"):
        ck.part("r", "weight")


DEVICES = [None, "cpu", "cuda", "cuda:0", "cuda:3", "cuda:+1", "mps", "mps:0", "mps:1", "xpu", "xpu:3", "npu:1", "hpu",
           "xla:1", "mlu", "musa:2", "cuda:1:2", "cuda:x", "cuda:", "cuda:-1", "mps:x", "cuda:99999999999999999999",
           "meta", "foo", "CPU", "cpu:0", " cuda", "ipu", "privateuseone", 0, 3, -1, True, False, 1.5, b"cpu", [0]]


@pytest.mark.parametrize("fw", ["pt", "np"])
def test_devices_parse_as_safetensors(tmp_path, fw):
    # safetensors 0.8's device grammar: accelerators it names (mps, xpu, npu, hpu ...) open; a torch
    # device is only touched when a tensor is read, which this machine cannot for those
    p = str(tmp_path / "d.safetensors")
    write_st(p, [("x", "F32", [2], bytes(8))])
    for dev in DEVICES:
        try:
            st_safe_open(p, fw, device=dev)
            want = None
        except Exception as e:  # noqa: BLE001 - the type is what is compared
            want = e
        if want is None:
            ctstream.safe_open(p, fw, device=dev)  # opens too
            continue
        with pytest.raises(type(want)) as got:
            ctstream.safe_open(p, fw, device=dev)
        assert str(got.value) == str(want), dev
        assert isinstance(got.value, ctstream.Error), dev
    with ctstream.safe_open(p, fw, device=None) as f:
        assert f.get_tensor("x").shape == (2,) or list(f.get_tensor("x").shape) == [2]


def _raise_in_child(path):  # a process pool's worker: its error crosses back pickled
    ctstream.safe_open(path, "pt").get_tensor("missing")


def test_errors_pickle_and_cross_processes(tmp_path):
    import concurrent.futures
    import multiprocessing
    import pickle

    p = str(tmp_path / "e.safetensors")
    write_st(p, [("x", "F32", [2], bytes(8))])
    bad = str(tmp_path / "bad.safetensors")
    with open(bad, "wb") as fh:
        fh.write(struct.pack("<Q", 4) + b"{]]]")
    closed = ctstream.safe_open(p, "pt")
    closed.__exit__(None, None, None)
    raisers = [lambda: ctstream.safe_open(p, "pt").get_tensor("missing"),  # KeyError + SafetensorError
               lambda: closed.keys(),  # ClosedError
               lambda: ctstream.safe_open(p, None),  # TypeError
               lambda: ctstream.safe_open(p, "pt", device="cuda:x"),  # ValueError
               lambda: ctstream.safe_open(p, "np", device="cuda:1:2"),
               lambda: ctstream.safe_open(bad, "pt"),  # invalid header
               lambda: ctstream.safe_open(str(tmp_path / "nope.safetensors"), "pt"),  # FileNotFoundError
               lambda: ctstream.open(bad),  # the reader's own API
               lambda: ctstream.safe_open(p, "np").get_slice("x")[2 ** 70]]  # OverflowError
    for raiser in raisers:
        with pytest.raises(ctstream.Error) as e:
            raiser()
        back = pickle.loads(pickle.dumps(e.value))
        assert type(back) is type(e.value) and back.args == e.value.args and str(back) == str(e.value)
        for attr in ("kind", "file", "tensor"):
            assert getattr(back, attr, None) == getattr(e.value, attr, None), attr
    # a worker of another process raises; the parent gets the same error (spawn: a fresh interpreter,
    # in which the error's class is rebuilt)
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        with pytest.raises(KeyError) as e:
            pool.submit(_raise_in_child, p).result()
    assert isinstance(e.value, SafetensorError) and isinstance(e.value, ctstream.NotFoundError)
    assert str(e.value) == "File does not contain tensor missing" and e.value.tensor == "missing"


def test_a_closed_handle_enters_as_safetensors(tmp_path):
    p = str(tmp_path / "c.safetensors")
    write_st(p, [("x", "F32", [2], bytes(8))])
    for opener in (st_safe_open, ctstream.safe_open):
        f = opener(p, "pt")
        with f:
            pass
        with f:  # entering again is allowed; its calls fail
            with pytest.raises(SafetensorError, match="File is closed"):
                f.keys()


def test_one_shard_of_a_model_whose_modules_were_cut_between_shards(tmp_path):
    # transformers' save_pretrained with a small max_shard_size may store a module's weight_packed
    # in one shard and its weight_scale in the next. Opening shard 1 alone failed ("no
    # 'weight_scale' part"), and shard 2 listed the orphan scale as a plain tensor: per-shard loaders
    # (`for f in shards: with safe_open(f) ...`, as vLLM's and transformers') broke. Each shard now
    # lists the tensors whose values it stores, reading cut modules' other parts from the index's
    # sibling shards, so the shards together list every tensor once.
    from safetensors.torch import save_file, load_file
    import safetensors
    g = torch.Generator().manual_seed(3)
    sd = {f"model.layers.{i}.mlp.proj.weight": torch.randn(64, 128, generator=g).to(torch.bfloat16) for i in range(3)}
    sd["model.norm.weight"] = torch.randn(128, generator=g).to(torch.bfloat16)
    src = tmp_path / "whole"
    ctstream.save_file(sd, src, format="pack-quantized", group_size=32)
    stored = {}
    for f in src.glob("*.safetensors"):
        stored.update(load_file(str(f)))
    # shard 1: layer 0 without its scale, layer 1's scale; shard 2: everything else
    one = {k: v for k, v in stored.items()
           if (k.startswith("model.layers.0.") and not k.endswith("weight_scale")) or k == "model.layers.1.mlp.proj.weight_scale"}
    two = {k: v for k, v in stored.items() if k not in one}
    out = tmp_path / "cut"
    out.mkdir()
    names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    save_file(one, str(out / names[0]), metadata={"format": "pt"})
    save_file(two, str(out / names[1]), metadata={"format": "pt"})
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {**{k: names[0] for k in one}, **{k: names[1] for k in two}}}))
    shutil.copy(src / "config.json", out / "config.json")
    whole = ctstream.open(str(out))
    listed = []
    for n in names:
        with ctstream.safe_open(str(out / n), framework="pt") as f:
            listed += f.keys()
            for k in f.keys():
                assert torch.equal(f.get_tensor(k), whole.get(k)), (n, k)
            with safetensors.safe_open(str(out / n), framework="pt") as ref:
                assert f.metadata() == ref.metadata()  # this file's, not a sibling's
    assert sorted(listed) == sorted(whole.keys())  # each tensor once
    assert "model.layers.0.mlp.proj.weight" in ctstream.safe_open(str(out / names[0]), framework="pt").keys()
    assert "model.layers.1.mlp.proj.weight" not in ctstream.safe_open(str(out / names[0]), framework="pt").keys()
    # one shard of a partly downloaded model: the index names a shard that is not there, which
    # this one does not need (its modules are whole) -- and one that needs it names it
    partial = tmp_path / "partial"
    partial.mkdir()
    a = {k: v for k, v in stored.items() if k.startswith(("model.layers.2.", "model.norm."))}
    b = {k: v for k, v in stored.items() if k not in a}
    b_cut = {k: v for k, v in b.items() if not k.startswith("model.layers.1.") or k.endswith("weight_packed")}
    save_file(a, str(partial / names[0]), metadata={"format": "pt"})
    save_file(b_cut, str(partial / names[1]), metadata={"format": "pt"})
    (partial / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        **{k: names[0] for k in a}, **{k: names[1] for k in b_cut},
        **{k: "model-00003-of-00003.safetensors" for k in b if k not in b_cut}}}))
    shutil.copy(src / "config.json", partial / "config.json")
    with ctstream.safe_open(str(partial / names[0]), framework="pt") as f:
        assert f.keys() == ["model.layers.2.mlp.proj.weight", "model.norm.weight"]
        assert torch.equal(f.get_tensor("model.norm.weight"), whole.get("model.norm.weight"))
    with pytest.raises(ctstream.Error, match="model-00003-of-00003"):
        ctstream.safe_open(str(partial / names[1]), framework="pt")
    # the file alone, as asked
    with pytest.raises(ctstream.Error, match="weight_scale"):
        ctstream.open(str(out / names[0]), sibling_shards=False)
    # packed: each shard's own entries, as safetensors lists them (a cut module's orphan scale
    # included; opening shard 1 packed failed), byte for byte; likewise stored_entries=True
    for n in names:
        with safetensors.safe_open(str(out / n), framework="pt") as ref, \
                ctstream.safe_open(str(out / n), framework="pt", packed=True) as f:
            assert f.keys() == ref.keys()
            for k in ref.keys():
                got, want = f.get_tensor(k), ref.get_tensor(k)
                assert got.dtype == want.dtype and torch.equal(got, want), (n, k)
        plain = ctstream.open(str(out / n), stored_entries=True)
        assert sorted(plain.keys()) == sorted(load_file(str(out / n)))

