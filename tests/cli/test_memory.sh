#!/usr/bin/env bash
# Peak-RSS test (not timing): streams a generated model several times larger than the budget and
# checks the process's peak RSS stays under budget + largest tensor + the caller's buffer
# (`bench` copies every item into one reused buffer of the largest tensor's size) + 64 MiB.
set -u
CT=${CTSTREAM:?path to the ctstream binary}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
# ~520 MiB of bf16 in 3 shards; largest tensor (embeddings / lm_head) 62.5 MiB.
"$CT" synth "$TMP/m" --layers 16 --hidden 1024 --intermediate 2816 --vocab 32000 --shards 3 >/dev/null || exit 1
pass=0 fail=0
for budget_mib in 32 64; do
  for mode in "" --pread; do
    json=$("$CT" bench "$TMP/m" --budget "${budget_mib}MiB" --json $mode) || { echo "FAIL: bench exited $?"; fail=$((fail+1)); continue; }
    if python3 - "$budget_mib" "$json" <<'PY'
import json, sys
budget = int(sys.argv[1]) << 20
j = json.loads(sys.argv[2])
largest, rss, out = j["largest_tensor_bytes"], j["peak_rss_bytes"], j["output_bytes"]
limit = budget + largest + largest + (64 << 20)
print(f"budget {budget >> 20} MiB: streamed {out / 2**20:.0f} MiB, peak RSS {rss / 2**20:.1f} MiB, limit {limit / 2**20:.1f} MiB")
assert out > 4 * budget, "model must be several times the budget"
sys.exit(0 if rss <= limit else 1)
PY
    then pass=$((pass+1)); else echo "FAIL: peak RSS over the limit (budget ${budget_mib} MiB $mode)"; fail=$((fail+1)); fi
  done
done
echo "memory: $pass passed, $fail failed"
[ "$fail" = 0 ]
