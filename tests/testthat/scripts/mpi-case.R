# mpi-case.R -- the data and model of the data-parallel tests, shared by
# the ranks (mpi-train.R) and the one-process reference (test-distributed.R).
mpi_case <- function(n, seed_model = 100) {
  set.seed(1)
  x <- array(stats::runif(n * 3 * 1 * 6 * 6), dim = c(n, 3, 1, 6, 6))
  y <- array(stats::runif(n * 2 * 6 * 6), dim = c(n, 2, 6, 6))
  set.seed(seed_model)
  list(x = x, y = y, model = convlstm(1, c(4, 2), 3, device = "cpu", threads = 1))
}
