"""Layouts at the edges of the format, decoded by ctstream and by compressed-tensors 0.20 itself.

Each case is a small checkpoint whose parts are individually plausible; ctstream must give exactly
the library's decompression (``BaseCompressor`` of the format, the model-free path), or refuse with
a ctstream error where the library refuses or where the file does not tell which of two layouts it
uses. Found by a red-team round: each of these once decoded silently to other values.

Run: .venv/bin/python -m pytest tests/python/test_reference_edges.py
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("compressed_tensors")
ctstream = pytest.importorskip("ctstream")
from safetensors.torch import save_file  # noqa: E402

M = "model.layers.0.mlp.down_proj"


def qconfig(weights: dict, fmt: str, version: str | None = "0.20.0") -> dict:
    q = {"config_groups": {"group_0": {"targets": ["Linear"], "weights": weights, "format": fmt,
                                       "input_activations": None, "output_activations": None}},
         "format": fmt, "ignore": ["lm_head"], "quant_method": "compressed-tensors",
         "quantization_status": "compressed"}
    if version is not None:
        q["version"] = version
    return {"quantization_config": q, "torch_dtype": "bfloat16"}


def write(d: Path, cfg: dict, parts: dict) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    save_file({f"{M}.{k}": v.contiguous() for k, v in parts.items()}, str(d / "model.safetensors"))
    return d


def library(fmt: str, weights: dict, parts: dict) -> torch.Tensor:
    from compressed_tensors.compressors import BaseCompressor
    from compressed_tensors.quantization import QuantizationScheme
    scheme = QuantizationScheme.model_validate({"targets": ["Linear"], "weights": weights, "format": fmt})
    return BaseCompressor.get_value_from_registry(fmt).decompress(dict(parts), scheme)["weight"]


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view({1: torch.int8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def int8_codes(R: int, C: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-128, 128, (R, C), generator=g, dtype=torch.int8)


def scales(shape, seed: int, dtype=torch.bfloat16) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(shape, generator=g) * 0.02 + 0.001).to(dtype)


CASES = {
    # compressed-tensors' naive decompress never reads a global scale: it stays a plain tensor
    "naive_int8_with_global_scale": (
        dict(num_bits=8, type="int", strategy="channel", symmetric=True), "int-quantized",
        lambda: {"weight": int8_codes(16, 32, 1), "weight_scale": scales((16, 1), 2),
                 "weight_global_scale": torch.tensor([4.0])}),
    # a float zero point is rounded to the scale dtype, and so is x - zp (forward.py _dequantize)
    "int8_group_bf16_fractional_zp": (
        dict(num_bits=8, type="int", strategy="group", group_size=16, symmetric=False), "int-quantized",
        lambda: {"weight": int8_codes(16, 32, 3), "weight_scale": scales((16, 2), 4),
                 "weight_zero_point": (torch.rand(16, 2, generator=torch.Generator().manual_seed(5)) * 50 - 25
                                       ).to(torch.bfloat16)}),
    "int8_channel_f32_fractional_zp": (
        dict(num_bits=8, type="int", strategy="channel", symmetric=False), "int-quantized",
        lambda: {"weight": int8_codes(16, 32, 6), "weight_scale": scales((16, 1), 7),
                 "weight_zero_point": torch.rand(16, 1, generator=torch.Generator().manual_seed(8)) * 40 - 20}),
    "int8_channel_bf16_integer_zp_inexact_difference": (  # 127 - (-200) = 327 is not a bf16 value
        dict(num_bits=8, type="int", strategy="channel", symmetric=False), "int-quantized",
        lambda: {"weight": int8_codes(16, 32, 9), "weight_scale": scales((16, 1), 10),
                 "weight_zero_point": torch.full((16, 1), -200.0, dtype=torch.bfloat16)}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_decodes_as_the_library(tmp_path: Path, name: str) -> None:
    weights, fmt, make = CASES[name]
    parts = make()
    want = library(fmt, weights, parts)
    d = write(tmp_path / name, qconfig(weights, fmt), parts)
    with ctstream.open(d, framework="pt") as ck:
        got = ck.get(f"{M}.weight")
        assert got.dtype == want.dtype and got.shape == want.shape
        assert torch.equal(bits(got), bits(want)), f"{int((got != want).sum())} elements differ"
        # what the library leaves alone stays a plain tensor
        for k in parts:
            if k == "weight_global_scale":
                assert torch.equal(ck.get(f"{M}.{k}"), parts[k])


def _refused(tmp_path: Path, name: str, cfg: dict, parts: dict, words: str) -> None:
    d = write(tmp_path / name, cfg, parts)
    with pytest.raises(ctstream.Error) as e:
        with ctstream.open(d, framework="pt") as ck:
            ck.get(f"{M}.weight")
    assert words in str(e.value) and M in str(e.value)


def test_channel_scale_stored_1d_is_refused(tmp_path: Path) -> None:
    # torch broadcasts a [R] scale along the last dim (per column), the format means per row
    w = dict(num_bits=8, type="int", strategy="channel", symmetric=True)
    _refused(tmp_path, "c1d", qconfig(w, "int-quantized"),
             {"weight": int8_codes(32, 32, 11), "weight_scale": scales((32,), 12)}, "must be 2-D")


def test_nvfp4_0d_global_scale_is_refused(tmp_path: Path) -> None:
    # a 0-d f32 divisor keeps torch's bf16 quotient in bf16; the library writes [1]
    w = dict(num_bits=4, type="float", strategy="tensor_group", group_size=16, symmetric=True)
    g = torch.Generator().manual_seed(13)
    parts = {"weight_packed": torch.randint(0, 256, (8, 32), generator=g, dtype=torch.uint8),
             "weight_scale": (torch.rand(8, 4, generator=g) + 0.5).to(torch.float8_e4m3fn),
             "weight_global_scale": torch.tensor(3.0)}
    _refused(tmp_path, "nv0d", qconfig(w, "nvfp4-pack-quantized"), parts, "shape [1]")


def test_asymmetric_pack_without_zero_point_is_refused(tmp_path: Path) -> None:
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32  # noqa: F401
    w = dict(num_bits=4, type="int", strategy="group", group_size=16, symmetric=False)
    parts = {"weight_packed": torch.zeros(16, 8, dtype=torch.int32), "weight_scale": scales((16, 4), 14),
             "weight_shape": torch.tensor([16, 64])}
    with pytest.raises(Exception):  # the library refuses it too
        library("pack-quantized", w, parts)
    _refused(tmp_path, "asym", qconfig(w, "pack-quantized"), parts, "no weight_zero_point")


@pytest.mark.parametrize("strategy", ["channel", "tensor", "block", "token"])
def test_group_size_on_another_strategy_is_refused_as_the_library_does(tmp_path: Path, strategy: str) -> None:
    # quant_args.py validate_model_after (0.12 and 0.20): "group_size requires strategy to be set
    # to 'group'"; the config names two layouts, and [R, C/128] scales would fit the group one
    from compressed_tensors.quantization import QuantizationArgs
    w = dict(num_bits=8, type="int", strategy=strategy, group_size=32, symmetric=True)
    if strategy == "block":
        w["block_structure"] = [16, 16]
    if strategy == "token":
        w["dynamic"] = True
    with pytest.raises(ValueError, match="group_size requires strategy"):
        QuantizationArgs.model_validate(w)
    d = write(tmp_path / strategy, qconfig(w, "int-quantized"),
              {"weight": int8_codes(16, 64, 15), "weight_scale": scales((16, 2), 16)})
    with pytest.raises(ctstream.Error, match=f"group_size 32 requires strategy 'group' or 'tensor_group', not '{strategy}'") as e:
        ctstream.open(d)
    assert e.value.kind == "invalid_config" and e.value.file.endswith("config.json")


@pytest.mark.parametrize("version", ["0.17.2.dev12+g66e631f6", "0.17.2a20260701", None])
def test_odd_width_layout_the_version_does_not_tell_is_refused(tmp_path: Path, version) -> None:
    # 3-bit codes, 20 columns: 2 int32 words in both layouts (0.17: 10 codes per word; 0.18+: 60 bits
    # across the words), so only the version can tell, and these do not.
    w = dict(num_bits=3, type="int", strategy="channel", symmetric=True)
    parts = {"weight_packed": torch.zeros(4, 2, dtype=torch.int32), "weight_scale": scales((4, 1), 15),
             "weight_shape": torch.tensor([4, 20])}
    _refused(tmp_path, "v", qconfig(w, "pack-quantized", version), parts, "layout of 3-bit codes")


@pytest.mark.parametrize("version", ["0.18.0", "v0.20.0", "1.0"])
def test_odd_width_dense_layout_from_the_version(tmp_path: Path, version: str) -> None:
    from compressed_tensors.compressors.pack_quantized.helpers import pack_to_int32
    w = dict(num_bits=3, type="int", strategy="channel", symmetric=True)
    g = torch.Generator().manual_seed(16)
    codes = torch.randint(-4, 4, (4, 20), generator=g, dtype=torch.int8)
    parts = {"weight_packed": pack_to_int32(codes, 3), "weight_scale": scales((4, 1), 17),
             "weight_shape": torch.tensor([4, 20])}
    want = library("pack-quantized", w, parts)
    d = write(tmp_path / "v", qconfig(w, "pack-quantized", version), parts)
    with ctstream.open(d, framework="pt") as ck:
        assert torch.equal(bits(ck.get(f"{M}.weight")), bits(want))
