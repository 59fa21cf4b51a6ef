#!/usr/bin/env bash
# libFuzzer targets (tests/fuzz/, one per entry point a file controls), built with clang + ASan +
# UBSan into build-fuzz/.
#
#   tools/fuzz.sh [smoke] [SECONDS]      CI: replay every committed corpus (tests/fuzz/corpus/<t>),
#                                        then fuzz each target SECONDS (default 10). Exit 1 on any
#                                        finding (artifacts in build-fuzz/findings/).
#   tools/fuzz.sh campaign TARGET SECONDS [JOBS]
#                                        a long run of one target from the committed corpus plus the
#                                        fixture seeds; merges what it found back into the committed
#                                        corpus (minimized) and appends executions / coverage to
#                                        tests/fuzz/campaigns.tsv (the README table sums them).
#   tools/fuzz.sh table                  rewrites the totals table of tests/fuzz/README.md from
#                                        campaigns.tsv.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGETS=(checkpoint header config shards decode differential writer low_rank)
mode=smoke
if [ "${1:-}" = table ]; then
  table=$(awk -F'\t' 'NR > 1 && $7 != "ok" { bad[$2]++ } NR > 1 && $7 == "ok" {
      n[$2] += $3; runs[$2]++; secs[$2] += $6; if ($4 > cov[$2]) cov[$2] = $4; if ($5 > ft[$2]) ft[$2] = $5; last[$2] = substr($1, 1, 10)
    } END {
      print "| target | executions (total) | runs | fuzzing time | max cov / ft | last run | runs with a finding |"
      print "|---|---|---|---|---|---|---|"
      n_order = split("header config shards checkpoint decode differential writer low_rank aws_ini http_response list_objects", order, " ")
      for (i = 1; i <= n_order; i++) { t = order[i]
        if (t in n) printf "| `fuzz_%s` | %d | %d | %.1f h | %s / %s | %s | %d |\n", t, n[t], runs[t], secs[t] / 3600, cov[t], ft[t], last[t], bad[t]
        else printf "| `fuzz_%s` | 0 | 0 | - | - | - | - |\n", t }
    }' tests/fuzz/campaigns.tsv)
  awk -v table="$table" '/<!-- campaign-table -->/ { print; print ""; print table; skip = 1; next }
      skip && /^## / { print ""; skip = 0 } !skip' tests/fuzz/README.md > tests/fuzz/README.md.new
  mv tests/fuzz/README.md.new tests/fuzz/README.md
  echo "$table"
  exit 0
fi
if [ "${1:-}" = smoke ] || [ "${1:-}" = campaign ]; then mode=$1; shift; fi
command -v clang++ >/dev/null || bash tools/setup.sh
# Configured every time (cheap when nothing changed): a build tree generated from an older
# CMakeLists.txt has no rule for a target added since, and `--target` does not regenerate it.
# The tree may also hold the sanitizer build of the unit suite (tools/run_tests.sh): its test
# setting is left as it is.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCTSTREAM_FUZZ=ON \
  -DCTSTREAM_BUILD_BENCH=OFF >/dev/null
# The remote parsers' targets exist when the tree found libcurl (CTSTREAM_REMOTE).
if grep -q '^CTSTREAM_REMOTE:BOOL=ON' build-fuzz/CMakeCache.txt; then TARGETS+=(aws_ini http_response list_objects); fi
cmake --build build-fuzz -j"$(nproc)" --target "${TARGETS[@]/#/fuzz_}" >/dev/null
mkdir -p build-fuzz/findings build-fuzz/seeds
for t in "${TARGETS[@]}"; do  # (re)made when a target has none yet (a target added since)
  [ -d "build-fuzz/seeds/$t" ] || { rm -rf build-fuzz/seeds; bash tests/fuzz/make_corpus.sh build-fuzz/seeds; break; }
done
COMMON=(-max_len=65536 -rss_limit_mb=2048 -timeout=10 -dict=tests/fuzz/ctstream.dict -print_final_stats=1)

extra() {  # per-target flags: the writer round trip is slow; plain (non-entropic) scheduling doubles it
  [ "$1" = writer ] && echo "-entropic=0" || true
}

stat() {  # stat NAME LOG -> the number libFuzzer printed for it
  { grep -E "^stat::$1:" "$2" || true; } | tail -n 1 | awk '{print $2}'  # fork mode prints none
}

if [ "$mode" = smoke ]; then
  secs=${1:-10}
  rc=0
  # One seed per commit (CTSTREAM_FUZZ_SEED overrides), printed: a finding in CI names the seed that
  # replays its search, not an unrepeatable random one.
  seed=${CTSTREAM_FUZZ_SEED:-$(( 0x$(git rev-parse --short=7 HEAD 2>/dev/null || echo 1) % 2147483646 + 1 ))}
  echo "fuzz smoke: -seed=$seed (CTSTREAM_FUZZ_SEED=$seed replays it)"
  for t in "${TARGETS[@]}"; do
    corpus=tests/fuzz/corpus/$t
    log=build-fuzz/findings/$t.log
    if [ -d "$corpus" ]; then  # regression: every committed input, once
      if ! build-fuzz/bin/fuzz_$t "${COMMON[@]}" -runs=0 -artifact_prefix=build-fuzz/findings/$t- "$corpus" >"$log" 2>&1; then
        echo "fuzz_$t: a committed corpus input fails (see $log)"; tail -n 30 "$log"; rc=1; continue
      fi
    fi
    work=build-fuzz/work/$t
    rm -rf "$work"; mkdir -p "$work"
    dirs=("$work")
    [ -d "$corpus" ] && dirs+=("$corpus")
    dirs+=(build-fuzz/seeds/$t)
    if ! build-fuzz/bin/fuzz_$t "${COMMON[@]}" $(extra "$t") -seed="$seed" -max_total_time="$secs" -artifact_prefix=build-fuzz/findings/$t- \
         "${dirs[@]}" >"$log" 2>&1; then
      echo "fuzz_$t: FINDING (see $log)"; tail -n 30 "$log"; rc=1; continue
    fi
    echo "fuzz_$t: $(stat number_of_executed_units "$log") executions in ${secs}s, no finding"
  done
  exit $rc
fi

t=${1:?target}; secs=${2:?seconds}; jobs=${3:-1}
# Long runs: no allocation stacks in ASan reports (a finding is replayed with them from its
# artifact); recording one per malloc is ~15 % of a decode target's time.
export ASAN_OPTIONS=${ASAN_OPTIONS:-malloc_context_size=0}
corpus=tests/fuzz/corpus/$t
work=build-fuzz/campaign/$t
mkdir -p "$corpus" "$work"
log=build-fuzz/findings/campaign-$t-$(date +%Y%m%d-%H%M%S).log
status=0
# JOBS independent fuzzers sharing one work corpus (each picks up what the others add, -reload):
# libFuzzer's -fork mode restarts a child every few seconds on a corpus subset, which cost the
# slow targets most of their executions (measured rates: tests/fuzz/README.md). Totals are the sums
# of the per-process final stats (a process killed by a finding prints none: its row is FINDING).
pids=()
for i in $(seq 1 "$jobs"); do
  build-fuzz/bin/fuzz_$t "${COMMON[@]}" $(extra "$t") -max_total_time="$secs" -artifact_prefix=build-fuzz/findings/$t- \
    "$work" "$corpus" build-fuzz/seeds/$t >"$log.$i" 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || { rc=$?; [ "$status" != 0 ] || status=$rc; }; done
cat "$log".* > "$log"; rm -f "$log".*
execs=$({ grep -E '^stat::number_of_executed_units:' "$log" || true; } | awk '{n += $2} END {print n + 0}')
cov=$({ grep -oE 'cov: [0-9]+' "$log" || true; } | awk '$2 > m {m = $2} END {print m}')
ft=$({ grep -oE 'ft: [0-9]+' "$log" || true; } | awk '$2 > m {m = $2} END {print m}')
# Minimize into the committed corpus: keep only inputs that add coverage.
tmp=$(mktemp -d)
build-fuzz/bin/fuzz_$t "${COMMON[@]}" -merge=1 "$tmp" "$corpus" "$work" >/dev/null 2>&1 || true
# Named regression inputs (finding-*: one per fuzz finding, see README) stay whatever the merge
# keeps.
if [ -n "$(ls -A "$tmp")" ]; then
  cp "$corpus"/finding-* "$tmp"/ 2>/dev/null || true
  rm -rf "$corpus"; mv "$tmp" "$corpus"
else rm -rf "$tmp"; fi
printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$(date -u +%Y-%m-%dT%H:%MZ)" "$t" "${execs:-0}" "${cov:-?}" "${ft:-?}" "$secs" \
  "$([ "$status" = 0 ] && echo ok || echo "FINDING rc=$status")" >> tests/fuzz/campaigns.tsv
echo "fuzz_$t: ${execs:-?} executions, cov ${cov:-?}, ft ${ft:-?}, status $status (log $log)"
exit $status
