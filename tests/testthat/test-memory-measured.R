# Planned against measured: memory_estimate() (the plan) against what the
# operating system says the process holds (VmHWM, its resident high-water
# mark), each model in a fresh R process (scripts/hwm-probe.R says how the
# model is isolated from the R session's own allocations).

probe_env <- c(
  # glibc serves every block of 64 KiB and more as pages of its own, and
  # gives freed memory back: otherwise a block freed earlier in the session
  # (R's objects, the warm-up model) is reused in place, already resident,
  # and a buffer the plan names would cost no measurable page
  "MALLOC_MMAP_THRESHOLD_=65536",
  "OMP_NUM_THREADS=1"
)

run_probe <- function(a) {
  out <- tempfile()
  on.exit(unlink(out))
  lib <- dirname(find.package("convlstm"))
  rc <- system2(file.path(R.home("bin"), "Rscript"),
                c(shQuote(test_path("scripts", "hwm-probe.R")), shQuote(lib), shQuote(out), a),
                env = probe_env, stdout = FALSE, stderr = FALSE)
  if (rc != 0 || !file.exists(out)) stop("hwm-probe.R failed (exit ", rc, ") for ",
                                         paste(a, collapse = " "))
  kv <- strsplit(strsplit(readLines(out), " ")[[1]], "=")
  stats::setNames(suppressWarnings(as.numeric(vapply(kv, `[`, "", 2))), vapply(kv, `[`, "", 1))
}

# Random shapes and options: dtype, checkpoint, accumulation, tbptt, the
# training target, and inference keeping every output or the last states;
# the test adds the peepholes (none, per channel, per position).
random_case <- function() {
  mode <- sample(c("last_state", "sequence", "last_state", "infer_all", "infer_last"), 1)
  T <- sample(2:8, 1)
  B <- sample(1:6, 1)
  ck <- 0
  tb <- 0
  acc <- 1
  if (mode %in% c("last_state", "sequence")) {
    k <- sample(3, 1)
    if (k == 1) ck <- sample(seq_len(T), 1) else if (k == 2) tb <- sample(seq_len(T), 1)
    acc <- sample(seq_len(B), 1)
  }
  c(sample(1:3, 1), sample(c(4, 8, 16, 32), 1), sample(c(1, 3, 5), 1), B, T,
    sample(c(8, 16, 24, 48, 64), 1), sample(c(8, 16, 32, 64), 1),
    sample(c("float32", "float16", "bfloat16"), 1), ck, acc, tb, mode, 0)
}

# Random training steps over a horizon of K frames after T steps,
# teacher-forced (checkpoint or tbptt allowed) or free-running (neither):
# one input channel, the last layer's size, so that frames can be fed back.
# Drawn after random_case()'s cases, which stay those measured before.
rollout_case <- function(mode) {
  T <- sample(1:6, 1)
  B <- sample(1:6, 1)
  K <- sample(2:5, 1)
  ck <- 0
  tb <- 0
  if (mode == "roll_teacher") {
    k <- sample(3, 1)
    if (k == 1) ck <- sample(seq_len(T + K - 1), 1) else if (k == 2) tb <- sample(seq_len(T), 1)
  }
  c(1, sample(c(4, 8, 16, 32), 1), sample(c(1, 3, 5), 1), B, T,
    sample(c(8, 16, 24, 48, 64), 1), sample(c(8, 16, 32, 64), 1),
    sample(c("float32", "float16", "bfloat16"), 1), ck, sample(seq_len(B), 1), tb, mode, K)
}

# A training step of random_case()'s kind that recomputes its gates in
# backward (chunks of 1-3 steps). Drawn after the cases above.
recompute_case <- function() {
  repeat {
    a <- random_case()
    if (a[[12]] %in% c("last_state", "sequence")) return(c(a, "channel", sample(1:3, 1)))
  }
}

test_that("measured: the high-water mark grows by memory_estimate()'s total over creation and the first step, and not at a second step", {
  skip_on_cran()
  skip_on_os(c("windows", "mac", "solaris"))
  skip_if_not(file.exists("/proc/self/clear_refs"), "no /proc/self/clear_refs to reset VmHWM")
  ok <- tryCatch({
    writeLines("5", "/proc/self/clear_refs")
    TRUE
  }, error = function(e) FALSE, warning = function(w) FALSE)
  skip_if_not(ok, "cannot reset VmHWM through /proc/self/clear_refs here")
  # The bound, 1 % + 2 MiB: the measure counts pages (4 KiB), so each of the
  # plan's ~10-30 buffers may show up to a page more or less than its bytes;
  # buffers under 64 KiB come from the malloc heap, where they may share a
  # page already resident; R's interpreter allocates a few small objects of
  # its own in the window (the call, the loss). Measured (2026-11-22, 24
  # cases below): the largest gap was under 0.2 MiB, nothing above the plan.
  set.seed(20261122)
  gaps <- numeric(0)
  untouched_cases <- character(0)
  # 24 random cases, then three of each rollout training, then three
  # recomputing the gates; peepholes by the
  # case's number (the random draws stay as they were)
  rollouts <- rep(c("roll_teacher", "roll_free"), 3)
  for (i in seq_len(24 + length(rollouts) + 3)) {
    a <- if (i <= 24) random_case()
         else if (i <= 24 + length(rollouts)) rollout_case(rollouts[[i - 24]])
    # then three training steps recomputing their gates (peepholes per channel)
    a <- if (is.null(a)) recompute_case() else c(a, c("none", "channel", "position")[[i %% 3 + 1]])
    v <- run_probe(a)
    label <- paste(a, collapse = " ")
    measured <- v[["grow_create"]] + v[["grow_first"]]
    # what R holds of the result (a loss, or an inference forward's arrays)
    planned <- v[["total"]] + v[["result_bytes"]]
    # reserved pages the step never wrote cost nothing: counted apart
    untouched <- if (is.na(v[["untouched"]])) 0 else v[["untouched"]]
    if (untouched > 0) untouched_cases <- c(untouched_cases, sprintf("%s: %.0f KiB", label, untouched / 1024))
    gaps <- c(gaps, stats::setNames(measured + untouched - planned, label))
    expect_lte(abs(measured + untouched - planned), 0.01 * planned + 2 * 2^20, label = label)
    training <- !grepl("^infer", a[[12]]) # the mode (horizon and peephole follow it)
    if (training) {
      # zero from the model (tests/c/alloc_count.c counts its allocations
      # inside a step: none); a page or two of R's small-object heap for the
      # call and its loss may be new in the window. (hwm-probe.R reads smaps
      # after this window: read before it, the heap that reading grew could be
      # trimmed, and the step's small objects then touched 16-80 KiB anew.)
      expect_lte(v[["grow_second"]], 16384, label = paste("second step:", label))
    } else {
      # an inference forward returns new R arrays each time, nothing else
      expect_lte(v[["grow_second"]], v[["result_bytes"]] + 2^16,
                 label = paste("second forward:", label))
    }
  }
  message(sprintf("measured + untouched - planned over %d fresh processes: %.3f .. %.3f MiB (largest gap: %s)",
                  length(gaps), min(gaps) / 2^20, max(gaps) / 2^20, names(gaps)[which.max(abs(gaps))]))
  if (length(untouched_cases)) {
    message("arena pages planned but never touched by the first step: ",
            paste(untouched_cases, collapse = "; "))
  }
})
