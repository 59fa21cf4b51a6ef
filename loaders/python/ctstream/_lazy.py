"""Lazily decoded tensors (torch): a ``LazyTensor`` has the shape and dtype of a checkpoint tensor
but no data until an operation needs it. Narrowing or slicing one dimension with step 1 stays lazy
(the slice is decoded, not the whole tensor), and copying it into a contiguous CPU tensor of its
dtype decodes straight into that tensor's memory. Anything else decodes it first.

That is exactly what an engine's weight loaders do with a full checkpoint tensor under tensor
parallelism - ``param.data.copy_(loaded_weight.narrow(dim, rank * shard, shard))`` - so each
rank decodes only the rows (or columns) it keeps, into the parameter itself. The result is
bit-identical to decoding the whole tensor and slicing it (ctstream's slice decode is exact).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.utils._pytree import tree_map

_aten = torch.ops.aten


class LazyTensor(torch.Tensor):
    """A checkpoint tensor decoded on demand (see the module docstring)."""

    @staticmethod
    def __new__(cls, ckpt, name: str, dtype: Optional[str], torch_dtype: torch.dtype, shape, sl=None):
        t = torch.Tensor._make_wrapper_subclass(cls, tuple(shape), dtype=torch_dtype, device="cpu", requires_grad=False)
        t._ckpt, t._name, t._dt, t._slice = ckpt, name, dtype, sl
        return t

    def __init__(self, *args, **kwargs):
        pass

    def __repr__(self) -> str:  # noqa: D105
        s = "" if self._slice is None else f", dim {self._slice[0]} [{self._slice[1]}:{self._slice[2]}]"
        return f"LazyTensor('{self._name}'{s}, shape={tuple(self.shape)}, dtype={self.dtype})"

    def materialize(self, out: Optional[torch.Tensor] = None, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """Decodes (the selected slice of) the tensor, into `out` when given (as `dtype`: default,
        this tensor's)."""
        dt = self._dt if dtype is None else dtype
        if self._slice is None:
            return self._ckpt.get(self._name, dtype=dt, out=out)
        dim, start, stop = self._slice
        return self._ckpt._get(self._name, dt, out, dim, start, stop)

    def _sliced(self, dim: int, start: int, stop: int) -> "LazyTensor":
        shape = list(self.shape)
        shape[dim] = stop - start
        if self._slice is not None:  # a slice of a slice: offsets add up (one dimension only)
            d0, s0, _ = self._slice
            if d0 != dim:
                raise _NotLazy
            start, stop = s0 + start, s0 + stop
        return LazyTensor(self._ckpt, self._name, self._dt, self.dtype, shape, (dim, start, stop))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        try:
            if func is _aten.slice.Tensor and isinstance(args[0], LazyTensor):
                t = args[0]
                dim = args[1] if len(args) > 1 else kwargs.get("dim", 0)
                start = args[2] if len(args) > 2 else kwargs.get("start", None)
                end = args[3] if len(args) > 3 else kwargs.get("end", None)
                step = args[4] if len(args) > 4 else kwargs.get("step", 1)
                dim = dim % t.dim()
                n = t.shape[dim]
                start = 0 if start is None else (start + n if start < 0 else start)
                end = n if end is None else (end + n if end < 0 else end)
                start, end = max(0, min(start, n)), max(0, min(end, n))
                if step == 1 and end >= start:
                    return t._sliced(dim, start, end)
            if func is _aten.copy_.default and isinstance(args[1], LazyTensor) and not isinstance(args[0], LazyTensor):
                dst, src = args[0], args[1]
                if dst.device.type == "cpu" and tuple(dst.shape) == tuple(src.shape) and dst.is_contiguous():
                    if dst.dtype == src.dtype:
                        src.materialize(out=dst)  # straight into the destination's memory
                        return dst
                    if src._dt is None and src.dtype in _FLOATS and dst.dtype in _FLOATS:
                        # natural values into a parameter of another floating dtype (one vLLM keeps
                        # in float32, or the model dtype): ctstream's decode as that dtype is the
                        # natural value rounded once to it, the cast copy_ would make
                        src.materialize(out=dst, dtype=dst.dtype)
                        return dst
            if func is _aten.detach.default and isinstance(args[0], LazyTensor):
                t = args[0]
                return LazyTensor(t._ckpt, t._name, t._dt, t.dtype, t.shape, t._slice)
        except _NotLazy:
            pass
        args = tree_map(lambda a: a.materialize() if isinstance(a, LazyTensor) else a, args)
        kwargs = tree_map(lambda a: a.materialize() if isinstance(a, LazyTensor) else a, kwargs)
        return func(*args, **kwargs)


class _NotLazy(Exception):
    pass


_TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "I64": "int64",
                 "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16",
                 "U32": "uint32", "U64": "uint64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


_FLOATS = (torch.bfloat16, torch.float16, torch.float32)  # the floating dtypes ctstream decodes to


def lazy(ckpt, name: str, dtype: Optional[str]) -> Optional[LazyTensor]:
    """A LazyTensor for `name` decoded as `dtype` (None: natural), or None when its output dtype
    has no torch equivalent (then decode it eagerly)."""
    out = ckpt._n.resolved_dtype(name, dtype)
    td = _TORCH_DTYPES.get(out)
    if td is None or not hasattr(torch, td):
        return None
    return LazyTensor(ckpt, name, dtype, getattr(torch, td), ckpt.info(name).shape)
