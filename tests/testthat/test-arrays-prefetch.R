# R arrays read ahead (issue 36 item 2, "the same double-buffered path
# serves R arrays"): a fit on plain arrays, batches sliced in R, runs its
# step on a C thread while R slices the next batch (CPU, one process). The
# expected values are the same fit's with options(convlstm.prefetch =
# FALSE), which slices each batch at its step: the losses, the validation
# losses and the weights after every batch must be identical bit for bit.
# (count_calls(), fit_arrays(), expect_same_fit(): helper-trace.R.)

stack_model <- function() {
  set.seed(11)
  convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
}

test_that("a fit on R arrays slicing the next batch during the step equals, bit for bit, the fit slicing at each step", {
  set.seed(3)
  x <- array(stats::runif(23 * 3 * 4 * 4), c(23, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(23, 1, 4, 4))
  w <- array(stats::runif(23 * 4 * 4), c(23, 1, 4, 4)) # a weight, sliced with each batch
  args <- list(epochs = 2, batch_size = 4, shuffle = TRUE, validation_split = 0.2,
               accumulation_steps = 2, weight = w)
  ahead <- do.call(fit_arrays, c(list(stack_model, x, y, TRUE), args))
  plain <- do.call(fit_arrays, c(list(stack_model, x, y, FALSE), args))
  # 23 rows, 5 held out: 18 train in batches 4, 4, 4, 4, 2; each step on
  # the thread, each batch sliced once
  expect_equal(ahead$calls$c_train_step_start, 2 * 5)
  expect_equal(ahead$calls$arrays_slice, 2 * 5)
  expect_equal(plain$calls$c_train_step_start, 0)
  expect_equal(plain$calls$arrays_slice, 2 * 5)
  expect_equal(length(ahead$seen), 2 * 5)
  expect_same_fit(ahead, plain)
  # the weight is used: without it the fit differs
  unweighted <- do.call(fit_arrays, c(list(stack_model, x, y, TRUE), args[names(args) != "weight"]))
  expect_false(identical(unweighted$h$loss, ahead$h$loss))
})

test_that("a forecasting fit on arrays (teacher forcing per epoch, an encoder-forecaster) reads ahead as it slices", {
  set.seed(4)
  x <- array(stats::runif(10 * 3 * 4 * 4), c(10, 3, 1, 4, 4))
  y <- array(stats::runif(10 * 2 * 4 * 4), c(10, 2, 1, 4, 4))
  # a horizon, teacher forcing 1 then 0.5: the teacher-forced inputs (x and
  # y's true frames) are what the step after the next reads
  tf <- function(epoch) if (epoch == 1) 1 else 0.5
  args <- list(epochs = 2, batch_size = 3, horizon = 2, teacher_forcing = tf)
  ahead <- do.call(fit_arrays, c(list(stack_model, x, y, TRUE), args))
  plain <- do.call(fit_arrays, c(list(stack_model, x, y, FALSE), args))
  expect_equal(ahead$calls$c_train_step_start, 2 * 4)
  expect_same_fit(ahead, plain)
  ff <- function() {
    set.seed(21)
    convlstm_forecaster(1, c(4, 3), 3, patch = 2, device = "cpu", threads = 1)
  }
  x8 <- array(stats::runif(7 * 3 * 8 * 8), c(7, 3, 1, 8, 8))
  y8 <- array(stats::runif(7 * 2 * 8 * 8), c(7, 2, 1, 8, 8))
  args <- list(epochs = 2, batch_size = 2, validation_split = 0.3)
  ahead <- do.call(fit_arrays, c(list(ff, x8, y8, TRUE), args))
  plain <- do.call(fit_arrays, c(list(ff, x8, y8, FALSE), args))
  expect_equal(ahead$calls$c_train_step_start, 2 * 2) # 3 rows held out, 4 train: 2, 2
  expect_same_fit(ahead, plain)
})

test_that("an arrays source reads ahead, and the data set on the device, one batch or the switch off do not", {
  set.seed(5)
  x <- array(stats::runif(12 * 3 * 4 * 4), c(12, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(12, 1, 4, 4))
  src <- convlstm_source_arrays(x, y)
  ahead <- fit_arrays(stack_model, src, NULL, TRUE, epochs = 2, batch_size = 5)
  plain <- fit_arrays(stack_model, src, NULL, FALSE, epochs = 2, batch_size = 5)
  expect_equal(ahead$calls$c_train_step_start, 2 * 3)
  expect_equal(plain$calls$c_train_step_start, 0)
  expect_same_fit(ahead, plain)
  arrays <- fit_arrays(stack_model, x, y, TRUE, epochs = 2, batch_size = 5)
  expect_same_fit(arrays, ahead) # the arrays' own fit, the same batches
  # nothing is sliced: the training set on the device, or all rows in one batch
  old <- options(convlstm.prefetch = TRUE)
  on.exit(options(old))
  m <- stack_model()
  on.exit(convlstm_release(m), add = TRUE)
  calls <- count_calls("c_train_step_start", {
    convlstm_fit(m, x, y, convlstm_optimizer_adam(0.02), epochs = 1, batch_size = 5,
                 data_on_device = TRUE, verbose = FALSE)
    convlstm_fit(m, x, y, convlstm_optimizer_adam(0.02), epochs = 1, batch_size = 12,
                 data_on_device = FALSE, verbose = FALSE)
  })
  expect_equal(calls$c_train_step_start, 0)
})

test_that("an interrupt while the next batch is sliced ends the fit after the running step, the model valid", {
  set.seed(6)
  x <- array(stats::runif(12 * 3 * 4 * 4), c(12, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(12, 1, 4, 4))
  # the third slicing: batch 3's, during step 2 when reading ahead, after
  # it otherwise
  interrupted <- function(prefetch) {
    n <- new.env()
    n$k <- 0
    suppressMessages(trace("arrays_slice", where = asNamespace("convlstm"), print = FALSE,
                           tracer = bquote({
                             assign("k", get("k", .(n)) + 1, envir = .(n))
                             if (get("k", .(n)) == 3) signalCondition(structure(
                               class = c("interrupt", "condition"), list(message = "", call = NULL)))
                           })))
    on.exit(suppressMessages(untrace("arrays_slice", where = asNamespace("convlstm"))))
    fit_arrays(stack_model, x, y, prefetch, epochs = 2, batch_size = 4, shuffle = FALSE,
               count = "c_train_step_start")
  }
  ahead <- interrupted(TRUE)
  plain <- interrupted(FALSE)
  expect_equal(nrow(ahead$h), 0) # no epoch completed
  expect_equal(length(plain$seen), 2) # steps 1 and 2 and their callbacks
  expect_equal(length(ahead$seen), 1) # step 2 ended, its callbacks not run
  expect_identical(ahead$w, plain$w) # after step 2, complete
  expect_identical(plain$w, plain$seen[[2]])
})

test_that("an arrays source's plan holds two batches of x and y when the next is sliced during the step", {
  x <- array(0, c(9, 3, 1, 4, 4))
  y <- array(0, c(9, 1, 4, 4))
  src <- convlstm_source_arrays(x, y)
  m <- stack_model()
  on.exit(convlstm_release(m))
  by <- function(e) stats::setNames(e$bytes, e$category)[c("data", "total", "reserved")]
  plain <- by(convlstm_memory_estimate(m, 6, 3, 4, 4))
  one <- 6 * (3 * 1 * 4 * 4 + 1 * 4 * 4) * 8 # 6 samples of x [3, 1, 4, 4] and y [1, 4, 4], doubles
  est <- convlstm_memory_estimate(m, 6, 3, 4, 4, source = src)
  expect_equal(unname(by(est) - plain), rep(2 * one, 3))
  rows <- attr(est, "plan")
  expect_equal(rows$bytes[match(c("source_x", "source_y", "source_x_next", "source_y_next"),
                                rows$name)], c(2304, 768, 2304, 768))
  old <- options(convlstm.prefetch = FALSE)
  on.exit(options(old), add = TRUE)
  expect_equal(unname(by(convlstm_memory_estimate(m, 6, 3, 4, 4, source = src)) - plain),
               rep(one, 3))
})

test_that("dropout's seeds are drawn as when slicing at each step: a fit with dropout reads ahead identically", {
  set.seed(8)
  x <- array(stats::runif(11 * 3 * 4 * 4), c(11, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(11, 1, 4, 4))
  drop_model <- function(dropout = 0.3) {
    set.seed(12)
    convlstm(1, c(3, 1), 3, device = "cpu", threads = 1, dropout = dropout,
             recurrent_dropout = dropout)
  }
  ahead <- fit_arrays(drop_model, x, y, TRUE, epochs = 2, batch_size = 3)
  plain <- fit_arrays(drop_model, x, y, FALSE, epochs = 2, batch_size = 3)
  expect_equal(ahead$calls$c_train_step_start, 2 * 4)
  expect_same_fit(ahead, plain)
  # the masks matter: the same model without dropout trains otherwise
  none <- fit_arrays(function() drop_model(0), x, y, TRUE, epochs = 2, batch_size = 3)
  expect_false(identical(none$h$loss, ahead$h$loss))
})

test_that("on a GPU the step's own thread binds the model's device: a fit reading ahead equals, bit for bit, one that does not", {
  skip_if_not(convlstm_gpu_available(), "no usable CUDA GPU")
  # cuDNN held to algorithms without atomics (read when the model is made),
  # so that two fits can repeat each other's bits
  old <- Sys.getenv("CONVLSTM_CUDNN_DETERMINISTIC", unset = NA)
  Sys.setenv(CONVLSTM_CUDNN_DETERMINISTIC = "1")
  on.exit(if (is.na(old)) Sys.unsetenv("CONVLSTM_CUDNN_DETERMINISTIC") else
    Sys.setenv(CONVLSTM_CUDNN_DETERMINISTIC = old))
  gpu_model <- function() {
    set.seed(11)
    convlstm(1, c(8, 1), 3, device = "cuda")
  }
  set.seed(9)
  x <- array(stats::runif(23 * 3 * 8 * 8), c(23, 3, 1, 8, 8))
  y <- array(x[, 3, 1, , ], c(23, 1, 8, 8))
  args <- list(epochs = 2, batch_size = 4, shuffle = TRUE, validation_split = 0.2)
  ahead <- do.call(fit_arrays, c(list(gpu_model, x, y, TRUE), args))
  plain <- do.call(fit_arrays, c(list(gpu_model, x, y, FALSE), args))
  expect_equal(ahead$calls$c_train_step_start, 2 * 5) # every step on the thread
  expect_equal(plain$calls$c_train_step_start, 0)
  expect_true(all(is.finite(ahead$h$loss)))
  expect_same_fit(ahead, plain)
  # and a function source, read while the step runs on the thread
  src <- convlstm_source_function(function(i) list(x = x[i, , , , , drop = FALSE],
                                                   y = y[i, , , , drop = FALSE]), n = 23)
  fun <- do.call(fit_arrays, c(list(gpu_model, src, NULL, TRUE), args))
  expect_equal(fun$calls$c_train_step_start, 2 * 5)
  expect_same_fit(fun, plain)
})

test_that("a source's function that uses or releases the model while its step runs on a thread gets a classed error, the model left as that step made it", {
  set.seed(13)
  x <- array(stats::runif(12 * 3 * 4 * 4), c(12, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(12, 1, 4, 4))
  # batch 2's read (rows 5 to 8): during step 1 when reading ahead
  fit_touching <- function(touch, prefetch) {
    old <- options(convlstm.prefetch = prefetch)
    on.exit(options(old))
    m <- stack_model()
    fun <- function(i) {
      if (identical(as.integer(i), 5:8)) touch(m)
      list(x = x[i, , , , , drop = FALSE], y = y[i, , , , drop = FALSE])
    }
    err <- tryCatch(convlstm_fit(m, convlstm_source_function(fun, n = 12), NULL,
                                 convlstm_optimizer_adam(0.02), epochs = 1, batch_size = 4,
                                 shuffle = FALSE, data_on_device = FALSE, verbose = FALSE),
                    error = function(e) e)
    list(err = err, m = m)
  }
  for (touch in list(convlstm_state_dict, convlstm_release,
                     function(m) predict(m, x[1:2, , , , , drop = FALSE]))) {
    ahead <- fit_touching(touch, TRUE)
    expect_s3_class(ahead$err, "convlstm_error")
    expect_s3_class(ahead$err$parent, "convlstm_error_state")
    expect_match(conditionMessage(ahead$err), "batch 2")
    expect_match(conditionMessage(ahead$err), "running on a thread of its own")
    expect_identical(convlstm:::c_model_status(convlstm:::model_ptr(ahead$m)), "live") # not released
    # the model is step 1's, as a fit whose function fails at batch 2's read
    failing <- fit_touching(function(m) stop("no batch 2"), FALSE)
    expect_s3_class(failing$err, "convlstm_error")
    expect_identical(convlstm_state_dict(ahead$m), convlstm_state_dict(failing$m))
    convlstm_release(failing$m)
    convlstm_release(ahead$m)
  }
  # called between steps (not reading ahead), the same function may use the model
  plain <- fit_touching(convlstm_state_dict, FALSE)
  expect_s3_class(plain$err, "convlstm_history")
  convlstm_release(plain$m)
})
