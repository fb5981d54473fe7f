# test-thread-split.R -- how a CPU model's threads share a step. The usual step (each call split
# across the threads) trains to one thread's bits on two. options(convlstm.thread_split = "batch"):
# a CPU model whose training steps give each thread a part of the batch (src/core/split.c) trains
# the model the usual step trains, says so, and its memory estimate is what the step then holds.

split_pair <- function(hidden_dims = c(4, 3), ...) {
  old <- options(convlstm.thread_split = "call")
  on.exit(options(old))
  set.seed(31)
  call <- convlstm(3, hidden_dims, 3, device = "cpu", threads = 2, ...)
  options(convlstm.thread_split = "batch")
  set.seed(31)
  batch <- convlstm(3, hidden_dims, 3, device = "cpu", threads = 2, ...)
  list(call = call, batch = batch)
}

test_that("options(convlstm.thread_split) is checked, and hands CONVLSTM_SPLIT back as it was", {
  old <- options(convlstm.thread_split = "threads")
  on.exit(options(old), add = TRUE)
  expect_convlstm_error(api_model(), regexp = "convlstm.thread_split")
  options(convlstm.thread_split = c("call", "batch"))
  expect_convlstm_error(api_model(), regexp = '"call", "batch" or "auto"')
  env <- Sys.getenv("CONVLSTM_SPLIT", unset = NA)
  on.exit(if (is.na(env)) Sys.unsetenv("CONVLSTM_SPLIT") else
    Sys.setenv(CONVLSTM_SPLIT = env), add = TRUE)
  Sys.setenv(CONVLSTM_SPLIT = "call")
  options(convlstm.thread_split = "batch")
  m <- api_model()
  expect_identical(Sys.getenv("CONVLSTM_SPLIT"), "call")
  expect_identical(m$config$thread_split, "batch")
  expect_true(any(grepl("split by batch across", capture.output(print(m)))))
  convlstm_release(m)
  options(convlstm.thread_split = "auto")
  m <- api_model()
  expect_identical(m$config$thread_split, "auto")
  expect_true(any(grepl("whichever a probe finds faster", capture.output(print(m)))))
  convlstm_release(m)
  options(convlstm.thread_split = NULL)
  m <- api_model() # the environment's, as it was
  expect_identical(m$config$thread_split, "call")
  expect_false(any(grepl("split by batch", capture.output(print(m)))))
  convlstm_release(m)
})

test_that("the usual step trains to the same bits on one thread and on two", {
  # each sum over images runs in one order on any team (src/cpu/cpu_conv.c's
  # backward filter by pieces of dw, cpu_winograd.c's by output channels,
  # cpu_sum.c's fixed groups): a model trained on two threads is one
  # thread's, float32 and float16, clipped or not
  old <- options(convlstm.thread_split = "call")
  on.exit(options(old))
  set.seed(11)
  x <- array(stats::runif(6 * 4 * 3 * 16 * 16, -1, 1), dim = c(6, 4, 3, 16, 16))
  y <- array(stats::runif(6 * 4 * 16 * 16, -1, 1), dim = c(6, 4, 16, 16))
  for (dtype in c("float32", "float16")) {
    for (clip in list(NULL, 1e-4)) {
      runs <- lapply(1:2, function(threads) {
        set.seed(7)
        m <- convlstm(3, c(8, 4), 3, device = "cpu", threads = threads, dtype = dtype)
        on.exit(convlstm_release(m))
        opt <- convlstm_optimizer_adam(lr = 0.01)
        losses <- vapply(1:3, function(i) {
          convlstm_train_step(m, x, y, opt, max_grad_norm = clip)
        }, numeric(1))
        list(losses = losses, parameters = lapply(m$parameters, as.vector))
      })
      what <- sprintf("%s, max_grad_norm %s", dtype, if (is.null(clip)) "NULL" else format(clip))
      expect_identical(runs[[2]]$losses, runs[[1]]$losses, label = what)
      expect_identical(runs[[2]]$parameters, runs[[1]]$parameters, label = what)
    }
  }
})

test_that("a step split by batch trains as the usual step, to float32 rounding", {
  p <- split_pair()
  on.exit(lapply(p, convlstm_release))
  expect_identical(p$batch$config$thread_split, "batch")
  expect_identical(p$call$config$thread_split, "call")
  expect_identical(p$batch$parameters, p$call$parameters)
  set.seed(5)
  x <- array(stats::runif(5 * 4 * 3 * 6 * 6, -1, 1), dim = c(5, 4, 3, 6, 6))
  y <- array(stats::runif(5 * 3 * 6 * 6, -1, 1), dim = c(5, 3, 6, 6))
  opt <- convlstm_optimizer_adam(lr = 0.01)
  for (step in 1:3) {
    lc <- convlstm_train_step(p$call, x, y, opt)
    lb <- convlstm_train_step(p$batch, x, y, opt)
    expect_equal(lb, lc, tolerance = 1e-5)
  }
  # a different sum order, so not the same bits; Adam's update amplifies the
  # gradients' last bits at its first steps
  expect_false(identical(p$batch$parameters, p$call$parameters))
  expect_equal(p$batch$parameters, p$call$parameters, tolerance = 1e-4)
})

test_that("a split step holds what its memory estimate said, each thread's buffers apart", {
  p <- split_pair()
  on.exit(lapply(p, convlstm_release))
  est <- convlstm_memory_estimate(p$batch, 5, 4, 6, 6, optimizer = convlstm_optimizer_adam())
  usual <- convlstm_memory_estimate(p$call, 5, 4, 6, 6, optimizer = convlstm_optimizer_adam())
  rows <- grep("^thread [0-9]+:", attr(est, "plan")$name, value = TRUE)
  threads <- unique(sub(":.*", "", rows))
  expect_identical(threads, c("thread 1", "thread 2"))
  expect_false(any(grepl("^thread", attr(usual, "plan")$name)))
  x <- array(0.5, dim = c(5, 4, 3, 6, 6))
  y <- array(0.25, dim = c(5, 3, 6, 6))
  convlstm_train_step(p$batch, x, y, convlstm_optimizer_adam())
  s <- convlstm_memory_stats(p$batch)
  expect_equal(s$peak_reserved, est$bytes[est$category == "reserved"])
  expect_gt(s$peak_reserved, 0)
})

# The pair's split model against its usual one over steps of x and y with
# the step options in ...: losses and parameters to float32 rounding, the
# split's estimate listing the threads' rows and its peak what it said.
# seeds: R's generator before each step (dropout's masks), the same for both.
split_agrees <- function(p, x, y, steps, seeds = NULL, ...) {
  opt <- convlstm_optimizer_sgd(lr = 0.1)
  d <- dim(x)
  est <- convlstm_memory_estimate(p$batch, d[1], d[2], d[4], d[5], optimizer = opt, ...)
  expect_true(any(grepl("^thread 2:", attr(est, "plan")$name)))
  for (step in seq_len(steps)) {
    if (!is.null(seeds)) set.seed(seeds[step])
    lc <- convlstm_train_step(p$call, x, y, opt, ...)
    if (!is.null(seeds)) set.seed(seeds[step])
    lb <- convlstm_train_step(p$batch, x, y, opt, ...)
    expect_equal(lb, lc, tolerance = 1e-6)
  }
  expect_equal(p$batch$parameters, p$call$parameters, tolerance = 1e-6)
  expect_equal(convlstm_memory_stats(p$batch)$peak_reserved,
               est$bytes[est$category == "reserved"])
}

test_that("dropout, accumulation and a carried state split too, as the usual step to rounding", {
  set.seed(6)
  x <- array(stats::runif(4 * 3 * 3 * 5 * 5), dim = c(4, 3, 3, 5, 5))
  y <- array(stats::runif(4 * 3 * 5 * 5), dim = c(4, 3, 5, 5))
  # masks drawn apart from the usual step's would move the loss by far more
  p <- split_pair(dropout = 0.25, recurrent_dropout = 0.25)
  on.exit(lapply(p, convlstm_release))
  split_agrees(p, x, y, 2, seeds = c(8, 9))
  q <- split_pair()
  on.exit(lapply(q, convlstm_release), add = TRUE)
  split_agrees(q, x, y, 1, accumulation_steps = 2)
  # a carried state: each thread reads and keeps its own rows of the model's
  r <- split_pair()
  on.exit(lapply(r, convlstm_release), add = TRUE)
  split_agrees(r, x, y, 3, state = "carry")
})

test_that("a given state splits: each thread stages its own sequences' rows, not the batch's", {
  set.seed(7)
  x <- array(stats::runif(4 * 3 * 3 * 5 * 5), dim = c(4, 3, 3, 5, 5))
  y <- array(stats::runif(4 * 3 * 5 * 5), dim = c(4, 3, 5, 5))
  given <- lapply(c(4, 3), function(h) {
    lapply(1:2, function(i) array(stats::runif(4 * h * 25) - 0.5, dim = c(4, h, 5, 5)))
  })
  p <- split_pair()
  on.exit(lapply(p, convlstm_release))
  opt <- convlstm_optimizer_sgd(lr = 0.1)
  est <- convlstm_memory_estimate(p$batch, 4, 3, 5, 5, optimizer = opt, state = "given")
  usual <- convlstm_memory_estimate(p$call, 4, 3, 5, 5, optimizer = opt, state = "given")
  bytes_of <- function(e, name) attr(e, "plan")$bytes[attr(e, "plan")$name == name]
  # layer 1's h: 4 sequences of 4 x 5 x 5 float32 in the usual step, 2 a thread split
  expect_equal(bytes_of(usual, "initial_h[0]"), 4 * 4 * 25 * 4)
  expect_equal(bytes_of(est, "thread 1: initial_h[0]"), 2 * 4 * 25 * 4)
  expect_equal(bytes_of(est, "thread 2: initial_c[1]"), 2 * 3 * 25 * 4)
  for (step in 1:2) {
    expect_equal(convlstm_train_step(p$batch, x, y, opt, state = given),
                 convlstm_train_step(p$call, x, y, opt, state = given), tolerance = 1e-6)
  }
  expect_equal(p$batch$parameters, p$call$parameters, tolerance = 1e-6)
  expect_equal(convlstm_memory_stats(p$batch)$peak_reserved,
               est$bytes[est$category == "reserved"])
  # the state is read: a different one moves the loss
  other <- rapply(given, function(a) -a, how = "list")
  expect_false(isTRUE(all.equal(convlstm_train_step(p$batch, x, y, opt, state = other),
                                convlstm_train_step(p$call, x, y, opt, state = given))))
})

test_that("thread_split = \"auto\" probes both ways, then keeps one, each step as the usual one", {
  old <- options(convlstm.thread_split = "call")
  on.exit(options(old))
  set.seed(8)
  usual <- convlstm(3, c(4, 3), 3, device = "cpu", threads = 2)
  options(convlstm.thread_split = "auto")
  set.seed(8)
  auto <- convlstm(3, c(4, 3), 3, device = "cpu", threads = 2)
  on.exit(lapply(list(usual, auto), convlstm_release), add = TRUE)
  x <- array(stats::runif(4 * 3 * 3 * 6 * 6, -1, 1), dim = c(4, 3, 3, 6, 6))
  y <- array(stats::runif(4 * 3 * 6 * 6, -1, 1), dim = c(4, 3, 6, 6))
  est <- convlstm_memory_estimate(auto, 4, 3, 6, 6, optimizer = convlstm_optimizer_adam())
  for (step in 1:14) {
    lu <- convlstm_train_step(usual, x, y, convlstm_optimizer_adam(lr = 0.01))
    la <- convlstm_train_step(auto, x, y, convlstm_optimizer_adam(lr = 0.01))
    expect_equal(la, lu, tolerance = 1e-5)
  }
  expect_equal(auto$parameters, usual$parameters, tolerance = 1e-4)
  # the probe ran the split (its buffers counted), never both ways' at once
  expect_equal(convlstm_memory_stats(auto)$peak_reserved,
               est$bytes[est$category == "reserved"])
})
