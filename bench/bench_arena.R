# bench_arena.R -- what the step arena saves when a loop alternates shapes:
# a training step on a batch, then an inference pass on a validation batch
# of another size (as a loop that prints a validation loss every step does,
# and convlstm_fit() with validation data at every epoch's end, plus its
# smaller last batch). Before the arena each switch freed the step's buffers
# and allocated the other shape's, faulting in fresh pages every time.
#
#   Rscript bench/bench_arena.R [iterations]   (uses the installed convlstm;
#   set R_LIBS to compare two builds side by side)
library(convlstm)
args <- commandArgs(trailingOnly = TRUE)
iters <- if (length(args) > 0) as.integer(args[[1]]) else 10L
set.seed(1)
model <- convlstm(1, c(64, 1), 3, device = "cpu")
opt <- convlstm_optimizer_adam()
x <- array(stats::runif(32 * 5 * 24 * 24), c(32, 5, 1, 24, 24))
y <- array(stats::runif(32 * 24 * 24), c(32, 1, 24, 24))
xv <- array(stats::runif(48 * 5 * 24 * 24), c(48, 5, 1, 24, 24))
convlstm_train_step(model, x, y, opt)
invisible(predict(model, xv, what = "last_state"))
t_step <- t_alt <- 0
for (i in seq_len(iters)) {
  t0 <- proc.time()[["elapsed"]]
  convlstm_train_step(model, x, y, opt)
  t1 <- proc.time()[["elapsed"]]
  invisible(predict(model, xv, what = "last_state"))
  t2 <- proc.time()[["elapsed"]]
  t_step <- t_step + (t1 - t0)
  t_alt <- t_alt + (t2 - t0)
}
s <- convlstm_memory_stats(model)
cat(sprintf("train_step %.1f ms, train_step + validation %.1f ms per iteration; reserved %.1f MiB\n",
            1e3 * t_step / iters, 1e3 * t_alt / iters, s$reserved / 2^20))
