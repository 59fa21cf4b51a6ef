"""``ctstream.safe_open``: safetensors' ``safe_open`` API and semantics (safetensors 0.8), on
ctstream's reader. On a plain safetensors file it behaves like safetensors; on a compressed-tensors
checkpoint (a file with its config.json beside it, or a checkpoint directory) it yields the decoded
logical tensors (``packed=True``: the stored entries instead).

Semantics followed (safetensors 0.8.0, bindings/python/src/lib.rs), so that replacing
``safetensors.safe_open`` by this in a program just works:

* ``keys()`` sorted, ``offset_keys()`` in file order, ``metadata()`` None when the file has none;
* ``get_tensor`` / ``get_tensors`` / ``get_slice`` -> ``get_shape()`` (list), ``get_dtype()`` (the
  header spelling), indexing; ``framework="pt"`` indexes with torch's own rules and errors (any
  torch index: negative ints and slices, ``None``, ``...``, bools, int lists and tensors, masks),
  ``framework="np"`` with safetensors' own parser (ints, step >= 1 slices without clamping, one
  ``...``, the empty list), as safetensors does;
* dtypes as safetensors maps them: F4 is ``torch.float4_e2m1fn_x2`` with the last dim halved (its
  slices follow the byte-range parser and stay packed: safetensors 0.8 fails on them), F6
  is refused ("Dtype not understood"), numpy refuses bfloat16 (unless ml_dtypes is imported), F8
  and F4 as safetensors does;
* errors of the types safetensors raises: a missing file is a ``FileNotFoundError``, a closed
  handle, an unknown name, a bad header ... are ``safetensors.SafetensorError`` when safetensors is
  installed; a ``framework`` that is no str is a ``TypeError``, a slice bound past the Rust integer
  safetensors extracts it as (usize start/stop, isize step; ``framework="np"``) an
  ``OverflowError``. Every error is also a ``ctstream.Error`` (and the unknown name a ``KeyError``).

Known difference: a tensor with no elements whose other dims multiply past 2**63 (``[0, 2**32,
2**32]``, valid safetensors) is an error here in both frameworks; safetensors gives an empty torch
tensor with ``framework="pt"``.

Beyond safetensors: a directory (sharded checkpoint) opens too, compressed tensors decode, and
``get_tensor(name, dtype=...)`` converts floating tensors.
"""
from __future__ import annotations

import builtins
import importlib
import os
import re
from typing import Any, Dict, List, Optional

from . import _checkpoint, _errors, _index
from . import _ctstream as _native
from ._ctstream import Error
from ._dtypes import _dtype_str

_FRAMEWORKS = {"pt": "pt", "torch": "pt", "pytorch": "pt", "np": "np", "numpy": "np"}
_OTHER_FRAMEWORKS = ("tf", "tensorflow", "jax", "flax", "mlx", "paddle")

_class_cache: Dict[Any, type] = {}


def _safetensor_error():
    try:
        from safetensors import SafetensorError

        return SafetensorError
    except ImportError:
        return None


def _pickled(cls, recipe):
    """cls made picklable: its instances reduce to _rebuild_error(recipe, ...), which finds the
    class again in the unpickling process (a class made by type() at run time cannot be looked up
    by module and name, so the default reduction fails there: errors crossing process boundaries,
    multiprocessing workers, would raise PicklingError instead)."""
    cls._ct_recipe = recipe
    cls.__reduce__ = _reduce_error
    return cls


def _reduce_error(self):
    return _rebuild_error, (type(self)._ct_recipe, self.args, dict(self.__dict__))


def _class_of(module: str, qualname: str) -> type:
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _rebuild_error(recipe, args, state):
    what, module, qualname = recipe
    base = _class_of(module, qualname)
    cls = _st_class(base) if what == "st" else _builtin_class(base)
    e = cls(*args)
    e.__dict__.update(state)
    return e


def _st_class(kind_cls):
    """kind_cls (a ctstream.Error subclass), also a safetensors.SafetensorError when safetensors is
    installed."""
    ste = _safetensor_error()
    if ste is None or issubclass(kind_cls, ste):
        return kind_cls
    key = (kind_cls, ste)
    cls = _class_cache.get(key)
    if cls is None:
        cls = type(kind_cls.__name__, (kind_cls, ste), {"__module__": "ctstream", "__doc__": kind_cls.__doc__})
        _class_cache[key] = _pickled(cls, ("st", kind_cls.__module__, kind_cls.__qualname__))
    return cls


def _builtin_class(builtin: type):
    """A ctstream.Error class that is also the builtin exception `builtin` (TypeError, ...)."""
    named = {builtins.IndexError: _errors.IndexError, builtins.ValueError: _errors.InvalidArgumentError,
             builtins.KeyError: _errors.NotFoundError, builtins.FileNotFoundError: _errors.FileNotFoundError}
    cls = named.get(builtin)
    if cls is None:
        cls = _class_cache.get(builtin)
        if cls is None:
            cls = type(builtin.__name__, (Error, builtin), {"__module__": "ctstream", "kind": "invalid_argument"})
            _class_cache[builtin] = _pickled(cls, ("builtin", "builtins", builtin.__qualname__))
    return cls


def _error(kind_cls, message: str, *, st: bool = True, tensor: str = "", file: str = "", kind: Optional[str] = None):
    """An instance of `kind_cls` (a ctstream.Error subclass), also a safetensors.SafetensorError
    when `st` and safetensors is installed."""
    e = (_st_class(kind_cls) if st else kind_cls)(message)
    e.kind = kind or getattr(kind_cls, "kind", "error")
    e.file, e.tensor = file, tensor
    return e


def _builtin_error(builtin: type, message: str):
    """A ctstream.Error that is also the builtin exception `builtin` (TypeError, OverflowError, ...)."""
    e = _builtin_class(builtin)(message)
    e.file, e.tensor = "", ""
    return e


def _reraise(e: BaseException):
    """A ctstream.Error raised by the reader, as the type safetensors raises for that fault."""
    if isinstance(e, _errors.FileNotFoundError):
        return e
    if isinstance(e, Error):
        return _error(type(e), str(e), file=getattr(e, "file", ""), tensor=getattr(e, "tensor", ""),
                      kind=getattr(e, "kind", None))
    return e


class safe_open:  # noqa: N801 - the name safetensors uses
    """Opens a safetensors file (or a compressed-tensors checkpoint) for reading, like
    ``safetensors.safe_open(filename, framework, device="cpu")``.

    filename: a ``.safetensors`` file, or a checkpoint directory (ctstream extension).
    framework: "pt" (torch tensors) or "np" (numpy arrays).
    device: "cpu", or (pt only) a torch device safetensors names -- "cuda", "mps", "xpu", "npu",
        "hpu", "xla", "mlu", "musa", each optionally ":N" -- or an int index: tensors are moved there.
    backend: "mmap" (default) or "pread" (positional reads, for network filesystems).
    packed: on a compressed-tensors checkpoint, the stored entries (``weight_packed``, ...) under
        their own names instead of the decoded logical tensors.

    One shard of a saved model (a file that the index beside it names) lists the tensors whose
    values it stores; a module the save cut between shards reads its other parts from them, so
    opening every shard in turn yields each tensor once. ``packed`` reads the file alone and lists
    its entries as safetensors does (a module cut between shards: the entries this file holds).
    """

    def __init__(self, filename, framework, device: Any = "cpu", *, backend: str = "mmap", packed: bool = False):
        if isinstance(filename, bytes) or not isinstance(filename, (str, os.PathLike)):
            raise _builtin_error(builtins.TypeError, f"argument 'filename': expected str or os.PathLike object, "
                                                     f"not {type(filename).__name__}")
        if not isinstance(framework, str):  # safetensors: a TypeError from argument extraction
            what = "'None'" if framework is None else f"'{type(framework).__name__}' object"
            raise _builtin_error(builtins.TypeError, f"argument 'framework': {what} is not an instance of 'str'")
        fw = _FRAMEWORKS.get(framework)
        if fw is None:
            if framework in _OTHER_FRAMEWORKS:
                raise _error(_errors.InvalidArgumentError, f"framework {framework} is not supported by ctstream.safe_open "
                                                           "(pt and np are)")
            raise _error(_errors.InvalidArgumentError, f"framework {framework} is invalid")
        self._device = _parse_device(device, fw)
        if backend not in ("mmap", "pread"):
            raise _error(_errors.InvalidArgumentError, f'backend "{backend}" is invalid (expected one of: "mmap", "pread")')
        self._fw, self._backend, self._packed = fw, backend, packed
        self._path = os.fspath(filename)
        try:
            # packed: this file's entries as safetensors lists them (config.json and sibling shards
            # unread: a module the save cut between shards, or a low-rank one, is its entries)
            self._ck = _checkpoint.open(self._path, io=backend, framework=fw, stored_entries=packed)
        except _errors.FileNotFoundError:
            raise _builtin_error(builtins.FileNotFoundError, f"No such file or directory: {self._path}") from None
        except Error as e:
            raise _reraise(e) from None
        if packed:
            self._names = {p.key: (i.name, p.role) for i in self._ck.infos() for p in i.parts}
            order = sorted(self._names, key=lambda k: (self._part(k).file, self._part(k).offset))
        else:
            self._names = {i.name: None for i in self._ck.infos()}
            order = [i.name for i in sorted(self._ck.infos(), key=lambda i: (i.parts[0].file, i.parts[0].offset))]
        self._offset_order = order

    def _part(self, key):
        name, role = self._names[key]
        return next(p for p in self._ck.info(name).parts if p.role == role)

    # -- lifecycle
    def __enter__(self) -> "safe_open":  # a closed handle enters too (as safetensors'): its calls fail
        return self

    def __exit__(self, *exc) -> None:
        # Slices (and tensors) handed out keep the checkpoint open: it closes when they are gone.
        self._ck = None

    def _check(self):
        if getattr(self, "_ck", None) is None:
            raise _error(_errors.ClosedError, "File is closed")
        return self._ck

    # -- the safetensors surface
    def keys(self) -> List[str]:
        """Tensor names, sorted."""
        self._check()
        return sorted(self._names)

    def offset_keys(self) -> List[str]:
        """Tensor names in the order of their data in the file(s)."""
        self._check()
        return list(self._offset_order)

    def metadata(self) -> Optional[Dict[str, str]]:
        """The ``__metadata__`` of the (first) file, or None when it has none."""
        return self._check().metadata(0)

    def _resolve(self, name):
        ck = self._check()
        if not isinstance(name, str):
            raise _builtin_error(builtins.TypeError, f"argument 'name': '{type(name).__name__}' object is not an instance of 'str'")
        if name not in self._names:
            raise _error(_errors.NotFoundError, f"File does not contain tensor {name}", tensor=name)
        return ck

    def get_tensor(self, name: str, dtype: Any = None):
        """The tensor `name` (decoded; `dtype`: convert a floating tensor - a ctstream extension)."""
        ck = self._resolve(name)
        return _Slice(ck, name, self._names[name], self._fw, self._device, dtype)._full()

    def get_tensors(self) -> Dict[str, Any]:
        """Every tensor, in offset order."""
        return {k: self.get_tensor(k) for k in self.offset_keys()}

    def get_slice(self, name: str) -> "_Slice":
        """A lazily decoded view of `name`: ``get_shape()``, ``get_dtype()``, ``[index]``."""
        ck = self._resolve(name)
        return _Slice(ck, name, self._names[name], self._fw, self._device, None, self._backend)


# safetensors 0.8's Device (bindings/python/src/lib.rs of its sdist: `enum Device`, `parse_device`,
# `impl FromPyObject for Device`): these names, alone (index 0; mps has none, and takes only ":0")
# or with ":N" (N as Rust's usize::from_str reads it); "cpu"; or an int, an index torch places.
_DEVICE_NAMES = ("cuda", "mps", "npu", "xpu", "xla", "mlu", "musa", "hpu")
_USIZE = re.compile(r"\+?[0-9]+")  # what Rust's usize::from_str takes


def _parse_device(device, fw: str):
    """The device as safetensors 0.8 reads it: a torch device string (or an int index, which torch
    places), or the error safetensors raises."""
    if device is None:
        return "cpu"
    if isinstance(device, int):  # bool too (an int in Python: True is 1), as safetensors extracts it
        if device < 0:
            raise _error(_errors.InvalidArgumentError, f"device {device} is invalid")
        dev = int(device)
    elif not isinstance(device, str):
        raise _error(_errors.InvalidArgumentError, f"device {device} is invalid")
    elif device == "cpu":
        dev = "cpu"
    else:
        name, colon, n = device.partition(":")
        if name not in _DEVICE_NAMES or ":" in n:
            raise _error(_errors.InvalidArgumentError, f"device {device} is invalid")
        if colon:
            if not n:
                raise _builtin_error(builtins.ValueError, "cannot parse integer from empty string")
            if not _USIZE.fullmatch(n):
                raise _builtin_error(builtins.ValueError, "invalid digit found in string")
            if int(n) >= 2**64:
                raise _builtin_error(builtins.ValueError, "number too large to fit in target type")
        if name == "mps" and colon and int(n) != 0:
            raise _error(_errors.InvalidArgumentError, f"device {device} is invalid: only mps or mps:0 is supported")
        dev = "mps" if name == "mps" else f"{name}:{int(n) if colon else 0}"
    if dev != "cpu" and fw != "pt":
        raise _error(_errors.InvalidArgumentError, f"Device {dev} is not supported for framework numpy")
    return dev


class _Slice:
    """safetensors' ``PySafeSlice``: get_shape(), get_dtype(), indexing (see the module docstring)."""

    def __init__(self, ck, name, part, fw, device, dtype, backend="mmap"):
        self._ck, self._name, self._part, self._fw, self._device, self._dtype = ck, name, part, fw, device, dtype
        self._backend = backend
        if part is None:
            info = ck.info(name)
            self._shape = list(info.shape)
            self._stored = info.dtype if info.format == "dense" else None
            self._dt = ck._n.resolved_dtype(name, None if dtype is None else _dtype_name(dtype))
        else:
            p = next(q for q in ck.info(part[0]).parts if q.role == part[1])
            self._shape, self._dt, self._stored = list(p.shape), p.dtype, p.dtype

    def get_shape(self) -> List[int]:
        return list(self._shape)

    def get_dtype(self) -> str:
        return self._dt

    def _check_dtype(self):
        if self._dt in ("F6_E2M3", "F6_E3M2"):
            raise _error(_errors.InvalidArgumentError, f"Dtype not understood: {self._dt}", tensor=self._name)
        if self._fw == "pt" and self._dt == "F4" and self._shape and self._shape[-1] % 2:
            raise _error(_errors.InvalidArgumentError, "f4_x2 dtype requires that the last dim be divisible by 2 in torch: "
                                                       f"got {self._shape}", tensor=self._name)
        if self._fw == "np":
            import numpy as np

            if self._dt.startswith("F8_") or self._dt == "F4":
                np_name = {"F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2", "F8_E8M0": "float8_e8m0fnu",
                           "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
                           "F4": "float4_e2m1fn_x2"}[self._dt]
                raise _builtin_error(builtins.AttributeError, f"module 'numpy' has no attribute '{np_name}'")
            if self._dt == "BF16":
                try:
                    np.dtype("bfloat16")
                except TypeError as e:
                    raise _builtin_error(builtins.TypeError, str(e)) from None

    def _decode(self, dim: int = -1, start: int = 0, stop: int = 2**64 - 1):
        try:
            if self._part is not None:
                t = self._ck.part(self._part[0], self._part[1])
                if dim >= 0:
                    t = t[(slice(None),) * dim + (slice(start, stop),)]
            else:
                t = self._ck._get(self._name, None if self._dtype is None else _dtype_name(self._dtype), None, dim, start, stop)
        except Error as e:
            raise _reraise(e) from None
        if self._fw == "np" and self._dt == "BF16" and str(t.dtype) != "bfloat16":
            import numpy as np

            t = t.view(np.dtype("bfloat16"))
        return t

    def _place(self, t):
        if self._device != "cpu" and self._fw == "pt":
            t = t.to(self._device)
        return t

    def _full(self):
        self._check_dtype()
        return self._place(self._decode())

    def __getitem__(self, key):
        rust = self._fw == "np" or self._backend == "pread"
        if not rust:  # torch/mmap: safetensors builds the whole tensor (its dtype) before indexing
            self._check_dtype()
        if self._dt == "F4" and self._fw == "pt":
            # safetensors 0.8 views the packed float4_e2m1fn_x2 bytes with the logical shape before
            # indexing and fails on every F4 slice; here F4 slices follow its byte-range parser
            # (ranges must fall on byte boundaries) and give the packed form, as get_tensor does.
            rust = True
        if not rust:
            try:
                d, a, b, k2 = _index.plan(key, self._shape, "pt")
            except (builtins.IndexError, builtins.ValueError, builtins.TypeError, RuntimeError) as e:
                raise _builtin_error(type(e) if type(e) is not RuntimeError else builtins.RuntimeError, str(e)) from None
            block = self._decode(d, a, b) if d is not None else self._decode()
            try:
                return self._place(block[k2])
            except (builtins.IndexError, builtins.ValueError, builtins.TypeError) as e:
                raise _builtin_error(type(e), str(e)) from None
        # numpy, and torch with backend="pread": safetensors' own parser (no clamping; ints, slices
        # with a positive step, one ellipsis, the empty list; nothing else)
        try:
            ranges, squeeze = _index.rust_index(key, self._shape, _native.dtype_bits(self._dt) or 8)
        except _index.RustIndexError as e:
            raise _error(_errors.IndexError if "out of bounds" in str(e) or "Invalid index" in str(e)
                         else _errors.InvalidArgumentError, str(e), tensor=self._name) from None
        except OverflowError as e:
            raise _builtin_error(builtins.OverflowError, str(e)) from None
        except SystemError as e:  # safetensors' own bug for stop < start: refused here as an index error
            raise _error(_errors.IndexError, f"slice stop before its start ({e})", tensor=self._name) from None
        self._check_dtype()  # the index is parsed first, then the result's dtype is made
        if self._dt == "F4" and ranges:  # last dim in packed pairs (aligned: step 1, even bounds)
            a, b, _ = ranges[-1]
            ranges[-1] = (a // 2, b // 2, 1)
        shape = list(self._shape[:-1]) + [self._shape[-1] // 2] if self._dt == "F4" else self._shape
        restricted = [d for d, (a, b, st) in enumerate(ranges) if (a, b, st) != (0, shape[d], 1)
                      and self._dt != "F4"]  # sub-byte: the whole (packed) tensor is read
        if not restricted:
            t = self._decode()
        else:
            d = min(restricted, key=lambda d: (ranges[d][1] - ranges[d][0]) / max(shape[d], 1))
            a0, b0, st0 = ranges[d]
            t = self._decode(d, a0, b0) if b0 > a0 else self._decode()
            if b0 > a0:
                ranges[d] = (0, b0 - a0, st0)
        # a step past the range picks its first element only: capped so that torch (which
        # overflows on a step near 2**63: x[::2**63-1] is an error) slices as Rust does
        t = t[tuple(slice(a, b, min(st, max(b - a, 1))) for a, b, st in ranges)]
        if squeeze:
            t = t.reshape([n for i, n in enumerate(t.shape) if i not in squeeze])
        # numpy: a 0-d array indexed by () is a scalar; safetensors gives a 0-d array
        if hasattr(t, "contiguous"):
            t = t.contiguous().clone()
        else:
            import numpy
            t = numpy.array(t)  # a copy; a 0-d array, not a scalar
        return self._place(t)


def _dtype_name(dtype) -> str:
    return _dtype_str(dtype)


def load_file(filename, framework: str, device: Any = "cpu", *, backend: str = "mmap") -> Dict[str, Any]:
    with safe_open(filename, framework=framework, device=device, backend=backend) as f:
        return f.get_tensors()
