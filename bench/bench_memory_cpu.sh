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
# the growth in MiB from a line "... VmHWM growth X MiB ..."
growth() { sed -n 's/.*VmHWM growth \([0-9.]*\) MiB.*/\1/p'; }
cpu() { sed -n 's/.*CPU \([0-9.]*\) s.*/\1/p'; }
summary=""
for b in ${@:-2 4}; do
  ours=$(Rscript "$here/bench_memory_cpu.R" "$config" "$b") || exit 1
  torch=$("${PYTHON:-/usr/bin/python3}" "$here/bench_memory_cpu.py" "$config" "$b") || exit 1
  printf '%s\n%s\n' "$ours" "$torch"
  summary="$summary$(printf '%s %s %s %s %s %s' "$config" "$b" \
    "$(echo "$ours" | growth | head -1)" "$(echo "$torch" | growth)" \
    "$(echo "$ours" | cpu | head -1)" "$(echo "$torch" | cpu)")
"
done
echo "config batch | VmHWM growth MiB ours torch ratio | CPU s ours torch ratio"
printf '%s' "$summary" | awk '{printf "%s %s | %.1f %.1f %.2f | %.2f %.2f %.2f\n",
  $1, $2, $3, $4, $3 / $4, $5, $6, $5 / $6}'
