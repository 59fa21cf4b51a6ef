"""dtypes and frameworks: the dtype spellings the native side parses, and its storage arrays handed
over as torch tensors or numpy arrays (ml_dtypes where installed), without a copy."""
from __future__ import annotations

import sys
from typing import Any, Optional

from ._errors import InvalidArgumentError


# ctstream dtype name -> torch dtype attribute, for dtypes that travel as unsigned storage.
_TORCH_VIEW = {
    "F4": "float4_e2m1fn_x2",  # packed bytes [..., n/2], as torch and safetensors hold FP4
    "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
# ... and the ml_dtypes names for numpy.
_ML_VIEW = {
    "BF16": "bfloat16", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
    "F8_E8M0": "float8_e8m0fnu", "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz",
}
_ML_RAW = {"bfloat16": "uint16"}  # ml_dtypes numpy dtype name -> raw storage accepted by out=


def _dtype_str(dtype: Any) -> Optional[str]:
    """None, a string, a torch.dtype or a numpy dtype -> the spelling the native side parses."""
    if dtype is None or isinstance(dtype, str):
        return dtype
    mod = type(dtype).__module__
    if mod.startswith("torch"):
        return str(dtype).replace("torch.", "")
    try:
        import numpy as np

        return np.dtype(dtype).name
    except TypeError:
        raise TypeError(f"dtype must be a string, torch.dtype or numpy dtype, not {dtype!r}") from None


_torch_mod: Any = None
_ml_dtypes_mod: Any = None


def _torch():
    global _torch_mod
    if _torch_mod is None:
        try:
            import torch
        except ImportError:
            _torch_mod = False
        else:
            _torch_mod = torch
    return _torch_mod or None


def _ml_dtypes():
    global _ml_dtypes_mod
    if _ml_dtypes_mod is None:
        try:
            import ml_dtypes
        except ImportError:
            _ml_dtypes_mod = False
        else:
            _ml_dtypes_mod = ml_dtypes
    return _ml_dtypes_mod or None


def _resolve_framework(framework: Optional[str]) -> str:
    if framework in (None, "auto"):
        return "pt" if _torch() is not None else "np"
    if framework in ("pt", "torch"):
        if _torch() is None:
            raise ImportError("framework='pt' needs torch, which cannot be imported")
        return "pt"
    if framework in ("np", "numpy"):
        return "np"
    raise InvalidArgumentError(f"framework must be 'pt', 'np' or None, not {framework!r}")


def _wrap(arr, dtype_name: str, framework: str):
    """numpy storage array from the native side -> the user's tensor type (zero-copy). A read-only
    array (a view of the file mapping) is copied for torch, which has no read-only tensors."""
    if arr.dtype.char in "qQ":  # (unsigned) long long -> the canonical 64-bit integer dtype
        arr = arr.view(arr.dtype.str)
    if framework == "pt":
        torch = _torch()
        if not arr.flags.writeable:
            arr = arr.copy()
        t = torch.from_numpy(arr)
        view = _TORCH_VIEW.get(dtype_name)
        if view is not None and hasattr(torch, view):
            t = t.view(getattr(torch, view))
        return t
    view = _ML_VIEW.get(dtype_name)
    if view is not None:
        ml = _ml_dtypes()
        if ml is not None and hasattr(ml, view):
            return arr.view(getattr(ml, view))
    return arr


def _out_target(out):
    """What the native side receives for out=: a detached torch tensor, or a raw-bits view of an
    ml_dtypes numpy array (numpy cannot export those dtypes)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(out, torch.Tensor):
        # A conj() / _neg_view() view shares its storage with a flag that torch applies on every
        # read: bytes written into the storage would read back conjugated / negated.
        if out.is_conj() or out.is_neg():
            what = "conj" if out.is_conj() else "neg"
            raise InvalidArgumentError(f"out= is a lazy {what} view (torch's is_{what}()): what is written to its "
                                       f"storage would read back {'conjugated' if what == 'conj' else 'negated'}; "
                                       "pass a plain tensor")
        return out.detach() if out.requires_grad else out
    dt = getattr(out, "dtype", None)
    raw = _ML_RAW.get(getattr(dt, "name", ""))
    if raw is None and getattr(dt, "name", "").startswith("float8") and getattr(dt, "itemsize", 0) == 1:
        raw = "uint8"
    if raw is not None and type(out).__module__ == "numpy":
        return out.view(raw)
    return out
