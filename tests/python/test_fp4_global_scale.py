"""FP4 weights and their global scale: compressed-tensors divides the scales by weight_global_scale
under strategy tensor_group only (lifecycle/initialize.py registers the parameter for that strategy
alone; nvfp4/base.py decompress reads the module's own parameters). Hand-made configs on stored parts
of the library's layout: which candidate group applies decides the division, so a module whose
class is not known is refused where the candidates disagree, never decoded by the one that fits a
file that lost its global scale."""
from __future__ import annotations

import json

import pytest

ctstream = pytest.importorskip("ctstream")
torch = pytest.importorskip("torch")
from safetensors.torch import save_file  # noqa: E402

P = "model.layers.0.mlp.down_proj"


def fp4(strategy, gs=16):
    return {"num_bits": 4, "type": "float", "strategy": strategy, "group_size": gs, "symmetric": True, "dynamic": False}


def make(d, groups, tensors, fmt):
    d.mkdir()
    cfg = {"architectures": ["X"], "quantization_config": {
        "quant_method": "compressed-tensors", "format": fmt, "config_groups": groups, "version": "0.20.0",
        "quantization_status": "compressed", "ignore": []}}
    (d / "config.json").write_text(json.dumps(cfg))
    save_file(tensors, str(d / "model.safetensors"))
    return d


@pytest.fixture(scope="module")
def parts():
    g = torch.Generator().manual_seed(0)
    packed = torch.randint(0, 256, (32, 16), dtype=torch.uint8, generator=g)
    scale = (torch.rand(32, 2, generator=g) * 4 + 0.5).to(torch.float8_e4m3fn)
    mx_scale = torch.randint(120, 130, (32, 1), dtype=torch.uint8, generator=g)
    return packed, scale, mx_scale, torch.tensor([2.0], dtype=torch.float32)


def test_class_candidates_that_disagree_on_the_global_scale_are_refused(tmp_path, parts):
    packed, scale, _, gs = parts
    nv = "nvfp4-pack-quantized"
    two = {"group_0": {"targets": ["Linear"], "weights": fp4("tensor_group"), "format": nv},
           "group_1": {"targets": ["Embedding"], "weights": fp4("group"), "format": nv}}
    lost = make(tmp_path / "lost", two, {P + ".weight_packed": packed, P + ".weight_scale": scale}, nv)
    whole = make(tmp_path / "whole", two, {P + ".weight_packed": packed, P + ".weight_scale": scale,
                                           P + ".weight_global_scale": gs}, nv)
    # the class unknown: a Linear that lost its global scale must not decode as the Embedding group
    for d in (lost, whole):
        with pytest.raises(ctstream.Error) as e:
            ctstream.open(str(d))
        assert e.value.kind == "unsupported" and "module classes" in str(e.value)
    linear, embedding = {P: ["Linear", "Module"]}, {P: ["Embedding", "Module"]}
    with pytest.raises(ctstream.Error, match="weight_global_scale"):
        ctstream.open(str(lost), module_classes=linear)
    no_division = ctstream.open(str(lost), module_classes=embedding).get(P + ".weight")
    divided = ctstream.open(str(whole), module_classes=linear).get(P + ".weight")
    assert torch.equal(divided.float(), (no_division.float() / 2).to(divided.dtype).float())  # / 2.0: exact
    # under "group" a stored global scale is not the module's: left a plain tensor, no division
    as_group = ctstream.open(str(whole), module_classes=embedding)
    assert torch.equal(as_group.get(P + ".weight"), no_division)
    assert torch.equal(as_group.get(P + ".weight_global_scale"), gs)


def test_mxfp4_divides_by_a_global_scale_under_tensor_group_only(tmp_path, parts):
    packed, _, mx_scale, gs = parts
    mx = "mxfp4-pack-quantized"
    base = {P + ".weight_packed": packed, P + ".weight_scale": mx_scale}
    plain = ctstream.open(str(make(tmp_path / "plain", {"group_0": {"targets": ["Linear"], "weights": fp4("group", 32),
                                                                     "format": mx}}, base, mx))).get(P + ".weight")
    grp = ctstream.open(str(make(tmp_path / "grp", {"group_0": {"targets": ["Linear"], "weights": fp4("group", 32),
                                                                 "format": mx}}, {**base, P + ".weight_global_scale": gs},
                                 mx)))
    assert torch.equal(grp.get(P + ".weight"), plain)
    tg = ctstream.open(str(make(tmp_path / "tg", {"group_0": {"targets": ["Linear"], "weights": fp4("tensor_group", 32),
                                                               "format": mx}}, {**base, P + ".weight_global_scale": gs},
                                mx)))
    assert torch.equal(tg.get(P + ".weight").float(), (plain.float() / 2).to(plain.dtype).float())
    with pytest.raises(ctstream.Error, match="weight_global_scale"):
        ctstream.open(str(make(tmp_path / "tg_lost", {"group_0": {"targets": ["Linear"],
                                                                  "weights": fp4("tensor_group", 32), "format": mx}},
                               base, mx)))
