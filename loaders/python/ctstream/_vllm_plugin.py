"""The ``vllm.general_plugins`` entry point (pyproject.toml: ``ctstream._vllm_plugin:register``) and
the vLLM classes behind ``--load-format ctstream`` and ``--quantization ctstream`` (see
``ctstream.vllm``). This module imports vLLM, so only vLLM loads it; the classes are module-level
so that vLLM can pickle them into its engine-core and worker processes (the quantization config
travels inside VllmConfig)."""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, Optional

import torch
from vllm.model_executor.layers.quantization import register_quantization_config
from vllm.model_executor.layers.quantization.base_config import QuantizationConfig
from vllm.model_executor.model_loader import register_model_loader
from vllm.model_executor.model_loader.default_loader import DefaultModelLoader

import ctstream

from . import _amx
from .vllm import EXTRA_CONFIG_KEYS, LOAD_FORMAT, MODES, QUANTIZATION, _dtype_name, _sparse_config, resolve_mode, weights_iterator


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


class CtstreamModelLoader(DefaultModelLoader):
    """vLLM's default loader with ctstream as the tensor source (see ``ctstream.vllm``)."""

    def __init__(self, load_config):
        extra = dict(load_config.model_loader_extra_config or {})
        self.ctstream_options = {k: extra.pop(k) for k in list(extra) if k in EXTRA_CONFIG_KEYS}
        mode = self.ctstream_options.get("mode", "auto")
        if mode not in MODES:
            raise ValueError(f"ctstream: extra config 'mode' must be one of {MODES}, not {mode!r}")
        io = self.ctstream_options.get("io", "mmap")
        if io not in ("mmap", "pread"):
            raise ValueError(f"ctstream: extra config 'io' must be 'mmap' or 'pread', not {io!r}")
        ctstream.parse_budget(self.ctstream_options.get("budget"))  # checked now, not mid-load
        # DefaultModelLoader accepts only its own extra keys, and finds files only for the load
        # formats it knows: it gets a "safetensors" copy of the config.
        super().__init__(dataclasses.replace(load_config, load_format="safetensors", model_loader_extra_config=extra))
        self._mode: Optional[str] = None
        self._dtype: Optional[str] = None

    def load_weights(self, model, model_config) -> None:
        self._mode = resolve_mode(self.ctstream_options.get("mode", "auto"), model_config.quantization)
        self._dtype = _dtype_name(model_config.dtype)
        return super().load_weights(model, model_config)

    def _get_weights_iterator(self, source):
        if self._mode is None:  # get_all_weights() called directly (e.g. in-place reload)
            from vllm.config import get_current_vllm_config

            mc = get_current_vllm_config().model_config
            self._mode = resolve_mode(self.ctstream_options.get("mode", "auto"), mc.quantization)
            self._dtype = _dtype_name(mc.dtype)
        _, files, use_safetensors, _ = self._prepare_weights(
            source.model_or_path, source.subfolder, source.revision, source.fall_back_to_pt,
            source.allow_patterns_overrides)
        if not use_safetensors:
            raise ValueError(f"ctstream: {source.model_or_path} has no *.safetensors weights")
        if getattr(source, "is_unused_weight", None) is not None:
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
            dtype=self._dtype if self._mode == "dense" else None,
            threads=int(self.ctstream_options.get("threads", 0)),
            budget=self.ctstream_options.get("budget"),
            io=self.ctstream_options.get("io", "mmap"),
            local_expert_ids=getattr(self, "local_expert_ids", None),
            lazy=bool(self.ctstream_options.get("lazy", True)))
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
    _registered = True
