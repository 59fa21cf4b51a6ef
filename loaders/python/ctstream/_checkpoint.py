"""``ctstream.open`` and what it returns: the checkpoint, its tensor iterator and slices."""
from __future__ import annotations

import builtins
import json
import operator
import os
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from . import _ctstream as _native
from . import _index
from ._classes import classes_from_config, module_classes_of
from ._ctstream import Error, TensorInfo
from ._dtypes import _dtype_str, _out_target, _resolve_framework, _wrap
from ._errors import IndexError, InvalidArgumentError  # noqa: A004

# ---- budget ------------------------------------------------------------------------------------

def parse_budget(budget: Union[None, int, str]) -> int:
    """Bytes of decoded tensors the loader may hold ahead of the consumer.

    None -> 0 (the library default); an int is a byte count; a string is a number with an
    optional unit: "512MB", "1.5G", "2GiB", "1048576" (K/M/G/T and KB/MB/GB/TB = 1000^n,
    KiB/MiB/GiB/TiB = 1024^n, case-insensitive). Raises ValueError / TypeError otherwise."""
    if budget is None:
        return 0
    if isinstance(budget, bool):
        raise TypeError("budget must be an int, a string like '512MB', or None")
    if isinstance(budget, int):
        if budget <= 0:
            raise InvalidArgumentError(f"budget must be positive, got {budget}")
        return budget
    if not isinstance(budget, str):
        raise TypeError(f"budget must be an int, a string like '512MB', or None, not {type(budget).__name__}")
    value = _native.parse_bytes(budget)  # the core's grammar, as the CLI's --budget
    if value <= 0:
        raise InvalidArgumentError(f"budget must be positive, got {budget!r}")
    return value


# ---- checkpoint --------------------------------------------------------------------------------

def open(path: Union[str, "os.PathLike[str]"], *, threads: int = 0, budget: Union[None, int, str] = None,
         io: str = "mmap", order: str = "file", framework: Optional[str] = None,
         low_rank: str = "original", module_classes: Any = None, sibling_shards: bool = True,
         stored_entries: bool = False) -> "Checkpoint":
    """Opens a checkpoint: a ``.safetensors`` file, or a directory with
    ``model.safetensors.index.json`` or ``*.safetensors`` shards (and ``config.json``, whose
    ``quantization_config`` / ``sparsity_config`` tell how tensors are compressed). Reads only
    headers; tensor bytes are read when a tensor is decoded.

    threads: threads that decode one large tensor (0 = all cores).
    budget: bytes of decoded tensors ``tensors()`` may hold ahead of you ("512MB", "2GiB", int).
    io: "mmap" (default) or "pread" (network filesystems).
    order: iteration order of ``tensors()``/``keys()``: "file" (sequential I/O) or "name".
    framework: "pt", "np" or None (torch if importable, else numpy).
    low_rank: for a low-rank checkpoint (ptdeco's ``decompose_config.json`` beside the weights):
        "original" (default) presents the original architecture, ``m.weight`` = ``m.1.weight @
        m.0.weight`` computed on demand in fp32 and ``m.bias`` = ``m.1.bias``; "stored" yields
        the factors under their own names.
    module_classes: for config groups that target module classes (``Linear``, ``Embedding``,
        ``LlamaAttention``, ...): a torch model, or a dict module name -> class names
        (``type(m).__mro__``, as compressed-tensors' ``match_class`` tests them). By default
        (None), only when the stored parts cannot tell such groups apart, the classes come from
        config.json's architecture instantiated on the meta device with transformers (as the
        library matches against a real model); without transformers such a module is refused.
        ``False``: never build them.
    sibling_shards: opening one shard of a saved model (a file an index beside it names), read
        the parts of its modules that the save put in other shards from them, and list the tensors
        whose values this file stores (True, default: each shard opened in turn lists each tensor
        once); False: the file alone, where a module cut between shards is an error.
    stored_entries: every stored entry as a tensor of its own under its own key (``weight_packed``,
        ``weight_scale``, ...), as safetensors lists them: config.json, decompose_config.json and
        sibling shards are not read, so ``low_rank``, ``module_classes`` and ``sibling_shards``
        do not apply (default False: the logical tensors).
    """
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise InvalidArgumentError(f"threads must be an int >= 0, got {threads!r}")
    fw = _resolve_framework(framework)
    classes = module_classes_of(module_classes) if module_classes not in (None, False) else {}
    args = (os.fspath(path), threads, io, order, parse_budget(budget), low_rank)
    try:
        native = _native._Checkpoint(*args, classes, bool(sibling_shards), bool(stored_entries))
    except Error as e:
        # Only where the stored parts could not choose among class-name groups does the module's
        # class matter; then ask the model's architecture (never a guess: the library does the same).
        if module_classes is not None or e.kind != "unsupported" or "module classes" not in str(e):
            raise
        classes = classes_from_config(os.fspath(path))
        if not classes:
            raise
        native = _native._Checkpoint(*args, classes, bool(sibling_shards), bool(stored_entries))
    return Checkpoint(native, fw)


class Checkpoint:
    """An open checkpoint (see ``ctstream.open``). A context manager; also closes when collected.
    Methods may be called from several threads at once (decoding releases the GIL)."""

    def __init__(self, native: "_native._Checkpoint", framework: str):
        self._n = native
        self._fw = framework

    # -- lifetime
    def __enter__(self) -> "Checkpoint":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Releases the files. Tensors already returned stay valid (they own their memory), and an
        iterator from ``tensors()`` keeps the files open until it is exhausted or dropped."""
        self._n.close()

    @property
    def closed(self) -> bool:
        return self._n.closed

    def __repr__(self) -> str:
        if self.closed:
            return "<ctstream.Checkpoint (closed)>"
        return f"<ctstream.Checkpoint {len(self)} tensors from {len(self.files)} file(s)>"

    # -- metadata
    @property
    def framework(self) -> str:
        """"pt" or "np": the type returned tensors have."""
        return self._fw

    @property
    def budget(self) -> int:
        """The parsed ``budget`` in bytes (0 = library default)."""
        return self._n.budget

    @property
    def threads(self) -> int:
        return self._n.threads

    def keys(self) -> List[str]:
        """Logical tensor names in iteration order (compressed parts grouped: one name per
        decoded tensor, e.g. ``...weight`` for ``weight_packed`` + ``weight_scale``)."""
        return self._n.keys()

    def __len__(self) -> int:
        return len(self._n)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._n

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def info(self, name: str) -> TensorInfo:
        """Metadata of one tensor: shape, natural dtype, format, quantization, stored parts."""
        return self._n.info(name)

    def infos(self) -> List[TensorInfo]:
        """Metadata of every tensor, in iteration order."""
        return self._n.infos()

    @property
    def files(self) -> List[str]:
        """The safetensors files (shards) of the checkpoint; TensorPart.file indexes this."""
        return self._n.files()

    @property
    def config(self) -> Optional[Dict[str, Any]]:
        """config.json, parsed; None when the checkpoint has none."""
        text = self._n.config_json()
        return json.loads(text) if text else None

    @property
    def config_info(self) -> Dict[str, Any]:
        """Which config, if any, decided how stored entries are grouped and decoded:
        ``{"compressed_tensors": bool, "file": str | None, "description": str}``. A checkpoint is a
        compressed-tensors one only when its config.json says so (``quantization_config`` with
        quant_method "compressed-tensors", or a ``sparsity_config``); any other file reads entry by
        entry exactly as safetensors reads it (README, "What makes a compressed-tensors checkpoint")."""
        ct, file, description = self._n.config_info()
        return {"compressed_tensors": ct, "file": file or None, "description": description}

    def metadata(self, file: int = 0) -> Optional[Dict[str, str]]:
        """``__metadata__`` of one file; None when the file has none (as safetensors)."""
        return self._n.metadata(file)

    # -- data
    def tensors(self, dtype: Any = None, names: Optional[List[str]] = None) -> "TensorIterator":
        """Yields ``(name, tensor)`` for every tensor (``names=None``) or for ``names``, in that
        order (``names=[]`` yields nothing and decodes nothing), decoded
        ahead on worker threads within the budget. Each tensor is a fresh array you own; file
        pages of each tensor are dropped once it is decoded, so resident memory stays about the
        tensors you keep plus the budget. The iterator may be shared by several threads: each
        ``next()`` hands out a different tensor."""
        if isinstance(names, (str, bytes)):
            raise TypeError("names= takes a list of tensor names, not one name as %s" % type(names).__name__)
        return TensorIterator(self._n.iter(_dtype_str(dtype), None if names is None else list(names)), self._fw)

    def get(self, name: str, dtype: Any = None, out: Any = None):
        """Decodes one tensor. With ``out=`` it is written into that torch tensor / numpy array
        (checked: CPU, writable, C-contiguous, exact shape, dtype) and ``out`` is returned;
        with ``out=`` and no ``dtype``, a float ``out`` decides the dtype of floating tensors.
        Raises NotFoundError (a KeyError) for an unknown name."""
        return self._get(name, dtype, out, -1, 0, _NO_STOP)

    get_tensor = get  # safetensors.safe_open spelling

    def _get(self, name, dtype, out, dim, start, stop):
        dt = _dtype_str(dtype)
        if out is not None:
            self._n.decode_into(name, _out_target(out), dt, dim, start, stop)
            return out
        arr, real = self._n.decode(name, dt, dim, start, stop)
        return _wrap(arr, real, self._fw)

    def get_slice(self, name: str, dtype: Any = None) -> "TensorSlice":
        """A lazily decoded view: index it (``[a:b]``, ``[:, a:b]``, ``[i]``, ``[..., a:b]``) to
        decode only those rows/columns. One restricted dimension is decoded natively (the
        cheapest); further restrictions are applied to that result."""
        return TensorSlice(self, name, dtype)

    def part(self, name: str, role: str, *, copy: bool = True, unsafe_view: bool = False):
        """One stored part of a tensor, undecoded (see ``packed``): a copy you own, read with
        ``pread`` (a file truncated since open is an ``Error`` of kind ``truncated``, never a
        signal). ``copy`` is kept for compatibility and no longer gives a view: ``copy=False``
        also returns a private copy, because a view of a shared file mapping cannot be protected
        against another process shrinking the file.

        ``unsafe_view=True`` (numpy, mmap mode only): a read-only zero-copy view of the mapped file
        (``writeable=False``), kept mapped while you hold it. The risk, exactly: if any process
        truncates or shrinks the file while the view (or an array derived from it) is alive,
        touching the bytes past the new end raises SIGBUS, which kills the interpreter; no Python
        exception can catch it, and the check made when the view is created only covers a
        truncation before that. Use it only for files nobody modifies while you read them
        (read-only filesystems, immutable model stores). In pread mode there is no mapping and you
        get a copy; with ``framework="pt"`` it is refused (a torch tensor has no read-only flag:
        a write through the read-only mapping would kill the process too)."""
        if unsafe_view:
            if self._fw != "np":
                raise InvalidArgumentError("unsafe_view=True needs framework='np' (torch tensors cannot be read-only)")
            v = self._n.view_part(name, role)
            if v is not None:
                return _wrap(v[0], v[1], self._fw)
        arr, dt = self._n.read_part(name, role)
        return _wrap(arr, dt, self._fw)

    def packed(self, name: str) -> Dict[str, Any]:
        """The stored parts of a tensor, undecoded: ``{role: tensor}`` (e.g. ``weight_packed``,
        ``weight_scale``, ``weight_zero_point``, ``weight_shape``), each with its stored dtype
        and shape — what an engine running the quantized kernels loads."""
        info = self._n.info(name)
        out = {}
        for p in info.parts:
            arr, dt = self._n.read_part(name, p.role)
            out[p.role] = _wrap(arr, dt, self._fw)
        return out


_NO_STOP = 2**64 - 1


class TensorIterator:
    """Iterator over ``(name, tensor)`` (see ``Checkpoint.tensors``): decodes ahead on a worker
    within the checkpoint's budget. Safe to advance from several threads (unlike a generator)."""

    __slots__ = ("_it", "_fw")

    def __init__(self, native_iter, framework: str):
        self._it = native_iter
        self._fw = framework

    def __iter__(self) -> "TensorIterator":
        return self

    def __next__(self) -> Tuple[str, Any]:
        name, arr, dt = next(self._it)
        return name, _wrap(arr, dt, self._fw)

    def __length_hint__(self) -> int:
        return self._it.__length_hint__()


class TensorSlice:
    """Returned by ``Checkpoint.get_slice``; like safetensors' ``PySafeSlice``."""

    def __init__(self, ckpt: Checkpoint, name: str, dtype: Any = None):
        self._ck = ckpt
        self._name = name
        self._dtype = dtype
        self._info = ckpt.info(name)

    def get_shape(self) -> List[int]:
        """The full tensor's shape (safetensors' spelling; also ``.shape``)."""
        return list(self._info.shape)

    @property
    def shape(self) -> List[int]:
        return self.get_shape()

    def get_dtype(self) -> str:
        """The dtype the slice decodes to (safetensors spelling)."""
        return self._ck._n.resolved_dtype(self._name, _dtype_str(self._dtype))

    def __len__(self) -> int:
        return self._info.shape[0] if self._info.shape else 0

    def __getitem__(self, key):
        return self.get(key)

    def get(self, key=..., out: Any = None):
        """``slice[key]``: any index the framework accepts (torch's rules for "pt", numpy's for
        "np": ints, slices, ``...``, ``None``, bools, int lists and arrays, masks), with its
        errors; only the rows (or columns) the index touches along its most selective dimension
        are decoded. ``out=``: decode into that array (slices ``a:b`` along one dimension only)."""
        shape = list(self._info.shape)
        if out is not None:
            ranges, squeeze = _normalize_key(key, shape)
            restricted = [d for d, (a, b) in enumerate(ranges) if (a, b) != (0, shape[d])]
            if len(restricted) > 1:
                raise InvalidArgumentError("out= works with slices restricted along one dimension only")
            if squeeze:
                raise InvalidArgumentError("out= needs slices (a:b), not integer indices")
            if not restricted:
                return self._ck._get(self._name, self._dtype, out, -1, 0, _NO_STOP)
            d = restricted[0]
            return self._ck._get(self._name, self._dtype, out, d, *ranges[d])
        try:
            d, a, b, k2 = _index.plan(key, shape, self._ck._fw)
        except (builtins.IndexError, builtins.ValueError, builtins.TypeError) as e:
            cls = {builtins.IndexError: IndexError, builtins.ValueError: InvalidArgumentError}.get(type(e))
            if cls is None:
                raise
            raise cls(str(e)) from None
        block = self._ck._get(self._name, self._dtype, None, d if d is not None else -1, a, b if d is not None else _NO_STOP)
        return block[k2]


def _normalize_key(key, shape):
    """Index key -> ([(start, stop) per dim], [dims indexed by an int]). Steps must be 1."""
    if not isinstance(key, tuple):
        key = (key,)
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if any(k is Ellipsis for k in key):  # identity: numpy arrays compare element-wise under ==
        i = next(j for j, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (len(shape) - len(key) + 1) + key[i + 1:]
    if len(key) > len(shape):
        raise IndexError(f"too many indices: tensor is {len(shape)}-dimensional, {len(key)} given")
    key = key + (slice(None),) * (len(shape) - len(key))
    ranges, squeeze = [], []
    for d, (k, n) in enumerate(zip(key, shape)):
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            if step != 1:
                raise InvalidArgumentError(f"ctstream slices need step 1 (dimension {d} has step {step})")
            ranges.append((start, max(start, stop)))
        else:
            try:
                i = operator.index(k)
            except TypeError:
                raise TypeError(f"index must be an int, a slice or ..., not {type(k).__name__}") from None
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"index {k} out of range for dimension {d} of size {n}")
            ranges.append((i, i + 1))
            squeeze.append(d)
    return ranges, squeeze
