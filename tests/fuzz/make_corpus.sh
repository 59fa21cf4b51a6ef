#!/usr/bin/env bash
# Seed corpora for every fuzz target, from the fixtures:  make_corpus.sh OUT_DIR
# Writes OUT_DIR/<target>/ for checkpoint header config shards decode differential writer low_rank
# aws_ini.
# (The committed, minimized corpora are tests/fuzz/corpus/<target>/; fuzz.sh runs both.)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?corpus dir}
F=$ROOT/tests/fixtures
mkdir -p "$OUT"/{checkpoint,header,config,shards,decode,differential,writer,low_rank,aws_ini}

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

# low_rank: decompose_config.json in ptdeco's layout (Linear, 1x1 and k x k convs, __meta__)
python3 - "$OUT/low_rank" <<'PY'
import json, os, sys
out = sys.argv[1]
def lin(i, o, b): return {"type": "Linear", "in_features": i, "out_features": o, "bias": b}
def conv(i, o, k, b, **kw):
    c = {"type": "Conv2d", "in_channels": i, "out_channels": o, "kernel_size": [k, k], "bias": b, "groups": 1,
         "padding": [0, 0], "padding_mode": "zeros", "stride": [1, 1], "dilation": [1, 1]}
    c.update(kw)
    return c
def seq(a, b, meta=False):
    s = {"type": "Sequential", "modules": {"0": a, "1": b}}
    if meta: s["__meta__"] = {"proportion": 0.25, "nsr_final": 0.01}
    return s
cases = {
    "linear": {"fc1": seq(lin(64, 7, False), lin(7, 96, True), meta=True), "fc2": seq(lin(96, 11, False), lin(11, 48, False))},
    "conv": {"stem": seq(conv(8, 5, 1, False), conv(5, 32, 1, True)),
             "conv": seq(conv(24, 5, 3, False, padding=[1, 1], stride=[2, 2]), conv(5, 32, 1, True))},
    "mixed": {"a.b": seq(lin(16, 2, False), lin(2, 16, True)), "__meta__": {"x": 1},
              "c": seq(conv(3, 4, 5, False), conv(4, 6, 1, False))},
}
for name, cfg in cases.items():
    for pad in range(8):  # the target picks its mutation from the input length
        open(os.path.join(out, f"{name}_{pad}"), "w").write(json.dumps(cfg) + " " * pad)
PY

# aws_ini: a profile name on the first line, then ~/.aws/config (or credentials) text
python3 - "$OUT/aws_ini" <<'PY'
import os, sys
out = sys.argv[1]
cases = {
    "default": "\n[default]\nregion = eu-west-1\naws_access_key_id = AKIDEXAMPLE\naws_secret_access_key = secret\n",
    "profile": "dev\n[default]\nregion = us-east-1\n[profile dev]\nregion = eu-central-1\nendpoint_url = http://127.0.0.1:9000\n"
               "s3 =\n  addressing_style = path\n",
    "services": "local\n[profile local]\nservices = local-s3\naws_access_key_id = A\naws_secret_access_key = S\n"
                "aws_session_token = T\n[services local-s3]\ns3 =\n  endpoint_url = http://localhost:8080\n",
    "comments": "\n# comment\n; comment\n[default]\nnote = a\n  continued\nignore_configured_endpoint_urls = true\n",
    "sso": "corp\n[profile corp]\nsso_session = corp\n[sso-session corp]\nsso_start_url = https://x\n",
    "credentials": "dev\n[dev]\naws_access_key_id=AKID\naws_secret_access_key=SECRET\n",
}
for name, text in cases.items():
    open(os.path.join(out, name), "w").write(text)
PY
