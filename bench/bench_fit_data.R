# bench/bench_fit_data.R -- convlstm_fit() with the training set on the
# device (data_on_device = TRUE: uploaded once, each batch gathered by row
# number) against slicing each batch out of the R arrays (FALSE), in one
# process, on the tutorial configuration (README.md, doc/usage.md):
#
#   Rscript bench/bench_fit_data.R [epochs] [threads] [repeats]
#
# convlstm_moving_beams(n = 100, n_frames = 6, size = 24), hidden c(64, 1), 3x3
# kernels, batch 10 (10 batches per epoch), Adam. The two variants alternate
# `repeats` times from the same initial weights and seed; the table shows the
# median seconds per fit and the ratio. Also a small-model configuration
# (hidden c(8, 1), 64x64 frames), where a step is cheap and the per-batch
# slicing and conversion are a larger share. Not a test: nothing fails on a
# slow result; it checks only that both variants give identical losses.
library(convlstm)

args <- commandArgs(trailingOnly = TRUE)
epochs <- if (length(args) >= 1) as.integer(args[[1]]) else 3L
threads <- if (length(args) >= 2) as.integer(args[[2]]) else 2L
repeats <- if (length(args) >= 3) as.integer(args[[3]]) else 3L

bench <- function(label, beams, hidden, batch_size) {
  set.seed(1)
  model <- convlstm(1, hidden, 3, device = "cpu", threads = threads)
  sd0 <- convlstm_state_dict(model)
  fit <- function(on_device) {
    convlstm_load_state_dict(model, sd0)
    convlstm:::c_optimizer_reset(convlstm:::model_ptr(model))
    set.seed(2)
    t <- system.time(h <- convlstm_fit(model, beams$x, beams$y, convlstm_optimizer_adam(0.005),
                                       epochs = epochs, batch_size = batch_size,
                                       verbose = FALSE, data_on_device = on_device))
    list(seconds = t[["elapsed"]], loss = h$loss)
  }
  fit(TRUE) # warm-up: plans and caches
  on <- off <- numeric()
  for (r in seq_len(repeats)) {
    a <- fit(TRUE)
    b <- fit(FALSE)
    stopifnot(identical(a$loss, b$loss))
    on <- c(on, a$seconds)
    off <- c(off, b$seconds)
  }
  convlstm_release(model)
  n_steps <- epochs * ceiling(dim(beams$x)[[1]] / batch_size)
  data.frame(
    config = label, steps = n_steps,
    on_device_s = median(on), in_R_s = median(off),
    ms_per_step_on = 1000 * median(on) / n_steps, ms_per_step_R = 1000 * median(off) / n_steps,
    ratio_R_over_device = median(off) / median(on)
  )
}

# The same comparison step by step, the two variants alternating batch by
# batch, so that load from other processes on the machine falls on both
# alike: median seconds of one step (host: slicing in R + train_step; device:
# train_step on the data set's rows), and of the slicing alone.
bench_steps <- function(label, beams, hidden, batch_size, n = 30) {
  set.seed(1)
  model <- convlstm(1, hidden, 3, device = "cpu", threads = threads)
  on.exit(convlstm_release(model))
  ptr <- convlstm:::model_ptr(model)
  opt <- convlstm_optimizer_adam(0.005)
  data <- convlstm_data(model, beams$x, beams$y)
  N <- dim(beams$x)[[1]]
  slice <- convlstm:::slice_batch
  host <- dev <- cut <- numeric(n)
  for (i in seq_len(n + 2)) {
    idx <- sample.int(N, batch_size)
    t0 <- proc.time()[["elapsed"]]
    xb <- slice(beams$x, idx)
    yb <- slice(beams$y, idx)
    t1 <- proc.time()[["elapsed"]]
    convlstm:::c_train_step(ptr, xb, yb, "last_state", opt)
    t2 <- proc.time()[["elapsed"]]
    convlstm:::c_train_step_data(ptr, unclass(data)$ptr, idx, opt)
    t3 <- proc.time()[["elapsed"]]
    if (i > 2) { # two warm-up rounds
      host[i - 2] <- t2 - t0
      cut[i - 2] <- t1 - t0
      dev[i - 2] <- t3 - t2
    }
  }
  data.frame(config = label, step_ms_R = 1000 * median(host), slicing_ms = 1000 * median(cut),
             step_ms_device = 1000 * median(dev), ratio = median(host) / median(dev))
}

rows <- rbind(
  bench("tutorial: 24x24, hidden c(64, 1), batch 10",
        convlstm_moving_beams(n = 100, n_frames = 6, size = 24, seed = 1), c(64, 1), 10),
  bench("small model: 64x64, hidden c(8, 1), batch 10",
        convlstm_moving_beams(n = 100, n_frames = 6, size = 64, seed = 1), c(8, 1), 10)
)
cat(sprintf("convlstm_fit, %d epochs, %d threads, median of %d\n", epochs, threads, repeats))
print(rows, row.names = FALSE, digits = 4)

steps <- rbind(
  bench_steps("tutorial: 24x24, hidden c(64, 1), batch 10",
              convlstm_moving_beams(n = 100, n_frames = 6, size = 24, seed = 1), c(64, 1), 10),
  bench_steps("small model: 64x64, hidden c(8, 1), batch 10",
              convlstm_moving_beams(n = 100, n_frames = 6, size = 64, seed = 1), c(8, 1), 10)
)
cat("\nstep by step, alternating, median of 30\n")
print(steps, row.names = FALSE, digits = 4)
