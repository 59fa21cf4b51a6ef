"""ctstream.vllm without vLLM: weights_iterator yields (name, torch.Tensor) like vLLM's
safetensors_weights_iterator; packed=True is byte for byte that iterator's output; the mode rule.
The plugin itself is tested on a real vLLM engine: tests/vllm/."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

if os.environ.get("CTSTREAM_REQUIRE_MODULE") == "1":
    import ctstream
    import ctstream.vllm as cv
else:
    ctstream = pytest.importorskip("ctstream", reason="ctstream not installed: pip install .")
    import ctstream.vllm as cv

torch = pytest.importorskip("torch")
from safetensors import safe_open  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CT = ROOT / "tests" / "fixtures" / "ct"
SHARDED = ROOT / "tests" / "fixtures" / "st" / "sharded"
LEFTOVER = (".input_scale", ".input_zero_point", ".input_global_scale", ".output_scale", ".output_zero_point")


def safetensors_weights_iterator(hf_weights_files, use_tqdm_on_load=False):
    """vLLM's safetensors_weights_iterator (lazy strategy), minus tqdm."""
    for st_file in hf_weights_files:
        with safe_open(st_file, framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)


def files_of(d: Path):
    return sorted(str(p) for p in d.glob("*.safetensors"))


def bits(t):
    return t.view(torch.uint8) if t.element_size() == 1 else t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


@pytest.mark.parametrize("case", ["v020_mixed_int4g32_fp8ch_bf16", "v020_nvfp4a16_bf16", "v012_sparse24_fp8_bf16"])
def test_packed_is_safetensors_weights_iterator(case):
    d = CT / case
    want = dict(safetensors_weights_iterator(files_of(d)))
    got = list(cv.weights_iterator(files_of(d), False, packed=True))
    assert len(got) == len(want) and {n for n, _ in got} == set(want)
    for name, t in got:
        assert isinstance(t, torch.Tensor) and t.device.type == "cpu"
        assert t.dtype == want[name].dtype and t.shape == want[name].shape, name
        assert torch.equal(bits(t), bits(want[name])), name


def test_decoded_is_the_library_decompression():
    d = CT / "v020_pack_w4_g64_asym_bf16"
    ref = load_file(str(d / "expected" / "expected.safetensors"))
    got = dict(cv.weights_iterator(files_of(d), use_tqdm_on_load=False))
    assert set(ref) <= set(got) and all(n.endswith(LEFTOVER) for n in set(got) - set(ref))
    for name, want in ref.items():
        assert got[name].dtype == want.dtype and torch.equal(bits(got[name]), bits(want)), name
    f16 = dict(cv.weights_iterator(str(d), dtype=torch.float16))
    ref16 = load_file(str(d / "expected" / "expected_fp16.safetensors"))
    for name, want in ref16.items():
        assert torch.equal(bits(f16[name]), bits(want)), name


def test_shard_subset_and_sources():
    files = files_of(SHARDED)
    assert len(files) == 3
    every = dict(safetensors_weights_iterator(files))
    ours = dict(cv.weights_iterator(files))
    assert set(ours) == set(every)
    first = dict(cv.weights_iterator(files[:1]))  # vLLM may pass a filtered list of shards
    assert set(first) == set(dict(safetensors_weights_iterator(files[:1])))
    assert dict(cv.weights_iterator(SHARDED)).keys() == ours.keys()  # the directory itself
    # files in two directories (a model's subfolders): each directory a checkpoint of its own
    other = CT / "v020_nvfp4a16_bf16"
    both = dict(cv.weights_iterator([files[0], str(other / "model.safetensors")]))
    assert set(both) == set(first) | set(dict(cv.weights_iterator(str(other))))
    with pytest.raises(ValueError, match="empty"):
        list(cv.weights_iterator([]))


def test_files_the_index_does_not_list_are_read_too(tmp_path):
    # vLLM asks for a model's own extra weight files beside an indexed checkpoint (BGE-M3's heads,
    # a joint head): the directory's index does not list them, and they were silently skipped.
    d = tmp_path / "model"
    shutil.copytree(SHARDED, d)
    head = {"joint_head.weight": torch.arange(12, dtype=torch.float32).reshape(3, 4)}
    save_file(head, str(d / "joint_head.safetensors"))
    files = files_of(d) + [str(d / "joint_head.safetensors")]
    got = dict(cv.weights_iterator(files))
    want = dict(safetensors_weights_iterator(files))
    assert set(got) == set(want) and "joint_head.weight" in got
    assert torch.equal(got["joint_head.weight"], head["joint_head.weight"])
    assert set(dict(cv.weights_iterator(files, packed=True))) == set(want)
    # a .pt file: vLLM's own iterator reads it; where vLLM is not importable, an error, never nothing
    torch.save(head, str(d / "head.pt"))
    try:
        import vllm  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match="head.pt"):
            list(cv.weights_iterator(files_of(d) + [str(d / "head.pt")]))


def test_an_expert_parallel_rank_without_experts_reads_none():
    # vLLM's should_skip_weight: None = no expert parallelism; an empty set = a rank holding none
    assert not cv._skip_expert("model.layers.0.mlp.experts.3.down_proj.weight", None)
    assert cv._skip_expert("model.layers.0.mlp.experts.3.down_proj.weight", set())
    assert not cv._skip_expert("model.layers.0.mlp.experts.3.down_proj.weight_scale", set())
    assert not cv._skip_expert("model.layers.0.mlp.experts.3.down_proj.weight", {3})


def test_load_weights_like_vllm():
    """A model's load_weights loop (default_weight_loader: param.data.copy_(w)) over the
    iterator fills every parameter with the library's decompression."""
    d = CT / "v020_int8_w8a8_channel_sym_bf16"
    ref = load_file(str(d / "expected" / "expected_bf16.safetensors"))
    params = {n: torch.nn.Parameter(torch.zeros_like(t), requires_grad=False) for n, t in ref.items()}
    loaded = set()
    for name, w in cv.weights_iterator(files_of(d), use_tqdm_on_load=True):
        if name not in params:
            assert name.endswith(LEFTOVER), name  # activation qparams: no dense parameter
            continue
        params[name].data.copy_(w)
        loaded.add(name)
    assert loaded == set(params)
    for n, p in params.items():
        assert torch.equal(bits(p.data), bits(ref[n])), n


def test_dense_drops_activation_leftovers_stored_keeps_them():
    d = CT / "v020_fp8_tensor_static_bf16"
    dense = dict(cv.weights_iterator(str(d)))
    assert not [n for n in dense if n.endswith(cv.ACTIVATION_LEFTOVERS)]
    stored = dict(cv.weights_iterator(str(d), packed=True))
    assert [n for n in stored if n.endswith(".input_scale")]
    assert set(stored) == set(dict(safetensors_weights_iterator(files_of(d))))


def test_expert_parallel_filter_skips_other_experts_weights_only():
    names = ["model.layers.0.mlp.experts.3.down_proj.weight", "model.layers.0.mlp.experts.3.down_proj.weight_scale",
             "model.layers.0.mlp.experts.4.up_proj.weight_packed", "model.layers.0.mlp.gate.weight"]
    assert [cv._skip_expert(n, {4}) for n in names] == [True, False, False, False]
    assert not any(cv._skip_expert(n, None) for n in names)


def test_mode_follows_the_model_and_refuses_contradictions():
    assert cv.resolve_mode("auto", "compressed-tensors") == "stored"
    assert cv.resolve_mode("auto", None) == "dense"
    assert cv.resolve_mode("auto", "ctstream") == "dense"
    assert cv.resolve_mode("dense", None) == "dense"
    with pytest.raises(ValueError, match="--quantization ctstream"):
        cv.resolve_mode("dense", "compressed-tensors")
    with pytest.raises(ValueError, match="mode 'stored'"):
        cv.resolve_mode("stored", None)
    with pytest.raises(ValueError, match="'gptq'"):
        cv.resolve_mode("auto", "gptq")
    with pytest.raises(ValueError, match="mode must be"):
        cv.resolve_mode("packed", None)
    assert cv._sparse_config({"quant_method": "compressed-tensors",
                              "sparsity_config": {"format": "sparse-bitmask", "targets": ["Linear"]}})
    assert not cv._sparse_config({"quant_method": "compressed-tensors", "sparsity_config": {}})
    assert not cv._sparse_config({"quant_method": "gptq"})


def test_lazy_when_every_tensor_is_lazy_decodes_nothing_ahead(monkeypatch):
    """pread makes every tensor lazy (no plain mmap copies): the eager decode-ahead stream must
    then be asked for nothing (it was asked for names=[], which used to mean every tensor), and
    each lazy tensor still equals the library's decompression."""
    d = CT / "v020_pack_w4_g64_asym_bf16"
    ref = load_file(str(d / "expected" / "expected.safetensors"))
    asked = []
    real = ctstream.Checkpoint.tensors

    def spy(self, dtype=None, names=None):
        asked.append(None if names is None else list(names))
        return real(self, dtype=dtype, names=names)

    monkeypatch.setattr(ctstream.Checkpoint, "tensors", spy)
    from ctstream._lazy import LazyTensor

    got = list(cv.weights_iterator(str(d), io="pread", lazy=True))
    assert got and all(isinstance(t, LazyTensor) for _, t in got)
    assert all(a for a in asked), asked  # never None (all) and never [] for "none"
    for name, t in got:
        if name in ref:
            assert torch.equal(bits(t.materialize()), bits(ref[name])), name


def test_lazy_natural_tensor_copied_into_another_float_dtype_is_the_cast(monkeypatch):
    """The vLLM loader yields natural dtypes (a parameter vLLM keeps in float32 must get float32
    values); a LazyTensor copied into a parameter of another floating dtype decodes straight as
    that dtype: the same bits as the natural values cast by torch, whole or narrowed, and no
    copy is materialized at the natural dtype."""
    from ctstream._lazy import LazyTensor

    outs = []
    real = LazyTensor.materialize

    def spy(self, out=None, dtype=None):
        outs.append(out)
        return real(self, out=out, dtype=dtype)

    monkeypatch.setattr(LazyTensor, "materialize", spy)
    d = CT / "v020_pack_w4_g64_asym_bf16"
    ref = load_file(str(d / "expected" / "expected.safetensors"))
    n = 0
    for name, t in cv.weights_iterator(str(d), lazy=True):
        if not isinstance(t, LazyTensor) or name not in ref:
            continue
        n += 1
        for dt in (torch.float32, torch.float16):
            dst = torch.empty(t.shape, dtype=dt)
            dst.copy_(t)
            assert outs[-1] is dst, "decoded into the parameter itself"
            assert torch.equal(bits(dst), bits(ref[name].to(dt))), (name, dt)
            rows = t.shape[0] // 2
            part = torch.empty((rows, *t.shape[1:]), dtype=dt)
            part.copy_(t.narrow(0, 0, rows))
            assert torch.equal(bits(part), bits(ref[name][:rows].to(dt))), (name, dt, "narrowed")
    assert n > 0
