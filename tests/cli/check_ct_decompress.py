"""`ctstream decompress CASE OUT --dtype D` equals the compressed-tensors library's own
decompression of CASE cast with .to(D) (tests/fixtures/ct/<case>/expected/expected_<D>.safetensors,
written by gen_compressed.py). Extra tensors in OUT may only be activation qparams.
Usage: check_ct_decompress.py OUT1 EXPECTED1 [OUT2 EXPECTED2 ...] — one line per pair, "ok ..." or
"FAIL ...", in one process (torch imports once)."""
import sys

import torch
from safetensors import safe_open

LEFTOVER = (".input_scale", ".input_zero_point", ".input_global_scale", ".output_scale", ".output_zero_point")


def check(out_file, expected_file):
    with safe_open(expected_file, "pt") as e, safe_open(out_file, "pt") as o:
        okeys, ekeys = set(o.keys()), set(e.keys())
        missing = ekeys - okeys
        assert not missing, f"missing in ctstream output: {sorted(missing)}"
        extra = [k for k in okeys - ekeys if not k.endswith(LEFTOVER)]
        assert not extra, f"unexpected tensors in ctstream output: {extra}"
        for k in ekeys:
            want, got = e.get_tensor(k), o.get_tensor(k)
            assert got.dtype == want.dtype and got.shape == want.shape, \
                f"{k}: {got.dtype}{list(got.shape)} != {want.dtype}{list(want.shape)}"
            if want.is_floating_point():
                both_nan = got.isnan() & want.isnan()
                same = bool(((got == want) | both_nan).all()) and bool(
                    ((torch.signbit(got) == torch.signbit(want)) | both_nan).all())
            else:
                same = torch.equal(got, want)
            assert same, f"{k}: values differ from the library's decompression"
    return len(ekeys)


failed = 0
args = sys.argv[1:]
for out_file, expected_file in zip(args[0::2], args[1::2]):
    try:
        n = check(out_file, expected_file)
        print(f"ok {out_file.split('/')[-1]}: {n} tensors equal the library's decompression")
    except AssertionError as exc:
        failed += 1
        print(f"FAIL {out_file.split('/')[-1]}: {exc}")
sys.exit(1 if failed else 0)
