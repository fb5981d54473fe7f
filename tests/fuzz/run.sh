#!/bin/sh
# tests/fuzz/run.sh -- builds the libFuzzer target for the model file loader
# (tests/fuzz/fuzz_safetensors.c over src/core and src/cpu, with
# AddressSanitizer and UndefinedBehaviorSanitizer) and runs it:
#
#   sh tests/fuzz/run.sh [SECONDS]     # default 60; fails on any crash
#   sh tests/fuzz/run.sh --seeds       # rewrite tests/fuzz/corpus/ (make_corpus.c)
#
# First every input in tests/fuzz/regressions/ (what the fuzzer once crashed
# on) runs once, then the fuzzer runs for SECONDS from tests/fuzz/corpus/ with
# the dictionary tests/fuzz/safetensors.dict. New inputs go to
# build/fuzz/corpus/ (not committed); a crashing input is kept in
# build/fuzz/crashes/ -- add it to tests/fuzz/regressions/ once fixed, and
# the C test test_core_safetensors feeds it to the loader from then on.
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
mkdir -p "$out/obj" "$out/corpus" "$out/crashes"

# No OpenMP (clang's would need libomp) and no BLAS: the loader is the target.
SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
CFLAGS="-std=c11 -O1 -g -Wall -Wextra -Isrc $SAN"
objs=""
for f in src/core/*.c src/cpu/*.c; do
  o="$out/obj/$(echo "$f" | tr / _).o"
  if [ ! -f "$o" ] || [ "$f" -nt "$o" ] || [ -n "$(find src/core src/cpu src/convlstm.h -newer "$o" -name '*.h' 2>/dev/null | head -n 1)" ]; then
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

$CC $CFLAGS -fsanitize=fuzzer tests/fuzz/fuzz_safetensors.c $objs -lm -o "$out/fuzz_safetensors"

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:symbolize=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

n_reg=0
for f in tests/fuzz/regressions/*; do
  [ -f "$f" ] || continue
  n_reg=$((n_reg + 1))
done
if [ "$n_reg" -gt 0 ]; then
  "$out/fuzz_safetensors" tests/fuzz/regressions/* >"$out/regressions.log" 2>&1 || {
    cat "$out/regressions.log"
    echo "fuzz: a regression input crashes again"
    exit 1
  }
fi

log="$out/fuzz.log"
rc=0
"$out/fuzz_safetensors" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=16384 \
  -dict=tests/fuzz/safetensors.dict -print_final_stats=1 \
  -artifact_prefix="$out/crashes/" "$out/corpus" tests/fuzz/corpus >"$log" 2>&1 || rc=$?
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | sed 's/cov: //')
if [ "$rc" -ne 0 ]; then
  tail -n 60 "$log"
  echo "fuzz: FAILED (exit $rc) after ${execs:-?} executions; input kept in $out/crashes/"
  exit 1
fi
echo "fuzz: ${execs:-?} executions in ${secs}s, coverage ${cov:-?} edges, $n_reg regression inputs, no crash"
