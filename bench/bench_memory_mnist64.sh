#!/bin/sh
# bench/bench_memory_mnist64.sh -- the mnist64 model's memory, ours against
# PyTorch 1.13, in one invocation: for each batch a fresh R process and a
# fresh Python process (one thread each), the growth of the resident
# high-water mark over one training step, and our plan's largest buffers.
# Needs the package installed and Debian's python3-torch; not a test.
#
#   sh bench/bench_memory_mnist64.sh [BATCH ...]     (default: 2 4)
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
for b in ${@:-2 4}; do
  Rscript "$here/bench_memory_mnist64.R" "$b"
  "${PYTHON:-/usr/bin/python3}" "$here/bench_memory_mnist64.py" "$b"
done
