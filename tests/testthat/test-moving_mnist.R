# convlstm_moving_mnist() and convlstm_read_idx(): real MNIST digits, the shipped subset and
# user idx files, and the errors for a file of the wrong format.

shipped <- function(kind) {
  system.file("extdata", sprintf("mnist-subset-%s.gz", kind), package = "convlstm")
}

write_idx <- function(path, type, dims, bytes, magic0 = as.raw(c(0, 0))) {
  con <- file(path, "wb")
  on.exit(close(con))
  writeBin(c(magic0, as.raw(type), as.raw(length(dims))), con)
  writeBin(as.integer(dims), con, size = 4, endian = "big")
  writeBin(as.raw(bytes), con)
}

test_that("read_idx reads row-major unsigned bytes into [n, rows, cols]", {
  path <- tempfile(fileext = ".idx")
  # two 2 x 3 images: values 0..11 in the file's row-major order
  write_idx(path, 8, c(2, 2, 3), 0:11)
  a <- convlstm_read_idx(path)
  expect_identical(dim(a), c(2L, 2L, 3L))
  expect_identical(a[1, 1, ], 0:2)   # first row of the first image
  expect_identical(a[1, 2, ], 3:5)
  expect_identical(a[2, 2, 3], 11L)
  write_idx(path, 8, 4, c(7, 0, 255, 3))
  expect_identical(convlstm_read_idx(path), c(7L, 0L, 255L, 3L))
})

test_that("the shipped subset is 1,000 MNIST digits, 100 per class", {
  img <- convlstm_read_idx(shipped("images-idx3-ubyte"))
  lab <- convlstm_read_idx(shipped("labels-idx1-ubyte"))
  expect_identical(dim(img), c(1000L, 28L, 28L))
  expect_identical(as.vector(table(lab)), rep(100L, 10))
  # real digits: grey levels, not a 0/1 font, on a mostly black ground
  expect_gt(length(unique(as.vector(img))), 200)
  expect_gt(mean(img == 0), 0.7)
})

test_that("moving_mnist has the paper's layout and puts whole digits in every frame", {
  d <- convlstm_moving_mnist(n = 5, n_digits = 1, seed = 3)
  expect_identical(dim(d$x), c(5L, 10L, 1L, 64L, 64L))
  expect_identical(dim(d$y), c(5L, 10L, 1L, 64L, 64L))
  expect_true(all(d$x >= 0 & d$x <= 1))
  img <- convlstm_read_idx(shipped("images-idx3-ubyte"))
  lab <- convlstm_read_idx(shipped("labels-idx1-ubyte"))
  expect_identical(d$digits[, 1], lab[d$index[, 1]])
  for (i in 1:5) {
    digit <- img[d$index[i, 1], , ] / 255
    all_frames <- array(0, c(20, 64, 64))
    all_frames[1:10, , ] <- d$x[i, , 1, , ]
    all_frames[11:20, , ] <- d$y[i, , 1, , ]
    for (t in 1:20) {
      f <- all_frames[t, , ]
      nz <- which(f > 0, arr.ind = TRUE)
      top <- min(nz[, 1]) - min(which(rowSums(digit) > 0))
      left <- min(nz[, 2]) - min(which(colSums(digit) > 0))
      expect_identical(f[top + 1:28, left + 1:28], digit)
      expect_equal(sum(f), sum(digit))
    }
  }
})

test_that("digits move at `speed` and bounce off the edges as in Srivastava et al.", {
  # step first, then clamp to the edge and reverse: by hand
  p <- bounce_clamped(c(1, 9, 4), c(-2.5, 2, 0.5), 10, 3)
  expect_equal(p[, 1], c(0, 2.5, 5))
  expect_equal(p[, 2], c(10, 8, 6))
  expect_equal(p[, 3], c(4.5, 5, 5.5))
  d <- convlstm_moving_mnist(n = 20, n_frames = 30, horizon = 0, n_digits = 1, speed = 3, seed = 9)
  img <- convlstm_read_idx(shipped("images-idx3-ubyte"))
  for (i in 1:20) {
    digit <- img[d$index[i, 1], , ]
    off <- c(min(which(rowSums(digit) > 0)), min(which(colSums(digit) > 0)))
    pos <- t(vapply(1:30, function(t) {
      nz <- which(d$x[i, t, 1, , ] > 0, arr.ind = TRUE)
      c(min(nz[, 1]), min(nz[, 2])) - off
    }, numeric(2)))
    expect_true(all(pos >= 0 & pos <= 36))
    step <- abs(diff(pos))
    # truncation to whole pixels moves each coordinate by at most one more
    expect_true(all(sqrt(rowSums(pmax(step - 1, 0)^2)) <= 3 + 1e-9))
    expect_true(max(sqrt(rowSums(step^2))) >= 2)
  }
})

test_that("a seed reproduces the data and leaves the caller's stream alone", {
  set.seed(11)
  before <- .Random.seed
  a <- convlstm_moving_mnist(n = 2, seed = 5)
  expect_identical(.Random.seed, before)
  expect_identical(convlstm_moving_mnist(n = 2, seed = 5), a)
  expect_false(identical(convlstm_moving_mnist(n = 2, seed = 6)$x, a$x))
  set.seed(1); b <- convlstm_moving_mnist(n = 2)
  set.seed(1); expect_identical(convlstm_moving_mnist(n = 2), b)
})

test_that("the default speed is Srivastava et al.'s tenth of the travel", {
  d <- convlstm_moving_mnist(n = 1, n_digits = 1, seed = 8)
  expect_identical(convlstm_moving_mnist(n = 1, n_digits = 1, speed = 3.6, seed = 8), d)
  expect_false(identical(convlstm_moving_mnist(n = 1, n_digits = 1, speed = 2, seed = 8)$x, d$x))
  expect_identical(convlstm_moving_mnist(n = 1, n_digits = 1, size = 48, seed = 8),
                   convlstm_moving_mnist(n = 1, n_digits = 1, size = 48, speed = 2, seed = 8))
})

test_that("a speed range draws each digit's speed within it", {
  d <- convlstm_moving_mnist(n = 3, speed = c(2, 5), seed = 1)
  expect_identical(dim(d$x), c(3L, 10L, 1L, 64L, 64L))
  expect_error(convlstm_moving_mnist(n = 1, speed = c(5, 2)), class = "convlstm_error_invalid")
  expect_error(convlstm_moving_mnist(n = 1, speed = -1), "`speed`", class = "convlstm_error_invalid")
})

test_that("moving_mnist draws from a Fashion-MNIST idx file a user points at", {
  images <- "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz"
  labels <- "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"
  skip_if_no_dataset(c(images, labels), "dataset-fashion-mnist")
  d <- convlstm_moving_mnist(n = 2, n_digits = 1, images = images, labels = labels, seed = 4)
  all_labels <- convlstm_read_idx(labels)
  expect_identical(d$digits[, 1], all_labels[d$index[, 1]])
  img <- convlstm_read_idx(images)
  expect_identical(dim(img), c(10000L, 28L, 28L))
  expect_equal(sum(d$x[1, 1, 1, , ]), sum(img[d$index[1, 1], , ]) / 255)
  nolab <- convlstm_moving_mnist(n = 2, n_digits = 1, images = images, seed = 4)
  expect_true(all(is.na(nolab$digits)))
  expect_identical(nolab$x, d$x)
})

test_that("a missing data set is a failure under CONVLSTM_DATASET_TESTS=require, else a skip", {
  old <- Sys.getenv("CONVLSTM_DATASET_TESTS", unset = NA)
  on.exit(if (is.na(old)) Sys.unsetenv("CONVLSTM_DATASET_TESTS") else
    Sys.setenv(CONVLSTM_DATASET_TESTS = old))
  nowhere <- file.path(tempdir(), "no-such-dataset", "t10k-images-idx3-ubyte.gz")
  Sys.setenv(CONVLSTM_DATASET_TESTS = "require")
  expect_failure(skip_if_no_dataset(nowhere, "dataset-fashion-mnist"),
                 "CONVLSTM_DATASET_TESTS=require, but Debian's dataset-fashion-mnist")
  Sys.unsetenv("CONVLSTM_DATASET_TESTS")
  expect_condition(skip_if_no_dataset(nowhere, "dataset-fashion-mnist"),
                   "dataset-fashion-mnist is not installed", class = "skip")
  expect_true(skip_if_no_dataset(tempdir(), "none"))
})

test_that("a digit file of the wrong format is a classed error naming the argument", {
  path <- tempfile(fileext = ".idx")
  write_idx(path, 8, c(2, 28, 28), rep(0, 2 * 28 * 28 - 5)) # cut short
  expect_error(convlstm_moving_mnist(n = 1, images = path), "`images`.*fewer than", class = "convlstm_error_invalid")
  write_idx(path, 8, c(2, 28, 28), rep(0, 2 * 28 * 28 + 1)) # too long
  expect_error(convlstm_moving_mnist(n = 1, images = path), "`images`.*beyond", class = "convlstm_error_invalid")
  write_idx(path, 0x0d, c(2, 28, 28), rep(0, 4 * 2 * 28 * 28)) # float32
  expect_error(convlstm_moving_mnist(n = 1, images = path), "`images`.*type 0x0d", class = "convlstm_error_invalid")
  writeLines("not an idx file at all", path)
  expect_error(convlstm_moving_mnist(n = 1, images = path), "`images`.*magic", class = "convlstm_error_invalid")
  expect_error(convlstm_read_idx(path), "`path`.*magic", class = "convlstm_error_invalid")
  write_idx(path, 8, 1000, rep(1, 1000)) # labels given as images
  expect_error(convlstm_moving_mnist(n = 1, images = path), "`images`.*images", class = "convlstm_error_invalid")
  expect_error(convlstm_moving_mnist(n = 1, images = file.path(tempdir(), "nope.gz")), "`images`.*no file",
               class = "convlstm_error_invalid")
  write_idx(path, 8, 7, rep(1, 7)) # 7 labels for 1,000 images
  expect_error(convlstm_moving_mnist(n = 1, images = shipped("images-idx3-ubyte"), labels = path),
               "`labels`.*1000 labels", class = "convlstm_error_invalid")
  expect_error(convlstm_moving_mnist(n = 1, labels = path), "`labels`", class = "convlstm_error_invalid")
})

test_that("bad sizes are classed errors", {
  expect_error(convlstm_moving_mnist(n = 1, size = 20), "`size`", class = "convlstm_error_invalid")
  expect_error(convlstm_moving_mnist(n = 1, n_frames = 10, horizon = 10), "`horizon`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_moving_mnist(n = 0), "`n`", class = "convlstm_error_invalid")
})
