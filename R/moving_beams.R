# moving_beams.R -- the synthetic "moving beams" data of the R torch ConvLSTM
# tutorial (Keydana, "Convolutional LSTM for spatial forecasting", RStudio AI
# blog, 2020-12-17), in base R. It is data generation only: no model code, no
# dependency on torch or torchvision.

#' Moving beams: the R torch ConvLSTM tutorial's synthetic data
#'
#' Black-and-white "movies" of a diagonal beam that moves one pixel up and one
#' pixel right per frame, as in the R torch ConvLSTM tutorial. The first
#' sequence starts where the tutorial's does; every other sequence is the same
#' movie shifted by a random whole-pixel translation of up to half the frame in
#' each direction (the tutorial's `transform_random_affine(degrees = 0,
#' translate = c(0.5, 0.5))`), with pixels shifted out of the frame dropped and
#' zeros shifted in. Within a sequence the beam wraps around the frame edges as
#' `torch_roll()` does.
#'
#' For the tutorial's `size = 24` the beam is 6 pixels long and starts in rows
#' 13 to 18, columns 7 to 12 (the tutorial's `torch_eye(6)` padded with
#' `nnf_pad(c(6, 12, 12, 6))`). Other sizes scale this: a beam of
#' `max(1, size %/% 4)` pixels whose top-left pixel is at row `size %/% 2 + 1`,
#' column `size %/% 4 + 1`.
#'
#' @param n Number of sequences.
#' @param n_frames Frames per sequence (at least 2): the first `n_frames - 1`
#'   are the input, the last one is the target, as in the tutorial.
#' @param size Height and width of each frame, in pixels (at least 4).
#' @param seed `NULL` to draw the translations from the current random number
#'   generator, or an integer: the data are then the same on every call, and
#'   the caller's random number stream is left as it was.
#' @param ... Nothing: `seq_len`, this argument's name before `n_frames`, is
#'   refused with an error naming `n_frames`.
#' @return A list with
#'   \item{x}{array `[n, n_frames - 1, 1, size, size]`: the input frames, with a
#'     channel dimension, in the batch-first layout [convlstm()] models take;}
#'   \item{y}{array `[n, 1, size, size]`: the frame that follows, the target of
#'     `convlstm_train_step(..., target = "last_state")`.}
#' @examples
#' d <- convlstm_moving_beams(n = 4, n_frames = 6, size = 24, seed = 1)
#' dim(d$x)
#' dim(d$y)
#' # the tutorial's view of the target of the first sequence
#' d$y[1, 1, 6:15, 10:19]
#' # the beam in the five input frames of the first sequence
#' op <- par(mfrow = c(1, 5), mar = c(0.5, 0.5, 1.5, 0.5))
#' for (t in 1:5) {
#'   image(t(d$x[1, t, 1, 24:1, ]), axes = FALSE, main = paste("frame", t),
#'         col = gray.colors(2, start = 1, end = 0))
#' }
#' par(op)
#' @export
convlstm_moving_beams <- function(n = 100, n_frames = 6, size = 24, seed = NULL, ...) {
  refuse_generator_dots(list(...), "convlstm_moving_beams", sys.call())
  n <- beams_check_count(n, "n", 1)
  n_frames <- beams_check_count(n_frames, "n_frames", 2)
  size <- beams_check_count(size, "size", 4)

  shifts <- beams_with_seed(seed, {
    # torchvision draws tx, ty uniformly from (-0.5 * size, 0.5 * size) and
    # rounds them; columns first, then rows, as (tx, ty)
    max_shift <- 0.5 * size
    dx <- round(stats::runif(n, -max_shift, max_shift))
    dy <- round(stats::runif(n, -max_shift, max_shift))
    cbind(dy, dx)
  })
  # the tutorial keeps its first sequence untranslated
  shifts[1, ] <- 0

  len <- max(1L, size %/% 4L)
  top <- size %/% 2L
  left <- size %/% 4L
  k <- seq_len(len) - 1L

  # Pixel coordinates of the beam in every frame of the untranslated movie:
  # frame t is the first rolled by t - 1 rows up and t - 1 columns right.
  frame <- rep(seq_len(n_frames), each = len)
  step <- frame - 1L
  row0 <- (top + rep(k, n_frames) - step) %% size + 1L
  col0 <- (left + rep(k, n_frames) + step) %% size + 1L

  # The same pixels in every sequence, moved by that sequence's translation;
  # whatever leaves the frame is dropped.
  seq_id <- rep(seq_len(n), each = length(frame))
  row <- rep(row0, n) + shifts[seq_id, 1]
  col <- rep(col0, n) + shifts[seq_id, 2]
  keep <- row >= 1 & row <= size & col >= 1 & col <= size
  movies <- array(0, c(n, n_frames, size, size))
  movies[cbind(seq_id, rep(frame, n), row, col)[keep, , drop = FALSE]] <- 1

  x <- movies[, -n_frames, , , drop = FALSE]
  dim(x) <- c(n, n_frames - 1L, 1L, size, size)
  y <- movies[, n_frames, , , drop = FALSE]
  dim(y) <- c(n, 1L, size, size)
  list(x = x, y = y)
}

beams_check_count <- function(value, name, min) {
  if (!is.numeric(value) || length(value) != 1L || is.na(value) || !is.finite(value) ||
      value != round(value) || value < min || value > .Machine$integer.max) {
    abort_convlstm(sprintf("`%s` must be a whole number >= %d, not %s.", name, min,
                           describe(value)), call = sys.call(-1))
  }
  as.integer(value)
}

# Evaluates expr with set.seed(seed) and then puts the caller's random number
# state back (withr::with_seed, without the dependency); seed = NULL uses and
# advances the caller's stream as any other R function would.
beams_with_seed <- function(seed, expr) {
  if (is.null(seed)) {
    return(expr)
  }
  if (!is.numeric(seed) || length(seed) != 1L || is.na(seed)) {
    abort_convlstm(sprintf("`seed` must be NULL or a single number, not %s.", describe(seed)),
                   call = sys.call(-1))
  }
  env <- globalenv()
  had_seed <- exists(".Random.seed", envir = env, inherits = FALSE)
  if (had_seed) {
    old_seed <- get(".Random.seed", envir = env, inherits = FALSE)
  }
  on.exit({
    if (had_seed) {
      assign(".Random.seed", old_seed, envir = env)
    } else if (exists(".Random.seed", envir = env, inherits = FALSE)) {
      rm(".Random.seed", envir = env)
    }
  })
  set.seed(seed)
  expr
}
