# test-spellings.R -- issue 35 item 2: one spelling per idea. "last_state"
# in every function that takes it; `seq_len` the input steps everywhere (the
# generators' frame count is `n_frames`, convlstm_grid_windows()' input `seq_len`);
# the budget second in convlstm_max_batch_size() as in convlstm_memory_advise(). Each old
# spelling is refused, classed, with a message naming the new one. Calls in
# an old spelling go through do.call() so tools/rename_exports.R, which
# rewrites argument names in calls, leaves them as they are.

spelling_model <- function() {
  set.seed(35)
  convlstm(1, c(3, 2), 3, device = "cpu", threads = 1)
}

expect_refused_naming <- function(expr, new) {
  e <- tryCatch(expr, error = identity)
  expect_s3_class(e, "convlstm_error_invalid")
  expect_match(conditionMessage(e), new, fixed = TRUE)
  invisible(e)
}

# "last_states": refused as the old spelling (the condition says which),
# not merely as a value outside the choices (whose message lists
# "last_state" too)
expect_last_states_refused <- function(expr) {
  e <- expect_refused_naming(expr, '= "last_state"` now')
  expect_identical(e$old, "last_states")
  expect_identical(e$new, "last_state")
}

test_that('model(x, outputs = "last_state") gives the last states; "last_states" is refused naming it', {
  m <- spelling_model()
  on.exit(convlstm_release(m))
  x <- array(runif(2 * 4 * 1 * 5 * 5), c(2, 4, 1, 5, 5))
  full <- m(x)
  last <- m(x, outputs = "last_state")
  expect_length(last$layer_outputs, 0)
  # the states of the full forward: its last step's output is the last h
  expect_equal(last$layer_last_states[[2]]$h, full$layer_outputs[[2]][, 4, , , ],
               tolerance = 1e-6)
  expect_last_states_refused(m(x, outputs = "last_states"))
  expect_match(conditionMessage(tryCatch(m(x, outputs = "last_states"), error = identity)),
               '`outputs = "last_states"` is spelled `outputs = "last_state"` now.', fixed = TRUE)
})

test_that('"last_states" is refused naming "last_state" by predict(), convlstm_train_step(), convlstm_memory_estimate(), convlstm_fit() and convlstm_evaluate()', {
  m <- spelling_model()
  on.exit(convlstm_release(m))
  x <- array(runif(2 * 4 * 1 * 5 * 5), c(2, 4, 1, 5, 5))
  y <- array(runif(2 * 2 * 5 * 5), c(2, 2, 5, 5))
  opt <- convlstm_optimizer_sgd(0.1)
  expect_last_states_refused(predict(m, x, what = "last_states"))
  expect_last_states_refused(convlstm_train_step(m, x, y, opt, target = "last_states"))
  expect_last_states_refused(convlstm_memory_estimate(m, 2, 4, 5, 5, training = FALSE,
                                                      outputs = "last_states"))
  expect_last_states_refused(convlstm_fit(m, x, y, opt, epochs = 1, target = "last_states",
                                          verbose = FALSE))
  expect_last_states_refused(convlstm_evaluate(m, x, y, target = "last_states"))
  # the new spelling is the one they take
  expect_equal(dim(predict(m, x, what = "last_state")), c(2, 2, 5, 5))
})

test_that("the generators' frame count is n_frames (input and horizon together); seq_len is refused naming it", {
  d <- convlstm_moving_digits(n = 2, n_frames = 6, size = 16, horizon = 2, seed = 1)
  expect_equal(dim(d$x), c(2, 6 - 2, 1, 16, 16))
  expect_equal(dim(d$y), c(2, 2, 1, 16, 16))
  b <- convlstm_moving_beams(n = 2, n_frames = 5, size = 12, seed = 1)
  expect_equal(dim(b$x), c(2, 5 - 1, 1, 12, 12))
  mm <- convlstm_moving_mnist(n = 1, n_frames = 4, size = 32, horizon = 1, seed = 1)
  expect_equal(dim(mm$x), c(1, 3, 1, 32, 32))
  for (gen in list(convlstm_moving_mnist, convlstm_moving_digits, convlstm_moving_beams)) {
    e <- expect_refused_naming(do.call(gen, list(n = 1, seq_len = 6)), "`n_frames`")
    expect_match(conditionMessage(e), "`seq_len`", fixed = TRUE)
  }
  # any other stray argument is refused too (the `...` takes nothing)
  expect_convlstm_error(do.call(convlstm_moving_digits, list(n = 1, frames = 6)), regexp = "n_frames")
})

test_that("convlstm_grid_windows() takes seq_len, the input frames; input = is refused naming it", {
  series <- array(0, c(6, 7, 9))
  for (t in 1:9) series[2, (t - 1) %% 7 + 1, t] <- t
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2)
  expect_equal(dim(w$x), c(9 - 3 - 2 + 1, 3, 1, 6, 7))
  expect_equal(w$x[1, , 1, 2, 1:3], diag(1:3)) # the first window is frames 1..3
  expect_refused_naming(do.call(convlstm_grid_windows, list(series, input = 3, horizon = 2)), "`seq_len`")
})

test_that("convlstm_max_batch_size() takes the budget second, as convlstm_memory_advise(); the old order is refused", {
  m <- spelling_model()
  on.exit(convlstm_release(m))
  named <- convlstm_max_batch_size(m, seq_len = 3, height = 5, width = 4, budget = "1 MiB")
  expect_identical(as.integer(convlstm_max_batch_size(m, "1 MiB", 3, 5, 4)), as.integer(named))
  expect_identical(as.integer(convlstm_max_batch_size(m, 2^20, 3, 5, 4)), as.integer(named))
  expect_gt(as.integer(named), 0L)
  # the order before: the shape first, the budget after (or none)
  expect_refused_naming(convlstm_max_batch_size(m, 3, 5, 4, "1 MiB"), "takes `budget` second")
  expect_refused_naming(convlstm_max_batch_size(m, 3, 5, 4), "takes `budget` second")
  expect_refused_naming(convlstm_max_batch_size(m, 3, 5, 4, 2^20), "takes `budget` second")
  # convlstm_memory_advise() has the same order
  expect_identical(names(formals(convlstm_memory_advise))[1:2], c("model", "budget"))
  expect_identical(names(formals(convlstm_max_batch_size))[1:5],
                   c("model", "budget", "seq_len", "height", "width"))
})
