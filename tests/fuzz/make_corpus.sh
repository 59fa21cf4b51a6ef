#!/usr/bin/env bash
# Seed corpora for every fuzz target, from the fixtures:  make_corpus.sh OUT_DIR
# Writes OUT_DIR/<target>/ for checkpoint header config shards decode differential writer low_rank
# aws_ini http_response list_objects.
# (The committed, minimized corpora are tests/fuzz/corpus/<target>/; fuzz.sh runs both.)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?corpus dir}
F=$ROOT/tests/fixtures
mkdir -p "$OUT"/{checkpoint,header,config,shards,decode,differential,writer,low_rank,aws_ini,http_response,list_objects}

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

# http_response: a request descriptor (see fuzz_http_response.cpp), the header block, NUL, a body:
# the answers of rclone serve s3 1.75.2 and AWS recorded in docs/design/object_storage.md, and one
# per hostile-server mode (section 5.2)
python3 - "$OUT/http_response" <<'PY'
import os, struct, sys
out = sys.argv[1]
M = 1048576
def desc(start, length, size=M, flags=6, curl=0, etag=b'"abc"'):
    return bytes([flags]) + struct.pack("<QQQ", start, length, size) + bytes([curl, len(etag)]) + etag
def resp(status, headers, body=b""):
    return ("HTTP/1.1 %s\r\n" % status).encode() + b"".join(h.encode() + b"\r\n" for h in headers) + b"\r\n\0" + body
def xml(code, msg="m"):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>%s</Code><Message>%s</Message></Error>' % (code, msg)).encode()
cases = {
    "rclone_range": desc(100, 100) + resp("200 OK", ["Content-Range: bytes 100-199/1048576", "Content-Length: 100",
                                                      "Accept-Ranges: bytes", 'Etag: "abc"']),
    "aws_206": desc(100, 100) + resp("206 Partial Content", ["Content-Range: bytes 100-199/1048576",
                                                             "Content-Length: 100", 'ETag: "abc"']),
    "clipped": desc(M - 6, 100) + resp("200 OK", ["Content-Range: bytes 1048570-1048575/1048576", "Content-Length: 6"]),
    "open": desc(0, 8 << 20, 0, 0, 0, b"") + resp("206 Partial Content", ["Content-Range: bytes 0-1048575/1048576",
                                                                        'ETag: "abc"']),
    "open_empty": desc(0, 4096, 0, 0, 0, b"") + resp("416 Range Not Satisfiable", ["Content-Range: bytes */0"], xml("InvalidRange")),
    "whole": desc(0, 0, M, 7) + resp("200 OK", ["Content-Length: 1048576"]),
    "invalid_range": desc(M, 10) + resp("416 Requested Range Not Satisfiable", [], xml("InvalidRange")),
    "no_such_key": desc(0, 10) + resp("404 Not Found", ["Content-Type: application/xml"], xml("NoSuchKey")),
    "denied": desc(0, 10) + resp("403 Forbidden", [], xml("SignatureDoesNotMatch")),
    "redirect": desc(0, 10) + resp("301 Moved Permanently", ["x-amz-bucket-region: eu-west-1"], xml("PermanentRedirect")),
    "slowdown": desc(0, 10) + resp("503 Slow Down", ["Retry-After: 1"], xml("SlowDown", "Please reduce your request rate.")),
    "retry_date": desc(0, 10) + resp("503 Service Unavailable", ["Retry-After: Sun, 06 Nov 1994 08:49:37 GMT"]),
    "continue": desc(0, 10) + b"HTTP/1.1 100 Continue\r\n\r\n" + resp("206 x", ["Content-Range: bytes 0-9/1048576"]),
    "wrong_range": desc(100, 100) + resp("206 Partial Content", ["Content-Range: bytes 101-200/1048576"]),
    "wrong_total": desc(100, 100) + resp("206 Partial Content", ["Content-Range: bytes 100-199/2000000"]),
    "long_body": desc(100, 100) + resp("206 Partial Content", ["Content-Range: bytes 100-199/1048576",
                                                               "Content-Length: 1000000"]),
    "ignore_range": desc(100, 100) + resp("200 OK", ["Content-Length: 1048576"]),
    "etag_flip": desc(100, 100) + resp("206 Partial Content", ["Content-Range: bytes 100-199/1048576", 'ETag: "flip"']),
    "negative": desc(0, 6) + resp("206 Partial Content", ["Content-Range: bytes -1-5/1048576"]),
    "overflow": desc(0, 6) + resp("206 Partial Content", ["Content-Range: bytes 0-18446744073709551616/1048576"]),
    "header_flood": desc(0, 10) + resp("200 OK", ["X-Flood-%d: y" % i for i in range(300)]),
    "bad_xml": desc(0, 10) + resp("403 Forbidden", [], b"<Error><Code>" + b"A" * 9000),
    "short_body": desc(0, 10, curl=18) + resp("206 x", ["Content-Range: bytes 0-9/1048576", "Content-Length: 10"]),
    "stall": desc(0, 10, curl=28) + resp("206 x", ["Content-Range: bytes 0-9/1048576"]),
    "endless_body": desc(0, 10, curl=23) + resp("206 x", ["Content-Range: bytes 0-9/1048576"]),
    "redirect_loop": desc(0, 10, curl=47) + resp("302 Found", ["Location: /x"]),
}
for name, blob in cases.items():
    open(os.path.join(out, name), "wb").write(blob)
PY

# list_objects: a prefix line, then a ListObjectsV2 page: rclone serve s3 1.75.2's answers
# (captured), AWS's documented example, escapes, and the refusals of parse_list_objects
python3 - "$OUT/list_objects" <<'PY'
import os, sys
out = sys.argv[1]
def page(contents, prefixes=(), truncated=False, token=None):
    x = '<?xml version="1.0" encoding="UTF-8"?>\n<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    x += "<Name>bkt</Name><IsTruncated>%s</IsTruncated><Delimiter>/</Delimiter>" % ("true" if truncated else "false")
    for k, n in contents:
        x += "<Contents><Key>%s</Key><LastModified>2026-11-26T02:09:00.522Z</LastModified>" % k
        x += "<ETag>2cd6ee2c70b0bde53fbe6cac3c8b8bb1</ETag><Size>%s</Size><StorageClass>STANDARD</StorageClass></Contents>" % n
    for p in prefixes:
        x += "<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % p
    if token:
        x += "<NextContinuationToken>%s</NextContinuationToken>" % token
    return x + "</ListBucketResult>"
cases = {
    "rclone_page": "d/\n" + page([("d/config.json", 2), ("d/m-00001.safetensors", 2)], ["d/sub/"], True,
                                 "ZC9tLTAwMDAxLnNhZmV0ZW5zb3Jz"),
    "last_page": "d/\n" + page([("d/m-00002.safetensors", 3416)]),
    "escapes": "d/\n" + page([("d/a&amp;b&lt;&#x41;&#66;.safetensors", 1), ("d/", 0), ("d/..", 1), ("d/x/y", 1)]),
    "outside": "d/\n" + page([("e/x.safetensors", 1)]),
    "bad": "\n" + page([("&bogus;", "-1")]),
    "error": "d/\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>",
    "empty": "\n" + page([]),
}
for name, text in cases.items():
    open(os.path.join(out, name), "w").write(text)
PY
