# Learning-rate schedules: the values per step equal PyTorch 1.13's
# schedulers' (fixtures/lr_schedules/schedules.csv, from
# tools/make_lr_fixtures.py), to a relative 1e-12 (torch's cosine is computed
# recursively, ours in closed form: they differ by rounding, ~5e-15); the
# optimizer a schedule hands out carries its rate; bad arguments are refused.

schedule_fixture <- function() {
  read.csv(test_path("fixtures", "lr_schedules", "schedules.csv"))
}

# Each case of make_lr_fixtures.py, made with the same arguments.
schedule_cases <- function() {
  adam <- convlstm_optimizer_adam(0.1)
  sgd <- convlstm_optimizer_sgd(0.1, momentum = 0.9)
  list(
    step = function() convlstm_lr_step(adam, step_size = 3, gamma = 0.5),
    multiplicative = function() {
      convlstm_lr_multiplicative(adam, function(e) if (e %% 2 == 1) 0.9 else 0.99)
    },
    cosine = function() convlstm_lr_cosine_annealing(adam, T_max = 10, eta_min = 0.001),
    cosine_warmup = function() {
      convlstm_lr_cosine_annealing(adam, T_max = 10, eta_min = 0.001, warmup = 4, warmup_start_factor = 0.1)
    },
    one_cycle_adam = function() convlstm_lr_one_cycle(adam, max_lr = 0.1, epochs = 5, steps_per_epoch = 5),
    one_cycle_sgd_linear_3phase = function() {
      convlstm_lr_one_cycle(sgd, max_lr = 0.2, total_steps = 25, pct_start = 0.25,
                   anneal_strategy = "linear", three_phase = TRUE, div_factor = 10,
                   final_div_factor = 100, base_momentum = 0.8, max_momentum = 0.9)
    },
    plateau = function() {
      convlstm_lr_reduce_on_plateau(adam, mode = "min", factor = 0.5, patience = 2, threshold = 1e-3,
                           cooldown = 1, min_lr = 0.01)
    },
    plateau_max_abs = function() {
      convlstm_lr_reduce_on_plateau(adam, mode = "max", factor = 0.1, patience = 1, threshold = 0.05,
                           threshold_mode = "abs")
    }
  )
}

plateau_metric <- c(1.0, 0.8, 0.7, 0.7, 0.69995, 0.7, 0.71, 0.7, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6,
                    0.59, rep(0.6, 10))

test_that("every schedule gives PyTorch's learning rate (and momentum) at every step", {
  ref <- schedule_fixture()
  cases <- schedule_cases()
  expect_setequal(unique(ref$case), names(cases))
  for (case in names(cases)) {
    r <- ref[ref$case == case, ]
    s <- cases[[case]]()
    lr <- s$get_lr()
    mom <- if (is.null(s$momentum)) NA_real_ else s$momentum
    for (k in seq_len(nrow(r) - 1)) {
      if (startsWith(case, "plateau")) {
        s$step(if (case == "plateau_max_abs") -plateau_metric[[k]] else plateau_metric[[k]])
      } else {
        s$step()
      }
      lr <- c(lr, s$get_lr())
      mom <- c(mom, if (is.null(s$momentum)) NA_real_ else s$momentum)
    }
    expect_equal(lr, r$lr, tolerance = 1e-12, info = case)
    expect_equal(mom, r$momentum, tolerance = 1e-12, info = case)
    expect_equal(s$last_epoch, nrow(r) - 1L, info = case)
  }
})

test_that("the schedule's optimizer carries the rate and momentum; the base is kept", {
  opt <- convlstm_optimizer_adam(0.1, betas = c(0.9, 0.99), weight_decay = 0.01)
  s <- convlstm_lr_one_cycle(opt, max_lr = 0.1, total_steps = 10)
  expect_s3_class(s$optimizer, "convlstm_optimizer_adam")
  expect_equal(s$optimizer$lr, 0.1 / 25)
  expect_equal(s$optimizer$betas, c(0.95, 0.99))
  expect_equal(s$optimizer$weight_decay, 0.01)
  s$step()
  expect_equal(s$optimizer$lr, s$get_lr())
  expect_lt(s$optimizer$betas[[1]], 0.95)
  # the linear 1cycle's rate past its last step is torch's (below 0); the
  # optimizer's is 0, since no step may use a negative rate
  s2 <- convlstm_lr_one_cycle(convlstm_optimizer_sgd(0.1), max_lr = 0.2, total_steps = 4,
                     anneal_strategy = "linear", three_phase = TRUE)
  for (i in 1:4) s2$step()
  expect_lt(s2$get_lr(), 0)
  expect_identical(s2$optimizer$lr, 0)
  expect_convlstm_error(s2$step(), regexp = "beyond its total_steps \\(4\\)")
})

test_that("a schedule drives convlstm_train_step() by hand, and its moments survive a new rate", {
  set.seed(1)
  d <- list(x = array(runif(2 * 3 * 16), c(2, 3, 1, 4, 4)), y = array(runif(32), c(2, 1, 4, 4)))
  m1 <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(m1))
  m2 <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(m2), add = TRUE)
  convlstm_load_state_dict(m2, convlstm_state_dict(m1))
  opt <- convlstm_optimizer_adam(0.05)
  s <- convlstm_lr_step(opt, step_size = 1, gamma = 0.5)
  l1 <- numeric()
  for (i in 1:3) {
    l1 <- c(l1, convlstm_train_step(m1, d$x, d$y, s$optimizer))
    s$step()
  }
  # the same as optimizers made by hand with those rates: Adam's moments are
  # kept across rates (they depend only on the optimizer's kind)
  l2 <- vapply(c(0.05, 0.025, 0.0125), function(lr) {
    convlstm_train_step(m2, d$x, d$y, convlstm_optimizer_adam(lr))
  }, numeric(1))
  expect_identical(l1, l2)
  expect_identical(convlstm_state_dict(m1), convlstm_state_dict(m2))
  # and the step count was not reset by a new rate: 3 Adam steps in a row
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(m1, path, optimizer = s$optimizer)
  expect_equal(convlstm_file_info(path)$optimizer_steps, 3)
})

test_that("convlstm_state_dict() and convlstm_load_state_dict() carry a schedule's state", {
  s <- convlstm_lr_reduce_on_plateau(convlstm_optimizer_sgd(0.1), patience = 0, factor = 0.5)
  s$step(1)
  s$step(2)
  st <- s$state_dict()
  t <- convlstm_lr_reduce_on_plateau(convlstm_optimizer_sgd(0.1), patience = 0, factor = 0.5)
  t$load_state_dict(st)
  expect_equal(t$get_lr(), 0.05)
  expect_equal(t$optimizer$lr, 0.05)
  s$step(3)
  t$step(3)
  expect_identical(t$get_lr(), s$get_lr())
  expect_convlstm_error(convlstm_lr_step(convlstm_optimizer_sgd(0.1), 2)$load_state_dict(st),
                        regexp = "not a step scheduler")
  expect_output(print(s), "reduce_on_plateau, steps per epoch: 3 steps taken, lr 0.025")
})

test_that("schedules check their arguments", {
  opt <- convlstm_optimizer_adam()
  expect_convlstm_error(convlstm_lr_step(list(lr = 1), 2), regexp = "`optimizer`")
  expect_convlstm_error(convlstm_lr_step(opt, 0), regexp = "`step_size`")
  expect_convlstm_error(convlstm_lr_step(opt, 2, gamma = -1), regexp = "`gamma`")
  expect_convlstm_error(convlstm_lr_multiplicative(opt, 0.9), regexp = "`lr_lambda`")
  expect_convlstm_error(convlstm_lr_multiplicative(opt, function(e) "a")$step(),
                        regexp = "`lr_lambda\\(1\\)` must return one non-negative number")
  expect_convlstm_error(convlstm_lr_cosine_annealing(opt, T_max = 0), regexp = "`T_max`")
  expect_convlstm_error(convlstm_lr_cosine_annealing(opt, 5, warmup = -1), regexp = "`warmup`")
  expect_convlstm_error(convlstm_lr_cosine_annealing(opt, 5, warmup = 2, warmup_start_factor = 2),
                        regexp = "`warmup_start_factor`")
  expect_convlstm_error(convlstm_lr_one_cycle(opt, 0.1), regexp = "`total_steps`, or both `epochs`")
  expect_convlstm_error(convlstm_lr_one_cycle(opt, 0.1, total_steps = 10, pct_start = 2),
                        regexp = "`pct_start`")
  expect_convlstm_error(convlstm_lr_one_cycle(opt, 0.1, 10, anneal_strategy = "exp"),
                        regexp = "`anneal_strategy`")
  expect_convlstm_error(convlstm_lr_reduce_on_plateau(opt, factor = 1), regexp = "`factor`")
  expect_convlstm_error(convlstm_lr_reduce_on_plateau(opt, mode = "up"), regexp = "`mode`")
  expect_convlstm_error(convlstm_lr_reduce_on_plateau(opt)$step(), regexp = "needs the monitored value")
})
