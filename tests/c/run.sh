#!/bin/sh
# tests/c/run.sh -- runs every C unit test built by src/Makefile.standalone:
#
#   sh tests/c/run.sh BUILD_DIR [WRAPPER ARGS...]
#
# e.g. `sh tests/c/run.sh build` or `sh tests/c/run.sh build/valgrind valgrind -q`.
# Each BUILD_DIR/test_* executable runs from the repository root (so a test
# may read tests/c/... or tests/testthat/fixtures/... by relative path), and
# gets one status line after its output: "ok   NAME (Ns)", "skip NAME (Ns)"
# or "FAIL NAME (exit N, Ns)". A test that exits 77 (automake's convention)
# was skipped, and is reported as skipped, not passed. Every test runs, also
# after a failure; the exit status is then the first failed test's.
# (tests/testthat/test-c.R reads these lines.)
# It does not build anything and does not run the bench_* drivers.
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR [WRAPPER ARGS...]" >&2
  exit 2
fi
build=$1
shift
root=$(cd "$(dirname "$0")/../.." && pwd)
case $build in
  /*) ;;
  *) build=$(cd "$build" && pwd) ;;
esac
cd "$root" || exit 2

n=0
skipped=""
failed=""
status=0
# CTESTS="test_a test_b": only these (the GPU session's rerun of some)
list="$build/test_*"
[ -n "${CTESTS:-}" ] && list=$(for c in $CTESTS; do printf '%s/%s ' "$build" "$c"; done)
for t in $list; do
  [ -f "$t" ] && [ -x "$t" ] || continue
  case $t in *.d|*.o|*.c) continue ;; esac
  name=$(basename "$t")
  start=$(date +%s)
  "$@" "$t"
  rc=$?
  secs=$(( $(date +%s) - start ))
  if [ $rc -eq 77 ]; then
    echo "skip $name (${secs}s)"
    skipped="$skipped $name"
  elif [ $rc -ne 0 ]; then
    echo "FAIL $name (exit $rc, ${secs}s)"
    failed="$failed $name"
    [ $status -ne 0 ] || status=$rc
  else
    echo "ok   $name (${secs}s)"
    n=$((n + 1))
  fi
done
echo "C tests: $n passed${1:+ under $1}${skipped:+; skipped:$skipped}${failed:+; FAILED:$failed}"
exit $status
