#!/bin/sh
# tests/c/run_openblas.sh -- the memory tests under both kinds of BLAS an R
# user may have: the reference BLAS and OpenBLAS with threads (Debian:
# libblas3 and libopenblas0-pthread), each selected for this process only
# through the library path, so nothing the package links for users changes:
#
#   sh tests/c/run_openblas.sh BUILD_DIR        (after make ctest)
#   CONVLSTM_BLAS_R_TESTS=1 sh tests/c/run_openblas.sh BUILD_DIR
#
# Under each BLAS: test_step_allocs (no allocation above 64 KiB inside a
# training step, seen by the LD_PRELOAD counter) and test_gemm_rule, on 2
# OpenMP threads with OpenBLAS on OPENBLAS_NUM_THREADS (default 4) threads;
# then bench_step_bits' hex losses and parameter hashes, which must be the
# same file from both BLAS kinds and from a second process (the GEMM is a
# rule, not a race). With CONVLSTM_BLAS_R_TESTS=1 also the installed
# package's /proc high-water test (tests/testthat/test-memory-measured.R)
# under each BLAS (R reads R_LD_LIBRARY_PATH, not LD_LIBRARY_PATH).
# Exits 77 (skipped) when a BLAS is not installed, 1 on any failure.
set -u
if [ $# -lt 1 ]; then
  echo "usage: $0 BUILD_DIR" >&2
  exit 2
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "$1" && pwd) || exit 2
cd "$root" || exit 2

ref=${REFERENCE_BLAS_DIR:-$(ls -d /usr/lib/*/blas 2>/dev/null | head -n 1)}
obl=${OPENBLAS_PTHREAD_DIR:-$(ls -d /usr/lib/*/openblas-pthread 2>/dev/null | head -n 1)}
for d in "$ref" "$obl"; do
  if [ -z "$d" ] || [ ! -r "$d/libblas.so.3" ]; then
    echo "skip: needs the reference BLAS and OpenBLAS pthread"
    echo "      (Debian: apt-get install libblas3 libopenblas0-pthread)"
    exit 77
  fi
done
for t in test_step_allocs test_gemm_rule bench_step_bits; do
  [ -x "$build/$t" ] || { echo "FAIL: $build/$t not built (make ctest first)"; exit 1; }
done

export OMP_NUM_THREADS=2
status=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for kind in reference openblas-pthread; do
  dir=$ref
  [ $kind = reference ] || dir=$obl
  # the library the tests will load, as the dynamic linker resolves it
  got=$(LD_LIBRARY_PATH=$dir ldd "$build/libconvlstm.so" | awk '/libblas\.so/ {print $3}')
  case $got in
    "$dir"/*) echo "== $kind BLAS: $got" ;;
    *) echo "FAIL: $kind: libconvlstm.so loads '$got', not $dir"; status=1; continue ;;
  esac
  for t in test_step_allocs test_gemm_rule; do
    if LD_LIBRARY_PATH=$dir OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4} "$build/$t" \
      >"$tmp/$t.$kind.txt" 2>&1; then
      echo "ok   $t ($kind)"
    else
      cat "$tmp/$t.$kind.txt"
      echo "FAIL $t ($kind)"
      status=1
    fi
  done
  for run in 1 2; do
    LD_LIBRARY_PATH=$dir OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4} \
      "$build/bench_step_bits" >"$tmp/bits.$kind.$run.txt" 2>&1 || status=1
  done
  if [ "${CONVLSTM_BLAS_R_TESTS:-0}" = 1 ]; then
    if R_LD_LIBRARY_PATH=$dir OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-4} NOT_CRAN=true \
      Rscript -e 'cat("R BLAS:", extSoftVersion()[["BLAS"]], "\n")' \
        -e 'f <- "tests/testthat/test-memory-measured.R"' \
        -e 'r <- as.data.frame(testthat::test_file(f, package = "convlstm",' \
        -e '                                       load_package = "installed"))' \
        -e 'quit(status = as.integer(sum(r$failed) > 0 || any(r$error) || sum(r$skipped) > 0))'; then
      echo "ok   test-memory-measured.R ($kind)"
    else
      echo "FAIL test-memory-measured.R ($kind)"
      status=1
    fi
  fi
done
first="$tmp/bits.reference.1.txt"
for f in "$tmp"/bits.*.txt; do
  if ! cmp -s "$first" "$f"; then
    echo "FAIL bench_step_bits: $(basename "$f") differs from $(basename "$first")"
    diff "$first" "$f" | head -n 6
    status=1
  fi
done
[ $status -ne 0 ] || echo "ok   bench_step_bits: the same bits from 4 processes, both BLAS kinds"
exit $status
