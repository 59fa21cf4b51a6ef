#!/usr/bin/env bash
# Every case of tests/presets/cases.py (or those matching REGEX): build with the library, check
# with ctstream. Prints PASS / FAIL / REF-FAIL per case (REF-FAIL: the library itself could not
# build or decompress it).   bash tests/presets/run_all.sh [REGEX]
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=$ROOT/.venv/bin/python
OUT=${OUT:-/tmp/ctstream-presets}
mkdir -p "$OUT"
for c in $("$PY" -c "import sys; sys.path.insert(0, '$ROOT/tests/presets'); from cases import CASES; print('\n'.join(CASES))" | grep -E "${1:-.}"); do
  timeout 300 "$PY" "$ROOT/tests/presets/make_case.py" "$c" "$OUT" >"$OUT/$c.make.log" 2>&1 || echo "MAKE-RC $? $c"
  timeout 120 "$PY" "$ROOT/tests/presets/check_case.py" "$OUT/$c" 2>&1 | tail -1
done
