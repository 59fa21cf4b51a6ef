#!/usr/bin/env python3
"""Reads the alternating kernel passes of `tools/gpu_check.sh ab` (one file: "== BINARY ROUND"
headers, each followed by the benchmark's roofline table) and prints, per row, each binary's
GB/s range and roofline ratios over its passes, and its mean change against the first binary.

    python3 bench/ab_compare.py ab.txt
"""
import collections
import re
import sys


def main(path: str) -> None:
    rows: dict = collections.defaultdict(lambda: collections.defaultdict(list))
    order: list = []
    binary = None
    with open(path) as f:
        for line in f:
            m = re.match(r"== (\S+) (\d+)", line)
            if m:
                binary = m.group(1)
                if binary not in order:
                    order.append(binary)
                continue
            x = line.split()
            if binary and len(x) == 7 and x[0].startswith("BM_"):
                rows[x[0]][binary].append((float(x[4]), float(x[6])))
    for name, by in rows.items():
        print(name)
        base = by.get(order[0])
        for b in order:
            v = by.get(b)
            if not v:
                continue
            gbs = [g for g, _ in v]
            ratios = [r for _, r in v]
            change = ""
            if base and b != order[0]:
                change = f"  {100 * (sum(gbs) / len(gbs)) / (sum(g for g, _ in base) / len(base)) - 100:+.1f} %"
            print(f"  {b:40s} {min(gbs):6.1f}-{max(gbs):6.1f} GB/s  ratio {min(ratios):.2f}-{max(ratios):.2f}"
                  f"  ({len(v)} passes){change}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: ab_compare.py AB_FILE")
    main(sys.argv[1])
