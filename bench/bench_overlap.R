# bench/bench_overlap.R -- a generator read while the step runs (issue 36
# item 4 (c)), measured paired in one fresh R process: epochs of
# convlstm_fit() over an R function source whose read takes about half a
# step, with the step on its own thread while the function reads the next
# batch (the default) and without (options(convlstm.prefetch = FALSE)),
# against the same epoch over a generator that costs nothing (the step
# alone). The read's half step is sized from such an epoch first; two kinds of
# read: Sys.sleep() (waiting, as for a disk or a network) and busy R work
# (arithmetic in R for that long: it needs a core of its own beside the
# step's).
#
#   Rscript bench/bench_overlap.R [--rounds=5] [--batches=24] [--part=both|generator|arrays]
#                                 [--device=cpu|cuda]
#
# Prints a table of median epoch seconds and their ratio to the step alone;
# the target is under 1.15 with overlap (about 1.5 without). Nothing here
# fails on a slow result. The CPU backend runs on one thread, so the step
# takes one core and R the other; --device=cuda runs the same models on the
# GPU (the step's thread then drives the GPU).
#
# Then (part "arrays") plain R arrays, batches sliced in R
# (data_on_device = FALSE), on a shape where slicing is a noticeable part
# of the step (a small model, long sequences of large frames): epochs
# with the next batch sliced while the step runs on its thread and
# without, alternating, after checking that both give identical losses;
# the next batch also converted during the step (staged_ahead:
# options(convlstm.stage_batches = TRUE), the default on a GPU, where the
# other cases here set it FALSE; on the CPU it only adds a copy), and
# also sent ahead (sent_ahead: options(convlstm.send_ahead = TRUE), the
# default on a GPU: uploaded on the copy stream into a device buffer while
# the step before computes, src/core/ahead.c; staged_ahead sets it FALSE);
# and the same epoch with the training set uploaded once
# (data_on_device = TRUE), the batch gathered on the device: the bound
# the host path is measured against (issue 36: no slower than it).
source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]])),
                 "bench_args.R")) # bench_arg()
rounds <- as.numeric(bench_arg("rounds", 5))
n_batches <- as.numeric(bench_arg("batches", 24))
part <- bench_arg("part", "both")
device <- bench_arg("device", "cpu")
stopifnot(device %in% c("cpu", "cuda"))
threads <- if (device == "cpu") 1L
device_words <- if (device == "cpu") "1 CPU thread" else "the GPU"
suppressPackageStartupMessages(library(convlstm))

B <- 8L
T <- 6L
S <- 32L
n <- B * n_batches
set.seed(1)
x <- array(stats::runif(n * T * S * S), c(n, T, 1, S, S))
y <- array(x[, T, 1, , ], c(n, 1, S, S))
batch_of <- function(i) list(x = x[i, , , , , drop = FALSE], y = y[i, , , , drop = FALSE])

# A generator whose read takes `secs` more than slicing: waiting, or busy.
generator <- function(secs, kind) {
  function(i) {
    if (secs > 0) {
      if (kind == "sleep") {
        Sys.sleep(secs)
      } else {
        t0 <- proc.time()[["elapsed"]]
        v <- 0
        while (proc.time()[["elapsed"]] - t0 < secs) v <- v + sum(sqrt(seq_len(2000)))
      }
    }
    batch_of(i)
  }
}

bench_generator <- function() {
  model <- convlstm(1, c(16, 1), 3, device = device, threads = threads)
  opt_adam <- convlstm_optimizer_adam(0.001)
  epoch <- function(fun, overlap) {
    old <- options(convlstm.prefetch = overlap)
    on.exit(options(old))
    src <- convlstm_source_function(fun, n, x_dim = c(T, 1, S, S), y_dim = c(1, S, S))
    set.seed(2)
    h <- convlstm_fit(model, src, NULL, opt_adam, epochs = 1, batch_size = B, shuffle = FALSE,
                      verbose = FALSE)
    h$seconds[[1]]
  }

  # "a step": the step alone's share of an epoch (the step itself, slicing
  # and checking its batch), from an epoch over a generator that costs
  # nothing, after a warm-up one; the read takes half of it
  invisible(epoch(generator(0, "sleep"), FALSE))
  step_s <- epoch(generator(0, "sleep"), FALSE) / n_batches
  read_s <- step_s / 2
  core_s <- stats::median(vapply(1:5, function(k) { # the training step's own time, for reference
    b <- batch_of(((k - 1) %% n_batches) * B + seq_len(B))
    t0 <- proc.time()[["elapsed"]]
    convlstm_train_step(model, b$x, b$y, opt_adam)
    proc.time()[["elapsed"]] - t0
  }, numeric(1)))
  cat(sprintf(paste0("(c) a generator read while the step runs: %d batches of %d, %d steps of ",
                     "%dx%d, hidden c(16, 1), %s; a step %.1f ms of the epoch ",
                     "(convlstm_train_step() alone %.1f ms), the read %.1f ms\n"),
              n_batches, B, T, S, S, device_words, 1000 * step_s, 1000 * core_s, 1000 * read_s))

  cases <- list(
    step_alone = list(fun = generator(0, "sleep"), overlap = FALSE),
    free_overlap = list(fun = generator(0, "sleep"), overlap = TRUE), # the thread's own cost
    sleep_overlap = list(fun = generator(read_s, "sleep"), overlap = TRUE),
    sleep_no_overlap = list(fun = generator(read_s, "sleep"), overlap = FALSE),
    busy_overlap = list(fun = generator(read_s, "busy"), overlap = TRUE),
    busy_no_overlap = list(fun = generator(read_s, "busy"), overlap = FALSE)
  )
  times <- matrix(NA_real_, rounds, length(cases), dimnames = list(NULL, names(cases)))
  for (r in seq_len(rounds)) {
    for (k in names(cases)) times[r, k] <- epoch(cases[[k]]$fun, cases[[k]]$overlap)
  }
  med <- apply(times, 2, stats::median)
  print(data.frame(case = names(cases), median_epoch_s = round(med, 3),
                   over_step_alone = round(med / med[["step_alone"]], 3)), row.names = FALSE)
  cat(sprintf("load average: %s\n", paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
  convlstm_release(model)
}

# Plain arrays: the next batch sliced (x [B, T, 1, S, S] out of [n, ...],
# rows shuffled) during the step, or at its step.
bench_arrays <- function() {
  Ba <- 16L
  Ta <- 12L
  Sa <- 48L
  na <- Ba * n_batches
  set.seed(3)
  xa <- array(stats::runif(na * Ta * Sa * Sa), c(na, Ta, 1, Sa, Sa))
  ya <- array(xa[, Ta, 1, , ], c(na, 1, Sa, Sa))
  small <- convlstm(1, c(2, 1), 3, device = device, threads = threads)
  sd0 <- convlstm_state_dict(small)
  epoch_a <- function(overlap, on_device = FALSE, stage = FALSE, send = FALSE) {
    old <- options(convlstm.prefetch = overlap, convlstm.stage_batches = stage,
                   convlstm.send_ahead = send)
    on.exit(options(old))
    convlstm_load_state_dict(small, sd0)
    set.seed(4)
    h <- convlstm_fit(small, xa, ya, convlstm_optimizer_sgd(0.01), epochs = 1, batch_size = Ba,
                      data_on_device = on_device, verbose = FALSE)
    c(seconds = h$seconds[[1]], loss = h$loss[[1]])
  }
  a <- epoch_a(TRUE) # warm-up, and the check
  b <- epoch_a(FALSE)
  st <- epoch_a(TRUE, stage = TRUE)
  se <- epoch_a(TRUE, stage = TRUE, send = TRUE)
  stopifnot(identical(a[["loss"]], b[["loss"]]), identical(a[["loss"]], st[["loss"]]),
            identical(a[["loss"]], se[["loss"]]))
  slice_s <- stats::median(vapply(1:5, function(k) {
    i <- sample.int(na, Ba)
    t0 <- proc.time()[["elapsed"]]
    invisible(list(xa[i, , , , , drop = FALSE], ya[i, , , , drop = FALSE]))
    proc.time()[["elapsed"]] - t0
  }, numeric(1)))
  cases <- c("sliced_ahead", "staged_ahead", "sent_ahead", "sliced_at_step", "data_on_device")
  times <- matrix(NA_real_, rounds, length(cases), dimnames = list(NULL, cases))
  for (r in seq_len(rounds)) {
    times[r, "sliced_ahead"] <- epoch_a(TRUE)[["seconds"]]
    times[r, "staged_ahead"] <- epoch_a(TRUE, stage = TRUE)[["seconds"]]
    times[r, "sent_ahead"] <- epoch_a(TRUE, stage = TRUE, send = TRUE)[["seconds"]]
    times[r, "sliced_at_step"] <- epoch_a(FALSE)[["seconds"]]
    times[r, "data_on_device"] <- epoch_a(TRUE, on_device = TRUE)[["seconds"]]
  }
  med <- apply(times, 2, stats::median)
  cat(sprintf(paste0("\n(arrays) the next batch sliced while the step runs: %d batches of %d, ",
                     "%d steps of %dx%d, hidden c(2, 1), %s; slicing a batch %.1f ms, ",
                     "a step %.1f ms of the epoch without reading ahead\n"),
              n_batches, Ba, Ta, Sa, Sa, device_words,
              1000 * slice_s, 1000 * med[["sliced_at_step"]] / n_batches))
  print(data.frame(case = names(med), median_epoch_s = round(med, 3),
                   over_sliced_at_step = round(med / med[["sliced_at_step"]], 3)), row.names = FALSE)
  cat(sprintf("load average: %s\n", paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
  convlstm_release(small)
}

if (part %in% c("both", "generator")) bench_generator()
if (part %in% c("both", "arrays")) bench_arrays()
