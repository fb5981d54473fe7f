# bench_advise_forecast.R -- convlstm_memory_advise(horizon =, teacher_forcing =)'s
# step-time prediction for forecasting steps: the tutorial model trained to
# forecast `horizon` frames, free-running (the grid without checkpoint and
# recompute_gates) and teacher-forced, each configuration's measured CPU
# time relative to the plain float32 step of the same kind against the
# advisor's ratio. Configurations alternate within each round; each keeps
# its fastest step (CPU time of the process, all threads).
#
#   Rscript bench/bench_advise_forecast.R [batch] [seq_len] [horizon] [rounds] [threads]
library(convlstm)
args <- as.integer(commandArgs(trailingOnly = TRUE))
B <- if (length(args) >= 1) args[[1]] else 8L
T <- if (length(args) >= 2) args[[2]] else 6L
K <- if (length(args) >= 3) args[[3]] else 4L
rounds <- if (length(args) >= 4) args[[4]] else 3L
threads <- if (length(args) >= 5) args[[5]] else 1L
H <- W <- 24L
set.seed(1)
cf <- function(tf, dtype, m = 1, ck = 0, rc = 0) {
  list(tf = tf, dtype = dtype, accumulation_steps = m, checkpoint = ck, recompute_gates = rc)
}
configs <- list(
  cf(FALSE, "float32"), cf(FALSE, "float32", 2), cf(FALSE, "float32", B),
  cf(FALSE, "float16"), cf(FALSE, "bfloat16"), cf(FALSE, "bfloat16", B),
  cf(TRUE, "float32"), cf(TRUE, "float32", ck = 3), cf(TRUE, "float32", rc = 1),
  cf(TRUE, "bfloat16", 2)
)
label <- function(c) {
  sprintf("%s %s%s%s%s", if (c$tf) "teacher-forced" else "free-running", c$dtype,
          if (c$accumulation_steps > 1) sprintf(", %d micro-batches", c$accumulation_steps) else "",
          if (c$checkpoint > 0) sprintf(", checkpoint %d", c$checkpoint) else "",
          if (c$recompute_gates > 0) ", recompute_gates" else "")
}
models <- lapply(c(float32 = "float32", float16 = "float16", bfloat16 = "bfloat16"), function(d) {
  convlstm(1, c(64, 1), 3, device = "cpu", dtype = d, threads = threads)
})
x <- array(runif(B * T * H * W), c(B, T, 1, H, W))
y <- array(runif(B * K * H * W), c(B, K, 1, H, W))
opt <- convlstm_optimizer_adam()
advice <- list(
  free = convlstm_memory_advise(models$float32, "80 GiB", B, T, H, W, optimizer = opt, horizon = K,
                       teacher_forcing = FALSE),
  teacher = convlstm_memory_advise(models$float32, "80 GiB", B, T, H, W, optimizer = opt, horizon = K)
)
step <- function(c) {
  convlstm_train_step(models[[c$dtype]], x, y, opt, horizon = K, teacher_forcing = c$tf,
             checkpoint = c$checkpoint, accumulation_steps = c$accumulation_steps,
             recompute_gates = c$recompute_gates)
}
for (c in configs) step(c) # plan and allocate
cpu <- function() sum(proc.time()[c("user.self", "sys.self")])
best <- rep(Inf, length(configs))
for (r in seq_len(rounds)) {
  for (i in seq_along(configs)) {
    c0 <- cpu()
    step(configs[[i]])
    best[[i]] <- min(best[[i]], cpu() - c0)
  }
}
kind <- vapply(configs, function(c) if (c$tf) "teacher" else "free", "")
predicted <- vapply(configs, function(c) {
  a <- advice[[if (c$tf) "teacher" else "free"]]
  a$time_ratio[a$dtype == c$dtype & a$checkpoint == c$checkpoint &
                 a$accumulation_steps == c$accumulation_steps &
                 a$recompute_gates == c$recompute_gates & a$tbptt == 0][[1]]
}, numeric(1))
base <- c(free = best[[1]], teacher = best[[which(kind == "teacher")[[1]]]])
measured <- best / base[kind]
cat(sprintf("tutorial model, batch %d, %d steps of %dx%d, horizon %d, %d thread(s), %d rounds\n",
            B, T, H, W, K, threads, rounds))
print(data.frame(configuration = vapply(configs, label, ""), cpu_s = round(best, 3),
                 measured = round(measured, 2), predicted = round(predicted, 2),
                 error = sprintf("%+.0f%%", 100 * (predicted / measured - 1))), row.names = FALSE)
cat(sprintf("largest error %.0f%%; rank correlation (Spearman) %.2f\n",
            100 * max(abs(predicted / measured - 1)),
            stats::cor(predicted, measured, method = "spearman")))
cat(sprintf("free-running plain float32 over teacher-forced: measured %.2f\n",
            base[["free"]] / base[["teacher"]]))
