# convlstm_train_step() against the step taken piece by piece; gradients,
# convlstm_zero_grad(), backward's checks; optimizers.

manual_step <- function(model, x, y, opt, target) {
  convlstm_zero_grad(model)
  out <- convlstm_forward(model, x, training = TRUE)
  pred <- if (target == "sequence") out$layer_outputs[[2]] else out$layer_last_states[[2]]$h
  convlstm_backward(model, 2 * (pred - y) / length(y))
  convlstm_optimizer_step(model, opt)
  mean((pred - y)^2)
}

test_that("convlstm_train_step() equals zero_grad, forward, backward, optimizer_step", {
  set.seed(5)
  for (target in c("last_state", "sequence")) {
    for (opt in list(convlstm_optimizer_sgd(lr = 0.1, momentum = 0.9), convlstm_optimizer_adam(lr = 0.01))) {
      m <- twin_models()
      x <- api_x()
      y <- if (target == "sequence") api_y(T = 3) else api_y()
      for (step in 1:2) {
        loss_a <- convlstm_train_step(m$a, x, y, opt, target = target)
        loss_b <- manual_step(m$b, x, y, opt, target)
        expect_type(loss_a, "double")
        expect_length(loss_a, 1)
        expect_equal(loss_a, loss_b, tolerance = 1e-5)
      }
      sa <- convlstm_state_dict(m$a)
      sb <- convlstm_state_dict(m$b)
      for (name in names(sa)) expect_equal(sa[[name]], sb[[name]], tolerance = 1e-4)
      release_all(m)
    }
  }
})

test_that("convlstm_forward() returns every output or the chosen one", {
  set.seed(10)
  model <- api_model()
  on.exit(convlstm_release(model))
  x <- api_x()
  full <- convlstm_forward(model, x)
  expect_named(full, c("layer_outputs", "layer_last_states"))
  expect_equal(full, model(x))
  h <- convlstm_forward(model, x, target = "last_state")
  expect_equal(h, full$layer_last_states[[2]]$h)
  s <- convlstm_forward(model, x, training = FALSE, target = "sequence")
  expect_equal(s, full$layer_outputs[[2]])
  expect_equal(model$forward(x, target = "last_state"), h)
  expect_convlstm_error(convlstm_forward(model, x, target = "all"), regexp = "`target`")
})

test_that("gradients accumulate across backward calls and convlstm_zero_grad() clears them", {
  set.seed(6)
  model <- api_model()
  on.exit(convlstm_release(model))
  x <- api_x()
  g0 <- convlstm_gradients(model)
  expect_named(g0, names(convlstm_state_dict(model)))
  expect_equal(lapply(g0, dim), lapply(convlstm_state_dict(model), dim))
  expect_true(all(vapply(g0, function(g) all(g == 0), logical(1))))

  out <- convlstm_forward(model, x)
  dh <- array(stats::runif(2 * 2 * 5 * 4), c(2, 2, 5, 4))
  expect_invisible(convlstm_backward(model, dh))
  g1 <- convlstm_gradients(model)
  expect_true(any(g1[[1]] != 0))
  convlstm_forward(model, x)
  convlstm_backward(model, dh)
  g2 <- convlstm_gradients(model)
  for (name in names(g1)) expect_equal(g2[[name]], 2 * g1[[name]], tolerance = 1e-5)

  expect_invisible(convlstm_zero_grad(model))
  g3 <- convlstm_gradients(model)
  expect_true(all(vapply(g3, function(g) all(g == 0), logical(1))))
  # the sequence gradient is picked from the rank of grad_output
  convlstm_forward(model, x)
  convlstm_backward(model, array(1, c(2, 3, 2, 5, 4)))
  expect_true(any(convlstm_gradients(model)[[3]] != 0))
})

test_that("convlstm_backward() checks grad_output and the forward it follows", {
  model <- api_model()
  on.exit(convlstm_release(model))
  expect_convlstm_error(convlstm_backward(model, array(0, c(2, 2, 5, 4))), status = "state",
                        regexp = "convlstm_forward")
  x <- api_x()
  convlstm_forward(model, x)
  expect_convlstm_error(convlstm_backward(model, array(0, c(2, 3, 5, 4))),
                        regexp = "`grad_output` must have dim \\[2, 2, 5, 4\\]")
  expect_convlstm_error(convlstm_backward(model, array(0, c(2, 4, 2, 5, 4))),
                        regexp = "`grad_output` must have dim \\[2, 3, 2, 5, 4\\]")
  expect_convlstm_error(convlstm_backward(model, 1:3), regexp = "`grad_output`")
  # an inference forward keeps nothing to backpropagate through
  convlstm_forward(model, x, training = FALSE)
  expect_convlstm_error(convlstm_backward(model, array(0, c(2, 2, 5, 4))), status = "state")
  expect_convlstm_error(convlstm_forward(model, x, training = NA), regexp = "`training`")
})

test_that("convlstm_train_step() checks its arguments", {
  model <- api_model()
  on.exit(convlstm_release(model))
  x <- api_x()
  opt <- convlstm_optimizer_adam()
  expect_convlstm_error(convlstm_train_step(model, x, api_y(C = 3), opt),
                        regexp = "`y` must have dim \\[2, 2, 5, 4\\]")
  expect_convlstm_error(convlstm_train_step(model, x, api_y(), opt, target = "sequence"),
                        regexp = "`y` must be an array with 5 dimensions")
  expect_convlstm_error(convlstm_train_step(model, x, api_y(), list(lr = 1)), regexp = "`optimizer`")
  expect_convlstm_error(convlstm_train_step(model, x, api_y(), opt, target = "last"), regexp = "`target`")
  expect_convlstm_error(convlstm_train_step(function(x) x, x, api_y(), opt), regexp = "`model`")
  err <- tryCatch(convlstm_train_step(model, x, api_y(C = 3), opt), error = identity)
  expect_equal(err$call[[1]], quote(convlstm_train_step))
})

test_that("training lowers the loss and SGD with lr = 0 changes nothing", {
  set.seed(7)
  model <- api_model()
  on.exit(convlstm_release(model))
  x <- api_x()
  y <- api_y() * 0.3
  sd <- convlstm_state_dict(model)
  convlstm_train_step(model, x, y, convlstm_optimizer_sgd(lr = 0))
  expect_identical(convlstm_state_dict(model), sd)
  opt <- convlstm_optimizer_adam(lr = 0.02)
  losses <- vapply(1:30, function(i) convlstm_train_step(model, x, y, opt), numeric(1))
  expect_lt(losses[30], losses[1] * 0.7)
})

test_that("optimizers validate hyperparameters and print", {
  a <- convlstm_optimizer_adam(lr = 0.01, betas = c(0.8, 0.99), eps = 1e-6, weight_decay = 0.1)
  expect_s3_class(a, "convlstm_optimizer")
  expect_equal(a$kind, "adam")
  expect_equal(a$betas, c(0.8, 0.99))
  expect_output(print(a), "Adam: lr = 0.01, betas = \\(0.8, 0.99\\), eps = 1e-06, weight_decay = 0.1")
  s <- convlstm_optimizer_sgd(0.1, momentum = 0.9)
  expect_s3_class(s, "convlstm_optimizer")
  expect_output(print(s), "SGD: lr = 0.1, momentum = 0.9, weight_decay = 0")
  expect_convlstm_error(convlstm_optimizer_adam(lr = -1), regexp = "`lr`")
  expect_convlstm_error(convlstm_optimizer_adam(betas = 0.9), regexp = "`betas`")
  expect_convlstm_error(convlstm_optimizer_adam(betas = c(0.9, 1)), regexp = "`betas`")
  expect_convlstm_error(convlstm_optimizer_adam(eps = NA), regexp = "`eps`")
  expect_convlstm_error(convlstm_optimizer_adam(weight_decay = -0.1), regexp = "`weight_decay`")
  expect_convlstm_error(convlstm_optimizer_sgd(), regexp = "`lr` must be given")
  expect_convlstm_error(convlstm_optimizer_sgd(0.1, momentum = -1), regexp = "`momentum`")
  expect_convlstm_error(convlstm_optimizer_sgd(c(0.1, 0.2)), regexp = "`lr`")
})

# ---- gradient clipping (max_grad_norm) ----------------------------------

grad_norm_of <- function(g) sqrt(sum(vapply(g, function(a) sum(a^2), 0)))

# A fixture of tools/make_training_fixtures.py and a model holding its weights.
training_fixture <- function(name, device = "cpu", dtype = "float32") {
  fx <- read_fixture(file.path("training", name))
  cfg <- fx$config
  model <- convlstm(cfg$input_dim, cfg$hidden_dims, cfg$kernel_sizes, bias = cfg$bias,
                    device = device, threads = 1, dtype = dtype)
  convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
  list(fx = fx, cfg = cfg, model = model)
}

fixture_optimizer <- function(cfg) {
  if (cfg$optimizer == "sgd") {
    return(convlstm_optimizer_sgd(cfg$lr, momentum = cfg$momentum, weight_decay = cfg$weight_decay))
  }
  args <- list(cfg$lr, betas = c(0.9, cfg$beta2), weight_decay = cfg$weight_decay)
  if (cfg$amsgrad) args$amsgrad <- TRUE
  do.call(switch(cfg$optimizer, adam = convlstm_optimizer_adam, adamw = convlstm_optimizer_adamw), args)
}

# Each step's loss and norm and the parameters after the last, against
# torch's run of the same steps (1e-5 of the largest value, as the parity
# fixtures: both sides compute in float32).
expect_training_fixture <- function(name, device = "cpu", dtype = "float32", rel = 1e-5) {
  f <- training_fixture(name, device, dtype)
  on.exit(convlstm_release(f$model))
  cfg <- f$cfg
  opt <- fixture_optimizer(cfg)
  clip <- if (cfg$max_grad_norm > 0) cfg$max_grad_norm
  losses <- norms <- numeric(cfg$steps)
  label <- paste(name, device, dtype)
  for (s in seq_len(cfg$steps)) {
    loss <- convlstm_train_step(f$model, f$fx$tensors$x, f$fx$tensors$y, opt, max_grad_norm = clip,
                       loss = cfg$loss, delta = cfg$delta, pos_weight = cfg$pos_weight,
                       weight = f$fx$tensors$weight)
    losses[s] <- loss
    norms[s] <- attr(loss, "grad_norm") %||% 0
    if (s == 1 && is.null(clip)) { # the step's own gradient, as torch's backward of the loss
      g <- convlstm_gradients(f$model)
      want <- fixture_group(f$fx, "grad/")
      for (k in names(want)) expect_close(g[[k]], want[[k]], rel = rel, label = paste(label, k))
    }
  }
  expect_close(losses, f$fx$tensors$losses, rel = rel, label = paste(label, "losses"))
  expect_close(norms, f$fx$tensors$grad_norms, rel = rel, label = paste(label, "grad norms"))
  expected <- fixture_group(f$fx, "params/")
  sd <- convlstm_state_dict(f$model)
  for (k in names(expected)) {
    expect_close(sd[[k]], expected[[k]], rel = rel, label = paste(label, k))
  }
}

# expect_training_fixture() for each of `names` on every device here, in
# each of `dtypes` (float16 within its rounding: 5e-3).
expect_training_fixtures <- function(names, dtypes = "float32") {
  rel <- c(float32 = 1e-5, float16 = 5e-3)
  for (device in c("cpu", if (convlstm_gpu_available()) "cuda")) {
    for (name in names) {
      for (dtype in dtypes) expect_training_fixture(name, device, dtype, rel[[dtype]])
    }
  }
}

test_that("max_grad_norm equals torch's clip_grad_norm_ before Adam and SGD (fixtures)", {
  expect_training_fixtures(c("clip_adam", "clip_sgd_momentum"))
})

test_that("clipping scales the gradients to max_grad_norm and reports the norm before", {
  set.seed(11)
  x <- api_x()
  y <- api_y()
  m <- twin_models()
  on.exit(release_all(m))
  still <- convlstm_optimizer_sgd(lr = 0) # the gradients stay for convlstm_gradients() to read
  plain <- convlstm_train_step(m$a, x, y, still)
  expect_null(attributes(plain)) # no clipping asked: a plain number
  g <- convlstm_gradients(m$a)
  norm <- grad_norm_of(g)
  clipped <- convlstm_train_step(m$b, x, y, still, max_grad_norm = norm / 4)
  expect_equal(as.double(clipped), plain)
  expect_equal(attr(clipped, "grad_norm"), norm, tolerance = 1e-6)
  gc <- convlstm_gradients(m$b)
  coef <- (norm / 4) / (norm + 1e-6) # torch's, with its 1e-6
  expect_equal(grad_norm_of(gc), norm * coef, tolerance = 1e-5)
  for (k in names(g)) expect_equal(gc[[k]], g[[k]] * coef, tolerance = 1e-5)
  # Inf measures without clipping; a bound above the norm changes nothing
  for (bound in c(Inf, norm * 2)) {
    l <- convlstm_train_step(m$b, x, y, still, max_grad_norm = bound)
    expect_equal(attr(l, "grad_norm"), norm, tolerance = 1e-6)
    expect_identical(convlstm_gradients(m$b), g)
  }
})

test_that("clipping holds across accumulation, checkpointing and data sets", {
  set.seed(12)
  x <- api_x(B = 4)
  y <- api_y(B = 4)
  m <- twin_models()
  on.exit(release_all(m))
  opt <- convlstm_optimizer_adam(0.01)
  a <- convlstm_train_step(m$a, x, y, opt, max_grad_norm = 0.01)
  b <- convlstm_train_step(m$b, x, y, opt, max_grad_norm = 0.01, accumulation_steps = 2, checkpoint = 2)
  expect_equal(attr(b, "grad_norm"), attr(a, "grad_norm"), tolerance = 1e-5)
  expect_equal(convlstm_state_dict(m$b), convlstm_state_dict(m$a), tolerance = 1e-5)
  data <- convlstm_data(m$b, x, y)
  d <- convlstm_train_step(m$b, data, optimizer = opt, max_grad_norm = 0.01)
  a2 <- convlstm_train_step(m$a, x, y, opt, max_grad_norm = 0.01)
  expect_equal(attr(d, "grad_norm"), attr(a2, "grad_norm"), tolerance = 1e-5)
})

test_that("float16 clips the unscaled gradients, as GradScaler.unscale_ before clipping", {
  set.seed(13)
  x <- api_x()
  y <- api_y()
  m32 <- api_model()
  m16 <- api_model(dtype = "float16")
  on.exit(release_all(list(m32, m16)))
  convlstm_load_state_dict(m16, convlstm_state_dict(m32))
  still <- convlstm_optimizer_sgd(lr = 0)
  n32 <- attr(convlstm_train_step(m32, x, y, still, max_grad_norm = Inf), "grad_norm")
  l16 <- convlstm_train_step(m16, x, y, still, max_grad_norm = n32 / 2)
  # the norm of the true gradient (the loss scale, 65536, divided out) ...
  expect_equal(attr(l16, "grad_norm"), n32, tolerance = 1e-2)
  expect_gt(convlstm_loss_scale(m16)$scale, 1000)
  # ... and the gradients left at half of it
  expect_equal(grad_norm_of(convlstm_gradients(m16)), n32 / 2, tolerance = 1e-2)
})

test_that("clipping comes before the update's guard, which checks the clipped gradients", {
  set.seed(14)
  m <- api_model()
  on.exit(convlstm_release(m))
  x <- api_x()
  y <- api_y() * 1e30 # finite gradients whose squares overflow Adam's exp_avg_sq
  before <- convlstm_state_dict(m)
  expect_convlstm_error(convlstm_train_step(m, x, y, convlstm_optimizer_adam()), regexp = "exp_avg_sq")
  expect_identical(convlstm_state_dict(m), before)
  # clipped first, the same step is finite and applied
  loss <- convlstm_train_step(m, x, y, convlstm_optimizer_adam(), max_grad_norm = 1)
  expect_gt(attr(loss, "grad_norm"), 1e25)
  expect_false(identical(convlstm_state_dict(m), before))
  expect_true(all(vapply(convlstm_state_dict(m), function(a) all(is.finite(a)), TRUE)))
})

# ---- losses -------------------------------------------------------------

test_that("MAE, Huber and BCE with logits give torch's losses and gradients (fixtures)", {
  expect_training_fixtures(c("loss_mae", "loss_huber", "loss_bce_logits"),
                           c("float32", "float16"))
})

test_that("every loss holds across accumulation and checkpointing, and evaluate agrees", {
  set.seed(18)
  x <- api_x(B = 4)
  y <- api_y(B = 4)
  yb <- (y > 0) + 0
  for (case in list(list("mae", y), list("huber", y), list("bce_logits", yb))) {
    m <- twin_models()
    args <- list(loss = case[[1]], delta = 0.2, pos_weight = 3)
    a <- do.call(convlstm_train_step, c(list(m$a, x, case[[2]], convlstm_optimizer_sgd(0)), args))
    b <- do.call(convlstm_train_step, c(list(m$b, x, case[[2]], convlstm_optimizer_sgd(0), accumulation_steps = 2,
                                    checkpoint = 2), args))
    expect_equal(b, a, tolerance = 1e-6)
    expect_equal(convlstm_gradients(m$b), convlstm_gradients(m$a), tolerance = 1e-5)
    # a data set on the device: the same step, bit for bit
    d <- convlstm_data(m$b, x, case[[2]])
    expect_identical(do.call(convlstm_train_step, c(list(m$b, d, optimizer = convlstm_optimizer_sgd(0)), args)),
                     do.call(convlstm_train_step, c(list(m$a, x, case[[2]], convlstm_optimizer_sgd(0)), args)))
    convlstm_release(d)
    # the step's loss is the loss of the forward it ran (lr 0: unchanged model)
    e <- do.call(convlstm_evaluate, c(list(m$a, x, case[[2]], batch_size = 3), args))
    expect_equal(e, a, tolerance = 1e-6)
    release_all(m)
  }
})

# ---- the per-element loss weight -----------------------------------------

test_that("a weighted loss gives torch's (w * l).mean() and its gradients (fixtures)", {
  expect_training_fixtures(c("weighted_mse", "weighted_huber", "weighted_bce_logits"),
                           c("float32", "float16"))
})

test_that("a weight of ones is no weight, bit for bit, for every loss and target", {
  set.seed(21)
  x <- api_x()
  for (target in c("last_state", "sequence")) {
    y <- if (target == "sequence") api_y(T = 3) else api_y()
    for (loss in loss_names) {
      yl <- if (loss == "bce_logits") (y > 0) + 0 else y
      m <- twin_models()
      a <- convlstm_train_step(m$a, x, yl, convlstm_optimizer_sgd(0), target = target, loss = loss, delta = 0.2)
      b <- convlstm_train_step(m$b, x, yl, convlstm_optimizer_sgd(0), target = target, loss = loss, delta = 0.2,
                      weight = array(1, dim(yl)))
      expect_identical(b, a, label = paste(loss, target))
      expect_identical(convlstm_gradients(m$b), convlstm_gradients(m$a), label = paste(loss, target))
      release_all(m)
    }
  }
})

test_that("a zero weight masks its elements: their targets change nothing", {
  set.seed(22)
  x <- api_x()
  y <- api_y(T = 3)
  w <- array(stats::runif(length(y), 0.5, 2), dim(y))
  w[, 2, 1, , ] <- 0 # a step's channel missing
  y2 <- y
  y2[w == 0] <- 1e6 # garbage where the data are missing
  m <- twin_models()
  on.exit(release_all(m))
  a <- convlstm_train_step(m$a, x, y, convlstm_optimizer_sgd(0), target = "sequence", weight = w)
  b <- convlstm_train_step(m$b, x, y2, convlstm_optimizer_sgd(0), target = "sequence", weight = w)
  expect_identical(b, a)
  expect_identical(convlstm_gradients(m$b), convlstm_gradients(m$a))
  # the mean is over all elements, masked ones included, as torch's .mean()
  pred <- convlstm_forward(m$a, x, training = FALSE, target = "sequence")
  expect_equal(as.numeric(a), sum(w * (pred - y)^2) / length(y), tolerance = 1e-6)
  # and a weight changes the step (it is not ignored)
  c <- convlstm_train_step(m$a, x, y, convlstm_optimizer_sgd(0), target = "sequence")
  expect_false(isTRUE(all.equal(as.numeric(c), as.numeric(a))))
})

test_that("a weighted step holds across accumulation, checkpointing and tbptt; evaluate agrees", {
  set.seed(23)
  x <- api_x(B = 4, T = 4)
  y <- api_y(B = 4, T = 4)
  w <- array(stats::runif(length(y), 0, 2) * (stats::runif(length(y)) > 0.3), dim(y))
  for (loss in loss_names) {
    yl <- if (loss == "bce_logits") (y > 0) + 0 else y
    m <- twin_models()
    args <- list(target = "sequence", loss = loss, delta = 0.2, pos_weight = 3, weight = w)
    a <- do.call(convlstm_train_step, c(list(m$a, x, yl, convlstm_optimizer_sgd(0)), args))
    for (k in list(list(accumulation_steps = 2, checkpoint = 3), list(tbptt = 2),
                   list(accumulation_steps = 3))) {
      b <- do.call(convlstm_train_step, c(list(m$b, x, yl, convlstm_optimizer_sgd(0)), args, k))
      expect_equal(b, a, tolerance = 1e-6, label = paste(loss, names(k)))
      if (is.null(k$tbptt)) { # tbptt cuts the gradient through time; the loss still agrees
        expect_equal(convlstm_gradients(m$b), convlstm_gradients(m$a), tolerance = 1e-5)
      }
    }
    e <- convlstm_evaluate(m$a, x, yl, target = "sequence", batch_size = 3, loss = loss,
                           delta = 0.2, pos_weight = 3, weight = w)
    expect_equal(e, as.numeric(a), tolerance = 1e-6)
    release_all(m)
  }
})

test_that("a weight is planned: convlstm_memory_estimate(weight = ) measures to the byte", {
  set.seed(24)
  x <- api_x(B = 4, T = 4)
  for (target in c("last_state", "sequence")) {
    y <- if (target == "sequence") api_y(B = 4, T = 4) else api_y(B = 4)
    m <- api_model()
    est <- convlstm_memory_estimate(m, 4, 4, 5, 4, optimizer = convlstm_optimizer_sgd(0.1), checkpoint = 2,
                           accumulation_steps = 2, weight = target)
    plain <- convlstm_memory_estimate(m, 4, 4, 5, 4, optimizer = convlstm_optimizer_sgd(0.1), checkpoint = 2,
                             accumulation_steps = 2)
    plan <- attr(est, "plan")
    # float [steps held, micro-batch, channels, H, W]: 2 steps of a segment for a sequence
    want <- 4 * (if (target == "sequence") 2 else 1) * 2 * 2 * 5 * 4
    expect_identical(plan$bytes[plan$name == "weight"], as.double(want))
    expect_false("weight" %in% attr(plain, "plan")$name)
    convlstm_reset_peak_memory_stats(m)
    convlstm_train_step(m, x, y, convlstm_optimizer_sgd(0.1), target = target, checkpoint = 2,
               accumulation_steps = 2, weight = array(1, dim(y)))
    s <- convlstm_memory_stats(m)
    expect_identical(s$peak_allocated, est$bytes[est$category == "total"], label = target)
    convlstm_release(m)
  }
  # with a horizon only its K frames carry a loss: K steps of weight, not
  # the T + K - 1 of the step (test-memory-measured.R saw the rest untouched)
  m <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(m))
  plan <- attr(convlstm_memory_estimate(m, 2, 3, 5, 4, horizon = 2, weight = "sequence"), "plan")
  expect_identical(plan$bytes[plan$name == "weight"], as.double(4 * 2 * 2 * 1 * 5 * 4))
})

test_that("convlstm_fit() slices the weight with its batches and validation split", {
  set.seed(25)
  x <- api_x(B = 6)
  y <- api_y(B = 6)
  w <- array(stats::runif(length(y), 0, 2), dim(y))
  m <- twin_models()
  on.exit(release_all(m))
  h <- convlstm_fit(m$a, x, y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 2, shuffle = FALSE,
                    verbose = FALSE, validation_split = 1 / 3, weight = w)
  # lr 0: each batch's loss is the weighted loss of the model as it stands
  steps <- vapply(list(1:2, 3:4), function(i) {
    as.numeric(convlstm_train_step(m$b, x[i, , , , , drop = FALSE], y[i, , , , drop = FALSE],
                          convlstm_optimizer_sgd(0), weight = w[i, , , , drop = FALSE]))
  }, 0)
  expect_equal(h$loss[[1]], mean(steps), tolerance = 1e-6)
  expect_equal(h$val_loss[[1]],
               convlstm_evaluate(m$a, x[5:6, , , , , drop = FALSE], y[5:6, , , , drop = FALSE],
                                 weight = w[5:6, , , , drop = FALSE]), tolerance = 1e-12)
  expect_false(attr(h, "data_on_device"))
})

test_that("convlstm_fit() trains on a loss and reports it for validation too", {
  set.seed(19)
  m <- api_model()
  on.exit(convlstm_release(m))
  x <- api_x(B = 8)
  y <- (api_y(B = 8) > 0) + 0
  h <- convlstm_fit(m, x, y, convlstm_optimizer_adam(0.02), epochs = 3, batch_size = 4,
                    verbose = FALSE, loss = "bce_logits", pos_weight = 2,
                    validation_data = list(x, y), shuffle = FALSE)
  expect_equal(h$val_loss[[3]], convlstm_evaluate(m, x, y, loss = "bce_logits",
                                                  pos_weight = 2), tolerance = 1e-6)
  expect_lt(h$loss[[3]], h$loss[[1]])
  expect_identical(attr(h, "loss"), "bce_logits") # plot()'s axis names it
})

# ---- AdamW and amsgrad -------------------------------------------------

test_that("AdamW and Adam with amsgrad equal torch.optim.AdamW / Adam(amsgrad=True) (fixtures)", {
  expect_training_fixtures(c("adamw", "adam_amsgrad"))
})

# Mixed precision: activations in float16 with the loss scaled, the update in
# float32 on unscaled (then clipped) gradients, as autocast + GradScaler. The
# reference is torch's float32 run; float16 activations (11-bit mantissa)
# put the steps within a few 1e-3 of it, where a wrong order (clipping the
# scaled gradients, a 65536 times larger norm) or a missing unscale would be
# off by far more.
test_that("with float16 the same steps track torch's within float16 rounding (fixtures)", {
  expect_training_fixtures(c("clip_adam", "clip_sgd_momentum", "adamw", "adam_amsgrad"),
                           "float16")
})

test_that("AdamW decays the weights apart from the gradient; amsgrad keeps the maximum", {
  set.seed(15)
  x <- api_x()
  y <- api_y()
  m <- twin_models()
  on.exit(release_all(m))
  # zero gradient (lr 0 on the moments): AdamW still shrinks p by 1 - lr * wd,
  # Adam's L2 decay (added to the gradient) moves p by about lr instead
  sd <- convlstm_state_dict(m$a)
  convlstm_zero_grad(m$a)
  convlstm_forward(m$a, x)
  convlstm_backward(m$a, array(0, dim(y)))
  convlstm_optimizer_step(m$a, convlstm_optimizer_adamw(lr = 0.1, weight_decay = 0.5))
  for (k in names(sd)) expect_equal(convlstm_state_dict(m$a)[[k]], sd[[k]] * (1 - 0.05), tolerance = 1e-6)
  # amsgrad: its state is one more tensor of the parameters' size
  optimizer_bytes <- function(model) {
    by <- convlstm_memory_stats(model)$by_category
    by$current[by$category == "optimizer"]
  }
  convlstm_train_step(m$b, x, y, convlstm_optimizer_adam(amsgrad = TRUE))
  n_params <- sum(lengths(convlstm_state_dict(m$b)))
  expect_equal(optimizer_bytes(m$b), 3 * 4 * n_params)
  est <- convlstm_memory_estimate(m$b, 2, 3, 5, 4, optimizer = convlstm_optimizer_adam(amsgrad = TRUE))
  expect_true("adam.max_exp_avg_sq" %in% attr(est, "plan")$name)
  expect_equal(est$bytes[est$category == "optimizer"], 3 * 4 * n_params)
  # a plain Adam step drops it again
  convlstm_train_step(m$b, x, y, convlstm_optimizer_adam())
  expect_equal(optimizer_bytes(m$b), 2 * 4 * n_params)
})

test_that("amsgrad's max_exp_avg_sq is saved under torch's name and resumes exactly", {
  set.seed(16)
  x <- api_x()
  y <- api_y()
  m <- twin_models()
  on.exit(release_all(m))
  opt <- convlstm_optimizer_adamw(0.01, betas = c(0.9, 0.5), amsgrad = TRUE)
  expect_resumes_exactly(m, x, y, opt, "max_exp_avg_sq")
})

test_that("the update's guard covers amsgrad: a refused step leaves max_exp_avg_sq as it was", {
  set.seed(17)
  m <- api_model()
  on.exit(convlstm_release(m))
  x <- api_x()
  y <- api_y()
  opt <- convlstm_optimizer_adam(amsgrad = TRUE)
  convlstm_train_step(m, x, y, opt)
  saved <- function() {
    path <- tempfile(fileext = ".safetensors")
    on.exit(unlink(path))
    convlstm_save(m, path, optimizer = opt)
    readBin(path, "raw", file.size(path))
  }
  before <- saved()
  expect_convlstm_error(convlstm_train_step(m, x, y * 1e30, opt), regexp = "exp_avg_sq")
  expect_identical(saved(), before)
  expect_true(is.finite(convlstm_train_step(m, x, y, opt)))
})
