# bench/bench_fit_data.R -- convlstm_fit() with the training set on the
# device (data_on_device = TRUE: uploaded once, each batch gathered by row
# number) against slicing each batch out of the R arrays (FALSE), in one
# process, on the README's tutorial configuration:
#
#   Rscript bench/bench_fit_data.R [epochs] [threads] [repeats]
#
# moving_beams(n = 100, seq_len = 6, size = 24), hidden c(64, 1), 3x3
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
  sd0 <- state_dict(model)
  fit <- function(on_device) {
    load_state_dict(model, sd0)
    convlstm:::c_optimizer_reset(convlstm:::model_ptr(model))
    set.seed(2)
    t <- system.time(h <- convlstm_fit(model, beams$x, beams$y, optimizer_adam(0.005),
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

rows <- rbind(
  bench("tutorial: 24x24, hidden c(64, 1), batch 10",
        moving_beams(n = 100, seq_len = 6, size = 24, seed = 1), c(64, 1), 10),
  bench("small model: 64x64, hidden c(8, 1), batch 10",
        moving_beams(n = 100, seq_len = 6, size = 64, seed = 1), c(8, 1), 10)
)
cat(sprintf("convlstm_fit, %d epochs, %d threads, median of %d\n", epochs, threads, repeats))
print(rows, row.names = FALSE, digits = 4)
