"""``ctstream.torch``: the ``safetensors.torch`` loading functions on ctstream's reader (compressed
tensors decoded). ``import ctstream.torch`` - the real torch is imported as usual."""
from __future__ import annotations

from typing import Any, Dict, Union
import os

from ._safe_open import load_file as _load_file

__all__ = ["load_file"]


def load_file(filename: Union[str, "os.PathLike[str]"], device: Union[str, int] = "cpu", *, backend: str = "mmap") -> Dict[str, Any]:
    """Every tensor of `filename` as torch tensors on `device`, in file order
    (``safetensors.torch.load_file``). A compressed-tensors checkpoint yields its decoded tensors."""
    return _load_file(filename, "pt", device, backend=backend)
