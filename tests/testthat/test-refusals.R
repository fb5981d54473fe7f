# test-refusals.R -- refusals of bad input that no other test file triggers (issue 38 item 3),
# each checked by class (expect_convlstm_error(), helper-api.R) and by a message that names the
# argument; where a refusal sits at a numeric limit, the value exactly at the limit is accepted
# and the next one refused, so a limit moved by one (`>` for `>=`) fails here. The refusals
# already tested elsewhere (most of convlstm()'s, convlstm_train_step()'s, convlstm_fit()'s and the
# optimizers' arguments in test-reliability-input.R's table; the metrics', grids', data sets',
# schedulers', callbacks' and generators' in their own files) are not repeated.
#
# Contents, by R source file:
#   R/errors.R         check_threads(): 1024 threads accepted, 1025 refused
#   R/model.R          n_layers = 32 (max_layers) accepted, 33 refused by the same count
#   R/forecaster.R     convlstm_forecaster(): 15 layers per stack accepted, 16 refused;
#                      convlstm_fit() of one: y of other rows, validation_data not list(x, y);
#                      predict() without a horizon
#   R/estimate.R       convlstm_memory_estimate() of an encoder-forecaster: horizon 1 accepted, 0 refused
#   R/evaluate_metrics.R  metrics = "cross_entropy": targets in [0, 1] with 0 and 1 themselves
#                      accepted, a target below 0 refused
#   R/moving_beams.R   convlstm_moving_beams(): n, seq_len, size and seed refused with the package's class
#                      (they were plain stop() errors; Inf was taken as a count)
#   R/moving_digits.R  convlstm_moving_digits(): a digit of 7 x 5 * scale exactly the frame accepted, one
#                      pixel more refused; horizon = seq_len - 1 accepted, seq_len refused
#   R/moving_mnist.R   convlstm_moving_mnist(): size 28 (the glyphs') accepted, 27 refused; convlstm_read_idx()
#                      of a path that is not one non-empty string
#   R/metrics.R        convlstm_forecast_metrics(): a threshold equal to max(observed) accepted, just above
#                      refused, just above min(observed) accepted; an SSIM window as wide as the
#                      frames accepted, one wider refused; metrics named twice refused
#   R/grid.R           convlstm_grid_windows(): input + horizon equal to the series accepted, one frame
#                      more refused; an array of 4 dimensions (declared) accepted, 5 refused;
#                      convlstm_grid_restore(): window = the number of windows accepted, one more refused
#   R/fit.R            validation_split leaving exactly one sample on each side accepted, the
#                      split leaving none for validation refused
#   R/fit_check.R      batch_size equal to the samples accepted, one more refused
#   R/train.R          accumulation_steps equal to the batch accepted, one more refused; a loss
#                      weight with a data set (convlstm_data()) refused, not ignored
#   R/sampling.R       inverse_sigmoid k = 1 accepted; a teacher_forcing schedule that errors is
#                      named, classed; exponential k just below 1 accepted
#   R/profile.R        convlstm_memory_profile(): unnamed values in `...` refused
#   R/schedulers.R     convlstm_lr_multiplicative(): lr_lambda returning a negative number refused, 0
#                      accepted
#   src/r_handle.c, src/r_data.c, src/r_params.c, src/r_io.c
#                      the glue's own argument checks, reached through the internal c_*()
#                      functions: classed invalid errors naming the argument
#   R/train.R, R/fit.R, R/advise.R, R/data.R
#                      the encoder-forecaster's refusals, once written four times and
#                      disagreeing (issue 33), now the capability table's: the same class and
#                      message from each (test-capabilities.R checks every row)

# ---- R/errors.R -------------------------------------------------------------------------------

test_that("threads: 1024 (max_threads) is accepted, 1025 refused naming `threads`", {
  m <- convlstm(1, 1, 1, device = "cpu", threads = 1024)
  expect_equal(m$config$threads, 1024)
  convlstm_release(m)
  expect_convlstm_error(convlstm(1, 1, 1, device = "cpu", threads = 1025),
                        regexp = "`threads` must be at most 1024, not 1,025")
})

# ---- R/model.R --------------------------------------------------------------------------------

test_that("n_layers: 32 layers are accepted, 33 refused naming `n_layers`", {
  m <- convlstm(1, 1, 1, n_layers = 32, device = "cpu", threads = 1)
  expect_identical(length(m$config$hidden_dims), 32L)
  convlstm_release(m)
  expect_convlstm_error(convlstm(1, 1, 1, n_layers = 33, device = "cpu"),
                        regexp = "`n_layers` must be at most 32, not 33")
})

# ---- R/forecaster.R ---------------------------------------------------------------------------

test_that("convlstm_forecaster(): 15 layers a stack (30 of the core's 32, plus 2) accepted, 16 refused", {
  m <- convlstm_forecaster(1, rep(1, 15), 1, patch = 1, device = "cpu", threads = 1)
  expect_identical(length(m$config$hidden_dims), 30L) # the core's layers: encoder + forecaster
  convlstm_release(m)
  expect_convlstm_error(convlstm_forecaster(1, rep(1, 16), 1, patch = 1, device = "cpu"),
                        regexp = "`hidden_dims` may have at most 15 layers, not 16")
})

test_that("convlstm_fit() of an encoder-forecaster refuses y of other rows and a bad validation_data", {
  fc <- convlstm_forecaster(1, 2, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  x <- array(runif(2 * 3 * 4 * 4), dim = c(2, 3, 1, 4, 4))
  y <- array(runif(2 * 2 * 4 * 4), dim = c(2, 2, 1, 4, 4))
  expect_convlstm_error(convlstm_fit(fc, x, y[1, , , , , drop = FALSE], convlstm_optimizer_sgd(0),
                                     verbose = FALSE),
                        regexp = "`y` must have dim \\[2, K, 1, 4, 4\\] \\(the K frames forecast after each of the 2 input sequences")
  expect_convlstm_error(convlstm_fit(fc, x, y, convlstm_optimizer_sgd(0), verbose = FALSE,
                                     validation_data = list(x)),
                        regexp = "`validation_data` must be NULL or a list of two arrays, list\\(x, y\\)")
  expect_convlstm_error(predict(fc, x), regexp = "`horizon` must be the number of frames to forecast")
})

# ---- R/estimate.R -----------------------------------------------------------------------------

test_that("convlstm_memory_estimate() of an encoder-forecaster: horizon 1 is accepted, 0 refused naming `horizon`", {
  fc <- convlstm_forecaster(1, 2, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  est <- convlstm_memory_estimate(fc, 2, 3, 4, 4, horizon = 1)
  expect_gt(sum(est$bytes), 0)
  expect_convlstm_error(convlstm_memory_estimate(fc, 2, 3, 4, 4),
                        regexp = "`horizon` must be the frames an encoder-forecaster forecasts")
})

# ---- R/evaluate_metrics.R ---------------------------------------------------------------------

test_that("metrics = \"cross_entropy\": targets of exactly 0 and 1 are accepted, one below 0 refused", {
  m <- api_model(input_dim = 2, hidden_dims = c(3, 2))
  on.exit(convlstm_release(m))
  x <- api_x(B = 2)
  y <- array(rep(c(0, 1, 0.5, 1), length.out = 2 * 2 * 5 * 4), dim = c(2, 2, 5, 4))
  r <- convlstm_evaluate(m, x, y, metrics = "cross_entropy")
  # Shi et al.'s cross-entropy written out: the last state clipped to [1e-7, 1 - 1e-7], summed
  # over each sequence's pixels, averaged over the 2 sequences (one frame)
  p <- pmin(pmax(predict(m, x)[, 3, , , ], 1e-7), 1 - 1e-7)
  want <- sum(-(y * log(p) + (1 - y) * log(1 - p))) / 2
  expect_equal(r[["cross_entropy"]], want, tolerance = 1e-6)
  # a target below 0 in the first sequence or in another: the same refusal, naming `metrics`
  # (the first one's used to be met by convlstm_forecast_metrics()'s own, naming its `observed`)
  for (i in 1:2) {
    bad <- y
    bad[i, 1, 1, 1] <- -1e-9
    expect_convlstm_error(convlstm_evaluate(m, x, bad, metrics = "cross_entropy"),
                          regexp = "`metrics` has \"cross_entropy\", which needs targets in \\[0, 1\\]")
  }
})

# ---- R/moving_beams.R -------------------------------------------------------------------------

test_that("convlstm_moving_beams() refuses bad counts and seeds with the package's class, naming them", {
  expect_convlstm_error(convlstm_moving_beams(n = 0), regexp = "`n` must be a whole number >= 1")
  expect_convlstm_error(convlstm_moving_beams(n = 1.5), regexp = "`n`")
  expect_convlstm_error(convlstm_moving_beams(n = Inf), regexp = "`n`")
  expect_convlstm_error(convlstm_moving_beams(n = 1, n_frames = 1), regexp = "`n_frames` must be a whole number >= 2")
  expect_convlstm_error(convlstm_moving_beams(n = 1, size = 3), regexp = "`size` must be a whole number >= 4")
  expect_convlstm_error(convlstm_moving_beams(n = 1, seed = "a"), regexp = "`seed`")
  # the limits themselves are accepted: one sequence of 2 frames of 4 x 4
  d <- convlstm_moving_beams(n = 1, n_frames = 2, size = 4, seed = 1)
  expect_identical(dim(d$x), c(1L, 1L, 1L, 4L, 4L))
  expect_identical(dim(d$y), c(1L, 1L, 4L, 4L))
})

# ---- R/moving_digits.R ------------------------------------------------------------------------

test_that("convlstm_moving_digits(): a digit exactly the frame's size is accepted, a pixel larger refused", {
  # the glyphs are 7 x 5 pixels, times `scale`: scale 2 makes 14 x 10
  d <- convlstm_moving_digits(n = 1, n_frames = 2, size = 14, scale = 2, seed = 1)
  expect_identical(dim(d$x)[4:5], c(14L, 14L))
  expect_convlstm_error(convlstm_moving_digits(n = 1, n_frames = 2, size = 13, scale = 2, seed = 1),
                        regexp = "`scale` \\(2\\) makes a digit 14 x 10 pixels, larger than the 13-pixel")
})

test_that("convlstm_moving_digits(): horizon = n_frames - 1 is accepted, horizon = n_frames refused", {
  d <- convlstm_moving_digits(n = 1, n_frames = 4, size = 8, scale = 1, horizon = 3, seed = 1)
  expect_identical(dim(d$x)[[2]], 1L)
  expect_identical(dim(d$y)[[2]], 3L)
  expect_convlstm_error(convlstm_moving_digits(n = 1, n_frames = 4, size = 8, scale = 1, horizon = 4),
                        regexp = "`horizon` \\(4\\) must be smaller than `n_frames` \\(4\\)")
})

# ---- R/moving_mnist.R -------------------------------------------------------------------------

test_that("convlstm_moving_mnist(): size 28, the glyphs' own, is accepted; 27 refused naming `size`", {
  d <- convlstm_moving_mnist(n = 1, n_frames = 2, size = 28, horizon = 1, seed = 1)
  expect_identical(dim(d$x)[4:5], c(28L, 28L))
  expect_convlstm_error(convlstm_moving_mnist(n = 1, n_frames = 2, size = 27, horizon = 1, seed = 1),
                        regexp = "`size` \\(27\\) must be at least the digits' 28 x 28")
})

test_that("convlstm_read_idx() refuses a path that is not one non-empty string, naming `path`", {
  for (bad in list(1, "", NA_character_, c("a.idx", "b.idx"), NULL)) {
    expect_convlstm_error(convlstm_read_idx(bad), regexp = "`path` must be the path of an idx file")
  }
})

# ---- R/metrics.R ------------------------------------------------------------------------------

test_that("convlstm_forecast_metrics(): a threshold at max(observed) is accepted, above it refused", {
  obs <- array(c(0, 0.25, 0.5, 1), dim = c(1, 1, 1, 2, 2))
  fc <- array(c(0, 1, 0, 1), dim = c(1, 1, 1, 2, 2))
  # at the max: events are obs >= 1 (one cell, the 4th), forecast events fc >= 1 (cells 2, 4):
  # 1 hit, 1 false alarm, 0 misses -> CSI 1 / 2
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = 1)
  expect_equal(m$overall[["csi_1"]], 1 / 2)
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = 1 + 1e-9),
                        regexp = "`thresholds` must lie within the range of `observed`")
  # just above the min (0) is inside: events obs >= 1e-9 (cells 2, 3, 4), forecast 2, 4: CSI 2 / 3
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = 1e-9)
  expect_equal(unname(m$overall[grepl("^csi_", names(m$overall))]), 2 / 3)
})

test_that("convlstm_forecast_metrics(): an SSIM window as wide as the frames is accepted, wider refused", {
  set.seed(5)
  obs <- array(runif(2 * 5 * 7), dim = c(1, 1, 1, 5, 7))
  # a frame against itself: SSIM 1
  expect_equal(convlstm_forecast_metrics(obs, obs, metrics = "ssim", ssim_window = 5)$overall[["ssim"]], 1)
  expect_convlstm_error(convlstm_forecast_metrics(obs, obs, metrics = "ssim", ssim_window = 7),
                        regexp = "SSIM's 7 x 7 window \\(`ssim_window`, `ssim_gaussian`\\) is larger than the 5 x 7")
})

test_that("convlstm_forecast_metrics(): a metric named twice is refused naming `metrics`", {
  obs <- array(0.5, dim = c(1, 1, 1, 4, 4))
  expect_convlstm_error(convlstm_forecast_metrics(obs, obs, metrics = c("mse", "mse")),
                        regexp = "`metrics` must be distinct names")
})

# ---- R/grid.R ---------------------------------------------------------------------------------

test_that("convlstm_grid_windows(): a series exactly seq_len + horizon long gives one window; a frame more is refused", {
  series <- array(seq_len(2 * 3 * 5), dim = c(2, 3, 5)) # [height, width, time]: 5 frames
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2)
  expect_identical(dim(w$x)[1:2], c(1L, 3L))
  # the window's input frames are the series' first 3, its target the last 2
  expect_identical(as.vector(w$x[1, , 1, , ]), as.double(aperm(series[, , 1:3], c(3, 1, 2))))
  expect_convlstm_error(convlstm_grid_windows(series, seq_len = 3, horizon = 3),
                        regexp = "`seq_len` \\+ `horizon` \\(3 \\+ 3 frames\\) is longer than the series \\(5 frames\\)")
})

test_that("convlstm_grid_windows(): an array of 4 dimensions (declared channels first) is accepted, one of 5 refused", {
  a <- array(seq_len(2 * 2 * 3 * 5), dim = c(2, 2, 3, 5)) # [channels, height, width, time]
  w <- convlstm_grid_windows(a, seq_len = 2, horizon = 1, layout = "chwt") # 5 - 3 + 1 = 3 windows
  expect_identical(dim(w$x), c(3L, 2L, 2L, 2L, 3L))
  expect_identical(as.vector(w$x[1, 1, , , ]), as.double(a[, , , 1]))
  expect_identical(as.vector(w$y[3, 1, , , ]), as.double(a[, , , 5]))
  expect_convlstm_error(convlstm_grid_windows(array(0, dim = c(1, 2, 2, 3, 5)), seq_len = 2, horizon = 1),
                        regexp = "`data` must be an array \\[height, width\\] or \\[channels, height, width\\] plus a time dimension")
})

test_that("convlstm_grid_restore(): window = the number of windows is accepted, one more refused", {
  series <- array(seq_len(2 * 3 * 7), dim = c(2, 3, 7))
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2) # 7 - 5 + 1 = 3 windows
  last <- convlstm_grid_restore(w$y, w, window = 3)
  # window 3 starts at frame 3: its targets are frames 6 and 7
  expect_identical(as.vector(last), as.double(series[, , 6:7]))
  expect_convlstm_error(convlstm_grid_restore(w$y, w, window = 4),
                        regexp = "`window` \\(4\\) must be at most the number of windows \\(3\\)")
})

# ---- R/fit.R, R/fit_check.R, R/train.R --------------------------------------------------------

test_that("validation_split: a split leaving one sample for validation is accepted, one leaving none refused", {
  m <- api_model()
  on.exit(convlstm_release(m))
  set.seed(1)
  x <- api_x(B = 4)
  y <- api_y(B = 4)
  # 4 samples, 0.25: floor(4 * 0.75) = 3 train, 1 held out
  h <- convlstm_fit(m, x, y, convlstm_optimizer_sgd(0), epochs = 1, validation_split = 0.25, verbose = FALSE)
  expect_true(is.finite(h$val_loss[[1]]))
  # the held-out loss is that of the last sample, the model untouched by lr 0
  want <- convlstm_evaluate(m, x[4, , , , , drop = FALSE], y[4, , , , drop = FALSE])
  expect_equal(h$val_loss[[1]], unname(unlist(want)[[1]]), tolerance = 1e-6)
  # 2 samples: 0.5 leaves floor(2 * 0.5) = 1 + 1, accepted; 0.6 leaves floor(0.8) = 0 for
  # training, refused
  expect_convlstm_error(convlstm_fit(m, x[1:2, , , , , drop = FALSE], y[1:2, , , , drop = FALSE],
                                     convlstm_optimizer_sgd(0), epochs = 1, validation_split = 0.6,
                                     verbose = FALSE),
                        regexp = "`validation_split` = 0.6 of 2 samples leaves 0 for training and 2")
  h <- convlstm_fit(m, x[1:2, , , , , drop = FALSE], y[1:2, , , , drop = FALSE], convlstm_optimizer_sgd(0),
                    epochs = 1, validation_split = 0.5, verbose = FALSE)
  expect_true(is.finite(h$val_loss[[1]]))
})

test_that("convlstm_fit(): batch_size equal to the samples is accepted, one more refused", {
  m <- api_model()
  on.exit(convlstm_release(m))
  x <- api_x(B = 3)
  y <- api_y(B = 3)
  h <- convlstm_fit(m, x, y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 3, verbose = FALSE)
  # one batch of all three: the epoch loss is the loss of the whole, evaluated apart
  expect_equal(h$loss[[1]], unname(unlist(convlstm_evaluate(m, x, y))[[1]]), tolerance = 1e-6)
  expect_convlstm_error(convlstm_fit(m, x, y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 4,
                                     verbose = FALSE),
                        regexp = "`batch_size` \\(4\\) must not exceed the number of samples in `x` \\(3\\)")
})

test_that("convlstm_train_step(): accumulation_steps equal to the batch is accepted, one more refused", {
  m <- twin_models()
  on.exit(release_all(m))
  x <- api_x(B = 3)
  y <- api_y(B = 3)
  # three micro-batches of one sample each: the same mean loss as the whole batch at once
  whole <- convlstm_train_step(m$b, x, y, convlstm_optimizer_sgd(0))
  expect_equal(convlstm_train_step(m$a, x, y, convlstm_optimizer_sgd(0), accumulation_steps = 3), whole,
               tolerance = 1e-6)
  expect_convlstm_error(convlstm_train_step(m$a, x, y, convlstm_optimizer_sgd(0), accumulation_steps = 4),
                        regexp = "`accumulation_steps` \\(4\\) must not exceed the batch size \\(3\\)")
})

test_that("convlstm_train_step() on a data set refuses a loss weight instead of ignoring it", {
  m <- twin_models()
  on.exit(release_all(m))
  x <- api_x(B = 2)
  y <- api_y(B = 2)
  data <- convlstm_data(m$a, x, y)
  w <- array(c(1, 0), dim = dim(y))
  expect_convlstm_error(convlstm_train_step(m$a, data, optimizer = convlstm_optimizer_sgd(0), weight = w),
                        regexp = "`weight` must be NULL when `x` is a data set")
  # without the weight the data set's step is the arrays' step
  expect_equal(convlstm_train_step(m$a, data, optimizer = convlstm_optimizer_sgd(0)),
               convlstm_train_step(m$b, x, y, convlstm_optimizer_sgd(0)), tolerance = 1e-6)
})

# ---- R/sampling.R -----------------------------------------------------------------------------

test_that("convlstm_sampling_schedule(): inverse_sigmoid's k = 1 and exponential's k just below 1 are accepted", {
  s <- convlstm_sampling_schedule("inverse_sigmoid", k = 1)
  expect_equal(s(1:3), 1 / (1 + exp(0:2)))
  s <- convlstm_sampling_schedule("exponential", k = 0.999)
  expect_equal(s(1:3), 0.999^(0:2))
  expect_convlstm_error(convlstm_sampling_schedule("inverse_sigmoid", k = 1 - 1e-9), regexp = "`k`")
  s <- convlstm_sampling_schedule("linear", k = 0.5, min = 1)
  expect_equal(s(1:3), c(1, 1, 1))
  expect_convlstm_error(convlstm_sampling_schedule("linear", k = 0.5, min = 1 + 1e-9), regexp = "`min`")
})

test_that("a teacher_forcing schedule that fails is named, classed, with the epoch", {
  m <- api_model(hidden_dims = c(3, 2))
  on.exit(convlstm_release(m))
  x <- api_x()
  y <- api_y(T = 2)
  expect_convlstm_error(
    convlstm_fit(m, x, y, convlstm_optimizer_sgd(0), epochs = 1, horizon = 2, verbose = FALSE,
                 teacher_forcing = function(epoch) stop("no schedule here")),
    regexp = "`teacher_forcing` failed for epoch 1: no schedule here")
})

# ---- R/profile.R ------------------------------------------------------------------------------

test_that("convlstm_memory_profile(): unnamed values in `...` are refused", {
  m <- api_model()
  on.exit(convlstm_release(m))
  expect_convlstm_error(convlstm_memory_profile(m, 1, 3, 5, 4, 0, "last_state", convlstm_optimizer_adam(), 2),
                        regexp = "`\\.\\.\\.` takes only the step options")
})

# ---- R/schedulers.R ---------------------------------------------------------------------------

test_that("convlstm_lr_multiplicative(): a factor of 0 is taken, a negative one refused", {
  opt <- convlstm_optimizer_sgd(0.5)
  s <- convlstm_lr_multiplicative(opt, function(epoch) 0)
  s$step()
  expect_identical(s$get_lr(), 0)
  s <- convlstm_lr_multiplicative(opt, function(epoch) -1e-9)
  expect_convlstm_error(s$step(), regexp = "`lr_lambda\\(1\\)` must return one non-negative number")
})

# ---- the glue (src/r_*.c) ---------------------------------------------------------------------

test_that("the glue's own argument checks raise classed errors naming the argument", {
  m <- api_model()
  on.exit(convlstm_release(m))
  ptr <- convlstm:::model_ptr(m)
  # src/r_handle.c: not a model's external pointer
  expect_convlstm_error(convlstm:::c_model_config("model"), regexp = "`model` is not a convlstm model")
  # src/r_data.c: not a data set's
  expect_convlstm_error(convlstm:::c_data_info(ptr), regexp = "`data` is not a data set")
  # src/r_params.c: a state dict that is no list, has no names, or names no tensor of the model
  expect_convlstm_error(convlstm:::c_set_tensors(ptr, 1), regexp = "`state_dict` must be a list")
  expect_convlstm_error(convlstm:::c_set_tensors(ptr, list(1)), regexp = "`state_dict` must be a named list")
  expect_convlstm_error(convlstm:::c_set_tensors(ptr, list(nope = 1)),
                        regexp = "`state_dict` has an unknown entry \"nope\"")
  expect_convlstm_error(convlstm:::c_set_tensors(ptr, list(cell_list.0.conv.bias = 1)),
                        regexp = "`state_dict\\$cell_list.0.conv.bias` must be a double array of 12 elements")
  # src/r_io.c: a path that is not one string
  expect_convlstm_error(convlstm:::c_model_save(ptr, c("a", "b"), NULL, NULL),
                        regexp = "`path` must be a single string")
})

# ---- the encoder-forecaster's refusals: one capability table (issue 33) ----------------------
# They were written four times in R (train.R, fit.R, advise.R, data.R) and disagreed; each
# combination now gets the same class and message from every entry point.

fc_refusal <- function(expr) {
  e <- tryCatch({
    force(expr)
    NULL
  }, error = function(e) e)
  expect_s3_class(e, "convlstm_error_unsupported")
  conditionMessage(e)
}

test_that("an encoder-forecaster's target = \"last_state\": convlstm_train_step(), convlstm_fit(), convlstm_memory_advise() and convlstm_memory_estimate() give one refusal", {
  fc <- convlstm_forecaster(1, 2, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  x <- array(runif(2 * 3 * 4 * 4), dim = c(2, 3, 1, 4, 4))
  y <- array(runif(2 * 2 * 4 * 4), dim = c(2, 2, 1, 4, 4))
  # target = "sequence", what it trains on, is taken by all
  expect_true(is.finite(convlstm_train_step(fc, x, y, convlstm_optimizer_sgd(0), target = "sequence")))
  want <- 'an encoder-forecaster does not support target = "last_state": its target is the sequence of frames'
  expect_identical(fc_refusal(convlstm_train_step(fc, x, y, convlstm_optimizer_sgd(0), target = "last_state")), want)
  expect_identical(fc_refusal(convlstm_fit(fc, x, y, convlstm_optimizer_sgd(0), target = "last_state",
                                           verbose = FALSE)), want)
  # advise.R's copy said invalid (issue 33): now the same refusal
  expect_identical(fc_refusal(convlstm_memory_advise(fc, "100 MiB", 2, 3, 4, 4, horizon = 2,
                                            target = "last_state")), want)
  expect_identical(fc_refusal(convlstm_memory_estimate(fc, 2, 3, 4, 4, horizon = 2, target = "last_state")),
                   want)
  # convlstm_data() (data.R) refuses a last-state data set with the same reason
  # (a data set of its frames: a table row turned to supported, issue 34)
  expect_identical(fc_refusal(convlstm_data(fc, x, y, target = "last_state")), want)
})

test_that("an encoder-forecaster's teacher_forcing: TRUE taken by convlstm_memory_advise(), convlstm_train_step() and convlstm_fit(); below 1 refused by all with one message", {
  fc <- convlstm_forecaster(1, 2, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  x <- array(runif(2 * 3 * 4 * 4), dim = c(2, 3, 1, 4, 4))
  y <- array(runif(2 * 2 * 4 * 4), dim = c(2, 2, 1, 4, 4))
  plan <- convlstm_memory_advise(fc, "100 MiB", 2, 3, 4, 4, horizon = 2, teacher_forcing = TRUE)
  expect_s3_class(plan, "data.frame")
  expect_true(is.finite(convlstm_train_step(fc, x, y, convlstm_optimizer_sgd(0), teacher_forcing = TRUE)))
  h <- convlstm_fit(fc, x, y, convlstm_optimizer_sgd(0), teacher_forcing = TRUE, epochs = 1, verbose = FALSE)
  expect_true(is.finite(h$loss[[1]]))
  want <- paste0("an encoder-forecaster does not support teacher_forcing below 1 (free running, ",
                 "scheduled sampling): its forecaster reads no frames")
  expect_identical(fc_refusal(convlstm_train_step(fc, x, y, convlstm_optimizer_sgd(0), teacher_forcing = FALSE)), want)
  expect_identical(fc_refusal(convlstm_fit(fc, x, y, convlstm_optimizer_sgd(0), teacher_forcing = 0.5,
                                           verbose = FALSE)), want)
  expect_identical(fc_refusal(convlstm_memory_advise(fc, "100 MiB", 2, 3, 4, 4, horizon = 2,
                                            teacher_forcing = FALSE)), want)
})

test_that("an encoder-forecaster's batch_size above the samples: convlstm_fit() refuses it as the plain model's does", {
  fc <- convlstm_forecaster(1, 2, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  x <- array(runif(2 * 3 * 4 * 4), dim = c(2, 3, 1, 4, 4))
  y <- array(runif(2 * 2 * 4 * 4), dim = c(2, 2, 1, 4, 4))
  want <- "`batch_size` \\(5\\) must not exceed the number of samples in `x` \\(2\\)"
  expect_convlstm_error(convlstm_fit(fc, x, y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 5,
                                     verbose = FALSE), regexp = want)
  m <- api_model()
  on.exit(convlstm_release(m), add = TRUE)
  expect_convlstm_error(convlstm_fit(m, api_x(B = 2), api_y(B = 2), convlstm_optimizer_sgd(0),
                                     batch_size = 5, verbose = FALSE), regexp = want)
  # the default batch_size (32) stands for all of it, for both: lr 0, the epoch's loss is
  # the loss of both sequences in one batch, as convlstm_train_step() gives it
  h <- convlstm_fit(fc, x, y, convlstm_optimizer_sgd(0), epochs = 1, verbose = FALSE)
  expect_equal(h$loss[[1]], convlstm_train_step(fc, x, y, convlstm_optimizer_sgd(0)), tolerance = 1e-6)
})

test_that("an encoder-forecaster's remaining refusals: tbptt, horizon, given and carried states, position peepholes, a separate forward, each classed and named", {
  fc <- convlstm_forecaster(1, 2, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  x <- array(runif(2 * 3 * 4 * 4), dim = c(2, 3, 1, 4, 4))
  y <- array(runif(2 * 2 * 4 * 4), dim = c(2, 2, 1, 4, 4))
  o <- convlstm_optimizer_sgd(0)
  fit <- function(...) convlstm_fit(fc, x, y, o, epochs = 1, verbose = FALSE, ...)
  unsupported <- function(expr, regexp) {
    expect_convlstm_error(expr, status = "unsupported", regexp = regexp)
  }
  # tbptt: the step runs both stacks whole (the loss reads every target step at once)
  tb <- "does not support tbptt: its step runs the whole sequence in one pass"
  unsupported(convlstm_train_step(fc, x, y, o, tbptt = 2), tb)
  unsupported(fit(tbptt = 2), tb)
  unsupported(convlstm_memory_estimate(fc, 2, 3, 4, 4, horizon = 2, tbptt = 2), tb)
  # a horizon in training: the target's frames are the horizon
  hz <- "takes no horizon in training: its horizon is the target's steps, dim\\(y\\)\\[2\\]"
  unsupported(convlstm_train_step(fc, x, y, o, horizon = 2), hz)
  unsupported(fit(horizon = 2), hz)
  # free running: its forecaster reads no frames, so there is nothing to feed back
  unsupported(convlstm_train_step(fc, x, y, o, teacher_forcing = FALSE), "teacher_forcing below 1")
  # given and carried states: it starts from zeros
  given <- list(list(h = array(0, c(2, 1, 4, 4)), c = array(0, c(2, 1, 4, 4))))
  unsupported(convlstm_train_step(fc, x, y, o, state = given), "does not support a given state")
  unsupported(convlstm_memory_estimate(fc, 2, 3, 4, 4, horizon = 2, state = "given"),
              "does not support a given state")
  unsupported(convlstm_train_step(fc, x, y, o, state = "carry"), 'does not support state = "carry"')
  unsupported(fit(state = "carry", shuffle = FALSE), 'does not support state = "carry"')
  # the last state as the target: its target is the frames
  unsupported(convlstm_train_step(fc, x, array(0, c(2, 1, 4, 4)), o, target = "last_state"),
              'does not support target = "last_state"')
  # a separate forward (and so loss and backward)
  unsupported(convlstm_forward(fc, x), "trains through train_step only")
  # per-position peepholes: refused by the constructor with the capability table's row
  # (its status and reason), naming `peephole`; another word stays an argument error
  for (p in list("position", TRUE)) {
    expect_convlstm_error(convlstm_forecaster(1, 2, 3, patch = 2, peephole = p, device = "cpu"),
                          status = "unsupported",
                          regexp = 'supports peepholes "none" and "channel", not "position"')
  }
  expect_convlstm_error(convlstm_forecaster(1, 2, 3, patch = 2, peephole = "both", device = "cpu"),
                        status = "invalid", regexp = '`peephole` must be one of "channel", "none"')
  # and a step with none of these still trains
  expect_true(is.finite(convlstm_train_step(fc, x, y, o)))
})
