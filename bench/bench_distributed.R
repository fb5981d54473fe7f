# bench_distributed.R -- samples per second of data-parallel training on
# the CPU, one rank or several:
#
#   mpirun --oversubscribe -np N Rscript bench/bench_distributed.R [BATCH] [STEPS] [REPS]
#
# The tutorial model (input 1x24x24, T = 5, hidden c(64, 1), 3x3 kernels,
# Adam) with BATCH samples per rank (default 16; weak scaling: the global
# batch grows with the ranks), one thread per rank. Each rank runs 2 warm-up
# steps, then REPS repetitions of STEPS timed steps (convlstm_fit() with
# distributed =, one epoch of STEPS global batches, no shuffle); rank 0
# prints one line per repetition: ranks, global batch, seconds, samples/s,
# milliseconds per step, gradient bytes all-reduced per step and the time a
# step waited for the reduction after its own backward (what overlap did
# not hide, plus waiting for a slower rank), from the communicator's
# counters. Compare runs with 1 and N ranks; on a machine shared with other
# work the repetitions differ a lot (doc/distributed.md).
args <- commandArgs(trailingOnly = TRUE)
batch <- if (length(args) >= 1) as.integer(args[[1]]) else 16L
steps <- if (length(args) >= 2) as.integer(args[[2]]) else 10L
reps <- if (length(args) >= 3) as.integer(args[[3]]) else 5L
suppressPackageStartupMessages(library(convlstm))
d <- convlstm_distributed()
set.seed(1)
model <- convlstm(1, c(64, 1), 3, device = "cpu", threads = 1)
n <- batch * d$size * steps
x <- array(runif(n * 5 * 24 * 24), dim = c(n, 5, 1, 24, 24))
y <- array(runif(n * 24 * 24), dim = c(n, 1, 24, 24))
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
    cat(sprintf(paste0("ranks %d  global batch %d  steps %d  %.3f s  %.1f samples/s  %.1f ms/step",
                       "  reduced %.0f KB/step  waited %.1f ms/step (%.1f%%)\n"),
                d$size, batch * d$size, steps, s, batch * d$size * steps / s, 1000 * s / steps,
                st$bytes / max(st$steps, 1) / 1000, 1000 * st$wait_seconds / steps,
                100 * st$wait_seconds / s))
  }
}
