# bench/paper_mnist_compare.R -- the paper check's two sides side by side
# (bench/README.md, "The paper check"): the learning curves of
# bench/paper_mnist.py (PyTorch) and bench/paper_mnist.R (the package), the
# largest step-wise loss difference, each side's test cross-entropy per
# sequence, and Shi et al. (2015)'s Table 1 beside them.
#
#   Rscript bench/paper_mnist_compare.R [--dir=build/paper_mnist]
#
# Reads DIR/torch_losses.csv, DIR/torch_result.txt and, where the package's
# side has run, DIR/convlstm_losses.csv and DIR/convlstm_result.txt; writes
# DIR/paper_mnist_curves.png. Base R only (no package needed).
source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]])),
                 "bench_args.R")) # bench_arg()
dir <- bench_arg("dir", file.path("build", "paper_mnist"))
read_result <- function(side) {
  f <- file.path(dir, paste0(side, "_result.txt"))
  if (!file.exists(f)) return(NULL)
  kv <- strsplit(readLines(f), " ", fixed = TRUE)
  stats::setNames(vapply(kv, function(v) paste(v[-1], collapse = " "), ""), vapply(kv, `[[`, "", 1))
}
read_curve <- function(side) {
  f <- file.path(dir, paste0(side, "_losses.csv"))
  if (file.exists(f)) utils::read.csv(f) else NULL
}
pt <- read_curve("torch")
if (is.null(pt)) stop("no ", file.path(dir, "torch_losses.csv"), ": run bench/paper_mnist.py first")
cl <- read_curve("convlstm")
res <- list(pytorch = read_result("torch"), convlstm = read_result("convlstm"))

cat("The paper check: Shi et al.'s encoder-forecaster on Moving MNIST (", dir, ")\n", sep = "")
show <- c("device", "threads", "hidden", "kernel", "rkernel", "patch", "parameters", "batch", "lr", "alpha", "eps", "steps",
          "seconds_per_step_median", "loss_first", "loss_last", "test_ce_before",
          "test_ce_after")
tab <- sapply(res[!vapply(res, is.null, TRUE)], function(r) r[show])
rownames(tab) <- show
print(noquote(tab))
if (!is.null(res$pytorch)) {
  cat(sprintf("  test cross-entropy of a constant prediction (the training mean): %s; the floor (the targets' own entropy): %s\n",
              res$pytorch[["test_ce_constant"]], res$pytorch[["test_ce_floor"]]))
}

# Step-wise relative difference of curve a against b, and where it first
# passes 1e-6, 1e-4 and 1e-2.
divergence <- function(a, b, label) {
  n <- min(length(a), length(b))
  ok <- !is.na(a[seq_len(n)]) & !is.na(b[seq_len(n)])
  rel <- abs(a[seq_len(n)] - b[seq_len(n)]) / abs(b[seq_len(n)])
  rel[!ok] <- NA
  first <- function(th) {
    i <- which(rel > th)[1]
    if (is.na(i)) "never" else as.character(i)
  }
  upto <- function(k) if (sum(ok) >= k) sprintf("%.2g", max(rel[seq_len(k)], na.rm = TRUE)) else "-"
  at <- which.max(rel)
  cat(sprintf(paste0("%s, %d steps: largest difference %.6g at step %d (%.3g relative); largest ",
                     "relative over the first 50 / 100 / 200 steps %s / %s / %s; first step beyond ",
                     "1e-6 / 1e-4 / 1e-2 relative: %s / %s / %s\n"),
              label, sum(ok), abs(a[at] - b[at]), at, rel[at], upto(50), upto(100), upto(200),
              first(1e-6), first(1e-4), first(1e-2)))
  rel
}
cat("\n")
rel_cl <- NULL
if (is.null(cl)) {
  cat("The package's side has not run (no convlstm_losses.csv): nothing to compare yet.\n")
} else {
  rel_cl <- divergence(cl$loss, pt$loss, "convlstm against PyTorch")
}
# PyTorch against its twin (paper_mnist.py --twin): how far float rounding
# alone moves the curve, the yardstick for the line above
rel_tw <- list()
for (tw in grep("^loss_", names(pt), value = TRUE)) {
  if (all(is.na(pt[[tw]]))) next
  rel_tw[[tw]] <- divergence(pt$loss, pt[[tw]], sprintf("PyTorch against its %s twin (float rounding alone)",
                                                        sub("^loss_", "", tw)))
}

cat("\nShi et al. (2015), Table 1, cross-entropy per test sequence (10 predicted 64x64 frames):\n")
table1 <- c("FC-LSTM-2048-2048" = 4832.49, "ConvLSTM(5x5)-5x5-256" = 3887.94,
            "ConvLSTM(5x5)-5x5-128-5x5-128" = 3733.56,
            "ConvLSTM(5x5)-5x5-128-5x5-64-5x5-64" = 3670.85)
for (k in names(table1)) cat(sprintf("  %-40s %8.2f\n", k, table1[[k]]))
cat(paste0("A reduced CPU run (a small model, a few hundred sequences, a few hundred steps) is not the ",
           "paper's experiment: its test cross-entropy is not comparable to Table 1's; what it checks ",
           "is that the package and PyTorch follow the same curve.\n"))

png(file.path(dir, "paper_mnist_curves.png"), width = 900, height = 900, res = 110)
op <- par(mfrow = c(2, 1), mar = c(4, 4.5, 2.5, 1))
ylim <- range(c(pt$loss, cl$loss, table1))
plot(pt$step, pt$loss, type = "l", col = "grey20", lwd = 2, log = "y", ylim = ylim,
     xlab = "training step", ylab = "cross-entropy per sequence",
     main = "Moving MNIST, encoder-forecaster: training loss per step")
if (!is.null(cl)) lines(cl$step, cl$loss, col = "firebrick", lwd = 1, lty = 2)
abline(h = table1, col = "steelblue", lty = 3)
text(max(pt$step), table1[c(1, 2)], adj = c(1, -0.4), cex = 0.65, col = "steelblue",
     c(names(table1)[[1]], paste("ConvLSTM 1 / 2 / 3 layers:", paste(table1[-1], collapse = " / "))))
legend("topright", bty = "n", cex = 0.8,
       legend = c("PyTorch", if (!is.null(cl)) "convlstm", "Table 1 (full models, test set)"),
       col = c("grey20", if (!is.null(cl)) "firebrick", "steelblue"),
       lty = c(1, if (!is.null(cl)) 2, 3), lwd = c(2, if (!is.null(cl)) 1, 1))
curves <- c(if (!is.null(rel_cl)) list("convlstm vs PyTorch" = rel_cl),
            stats::setNames(rel_tw, paste("PyTorch vs its", sub("^loss_", "", names(rel_tw)), "twin")))
if (length(curves) > 0) {
  floor_at <- 1e-9 # an equal step (difference 0) drawn here
  all_rel <- pmax(unlist(curves), floor_at)
  plot(NA, xlim = range(pt$step), ylim = range(all_rel, na.rm = TRUE), log = "y",
       xlab = "training step", ylab = "|difference| / PyTorch's loss",
       main = sprintf("Step-wise relative difference (%g: equal)", floor_at))
  cols <- c(if (!is.null(rel_cl)) "firebrick", "darkorange", "darkgreen")
  for (i in seq_along(curves)) {
    lines(seq_along(curves[[i]]), pmax(curves[[i]], floor_at), col = cols[[i]], lwd = 1)
  }
  legend("topleft", bty = "n", cex = 0.8, legend = names(curves), col = cols[seq_along(curves)],
         lty = 1)
}
par(op)
invisible(dev.off())
cat("Plot:", file.path(dir, "paper_mnist_curves.png"), "\n")
