"""The ``vllm.general_plugins`` entry point (pyproject.toml: ``ctstream._vllm_plugin:register``) and
the vLLM classes behind ``--load-format ctstream`` and ``--quantization ctstream`` (see
``ctstream.vllm``). This module imports vLLM, so only vLLM loads it; the classes are module-level
so that vLLM can pickle them into its engine-core and worker processes (the quantization config
travels inside VllmConfig)."""
from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any, Dict, Optional

import torch
from vllm.model_executor.layers.quantization import register_quantization_config
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.model_loader import register_model_loader
from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

import ctstream

from . import _amx, _remote
from .vllm import EXTRA_CONFIG_KEYS, LOAD_FORMAT, MODES, QUANTIZATION, _sparse_config, resolve_mode, weights_iterator


class CtstreamDenseConfig(QuantizationConfig):
    """Builds every layer unquantized; the ``ctstream`` load format fills it with decoded weights."""

    def __init__(self, checkpoint_config: Optional[Dict[str, Any]] = None):
        super().__init__()
        self.checkpoint_config = checkpoint_config or {}

    def get_name(self):
        return QUANTIZATION

    def get_supported_act_dtypes(self):
        return [torch.bfloat16, torch.float16, torch.float32]

    @classmethod
    def get_min_capability(cls) -> int:
        return 0

    @staticmethod
    def get_config_filenames():
        return []

    @classmethod
    def from_config(cls, config: Dict[str, Any]) -> "CtstreamDenseConfig":
        return cls(config)

    @classmethod
    def override_quantization_method(cls, hf_quant_cfg, user_quant, hf_config=None):
        if user_quant == QUANTIZATION:
            return QUANTIZATION
        if user_quant is None and _sparse_config(hf_quant_cfg):
            return QUANTIZATION  # vLLM cannot serve it; ctstream decodes it
        return None

    def get_quant_method(self, layer, prefix: str):
        from vllm.model_executor.layers.linear import LinearBase, UnquantizedLinearMethod

        if isinstance(layer, LinearBase):
            _require_ctstream_load_format()
            return UnquantizedLinearMethod()
        return None  # embeddings, experts, attention: vLLM's unquantized defaults


def _require_ctstream_load_format() -> None:
    try:
        from vllm.config import get_current_vllm_config

        fmt = get_current_vllm_config().load_config.load_format
    except Exception:  # noqa: BLE001 - outside a config context: nothing to check
        return
    if str(fmt).lower() != LOAD_FORMAT:
        raise ValueError(
            f"this model is built unquantized for ctstream to decode its compressed weights (quantization "
            f"'{QUANTIZATION}', chosen for a sparse compressed-tensors checkpoint or by --quantization "
            f"{QUANTIZATION}), but the load format is {fmt!r}: pass --load-format {LOAD_FORMAT}")


# vLLM's own extra-config keys passed to its DefaultModelLoader (weight tracking: every parameter
# must have been loaded); its multithread keys are refused, ctstream decoding with its own threads.
VLLM_KEYS = ("enable_weights_track",)
# extra config 'weights' -> the model_config.model it was first used with, in this process
_MODEL_OF_WEIGHTS: Dict[str, str] = {}


class CtstreamModelLoader(DefaultModelLoader):
    """vLLM's default loader with ctstream as the tensor source (see ``ctstream.vllm``)."""

    def __init__(self, load_config):
        extra = dict(load_config.model_loader_extra_config or {})
        self.ctstream_options = {k: extra.pop(k) for k in list(extra) if k in EXTRA_CONFIG_KEYS}
        # vLLM's own keys that apply to the load whatever the tensor source: to its loader
        passed = {k: extra.pop(k) for k in list(extra) if k in VLLM_KEYS}
        if not isinstance(passed.get("enable_weights_track", False), bool):
            raise ValueError("ctstream: extra config 'enable_weights_track' (vLLM's) must be true or false, "
                             f"not {passed['enable_weights_track']!r}")
        if extra:  # every value is checked here, before the model is built, and named as ctstream's
            hint = ("; ctstream decodes with its own threads: use 'threads'"
                    if {"num_threads", "enable_multithread_load"} & set(extra) else "")
            raise ValueError(f"ctstream: unknown extra config keys {sorted(extra)} for load format "
                             f"'{LOAD_FORMAT}' (it takes {list(EXTRA_CONFIG_KEYS)} and vLLM's "
                             f"{list(VLLM_KEYS)}){hint}")
        mode = self.ctstream_options.get("mode", "auto")
        if mode not in MODES:
            raise ValueError(f"ctstream: extra config 'mode' must be one of {MODES}, not {mode!r}")
        io = self.ctstream_options.get("io", "mmap")
        if io not in ("mmap", "pread"):
            raise ValueError(f"ctstream: extra config 'io' must be 'mmap' or 'pread', not {io!r}")
        threads = self.ctstream_options.get("threads", 0)
        if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= 1024:
            raise ValueError(f"ctstream: extra config 'threads' must be an integer 0-1024 (0: all cores), not {threads!r}")
        lazy = self.ctstream_options.get("lazy", True)
        if not isinstance(lazy, bool):  # "false" would be truthy: never guessed
            raise ValueError(f"ctstream: extra config 'lazy' must be true or false, not {lazy!r}")
        ctstream.parse_budget(self.ctstream_options.get("budget"))  # checked now, not mid-load
        # DefaultModelLoader finds files only for the load formats it knows: it gets a
        # "safetensors" copy of the config, with vLLM's own keys only.
        super().__init__(dataclasses.replace(load_config, load_format="safetensors", model_loader_extra_config=passed))
        self._mode: Optional[str] = None

    def _weights_location(self, model_config) -> Optional[str]:
        """Where the primary weights are when not in ``model_config.model``: the extra key
        ``weights``, else vLLM's own ``model_config.model_weights`` (vllm/config/model.py:158; set
        by its Run:ai pull, model.py:1212, and read first by its loaders, e.g.
        runai_streamer_loader.py ``load_weights``). A local directory or an object URL."""
        # The extra key names the weights of the model it was first given with (in this process):
        # once vLLM points model_config at another model (reload_weights(weights_path=...), which
        # makes a new loader from the same load config), that model's own place.
        extra = self.ctstream_options.get("weights")
        if isinstance(extra, str) and extra:
            first = _MODEL_OF_WEIGHTS.setdefault(extra, model_config.model)
            if model_config.model != first:
                extra = None
        w = extra or getattr(model_config, "model_weights", "") or None
        if w is not None and not isinstance(w, str):
            raise ValueError(f"ctstream: extra config 'weights' must be a path or URL string, not {w!r}")
        return w

    def download_model(self, model_config) -> None:
        if self._weights_location(model_config) is None:
            super().download_model(model_config)  # vllm/model_executor/model_loader/default_loader.py:389

    def get_all_weights(self, model_config, model):
        # DefaultModelLoader.get_all_weights (default_loader.py:367) makes the primary Source from
        # model_config.model; remember which it is, so that _get_weights_iterator reads it from the
        # weights location (secondary sources keep their own paths).
        self._primary = (model_config.model, self._weights_location(model_config))
        return super().get_all_weights(model_config, model)

    def load_weights(self, model, model_config) -> None:
        self._mode = resolve_mode(self.ctstream_options.get("mode", "auto"), model_config.quantization)
        return super().load_weights(model, model_config)

    def _get_weights_iterator(self, source):
        if self._mode is None:  # get_all_weights() called directly (e.g. in-place reload)
            from vllm.config import get_current_vllm_config

            mc = get_current_vllm_config().model_config
            self._mode = resolve_mode(self.ctstream_options.get("mode", "auto"), mc.quantization)
        primary = getattr(self, "_primary", None)
        remote = None
        if primary is not None and primary[1] is not None and source.prefix == "" and \
                source.model_or_path == primary[0]:
            if _remote.is_remote(primary[1]):
                remote = primary[1]  # the whole checkpoint at that URL (no listing, no local files)
            else:
                source = dataclasses.replace(source, model_or_path=primary[1])
        if remote is not None:
            files = remote
        else:
            _, files, use_safetensors, _ = self._prepare_weights(
                source.model_or_path, source.subfolder, source.revision, source.fall_back_to_pt,
                source.allow_patterns_overrides)
            if not use_safetensors:
                raise ValueError(f"ctstream: {source.model_or_path} has no *.safetensors weights")
        if remote is None and getattr(source, "is_unused_weight", None) is not None:
            try:
                from vllm.model_executor.model_loader.weight_utils import filter_safetensors_files_by_weight_name

                files = filter_safetensors_files_by_weight_name(files, source.is_unused_weight)
            except ImportError:
                pass
        if self.counter_before_loading_weights == 0.0:
            self.counter_before_loading_weights = time.perf_counter()
        it = weights_iterator(
            files, self.load_config.use_tqdm_on_load,
            packed=self._mode == "stored",
            # Every tensor in its natural dtype, as vLLM's own iterator yields stored ones (and the
            # library's decompression, saved, would hold decoded ones): each parameter's copy_ casts to
            # its own dtype, so one vLLM keeps in float32 (MoE router gates, e_score_correction_bias)
            # is not rounded to the model dtype first. (Lazy tensors decode straight as the
            # parameter's dtype: the same bits as the natural values cast.)
            dtype=None,
            threads=self.ctstream_options.get("threads", 0),
            budget=self.ctstream_options.get("budget"),
            io=self.ctstream_options.get("io", "mmap"),
            local_expert_ids=getattr(self, "local_expert_ids", None),
            lazy=self.ctstream_options.get("lazy", True))
        return ((source.prefix + name, tensor) for name, tensor in it)


_registered = False


def register() -> None:
    """The entry point vLLM calls in each of its processes: registers the ``ctstream`` load format
    and quantization method there. Safe to call more than once."""
    global _registered
    if _registered:
        return
    # Before any vLLM kernel runs in this process: vLLM's CPU attention uses Intel AMX without asking
    # Linux for the tile state, which kills an in-process engine with SIGILL on AMX hosts (see _amx).
    _amx.request_amx_tile_state()
    register_quantization_config(QUANTIZATION)(CtstreamDenseConfig)
    register_model_loader(LOAD_FORMAT)(CtstreamModelLoader)
    _wrap_create_engine_config()
    _registered = True


# ---- `vllm serve s3://...` / LLM(model="s3://...", load_format="ctstream") ----------------------
#
# vLLM pulls an object-storage model's config and tokenizer with Run:ai's streamer
# (ModelConfig.maybe_pull_model_tokenizer_for_runai, vllm/config/model.py:1191-1235, called from
# ModelConfig.__post_init__ at model.py:621, before get_config) and then refuses every load format
# but Run:ai's and modelexpress for it (VllmConfig.__post_init__, vllm/config/vllm.py:2669-2690);
# https:// is not an object URI for vLLM at all (runai_utils.py is_runai_obj_uri: s3, gs, az) but
# an HF repo id. So the model argument is rewritten before ModelConfig exists: EngineArgs calls
# load_general_plugins() - this register() - in its __post_init__ (vllm/engine/arg_utils.py:904-906),
# and builds ModelConfig only in create_engine_config (arg_utils.py:2205, create_model_config at
# 2240), which every entry point calls: LLMEngine.from_engine_args (v1/engine/llm_engine.py:183),
# AsyncLLM (v1/engine/async_llm.py), `vllm serve` (entrypoints/cli/serve.py:192, 313).


def _rewrite_remote_model(args) -> None:
    """For load format ctstream and a model that is an s3:// / http(s):// URL: the small files go
    to a local directory (ctstream.vllm docs), which becomes the model (and the tokenizer, when it
    was the same URL); the URL becomes the loader's ``weights`` and, when none was given, the
    served model name. ``model_weights`` stays empty, so neither vLLM's Run:ai pull
    (model.py:1201-1205) nor its load-format check (vllm.py:2669) fires."""
    if str(getattr(args, "load_format", "")).lower() != LOAD_FORMAT:
        return
    url = args.model
    if not _remote.is_remote(url):
        return
    from vllm.assets.base import get_cache_dir  # VLLM_ASSETS_CACHE (vllm/assets/base.py:13)

    local = _remote.pull_model_files(url, os.path.join(str(get_cache_dir()), "ctstream"))
    if args.tokenizer in (None, "", url):
        args.tokenizer = local
    if not args.served_model_name:
        args.served_model_name = url
    extra = dict(args.model_loader_extra_config or {})
    extra.setdefault("weights", url)
    args.model_loader_extra_config = extra
    args.model = local


def _wrap_create_engine_config() -> None:
    try:
        from vllm.engine.arg_utils import EngineArgs
    except ImportError:  # a vLLM without it: the explicit form ("weights") still works
        return

    orig = EngineArgs.create_engine_config
    if getattr(orig, "_ctstream_wrapped", False):
        return

    @functools.wraps(orig)
    def create_engine_config(self, *args, **kwargs):
        _rewrite_remote_model(self)
        return orig(self, *args, **kwargs)

    create_engine_config._ctstream_wrapped = True
    # a class attribute: AsyncEngineArgs (a subclass, arg_utils.py:3190) inherits it
    EngineArgs.create_engine_config = create_engine_config
