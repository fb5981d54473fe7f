# test-parity-dropout.R -- dropout against PyTorch with the same masks
# (tests/testthat/fixtures/dropout/, written by tools/make_fixtures.py with
# inst/python/torch_convlstm.py's masks argument). The fixtures hold the
# masks (mask_x/<l>, mask_h/<l>: [B, C, H, W] shared by the gates, or
# [B, 4, C, H, W] per gate, where PyTorch runs four convolutions, each gate
# its own masked copy and weight rows, as Keras; config dropout_masks,
# absent: shared); local_dropout_masks() hands
# them to every training call instead of drawing new ones, so forward,
# gradients and three Adam steps (each step with the same masks, as the
# reference) must equal PyTorch's. Tolerance as test-parity-torch.R: both
# sides float32, 1e-5 of the largest value.

REL <- 1e-5
dropout_root <- testthat::test_path("fixtures", "dropout")
dropout_fixtures <- list.dirs(dropout_root, full.names = FALSE, recursive = FALSE)
parity_devices <- c("cpu", if (convlstm_gpu_available()) "cuda")

dropout_model <- function(fx, device) {
  cfg <- fx$config
  k <- fixture_kernels(cfg)
  model <- convlstm(cfg$input_dim, cfg$hidden_dims, k$kernel_sizes, bias = cfg$bias,
                    dilation = k$dilation, device = device,
                    dropout = cfg$dropout, recurrent_dropout = cfg$recurrent_dropout,
                    dropout_masks = cfg$dropout_masks %||% "shared")
  convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
  model
}

pred_of <- function(out, target) {
  n <- length(out[[1]])
  if (target == "last_state") out[[2]][[n]][[1]] else out[[1]][[n]]
}

test_that("the dropout fixtures are there", {
  expect_setequal(dropout_fixtures, c("both_two_layers", "mixed_last_state",
                                      "gate_two_layers", "gate_mixed_last"))
})

for (device in parity_devices) for (fixture in dropout_fixtures) {
  fx <- read_fixture(file.path("dropout", fixture))
  cfg <- fx$config
  name <- if (device == "cpu") fixture else paste(fixture, device)
  x <- fx$tensors$x
  y <- fx$tensors$y

  test_that(sprintf("dropout forward in train mode and gradients match PyTorch [%s]", name), {
    model <- dropout_model(fx, device)
    on.exit(convlstm_release(model))
    convlstm:::local_dropout_masks(fixture_masks(fx))
    model$train()
    out <- model(x)
    for (l in seq_along(cfg$hidden_dims)) {
      expect_close(out[[1]][[l]], fx$tensors[[sprintf("output/%d", l - 1)]], rel = REL,
                   label = sprintf("%s: output %d", name, l))
      expect_close(out[[2]][[l]][[2]], fx$tensors[[sprintf("last_c/%d", l - 1)]], rel = REL,
                   label = sprintf("%s: last c %d", name, l))
    }
    convlstm_zero_grad(model)
    pred <- pred_of(convlstm_forward(model, x, training = TRUE), cfg$target)
    expect_close(mean((pred - y)^2), fx$tensors$loss, rel = REL, label = paste(name, "loss"))
    convlstm_backward(model, 2 * (pred - y) / length(y))
    g <- convlstm_gradients(model)
    for (k in names(fixture_group(fx, "grad/"))) {
      expect_close(g[[k]], fixture_group(fx, "grad/")[[k]], rel = REL,
                   label = paste(name, "gradient", k))
    }
  })

  test_that(sprintf("three Adam steps with dropout match PyTorch [%s]", name), {
    model <- dropout_model(fx, device)
    on.exit(convlstm_release(model))
    convlstm:::local_dropout_masks(fixture_masks(fx))
    opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
    losses <- vapply(seq_len(cfg$adam_steps), function(s) {
      as.numeric(convlstm_train_step(model, x, y, opt, target = cfg$target))
    }, numeric(1))
    expect_close(losses, fx$tensors$adam_losses, rel = REL, label = paste(name, "Adam losses"))
    sd <- convlstm_state_dict(model)
    for (k in names(fixture_group(fx, "adam_params/"))) {
      expect_close(sd[[k]], fixture_group(fx, "adam_params/")[[k]], rel = REL,
                   label = paste(name, "parameters after Adam", k))
    }
  })
}
