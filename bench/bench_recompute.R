# bench_recompute.R -- the memory techniques side by side on the tutorial
# model (convlstm(1, c(64, 1), 3), 24 x 24 frames): plain, checkpoint
# (segments of ceiling(sqrt(T))), recompute_gates (chunks of 1, 2, 4, 8
# steps) and both, for T = 5 (the tutorial) and a longer sequence. Per
# configuration: the planned peak (convlstm_memory_estimate()'s total), the measured
# peak of the step (convlstm_memory_stats(), equal to it by construction), the step's
# time (configurations alternate within each round, each keeps its fastest
# step; the process's CPU time, which other work on a shared machine
# disturbs less than the wall clock, and the wall clock) and the largest
# batch under a budget
# (convlstm_max_batch_size()).
#
#   Rscript bench/bench_recompute.R [batch] [rounds] [threads] [budget] [T...]
library(convlstm)
args <- commandArgs(trailingOnly = TRUE)
B <- if (length(args) >= 1) as.integer(args[[1]]) else 10L
rounds <- if (length(args) >= 2) as.integer(args[[2]]) else 3L
threads <- if (length(args) >= 3) as.integer(args[[3]]) else 1L
budget <- if (length(args) >= 4) args[[4]] else "1 GiB"
Ts <- if (length(args) >= 5) as.integer(args[-(1:4)]) else c(5L, 20L)
H <- W <- 24L
cpu <- function() sum(proc.time()[c("user.self", "sys.self")])
for (T in Ts) {
  set.seed(1)
  k <- as.integer(ceiling(sqrt(T)))
  configs <- list(
    list(name = "plain", checkpoint = 0, recompute_gates = FALSE),
    list(name = sprintf("checkpoint %d", k), checkpoint = k, recompute_gates = FALSE),
    list(name = "recompute_gates 1 (TRUE)", checkpoint = 0, recompute_gates = 1),
    list(name = "recompute_gates 2", checkpoint = 0, recompute_gates = 2),
    list(name = "recompute_gates 4", checkpoint = 0, recompute_gates = 4),
    list(name = "recompute_gates 8", checkpoint = 0, recompute_gates = 8),
    list(name = sprintf("checkpoint %d + recompute_gates", k), checkpoint = k,
         recompute_gates = TRUE)
  )
  x <- array(runif(B * T * H * W), c(B, T, 1, H, W))
  y <- array(runif(B * H * W), c(B, 1, H, W))
  models <- lapply(configs, function(cf) {
    convlstm(1, c(64, 1), c(3, 3), device = "cpu", threads = threads)
  })
  sd <- convlstm_state_dict(models[[1]])
  for (m in models) convlstm_load_state_dict(m, sd)
  opt <- convlstm_optimizer_adam(1e-3)
  step <- function(i) {
    cf <- configs[[i]]
    convlstm_train_step(models[[i]], x, y, opt, checkpoint = cf$checkpoint,
               recompute_gates = cf$recompute_gates)
  }
  first <- vapply(seq_along(configs), step, numeric(1)) # plans and allocates: not timed
  t <- wall <- rep(Inf, length(configs))
  for (r in seq_len(rounds)) {
    for (i in seq_along(configs)) {
      t0 <- cpu()
      w0 <- proc.time()[["elapsed"]]
      step(i)
      t[[i]] <- min(t[[i]], cpu() - t0)
      wall[[i]] <- min(wall[[i]], proc.time()[["elapsed"]] - w0)
    }
  }
  rows <- lapply(seq_along(configs), function(i) {
    cf <- configs[[i]]
    est <- convlstm_memory_estimate(models[[i]], B, T, H, W, checkpoint = cf$checkpoint,
                           recompute_gates = cf$recompute_gates, optimizer = opt)
    planned <- est$bytes[est$category == "total"]
    act <- est$bytes[est$category == "activations"]
    mb <- convlstm_max_batch_size(models[[i]], T, H, W, budget = budget, checkpoint = cf$checkpoint,
                         recompute_gates = cf$recompute_gates, optimizer = opt)
    data.frame(config = cf$name, planned_MiB = round(planned / 2^20, 2),
               activations_MiB = round(act / 2^20, 2),
               measured_MiB = round(convlstm_memory_stats(models[[i]])$peak_allocated / 2^20, 2),
               step_s = round(t[[i]], 3), time_ratio = round(t[[i]] / t[[1]], 2),
               wall_s = round(wall[[i]], 3), wall_ratio = round(wall[[i]] / wall[[1]], 2),
               max_batch = as.integer(mb), first_loss = signif(first[[i]], 9))
  })
  cat(sprintf("\nT = %d, batch %d, %dx%d, %d thread(s), best of %d rounds; max_batch under %s\n",
              T, B, H, W, threads, rounds, budget))
  print(do.call(rbind, rows), row.names = FALSE)
  for (m in models) convlstm_release(m)
}
