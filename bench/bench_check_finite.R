# bench/bench_check_finite.R -- what the check of a batch costs before each
# step (R/errors.R's check_finite(): no NA, NaN, Inf, nor a value beyond a
# float's range). It runs on the calling thread before every training step
# and prediction, so it is serial work beside a step on several threads, and
# on a GPU it sits on the host path. Paired in one R process, per batch (x
# and y) of the step's shapes, best of `rounds` runs of 20 checks, ms: R's three
# passes (anyNA(), min(), max(), what check_finite() ran until 2026-11-30)
# against check_finite() as it is (one pass in C, src/r_arrays.c).
#
#   Rscript bench/bench_check_finite.R [--rounds=10]
source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]])),
                 "bench_args.R")) # bench_arg()
rounds <- as.integer(bench_arg("rounds", "10"))
suppressPackageStartupMessages(library(convlstm))

float_max <- 3.4028234663852886e38
three_passes <- function(x) !anyNA(x) && min(x) >= -float_max && max(x) <= float_max
best_ms <- function(f) min(replicate(rounds, system.time(for (i in 1:20) f())[["elapsed"]])) / 20 * 1e3

shapes <- list(
  "plain stack 48-48 (batch 4)" = list(c(4, 20, 16, 16, 16), c(4, 20, 48, 16, 16)),
  "tutorial (batch 100)" = list(c(100, 5, 1, 24, 24), c(100, 1, 24, 24)),
  "encoder-forecaster 64x64 (batch 4)" = list(c(4, 10, 1, 64, 64), c(4, 10, 1, 64, 64)),
  "video64 (batch 16)" = list(c(16, 10, 3, 64, 64), c(16, 10, 3, 64, 64))
)
set.seed(1)
for (s in names(shapes)) {
  x <- array(runif(prod(shapes[[s]][[1]])), shapes[[s]][[1]])
  y <- array(runif(prod(shapes[[s]][[2]])), shapes[[s]][[2]])
  stopifnot(three_passes(x), three_passes(y))
  old <- best_ms(function() c(three_passes(x), three_passes(y)))
  new <- best_ms(function() {
    convlstm:::check_finite(x, "x")
    convlstm:::check_finite(y, "y")
  })
  cat(sprintf("RESULT batch=\"%s\" values=%d three_passes_ms=%.2f one_pass_ms=%.2f\n",
              s, length(x) + length(y), old, new))
}
