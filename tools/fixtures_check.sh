#!/bin/sh
# tools/fixtures_check.sh -- every fixture generator rerun into a temporary
# folder, and the result compared with the shipped fixtures
# (tests/testthat/fixtures) by tools/fixtures_diff.py: a generator that no
# longer runs, or no longer writes what the tests read, fails here
# (`make fixtures-check`, from .ci/run).
#
#   sh tools/fixtures_check.sh          (from the repository root; PYTHON, the
#                                        Python with torch, default /usr/bin/python3;
#                                        RSCRIPT for the R input writer)
#
# Where each generator writes, given its first argument:
#   tools/make_fixtures.py             the folder of fixtures/ itself (configs, dropout/)
#   tools/make_fixtures_NAME.py        fixtures/NAME (forecast, peephole, bf16, ... any new one)
#   tools/make_training_fixtures.py    fixtures/training
#   tools/make_lr_fixtures.py          fixtures/lr_schedules/schedules.csv (a file)
#   tools/make_tutorial_inputs.R       fixtures/tutorial/inputs (R, the package installed)
#   tools/make_tutorial_fixtures.py    fixtures/tutorial/torch (from the shipped inputs)
# Every shipped folder with a manifest.txt must come back. The generators
# run side by side (each single-threaded); each one's time is printed.
set -u
cd "$(dirname "$0")/.." || exit 2
py=${PYTHON:-/usr/bin/python3}
rscript=${RSCRIPT:-Rscript}
fx=tests/testthat/fixtures
tmp=$(mktemp -d "${TMPDIR:-/tmp}/convlstm-fixtures.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT
out=$tmp/fixtures
mkdir -p "$out/lr_schedules"
status=0

if ! "$py" -c 'import torch' >/dev/null 2>&1; then
  echo "fixtures-check: $py cannot import torch (Debian: apt-get install python3-torch)"
  exit 1
fi

# Each generator in the background (they are single-threaded: torch uses
# one thread), its log and its status in $tmp; all awaited before the diff.
run() {
  name=$1
  shift
  (
    t0=$(date +%s)
    "$@" > "$tmp/$name.log" 2>&1
    rc=$?
    echo "$rc $(( $(date +%s) - t0 ))" > "$tmp/$name.status"
  ) &
}

run make_fixtures "$py" tools/make_fixtures.py "$out"
for g in tools/make_fixtures_*.py; do
  [ -f "$g" ] || continue
  name=$(basename "$g" .py)
  run "$name" "$py" "$g" "$out/${name#make_fixtures_}"
done
run make_training_fixtures "$py" tools/make_training_fixtures.py "$out/training"
run make_lr_fixtures "$py" tools/make_lr_fixtures.py "$out/lr_schedules/schedules.csv"
run make_tutorial_inputs "$rscript" tools/make_tutorial_inputs.R "$out/tutorial/inputs"
run make_tutorial_fixtures "$py" tools/make_tutorial_fixtures.py "$out/tutorial/torch"
wait
for f in "$tmp"/*.status; do
  name=$(basename "$f" .status)
  read -r rc secs < "$f"
  if [ "$rc" -eq 0 ]; then
    echo "fixtures-check: $name (${secs}s)"
  else
    echo "fixtures-check: $name FAILED (exit $rc, ${secs}s):"
    tail -n 20 "$tmp/$name.log"
    status=1
  fi
done

"$py" tools/fixtures_diff.py "$fx" "$out" || status=1
exit $status
