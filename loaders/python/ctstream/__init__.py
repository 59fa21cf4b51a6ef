"""ctstream: decode compressed-tensors checkpoints natively, tensor by tensor, into torch tensors
or numpy arrays (or straight into memory you already own).

    import ctstream
    with ctstream.open("model_dir", threads=2, budget="512MB") as ckpt:
        for name, tensor in ckpt.tensors(dtype="bfloat16"):
            model_params[name].copy_(tensor)
        w = ckpt.get("model.layers.0.mlp.down_proj.weight", dtype="float16", out=preallocated)
        s = ckpt.get_slice(name)[rank * rows:(rank + 1) * rows]     # tensor-parallel shard
        parts = ckpt.packed(name)                                   # stored parts, undecoded

Other surfaces:

* ``ctstream.safe_open(path, framework="pt")``, ``ctstream.torch.load_file`` /
  ``ctstream.numpy.load_file``: safetensors' own API and semantics (a drop-in), compressed tensors
  decoded;
* ``ctstream.save_model(model, out_dir, format="pack-quantized", ...)`` / ``save_file`` /
  ``compress``: write compressed-tensors checkpoints from memory (one tensor at a time) or from
  disk; ``ctstream.load_model(model, path)``: decode a checkpoint straight into a model's
  parameters;
* ``ctstream.vllm``: vLLM's weight iterator and the ``--load-format ctstream`` plugin.

Return types (``framework=``): ``"pt"`` gives ``torch.Tensor`` (CPU), ``"np"`` gives
``numpy.ndarray``; the default ``None`` picks torch when it can be imported, else numpy. torch is
never imported by ``import ctstream`` itself.

numpy has no bfloat16 or float8: with ``framework="np"`` such tensors come back as
``ml_dtypes.bfloat16`` / ``ml_dtypes.float8_*`` arrays when the ``ml_dtypes`` package is
installed, otherwise as same-width unsigned integers holding the raw bits (bfloat16 -> uint16,
float8 -> uint8; ``torch.from_numpy(a).view(torch.bfloat16)`` recovers the values). Use
``dtype="float32"`` (or ``"float16"``) to get plain numpy floats.

dtype rule: ``dtype=`` (bfloat16 / float16 / float32, also as torch or numpy dtypes) applies to
floating and compressed tensors; integer and bool tensors always come back as stored, exactly as
``ctstream decompress --dtype`` writes them. ``dtype=None`` gives each tensor's natural dtype:
the one the compressed-tensors library's decompression returns.

Memory: every returned tensor owns its memory (zero-copy hand-off from the decoder: the array is
allocated once and decoded into with the GIL released), so a file truncated by another process
while you hold a tensor is an ``Error`` (kind ``truncated``) at the next read, never SIGBUS (in
``io="mmap"`` a truncation racing a decode that is reading the mapping can still raise it;
``io="pread"`` is immune). The
one exception is the explicit opt-in ``part(..., unsafe_view=True)`` with numpy: a read-only view
of the mapped file, which does kill the process with SIGBUS if the file shrinks while the view is
alive (see ``Checkpoint.part``). ``out=`` decodes into a torch tensor /
numpy array you pass (any CPU array speaking DLPack or the buffer protocol): it must be
writable, C-contiguous, of exactly the tensor's (or slice's) shape and of the output dtype.
"""
from __future__ import annotations

from . import _ctstream as _native
from ._checkpoint import Checkpoint, TensorIterator, TensorSlice, open, parse_budget  # noqa: A004
from ._ctstream import Error, TensorInfo, TensorPart, active_isa
from ._errors import (ClosedError, FileNotFoundError, IndexError, InvalidArgumentError, IOError,  # noqa: A004
                      NotFoundError, OutOfMemoryError)
from ._safe_open import safe_open
from ._save import compress, load_model, save_file, save_model

__version__: str = _native.__version__
__all__ = [
    "open", "safe_open", "Checkpoint", "TensorSlice", "TensorIterator", "TensorInfo", "TensorPart",
    "Error", "NotFoundError", "FileNotFoundError", "InvalidArgumentError", "IndexError", "ClosedError",
    "OutOfMemoryError", "IOError", "parse_budget", "active_isa", "save_file", "save_model", "load_model", "compress",
    "__version__",
]
