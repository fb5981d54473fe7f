# Shi et al. (2015)'s encoder-forecaster (convlstm_forecaster()). The core's
# forward, loss and gradients are checked against an independent double
# precision reference and finite differences in tests/c/test_core_seq2seq.c;
# here the R side: the parameter counts of the paper's Table 1, the names,
# training on Moving MNIST, files, prediction, dtypes and refusals.

# A ConvLSTM cell's parameters written out by hand from the paper's
# shapes: 4h (in k^2 + h rk^2) weights, 4h biases, 3h peepholes per channel
# (in = 0 for the forecaster's first layer).
cell_params <- function(inp, h, k, rk) 4 * h * (inp * k^2 + h * rk^2) + 4 * h + 3 * h

table1_count <- function(hidden, k, rk, C = 1, p = 4) {
  inputs <- c(C * p^2, hidden[-length(hidden)])
  enc <- sum(mapply(cell_params, inputs, hidden, k, rk))
  fc <- sum(mapply(cell_params, c(0, inputs[-1]), hidden, k, rk))
  enc + fc + C * p^2 * sum(hidden) + C * p^2
}

n_parameters <- function(model) sum(vapply(convlstm_state_dict(model), length, numeric(1)))

test_that("the Moving MNIST rows of Shi et al.'s Table 1 have the paper's parameter counts", {
  rows <- list(
    list(hidden = 256, k = 5, rk = 5, paper = 13524496),               # 5x5-5x5-256
    list(hidden = c(128, 128), k = 5, rk = 5, paper = 10042896),       # -5x5-128-5x5-128
    list(hidden = c(128, 64, 64), k = 5, rk = 5, paper = 7585296),     # -5x5-128-5x5-64-5x5-64
    list(hidden = c(128, 128), k = 9, rk = 1, paper = 11550224),       # (9x9)-1x1-128-1x1-128
    list(hidden = c(128, 64, 64), k = 9, rk = 1, paper = 8830480)      # (9x9)-1x1-128-1x1-64-1x1-64
  )
  for (r in rows) {
    expect_equal(table1_count(r$hidden, r$k, r$rk), r$paper)
    model <- convlstm_forecaster(1, r$hidden, r$k, patch = 4, device = "cpu",
                                 recurrent_kernel_sizes = if (r$rk != r$k) r$rk)
    expect_equal(n_parameters(model), r$paper)
    expect_output(print(model), format(r$paper, big.mark = ","), fixed = TRUE)
    expect_output(print(summary(model)), format(r$paper, big.mark = ","), fixed = TRUE)
    convlstm_release(model)
  }
})

test_that("an encoder-forecaster's tensors have the contract's names and shapes", {
  model <- convlstm_forecaster(2, c(5, 3), 3, patch = 2, recurrent_kernel_sizes = 1,
                               device = "cpu")
  on.exit(convlstm_release(model))
  sd <- convlstm_state_dict(model)
  expect_equal(names(sd)[1:4], c("encoder.cell_list.0.conv_x.weight",
                                 "encoder.cell_list.0.conv_x.bias",
                                 "encoder.cell_list.0.conv_h.weight", "encoder.cell_list.0.w_ci"))
  expect_equal(dim(sd[["encoder.cell_list.0.conv_x.weight"]]), c(20, 8, 3, 3))
  expect_equal(dim(sd[["encoder.cell_list.0.conv_h.weight"]]), c(20, 5, 1, 1))
  # the forecaster's first layer: one convolution over h, the recurrent kernel
  expect_equal(dim(sd[["forecaster.cell_list.0.conv.weight"]]), c(20, 5, 1, 1))
  expect_equal(length(sd[["forecaster.cell_list.0.conv.bias"]]), 20)
  expect_false("forecaster.cell_list.0.conv_x.weight" %in% names(sd))
  expect_equal(dim(sd[["forecaster.cell_list.1.conv_x.weight"]]), c(12, 5, 3, 3))
  expect_equal(dim(sd[["head.weight"]]), c(8, 8, 1, 1))
  expect_equal(length(sd[["head.bias"]]), 8)
  expect_equal(tail(names(sd), 2), c("head.weight", "head.bias"))
})

test_that("the head reads forecaster layer 1's hidden channels first", {
  set.seed(3)
  model <- convlstm_forecaster(1, c(2, 3), 3, patch = 1, device = "cpu")
  on.exit(convlstm_release(model))
  x <- array(runif(1 * 2 * 5 * 5), dim = c(1, 2, 1, 5, 5))
  sd <- convlstm_state_dict(model)
  # zero the head's columns of forecaster layer 2 (channels 3..5): the
  # forecast must not change when layer 2's weights do
  sd$head.weight[, 3:5, , ] <- 0
  convlstm_load_state_dict(model, sd)
  before <- predict(model, x, horizon = 2)
  sd$forecaster.cell_list.1.conv.weight[] <- runif(length(sd$forecaster.cell_list.1.conv.weight))
  convlstm_load_state_dict(model, sd)
  expect_identical(predict(model, x, horizon = 2), before)
  sd$forecaster.cell_list.0.conv.weight[] <- runif(length(sd$forecaster.cell_list.0.conv.weight))
  convlstm_load_state_dict(model, sd)
  expect_false(identical(predict(model, x, horizon = 2), before))
})

test_that("an encoder-forecaster learns Moving MNIST", {
  data <- convlstm_moving_mnist(n = 4, n_frames = 6, size = 32, horizon = 3, seed = 1)
  set.seed(1)
  model <- convlstm_forecaster(1, c(8, 8), 3, patch = 4, device = "cpu")
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_rmsprop(lr = 1e-2, alpha = 0.9)
  losses <- vapply(1:25, function(i) {
    convlstm_train_step(model, data$x, data$y, opt, loss = "bce_logits", reduction = "sum")
  }, numeric(1))
  expect_true(all(is.finite(losses)))
  expect_lt(mean(tail(losses, 5)), 0.6 * losses[[1]])
  p <- predict(model, data$x, horizon = 3)
  expect_equal(dim(p), c(4, 3, 1, 32, 32))
  expect_equal(dim(predict(model, data$x, horizon = 5, batch_size = 3)), c(4, 5, 1, 32, 32))
})

test_that("an encoder-forecaster saves and loads bit for bit, optimizer included", {
  set.seed(2)
  model <- convlstm_forecaster(1, c(4, 3), 3, patch = 2, recurrent_kernel_sizes = 1,
                               peephole = "none", device = "cpu")
  on.exit(convlstm_release(model))
  x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
  y <- array(runif(2 * 2 * 8 * 8), dim = c(2, 2, 1, 8, 8))
  opt <- convlstm_optimizer_rmsprop(lr = 1e-3, momentum = 0.5)
  convlstm_train_step(model, x, y, opt)
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(model, path, opt)
  back <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(back), add = TRUE)
  expect_s3_class(back, "convlstm_forecaster")
  expect_identical(convlstm_state_dict(back), convlstm_state_dict(model))
  expect_identical(predict(back, x, horizon = 3), predict(model, x, horizon = 3))
  # the next step continues the saved run exactly
  expect_identical(convlstm_train_step(back, x, y, attr(back, "optimizer")), convlstm_train_step(model, x, y, opt))
  info <- convlstm_file_info(path)
  expect_true(info$config$forecaster)
  expect_equal(info$config$patch, 2)
})

test_that("a plain stack's weights or file do not load into an encoder-forecaster", {
  fc <- convlstm_forecaster(1, 4, 3, device = "cpu")
  plain <- convlstm(1, 4, 3, device = "cpu")
  on.exit({
    convlstm_release(fc)
    convlstm_release(plain)
  })
  expect_error(convlstm_load_state_dict(fc, convlstm_state_dict(plain)), class = "convlstm_error")
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(plain, path)
  expect_false(inherits(convlstm_load(path, device = "cpu"), "convlstm_forecaster"))
})

test_that("an encoder-forecaster predicts and trains in float16 and bfloat16", {
  set.seed(4)
  x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
  y <- array(runif(2 * 2 * 8 * 8), dim = c(2, 2, 1, 8, 8))
  ref <- convlstm_forecaster(1, c(4, 4), 3, patch = 2, device = "cpu")
  on.exit(convlstm_release(ref))
  want <- predict(ref, x, horizon = 2)
  for (dt in c("float16", "bfloat16")) {
    model <- convlstm_forecaster(1, c(4, 4), 3, patch = 2, device = "cpu", dtype = dt)
    convlstm_load_state_dict(model, convlstm_state_dict(ref))
    got <- predict(model, x, horizon = 2)
    expect_equal(dim(got), dim(want))
    expect_lt(max(abs(got - want)), if (dt == "float16") 5e-3 else 5e-2)
    # its gradients against float32's: test-forecaster-options.R
    expect_true(is.finite(convlstm_train_step(model, x, y, convlstm_optimizer_sgd(lr = 0.1))))
    convlstm_release(model)
  }
})

test_that("an encoder-forecaster refuses what it does not support, with classed errors", {
  model <- convlstm_forecaster(1, 4, 3, patch = 2, device = "cpu")
  on.exit(convlstm_release(model))
  x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
  y <- array(runif(2 * 2 * 8 * 8), dim = c(2, 2, 1, 8, 8))
  opt <- convlstm_optimizer_sgd(lr = 0.1)
  for (arg in list(list(tbptt = 2), list(state = "carry"), list(horizon = 2))) {
    expect_error(do.call(convlstm_train_step, c(list(model, x, y, opt), arg)),
                 class = "convlstm_error_unsupported")
  }
  # a data set of its frames is taken (issue 34), a last-state one refused
  expect_error(convlstm_data(model, x, y, target = "last_state"),
               class = "convlstm_error_unsupported")
  expect_error(convlstm_memory_advise(model, "100 MiB", 2, 3, 8, 8), class = "convlstm_error_invalid")
  # free running: the capability table's refusal, as convlstm_train_step()'s (test-capabilities.R)
  expect_error(convlstm_memory_advise(model, "100 MiB", 2, 3, 8, 8, horizon = 2, teacher_forcing = FALSE),
               class = "convlstm_error_unsupported")
  expect_gt(convlstm_max_batch_size(model, 3, 8, 8, budget = "50 MiB", horizon = 2), 1)
  odd <- array(0, dim = c(2, 3, 1, 7, 8))
  expect_error(convlstm_train_step(model, odd, odd, opt), class = "convlstm_error_invalid")
  expect_error(predict(model, odd, horizon = 2), class = "convlstm_error_invalid")
  expect_error(predict(model, x), class = "convlstm_error")
  expect_error(convlstm_memory_estimate(model, 2, 3, 7, 8, horizon = 2), class = "convlstm_error_invalid")
  expect_error(convlstm_forecaster(1, 4, 3, peephole = "position"), class = "convlstm_error")
  expect_error(convlstm_forecaster(1, 4, 3, patch = 0), class = "convlstm_error")
})

test_that("convlstm_memory_estimate() plans an encoder-forecaster's buffers", {
  model <- convlstm_forecaster(1, c(6, 4), 3, patch = 2, device = "cpu")
  on.exit(convlstm_release(model))
  est <- convlstm_memory_estimate(model, 3, 4, 8, 8, horizon = 5, optimizer = convlstm_optimizer_rmsprop())
  plan <- attr(est, "plan")
  P <- 4 * 4
  row <- function(n) plan$bytes[plan$name == n]
  expect_equal(row("head_output"), 4 * 5 * 3 * 4 * P)      # K x B x C p p x H/p x W/p floats
  expect_equal(row("d_head"), 4 * 5 * 3 * 4 * P)
  expect_equal(row("d_cell_handover[0]"), 4 * 3 * 6 * P)
  expect_equal(row("d_cell_handover[1]"), 4 * 3 * 4 * P)
  expect_equal(row("hidden[0]"), 4 * 4 * 3 * 6 * P)          # the encoder's T steps
  expect_equal(row("hidden[2]"), 4 * 5 * 3 * 6 * P)          # the forecaster's K
  expect_equal(row("d_hidden"), 4 * 5 * 3 * 6 * P)           # max(T, K) steps of max h
})

test_that("convlstm_fit() trains an encoder-forecaster and reports its validation loss", {
  data <- convlstm_moving_mnist(n = 6, n_frames = 6, size = 32, horizon = 3, seed = 2)
  set.seed(5)
  model <- convlstm_forecaster(1, 8, 3, patch = 4, device = "cpu")
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_rmsprop(lr = 1e-2, alpha = 0.9)
  vx <- data$x[5:6, , , , , drop = FALSE]
  vy <- data$y[5:6, 1:2, , , , drop = FALSE] # a shorter forecast than the training one
  h <- convlstm_fit(model, data$x[1:4, , , , , drop = FALSE], data$y[1:4, , , , , drop = FALSE],
                    opt, epochs = 6, batch_size = 2, verbose = FALSE, loss = "bce_logits",
                    reduction = "sum", validation_data = list(vx, vy))
  expect_s3_class(h, "convlstm_history")
  expect_equal(nrow(h), 6)
  expect_lt(h$loss[[6]], h$loss[[1]])
  # the validation loss is the summed BCE of the forecast, computed apart here
  p <- predict(model, vx, horizon = 2)
  want <- sum(pmax(p, 0) - p * vy + log1p(exp(-abs(p))))
  expect_equal(h$val_loss[[6]], want, tolerance = 1e-6)
  expect_output(print(h), "6 epochs")
  expect_error(convlstm_fit(model, data$x, data$y, opt, epochs = 1, tbptt = 2),
               class = "convlstm_error_unsupported")
})

test_that("convlstm_memory_advise() plans an encoder-forecaster's configurations against the budget", {
  model <- convlstm_forecaster(1, c(6, 4), 3, patch = 2, device = "cpu")
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_rmsprop()
  est <- convlstm_memory_estimate(model, 3, 4, 8, 8, horizon = 5, optimizer = opt)
  reserved <- estimate_bytes(est)[["reserved"]]
  roomy <- convlstm_memory_advise(model, reserved + 1, 3, 4, 8, 8, optimizer = opt, horizon = 5)
  expect_s3_class(roomy, "convlstm_memory_advice")
  # what it trains with (the capability table): float16, bfloat16,
  # micro-batches, checkpoint and recomputed gates; not tbptt
  expect_true(all(roomy$tbptt == 0))
  expect_true(any(roomy$checkpoint > 0) && any(roomy$recompute_gates > 0))
  expect_setequal(unique(roomy$dtype), c("float32", "float16", "bfloat16"))
  expect_true(any(roomy$accumulation_steps > 1))
  plain <- roomy[roomy$dtype == "float32" & roomy$accumulation_steps == 1 &
                   roomy$checkpoint == 0 & roomy$recompute_gates == 0, ]
  expect_identical(nrow(plain), 1L) # the plain step, the plan convlstm_memory_estimate() gives
  expect_identical(plain$reserved, reserved)
  expect_identical(plain$activations, estimate_bytes(est)[["activations"]])
  # every configuration fits that the budget holds (a checkpoint that barely
  # segments, 4 of the forecaster's 5 steps, holds more than the plain step)
  expect_identical(roomy$fits, roomy$reserved <= reserved + 1)
  expect_true(all(roomy$fits[roomy$checkpoint == 0]))
  expect_identical(attr(roomy, "horizon"), 5L)
  expect_output(print(roomy), "float32")
  # a byte less: the plain step no longer fits, the smaller ones still do
  tight <- convlstm_memory_advise(model, reserved - 1, 3, 4, 8, 8, optimizer = opt, horizon = 5)
  over <- tight[tight$dtype == "float32" & tight$accumulation_steps == 1 &
                  tight$checkpoint == 0 & tight$recompute_gates == 0, ]
  expect_false(over$fits)
  expect_match(over$reason, "over the budget")
  expect_true(any(tight$fits))
  expect_true(all(tight$reserved[tight$fits] < reserved))
})
