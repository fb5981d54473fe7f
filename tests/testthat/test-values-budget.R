# test-values-budget.R -- budgets at their edge, byte for byte (issue 38,
# items 1 and 2): convlstm_max_batch_size() and convlstm_memory_advise() against a budget of
# exactly a plan's bytes (fits) and one byte less (does not), the plan's
# bytes taken from convlstm_memory_estimate() (the plan the comparison reads, not
# the comparison under test); convlstm_fit(memory_budget = )'s validation
# batch and data set (fit_budget(), R/budget.R) at exactly the bytes they
# need and one byte less, the data set's bytes written out here.

# The plan's reserved bytes for a batch b (the training step as given).
reserved_of <- function(model, b, ...) {
  e <- convlstm_memory_estimate(model, b, ...)
  e$bytes[e$category == "reserved"]
}
runtime_of <- function(model) c_memory_stats(model_ptr(model))$runtime

test_that("max_batch_size: a budget of exactly batch b's reserved bytes gives b, one byte less b - 1", {
  m <- api_model()
  on.exit(convlstm_release(m))
  r <- vapply(1:9, function(b) reserved_of(m, b, seq_len = 3, height = 5, width = 4), numeric(1))
  expect_true(all(diff(r) > 0)) # each sample more needs more: the edges below are sharp
  rt <- runtime_of(m)
  for (b in c(1, 2, 5, 8)) { # the first plan, the doubling (2, 8) and the bisection (5)
    got <- convlstm_max_batch_size(m, 3, 5, 4, budget = r[[b]] + rt)
    expect_identical(as.integer(got), as.integer(b), label = paste("budget of batch", b))
    expect_identical(attr(got, "bytes"), r[[b]])
    expect_identical(as.integer(convlstm_max_batch_size(m, 3, 5, 4, budget = r[[b]] + rt - 1)),
                     as.integer(b - 1), label = paste("one byte under batch", b))
  }
  # one byte under batch 1: nothing fits, bytes 0
  none <- convlstm_max_batch_size(m, 3, 5, 4, budget = r[[1]] + rt - 1)
  expect_identical(attr(none, "bytes"), 0)
  # a budget between two plans: the smaller
  expect_identical(as.integer(convlstm_max_batch_size(m, 3, 5, 4, budget = (r[[6]] + r[[7]]) / 2 + rt)), 6L)
})

test_that("memory_advise: a configuration fits a budget of exactly its reserved bytes, not one less", {
  m <- api_model()
  on.exit(convlstm_release(m))
  opt <- convlstm_optimizer_adam()
  want <- reserved_of(m, 4, seq_len = 3, height = 5, width = 4, optimizer = opt)
  plain <- function(a) {
    a[a$dtype == "float32" & a$checkpoint == 0 & a$recompute_gates == 0 &
        a$accumulation_steps == 1 & a$tbptt == 0, , drop = FALSE]
  }
  rt <- runtime_of(m)
  at <- plain(convlstm_memory_advise(m, budget = want + rt, batch_size = 4, seq_len = 3, height = 5,
                            width = 4, optimizer = opt))
  expect_identical(nrow(at), 1L)
  expect_identical(at$reserved, want) # the advisor plans what convlstm_memory_estimate() plans
  expect_true(at$fits)
  expect_identical(at$reason, "")
  under <- plain(convlstm_memory_advise(m, budget = want + rt - 1, batch_size = 4, seq_len = 3, height = 5,
                               width = 4, optimizer = opt))
  expect_false(under$fits)
  expect_match(under$reason, "1 B over the budget")
})

# fit_budget() as convlstm_fit() calls it, with a planned training step of
# `arena` bytes beside the model's `model_bytes`.
held_fits <- function(budget, model_bytes, arena) {
  list(held = list(budget = budget, model_bytes = model_bytes, arena = arena), dtype = NULL)
}

test_that("the validation batch is the largest whose forward fits the budget exactly", {
  m <- api_model()
  on.exit(convlstm_release(m))
  val <- list(x = array(0, c(10, 3, 2, 12, 12)), y = array(0, c(10, 2, 12, 12)))
  # the inference forward of b samples: its plan's reserved bytes less the
  # model's own buffers (parameters, gradients, optimizer state)
  va <- vapply(1:8, function(b) {
    e <- convlstm_memory_estimate(m, b, 3, 12, 12, training = FALSE, outputs = "last_state")
    by <- stats::setNames(e$bytes, e$category)
    by[["reserved"]] - by[["parameters"]] - by[["gradients"]] - by[["optimizer"]]
  }, numeric(1))
  expect_true(all(diff(va) > 0))
  mb <- 50000
  arena <- va[[2]] # the training step's arena: validation batches above 2 need more
  vb <- function(budget) {
    fit_budget(m, held_fits(budget, mb, arena), c(10, 3, 2, 5, 4), val, 8, "last_state",
               data_on_device = FALSE, can_upload = FALSE)$validation_batch
  }
  for (b in c(3, 5, 8)) {
    expect_identical(as.integer(vb(mb + va[[b]])), as.integer(b), label = paste("budget of batch", b))
    expect_identical(as.integer(vb(mb + va[[b]] - 1)), as.integer(b - 1),
                     label = paste("one byte under batch", b))
  }
  # batches 1 and 2 fit within the training arena: a budget of exactly it takes 2
  expect_identical(as.integer(vb(mb + arena)), 2L)
  # one byte less and the training step itself is over: no batch at all, class oom
  expect_convlstm_error(vb(mb + arena - 1), status = "oom", regexp = "validation")
  # the training arena itself one byte over: not even one sample; class oom
  small <- function(budget) {
    fit_budget(m, held_fits(budget, mb, va[[1]]), c(10, 3, 2, 5, 4), val, 8, "last_state",
               data_on_device = FALSE, can_upload = FALSE)$validation_batch
  }
  expect_identical(as.integer(small(mb + va[[1]])), 1L)
  expect_convlstm_error(small(mb + va[[1]] - 1), status = "oom", regexp = "validation")
})

test_that("a data set on the device is kept when it fits the budget exactly, not one byte over", {
  m <- api_model()
  on.exit(convlstm_release(m))
  # 8 sequences of 3 steps of 2 x 5 x 4 and last-state targets of 2 x 5 x 4,
  # float32, and one 4-byte row index per sequence
  data <- 4 * (8 * 3 * 2 * 5 * 4 + 8 * 2 * 5 * 4 + 8)
  expect_identical(c_data_bytes_for(model_ptr(m), c(8, 3, 5, 4), "last_state"), data)
  mb <- 10000
  arena <- 30000
  keep <- function(budget, on) {
    fit_budget(m, held_fits(budget, mb, arena), c(8, 3, 2, 5, 4), NULL, 4, "last_state",
               data_on_device = on, can_upload = TRUE)$data_on_device
  }
  expect_identical(keep(mb + arena + data, "auto"), "auto")
  expect_false(keep(mb + arena + data - 1, "auto"))
  expect_true(keep(mb + arena + data, TRUE))
  expect_convlstm_error(keep(mb + arena + data - 1, TRUE), status = "oom", regexp = "data set")
  # a fit that cannot upload (a weight, a horizon) holds nothing for it
  expect_identical(fit_budget(m, held_fits(mb + arena, mb, arena), c(8, 3, 2, 5, 4), NULL, 4,
                              "last_state", data_on_device = TRUE, can_upload = FALSE)$data_on_device,
                   TRUE)
})

test_that("largest_batch finds the edge of a predicate by hand", {
  expect_identical(largest_batch(10L, function(b) b <= 10), 10L)
  expect_identical(largest_batch(10L, function(b) b <= 9), 9L)
  expect_identical(largest_batch(10L, function(b) b <= 1), 1L)
  expect_identical(largest_batch(10L, function(b) b <= 0), 0L)
  expect_identical(largest_batch(1L, function(b) b <= 0), 0L)
})

test_that("convlstm_fit(memory_budget = ) trains at exactly the smallest plan's bytes, not one byte less", {
  set.seed(3)
  m <- api_model()
  on.exit(convlstm_release(m))
  x <- api_x(B = 4)
  y <- api_y(B = 4)
  a <- convlstm_memory_advise(m, budget = 2^30, batch_size = 4, seq_len = 3, height = 5, width = 4)
  smallest <- min(a$reserved, na.rm = TRUE)
  rt <- runtime_of(m)
  h <- convlstm_fit(m, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = 4, shuffle = FALSE,
                    memory_budget = smallest + rt, verbose = FALSE)
  expect_identical(nrow(h), 1L)
  expect_true(is.finite(h$loss))
  expect_convlstm_error(
    convlstm_fit(m, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = 4, shuffle = FALSE,
                 memory_budget = smallest + rt - 1, verbose = FALSE),
    status = "oom", regexp = "does not fit in the memory budget")
})
