# moving_mnist.R -- Moving MNIST (Srivastava et al. 2015), the data Shi et
# al. (2015) forecast with a ConvLSTM: real MNIST digits bouncing in the
# frame. The digits come from a 1,000-digit subset shipped in inst/extdata
# (built by tools/make_mnist_subset.py; provenance in inst/COPYRIGHTS) or
# from an MNIST-format (idx) file the user points at. Data generation and
# the idx reader only: no model code.

#' Moving MNIST: real handwritten digits bouncing in the frame
#'
#' Sequences of `size` x `size` frames in which `n_digits` MNIST digits
#' move and bounce, built as Srivastava et al. (2015) built Moving MNIST and
#' Shi et al. (2015) used it: each digit (28 x 28 pixels, values `pixel /
#' 255`) starts at a uniformly random place, moves in a uniformly random
#' direction at `speed` pixels per frame, and on reaching an edge stops
#' there and reverses that component of its velocity; where digits overlap
#' the frame holds the brighter pixel. Positions are truncated to whole
#' pixels. With the defaults a sequence is 10 input frames and 10 frames to
#' forecast, in 64 x 64 frames, each digit moving 3.6 pixels per frame
#' (Srivastava et al.'s step of 0.1 of the 36 pixels a digit can travel).
#'
#' By default the digits are drawn from the 1,000 MNIST digits (100 of each
#' class) shipped with the package in MNIST's own idx format
#' (`system.file("extdata", package = "convlstm")`; where they come from and
#' their licences are in the package's `COPYRIGHTS` file). Point `images` at
#' a full MNIST or Fashion-MNIST file (for instance
#' `train-images-idx3-ubyte.gz`; gzip-compressed or not) to draw from it
#' instead; any idx file of unsigned-byte images no larger than the frame
#' works.
#'
#' @inheritParams convlstm_moving_digits
#' @param n Number of sequences.
#' @param n_frames Frames per sequence: the input frames and the `horizon`
#'   frames together (`seq_len` elsewhere, e.g. [convlstm_memory_estimate()], is the
#'   input steps alone).
#' @param size Height and width of each frame, in pixels (at least the
#'   digits' size, 28 for MNIST).
#' @param speed Pixels a digit moves per frame: `NULL` for Srivastava et
#'   al.'s step, a tenth of the distance a digit can travel across the frame
#'   (3.6 for 28-pixel digits in 64-pixel frames); one number; or two, the
#'   range within which each digit's speed is drawn uniformly (Shi et al.'s
#'   variant).
#' @param horizon `0`, or split each sequence into `n_frames - horizon` input
#'   frames `x` and the `horizon` frames `y` that follow.
#' @param images `NULL` for the shipped digits, or the path of an idx
#'   images file (magic number 2051, unsigned bytes, `[n, rows, cols]`).
#' @param labels With `images`, `NULL` or the path of the matching idx
#'   labels file (magic number 2049); without it the labels returned are
#'   `NA`.
#' @return A list with
#'   \item{x}{array `[n, n_frames - horizon, 1, size, size]` of the frames
#'     (all of them when `horizon = 0`), values in \[0, 1\];}
#'   \item{y}{array `[n, horizon, 1, size, size]` of the frames that follow,
#'     or `NULL` when `horizon = 0`;}
#'   \item{digits}{integer matrix `[n, n_digits]`: the labels of the digits
#'     drawn;}
#'   \item{index}{integer matrix `[n, n_digits]`: their rows in the digit
#'     file.}
#' @references Srivastava, N., Mansimov, E. and Salakhutdinov, R. (2015).
#'   Unsupervised learning of video representations using LSTMs. ICML.
#'
#'   Shi, X. et al. (2015). Convolutional LSTM network: a machine learning
#'   approach for precipitation nowcasting. NeurIPS.
#' @seealso [convlstm_moving_digits()] for a lighter variant with a bitmap font;
#'   [convlstm_read_idx()] to read the digit files; [convlstm_forecast_metrics()] to score a
#'   forecast.
#' @export
#' @examples
#' d <- convlstm_moving_mnist(n = 2, seed = 1)
#' dim(d$x)   # [2, 10, 1, 64, 64]
#' dim(d$y)   # [2, 10, 1, 64, 64]
#' d$digits
#' op <- par(mfrow = c(2, 5), mar = c(0.2, 0.2, 0.2, 0.2))
#' for (t in 1:10) {
#'   image(t(d$x[1, t, 1, 64:1, ]), axes = FALSE, col = gray.colors(32, 0, 1))
#' }
#' par(op)
convlstm_moving_mnist <- function(n = 100, n_frames = 20, size = 64, n_digits = 2, speed = NULL,
                         horizon = 10, images = NULL, labels = NULL, seed = NULL, ...) {
  call <- sys.call()
  refuse_generator_dots(list(...), "convlstm_moving_mnist", call)
  n <- check_count(n, "n", call = call)
  n_frames <- check_count(n_frames, "n_frames", call = call)
  size <- check_count(size, "size", call = call)
  n_digits <- check_count(n_digits, "n_digits", call = call)
  if (!is.null(speed)) speed <- check_speed(speed, call)
  horizon <- check_generator_horizon(horizon, n_frames, call)
  if (!is.null(seed)) check_number(seed, "seed", call = call)
  src <- mnist_source(images, labels, call)
  glyph <- dim(src$images)[1:2]
  if (any(glyph > size)) {
    abort_convlstm(sprintf("`size` (%d) must be at least the digits' %d x %d pixels.",
                           size, glyph[[1]], glyph[[2]]), call = call)
  }
  if (is.null(speed)) speed <- 0.1 * (size - max(glyph))
  m <- n * n_digits
  draws <- beams_with_seed(seed, list(
    index = matrix(sample.int(dim(src$images)[[3]], m, replace = TRUE), n, n_digits),
    row = stats::runif(m), col = stats::runif(m),
    angle = stats::runif(m, 0, 2 * pi),
    speed = if (length(speed) == 2) stats::runif(m, speed[[1]], speed[[2]]) else rep(speed, m)
  ))
  # positions in pixels over the frames, one column per digit
  span <- size - glyph
  rows <- bounce_clamped(draws$row * span[[1]], draws$speed * sin(draws$angle), span[[1]], n_frames)
  cols <- bounce_clamped(draws$col * span[[2]], draws$speed * cos(draws$angle), span[[2]], n_frames)
  frames <- array(0, c(size, size, n_frames, n))
  r0 <- seq_len(glyph[[1]])
  c0 <- seq_len(glyph[[2]])
  for (k in seq_len(m)) {
    i <- (k - 1L) %% n + 1L # column-major: digit j of sequence i is k = i + (j - 1) n
    img <- src$images[, , draws$index[[k]]]
    for (t in seq_len(n_frames)) {
      rr <- floor(rows[t, k]) + r0
      cc <- floor(cols[t, k]) + c0
      frames[rr, cc, t, i] <- pmax(frames[rr, cc, t, i], img)
    }
  }
  frames <- aperm(frames, c(4, 3, 1, 2))
  dim(frames) <- c(n, n_frames, 1L, size, size)
  digits <- matrix(src$labels[draws$index], n, n_digits)
  out <- list(x = frames, y = NULL, digits = digits, index = draws$index)
  if (horizon == 0) return(out)
  keep <- seq_len(n_frames - horizon)
  out$x <- frames[, keep, , , , drop = FALSE]
  out$y <- frames[, -keep, , , , drop = FALSE]
  out
}

check_speed <- function(speed, call) {
  if (!is.numeric(speed) || !length(speed) %in% 1:2 || anyNA(speed) || any(!is.finite(speed)) ||
      any(speed < 0) || (length(speed) == 2 && speed[[1]] > speed[[2]])) {
    abort_arg("speed", "one number >= 0 or a range c(min, max) of them", speed, call)
  }
  as.double(speed)
}

# Positions over `steps` frames of points starting at p0 in [0, hi] with
# velocities v (vectors, one per point), as Srivastava et al.'s generator
# moves them: step first, then a point past an edge is put on the edge and
# its velocity reversed. Returns a [steps, length(p0)] matrix.
bounce_clamped <- function(p0, v, hi, steps) {
  out <- matrix(0, steps, length(p0))
  p <- p0
  for (t in seq_len(steps)) {
    p <- p + v
    low <- p <= 0
    high <- p >= hi
    p[low] <- 0
    p[high] <- hi
    v[low | high] <- -v[low | high]
    out[t, ] <- p
  }
  out
}

# The digits to draw from: images [rows, cols, n] in [0, 1] and labels.
mnist_source <- function(images, labels, call) {
  if (is.null(images)) {
    if (!is.null(labels)) abort_arg("labels", "NULL when `images` is NULL", labels, call)
    images <- system.file("extdata", "mnist-subset-images-idx3-ubyte.gz", package = "convlstm")
    labels <- system.file("extdata", "mnist-subset-labels-idx1-ubyte.gz", package = "convlstm")
  }
  img <- idx_read(images, "images", call)
  if (length(dim(img)) != 3) {
    abort_convlstm(sprintf("`images` must be an idx file of images [n, rows, cols], not of %d dimension%s.",
                           length(dim(img)), if (length(dim(img)) == 1) "" else "s"), call = call)
  }
  n <- dim(img)[[1]]
  lab <- if (is.null(labels)) rep(NA_integer_, n) else idx_read(labels, "labels", call)
  if (!is.null(dim(lab)) || length(lab) != n) {
    abort_convlstm(sprintf("`labels` must be an idx file of %d labels, one per image of `images`.", n),
                   call = call)
  }
  list(images = aperm(img, c(2, 3, 1)) / 255, labels = as.integer(lab))
}

#' Read an MNIST-format (idx) file
#'
#' Reads a file in the idx format of the MNIST and Fashion-MNIST
#' distributions (LeCun et al.): a big-endian magic number whose third byte
#' is the type and fourth the number of dimensions, the dimensions as
#' 32-bit big-endian integers, then the values in row-major order. The file
#' may be gzip-, bzip2- or xz-compressed. Only unsigned bytes (type `0x08`,
#' what MNIST uses) are read. The whole file is checked before anything is
#' returned: a wrong magic number, a type other than unsigned bytes, or a
#' length that does not match the dimensions is an error of class
#' `convlstm_error_invalid` naming the file.
#'
#' @param path Path of the file.
#' @return An integer array with the file's dimensions (a vector for a
#'   one-dimensional file), values 0 to 255: `[n, rows, cols]` for an
#'   images file, length `n` for a labels file.
#' @seealso [convlstm_moving_mnist()], which draws its digits from such files.
#' @export
#' @examples
#' path <- system.file("extdata", "mnist-subset-images-idx3-ubyte.gz", package = "convlstm")
#' digits <- convlstm_read_idx(path)
#' dim(digits)   # [1000, 28, 28]
#' image(t(digits[1, 28:1, ]), col = gray.colors(32, 1, 0), axes = FALSE)
convlstm_read_idx <- function(path) idx_read(path, "path", sys.call())

# convlstm_read_idx() with the argument name and call its messages report.
idx_read <- function(path, arg, call) {
  if (!is.character(path) || length(path) != 1 || is.na(path) || !nzchar(path)) {
    abort_arg(arg, "the path of an idx file", path, call)
  }
  if (!file.exists(path) || dir.exists(path)) {
    abort_convlstm(sprintf("`%s`: no file \"%s\".", arg, path), call = call)
  }
  bad <- function(what) {
    abort_convlstm(sprintf("`%s` (\"%s\") is not an idx file of unsigned bytes: %s.",
                           arg, path, what), call = call)
  }
  con <- gzfile(path, "rb") # also reads uncompressed, bzip2 and xz files
  on.exit(close(con))
  magic <- readBin(con, "raw", 4L)
  if (length(magic) < 4L || magic[[1]] != as.raw(0) || magic[[2]] != as.raw(0)) {
    bad("it does not start with an idx magic number")
  }
  if (magic[[3]] != as.raw(8)) bad(sprintf("its values are of type 0x%s, not 0x08", magic[[3]]))
  ndim <- as.integer(magic[[4]])
  if (ndim < 1L) bad("it has no dimensions")
  dims <- readBin(con, "integer", ndim, size = 4L, endian = "big")
  if (length(dims) < ndim || anyNA(dims) || any(dims < 1L)) bad("its header is cut short or has a zero dimension")
  total <- prod(as.double(dims))
  if (total > .Machine$integer.max) bad("it holds more values than an R vector can")
  values <- readBin(con, "raw", total)
  if (length(values) < total) {
    bad(sprintf("it holds %.0f values, fewer than its dimensions %s say (%.0f)",
                length(values), paste(dims, collapse = " x "), total))
  }
  if (length(readBin(con, "raw", 1L)) > 0) bad("it has bytes beyond what its dimensions say")
  x <- as.integer(values)
  if (ndim == 1L) return(x)
  # row-major on disk: fill reversed dimensions, then reverse them back
  dim(x) <- rev(dims)
  aperm(x, rev(seq_len(ndim)))
}
