# test-forecaster-fit.R -- one fit loop for every model (issue 34, item 2): the
# encoder-forecaster trains through convlstm_fit()'s loop and convlstm_train_step()'s
# path, as a plain stack does. Each value is computed apart here, in plain R
# from predictions (a learning rate of 0 keeps the weights, so an epoch's
# losses are those of one forecast), or measured (the allocator's peak):
# the history's units for every reduction, validation data checked whole
# before anything trains, callbacks and a schedule, resume, memory_budget.

ff_model <- function(seed = 21) {
  set.seed(seed)
  convlstm_forecaster(1, c(6, 5), 3, patch = 2, device = "cpu", threads = 1)
}

ff_data <- function(n, T = 3, K = 2, H = 8, W = 8, seed = 22) {
  set.seed(seed)
  list(x = array(runif(n * T * H * W), dim = c(n, T, 1, H, W)),
       y = array(runif(n * K * H * W), dim = c(n, K, 1, H, W)))
}

# Each element's loss in plain R: the squared error, or BCE on logits.
ff_elems <- function(p, y, loss) {
  if (loss == "mse") (p - y)^2 else pmax(p, 0) - p * y + log1p(exp(-abs(p)))
}

# The loss of predictions p against y over n sequences, reduced as torch does.
ff_reduce <- function(p, y, loss, reduction) {
  s <- sum(ff_elems(p, y, loss))
  switch(reduction, sum = s, mean = s / length(y), batchmean = s / dim(y)[[1]])
}

test_that("the epoch loss has the same units for a forecaster and a plain stack, for every reduction", {
  # 5 sequences in batches of 2, 2 and 1; lr 0: every batch sees the same weights, so
  # the epoch's loss is the loss of one forecast of all 5 (the issue's case: BCE summed)
  d <- ff_data(5)
  plain_x <- d$x
  plain_y <- array(runif(5 * 3 * 64), dim = c(5, 3, 1, 8, 8))
  for (case in list(list(loss = "bce_logits", reduction = "sum"),
                    list(loss = "mse", reduction = "sum"),
                    list(loss = "mse", reduction = "mean"),
                    list(loss = "bce_logits", reduction = "batchmean"))) {
    label <- paste(case$loss, case$reduction)
    fc <- ff_model()
    h <- convlstm_fit(fc, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 2, batch_size = 2,
                      verbose = FALSE, loss = case$loss, reduction = case$reduction,
                      validation_data = list(d$x, d$y))
    p <- predict(fc, d$x, horizon = 2)
    want <- ff_reduce(p, d$y, case$loss, case$reduction)
    expect_equal(h$loss, rep(want, 2), tolerance = 1e-5, label = paste("forecaster", label))
    # the validation loss of the same data, the same number
    expect_equal(h$val_loss, rep(want, 2), tolerance = 1e-5, label = paste("forecaster val", label))
    convlstm_release(fc)
    # a plain stack trained on its output sequence (one channel a step), the same formula
    set.seed(23)
    m <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
    h <- convlstm_fit(m, plain_x, plain_y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 2,
                      target = "sequence", verbose = FALSE, loss = case$loss,
                      reduction = case$reduction)
    q <- predict(m, plain_x)
    expect_equal(h$loss, ff_reduce(q, plain_y, case$loss, case$reduction), tolerance = 1e-5,
                 label = paste("plain stack", label))
    convlstm_release(m)
  }
})

test_that("a forecaster fit checks x, y and validation_data whole before anything trains", {
  fc <- ff_model()
  on.exit(convlstm_release(fc))
  d <- ff_data(4)
  opt <- convlstm_optimizer_adam(0.01)
  refused <- function(regexp, ...) {
    before <- convlstm_state_dict(fc)
    expect_convlstm_error(convlstm_fit(fc, ..., optimizer = opt, epochs = 1, batch_size = 2,
                                       verbose = FALSE), regexp = regexp)
    expect_identical(convlstm_state_dict(fc), before)
    expect_identical(fc$config$dtype, "float32")
  }
  v <- ff_data(3, seed = 24)
  # validation: y's frames of another size than its x's; other sequences; a patch that
  # does not divide; a budget that would have converted the model first (fit_begin())
  refused("`validation_data\\[\\[2\\]\\]` must have dim \\[3, K, 1, 8, 8\\]",
          x = d$x, y = d$y, validation_data = list(v$x, ff_data(3, H = 10)$y))
  refused("`validation_data\\[\\[2\\]\\]` must have dim \\[3, K, 1, 8, 8\\]",
          x = d$x, y = d$y, validation_data = list(v$x, ff_data(2)$y))
  refused("`validation_data\\[\\[1\\]\\]` has frames of 8 x 5 pixels: the patch size 2",
          x = d$x, y = d$y, validation_data = list(ff_data(3, W = 5)$x, ff_data(3, W = 5)$y))
  refused("`validation_data\\[\\[2\\]\\]` must have dim",
          x = d$x, y = d$y, validation_data = list(v$x, ff_data(2)$y),
          memory_budget = "1 GiB")
  # training: x of frames the patch does not divide, y of other sequences, y's frames
  odd <- ff_data(4, H = 7)
  refused("`x` has frames of 7 x 8 pixels: the patch size 2 must divide both", x = odd$x,
          y = odd$y)
  refused("`y` must have dim \\[4, K, 1, 8, 8\\]", x = d$x, y = ff_data(3)$y)
  refused("`y` must have dim \\[4, K, 1, 8, 8\\]", x = d$x, y = ff_data(4, W = 6)$y)
  # convlstm_train_step() refuses them with the same checks, before its step
  before <- convlstm_state_dict(fc)
  expect_convlstm_error(convlstm_train_step(fc, odd$x, odd$y, opt),
                        regexp = "`x` has frames of 7 x 8 pixels")
  expect_convlstm_error(convlstm_train_step(fc, d$x, ff_data(3)$y, opt),
                        regexp = "`y` must have dim \\[4, K, 1, 8, 8\\]")
  expect_identical(convlstm_state_dict(fc), before)
  # validation frames of another size than the training ones (6 x 10, the patch divides
  # both) and 3 frames to forecast: taken, val_loss the MSE of predict()'s 3 frames
  ok <- ff_data(3, K = 3, H = 6, W = 10, seed = 25)
  h <- convlstm_fit(fc, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 2,
                    verbose = FALSE, validation_data = list(ok$x, ok$y))
  expect_equal(h$val_loss, mean((predict(fc, ok$x, horizon = 3) - ok$y)^2), tolerance = 1e-6)
})

test_that("convlstm_evaluate() and predict() of a forecaster take any horizon (hidden 6-5)", {
  fc <- ff_model()
  on.exit(convlstm_release(fc))
  d <- ff_data(3, K = 5)
  convlstm_train_step(fc, d$x, d$y, convlstm_optimizer_adam(0.01)) # not the initial weights
  p5 <- predict(fc, d$x, horizon = 5)
  expect_identical(dim(p5), c(3L, 5L, 1L, 8L, 8L))
  # the forecaster reads no frames: the first k frames of any longer forecast are the
  # forecast of k frames
  for (k in 1:4) {
    pk <- predict(fc, d$x, horizon = k)
    expect_equal(pk, p5[, seq_len(k), , , , drop = FALSE], tolerance = 1e-6)
  }
  y2 <- d$y[, 1:2, , , , drop = FALSE]
  p2 <- p5[, 1:2, , , , drop = FALSE]
  expect_equal(convlstm_evaluate(fc, d$x, y2, horizon = 2), mean((p2 - y2)^2), tolerance = 1e-6)
  expect_equal(convlstm_evaluate(fc, d$x, y2, horizon = 2, batch_size = 2, loss = "mae",
                                 reduction = "sum"), sum(abs(p2 - y2)), tolerance = 1e-6)
  expect_equal(convlstm_evaluate(fc, d$x, d$y, horizon = 5, batch_size = 1,
                                 reduction = "batchmean"), sum((p5 - d$y)^2) / 3,
               tolerance = 1e-6)
})

# A callback recording what it sees: the fields of ctx at each batch and epoch.
recorder <- function() {
  env <- new.env()
  env$batches <- list()
  env$epochs <- list()
  env$cb <- convlstm_callback(
    on_batch_end = function(ctx) {
      env$batches[[length(env$batches) + 1L]] <- list(
        fields = sort(ls(ctx)), epoch = ctx$epoch, batch = ctx$batch, loss = ctx$loss,
        lr = ctx$lr, grad_norm = ctx$grad_norm, peak = ctx$peak_bytes)
    },
    on_epoch_end = function(ctx) {
      env$epochs[[length(env$epochs) + 1L]] <- list(fields = sort(ls(ctx)),
                                                   logs = names(ctx$logs), epoch = ctx$epoch,
                                                   loss = ctx$logs$loss, lr = ctx$logs$lr)
    })
  env
}

test_that("callbacks and a schedule see a forecaster fit as they see a plain stack's", {
  d <- ff_data(4)
  # lr 0: each batch's loss is the MSE of that batch's rows of one forecast
  fc <- ff_model()
  on.exit(convlstm_release(fc))
  rec <- recorder()
  h <- convlstm_fit(fc, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 2, batch_size = 3,
                    shuffle = FALSE, verbose = FALSE, max_grad_norm = Inf,
                    callbacks = list(rec$cb))
  p <- predict(fc, d$x, horizon = 2)
  rows <- list(1:3, 4L, 1:3, 4L)
  got <- vapply(rec$batches, `[[`, numeric(1), "loss")
  want <- vapply(rows, function(r) mean((p[r, , , , , drop = FALSE] - d$y[r, , , , , drop = FALSE])^2),
                 numeric(1))
  expect_equal(got, want, tolerance = 1e-6)
  expect_identical(vapply(rec$batches, `[[`, numeric(1), "batch"), c(1, 2, 1, 2))
  expect_identical(vapply(rec$batches, `[[`, numeric(1), "epoch"), c(1, 1, 2, 2))
  expect_true(all(is.finite(vapply(rec$batches, `[[`, numeric(1), "grad_norm"))))
  expect_true(all(vapply(rec$batches, `[[`, numeric(1), "peak") > 0))
  expect_equal(vapply(rec$epochs, `[[`, numeric(1), "loss"), h$loss)
  # a plain stack's fit, with the same callback: the same fields in ctx and the logs
  set.seed(26)
  m <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(m), add = TRUE)
  prec <- recorder()
  convlstm_fit(m, d$x, array(runif(4 * 3 * 64), c(4, 3, 1, 8, 8)), convlstm_optimizer_sgd(0),
               epochs = 2, batch_size = 3, shuffle = FALSE, verbose = FALSE, max_grad_norm = Inf,
               target = "sequence", callbacks = list(prec$cb))
  expect_identical(lapply(rec$batches, `[[`, "fields"), lapply(prec$batches, `[[`, "fields"))
  expect_identical(lapply(rec$epochs, `[[`, "fields"), lapply(prec$epochs, `[[`, "fields"))
  expect_identical(lapply(rec$epochs, `[[`, "logs"), lapply(prec$epochs, `[[`, "logs"))
  # a step schedule: 0.1, then halved every epoch, by hand; every batch of epoch e at
  # its rate, and the history's lr the epoch's
  opt <- convlstm_optimizer_sgd(0.1)
  sched <- convlstm_lr_step(opt, step_size = 1, gamma = 0.5)
  rec2 <- recorder()
  h <- convlstm_fit(fc, d$x, d$y, opt, epochs = 3, batch_size = 3, verbose = FALSE,
                    lr_scheduler = sched, callbacks = list(rec2$cb))
  expect_equal(vapply(rec2$batches, `[[`, numeric(1), "lr"), rep(0.1 * 0.5^(0:2), each = 2))
  expect_equal(h$lr, 0.1 * 0.5^(0:2))
  expect_equal(sched$optimizer$lr, 0.1 * 0.5^3)
  # a per-batch schedule (one cycle over 3 epochs of 2 batches): each batch at the rate
  # the same schedule gives a plain stack's batches
  lrs <- function(model, y, target = NULL) {
    opt <- convlstm_optimizer_sgd(0.1)
    r <- recorder()
    args <- list(model, d$x, y, opt, epochs = 3, batch_size = 3, verbose = FALSE,
                 lr_scheduler = convlstm_lr_one_cycle(opt, max_lr = 0.1, epochs = 3,
                                                      steps_per_epoch = 2),
                 callbacks = list(r$cb))
    do.call(convlstm_fit, c(args, if (!is.null(target)) list(target = target)))
    vapply(r$batches, `[[`, numeric(1), "lr")
  }
  fc_lrs <- lrs(fc, d$y)
  expect_length(unique(fc_lrs), 6L)
  expect_identical(fc_lrs, lrs(m, array(runif(4 * 3 * 64), c(4, 3, 1, 8, 8)), "sequence"))
  # early stopping ends a forecaster fit as a plain one: the loss never improves at lr 0
  h <- convlstm_fit(fc, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 6, batch_size = 4,
                    verbose = FALSE, callbacks = list(
                      convlstm_callback_early_stopping(monitor = "loss", patience = 2,
                                                       min_delta = 1)))
  expect_identical(nrow(h), 4L) # epoch 1 the best, then 3 epochs without improvement > 2
})

test_that("a resumed forecaster fit gives the losses and weights of the uninterrupted one", {
  d <- ff_data(7)
  run <- function(epochs, ...) {
    model <- ff_model()
    opt <- convlstm_optimizer_adam(0.02)
    set.seed(7)
    h <- convlstm_fit(model, d$x, d$y, opt, epochs = epochs, batch_size = 2, shuffle = TRUE,
                      validation_split = 0.3, verbose = FALSE,
                      lr_scheduler = convlstm_lr_cosine_annealing(opt, T_max = 4), ...)
    list(model = model, history = h)
  }
  straight <- run(4)
  on.exit(convlstm_release(straight$model))
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  first <- run(2, callbacks = list(convlstm_callback_model_checkpoint(path)))
  convlstm_release(first$model)
  stats::runif(3) # the RNG moves on before the resume
  model <- ff_model(99) # other initial weights: the file's replace them
  on.exit(convlstm_release(model), add = TRUE)
  opt <- convlstm_optimizer_adam(0.02)
  h <- convlstm_fit(model, d$x, d$y, opt, epochs = 4, batch_size = 2, validation_split = 0.3,
                    verbose = FALSE, lr_scheduler = convlstm_lr_cosine_annealing(opt, T_max = 4),
                    resume = path)
  expect_identical(h$epoch, 1:4)
  expect_identical(h$loss, straight$history$loss)
  expect_identical(h$val_loss, straight$history$val_loss)
  expect_identical(h$lr, straight$history$lr)
  expect_identical(convlstm_state_dict(model), convlstm_state_dict(straight$model))
  # the losses moved: a resume that restarted from the initial weights would differ
  expect_false(identical(h$loss[[3]], h$loss[[1]]))
  # a plain stack's checkpoint does not resume into a forecaster
  plain <- convlstm(1, c(6, 5, 6, 5), 3, peephole = "channel", device = "cpu", threads = 1)
  on.exit(convlstm_release(plain), add = TRUE)
  ppath <- tempfile(fileext = ".safetensors")
  on.exit(unlink(ppath), add = TRUE)
  convlstm_fit(plain, d$x, array(0, c(7, 5, 8, 8)), convlstm_optimizer_sgd(0), epochs = 1,
               verbose = FALSE, callbacks = list(convlstm_callback_model_checkpoint(ppath)))
  before <- convlstm_state_dict(model)
  expect_convlstm_error(convlstm_fit(model, d$x, d$y, opt, epochs = 2, verbose = FALSE,
                                     resume = ppath), regexp = "another architecture")
  expect_identical(convlstm_state_dict(model), before)
  # nor into a forecaster of 1x1 patches (the same layers, input and kernels as the plain
  # stack: only the kind differs), and a forecaster's of 2x2 patches neither
  one <- convlstm_forecaster(1, c(6, 5), 3, patch = 1, device = "cpu", threads = 1)
  on.exit(convlstm_release(one), add = TRUE)
  before <- convlstm_state_dict(one)
  expect_convlstm_error(convlstm_fit(one, d$x, d$y, opt, epochs = 2, verbose = FALSE,
                                     resume = ppath), regexp = "another architecture")
  expect_convlstm_error(convlstm_fit(one, d$x, d$y, opt, epochs = 5, verbose = FALSE,
                                     resume = path), regexp = "another architecture")
  expect_identical(convlstm_state_dict(one), before)
})

test_that("memory_budget with batch_size = \"max\" picks a forecaster's batch that fits, measured", {
  d <- ff_data(16, T = 4, K = 3)
  opt <- convlstm_optimizer_adam()
  fc <- ff_model()
  on.exit(convlstm_release(fc))
  # what a step of b sequences holds, measured by the allocator on a fresh model
  held <- function(b) {
    m <- ff_model()
    on.exit(convlstm_release(m))
    convlstm_train_step(m, d$x[seq_len(b), , , , , drop = FALSE],
                        d$y[seq_len(b), , , , , drop = FALSE], opt)
    convlstm_memory_stats(m)$peak_reserved
  }
  # and the batches the fit slices from the arrays in R beside it: two (the
  # next one sliced while the step runs) of x and y as doubles
  sliced <- function(b) 2 * b * (length(d$x) + length(d$y)) / 16 * 8
  # a budget between what 5 and 6 sequences hold: float32 steps of 5 fit, of 6 do not
  budget <- floor((held(5) + sliced(5) + held(6) + sliced(6)) / 2)
  expect_gt(held(6) + sliced(6), budget)
  expect_gt(budget, held(5) + sliced(5))
  h <- convlstm_fit(fc, d$x, d$y, opt, epochs = 1, batch_size = "max", memory_budget = budget,
                    verbose = FALSE)
  b <- attr(h, "batch_size")
  expect_identical(fc$config$dtype, "float32") # the fastest that fits is float32 here
  expect_identical(as.integer(b), 5L)
  expect_lte(convlstm_memory_stats(fc)$peak_reserved, budget)
  expect_lte(h$peak_bytes, budget)
  # the budget's one line names the pick
  fc2 <- ff_model()
  on.exit(convlstm_release(fc2), add = TRUE)
  said <- testthat::capture_messages(convlstm_fit(fc2, d$x, d$y, opt, epochs = 1,
                                                  batch_size = "max", memory_budget = budget,
                                                  verbose = TRUE))
  expect_true(any(grepl("batch 5, float32, forecast of 3 frames", said, fixed = TRUE)))
  expect_true(any(grepl("Epoch 1/1: loss", said, fixed = TRUE))) # the plain stack's epoch line
  # validation data of 2 frames (training: 3) inside the budget: its inference forward
  # planned too, and the validation loss that of predict()'s 2 frames
  v <- ff_data(3, T = 4, K = 2, seed = 27)
  fc3 <- ff_model()
  on.exit(convlstm_release(fc3), add = TRUE)
  h <- convlstm_fit(fc3, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 4,
                    memory_budget = budget, verbose = FALSE, validation_data = list(v$x, v$y))
  expect_equal(h$val_loss, mean((predict(fc3, v$x, horizon = 2) - v$y)^2), tolerance = 1e-6)
  expect_lte(h$peak_bytes, budget)
})

test_that("a forecaster fit scores its validation_split with metrics, as a plain stack's", {
  d <- ff_data(4)
  fc <- ff_model()
  on.exit(convlstm_release(fc))
  # the last of 4 sequences held out; lr 0: the scores of one forecast of it
  h <- convlstm_fit(fc, d$x, d$y, convlstm_optimizer_sgd(0), epochs = 2, batch_size = 2,
                    validation_split = 0.25, metrics = c("mae", "mse_frame"), verbose = FALSE)
  p <- predict(fc, d$x[4, , , , , drop = FALSE], horizon = 2)
  y4 <- d$y[4, , , , , drop = FALSE]
  expect_equal(h$val_loss, rep(mean((p - y4)^2), 2), tolerance = 1e-6)
  expect_equal(h$val_mae, rep(mean(abs(p - y4)), 2), tolerance = 1e-6)
  expect_equal(h$val_mse_frame, rep(sum((p - y4)^2) / 2, 2), tolerance = 1e-6) # 2 frames
  # the training loss over the 3 others only
  p3 <- predict(fc, d$x[1:3, , , , , drop = FALSE], horizon = 2)
  expect_equal(h$loss, rep(mean((p3 - d$y[1:3, , , , , drop = FALSE])^2), 2), tolerance = 1e-6)
})
