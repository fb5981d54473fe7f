# bench/bench_memory_mnist64.R -- our side of bench_memory_mnist64.sh: one
# training step of the mnist64 model (1 -> c(64, 64), 3x3, T = 10, 64x64,
# Adam, MSE on the last state) in a fresh process, the growth of VmHWM over
# it (reset through /proc/self/clear_refs) beside the plan, and the plan's
# largest buffers.
#
#   Rscript bench/bench_memory_mnist64.R BATCH
B <- as.integer(commandArgs(TRUE)[[1]])
suppressPackageStartupMessages(library(convlstm))
status <- function(k) {
  l <- readLines("/proc/self/status")
  as.numeric(sub("^[^0-9]*([0-9]+).*$", "\\1", grep(paste0("^", k, ":"), l, value = TRUE))) * 1024
}
set.seed(1)
x <- array(runif(B * 10 * 64 * 64), c(B, 10, 1, 64, 64))
y <- array(runif(B * 64 * 64 * 64), c(B, 64, 64, 64))
# warm-up at a tiny shape: the process's costs, not the model's
w <- convlstm(1, c(2, 2), 3, device = "cpu", threads = 1)
invisible(train_step(w, x[1, 1:2, , 1:8, 1:8, drop = FALSE], array(runif(128), c(1, 2, 8, 8)),
                     optimizer_adam()))
m <- convlstm(1, c(64, 64), 3, device = "cpu", threads = 1)
opt <- optimizer_adam()
est <- memory_estimate(m, B, 10, 64, 64, optimizer = opt)
invisible(gc())
r0 <- status("VmRSS")
writeLines("5", "/proc/self/clear_refs")
t0 <- proc.time()[["user.self"]]
invisible(train_step(m, x, y, opt))
cpu <- proc.time()[["user.self"]] - t0
cat(sprintf("ours  batch %d: VmHWM growth %.1f MiB, plan %.1f MiB, CPU %.2f s\n", B,
            (status("VmHWM") - r0) / 2^20, est$bytes[est$category == "total"] / 2^20, cpu))
p <- attr(est, "plan")
p$buffer <- sub("\\[.*", "", p$name)
a <- aggregate(bytes ~ buffer + category, p, sum)
a <- a[order(-a$bytes), ]
a$MiB <- round(a$bytes / 2^20, 1)
a$share <- round(a$bytes / sum(p$bytes), 3)
print(utils::head(a[c("buffer", "category", "MiB", "share")], 6), row.names = FALSE)
