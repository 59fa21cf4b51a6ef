"""vLLM adapter: ``weights_iterator`` yields ``(name, torch.Tensor)`` pairs exactly like vLLM's
``safetensors_weights_iterator`` (CPU tensors, checkpoint names), so it drops into a model's
``load_weights``; ``register`` installs it as a vLLM load format.

Two modes:

* ``packed=False`` (default): every tensor decoded (``...weight`` for ``weight_packed`` +
  ``weight_scale`` + ...), in its natural dtype or ``dtype=``: for a vLLM model built *without*
  quantization (dense kernels).
* ``packed=True``: the stored entries as they are in the files (``weight_packed``,
  ``weight_scale``, ...), byte for byte what ``safetensors_weights_iterator`` yields: for vLLM's
  own compressed-tensors kernels.

vLLM itself is only imported by ``register``.
"""
from __future__ import annotations

import os
from typing import Any, Generator, Iterable, Optional, Tuple, Union

import ctstream

__all__ = ["weights_iterator", "register"]

PathLike = Union[str, "os.PathLike[str]"]


def _source(files_or_dir: Union[PathLike, Iterable[PathLike]]) -> Tuple[str, Optional[set]]:
    """A checkpoint path to open, and the subset of its files to yield from (None = all)."""
    if isinstance(files_or_dir, (str, os.PathLike)):
        return os.fspath(files_or_dir), None
    files = [os.path.abspath(os.fspath(f)) for f in files_or_dir]
    if not files:
        raise ValueError("weights_iterator: empty list of weight files")
    dirs = {os.path.dirname(f) for f in files}
    if len(dirs) != 1:
        raise ValueError(f"weights_iterator: weight files span several directories: {sorted(dirs)}")
    return dirs.pop(), {os.path.realpath(f) for f in files}


def _progress(iterable, total: int, enabled: bool):
    if not enabled:
        return iterable
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
            return iterable
        from tqdm.auto import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, total=total, desc="Loading checkpoint (ctstream)")


def weights_iterator(
    hf_weights_files: Union[PathLike, Iterable[PathLike]],
    use_tqdm_on_load: bool = False,
    *,
    dtype: Any = None,
    packed: bool = False,
    threads: int = 0,
    budget: Union[None, int, str] = None,
    io: str = "mmap",
) -> Generator[Tuple[str, Any], None, None]:
    """Yields ``(name, torch.Tensor)`` for a checkpoint, like vLLM's
    ``safetensors_weights_iterator(hf_weights_files, use_tqdm_on_load)``.

    hf_weights_files: the list of ``*.safetensors`` files vLLM passes (all in one directory,
        whose config.json says how they are compressed; tensors of other shards are skipped),
        or simply the model directory / a single file.
    dtype: output dtype of floating and decoded tensors (None: each tensor's natural dtype).
    packed: yield the stored entries undecoded (see the module docstring).
    threads, budget, io: as for ``ctstream.open``.
    """
    path, wanted = _source(hf_weights_files)
    with ctstream.open(path, threads=threads, budget=budget, io=io, framework="pt") as ckpt:
        keep = None
        if wanted is not None:
            keep = {i for i, f in enumerate(ckpt.files) if os.path.realpath(f) in wanted}
        infos = [t for t in ckpt.infos() if keep is None or t.parts[0].file in keep]
        if packed:
            for info in _progress(infos, len(infos), use_tqdm_on_load):
                for role, tensor in ckpt.packed(info.name).items():
                    yield info.parts[[p.role for p in info.parts].index(role)].key, tensor
            return
        if keep is None:
            it = ckpt.tensors(dtype=dtype)
            yield from _progress(it, len(infos), use_tqdm_on_load)
            return
        for info in _progress(infos, len(infos), use_tqdm_on_load):
            yield info.name, ckpt.get(info.name, dtype=dtype)


def register(load_format: str = "ctstream", **iterator_kwargs: Any):
    """Registers a vLLM model loader named ``load_format`` that reads weights with
    ``weights_iterator(model_dir, use_tqdm_on_load, **iterator_kwargs)``; returns its class.
    Use it with ``LLM(model=local_dir, load_format="ctstream")`` (the model must be a local
    directory). Needs a vLLM with ``register_model_loader`` (0.10 or later)."""
    from vllm.model_executor.model_loader import register_model_loader
    from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

    class CtstreamModelLoader(DefaultModelLoader):
        """vLLM's default loader with ctstream as the weights source."""

        def get_all_weights(self, model_config, model):
            model_dir = model_config.model
            if not os.path.isdir(model_dir):
                raise ValueError(f"load_format={load_format!r} needs a local model directory, got {model_dir!r}")
            yield from weights_iterator(model_dir, self.load_config.use_tqdm_on_load, **iterator_kwargs)

    CtstreamModelLoader.__name__ = CtstreamModelLoader.__qualname__ = "CtstreamModelLoader"
    return register_model_loader(load_format)(CtstreamModelLoader)
