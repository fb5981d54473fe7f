#!/bin/sh
# bench/bench_memory_cpu.sh -- a CPU config's memory, ours against PyTorch
# 1.13, in one invocation: for each batch a fresh R process and a fresh
# Python process (one thread each), the growth of the resident high-water
# mark over one training step, and our plan's largest buffers. Configs (as
# bench/gpu/bench_gpu.py's): mnist64 (1 -> 64, 64; 3x3; T 10; 64x64),
# video64 (3 -> 64; 3x3; T 10; 64x64), tutorial (1 -> 64, 1; 3x3; T 20;
# 24x24); Adam, MSE on the last layer's last state. Needs the package
# installed and Debian's python3-torch; not a test.
#
#   sh bench/bench_memory_cpu.sh [CONFIG [BATCH ...]]   (default: mnist64 2 4)
here=$(cd "$(dirname "$0")" && pwd)
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
config=${1:-mnist64}
[ $# -gt 0 ] && shift
for b in ${@:-2 4}; do
  Rscript "$here/bench_memory_cpu.R" "$config" "$b"
  "${PYTHON:-/usr/bin/python3}" "$here/bench_memory_cpu.py" "$config" "$b"
done
