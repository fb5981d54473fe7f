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
arg <- function(name, default) {
  hit <- grep(paste0("^--", name, "="), commandArgs(TRUE), value = TRUE)
  if (length(hit) == 0) default else sub("^[^=]*=", "", hit[[length(hit)]])
}
dir <- arg("dir", file.path("build", "paper_mnist"))
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
show <- c("device", "threads", "hidden", "kernel", "patch", "parameters", "batch", "steps",
          "seconds_per_step_median", "loss_first", "loss_last", "test_ce_before",
          "test_ce_after")
tab <- sapply(res[!vapply(res, is.null, TRUE)], function(r) r[show])
rownames(tab) <- show
print(noquote(tab))
if (!is.null(res$pytorch)) {
  cat(sprintf("  test cross-entropy of a constant prediction (the training mean): %s; the floor (the targets' own entropy): %s\n",
              res$pytorch[["test_ce_constant"]], res$pytorch[["test_ce_floor"]]))
}

if (is.null(cl)) {
  cat("\nThe package's side has not run (no convlstm_losses.csv): nothing to compare yet.\n")
} else {
  n <- min(nrow(pt), nrow(cl))
  d <- abs(cl$loss[seq_len(n)] - pt$loss[seq_len(n)])
  rel <- d / abs(pt$loss[seq_len(n)])
  at <- which.max(d)
  cat(sprintf("\nLargest step-wise loss difference over %d steps: %.6g at step %d (%.3g relative); largest relative %.3g at step %d\n",
              n, d[[at]], at, rel[[at]], max(rel), which.max(rel)))
  cat(sprintf("Mean relative difference over the steps: %.3g\n", mean(rel)))
}
twin <- setdiff(grep("^loss_", names(pt), value = TRUE), character(0))
for (tw in twin) {
  ok <- !is.na(pt[[tw]])
  if (!any(ok)) next
  dt <- abs(pt$loss[ok] - pt[[tw]][ok])
  cat(sprintf("PyTorch's float32 against its %s twin over its %d steps: largest difference %.6g (%.3g relative): what float rounding alone gives\n",
              sub("^loss_", "", tw), sum(ok), max(dt), max(dt / abs(pt[[tw]][ok]))))
}

cat("\nShi et al. (2015), Table 1, cross-entropy per test sequence (10 predicted 64x64 frames):\n")
table1 <- c("FC-LSTM-2048-2048" = 4832.49, "ConvLSTM(5x5)-5x5-256" = 3887.94,
            "ConvLSTM(5x5)-5x5-128-5x5-128" = 3733.56,
            "ConvLSTM(5x5)-5x5-128-5x5-64-5x5-64" = 3670.85)
for (k in names(table1)) cat(sprintf("  %-40s %8.2f\n", k, table1[[k]]))
cat(paste0("A reduced CPU run (a small model, a few hundred sequences, a few hundred steps) is not the ",
           "paper's experiment: its test cross-entropy is not comparable to Table 1's; what it checks ",
           "is that the package and PyTorch follow the same curve.\n"))

png(file.path(dir, "paper_mnist_curves.png"), width = 900, height = 560, res = 110)
ylim <- range(c(pt$loss, cl$loss, table1))
plot(pt$step, pt$loss, type = "l", col = "grey20", lwd = 2, log = "y", ylim = ylim,
     xlab = "training step", ylab = "cross-entropy per sequence (log scale)",
     main = "Moving MNIST, encoder-forecaster: training loss per step")
if (!is.null(cl)) lines(cl$step, cl$loss, col = "firebrick", lwd = 1, lty = 2)
abline(h = table1, col = "steelblue", lty = 3)
text(max(pt$step), table1, names(table1), adj = c(1, -0.3), cex = 0.6, col = "steelblue")
legend("topright", bty = "n", cex = 0.8,
       legend = c("PyTorch", if (!is.null(cl)) "convlstm", "Table 1 (full models, test set)"),
       col = c("grey20", if (!is.null(cl)) "firebrick", "steelblue"),
       lty = c(1, if (!is.null(cl)) 2, 3), lwd = c(2, if (!is.null(cl)) 1, 1))
invisible(dev.off())
cat("Plot:", file.path(dir, "paper_mnist_curves.png"), "\n")
