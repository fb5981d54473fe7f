# Scheduled sampling: teacher_forcing as a probability in convlstm_train_step() and
# convlstm_memory_estimate(), as a schedule over epochs in convlstm_fit()
# (convlstm_sampling_schedule()). PyTorch parity of the steps is in
# test-parity-forecast.R; here: the schedules' values, TRUE / FALSE being
# 1 / 0 bit for bit, the coins coming from R's generator, a pattern of all
# truths or none being teacher forcing or free running, the plan, and fits.

sampling_model <- function(...) {
  set.seed(11)
  convlstm(2, c(3, 2), 3, device = "cpu", threads = 1, ...)
}

sampling_data <- function(B = 3, T = 2, K = 4) {
  set.seed(12)
  list(x = array(stats::runif(B * T * 2 * 5 * 4), c(B, T, 2, 5, 4)),
       y = array(stats::runif(B * K * 2 * 5 * 4), c(B, K, 2, 5, 4)))
}

# The loss of one step of a fresh model, its weights after it, with R's
# generator at `seed` when the step is called, and the uniform the
# generator draws next.
one_step <- function(d, tf, seed = 1, ...) {
  model <- sampling_model(...)
  on.exit(convlstm_release(model))
  set.seed(seed)
  loss <- convlstm_train_step(model, d$x, d$y, convlstm_optimizer_adam(0.01), horizon = dim(d$y)[[2]],
                     teacher_forcing = tf)
  list(loss = loss, weights = convlstm_state_dict(model), next_uniform = stats::runif(1))
}

# A seed at which stats::runif() draws the coins `truth` with probability p
# (?convlstm_train_step: the k-th fed-back step reads the truth when its uniform is
# below p).
seed_for <- function(truth, p) {
  for (seed in seq_len(10000)) {
    set.seed(seed)
    if (identical(stats::runif(length(truth)) < p, truth)) return(seed)
  }
  stop("no seed")
}

test_that("convlstm_sampling_schedule() gives the paper's decays, 1-based epochs", {
  e <- 1:12
  s <- convlstm_sampling_schedule("inverse_sigmoid", k = 4)
  expect_equal(s(e), 4 / (4 + exp((e - 1) / 4)))
  expect_true(all(diff(s(e)) < 0))
  expect_equal(convlstm_sampling_schedule("exponential", k = 0.8)(e), 0.8^(e - 1))
  lin <- convlstm_sampling_schedule("linear", k = 0.25, min = 0.1)
  expect_equal(lin(e), pmax(0.1, 1 - 0.25 * (e - 1)))
  expect_identical(lin(1), 1) # the first epoch teacher-forced
  expect_identical(lin(12), 0.1)
  expect_s3_class(s, "convlstm_sampling_schedule")
  expect_output(print(lin), "linear, k = 0.25, min = 0.1")
  expect_output(print(s), "p by epoch 1..5: 0.8 0.757 0.7081")
})

test_that("teacher_forcing = 1 is TRUE and 0 is FALSE, bit for bit, drawing nothing", {
  d <- sampling_data()
  set.seed(5)
  untouched <- stats::runif(1)
  for (pair in list(list(TRUE, 1), list(FALSE, 0), list(FALSE, 0L))) {
    a <- one_step(d, pair[[1]], seed = 5)
    b <- one_step(d, pair[[2]], seed = 5)
    expect_identical(a, b)
    expect_identical(a$next_uniform, untouched) # R's generator untouched
  }
  # and they differ from each other
  expect_gt(abs(one_step(d, TRUE)$loss - one_step(d, FALSE)$loss), 1e-4)
})

test_that("a probability draws horizon - 1 coins from R's generator, per call", {
  d <- sampling_data(K = 4)
  set.seed(3)
  stats::runif(3) # the coins of the three fed-back steps
  after_coins <- stats::runif(1)
  expect_identical(one_step(d, 0.5, seed = 3)$next_uniform, after_coins)
  # the same seed, the same step; seeds drawing other coins, other steps
  a <- one_step(d, 0.5, seed = seed_for(c(TRUE, FALSE, TRUE), 0.5))
  b <- one_step(d, 0.5, seed = seed_for(c(TRUE, FALSE, TRUE), 0.5))
  c <- one_step(d, 0.5, seed = seed_for(c(FALSE, TRUE, TRUE), 0.5))
  expect_identical(a, b)
  expect_gt(abs(a$loss - c$loss), 1e-5)
})

test_that("coins all true are teacher forcing, all false free running", {
  d <- sampling_data(K = 3)
  rel <- 1e-5
  teacher <- one_step(d, TRUE)
  free <- one_step(d, FALSE)
  all_true <- one_step(d, 0.9, seed = seed_for(c(TRUE, TRUE), 0.9))
  none <- one_step(d, 0.1, seed = seed_for(c(FALSE, FALSE), 0.1))
  expect_close(all_true$loss, teacher$loss, rel = rel)
  expect_close(none$loss, free$loss, rel = rel)
  for (k in names(teacher$weights)) {
    # the update after one Adam step: the gradients' signs, and more
    expect_close(all_true$weights[[k]], teacher$weights[[k]], rel = rel, label = k)
    expect_close(none$weights[[k]], free$weights[[k]], rel = rel, label = k)
  }
  # a mix is neither
  mixed <- one_step(d, 0.5, seed = seed_for(c(TRUE, FALSE), 0.5))
  expect_gt(min(abs(mixed$loss - c(teacher$loss, free$loss))), 1e-5)
})

test_that("where the truth is read, the fed-back frame's loss reaches no earlier prediction", {
  # horizon 2, the one fed-back step reading the truth: the loss of the
  # second frame then depends on the first only through the state, as with
  # teacher forcing; the gradients are teacher forcing's, not free running's
  d <- sampling_data(K = 2)
  grads <- function(tf, seed = NULL) {
    model <- sampling_model()
    on.exit(convlstm_release(model))
    if (!is.null(seed)) set.seed(seed)
    convlstm_train_step(model, d$x, d$y, convlstm_optimizer_sgd(lr = 0), horizon = 2, teacher_forcing = tf)
    convlstm_gradients(model)
  }
  truth <- grads(0.5, seed_for(TRUE, 0.5))
  teacher <- grads(TRUE)
  free <- grads(FALSE)
  for (k in names(truth)) expect_close(truth[[k]], teacher[[k]], rel = 1e-5, label = k)
  expect_gt(max(abs(truth[[1]] - free[[1]])), 1e-4)
})

test_that("scheduled sampling is planned as free running, to the byte", {
  d <- sampling_data(B = 2, T = 3, K = 3)
  configs <- list(plain = list(), accumulation = list(accumulation_steps = 2),
                  float16 = list(dtype = "float16"))
  for (name in names(configs)) {
    cfg <- configs[[name]]
    model <- sampling_model(dtype = cfg$dtype %||% "float32")
    opt <- convlstm_optimizer_adam()
    acc <- cfg$accumulation_steps %||% 1
    plan <- function(tf) {
      convlstm_memory_estimate(model, 2, 3, 5, 4, horizon = 3, teacher_forcing = tf, optimizer = opt,
                      accumulation_steps = acc)
    }
    est <- plan(0.4)
    expect_identical(estimate_bytes(est), estimate_bytes(plan(FALSE)), info = name)
    expect_false(identical(estimate_bytes(est), estimate_bytes(plan(TRUE))), info = name)
    expect_output(print(est), "scheduled sampling \\(p = 0.4\\)")
    for (seed in c(seed_for(c(TRUE, TRUE), 0.4), seed_for(c(FALSE, TRUE), 0.4))) {
      set.seed(seed)
      convlstm_train_step(model, d$x, d$y, opt, horizon = 3, teacher_forcing = 0.4,
                 accumulation_steps = acc)
      s <- convlstm_memory_stats(model)
      measured <- stats::setNames(s$by_category$peak, s$by_category$category)
      expect_identical(measured, estimate_bytes(est)[names(measured)], info = name)
    }
    convlstm_release(model)
  }
})

test_that("convlstm_fit() trains each epoch with its p and records it", {
  d <- sampling_data(B = 4, T = 2, K = 3)
  fit <- function(tf, epochs = 3) {
    model <- sampling_model()
    on.exit(convlstm_release(model))
    set.seed(9)
    h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = epochs, batch_size = 2,
                      horizon = 3, teacher_forcing = tf, shuffle = FALSE, verbose = FALSE)
    list(history = h, weights = convlstm_state_dict(model))
  }
  # epoch 1 teacher-forced, 2 at p = 0.5, 3 free-running: the steps of
  # convlstm_train_step() with the same p, drawing the same coins
  sched <- convlstm_sampling_schedule("linear", k = 0.5)
  h <- fit(sched)
  expect_identical(h$history$teacher_forcing, c(1, 0.5, 0))
  model <- sampling_model()
  set.seed(9)
  opt <- convlstm_optimizer_adam(0.01)
  losses <- numeric(3)
  for (epoch in 1:3) {
    l <- vapply(list(1:2, 3:4), function(idx) {
      convlstm_train_step(model, d$x[idx, , , , , drop = FALSE], d$y[idx, , , , , drop = FALSE], opt,
                 horizon = 3, teacher_forcing = sched(epoch))
    }, numeric(1))
    losses[[epoch]] <- mean(l)
  }
  expect_equal(h$history$loss, losses, tolerance = 1e-12)
  expect_identical(h$weights, convlstm_state_dict(model))
  convlstm_release(model)
  expect_output(print(h$history), "teacher_forcing")
  # a constant p, and any function of the epoch
  expect_identical(fit(0.25, epochs = 2)$history$teacher_forcing, c(0.25, 0.25))
  expect_identical(fit(function(epoch) 1 / epoch, epochs = 2)$history$teacher_forcing,
                   c(1, 0.5))
  expect_identical(fit(TRUE, epochs = 1)$history$teacher_forcing, 1)
})

test_that("a resumed forecasting fit keeps the p of the epochs before", {
  d <- sampling_data(B = 4, T = 2, K = 3)
  sched <- convlstm_sampling_schedule("exponential", k = 0.5)
  run <- function(epochs, ...) {
    model <- sampling_model()
    on.exit(convlstm_release(model))
    set.seed(9)
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = epochs, batch_size = 2,
                 horizon = 3, teacher_forcing = sched, verbose = FALSE, ...)
  }
  straight <- run(3)
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  run(2, callbacks = list(convlstm_callback_model_checkpoint(path)))
  resumed <- run(3, resume = path)
  expect_identical(resumed$teacher_forcing, c(1, 0.5, 0.25))
  expect_identical(resumed$loss, straight$loss)
})

test_that("float16 and bfloat16 store the true frames too: their losses track float32's", {
  d <- sampling_data(K = 4)
  seed <- seed_for(c(TRUE, FALSE, TRUE), 0.5)
  losses <- function(dtype, tf = 0.5) {
    model <- sampling_model(dtype = dtype)
    on.exit(convlstm_release(model))
    opt <- convlstm_optimizer_adam(0.02)
    vapply(1:4, function(i) {
      set.seed(seed)
      convlstm_train_step(model, d$x, d$y, opt, horizon = 4, teacher_forcing = tf)
    }, numeric(1))
  }
  f32 <- losses("float32")
  rel <- function(a) max(abs(a - f32) / f32)
  expect_lt(rel(losses("float16")), 1e-3)
  expect_lt(rel(losses("bfloat16")), 1e-2)
  # bounds that tell the pattern apart: the all-own steps are further away
  expect_gt(rel(losses("float32", FALSE)), 1e-3)
})
