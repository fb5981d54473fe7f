# test-forecaster-options.R -- the memory techniques the encoder-forecaster
# trains with through the capability table (issue 34), each against the
# whole-batch float32 step, which test-parity-forecaster.R checks against
# PyTorch: accumulation_steps gives its gradients within float32 rounding for
# every reduction; float16 and bfloat16 give them within their rounding; and
# each step holds what convlstm_memory_estimate() plans.

fo_model <- function(...) {
  set.seed(21)
  convlstm_forecaster(2, c(4, 3), 3, patch = 2, device = "cpu", threads = 1, ...)
}
fo_data <- function(B = 5) {
  set.seed(22)
  list(x = array(runif(B * 3 * 2 * 8 * 8), c(B, 3, 2, 8, 8)),
       y = array(runif(B * 2 * 2 * 8 * 8), c(B, 2, 2, 8, 8)))
}

# A step of learning rate 0: the loss, and the gradients it leaves.
fo_grads <- function(model, d, ...) {
  loss <- convlstm_train_step(model, d$x, d$y, convlstm_optimizer_sgd(lr = 0),
                              loss = "bce_logits", ...)
  list(loss = loss, grads = convlstm_gradients(model))
}

test_that("an encoder-forecaster's accumulation gives the whole batch's loss and gradients", {
  d <- fo_data()
  for (reduction in c("mean", "sum", "batchmean")) {
    whole <- fo_model()
    want <- fo_grads(whole, d, reduction = reduction)
    convlstm_release(whole)
    for (k in c(2, 3, 5)) { # 5 sequences: micro-batches of 3 + 2, 2 + 2 + 1, 1 each
      m <- fo_model()
      got <- fo_grads(m, d, reduction = reduction, accumulation_steps = k)
      label <- sprintf("%s, accumulation %d", reduction, k)
      expect_close(got$loss, want$loss, rel = 1e-6, label = paste(label, "loss"))
      for (n in names(want$grads)) {
        expect_close(got$grads[[n]], want$grads[[n]], rel = 1e-5, label = paste(label, n))
      }
      convlstm_release(m)
    }
  }
})

test_that("an encoder-forecaster's accumulation holds micro-batches, and its fit accumulates", {
  d <- fo_data()
  m <- fo_model()
  on.exit(convlstm_release(m))
  convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(lr = 0), accumulation_steps = 5)
  one <- convlstm_memory_stats(m)$by_category
  convlstm_empty_cache(m)
  convlstm_reset_peak_memory_stats(m)
  convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(lr = 0))
  all <- convlstm_memory_stats(m)$by_category
  # activations of one sequence at a time, not of all five
  expect_identical(5 * one$peak[one$category == "activations"],
                   all$peak[all$category == "activations"])
  # a fit with accumulation: the losses of the steps taken by hand, at the
  # peak of one sequence's activations, not five's
  twin <- fo_model()
  on.exit(convlstm_release(twin), add = TRUE)
  h <- convlstm_fit(twin, d$x, d$y, convlstm_optimizer_adam(lr = 0.01), epochs = 2,
                    batch_size = 5, shuffle = FALSE, verbose = FALSE, accumulation_steps = 2)
  m5 <- fo_model()
  m1 <- fo_model()
  on.exit(convlstm_release(m5), add = TRUE)
  on.exit(convlstm_release(m1), add = TRUE)
  h5 <- convlstm_fit(m5, d$x, d$y, convlstm_optimizer_adam(lr = 0.01), epochs = 1,
                     batch_size = 5, verbose = FALSE, accumulation_steps = 5)
  h1 <- convlstm_fit(m1, d$x, d$y, convlstm_optimizer_adam(lr = 0.01), epochs = 1,
                     batch_size = 5, verbose = FALSE)
  # the activations shrink to a fifth (the other step buffers too)
  expect_gte(h1$peak - h5$peak, 4 * one$peak[one$category == "activations"])
  m2 <- fo_model()
  on.exit(convlstm_release(m2), add = TRUE)
  opt <- convlstm_optimizer_adam(lr = 0.01)
  by_hand <- vapply(1:2, function(e) {
    convlstm_train_step(m2, d$x, d$y, opt, accumulation_steps = 2)
  }, 0)
  expect_close(h$loss, by_hand, rel = 1e-6)
})

test_that("an encoder-forecaster trains in float16 and bfloat16: float32's gradients, rounded", {
  d <- fo_data(3)
  f32 <- fo_model()
  want <- fo_grads(f32, d)
  convlstm_release(f32)
  # bfloat16 keeps 8 bits of mantissa, float16 11 (under a loss scale of
  # 2^16, divided out before the gradients are read): a gradient in the
  # wrong format or left scaled is off by far more
  for (dt in c("float16", "bfloat16")) {
    m <- fo_model(dtype = dt)
    got <- fo_grads(m, d, accumulation_steps = 2)
    tol <- if (dt == "float16") 0.02 else 0.1
    expect_lt(abs(got$loss - want$loss) / want$loss, tol / 10, label = paste(dt, "loss"))
    for (n in names(want$grads)) {
      err <- max(abs(got$grads[[n]] - want$grads[[n]])) / max(abs(want$grads[[n]]))
      expect_lt(err, tol, label = paste(dt, n))
    }
    fc <- predict(m, d$x, horizon = 2)
    expect_identical(dim(fc), dim(d$y))
    expect_true(all(is.finite(fc)))
    convlstm_release(m)
  }
})

test_that("an encoder-forecaster's step holds what convlstm_memory_estimate() plans", {
  d <- fo_data()
  for (case in list(list(dtype = "float32", k = 2), list(dtype = "float16", k = 1),
                    list(dtype = "bfloat16", k = 3))) {
    m <- fo_model(dtype = case$dtype)
    convlstm_train_step(m, d$x, d$y, convlstm_optimizer_rmsprop(lr = 1e-3),
                        accumulation_steps = case$k)
    est <- convlstm_memory_estimate(m, 5, 3, 8, 8, horizon = 2,
                                    optimizer = convlstm_optimizer_rmsprop(lr = 1e-3),
                                    accumulation_steps = case$k)
    expect_identical(convlstm_memory_stats(m)$peak_reserved, est$bytes[est$category == "reserved"],
                     label = paste(case$dtype, "accumulation", case$k))
    convlstm_release(m)
  }
})
