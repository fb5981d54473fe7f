# The encoder-forecaster's user-facing bugs of issues 33 and 34, each pinned by a number computed
# apart here: `$n_parameters` (the count of the tensors the core holds, and by hand), the
# per-layer fields as convlstm_forecaster() was given them, convlstm_fit(callbacks = list()),
# validation_data checked whole before anything trains (the weights unchanged), and
# convlstm_evaluate() of a forecaster with any horizon (the loss of predict()'s frames, in R).

# The count of the tensors the core holds.
tensor_count <- function(model) sum(vapply(convlstm_state_dict(model), length, numeric(1)))

fc_model <- function(...) convlstm_forecaster(1, c(6, 5), 3, patch = 2, device = "cpu", threads = 1, ...)

test_that("$n_parameters is the count of the tensors the core holds, for plain and forecaster models", {
  fc <- fc_model()
  on.exit(convlstm_release(fc))
  # by hand, 4 channels in 2x2 patches: encoder 4*6*(4*9 + 6*9) + 24 + 18 = 2202 and
  # 4*5*(6*9 + 5*9) + 20 + 15 = 2015; forecaster layer 1 (no input) 4*6*6*9 + 24 + 18 = 1338
  # and 2015; the head 4 x 11 + 4 = 48
  expect_identical(fc$n_parameters, 2202 + 2015 + 1338 + 2015 + 48)
  expect_identical(fc$n_parameters, 7618)
  expect_identical(fc$n_parameters, tensor_count(fc))
  expect_identical(fc[["n_parameters"]], tensor_count(fc))
  # other forecasters: split kernels, no bias, no peepholes, 3 layers, 1x1 patches
  for (args in list(list(2, c(4, 3), c(3, 5), patch = 2, recurrent_kernel_sizes = c(1, 3)),
                    list(1, c(3, 2, 2), 3, patch = 1, bias = FALSE, peephole = "none"))) {
    m <- do.call(convlstm_forecaster, c(args, device = "cpu", threads = 1))
    expect_identical(m$n_parameters, tensor_count(m))
    convlstm_release(m)
  }
  # plain stacks: one kernel, split kernels, per-channel and per-position peepholes
  for (args in list(list(2, c(3, 2), 3), list(1, 4, 5, recurrent_kernel_sizes = 1, bias = FALSE),
                    list(2, c(3, 2), 3, peephole = "channel"),
                    list(1, 2, 3, peephole = TRUE, frame_size = c(4, 5)))) {
    m <- do.call(convlstm, c(args, device = "cpu", threads = 1))
    expect_identical(m$n_parameters, tensor_count(m))
    convlstm_release(m)
  }
})

test_that("a forecaster's per-layer fields are what convlstm_forecaster() was given, one stack's", {
  fc <- convlstm_forecaster(1, c(6, 5), list(c(3, 5), 1), recurrent_kernel_sizes = list(c(1, 3), 3),
                            dilation = list(c(2, 1), 1), patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  expect_identical(fc$hidden_dims, c(6L, 5L))
  expect_identical(fc$n_layers, 2L)
  expect_identical(fc[["n_layers"]], 2L)
  expect_identical(fc$kernel_sizes, list(c(3L, 5L), c(1L, 1L)))
  expect_identical(fc$recurrent_kernel_sizes, list(c(1L, 3L), c(3L, 3L)))
  expect_identical(fc$dilation, list(c(2L, 1L), c(1L, 1L)))
  expect_identical(fc$dropout, c(0, 0))
  expect_identical(fc$recurrent_dropout, c(0, 0))
  # the core's description still lists both stacks' 4 layers
  expect_identical(fc$config$hidden_dims, c(6L, 5L, 6L, 5L))
  expect_identical(fc$config$n_layers, 4L)
  sq <- convlstm_forecaster(1, c(4, 3, 2), c(3, 5, 1), device = "cpu", threads = 1)
  expect_identical(sq$hidden_dims, c(4L, 3L, 2L))
  expect_identical(sq$kernel_sizes, c(3L, 5L, 1L))
  expect_identical(sq$n_layers, 3L)
  convlstm_release(sq)
  # a plain stack's fields are all its layers
  m <- convlstm(1, c(4, 3, 2), c(3, 5, 1), device = "cpu", threads = 1, dropout = c(0.1, 0, 0.2))
  expect_identical(m$hidden_dims, c(4L, 3L, 2L))
  expect_identical(m$kernel_sizes, c(3L, 5L, 1L))
  expect_identical(m$n_layers, 3L)
  expect_equal(m$dropout, c(0.1, 0, 0.2))
  convlstm_release(m)
})

# Two forecasters with the same weights.
fc_twins <- function(...) {
  a <- fc_model(...)
  b <- fc_model(...)
  convlstm_load_state_dict(b, convlstm_state_dict(a))
  list(a = a, b = b)
}

fc_data <- function(B, T = 3, K = 2, H = 8, W = 8) {
  list(x = array(runif(B * T * H * W), dim = c(B, T, 1, H, W)),
       y = array(runif(B * K * H * W), dim = c(B, K, 1, H, W)))
}

test_that("convlstm_fit() of a forecaster takes callbacks = list() (no callbacks) and a callback", {
  set.seed(11)
  m <- fc_twins()
  on.exit(release_all(m))
  d <- fc_data(3)
  h <- convlstm_fit(m$a, d$x, d$y, convlstm_optimizer_rmsprop(1e-3), epochs = 1, batch_size = 3,
                    shuffle = FALSE, verbose = FALSE, callbacks = list())
  # one batch of all 3: the epoch is one convlstm_train_step() of the twin
  want <- convlstm_train_step(m$b, d$x, d$y, convlstm_optimizer_rmsprop(1e-3))
  expect_identical(h$loss, as.numeric(want))
  expect_identical(convlstm_state_dict(m$a), convlstm_state_dict(m$b))
  # one callback (issue 34: the plain stack's loop): the epoch is again one step of the twin
  h <- convlstm_fit(m$a, d$x, d$y, convlstm_optimizer_rmsprop(1e-3), epochs = 1, batch_size = 3,
                    verbose = FALSE,
                    callbacks = list(convlstm_callback_early_stopping(monitor = "loss", patience = 1)))
  want <- convlstm_train_step(m$b, d$x, d$y, convlstm_optimizer_rmsprop(1e-3))
  expect_identical(h$loss, as.numeric(want))
  expect_identical(convlstm_state_dict(m$a), convlstm_state_dict(m$b))
})

test_that("a forecaster's fit checks validation_data whole before it trains: frames, sequences, patch", {
  set.seed(12)
  fc <- fc_model()
  on.exit(convlstm_release(fc))
  d <- fc_data(2)
  opt <- convlstm_optimizer_rmsprop(1e-3)
  refused <- function(vx, vy, regexp) {
    before <- convlstm_state_dict(fc)
    expect_convlstm_error(convlstm_fit(fc, d$x, d$y, opt, epochs = 1, batch_size = 2,
                                       verbose = FALSE, validation_data = list(vx, vy)),
                          regexp = regexp)
    expect_identical(convlstm_state_dict(fc), before) # nothing trained
  }
  v <- fc_data(3)
  # y's frames of another size than x's (x's are the training frames)
  refused(v$x, fc_data(3, H = 6, W = 8)$y, "`validation_data\\[\\[2\\]\\]` must have dim \\[3, K, 1, 8, 8\\]")
  refused(v$x, fc_data(3, H = 8, W = 10)$y, "`validation_data\\[\\[2\\]\\]` must have dim \\[3, K, 1, 8, 8\\]")
  # y of one sequence fewer or more than x
  refused(v$x, fc_data(2)$y, "`validation_data\\[\\[2\\]\\]` must have dim \\[3, K")
  refused(v$x, fc_data(4)$y, "`validation_data\\[\\[2\\]\\]` must have dim \\[3, K")
  # frames the patch (2) does not divide: 7 high, 9 wide
  refused(fc_data(3, H = 7)$x, fc_data(3, H = 7)$y, "`validation_data\\[\\[1\\]\\]` has frames of 7 x 8 pixels")
  refused(fc_data(3, W = 9)$x, fc_data(3, W = 9)$y, "`validation_data\\[\\[1\\]\\]` has frames of 8 x 9 pixels")
  # at the edge: 3 sequences of 6 x 10 frames (the patch divides both, not the training size),
  # 4 frames to forecast: accepted, and its val_loss is the MSE of predict()'s 4 frames
  ok <- fc_data(3, K = 4, H = 6, W = 10)
  h <- convlstm_fit(fc, d$x, d$y, opt, epochs = 1, batch_size = 2, verbose = FALSE,
                    validation_data = list(ok$x, ok$y))
  p <- predict(fc, ok$x, horizon = 4)
  expect_equal(h$val_loss, mean((p - ok$y)^2), tolerance = 1e-6)
})

test_that("convlstm_evaluate() of a forecaster is the loss of predict()'s frames, any horizon", {
  set.seed(13)
  fc <- fc_model() # hidden c(6, 5): the last layer's 5 channels are not a frame's 1
  on.exit(convlstm_release(fc))
  convlstm_train_step(fc, fc_data(2)$x, fc_data(2)$y, convlstm_optimizer_rmsprop(1e-2)) # weights not the initial ones
  d <- fc_data(3, K = 3)
  p3 <- predict(fc, d$x, horizon = 3)
  expect_equal(convlstm_evaluate(fc, d$x, d$y, horizon = 3), mean((p3 - d$y)^2), tolerance = 1e-6)
  # horizon NULL: y's 3 frames
  expect_equal(convlstm_evaluate(fc, d$x, d$y), mean((p3 - d$y)^2), tolerance = 1e-6)
  # one frame, the sum over batches of 2 and 1
  y1 <- d$y[, 1, , , , drop = FALSE]
  p1 <- predict(fc, d$x, horizon = 1)
  expect_equal(convlstm_evaluate(fc, d$x, y1, horizon = 1, batch_size = 2, reduction = "sum"),
               sum((p1 - y1)^2), tolerance = 1e-6)
  # 5 frames, BCE with logits summed per sequence, MAE as a metric
  y5 <- array(runif(3 * 5 * 64), dim = c(3, 5, 1, 8, 8))
  p5 <- predict(fc, d$x, horizon = 5)
  bce <- sum(pmax(p5, 0) - p5 * y5 + log1p(exp(-abs(p5)))) / 3
  got <- convlstm_evaluate(fc, d$x, y5, horizon = 5, loss = "bce_logits", reduction = "batchmean",
                           metrics = c("mae", "mae_frame"))
  expect_equal(unname(got[["loss"]]), bce, tolerance = 1e-6)
  # convlstm_forecast_metrics()'s MAE: the mean over every element; mae_frame: summed
  # over a frame's 64 pixels, averaged over the 3 x 5 frames
  expect_equal(unname(got[["mae"]]), sum(abs(p5 - y5)) / (15 * 64), tolerance = 1e-6)
  expect_equal(unname(got[["mae_frame"]]), sum(abs(p5 - y5)) / 15, tolerance = 1e-6)
  # y must hold the horizon's frames: 3 frames against horizon 2 or 4 refused, naming `y`
  expect_convlstm_error(convlstm_evaluate(fc, d$x, d$y, horizon = 2), regexp = "`y` must have dim")
  expect_convlstm_error(convlstm_evaluate(fc, d$x, d$y, horizon = 4), regexp = "`y` must have dim")
  expect_convlstm_error(convlstm_evaluate(fc, d$x, d$y[, 1:2, , , , drop = FALSE], horizon = 0),
                        regexp = "`horizon` must be a positive whole number")
})

test_that("convlstm_evaluate() of a forecaster weighs each element's loss by `weight`", {
  set.seed(14)
  fc <- fc_model()
  on.exit(convlstm_release(fc))
  d <- fc_data(3, K = 2)
  w <- array(runif(length(d$y), 0, 2), dim = dim(d$y))
  p <- predict(fc, d$x, horizon = 2)
  # the mean still over all elements, each squared error times its weight
  expect_equal(convlstm_evaluate(fc, d$x, d$y, horizon = 2, weight = w),
               sum(w * (p - d$y)^2) / length(d$y), tolerance = 1e-6)
})
