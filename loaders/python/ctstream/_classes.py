"""Module classes for config groups that target class names (``Linear``, ``Embedding``,
``LlamaAttention``): compressed-tensors matches such a target against every class of a module's
``type(m).__mro__`` (compressed_tensors/utils/match.py ``_match_class``, 0.20.0 and 0.12.2; vLLM's
``LinearBase`` also counts as ``Linear`` there, and ctstream's matcher applies the same rule), so
ctstream needs the model's classes where the stored parts cannot tell two such groups apart."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Dict, List, Mapping, Optional

from ._errors import InvalidArgumentError


def module_classes_of(obj: Any) -> Dict[str, List[str]]:
    """A torch model -> {module name: its MRO class names}; a mapping is checked and copied."""
    if hasattr(obj, "named_modules"):
        import torch

        return {name: [c.__name__ for c in type(m).__mro__ if isinstance(c, type) and issubclass(c, torch.nn.Module)]
                for name, m in obj.named_modules() if name}
    if isinstance(obj, Mapping):
        out: Dict[str, List[str]] = {}
        for k, v in obj.items():
            if not isinstance(k, str) or isinstance(v, str) or not all(isinstance(c, str) for c in v):
                raise InvalidArgumentError("module_classes maps module names to lists of class names")
            out[k] = list(v)
        return out
    raise InvalidArgumentError(f"module_classes must be a torch model or a dict, not {type(obj).__name__}")


def _config_dir(path: str) -> str:
    # Where the reader looks for config.json (src/format/shards.cpp): in a checkpoint directory, or
    # beside a single .safetensors file.
    return path if os.path.isdir(path) else os.path.dirname(os.path.abspath(path))


def classes_from_config(path: str) -> Optional[Dict[str, List[str]]]:
    """The module classes of config.json's architecture, instantiated on the meta device with
    transformers (no weights, no memory); None when transformers (or the architecture) is not
    available."""
    from . import _remote

    if _remote.is_remote(path):
        # the checkpoint's own config.json, read with ctstream's client (never os.path on a URL);
        # transformers reads configs from a directory: a private temporary one
        text = _remote.read_config(path)  # a denied or unreachable server raises, as open() would
        if text is None:
            return None
        with tempfile.TemporaryDirectory(prefix="ctstream-config-") as d:
            with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
                f.write(text)
            return _classes_in(d)
    return _classes_in(_config_dir(path))


def _classes_in(d: str) -> Optional[Dict[str, List[str]]]:
    try:
        with open(os.path.join(d, "config.json")) as f:
            archs = json.load(f).get("architectures") or []
        import torch
        import transformers

        cfg = transformers.AutoConfig.from_pretrained(d)
        cls = getattr(transformers, archs[0], None) if archs else None
        if cls is None:
            return None
        with torch.device("meta"):
            model = cls(cfg)
    except Exception:  # noqa: BLE001 - no transformers, unknown architecture, unreadable config
        return None
    return module_classes_of(model)
