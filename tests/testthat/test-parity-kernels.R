# test-parity-kernels.R -- cells of two kernels (`recurrent_kernel_sizes`):
# an input-to-state kernel and a different state-to-state kernel, as Shi et
# al.'s "ConvLSTM(9x9)-1x1". Against PyTorch (tests/testthat/fixtures/kernels/,
# written by tools/make_fixtures_kernels.py from inst/python/torch_convlstm.py's
# cell of two convolutions): the forward, every gradient and optimizer steps,
# by several schedules. Then, without fixtures, a cell of a 3x3 input kernel
# and a 1x1 state kernel is the one-kernel 3x3 cell whose state taps are zero
# but the centre: the two models must agree by every schedule (free-running
# forecasts, tbptt, checkpoints, recomputed gates, dropout, peepholes).
# Tolerance as test-parity-torch.R: |ours - torch| <= 1e-5 * max|torch| + 1e-8.

REL <- 1e-5
kernel_devices <- c("cpu", if (convlstm_gpu_available()) "cuda")
kernel_fixtures <- c("k9_h1", "k3x5_h5x3", "mixed_dropout")

kernel_model <- function(fx, device) {
  cfg <- fx$config
  k <- fixture_kernels(cfg)
  model <- convlstm(cfg$input_dim, cfg$hidden_dims, k$kernel_sizes, bias = cfg$bias,
                    dilation = k$dilation, recurrent_kernel_sizes = k$recurrent_kernel_sizes,
                    peephole = cfg$peephole %||% FALSE, device = device,
                    dropout = cfg$dropout %||% 0, recurrent_dropout = cfg$recurrent_dropout %||% 0,
                    dropout_masks = cfg$dropout_masks %||% "per_gate")
  convlstm_load_state_dict(model, fixture_group(fx, "weights/"))
  model
}

scaled_gap <- function(a, b) max(abs(a - b)) / max(abs(b))

test_that("the kernel fixtures are there", {
  found <- list.dirs(testthat::test_path("fixtures", "kernels"), full.names = FALSE,
                     recursive = FALSE)
  expect_setequal(found, kernel_fixtures)
})

for (device in kernel_devices) for (name in kernel_fixtures) {
  fx <- read_fixture(file.path("kernels", name))
  cfg <- fx$config
  label <- paste(name, device)
  x <- fx$tensors$x
  y <- fx$tensors$y
  masks <- if (!is.null(cfg$dropout)) fixture_masks(fx)

  test_that(sprintf("two kernels: forward and gradients match PyTorch [%s]", label), {
    model <- kernel_model(fx, device)
    on.exit(convlstm_release(model))
    if (!is.null(masks)) {
      convlstm:::local_dropout_masks(masks)
      model$train()
    }
    out <- model(x)
    for (l in seq_along(cfg$hidden_dims)) {
      want <- fx$tensors[[sprintf("output/%d", l - 1)]]
      expect_close(out[[1]][[l]], want, rel = REL, label = sprintf("%s: output %d", label, l))
      expect_close(out[[2]][[l]]$c, fx$tensors[[sprintf("last_c/%d", l - 1)]], rel = REL,
                   label = sprintf("%s: last c %d", label, l))
      # dilation applies to both kernels: Keras's undilated state kernel is
      # far outside the tolerance
      wrong <- fx$tensors[[sprintf("wrong/h_undilated/%d", l - 1)]]
      if (!is.null(wrong)) expect_gt(scaled_gap(out[[1]][[l]], wrong), 100 * REL)
    }
    convlstm_zero_grad(model)
    pred <- convlstm_forward(model, x, training = TRUE, target = cfg$target)
    expect_close(mean((pred - y)^2), fx$tensors$loss, rel = REL, label = paste(label, "loss"))
    convlstm_backward(model, 2 * (pred - y) / length(pred))
    g <- convlstm_gradients(model)
    expect_setequal(names(g), sub("^grad/", "", grep("^grad/", names(fx$tensors), value = TRUE)))
    expect_fixture_tensors(g, fx, "grad/", rel = REL, label = paste(label, "grad"))
  })

  opt_kind <- if (!is.null(cfg$sgd_lr)) "sgd" else "adam"
  schedules <- list(plain = list(), checkpoint = list(checkpoint = 2),
                    recompute = list(recompute_gates = 1),
                    accumulation = list(accumulation_steps = 2))
  for (sched in names(schedules)) {
    test_that(sprintf("two kernels: %s steps match PyTorch [%s, %s]", opt_kind, label, sched), {
      model <- kernel_model(fx, device)
      on.exit(convlstm_release(model))
      if (!is.null(masks)) convlstm:::local_dropout_masks(masks)
      opt <- if (opt_kind == "sgd") convlstm_optimizer_sgd(cfg$sgd_lr, momentum = cfg$sgd_momentum) else
        convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
      steps <- cfg[[paste0(opt_kind, "_steps")]]
      losses <- vapply(seq_len(steps), function(i) {
        do.call(convlstm_train_step, c(list(model, x, y, opt, target = cfg$target), schedules[[sched]]))
      }, numeric(1))
      expect_close(losses, fx$tensors[[paste0(opt_kind, "_losses")]], rel = REL,
                   label = paste(label, sched, "losses"))
      expect_fixture_tensors(convlstm_state_dict(model), fx, paste0(opt_kind, "_params/"), rel = REL,
                             label = paste(label, sched, "params"))
    })
  }
}

test_that("recurrent_kernel_sizes: names, shapes, counts, read-back and printing", {
  set.seed(3)
  m <- convlstm(2, c(4, 3), kernel_sizes = 9, recurrent_kernel_sizes = list(1, c(3, 5)),
                device = "cpu")
  on.exit(convlstm_release(m))
  sd <- convlstm_state_dict(m)
  expect_identical(names(sd), c("cell_list.0.conv_x.weight", "cell_list.0.conv_x.bias",
                                "cell_list.0.conv_h.weight", "cell_list.1.conv_x.weight",
                                "cell_list.1.conv_x.bias", "cell_list.1.conv_h.weight"))
  expect_identical(dim(sd[["cell_list.0.conv_x.weight"]]), c(16L, 2L, 9L, 9L))
  expect_identical(dim(sd[["cell_list.0.conv_h.weight"]]), c(16L, 4L, 1L, 1L))
  expect_identical(dim(sd[["cell_list.1.conv_h.weight"]]), c(12L, 3L, 3L, 5L))
  # each convolution is initialised for its own fan-in, as torch's nn_conv2d
  expect_lte(max(abs(sd[["cell_list.0.conv_x.weight"]])), 1 / sqrt(2 * 81))
  expect_gt(max(abs(sd[["cell_list.0.conv_h.weight"]])), 1 / sqrt(2 * 81 + 4))
  expect_lte(max(abs(sd[["cell_list.0.conv_h.weight"]])), 1 / sqrt(4))
  expect_identical(m$recurrent_kernel_sizes, list(c(1L, 1L), c(3L, 5L)))
  expect_identical(m$kernel_sizes, c(9L, 9L))
  n <- 16 * (2 * 81 + 4 * 1) + 16 + 12 * (4 * 81 + 3 * 15) + 12
  expect_identical(m$n_parameters, n)
  expect_identical(sum(vapply(sd, length, 1L)), as.integer(n))
  expect_output(print(m), "9x9-1x1")
  expect_output(print(summary(m)), "9x9-3x5")
  # equal kernels given apart: the one-kernel model, its names and its draws
  set.seed(4)
  a <- convlstm(1, 3, 3, device = "cpu")
  set.seed(4)
  b <- convlstm(1, 3, 3, recurrent_kernel_sizes = 3, device = "cpu")
  expect_identical(convlstm_state_dict(a), convlstm_state_dict(b))
  expect_identical(b$recurrent_kernel_sizes, 3L)
  convlstm_release(a)
  convlstm_release(b)
})

test_that("bad recurrent_kernel_sizes get classed errors naming the argument", {
  expect_convlstm_error(convlstm(1, 3, 3, recurrent_kernel_sizes = 2, device = "cpu"),
                        regexp = "`recurrent_kernel_sizes` must be odd")
  expect_convlstm_error(convlstm(1, 3, 3, recurrent_kernel_sizes = 0, device = "cpu"),
                        regexp = "recurrent_kernel_sizes")
  expect_convlstm_error(convlstm(1, 3, 3, recurrent_kernel_sizes = -1, device = "cpu"),
                        regexp = "recurrent_kernel_sizes")
  expect_convlstm_error(convlstm(1, 3, 3, recurrent_kernel_sizes = 1.5, device = "cpu"),
                        regexp = "recurrent_kernel_sizes")
  expect_convlstm_error(convlstm(1, c(3, 3, 3), 3, recurrent_kernel_sizes = c(1, 3),
                                 device = "cpu"),
                        regexp = "`recurrent_kernel_sizes`.*length 1 or `n_layers` \\(3\\)")
  expect_convlstm_error(convlstm(1, 3, 3, recurrent_kernel_sizes = list(c(3, 4)),
                                 device = "cpu"),
                        regexp = "`recurrent_kernel_sizes` must be odd")
  expect_convlstm_error(convlstm(1, 3, 3, recurrent_kernel_sizes = "1", device = "cpu"),
                        regexp = "recurrent_kernel_sizes")
})

test_that("a model of two kernels saves, loads and refuses another geometry", {
  set.seed(5)
  m <- convlstm(1, c(3, 1), 5, recurrent_kernel_sizes = list(1, c(3, 1)), peephole = "channel",
                device = "cpu")
  on.exit(convlstm_release(m))
  x <- array(runif(2 * 3 * 1 * 6 * 5), c(2, 3, 1, 6, 5))
  y <- array(runif(2 * 1 * 6 * 5), c(2, 1, 6, 5))
  opt <- convlstm_optimizer_adam(lr = 0.01)
  convlstm_train_step(m, x, y, opt)
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(m, path, optimizer = opt)
  info <- convlstm_file_info(path)
  expect_identical(info$config$recurrent_kernel_sizes, list(c(1L, 1L), c(3L, 1L)))
  expect_true("cell_list.1.conv_h.weight" %in% info$tensors$name)
  back <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(back), add = TRUE)
  expect_identical(convlstm_state_dict(back), convlstm_state_dict(m))
  expect_identical(back$recurrent_kernel_sizes, m$recurrent_kernel_sizes)
  expect_identical(predict(back, x), predict(m, x))
  # training resumes exactly: the optimizer's moments came back too
  opt2 <- attr(back, "optimizer")
  expect_identical(convlstm_train_step(back, x, y, opt2), convlstm_train_step(m, x, y, opt))
  expect_identical(convlstm_state_dict(back), convlstm_state_dict(m))
  # a model whose state kernels differ refuses the file's weights
  other <- convlstm(1, c(3, 1), 5, recurrent_kernel_sizes = 3, peephole = "channel",
                    device = "cpu")
  on.exit(convlstm_release(other), add = TRUE)
  expect_error(convlstm_load_state_dict(other, convlstm_state_dict(m)), class = "convlstm_error")
})

# The weights of a one-kernel 3x3 model equal to a 3x3-1x1 model's:
# conv.weight's state taps all zero but the centre, which is conv_h's.
embed_1x1 <- function(sd, n_layers, ins) {
  out <- list()
  for (l in seq_len(n_layers) - 1L) {
    p <- sprintf("cell_list.%d.", l)
    wx <- sd[[paste0(p, "conv_x.weight")]]
    wh <- sd[[paste0(p, "conv_h.weight")]]
    d <- dim(wx)
    w <- array(0, c(d[1], d[2] + dim(wh)[2], d[3], d[4]))
    w[, seq_len(d[2]), , ] <- wx
    w[, d[2] + seq_len(dim(wh)[2]), (d[3] + 1) / 2, (d[4] + 1) / 2] <- wh[, , 1, 1]
    out[[paste0(p, "conv.weight")]] <- w
    out[[paste0(p, "conv.bias")]] <- sd[[paste0(p, "conv_x.bias")]]
    for (k in c("w_ci", "w_cf", "w_co")) out[[paste0(p, k)]] <- sd[[paste0(p, k)]]
  }
  out[!vapply(out, is.null, TRUE)]
}

test_that("a 3x3-1x1 cell is the 3x3 cell with centre-only state taps, by every schedule", {
  set.seed(6)
  B <- 2; T <- 5; H <- 5; W <- 6
  x <- array(runif(B * T * 2 * H * W), c(B, T, 2, H, W))
  runs <- list(
    plain = list(),
    forecast_free_running = list(horizon = 3, teacher_forcing = FALSE),
    forecast_teacher = list(horizon = 3, teacher_forcing = TRUE),
    tbptt = list(tbptt = 2),
    checkpoint = list(checkpoint = 2),
    recompute_gates = list(recompute_gates = 2),
    checkpoint_recompute = list(checkpoint = 3, recompute_gates = 2)
  )
  for (peephole in c("none", "channel")) for (drop in c(0, 0.3)) for (run in names(runs)) {
    info <- sprintf("%s, peephole %s, dropout %g", run, peephole, drop)
    set.seed(7)
    two <- convlstm(2, c(3, 2), 3, recurrent_kernel_sizes = 1, peephole = peephole,
                    dropout = drop, recurrent_dropout = drop, device = "cpu")
    one <- convlstm(2, c(3, 2), 3, peephole = peephole, dropout = drop,
                    recurrent_dropout = drop, device = "cpu")
    sd <- convlstm_state_dict(two)
    if (peephole != "none") { # nonzero peepholes, so that they count
      for (k in grep("w_c", names(sd), value = TRUE)) sd[[k]][] <- runif(length(sd[[k]]), -1, 1)
      convlstm_load_state_dict(two, sd)
    }
    convlstm_load_state_dict(one, embed_1x1(sd, 2, c(2, 3)))
    args <- runs[[run]]
    # a free-running forecast feeds the last layer's h back as the input
    xin <- if (is.null(args$horizon)) x else x[, seq_len(T - args$horizon), , , , drop = FALSE]
    if (!is.null(args$horizon)) {
      # input 2 channels, last hidden 2: the fed-back frame goes through conv_x
      y <- array(runif(B * args$horizon * 2 * H * W), c(B, args$horizon, 2, H, W))
      target <- "sequence"
    } else {
      y <- array(runif(B * T * 2 * H * W), c(B, T, 2, H, W))
      target <- "sequence"
    }
    if (run == "plain") { # inference, and a forecast whose fed-back frames pass conv_x
      expect_equal(predict(two, x, horizon = 3), predict(one, x, horizon = 3), tolerance = 1e-5,
                   info = info)
    }
    # one step each (after it the one-kernel model's other state taps move):
    # the loss and every gradient, the one-kernel model's state-tap
    # gradients at the centre being conv_h's
    losses <- vapply(list(two, one), function(m) {
      set.seed(8) # the same dropout masks: the shapes are the same
      do.call(convlstm_train_step, c(list(m, xin, y, convlstm_optimizer_sgd(0.1), target = target), args))
    }, numeric(1))
    expect_equal(losses[[1]], losses[[2]], tolerance = 1e-6, info = info)
    g2 <- convlstm_gradients(two)
    g1 <- convlstm_gradients(one)
    for (l in 0:1) {
      p <- sprintf("cell_list.%d.", l)
      w1 <- g1[[paste0(p, "conv.weight")]]
      nin <- dim(g2[[paste0(p, "conv_x.weight")]])[2]
      want <- list(conv_x.weight = w1[, seq_len(nin), , , drop = FALSE],
                   conv_h.weight = w1[, -seq_len(nin), 2, 2, drop = FALSE],
                   conv_x.bias = g1[[paste0(p, "conv.bias")]])
      for (k in names(want)) {
        got <- g2[[paste0(p, k)]]
        expect_lt(max(abs(as.vector(got) - as.vector(want[[k]]))),
                  1e-5 * max(abs(want[[k]])) + 1e-8, label = paste(info, p, k))
      }
      if (peephole != "none") {
        for (k in c("w_ci", "w_cf", "w_co")) {
          expect_lt(max(abs(g2[[paste0(p, k)]] - g1[[paste0(p, k)]])),
                    1e-5 * max(abs(g1[[paste0(p, k)]])) + 1e-8, label = paste(info, p, k))
        }
      }
    }
    convlstm_release(two)
    convlstm_release(one)
  }
})

test_that("convlstm_memory_estimate() of two kernels is the shapes' bytes and what a step holds", {
  m <- convlstm(2, c(4, 3), 9, recurrent_kernel_sizes = list(1, 3), device = "cpu",
                threads = 1)
  on.exit(convlstm_release(m))
  est <- convlstm_memory_estimate(m, 2, 4, 6, 5, optimizer = convlstm_optimizer_adam())
  b <- stats::setNames(est$bytes, est$category)
  n <- 16 * (2 * 81 + 4 * 1) + 16 + 12 * (4 * 81 + 3 * 9) + 12
  expect_identical(b[["parameters"]], 4 * n)
  expect_identical(b[["optimizer"]], 2 * 4 * n)
  x <- array(runif(2 * 4 * 2 * 6 * 5), c(2, 4, 2, 6, 5))
  convlstm_train_step(m, x, array(runif(2 * 3 * 6 * 5), c(2, 3, 6, 5)), convlstm_optimizer_adam())
  s <- convlstm_memory_stats(m)
  accounted <- stats::setNames(s$by_category$peak, s$by_category$category)
  expect_identical(accounted, b[names(accounted)])
  expect_identical(s$peak_reserved, b[["reserved"]])
  # the advisor plans the same model
  adv <- convlstm_memory_advise(m, "64 MiB", 2, 4, 6, 5)
  expect_s3_class(adv, "data.frame")
  expect_true(any(adv$fits))
})

test_that("a file of two kernels loads in PyTorch and computes the same outputs", {
  pt <- python_torch()
  set.seed(9)
  model <- convlstm(2, c(3, 2), list(c(3, 5), 3), recurrent_kernel_sizes = list(1, c(5, 1)),
                    dilation = list(1, c(1, 2)), device = "cpu", threads = 1)
  x <- array(runif(2 * 3 * 2 * 6 * 5, -1, 1), c(2, 3, 2, 6, 5))
  path <- tempfile(fileext = ".safetensors")
  on.exit({
    convlstm_release(model)
    unlink(path)
  })
  convlstm_save(model, path)
  ours <- predict(model, x)
  torch <- torch_check(pt, "read", path, x, dim(ours))
  expect_match(torch$summary, "\"cell_list.0.conv_x.weight\": \\[12, 2, 3, 5\\]")
  expect_match(torch$summary, "\"cell_list.0.conv_h.weight\": \\[12, 3, 1, 1\\]")
  expect_match(torch$summary, "\"cell_list.1.conv_h.weight\": \\[8, 2, 5, 1\\]")
  expect_equal(ours, torch$output, tolerance = 1e-5)
})

test_that("a PyTorch state dict of two convolutions loads, kernels read from the shapes", {
  pt <- python_torch()
  set.seed(10)
  x <- array(runif(2 * 3 * 1 * 6 * 5, -1, 1), c(2, 3, 1, 6, 5))
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  torch <- torch_check(pt, "write", path, x, c(2, 3, 2, 6, 5),
                       args = c("7", "1", "4,2", "9,3", "true"), tail = "1,3")
  info <- convlstm_file_info(path)
  expect_length(info$all_metadata, 0)
  expect_identical(info$config$kernel_sizes, c(9L, 3L))
  expect_identical(info$config$recurrent_kernel_sizes, c(1L, 3L))
  model <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(model), add = TRUE)
  expect_identical(names(convlstm_state_dict(model))[1:3], c("cell_list.0.conv_x.weight",
                                                   "cell_list.0.conv_x.bias",
                                                   "cell_list.0.conv_h.weight"))
  expect_equal(predict(model, x), torch$output, tolerance = 1e-5)
})
