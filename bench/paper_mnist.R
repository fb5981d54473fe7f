# bench/paper_mnist.R -- the package's side of the paper check (Shi et al.
# 2015, Moving MNIST; bench/README.md, "The paper check"): the same run as
# bench/paper_mnist.py, through the package's R API for the
# encoder-forecaster: convlstm_forecaster(), convlstm_load_state_dict(),
# convlstm_optimizer_rmsprop(lr = 1e-3, alpha = 0.9), convlstm_train_step(loss = "bce_logits",
# reduction = "batchmean") and predict(horizon = 10).
#
#   Rscript bench/paper_mnist.R [--dir=build/paper_mnist] [--hidden=16,16]
#       [--kernel=5] [--rkernel=K] [--patch=4] [--batch=8] [--steps=300] [--budget-s=0]
#       [--threads=1] [--device=cpu] [--lr=1e-3] [--alpha=0.9]
#       [--eps=1e-8]
#
# Reads DIR/train.u8, DIR/test.u8, DIR/data.txt (bench/paper_mnist_data.R)
# and the initial weights DIR/init.safetensors that bench/paper_mnist.py
# wrote (run it first: it draws them), read here with base R. Step s (from
# 1) trains on sequences (s - 1) B + 1 .. s B of the training set (wrapping
# around), in file order, as PyTorch's side. Writes DIR/convlstm_losses.csv
# (step, loss, seconds of the step) and DIR/convlstm_result.txt, and prints
# the loss per step and the test cross-entropy per sequence before and after.
suppressPackageStartupMessages(library(convlstm))

source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]])),
                 "bench_args.R")) # bench_arg()
dir <- bench_arg("dir", file.path("build", "paper_mnist"))
hidden <- as.integer(strsplit(bench_arg("hidden", "16,16"), ",")[[1]])
kernel <- as.integer(bench_arg("kernel", 5))
rkernel <- as.integer(bench_arg("rkernel", 0)) # the state-to-state kernel (0: kernel)
if (rkernel == 0) rkernel <- kernel
patch <- as.integer(bench_arg("patch", 4))
batch <- as.integer(bench_arg("batch", 8))
steps <- as.integer(bench_arg("steps", 300))
budget <- as.numeric(bench_arg("budget-s", 0))
threads <- as.integer(bench_arg("threads", 1))
device <- bench_arg("device", "cpu")
lr <- as.numeric(bench_arg("lr", 1e-3)) # RMSprop's: the paper's 1e-3 and decay 0.9
alpha <- as.numeric(bench_arg("alpha", 0.9))
eps <- as.numeric(bench_arg("eps", 1e-8)) # torch's default
t_in <- 10L
t_out <- 10L

info <- local({
  kv <- strsplit(readLines(file.path(dir, "data.txt")), " ", fixed = TRUE)
  stats::setNames(lapply(kv, function(v) paste(v[-1], collapse = " ")), vapply(kv, `[[`, "", 1))
})
size <- as.integer(info$size)
seq_bytes <- 20L * size * size

# The sequences as bytes (one per pixel), converted batch by batch: rows
# `idx` -> [length(idx), 20, 1, size, size] doubles, byte / 255.
read_u8 <- function(path, n) readBin(path, "raw", n * seq_bytes)
sequences <- function(raw, idx) {
  at <- unlist(lapply(idx, function(i) (i - 1) * seq_bytes + seq_len(seq_bytes)))
  a <- array(as.integer(raw[at]) / 255, c(size, size, 20L, length(idx)))
  a <- aperm(a, 4:1) # row-major [n, 20, H, W] read column-major is [W, H, 20, n]
  dim(a) <- c(length(idx), 20L, 1L, size, size)
  a
}
train <- read_u8(file.path(dir, "train.u8"), as.integer(info$n_train))
test <- read_u8(file.path(dir, "test.u8"), as.integer(info$n_test))
n_train <- length(train) %/% seq_bytes
n_test <- length(test) %/% seq_bytes

# A bare safetensors file of float32 tensors (as safetensors_check.py's
# write_plain() lays it out) -> a named list of R arrays in torch's shapes
# (element [o, i, kh, kw] is torch's w[o-1, i-1, kh-1, kw-1]; 1-d: vectors).
read_safetensors <- function(path) {
  con <- file(path, "rb")
  on.exit(close(con))
  len <- readBin(con, "integer", 2, size = 4, endian = "little")
  header <- rawToChar(readBin(con, "raw", len[[1]] + len[[2]] * 2^32))
  data <- readBin(con, "raw", file.size(path))
  entry <- '"([^"]+)":\\{"dtype":"F32","shape":\\[([0-9,]*)\\],"data_offsets":\\[([0-9]+),([0-9]+)\\]\\}'
  hits <- regmatches(header, gregexpr(entry, header))[[1]]
  n_keys <- lengths(regmatches(header, gregexpr('"data_offsets"', header)))
  if (length(hits) != n_keys) stop("read_safetensors: ", path, " has tensors other than F32")
  out <- lapply(hits, function(h) {
    f <- regmatches(h, regexec(entry, h))[[1]]
    shape <- as.integer(strsplit(f[[3]], ",")[[1]])
    b <- as.numeric(f[[4]])
    e <- as.numeric(f[[5]])
    v <- readBin(data[seq(b + 1, length.out = e - b)], "numeric", size = 4, n = (e - b) / 4,
                 endian = "little")
    if (length(shape) < 2) v else aperm(array(v, rev(shape)), rev(seq_along(shape)))
  })
  stats::setNames(out, vapply(hits, function(h) regmatches(h, regexec(entry, h))[[1]][[2]], ""))
}

# The paper's cross-entropy per sequence of logits z against targets y, in
# double: max(z, 0) - z y + log(1 + exp(-|z|)), summed, over the sequences.
bce_per_sequence <- function(z, y) {
  sum(pmax(z, 0) - z * y + log1p(exp(-abs(z)))) / dim(z)[[1]]
}
test_ce <- function(model) {
  total <- 0
  for (i in seq(1, n_test, by = batch)) {
    s <- sequences(test, i:min(n_test, i + batch - 1))
    z <- predict(model, s[, 1:t_in, , , , drop = FALSE], horizon = t_out)
    total <- total + bce_per_sequence(z, s[, t_in + 1:t_out, , , , drop = FALSE]) * dim(s)[[1]]
  }
  total / n_test
}

model <- convlstm_forecaster(input_dim = 1L, hidden_dims = hidden,
                             kernel_sizes = rep(kernel, length(hidden)),
                             recurrent_kernel_sizes = if (rkernel != kernel) rep(rkernel, length(hidden)),
                             patch = patch,
                             peephole = "channel", device = device, threads = threads)
convlstm_load_state_dict(model, read_safetensors(file.path(dir, "init.safetensors")))
n_par <- sum(lengths(convlstm_state_dict(model)))
cat(sprintf(paste0("paper_mnist.R: convlstm %s, %s, %d threads; hidden %s, kernel %d-%d, patch %d: ",
                   "%d parameters; weights from %s; %d training / %d test sequences, batch %d\n"),
            format(utils::packageVersion("convlstm")), device, threads,
            paste(hidden, collapse = ","), kernel, rkernel, patch, n_par,
            file.path(dir, "init.safetensors"), n_train, n_test, batch))

opt <- convlstm_optimizer_rmsprop(lr = lr, alpha = alpha, eps = eps)
ce0 <- test_ce(model)
losses <- seconds <- numeric(steps)
done <- 0L
# written step by step, so that a run cut short keeps its curve
csv <- file(file.path(dir, "convlstm_losses.csv"), "w")
writeLines("step,loss,seconds", csv)
t_start <- proc.time()[["elapsed"]]
for (s in seq_len(steps)) {
  seqs <- sequences(train, ((s - 1) * batch + seq_len(batch) - 1) %% n_train + 1)
  x <- seqs[, 1:t_in, , , , drop = FALSE]
  y <- seqs[, t_in + 1:t_out, , , , drop = FALSE]
  t0 <- proc.time()[["elapsed"]]
  loss <- convlstm_train_step(model, x, y, opt, loss = "bce_logits", reduction = "batchmean")
  secs <- proc.time()[["elapsed"]] - t0
  losses[[s]] <- as.numeric(loss)
  seconds[[s]] <- secs
  done <- s
  writeLines(sprintf("%d,%.9g,%.9g", s, losses[[s]], secs), csv)
  flush(csv)
  cat(sprintf("step %4d  loss %.4f  %.3fs\n", s, loss, secs))
  if (budget > 0 && proc.time()[["elapsed"]] - t_start > budget) break
}
wall <- proc.time()[["elapsed"]] - t_start
ce1 <- test_ce(model)
close(csv)
rows <- data.frame(step = seq_len(done), loss = losses[seq_len(done)],
                   seconds = seconds[seq_len(done)])

result <- c(
  side = "convlstm", convlstm = format(utils::packageVersion("convlstm")), device = device,
  threads = threads, hidden = paste(hidden, collapse = ","), kernel = kernel,
  rkernel = rkernel, patch = patch,
  parameters = n_par, batch = batch, lr = lr, alpha = alpha, eps = eps, steps = nrow(rows),
  seconds_per_step_median = sprintf("%.4f", stats::median(rows$seconds)),
  wall_seconds = sprintf("%.1f", wall), loss_first = sprintf("%.4f", rows$loss[[1]]),
  loss_last = sprintf("%.4f", rows$loss[[nrow(rows)]]),
  test_ce_before = sprintf("%.2f", ce0), test_ce_after = sprintf("%.2f", ce1)
)
writeLines(paste(names(result), result), file.path(dir, "convlstm_result.txt"))
writeLines(paste(names(result), result))
convlstm_release(model)
