# bench_advise_forecaster.R -- convlstm_memory_advise()'s predicted step-time ratios for an
# encoder-forecaster (convlstm_forecaster(1, c(16, 16), 3, patch = 2), 6 + 6 frames of 32x32,
# batch 4) against measured ones: plain, checkpoint 4, recompute_gates, both, 4 micro-batches,
# float16, bfloat16. Configurations alternate within each of 5 rounds; each keeps its least
# CPU time (the process's, one thread) over 5 steps. Issue 34 item 3.
#
#   Rscript bench/bench_advise_forecaster.R
suppressPackageStartupMessages(library(convlstm))
set.seed(1)
B <- 4L; T <- 6L; K <- 6L; H <- 32L
mk <- function(d) convlstm_forecaster(1, c(16, 16), 3, patch = 2, device = "cpu", threads = 1, dtype = d)
ms <- list(float32 = mk("float32"), float16 = mk("float16"), bfloat16 = mk("bfloat16"))
sd <- convlstm_state_dict(ms$float32); for (m in ms) convlstm_load_state_dict(m, sd)
x <- array(runif(B*T*H*H), c(B,T,1,H,H)); y <- array(runif(B*K*H*H), c(B,K,1,H,H))
cf <- list( # dtype, checkpoint, recompute_gates, accumulation_steps
  list("float32",0,0,1), list("float32",4,0,1), list("float32",0,1,1), list("float32",4,1,1), list("float32",0,0,4), list("float16",0,0,1), list("bfloat16",0,0,1))
a <- convlstm_memory_advise(ms$float32, "1 GiB", B, T, H, H, horizon = K)
opt <- convlstm_optimizer_sgd(1e-4)
run <- function(c) convlstm_train_step(ms[[c[[1]]]], x, y, opt, checkpoint = c[[2]], recompute_gates = c[[3]], accumulation_steps = c[[4]])
for (c in cf) run(c)
cpu <- function() sum(proc.time()[c("user.self","sys.self")])
t <- rep(Inf, length(cf))
for (r in 1:5) for (i in seq_along(cf)) { t0 <- cpu(); for (j in 1:5) run(cf[[i]]); t[i] <- min(t[i], (cpu()-t0)/5) }
pred <- sapply(cf, function(c) a$time_ratio[a$dtype == c[[1]] & a$checkpoint == c[[2]] & a$recompute_gates == c[[3]] & a$accumulation_steps == c[[4]]])
print(data.frame(dtype = sapply(cf, `[[`, 1), checkpoint = sapply(cf, `[[`, 2), recompute = sapply(cf, `[[`, 3), micro = sapply(cf, `[[`, 4), step_s = round(t, 4), measured = round(t / t[1], 2), predicted = round(pred, 2)))
