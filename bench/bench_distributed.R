# bench_distributed.R -- samples per second of data-parallel training on
# the CPU, one rank or several:
#
#   mpirun --oversubscribe -np N Rscript bench/bench_distributed.R [BATCH] [STEPS] [REPS] \
#     [MODEL] [THREADS]
#
# MODEL "tutorial" (the default): the tutorial model (input 1x24x24, T = 5,
# hidden c(64, 1), 3x3 kernels); "plain": issue 39's plain stack (input
# 16x16x16, T = 20, hidden c(48, 48), 5x5 kernels, the last state's
# target). Adam, BATCH samples per rank (default 16; weak scaling: the
# global batch grows with the ranks), THREADS threads per rank (default 1).
# Each rank runs 2 warm-up
# steps, then REPS repetitions of STEPS timed steps (convlstm_fit() with
# distributed =, one epoch of STEPS global batches, no shuffle); rank 0
# prints one line per repetition: ranks, global batch, seconds, samples/s,
# milliseconds per step, gradient bytes all-reduced per step and the time a
# step waited for the reduction after its own backward (what overlap did
# not hide, plus waiting for a slower rank), from the communicator's
# counters. Compare runs with 1 and N ranks; on a machine shared with other
# work the repetitions differ a lot (doc/distributed.md). Two ranks of one
# thread against one rank of two, the same global batch, is the batch split
# of doc/speed.md ("Two threads split by batch").
args <- commandArgs(trailingOnly = TRUE)
batch <- if (length(args) >= 1) as.integer(args[[1]]) else 16L
steps <- if (length(args) >= 2) as.integer(args[[2]]) else 10L
reps <- if (length(args) >= 3) as.integer(args[[3]]) else 5L
kind <- if (length(args) >= 4) args[[4]] else "tutorial"
threads <- if (length(args) >= 5) as.integer(args[[5]]) else 1L
stopifnot(kind %in% c("tutorial", "plain"))
suppressPackageStartupMessages(library(convlstm))
d <- convlstm_distributed()
set.seed(1)
shape <- if (kind == "plain") {
  list(input = 16L, hidden = c(48L, 48L), kernel = 5L, T = 20L, HW = 16L)
} else {
  list(input = 1L, hidden = c(64L, 1L), kernel = 3L, T = 5L, HW = 24L)
}
model <- convlstm(shape$input, shape$hidden, shape$kernel, device = "cpu", threads = threads)
n <- batch * d$size * steps
top <- shape$hidden[[length(shape$hidden)]]
x <- array(runif(n * shape$T * shape$input * shape$HW^2),
           dim = c(n, shape$T, shape$input, shape$HW, shape$HW))
y <- array(runif(n * top * shape$HW^2), dim = c(n, top, shape$HW, shape$HW))
fit <- function(k) {
  rows <- seq_len(batch * d$size * k)
  convlstm_fit(model, x[rows, , , , , drop = FALSE], y[rows, , , , drop = FALSE],
               convlstm_optimizer_adam(1e-3), epochs = 1, batch_size = batch, shuffle = FALSE,
               verbose = FALSE, distributed = d, data_on_device = FALSE)
}
invisible(fit(2)) # warm-up
for (r in seq_len(reps)) {
  invisible(convlstm:::c_dist_stats(reset = TRUE))
  t0 <- proc.time()[["elapsed"]]
  invisible(fit(steps))
  s <- proc.time()[["elapsed"]] - t0
  st <- convlstm:::c_dist_stats()
  if (d$rank == 0) {
    cat(sprintf(paste0("%s  ranks %d x %d threads  global batch %d  steps %d  %.3f s  %.1f samples/s  %.1f ms/step",
                       "  reduced %.0f KB/step  waited %.1f ms/step (%.1f%%)\n"),
                kind, d$size, threads, batch * d$size, steps, s, batch * d$size * steps / s, 1000 * s / steps,
                st$bytes / max(st$steps, 1) / 1000, 1000 * st$wait_seconds / steps,
                100 * st$wait_seconds / s))
  }
}
