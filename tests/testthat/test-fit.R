# convlstm_fit(): the history it returns, that it learns a tiny problem,
# validation, printing and plotting; convlstm_evaluate().

# A tiny, learnable problem: predict the last input frame.
fit_data <- function(n = 12) {
  x <- array(stats::runif(n * 3 * 1 * 4 * 4), c(n, 3, 1, 4, 4))
  list(x = x, y = array(x[, 3, 1, , ], c(n, 1, 4, 4)))
}

test_that("convlstm_fit() returns a history and lowers the loss", {
  set.seed(8)
  model <- convlstm(1, c(4, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  d <- fit_data()
  v <- fit_data(5)
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(0.02), epochs = 8, batch_size = 5,
                    validation_data = list(v$x, v$y), verbose = FALSE)
  expect_s3_class(h, "convlstm_history")
  expect_s3_class(h, "data.frame")
  expect_named(h, c("epoch", "loss", "val_loss", "lr", "seconds", "peak_bytes"))
  expect_equal(h$lr, rep(0.02, 8))
  expect_equal(h$epoch, 1:8)
  expect_true(all(h$seconds >= 0))
  expect_true(all(h$peak_bytes > 0))
  expect_lt(h$loss[8], h$loss[1] / 2)
  expect_false(anyNA(h$val_loss))
  expect_equal(h$val_loss[8], convlstm_evaluate(model, v$x, v$y), tolerance = 1e-6)
  out <- capture.output(print(h))
  expect_match(out[1], "<convlstm_history> 8 epochs, target last_state, batch size 5, adam")
  expect_true(any(grepl("val_loss", out)))
  pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_invisible(plot(h))
})

test_that("convlstm_fit() handles sequences, one batch and verbose output", {
  set.seed(9)
  model <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  d <- fit_data(4)
  y <- d$x  # predict the input sequence itself
  msgs <- character()
  h <- withCallingHandlers(
    convlstm_fit(model, d$x, y, convlstm_optimizer_sgd(0.05), epochs = 2, batch_size = 4,
                 target = "sequence", shuffle = FALSE),
    message = function(m) {
      msgs <<- c(msgs, conditionMessage(m))
      invokeRestart("muffleMessage")
    }
  )
  expect_true(any(grepl("Epoch 1/2: loss [0-9.e-]+, [0-9.]+s, peak [0-9.]+ KiB", msgs)))
  expect_true(any(grepl("Epoch 2/2", msgs)))
  expect_equal(nrow(h), 2)
  expect_true(all(is.na(h$val_loss)))
  expect_false(any(grepl("val_loss", capture.output(print(h)))))
  # one batch, no shuffle: the epoch loss is the loss of the step
  sd <- convlstm_state_dict(model)
  h1 <- convlstm_fit(model, d$x, y, convlstm_optimizer_sgd(0), epochs = 1, target = "sequence",
                     verbose = FALSE)
  expect_equal(h1$loss, convlstm_evaluate(model, d$x, y, target = "sequence"), tolerance = 1e-5)
  expect_identical(convlstm_state_dict(model), sd)
})

test_that("validation_split holds out the last samples, before shuffling", {
  set.seed(10)
  model <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  d <- fit_data(10)
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 2, batch_size = 4,
                    validation_split = 0.3, verbose = FALSE)
  held <- 8:10
  expect_equal(h$val_loss, rep(convlstm_evaluate(model, d$x[held, , , , , drop = FALSE],
                                                 d$y[held, , , , drop = FALSE]), 2))
  # the training loss is over the first 7 (lr 0: the model does not change)
  expect_equal(h$loss[[1]], convlstm_evaluate(model, d$x[1:7, , , , , drop = FALSE],
                                              d$y[1:7, , , , drop = FALSE]), tolerance = 1e-6)
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, convlstm_optimizer_sgd(0), validation_split = 1),
                        regexp = "`validation_split`")
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, convlstm_optimizer_sgd(0), validation_split = 0.95),
                        regexp = "leaves 0 for training and 10 for validation")
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_sgd(0), validation_split = 0.2,
                 validation_data = list(d$x, d$y)),
    regexp = "not both"
  )
})

test_that("convlstm_fit() checks its arguments", {
  model <- convlstm(1, c(3, 1), 3, device = "cpu")
  on.exit(convlstm_release(model))
  d <- fit_data(4)
  opt <- convlstm_optimizer_adam()
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, opt, epochs = 0), regexp = "`epochs`")
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, opt, batch_size = 2.5),
                        regexp = "`batch_size`")
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, opt, shuffle = "yes"), regexp = "`shuffle`")
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, opt, verbose = NULL), regexp = "`verbose`")
  expect_convlstm_error(convlstm_fit(model, d$x, d$y[1:3, , , , drop = FALSE], opt),
                        regexp = "`y` must have dim \\[4, 1, 4, 4\\]")
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, opt, validation_data = d$x),
                        regexp = "`validation_data`")
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, opt, validation_data = list(d$x, d$x)),
    regexp = "`validation_data\\[\\[2\\]\\]`"
  )
  expect_convlstm_error(convlstm_evaluate(model, d$x, d$y, batch_size = 0),
                        regexp = "`batch_size`")
})

# Forecasting fits: each batch is convlstm_train_step() with the horizon, and a fit
# that carries the state is convlstm_train_step(state = "carry") over the batches in
# order, reset at each epoch's start.
forecast_data <- function(n = 4) convlstm_moving_digits(n = n, n_frames = 5, size = 12, horizon = 2,
                                               seed = 5)
forecast_model <- function() {
  set.seed(9)
  convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
}

for (tf in c(TRUE, FALSE)) {
  test_that(sprintf("a carrying forecast fit is its train steps [teacher_forcing = %s]", tf), {
    d <- forecast_data()
    fitted <- forecast_model()
    on.exit(convlstm_release(fitted))
    h <- convlstm_fit(fitted, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 2,
                      horizon = 2, teacher_forcing = tf, state = "carry", shuffle = FALSE,
                      verbose = FALSE)
    expect_identical(attr(h, "target"), "sequence")
    expect_false(attr(h, "data_on_device"))
    by_hand <- forecast_model()
    on.exit(convlstm_release(by_hand), add = TRUE)
    opt <- convlstm_optimizer_adam(0.01)
    losses <- numeric(2)
    for (epoch in 1:2) {
      convlstm_reset_state(by_hand)
      l <- vapply(list(1:2, 3:4), function(i) {
        convlstm_train_step(by_hand, d$x[i, , , , , drop = FALSE], d$y[i, , , , , drop = FALSE], opt,
                   horizon = 2, teacher_forcing = tf, state = "carry")
      }, numeric(1))
      losses[[epoch]] <- mean(l)
    }
    expect_equal(h$loss, losses, tolerance = 1e-12)
    expect_identical(convlstm_state_dict(fitted), convlstm_state_dict(by_hand))
    # the carried state is kept after the last batch
    expect_identical(convlstm_carried_state(fitted), c(2L, 12L, 12L))
  })
}

test_that("a forecasting fit's validation loss is the free-running forecast's", {
  d <- forecast_data(6)
  model <- forecast_model()
  on.exit(convlstm_release(model))
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 2,
                    horizon = 2, validation_split = 1 / 3, verbose = FALSE)
  held <- 5:6
  forecast <- predict(model, d$x[held, , , , , drop = FALSE], horizon = 2)
  expect_equal(h$val_loss[[2]], mean((forecast - d$y[held, , , , , drop = FALSE])^2),
               tolerance = 1e-6)
  expect_equal(convlstm_evaluate(model, d$x[held, , , , , drop = FALSE],
                                 d$y[held, , , , , drop = FALSE], horizon = 2, batch_size = 1),
               h$val_loss[[2]], tolerance = 1e-6)
})
