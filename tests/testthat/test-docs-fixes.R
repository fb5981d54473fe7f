# test-docs-fixes.R -- what issue 35 item 9's fixes to the documented behaviour pin (the docs
# and the errors users read).

test_that("convlstm_max_batch_size() of an encoder-forecaster without a horizon names convlstm_max_batch_size() and `horizon`", {
  fc <- convlstm_forecaster(1, 2, 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  # no horizon, and horizon = 0 (one step below the edge): refused, classed, in this
  # function's name (it used to be convlstm_memory_estimate()'s error, naming an internal call)
  for (call in list(quote(convlstm_max_batch_size(fc, "40 MiB", 3, 4, 4)),
                    quote(convlstm_max_batch_size(fc, "40 MiB", 3, 4, 4, horizon = 0)))) {
    e <- tryCatch(eval(call), error = identity)
    expect_s3_class(e, "convlstm_error_invalid")
    expect_match(conditionMessage(e), "convlstm_max_batch_size() of an encoder-forecaster needs `horizon`",
                 fixed = TRUE)
    expect_false(grepl("convlstm_memory_estimate", conditionMessage(e), fixed = TRUE))
    expect_identical(conditionCall(e)[[1]], as.name("convlstm_max_batch_size"))
  }
  expect_match(conditionMessage(e), "not 0.", fixed = TRUE)
  # horizon = 1, the edge: accepted, a batch size of the budget
  b <- convlstm_max_batch_size(fc, "40 MiB", 3, 4, 4, horizon = 1)
  expect_s3_class(b, "convlstm_batch_size")
  expect_gte(as.integer(b), 1L)
})
