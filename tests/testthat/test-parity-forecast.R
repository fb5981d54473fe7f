# test-parity-forecast.R -- forecasting against PyTorch: a forward and its
# gradients from a given initial state, Adam steps from it, train steps that
# carry the state from one chunk of a sequence to the next, and multi-frame
# rollouts (tests/testthat/fixtures/forecast/, written by
# tools/make_fixtures_forecast.py from inst/python/torch_convlstm.py). Same
# tolerance as test-parity-torch.R: |ours - torch| <= 1e-5 * max|torch| + 1e-8.

REL <- 1e-5
forecast_devices <- c("cpu", if (convlstm_gpu_available()) "cuda")

forecast_fixture <- function(name) read_fixture(file.path("forecast", name))

forecast_model <- function(fx, device) {
  cfg <- fx$config
  model <- convlstm(cfg$input_dim, cfg$hidden_dims, cfg$kernel_sizes, bias = cfg$bias,
                    device = device, peephole = cfg$peephole %||% FALSE,
                    frame_size = cfg$frame_size)
  convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
  model
}

# The fixture's initial state as the model returns last states.
fixture_state <- function(fx) {
  lapply(seq_along(fx$config$hidden_dims) - 1L, function(i) {
    list(h = fx$tensors[[sprintf("state_h/%d", i)]], c = fx$tensors[[sprintf("state_c/%d", i)]])
  })
}

time_slice <- function(a, t) a[, t, , , , drop = FALSE]

for (device in forecast_devices) {
  for (name in c("state_given", "given_seq")) {
    fx <- forecast_fixture(name)
    cfg <- fx$config
    label <- paste(name, device)

    test_that(sprintf("a forward from a given state matches PyTorch [%s]", label), {
      model <- forecast_model(fx, device)
      state <- fixture_state(fx)
      out <- model(fx$tensors$x, state = state)
      for (l in seq_along(cfg$hidden_dims)) {
        i <- l - 1L
        expect_close(out[[1]][[l]], fx$tensors[[sprintf("output/%d", i)]], rel = REL,
                     label = sprintf("%s: output %d", label, l))
        expect_close(out[[2]][[l]]$h, fx$tensors[[sprintf("last_h/%d", i)]], rel = REL,
                     label = sprintf("%s: last h %d", label, l))
        expect_close(out[[2]][[l]]$c, fx$tensors[[sprintf("last_c/%d", i)]], rel = REL,
                     label = sprintf("%s: last c %d", label, l))
      }
      # predict() keeping only the running states, in two batches
      L <- length(cfg$hidden_dims)
      p <- predict(model, fx$tensors$x, what = "last_state", state = state, batch_size = 1)
      expect_close(p, fx$tensors[[sprintf("last_h/%d", L - 1L)]], rel = REL,
                   label = paste(label, "predict last state"))
      # and not the forward from zeros
      expect_gt(max(abs(model(fx$tensors$x)[[2]][[L]]$h - p)), 1e-3)
      convlstm_release(model)
    })

    test_that(sprintf("gradients from a given state match PyTorch [%s]", label), {
      model <- forecast_model(fx, device)
      convlstm_zero_grad(model)
      pred <- convlstm_forward(model, fx$tensors$x, target = cfg$target, state = fixture_state(fx))
      loss <- mean((pred - fx$tensors$y)^2)
      expect_close(loss, fx$tensors$loss, rel = REL, label = paste(label, "loss"))
      convlstm_backward(model, 2 * (pred - fx$tensors$y) / length(pred))
      g <- convlstm_gradients(model)
      expect_fixture_tensors(g, fx, "grad/", rel = REL, label = paste(label, "grad"))
      convlstm_release(model)
    })

    test_that(sprintf("Adam steps from a given state match PyTorch [%s]", label), {
      model <- forecast_model(fx, device)
      opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
      losses <- vapply(seq_len(cfg$adam_steps), function(i) {
        convlstm_train_step(model, fx$tensors$x, fx$tensors$y, opt, target = cfg$target,
                   state = fixture_state(fx))
      }, numeric(1))
      expect_adam_run(losses, convlstm_state_dict(model), fx, REL, label)
      expect_null(convlstm_carried_state(model)) # a given state is not kept
      convlstm_release(model)
    })
  }

  for (name in c("carry", "carry_last")) {
    fx <- forecast_fixture(name)
    cfg <- fx$config
    label <- paste(name, device)
    # the chunk of step i (0-based), as the fixture writer cuts it
    chunk_of <- function(i) ((i * cfg$chunk) %% cfg$T) + seq_len(cfg$chunk)
    target_of <- function(i) {
      if (cfg$target == "sequence") time_slice(fx$tensors$y, chunk_of(i))
      else fx$tensors$y[, i + 1L, , , ]
    }
    # each schedule of the same gradient must carry the state the same way
    # (tbptt changes the gradient: it has its own test below)
    schedules <- list(plain = list(), checkpoint = list(checkpoint = 1),
                      accumulation = list(accumulation_steps = 2))

    for (sched in names(schedules)) {
      test_that(sprintf("train steps carrying the state match PyTorch [%s, %s]", label, sched), {
        model <- forecast_model(fx, device)
        opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
        losses <- vapply(seq_len(cfg$adam_steps) - 1L, function(i) {
          args <- c(list(model, time_slice(fx$tensors$x, chunk_of(i)), target_of(i), opt,
                         target = cfg$target, state = "carry"), schedules[[sched]])
          do.call(convlstm_train_step, args)
        }, numeric(1))
        expect_adam_run(losses, convlstm_state_dict(model), fx, REL, paste(label, sched))
        expect_identical(convlstm_carried_state(model), as.integer(c(cfg$B, cfg$H, cfg$W)))
        convlstm_release(model)
      })
    }

    test_that(sprintf("tbptt windows hand the carried state on [%s]", label), {
      model <- forecast_model(fx, device)
      opt <- convlstm_optimizer_sgd(lr = 0)
      x <- fx$tensors$x
      T <- cfg$T
      first <- seq_len(T %/% 2)
      rest <- setdiff(seq_len(T), first)
      y <- array(0.5, c(cfg$B, length(rest), cfg$hidden_dims[[length(cfg$hidden_dims)]],
                        cfg$H, cfg$W))
      ys <- array(0.5, c(cfg$B, length(first), dim(y)[-(1:2)]))
      convlstm_train_step(model, time_slice(x, first), ys, opt, target = "sequence", state = "carry",
                 tbptt = 1)
      loss <- convlstm_train_step(model, time_slice(x, rest), y, opt, target = "sequence",
                         state = "carry", tbptt = 1)
      s1 <- model(time_slice(x, first))$layer_last_states
      pred <- predict(model, time_slice(x, rest), state = s1)
      expect_close(loss, mean((pred - y)^2), rel = REL, label = paste(label, "tbptt carry"))
      convlstm_release(model)
    })

    test_that(sprintf("convlstm_reset_state() starts the carried state from zeros again [%s]", label), {
      model <- forecast_model(fx, device)
      opt <- convlstm_optimizer_sgd(lr = 0) # parameters unchanged: only the state differs
      x0 <- time_slice(fx$tensors$x, chunk_of(0))
      first <- convlstm_train_step(model, x0, target_of(0), opt, target = cfg$target, state = "carry")
      second <- convlstm_train_step(model, x0, target_of(0), opt, target = cfg$target, state = "carry")
      expect_false(isTRUE(all.equal(first, second)))
      expect_true(convlstm_reset_state(model))
      expect_null(convlstm_carried_state(model))
      expect_false(convlstm_reset_state(model))
      again <- convlstm_train_step(model, x0, target_of(0), opt, target = cfg$target, state = "carry")
      expect_identical(again, first)
      convlstm_release(model)
    })
  }
}

for (device in forecast_devices) {
  fx <- forecast_fixture("rollout")
  cfg <- fx$config
  label <- paste("rollout", device)

  test_that(sprintf("predict(horizon = ) equals a PyTorch rollout [%s]", label), {
    model <- forecast_model(fx, device)
    frames <- predict(model, fx$tensors$x, horizon = cfg$horizon)
    expect_identical(dim(frames), as.integer(c(cfg$B, cfg$horizon, cfg$input_dim, cfg$H, cfg$W)))
    expect_close(frames, fx$tensors$frames, rel = REL, label = paste(label, "frames"))
    from_state <- predict(model, fx$tensors$x, horizon = cfg$horizon, state = fixture_state(fx),
                          batch_size = 1)
    expect_close(from_state, fx$tensors$frames_from_state, rel = REL,
                 label = paste(label, "frames from a state"))
    # frame 1 is the plain last state; a horizon of 1 is just that
    last <- predict(model, fx$tensors$x, what = "last_state")
    expect_equal(frames[, 1, , , ], last, tolerance = 1e-6)
    expect_equal(predict(model, fx$tensors$x, horizon = 1)[, 1, , , ], last, tolerance = 1e-6)
    convlstm_release(model)
  })

  test_that(sprintf("a forecast's memory is planned to the byte [%s]", label), {
    model <- forecast_model(fx, device)
    est <- convlstm_memory_estimate(model, cfg$B, cfg$T, cfg$H, cfg$W, training = FALSE,
                           horizon = cfg$horizon)
    plan <- attr(est, "plan")
    frames <- plan[plan$name == "frames", ]
    expect_identical(frames$bytes, 4 * cfg$horizon * cfg$B * cfg$input_dim * cfg$H * cfg$W)
    predict(model, fx$tensors$x, horizon = cfg$horizon)
    s <- convlstm_memory_stats(model)
    measured <- stats::setNames(s$by_category$peak, s$by_category$category)
    expect_identical(measured, stats::setNames(est$bytes, est$category)[names(measured)])
    # the rollout's memory does not grow with the horizon beyond the frames
    long <- convlstm_memory_estimate(model, cfg$B, cfg$T, cfg$H, cfg$W, training = FALSE, horizon = 40)
    grow <- estimate_bytes(long) - estimate_bytes(est)
    expect_identical(grow[["states"]], 0)
    expect_identical(grow[["activations"]], (40 - cfg$horizon) * 4 * cfg$B * cfg$input_dim *
                       cfg$H * cfg$W)
    convlstm_release(model)
  })
}

for (device in forecast_devices) {
  fx <- forecast_fixture("teacher")
  cfg <- fx$config
  label <- paste("teacher", device)
  y <- fx$tensors$y_frames
  schedules <- list(plain = list(), checkpoint = list(checkpoint = 2),
                    accumulation = list(accumulation_steps = 2))

  for (sched in names(schedules)) {
    test_that(sprintf("teacher-forced horizon training matches PyTorch [%s, %s]", label, sched), {
      model <- forecast_model(fx, device)
      opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
      losses <- numeric(cfg$adam_steps)
      for (i in seq_len(cfg$adam_steps)) {
        losses[[i]] <- do.call(convlstm_train_step, c(list(model, fx$tensors$x, y, opt,
                                                  horizon = cfg$horizon), schedules[[sched]]))
        if (i == 1) {
          g <- convlstm_gradients(model)
          expect_fixture_tensors(g, fx, "grad/", rel = REL, label = paste(label, sched, "grad"))
        }
      }
      expect_adam_run(losses, convlstm_state_dict(model), fx, REL, paste(label, sched))
      convlstm_release(model)
    })
  }

  test_that(sprintf("teacher-forced training is planned to the byte [%s]", label), {
    model <- forecast_model(fx, device)
    opt <- convlstm_optimizer_adam()
    est <- convlstm_memory_estimate(model, cfg$B, cfg$T, cfg$H, cfg$W, horizon = cfg$horizon,
                           optimizer = opt)
    convlstm_train_step(model, fx$tensors$x, y, opt, horizon = cfg$horizon)
    s <- convlstm_memory_stats(model)
    measured <- stats::setNames(s$by_category$peak, s$by_category$category)
    expect_identical(measured, estimate_bytes(est)[names(measured)])
    convlstm_release(model)
  })
}

# Free-running training: x, then the model's own frames fed back, the loss
# over the K predicted frames, backpropagated through the fed-back frames
# (PyTorch's rollout() under autograd). grad_detached/ are PyTorch's
# gradients with the fed-back frames detached: a step that cut that path
# would match them instead.
max_rel_diff <- function(g, fx, prefix) {
  max(vapply(names(g), function(k) {
    ref <- fx$tensors[[paste0(prefix, k)]]
    max(abs(g[[k]] - ref)) / max(abs(ref))
  }, numeric(1)))
}

for (device in forecast_devices) {
  # free_peep_*: peepholes (random, per position / per channel), whose
  # gradient takes the fed-back steps' dz too
  for (name in c("free_run", "free_run_deep", "free_run_one", "free_run_k2",
                 "free_peep_pos", "free_peep_ch")) {
    fx <- forecast_fixture(name)
    cfg <- fx$config
    label <- paste(name, device)
    y <- fx$tensors$y_frames
    schedules <- list(plain = list(), accumulation = list(accumulation_steps = 2))

    for (sched in names(schedules)) {
      test_that(sprintf("free-running horizon training matches PyTorch [%s, %s]", label, sched), {
        model <- forecast_model(fx, device)
        opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
        losses <- numeric(cfg$adam_steps)
        for (i in seq_len(cfg$adam_steps)) {
          losses[[i]] <- do.call(convlstm_train_step, c(list(model, fx$tensors$x, y, opt,
                                                    horizon = cfg$horizon,
                                                    teacher_forcing = FALSE),
                                               schedules[[sched]]))
          if (i == 1) {
            g <- convlstm_gradients(model)
            expect_fixture_tensors(g, fx, "grad/", rel = REL, label = paste(label, sched, "grad"))
            # the fed-back frames' gradient path is ten tolerances and more
            # here: cut, the comparison above would fail
            expect_gt(max_rel_diff(g, fx, "grad_detached/"), 10 * REL)
          }
        }
        expect_adam_run(losses, convlstm_state_dict(model), fx, REL, paste(label, sched))
        convlstm_release(model)
      })
    }
  }

  fx <- forecast_fixture("free_run")
  cfg <- fx$config
  label <- paste("free_run", device)

  test_that(sprintf("a free-running step's loss is predict()'s forecast error [%s]", label), {
    model <- forecast_model(fx, device)
    frames <- predict(model, fx$tensors$x, horizon = cfg$horizon)
    loss <- convlstm_train_step(model, fx$tensors$x, fx$tensors$y_frames, convlstm_optimizer_sgd(lr = 0),
                       horizon = cfg$horizon, teacher_forcing = FALSE)
    expect_close(loss, mean((frames - fx$tensors$y_frames)^2), rel = REL,
                 label = paste(label, "loss"))
    # and not the teacher-forced one
    forced <- convlstm_train_step(model, fx$tensors$x, fx$tensors$y_frames, convlstm_optimizer_sgd(lr = 0),
                         horizon = cfg$horizon)
    expect_gt(abs(forced - loss), 1e-4)
    convlstm_release(model)
  })

  test_that(sprintf("free-running from a given or carried state [%s]", label), {
    model <- forecast_model(fx, device)
    s0 <- model(fx$tensors$x)$layer_last_states
    frames <- predict(model, fx$tensors$x, horizon = cfg$horizon, state = s0)
    opt <- convlstm_optimizer_sgd(lr = 0)
    y <- fx$tensors$y_frames
    given <- convlstm_train_step(model, fx$tensors$x, y, opt, horizon = cfg$horizon,
                        teacher_forcing = FALSE, state = s0)
    expect_close(given, mean((frames - y)^2), rel = REL, label = paste(label, "given"))
    # carrying: the second step starts where the first one's last step ended
    # (after its fed-back frames)
    convlstm_train_step(model, fx$tensors$x, y, opt, horizon = cfg$horizon, teacher_forcing = FALSE,
               state = "carry")
    long <- predict(model, fx$tensors$x, horizon = cfg$horizon)
    fed <- long[, seq_len(cfg$horizon - 1), , , , drop = FALSE] # what the first step fed back
    s1 <- model(fed, state = s0)$layer_last_states
    carried <- convlstm_train_step(model, fx$tensors$x, y, opt, horizon = cfg$horizon,
                          teacher_forcing = FALSE, state = "carry")
    expect_close(carried, mean((predict(model, fx$tensors$x, horizon = cfg$horizon,
                                        state = s1) - y)^2),
                 rel = REL, label = paste(label, "carry"))
    convlstm_release(model)
  })

  test_that(sprintf("free-running training is planned to the byte [%s]", label), {
    model <- forecast_model(fx, device)
    opt <- convlstm_optimizer_adam()
    est <- convlstm_memory_estimate(model, cfg$B, cfg$T, cfg$H, cfg$W, horizon = cfg$horizon,
                           teacher_forcing = FALSE, optimizer = opt)
    plan <- attr(est, "plan")
    # its own d_cell per layer and the ring of two steps below the last
    expect_identical(sum(startsWith(plan$name, "d_cell[")), length(cfg$hidden_dims))
    ring <- plan[startsWith(plan$name, "d_hidden_rollout"), ]
    expect_identical(ring$bytes, 4 * 2 * cfg$B * cfg$hidden_dims[[1]] * cfg$H * cfg$W)
    convlstm_train_step(model, fx$tensors$x, fx$tensors$y_frames, opt, horizon = cfg$horizon,
               teacher_forcing = FALSE)
    s <- convlstm_memory_stats(model)
    measured <- stats::setNames(s$by_category$peak, s$by_category$category)
    expect_identical(measured, estimate_bytes(est)[names(measured)])
    convlstm_release(model)
  })
}

# Scheduled sampling (teacher_forcing a probability): each fed-back step
# reads the true frame or the model's own as R's generator draws. PyTorch's
# rollout() with the fixture's choices per Adam step (choices_<i>) is the
# reference; the seed that makes convlstm_train_step() draw each step's choices is
# found through stats::runif(), the generator ?convlstm_train_step names. grad_free/
# and grad_teacher/ are the gradients with every fed-back step the model's
# own or the truth: a step that ignored the coins would match one of them.
seed_drawing <- function(choices, p) {
  for (seed in seq_len(10000)) {
    set.seed(seed)
    if (identical(as.integer(stats::runif(length(choices)) < p), as.integer(choices))) {
      return(seed)
    }
  }
  stop("no seed draws ", paste(choices, collapse = ""))
}

for (device in forecast_devices) {
  for (name in c("sampled", "sampled_deep", "sampled_drop")) {
    fx <- forecast_fixture(name)
    cfg <- fx$config
    label <- paste(name, device)
    for (sched in c("plain", "accumulation")) {
      test_that(sprintf("scheduled sampling matches PyTorch's choices [%s, %s]", label, sched), {
        model <- convlstm(cfg$input_dim, cfg$hidden_dims, cfg$kernel_sizes, bias = cfg$bias,
                          device = device, dropout = cfg$dropout %||% 0,
                          recurrent_dropout = cfg$recurrent_dropout %||% 0,
                          dropout_masks = cfg$dropout_masks %||% "shared")
        on.exit(convlstm_release(model))
        convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
        if (!is.null(cfg$dropout)) convlstm:::local_dropout_masks(fixture_masks(fx))
        opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
        extra <- if (sched == "accumulation") list(accumulation_steps = 2) else list()
        losses <- numeric(cfg$adam_steps)
        p <- c(0.5, 0.3, 0.7)
        for (i in seq_len(cfg$adam_steps)) {
          choices <- cfg[[sprintf("choices_%d", i - 1L)]]
          set.seed(seed_drawing(choices, p[[i]]))
          losses[[i]] <- do.call(convlstm_train_step, c(list(model, fx$tensors$x, fx$tensors$y_frames,
                                                    opt, horizon = cfg$horizon,
                                                    teacher_forcing = p[[i]]), extra))
          if (i == 1) {
            g <- convlstm_gradients(model)
            expect_fixture_tensors(g, fx, "grad/", rel = REL, label = paste(label, sched, "grad"))
            expect_gt(max_rel_diff(g, fx, "grad_free/"), 10 * REL)
            expect_gt(max_rel_diff(g, fx, "grad_teacher/"), 10 * REL)
          }
        }
        expect_adam_run(losses, convlstm_state_dict(model), fx, REL, paste(label, sched))
      })
    }
  }
}
