# test-state.R -- initial and carried states (R/state.R): a sequence cut in
# two and continued from the first part's last states gives the whole
# sequence's outputs; the carried state is memory the model owns, counted
# under `states`, freed by convlstm_reset_state() and convlstm_set_dtype(), and not saved.
# Parity with PyTorch is in test-parity-forecast.R.

test_that("continuing from the last states equals running the whole sequence", {
  set.seed(3)
  m <- api_model()
  x <- api_x(T = 5)
  whole <- m(x)
  first <- m(x[, 1:2, , , , drop = FALSE])
  rest <- m(x[, 3:5, , , , drop = FALSE], state = first$layer_last_states)
  for (l in 1:2) {
    expect_equal(rest$layer_outputs[[l]], whole$layer_outputs[[l]][, 3:5, , , , drop = FALSE],
                 tolerance = 1e-6)
    expect_equal(rest$layer_last_states[[l]], whole$layer_last_states[[l]], tolerance = 1e-6)
  }
  # the same through predict(), all at once or in batches of one
  p <- predict(m, x[, 3:5, , , , drop = FALSE], state = first$layer_last_states, batch_size = 1)
  expect_equal(p, whole$layer_outputs[[2]][, 3:5, , , , drop = FALSE], tolerance = 1e-6)
  # unnamed list(h, c) pairs are taken in that order
  unnamed <- lapply(first$layer_last_states, unname)
  expect_equal(m(x[, 3:5, , , , drop = FALSE], state = unnamed), rest)
  convlstm_release(m)
})

test_that("the carried state is owned, counted under states and freed by convlstm_reset_state()", {
  set.seed(4)
  m <- api_model()
  x <- api_x()
  y <- api_y()
  opt <- convlstm_optimizer_adam()
  expect_null(convlstm_carried_state(m))
  est <- convlstm_memory_estimate(m, 2, 3, 5, 4, state = "carry", optimizer = opt)
  carried <- attr(est, "plan")
  carried <- carried[carried$name == "carried_state", ]
  # h and c of both layers, float32: 2 * 2 * (3 + 2) * 5 * 4 values
  expect_identical(carried$bytes, 4 * 2 * 2 * (3 + 2) * 5 * 4)
  expect_identical(carried$category, "states")
  convlstm_train_step(m, x, y, opt, state = "carry")
  expect_identical(convlstm_carried_state(m), c(2L, 5L, 4L))
  held <- function() {
    s <- convlstm_memory_stats(m)$by_category
    s$current[s$category == "states"]
  }
  expect_identical(held(), carried$bytes)
  # every later plan lists it, and the estimate still equals the allocation
  est2 <- convlstm_memory_estimate(m, 2, 3, 5, 4, training = FALSE)
  expect_true("carried_state" %in% attr(est2, "plan")$name)
  expect_true(convlstm_reset_state(m))
  expect_identical(held(), 0)
  expect_null(convlstm_carried_state(m))
  # a new dtype gives it back too (it was stored in the old one)
  convlstm_train_step(m, x, y, opt, state = "carry")
  convlstm_set_dtype(m, "bfloat16")
  expect_null(convlstm_carried_state(m))
  convlstm_release(m)
})

test_that("the carried state is not saved: a loaded model starts from zeros", {
  set.seed(5)
  m <- api_model()
  x <- api_x()
  y <- api_y()
  convlstm_train_step(m, x, y, convlstm_optimizer_sgd(lr = 0), state = "carry")
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  convlstm_save(m, path)
  loaded <- convlstm_load(path, device = "cpu")
  expect_null(convlstm_carried_state(loaded))
  expect_identical(convlstm_carried_state(m), c(2L, 5L, 4L))
  convlstm_release(loaded)
  convlstm_release(m)
})
