#!/usr/bin/env bash
# CLI checks: exit codes, --json, corrupt inputs never crash, and `decompress` output loaded by
# the real Python safetensors (when the reference venv from tools/setup_python.sh exists).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
CT=${CTSTREAM:-$ROOT/build/bin/ctstream}
FIX=$ROOT/tests/fixtures
PY=$ROOT/.venv/bin/python
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
expect_rc() {  # expect_rc WANT DESC cmd...
  local want=$1 desc=$2; shift 2
  "$@" >"$TMP/out" 2>"$TMP/err"; local rc=$?
  if [ "$rc" = "$want" ]; then ok; else bad "$desc: exit $rc, wanted $want"; sed 's/^/  /' "$TMP/err" | head -5; fi
}

expect_rc 0 "inspect file" "$CT" inspect "$FIX/st/all_dtypes.safetensors"
expect_rc 0 "inspect sharded" "$CT" inspect "$FIX/st/sharded"
expect_rc 0 "inspect --json" "$CT" inspect "$FIX/st/sharded" --json
if python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["totals"]["tensors"]==len(d["tensors"])>0' "$TMP/out"; then ok; else bad "inspect --json is not valid JSON with totals"; fi
expect_rc 0 "verify sharded" "$CT" verify "$FIX/st/sharded"
# CTSTREAM_FORCE_ISA: a name it runs is used quietly; any other is said on stderr (not silently
# replaced, which would label a benchmark's figures with the wrong ISA)
CTSTREAM_FORCE_ISA=scalar "$CT" --version >"$TMP/out" 2>"$TMP/err"
if grep -q 'scalar' "$TMP/out" && [ ! -s "$TMP/err" ]; then ok; else bad "CTSTREAM_FORCE_ISA=scalar: $(cat "$TMP/out" "$TMP/err")"; fi
CTSTREAM_FORCE_ISA=bogus "$CT" --version >"$TMP/out" 2>"$TMP/err"
if grep -q 'CTSTREAM_FORCE_ISA=bogus is not an ISA' "$TMP/err"; then ok; else bad "CTSTREAM_FORCE_ISA=bogus said nothing"; fi
expect_rc 0 "verify pread" "$CT" verify "$FIX/st/all_dtypes.safetensors" --pread
expect_rc 2 "unknown command" "$CT" frobnicate
expect_rc 2 "bad dtype" "$CT" decompress "$FIX/st/sharded" "$TMP/x.safetensors" --dtype int3
expect_rc 1 "missing path" "$CT" inspect "$TMP/nonexistent"
# Option values parsed whole and range-checked (a red-team pass: -1 threads became UINT_MAX, 1e3 was
# 1, --bits 0 wrote int4, --shards 99999 wrote empty shards, --tp-dim 9 timed whole tensors as a
# rank); a --module-classes FIFO blocked and /dev/zero ate memory: usage errors (2) / io (1) now.
expect_rc 2 "--threads -1" "$CT" inspect "$FIX/st/sharded" --threads -1
expect_rc 2 "--threads 1e3" "$CT" inspect "$FIX/st/sharded" --threads 1e3
expect_rc 2 "synth --shards beyond the tensors" "$CT" synth "$TMP/sy" --layers 1 --hidden 64 --intermediate 128 --vocab 64 --shards 99999
expect_rc 2 "synth --layers -1" "$CT" synth "$TMP/sy" --layers -1
expect_rc 2 "compress --bits 0" "$CT" compress "$FIX/st/sharded" "$TMP/bits0" --format pack-quantized --bits 0
[ -e "$TMP/bits0" ] && bad "compress --bits 0 wrote an output" || ok
expect_rc 2 "bench --tp 1/2/3" "$CT" bench "$FIX/st/sharded" --tp 1/2/3
expect_rc 2 "bench --tp-dim 9" "$CT" bench "$FIX/st/sharded" --tp 1/2 --tp-dim 9
expect_rc 2 "bench --tp huge" "$CT" bench "$FIX/st/sharded" --tp 18446744073709551614/18446744073709551615
mkfifo "$TMP/fifo.json"
expect_rc 1 "--module-classes FIFO" timeout 20 "$CT" inspect "$FIX/st/sharded" --module-classes "$TMP/fifo.json"
expect_rc 1 "--module-classes /dev/zero" timeout 20 "$CT" inspect "$FIX/st/sharded" --module-classes /dev/zero
expect_rc 2 "demo with two DIRs" "$CT" demo "$TMP/d1" "$TMP/d2"
# A tensor name with an embedded NUL (safetensors loads it; as a C string / argv it would equal
# its neighbour "x"): refused at open, by every command that opens (tests/fixtures/hostile/name_nul).
for cmd in inspect verify; do
  expect_rc 1 "$cmd NUL name" "$CT" $cmd "$FIX/hostile/name_nul"
  grep -q 'invalid_header.*NUL' "$TMP/err" && ok || bad "$cmd NUL name: no invalid_header / NUL in the message"
done

# Every corrupt input: exit 1 with an error line naming the error kind, never a signal.
for f in "$FIX"/corrupt/*.safetensors "$FIX"/corrupt_dirs/*/; do
  [ -e "$f" ] || continue
  for cmd in inspect verify; do
    "$CT" "$cmd" "$f" >/dev/null 2>"$TMP/err"; rc=$?
    if [ "$rc" = 1 ] && grep -q "error \[" "$TMP/err"; then ok; else bad "$cmd $(basename "$f"): exit $rc"; cat "$TMP/err" | head -3; fi
  done
done

# decompress -> Python safetensors loads it with identical values.
for dt in "" bf16 fp16 fp32; do
  out="$TMP/dec_${dt:-native}.safetensors"
  if [ -n "$dt" ]; then expect_rc 0 "decompress $dt" "$CT" decompress "$FIX/st/sharded" "$out" --dtype "$dt"
  else expect_rc 0 "decompress native" "$CT" decompress "$FIX/st/sharded" "$out"; fi
  if [ -x "$PY" ]; then
    if "$PY" "$ROOT/tests/cli/check_decompress.py" "$FIX/st/sharded" "$out" "${dt:-native}"; then ok; else bad "python check of decompress $dt"; fi
  fi
done
# Compressed checkpoints from both library lines: verify, then decompress and compare with the
# library's own decompression (expected files written by gen_compressed.py), all pairs checked in
# one Python process.
ct_pairs=()
for case in v020_pack_w4_g128_asym_bf16 v020_pack_w3_g16_asym_bf16 v020_nvfp4a16_fp16 v020_mxfp6a16_fp32 \
            v020_fp8_block128_colsragged_bf16 v020_mixed_int4g32_fp8ch_bf16 v012_sparse_bitmask_fp16 \
            v012_sparse24_fp8_bf16 v012_pack_w4_g32_actorder_bf16 v012_pack_w5_g32_sym_bf16; do
  expect_rc 0 "verify $case" "$CT" verify "$FIX/ct/$case"
  for dt in bf16 fp16 fp32; do
    out="$TMP/${case}_$dt.safetensors"
    expect_rc 0 "decompress $case $dt" "$CT" decompress "$FIX/ct/$case" "$out" --dtype $dt
    ct_pairs+=("$out" "$FIX/ct/$case/expected/expected_$dt.safetensors")
  done
done
# Config groups that target module classes (gen_class_targets.py, the library's model path): the
# stored parts choose among them, or --module-classes does; without it an undecidable module is refused.
for case in embedding_w8_linear_w4 attention_linear_w4 fp8_blocks_64_96; do
  classes=(--module-classes "$FIX/ct_class/$case/module_classes.json")
  [ $case = fp8_blocks_64_96 ] || classes=()
  expect_rc 0 "decompress $case" "$CT" decompress "$FIX/ct_class/$case" "$TMP/class_$case.safetensors" "${classes[@]}"
  ct_pairs+=("$TMP/class_$case.safetensors" "$FIX/ct_class/$case/expected/expected.safetensors")
done
expect_rc 1 "fp8 class groups without --module-classes" "$CT" verify "$FIX/ct_class/fp8_blocks_64_96"
if grep -q "module classes" "$TMP/err"; then ok; else bad "the refusal does not say to pass module classes"; fi
expect_rc 1 "--module-classes not an object" "$CT" verify "$FIX/ct_class/fp8_blocks_64_96" --module-classes "$FIX/ct_class/fp8_blocks_64_96/notes.txt"
if [ -x "$PY" ]; then
  "$PY" "$ROOT/tests/cli/check_ct_decompress.py" "${ct_pairs[@]}" >"$TMP/ct_check" 2>&1
  while read -r status rest; do
    if [ "$status" = ok ]; then ok; else bad "decompress differs from compressed-tensors: $rest"; fi
  done < <(grep -E '^(ok|FAIL) ' "$TMP/ct_check")
  [ "$(grep -cE '^(ok|FAIL) ' "$TMP/ct_check")" = $(( ${#ct_pairs[@]} / 2 )) ] || { bad "python check crashed"; tail -5 "$TMP/ct_check"; }
fi
expect_rc 0 "inspect marlin" "$CT" inspect "$FIX/ct/v012_marlin24_w4_g128_bf16"
grep -q "marlin-24" "$TMP/out" && ok || bad "inspect does not name marlin-24"
expect_rc 1 "verify marlin (decode unsupported)" "$CT" verify "$FIX/ct/v012_marlin24_w4_g128_bf16"

# The default job (tools/run_demo.sh) at its small size: writes int4 / fp8 / sparse-bitmask with the
# writer, streams each back, checks every value against the dense original (exit 1 otherwise).
expect_rc 0 "demo --small" "$CT" demo "$TMP/demo" --small
for v in "dense bf16" "int4 g128" "fp8 channel" "sparse-bitmask"; do
  grep -E "^$v .*(exact|within the bound)" "$TMP/out" >/dev/null && ok || bad "demo: no checked row for $v"
done
want_ref=3; "$CT" --version | grep -q "ISA scalar" && want_ref=0  # nothing to compare on a scalar-only CPU
[ "$(grep -c '= scalar reference' "$TMP/out")" = $want_ref ] && ok || bad "demo: the SIMD decodes were not compared with the scalar reference"
rm -rf "$TMP/demo"

# One shard of a model whose save cut a module between shards: by default its parts come from the
# shard the index names; --file-alone reads the file alone (refused: a part is missing);
# --stored-entries lists the file's entries as safetensors does (the packed weight, no scale).
mod=$(python3 "$ROOT/tests/cli/cut_shards.py" "$FIX/ct/v012_pack_w4_g32_sym_bf16" "$TMP/cut")
shard=$TMP/cut/model-00001-of-00002.safetensors
expect_rc 0 "verify a cut shard" "$CT" verify "$shard"
expect_rc 0 "inspect a cut shard" "$CT" inspect "$shard" --json
grep -q "\"$mod.weight\"" "$TMP/out" && ok || bad "inspect of a cut shard does not list $mod.weight"
expect_rc 1 "inspect a cut shard --file-alone" "$CT" inspect "$shard" --file-alone
grep -q "weight_scale" "$TMP/err" && ok || bad "--file-alone: the refusal does not name the missing part"
expect_rc 0 "inspect --stored-entries" "$CT" inspect "$shard" --stored-entries --json
grep -q "\"$mod.weight_packed\"" "$TMP/out" && ! grep -q "\"$mod.weight\"" "$TMP/out" && ok ||
  bad "--stored-entries does not list the file's entries as stored"
expect_rc 0 "verify --stored-entries --pread" "$CT" verify "$shard" --stored-entries --pread

[ -x "$PY" ] || echo "note: $PY missing (run tools/setup_python.sh); Python cross-checks skipped"
ls "$TMP" | grep -q '\.tmp\.' && bad "temporary file left behind" || ok

echo "cli: $pass passed, $fail failed"
[ "$fail" = 0 ]
