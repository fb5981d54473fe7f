#!/usr/bin/env bash
# tools/device/gpu_session.sh -- the GPU checks and benchmark of issue 4 as ONE
# command for the device machine (see tools/device/README.md), each stage
# bounded in time so that the whole fits one call of at most 8 minutes
# (timeout_s 480; a session has 15 minutes of device time in all, start-up
# included).
#
#   bash tools/device/gpu_session.sh [STAGE...]      (from the repository root)
#
# Stages, run in the order given (default, the one call: info build ctest checks
# ab profile bench; a second call, only when time is left: rinstall rtest roverlap sanitize):
#   info      nvidia-smi, nvcc, PyTorch, cuDNN, compilers, R: what the machine is
#   build     the standalone library with CUDA (make -C src -f Makefile.standalone),
#             against PyTorch's pip cuDNN, for this GPU's architecture only; from
#             clean when the flags differ from the last build's (build/.gpu-flags:
#             make alone would keep objects built for another GPU or cuDNN)
#   ctest     the C tests (tests/c/run.sh build); build/test_backend_ops runs every
#             backend slot on the CPU and on CUDA against the same C references
#   sanitize  build/test_backend_ops -b cuda (its CUDA backends) under
#             compute-sanitizer memcheck
#   rinstall  R CMD INSTALL into build/rlib (R from .rt/setup.sh, see pack-r.sh)
#   rtest     the testthat suite against that installation, GPU tests included
#   roverlap  bench/bench_overlap.R --device=cuda --part=arrays: a GPU fit on R
#             arrays, the next batch sliced while the step runs on its own
#             thread, against slicing at each step and the data set on the
#             device (issue 36)
#   checks    bench/gpu/bench_gpu.py --checks --layout (parity with PyTorch,
#             the plan against the driver's measured bytes, the allocator's
#             counters, inference peak vs T, OOM recovery, the runtime line)
#   ab        bench/gpu/bench_gpu.py --ab: each runtime switch of our backend
#             (its AB_SWITCHES table) timed against the default on our step,
#             float32 (TF32) and float16, with the losses of both; ab.json
#   profile   bench/gpu/profile_gpu.py (kernels by GPU time, ours and PyTorch's,
#             mnist64) twice: --math default (TF32) and --math strict
#   bench     bench/gpu/bench_gpu.py --bench --math default, for the time that is
#             left (BENCH_MODES for others: --max-batch, both maths)
#
# Before any stage, where nvidia-smi lists a GPU, the driver is checked
# against the CUDA toolkit that builds (check_driver): a driver whose CUDA
# major version is below the toolkit's cannot run anything built, and the
# session stops there with both versions named.
#
# It is not CI (CI has no GPU) and installs nothing outside the checkout and
# /tmp. Without a GPU the stages that need one say "skipped" (bench then runs
# the harness's --cpu-smoke instead), which is how it is tested off the GPU.
#
# Environment:
#   OUT         where results go (the device tool's $OUT; default ./gpu-out).
#               At most 8 files come back from the device, so it holds only
#               summary.txt, session.log, results.json, results.csv (bench),
#               checks.json, ab.json, and logs.tar.gz with one log per stage. What they
#               show is written up in doc/gpu.md ("On a GPU: what ran and what
#               it measured") and the GPU row of README.md's "What it measured".
#   BUDGET_S    seconds for the whole run (default 450: a call's timeout_s 480
#               less the time to pack up)
#   DRY_RUN=1   print each stage's commands instead of running them (the driver
#               check and the build's flags stamp still run: they only read)
#   PYTHON      the Python with torch (default: python3 if it imports torch,
#               else /usr/bin/python3)
#   BENCH_MODES the bench stage's modes (default "--bench --math default"; e.g.
#               "--max-batch" for a second call when time is left)
#   PROFILE_ARGS arguments for profile_gpu.py (default "--configs mnist64
#               --dtypes float32,float16 --steps 3")
#   AB_ARGS     extra arguments for bench_gpu.py in the ab stage (e.g. "--configs mnist64")
#   BENCH_ARGS  extra arguments for bench_gpu.py in the bench stage
#               (e.g. "--configs mnist64 --dtypes float32 --no-compile")
#   CTESTS      the ctest stage runs only these tests (e.g. "test_cuda_graphs"), not
#               tests/c/run.sh's all and the timings after them
#   JOBS        parallel make jobs (default: nproc)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
SELF="$ROOT/tools/device/gpu_session.sh"
cd "$ROOT" || exit 2
OUT=${OUT:-$ROOT/gpu-out}
BUDGET_S=${BUDGET_S:-450}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 4)}
LOGDIR=${LOGDIR:-/tmp/convlstm-gpu-logs}
RLIB=$ROOT/build/rlib
export PYTHONUNBUFFERED=1 NOT_CRAN=true
# nvcc and compute-sanitizer, where the image has them but PATH does not
export PATH="$PATH:${CUDA_HOME:-/usr/local/cuda}/bin"

# Stage caps in seconds: what each may take at most, if the budget allows.
# On the H200 (issue 24) info build ctest checks bench took 290 s together.
cap_of() {
  case $1 in
    info) echo 30 ;; build) echo 200 ;; ctest) echo 180 ;; sanitize) echo 180 ;;
    rinstall) echo 300 ;; rtest) echo 400 ;; roverlap) echo 120 ;; checks) echo 200 ;;
    profile) echo 90 ;;
    ab) echo 90 ;;
    bench) echo 100000 ;;
    *) echo 60 ;;
  esac
}

have_gpu() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; }

pick_python() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"; return; fi
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null 2>&1 && "$p" -c 'import torch' >/dev/null 2>&1; then
      echo "$p"; return
    fi
  done
  echo python3
}

# A folder laid out as Makefile.standalone and configure expect
# (include/cudnn.h, lib/libcudnn.so), pointing at PyTorch's pip cuDNN (whose
# wheel ships only versioned names), so that our library and PyTorch use the
# same cuDNN in one process. Headers: the wheel's, else a carried .cudnn/include
# (README.md), else CUDA's. Prints CUDNN_HOME, or nothing.
cudnn_home() {
  if [ -n "${CUDNN_HOME:-}" ]; then echo "$CUDNN_HOME"; return; fi
  local py pip inc shim so d
  py=$(pick_python)
  pip=$("$py" -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null)
  if [ -n "$pip" ] && ls "$pip"/lib/libcudnn.so.[0-9]* >/dev/null 2>&1; then
    inc=""
    for d in "$pip/include" "$ROOT/.cudnn/include" /usr/local/cuda/include /usr/include; do
      if [ -e "$d/cudnn.h" ]; then inc=$d; break; fi
    done
    if [ -n "$inc" ]; then
      shim=/tmp/convlstm-cudnn
      mkdir -p "$shim/lib"
      ln -sfn "$inc" "$shim/include"
      for so in "$pip"/lib/libcudnn*.so*; do ln -sf "$so" "$shim/lib/"; done
      for so in "$pip"/lib/libcudnn.so.[0-9]*; do
        [ -e "$so" ] && ln -sf "$so" "$shim/lib/libcudnn.so" && break
      done
      echo "$shim"
      return
    fi
  fi
  for d in /usr/local/cuda /usr; do
    if [ -e "$d/include/cudnn.h" ]; then echo "$d"; return; fi
  done
}

# The cuDNN of the build on the loader's path too: cuDNN loads its engine
# libraries by name at run time.
use_cudnn() {
  local home
  home=$(cudnn_home)
  [ -n "$home" ] || return 0
  export LD_LIBRARY_PATH="$home/lib:$home/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# nvcc flags for the GPU in this machine (sm_XY plus its PTX), else sm_90;
# CUDA_GENCODE, where set, instead.
gencode() {
  [ -n "${CUDA_GENCODE:-}" ] && { echo "$CUDA_GENCODE"; return; }
  local cc
  cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -n 1 | tr -d ' .')
  case $cc in [0-9][0-9]*) ;; *) cc=90 ;; esac
  echo "-gencode arch=compute_$cc,code=sm_$cc -gencode arch=compute_$cc,code=compute_$cc"
}

# "13.0": the CUDA version nvidia-smi says the driver supports; "" without one.
driver_cuda() {
  nvidia-smi 2>/dev/null | grep -o 'CUDA Version: *[0-9][0-9.]*' | head -n 1 |
    grep -o '[0-9][0-9.]*$'
}

# "13.0": the toolkit's release (nvcc), the runtime our library links.
toolkit_cuda() {
  local nvcc=${CUDA_HOME:-/usr/local/cuda}/bin/nvcc
  command -v nvcc >/dev/null 2>&1 && nvcc=nvcc
  "$nvcc" --version 2>/dev/null | grep -o 'release [0-9][0-9.]*' | head -n 1 |
    grep -o '[0-9][0-9.]*$'
}

# The driver against the toolkit, first thing on a GPU machine. CUDA's minor
# version compatibility lets a 13.x runtime run on any 13.0 driver, so only
# an older major version is fatal; an older minor is reported (code that
# needs a newer driver's PTX JIT would fail later, with a clearer cause now).
check_driver() {
  if ! have_gpu; then
    echo "driver check: no GPU listed by nvidia-smi (stages needing one skip)"
    return 0
  fi
  local drv ver tk
  drv=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)
  ver=$(driver_cuda)
  tk=$(toolkit_cuda)
  echo "driver check: driver $drv supports CUDA ${ver:-unknown}; toolkit (nvcc) CUDA ${tk:-none}"
  [ -n "$ver" ] && [ -n "$tk" ] || return 0
  if [ "${ver%%.*}" -lt "${tk%%.*}" ]; then
    echo "DRIVER TOO OLD: driver $drv supports CUDA $ver, but the toolkit that builds is CUDA $tk:"
    echo "  nothing built with it can run here. Use a CUDA ${ver%%.*}.x toolkit (CUDA_HOME=...)"
    echo "  or a machine whose driver supports CUDA ${tk%%.*}."
    return 1
  fi
  if [ "${ver#*.}" -lt "${tk#*.}" ] 2>/dev/null && [ "${ver%%.*}" -eq "${tk%%.*}" ]; then
    echo "driver check: note: CUDA $tk runs on this $ver driver by minor version compatibility"
  fi
  return 0
}

# Build flags: CUDA_GENCODE and CUDNN_HOME and the toolkit select what the
# objects hold, but make rebuilds on sources only. The stamp of the last
# build's flags; a change means a clean build.
build_flags() { echo "CUDA=1 CUDNN_HOME=$1 CUDA_GENCODE=$(gencode) nvcc=$(toolkit_cuda)"; }

r_ready() {
  # sourced every time, also where R is already unpacked (a warm machine
  # keeps /usr/lib/R between calls, not this process's LD_LIBRARY_PATH)
  if [ -f "$ROOT/.rt/setup.sh" ]; then
    # shellcheck disable=SC1091
    . "$ROOT/.rt/setup.sh" >/dev/null 2>&1
  fi
  # Debian writes /etc/R/Renviron from Renviron.ucf when it installs R, so an
  # unpacked runtime lacks it and R CMD stops ("cannot open .../Renviron")
  if [ -e /usr/lib/R/etc/Renviron.ucf ] && ! [ -e /etc/R/Renviron ]; then
    cp /usr/lib/R/etc/Renviron.ucf /etc/R/Renviron 2>/dev/null
  fi
  command -v Rscript >/dev/null 2>&1
}

# The whole suite (not stopping at the first failure), one line per file, and
# a total the summary can quote.
# shellcheck disable=SC2016
RTEST='library(convlstm); print(convlstm_gpu_info())
r <- as.data.frame(testthat::test_dir("tests/testthat", package = "convlstm",
  load_package = "installed", stop_on_failure = FALSE, reporter = "summary"))
cat(sprintf("testthat: %d expectations, %d failed, %d skipped, %d files with errors\n",
  sum(r$nb), sum(r$failed), sum(r$skipped), sum(r$error)))
quit(status = as.integer(sum(r$failed) + sum(r$error) > 0))'

# ---- one stage (run by the driver below, under `timeout`) ------------------

run_stage() {
  local stage=$1 py
  py=$(pick_python)
  case $stage in
  info)
    date -u
    git -C "$ROOT" log --oneline -1 2>/dev/null
    nvidia-smi || echo "no nvidia-smi: no GPU here"
    command -v nvcc >/dev/null 2>&1 && nvcc --version | tail -n 2
    [ -x /usr/local/cuda/bin/nvcc ] && /usr/local/cuda/bin/nvcc --version | tail -n 1
    "$py" - <<'PY'
import sys, torch
gpu = torch.cuda.is_available()
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "cudnn", torch.backends.cudnn.version() if gpu else None,
      "gpu", torch.cuda.get_device_name() if gpu else None)
PY
    echo "CUDNN_HOME for the build: $(cudnn_home)"
    echo "gencode: $(gencode)"
    gcc --version | head -n 1
    command -v compute-sanitizer || echo "no compute-sanitizer on PATH"
    if r_ready; then
      Rscript -e 'cat(R.version.string, "\n")'
    else
      echo "no R (pack .rt with tools/device/pack-r.sh)"
    fi
    nproc; free -g | head -n 2
    ;;
  build)
    local home
    home=$(cudnn_home)
    [ -n "$home" ] || { echo "no cuDNN found (CUDNN_HOME, PyTorch's nvidia.cudnn, /usr/local/cuda)"; return 1; }
    echo "CUDNN_HOME=$home"
    use_cudnn
    local flags stamp=build/.gpu-flags
    flags=$(build_flags "$home")
    if [ -d build/obj ] && [ "$(cat "$stamp" 2>/dev/null)" != "$flags" ]; then
      echo "build flags changed: was '$(cat "$stamp" 2>/dev/null || echo unknown)', now '$flags':" \
        "building from clean"
      make -C src -f Makefile.standalone clean
    fi
    make -C src -f Makefile.standalone -j"$JOBS" CUDA=1 CUDNN_HOME="$home" \
      CUDA_GENCODE="$(gencode)" && mkdir -p build && echo "$flags" > "$stamp"
    ;;
  ctest)
    use_cudnn
    # the conformance test's CPU variants run in CI; here its CUDA ones
    have_gpu && export CONVLSTM_REQUIRE_GPU=1 CONVLSTM_TEST_BACKENDS="${CONVLSTM_TEST_BACKENDS:-cuda}"
    [ -x build/test_backend_ops ] || { echo "build/test_backend_ops missing: run the build stage"; return 1; }
    sh tests/c/run.sh build || return 1
    [ -z "${CTESTS:-}" ] || return 0 # a rerun of some tests (run.sh reads CTESTS): no timings
    # what the host conversion of one batch costs on this machine's cores
    # (doc/gpu.md, "The host path's conversion"); seconds
    { build/bench_pack --reps=9 --threads=1; build/bench_pack --reps=9 --threads=0; } | tee "$OUT/bench_pack.txt"
    have_gpu || return 0
    # every convolution case with the cuDNN algorithm that ran it (in
    # logs.tar.gz), and how often each algorithm ran per direction
    build/test_backend_ops -v -b cuda > "$LOGDIR/backend_ops_cuda.log" 2>&1
    echo "cuDNN algorithms of the conformance test's convolution checks (count, variant, call):"
    sed -n 's/^[okFAIL ]* \[\(cuda.*\)\] [^:]*: \(forward\|backward data\|backward filter dw\)'\
'\( (float32 dx)\)\{0,1\} \([A-Z].*[^ ]\) *max abs.*/\1 | \2 | \4/p' \
      "$LOGDIR/backend_ops_cuda.log" | sort | uniq -c | sort -rn | head -n 40
    ;;
  sanitize)
    have_gpu || { echo "STAGE SKIPPED: no GPU"; return 0; }
    export CONVLSTM_REQUIRE_GPU=1
    command -v compute-sanitizer >/dev/null 2>&1 || { echo "STAGE SKIPPED: no compute-sanitizer"; return 0; }
    use_cudnn
    # the conformance test provokes out-of-memory on purpose: API errors are not faults
    compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 \
      build/test_backend_ops -b cuda
    ;;
  rinstall)
    r_ready || { echo "STAGE SKIPPED: no R (carry .rt made by tools/device/pack-r.sh)"; return 0; }
    local home
    home=$(cudnn_home)
    mkdir -p "$RLIB"
    use_cudnn
    CUDNN_HOME="$home" CONVLSTM_CUDA_GENCODE="$(gencode)" MAKEFLAGS="-j$JOBS" \
      R CMD INSTALL -l "$RLIB" . &&
      R_LIBS="$RLIB" Rscript -e 'library(convlstm); print(convlstm_gpu_info())'
    ;;
  rtest)
    r_ready || { echo "STAGE SKIPPED: no R"; return 0; }
    use_cudnn
    [ -d "$RLIB/convlstm" ] || { echo "no package in $RLIB: run the rinstall stage"; return 1; }
    # the ctest stage runs the C tests; test-c.R would build and run them
    # again inside this stage's cap
    CONVLSTM_C_TESTS="${CONVLSTM_C_TESTS:-skip}" R_LIBS="$RLIB" Rscript -e "$RTEST"
    ;;
  roverlap)
    r_ready || { echo "STAGE SKIPPED: no R"; return 0; }
    have_gpu || { echo "STAGE SKIPPED: no GPU"; return 0; }
    use_cudnn
    [ -d "$RLIB/convlstm" ] || { echo "no package in $RLIB: run the rinstall stage"; return 1; }
    R_LIBS="$RLIB" Rscript bench/bench_overlap.R --device=cuda --part=arrays --rounds=3
    ;;
  checks)
    use_cudnn
    if have_gpu; then
      "$py" bench/gpu/bench_gpu.py "$LOGDIR/checks" --checks --layout --configs tutorial,video64,mnist64,paper
    else
      echo "no GPU: the harness's checks at tiny sizes on the CPU instead"
      "$py" bench/gpu/bench_gpu.py "$LOGDIR/checks" --cpu-smoke --dtypes float32 --configs tutorial
    fi
    local rc=$?
    cp "$LOGDIR/checks/results.json" "$OUT/checks.json" 2>/dev/null
    return $rc
    ;;
  ab)
    have_gpu || { echo "STAGE SKIPPED: no GPU (make harness-check runs --ab in the CPU smoke)"; return 0; }
    use_cudnn
    # shellcheck disable=SC2086
    "$py" bench/gpu/bench_gpu.py "$LOGDIR/ab" --ab --math default --dtypes float32,float16 \
      --steps 10 --time-budget "${STAGE_BUDGET:-70}" ${AB_ARGS:-}
    local rc=$?
    cp "$LOGDIR/ab/results.json" "$OUT/ab.json" 2>/dev/null
    return $rc
    ;;
  profile)
    have_gpu || { echo "STAGE SKIPPED: no GPU (profile_gpu.py profiles CUDA kernels)"; return 0; }
    use_cudnn
    local m prc=0
    for m in default strict; do
      # shellcheck disable=SC2086
      "$py" bench/gpu/profile_gpu.py --math "$m" \
        ${PROFILE_ARGS:---configs mnist64 --dtypes float32,float16 --steps 3} || prc=1
    done
    return $prc
    ;;
  bench)
    use_cudnn
    local budget=${STAGE_BUDGET:-300}
    if have_gpu; then
      # shellcheck disable=SC2086
      "$py" bench/gpu/bench_gpu.py "$OUT" ${BENCH_MODES:---bench --math default} \
        --time-budget "$budget" ${BENCH_ARGS:-}
    else
      echo "no GPU: the harness's --cpu-smoke instead"
      "$py" bench/gpu/bench_gpu.py "$OUT" --cpu-smoke --time-budget "$budget"
    fi
    ;;
  *)
    echo "unknown stage '$stage'"; return 2 ;;
  esac
}

if [ "${1:-}" = "__stage" ]; then
  run_stage "$2"
  exit $?
fi

# ---- the driver ----------------------------------------------------------------

stages=("$@")
[ ${#stages[@]} -gt 0 ] || stages=(info build ctest checks ab profile bench)
mkdir -p "$OUT" "$LOGDIR"
t0=$(date +%s)
summary="$OUT/summary.txt"
session="$OUT/session.log"
: > "$session"
printf '%-9s %-8s %6s  %s\n' stage status secs note > "$summary"
failed=0
{
  echo "convlstm GPU session: stages ${stages[*]}; BUDGET_S=$BUDGET_S; OUT=$OUT"
  echo "python $(pick_python); CUDNN_HOME $(cudnn_home); $(gencode); GPU $(have_gpu && echo yes || echo no)"
} | tee -a "$session"
check_driver > "$LOGDIR/driver.log" 2>&1
drc=$?
tee -a "$session" < "$LOGDIR/driver.log"
if [ $drc -ne 0 ]; then
  printf '%-9s %-8s %6s  %s\n' driver FAIL 0 "driver older than the toolkit (session.log)" \
    >> "$summary"
  cat "$summary"
  exit 1
fi
for st in "${stages[@]}"; do
  left=$(( BUDGET_S - ($(date +%s) - t0) ))
  cap=$(cap_of "$st")
  [ "$cap" -gt $(( left - 10 )) ] && cap=$(( left - 10 ))
  if [ "$cap" -lt 15 ]; then
    printf '%-9s %-8s %6s  %s\n' "$st" skipped 0 "no time left in BUDGET_S=$BUDGET_S" >> "$summary"
    continue
  fi
  log="$LOGDIR/$st.log"
  echo "== $st (at most ${cap}s; $(( $(date +%s) - t0 ))s elapsed)" | tee -a "$session"
  if [ "${DRY_RUN:-0}" = 1 ]; then
    echo "DRY_RUN: timeout ${cap} $SELF __stage $st" | tee -a "$session"
    body=$(sed -n "/^  $st)/,/^    ;;/p" "$SELF")
    echo "$body" | tee -a "$session"
    # what CI can check without a GPU: the stage exists, and every script of
    # the repository it runs is there
    missing=""
    for f in $(echo "$body" | grep -o '\(bench\|tests\|tools\)/[A-Za-z0-9_/.-]*\.\(py\|sh\)' | sort -u); do
      [ -f "$ROOT/$f" ] || missing="$missing $f"
    done
    if [ -z "$body" ] || [ -n "$missing" ]; then
      note="unknown stage"
      [ -z "$missing" ] || note="missing:$missing"
      printf '%-9s %-8s %6s  %s\n' "$st" FAIL 0 "$note" >> "$summary"
      failed=1
    else
      printf '%-9s %-8s %6s  %s\n' "$st" dry-run 0 "" >> "$summary"
    fi
    continue
  fi
  s0=$(date +%s)
  # the bench harness stops starting measurements before its own deadline
  STAGE_BUDGET=$(( cap - 20 )) OUT="$OUT" LOGDIR="$LOGDIR" \
    timeout --kill-after=10 "$cap" bash "$SELF" __stage "$st" > "$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - s0 ))
  tail -n 40 "$log" >> "$session"
  note=$(grep -m1 -o 'STAGE SKIPPED: .*' "$log" | sed 's/^STAGE SKIPPED: //' | head -c 80)
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    status=timeout; failed=1
  elif [ $rc -ne 0 ]; then
    status=FAIL; failed=1
  elif [ -n "$note" ]; then
    status=skipped
  else
    status=ok
  fi
  printf '%-9s %-8s %6s  %s\n' "$st" "$status" "$secs" "$note" >> "$summary"
  echo "== $st: $status (rc $rc, ${secs}s)" | tee -a "$session"
  # the tail of a failed stage's log is where its reason is
  [ "$status" = ok ] || [ "$status" = skipped ] || tail -n 15 "$log"
done
tar -C "$LOGDIR" -czf "$OUT/logs.tar.gz" --exclude='*.json.tmp' . 2>/dev/null
echo "total $(( $(date +%s) - t0 ))s" >> "$summary"
cat "$summary"
exit $failed
