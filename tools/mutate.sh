#!/bin/sh
# tools/mutate.sh -- mutation testing: plants each single-point bug of
# tests/mutate/mutants.tsv, one at a time, in a scratch copy of the tree
# (never the working tree), rebuilds, runs the tests that should catch it and
# prints a table of which were killed and which survived.
#
#   tools/mutate.sh [-k] [ID ...]          # all mutants, or only these ids (in that order)
#
# A host, core or CPU-backend mutant (src/host/, src/core/, src/cpu/) rebuilds the standalone
# library (src/Makefile.standalone, CUDA=0: only the mutated file recompiles)
# and runs the C suite, the fastest tests first (by their baseline time) and
# test_backend_ops last (first for a src/cpu/ or src/host/ mutant: the backend's own
# reference), stopping at the first failure. An R-glue or R mutant (src/r_*.c, R/)
# reinstalls the scratch copy into a scratch library (R CMD INSTALL,
# incremental) and runs the testthat files named in its row; so does a core
# mutant the C suite lets through when its row names testthat files (a line
# only several processes reach). The scratch copy is installed once
# unmutated, configured and compiled in place, and its objects (src/*.o,
# the .so) stay there: a glue mutant recompiles its one file; an R mutant
# (R/) reinstalls with those objects as they are, without configure (its
# src/Makevars is the unmutated install's), help, demos, staging or
# byte-compiling the R code (MUTATE_R_BYTE_COMPILE=1 keeps it): 3 s where
# the incremental reinstall took 16 (on a loaded machine; doc/testing.md).
# Without a core or backend mutant among those run, the standalone library
# and the C suite's baseline are skipped; the unmutated tree's testthat
# files that must pass first are those of the mutants run. A mutant whose
# snippet is not found exactly once in its file is "stale" (re-anchor it: the
# code moved), one that does not compile "broken"; neither counts as killed.
#
# Environment: MUTATE_TIMEOUT (seconds per test program or testthat file,
# default 600; a C test also gets three times its baseline time and a minute,
# if that is longer), MUTATE_DIR (the scratch copy; default a new folder under
# /tmp, removed at the end unless -k), MUTATE_OUT (the results, tab-separated;
# default MUTATE_DIR/results.tsv), MUTATE_BACKEND_OPS_ARGS (arguments for
# test_backend_ops, e.g. "-b blas": one backend family, when time is short;
# default: every backend), MUTATE_R_LIB (where R mutants are installed;
# default MUTATE_DIR/lib), MUTATE_R_BYTE_COMPILE (1: byte-compile an R
# mutant's code as a full install does; default 0). It needs cc, make,
# python3 (for the exact replacement) and, for R mutants, R with testthat.
# Runs under nice.
#
# The list (tests/mutate/mutants.tsv): one mutant a line, tab-separated:
#   id  class  file  original  replacement  [testthat files, comma-separated]
# `original` is an exact snippet of one line of the file, unique in it;
# `replacement` replaces it. Lines starting with # are comments.
set -u
keep=0
if [ "${1:-}" = "-k" ]; then keep=1; shift; fi
root=$(cd "$(dirname "$0")/.." && pwd)
list="$root/tests/mutate/mutants.tsv"
timeout_s=${MUTATE_TIMEOUT:-600}
work=${MUTATE_DIR:-$(mktemp -d /tmp/convlstm-mutate.XXXXXX)}
out=${MUTATE_OUT:-$work/results.tsv}
rm -f "$work/baseline.times"
rlib=${MUTATE_R_LIB:-$work/lib}
scratch="$work/tree"
build="$work/build"
log="$work/log"
mkdir -p "$scratch" "$build" "$log" "$rlib"

# The scratch copy: tracked and untracked (not ignored) files of the tree.
# one tar reads the whole list (xargs would split a long one into several
# archives, and tar xf stops at the first one's end: files went missing)
( cd "$root" && git ls-files -z --cached --others --exclude-standard |
    tar cf - --null -T - 2>/dev/null ) | ( cd "$scratch" && tar xf - )
mkdir -p "$work/pristine"
( cd "$scratch" && tar cf - src R ) | ( cd "$work/pristine" && tar xf - )

# The mutants to run (ids given: in their order, the cheap ones first when
# time is short), and whether any needs the standalone build and the C suite.
tab=$(printf '\t')
grep -v '^#' "$list" | grep -v '^[[:space:]]*$' >"$work/list.all"
if [ $# -gt 0 ]; then
  for id in "$@"; do grep "^$id$tab" "$work/list.all"; done >"$work/list.tsv"
else
  cp "$work/list.all" "$work/list.tsv"
fi
need_c=0
if cut -f3 "$work/list.tsv" | grep -v '^src/r_[^/]*\.c$' | grep -v '^src/init\.c$' |
  grep -v '^R/' | grep -q .; then
  need_c=1
fi

make_lib() {
  CONVLSTM_NO_CUDA=1 nice make -s -C "$scratch/src" -f Makefile.standalone BUILD="$build" \
    CUDA=0 "$@"
}

if [ $need_c -eq 1 ]; then
  echo "mutate: scratch tree $scratch; building the standalone library and the C tests"
  if ! make_lib all >"$log/build.log" 2>&1; then
    echo "mutate: the unmutated tree does not build (see $log/build.log)" >&2
    exit 2
  fi
else
  echo "mutate: scratch tree $scratch; R and glue mutants only: no standalone build, no C suite"
fi

# The C suite, fast tests first, test_backend_ops last; stops at the first
# failure. Prints the failing test's name (or nothing) and returns 1 on one.
c_suite() {
  tag=$1
  tests=$(ls "$build"/test_* | grep -v '\.d$' | grep -v '/test_backend_ops$')
  if [ -s "$work/baseline.times" ]; then # after the baseline: the fastest first
    tests=$(sort -n -k2 "$work/baseline.times" | grep -v '^test_backend_ops ' |
      while read -r n _; do echo "$build/$n"; done)
  fi
  # a backend mutant meets the backend's own reference test first
  case ${2:-} in
    src/cpu/*|src/host/*) tests="$build/test_backend_ops $tests" ;;
    *) tests="$tests $build/test_backend_ops" ;;
  esac
  for t in $tests; do
    [ -x "$t" ] || continue
    name=$(basename "$t")
    args=""
    # -x: it stops at the first failed check (the baseline runs it whole)
    [ "$name" = test_backend_ops ] && args="-x ${MUTATE_BACKEND_OPS_ARGS:-}"
    # a mutant may hang: three times the baseline's time (and a minute), at
    # least MUTATE_TIMEOUT
    lim=$timeout_s
    base=$(sed -n "s/^$name //p" "$work/baseline.times" 2>/dev/null)
    [ -n "$base" ] && [ $((3 * base + 60)) -gt "$lim" ] && lim=$((3 * base + 60))
    [ "$tag" = baseline ] && lim=$((lim > 3600 ? lim : 3600))
    t0=$(date +%s)
    ( cd "$scratch" && nice timeout "$lim" "$t" $args ) </dev/null >"$log/$tag.$name.log" 2>&1
    rc=$?
    [ "$tag" = baseline ] && echo "$name $(( $(date +%s) - t0 ))" >>"$work/baseline.times"
    if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
      [ $rc -eq 124 ] && echo "$name(timeout)" || echo "$name"
      return 1
    fi
  done
  return 0
}

# r_install TAG [FILE]: the scratch copy into the scratch library. For a
# mutant in R/ the objects built by the unmutated install are reused as they
# are (make finds nothing to do), configure is not run again, no help or
# demos are installed (no test reads them), the install is not staged (the
# library is the script's own) and the R code is not byte-compiled unless
# MUTATE_R_BYTE_COMPILE=1.
r_install() {
  fast=""
  case ${2:-} in
    R/*)
      fast="--no-configure --no-html --no-help --no-demo --no-staged-install"
      [ "${MUTATE_R_BYTE_COMPILE:-0}" = 1 ] || fast="$fast --no-byte-compile"
      ;;
  esac
  CONVLSTM_NO_CUDA=1 nice R CMD INSTALL --no-docs --no-multiarch --no-test-load $fast \
    -l "$rlib" "$scratch" </dev/null >"$log/$1.install.log" 2>&1
}

# testthat files, comma-separated; prints the first failing one
r_suite() {
  tag=$1
  files=$2
  for f in $(echo "$files" | tr ',' ' '); do
    ( cd "$scratch" && R_LIBS="$rlib" NOT_CRAN=true nice timeout "$timeout_s" Rscript -e "
      r <- as.data.frame(testthat::test_file('tests/testthat/$f', package = 'convlstm',
        load_package = 'installed', reporter = 'summary'))
      quit(status = if (sum(r\$failed) + sum(r\$error) > 0) 1 else 0)" ) \
      </dev/null >"$log/$tag.$f.log" 2>&1 || { echo "$f"; return 1; }
  done
  return 0
}

# run_r ID FILE ORIGINAL REPLACEMENT TESTS: the planted tree installed into
# the scratch library (the unmutated one first, once, whose testthat files
# must all pass), then TESTS; sets result and by
run_r() {
  if [ $r_ready -eq 0 ]; then
    restore "$2"
    r_install base || { echo "mutate: R install of the unmutated tree failed" >&2; exit 2; }
    # every testthat file the mutants run name must pass without a mutant
    all=$(cut -f6 "$work/list.tsv" | tr ',' '\n' | grep . | sort -u | tr '\n' ',')
    if failed=$(r_suite base "$all"); then :; else
      echo "mutate: $failed fails without a mutant (see $log/base.$failed.log)" >&2
      exit 2
    fi
    r_ready=1
    apply "$1" "$2" "$3" "$4" >/dev/null
  fi
  if ! r_install "$1" "$2"; then
    result=broken
    by="R CMD INSTALL failed"
  elif by=$(r_suite "$1" "$5"); then
    result=SURVIVED
  else
    result=killed
  fi
}

# apply ID FILE ORIGINAL REPLACEMENT: "ok", "stale 0" or "stale N"
apply() {
  python3 - "$scratch/$2" "$3" "$4" <<'PY'
import sys
path, old, new = sys.argv[1:4]
src = open(path, encoding="utf-8").read()
n = src.count(old)
if n != 1:
    print("stale %d" % n)
    sys.exit(0)
open(path, "w", encoding="utf-8").write(src.replace(old, new))
print("ok")
PY
}

# The object of a core or backend .c file, in the standalone build.
obj_of() {
  case $1 in src/host/*.c|src/core/*.c|src/cpu/*.c) o=${1#src/}; echo "$build/obj/${o%.c}.o" ;; esac
}

# save the unmutated object before a mutant; restore puts it and the source
# back with their old times, so that the next mutant recompiles only its own
# file (and relinks the library from unmutated objects). A header goes back
# with a new time: what includes it recompiles.
save_obj() {
  o=$(obj_of "$1")
  [ -n "$o" ] && [ -f "$o" ] && cp -p "$o" "$work/saved.o"
}

restore() {
  # the R build's object of a C file (in the tree): made again next install
  case $1 in *.c) rm -f "$scratch/${1%.c}.o" ;; esac
  o=$(obj_of "$1")
  if [ -n "$o" ] && [ -f "$work/saved.o" ]; then
    cp -p "$work/pristine/$1" "$scratch/$1"
    cp -p "$work/saved.o" "$o"
    # newer than the library the mutant relinked, older than nothing it is
    # made from: the next build relinks the library from it (a header
    # mutant next, which recompiles no .c of the library, would otherwise
    # run against the last .c mutant's library)
    touch "$o"
    rm -f "$work/saved.o"
  else
    cp "$work/pristine/$1" "$scratch/$1"
    touch "$scratch/$1"
  fi
}

if [ $need_c -eq 1 ]; then
  echo "mutate: baseline (no mutant)"
  if failed=$(c_suite baseline); then :; else
    echo "mutate: the C suite fails without a mutant ($failed; see $log/baseline.*.log)" >&2
    exit 2
  fi
fi
r_ready=0

printf 'id\tclass\tfile\tresult\tby\n' >"$out"
printf '%-5s %-16s %-28s %-9s %s\n' id class file result "killed by"
# the list on fd 3, not stdin: R CMD INSTALL and Rscript read stdin, and a
# list they could read would end the run after the first R mutant
while IFS="$tab" read -r id class file orig repl rtests <&3; do
  start=$(date +%s)
  save_obj "$file"
  res=$(apply "$id" "$file" "$orig" "$repl")
  by=""
  case $res in
    stale*)
      result=stale
      by="snippet found ${res#stale } times"
      ;;
    *)
      case $file in
        src/r_*.c|src/init.c|R/*)
          run_r "$id" "$file" "$orig" "$repl" "${rtests:-}"
          ;;
        *)
          # the library, which the tests load at run time; a header mutant
          # rebuilds the tests too, since a test may include it itself (one
          # that only a test and a CUDA file include never reaches the
          # library of this CUDA=0 build)
          target=lib
          case $file in *.h) target=all ;; esac
          if ! make_lib $target >"$log/$id.build.log" 2>&1; then
            result=broken
            by="does not compile"
          elif by=$(c_suite "$id" "$file"); then
            result=SURVIVED
            # a core line the C suite cannot reach (data parallel: no MPI
            # in the standalone build) names the testthat files that can
            if [ -n "${rtests:-}" ]; then
              run_r "$id" "$file" "$orig" "$repl" "$rtests"
              [ "$result" = killed ] && by="$by (the C suite passes)"
            fi
          else
            result=killed
          fi
          ;;
      esac
      restore "$file"
      ;;
  esac
  secs=$(( $(date +%s) - start ))
  printf '%-5s %-16s %-28s %-9s %s (%ss)\n' "$id" "$class" "$file" "$result" "$by" "$secs"
  printf '%s\t%s\t%s\t%s\t%s\n' "$id" "$class" "$file" "$result" "$by" >>"$out"
done 3<"$work/list.tsv"
echo "mutate: $(grep -c "${tab}killed${tab}" "$out") killed, $(grep -c "${tab}SURVIVED${tab}" "$out") survived, $(grep -c "${tab}stale${tab}" "$out") stale, $(grep -c "${tab}broken${tab}" "$out") broken"
status=0
grep -q "${tab}SURVIVED${tab}\|${tab}stale${tab}\|${tab}broken${tab}" "$out" && status=1
if [ $keep -eq 0 ] && [ -z "${MUTATE_DIR:-}" ] && [ -z "${MUTATE_OUT:-}" ]; then
  rm -rf "$work"
else
  echo "mutate: results in $out, logs in $log"
fi
exit $status
