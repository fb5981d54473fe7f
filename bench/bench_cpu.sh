#!/usr/bin/env bash
# bench/bench_cpu.sh -- one training step of the R torch tutorial's ConvLSTM
# (input 1x24x24, T = 5, hidden c(64, 1), kernels 3, batch 100, Adam, MSE on
# the last state) in this package and in PyTorch on the CPU, in one
# invocation, on the same cores and thread count, then a table: seconds per
# step (median), ratio ours/torch, peak memory. See bench/README.md for the
# method. It needs the package installed (make install) and Debian's
# python3-torch; it is a benchmark, not a test. --model=forecaster times
# Shi et al.'s encoder-forecaster instead (issue 34's shape: hidden 48-48,
# 5x5, 4x4 patches of 64x64 frames, 10 + 10 frames, batch 4 unless
# --batch, MSE over the forecast frames, Adam); --model=plain a plain stack
# where the convolutions are the work (issue 39's: 16 input channels,
# hidden 48-48, 5x5, 16x16 maps, 20 steps, batch 4 unless --batch, MSE over
# the top layer's sequence, Adam). --dtype sets our model's storage type
# (float16 and bfloat16 train with float32 sums); PyTorch's side stays
# float32, the baseline issue 39's bfloat16 target is stated against.
#
#   bash bench/bench_cpu.sh [--steps=10] [--warmup=2] [--threads=2] [--batch=100] [--rounds=1]
#                           [--model=tutorial|forecaster|plain] [--dtype=float32|bfloat16|float16]
#
# Environment: PYTHON (default /usr/bin/python3, which has torch), RSCRIPT,
# CORES (taskset list, default 0..threads-1).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
PYTHON=${PYTHON:-/usr/bin/python3}
RSCRIPT=${RSCRIPT:-Rscript}

steps=10; warmup=2; threads=2; batch=; rounds=1; model=tutorial; dtype=float32
for a in "$@"; do
  case $a in
    --steps=*) steps=${a#*=} ;;
    --warmup=*) warmup=${a#*=} ;;
    --threads=*) threads=${a#*=} ;;
    --batch=*) batch=${a#*=} ;;
    --rounds=*) rounds=${a#*=} ;;
    --model=*) model=${a#*=} ;;
    --dtype=*) dtype=${a#*=} ;;
    *) echo "unknown argument: $a" >&2; exit 2 ;;
  esac
done
case $model in
  tutorial) batch=${batch:-100}
    what="tutorial model: input 1x24x24, T=5, hidden c(64, 1), kernels 3, batch $batch, Adam, MSE(last state)" ;;
  forecaster) batch=${batch:-4}
    what="encoder-forecaster: 1x64x64 in 4x4 patches, 10 + 10 frames, hidden 48-48, kernels 5, batch $batch, Adam, MSE(forecast)" ;;
  plain) batch=${batch:-4}
    what="plain stack: input 16x16x16, T=20, hidden 48-48, kernels 5, batch $batch, Adam, MSE(sequence)" ;;
  *) echo "unknown model: $model (tutorial, forecaster or plain)" >&2; exit 2 ;;
esac
common=(--steps="$steps" --warmup="$warmup" --threads="$threads" --batch="$batch")

# Same cores and the same thread count on both sides.
CORES=${CORES:-$(seq -s, 0 $((threads - 1)))}
pin=()
if command -v taskset >/dev/null 2>&1 && [ "$(nproc --all)" -ge "$threads" ]; then
  pin=(taskset -c "$CORES")
fi
export OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1

results=()
for ((r = 1; r <= rounds; r++)); do
  results+=("$("${pin[@]}" "$RSCRIPT" "$here/bench_convlstm.R" "${common[@]}" --model="$model" --dtype="$dtype" | grep '^RESULT')")
  results+=("$("${pin[@]}" "$PYTHON" "$here/bench_torch.py" "${common[@]}" --model "$model" | grep '^RESULT')")
done

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
rev=$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo "?")
echo "convlstm CPU benchmark, $(date -u +%Y-%m-%d), commit $rev"
echo "  CPU: ${cpu:-unknown}; cores ${CORES} (${pin[*]:-no taskset}); $threads threads each"
echo "  $what; our storage $dtype, PyTorch float32"
echo "  median of $steps steps after $warmup warm-up steps; $rounds round(s), best median kept"
echo
printf '%s\n' "${results[@]}" | awk '
  function field(name,   i, kv) {
    for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] }
    return "nan"
  }
  function mib(b) { return (b == "nan" || b == "NA") ? "-" : sprintf("%.1f MiB", b / 1048576) }
  {
    impl = field("impl"); med = field("median") + 0
    if (!(impl in best) || med < best[impl]) {
      best[impl] = med; mn[impl] = field("min"); rss[impl] = field("rss_peak")
      alloc[impl] = field("alloc_peak"); res[impl] = field("reserved_peak")
      be[impl] = field("backend"); loss[impl] = field("loss")
    }
  }
  END {
    printf "%-22s %12s %12s %16s %28s   %s\n", "", "s/step", "min s/step", "peak RSS growth", "allocator peak", "backend"
    split("convlstm torch", order, " ")
    for (k = 1; k <= 2; k++) {
      i = order[k]; if (!(i in best)) continue
      printf "%-22s %12.4f %12.4f %16s %28s   %s\n", (i == "torch" ? "PyTorch" : i), best[i], mn[i],
             mib(rss[i]), (alloc[i] == "nan" || alloc[i] == "NA") ? "-" : mib(alloc[i]) " (res. " mib(res[i]) ")", be[i]
    }
    if (("convlstm" in best) && ("torch" in best) && best["torch"] > 0) {
      r = (rss["torch"] + 0 > 0 && rss["convlstm"] != "NA") ? sprintf("%.2f", rss["convlstm"] / rss["torch"]) : "-"
      printf "%-22s %12.2f %12s %16s\n", "ratio convlstm/torch", best["convlstm"] / best["torch"], "", r
    }
  }'
