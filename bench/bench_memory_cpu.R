# bench/bench_memory_cpu.R -- our side of bench_memory_cpu.sh: one training
# step of a config (mnist64, video64 or tutorial; see the .sh) with Adam and
# MSE on the last state, in a fresh process, the growth of VmHWM over it
# (reset through /proc/self/clear_refs) beside the plan, and the plan's
# largest buffers.
#
#   Rscript bench/bench_memory_cpu.R CONFIG BATCH
args <- commandArgs(TRUE)
configs <- list(mnist64 = list(n = 1, hidden = c(64, 64), T = 10, size = 64),
                video64 = list(n = 3, hidden = 64, T = 10, size = 64),
                tutorial = list(n = 1, hidden = c(64, 1), T = 20, size = 24))
cf <- configs[[args[[1]]]]
if (is.null(cf)) stop("config: one of ", paste(names(configs), collapse = ", "))
B <- as.integer(args[[2]])
S <- cf$size
K <- cf$hidden[[length(cf$hidden)]]
suppressPackageStartupMessages(library(convlstm))
status <- function(k) {
  l <- readLines("/proc/self/status")
  as.numeric(sub("^[^0-9]*([0-9]+).*$", "\\1", grep(paste0("^", k, ":"), l, value = TRUE))) * 1024
}
set.seed(1)
x <- array(runif(B * cf$T * cf$n * S * S), c(B, cf$T, cf$n, S, S))
y <- array(runif(B * K * S * S), c(B, K, S, S))
# warm-up at a tiny shape: the process's costs, not the model's
w <- convlstm(cf$n, c(2, 2), 3, device = "cpu", threads = 1)
invisible(convlstm_train_step(w, x[1, 1:2, , 1:8, 1:8, drop = FALSE], array(runif(128), c(1, 2, 8, 8)),
                     convlstm_optimizer_adam()))
m <- convlstm(cf$n, cf$hidden, 3, device = "cpu", threads = 1)
opt <- convlstm_optimizer_adam()
est <- convlstm_memory_estimate(m, B, cf$T, S, S, optimizer = opt, target = "last_state")
invisible(gc())
r0 <- status("VmRSS")
writeLines("5", "/proc/self/clear_refs")
t0 <- proc.time()[["user.self"]]
invisible(convlstm_train_step(m, x, y, opt))
cpu <- proc.time()[["user.self"]] - t0
cat(sprintf("ours  %s batch %d: VmHWM growth %.1f MiB, plan %.1f MiB, CPU %.2f s\n", args[[1]], B,
            (status("VmHWM") - r0) / 2^20, est$bytes[est$category == "total"] / 2^20, cpu))
p <- attr(est, "plan")
p$buffer <- sub("\\[.*", "", p$name)
a <- aggregate(bytes ~ buffer + category, p, sum)
a <- a[order(-a$bytes), ]
a$MiB <- round(a$bytes / 2^20, 1)
a$share <- round(a$bytes / sum(p$bytes), 3)
print(utils::head(a[c("buffer", "category", "MiB", "share")], 6), row.names = FALSE)
