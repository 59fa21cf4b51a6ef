#!/usr/bin/env python3
"""clang-tidy over a compile database, remembering the translation units it passed.

    tools/tidy_cached.py BUILD_DIR FILE_REGEX [--jobs N] [--extra-arg ARG ...]

Runs clang-tidy on every entry of BUILD_DIR/compile_commands.json whose file matches FILE_REGEX,
like run-clang-tidy, except that a translation unit clang-tidy already passed with the same inputs
is not run again. A unit's inputs are summed up as one key: clang-tidy's version, every .clang-tidy
file of the tree, the unit's compile flags, and its preprocessed text with comments kept (so a
NOLINT, an included header or a macro that changes makes a new key). Paths of the clone are left
out of the key, so a fresh clone elsewhere finds the same keys. Passes are remembered as empty files
named by their key under $CTSTREAM_TIDY_CACHE (default ~/.cache/ctstream/clang-tidy); a finding is
never remembered. CTSTREAM_TIDY_CACHE=off runs every unit.

Exit status 1 when clang-tidy fails on any unit, with its output printed; 0 otherwise.
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def compile_args(entry):
    return entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])


def preprocess_args(args):
    """The compile command turned into one that prints the preprocessed unit, comments kept."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
        elif a in ("-c", "-MD", "-MMD") or a[:3] in ("-MF", "-MT", "-MQ"):
            pass
        else:
            out.append(a)
    return out + ["-E", "-C", "-P", "-o", "-"]


def key_of(entry, common):
    """The unit's key, or None when its preprocessed text cannot be made (then it is just run)."""
    args = compile_args(entry)
    try:
        pre = subprocess.run(preprocess_args(args), cwd=entry["directory"], capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if pre.returncode != 0:
        return None
    h = hashlib.sha256(common)
    flags = " ".join(a for a in args if a != entry["file"]).replace(str(ROOT), "")
    h.update(flags.encode() + b"\0")
    h.update(os.path.relpath(entry["file"], ROOT).encode() + b"\0")
    h.update(pre.stdout.replace(str(ROOT).encode(), b""))
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build_dir")
    ap.add_argument("file_regex")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--extra-arg", action="append", default=[])
    opts = ap.parse_args()

    entries = json.loads((Path(opts.build_dir) / "compile_commands.json").read_text())
    pattern = re.compile(opts.file_regex)
    entries = [e for e in entries if pattern.search(e["file"])]
    if not entries:
        print(f"tidy_cached: no unit of {opts.build_dir}/compile_commands.json matches {opts.file_regex}")
        return 1

    setting = os.environ.get("CTSTREAM_TIDY_CACHE", "")
    cache = None if setting == "off" else Path(setting or Path.home() / ".cache/ctstream/clang-tidy")
    common = hashlib.sha256()
    common.update(subprocess.run(["clang-tidy", "--version"], capture_output=True, check=True).stdout)
    # The tree's own configs (tracked or new, as tools/lint.sh lists its files), not a walk of the
    # build trees and the venv link.
    configs = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", ".clang-tidy", "*/.clang-tidy"],
                             cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for rel in sorted(configs):
        common.update(rel.encode() + b"\0" + (ROOT / rel).read_bytes())
    common.update(" ".join(opts.extra_arg).encode())
    common = common.digest()

    def one(entry):
        key = key_of(entry, common) if cache else None
        if key and (cache / key).exists():
            return True, 0, ""
        cmd = ["clang-tidy", "-p", opts.build_dir, "-quiet"] + [f"-extra-arg={a}" for a in opts.extra_arg]
        run = subprocess.run(cmd + [entry["file"]], capture_output=True, text=True)
        if run.returncode == 0 and key:
            cache.mkdir(parents=True, exist_ok=True)
            (cache / key).touch()
        return False, run.returncode, run.stdout + run.stderr

    failed, reused = 0, 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        for hit, rc, output in pool.map(one, entries):
            reused += hit
            if rc != 0:
                failed += 1
                print(output, end="")
    print(f"clang-tidy: {len(entries)} units, {reused} unchanged since a clean pass (not run again), "
          f"{failed} with findings")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
