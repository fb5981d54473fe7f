# moving_digits.R -- Moving-MNIST-like sequences made by the package: digit
# glyphs drawn from a small built-in bitmap font, bouncing inside the frame
# (Srivastava et al. 2015's construction, which Shi et al. 2015 forecast
# with a ConvLSTM), in base R and without any download. Data generation
# only: no model code.

# A 5 x 7 bitmap font of the digits 0 to 9, one string per row.
digit_font <- list(
  "0" = c(" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "),
  "1" = c("  #  ", " ##  ", "  #  ", "  #  ", "  #  ", "  #  ", " ### "),
  "2" = c(" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"),
  "3" = c("#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "),
  "4" = c("   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "),
  "5" = c("#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "),
  "6" = c("  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "),
  "7" = c("#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "),
  "8" = c(" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "),
  "9" = c(" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  ")
)

# Digit d's glyph as a 0/1 matrix, each font pixel a scale x scale block.
digit_glyph <- function(d, scale) {
  rows <- digit_font[[as.character(d)]]
  m <- t(vapply(strsplit(rows, ""), function(r) as.numeric(r == "#"), numeric(5)))
  m[rep(seq_len(nrow(m)), each = scale), rep(seq_len(ncol(m)), each = scale), drop = FALSE]
}

#' Moving digits: Moving-MNIST-like sequences for forecasting
#'
#' Sequences of `size` x `size` frames in which `n_digits` digits bounce
#' around, as in Moving MNIST (Srivastava et al., 2015), the data Shi et al.
#' (2015) forecast with a ConvLSTM, but drawn from a built-in 5 x 7 bitmap
#' font scaled up (no download). Each digit starts at a random place with a
#' random direction and moves `speed` pixels per frame, bouncing off the
#' frame's edges; where digits overlap the frame holds the brighter pixel.
#' Pixels are 0 or 1.
#'
#' @param n Number of sequences.
#' @param n_frames Frames per sequence: the input frames and the `horizon`
#'   frames together (`seq_len` elsewhere, e.g. [convlstm_memory_estimate()], is the
#'   input steps alone).
#' @param size Height and width of each frame, in pixels (at least 8).
#' @param n_digits Digits per sequence.
#' @param scale Side of one font pixel, in pixels: a digit is `5 * scale`
#'   wide and `7 * scale` high. The default makes it about 40% of the frame,
#'   as Moving MNIST's 28-pixel digits in 64-pixel frames are.
#' @param speed Pixels a digit moves per frame.
#' @param horizon `0`, or split each sequence into `n_frames - horizon` input
#'   frames `x` and the `horizon` frames `y` that follow, for
#'   `predict(model, x, horizon = horizon)` and training on them.
#' @param seed `NULL` to draw digits, places and directions from R's random
#'   number generator (so [set.seed()] reproduces them), or a number: the
#'   data are then the same on every call and the caller's random number
#'   stream is left as it was.
#' @param ... Nothing: `seq_len`, this argument's name before `n_frames`, is
#'   refused with an error naming `n_frames`.
#' @return A list with
#'   \item{x}{array `[n, n_frames - horizon, 1, size, size]`: the frames (all
#'     of them when `horizon = 0`), in the layout [convlstm()] models take;}
#'   \item{y}{array `[n, horizon, 1, size, size]` of the frames that follow,
#'     or `NULL` when `horizon = 0`;}
#'   \item{digits}{integer matrix `[n, n_digits]`: the digits drawn.}
#' @seealso [convlstm_moving_beams()], the R torch tutorial's simpler data;
#'   [predict.convlstm_model()] with `horizon` to forecast frames.
#' @export
#' @examples
#' d <- convlstm_moving_digits(n = 2, n_frames = 6, size = 32, horizon = 2, seed = 1)
#' dim(d$x)   # [2, 4, 1, 32, 32]
#' dim(d$y)   # [2, 2, 1, 32, 32]
#' d$digits
#' op <- par(mfrow = c(1, 4), mar = c(0.5, 0.5, 1.5, 0.5))
#' for (t in 1:4) {
#'   image(t(d$x[1, t, 1, 32:1, ]), axes = FALSE, main = paste("frame", t),
#'         col = gray.colors(2, start = 1, end = 0))
#' }
#' par(op)
convlstm_moving_digits <- function(n = 100, n_frames = 20, size = 64, n_digits = 2,
                          scale = max(1, round(0.4 * size / 7)), speed = 2, horizon = 0,
                          seed = NULL, ...) {
  call <- sys.call()
  refuse_generator_dots(list(...), "convlstm_moving_digits", call)
  n <- check_count(n, "n", call = call)
  n_frames <- check_count(n_frames, "n_frames", call = call)
  size <- check_count(size, "size", min = 8, call = call)
  n_digits <- check_count(n_digits, "n_digits", call = call)
  scale <- check_count(scale, "scale", call = call)
  speed <- check_number(speed, "speed", min = 0, call = call)
  horizon <- check_generator_horizon(horizon, n_frames, call)
  if (!is.null(seed)) check_number(seed, "seed", call = call)
  gh <- 7L * scale
  gw <- 5L * scale
  if (gh > size || gw > size) {
    abort_convlstm(sprintf(
      "`scale` (%d) makes a digit %d x %d pixels, larger than the %d-pixel frame.",
      scale, gh, gw, size), call = call)
  }
  draws <- beams_with_seed(seed, list(
    digits = matrix(sample.int(10L, n * n_digits, replace = TRUE) - 1L, n, n_digits),
    row = matrix(stats::runif(n * n_digits, 0, size - gh), n, n_digits),
    col = matrix(stats::runif(n * n_digits, 0, size - gw), n, n_digits),
    angle = matrix(stats::runif(n * n_digits, 0, 2 * pi), n, n_digits)
  ))
  frames <- array(0, c(n, n_frames, 1L, size, size))
  glyphs <- lapply(0:9, digit_glyph, scale = scale)
  for (i in seq_len(n)) {
    for (j in seq_len(n_digits)) {
      path_r <- bounce(draws$row[i, j], speed * sin(draws$angle[i, j]), size - gh, n_frames)
      path_c <- bounce(draws$col[i, j], speed * cos(draws$angle[i, j]), size - gw, n_frames)
      g <- glyphs[[draws$digits[i, j] + 1L]]
      for (t in seq_len(n_frames)) {
        rows <- round(path_r[[t]]) + seq_len(gh)
        cols <- round(path_c[[t]]) + seq_len(gw)
        frames[i, t, 1L, rows, cols] <- pmax(frames[i, t, 1L, rows, cols], g)
      }
    }
  }
  digits <- draws$digits
  if (horizon == 0) return(list(x = frames, y = NULL, digits = digits))
  keep <- seq_len(n_frames - horizon)
  list(x = frames[, keep, , , , drop = FALSE], y = frames[, -keep, , , , drop = FALSE],
       digits = digits)
}

# Positions over `steps` frames of a point starting at p0 in [0, hi] with
# velocity v, reflected at 0 and hi (a bounce off the frame's edge).
bounce <- function(p0, v, hi, steps) {
  p <- numeric(steps)
  p[[1]] <- p0
  for (t in seq_len(steps - 1L)) {
    q <- p[[t]] + v
    if (q < 0) {
      q <- -q
      v <- -v
    } else if (q > hi) {
      q <- 2 * hi - q
      v <- -v
    }
    p[[t + 1L]] <- min(max(q, 0), hi)
  }
  p
}

# A generator's `...` takes nothing: it is there so that `seq_len`, the name
# of its frame count before issue 35, is refused naming `n_frames` (seq_len
# is the input steps alone in convlstm_memory_estimate() and convlstm_grid_windows()).
refuse_generator_dots <- function(dots, fn, call) {
  if ("seq_len" %in% names(dots)) {
    abort_renamed_arg("seq_len", "n_frames", paste0(
      "the frames per sequence, input and horizon together (`seq_len` is the input ",
      "steps alone, as in convlstm_memory_estimate())."), call)
  }
  check_dots(dots, character(), fn, names = "n_frames", call = call)
}

# A generator's horizon: the last `horizon` of `n_frames` frames are the
# targets, so at least one frame must stay the input (convlstm_moving_digits(),
# convlstm_moving_mnist()).
check_generator_horizon <- function(horizon, n_frames, call) {
  horizon <- check_count(horizon, "horizon", min = 0, call = call)
  if (horizon >= n_frames) {
    abort_convlstm(sprintf(
      "`horizon` (%d) must be smaller than `n_frames` (%d): some frames must be the input.",
      horizon, n_frames), call = call)
  }
  horizon
}
