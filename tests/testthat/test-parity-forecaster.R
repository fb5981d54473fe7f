# test-parity-forecaster.R -- Shi et al.'s encoder-forecaster
# (convlstm_forecaster()) against PyTorch's EncoderForecaster
# (inst/python/torch_convlstm.py; fixtures in tests/testthat/fixtures/forecaster/,
# written by tools/make_fixtures_forecaster.py): the forecast and a longer
# prediction, both losses' reductions, every gradient, RMSprop's and Adam's
# steps. The one fixture of two input channels and 2 x 2 patches also holds
# the forecasts of two wrong models (TensorFlow's space_to_depth channel
# order; the head reading the forecaster's states last layer first): ours
# must be far from both. Tolerance as test-parity-torch.R:
# |ours - torch| <= 1e-5 * max|torch| + 1e-8.

REL <- 1e-5
forecaster_devices <- c("cpu", if (convlstm_gpu_available()) "cuda")
forecaster_fixtures <- c("l1_p1", "l1_p4", "l2_nopeep", "l2_p2_c2", "l2_two_kernels")

forecaster_model <- function(fx, device) {
  cfg <- fx$config
  k <- fixture_kernels(cfg)
  model <- convlstm_forecaster(cfg$input_dim, cfg$hidden_dims, k$kernel_sizes, patch = cfg$patch,
                               recurrent_kernel_sizes = k$recurrent_kernel_sizes,
                               peephole = cfg$peephole, bias = cfg$bias, device = device)
  convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
  model
}

test_that("the forecaster fixtures are there", {
  found <- list.dirs(testthat::test_path("fixtures", "forecaster"), full.names = FALSE,
                     recursive = FALSE)
  expect_setequal(found, forecaster_fixtures)
})

for (device in forecaster_devices) for (name in forecaster_fixtures) {
  fx <- read_fixture(file.path("forecaster", name))
  cfg <- fx$config
  label <- paste(name, device)
  x <- fx$tensors$x
  y <- fx$tensors$y

  test_that(sprintf("encoder-forecaster: forecasts match PyTorch [%s]", label), {
    model <- forecaster_model(fx, device)
    on.exit(convlstm_release(model))
    out <- predict(model, x, horizon = cfg$T_out)
    expect_close(out, fx$tensors$output, rel = REL, label = paste(label, "forecast"))
    long <- predict(model, x, horizon = cfg$predict_horizon)
    expect_close(long, fx$tensors$output_predict, rel = REL, label = paste(label, "longer forecast"))
    for (wrong in grep("^wrong/", names(fx$tensors), value = TRUE)) {
      gap <- max(abs(out - fx$tensors[[wrong]])) / max(abs(fx$tensors[[wrong]]))
      expect_gt(gap, 100 * REL, label = paste(label, wrong))
    }
  })

  test_that(sprintf("encoder-forecaster: losses and gradients match PyTorch [%s]", label), {
    for (reduction in c("sum", "batchmean")) {
      model <- forecaster_model(fx, device)
      # a step of learning rate 0 leaves the weights and keeps its gradients
      loss <- convlstm_train_step(model, x, y, convlstm_optimizer_sgd(lr = 0), loss = "bce_logits",
                         reduction = reduction)
      want <- fx$tensors[[paste0("loss_", reduction)]]
      expect_close(loss, want, rel = REL, label = paste(label, reduction, "loss"))
      if (identical(reduction, cfg$reduction)) {
        g <- convlstm_gradients(model)
        expect_setequal(names(g), names(fixture_group(fx, "grad/")))
        expect_fixture_tensors(g, fx, "grad/", rel = REL, label = paste(label, "grad"))
      }
      expect_fixture_tensors(convlstm_state_dict(model), fx, "weights/", rel = 0,
                             label = paste(label, "unchanged"))
      convlstm_release(model)
    }
  })

  optimizers <- list(
    rmsprop = function() convlstm_optimizer_rmsprop(cfg$rmsprop_lr, alpha = cfg$rmsprop_alpha,
                                           eps = cfg$rmsprop_eps, momentum = cfg$rmsprop_momentum,
                                           centered = cfg$rmsprop_centered,
                                           weight_decay = cfg$rmsprop_weight_decay),
    adam = function() convlstm_optimizer_adam(cfg$adam_lr, weight_decay = cfg$adam_weight_decay))
  for (opt_kind in names(optimizers)) {
    test_that(sprintf("encoder-forecaster: %s steps match PyTorch [%s]", opt_kind, label), {
      model <- forecaster_model(fx, device)
      on.exit(convlstm_release(model))
      opt <- optimizers[[opt_kind]]()
      losses <- vapply(seq_len(cfg$steps), function(i) {
        convlstm_train_step(model, x, y, opt, loss = "bce_logits", reduction = cfg$reduction)
      }, 0)
      expect_close(losses, fx$tensors[[paste0(opt_kind, "_losses")]], rel = REL,
                   label = paste(label, opt_kind, "losses"))
      # After the first step, RMSprop and Adam divide a gradient by its own
      # running size, so a weight moves by lr times a ratio of gradients:
      # the fixtures' seeds keep every gradient element >= 100 times its
      # float32 error (README), which bounds each step's move to within
      # lr / 100 of PyTorch's. A wrong update (a missing bias correction,
      # alpha or centring ignored) moves weights by a sizeable part of lr.
      lr <- cfg[[paste0(opt_kind, "_lr")]]
      sd <- convlstm_state_dict(model)
      for (k in names(sd)) {
        expect_close(sd[[k]], fx$tensors[[paste0(opt_kind, "_params/", k)]], rel = REL,
                     abs = cfg$steps * lr / 100, label = paste(label, opt_kind, "params", k))
      }
    })
  }
}
