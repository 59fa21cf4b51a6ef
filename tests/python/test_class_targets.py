"""Config groups that target module classes, on checkpoints the real library wrote through a
transformers model (tests/fixtures/gen/gen_class_targets.py): ctstream.open / safe_open / load_model
give exactly the library's model-path decompression (expected/expected.safetensors). Where the
stored parts cannot tell the groups apart (fp8 blocks [64, 128] for Embedding, [96, 128] for Linear),
the module classes come from the caller (a dict, a torch model) or, by default, from config.json's
architecture on the meta device with transformers; module_classes=False refuses, naming the groups."""
import json
import os

import pytest

ctstream = pytest.importorskip("ctstream")
torch = pytest.importorskip("torch")
safetensors = pytest.importorskip("safetensors")
from safetensors.torch import load_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, "tests", "fixtures", "ct_class")
NAMES = ["embedding_w8_linear_w4", "attention_linear_w4", "fp8_blocks_64_96"]


def expected(name):
    return load_file(os.path.join(CASES, name, "expected", "expected.safetensors"))


def same(got, want):
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_open_decodes_as_the_library_model_path(name, io):
    pytest.importorskip("transformers")
    want = expected(name)
    with ctstream.open(os.path.join(CASES, name), io=io, framework="pt") as ck:
        got = dict(ck.tensors())
    assert sorted(got) == sorted(want)
    for k in want:
        assert same(got[k], want[k]), k


@pytest.mark.parametrize("name", NAMES)
def test_explicit_classes_dict(name):
    with open(os.path.join(CASES, name, "module_classes.json")) as f:
        classes = json.load(f)
    want = expected(name)
    with ctstream.open(os.path.join(CASES, name), framework="pt", module_classes=classes) as ck:
        for k, v in ck.tensors():
            assert same(v, want[k]), k


def test_undecidable_module_is_refused_without_classes():
    with pytest.raises(ctstream.Error) as e:
        ctstream.open(os.path.join(CASES, "fp8_blocks_64_96"), module_classes=False)
    assert e.value.kind == "unsupported"
    assert "group_0 (Embedding)" in str(e.value) and "group_1 (Linear)" in str(e.value)
    # the groups the parts tell apart need nothing
    ctstream.open(os.path.join(CASES, "embedding_w8_linear_w4"), module_classes=False).close()


def test_load_model_passes_the_models_own_classes():
    transformers = pytest.importorskip("transformers")
    d = os.path.join(CASES, "fp8_blocks_64_96")
    cfg = transformers.AutoConfig.from_pretrained(d)
    model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    missing, unexpected = ctstream.load_model(model, d)
    assert not missing and not unexpected
    sd = model.state_dict()
    for k, v in expected("fp8_blocks_64_96").items():
        assert same(sd[k], v), k
