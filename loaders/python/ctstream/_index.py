"""Indexing a tensor that is decoded on demand: the index is checked (and its result shape
computed) on a data-free stand-in with the framework's own indexing - a zero-stride torch or numpy
view of one element - so every index form and every error is exactly torch's / numpy's; then
only the rows (or columns) the index touches along its most selective dimension are decoded, and
the index, shifted to that block, is applied to it by the same framework.

``rust_index`` is the other semantics: safetensors' own parser for ``framework="np"`` (and
``backend="pread"``), which ``ctstream.safe_open`` mirrors - ints (``True`` counts as 1), slices
with step >= 1 and no clamping, one ``...``, the empty list; nothing else.
"""
from __future__ import annotations

import operator
from typing import Any, List, Optional, Sequence, Tuple

# A decode plan: decode [a, b) along `dim` (None: the whole tensor), then apply `key` to it.
Plan = Tuple[Optional[int], int, int, Any]


def _dummy(shape: Sequence[int], framework: str):
    # A zero-stride view of one element: real (so that index values are bounds-checked, which a
    # meta tensor cannot do for int lists / tensors), no memory of the tensor's size.
    if framework == "pt":
        import torch

        return torch.zeros((), dtype=torch.uint8).expand(tuple(shape))
    import numpy as np

    return np.broadcast_to(np.zeros((), dtype=np.uint8), tuple(shape))


def _expand(key, ndim: int) -> Optional[List[Any]]:
    """The key as one entry per source dimension (None entries and Ellipsis resolved), or None when
    it cannot be mapped entry by entry (a multi-dimensional boolean mask, ...)."""
    if not isinstance(key, tuple):
        key = (key,)
    consumed = []
    for k in key:
        if k is None:
            continue
        if k is Ellipsis:
            consumed.append(Ellipsis)
            continue
        if _is_bool_array(k) and getattr(k, "ndim", 1) != 1:
            return None
        if isinstance(k, bool):
            return None  # a boolean scalar index adds a dimension
        consumed.append(k)
    # Identity, never ==: a numpy array answers == element by element (and `in` / count() / index()
    # compare with ==), which made `get_slice(..)[np.array([0, 2])]` an ambiguous-truth error.
    ellipses = [i for i, k in enumerate(consumed) if k is Ellipsis]
    if len(ellipses) > 1:
        return None
    if ellipses:
        i = ellipses[0]
        consumed = consumed[:i] + [slice(None)] * (ndim - len(consumed) + 1) + consumed[i + 1:]
    consumed += [slice(None)] * (ndim - len(consumed))
    return consumed if len(consumed) == ndim else None


def _is_int(k) -> bool:
    try:
        operator.index(k)
        return not isinstance(k, bool)
    except TypeError:
        return False


def _is_bool_array(k) -> bool:
    dt = getattr(k, "dtype", None)
    return dt is not None and str(dt).endswith("bool")


def _bounds(k, n: int) -> Optional[Tuple[int, int]]:
    """[lo, hi) of the source indices entry `k` touches along a dimension of size n."""
    if isinstance(k, slice):
        start, stop, step = k.indices(n)
        idx = range(start, stop, step)
        if len(idx) == 0:
            return (0, 0)
        return (min(idx[0], idx[-1]), max(idx[0], idx[-1]) + 1)
    try:
        i = operator.index(k)
        return (i + n if i < 0 else i, (i + n if i < 0 else i) + 1)
    except TypeError:
        pass
    try:
        import numpy as np

        a = np.asarray(k.cpu() if hasattr(k, "cpu") else k)
    except Exception:  # noqa: BLE001 - not an array-like: let the framework decide
        return None
    if a.dtype == bool:
        nz = np.nonzero(a)[0]
        return (int(nz.min()), int(nz.max()) + 1) if nz.size else (0, 0)
    if a.dtype.kind not in "iu":
        return None
    if a.size == 0:
        return (0, 0)
    a = np.where(a < 0, a + n, a)
    return (int(a.min()), int(a.max()) + 1)


def _shift(k, a: int, b: int, n: int):
    """Entry `k` re-expressed relative to the block [a, b) of a dimension of size n."""
    if isinstance(k, slice):
        start, stop, step = k.indices(n)
        if step > 0:
            return slice(start - a, max(stop, start) - a, step)
        st = stop - a  # step < 0: a stop before the block's first row means "down to row 0"
        return slice(start - a, None if stop < 0 or st < 0 else st, step)
    try:
        i = operator.index(k)
        return (i + n if i < 0 else i) - a
    except TypeError:
        pass
    import numpy as np

    if hasattr(k, "cpu"):  # torch tensor index: keep it a tensor
        if _is_bool_array(k):
            return k[a:b]
        return (k + n * (k < 0).to(k.dtype)) - a
    arr = np.asarray(k)
    if arr.dtype == bool:
        return arr[a:b]
    if isinstance(k, list) and arr.size == 0:
        return k
    out = np.where(arr < 0, arr + n, arr) - a
    return out.tolist() if isinstance(k, list) else out


def plan(key, shape: Sequence[int], framework: str) -> Plan:
    """Checks `key` with the framework's own indexing (raising exactly its error) and returns
    which block to decode and the key to apply to that block."""
    want = _dummy(shape, framework)[key].shape  # raises IndexError / ValueError / TypeError as torch / numpy would
    if isinstance(key, list) and not all(_is_int(k) for k in key):
        return (None, 0, 0, key)  # a top-level list holding sequences is read as a tuple by torch
    entries = _expand(key, len(shape))
    if entries is None:
        return (None, 0, 0, key)
    best = None
    for d, (k, n) in enumerate(zip(entries, shape)):
        if isinstance(k, slice) and k.indices(n) == (0, n, 1):
            continue
        bnd = _bounds(k, n)
        if bnd is None:
            return (None, 0, 0, key)
        frac = (bnd[1] - bnd[0]) / max(n, 1)
        if best is None or frac < best[0]:
            best = (frac, d, bnd)
    if best is None or best[0] >= 1:
        return (None, 0, 0, key)
    _, d, (a, b) = best
    # rebuild the original key with entry d shifted (Nones and Ellipsis kept where they were)
    new, src = [], 0
    kt = key if isinstance(key, tuple) else (key,)
    nd = len(shape)
    explicit = sum(1 for k in kt if k is not None and k is not Ellipsis)
    for k in kt:  # d is an explicit entry (full slices were skipped above)
        if k is None:
            new.append(k)
        elif k is Ellipsis:
            new.append(k)
            src += nd - explicit
        else:
            new.append(_shift(k, a, b, shape[d]) if src == d else k)
            src += 1
    k2 = tuple(new) if isinstance(key, tuple) else new[0]
    # The shifted key must give the shape the framework gives on the whole tensor; where it does
    # not (torch computes x[:, ::2**63-1] as 0 columns: an overflow of its own), the whole tensor
    # is decoded and the original key applied, so the answer is the framework's, quirks included.
    block = list(shape)
    block[d] = b - a
    try:
        same = _dummy(block, framework)[k2].shape == want
    except (IndexError, ValueError, TypeError, RuntimeError):
        same = False
    return (d, a, b, k2) if same else (None, 0, 0, key)


# ---- safetensors' own index parser (framework "np", backend "pread") ----------------------------

class RustIndexError(Exception):
    """A safetensors SafetensorError message, raised by rust_index (the caller picks the class)."""


def rust_index(key, shape: Sequence[int], bits: int = 8) -> Tuple[List[Tuple[int, int, int]], List[int]]:
    """safetensors 0.8 `parse_indexers` (bindings/python/src/lib.rs) + `slice_byte_ranges`
    (safetensors/src/slice.rs), checks in their order: returns one (start, stop, step) per
    dimension and the dimensions an int removes, or raises RustIndexError(message), OverflowError
    (a negative slice bound, extracted as unsigned) or SystemError (stop < start, which underflows
    in safetensors). `bits`: the dtype's size in bits (sub-byte slices must be byte-aligned)."""
    shape = list(shape)
    if isinstance(key, list):
        if key:
            raise RustIndexError("Non empty lists are not implemented")
        indexers: List[Any] = [("narrow", 0, 0, 1)]
    else:
        items = list(key) if isinstance(key, tuple) else [key]
        if sum(1 for k in items if k is Ellipsis) > 1:
            raise RustIndexError("Only one ellipsis (...) is allowed in slice index")
        has_ellipsis = any(k is Ellipsis for k in items)  # identity: numpy arrays compare element-wise
        n_expansion = max(0, len(shape) - (len(items) - (1 if has_ellipsis else 0)))
        indexers = []
        for k in items:
            dim_idx = len(indexers)
            if k is Ellipsis:
                indexers += [("narrow", None, None, 1)] * n_expansion
            elif isinstance(k, slice):
                # extracted as Rust usize (start, stop) and isize (step), in that order
                start = None if k.start is None else operator.index(k.start)
                stop = None if k.stop is None else operator.index(k.stop)
                for v in (start, stop):
                    if v is not None and v < 0:
                        raise OverflowError("can't convert negative int to unsigned")
                    if v is not None and v >= 2**64:
                        raise OverflowError("int too big to convert")
                step = 1 if k.step is None else operator.index(k.step)
                if not -(2**63) <= step < 2**63:
                    raise OverflowError("Python int too large to convert to C long")
                if step < 1:
                    raise RustIndexError(f"Slice step must be a positive integer, got {step}")
                indexers.append(("narrow", start, stop, step))
            else:
                try:
                    i = operator.index(k)
                except TypeError:
                    i = None
                if i is None or not -(2**31) <= i < 2**31:
                    raise RustIndexError(f"Unsupported slice index at position {dim_idx}: expected slice, int, or ellipsis")
                dim = shape[dim_idx] if dim_idx < len(shape) else 0
                if i < 0 and dim + i < 0:
                    raise RustIndexError(f"Invalid index {i} for dimension {dim_idx} of size {dim}")
                indexers.append(("select", dim + i if i < 0 else i))

    def shown() -> str:
        out = []
        for ix in indexers:
            if ix[0] == "select":
                out.append(str(ix[1]))
            else:
                a = "" if ix[1] is None else str(ix[1])
                b = "" if ix[2] is None else str(ix[2])
                out.append(f"{a}:{b}" if ix[3] == 1 else f"{a}:{b}:{ix[3]}")
        return "[" + ", ".join(out) + "]"

    def fail(what: str):
        raise RustIndexError(f"Error during slicing {shown()} with shape {shape}: {what}")

    if len(indexers) > len(shape):
        fail("more slicing indexes than dimensions in tensor")
    misaligned = "The slice is slicing for subbytes dtypes, and the slice does not end up at a byte boundary, this is invalid."
    ranges: List[Tuple[int, int, int]] = [(0, n, 1) for n in shape]
    squeeze: List[int] = []
    span, sliced = bits, False
    for d in reversed(range(len(shape))):  # innermost first, as slice_byte_ranges does
        n = shape[d]
        if d < len(indexers):
            ix = indexers[d]
            if ix[0] == "select":
                a, b, step = ix[1], ix[1] + 1, 1
                squeeze.append(d)
            else:
                a = 0 if ix[1] is None else ix[1]
                b = n if ix[2] is None else ix[2]
                step = ix[3]
            if a >= n or b > n:
                fail(f"index {a if a >= n else max(b - 1, 0)} out of bounds for tensor dimension #{d} of size {n}")
            if b < a:
                raise SystemError("Negative size passed to PyByteArray_FromStringAndSize")
            if span % 8 == 0 and (sliced or not (step == 1 and a == 0 and b == n)):
                sliced = True  # whole bytes: always aligned
            elif not sliced and not (step == 1 and a == 0 and b == n):
                sliced = True
                cuts = [a, b] if step == 1 else [x for m in range(a, b, step) for x in (m, m + 1)]
                if any(x * span % 8 for x in cuts):
                    fail(misaligned)
            elif sliced and any(m * span % 8 for m in range(a, b, step)):
                fail(misaligned)
            ranges[d] = (a, b, step)
        span *= n
    if not sliced and span % 8:
        fail(misaligned)
    return ranges, sorted(squeeze)
