#!/usr/bin/env bash
# How near the CPU backend's convolutions run to this machine's FMA peak,
# beside PyTorch's at the same shapes (bench/cpu_shapes.tsv), on one thread
# and on two. `make bench-peak` runs it; it prints two markdown tables per
# thread count (per convolution, and per step weighted by calls).
# PYTHON: a python3 with torch (default: /usr/bin/python3, Debian's, which has
# python3-torch; the other bench scripts default to it too).
# Arguments: the thread counts (default: 1 2).
set -euo pipefail
cd "$(dirname "$0")/.."
make -s -C src -f Makefile.standalone ../build/bench_cpu_peak >/dev/null
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for t in "${@:-1 2}"; do
  for n in $t; do
    OMP_NUM_THREADS=$n build/bench_cpu_peak "$n" bench/cpu_shapes.tsv >"$out"
    "${PYTHON:-/usr/bin/python3}" bench/cpu_peak.py --threads "$n" --shapes bench/cpu_shapes.tsv --ours "$out"
    echo
  done
done
