"""Writing compressed-tensors checkpoints from Python: ``save_model`` / ``save_file`` feed
in-memory tensors to ctstream's C++ writer one at a time (each is handed over as a view of its own
storage: no second copy of the model), ``compress`` converts a checkpoint on disk, and
``load_model`` decodes a checkpoint straight into a module's existing parameters.

The writer is the one behind ``ctstream compress``: same formats, numerics (the library's own,
bit for bit), defaults (2-D Linear ``.weight`` tensors compressed; embeddings, norms, biases and the
output head kept, in ``dtype`` when given), report and atomic output (a temporary directory
renamed into place; an error, a cancel or Ctrl-C leaves nothing behind).
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from . import _ctstream as _native
from ._checkpoint import open as ct_open, parse_budget
from ._ctstream import Error
from ._dtypes import _dtype_str
from ._errors import InvalidArgumentError

PathLike = Union[str, "os.PathLike[str]"]

# torch dtype name -> safetensors dtype name (safetensors/torch.py `_TYPES`)
_ST_NAMES = {
    "float64": "F64", "float32": "F32", "float16": "F16", "bfloat16": "BF16", "int64": "I64", "int32": "I32",
    "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16", "uint8": "U8", "bool": "BOOL",
    "float8_e4m3fn": "F8_E4M3", "float8_e5m2": "F8_E5M2", "float8_e8m0fnu": "F8_E8M0",
    "float8_e4m3fnuz": "F8_E4M3FNUZ", "float8_e5m2fnuz": "F8_E5M2FNUZ", "float4_e2m1fn_x2": "F4",
    "complex64": "C64",
}


def _options(format: str, bits: Optional[int], group_size: Optional[int], targets: Optional[Sequence[str]],
             ignore: Optional[Sequence[str]], dtype: Any, strategy: Optional[str], symmetric: bool,
             block: Optional[Tuple[int, int]], activations: bool, prune_24: bool, shard_size: Union[int, str],
             overwrite: bool, compute_errors: bool, rank: Optional[int] = None, energy: Optional[float] = None,
             **extra) -> Dict[str, Any]:
    if isinstance(targets, str) or isinstance(ignore, str):
        raise InvalidArgumentError("targets / ignore are lists of names, patterns or class names, not a string")
    opts: Dict[str, Any] = {
        "format": format, "bits": bits, "group_size": group_size, "strategy": strategy, "symmetric": bool(symmetric),
        "activations": bool(activations), "prune_24": bool(prune_24), "overwrite": bool(overwrite),
        "compute_errors": bool(compute_errors),
        "shard_size": parse_budget(shard_size) if isinstance(shard_size, str) else shard_size,
        "targets": list(targets) if targets is not None else None,
        "ignore": list(ignore) if ignore is not None else None,
        "dtype": _dtype_str(dtype), "block": tuple(block) if block is not None else None,
        "rank": rank, "energy": float(energy) if energy is not None else None,
    }
    opts.update(extra)
    return opts


# The keyword options save_file / compress take as **options (save_model names them), with their
# defaults: those of save_model's signature.
_KEYWORD_DEFAULTS: Dict[str, Any] = dict(strategy=None, symmetric=True, block=None, activations=True, prune_24=False,
                                         shard_size="5GB", overwrite=False, compute_errors=True, rank=None,
                                         energy=None)


def _keyword_options(caller: str, options: Mapping[str, Any]) -> Dict[str, Any]:
    """`options` over the defaults; an unknown name is an InvalidArgumentError naming `caller`."""
    unknown = set(options) - set(_KEYWORD_DEFAULTS)
    if unknown:
        raise InvalidArgumentError(f"{caller}: unknown option(s) {sorted(unknown)}")
    return {**_KEYWORD_DEFAULTS, **options}


def _report(text: str) -> Dict[str, Any]:
    return json.loads(text)


# ---- state dicts --------------------------------------------------------------------------------

def _tied_names(model) -> List[str]:
    """Names transformers declares tied to another (``_tied_weights_keys``: {target: source} in
    transformers 5, a list of targets before), with their module prefixes."""
    out = []
    for prefix, mod in model.named_modules():
        keys = getattr(mod, "_tied_weights_keys", None)
        if not keys:
            continue
        for k in (keys.keys() if isinstance(keys, Mapping) else keys):
            if isinstance(k, str):
                out.append(f"{prefix}.{k}" if prefix else k)
    return out


def _shared_groups(state: Mapping[str, Any], model: Any = None) -> List[List[str]]:
    """Names whose tensors share memory (the same storage), as safetensors' `_find_shared_tensors`
    groups them; with a model, also names of one Parameter / buffer object (tied parameters on
    the meta device have no storage to compare)."""
    parent = {n: n for n in state}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    def union(a, b):
        parent[find(a)] = find(b)

    first: Dict[Any, str] = {}
    for name, t in state.items():
        if t.device.type == "meta" or t.numel() == 0:
            continue
        key = (str(t.device), t.untyped_storage().data_ptr())
        if key in first:
            union(name, first[key])
        else:
            first[key] = name
    if model is not None:
        by_obj: Dict[int, str] = {}
        for name, t in [*model.named_parameters(remove_duplicate=False), *model.named_buffers(remove_duplicate=False)]:
            if name not in state:
                continue
            if id(t) in by_obj:
                union(name, by_obj[id(t)])
            else:
                by_obj[id(t)] = name
    groups: Dict[str, List[str]] = {}
    for n in state:
        groups.setdefault(find(n), []).append(n)
    return [sorted(g) for g in groups.values() if len(g) > 1]


def _dedup(state: Dict[str, Any], discard: Iterable[str] = (), preferred: Iterable[str] = (),
           model: Any = None) -> Dict[str, List[str]]:
    """safetensors.torch `_remove_duplicate_names`: for each group of names sharing memory, the
    one kept (a name covering the whole storage; not a tied alias when possible; a preferred one
    when given) -> the names dropped."""
    discard, preferred = set(discard), set(preferred)
    removed: Dict[str, List[str]] = {}
    for group in _shared_groups(state, model):
        complete = [n for n in group if _covers_storage(state[n])]
        if not complete:
            raise InvalidArgumentError(f"tensors {group} share memory but none covers all of it: save a copy of each")
        keep = sorted(complete)[0]
        if set(complete) - discard:
            keep = sorted(set(complete) - discard)[0]
        if preferred & set(complete):
            keep = sorted(preferred & set(complete))[0]
        removed[keep] = [n for n in group if n != keep]
    return removed


def _covers_storage(t) -> bool:
    if t.device.type == "meta":
        return True
    return t.data_ptr() == t.untyped_storage().data_ptr() and \
        t.nelement() * t.element_size() == t.untyped_storage().nbytes()


def _module_classes(model) -> Dict[str, List[str]]:
    import torch

    return {name: [c.__name__ for c in type(m).__mro__ if isinstance(c, type) and issubclass(c, torch.nn.Module)]
            for name, m in model.named_modules() if name}


def _conv_modules(model) -> Dict[str, str]:
    """Conv2d module -> the attributes a low-rank decomposition records (ptdeco utils/modconfig.py
    `_get_module_config_conv2d`); they are not in the weights."""
    import torch

    return {name: json.dumps({"stride": list(m.stride), "padding": list(m.padding) if isinstance(m.padding, tuple)
                              else m.padding, "dilation": list(m.dilation), "padding_mode": m.padding_mode,
                              "groups": m.groups})
            for name, m in model.named_modules() if name and isinstance(m, torch.nn.Conv2d)}


def _model_config(model, config: Optional[Union[Mapping[str, Any], str]]) -> str:
    """config.json text: the transformers model's own config (what save_pretrained writes), with
    `config` (a dict, or JSON text) merged over it; "" when there is neither."""
    base: Dict[str, Any] = {}
    cfg = getattr(model, "config", None) if model is not None else None
    if cfg is not None and hasattr(cfg, "to_json_string"):
        base = json.loads(cfg.to_json_string())
    if isinstance(config, str):
        config = json.loads(config)
    if config:
        base.update(dict(config))
    return json.dumps(base, indent=2, sort_keys=True) + "\n" if base else ""


def _extra_files(model) -> Dict[str, str]:
    gen = getattr(model, "generation_config", None)
    can = getattr(model, "can_generate", None)
    if gen is not None and hasattr(gen, "to_json_string") and (can is None or can()):
        return {"generation_config.json": gen.to_json_string()}
    return {}


def _write(out_dir: PathLike, tensors: Mapping[str, Any], opts: Dict[str, Any], config_json: str,
           classes: Dict[str, List[str]], extra: Dict[str, str], progress,
           convs: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    import torch

    names = list(tensors)
    entries = []
    for name in names:
        t = tensors[name]
        if not isinstance(t, torch.Tensor):
            raise InvalidArgumentError(f"tensor '{name}': expected a torch.Tensor, got {type(t).__name__}")
        dt = _ST_NAMES.get(str(t.dtype).replace("torch.", ""))
        if dt is None:
            raise InvalidArgumentError(f"tensor '{name}': dtype {t.dtype} has no safetensors name")
        if t.device.type == "meta":
            raise InvalidArgumentError(f"tensor '{name}' is on the meta device (no data to save)")
        shape = list(t.shape)
        if dt == "F4":  # torch holds FP4 packed two per byte: the logical last dim is twice
            shape[-1] *= 2
        entries.append((name, dt, shape))

    def fetch(i: int):
        t = tensors[names[i]].detach()
        if t.device.type != "cpu":
            t = t.to("cpu")
        t = t.contiguous()  # a no-op (a view, no copy) for parameters
        return t.reshape(-1).view(torch.uint8).numpy()

    return _report(_native._compress_tensors(os.fspath(out_dir), entries, fetch, opts, config_json, classes, extra,
                                             convs or {}, progress))


def save_model(model: Any, out_dir: PathLike, format: str = "pack-quantized", bits: Optional[int] = None,
               group_size: Optional[int] = None, targets: Optional[Sequence[str]] = None,
               ignore: Optional[Sequence[str]] = None, dtype: Any = None,
               config: Optional[Union[Mapping[str, Any], str]] = None, *, strategy: Optional[str] = None,
               symmetric: bool = True, block: Optional[Tuple[int, int]] = None, activations: bool = True,
               prune_24: bool = False, shard_size: Union[int, str] = "5GB", overwrite: bool = False,
               compute_errors: bool = True, progress: Optional[Callable[[Dict[str, Any]], None]] = None,
               rank: Optional[int] = None, energy: Optional[float] = None) -> Dict[str, Any]:
    """Writes a torch model (``nn.Module``) or a state dict as a compressed-tensors checkpoint in
    ``out_dir`` (``model.safetensors`` or shards + index, ``config.json``), compressing as
    ``ctstream compress`` does, straight from memory, one tensor at a time.

    format: "pack-quantized" (int4 group 128 by default), "int-quantized" (int8 channel + dynamic
      int8 activations), "float-quantized" (fp8 channel + dynamic fp8 activations),
      "nvfp4-pack-quantized", "mxfp4-pack-quantized" / "mxfp8-quantized" (E8M0 scales per 32 values),
      "sparse-bitmask", "sparse-24-bitmask", or "dense" (with ``dtype``).
    bits, group_size (implies the group strategy; MX formats take only 32), strategy ("tensor",
      "channel", "group", "block", "tensor_group"), block=(rows, cols) (implies the block strategy),
      symmetric: the weight quantization. A size the strategy does not use raises ValueError.
    targets: modules to compress - names, ``re:`` patterns (Python ``re.match``) or class names
      (matched against each module's class and its bases, as compressed-tensors does, when a model
      is given). Default ``["Linear"]``: every Linear except the output head (lm_head).
    ignore: modules never compressed (same forms); written to the config's ``ignore`` list.
    dtype: convert floating tensors first (e.g. ``torch.bfloat16``); quantization then happens in
      that dtype, as the library does after ``model.to(dtype)``.
    config: with a transformers model, merged over ``model.config`` (the compression section is
      added to it); with a state dict, the model config to write (None: only the compression
      section). ``generation_config.json`` is written too when the model has one.
    activations: int/float-quantized: declare dynamic input activations (False: weight-only).
    prune_24: sparse-24-bitmask: keep the 2 largest of every 4 instead of refusing non-2:4 weights.
    shard_size: largest shard ("5GB", bytes). overwrite: replace a non-empty ``out_dir``.
    compute_errors: decode every compressed tensor back and report its error.
    rank / energy: format "low-rank" (ptdeco's layout + decompose_config.json): keep ``rank``
      singular values per weight, or the fewest holding the fraction ``energy`` of its energy.
      With a model, targets may include "Conv2d": a conv becomes a k x k conv to ``rank``
      channels then a 1 x 1 conv (its stride / padding come from the module).
    progress: called with a dict (phase, tensors_done, tensors_total, bytes_done, bytes_total,
      tensor, elapsed_s) after each tensor; raising in it aborts (nothing is written).

    Tensors sharing memory (tied embeddings) are written once, under the name transformers keeps.
    Returns the report: sizes, ratio, and per tensor the scheme and the max / RMS error.
    """
    import torch

    if isinstance(model, torch.nn.Module):
        state = dict(model.state_dict())
        classes = _module_classes(model)
        config_json = _model_config(model, config)
        extra = _extra_files(model)
        discard = _tied_names(model)
        convs = _conv_modules(model)
    elif isinstance(model, Mapping):
        state = dict(model)
        classes, extra, discard, convs = {}, {}, [], {}
        config_json = _model_config(None, config)
    else:
        raise InvalidArgumentError(f"save_model takes a torch.nn.Module or a state dict, not {type(model).__name__}")
    aliased = []
    for keep, dropped in _dedup(state, discard=discard, model=model if isinstance(model, torch.nn.Module) else None).items():
        for n in dropped:
            del state[n]
            if n.endswith(".weight") and not keep.endswith(n):
                aliased.append(n[: -len(".weight")])
    if aliased and format != "dense":
        # A tied alias (lm_head sharing the embedding) is not written; loaders that quantize by
        # class (transformers + compressed-tensors) must still leave its module dense.
        ignore = list(ignore or []) + [a for a in aliased if a not in (ignore or [])]
    opts = _options(format, bits, group_size, targets, ignore, dtype, strategy, symmetric, block, activations,
                    prune_24, shard_size, overwrite, compute_errors, rank, energy)
    return _write(out_dir, state, opts, config_json, classes, extra, progress, convs)


def save_file(tensors: Mapping[str, Any], path: PathLike, format: str = "pack-quantized", bits: Optional[int] = None,
              group_size: Optional[int] = None, targets: Optional[Sequence[str]] = None,
              ignore: Optional[Sequence[str]] = None, dtype: Any = None,
              config: Optional[Union[Mapping[str, Any], str]] = None, **options) -> Dict[str, Any]:
    """Writes a dict of tensors (``{name: torch.Tensor}``) as a compressed-tensors checkpoint
    directory ``path`` (``model.safetensors`` + ``config.json``, the form compressed-tensors,
    vLLM and ``ctstream.open`` read). Same options as ``save_model``; tensors sharing memory
    must be given once. Returns the report."""
    if not isinstance(tensors, Mapping):
        raise InvalidArgumentError(f"save_file takes a dict of tensors, not {type(tensors).__name__}")
    if os.fspath(path).endswith(".safetensors"):
        raise InvalidArgumentError(f"{os.fspath(path)}: save_file writes a checkpoint directory (the weights and the "
                                   "config.json that describes their compression); give a directory path")
    state = dict(tensors)
    groups = _shared_groups(state)
    if groups:
        raise InvalidArgumentError(f"tensors {groups[0]} share memory: give each once (or use save_model)")
    progress = options.pop("progress", None)
    opts = _options(format, bits, group_size, targets, ignore, dtype, **_keyword_options("save_file", options))
    return _write(path, state, opts, _model_config(None, config), {}, {}, progress)


def compress(input: PathLike, out_dir: PathLike, format: str = "pack-quantized", bits: Optional[int] = None,
             group_size: Optional[int] = None, targets: Optional[Sequence[str]] = None,
             ignore: Optional[Sequence[str]] = None, dtype: Any = None, *, copy_other_files: bool = True,
             io: str = "mmap", progress: Optional[Callable[[Dict[str, Any]], None]] = None, **options
             ) -> Dict[str, Any]:
    """``ctstream compress`` from Python: converts the checkpoint at ``input`` (a .safetensors file
    or a model directory) into ``out_dir``, copying the directory's other files (tokenizer, ...).
    Options as ``save_model``. Returns the report."""
    opts = _options(format, bits, group_size, targets, ignore, dtype, copy_other_files=bool(copy_other_files), io=io,
                    **_keyword_options("compress", options))
    return _report(_native._compress_checkpoint(os.fspath(input), os.fspath(out_dir), opts, progress))


# ---- loading into a model -----------------------------------------------------------------------

def load_model(model: Any, path: PathLike, strict: bool = True, *, io: str = "mmap", threads: int = 0,
               budget: Union[None, int, str] = None) -> Tuple[List[str], List[str]]:
    """Loads a checkpoint (compressed or not) into ``model``'s existing parameters and buffers:
    each tensor is decoded straight into its destination (in the destination's dtype), so peak
    memory is the model plus one tensor in flight - never a state dict. A meta-device parameter
    is replaced by the decoded tensor (``assign``); a parameter on a GPU gets a copy.

    Returns ``(missing, unexpected)`` like ``safetensors.torch.load_model``: model names the file
    did not provide (tied aliases of a loaded tensor excepted), and file names the model lacks
    (e.g. a quantized checkpoint's activation scales). With ``strict`` (default) either raises
    ctstream.Error (a RuntimeError) in ``load_state_dict``'s words, before anything is written
    when names are the problem. A shape mismatch is always an error.
    """
    import torch

    state = model.state_dict()
    with ct_open(path, io=io, threads=threads, budget=budget, framework="pt", module_classes=model) as ck:
        file_names = ck.keys()
        in_file = set(file_names)
        unexpected = [n for n in file_names if n not in state]
        missing = [n for n in state if n not in in_file]
        # a name sharing memory with a loaded tensor (a tied alias) is loaded through it
        covered, ties = set(), []
        for keep, dropped in _dedup(dict(state), discard=_tied_names(model), preferred=file_names, model=model).items():
            group = [keep, *dropped]
            if any(n in in_file for n in group):
                covered.update(group)
                ties.append(([n for n in group if n in in_file][0], group))
        missing = [n for n in missing if n not in covered]
        if strict and (missing or unexpected):
            raise _state_dict_error(model, missing, unexpected)
        mismatched = []
        for n in file_names:
            if n in state:
                want = list(state[n].shape)
                got = ck.info(n).shape
                if ck.info(n).dtype == "F4":
                    got = got[:-1] + [got[-1] // 2]
                if list(got) != want:
                    mismatched.append(f"size mismatch for {n}: copying a param with shape {list(got)} from checkpoint, "
                                      f"the shape in current model is {want}.")
        if mismatched:
            e = Error(f"Error(s) in loading state_dict for {type(model).__name__}:\n\t" + "\n\t".join(mismatched))
            e.kind, e.file, e.tensor = "invalid_argument", os.fspath(path), ""
            raise e
        assign: Dict[str, Any] = {}
        with torch.no_grad():
            for n in file_names:
                if n not in state:
                    continue
                dst = state[n]
                if dst.device.type == "meta":
                    assign[n] = ck.get(n, dtype=dst.dtype if dst.is_floating_point() else None)
                elif dst.device.type == "cpu" and dst.is_contiguous():
                    ck.get(n, out=dst)
                else:
                    dst.copy_(ck.get(n, dtype=dst.dtype if dst.is_floating_point() else None))
                ck._n.release(n)  # drop the file pages of this tensor: resident memory stays the model
        if assign:
            model.load_state_dict(assign, strict=False, assign=True)
            for src, group in ties:  # assign replaced the loaded Parameter: point its aliases at it
                if src in assign:
                    t = model.get_parameter(src) if src in dict(model.named_parameters()) else model.get_buffer(src)
                    for n in group:
                        if n != src:
                            mod, _, attr = n.rpartition(".")
                            setattr(model.get_submodule(mod), attr, t)
    return sorted(missing), sorted(unexpected)


def _state_dict_error(model, missing: List[str], unexpected: List[str]):
    parts = []
    if missing:
        parts.append("Missing key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(missing)) + ". ")
    if unexpected:
        parts.append("Unexpected key(s) in state_dict: " + ", ".join(f'"{k}"' for k in sorted(unexpected)) + ". ")
    e = Error(f"Error(s) in loading state_dict for {type(model).__name__}:\n\t" + "\n\t".join(parts))
    e.kind, e.file, e.tensor = "invalid_argument", "", ""
    return e
