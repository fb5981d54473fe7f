# test-forecaster-memory.R -- checkpoint and recompute_gates on the
# encoder-forecaster (issue 34; src/core/program.c), each against the same
# forecaster trained without them (test-parity-forecaster.R checks that one
# against PyTorch), float32 and float16, with and without accumulation:
# - the first step's loss bit for bit (neither option changes a value of the
#   forward: a recomputed segment or chunk repeats its calls);
# - where the schedule is the plain one (checkpoint >= every stack's steps, a
#   chunk as long as the longest stack) the losses and parameters of three
#   Adam steps bit for bit;
# - otherwise, as the plain stack's own (test-memory-techniques.R), the
#   gradients within float32 rounding (1e-6 relative: the weight gradients are
#   summed segment by segment or chunk by chunk) and three Adam steps' losses
#   and parameters within 1e-5;
# - the allocator's peak equal to convlstm_memory_estimate() to the byte, the
#   plan's rows of checkpointed states written here by hand, and both options
#   below the plain step's peak.

fm_data <- function(B = 4, T = 5, K = 3) {
  set.seed(31)
  list(x = array(runif(B * T * 8 * 8), c(B, T, 1, 8, 8)),
       y = array(runif(B * K * 8 * 8), c(B, K, 1, 8, 8)))
}

# A fresh model (the same parameters each time): one lr-0 step's loss and
# gradients and its peak against its plan, then three Adam steps on another.
fm_run <- function(d, dtype = "float32", ...) {
  make <- function() {
    set.seed(32)
    m <- convlstm_forecaster(1, c(5, 3), 3, patch = 2, peephole = "channel", device = "cpu",
                             threads = 1)
    convlstm_set_dtype(m, dtype)
    m
  }
  m <- make()
  loss <- convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(lr = 0), ...)
  grads <- convlstm_gradients(m)
  dims <- dim(d$x)
  est <- convlstm_memory_estimate(m, dims[[1]], dims[[2]], dims[[4]], dims[[5]],
                                  horizon = dim(d$y)[[2]], optimizer = convlstm_optimizer_sgd(lr = 0),
                                  ...)
  peak <- convlstm_memory_stats(m)$peak_allocated
  convlstm_release(m)
  m <- make()
  on.exit(convlstm_release(m))
  opt <- convlstm_optimizer_adam(lr = 1e-2)
  losses <- vapply(1:3, function(i) convlstm_train_step(m, d$x, d$y, opt, ...), numeric(1))
  list(loss = loss, grads = grads, est = est, peak = peak, losses = losses,
       params = convlstm_state_dict(m))
}

fm_rel <- function(a, b) {
  a <- unlist(a)
  b <- unlist(b)
  max(abs(a - b)) / max(abs(b))
}

test_that("checkpoint and recompute_gates train an encoder-forecaster as without them", {
  d <- fm_data()
  for (dtype in c("float32", "float16")) {
    for (acc in c(1, 2)) {
      base <- fm_run(d, dtype, accumulation_steps = acc)
      info <- sprintf("%s, accumulation %d", dtype, acc)
      expect_identical(base$peak, estimate_bytes(base$est)[["total"]], info = info)
      opts <- list(list(checkpoint = 1), list(checkpoint = 2), list(recompute_gates = TRUE),
                   list(recompute_gates = 2), list(checkpoint = 2, recompute_gates = 1))
      for (o in opts) {
        r <- do.call(fm_run, c(list(d, dtype, accumulation_steps = acc), o))
        what <- paste(info, paste(names(o), unlist(o), collapse = ", "))
        expect_identical(r$loss, base$loss, info = what)
        expect_lt(fm_rel(r$grads, base$grads), if (dtype == "float32") 1e-6 else 1e-5)
        expect_lt(fm_rel(r$losses, base$losses), 1e-5)
        expect_lt(fm_rel(r$params, base$params), 1e-5)
        expect_identical(r$peak, estimate_bytes(r$est)[["total"]], info = what)
        expect_lt(r$peak, base$peak)
      }
      # the plain schedule: a segment or a chunk as long as the longest stack
      for (o in list(list(checkpoint = 5), list(recompute_gates = 5))) {
        r <- do.call(fm_run, c(list(d, dtype, accumulation_steps = acc), o))
        expect_identical(r$losses, base$losses, info = info)
        expect_identical(r$params, base$params, info = info)
      }
    }
  }
})

test_that("a checkpointed encoder-forecaster plans S steps of states and its checkpoints", {
  set.seed(33)
  m <- convlstm_forecaster(1, c(5, 3), 3, patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(m))
  B <- 4
  T <- 7
  K <- 4
  P <- 4 * 4 # 8 x 8 frames in 2 x 2 patches
  plan <- attr(convlstm_memory_estimate(m, B, T, 8, 8, horizon = K, checkpoint = 3), "plan")
  row <- function(n) plan$bytes[plan$name == n]
  # layers 0, 1: the encoder (7 steps: segments 3 + 3 + 1), 2, 3: the
  # forecaster (4 steps: 3 + 1); float32, hidden 5 and 3
  expect_equal(row("hidden[0]"), 3 * B * 5 * P * 4)
  expect_equal(row("gates[1]"), 3 * B * 4 * 3 * P * 4)
  expect_equal(row("checkpoint_h[0]"), 2 * B * 5 * P * 4)
  expect_equal(row("checkpoint_c[1]"), 2 * B * 3 * P * 4)
  expect_equal(row("checkpoint_h[2]"), 1 * B * 5 * P * 4)
  expect_equal(row("dz_carry[3]"), B * 4 * 3 * P * 4)
  expect_equal(row("d_cell[2]"), B * 5 * P * 4)
  # the head's output and its gradient: every target step still
  expect_equal(row("head_output"), K * B * 4 * P * 4)
  rc <- attr(convlstm_memory_estimate(m, B, T, 8, 8, horizon = K, recompute_gates = 2), "plan")
  expect_false(any(grepl("^gates\\[", rc$name)))
  expect_equal(rc$bytes[rc$name == "gates_recompute"], 2 * B * 4 * 5 * P * 4)
  # the receiving layers keep their first step's dz for the stack before
  expect_equal(rc$bytes[rc$name == "dz_carry[2]"], B * 4 * 5 * P * 4)
  expect_false(any(rc$name == "dz_carry[0]"))
})

test_that("convlstm_fit() of an encoder-forecaster checkpoints and recomputes gates", {
  d <- fm_data(B = 4, T = 5, K = 3)
  fit_with <- function(...) {
    set.seed(34)
    m <- convlstm_forecaster(1, c(5, 3), 3, patch = 2, device = "cpu", threads = 1)
    on.exit(convlstm_release(m))
    set.seed(35)
    # the data in R: the epoch's peak is then the step's alone
    h <- convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(lr = 1e-2), epochs = 2,
                      batch_size = 4, shuffle = FALSE, verbose = FALSE,
                      data_on_device = FALSE, ...)
    est <- convlstm_memory_estimate(m, 4, 5, 8, 8, horizon = 3,
                                    optimizer = convlstm_optimizer_adam(lr = 1e-2), ...)
    list(h = h, total = estimate_bytes(est)[["total"]])
  }
  plain <- fit_with()
  for (o in list(list(checkpoint = 2), list(recompute_gates = TRUE))) {
    r <- do.call(fit_with, o)
    what <- paste(names(o), unlist(o))
    # the epoch's peak is the step the options plan, below the plain one's
    expect_identical(r$h$peak_bytes[[2]], r$total, info = what)
    expect_lt(r$h$peak_bytes[[2]], plain$h$peak_bytes[[2]])
    expect_identical(r$h$loss[[1]], plain$h$loss[[1]], info = what)
    expect_lt(max(abs(r$h$loss - plain$h$loss) / plain$h$loss), 1e-5)
  }
})
