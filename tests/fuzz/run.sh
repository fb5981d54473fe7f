#!/bin/sh
# tests/fuzz/run.sh -- builds the libFuzzer targets (over src/host, src/core, src/cpu
# and the backend registry src/backend_reg.c, with AddressSanitizer and
# UndefinedBehaviorSanitizer) and runs
# them, one after the other:
#
#   fuzz_safetensors  the model file loader (tests/fuzz/fuzz_safetensors.c):
#                     seeds tests/fuzz/corpus/, crashes once found in
#                     tests/fuzz/regressions/ (test_core_safetensors reads them)
#   fuzz_json         the strict JSON reader alone (tests/fuzz/fuzz_json.c):
#                     seeds tests/fuzz/corpus_json/, crashes once found in
#                     tests/fuzz/regressions_json/ (test_core_json reads them)
#
#   sh tests/fuzz/run.sh [SECONDS]     # default 60 in all; fails on any crash
#   sh tests/fuzz/run.sh --seeds       # rewrite tests/fuzz/corpus/ (make_corpus.c)
#
# SECONDS is split: the JSON reader, the smaller target, gets a third (at
# least 1 s), the loader the rest. For each target, first every input in its
# regressions folder runs once, then the fuzzer runs from its seeds with the
# dictionary tests/fuzz/safetensors.dict. New inputs go to
# build/fuzz/corpus*/ (not committed); a crashing input is kept in
# build/fuzz/crashes*/ -- add it to the target's regressions folder once
# fixed, and its C test feeds it to the code from then on.
# Needs clang with libFuzzer (Debian: apt-get install clang). It is not part
# of the R package build.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
CC=${FUZZ_CC:-clang}
out=build/fuzz
if ! command -v "$CC" >/dev/null 2>&1; then
  echo "fuzz: $CC not found (Debian: apt-get install clang)" >&2
  exit 1
fi
mkdir -p "$out/obj"

# No OpenMP (clang's would need libomp) and no BLAS: the loader is the target.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-std=c11 -O1 -g -Wall -Wextra -Isrc -Iinst/include $SAN"
objs=""
for f in src/host/*.c src/core/*.c src/cpu/*.c src/backend_reg.c; do
  o="$out/obj/$(echo "$f" | tr / _).o"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ -n "$(find src/host src/core src/cpu inst/include -newer "$o" -name '*.h' 2>/dev/null | head -n 1)" ]; then
    $CC $CFLAGS -fsanitize=fuzzer-no-link -c "$f" -o "$o"
  fi
  objs="$objs $o"
done

if [ "${1:-}" = "--seeds" ]; then
  mkdir -p tests/fuzz/corpus
  $CC $CFLAGS tests/fuzz/make_corpus.c $objs -lm -o "$out/make_corpus"
  "$out/make_corpus"
  exit 0
fi
secs=${1:-60}
json_secs=$((secs / 3))
[ "$json_secs" -ge 1 ] || json_secs=1
st_secs=$((secs - json_secs))
[ "$st_secs" -ge 1 ] || st_secs=1

$CC $CFLAGS -fsanitize=fuzzer tests/fuzz/fuzz_safetensors.c $objs -lm -o "$out/fuzz_safetensors"
$CC $CFLAGS -fsanitize=fuzzer tests/fuzz/fuzz_json.c $objs -lm -o "$out/fuzz_json"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

# fuzz TARGET SECONDS SEEDS REGRESSIONS SUFFIX: one target's run.
fuzz() {
  target=$1 tsecs=$2 seeds=$3 regs=$4 sfx=$5
  mkdir -p "$out/corpus$sfx" "$out/crashes$sfx"
  n_reg=0
  for f in "$regs"/*; do
    [ -f "$f" ] || continue
    n_reg=$((n_reg + 1))
  done
  if [ "$n_reg" -gt 0 ]; then
    "$out/$target" "$regs"/* >"$out/regressions$sfx.log" 2>&1 || {
      cat "$out/regressions$sfx.log"
      echo "fuzz: $target: a regression input crashes again"
      exit 1
    }
  fi
  log="$out/fuzz$sfx.log"
  rc=0
  "$out/$target" -max_total_time="$tsecs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
    -dict=tests/fuzz/safetensors.dict -print_final_stats=1 \
    -artifact_prefix="$out/crashes$sfx/" "$out/corpus$sfx" "$seeds" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$log"
    echo "fuzz: $target FAILED (exit $rc) after ${execs:-?} executions; input kept in $out/crashes$sfx/"
    exit 1
  fi
  echo "fuzz: $target: ${execs:-?} executions in ${tsecs}s, coverage ${cov:-?} edges, $n_reg regression inputs, no crash"
}

fuzz fuzz_safetensors "$st_secs" tests/fuzz/corpus tests/fuzz/regressions ""
fuzz fuzz_json "$json_secs" tests/fuzz/corpus_json tests/fuzz/regressions_json _json
