# mpi-case.R -- the data and model of the data-parallel tests, shared by
# the ranks (mpi-train.R) and the one-process reference (test-distributed.R).
# forecast: y the 3 frames after x's (a horizon of 3), from a model whose
# last layer has the input's 1 channel, so that it can feed its frames back.
# peephole: the model has per-position peepholes (their gradients are in
# each layer's bucket).
# forecaster: an encoder-forecaster (2 layers per stack, patch 2), y the 2
# frames it forecasts.
mpi_case <- function(n, seed_model = 100, forecast = FALSE, peephole = FALSE,
                     forecaster = FALSE, threads = 1) {
  if (forecaster) return(mpi_forecaster_case(n, seed_model))
  set.seed(1)
  x <- array(stats::runif(n * 3 * 1 * 6 * 6), dim = c(n, 3, 1, 6, 6))
  y <- if (forecast) {
    array(stats::runif(n * 3 * 1 * 6 * 6), dim = c(n, 3, 1, 6, 6))
  } else {
    array(stats::runif(n * 2 * 6 * 6), dim = c(n, 2, 6, 6))
  }
  set.seed(seed_model)
  hidden <- if (forecast) c(4, 1) else c(4, 2)
  list(x = x, y = y, model = convlstm(1, hidden, 3, device = "cpu", threads = threads,
                                     peephole = peephole, frame_size = if (peephole) c(6, 6)))
}

mpi_forecaster_case <- function(n, seed_model) {
  set.seed(1)
  x <- array(stats::runif(n * 3 * 1 * 6 * 6), dim = c(n, 3, 1, 6, 6))
  y <- array(stats::runif(n * 2 * 1 * 6 * 6), dim = c(n, 2, 1, 6, 6))
  set.seed(seed_model)
  list(x = x, y = y, model = convlstm_forecaster(1, c(3, 2), 3, patch = 2, device = "cpu",
                                                 threads = 1))
}

# A loss weight for the forecaster's y: 0 on its first frame's left half.
mpi_forecaster_weight <- function(y) {
  w <- array(1, dim(y))
  w[, 1, , , 1:3] <- 0
  w
}

# The source modes: a series of n + 3 frames [time, 1, 6, 6] whose windows
# of 3 frames (the next one the target) are the n samples, and a model whose
# last layer's one channel is that frame.
mpi_series <- function(n) {
  set.seed(1)
  array(stats::runif((n + 3) * 36), c(n + 3, 1, 6, 6))
}
mpi_windows <- function(series, i) {
  x <- array(0, c(length(i), 3, 1, 6, 6))
  for (k in seq_along(i)) x[k, , , , ] <- series[i[k] + 0:2, , , , drop = FALSE]
  list(x = x, y = array(series[i + 3, , , , drop = FALSE], c(length(i), 1, 1, 6, 6)))
}
mpi_source_model <- function(seed_model) {
  set.seed(seed_model)
  convlstm(1, c(4, 1), 3, device = "cpu", threads = 1)
}
