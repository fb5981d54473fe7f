# bench/paper_mnist_data.R -- the Moving MNIST sequences of the paper
# benchmark (bench/README.md, "The paper check"), drawn once with the
# package's convlstm_moving_mnist() and written where both sides read them
# (bench/paper_mnist.py, bench/paper_mnist.R):
#
#   Rscript bench/paper_mnist_data.R [--dir=build/paper_mnist] [--n-train=256]
#       [--n-test=64] [--seed=2015] [--images=PATH]
#
# DIR/train.u8 and DIR/test.u8: unsigned bytes, row-major [n, 20, 64, 64]
# (drawn in chunks of 500 sequences, write_set()),
# each the pixel times 255 (convlstm_moving_mnist()'s values are MNIST's bytes / 255,
# so this is exact; the readers divide by 255 in double and store float32,
# as the package stores R's doubles); DIR/data.txt: one "key value" a line
# (n_train, n_test, seq_len, size, seed, images, the package's version).
# Frames 1-10 of a sequence are the input, 11-20 the target (Shi et al.).
# --images: an idx file of digits (e.g. MNIST's train-images-idx3-ubyte.gz)
# instead of the 1,000 digits the package ships.
suppressPackageStartupMessages(library(convlstm))

source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]])),
                 "bench_args.R")) # bench_arg()
dir <- bench_arg("dir", file.path("build", "paper_mnist"))
n_train <- as.integer(bench_arg("n-train", 256))
n_test <- as.integer(bench_arg("n-test", 64))
seed <- as.integer(bench_arg("seed", 2015))
images <- bench_arg("images", "")
dir.create(dir, recursive = TRUE, showWarnings = FALSE)

# frames [n, 20, 1, 64, 64] in R's order -> bytes row-major over [n, 20, 64, 64]
# appended to the open connection con
write_u8 <- function(frames, con) {
  bytes <- round(frames * 255)
  stopifnot(max(abs(frames * 255 - bytes)) < 1e-6, min(bytes) >= 0, max(bytes) <= 255)
  d <- dim(frames)
  writeBin(as.raw(aperm(array(bytes, d[-3]), 4:1)), con) # row-major: the last index fastest
}

# n sequences in chunks of at most 500 (a chunk is 330 MB of doubles), chunk k
# (from 0) drawn with seed + 2k + offset: the training set's offset 0, the
# test set's 1, so that the two never share a seed
write_set <- function(n, offset, path) {
  con <- file(path, "wb")
  on.exit(close(con))
  for (k in seq(0, (n - 1) %/% 500)) {
    m <- min(500L, n - 500L * k)
    write_u8(convlstm_moving_mnist(n = m, n_frames = 20, size = 64, horizon = 0, seed = seed + 2L * k + offset,
                          images = if (nzchar(images)) images else NULL)$x, con)
  }
}
t0 <- Sys.time()
write_set(n_train, 0L, file.path(dir, "train.u8"))
write_set(n_test, 1L, file.path(dir, "test.u8"))
writeLines(c(
  paste("n_train", n_train), paste("n_test", n_test), "seq_len 20", "size 64",
  paste("seed", seed), paste("images", if (nzchar(images)) images else "shipped"),
  paste("convlstm", format(utils::packageVersion("convlstm")))
), file.path(dir, "data.txt"))
cat(sprintf("paper_mnist_data: %d training and %d test sequences of 20 64x64 frames in %s (%.1fs)\n",
            n_train, n_test, dir, as.numeric(difftime(Sys.time(), t0, units = "secs"))))
