#!/usr/bin/env python3
"""Decode a case directory with ctstream and compare with the library's decompression.

    .venv/bin/python tests/presets/check_case.py CASE_DIR
"""
from __future__ import annotations

import json
import sys
import traceback
from pathlib import Path

import torch
from safetensors.torch import load_file

import ctstream

LEFTOVER = (".input_scale", ".input_zero_point", ".input_global_scale", ".output_scale", ".output_zero_point",
            ".k_scale", ".v_scale", ".q_scale", ".k_zero_point", ".v_zero_point", ".q_zero_point",
            ".output_global_scale")


def bits(t):
    if t.dtype == torch.bool:
        return t.to(torch.uint8)
    if t.is_floating_point():
        return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def diff(got, want):
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        return f"dtype/shape {got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    gb, wb = bits(got), bits(want)
    bad = gb != wb
    if want.is_floating_point() and want.element_size() > 1:
        bad &= ~(got.isnan() & want.isnan())
    n = int(bad.sum())
    if n == 0:
        return None
    idx = bad.nonzero()[:4].tolist()
    gf, wf = got.float(), want.float()
    md = float((gf - wf).abs()[bad].max()) if want.is_floating_point() else None
    ex = [(i, float(gf[tuple(i)]), float(wf[tuple(i)])) for i in idx]
    return f"{n}/{want.numel()} differ, maxdiff {md}, e.g. (idx, got, want) {ex}"


def main():
    d = Path(sys.argv[1])
    ref = json.loads((d / "ref.json").read_text())
    res = {"case": d.name, "ref_stage": ref["stage"], "problems": []}
    P = res["problems"]
    try:
        exp = load_file(str(d / "expected" / "expected.safetensors")) if ref["stage"] == "ok" else None
        left = load_file(str(d / "expected" / "stored_leftovers.safetensors")) if ref["stage"] == "ok" else {}
        with ctstream.open(d, framework="pt", threads=1) as ck:
            names = list(ck.keys())
            res["formats"] = sorted({i.format for i in ck.infos()})
            if exp is None:
                res["note"] = "library failed but ctstream opened"
                return res
            got = dict(ck.tensors())
            if set(got) != set(names):
                P.append(f"tensors() names != keys(): {sorted(set(got) ^ set(names))}")
            missing = sorted(set(exp) - set(got))
            extra = sorted(set(got) - set(exp) - set(left))
            if missing:
                P.append(f"MISSING names: {missing}")
            if extra:
                P.append(f"EXTRA names: {extra}")
            left_not_yielded = sorted(set(left) - set(got))
            if left_not_yielded:
                res["leftovers_not_yielded"] = left_not_yielded
            for k, w in exp.items():
                if k not in got:
                    continue
                r = diff(got[k], w)
                if r:
                    P.append(f"natural {k}: {r}")
                r2 = diff(ck.get(k), w)
                if r2:
                    P.append(f"get() natural {k}: {r2}")
            for k, w in left.items():
                if k in got:
                    r = diff(got[k], w)
                    if r:
                        P.append(f"leftover {k}: {r}")
            for dt in (torch.float32, torch.bfloat16, torch.float16):
                for k, t in ck.tensors(dtype=dt):
                    if k not in exp:
                        continue
                    w = exp[k]
                    w = w.to(dt) if w.is_floating_point() else w
                    r = diff(t, w)
                    if r:
                        P.append(f"{dt} {k}: {r}")
            # a TP slice of each 2-D weight, rows then cols
            for k, w in exp.items():
                if w.ndim == 2 and w.is_floating_point() and w.shape[0] > 3 and w.shape[1] > 3:
                    a, b = w.shape[0] // 3, w.shape[0] - 1
                    r = diff(ck.get_slice(k)[a:b], w[a:b])
                    if r:
                        P.append(f"slice rows {k}[{a}:{b}]: {r}")
                    a, b = 1, w.shape[1] // 2 + 3
                    r = diff(ck.get_slice(k)[:, a:b], w[:, a:b])
                    if r:
                        P.append(f"slice cols {k}[:, {a}:{b}]: {r}")
        # safe_open drop-in
        with ctstream.safe_open(str(d), framework="pt") as f:
            for k in exp:
                r = diff(f.get_tensor(k), exp[k])
                if r:
                    P.append(f"safe_open {k}: {r}")
    except ctstream.Error as e:
        P.append(f"ctstream.Error kind={getattr(e, 'kind', None)}: {e}")
    except Exception as e:  # noqa: BLE001
        P.append(f"CRASH {type(e).__name__}: {e}\n{traceback.format_exc()}")
    return res


if __name__ == "__main__":
    r = main()
    Path(sys.argv[1], "check.json").write_text(json.dumps(r, indent=1))
    status = "PASS" if not r["problems"] and r["ref_stage"] == "ok" else ("REF-FAIL" if r["ref_stage"] != "ok" else "FAIL")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from cases import CASES  # a case the library writes but reads otherwise than its format: refused

    refused = CASES.get(r["case"], {}).get("refused")
    if refused and r["ref_stage"] == "ok":
        ok = len(r["problems"]) == 1 and r["problems"][0].startswith(f"ctstream.Error kind={refused}:")
        status = "PASS (refused as expected)" if ok else "FAIL (a refusal was expected)"
    print(status, r["case"], json.dumps(r.get("problems"))[:2000], r.get("note", ""))
