# test-forecaster-data.R -- an encoder-forecaster's loss weight and data sets
# on the device (issue 34, item 1): the weighted loss against plain R from
# predict()'s forecast, and a data set's steps (and a fit with
# data_on_device) equal, bit for bit, to the same rows given as arrays.
# Data parallel over MPI: test-distributed.R.

# A forecaster of 2 layers per stack, patch 2, 8 x 8 frames, T = 3, K = 2.
fd_case <- function(n = 4, K = 2, seed = 5) {
  set.seed(seed)
  fc <- convlstm_forecaster(1, c(3, 2), 3, patch = 2, device = "cpu", threads = 1)
  x <- array(runif(n * 3 * 64), dim = c(n, 3, 1, 8, 8))
  y <- array(runif(n * K * 64), dim = c(n, K, 1, 8, 8))
  list(fc = fc, x = x, y = y)
}

fd_twin <- function(case) {
  twin <- convlstm_forecaster(1, c(3, 2), 3, patch = 2, device = "cpu", threads = 1)
  convlstm_load_state_dict(twin, convlstm_state_dict(case$fc))
  twin
}

test_that("a forecaster's weighted loss is sum(w * (forecast - y)^2) / length(y), in plain R", {
  s <- fd_case()
  on.exit(convlstm_release(s$fc))
  pred <- predict(s$fc, s$x, horizon = 2)
  set.seed(9)
  w <- array(runif(length(s$y)) * (runif(length(s$y)) > 0.3), dim(s$y)) # zeros mask elements
  # lr 0: the loss is before the update, and nothing changes
  got <- convlstm_train_step(s$fc, s$x, s$y, convlstm_optimizer_sgd(0), weight = w)
  expect_equal(as.numeric(got), sum(w * (pred - s$y)^2) / length(s$y), tolerance = 1e-6)
  # the sum reduction and another loss: the weight on each element, summed
  got <- convlstm_train_step(s$fc, s$x, s$y, convlstm_optimizer_sgd(0), weight = w,
                             loss = "mae", reduction = "sum")
  expect_equal(as.numeric(got), sum(w * abs(pred - s$y)), tolerance = 1e-6)
  # a logical mask is a weight of 1 or 0
  mask <- w > 0
  got <- convlstm_train_step(s$fc, s$x, s$y, convlstm_optimizer_sgd(0), weight = mask)
  expect_equal(as.numeric(got), sum(mask * (pred - s$y)^2) / length(s$y), tolerance = 1e-6)
})

test_that("a forecaster's weight reaches the gradient: zeros on sequence 2 train sequence 1 alone", {
  s <- fd_case(n = 2)
  twin <- fd_twin(s)
  on.exit({
    convlstm_release(s$fc)
    convlstm_release(twin)
  })
  w <- array(0, dim(s$y))
  w[1, , , , ] <- 1
  init <- convlstm_state_dict(s$fc)
  # the weighted mean over both sequences is half of sequence 1's mean: its
  # gradient too, so twice the rate of plain SGD makes the same update
  convlstm_train_step(s$fc, s$x, s$y, convlstm_optimizer_sgd(0.2), weight = w)
  convlstm_train_step(twin, s$x[1, , , , , drop = FALSE], s$y[1, , , , , drop = FALSE],
                      convlstm_optimizer_sgd(0.1))
  a <- convlstm_state_dict(s$fc)
  b <- convlstm_state_dict(twin)
  expect_lt(max(mapply(function(u, v) max(abs(u - v)), a, b)), 1e-6)
  expect_gt(max(abs(init[["head.weight"]] - a[["head.weight"]])), 1e-5) # it trained
  # a step without the weight trains otherwise
  convlstm_train_step(s$fc, s$x, s$y, convlstm_optimizer_sgd(0.2))
  convlstm_train_step(twin, s$x[1, , , , , drop = FALSE], s$y[1, , , , , drop = FALSE],
                      convlstm_optimizer_sgd(0.1))
  moved <- max(mapply(function(u, v) max(abs(u - v)), convlstm_state_dict(s$fc),
                      convlstm_state_dict(twin)))
  expect_gt(moved, 1e-5)
})

test_that("a forecaster's weight is checked: y's shape, finite, >= 0; arrays only", {
  s <- fd_case()
  on.exit(convlstm_release(s$fc))
  opt <- convlstm_optimizer_sgd(0)
  expect_convlstm_error(convlstm_train_step(s$fc, s$x, s$y, opt, weight = array(1, c(4, 3, 1, 8, 8))),
                        regexp = "weight")
  w <- array(1, dim(s$y))
  w[2] <- -1
  expect_convlstm_error(convlstm_train_step(s$fc, s$x, s$y, opt, weight = w), regexp = "weight")
  d <- convlstm_data(s$fc, s$x, s$y)
  expect_convlstm_error(convlstm_train_step(s$fc, d, optimizer = opt, weight = array(1, dim(s$y))),
                        regexp = "weight")
  expect_convlstm_error(convlstm_fit(s$fc, s$x, s$y, opt, epochs = 1, verbose = FALSE,
                                     weight = w + 2, data_on_device = TRUE),
                        regexp = "data_on_device")
  # the plan holds the weight's K frames
  plan <- attr(convlstm_memory_estimate(s$fc, 4, 3, 8, 8, horizon = 2, weight = "sequence"),
               "plan")
  expect_equal(plan$bytes[plan$name == "weight"], 4 * 2 * 1 * 8 * 8 * 4)
})

test_that("a forecaster's data set trains as the same rows given as arrays, bit for bit", {
  s <- fd_case(n = 5, K = 4)
  twin <- fd_twin(s)
  on.exit({
    convlstm_release(s$fc)
    convlstm_release(twin)
  })
  # its bytes, planned before (x and y's 4 frames in float32; the index buffer)
  planned <- convlstm:::c_data_bytes_for(environment(s$fc)$ptr, c(5, 3, 8, 8, 4), "sequence")
  expect_equal(planned, 5 * 64 * (3 + 4) * 4 + 5 * 4)
  d <- convlstm_data(s$fc, s$x, s$y)
  expect_s3_class(d, "convlstm_data")
  expect_equal(d$n, 5)
  expect_equal(d$bytes, 5 * 64 * (3 + 4) * 4)
  opt <- convlstm_optimizer_adam(0.01)
  for (rows in list(c(3, 1), c(5, 2, 2, 4), 1:5)) {
    a <- convlstm_train_step(s$fc, d, optimizer = opt, rows = rows, accumulation_steps = 2)
    b <- convlstm_train_step(twin, s$x[rows, , , , , drop = FALSE], s$y[rows, , , , , drop = FALSE],
                             opt, accumulation_steps = 2)
    expect_identical(as.numeric(a), as.numeric(b))
  }
  # the optimizer where y would be, every row by default
  expect_identical(as.numeric(convlstm_train_step(s$fc, d, opt, loss = "bce_logits")),
                   as.numeric(convlstm_train_step(twin, s$x, s$y, opt, loss = "bce_logits")))
  expect_identical(convlstm_state_dict(s$fc), convlstm_state_dict(twin))
})

test_that("a forecaster's data set refuses what does not fit it", {
  s <- fd_case()
  on.exit(convlstm_release(s$fc))
  expect_convlstm_error(convlstm_data(s$fc, s$x, s$y[1:3, , , , , drop = FALSE]), regexp = "y")
  expect_convlstm_error(convlstm_data(s$fc, s$x[, , , 1:7, , drop = FALSE],
                                      s$y[, , , 1:7, , drop = FALSE]), regexp = "patch")
  expect_convlstm_error(convlstm_data(s$fc, s$x, s$y, target = "last_state"),
                        status = "unsupported")
  d <- convlstm_data(s$fc, s$x, s$y)
  opt <- convlstm_optimizer_sgd(0)
  expect_convlstm_error(convlstm_train_step(s$fc, d, optimizer = opt, rows = 5), regexp = "rows")
  expect_convlstm_error(convlstm_train_step(s$fc, d, s$y, opt), regexp = "y")
  expect_convlstm_error(convlstm_train_step(s$fc, s$x, s$y, opt, rows = 1), regexp = "rows")
})

test_that("a forecaster's fit with data_on_device = TRUE equals the fit from arrays", {
  fit_once <- function(on_device, weight = NULL) {
    s <- fd_case(n = 6)
    on.exit(convlstm_release(s$fc))
    set.seed(11)
    h <- convlstm_fit(s$fc, s$x, s$y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 4,
                      verbose = FALSE, data_on_device = on_device, accumulation_steps = 2,
                      weight = weight)
    list(loss = h$loss, on = attr(h, "data_on_device"), w = convlstm_state_dict(s$fc))
  }
  a <- fit_once(TRUE)
  b <- fit_once(FALSE)
  expect_true(a$on)
  expect_false(b$on)
  expect_identical(a$loss, b$loss)
  expect_identical(a$w, b$w)
  # a weight of ones trains as none (bit for bit: each element's loss times 1)
  ones <- fit_once(FALSE, weight = array(1, c(6, 2, 1, 8, 8)))
  expect_identical(ones$w, b$w)
  twos <- fit_once(FALSE, weight = array(2, c(6, 2, 1, 8, 8)))
  expect_equal(twos$loss, 2 * b$loss, tolerance = 1e-5)
})
