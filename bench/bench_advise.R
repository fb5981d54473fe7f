# bench_advise.R -- how good convlstm_memory_advise()'s step-time prediction is: for
# the tutorial model, real training steps in several configurations, their
# measured time relative to the plain float32 step against the ratio the
# advisor predicts. Configurations alternate within each round, and each
# keeps its fastest step over all rounds (other work on the machine only
# adds time), by the wall clock and by the process's CPU time (which other
# work on a shared machine disturbs less).
#
#   Rscript bench/bench_advise.R [batch] [seq_len] [rounds] [steps] [threads]
library(convlstm)
args <- as.integer(commandArgs(trailingOnly = TRUE))
B <- if (length(args) >= 1) args[[1]] else 8L
T <- if (length(args) >= 2) args[[2]] else 6L
rounds <- if (length(args) >= 3) args[[3]] else 2L
steps <- if (length(args) >= 4) args[[4]] else 3L
threads <- if (length(args) >= 5) args[[5]] else NULL
H <- W <- 24L
set.seed(1)
configs <- list(
  list(dtype = "float32", checkpoint = 0, accumulation_steps = 1),
  list(dtype = "float32", checkpoint = 2, accumulation_steps = 1),
  list(dtype = "float32", checkpoint = 4, accumulation_steps = 1),
  list(dtype = "float32", checkpoint = 1, accumulation_steps = 1),
  list(dtype = "float32", checkpoint = 0, accumulation_steps = 2),
  list(dtype = "float32", checkpoint = 0, accumulation_steps = B),
  list(dtype = "float16", checkpoint = 0, accumulation_steps = 1),
  list(dtype = "bfloat16", checkpoint = 0, accumulation_steps = 1),
  list(dtype = "float16", checkpoint = 2, accumulation_steps = 2),
  list(dtype = "bfloat16", checkpoint = 0, accumulation_steps = B)
)
label <- function(cf) {
  sprintf("%s, checkpoint %d, %d micro-batch%s", cf$dtype, cf$checkpoint, cf$accumulation_steps,
          if (cf$accumulation_steps == 1) "" else "es")
}
models <- lapply(c(float32 = "float32", float16 = "float16", bfloat16 = "bfloat16"), function(d) {
  convlstm(1, c(64, 1), c(3, 3), device = "cpu", dtype = d, threads = threads)
})
x <- array(runif(B * T * H * W), c(B, T, 1, H, W))
y <- array(runif(B * H * W), c(B, 1, H, W))
opt <- convlstm_optimizer_adam()
t_advise <- system.time(
  advice <- convlstm_memory_advise(models$float32, "80 GiB", B, T, H, W, optimizer = opt)
)[["elapsed"]]
step <- function(cf) {
  convlstm_train_step(models[[cf$dtype]], x, y, opt, checkpoint = cf$checkpoint,
             accumulation_steps = cf$accumulation_steps)
}
for (cf in configs) step(cf) # plan and allocate
cpu <- function() sum(proc.time()[c("user.self", "sys.self")])
best <- best_cpu <- rep(Inf, length(configs))
for (r in seq_len(rounds)) {
  for (i in seq_along(configs)) {
    for (s in seq_len(steps)) {
      t0 <- as.numeric(Sys.time())
      c0 <- cpu()
      step(configs[[i]])
      best_cpu[[i]] <- min(best_cpu[[i]], cpu() - c0)
      best[[i]] <- min(best[[i]], as.numeric(Sys.time()) - t0)
    }
  }
}
predicted <- vapply(configs, function(cf) {
  row <- advice[advice$dtype == cf$dtype & advice$checkpoint == cf$checkpoint &
                  advice$accumulation_steps == cf$accumulation_steps & advice$tbptt == 0, ]
  row$time_ratio[[1]]
}, numeric(1))
measured <- best / best[[1]]
measured_cpu <- best_cpu / best_cpu[[1]]
res <- data.frame(configuration = vapply(configs, label, ""), wall_s = round(best, 3),
                  cpu_s = round(best_cpu, 3), wall = round(measured, 2),
                  cpu = round(measured_cpu, 2), predicted = round(predicted, 2),
                  error_wall = sprintf("%+.0f%%", 100 * (predicted / measured - 1)),
                  error_cpu = sprintf("%+.0f%%", 100 * (predicted / measured_cpu - 1)))
cat(sprintf("tutorial model, batch %d, %d steps of %dx%d, threads %s, %d rounds x %d steps, fastest kept\n",
            B, T, H, W, if (is.null(threads)) "default" else threads, rounds, steps))
cat(sprintf("convlstm_memory_advise() took %.2f s (rates measured in this process)\n", t_advise))
str(attr(advice, "rates"))
print(res, row.names = FALSE)
cat(sprintf("largest error %.0f%% (wall clock), %.0f%% (CPU time); rank correlation (Spearman) %.2f, %.2f\n",
            100 * max(abs(predicted / measured - 1)), 100 * max(abs(predicted / measured_cpu - 1)),
            cor(predicted, measured, method = "spearman"),
            cor(predicted, measured_cpu, method = "spearman")))
cat(sprintf("load average at the end: %s\n",
            tryCatch(readLines("/proc/loadavg"), error = function(e) "?")))
