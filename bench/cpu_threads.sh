#!/usr/bin/env bash
# bench/cpu_threads.sh -- two threads against one on this machine's first two
# cores, ours (bench_convlstm.R) and PyTorch's (bench_torch.py) at the same
# model, quiet and then beside a busy core, with each side's OpenMP regions
# per step counted from outside (bench/omp_regions.c, LD_PRELOAD). Issue 39
# item 5; the figures are in doc/speed.md ("Two threads").
#
#   bash bench/cpu_threads.sh [--model=forecaster|tutorial|plain] [--batch=N]
#                             [--steps=3] [--rounds=2] [--busy=1] [--corun=1]
#
# Quiet: one thread on core 0 and two on cores 0-1 (under libgomp's default
# wait policy and under OMP_WAIT_POLICY=passive), the sides alternated
# `rounds` times, each keeping its best median. With --corun=1, each round
# also runs two one-thread processes at once, one on core 0 and one on core
# 1: nothing is shared but the machine (no team, no barrier), so 2 x (one
# thread alone) / (the pair's mean median) is the most two threads can gain
# here, the ceiling against which the two-thread speed-up is read. Busy (--busy=1): a shell
# loop spinning on core 1 the whole time, and two threads on cores 0-1 under
# libgomp's default wait policy, OMP_WAIT_POLICY=passive and =active. It
# needs the package installed (make install) and Debian's python3-torch
# (PYTHON, default /usr/bin/python3); it is a benchmark, not a test.
# Each round starts with tests/c/bench_core_pair.c at 768 KiB on cores 0-1:
# how much slower one core reads a buffer the other has just written than
# its writer does. On a VM whose two vCPUs the host moves between cores
# that share an L3 and cores that do not, this says which the round ran on
# (doc/speed.md, "Two threads on a Zen 5 core pair"), and the round's own
# figures follow it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
RSCRIPT=${RSCRIPT:-Rscript}
model=forecaster; batch=; steps=3; rounds=2; busy=1; corun=0
for a in "$@"; do
  case $a in
    --model=*) model=${a#*=} ;;
    --batch=*) batch=${a#*=} ;;
    --steps=*) steps=${a#*=} ;;
    --rounds=*) rounds=${a#*=} ;;
    --busy=*) busy=${a#*=} ;;
    --corun=*) corun=${a#*=} ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
case $model in
  tutorial) batch=${batch:-100} ;;
  forecaster | plain) batch=${batch:-4} ;;
  *) echo "unknown model: $model (tutorial, forecaster or plain)" >&2; exit 2 ;;
esac
[ "$(nproc --all)" -ge 2 ] || { echo "cpu_threads.sh: needs two cores" >&2; exit 2; }

shim=$(mktemp -d)/omp_regions.so
cc -O2 -shared -fPIC "$here/omp_regions.c" -o "$shim" -ldl
pairb=$(dirname "$shim")/bench_core_pair
cc -std=c11 -O2 -fopenmp -I"$here/../inst/include" "$here/../tests/c/bench_core_pair.c" -o "$pairb"
# the cross read's other / own at 768 KiB, on cores 0-1
handoff() { taskset -c 0-1 "$pairb" 768 | awk '$1 == "cross" && $3 == "read" { print $6 }'; }
spin=
cleanup() { [ -n "$spin" ] && kill "$spin" 2>/dev/null; rm -rf "$(dirname "$shim")"; }
trap cleanup EXIT

# side threads steps warmup [env...]: the RESULT line's median (s/step);
# one thread runs on core $at (0 unless set), more on cores 0 to t - 1
one() {
  local side=$1 t=$2 n=$3 w=$4; shift 4
  local cores=${at:-0}; [ "$t" -gt 1 ] && cores=0-$((t - 1))
  local cmd=("$RSCRIPT" "$here/bench_convlstm.R")
  [ "$side" = torch ] && cmd=("$PYTHON" "$here/bench_torch.py")
  env OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" OPENBLAS_NUM_THREADS=1 "$@" \
    taskset -c "$cores" "${cmd[@]}" --steps="$n" --warmup="$w" --threads="$t" \
    --batch="$batch" --model="$model" 2>&1
}
median() { sed -n 's/^RESULT .*median=\([0-9.]*\).*/\1/p'; }
regions() { sed -n 's/^omp_regions: \([0-9]*\) regions.*/\1/p' | sort -n | tail -n 1; }
best() { printf '%s\n' "$@" | sort -g | head -n 1; }
# side steps: one-thread runs on core 0 and on core 1 at once; the mean of
# their medians and the larger
pair() {
  local f0 f1 pid
  f0=$(mktemp); f1=$(mktemp)
  at=0 one "$1" 1 "$2" 1 > "$f0" &
  pid=$!
  at=1 one "$1" 1 "$2" 1 > "$f1"
  wait "$pid"
  local m0 m1
  m0=$(median < "$f0"); m1=$(median < "$f1")
  rm -f "$f0" "$f1"
  awk -v a="$m0" -v b="$m1" 'BEGIN { printf "%.4f %s\n", (a + b) / 2, (a + 0 > b + 0 ? a : b) }'
}

echo "cpu_threads.sh: $model, batch $batch, $steps steps per timing, $(date -u +%Y-%m-%dT%H:%MZ)," \
  "commit $(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo '?')"
echo "cpu: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)"

echo "regions per step (two threads; counted over 3 steps less 1 step):"
for side in ours torch; do
  r1=$(one "$side" 2 1 1 LD_PRELOAD="$shim" | regions)
  r3=$(one "$side" 2 3 1 LD_PRELOAD="$shim" | regions)
  echo "  $side: $(((r3 - r1) / 2))"
done

declare -A q
echo "rounds (medians, s/step; handoff: bench_core_pair's cross read at 768 KiB," \
  "other core / own, before and after the round):"
for ((r = 1; r <= rounds; r++)); do
  h=$(handoff)
  line="  round $r: handoff $h;"
  for side in ours torch; do
    for t in 1 2; do
      m=$(one "$side" "$t" "$steps" 1 | median)
      q[$side$t]+=" $m"; line+=" $side $t thread(s) $m"
    done
    line+=";"
    q[${side}p]+=" $(one "$side" 2 "$steps" 1 OMP_WAIT_POLICY=passive | median)"
    if [ "$corun" = 1 ]; then
      read -r mean worst < <(pair "$side" "$steps")
      q[${side}c]+=" $mean"; q[${side}w]+=" $worst"
    fi
  done
  echo "$line handoff after $(handoff)"
done
echo "quiet, best median of $rounds (s/step):"
for side in ours torch; do
  b1=$(best ${q[${side}1]}); b2=$(best ${q[${side}2]}); bp=$(best ${q[${side}p]})
  echo "  $side: 1 thread $b1, 2 threads $b2, speed-up $(echo "$b1 / $b2" | bc -l | cut -c1-5);" \
    "2 threads under OMP_WAIT_POLICY=passive $bp, speed-up $(echo "$b1 / $bp" | bc -l | cut -c1-5)"
  [ "$corun" = 1 ] || continue
  bc_=$(best ${q[${side}c]}); bw=$(best ${q[${side}w]})
  awk -v s="$side" -v t1="$b1" -v t2="$b2" -v c="$bc_" -v w="$bw" 'BEGIN {
    printf "  %s: two one-thread runs at once (cores 0 and 1): mean median %s, slower %s;", s, c, w
    printf " ceiling 2 x %s / %s = %.3f, the two-thread speed-up %.3f of it\n", t1, c, 2 * t1 / c,
      (t1 / t2) / (2 * t1 / c) }'
done

[ "$busy" = 1 ] || exit 0
taskset -c 1 sh -c 'while :; do :; done' &
spin=$!
echo "beside a busy core 1 (a shell loop), 2 threads on cores 0-1 (s/step; x: over quiet 2 threads):"
for side in ours torch; do
  b2=$(best ${q[${side}2]})
  for policy in default passive active; do
    env=(); [ "$policy" != default ] && env=(OMP_WAIT_POLICY="$policy")
    s=$(one "$side" 2 "$steps" 1 "${env[@]}" | median)
    echo "  $side, wait policy $policy: $s ($(echo "$s / $b2" | bc -l | cut -c1-5)x)"
  done
done
