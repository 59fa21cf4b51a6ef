"""3-D MoE expert weights with packed zero points (tests/fixtures/gen/gen_moe.py: compressed-tensors'
own compressor on [E, R, C] experts, which packs the zero point one expert at a time):
ctstream.open and safe_open give exactly the library's decompression, whole and sliced along each
dim as torch slices the full tensor."""
import os

import pytest

ctstream = pytest.importorskip("ctstream")
torch = pytest.importorskip("torch")
pytest.importorskip("safetensors")
from safetensors.torch import load_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = os.path.join(ROOT, "tests", "fixtures", "ct_moe")
NAMES = ["w4a16_group32_asym", "w4a16_channel_asym", "w8a16_channel_asym", "v0171_w3a16_group32_asym"]


def expected(name):
    return load_file(os.path.join(CASES, name, "expected", "expected.safetensors"))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("io", ["mmap", "pread"])
def test_open_decodes_as_the_library(name, io):
    want = expected(name)
    with ctstream.open(os.path.join(CASES, name), io=io, framework="pt") as ck:
        got = dict(ck.tensors())
    assert sorted(got) == sorted(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k


@pytest.mark.parametrize("name", NAMES)
def test_slices_of_every_dim(name):
    want = expected(name)
    with ctstream.safe_open(os.path.join(CASES, name), framework="pt") as f:
        for k, w in want.items():
            if w.dim() != 3:
                continue
            sl = f.get_slice(k)
            assert torch.equal(sl[1:3], w[1:3]), k
            assert torch.equal(sl[:, 5:17], w[:, 5:17]), k
            assert torch.equal(sl[:, :, 3:11], w[:, :, 3:11]), k
