# test-fit-peak.R -- the history's peak_bytes is the same quantity for the
# plain stack and the encoder-forecaster: each epoch's peak of allocated
# bytes, counted from a reset at the epoch's start, so it equals the plan
# convlstm_memory_estimate() makes of that epoch's step, whatever earlier calls held.

planned_total <- function(...) {
  est <- convlstm_memory_estimate(...)
  est$bytes[est$category == "total"]
}

test_that("a plain stack's peak_bytes is each epoch's planned step, teacher-forced or not", {
  set.seed(1)
  m <- convlstm(1, c(4, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(m))
  x <- array(runif(4 * 3 * 8 * 8), c(4, 3, 1, 8, 8))
  y <- array(runif(4 * 2 * 8 * 8), c(4, 2, 1, 8, 8))
  opt <- convlstm_optimizer_adam()
  invisible(predict(m, array(0, c(16, 6, 1, 8, 8)), horizon = 4)) # an earlier, larger call
  h <- convlstm_fit(m, x, y, opt, epochs = 3, batch_size = 2, horizon = 2, shuffle = FALSE,
                    teacher_forcing = convlstm_sampling_schedule("linear", k = 0.5), verbose = FALSE)
  expect_identical(h$teacher_forcing, c(1, 0.5, 0))
  want <- vapply(c(1, 0.5, 0), function(p) {
    planned_total(m, batch_size = 2, seq_len = 3, height = 8, width = 8, horizon = 2,
                  teacher_forcing = p, optimizer = opt)
  }, numeric(1))
  expect_equal(h$peak_bytes, want)
})

test_that("an encoder-forecaster's peak_bytes is its planned step in every epoch, not what came before", {
  set.seed(2)
  fc <- convlstm_forecaster(1, 4, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  x <- array(runif(4 * 3 * 8 * 8), c(4, 3, 1, 8, 8))
  y <- array(runif(4 * 2 * 8 * 8), c(4, 2, 1, 8, 8))
  opt <- convlstm_optimizer_rmsprop()
  invisible(predict(fc, array(0, c(16, 6, 1, 8, 8)), horizon = 4)) # an earlier, larger call
  h <- convlstm_fit(fc, x, y, opt, epochs = 2, batch_size = 2, shuffle = FALSE, verbose = FALSE,
                    data_on_device = FALSE)
  want <- planned_total(fc, batch_size = 2, seq_len = 3, height = 8, width = 8, horizon = 2,
                        optimizer = opt)
  expect_equal(h$peak_bytes, c(want, want))
  # "auto" uploads the training set beside the step: x and y in float32 and
  # the rows' int32 index, counted by hand
  h <- convlstm_fit(fc, x, y, opt, epochs = 2, batch_size = 2, shuffle = FALSE, verbose = FALSE)
  data_bytes <- 4 * (length(x) + length(y)) + 4 * dim(x)[[1]]
  expect_equal(h$peak_bytes, c(want, want) + data_bytes)
})
