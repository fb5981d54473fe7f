# test-parity-peephole.R -- peephole connections (Shi et al. 2015) against
# PyTorch, per position and per channel: the forward, every gradient
# (peepholes included), a forward from a given state, Adam steps, and the
# mixed-precision storage types (tests/testthat/fixtures/peephole/, written by
# tools/make_fixtures_peephole.py from inst/python/torch_convlstm.py). Same
# tolerance as test-parity-torch.R: |ours - torch| <= 1e-5 * max|torch| + 1e-8.
# The fixtures also hold the outputs of three wrong cells (no peephole terms;
# the o gate on c_{t-1}; i and f on the new c), and each test of the forward
# checks that they lie far outside that tolerance, so it fails if the package
# made one of those mistakes.

REL <- 1e-5
peep_devices <- c("cpu", if (convlstm_gpu_available()) "cuda")

peep_fixture <- function(name) read_fixture(file.path("peephole", name))

peep_model <- function(fx, device, dtype = "float32") {
  cfg <- fx$config
  model <- convlstm(cfg$input_dim, cfg$hidden_dims, cfg$kernel_sizes, bias = cfg$bias,
                    device = device, dtype = dtype, peephole = cfg$peephole,
                    frame_size = cfg$frame_size)
  convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
  model
}

# Scaled distance between two arrays, the measure expect_close() bounds.
scaled_diff <- function(a, b) max(abs(a - b)) / max(abs(b))

for (device in peep_devices) {
  for (name in c("position", "channel")) {
    fx <- peep_fixture(name)
    cfg <- fx$config
    label <- paste(name, device)
    n_layers <- length(cfg$hidden_dims)

    test_that(sprintf("a forward with peepholes matches PyTorch, not a wrong cell [%s]", label), {
      model <- peep_model(fx, device)
      out <- model(fx$tensors$x)
      for (l in seq_len(n_layers)) {
        i <- l - 1L
        want <- fx$tensors[[sprintf("output/%d", i)]]
        expect_close(out[[1]][[l]], want, rel = REL, label = sprintf("%s: output %d", label, l))
        expect_close(out[[2]][[l]]$c, fx$tensors[[sprintf("last_c/%d", i)]], rel = REL,
                     label = sprintf("%s: last c %d", label, l))
        for (mistake in c("no_peephole", "o_sees_c_prev", "if_see_c_t")) {
          wrong <- fx$tensors[[sprintf("wrong/%s/%d", mistake, i)]]
          # a wrong cell is at least 100 times the tolerance away
          expect_gt(scaled_diff(wrong, want), 100 * REL)
          expect_gt(scaled_diff(out[[1]][[l]], wrong), 100 * REL)
        }
      }
      convlstm_release(model)
    })

    test_that(sprintf("gradients with peepholes match PyTorch [%s]", label), {
      model <- peep_model(fx, device)
      convlstm_zero_grad(model)
      pred <- convlstm_forward(model, fx$tensors$x, target = cfg$target)
      loss <- mean((pred - fx$tensors$y)^2)
      expect_close(loss, fx$tensors$loss, rel = REL, label = paste(label, "loss"))
      convlstm_backward(model, 2 * (pred - fx$tensors$y) / length(pred))
      g <- convlstm_gradients(model)
      expect_setequal(names(g), sub("^grad/", "", grep("^grad/", names(fx$tensors), value = TRUE)))
      expect_fixture_tensors(g, fx, "grad/", rel = REL, label = paste(label, "grad"))
      expect_gt(max(abs(g[["cell_list.0.w_co"]])), 0)
      convlstm_release(model)
    })

    test_that(sprintf("a forward with peepholes from a given state matches PyTorch [%s]", label), {
      model <- peep_model(fx, device)
      state <- lapply(seq_len(n_layers) - 1L, function(i) {
        list(h = fx$tensors[[sprintf("state_h/%d", i)]], c = fx$tensors[[sprintf("state_c/%d", i)]])
      })
      out <- model(fx$tensors$x, state = state, outputs = "last_state")
      for (l in seq_len(n_layers)) {
        expect_close(out[[2]][[l]]$h, fx$tensors[[sprintf("from_state/last_h/%d", l - 1L)]],
                     rel = REL, label = sprintf("%s: h from a state %d", label, l))
        expect_close(out[[2]][[l]]$c, fx$tensors[[sprintf("from_state/last_c/%d", l - 1L)]],
                     rel = REL, label = sprintf("%s: c from a state %d", label, l))
      }
      convlstm_release(model)
    })

    # the same gradient by every schedule: checkpoint segments recompute the
    # cell (peepholes included) and accumulation sums micro-batches' weight
    # gradients
    schedules <- list(plain = list(), checkpoint = list(checkpoint = 1),
                      accumulation = list(accumulation_steps = 2))
    for (sched in names(schedules)) {
      test_that(sprintf("Adam steps with peepholes match PyTorch [%s, %s]", label, sched), {
        model <- peep_model(fx, device)
        opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
        losses <- vapply(seq_len(cfg$adam_steps), function(i) {
          do.call(convlstm_train_step, c(list(model, fx$tensors$x, fx$tensors$y, opt,
                                     target = cfg$target), schedules[[sched]]))
        }, numeric(1))
        after <- convlstm_state_dict(model)
        expect_adam_run(losses, after, fx, REL, paste(label, sched))
        # the peepholes moved: the optimizer counts them
        moved <- after[["cell_list.0.w_ci"]] - fx$tensors[["weights/cell_list.0.w_ci"]]
        expect_gt(max(abs(moved)), 0.5 * cfg$adam_lr)
        convlstm_release(model)
      })
    }

    # Half storage rounds activations (float16 to 2^-11, bfloat16 to 2^-8),
    # compounded over steps and layers (measured: 5e-4 and 6e-3 of the
    # largest output); the bounds sit above that and below half the
    # distance to the nearest wrong cell (1.8e-2).
    for (dtype in c("float16", "bfloat16")) {
      test_that(sprintf("a %s forward and gradients with peepholes track PyTorch [%s]", dtype,
                        label), {
        tol <- if (dtype == "float16") 2e-3 else 8e-3
        model <- peep_model(fx, device, dtype)
        out <- model(fx$tensors$x)
        for (l in seq_len(n_layers)) {
          want <- fx$tensors[[sprintf("output/%d", l - 1L)]]
          expect_lt(scaled_diff(out[[1]][[l]], want), tol)
          for (mistake in c("no_peephole", "o_sees_c_prev", "if_see_c_t"))
            expect_gt(scaled_diff(fx$tensors[[sprintf("wrong/%s/%d", mistake, l - 1L)]], want),
                      2 * tol)
        }
        convlstm_zero_grad(model)
        pred <- convlstm_forward(model, fx$tensors$x, target = cfg$target)
        convlstm_backward(model, 2 * (pred - fx$tensors$y) / length(pred))
        g <- convlstm_gradients(model)
        for (k in grep("w_c", names(g), value = TRUE)) {
          expect_lt(scaled_diff(g[[k]], fx$tensors[[paste0("grad/", k)]]), 2 * tol)
        }
        convlstm_release(model)
      })
    }
  }
}
