# The lifetimes of a training step's buffers, read off its list of
# operations (src/core/program.c), are what the planner shares memory by.
# CONVLSTM_POISON=1 fills each buffer with NaN before the first operation
# that uses it and after the last one, so a step that read a buffer outside
# the lifetime its operations give it would change its numbers: each
# configuration below trains bit for bit as without the poison.

poisoned <- function(on, make) {
  old <- Sys.getenv("CONVLSTM_POISON", unset = NA)
  on.exit(if (is.na(old)) Sys.unsetenv("CONVLSTM_POISON") else
    Sys.setenv(CONVLSTM_POISON = old))
  Sys.setenv(CONVLSTM_POISON = if (on) "1" else "0")
  make() # the model reads the variable when it is created
}

# Two steps of `args` on a fresh model; the losses and every tensor.
train_twice <- function(poison, model_fn, x, y, args) {
  set.seed(3)
  model <- poisoned(poison, model_fn)
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_adam(lr = 0.01)
  losses <- vapply(1:2, function(i) {
    do.call(convlstm_train_step, c(list(model, x, y, opt), args))
  }, 0)
  list(losses = losses, tensors = convlstm_state_dict(model))
}

plain <- function(...) {
  function() convlstm(2, c(3, 2), 3, device = "cpu", threads = 1, ...)
}

set.seed(1)
x <- array(runif(4 * 6 * 2 * 5 * 4), dim = c(4, 6, 2, 5, 4))
y_last <- array(runif(4 * 2 * 5 * 4), dim = c(4, 2, 5, 4))
y_seq <- array(runif(4 * 6 * 2 * 5 * 4), dim = c(4, 6, 2, 5, 4))

cases <- list(
  list("plain, last state", plain(), y_last, list()),
  list("checkpoint segments", plain(), y_seq, list(target = "sequence", checkpoint = 2)),
  list("recompute_gates and checkpoint", plain(), y_last,
       list(recompute_gates = 2, checkpoint = 4)),
  list("tbptt, last-state target", plain(), y_last, list(tbptt = 4)),
  list("tbptt, sequence target", plain(), y_seq, list(target = "sequence", tbptt = 4)),
  list("accumulation, carried state", plain(), y_last,
       list(accumulation_steps = 3, state = "carry", checkpoint = 3)),
  list("dropout per gate", plain(dropout = 0.3, recurrent_dropout = 0.2), y_seq,
       list(target = "sequence", checkpoint = 3)),
  list("a head", plain(head = "top"), y_seq, list(target = "sequence", checkpoint = 4))
)

for (case in cases) {
  test_that(sprintf("a step reads no buffer outside its lifetime [%s]", case[[1]]), {
    a <- train_twice(FALSE, case[[2]], x, case[[3]], case[[4]])
    b <- train_twice(TRUE, case[[2]], x, case[[3]], case[[4]])
    expect_true(all(is.finite(a$losses)))
    expect_identical(b$losses, a$losses)
    expect_identical(b$tensors, a$tensors)
  })
}

test_that("free running reads no buffer outside its lifetime", {
  fr <- function() convlstm(2, c(3, 2), 3, device = "cpu", threads = 1)
  yh <- array(runif(4 * 3 * 2 * 5 * 4), dim = c(4, 3, 2, 5, 4))
  args <- list(target = "sequence", horizon = 3, teacher_forcing = FALSE)
  a <- train_twice(FALSE, fr, x, yh, args)
  b <- train_twice(TRUE, fr, x, yh, args)
  expect_identical(b$losses, a$losses)
  expect_identical(b$tensors, a$tensors)
})

test_that("an encoder-forecaster reads no buffer outside its lifetime", {
  fx <- array(runif(2 * 4 * 2 * 8 * 8), dim = c(2, 4, 2, 8, 8))
  fy <- array(runif(2 * 5 * 2 * 8 * 8), dim = c(2, 5, 2, 8, 8))
  for (args in list(list(), list(checkpoint = 2, accumulation_steps = 2),
                    list(recompute_gates = 2))) {
    fc <- function() convlstm_forecaster(2, c(4, 3), 3, patch = 2, device = "cpu", threads = 1)
    a <- train_twice(FALSE, fc, fx, fy, args)
    b <- train_twice(TRUE, fc, fx, fy, args)
    expect_identical(b$losses, a$losses)
    expect_identical(b$tensors, a$tensors)
  }
})

test_that("the plan gives a training step's buffers their first and last operation", {
  model <- convlstm(2, c(3, 2), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  plan <- attr(convlstm_memory_estimate(model, 4, 6, 5, 4, checkpoint = 2,
                                        optimizer = convlstm_optimizer_adam()), "plan")
  row <- function(n) plan[plan$name == n, ]
  # the frames go in first; nothing is used before its first operation
  expect_identical(row("x")$first_op, 1L)
  steps <- !is.na(plan$first_op)
  expect_true(all(plan$first_op[steps] <= plan$last_op[steps]))
  # model buffers and the workspace live the whole call
  expect_true(all(is.na(plan$first_op[plan$name %in% c("parameters", "conv_workspace")])))
  # checkpoints are written in the forward and read until the first
  # segment's backward: they outlive every later segment's d_hidden use
  expect_gt(row("checkpoint_h[0]")$last_op, row("checkpoint_h[0]")$first_op)
  # segments interleave the layers' backward: each keeps its own d_cell
  expect_true(all(c("d_cell[0]", "d_cell[1]") %in% plan$name))
  one_seg <- attr(convlstm_memory_estimate(model, 4, 6, 5, 4,
                                           optimizer = convlstm_optimizer_adam()), "plan")
  expect_true("d_cell" %in% one_seg$name)
  expect_false(any(startsWith(one_seg$name, "d_cell[")))
})
