# test-optim-loss.R -- the paper's training set-up (Shi et al. 2015): RMSprop
# as torch.optim.RMSprop, and the losses' reductions "sum" and "batchmean"
# (the cross-entropy per sequence, summed over its frames and pixels),
# against PyTorch's runs (tools/make_training_fixtures.py) and against the
# whole batch's value under accumulation.

# The fixture's optimizer, RMSprop's arguments read from its config.
rms_fixture_optimizer <- function(cfg) {
  if (cfg$optimizer == "sgd") {
    return(convlstm_optimizer_sgd(cfg$lr, momentum = cfg$momentum, weight_decay = cfg$weight_decay))
  }
  convlstm_optimizer_rmsprop(cfg$lr, alpha = cfg$alpha, eps = cfg$eps, weight_decay = cfg$weight_decay,
                    momentum = cfg$momentum, centered = cfg$centered)
}

# Each step's loss and norm and the parameters after the last, against
# torch's run (1e-5 of the largest value, as the other training fixtures).
expect_rms_fixture <- function(name, device = "cpu", rel = 1e-5) {
  fx <- read_fixture(file.path("training", name))
  cfg <- fx$config
  model <- convlstm(cfg$input_dim, cfg$hidden_dims, cfg$kernel_sizes, bias = cfg$bias,
                    device = device, threads = 1)
  on.exit(convlstm_release(model))
  convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
  opt <- rms_fixture_optimizer(cfg)
  clip <- if (cfg$max_grad_norm > 0) cfg$max_grad_norm
  reduction <- cfg$reduction %||% "mean"
  losses <- numeric(cfg$steps)
  label <- paste(name, device)
  for (s in seq_len(cfg$steps)) {
    losses[s] <- convlstm_train_step(model, fx$tensors$x, fx$tensors$y, opt, max_grad_norm = clip,
                            loss = cfg$loss, delta = cfg$delta, pos_weight = cfg$pos_weight,
                            weight = fx$tensors$weight, reduction = reduction)
    if (s == 1 && is.null(clip)) {
      g <- convlstm_gradients(model)
      want <- fixture_group(fx, "grad/")
      for (k in names(want)) expect_close(g[[k]], want[[k]], rel = rel, label = paste(label, k))
    }
  }
  expect_close(losses, fx$tensors$losses, rel = rel, label = paste(label, "losses"))
  expected <- fixture_group(fx, "params/")
  sd <- convlstm_state_dict(model)
  for (k in names(expected)) expect_close(sd[[k]], expected[[k]], rel = rel, label = paste(label, k))
}

test_that("convlstm_optimizer_rmsprop() equals torch.optim.RMSprop: plain, momentum, centered, decay (fixtures)", {
  for (device in c("cpu", if (convlstm_gpu_available()) "cuda")) {
    for (name in c("rmsprop", "rmsprop_momentum", "rmsprop_centered", "rmsprop_weight_decay",
                   "rmsprop_all")) {
      expect_rms_fixture(name, device)
    }
  }
})

test_that("reduction = \"sum\" and \"batchmean\" equal torch's sum and sum / batch (fixtures)", {
  for (device in c("cpu", if (convlstm_gpu_available()) "cuda")) {
    for (name in c("bce_batchmean", "bce_sum", "mse_sum_weighted")) expect_rms_fixture(name, device)
  }
})

test_that("convlstm_optimizer_rmsprop() has torch's defaults and checks its arguments by name", {
  opt <- convlstm_optimizer_rmsprop()
  expect_s3_class(opt, "convlstm_optimizer_rmsprop")
  expect_identical(opt[c("lr", "alpha", "eps", "weight_decay", "momentum", "centered")],
                   list(lr = 0.01, alpha = 0.99, eps = 1e-8, weight_decay = 0, momentum = 0,
                        centered = FALSE))
  expect_output(print(convlstm_optimizer_rmsprop(centered = TRUE)), "RMSprop: lr = 0.01, alpha = 0.99.*centered")
  expect_convlstm_error(convlstm_optimizer_rmsprop(lr = -1), regexp = "`lr`")
  expect_convlstm_error(convlstm_optimizer_rmsprop(alpha = 1), regexp = "`alpha`")
  expect_convlstm_error(convlstm_optimizer_rmsprop(alpha = -0.1), regexp = "`alpha`")
  expect_convlstm_error(convlstm_optimizer_rmsprop(alpha = 1 - 1e-9), regexp = "`alpha`") # rounds to 1
  expect_convlstm_error(convlstm_optimizer_rmsprop(eps = 0), regexp = "`eps`")
  expect_convlstm_error(convlstm_optimizer_rmsprop(momentum = NA), regexp = "`momentum`")
  expect_convlstm_error(convlstm_optimizer_rmsprop(weight_decay = "a"), regexp = "`weight_decay`")
  expect_convlstm_error(convlstm_optimizer_rmsprop(centered = NA), regexp = "`centered`")
  expect_convlstm_error(convlstm_optimizer_rmsprop(lr = 1e39), regexp = "`lr`") # beyond float
})

test_that("RMSprop's state is planned to the byte, named as torch's, and follows its options", {
  set.seed(31)
  m <- api_model()
  on.exit(convlstm_release(m))
  x <- api_x()
  y <- api_y()
  n_params <- sum(lengths(convlstm_state_dict(m)))
  optimizer_bytes <- function(model) {
    by <- convlstm_memory_stats(model)$by_category
    by$current[by$category == "optimizer"]
  }
  cases <- list(list(convlstm_optimizer_rmsprop(), 1, "rmsprop.square_avg"),
                list(convlstm_optimizer_rmsprop(momentum = 0.9), 2, "rmsprop.momentum_buffer"),
                list(convlstm_optimizer_rmsprop(momentum = 0.9, centered = TRUE), 3, "rmsprop.grad_avg"))
  for (cs in cases) {
    est <- convlstm_memory_estimate(m, 2, 3, 5, 4, optimizer = cs[[1]])
    expect_equal(est$bytes[est$category == "optimizer"], cs[[2]] * 4 * n_params)
    expect_true(cs[[3]] %in% attr(est, "plan")$name)
    expect_identical(attr(est, "optimizer"), "rmsprop")
    convlstm_train_step(m, x, y, cs[[1]])
    expect_equal(optimizer_bytes(m), cs[[2]] * 4 * n_params)
    # the model's own state, planned without naming the optimizer
    held <- convlstm_memory_estimate(m, 2, 3, 5, 4)
    expect_equal(held$bytes[held$category == "optimizer"], cs[[2]] * 4 * n_params)
  }
  # centered off again drops grad_avg (as amsgrad's maximum); Adam resets the state
  convlstm_train_step(m, x, y, convlstm_optimizer_rmsprop(momentum = 0.9))
  expect_equal(optimizer_bytes(m), 2 * 4 * n_params)
  convlstm_train_step(m, x, y, convlstm_optimizer_adam())
  expect_equal(optimizer_bytes(m), 2 * 4 * n_params)
  expect_identical(as.double(c_optimizer_steps(model_ptr(m))), 1)
})

test_that("RMSprop's state is saved under torch's names and resumes exactly", {
  set.seed(32)
  x <- api_x()
  y <- api_y()
  m <- twin_models()
  on.exit(release_all(m))
  opt <- convlstm_optimizer_rmsprop(0.01, alpha = 0.9, momentum = 0.5, centered = TRUE,
                           weight_decay = 0.01)
  info <- expect_resumes_exactly(m, x, y, opt, c("square_avg", "momentum_buffer", "grad_avg"))
  expect_identical(info$optimizer_steps, 2)
})

test_that("RMSprop's guard refuses an overflowing square_avg and leaves the model as it was", {
  set.seed(33)
  m <- api_model()
  on.exit(convlstm_release(m))
  x <- api_x()
  y <- api_y()
  opt <- convlstm_optimizer_rmsprop(momentum = 0.9)
  convlstm_train_step(m, x, y, opt)
  sd <- convlstm_state_dict(m)
  expect_convlstm_error(convlstm_train_step(m, x, y * 1e30, opt), regexp = "square_avg of")
  expect_identical(convlstm_state_dict(m), sd)
  expect_identical(as.double(c_optimizer_steps(model_ptr(m))), 1)
  expect_true(is.finite(convlstm_train_step(m, x, y, opt)))
})

test_that("schedules and clipping drive RMSprop: each step uses the scheduled lr", {
  set.seed(34)
  x <- api_x()
  y <- api_y()
  m <- twin_models()
  on.exit(release_all(m))
  sched <- convlstm_lr_step(convlstm_optimizer_rmsprop(0.01), step_size = 1, gamma = 0.5)
  opt_b <- convlstm_optimizer_rmsprop(0.01)
  for (i in 1:3) {
    la <- convlstm_train_step(m$a, x, y, sched$optimizer, max_grad_norm = 0.05)
    lb <- convlstm_train_step(m$b, x, y, opt_b, max_grad_norm = 0.05)
    expect_identical(la, lb)
    sched$step()
    opt_b$lr <- opt_b$lr / 2
  }
  expect_identical(convlstm_state_dict(m$a), convlstm_state_dict(m$b))
  # one_cycle cycles RMSprop's momentum, as torch's OneCycleLR does
  oc <- convlstm_lr_one_cycle(convlstm_optimizer_rmsprop(0.01, momentum = 0.9), max_lr = 0.01, total_steps = 4)
  expect_true(oc$optimizer$momentum > 0)
  expect_true(is.finite(convlstm_train_step(m$a, x, y, oc$optimizer)))
})

test_that("a summed loss splits over uneven micro-batches and checkpoints to the whole batch's", {
  set.seed(35)
  x <- api_x(B = 5)
  for (target in c("last_state", "sequence")) {
    y <- if (target == "sequence") api_y(B = 5, T = 3) else api_y(B = 5)
    yb <- (y > 0) * 1
    for (red in c("sum", "batchmean")) {
      m <- twin_models()
      still <- convlstm_optimizer_sgd(lr = 0)
      whole <- convlstm_train_step(m$a, x, yb, still, target = target, loss = "bce_logits",
                          reduction = red)
      # 3 + 2 sequences: a sum must not take the micro-batch's share a mean takes
      split <- convlstm_train_step(m$b, x, yb, still, target = target, loss = "bce_logits",
                          reduction = red, accumulation_steps = 2, checkpoint = 2)
      expect_equal(split, whole, tolerance = 1e-6)
      ga <- convlstm_gradients(m$a)
      gb <- convlstm_gradients(m$b)
      for (k in names(ga)) expect_equal(gb[[k]], ga[[k]], tolerance = 1e-5, label = paste(red, k))
      # the value itself: torch's formula, summed (per sequence)
      pred <- convlstm_forward(m$a, x, training = FALSE, target = target)
      l <- loss_sum(pred, yb, list(kind = "bce_logits", pos_weight = 1))
      expect_equal(as.double(whole), if (red == "sum") l else l / 5, tolerance = 1e-6)
      # the mean's gradient times the elements (per sequence)
      mean_m <- api_model()
      convlstm_load_state_dict(mean_m, convlstm_state_dict(m$a))
      convlstm_train_step(mean_m, x, yb, still, target = target, loss = "bce_logits")
      gm <- convlstm_gradients(mean_m)
      scale <- if (red == "sum") length(yb) else length(yb) / 5
      for (k in names(gm)) expect_equal(ga[[k]], gm[[k]] * scale, tolerance = 1e-5)
      convlstm_release(mean_m)
      release_all(m)
    }
  }
})

test_that("convlstm_evaluate() and convlstm_fit() report the reduction's value", {
  set.seed(36)
  x <- api_x(B = 5)
  y <- (api_y(B = 5) > 0) * 1
  m <- api_model()
  on.exit(convlstm_release(m))
  pred <- convlstm_forward(m, x, training = FALSE, target = "last_state")
  l <- loss_sum(pred, y, list(kind = "bce_logits", pos_weight = 1))
  expect_equal(convlstm_evaluate(m, x, y, loss = "bce_logits", batch_size = 2), l / length(y))
  expect_equal(convlstm_evaluate(m, x, y, loss = "bce_logits", reduction = "sum",
                                 batch_size = 2), l)
  expect_equal(convlstm_evaluate(m, x, y, loss = "bce_logits", reduction = "batchmean",
                                 batch_size = 2), l / 5)
  # the step reports the same value before its update
  expect_equal(as.double(convlstm_train_step(m, x, y, convlstm_optimizer_sgd(0), loss = "bce_logits",
                                    reduction = "batchmean")), l / 5, tolerance = 1e-6)
  # fit: batchmean averages the batches' per-sequence losses, sum adds them
  sd <- convlstm_state_dict(m)
  h1 <- convlstm_fit(m, x, y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 2, shuffle = FALSE,
                     verbose = FALSE, loss = "bce_logits", reduction = "batchmean")
  expect_equal(h1$loss, l / 5, tolerance = 1e-6)
  h2 <- convlstm_fit(m, x, y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 2, shuffle = FALSE,
                     verbose = FALSE, loss = "bce_logits", reduction = "sum",
                     validation_data = list(x, y))
  expect_equal(h2$loss, l, tolerance = 1e-6)
  expect_equal(h2$val_loss, l, tolerance = 1e-6)
  expect_identical(convlstm_state_dict(m), sd)
  expect_convlstm_error(convlstm_train_step(m, x, y, convlstm_optimizer_sgd(0), reduction = "none"),
                        regexp = "`reduction`")
  expect_convlstm_error(convlstm_evaluate(m, x, y, reduction = NA), regexp = "`reduction`")
})
