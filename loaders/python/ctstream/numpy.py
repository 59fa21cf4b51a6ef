"""``ctstream.numpy``: the ``safetensors.numpy`` loading functions on ctstream's reader
(compressed tensors decoded)."""
from __future__ import annotations

from typing import Any, Dict, Union
import os

from ._safe_open import load_file as _load_file

__all__ = ["load_file"]


def load_file(filename: Union[str, "os.PathLike[str]"], *, backend: str = "mmap") -> Dict[str, Any]:
    """Every tensor of `filename` as numpy arrays, in file order (``safetensors.numpy.load_file``)."""
    return _load_file(filename, "np", "cpu", backend=backend)
