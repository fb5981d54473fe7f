# Callbacks: when each hook runs and what ctx holds; early stopping (patience,
# min_delta, restoring the best weights); the model checkpoint (every epoch,
# best only, {epoch} names); the CSV logger; bad arguments.

cb_data <- function(n = 12) {
  x <- array(stats::runif(n * 3 * 16), c(n, 3, 1, 4, 4))
  list(x = x, y = array(x[, 3, 1, , ], c(n, 1, 4, 4)))
}

cb_model <- function() convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)

test_that("convlstm_callback() hooks run in order with the loss, lr and peak of each step", {
  set.seed(1)
  model <- cb_model()
  on.exit(convlstm_release(model))
  d <- cb_data()
  seen <- character()
  batches <- list()
  opt <- convlstm_optimizer_sgd(0.1)
  cb <- convlstm_callback(
    on_fit_begin = function(ctx) seen <<- c(seen, "begin"),
    on_batch_end = function(ctx) {
      seen <<- c(seen, sprintf("batch %d.%d", ctx$epoch, ctx$batch))
      batches[[length(batches) + 1]] <<- list(loss = ctx$loss, lr = ctx$lr,
                                              peak = ctx$peak_bytes, grad_norm = ctx$grad_norm)
    },
    on_epoch_end = function(ctx) {
      seen <<- c(seen, sprintf("epoch %d", ctx$epoch))
      expect_equal(nrow(ctx$history), ctx$epoch)
      expect_equal(ctx$logs$loss, ctx$history$loss[[ctx$epoch]])
    },
    on_fit_end = function(ctx) seen <<- c(seen, "end")
  )
  h <- convlstm_fit(model, d$x, d$y, opt, epochs = 2, batch_size = 6, verbose = FALSE,
                    callbacks = cb, lr_scheduler = convlstm_lr_step(opt, 1, 0.5))
  expect_identical(seen, c("begin", "batch 1.1", "batch 1.2", "epoch 1", "batch 2.1",
                           "batch 2.2", "epoch 2", "end"))
  losses <- vapply(batches, `[[`, 0, "loss")
  # the epoch loss is the mean of its (equal-sized) steps' losses
  expect_equal(h$loss, c(mean(losses[1:2]), mean(losses[3:4])))
  expect_equal(vapply(batches, `[[`, 0, "lr"), c(0.1, 0.1, 0.05, 0.05))
  expect_equal(h$lr, c(0.1, 0.05))
  expect_true(all(vapply(batches, `[[`, 0, "peak") > 0))
  expect_true(all(is.na(vapply(batches, `[[`, 0, "grad_norm"))))
})

test_that("ctx$stop ends training after the epoch", {
  set.seed(2)
  model <- cb_model()
  on.exit(convlstm_release(model))
  d <- cb_data()
  stopper <- convlstm_callback(on_epoch_end = function(ctx) if (ctx$epoch == 2) ctx$stop <- TRUE)
  ended <- NA
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 5, verbose = FALSE,
                    callbacks = list(stopper, convlstm_callback(on_fit_end = function(ctx) {
                      ended <<- ctx$epoch
                    })))
  expect_equal(h$epoch, 1:2)
  expect_equal(ended, 2)
})

test_that("early stopping waits `patience` epochs and restores the best weights", {
  set.seed(3)
  model <- cb_model()
  on.exit(convlstm_release(model))
  d <- cb_data()
  # a rate this large makes the loss climb after the first epochs
  weights <- list()
  keep <- convlstm_callback(on_epoch_end = function(ctx) weights[[ctx$epoch]] <<- convlstm_state_dict(ctx$model))
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 6, batch_size = 9,
                    validation_split = 0.25, verbose = FALSE,
                    callbacks = list(keep, convlstm_callback_early_stopping(patience = 2)))
  # nothing changes with lr 0: no improvement after epoch 1, stop after 1 + 2 + 1
  expect_equal(h$epoch, 1:4)
  expect_identical(convlstm_state_dict(model), weights[[1]])

  set.seed(4)
  m2 <- cb_model()
  on.exit(convlstm_release(m2), add = TRUE)
  weights <- list()
  msgs <- character()
  h2 <- withCallingHandlers(
    convlstm_fit(m2, d$x, d$y, convlstm_optimizer_sgd(1.5), epochs = 12, batch_size = 3,
                 validation_split = 0.25, verbose = FALSE,
                 callbacks = list(keep, convlstm_callback_early_stopping(patience = 1, min_delta = 1e-4))),
    message = function(m) {
      msgs <<- c(msgs, conditionMessage(m))
      invokeRestart("muffleMessage")
    }
  )
  # improvements by less than min_delta do not count
  best <- 1L
  for (e in seq_len(nrow(h2))[-1]) if (h2$val_loss[[e]] < h2$val_loss[[best]] - 1e-4) best <- e
  expect_lt(best, nrow(h2)) # this rate overshoots: the run stops early
  expect_equal(nrow(h2), best + 2L)
  expect_identical(convlstm_state_dict(m2), weights[[best]])
  expect_equal(convlstm_evaluate(m2, d$x[10:12, , , , , drop = FALSE],
                                 d$y[10:12, , , , drop = FALSE]),
               min(h2$val_loss), tolerance = 1e-6)
  expect_length(msgs, 0) # quiet with verbose = FALSE
})

test_that("early stopping monitors val_loss only with validation data", {
  model <- cb_model()
  on.exit(convlstm_release(model))
  d <- cb_data(4)
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), epochs = 2, verbose = FALSE,
                 callbacks = list(convlstm_callback_early_stopping())),
    regexp = "monitors \"val_loss\", but the fit has no validation data"
  )
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 5, verbose = FALSE,
                    callbacks = list(convlstm_callback_early_stopping("loss", patience = 0)))
  expect_equal(nrow(h), 2)
})

test_that("the model checkpoint saves every epoch, or the best, with optimizer and state", {
  set.seed(5)
  model <- cb_model()
  on.exit(convlstm_release(model))
  d <- cb_data()
  dir <- tempfile()
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE), add = TRUE)
  opt <- convlstm_optimizer_adam(0.01)
  h <- convlstm_fit(model, d$x, d$y, opt, epochs = 3, batch_size = 4, verbose = FALSE,
                    lr_scheduler = convlstm_lr_step(opt, 1, 0.5),
                    callbacks = list(convlstm_callback_model_checkpoint(file.path(dir, "e{epoch}.st"))))
  expect_setequal(list.files(dir), c("e1.st", "e2.st", "e3.st"))
  info <- convlstm_file_info(file.path(dir, "e3.st"))
  expect_equal(info$optimizer$lr, 0.01 / 8) # the rate of the next step
  expect_equal(info$optimizer_steps, 9)
  expect_equal(info$metadata[["fit.epoch"]], "3")
  expect_equal(info$metadata[["fit.scheduler_kind"]], "step")
  loaded <- convlstm_load(file.path(dir, "e3.st"), device = "cpu")
  on.exit(convlstm_release(loaded), add = TRUE)
  expect_identical(convlstm_state_dict(loaded), convlstm_state_dict(model))

  # best only: a file written at an epoch only when val_loss improved
  set.seed(6)
  m2 <- cb_model()
  on.exit(convlstm_release(m2), add = TRUE)
  path <- file.path(dir, "best.st")
  saved <- integer()
  spy <- convlstm_callback(on_epoch_end = function(ctx) {
    if (file.exists(path) && file.mtime(path) >= start) {
      saved <<- c(saved, as.integer(convlstm_file_info(path)$metadata[["fit.epoch"]]))
    }
  })
  start <- Sys.time() - 1
  h2 <- convlstm_fit(m2, d$x, d$y, convlstm_optimizer_sgd(2), epochs = 8, batch_size = 3,
                     validation_split = 0.25, verbose = FALSE,
                     callbacks = list(convlstm_callback_model_checkpoint(path, save_best_only = TRUE), spy))
  running_best <- h2$val_loss == cummin(h2$val_loss) & !duplicated(cummin(h2$val_loss))
  expect_equal(unique(saved), h2$epoch[running_best])
  expect_equal(as.integer(convlstm_file_info(path)$metadata[["fit.epoch"]]),
               which.min(h2$val_loss))
})

test_that("the CSV logger writes a header and a row per epoch", {
  set.seed(7)
  model <- cb_model()
  on.exit(convlstm_release(model))
  d <- cb_data()
  path <- tempfile(fileext = ".csv")
  on.exit(unlink(path), add = TRUE)
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 3, batch_size = 6,
                    validation_split = 0.5, verbose = FALSE,
                    callbacks = list(convlstm_callback_csv_logger(path)))
  logged <- read.csv(path)
  expect_named(logged, c("epoch", "loss", "val_loss", "lr", "seconds", "peak_bytes"))
  expect_equal(logged$epoch, 1:3)
  expect_equal(logged$loss, h$loss, tolerance = 1e-9)
  expect_equal(logged$val_loss, h$val_loss, tolerance = 1e-9)
  # a new fit starts a new file; append = TRUE adds to it
  convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 1, verbose = FALSE,
               callbacks = list(convlstm_callback_csv_logger(path)))
  expect_equal(nrow(read.csv(path)), 1)
  convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 2, verbose = FALSE,
               callbacks = list(convlstm_callback_csv_logger(path, append = TRUE)))
  expect_equal(read.csv(path)$epoch, c(1, 1, 2))
})

test_that("callbacks check their arguments", {
  expect_convlstm_error(convlstm_callback(on_epoch_end = 1), regexp = "`on_epoch_end`")
  expect_convlstm_error(convlstm_callback_early_stopping(monitor = "acc"), regexp = "`monitor`")
  expect_convlstm_error(convlstm_callback_early_stopping(patience = -1), regexp = "`patience`")
  expect_convlstm_error(convlstm_callback_early_stopping(restore_best = NA), regexp = "`restore_best`")
  expect_convlstm_error(convlstm_callback_model_checkpoint(NA_character_), regexp = "`path`")
  expect_convlstm_error(convlstm_callback_model_checkpoint("a.st", save_best_only = 1),
                        regexp = "`save_best_only`")
  expect_convlstm_error(convlstm_callback_csv_logger(1), regexp = "`path`")
  model <- cb_model()
  on.exit(convlstm_release(model))
  d <- cb_data(4)
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), callbacks = list(function(ctx) 1)),
    regexp = "`callbacks`"
  )
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), verbose = FALSE,
                 callbacks = convlstm_callback_model_checkpoint(file.path(tempfile(), "x", "m.st"))),
    regexp = "callback_model_checkpoint\\(\\) cannot write .* does not exist"
  )
})

test_that("on_batch_end sees each step's gradient norm before clipping with max_grad_norm", {
  set.seed(3)
  model <- cb_model()
  on.exit(convlstm_release(model))
  d <- cb_data()
  norms <- numeric()
  cb <- convlstm_callback(on_batch_end = function(ctx) norms <<- c(norms, ctx$grad_norm))
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_sgd(0.1), epochs = 2, batch_size = 6,
                    verbose = FALSE, callbacks = cb, max_grad_norm = 1e-3)
  expect_length(norms, 4)
  expect_true(all(is.finite(norms) & norms > 1e-3)) # every step clipped
  expect_false(is.object(h$loss) || !is.null(attributes(h$loss)))
})
