# Batches converted ahead (src/core/staged.c): while a fit's step runs on
# its own thread, R converts the next batch into the core's layout (on a
# GPU, into page-locked memory) so that its step only uploads it. On by
# default on a GPU; options(convlstm.stage_batches = TRUE) stages on the
# CPU too, which these tests use: the fit must equal, bit for bit, the same
# fit converting each batch at its step, and the steps must have read the
# staged batches (a batch staged from other arrays is refused by the step).
# count_calls(), fit_arrays(), expect_same_fit(): helper-trace.R.

# fit_arrays() reading ahead, staged or not, counting the fills.
fit_staged <- function(make, x, y, stage, ...) {
  fit_arrays(make, x, y, TRUE, ..., stage = stage, count = c("c_staged_fill", "c_train_step_start"))
}

stack_model <- function(dtype = "float32") {
  function() {
    set.seed(11)
    convlstm(1, c(3, 1), 3, device = "cpu", threads = 1, dtype = dtype)
  }
}

test_that("a fit on R arrays with its batches staged ahead equals, bit for bit, the fit converting them at each step", {
  set.seed(3)
  x <- array(stats::runif(23 * 3 * 4 * 4), c(23, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(23, 1, 4, 4))
  w <- array(stats::runif(23 * 4 * 4), c(23, 1, 4, 4))
  args <- list(epochs = 2, batch_size = 4, shuffle = TRUE, validation_split = 0.2,
               accumulation_steps = 2, weight = w)
  staged <- do.call(fit_staged, c(list(stack_model(), x, y, TRUE), args))
  plain <- do.call(fit_staged, c(list(stack_model(), x, y, FALSE), args))
  # 18 training rows in batches 4, 4, 4, 4, 2: each batch but an epoch's
  # first is read, and so staged, during the step before
  expect_equal(staged$calls$c_train_step_start, 2 * 5)
  expect_equal(staged$calls$c_staged_fill, 2 * 4)
  expect_equal(plain$calls$c_staged_fill, 0)
  expect_same_fit(staged, plain)
  # two staged batches alternate: from an epoch's third fill on, each
  # refills the one the step before read (batch 1 is not staged, so the
  # fills of batches 2 and 3 make new ones)
  spares <- new.env()
  spares$n <- 0
  suppressMessages(trace("c_staged_fill", where = asNamespace("convlstm"), print = FALSE,
                         tracer = bquote(if (!is.null(spare)) assign("n", get("n", .(spares)) + 1,
                                                                     envir = .(spares)))))
  again <- tryCatch(do.call(fit_arrays, c(list(stack_model(), x, y, TRUE), args,
                                           list(stage = TRUE, count = "c_train_step_start"))),
                    finally = suppressMessages(untrace("c_staged_fill", where = asNamespace("convlstm"))))
  expect_equal(spares$n, 2 * 2)
  expect_same_fit(again, plain)
  # half storage: x staged in bfloat16
  staged <- do.call(fit_staged, c(list(stack_model("bfloat16"), x, y, TRUE), args))
  plain <- do.call(fit_staged, c(list(stack_model("bfloat16"), x, y, FALSE), args))
  expect_equal(staged$calls$c_staged_fill, 2 * 4)
  expect_same_fit(staged, plain)
})

test_that("an encoder-forecaster's frames and a function source's batches are staged; a last-state source is not", {
  set.seed(4)
  x8 <- array(stats::runif(7 * 3 * 8 * 8), c(7, 3, 1, 8, 8))
  y8 <- array(stats::runif(7 * 2 * 8 * 8), c(7, 2, 1, 8, 8))
  ff <- function() {
    set.seed(21)
    convlstm_forecaster(1, c(4, 3), 3, patch = 2, device = "cpu", threads = 1)
  }
  staged <- fit_staged(ff, x8, y8, TRUE, epochs = 2, batch_size = 2)
  plain <- fit_staged(ff, x8, y8, FALSE, epochs = 2, batch_size = 2)
  expect_equal(staged$calls$c_staged_fill, 2 * 3) # batches 2, 2, 2, 1
  expect_same_fit(staged, plain)

  x <- array(stats::runif(12 * 3 * 4 * 4), c(12, 3, 1, 4, 4))
  ys <- array(stats::runif(12 * 3 * 1 * 4 * 4), c(12, 3, 1, 4, 4))
  seq_model <- function() {
    set.seed(13)
    convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  }
  src <- convlstm_source_function(function(i) list(x = x[i, , , , , drop = FALSE],
                                                   y = ys[i, , , , , drop = FALSE]),
                                  n = 12, x_dim = c(3, 1, 4, 4), y_dim = c(3, 1, 4, 4))
  staged <- fit_staged(seq_model, src, NULL, TRUE, epochs = 2, batch_size = 5, target = "sequence")
  plain <- fit_staged(seq_model, src, NULL, FALSE, epochs = 2, batch_size = 5, target = "sequence")
  expect_equal(staged$calls$c_staged_fill, 2 * 2)
  expect_same_fit(staged, plain)

  # y's step dimension dropped for a last-state target: the step's y is not
  # the array read, so nothing is staged, and the fit is the same
  yl <- array(x[, 3, 1, , ], c(12, 1, 1, 4, 4))
  last <- convlstm_source_function(function(i) list(x = x[i, , , , , drop = FALSE],
                                                    y = yl[i, , , , , drop = FALSE]),
                                   n = 12, x_dim = c(3, 1, 4, 4), y_dim = c(1, 1, 4, 4))
  staged <- fit_staged(stack_model(), last, NULL, TRUE, epochs = 1, batch_size = 5)
  plain <- fit_staged(stack_model(), last, NULL, FALSE, epochs = 1, batch_size = 5)
  expect_equal(staged$calls$c_staged_fill, 0)
  expect_same_fit(staged, plain)
})

test_that("a step reads its staged batch: one staged from other arrays is refused, and a spare's memory is reused", {
  m <- stack_model()()
  on.exit(convlstm_release(m))
  set.seed(5)
  x <- array(stats::runif(4 * 3 * 16), c(4, 3, 1, 4, 4))
  x2 <- x + 1
  y <- array(stats::runif(4 * 16), c(4, 1, 4, 4))
  opt <- convlstm_optimizer_sgd(0.1)
  ptr <- convlstm:::model_ptr(m)
  s1 <- convlstm:::c_staged_fill(ptr, x, y, "last_state")
  job <- convlstm:::c_train_step_start(ptr, x2, y, "last_state", opt, NULL, s1)
  expect_convlstm_error(convlstm:::c_train_step_finish(ptr, job), regexp = "not filled from these arrays")
  job <- convlstm:::c_train_step_start(ptr, x, y, "last_state", opt, NULL, s1)
  staged_loss <- convlstm:::c_train_step_finish(ptr, job)
  expect_true(is.finite(staged_loss))
  # the spare's batch moves into the new handle; the spare holds none
  s2 <- convlstm:::c_staged_fill(ptr, x2, y, "last_state", spare = s1)
  expect_convlstm_error(convlstm:::c_train_step_start(ptr, x, y, "last_state", opt, NULL, s1),
                        regexp = "not a staged batch")
  job <- convlstm:::c_train_step_start(ptr, x2, y, "last_state", opt, NULL, s2)
  expect_true(is.finite(convlstm:::c_train_step_finish(ptr, job)))
  # bad arrays are refused by the fill, classed
  expect_convlstm_error(convlstm:::c_staged_fill(ptr, array(0, c(4, 3, 4, 4)), y, "last_state"),
                        regexp = "`x` must be an array with 5 dimensions")
})

test_that("a source's plan holds the two staged batches where its fit stages them", {
  x <- array(0, c(9, 3, 1, 4, 4))
  y <- array(0, c(9, 3, 1, 4, 4))
  src <- convlstm_source_arrays(x, y)
  m <- stack_model()()
  on.exit(convlstm_release(m))
  rows <- function(stage, ...) {
    old <- options(convlstm.prefetch = TRUE, convlstm.stage_batches = stage)
    on.exit(options(old))
    est <- convlstm_memory_estimate(m, 6, 3, 4, 4, source = src, target = "sequence", ...)
    plan <- attr(est, "plan")
    list(staged = plan$bytes[match(c("staged_batch", "staged_batch_next"), plan$name)],
         data = stats::setNames(est$bytes, est$category)[["data"]])
  }
  # 6 samples of x [3, 1, 4, 4] in float32 (1152 bytes, y placed after
  # them at the next multiple of 256, 1280) and y [3, 1, 4, 4] in float32
  one <- 1280 + 6 * 48 * 4
  on <- rows(TRUE)
  off <- rows(FALSE)
  expect_equal(on$staged, c(one, one))
  expect_equal(off$staged, c(NA_real_, NA_real_))
  expect_equal(on$data - off$data, 2 * one)
  # the core's answer, and its refusals, classed
  expect_equal(convlstm:::c_staged_layout_bytes("float32", c(6, 3, 1, 4, 4), c(6, 3, 1, 4, 4)), one)
  expect_convlstm_error(convlstm:::c_staged_layout_bytes("float32", c(6, 3, 4, 4), c(6, 3, 1, 4, 4)),
                        regexp = "`x_dims` must list 5 dimensions")
  expect_convlstm_error(convlstm:::c_staged_layout_bytes("float32", c(6, 3, 1, 4, 4), c(6, 0, 4, 4)),
                        regexp = "`y_dims` must hold whole numbers")
  expect_convlstm_error(convlstm:::c_staged_layout_bytes("float32", rep(2^30, 5), c(6, 3, 4, 4)),
                        regexp = "overflows")
  # x staged in the estimate's storage dtype
  # (576 bytes, so y from 768)
  expect_equal(rows(TRUE, dtype = "bfloat16")$staged, rep(768 + 6 * 48 * 4, 2))
  # on the CPU a fit stages nothing unless asked, and neither does its plan
  old <- options(convlstm.stage_batches = NULL)
  on.exit(options(old), add = TRUE)
  expect_false(convlstm:::stage_enabled(list(config = list(backend = "cpu"))))
  expect_true(convlstm:::stage_enabled(list(config = list(backend = "cuda"))))
})

test_that("batches sent ahead into the model's device buffers train the same bits, in the buffers the plan counts, freed when the epoch ends", {
  set.seed(6)
  x <- array(stats::runif(14 * 3 * 4 * 4), c(14, 3, 1, 4, 4))
  y <- array(stats::runif(14 * 3 * 4 * 4), c(14, 3, 1, 4, 4))
  src <- convlstm_source_arrays(x, y)
  fit_sent <- function(send) {
    old <- options(convlstm.prefetch = TRUE, convlstm.stage_batches = TRUE,
                   convlstm.send_ahead = send)
    on.exit(options(old))
    m <- stack_model()()
    on.exit(convlstm_release(m), add = TRUE)
    data_now <- function() {
      s <- convlstm_memory_stats(m)$by_category
      s$current[s$category == "data"]
    }
    at_batch_end <- numeric()
    cb <- convlstm_callback(on_batch_end = function(ctx) at_batch_end[[length(at_batch_end) + 1L]] <<- data_now())
    sends <- new.env()
    sends$sent <- logical()
    suppressMessages(trace("c_staged_fill", where = asNamespace("convlstm"), print = FALSE,
                           exit = bquote(assign("sent", c(get("sent", .(sends)),
                                                          attr(returnValue(), "sent")),
                                                envir = .(sends)))))
    on.exit(suppressMessages(untrace("c_staged_fill", where = asNamespace("convlstm"))), add = TRUE)
    set.seed(7)
    h <- convlstm_fit(m, src, NULL, convlstm_optimizer_adam(0.02), epochs = 2, batch_size = 3,
                      target = "sequence", callbacks = list(cb), verbose = FALSE)
    plan <- attr(convlstm_memory_estimate(m, 3, 3, 4, 4, source = src, target = "sequence"), "plan")
    list(h = h, w = convlstm_state_dict(m), data = at_batch_end, after = data_now(), sent = sends$sent,
         plan = plan$bytes[match(c("staged_device", "staged_device_next"), plan$name)])
  }
  sent <- fit_sent(TRUE)
  plain <- fit_sent(FALSE)
  expect_identical(sent$h$loss, plain$h$loss)
  expect_identical(sent$w, plain$w)
  # each buffer: x (3 samples of [3, 1, 4, 4] in float32, 576 bytes), then
  # y from the next multiple of 256 bytes (768), as the C core lays a
  # staged batch out and the plan asks it to (the allocator's count below
  # is the instrument)
  dev <- 768 + 3 * 48 * 4
  expect_equal(sent$plan, c(dev, dev))
  expect_equal(plain$plan, c(NA_real_, NA_real_))
  # batches 3, 3, 3, 3, 2 per epoch: each step makes the buffers the next
  # batch is sent into while it runs (the first step too), so the model
  # holds the two buffers the plan counts beside what the plain fit holds
  # -- until the epoch ends
  expect_equal(sent$data - plain$data, rep(2 * dev, 10))
  expect_equal(sent$after, plain$after)
  # batches 2 to 5 of each epoch are staged and sent, and then read from
  # the buffers by their steps (the same bits as above)
  expect_identical(sent$sent, rep(TRUE, 8))
  expect_identical(plain$sent, rep(FALSE, 8))
  expect_false(convlstm:::send_enabled(list(config = list(backend = "cpu"))))
  expect_true(convlstm:::send_enabled(list(config = list(backend = "cuda"))))
})
