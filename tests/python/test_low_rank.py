"""Low-rank checkpoints against the real ptdeco (0.5.0).

Read: a model decomposed by ptdeco's own machinery (falor.decompose_in_place for its Linear and
1x1 conv layers; a k x k conv through ptdeco's get_module_config / apply_decompose_config_in_place)
saved as safetensors + decompose_config.json reads back through ctstream as the ORIGINAL
architecture: the same keys and shapes as the undecomposed model (load_state_dict(strict=True)
accepts them), `m.weight` = `m.1.weight @ m.0.weight` within the stated tolerance, everything
else bit-exact; the model built from it computes what the decomposed model computes.

Tolerance of a product (ctstream: f32 GEMM, any summation order) against the exact product
computed in float64 by torch: |W - ref| <= 2 r u (|B| @ |A|) elementwise, u = 2^-24 (the
standard bound on a length-r dot product, Higham 3.1), plus half an ulp of the output dtype
(absolute below its normal range).

Write: `ctstream compress --format low-rank` output loads in ptdeco (apply_decompose_config_in_place,
then load_state_dict(strict=True)) and its products are the optimal rank-R approximation
(Eckart-Young: ||W - BA||_F equals the norm of the dropped singular values, from torch.linalg.svd).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ptdeco = pytest.importorskip("ptdeco")
import ptdeco.falor  # noqa: E402
import ptdeco.utils  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import ctstream  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CT = os.environ.get("CTSTREAM", str(ROOT / "build" / "bin" / "ctstream"))
U32 = 2.0 ** -24


# The model, its data and its decomposition by ptdeco: the same as the committed fixtures'
# (tests/fixtures/gen/gen_low_rank.py, which tests/unit/test_low_rank.cpp reads).
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "gen"))
from gen_low_rank import Net, data as _data, decompose  # noqa: E402


@pytest.fixture(scope="module")
def decomposed():
    """(original model, decomposed model, decompose config), all by ptdeco."""
    orig, model, cfg = decompose()
    assert {"stem", "fc1", "fc2", "head"} <= set(cfg), cfg.keys()  # falor takes Linear + 1x1 conv
    return orig, model, cfg


def _save(model, cfg, d: Path, dtype=None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    sd = {k: (v.to(dtype) if dtype else v).contiguous() for k, v in model.state_dict().items()}
    save_file(sd, str(d / "model.safetensors"))
    (d / "decompose_config.json").write_text(json.dumps(cfg))
    return d


def _factors(sd, module):
    a, b = sd[f"{module}.0.weight"], sd[f"{module}.1.weight"]
    return a.reshape(a.shape[0], -1), b.reshape(b.shape[0], -1)


def _check_product(got, a, b, shape, out_dtype):
    """got (the decoded weight) against the exact product of the factors, within the bound above."""
    a64, b64 = a.double(), b.double()
    ref = (b64 @ a64).reshape(shape)
    bound = 2 * a.shape[0] * U32 * (b64.abs() @ a64.abs()).reshape(shape)
    rel, sub = {torch.float32: (0.0, 0.0), torch.bfloat16: (2.0 ** -8, 2.0 ** -134),
                torch.float16: (2.0 ** -11, 2.0 ** -25)}[out_dtype]  # half an ulp; subnormals: absolute
    half_ulp = rel * ref.abs() + sub
    err = (got.double() - ref).abs()
    assert got.dtype == out_dtype and list(got.shape) == list(shape)
    assert bool((err <= bound + half_ulp + 1e-30).all()), float((err - bound - half_ulp).max())


def test_original_architecture(decomposed, tmp_path):
    orig, model, cfg = decomposed
    d = _save(model, cfg, tmp_path / "lr")
    stored = load_file(str(d / "model.safetensors"))
    with ctstream.open(d) as ck:
        assert sorted(ck.keys()) == sorted(orig.state_dict().keys())
        got = {k: ck.get(k) for k in ck.keys()}
        for k in ck.keys():
            assert list(ck.info(k).shape) == list(orig.state_dict()[k].shape), k
            assert (ck.info(k).format == "low-rank") == (k[: -len(".weight")] in cfg), k
    for m in cfg:
        a, b = _factors(stored, m)
        _check_product(got[f"{m}.weight"], a, b, orig.state_dict()[f"{m}.weight"].shape, torch.float32)
    for k, v in got.items():  # everything that is not a product: bit-exact
        if not any(k == f"{m}.weight" for m in cfg):
            src = stored[k] if k in stored else stored[k.rsplit(".", 1)[0] + ".1.bias"]
            assert torch.equal(v, src), k
    rebuilt = Net().eval()
    rebuilt.load_state_dict(got, strict=True)
    x = next(_data())
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x), rtol=1e-4, atol=1e-5)


def test_info_and_stored_view(decomposed, tmp_path):
    _, model, cfg = decomposed
    d = _save(model, cfg, tmp_path / "lr")
    stored = load_file(str(d / "model.safetensors"))
    with ctstream.open(d) as ck:
        info = ck.info("conv.weight")
        assert info.format == "low-rank" and list(info.shape) == [32, 24, 3, 3]
    with ctstream.open(d, low_rank="stored") as ck:  # the factors under their own names, as stored
        assert sorted(ck.keys()) == sorted(stored)
        for k in ck.keys():
            assert torch.equal(ck.get(k), stored[k]), k
    with pytest.raises(ctstream.InvalidArgumentError):
        ctstream.open(d, low_rank="factors")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_factors_and_output_dtypes(decomposed, tmp_path, dtype):
    _, model, cfg = decomposed
    d = _save(model, cfg, tmp_path / "lr", dtype=dtype)
    stored = load_file(str(d / "model.safetensors"))
    with ctstream.open(d) as ck:
        for m in cfg:
            a, b = _factors(stored, m)
            shape = ck.info(f"{m}.weight").shape
            _check_product(ck.get(f"{m}.weight"), a, b, shape, dtype)  # natural dtype: the factors'
            _check_product(ck.get(f"{m}.weight", dtype=torch.float32), a, b, shape, torch.float32)


def test_slices_match_the_full_product(decomposed, tmp_path):
    _, model, cfg = decomposed
    d = _save(model, cfg, tmp_path / "lr")
    with ctstream.open(d) as ck:
        full = {k: ck.get(k, dtype=torch.bfloat16) for k in ("fc1.weight", "conv.weight")}
        sl = ck.get_slice("fc1.weight", dtype=torch.bfloat16)
        assert torch.equal(sl[5:37], full["fc1.weight"][5:37])  # rows: only those rows of B multiplied
        assert torch.equal(sl[:, 10:20], full["fc1.weight"][:, 10:20])
        cs = ck.get_slice("conv.weight", dtype=torch.bfloat16)
        assert torch.equal(cs[3:9], full["conv.weight"][3:9])
        assert torch.equal(cs[:, 4:11], full["conv.weight"][:, 4:11])
        assert torch.equal(cs[:, :, 1:3], full["conv.weight"][:, :, 1:3])
        out = torch.empty(32, 7, 3, 3, dtype=torch.bfloat16)
        cs.get((slice(None), slice(4, 11)), out=out)
        assert torch.equal(out, full["conv.weight"][:, 4:11])


def test_compressed_factors(decomposed, tmp_path):
    """Factors quantized to int8 by `ctstream compress` (the low-rank input is read as stored and
    its decompose_config.json copied): the reader decodes them with their codec, then multiplies."""
    _, model, cfg = decomposed
    d = _save(model, cfg, tmp_path / "lr")
    q = tmp_path / "q8"
    subprocess.run([CT, "compress", str(d), str(q), "--format", "int-quantized", "--weight-only",
                    "--targets", r"re:.*\.[01]$", "--quiet"], check=True)
    assert (q / "decompose_config.json").is_file()
    with ctstream.open(q, low_rank="stored") as ck:
        assert ck.info("fc1.0.weight").format == "int-quantized"
        deq = {k: ck.get(k, dtype=torch.float32) for k in ck.keys()}
    with ctstream.open(q) as ck:
        assert ck.info("fc1.weight").format == "low-rank"
        for m in cfg:
            a, b = _factors(deq, m)
            _check_product(ck.get(f"{m}.weight", dtype=torch.float32), a, b, ck.info(f"{m}.weight").shape,
                           torch.float32)
    # and decompress gives the original architecture as plain safetensors
    out = tmp_path / "dense.safetensors"
    subprocess.run([CT, "decompress", str(q), str(out), "--quiet"], check=True)
    assert sorted(load_file(str(out))) == sorted(Net().state_dict())


@pytest.mark.parametrize("mutate, kind", [
    (lambda c, sd: c["fc1"]["modules"]["0"].__setitem__("out_features", 9), "invalid_config"),
    (lambda c, sd: sd.pop("fc1.0.weight"), "not_found"),
    (lambda c, sd: sd.__setitem__("fc1.0.weight", torch.zeros(7, 65)), "corrupt_tensor"),
    (lambda c, sd: c["fc1"]["modules"]["1"].__setitem__("bias", False), "invalid_config"),
    (lambda c, sd: c.__setitem__("fc1", {"type": "Linear", "in_features": 64, "out_features": 96,
                                         "bias": True}), "unsupported"),
    (lambda c, sd: c["conv"]["modules"]["1"].__setitem__("kernel_size", [3, 3]), "unsupported"),
    (lambda c, sd: c["conv"]["modules"]["0"].__setitem__("groups", 2), "unsupported"),
    (lambda c, sd: c["fc1"]["modules"]["0"].__setitem__("in_features", 1 << 40), "invalid_config"),
    (lambda c, sd: c["fc1"].__setitem__("modules", {"0": c["fc1"]["modules"]["0"]}), "unsupported"),
    (lambda c, sd: sd.__setitem__("fc1.weight", torch.zeros(96, 64)), "invalid_config"),
    (lambda c, sd: sd.__setitem__("fc1.0.weight", torch.zeros(sd["fc1.0.weight"].shape, dtype=torch.int32)),
     "unsupported"),
    (lambda c, sd: c.__setitem__("x", json.loads("[" * 200 + "]" * 200)), "invalid_config"),
])
def test_bad_decompose_configs(decomposed, tmp_path, mutate, kind):
    _, model, cfg = decomposed
    c = json.loads(json.dumps(cfg))
    sd = {k: v.clone().contiguous() for k, v in model.state_dict().items()}
    mutate(c, sd)
    d = tmp_path / "bad"
    d.mkdir()
    save_file({k: v.contiguous() for k, v in sd.items()}, str(d / "model.safetensors"))
    (d / "decompose_config.json").write_text(json.dumps(c))
    with pytest.raises(ctstream.Error) as e:
        ctstream.open(d)
    assert e.value.kind == kind, str(e.value)
    assert "decompose_config.json" in e.value.file
    with ctstream.open(d, low_rank="stored") as ck:  # as stored, the config is not consulted
        assert len(ck.keys()) == len(sd)


# ------------------------------------------------------------------------------------ writer

def _compress(src: Path, out: Path, *args) -> dict:
    rep = out.with_suffix(".report.json")
    subprocess.run([CT, "compress", str(src), str(out), "--format", "low-rank", *args, "--report", str(rep),
                    "--quiet"], check=True)
    return json.loads(rep.read_text())


@pytest.fixture(scope="module")
def dense_net(tmp_path_factory):
    torch.manual_seed(3)
    net = Net().eval()
    d = tmp_path_factory.mktemp("dense")
    save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(d / "model.safetensors"))
    return net, d


@pytest.mark.parametrize("rank", [4, 16])
def test_writer_output_loads_in_ptdeco_and_is_optimal(dense_net, tmp_path, rank):
    net, d = dense_net
    out = tmp_path / "lr"
    rep = _compress(d, out, "--rank", str(rank))
    cfg = json.loads((out / "decompose_config.json").read_text())
    sd = load_file(str(out / "model.safetensors"))
    model = Net().eval()
    ptdeco.utils.apply_decompose_config_in_place(model, cfg)
    model.load_state_dict(sd, strict=True)  # ptdeco's own rebuild accepts ctstream's output
    by_name = {t["name"]: t for t in rep["tensors"]}
    linear = [m for m in ("fc1", "fc2", "head") if rank < min(net.state_dict()[f"{m}.weight"].shape)]
    for m in ("fc1", "fc2", "head"):
        w = net.state_dict()[f"{m}.weight"].double()
        useful = (w.shape[0] * w.shape[1] - 1) // (w.shape[0] + w.shape[1])
        if rank > useful:  # factors would not be smaller: left dense, as ptdeco leaves it
            assert m not in cfg and f"{m}.weight" in sd
            continue
        assert m in cfg
        a, b = _factors(sd, m)
        assert a.shape == (rank, w.shape[1]) and b.shape == (w.shape[0], rank)
        s = torch.linalg.svdvals(w)
        optimal = float(s[rank:].square().sum().sqrt())
        got = float(torch.linalg.matrix_norm(w - b.double() @ a.double()))
        assert got == pytest.approx(optimal, rel=1e-4, abs=1e-6 * float(s[0]))
        t = by_name[f"{m}.weight"]
        assert t["format"] == "low-rank" and t["rank"] == rank
        assert t["output_bytes"] == 4 * rank * (w.shape[0] + w.shape[1])
        assert t["snr_db"] == pytest.approx(10 * torch.log10(w.square().sum() / optimal ** 2).item(), abs=0.05)
    assert linear  # something was decomposed
    # conv weights (4-D) are not targets by default: copied as they are
    assert torch.equal(sd["conv.weight"], net.state_dict()["conv.weight"])
    # ctstream reads its own output back as the original architecture
    with ctstream.open(out) as ck:
        assert sorted(ck.keys()) == sorted(net.state_dict())
        Net().load_state_dict({k: ck.get(k) for k in ck.keys()}, strict=True)


def test_writer_energy(dense_net, tmp_path):
    net, d = dense_net
    out = tmp_path / "lr"
    rep = _compress(d, out, "--energy", "0.8")
    cfg = json.loads((out / "decompose_config.json").read_text())
    for t in rep["tensors"]:
        if t["format"] != "low-rank":
            continue
        m = t["name"][: -len(".weight")]
        w = net.state_dict()[t["name"]].double()
        s2 = torch.linalg.svdvals(w).square()
        frac = torch.cumsum(s2, 0) / s2.sum()
        want = int((frac < 0.8 - 1e-6).sum()) + 1
        cap = (w.shape[0] * w.shape[1] - 1) // (w.shape[0] + w.shape[1])
        assert t["rank"] in (min(want, cap), min(want + 1, cap), min(want - 1, cap)), (t["rank"], want, cap)
        assert cfg[m]["modules"]["0"]["out_features"] == t["rank"]


def test_writer_refuses(dense_net, tmp_path):
    _, d = dense_net
    for args in (["--format", "low-rank"], ["--format", "low-rank", "--rank", "4", "--energy", "0.5"],
                 ["--format", "low-rank", "--energy", "1.5"], ["--format", "int-quantized", "--rank", "4"]):
        r = subprocess.run([CT, "compress", str(d), str(tmp_path / "x"), *args], capture_output=True, text=True)
        assert r.returncode != 0 and not (tmp_path / "x").exists(), args
    # the reason given is the value's own (both said "give exactly one of rank and energy")
    for args, why in ((["--energy", "nan"], "energy must be a fraction in (0, 1]"),
                      (["--energy", "-0.5"], "energy must be a fraction in (0, 1]"),
                      (["--rank", "0"], "--rank")):
        r = subprocess.run([CT, "compress", str(d), str(tmp_path / "x"), "--format", "low-rank", *args],
                           capture_output=True, text=True)
        assert r.returncode != 0 and why in r.stderr and not (tmp_path / "x").exists(), (args, r.stderr)
    lr = tmp_path / "lr"
    _compress(d, lr, "--rank", "4")
    r = subprocess.run([CT, "compress", str(lr), str(tmp_path / "y"), "--format", "low-rank", "--rank", "2"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "already low-rank" in r.stderr


class SmallCNN(torch.nn.Module):
    """Convs whose stride / padding / dilation are not in the weights: the writer must take them
    from the module for ptdeco's config."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 32, 3, stride=2, padding=1)
        self.c2 = torch.nn.Conv2d(32, 48, 3, padding=2, dilation=2, bias=False)
        self.c3 = torch.nn.Conv2d(48, 48, 3, padding=1, groups=4)  # grouped: not a two-factor product
        self.fc = torch.nn.Linear(48, 40)

    def forward(self, x):
        y = torch.relu(self.c3(torch.relu(self.c2(torch.relu(self.c1(x))))))
        return self.fc(y.mean(dim=(2, 3)))


@pytest.mark.parametrize("rank", [6, 12])
def test_save_model_convs_load_in_ptdeco(tmp_path, rank):
    torch.manual_seed(5)
    net = SmallCNN().eval()
    out = tmp_path / "cnn"
    rep = ctstream.save_model(net, out, format="low-rank", rank=rank, targets=["Linear", "Conv2d"])
    cfg = json.loads((out / "decompose_config.json").read_text())
    assert set(cfg) == {"c1", "c2", "fc"}  # c3 is grouped: stored as is
    assert cfg["c1"]["modules"]["0"]["stride"] == [2, 2] and cfg["c2"]["modules"]["0"]["dilation"] == [2, 2]
    sd = load_file(str(out / "model.safetensors"))
    deco = SmallCNN().eval()
    ptdeco.utils.apply_decompose_config_in_place(deco, cfg)
    deco.load_state_dict(sd, strict=True)
    for m in ("c1", "c2", "fc"):
        w = net.state_dict()[f"{m}.weight"].double()
        w2 = w.reshape(w.shape[0], -1)
        s = torch.linalg.svdvals(w2)
        a, b = _factors(sd, m)
        got = float(torch.linalg.matrix_norm(w2 - b.double() @ a.double()))
        assert got == pytest.approx(float(s[rank:].square().sum().sqrt()), rel=1e-4, abs=1e-6 * float(s[0]))
        assert {t["name"]: t for t in rep["tensors"]}[f"{m}.weight"]["rank"] == rank
    # ctstream's original view of its own output, loaded into the original architecture,
    # computes what ptdeco's decomposed model computes
    with ctstream.open(out) as ck:
        rebuilt = SmallCNN().eval()
        rebuilt.load_state_dict({k: ck.get(k) for k in ck.keys()}, strict=True)
    x = torch.randn(2, 3, 17, 17)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), deco(x), rtol=1e-4, atol=1e-5)


def test_safe_open(decomposed, tmp_path):
    """ctstream.safe_open of a low-rank file: decoded (original architecture) by default, and with
    packed=True exactly what safetensors' own safe_open sees."""
    import safetensors

    orig, model, cfg = decomposed
    d = _save(model, cfg, tmp_path / "lr")
    f = d / "model.safetensors"
    with ctstream.safe_open(f, framework="pt") as s:
        assert sorted(s.keys()) == sorted(orig.state_dict())
    with ctstream.safe_open(f, framework="pt", packed=True) as s, safetensors.safe_open(str(f), framework="pt") as r:
        assert sorted(s.keys()) == sorted(r.keys())
        for k in r.keys():
            assert torch.equal(s.get_tensor(k), r.get_tensor(k)), k


def test_budgeted_iterator_yields_the_products(decomposed, tmp_path):
    """tensors() (decode-ahead on workers within the budget) yields what get() gives, in bf16."""
    orig, model, cfg = decomposed
    d = _save(model, cfg, tmp_path / "lr")
    with ctstream.open(d, budget="64KiB", threads=2) as ck:
        want = {k: ck.get(k, dtype=torch.bfloat16) for k in ck.keys()}
        got = dict(ck.tensors(dtype=torch.bfloat16))
    assert sorted(got) == sorted(orig.state_dict())
    for k, v in got.items():
        assert torch.equal(v, want[k]), k
