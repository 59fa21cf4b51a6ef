"""vLLM integration: ``--load-format ctstream``.

Installing ctstream (``pip install .``) declares a ``vllm.general_plugins`` entry point
(``ctstream._vllm_plugin:register``), so every vLLM process - API server, engine core, workers,
spawned or forked - registers two things with vLLM (this module itself never imports vLLM):

* the load format ``ctstream``: vLLM's own ``DefaultModelLoader`` (file discovery, secondary
  weights, prefixes, allow patterns, expert-parallel filtering, the load timer, weight tracking,
  ``process_weights_after_loading``) with ctstream as the source of tensors;
* the quantization method ``ctstream``: builds a compressed-tensors checkpoint's model
  *unquantized* (plain ``.weight`` parameters), for the load format to fill with decoded weights.
  It claims by itself the checkpoints vLLM refuses (sparse-bitmask, 2:4, marlin-24 configs: "Sparsity
  support has been removed"), so those need nothing but ``--load-format ctstream``.

Which tensors are yielded follows from how vLLM built the model (``mode`` "auto"):

* built with the checkpoint's ``compressed-tensors`` quantization -> **stored** parts
  (``weight_packed``, ``weight_scale``, ...) under their file names, byte for byte what vLLM's own
  safetensors iterator yields; vLLM repacks them for its kernels;
* built unquantized (``--quantization ctstream``, ``hf_overrides={"quantization_config": None}``,
  or a sparse checkpoint) -> **dense**: every tensor decoded to the model dtype; activation
  quantization leftovers (``input_scale``, ``input_zero_point``, ``input_global_scale``,
  ``output_*``, kv-cache scales) are dropped, as an unquantized model has no parameter for them.

Decoded weights are never yielded into quantized parameters, nor packed parts into dense ones: a
``mode`` forced through ``--model-loader-extra-config`` that contradicts the model is refused
with a message saying what to pass.

    vllm serve MODEL --load-format ctstream                            # stored or sparse->dense
    vllm serve MODEL --load-format ctstream --quantization ctstream    # any checkpoint, dense
    vllm serve MODEL --load-format ctstream --model-loader-extra-config '{"threads": 8, "io": "pread"}'

``--model-loader-extra-config`` keys: ``mode`` ("auto" | "stored" | "dense"), ``threads`` (decode
threads, 0 = all cores), ``budget`` (bytes decoded ahead, e.g. "512MB"), ``io`` ("mmap" |
"pread"), ``lazy``, ``weights`` (where the weights are, when not in the model directory: a local
directory or an ``s3://`` / ``https://`` URL; vLLM's own ``model_weights`` is honoured likewise);
vLLM's ``enable_weights_track`` passes through to its loader (its ``num_threads`` /
``enable_multithread_load`` are refused: ctstream decodes with its own threads).

Object storage (docs/design/object_storage.md section 2.3): ``vllm serve s3://bucket/prefix
--load-format ctstream`` (or ``LLM(model="s3://...", load_format="ctstream")``, ``https://`` alike)
copies the small files (config.json, generation_config.json, index, tokenizer files; size-capped)
with ctstream's own client into ``<vLLM cache>/ctstream/<sha256(url)[:8]>``, builds the model from
there, and streams the weights from the URL; or, with any local directory holding the config:
``vllm serve CONFIG_DIR --load-format ctstream --model-loader-extra-config '{"weights": "s3://..."}'``.
Credentials, endpoint and region come from the usual AWS variables and files.

``weights_iterator`` is the same source as a plain function, for code that calls a model's
``load_weights`` itself.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, Generator, Iterable, List, Optional, Set, Tuple, Union

import ctstream

from . import _remote
from ._dtypes import _dtype_str

__all__ = ["weights_iterator", "LOAD_FORMAT", "QUANTIZATION", "EXTRA_CONFIG_KEYS",
           "ACTIVATION_LEFTOVERS"]

PathLike = Union[str, "os.PathLike[str]"]

LOAD_FORMAT = "ctstream"
QUANTIZATION = "ctstream"
EXTRA_CONFIG_KEYS = ("mode", "threads", "budget", "io", "lazy", "weights")
MODES = ("auto", "stored", "dense")
# Checkpoint entries an unquantized model has no parameter for (activation / kv-cache
# quantization parameters: compressed_tensors.quantization.lifecycle.initialize).
ACTIVATION_LEFTOVERS = (
    ".input_scale", ".input_zero_point", ".input_global_scale",
    ".output_scale", ".output_zero_point", ".output_global_scale",
    ".q_scale", ".k_scale", ".v_scale", ".q_zero_point", ".k_zero_point", ".v_zero_point", ".kv_scale",
)
_EXPERT = re.compile(r"\.experts\.(\d+)\.")


def _sources(files_or_dir: Union[PathLike, Iterable[PathLike]]) -> List[Tuple[str, Optional[Dict[str, str]]]]:
    """The checkpoints to open - one per directory the weight files lie in (a model's files may sit in
    subfolders: transformer/, vision_encoder/) - and for each the files to yield from (their _key ->
    the path as given; None = all of it)."""
    if isinstance(files_or_dir, (str, os.PathLike)):
        return [(os.fspath(files_or_dir), None)]
    files = [os.fspath(f) for f in files_or_dir]
    if not files:
        raise ValueError("weights_iterator: empty list of weight files")
    groups: Dict[str, Dict[str, str]] = {}
    for f in files:
        # object URLs are names, not paths: never abspath/realpath'ed (see _key)
        if _remote.is_remote(f):
            d = _remote.shown(f)[: _remote.shown(f).rfind("/")]
        else:
            f = os.path.abspath(f)
            d = os.path.dirname(f)
        groups.setdefault(d, {})[_key(f)] = f
    return list(groups.items())


def _key(f: str) -> str:
    """How a weight file is compared with the checkpoint's own file list: a local path resolved
    (symlinks, relative parts), an object URL as the reader names it (without a query)."""
    return _remote.shown(f) if _remote.is_remote(f) else os.path.realpath(f)


def _skip_expert(name: str, local_expert_ids: Optional[Set[int]]) -> bool:
    """vLLM's expert-parallel filter (model_loader/ep_weight_filter.py `should_skip_weight`):
    a non-local expert's weights (not its scales) are never read."""
    if local_expert_ids is None:  # no expert parallelism (an empty set: a rank holding no experts)
        return False
    m = _EXPERT.search(name)
    return bool(m) and name.endswith((".weight", ".weight_packed")) and int(m.group(1)) not in local_expert_ids


def _progress(iterable, total: int, enabled: bool, desc: str):
    if not enabled:
        return iterable
    try:
        from vllm.model_executor.model_loader.weight_utils import _BAR_FORMAT, enable_tqdm
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, bar_format=_BAR_FORMAT, disable=not enable_tqdm(True))
    except ImportError:
        pass
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized() and dist.get_rank() != 0:
            return iterable
        from tqdm.auto import tqdm
    except ImportError:
        return iterable
    return tqdm(iterable, total=total, desc=desc)


def weights_iterator(
    hf_weights_files: Union[PathLike, Iterable[PathLike]],
    use_tqdm_on_load: bool = False,
    *,
    dtype: Any = None,
    packed: bool = False,
    threads: int = 0,
    budget: Union[None, int, str] = None,
    io: str = "mmap",
    drop_activation_params: Optional[bool] = None,
    local_expert_ids: Optional[Set[int]] = None,
    lazy: bool = False,
) -> Generator[Tuple[str, Any], None, None]:
    """Yields ``(name, torch.Tensor)`` for a checkpoint, like vLLM's
    ``safetensors_weights_iterator(hf_weights_files, use_tqdm_on_load)``.

    hf_weights_files: the ``*.safetensors`` files (each directory they lie in is opened as a
        checkpoint, whose config.json says how they are compressed; tensors of shards not asked for
        are skipped; a file its directory's index does not list is read by itself, and a ``.pt`` /
        ``.bin`` file by vLLM's own iterator, as vLLM reads them), or the model directory.
    packed: yield the stored entries as they are in the files (``weight_packed``, ...): what vLLM's
        compressed-tensors layers consume. Otherwise every tensor decoded (``...weight``).
    dtype: output dtype of floating and decoded tensors (None: each tensor's natural dtype).
    drop_activation_params: leave out ACTIVATION_LEFTOVERS (default: when decoding).
    local_expert_ids: expert-parallel rank's experts; other experts' weights are not read.
    lazy: yield decoded tensors as ``ctstream._lazy.LazyTensor``: decoded only when used, only the
        slice a weight loader narrows them to, straight into the parameter it is copied into
        (tensor parallelism: each rank decodes what it keeps). Bit-identical to eager decoding.
    threads, budget, io: as for ``ctstream.open``.
    """
    drop = (not packed) if drop_activation_params is None else drop_activation_params
    opts = dict(threads=threads, budget=budget, io=io, framework="pt")
    yield_from = dict(use_tqdm_on_load=use_tqdm_on_load, dtype=dtype, packed=packed, drop=drop,
                      local_expert_ids=local_expert_ids, lazy=lazy, io=io)
    for path, wanted in _sources(hf_weights_files):
        ckpt = ctstream.open(path, **opts)
        keep = None
        others = []  # files asked for that the checkpoint opened does not hold
        if wanted is not None:
            held = {_key(f): i for i, f in enumerate(ckpt.files)}
            keep = {i for k, i in held.items() if k in wanted}
            others = [f for k, f in wanted.items() if k not in held]
        yield from _checkpoint_weights(ckpt, keep, **yield_from)
        # A file vLLM asks for beside an indexed model that the index does not list (a model's own
        # extra weight files: BGE-M3's heads, a joint head): vLLM reads it, so it is read too, never
        # skipped in silence - a .safetensors file as itself, anything else by vLLM's own iterator.
        for f in others:
            if f.endswith(".safetensors"):
                yield from _checkpoint_weights(ctstream.open(f, sibling_shards=False, **opts), None, **yield_from)
                continue
            try:
                from vllm.model_executor.model_loader.weight_utils import pt_weights_iterator
            except ImportError:
                raise ValueError(f"weights_iterator: {f} is not a safetensors file, which ctstream reads; "
                                 "vLLM's own iterator for it is not importable") from None
            yield from pt_weights_iterator([f], use_tqdm_on_load)


def _checkpoint_weights(ckpt, keep: Optional[Set[int]], *, use_tqdm_on_load: bool, dtype: Any, packed: bool,
                        drop: bool, local_expert_ids: Optional[Set[int]], lazy: bool,
                        io: str) -> Generator[Tuple[str, Any], None, None]:
    """One opened checkpoint's tensors (of its files `keep`, None = all), as weights_iterator yields them."""
    try:
        def wanted_name(name: str) -> bool:
            return not (drop and name.endswith(ACTIVATION_LEFTOVERS)) and not _skip_expert(name, local_expert_ids)

        if packed:  # each stored entry of the wanted files, in file order: vLLM's own iterator
            parts = [(info.name, p) for info in ckpt.infos() for p in info.parts
                     if (keep is None or p.file in keep) and wanted_name(p.key)]
            parts.sort(key=lambda np: (np[1].file, np[1].offset))
            for name, p in _progress(parts, len(parts), use_tqdm_on_load, "Loading checkpoint (ctstream, stored parts)"):
                # a copy of each (a torch tensor over the read-only file mapping could be written
                # through - vLLM's own loader hands out copy-on-write tensors); once the consumer
                # asks for the next one, this one's pages leave the process
                yield p.key, ckpt.part(name, p.role)
                ckpt._n.release(name)
            return
        infos = [t for t in ckpt.infos() if (keep is None or t.parts[0].file in keep) and wanted_name(t.name)]
        # Every tensor is decoded ahead on worker threads, within the budget, in this order (plain
        # tensors that need no conversion are copied as stored: a torch tensor over the read-only
        # file mapping could be written through, and vLLM's weight loaders may write in place).
        dt = _dtype_str(dtype)
        lazies = {}
        if lazy:  # lazily: the tensors to decode or convert (plain ones are as cheap to copy now)
            from ._lazy import lazy as make_lazy

            nat = ckpt._n.resolved_dtype
            for t in infos:
                plain = io == "mmap" and t.format == "dense" and nat(t.name, dt) == t.dtype
                if not plain and (lt := make_lazy(ckpt, t.name, dt)) is not None:
                    lazies[t.name] = lt
        eager = [t.name for t in infos if t.name not in lazies]
        # names=[] means none (names=None would be all): when every tensor is lazy, no decode-ahead.
        decoded = iter(ckpt.tensors(dtype=dtype, names=eager)) if eager else iter(())
        for t in _progress(infos, len(infos), use_tqdm_on_load, "Loading checkpoint (ctstream, decoded)"):
            if t.name in lazies:
                yield t.name, lazies.pop(t.name)
                ckpt._n.release(t.name)
            else:
                name, tensor = next(decoded)
                assert name == t.name
                yield name, tensor
    finally:
        # Lazy tensors keep using the checkpoint after the loop: it closes when the last of them is
        # collected. Otherwise close it now.
        if not lazy:
            ckpt.close()


# ---- vLLM ---------------------------------------------------------------------------------------


def _sparse_config(hf_quant_cfg: Any) -> bool:
    """A compressed-tensors config vLLM refuses (compressed_tensors.py `_parse_sparsity_config`:
    "Sparsity support has been removed" whenever sparsity_config has targets)."""
    if not isinstance(hf_quant_cfg, dict):
        return False
    if str(hf_quant_cfg.get("quant_method", "")).replace("_", "-") not in ("compressed-tensors", "sparseml"):
        return False
    sp = hf_quant_cfg.get("sparsity_config")
    return isinstance(sp, dict) and bool(sp.get("targets")) and str(sp.get("format", "dense")) != "dense"


def resolve_mode(requested: str, model_quantization: Optional[str]) -> str:
    """The mode for a model vLLM built with `model_quantization` ("compressed-tensors", None,
    "ctstream", ...); raises ValueError naming what to pass when `requested` contradicts it."""
    if requested not in MODES:
        raise ValueError(f"ctstream: mode must be one of {MODES}, not {requested!r}")
    if model_quantization in (None, QUANTIZATION):
        built = "dense"
    elif model_quantization == "compressed-tensors":
        built = "stored"
    else:
        raise ValueError(
            f"ctstream: vLLM built this model with quantization {model_quantization!r}; the ctstream load format "
            "reads compressed-tensors checkpoints into models built with their own compressed-tensors "
            "quantization (stored parts) or unquantized (decoded weights: --quantization ctstream)")
    if requested == "auto" or requested == built:
        return built
    if requested == "dense":
        raise ValueError(
            "ctstream: mode 'dense' decodes weights, but vLLM built this model with compressed-tensors "
            "quantization, whose layers take the stored (packed) parts. Build it unquantized: pass "
            "--quantization ctstream (or --hf-overrides '{\"quantization_config\": null}'), or use mode 'stored'")
    raise ValueError(
        "ctstream: mode 'stored' yields the checkpoint's packed parts, but vLLM built this model unquantized "
        f"(quantization={model_quantization!r}): its layers take decoded weights. Drop --quantization ctstream / "
        "the hf_overrides to build it with the checkpoint's compressed-tensors quantization, or use mode 'dense'")

