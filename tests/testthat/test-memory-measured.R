# Planned against measured: convlstm_memory_estimate() (the plan) against what the
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

# One case: a named list, each element a key=value argument of the probe
# (a vector comma-separated); the probe passes every key it does not know
# to convlstm(). Returns the probe's figures.
# What a second step may add to the high-water mark: the R call's own
# small-object pages. CI saw 32 KiB once (blas-check, OpenBLAS pthread
# loaded, a single-threaded model) where 16 KiB had always sufficed; the
# bound is the allocation counter's (tests/c/test_step_allocs.c counts
# every allocation above 64 KiB inside a step: none may occur), so a
# step that allocates outside its plan, masks or a copy, still fails here.
second_step_slack <- 65536

run_probe <- function(case) {
  out <- tempfile()
  on.exit(unlink(out))
  lib <- dirname(find.package("convlstm"))
  rc <- system2(file.path(R.home("bin"), "Rscript"),
                c(shQuote(test_path("scripts", "hwm-probe.R")), shQuote(lib), shQuote(out),
                  shQuote(case_args(case))),
                env = probe_env, stdout = FALSE, stderr = FALSE)
  if (rc != 0 || !file.exists(out)) {
    stop("hwm-probe.R failed (exit ", rc, ") for ", case_label(case))
  }
  kv <- strsplit(strsplit(readLines(out), " ")[[1]], "=")
  v <- stats::setNames(lapply(kv, `[`, 2), vapply(kv, `[`, "", 1))
  num <- setdiff(names(v), "cold")
  v[num] <- suppressWarnings(lapply(v[num], as.numeric))
  v
}
case_args <- function(case) paste0(names(case), "=", vapply(case, paste, "", collapse = ","))
case_label <- function(case) paste(case_args(case), collapse = " ")

# One probe's growth against its plan. Reserved arena pages the steps never
# wrote count as planned (NA: no pagemap here, VmHWM alone measures); R
# holds the call's result (a loss, or an inference forward's arrays).
measured_planned <- function(v) {
  untouched <- if (is.na(v[["untouched"]])) 0 else v[["untouched"]]
  c(measured = v[["grow_create"]] + v[["grow_first"]] + untouched,
    planned = v[["total"]] + v[["result_bytes"]])
}

# Random shapes and step options: dtype, checkpoint, accumulation, tbptt,
# the training target, and inference keeping every output or the last
# states. The model's options are drawn apart (random_options()).
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
  list(input_dim = sample(1:3, 1), hidden = sample(c(4, 8, 16, 32), 1),
       kernel = sample(c(1, 3, 5), 1), B = B, T = T, H = sample(c(8, 16, 24, 48, 64), 1),
       W = sample(c(8, 16, 32, 64), 1), dtype = sample(c("float32", "float16", "bfloat16"), 1),
       checkpoint = ck, accumulation = acc, tbptt = tb, mode = mode, horizon = 0)
}

# Random training steps over a horizon of K frames after T steps,
# teacher-forced (checkpoint or tbptt allowed) or free-running (neither):
# one input channel, the last layer's size, so that frames can be fed back.
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
  list(input_dim = 1, hidden = sample(c(4, 8, 16, 32), 1), kernel = sample(c(1, 3, 5), 1),
       B = B, T = T, H = sample(c(8, 16, 24, 48, 64), 1), W = sample(c(8, 16, 32, 64), 1),
       dtype = sample(c("float32", "float16", "bfloat16"), 1), checkpoint = ck,
       accumulation = sample(seq_len(B), 1), tbptt = tb, mode = mode, horizon = K)
}

# Dropout where its buffers are used differently: a checkpoint's
# recomputation, micro-batches (masks uploaded per micro-batch), and
# free-running (a float gradient of the fed-back input before its mask).
# Frames large enough for an arena of over 1 MiB: pages of its own (cpu_alloc),
# untouched until the step writes them.
dropout_cases <- function() {
  rates <- function() round(stats::runif(2, 0.1, 0.6), 2)
  base <- function(mode, T, B) {
    list(input_dim = 1, hidden = sample(c(8, 16), 1), kernel = 3, B = B, T = T,
         H = sample(c(24, 32), 1), W = 32,
         dtype = sample(c("float32", "float16", "bfloat16"), 1), mode = mode,
         dropout = rates(), recurrent_dropout = rates())
  }
  ck <- base("sequence", 5, 3)
  ck$checkpoint <- 2
  ck$state <- "carry"
  acc <- base("last_state", 4, 6)
  acc$accumulation <- 3
  acc$state <- "given"
  acc$weight <- 1
  free <- base("roll_free", 3, 4)
  free$horizon <- 3
  free$accumulation <- 2
  free$weight <- 1
  list(ck, acc, free)
}

# The model's options and the step's start, where the case does not set
# them: dropout and recurrent dropout (per layer; 0 on some), the initial
# state, a loss weight. Inference of a model with dropout applies none.
# Another convlstm() argument is one more element of `drawn`: the probe
# passes every key it does not know to convlstm().
random_options <- function(case) {
  training <- !grepl("^infer", case$mode)
  rates <- function() {
    if (stats::runif(1) < 0.5) round(stats::runif(2, 0, 0.6), 2) * sample(0:1, 2, TRUE) else 0
  }
  drawn <- list(
    dropout = rates(),
    recurrent_dropout = rates(),
    state = sample(if (training) c("zero", "zero", "given", "carry") else c("zero", "given"), 1),
    weight = if (training) sample(0:1, 1) else 0
  )
  c(case, drawn[setdiff(names(drawn), names(case))])
}

# A training step of random_case()'s kind that recomputes its gates in
# backward (chunks of 1-3 steps). Drawn after the cases above.
recompute_case <- function() {
  repeat {
    a <- random_case()
    if (a$mode %in% c("last_state", "sequence")) {
      return(c(a, list(recompute_gates = sample(1:3, 1))))
    }
  }
}
# One layer trained on its last state, whose d_hidden holds one step
# (cl_schedule.dh_one in src/core/plan.c): random_case()'s shapes and options,
# the third recomputing its gates. Drawn after the cases above and their
# options.
one_layer_cases <- function() {
  lapply(1:3, function(k) {
    repeat {
      a <- random_case()
      if (a$mode == "last_state") break
    }
    a$layers <- 1
    if (k == 3) a$recompute_gates <- sample(1:3, 1)
    a
  })
}
test_that("measured: the high-water mark grows by convlstm_memory_estimate()'s total over creation and the first step, and not at a second step", {
  skip_without_hwm_reset()
  # The bound, 1 % + 2 MiB: the measure counts pages (4 KiB), so each of the
  # plan's ~10-30 buffers may show up to a page more or less than its bytes;
  # buffers under 64 KiB come from the malloc heap, where they may share a
  # page already resident; R's interpreter allocates a few small objects of
  # its own in the window (the call, the loss). Measured (2026-11-23, the 29
  # cases below): -0.28 .. +0.020 MiB, never above the plan.
  set.seed(20261122)
  # 20 random cases, three of each rollout training, the dropout cases, three
  # training steps recomputing their gates in backward; then
  # the options of each (the shapes are drawn first, so a case added to the
  # list leaves the earlier shapes as they were); peepholes by number
  cases <- c(replicate(20, random_case(), simplify = FALSE),
             lapply(rep(c("roll_teacher", "roll_free"), 3), rollout_case),
             dropout_cases(), replicate(3, recompute_case(), simplify = FALSE))
  cases <- lapply(cases, random_options)
  # drawn after the others' options, which stay as they were; one rate a layer
  one <- lapply(one_layer_cases(), function(a) {
    a <- random_options(a)
    a$dropout <- a$dropout[[1]]
    a$recurrent_dropout <- a$recurrent_dropout[[1]]
    a
  })
  cases <- c(cases, one)
  for (i in seq_along(cases)) cases[[i]]$peephole <- c("none", "channel", "position")[[i %% 3 + 1]]

  gaps <- numeric(0)
  cold_notes <- character(0)
  hwm_alone <- integer(0)
  dropout_planned <- 0
  for (i in seq_along(cases)) {
    case <- cases[[i]]
    v <- run_probe(case)
    label <- sprintf("#%d %s", i, case_label(case))
    measured <- v[["grow_create"]] + v[["grow_first"]]
    # what R holds of the call: a loss, or an inference forward's arrays
    # (dropout's masks are drawn into the plan's buffers: nothing on the host)
    planned <- v[["total"]] + v[["result_bytes"]]
    dropout_planned <- dropout_planned + v[["dropout_planned"]]
    # Reserved arena pages the steps never wrote cost nothing: counted apart,
    # from /proc/self/pagemap at the arena's address. NA: pagemap not
    # readable here, VmHWM alone measured the case.
    untouched <- v[["untouched"]]
    if (is.na(untouched)) {
      hwm_alone <- c(hwm_alone, i)
      untouched <- 0
    } else if (untouched > 0) {
      cold_notes <- c(cold_notes, sprintf("#%d %s: %.0f KiB (%s)", i, case$mode, untouched / 1024,
                                          v[["cold"]]))
    }
    gaps <- c(gaps, stats::setNames(measured + untouched - planned, label))
    expect_lte(abs(measured + untouched - planned), 0.01 * planned + 2 * 2^20, label = label)
    # The planned step buffers with whole pages the steps never touched:
    # none, but the convolution workspace, planned for the larger of the
    # GEMM and BLAS paths, of which the timed choice may use less. A buffer
    # planned larger than the step uses (a mask, the masked copy) shows only
    # here: the arena is mapped at the plan's size, so VmHWM + untouched
    # equals the plan either way.
    if (!v[["cold"]] %in% c("none", "NA")) {
      cold <- strsplit(strsplit(v[["cold"]], ",")[[1]], ":")
      cold <- stats::setNames(as.numeric(vapply(cold, `[`, "", 2)), vapply(cold, `[`, "", 1))
      expect_identical(names(cold)[names(cold) != "conv_workspace"], character(0),
                       label = paste("planned step buffers with pages never touched:", label))
    }
    if (!grepl("^infer", case$mode)) {
      # zero from the model (tests/c/alloc_count.c counts its allocations
      # inside a step: none; dropout's masks are redrawn in their planned
      # buffers); a few pages of R's small-object heap for the call and
      # its loss may be new in the window. (hwm-probe.R reads pagemap
      # outside the windows.)
      expect_lte(v[["grow_second"]], second_step_slack, label = paste("second step:", label))
    } else {
      # an inference forward returns new R arrays each time, nothing else
      expect_lte(v[["grow_second"]], v[["result_bytes"]] + 2^16,
                 label = paste("second forward:", label))
    }
  }
  # the dropout cases did plan masks (a case list that lost them would pass
  # without measuring them)
  expect_gt(dropout_planned, 0)
  message(sprintf(paste0("measured (VmHWM) + untouched (pagemap) - planned over %d fresh ",
                         "processes: %.3f .. %.3f MiB (largest gap: %s)"),
                  length(gaps), min(gaps) / 2^20, max(gaps) / 2^20,
                  names(gaps)[which.max(abs(gaps))]))
  message(sprintf("measured by VmHWM + pagemap: %d cases; by VmHWM alone (no pagemap): %s",
                  length(cases) - length(hwm_alone),
                  if (length(hwm_alone)) paste0("#", hwm_alone, collapse = " ") else "none"))
  if (length(cold_notes)) {
    message("arena pages never touched by the steps (the buffers they lie in): ",
            paste(cold_notes, collapse = "; "))
  }
})

# Issue #27.3: a step with per-gate dropout (the default) drew its masks on
# the host, outside the plan: +5.7 MiB (+9.5 %) at batch 12, +11.7 MiB at
# batch 24 in the issue's sweep, beyond this bound. Here the masks (4 per
# layer and kind: 6.4 MiB at batch 12, 12.8 MiB at 24) must be inside the
# plan: the first step's growth is the plan within 1 % + 2 MiB, counting
# nothing for masks on the host, and a second step grows by nothing.
test_that("measured: a first step with per-gate dropout grows the high-water mark by its plan, at batch 12 and 24", {
  skip_without_hwm_reset()
  for (B in c(12, 24)) {
    case <- list(input_dim = 1, hidden = 16, kernel = 3, B = B, T = 4, H = 32, W = 32,
                 dtype = "float32", mode = "last_state", dropout = 0.25,
                 recurrent_dropout = 0.25, dropout_masks = "per_gate")
    v <- run_probe(case)
    label <- sprintf("batch %d: growth %.2f MiB (untouched %.2f), plan %.2f MiB", B,
                     (v[["grow_create"]] + v[["grow_first"]]) / 2^20, v[["untouched"]] / 2^20,
                     v[["total"]] / 2^20)
    mp <- measured_planned(v)
    measured <- mp[["measured"]]
    planned <- mp[["planned"]]
    expect_gt(v[["dropout_planned"]], 4 * B * 4 * 34 * 32 * 32) # the masks are planned
    expect_lte(abs(measured - planned), 0.01 * planned + 2 * 2^20, label = label)
    expect_lte(v[["grow_second"]], second_step_slack, label = paste("second step,", label))
    message(label)
  }
})

# Shi et al.'s encoder-forecaster (convlstm_forecaster()): its plan (the two
# stacks' buffers over their own steps, the head's output and gradient, the
# handed-over d_cell) against the operating system's measure, by the same
# probe and bound as every other model's: training steps and predictions
# of a few shapes (one to three layers, patches of 1, 2 and 4).
test_that("measured: an encoder-forecaster's first step grows the high-water mark by its plan", {
  skip_without_hwm_reset()
  cases <- list(
    list(input_dim = 1, hidden = c(16, 8), kernel = 3, B = 4, T = 5, H = 32, W = 32,
         mode = "seq2seq", horizon = 4, patch = 2),
    list(input_dim = 1, hidden = c(24, 12, 12), kernel = 5, B = 3, T = 4, H = 32, W = 32,
         mode = "seq2seq", horizon = 6, patch = 4, peephole = "none"),
    list(input_dim = 2, hidden = 12, kernel = 3, B = 2, T = 6, H = 24, W = 16,
         mode = "seq2seq", horizon = 3, patch = 1),
    list(input_dim = 1, hidden = c(16, 8), kernel = 3, B = 4, T = 5, H = 32, W = 32,
         mode = "seq2seq_predict", horizon = 7, patch = 2),
    # checkpoint segments and recomputed gates (issue 34), with micro-batches
    list(input_dim = 1, hidden = c(16, 8), kernel = 3, B = 4, T = 6, H = 32, W = 32,
         mode = "seq2seq", horizon = 5, patch = 2, checkpoint = 2),
    list(input_dim = 1, hidden = c(16, 8), kernel = 3, B = 4, T = 6, H = 32, W = 32,
         mode = "seq2seq", horizon = 5, patch = 2, recompute_gates = 2, accumulation = 2),
    list(input_dim = 1, hidden = c(16, 16), kernel = 3, B = 2, T = 3, H = 64, W = 64,
         mode = "seq2seq_predict", horizon = 4, patch = 4, dtype = "bfloat16")
  )
  gaps <- numeric(0)
  for (case in cases) {
    v <- run_probe(case)
    label <- case_label(case)
    mp <- measured_planned(v)
    measured <- mp[["measured"]]
    planned <- mp[["planned"]]
    gaps <- c(gaps, measured - planned)
    expect_lte(abs(measured - planned), 0.01 * planned + 2 * 2^20, label = label)
    if (identical(case$mode, "seq2seq")) {
      expect_lte(v[["grow_second"]], second_step_slack, label = paste("second step:", label))
    } else {
      expect_lte(v[["grow_second"]], v[["result_bytes"]] + 2^16,
                 label = paste("second forward:", label))
    }
  }
  message(sprintf("encoder-forecaster: measured - planned over %d fresh processes: %.3f .. %.3f MiB",
                  length(gaps), min(gaps) / 2^20, max(gaps) / 2^20))
})

# A step split by batch across two threads (options(convlstm.thread_split =
# "batch"), src/core/split.c): each thread's twin holds its own arena, the
# model's is given back, and the plan (rows per thread) says so; the
# operating system's measure of a first step against it, by the same bound,
# and a second step grows by nothing. Odd batches give the threads unequal
# shares; the forecaster runs its own programs in each twin.
test_that("measured: a step split by batch on two threads grows the high-water mark by its plan", {
  skip_without_hwm_reset()
  cases <- list(
    list(input_dim = 1, hidden = 16, kernel = 3, B = 4, T = 5, H = 32, W = 32,
         mode = "last_state", threads = 2, thread_split = "batch"),
    list(input_dim = 2, hidden = 8, kernel = 5, B = 5, T = 4, H = 24, W = 16,
         mode = "sequence", threads = 2, thread_split = "batch", dtype = "bfloat16"),
    list(input_dim = 1, hidden = c(16, 8), kernel = 3, B = 3, T = 5, H = 32, W = 32,
         mode = "seq2seq", horizon = 4, patch = 2, threads = 2, thread_split = "batch")
  )
  for (case in cases) {
    v <- run_probe(case)
    label <- case_label(case)
    mp <- measured_planned(v)
    measured <- mp[["measured"]]
    planned <- mp[["planned"]]
    expect_equal(v[["threads_planned"]], 2, label = paste("threads in the plan:", label))
    expect_equal(v[["peak_reserved"]], v[["reserved"]], label = paste("reserved:", label))
    expect_lte(abs(measured - planned), 0.01 * planned + 2 * 2^20, label = label)
    expect_lte(v[["grow_second"]], second_step_slack, label = paste("second step:", label))
    message(sprintf("%s: measured %.2f MiB, planned %.2f MiB", label, measured / 2^20,
                    planned / 2^20))
  }
})
