# test-memory-techniques.R -- each memory technique saves what it says and keeps
# the result: float16/bfloat16 storage halves activations and tracks float32
# losses; checkpointing keeps the gradients (1e-6 relative) with less activation
# memory; gradient accumulation gives the full batch's update with the peak of a
# micro-batch; truncated BPTT and last-state inference use memory independent of
# the sequence length; recomputing the gates in backward keeps the gradients
# with one chunk of gates instead of every step's. Measurements are checked
# against convlstm_memory_estimate() too.

tech_model <- function(dtype = "float32", seed = 1) {
  set.seed(seed)
  convlstm(1, c(8, 1), 3, device = "cpu", threads = 1, dtype = dtype)
}
tech_data <- function(B = 4, T = 6, H = 8, W = 8, seed = 5) {
  set.seed(seed)
  list(x = array(runif(B * T * H * W), c(B, T, 1, H, W)), y = array(runif(B * H * W), c(B, 1, H, W)))
}
bytes_of <- function(est) stats::setNames(est$bytes, est$category)
peaks_of <- function(model) {
  s <- convlstm_memory_stats(model)
  stats::setNames(s$by_category$peak, s$by_category$category)
}
max_rel_diff <- function(a, b) {
  max(unlist(Map(function(u, v) max(abs(u - v)) / max(abs(v), 1e-30), a, b)))
}

test_that("float16 and bfloat16 storage halve activations and data", {
  model <- tech_model()
  on.exit(convlstm_release(model))
  f32 <- bytes_of(convlstm_memory_estimate(model, 4, 6, 8, 8))
  for (dtype in c("float16", "bfloat16")) {
    half <- bytes_of(convlstm_memory_estimate(model, 4, 6, 8, 8, dtype = dtype))
    expect_equal(half[["activations"]], f32[["activations"]] / 2, info = dtype)
    expect_equal(half[["data"]], f32[["data"]] / 2, info = dtype)
    # master weights, gradients and optimizer state stay float32
    expect_equal(half[c("parameters", "gradients", "optimizer")],
                 f32[c("parameters", "gradients", "optimizer")], info = dtype)
    expect_lt(half[["total"]], f32[["total"]])
  }
  # and accounted by the allocator on real models of each dtype (the plan
  # read back: this shows the dtype reaches the step's buffers)
  d <- tech_data()
  m16 <- tech_model("float16")
  on.exit(convlstm_release(m16), add = TRUE)
  convlstm_train_step(model, d$x, d$y, convlstm_optimizer_adam())
  convlstm_train_step(m16, d$x, d$y, convlstm_optimizer_adam())
  expect_equal(peaks_of(m16)[["activations"]], peaks_of(model)[["activations"]] / 2)
})

test_that("half-precision losses track float32 (float16 within 1e-3, bfloat16 within 1e-2 relative)", {
  d <- tech_data()
  losses <- sapply(c("float32", "float16", "bfloat16"), function(dtype) {
    model <- tech_model(dtype)
    on.exit(convlstm_release(model))
    opt <- convlstm_optimizer_adam(lr = 0.01)
    vapply(1:12, function(i) convlstm_train_step(model, d$x, d$y, opt), numeric(1))
  })
  rel <- abs(losses[, -1] - losses[, 1]) / losses[, 1]
  expect_lt(max(rel[, "float16"]), 1e-3)
  expect_lt(max(rel[, "bfloat16"]), 1e-2)
  # and they learn: the loss falls as float32's does
  expect_lt(losses[12, "float16"], 0.5 * losses[1, "float16"])
})

test_that("model$half(), $bfloat16(), $float() and convlstm_set_dtype() convert; convlstm_loss_scale() reports", {
  d <- tech_data(B = 2)
  model <- tech_model()
  on.exit(convlstm_release(model))
  f32 <- bytes_of(convlstm_memory_estimate(model, 2, 6, 8, 8))
  expect_invisible(res <- model$half())
  expect_identical(res, model)
  expect_equal(model$dtype, "float16")
  expect_equal(bytes_of(convlstm_memory_estimate(model, 2, 6, 8, 8))[["activations"]],
               f32[["activations"]] / 2)
  before <- convlstm_state_dict(model)
  for (i in 1:3) expect_true(is.finite(convlstm_train_step(model, d$x, d$y, convlstm_optimizer_adam())))
  ls <- convlstm_loss_scale(model)
  expect_s3_class(ls, "convlstm_loss_scale")
  expect_named(ls, c("scale", "growth_interval", "clean_steps", "skipped_steps", "skipped_in_a_row",
                     "init_scale", "growth_factor", "backoff_factor", "dtype"))
  expect_gt(ls$scale, 1)
  expect_equal(ls$clean_steps, 3L)
  expect_equal(ls$skipped_steps, 0)
  expect_output(print(ls), "<convlstm_loss_scale> scale")
  model$bfloat16()
  expect_equal(model$dtype, "bfloat16")
  model$float()
  expect_equal(model$dtype, "float32")
  expect_invisible(convlstm_set_dtype(model, "float16"))
  expect_equal(model$dtype, "float16")
  expect_convlstm_error(convlstm_set_dtype(model, "float64"), regexp = "`dtype`")
  # parameters survive conversions (they are float32 master weights)
  convlstm_set_dtype(model, "float32")
  expect_equal(bytes_of(convlstm_memory_estimate(model, 2, 6, 8, 8))[["activations"]], f32[["activations"]])
  expect_output(print(convlstm_loss_scale(model)), "inactive: dtype float32")
})

test_that("checkpointing keeps the gradients (1e-6 relative) and shrinks activations", {
  d <- tech_data(T = 12)
  grads <- lapply(c(0, 1, 3, 4, 5), function(k) {
    model <- tech_model()
    on.exit(convlstm_release(model))
    loss <- convlstm_train_step(model, d$x, d$y, convlstm_optimizer_sgd(lr = 0), checkpoint = k)
    list(loss = loss, grads = convlstm_gradients(model), peak = peaks_of(model),
         est = bytes_of(convlstm_memory_estimate(model, 4, 12, 8, 8, checkpoint = k)))
  })
  base <- grads[[1]]
  for (r in grads[-1]) {
    expect_equal(r$loss, base$loss, tolerance = 1e-6)
    expect_lt(max_rel_diff(r$grads, base$grads), 1e-6)
    expect_lt(r$peak[["activations"]], base$peak[["activations"]])
    expect_equal(r$peak[names(r$peak)], r$est[names(r$peak)])
  }
  # activation memory O(T / k + k): k = 3 or 4 beats k = 1 and k = 5 ... near sqrt(T)
  act <- vapply(grads, function(r) r$peak[["activations"]], numeric(1))
  expect_lt(act[[3]], act[[2]])
})

# One plain step and one per recompute_gates setting on copies of a model,
# the same masks drawn for each (dropout): losses, gradients, peaks, plans.
rc_runs <- function(make, d, settings, opt = convlstm_optimizer_sgd(lr = 0), steps = 1, ...) {
  lapply(settings, function(rc) {
    model <- make()
    on.exit(convlstm_release(model))
    set.seed(77)
    loss <- vapply(seq_len(steps), function(i) {
      convlstm_train_step(model, d$x, d$y, opt, recompute_gates = rc, ...)
    }, numeric(1))
    dims <- dim(d$x)
    list(loss = loss, grads = convlstm_gradients(model), params = convlstm_state_dict(model),
         peak = peaks_of(model),
         est = convlstm_memory_estimate(model, dims[[1]], dims[[2]], dims[[4]], dims[[5]],
                               recompute_gates = rc, optimizer = opt, ...))
  })
}

test_that("recompute_gates keeps the gradients and Adam's steps, with peepholes, dropout, checkpoint, accumulation", {
  d <- tech_data(T = 6)
  makers <- list(
    plain = function() tech_model(),
    peephole = function() {
      set.seed(1)
      convlstm(1, c(8, 1), 3, device = "cpu", threads = 1, peephole = "channel")
    },
    dropout = function() {
      set.seed(1)
      convlstm(1, c(8, 1), 3, device = "cpu", threads = 1, dropout = 0.3,
               recurrent_dropout = 0.4)
    },
    two_layers = function() { # layers of different widths share d_hidden apart
      set.seed(1)
      convlstm(1, c(3, 8, 1), c(3, 1, 3), device = "cpu", threads = 1)
    }
  )
  for (what in names(makers)) {
    runs <- rc_runs(makers[[what]], d, list(FALSE, 1, 2, TRUE, 6))
    base <- runs[[1]]
    for (i in 2:5) {
      r <- runs[[i]]
      info <- sprintf("%s, recompute_gates run %d", what, i)
      expect_equal(r$loss, base$loss, tolerance = 1e-6, info = info)
      # the weight gradients summed chunk by chunk: float32 rounding only
      expect_lt(max_rel_diff(r$grads, base$grads), 1e-6)
      expect_equal(r$peak[names(r$peak)], bytes_of(r$est)[names(r$peak)], info = info)
    }
    # a chunk of the whole sequence runs the plain step's calls in its order
    expect_identical(runs[[5]]$grads, base$grads, info = what)
    expect_lt(runs[[2]]$peak[["activations"]], base$peak[["activations"]])
  }
  # three Adam steps: the same parameters (float32 rounding)
  adam <- rc_runs(makers$dropout, d, list(FALSE, TRUE), opt = convlstm_optimizer_adam(1e-2), steps = 3)
  expect_equal(adam[[2]]$loss, adam[[1]]$loss, tolerance = 1e-6)
  expect_lt(max_rel_diff(adam[[2]]$params, adam[[1]]$params), 1e-6)
  # with checkpoint segments, accumulation and tbptt, against each alone
  for (opts in list(list(checkpoint = 2), list(checkpoint = 4), list(accumulation_steps = 2),
                    list(tbptt = 4))) {
    runs <- do.call(rc_runs, c(list(makers$peephole, d, list(FALSE, 1, 3)), opts))
    for (r in runs[-1]) {
      info <- paste(names(opts), unlist(opts))
      expect_equal(r$loss, runs[[1]]$loss, tolerance = 1e-6, info = info)
      expect_lt(max_rel_diff(r$grads, runs[[1]]$grads), 1e-6)
      expect_equal(r$peak[names(r$peak)], bytes_of(r$est)[names(r$peak)], info = info)
      expect_lt(r$peak[["activations"]], runs[[1]]$peak[["activations"]])
    }
  }
})

test_that("recompute_gates in float16 and bfloat16 keeps the half step's gradients", {
  d <- tech_data(T = 5)
  for (dtype in c("float16", "bfloat16")) {
    runs <- rc_runs(function() tech_model(dtype), d, list(FALSE, 1, 2))
    for (r in runs[-1]) {
      expect_equal(r$loss, runs[[1]]$loss, tolerance = 1e-6, info = dtype)
      expect_lt(max_rel_diff(r$grads, runs[[1]]$grads), 1e-5)
      expect_equal(r$peak[names(r$peak)], bytes_of(r$est)[names(r$peak)], info = dtype)
    }
  }
})

test_that("recompute_gates plans one chunk of gates instead of every step's", {
  model <- convlstm(1, c(8, 5), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  B <- 3
  T <- 20
  P <- 6 * 7
  plain <- attr(convlstm_memory_estimate(model, B, T, 6, 7), "plan")
  expect_equal(plain$bytes[plain$name == "gates[0]"], T * B * 4 * 8 * P * 4)
  for (k in c(1L, 3L)) {
    est <- convlstm_memory_estimate(model, B, T, 6, 7, recompute_gates = k)
    plan <- attr(est, "plan")
    expect_false(any(grepl("^gates\\[", plan$name)))
    # one chunk of k steps, of the widest layer, shared by the layers
    expect_equal(plan$bytes[plan$name == "gates_recompute"], k * B * 4 * 8 * P * 4)
    expect_equal(plan$bytes[plan$name == "hidden[1]"], plain$bytes[plain$name == "hidden[1]"])
    expect_equal(plan$bytes[plan$name == "cell[0]"], plain$bytes[plain$name == "cell[0]"])
    expect_equal(attr(est, "options")$recompute_gates, k)
    expect_match(paste(utils::capture.output(print(est)), collapse = "\n"),
                 sprintf("gates recomputed in backward, %d step", k))
  }
  # TRUE is one step at a time; longer sequences gain more
  expect_equal(attr(convlstm_memory_estimate(model, B, T, 6, 7, recompute_gates = TRUE),
                    "options")$recompute_gates, 1L)
  act <- function(...) bytes_of(convlstm_memory_estimate(model, B, T, 6, 7, ...))[["activations"]]
  expect_lt(act(recompute_gates = TRUE), act() / 2)
  expect_lt(act(recompute_gates = TRUE, checkpoint = 5), act(checkpoint = 5))
  # inference keeps no gates per step: the option changes nothing there
  expect_equal(bytes_of(convlstm_memory_estimate(model, B, T, 6, 7, training = FALSE,
                                        recompute_gates = TRUE)),
               bytes_of(convlstm_memory_estimate(model, B, T, 6, 7, training = FALSE)))
  # a larger batch fits the same budget
  budget <- 4 * 2^20
  expect_gt(convlstm_max_batch_size(model, T, 6, 7, budget = budget, recompute_gates = TRUE),
            convlstm_max_batch_size(model, T, 6, 7, budget = budget))
})

test_that("accumulation equals the full batch's update; its peak is a micro-batch's", {
  d <- tech_data(B = 4)
  full <- tech_model()
  acc <- tech_model()
  on.exit({
    convlstm_release(full)
    convlstm_release(acc)
  })
  opt <- convlstm_optimizer_sgd(lr = 0.1)
  l_full <- convlstm_train_step(full, d$x, d$y, opt)
  l_acc <- convlstm_train_step(acc, d$x, d$y, opt, accumulation_steps = 2)
  expect_equal(l_acc, l_full, tolerance = 1e-6)
  expect_lt(max_rel_diff(convlstm_gradients(acc), convlstm_gradients(full)), 1e-5)
  expect_lt(max_rel_diff(convlstm_state_dict(acc), convlstm_state_dict(full)), 1e-6)
  # a second step with Adam keeps them together
  expect_equal(convlstm_train_step(acc, d$x, d$y, convlstm_optimizer_adam(0.01), accumulation_steps = 2),
               convlstm_train_step(full, d$x, d$y, convlstm_optimizer_adam(0.01)), tolerance = 1e-5)
  # the peak of activations is one micro-batch's: that of a batch of 2
  micro <- tech_model()
  on.exit(convlstm_release(micro), add = TRUE)
  convlstm_train_step(micro, tech_data(B = 2)$x, tech_data(B = 2)$y, opt)
  expect_equal(peaks_of(acc)[["activations"]], peaks_of(micro)[["activations"]])
  expect_lt(convlstm_memory_stats(acc)$peak_allocated, convlstm_memory_stats(full)$peak_allocated)
  expect_equal(bytes_of(convlstm_memory_estimate(acc, 4, 6, 8, 8, accumulation_steps = 2))[["activations"]],
               bytes_of(convlstm_memory_estimate(acc, 2, 6, 8, 8))[["activations"]])
})

test_that("truncated BPTT: memory independent of T beyond the window", {
  totals <- vapply(c(8, 16, 32), function(T) {
    d <- tech_data(B = 2, T = T)
    model <- tech_model()
    on.exit(convlstm_release(model))
    expect_true(is.finite(convlstm_train_step(model, d$x, d$y, convlstm_optimizer_adam(), tbptt = 4)))
    est <- bytes_of(convlstm_memory_estimate(model, 2, T, 8, 8, tbptt = 4))
    expect_equal(convlstm_memory_stats(model)$peak_allocated, est[["total"]])
    convlstm_memory_stats(model)$peak_allocated
  }, numeric(1))
  expect_equal(totals[[2]], totals[[1]])
  expect_equal(totals[[3]], totals[[1]])
  # without truncation memory grows with T
  model <- tech_model()
  on.exit(convlstm_release(model))
  plain <- vapply(c(8, 16), function(T) bytes_of(convlstm_memory_estimate(model, 2, T, 8, 8))[["total"]],
                  numeric(1))
  expect_gt(plain[[2]], plain[[1]])
  # a window as long as the sequence is full backpropagation
  d <- tech_data(T = 6)
  m <- list(a = tech_model(), b = tech_model()) # the same weights (tech_model's seed)
  on.exit(release_all(m), add = TRUE)
  convlstm_train_step(m$a, d$x, d$y, convlstm_optimizer_sgd(0))
  convlstm_train_step(m$b, d$x, d$y, convlstm_optimizer_sgd(0), tbptt = 6)
  expect_lt(max_rel_diff(convlstm_gradients(m$b), convlstm_gradients(m$a)), 1e-6)
})

test_that("inference with only the last state: the same peak for T = 10 and T = 1000", {
  peak_for <- function(T, FUN, outputs = "last_state") {
    model <- tech_model()
    on.exit(convlstm_release(model))
    set.seed(7)
    x <- array(runif(T * 16), c(1, T, 1, 4, 4))
    out <- FUN(model, x)
    est <- bytes_of(convlstm_memory_estimate(model, 1, T, 4, 4, training = FALSE, outputs = outputs))
    s <- convlstm_memory_stats(model)
    expect_equal(s$peak_allocated, est[["total"]])
    list(peak = s$peak_allocated, reserved = s$peak_reserved, out = out)
  }
  p10 <- peak_for(10, function(m, x) predict(m, x, what = "last_state"))
  p1000 <- peak_for(1000, function(m, x) predict(m, x, what = "last_state"))
  expect_identical(p1000$peak, p10$peak)
  expect_identical(p1000$reserved, p10$reserved)
  # model(x, outputs = "last_state") too, with the same states as a full forward
  s10 <- peak_for(10, function(m, x) m(x, outputs = "last_state"))
  s1000 <- peak_for(1000, function(m, x) m(x, outputs = "last_state"))
  expect_identical(s1000$peak, s10$peak)
  expect_length(s10$out$layer_outputs, 0)
  full <- peak_for(10, function(m, x) m(x), outputs = "all")
  expect_gt(peak_for(1000, function(m, x) m(x), outputs = "all")$peak, full$peak)
  expect_equal(s10$out$layer_last_states, full$out$layer_last_states, tolerance = 1e-6)
  expect_equal(p10$out, full$out$layer_last_states[[2]]$h, tolerance = 1e-6)
})

test_that("convlstm_train_step() and convlstm_fit() check and pass the step options", {
  d <- tech_data(B = 4, T = 6)
  model <- tech_model()
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_adam()
  expect_convlstm_error(convlstm_train_step(model, d$x, d$y, opt, checkpoint = -1), regexp = "`checkpoint`")
  expect_convlstm_error(convlstm_train_step(model, d$x, d$y, opt, tbptt = 1.5), regexp = "`tbptt`")
  expect_convlstm_error(convlstm_train_step(model, d$x, d$y, opt, accumulation_steps = 5),
                        regexp = "must not exceed the batch size")
  expect_convlstm_error(convlstm_train_step(model, d$x, d$y, opt, checkpoint = 2, tbptt = 2),
                        regexp = "cannot be combined")
  # fit with accumulation over batches of 3 (the last batch of 1 runs whole)
  set.seed(9)
  h <- convlstm_fit(model, d$x, d$y, opt, epochs = 2, batch_size = 3, verbose = FALSE,
                    accumulation_steps = 2, checkpoint = 2)
  expect_equal(nrow(h), 2)
  expect_true(all(is.finite(h$loss)))
  # same data, same seeds: fit with checkpointing matches plain fit
  m <- list(a = tech_model(), b = tech_model()) # the same weights (tech_model's seed)
  on.exit(release_all(m), add = TRUE)
  set.seed(10)
  ha <- convlstm_fit(m$a, d$x, d$y, opt, epochs = 2, batch_size = 2, verbose = FALSE)
  set.seed(10)
  hb <- convlstm_fit(m$b, d$x, d$y, opt, epochs = 2, batch_size = 2, verbose = FALSE,
                     checkpoint = 3)
  expect_equal(hb$loss, ha$loss, tolerance = 1e-5)
  expect_lt(max(hb$peak_bytes), max(ha$peak_bytes))
  expect_convlstm_error(convlstm_fit(m$a, d$x, d$y, opt, tbptt = -2, verbose = FALSE),
                        regexp = "`tbptt`")
})
