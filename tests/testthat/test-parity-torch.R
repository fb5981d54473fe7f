# test-parity-torch.R -- the package against PyTorch, fixture by fixture
# (tests/testthat/fixtures/, written by tools/make_fixtures.py from a PyTorch
# ConvLSTM identical to the R torch tutorial's). Same initial weights and data;
# compared: every layer output, the last states, the MSE loss, every parameter
# gradient after one backward, and three Adam steps (losses and parameters).
#
# Tolerance: |ours - torch| <= 1e-5 * max|torch| + 1e-8 per tensor. Both sides
# compute in float32; the fixtures record that float32 itself is about 2e-7
# (relative to the largest value) from the float64 result, so 1e-5 leaves room
# for a different summation order and nothing else. On the CPU backend the
# largest difference over all 182 comparisons was 3.2e-7 when this was written
# (outputs and states 3.2e-7, gradients 3.1e-7, parameters after Adam 2.5e-7,
# losses 1.1e-7). CONVLSTM_PARITY_REPORT=<file.csv> records them (end of file).

REL <- 1e-5

# Every backend this build can run is held to the same fixtures (the CUDA
# backend keeps float32 convolutions off TF32, so the same tolerance applies).
parity_devices <- c("cpu", if (convlstm_gpu_available()) "cuda")

fixture_model <- function(fx, device = "cpu") {
  cfg <- fx$config
  k <- fixture_kernels(cfg)
  model <- convlstm(cfg$input_dim, cfg$hidden_dims, k$kernel_sizes, bias = cfg$bias,
                    device = device, dilation = k$dilation)
  convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
  model
}

prediction_of <- function(out, target) {
  n <- length(out[[1]])
  if (target == "last_state") out[[2]][[n]][[1]] else out[[1]][[n]]
}

expect_state_dict_close <- function(actual, expected, label) {
  expect_setequal(names(actual), names(expected))
  for (k in names(expected)) {
    expect_close(actual[[k]], expected[[k]], rel = REL, label = paste(label, k))
  }
}

for (device in parity_devices) for (fixture in fixture_names()) {
  fx <- read_fixture(fixture)
  name <- if (device == "cpu") fixture else paste(fixture, device)
  cfg <- fx$config
  x <- fx$tensors$x
  y <- fx$tensors$y

  test_that(sprintf("state_dict round-trips the PyTorch weights [%s]", name), {
    model <- fixture_model(fx, device)
    sd <- convlstm_state_dict(model)
    weights <- fixture_group(fx, "weights/")
    expect_identical(names(sd), names(weights))
    for (k in names(weights)) {
      # float32 values go in and come out unchanged
      expect_close(sd[[k]], weights[[k]], rel = 0, abs = 0, label = paste(name, k))
    }
  })

  test_that(sprintf("forward matches PyTorch [%s]", name), {
    model <- fixture_model(fx, device)
    out <- model(x)
    expect_length(out[[1]], length(cfg$hidden_dims))
    expect_length(out[[2]], length(cfg$hidden_dims))
    for (l in seq_along(cfg$hidden_dims)) {
      i <- l - 1L
      expect_close(out[[1]][[l]], fx$tensors[[sprintf("output/%d", i)]], rel = REL,
                   label = sprintf("%s: output %d", name, l))
      expect_close(out[[2]][[l]][[1]], fx$tensors[[sprintf("last_h/%d", i)]], rel = REL,
                   label = sprintf("%s: last h %d", name, l))
      expect_close(out[[2]][[l]][[2]], fx$tensors[[sprintf("last_c/%d", i)]], rel = REL,
                   label = sprintf("%s: last c %d", name, l))
    }
    loss <- mean((prediction_of(out, cfg$target) - y)^2)
    expect_close(loss, fx$tensors$loss, rel = REL, label = paste(name, "loss from model(x)"))
  })

  test_that(sprintf("loss gradients match PyTorch [%s]", name), {
    model <- fixture_model(fx, device)
    convlstm_zero_grad(model)
    pred <- prediction_of(convlstm_forward(model, x, training = TRUE), cfg$target)
    last <- length(cfg$hidden_dims) - 1L
    expected <- if (cfg$target == "last_state") "last_h/%d" else "output/%d"
    expect_close(pred, fx$tensors[[sprintf(expected, last)]], rel = REL,
                 label = paste(name, "convlstm_forward"))
    expect_close(mean((pred - y)^2), fx$tensors$loss, rel = REL, label = paste(name, "loss"))
    # d mean((pred - y)^2) / d pred, as torch's mse_loss backward gives it
    convlstm_backward(model, 2 * (pred - y) / length(y))
    expect_state_dict_close(convlstm_gradients(model), fixture_group(fx, "grad/"),
                            paste(name, "gradient"))
  })

  test_that(sprintf("three Adam steps match PyTorch [%s]", name), {
    model <- fixture_model(fx, device)
    opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
    losses <- numeric(cfg$adam_steps)
    for (s in seq_len(cfg$adam_steps)) {
      losses[s] <- convlstm_train_step(model, x, y, opt, target = cfg$target)
      if (s == 1) {
        # the one-call step computes the gradient the R-level backward does
        expect_state_dict_close(convlstm_gradients(model), fixture_group(fx, "grad/"),
                                paste(name, "train_step gradient"))
      }
    }
    expect_close(losses, fx$tensors$adam_losses, rel = REL, label = paste(name, "Adam losses"))
    expect_state_dict_close(convlstm_state_dict(model), fixture_group(fx, "adam_params/"),
                            paste(name, "parameters after Adam"))
    after <- mean((prediction_of(model(x), cfg$target) - y)^2)
    expect_close(after, fx$tensors$adam_loss_after, rel = REL,
                 label = paste(name, "loss after Adam"))
  })
}

test_that("the R-level loop (forward, backward, optimizer_step) equals train_step", {
  fx <- read_fixture("three_layers_k135")
  cfg <- fx$config
  a <- fixture_model(fx)
  b <- fixture_model(fx)
  opt_a <- convlstm_optimizer_adam(lr = cfg$adam_lr)
  opt_b <- convlstm_optimizer_adam(lr = cfg$adam_lr)
  for (s in seq_len(cfg$adam_steps)) {
    convlstm_zero_grad(a)
    pred <- prediction_of(convlstm_forward(a, fx$tensors$x, training = TRUE), cfg$target)
    convlstm_backward(a, 2 * (pred - fx$tensors$y) / length(fx$tensors$y))
    convlstm_optimizer_step(a, opt_a)
    convlstm_train_step(b, fx$tensors$x, fx$tensors$y, opt_b, target = cfg$target)
  }
  expect_state_dict_close(convlstm_state_dict(a), fixture_group(fx, "adam_params/"),
                          "R-level loop after Adam")
  expect_state_dict_close(convlstm_state_dict(a), convlstm_state_dict(b), "R-level loop vs train_step")
})

# For the record, not a test: CONVLSTM_PARITY_REPORT=<file.csv> writes every
# comparison's largest absolute and relative difference.
if (nzchar(Sys.getenv("CONVLSTM_PARITY_REPORT"))) {
  utils::write.csv(do.call(rbind, parity_log$rows), Sys.getenv("CONVLSTM_PARITY_REPORT"),
                   row.names = FALSE)
}
