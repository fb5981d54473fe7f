# convlstm_fit(resume = ): a fit stopped after a checkpoint and resumed gives
# the losses, rates and weights of the fit that ran straight through, bit for
# bit on the CPU (shuffling included: the checkpoint holds the RNG state);
# what a checkpoint must match; and the helpers that encode its state.

resume_data <- function(n = 10) {
  x <- array(stats::runif(n * 3 * 16), c(n, 3, 1, 4, 4))
  list(x = x, y = array(x[, 3, 1, , ], c(n, 1, 4, 4)))
}

# A fresh model with the same initial weights every time.
resume_model <- function() {
  set.seed(42)
  convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
}

test_that("a resumed fit equals the uninterrupted one, bit for bit, with shuffling", {
  d <- resume_data()
  run <- function(make_sched, epochs, ...) {
    model <- resume_model()
    opt <- convlstm_optimizer_adam(0.02)
    set.seed(7)
    h <- convlstm_fit(model, d$x, d$y, opt, epochs = epochs, batch_size = 3, shuffle = TRUE,
                      validation_split = 0.2, verbose = FALSE, lr_scheduler = make_sched(opt),
                      ...)
    list(model = model, history = h)
  }
  schedules <- list(
    cosine = function(opt) convlstm_lr_cosine_annealing(opt, T_max = 4, warmup = 1),
    one_cycle = function(opt) convlstm_lr_one_cycle(opt, max_lr = 0.05, epochs = 5, steps_per_epoch = 3),
    plateau = function(opt) convlstm_lr_reduce_on_plateau(opt, patience = 0, factor = 0.5),
    none = function(opt) NULL
  )
  for (name in names(schedules)) {
    make <- schedules[[name]]
    straight <- run(make, 5)
    path <- tempfile(fileext = ".safetensors")
    first <- run(make, 2, callbacks = list(convlstm_callback_model_checkpoint(path)))
    convlstm_release(first$model)
    stats::runif(3) # the RNG moves on before the resume
    model <- resume_model()
    opt <- convlstm_optimizer_adam(0.02)
    sched <- make(opt)
    h <- convlstm_fit(model, d$x, d$y, opt, epochs = 5, batch_size = 3, validation_split = 0.2,
                      verbose = FALSE, lr_scheduler = sched, resume = path)
    expect_identical(h$epoch, 1:5, info = name)
    expect_identical(h$loss, straight$history$loss, info = name)
    expect_identical(h$val_loss, straight$history$val_loss, info = name)
    expect_identical(h$lr, straight$history$lr, info = name)
    expect_identical(h$seconds[1:2], first$history$seconds, info = name)
    expect_identical(convlstm_state_dict(model), convlstm_state_dict(straight$model), info = name)
    convlstm_release(model)
    convlstm_release(straight$model)
    unlink(path)
  }
})

test_that("resume restores the history and continues the CSV log; done is done", {
  d <- resume_data()
  model <- resume_model()
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_sgd(0.05)
  ck <- tempfile(fileext = ".st")
  log <- tempfile(fileext = ".csv")
  on.exit(unlink(c(ck, log)), add = TRUE)
  h1 <- convlstm_fit(model, d$x, d$y, opt, epochs = 2, verbose = FALSE,
                     callbacks = list(convlstm_callback_model_checkpoint(ck), convlstm_callback_csv_logger(log)))
  h2 <- convlstm_fit(model, d$x, d$y, opt, epochs = 3, verbose = FALSE, resume = ck,
                     callbacks = list(convlstm_callback_csv_logger(log)))
  expect_equal(read.csv(log)$epoch, 1:3)
  expect_identical(h2$loss[1:2], h1$loss)
  # nothing left to run: the saved history comes back
  h3 <- convlstm_fit(model, d$x, d$y, opt, epochs = 2, verbose = FALSE, resume = ck)
  expect_identical(as.data.frame(h3)$loss, h1$loss)
})

test_that("resume refuses files and schedules that do not match", {
  d <- resume_data(4)
  model <- resume_model()
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_adam(0.01)
  plain <- tempfile(fileext = ".st")
  ck <- tempfile(fileext = ".st")
  on.exit(unlink(c(plain, ck)), add = TRUE)
  convlstm_save(model, plain, optimizer = opt)
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, opt, verbose = FALSE, resume = plain),
    regexp = "was not written by convlstm_callback_model_checkpoint"
  )
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, opt, resume = tempfile()),
                        regexp = "`path` names no file")
  convlstm_fit(model, d$x, d$y, opt, epochs = 1, verbose = FALSE,
               lr_scheduler = convlstm_lr_step(opt, 2), callbacks = convlstm_callback_model_checkpoint(ck))
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, opt, epochs = 2, verbose = FALSE, resume = ck),
    regexp = "saved with a step schedule, but `lr_scheduler` is NULL"
  )
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, opt, epochs = 2, verbose = FALSE, resume = ck,
                 lr_scheduler = convlstm_lr_cosine_annealing(opt, 3)),
    regexp = "but `lr_scheduler` is a cosine_annealing schedule"
  )
  other <- convlstm(1, c(2, 1), 3, device = "cpu")
  on.exit(convlstm_release(other), add = TRUE)
  expect_error(convlstm_fit(other, d$x, d$y, opt, epochs = 2, verbose = FALSE, resume = ck,
                            lr_scheduler = convlstm_lr_step(opt, 2)),
               class = "convlstm_error")
})

test_that("schedules passed to convlstm_fit() must match its optimizer and length", {
  d <- resume_data(4)
  model <- resume_model()
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_adam(0.01)
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, opt, lr_scheduler = convlstm_lr_step(convlstm_optimizer_adam(0.1), 2)),
    regexp = "made from another optimizer"
  )
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, opt, lr_scheduler = opt),
                        regexp = "`lr_scheduler`")
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, opt, epochs = 3, batch_size = 2, verbose = FALSE,
                 lr_scheduler = convlstm_lr_one_cycle(opt, 0.1, epochs = 3, steps_per_epoch = 1)),
    regexp = paste0("has 3 steps left, but the fit takes 6 \\(3 epochs of 2 batches\\); ",
                    "make it with epochs = 3, steps_per_epoch = 2")
  )
})

test_that("checkpoint state strings give back the exact doubles", {
  v <- c(a = 0.1, b = 1 / 3, c = -Inf, d = NA, e = 2^-1074)
  back <- decode_numbers(encode_numbers(v))
  expect_identical(unlist(back), v)
  h <- data.frame(epoch = 1:2, loss = c(1 / 3, 0.1), val_loss = c(NA, 0.2), lr = c(1e-3, pi),
                  seconds = c(0.5, 0.25), peak_bytes = c(1024, 2048))
  expect_identical(decode_history(encode_history(h)), h)
})
