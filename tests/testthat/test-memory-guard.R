# Guard bands (CONVLSTM_GUARD=1, read when a model is created): a canary
# after every buffer of the step arena, checked after every step, so that a
# kernel writing past its slot fails loudly with the buffer's name.

guarded_model <- function(...) with_guard("1", convlstm(...))

test_that("guard bands: a step trains as without them, and the bands are reserved beside the plan", {
  set.seed(1)
  x <- array(runif(3 * 4 * 2 * 8 * 8), c(3, 4, 2, 8, 8))
  y <- array(runif(3 * 8 * 8), c(3, 1, 8, 8))
  plain <- with_guard("", convlstm(2, c(6, 1), 3, device = "cpu"))
  on.exit(convlstm_release(plain))
  set.seed(1)
  guarded <- guarded_model(2, c(6, 1), 3, device = "cpu")
  on.exit(convlstm_release(guarded), add = TRUE)
  convlstm_load_state_dict(guarded, convlstm_state_dict(plain))
  for (i in 1:3) {
    expect_identical(convlstm_train_step(guarded, x, y, convlstm_optimizer_adam()),
                     convlstm_train_step(plain, x, y, convlstm_optimizer_adam()))
  }
  eg <- estimate_bytes(convlstm_memory_estimate(guarded, 3, 4, 8, 8))
  ep <- estimate_bytes(convlstm_memory_estimate(plain, 3, 4, 8, 8))
  expect_identical(eg[["total"]], ep[["total"]])    # the categories do not change
  expect_gt(eg[["reserved"]], ep[["reserved"]])     # the bands are reserved, in the arena
  expect_identical(convlstm_memory_stats(guarded)$reserved, eg[["reserved"]])
})

test_that("guard bands: a write past a step buffer fails the next step with the buffer's name", {
  x <- array(runif(2 * 3 * 1 * 8 * 8), c(2, 3, 1, 8, 8))
  y <- array(runif(2 * 8 * 8), c(2, 1, 8, 8))
  m <- guarded_model(1, c(4, 1), 3, device = "cpu")
  on.exit(convlstm_release(m))
  opt <- convlstm_optimizer_adam()
  convlstm_train_step(m, x, y, opt)
  for (buffer in c("gates[0]", "hidden[1]", "conv_workspace", "x")) {
    convlstm:::c_test_overrun(convlstm:::model_ptr(m), buffer)
    err <- tryCatch(convlstm_train_step(m, x, y, opt), convlstm_error_internal = function(e) e)
    expect_s3_class(err, "convlstm_error_internal")
    expect_match(conditionMessage(err), sprintf("past buffer '%s'", buffer), fixed = TRUE)
    # the canary is restored once reported: the model trains on
    expect_true(is.finite(convlstm_train_step(m, x, y, opt)))
  }
  # an inference forward is checked too
  invisible(m(x))
  convlstm:::c_test_overrun(convlstm:::model_ptr(m), "gates")
  expect_error(m(x), "past buffer 'gates'", class = "convlstm_error_internal")
})

test_that("guard bands: the test hook refuses a model without them", {
  m <- with_guard("", convlstm(1, c(4, 1), 3, device = "cpu"))
  on.exit(convlstm_release(m))
  expect_error(convlstm:::c_test_overrun(convlstm:::model_ptr(m), "gates[0]"),
               "CONVLSTM_GUARD=1", class = "convlstm_error_state")
})
