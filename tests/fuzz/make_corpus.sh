#!/usr/bin/env bash
# Seed corpus: every fixture file, prefixed with the selector byte of its config (see the list in
# fuzz_checkpoint.cpp), plus the plain safetensors and corrupt fixtures with no config.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?corpus dir}
mkdir -p "$OUT"
cases=(none v020_pack_w4_g32_asym_bf16 v020_pack_w3_g16_asym_bf16 v012_pack_w5_g32_sym_bf16 v012_pack_w4_g32_actorder_bf16
       v012_sparse_bitmask_bf16 v012_sparse24_fp8_bf16 v020_nvfp4a16_bf16 v020_mxfp6a16_bf16
       v020_fp8_block128_colsragged_bf16 v020_mixed_int4g32_fp8ch_bf16)
for i in "${!cases[@]}"; do
  c=${cases[$i]}
  [ "$c" = none ] && continue
  { printf "\\x$(printf %02x "$i")"; cat "$ROOT/tests/fixtures/ct/$c/model.safetensors"; } > "$OUT/$c"
done
n=0
for f in "$ROOT"/tests/fixtures/st/*.safetensors "$ROOT"/tests/fixtures/corrupt/*.safetensors; do
  { printf '\x00'; cat "$f"; } > "$OUT/plain_$n"; n=$((n + 1))
done
