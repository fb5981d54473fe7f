# test-dropout.R -- dropout (convlstm(dropout =, recurrent_dropout =)) apart
# from PyTorch parity (test-parity-dropout.R): the masks drawn from a seed
# from R's generator (keep rate, scale, shape, reproducibility), that the
# masks drawn (on the device, micro-batch by micro-batch) are the masks
# applied, training only, the same gradients with and without
# checkpointing or accumulation, and the planned buffers; each with the
# masks per gate (the default, Keras's) and shared by the four gates.

drop_model <- function(dropout = 0.3, recurrent_dropout = 0.4, ...) {
  convlstm(2, c(3, 2), 3, device = "cpu", threads = 1, dropout = dropout,
           recurrent_dropout = recurrent_dropout, ...)
}

# The weights of a drop_model() drawn after set.seed(seed).
drop_weights <- function(seed) {
  set.seed(seed)
  ref <- drop_model()
  on.exit(convlstm_release(ref))
  convlstm_state_dict(ref)
}

# One SGD step at lr 0 (target "sequence": every output counts) of a
# drop_model(model_args) with weights w, its masks drawn after set.seed(seed)
# or given (masks); `...` goes to convlstm_train_step(). Its loss and gradients.
drop_step <- function(w, x, y, seed, model_args = list(), masks = NULL, ...) {
  m <- do.call(drop_model, model_args)
  on.exit(convlstm_release(m))
  convlstm_load_state_dict(m, w)
  if (!is.null(masks)) convlstm:::local_dropout_masks(masks)
  set.seed(seed)
  loss <- convlstm_train_step(m, x, y, convlstm_optimizer_sgd(lr = 0), target = "sequence", ...)
  list(loss = as.numeric(loss), g = convlstm_gradients(m))
}

test_that("the rates read back per layer, and a model without them says so on train()", {
  m <- drop_model(c(0.1, 0), 0.25)
  on.exit(convlstm_release(m))
  expect_equal(m$dropout, c(0.1, 0))
  expect_equal(m$recurrent_dropout, c(0.25, 0.25))
  expect_equal(m$config$dropout, c(0.1, 0))
  expect_output(print(m), "dropout")
  expect_output(print(m), "0.1 / 0.25")
  plain <- drop_model(0, 0)
  on.exit(convlstm_release(plain), add = TRUE)
  expect_false(any(grepl("dropout", utils::capture.output(print(plain)))))
  env <- environment(convlstm:::no_mode_note)$the
  env$no_mode_noted <- NULL
  expect_message(plain$train(), "no dropout")
  expect_silent(m$train())
  expect_silent(m$eval())
})

for (kind in c("per_gate", "shared")) test_that(sprintf(
  "masks keep 1 - p of the elements, scaled by 1 / (1 - p), one per layer and kind [%s]", kind), {
  m <- drop_model(c(0.2, 0), c(0, 0.6), dropout_masks = kind)
  on.exit(convlstm_release(m))
  set.seed(3)
  masks <- convlstm:::c_dropout_draw(environment(m)$ptr, c(40, 30, 20))
  expect_length(masks, 4)
  expect_null(masks[[2]]) # layer 1 has no recurrent dropout
  expect_null(masks[[3]]) # layer 2 no input dropout
  # [B, input_dim, H, W] and [B, hidden 2, H, W]; per gate [B, 4, C, H, W]
  gates <- if (kind == "per_gate") 4 else NULL
  expect_equal(dim(masks[[1]]), c(40, gates, 2, 30, 20))
  expect_equal(dim(masks[[4]]), c(40, gates, 2, 30, 20))
  if (kind == "per_gate") {
    # the four gates' masks are four different draws
    for (g in 2:4) expect_false(identical(masks[[1]][, g, , , ], masks[[1]][, 1, , , ]))
  }
  for (k in list(list(masks[[1]], 0.2), list(masks[[4]], 0.6))) {
    v <- k[[1]]
    p <- k[[2]]
    # exactly two values: 0 and 1 / (1 - p) as a float32
    expect_setequal(unique(as.vector(v)), c(0, as_f32(1 / (1 - p))))
    n <- length(v)
    keep <- mean(v != 0)
    # the kept fraction within 5 standard deviations of 1 - p (48000 draws)
    expect_lt(abs(keep - (1 - p)), 5 * sqrt(p * (1 - p) / n))
    # the mean of a mask is 1 in expectation: inverted dropout
    expect_lt(abs(mean(v) - 1), 5 * sqrt(p / (1 - p) / n))
  }
  # the same seed draws the same masks; another seed others
  set.seed(3)
  expect_identical(convlstm:::c_dropout_draw(environment(m)$ptr, c(40, 30, 20)), masks)
  set.seed(4)
  expect_false(identical(convlstm:::c_dropout_draw(environment(m)$ptr, c(40, 30, 20)), masks))
})

# The generator itself (core/dropout_rng.h, seeded by r_dropout.c): for low,
# middle and high rates and a seed from either of two RNG kinds, each mask
# holds exactly 0 and 1 / (1 - p) (as a float32), keeps 1 - p of its
# elements and has mean 1 (inverted dropout), within 5 standard deviations
# of 14400 draws.
test_that("the mask generator scales by 1 / (1 - p) and keeps 1 - p, seeded by any RNG kind", {
  old <- RNGkind()
  on.exit(do.call(RNGkind, as.list(old)), add = TRUE)
  for (kind in c("Mersenne-Twister", "L'Ecuyer-CMRG")) {
    RNGkind(kind)
    for (p in c(0.05, 0.5, 0.9)) {
      m <- drop_model(c(p, 0), c(0, p), dropout_masks = "shared")
      set.seed(21)
      masks <- convlstm:::c_dropout_draw(environment(m)$ptr, c(30, 16, 15))
      convlstm_release(m)
      for (v in list(masks[[1]], masks[[4]])) {
        lab <- sprintf("%s, p = %g", kind, p)
        n <- length(v)
        expect_setequal(unique(as.vector(v)), c(0, as_f32(1 / (1 - p))))
        expect_lt(abs(mean(v != 0) - (1 - p)), 5 * sqrt(p * (1 - p) / n), label = lab)
        expect_lt(abs(mean(v) - 1), 5 * sqrt(p / (1 - p) / n), label = lab)
      }
    }
  }
})

test_that(paste("a call takes two uniforms from R's stream whatever the masks' size, and a",
                "sequence's masks do not depend on the batch around it"), {
  m <- drop_model(c(0.2, 0), c(0, 0.6))
  on.exit(convlstm_release(m))
  old <- RNGkind()
  on.exit(do.call(RNGkind, as.list(old)), add = TRUE)
  for (case in c("seeded", "lecuyer")) {
    if (case == "lecuyer") RNGkind("L'Ecuyer-CMRG")
    for (shape in list(c(7, 9, 11), c(1, 2, 2))) {
      set.seed(5)
      masks <- convlstm:::c_dropout_draw(environment(m)$ptr, shape)
      after <- .Random.seed
      set.seed(5)
      stats::runif(2)
      expect_identical(after, .Random.seed, label = paste(case, "the stream after a call"))
    }
    set.seed(5)
    big <- convlstm:::c_dropout_draw(environment(m)$ptr, c(7, 9, 11))
    set.seed(5)
    small <- convlstm:::c_dropout_draw(environment(m)$ptr, c(3, 9, 11))
    expect_identical(small[[1]], big[[1]][1:3, , , , , drop = FALSE], label = case)
    expect_identical(small[[4]], big[[4]][1:3, , , , , drop = FALSE], label = case)
    # and the layers' and kinds' masks are drawn from streams of their own
    expect_false(identical(as.vector(big[[1]][, , 1, , ]), as.vector(big[[4]][, , 1, , ])))
  }
})

for (kind in c("per_gate", "shared")) test_that(sprintf(
  "the masks a step draws are the ones it applies [%s]", kind), {
  x <- api_x(B = 3, T = 4)
  y <- api_y(B = 3)
  set.seed(11)
  a <- drop_model(dropout_masks = kind)
  b <- drop_model(dropout_masks = kind)
  convlstm_load_state_dict(b, convlstm_state_dict(a))
  on.exit({
    convlstm_release(a)
    convlstm_release(b)
  })
  opt <- convlstm_optimizer_sgd(lr = 0.1)
  # drawn into the planned buffers per micro-batch (accumulation: 2 of 2
  # and 1), with a checkpoint's recomputation reading them again
  for (args in list(list(), list(accumulation_steps = 2, checkpoint = 2))) {
    set.seed(5)
    masks <- convlstm:::c_dropout_draw(environment(a)$ptr, c(3, 5, 4))
    set.seed(5)
    la <- do.call(convlstm_train_step, c(list(a, x, y, opt), args))
    local({
      convlstm:::local_dropout_masks(masks)
      lb <<- do.call(convlstm_train_step, c(list(b, x, y, opt), args))
    })
    expect_identical(as.numeric(la), as.numeric(lb), label = deparse(args))
    expect_identical(convlstm_state_dict(a), convlstm_state_dict(b), label = deparse(args))
  }
})

test_that("set.seed() reproduces a training run with dropout; another seed differs", {
  x <- api_x(B = 2, T = 3)
  y <- api_y(B = 2)
  run <- function(seed) {
    set.seed(1)
    m <- drop_model()
    on.exit(convlstm_release(m))
    set.seed(seed)
    opt <- convlstm_optimizer_adam(lr = 0.01)
    losses <- vapply(1:3, function(i) as.numeric(convlstm_train_step(m, x, y, opt)), 0)
    list(losses = losses, params = convlstm_state_dict(m))
  }
  r1 <- run(42)
  expect_identical(run(42), r1)
  r2 <- run(43)
  expect_false(identical(r2$losses, r1$losses))
  # and the masks change between steps: without dropout the first loss is
  # the same for both seeds, with it not
  expect_false(identical(r2$losses[1], r1$losses[1]))
})

test_that("inference applies no dropout: predict(), model(x) in eval mode, evaluate", {
  set.seed(2)
  m <- drop_model(0.5, 0.5)
  plain <- drop_model(0, 0)
  on.exit({
    convlstm_release(m)
    convlstm_release(plain)
  })
  convlstm_load_state_dict(plain, convlstm_state_dict(m))
  x <- api_x(B = 2, T = 3)
  p1 <- predict(m, x)
  expect_identical(predict(m, x), p1)
  expect_identical(p1, predict(plain, x))
  expect_identical(m(x), plain(x))
  # train mode: model(x) drops, each call with masks of its own
  m$train()
  t1 <- m(x)
  t2 <- m(x)
  expect_false(identical(t1[[1]][[2]], plain(x)[[1]][[2]]))
  expect_false(identical(t1[[1]][[2]], t2[[1]][[2]]))
  # predict() infers in train mode too; eval() turns model(x) back
  expect_identical(predict(m, x), p1)
  m$eval()
  expect_identical(m(x), plain(x))
})

test_that("checkpointing and accumulation give the gradients of the plain step with dropout", {
  x <- api_x(B = 4, T = 5)
  y <- api_y(B = 4, T = 5)
  w <- drop_weights(8)
  grads_of <- function(...) drop_step(w, x, y, 99, ...)$g # the same masks for every variant
  g0 <- grads_of()
  for (v in list(list(checkpoint = 2), list(checkpoint = 1), list(accumulation_steps = 2),
                 list(accumulation_steps = 3, checkpoint = 2))) {
    g <- do.call(grads_of, v)
    for (k in names(g0)) {
      expect_close(g[[k]], g0[[k]], rel = 1e-5,
                   label = paste(names(v), v, collapse = " ", k))
    }
  }
  # and dropout moves them: the gradients of a model without it differ
  plain <- drop_model(0, 0)
  on.exit(convlstm_release(plain))
  convlstm_load_state_dict(plain, w)
  convlstm_train_step(plain, x, y, convlstm_optimizer_sgd(lr = 0), target = "sequence")
  expect_gt(max(abs(convlstm_gradients(plain)[[1]] - g0[[1]])), 1e-4)
})

test_that("tbptt, a carried state and data sets train with dropout", {
  set.seed(4)
  m <- drop_model()
  on.exit(convlstm_release(m))
  x <- api_x(B = 2, T = 6)
  y <- api_y(B = 2, T = 6)
  opt <- convlstm_optimizer_adam(lr = 0.01)
  expect_true(is.finite(convlstm_train_step(m, x, y, opt, target = "sequence", tbptt = 2)))
  expect_true(is.finite(convlstm_train_step(m, x, y, opt, target = "sequence", state = "carry")))
  expect_true(is.finite(convlstm_train_step(m, x, y, opt, target = "sequence", state = "carry",
                                   checkpoint = 2)))
  convlstm_reset_state(m)
  fit <- function(seed) {
    set.seed(1)
    f <- drop_model()
    on.exit(convlstm_release(f))
    set.seed(seed)
    h <- convlstm_fit(f, x, y, epochs = 2, batch_size = 1, target = "sequence",
                      optimizer = convlstm_optimizer_adam(lr = 0.01), verbose = FALSE)
    convlstm_state_dict(f)
  }
  expect_identical(fit(7), fit(7))
})

test_that("a forecast trains with dropout and predicts without it", {
  set.seed(12)
  m <- convlstm(1, c(4, 1), 3, device = "cpu", threads = 1, dropout = 0.2,
                recurrent_dropout = 0.3)
  on.exit(convlstm_release(m))
  d <- convlstm_moving_digits(n = 2, n_frames = 8, size = 12, horizon = 3)
  opt <- convlstm_optimizer_adam(lr = 0.01)
  # teacher forcing: the true frames fed back are inputs, masked like x
  expect_true(is.finite(convlstm_train_step(m, d$x, d$y, opt, horizon = 3)))
  f1 <- predict(m, d$x, horizon = 3)
  expect_identical(predict(m, d$x, horizon = 3), f1)
  expect_equal(dim(f1), c(2, 3, 1, 12, 12))
})

# Free-running training (teacher_forcing = FALSE) with dropout: every
# fed-back step applies the sequence's masks too, layer 0's input mask on
# each fed-back frame as on x (Keras's mask is fixed across all steps). The
# fixture (tools/make_fixtures_forecast.py) holds PyTorch's gradients and
# Adam steps with its masks, and the gradients a step would match that left
# the masks off entirely (grad_nodropout/), left layer 0's input mask off
# the fed-back frames (grad_fed_unmasked/) or cut the fed-back path
# (grad_detached/). Three layers: the middle one's gradients pass the ring.
# free_gate: the same with per-gate masks ([B, 4, C, H, W]).
free_run_fxs <- list(free_drop = read_fixture(file.path("forecast", "free_drop")),
                     free_gate = read_fixture(file.path("forecast", "free_gate")))

grad_gap <- function(g, fx, prefix) {
  max(vapply(names(g), function(k) {
    ref <- fx$tensors[[paste0(prefix, k)]]
    max(abs(g[[k]] - ref)) / max(abs(ref))
  }, numeric(1)))
}

for (device in c("cpu", if (convlstm_gpu_available()) "cuda")) for (fixture in names(free_run_fxs)) {
  for (sched in c("plain", "accumulation")) {
    test_that(sprintf("free-running training with dropout matches PyTorch's masks [%s, %s, %s]",
                      fixture, device, sched), {
      fx <- free_run_fxs[[fixture]]
      cfg <- fx$config
      rel <- 1e-5
      m <- convlstm(cfg$input_dim, cfg$hidden_dims, cfg$kernel_sizes, bias = cfg$bias,
                    device = device, dropout = cfg$dropout,
                    recurrent_dropout = cfg$recurrent_dropout,
                    dropout_masks = cfg$dropout_masks %||% "shared")
      on.exit(convlstm_release(m))
      convlstm_load_state_dict(m, fixture_group(fx, "weights/"))
      convlstm:::local_dropout_masks(fixture_masks(fx))
      opt <- convlstm_optimizer_adam(lr = cfg$adam_lr, weight_decay = cfg$adam_weight_decay)
      extra <- if (sched == "accumulation") list(accumulation_steps = 2) else list()
      losses <- numeric(cfg$adam_steps)
      for (i in seq_len(cfg$adam_steps)) {
        losses[[i]] <- do.call(convlstm_train_step, c(list(m, fx$tensors$x, fx$tensors$y_frames, opt,
                                                  horizon = cfg$horizon,
                                                  teacher_forcing = FALSE), extra))
        if (i == 1) {
          g <- convlstm_gradients(m)
          expect_fixture_tensors(g, fx, "grad/", rel = rel, label = paste(device, sched, "grad"))
          # each wrong variant is ten tolerances away and more
          expect_gt(grad_gap(g, fx, "grad_nodropout/"), 10 * rel)
          expect_gt(grad_gap(g, fx, "grad_fed_unmasked/"), 10 * rel)
          expect_gt(grad_gap(g, fx, "grad_detached/"), 10 * rel)
        }
      }
      expect_adam_run(losses, convlstm_state_dict(m), fx, rel, paste(device, sched))
    })
  }
}

test_that("free-running with drawn masks: set.seed() reproduces it, predict() has no dropout", {
  m <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1, dropout = 0.3,
                recurrent_dropout = 0.2)
  on.exit(convlstm_release(m))
  d <- convlstm_moving_digits(n = 2, n_frames = 6, size = 8, horizon = 3)
  sd <- convlstm_state_dict(m)
  run <- function(seed) {
    convlstm_load_state_dict(m, sd)
    set.seed(seed)
    convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(lr = 0), horizon = 3, teacher_forcing = FALSE)
  }
  l1 <- run(5)
  expect_true(is.finite(l1))
  expect_identical(run(5), l1)
  expect_false(identical(run(6), l1))
  frames <- predict(m, d$x, horizon = 3)
  expect_identical(predict(m, d$x, horizon = 3), frames)
})

for (kind in c("per_gate", "shared")) test_that(sprintf(
  "convlstm_memory_estimate() plans the masks and the masked copy, in training only [%s]", kind), {
  m <- drop_model(c(0.3, 0), c(0, 0.5), dropout_masks = kind)
  on.exit(convlstm_release(m))
  est <- convlstm_memory_estimate(m, 4, 3, 5, 6)
  plan <- attr(est, "plan")
  row <- function(n) plan$bytes[plan$name == n]
  P <- 5 * 6
  G <- if (kind == "per_gate") 4 else 1 # masks (and masked copies) per image
  expect_equal(row("dropout_mask_x[0]"), 4 * G * 2 * P * 4) # [B, G, input_dim, H, W] float
  expect_equal(row("dropout_mask_h[1]"), 4 * G * 2 * P * 4) # [B, G, hidden 2, H, W]
  expect_false(any(c("dropout_mask_h[0]", "dropout_mask_x[1]") %in% plan$name))
  # the masked copy: the larger of the input [T, B, G 2, H, W] and h [T - 1, B, G 2, H, W]
  expect_equal(row("dropout_masked"), 3 * 4 * G * 2 * P * 4)
  # h alone: backward's filter gradient reads h of T - 1 steps masked; one
  # step's float gradient of h waits there where a gradient crosses steps,
  # not with tbptt = 1 (each step its own window)
  h_only <- drop_model(0, c(0.5, 0), dropout_masks = kind)
  on.exit(convlstm_release(h_only), add = TRUE)
  masked <- function(...) {
    p <- attr(convlstm_memory_estimate(h_only, 4, 3, 5, 6, ...), "plan")
    p$bytes[p$name == "dropout_masked"]
  }
  expect_equal(masked(), 2 * 4 * G * 3 * P * 4) # [T - 1, B, G hidden 3, H, W] float32
  expect_equal(masked(tbptt = 1), 1 * 4 * G * 3 * P * 4) # one step's copy of h
  # the float gradient between segments, or the copy of h before one
  expect_equal(masked(checkpoint = 1), G * 4 * 3 * P * 4)
  expect_equal(plan$category[plan$name == "dropout_mask_x[0]"], "activations")
  inf <- attr(convlstm_memory_estimate(m, 4, 3, 5, 6, training = FALSE), "plan")
  expect_false(any(grepl("^dropout", inf$name)))
  # and a step allocates exactly that
  convlstm_train_step(m, api_x(B = 4, T = 3, H = 5, W = 6), api_y(B = 4, H = 5, W = 6),
             convlstm_optimizer_adam())
  s <- convlstm_memory_stats(m)
  measured <- stats::setNames(s$by_category$peak, s$by_category$category)
  b <- stats::setNames(est$bytes, est$category)
  expect_identical(measured, b[names(measured)])
  expect_identical(s$peak_reserved, b[["reserved"]])
})

test_that("the rates are saved with the model and come back with convlstm_load()", {
  set.seed(6)
  m <- drop_model(c(0.3, 0.1), c(0, 0.45))
  on.exit(convlstm_release(m))
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(m, path)
  info <- convlstm_file_info(path)
  expect_identical(info$config$dropout, c(0.3, 0.1))
  expect_identical(info$config$recurrent_dropout, c(0, 0.45))
  back <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(back), add = TRUE)
  expect_identical(back$dropout, c(0.3, 0.1))
  expect_identical(back$recurrent_dropout, c(0, 0.45))
  # a model without dropout writes no rates (its files stay as they were)
  plain <- drop_model(0, 0)
  on.exit(convlstm_release(plain), add = TRUE)
  p2 <- tempfile(fileext = ".safetensors")
  on.exit(unlink(p2), add = TRUE)
  convlstm_save(plain, p2)
  header <- rawToChar(readBin(p2, "raw", 4096)[-(1:8)][1:2000], multiple = TRUE)
  expect_false(grepl("dropout", paste(header, collapse = "")))
  back2 <- convlstm_load(p2, device = "cpu")
  on.exit(convlstm_release(back2), add = TRUE)
  expect_identical(back2$dropout, c(0, 0))
})

# ---- per-gate masks (dropout_masks = "per_gate", the default) ----------------

test_that("dropout_masks: per gate by default, read back, printed and saved", {
  m <- drop_model()
  on.exit(convlstm_release(m))
  expect_identical(m$dropout_masks, "per_gate")
  expect_identical(m$config$dropout_masks, "per_gate")
  expect_output(print(m), "one per gate")
  s <- drop_model(dropout_masks = "shared")
  on.exit(convlstm_release(s), add = TRUE)
  expect_identical(s$dropout_masks, "shared")
  expect_output(print(s), "shared by the four gates")
  for (mod in list(m, s)) {
    path <- tempfile(fileext = ".safetensors")
    convlstm_save(mod, path)
    expect_identical(convlstm_file_info(path)$config$dropout_masks, mod$dropout_masks)
    back <- convlstm_load(path, device = "cpu")
    expect_identical(back$dropout_masks, mod$dropout_masks)
    convlstm_release(back)
    unlink(path)
  }
})

test_that("a model file without dropout_masks loads as shared: what it trained with", {
  set.seed(2)
  m <- drop_model()
  on.exit(convlstm_release(m))
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(m, path)
  # the file as a build before per-gate masks wrote it: the same header
  # without the field (its length kept, padded with spaces as safetensors allows)
  bytes <- readBin(path, "raw", file.size(path))
  n <- sum(as.numeric(bytes[1:8]) * 256^(0:7))
  header <- rawToChar(bytes[9:(8 + n)])
  old <- sub(",\"convlstm.dropout_masks\":\"per_gate\"", "", header, fixed = TRUE)
  expect_false(identical(old, header))
  old <- paste0(old, strrep(" ", nchar(header) - nchar(old)))
  writeBin(c(bytes[1:8], charToRaw(old), bytes[-(1:(8 + n))]), path)
  expect_identical(convlstm_file_info(path)$config$dropout_masks, "shared")
  back <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(back), add = TRUE)
  expect_identical(back$dropout_masks, "shared")
  expect_identical(back$dropout, m$dropout)
})

# The same seed draws per-gate and shared masks from the same stream, but
# per gate each gate convolves its own copy: the gradients differ. Given
# per-gate masks whose four gates are equal, the per-gate step must equal the
# shared one with that mask, and with one gate's mask changed it must not:
# a build that silently applied one mask to all gates fails one or the other.
test_that("per-gate masks reach each gate: shared differs, equal gates agree", {
  x <- api_x(B = 3, T = 4)
  y <- api_y(B = 3, T = 4)
  w <- drop_weights(21)
  grads_of <- function(kind, masks = NULL) {
    drop_step(w, x, y, 5, list(dropout_masks = kind), masks)
  }
  gap <- function(a, b) max(vapply(names(a$g), function(k) max(abs(a$g[[k]] - b$g[[k]])), 0))
  expect_gt(gap(grads_of("per_gate"), grads_of("shared")), 1e-4)
  set.seed(9)
  s <- drop_model(dropout_masks = "shared")
  shared_masks <- convlstm:::c_dropout_draw(environment(s)$ptr, c(3, 5, 4))
  convlstm_release(s)
  four <- lapply(shared_masks, function(a) {
    if (is.null(a)) return(NULL)
    d <- dim(a)
    aperm(array(a, c(d, 4)), c(1, 5, 2, 3, 4)) # [B, 4, C, H, W], each gate a
  })
  shared <- grads_of("shared", shared_masks)
  same <- grads_of("per_gate", four)
  expect_equal(same$loss, shared$loss, tolerance = 1e-6)
  for (k in names(shared$g)) expect_close(same$g[[k]], shared$g[[k]], rel = 1e-5, label = k)
  # gate f of layer 2's h mask differs: so do the step's results
  other <- four
  other[[4]][, 2, , , ] <- 1 / 0.6 * (stats::runif(length(other[[4]][, 2, , , ])) > 0.4)
  expect_gt(gap(grads_of("per_gate", other), same), 1e-5)
})

test_that("per-gate dropout in float16 and bfloat16: the float32 step's gradients", {
  x <- api_x(B = 2, T = 3)
  y <- api_y(B = 2, T = 3)
  w <- drop_weights(30)
  grads_of <- function(dtype, ...) drop_step(w, x, y, 31, list(dtype = dtype), ...)$g # same masks
  g32 <- grads_of("float32")
  # storage rounding (2^-11, 2^-8 relative) through a few steps' products
  for (dt in list(list("float16", 1e-2), list("bfloat16", 6e-2))) {
    g <- grads_of(dt[[1]], checkpoint = 2)
    for (k in names(g32)) {
      expect_lt(max(abs(g[[k]] - g32[[k]])) / max(abs(g32[[k]])), dt[[2]],
                label = paste(dt[[1]], k))
    }
  }
})

test_that("per-gate masks plan the float gradient of a layer's four input copies exactly", {
  # layer 2 drops its input (layer 1's h, 3 channels): backward gathers the
  # gradient of its 4 x 3 masked channels from a float buffer of T steps
  m <- drop_model(0.3, 0.4, dtype = "float16")
  on.exit(convlstm_release(m))
  est <- convlstm_memory_estimate(m, 4, 3, 5, 6)
  plan <- attr(est, "plan")
  expect_equal(plan$bytes[plan$name == "dropout_masked"], 3 * 4 * 4 * 3 * 5 * 6 * 4)
  convlstm_train_step(m, api_x(B = 4, T = 3, H = 5, W = 6), api_y(B = 4, T = 3, H = 5, W = 6),
             convlstm_optimizer_adam(), target = "sequence")
  s <- convlstm_memory_stats(m)
  measured <- stats::setNames(s$by_category$peak, s$by_category$category)
  b <- stats::setNames(est$bytes, est$category)
  expect_identical(measured, b[names(measured)])
})
