# predict() and convlstm_evaluate() pinned by numbers computed apart (issue
# 38): predicting in batches is predicting all at once, bit for bit, for
# batch sizes that divide the number of sequences and that do not (and
# larger than it), row i of a prediction is the prediction of sequence i
# alone, for the plain stack's outputs, a given state, a horizon and the
# encoder-forecaster; convlstm_evaluate()'s value is the loss of predict()'s
# output written out here in R, for each loss, reduction, weight and horizon,
# whatever its batch size.

# Bit for bit the same array: its dims, then its values as one vector (which
# testthat compares and prints well; it cannot print a diff of 5-d arrays).
expect_bitwise <- function(actual, expected, info = NULL) {
  expect_identical(dim(actual), dim(expected), info = info)
  expect_identical(as.vector(actual), as.vector(expected), info = info)
}

# x's rows one at a time, each predicted alone, bound along the first dim.
predict_alone <- function(model, x, ...) {
  parts <- lapply(seq_len(dim(x)[[1]]), function(i) predict(model, rows_of(x, i), ...))
  d <- dim(parts[[1]])
  out <- array(0, c(length(parts), d[-1]))
  for (i in seq_along(parts)) {
    if (length(d) == 5) out[i, , , , ] <- parts[[i]] else out[i, , , ] <- parts[[i]]
  }
  out
}

# predict(model, x, ..., batch_size = b) is `whole`, bit for bit, for each b.
expect_batched_predict <- function(model, x, whole, sizes, ...) {
  args <- list(...)
  shown <- vapply(args, function(a) if (is.atomic(a) && length(a) == 1) format(a) else "<list>", "")
  for (b in sizes) {
    expect_bitwise(predict(model, x, ..., batch_size = b), whole,
                   info = paste(c(paste(names(args), shown, sep = " = "),
                                  paste("batch_size =", b)), collapse = ", "))
  }
}

values_predict_model <- function() {
  set.seed(41)
  convlstm(2, c(3, 2), 3, device = "cpu", threads = 1)
}

values_x <- function(n = 5, seed = 42) {
  set.seed(seed)
  array(runif(n * 3 * 2 * 5 * 4, -1, 1), c(n, 3, 2, 5, 4))
}

test_that("a plain stack's batched predict() is its unbatched one, bit for bit, row by row", {
  model <- values_predict_model()
  on.exit(convlstm_release(model))
  x <- values_x()
  for (what in c("sequence", "last_state")) {
    whole <- predict(model, x, what = what)
    # each row is that sequence predicted alone
    expect_bitwise(whole, predict_alone(model, x, what = what))
    # the rows differ, so a row written in the wrong place shows
    row_values <- function(i) c(whole)[seq(i, length(whole), by = 5)]
    expect_false(identical(row_values(1), row_values(2)))
    expect_batched_predict(model, x, whole, c(1, 2, 3, 4, 5, 7), what = what)
  }
})

test_that("a plain stack's batched forecast (horizon) is its unbatched one, row by row", {
  model <- values_predict_model() # last hidden 2 = input_dim 2: frames fed back
  on.exit(convlstm_release(model))
  x <- values_x()
  whole <- predict(model, x, horizon = 3)
  expect_identical(dim(whole), c(5L, 3L, 2L, 5L, 4L))
  expect_bitwise(whole, predict_alone(model, x, horizon = 3))
  expect_batched_predict(model, x, whole, c(1, 2, 3, 5, 6), horizon = 3)
})

test_that("a batched predict() from a given state takes each batch's rows of that state", {
  model <- values_predict_model()
  on.exit(convlstm_release(model))
  x <- values_x()
  state <- model(values_x(seed = 43))$layer_last_states
  whole <- predict(model, x, state = state)
  # row i from row i of the state, alone
  for (i in 1:5) {
    s_i <- lapply(state, function(l) lapply(l, rows_of, i))
    expect_bitwise(rows_of(whole, i), predict(model, rows_of(x, i), state = s_i),
                   info = sprintf("row %d", i))
  }
  expect_false(identical(whole, predict(model, x))) # the state matters
  expect_batched_predict(model, x, whole, c(2, 3), state = state)
  expect_batched_predict(model, x, predict(model, x, state = state, horizon = 2), c(2, 3),
                         state = state, horizon = 2)
})

test_that("an encoder-forecaster's batched predict() is its unbatched one, row by row", {
  set.seed(44)
  model <- convlstm_forecaster(1, c(3, 2), 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  x <- array(runif(5 * 3 * 4 * 4), c(5, 3, 1, 4, 4))
  whole <- predict(model, x, horizon = 3)
  expect_identical(dim(whole), c(5L, 3L, 1L, 4L, 4L))
  expect_bitwise(whole, predict_alone(model, x, horizon = 3))
  expect_false(identical(rows_of(whole, 1), rows_of(whole, 5)))
  expect_batched_predict(model, x, whole, c(1, 2, 3, 4, 5, 8), horizon = 3)
})

# --- convlstm_evaluate() ------------------------------------------------------------------------

test_that("convlstm_evaluate() is the loss of predict()'s output, written out in R", {
  model <- values_predict_model()
  on.exit(convlstm_release(model))
  x <- values_x()
  set.seed(45)
  y <- array(runif(5 * 2 * 5 * 4, -1, 1), c(5, 2, 5, 4))
  ys <- array(runif(5 * 3 * 2 * 5 * 4, -1, 1), c(5, 3, 2, 5, 4))
  p <- predict(model, x, what = "last_state")
  ps <- predict(model, x, what = "sequence")
  for (b in c(2, 5)) { # 3 batches, the last uneven; one batch
    # the default: the mean squared error over every element
    expect_equal(convlstm_evaluate(model, x, y, batch_size = b), mean((p - y)^2),
                 tolerance = 1e-12)
    expect_equal(convlstm_evaluate(model, x, ys, target = "sequence", batch_size = b),
                 sum((ps - ys)^2) / length(ys), tolerance = 1e-12)
    # the sum, and the sum per sequence (5 of them, not a batch's 2)
    expect_equal(convlstm_evaluate(model, x, y, batch_size = b, loss = "mae", reduction = "sum"),
                 sum(abs(p - y)), tolerance = 1e-12)
    expect_equal(convlstm_evaluate(model, x, y, batch_size = b, loss = "mae",
                                   reduction = "batchmean"),
                 sum(abs(p - y)) / 5, tolerance = 1e-12)
    # huber with delta 0.3: squared / 2 below it, linear above
    z <- abs(p - y)
    expect_true(any(z < 0.3) && any(z > 0.3))
    expect_equal(convlstm_evaluate(model, x, y, batch_size = b, loss = "huber", delta = 0.3),
                 mean(ifelse(z < 0.3, z^2 / 2, 0.3 * (z - 0.15))), tolerance = 1e-12)
    # a weight: each element's loss times it, the mean still over all elements
    set.seed(46)
    w <- array(runif(length(y)), dim(y))
    expect_equal(convlstm_evaluate(model, x, y, batch_size = b, weight = w),
                 sum(w * (p - y)^2) / length(y), tolerance = 1e-12)
  }
  # targets in [0, 1] for the cross-entropy on logits, pos_weight 2
  t01 <- (y + 1) / 2
  bce <- function(q, t, pw = 1) (1 - t) * q + (1 + (pw - 1) * t) * log1p(exp(-q))
  expect_equal(convlstm_evaluate(model, x, t01, batch_size = 3, loss = "bce_logits",
                                 pos_weight = 2, reduction = "batchmean"),
               sum(bce(p, t01, 2)) / 5, tolerance = 1e-12)
})

test_that("convlstm_evaluate() with a horizon is the loss of the free-running forecast", {
  model <- values_predict_model()
  on.exit(convlstm_release(model))
  x <- values_x()
  set.seed(47)
  y <- array(runif(5 * 3 * 2 * 5 * 4, -1, 1), c(5, 3, 2, 5, 4))
  f <- predict(model, x, horizon = 3)
  for (b in c(2, 5)) {
    expect_equal(convlstm_evaluate(model, x, y, horizon = 3, batch_size = b), mean((f - y)^2),
                 tolerance = 1e-12)
    expect_equal(convlstm_evaluate(model, x, y, horizon = 3, batch_size = b, loss = "mae",
                                   reduction = "batchmean"),
                 sum(abs(f - y)) / 5, tolerance = 1e-12)
  }
})

test_that("convlstm_evaluate(metrics = ) scores predict()'s output, assembled batch by batch", {
  model <- values_predict_model()
  on.exit(convlstm_release(model))
  x <- values_x()
  set.seed(48)
  y <- array(runif(5 * 3 * 2 * 5 * 4, -1, 1), c(5, 3, 2, 5, 4))
  y1 <- array(runif(5 * 2 * 5 * 4, -1, 1), c(5, 2, 5, 4))
  f <- predict(model, x, horizon = 3)
  p <- predict(model, x, what = "last_state")
  for (b in c(2, 5)) {
    # "mse", "mae": means per element; "mse_frame", "mae_frame": the errors
    # summed over each frame's pixels, averaged over 5 sequences x 3 frames
    expect_equal(convlstm_evaluate(model, x, y, horizon = 3, batch_size = b,
                                   metrics = c("mse", "mae", "mse_frame", "mae_frame")),
                 c(loss = mean((f - y)^2), mse = mean((f - y)^2), mae = mean(abs(f - y)),
                   mse_frame = sum((f - y)^2) / 15, mae_frame = sum(abs(f - y)) / 15),
                 tolerance = 1e-12)
    # one frame per sequence
    expect_equal(convlstm_evaluate(model, x, y1, batch_size = b, metrics = c("mse", "mse_frame")),
                 c(loss = mean((p - y1)^2), mse = mean((p - y1)^2),
                   mse_frame = sum((p - y1)^2) / 5), tolerance = 1e-12)
  }
})
