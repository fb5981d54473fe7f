# test-refusals.R -- refusals of bad input that no other test file triggers (issue 38 item 3),
# each checked by class (expect_convlstm_error(), helper-api.R) and by a message that names the
# argument; where a refusal sits at a numeric limit, the value exactly at the limit is accepted
# and the next one refused, so a limit moved by one (`>` for `>=`) fails here. The refusals
# already tested elsewhere (most of convlstm()'s, train_step()'s, convlstm_fit()'s and the
# optimizers' arguments in test-reliability-input.R's table; the metrics', grids', data sets',
# schedulers', callbacks' and generators' in their own files) are not repeated.
#
# Contents, by R source file:
#   R/errors.R         check_threads(): 1024 threads accepted, 1025 refused
#   R/model.R          n_layers = 32 (max_layers) accepted, 33 refused by the same count
#   R/forecaster.R     convlstm_forecaster(): 15 layers per stack accepted, 16 refused
#   R/moving_beams.R   moving_beams(): n, seq_len, size and seed refused with the package's class
#                      (they were plain stop() errors; Inf was taken as a count)
#   R/moving_digits.R  moving_digits(): a digit of 7 x 5 * scale exactly the frame accepted, one
#                      pixel more refused; horizon = seq_len - 1 accepted, seq_len refused
#   R/moving_mnist.R   moving_mnist(): size 28 (the glyphs') accepted, 27 refused
#   R/metrics.R        forecast_metrics(): a threshold equal to max(observed) accepted, just above
#                      refused, just above min(observed) accepted; an SSIM window as wide as the
#                      frames accepted, one wider refused; metrics named twice refused
#   R/grid.R           grid_windows(): input + horizon equal to the series accepted, one frame
#                      more refused; grid_restore(): window = the number of windows accepted,
#                      one more refused
#   R/fit.R            validation_split leaving exactly one sample on each side accepted, the
#                      split leaving none for validation refused
#   R/fit_check.R      batch_size equal to the samples accepted, one more refused
#   R/train.R          accumulation_steps equal to the batch accepted, one more refused
#   R/sampling.R       inverse_sigmoid k = 1 accepted; a teacher_forcing schedule that errors is
#                      named, classed; exponential k just below 1 accepted
#   R/profile.R        memory_profile(): unnamed values in `...` refused
#   R/schedulers.R     lr_multiplicative(): lr_lambda returning a negative number refused, 0
#                      accepted
#   src/r_handle.c, src/r_data.c, src/r_params.c, src/r_io.c
#                      the glue's own argument checks, reached through the internal c_*()
#                      functions: classed invalid errors naming the argument
#   R/train.R, R/fit.R, R/advise.R, R/data.R
#                      the encoder-forecaster's refusals, written four times (issue 33): where
#                      the copies disagree, the disagreement shown

# ---- R/moving_beams.R -------------------------------------------------------------------------

test_that("moving_beams() refuses bad counts and seeds with the package's class, naming them", {
  expect_convlstm_error(moving_beams(n = 0), regexp = "`n` must be a whole number >= 1")
  expect_convlstm_error(moving_beams(n = 1.5), regexp = "`n`")
  expect_convlstm_error(moving_beams(n = Inf), regexp = "`n`")
  expect_convlstm_error(moving_beams(n = 1, seq_len = 1), regexp = "`seq_len` must be a whole number >= 2")
  expect_convlstm_error(moving_beams(n = 1, size = 3), regexp = "`size` must be a whole number >= 4")
  expect_convlstm_error(moving_beams(n = 1, seed = "a"), regexp = "`seed`")
  # the limits themselves are accepted: one sequence of 2 frames of 4 x 4
  d <- moving_beams(n = 1, seq_len = 2, size = 4, seed = 1)
  expect_identical(dim(d$x), c(1L, 1L, 1L, 4L, 4L))
  expect_identical(dim(d$y), c(1L, 1L, 4L, 4L))
})
