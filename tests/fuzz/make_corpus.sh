#!/usr/bin/env bash
# Seed corpora for every fuzz target, from the fixtures:  make_corpus.sh OUT_DIR
# Writes OUT_DIR/<target>/ for checkpoint header config shards decode differential writer.
# (The committed, minimized corpora are tests/fuzz/corpus/<target>/; fuzz.sh runs both.)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?corpus dir}
F=$ROOT/tests/fixtures
mkdir -p "$OUT"/{checkpoint,header,config,shards,decode,differential,writer}

# checkpoint: a selector byte (which fixture config sits beside the file, see fuzz_checkpoint.cpp)
# + the bytes of a .safetensors file
cases=(none v020_pack_w4_g32_asym_bf16 v020_pack_w3_g16_asym_bf16 v012_pack_w5_g32_sym_bf16 v012_pack_w4_g32_actorder_bf16
       v012_sparse_bitmask_bf16 v012_sparse24_fp8_bf16 v020_nvfp4a16_bf16 v020_mxfp6a16_bf16
       v020_fp8_block128_colsragged_bf16 v020_mixed_int4g32_fp8ch_bf16)
for i in "${!cases[@]}"; do
  c=${cases[$i]}
  [ "$c" = none ] && continue
  { printf "\\x$(printf %02x "$i")"; cat "$F/ct/$c/model.safetensors"; } > "$OUT/checkpoint/$c"
done
n=0
for f in "$F"/st/*.safetensors "$F"/corrupt/*.safetensors; do
  { printf '\x00'; cat "$f"; } > "$OUT/checkpoint/plain_$n"; n=$((n + 1))
done

# header: every fixture file as it is (hostile ones over 64 KiB are left out)
n=0
for f in "$F"/st/*.safetensors "$F"/corrupt/*.safetensors "$F"/ct/*/model.safetensors "$F"/hostile/*/model.safetensors; do
  [ "$(stat -c %s "$f")" -le 65536 ] || continue
  cp "$f" "$OUT/header/h_$n"; n=$((n + 1))
done

# config: every fixture config.json (under 64 KiB), a module name on the last line
n=0
for f in "$F"/ct/*/config.json "$F"/hostile/*/config.json "$F"/st/sharded/config.json; do
  [ "$(stat -c %s "$f")" -le 65536 ] || continue
  { cat "$f"; printf '\nmodel.layers.0.mlp.down_proj'; } > "$OUT/config/c_$n"; n=$((n + 1))
done

# shards: head byte (3 shards | config), then per shard a 16-bit length + bytes, then the index
python3 - "$F/st/sharded" "$OUT/shards/sharded" <<'PY'
import os, struct, sys
d, out = sys.argv[1], sys.argv[2]
blob = bytes([2 | 0x80])
for k in (1, 2, 3):
    b = open(os.path.join(d, f"model-0000{k}-of-00003.safetensors"), "rb").read()
    blob += struct.pack("<H", len(b)) + b
blob += open(os.path.join(d, "model.safetensors.index.json"), "rb").read()
open(out, "wb").write(blob)
PY

# decode / differential / writer: the structured targets build their input from any bytes;
# seeds are deterministic pseudo-random strings of a few lengths
python3 - "$OUT" <<'PY'
import os, random, sys
out = sys.argv[1]
rng = random.Random(1234)
for t in ("decode", "differential", "writer"):
    for k in range(64):
        n = rng.choice([8, 32, 128, 512, 2048, 8192])
        open(os.path.join(out, t, f"seed_{k}"), "wb").write(bytes(rng.randrange(256) for _ in range(n)))
PY
