# test-estimate.R -- convlstm_memory_estimate() against bytes derived from the shapes
# (the model's math, written here apart from the planner) for a set of
# configurations through the R API; and equal to the allocator's accounting
# to the byte: over 60 random tiny configurations, shapes and step options (checkpoint,
# accumulation_steps, tbptt, dtype, training or inference with all outputs or
# the last state only, from zeros, a given initial state or, training, a
# carried one; no peepholes, per channel or per position; with or without
# dropout), a fresh model's accounted peak per category after one real step
# equals the plan's estimate (the allocator charges each buffer its planned
# size, so this shows the options reach the plan, not that the plan is
# right; `make test-guard` runs it with guard bands after every buffer).
# Plus the estimate's plan, print and summary(model, input_shape).

est_model <- function(...) convlstm(..., device = "cpu", threads = 1)
estimate_bytes_of <- function(est) stats::setNames(est$bytes, est$category)

# One random case: a tiny model configuration, an input shape and options.
random_case <- function(i) {
  L <- sample(1:2, 1)
  case <- list(
    input_dim = sample(1:3, 1), hidden_dims = sample(1:4, L, replace = TRUE),
    kernel_sizes = sample(c(1, 3, 5), L, replace = TRUE), bias = runif(1) < 0.8,
    dtype = sample(c("float32", "float32", "float16", "bfloat16"), 1),
    B = sample(1:4, 1), T = sample(1:7, 1), H = sample(2:6, 1), W = sample(2:6, 1),
    training = runif(1) < 0.7
  )
  if (case$training) {
    # checkpoint and tbptt cannot be combined; each applies only below T
    technique <- sample(c("none", "checkpoint", "tbptt"), 1)
    case$checkpoint <- if (technique == "checkpoint") sample(1:4, 1) else 0
    case$tbptt <- if (technique == "tbptt") sample(1:4, 1) else 0
    case$accumulation_steps <- if (runif(1) < 0.4) sample(seq_len(case$B), 1) else 1
    case$target <- sample(c("last_state", "sequence"), 1)
    case$optimizer <- switch(sample(3, 1), convlstm_optimizer_adam(), convlstm_optimizer_sgd(0.1),
                             convlstm_optimizer_sgd(0.1, momentum = 0.9))
  } else {
    case$outputs <- sample(c("all", "last_state"), 1)
  }
  case$state <- sample(c("zero", "given", if (case$training) "carry"), 1)
  # non-square kernels and dilation in a third of the cases
  case$kernel_widths <- case$kernel_sizes
  case$dilation <- rep(1, L)
  if (runif(1) < 1 / 3) {
    case$kernel_widths <- sample(c(1, 3, 5), L, replace = TRUE)
    case$dilation <- sample(1:3, L, replace = TRUE)
  }
  # peepholes by the case's number (the random draws stay as they were)
  case$peephole <- c("none", "channel", "position")[[i %% 3 + 1]]
  # dropout on the input and / or h in a third of the cases (training plans
  # its masks and masked copy; inference nothing)
  case$dropout <- case$recurrent_dropout <- rep(0, L)
  if (runif(1) < 1 / 3) {
    case$dropout <- sample(c(0, 0.3), L, replace = TRUE)
    case$recurrent_dropout <- sample(c(0, 0.5), L, replace = TRUE)
  }
  case
}

# A random initial state for case's model and shape.
case_state <- function(case) {
  lapply(case$hidden_dims, function(h) {
    d <- c(case$B, h, case$H, case$W)
    list(h = array(runif(prod(d), -1, 1), d), c = array(runif(prod(d), -1, 1), d))
  })
}

describe_case <- function(case) {
  shown <- case[setdiff(names(case), "optimizer")]
  if (!is.null(case$optimizer)) {
    shown$optimizer <- paste0(case$optimizer$kind, if (isTRUE(case$optimizer$momentum > 0)) "+m")
  }
  paste(names(shown), vapply(shown, function(v) paste(v, collapse = ","), ""), sep = "=",
        collapse = " ")
}

run_case <- function(case) {
  model <- est_model(case$input_dim, case$hidden_dims,
                     Map(c, case$kernel_sizes, case$kernel_widths), bias = case$bias,
                     dtype = case$dtype, dilation = as.list(case$dilation),
                     peephole = case$peephole,
                     frame_size = if (case$peephole == "position") c(case$H, case$W),
                     dropout = case$dropout, recurrent_dropout = case$recurrent_dropout)
  on.exit(convlstm_release(model))
  C_out <- case$hidden_dims[[length(case$hidden_dims)]]
  x <- array(runif(case$B * case$T * case$input_dim * case$H * case$W, -1, 1),
             c(case$B, case$T, case$input_dim, case$H, case$W))
  state <- switch(case$state, zero = NULL, given = case_state(case), carry = "carry")
  if (case$training) {
    est <- convlstm_memory_estimate(model, case$B, case$T, case$H, case$W,
                           checkpoint = case$checkpoint, tbptt = case$tbptt,
                           accumulation_steps = case$accumulation_steps,
                           optimizer = case$optimizer, state = case$state,
                           target = case$target)
    yd <- if (case$target == "sequence") c(case$B, case$T, C_out, case$H, case$W)
          else c(case$B, C_out, case$H, case$W)
    loss <- convlstm_train_step(model, x, array(runif(prod(yd)), yd), case$optimizer,
                       target = case$target, checkpoint = case$checkpoint, tbptt = case$tbptt,
                       accumulation_steps = case$accumulation_steps, state = state)
    expect_true(is.finite(loss))
  } else {
    est <- convlstm_memory_estimate(model, case$B, case$T, case$H, case$W, training = FALSE,
                           outputs = case$outputs, state = case$state)
    out <- if (case$outputs == "all") model(x, state = state)
           else predict(model, x, what = "last_state", state = state)
  }
  list(est = est, stats = convlstm_memory_stats(model))
}

# Bytes per category a training step (or an inference forward) must hold,
# from the shapes: float32 master weights [4h, in + h, k, k] and bias [4h]
# per layer, their gradients, the optimizer's moments; the input of the
# steps held; per step the 4 gates, c_t and h_t; h and c at checkpoint
# boundaries; the backward's float32 dL/dh over the steps held and dL/dc of
# one step (dL/dh of one step where a single layer trains on its last
# state: dh_one). The convolution workspace and the backend's scratch are left
# out (the CPU backend sizes them from its GEMM choice); test_plan_bytes.c
# does the same at the C level with more options.
bytes_from_shapes <- function(input_dim, hidden, k, B, T, H, W, dtype = "float32",
                              moments = 2, checkpoint = 0, accumulation_steps = 1,
                              training = TRUE, outputs = "all", dh_one = FALSE) {
  e <- if (dtype == "float32") 4 else 2
  P <- H * W
  ins <- c(input_dim, head(hidden, -1))
  params <- 4 * sum(4 * hidden * (ins + hidden) * k^2 + 4 * hidden)
  hmax <- max(hidden)
  if (!training) {
    keep <- if (outputs == "all") e * T * B * hidden * P else 0
    return(c(parameters = params, gradients = 0, optimizer = 0, activations = sum(keep),
             states = sum(2 * e * B * hidden * P * (if (outputs == "all") 1 else 2)),
             workspace = e * B * 4 * hmax * P, data = e * B * input_dim * P))
  }
  Bm <- ceiling(B / accumulation_steps)
  S <- if (checkpoint > 0 && checkpoint < T) checkpoint else T
  nseg <- ceiling(T / S)
  act <- sum(e * S * Bm * 6 * hidden * P + 2 * e * (nseg - 1) * Bm * hidden * P)
  ws <- 4 * (if (dh_one) 1 else S) * hmax * Bm * P +
    if (nseg > 1) sum(e * Bm * 4 * hidden * P + 4 * Bm * hidden * P) else 4 * Bm * hmax * P
  c(parameters = params, gradients = params, optimizer = moments * params, activations = act,
    states = 0, workspace = ws, data = e * T * Bm * input_dim * P)
}

test_that("convlstm_memory_estimate() equals bytes derived from the shapes, category by category", {
  cases <- list(
    # no target: the default convlstm_train_step()'s, the last state (one layer: one step of dL/dh)
    list(args = list(2, 3, 3), shape = c(2, 4, 5, 6), opts = list(optimizer = convlstm_optimizer_adam()),
         dh_one = TRUE),
    list(args = list(1, c(4, 2), c(3, 5)), shape = c(3, 3, 6, 4),
         opts = list(optimizer = convlstm_optimizer_sgd(0.1)), moments = 0),
    list(args = list(2, c(4, 3), c(3, 1), dtype = "float16"), shape = c(2, 5, 4, 4),
         opts = list(optimizer = convlstm_optimizer_sgd(0.1, momentum = 0.9), checkpoint = 2), moments = 1),
    list(args = list(1, c(3, 5), c(3, 3), dtype = "bfloat16"), shape = c(5, 4, 5, 3),
         opts = list(optimizer = convlstm_optimizer_adam(amsgrad = TRUE), accumulation_steps = 2),
         moments = 3),
    list(args = list(2, c(3, 5), c(3, 3)), shape = c(2, 6, 5, 4),
         opts = list(training = FALSE, outputs = "last_state")),
    # convlstm_train_step()'s plan for its target: one layer on its last state keeps
    # one step of dL/dh; a sequence, or a layer above, every step
    list(args = list(2, 3, 3), shape = c(2, 4, 5, 6),
         opts = list(optimizer = convlstm_optimizer_adam(), target = "last_state", checkpoint = 3),
         dh_one = TRUE),
    list(args = list(2, 3, 3), shape = c(2, 4, 5, 6),
         opts = list(optimizer = convlstm_optimizer_adam(), target = "sequence")),
    list(args = list(1, c(4, 2), c(3, 5)), shape = c(3, 3, 6, 4),
         opts = list(optimizer = convlstm_optimizer_adam(), target = "last_state"))
  )
  for (cs in cases) {
    model <- do.call(est_model, cs$args)
    sh <- cs$shape
    est <- do.call(convlstm_memory_estimate, c(list(model, sh[1], sh[2], sh[3], sh[4]), cs$opts))
    convlstm_release(model)
    plan <- attr(est, "plan")
    left_out <- sum(plan$bytes[plan$name %in% c("conv_workspace", "backend_scratch")])
    got <- estimate_bytes_of(est)[c("parameters", "gradients", "optimizer", "activations",
                                    "states", "workspace", "data")]
    got[["workspace"]] <- got[["workspace"]] - left_out
    want <- bytes_from_shapes(
      cs$args[[1]], cs$args[[2]], cs$args[[3]], sh[1], sh[2], sh[3], sh[4],
      dtype = if (is.null(cs$args$dtype)) "float32" else cs$args$dtype,
      moments = if (is.null(cs$moments)) 2 else cs$moments,
      checkpoint = if (is.null(cs$opts$checkpoint)) 0 else cs$opts$checkpoint,
      accumulation_steps = if (is.null(cs$opts$accumulation_steps)) 1
                           else cs$opts$accumulation_steps,
      training = !identical(cs$opts$training, FALSE),
      outputs = if (is.null(cs$opts$outputs)) "all" else cs$opts$outputs,
      dh_one = isTRUE(cs$dh_one))
    expect_identical(as.numeric(got), as.numeric(want[names(got)]),
                     info = paste(deparse(cs$args), deparse(cs$opts$optimizer$kind)))
  }
})

test_that("the allocator's accounted peaks equal the estimate to the byte over 60 random cases", {
  set.seed(20240611)
  n_training <- 0
  techniques <- character()
  for (i in 1:60) {
    case <- random_case(i)
    info <- describe_case(case)
    r <- run_case(case)
    est <- estimate_bytes_of(r$est)
    s <- r$stats
    accounted <- stats::setNames(s$by_category$peak, s$by_category$category)
    expect_identical(accounted, est[names(accounted)], info = info)
    expect_identical(s$peak_allocated, est[["total"]], info = info)
    expect_identical(s$peak_reserved, est[["reserved"]], info = info)
    # the plan's buffers add up to the rows
    plan <- attr(r$est, "plan")
    sums <- tapply(plan$bytes, factor(plan$category, levels = names(accounted)), sum)
    sums[is.na(sums)] <- 0
    expect_equal(as.numeric(sums), unname(est[names(accounted)]), info = info)
    n_training <- n_training + case$training
    if (case$training) {
      techniques <- c(techniques, if (case$checkpoint > 0) "checkpoint",
                      if (case$tbptt > 0) "tbptt", if (case$accumulation_steps > 1) "accumulation")
    }
    techniques <- c(techniques, case$dtype, if (!case$training) case$outputs,
                    paste0("state_", case$state),
                    if (any(case$dilation > 1)) "dilated",
                    if (any(case$kernel_widths != case$kernel_sizes)) "non-square",
                    paste0("peephole_", case$peephole),
                    if (case$training && any(c(case$dropout, case$recurrent_dropout) > 0))
                      "dropout")
  }
  # the draw covers every option
  expect_true(all(c("checkpoint", "tbptt", "accumulation", "float32", "float16", "bfloat16",
                    "all", "last_state", "state_zero", "state_given", "state_carry", "dilated",
                    "non-square", "peephole_none", "peephole_channel", "peephole_position",
                    "dropout")
                  %in% techniques))
  expect_gt(n_training, 30)
})

test_that("convlstm_memory_estimate() returns categories, total, reserved, runtime and the plan", {
  model <- est_model(2, c(3, 2), 3)
  on.exit(convlstm_release(model))
  est <- convlstm_memory_estimate(model, 2, 3, 5, 4)
  expect_s3_class(est, c("convlstm_memory_estimate", "data.frame"))
  expect_named(est, c("category", "bytes"))
  expect_equal(est$category, c("parameters", "gradients", "optimizer", "activations", "states",
                               "workspace", "data", "total", "reserved", "runtime"))
  b <- estimate_bytes_of(est)
  # the CPU backend holds no device memory outside the models (backend.h)
  expect_equal(b[["runtime"]], 0)
  expect_equal(convlstm_memory_stats(model)$runtime, 0)
  expect_equal(b[["parameters"]], 920 * 4)
  expect_equal(b[["gradients"]], 920 * 4)
  expect_equal(b[["optimizer"]], 2 * 920 * 4)  # Adam, planned for a first step
  expect_equal(b[["total"]], sum(b[1:7]))
  expect_equal(attr(est, "optimizer"), "adam")
  expect_equal(attr(est, "shape"), c(batch_size = 2L, seq_len = 3L, height = 5L, width = 4L))
  plan <- attr(est, "plan")
  expect_s3_class(plan, "convlstm_plan")
  expect_named(plan, c("name", "category", "bytes", "layer", "offset", "first_op", "last_op"))
  # model buffers are allocations of their own; the rest sit in the step arena
  own <- plan$name %in% c("parameters", "gradients", "adam.exp_avg", "adam.exp_avg_sq")
  expect_true(all(is.na(plan$offset[own])) && !anyNA(plan$offset[!own]))
  step_bytes <- plan$bytes[!own]
  arena <- sum(ceiling(step_bytes / 256) * 256 + arena_guard_bytes())
  expect_equal(b[["reserved"]], sum(plan$bytes[own]) + arena)
  expect_true(all(c("parameters", "gradients", "adam.exp_avg", "adam.exp_avg_sq") %in% plan$name))
  expect_true(all(is.na(plan$layer[plan$name == "parameters"])))
  expect_true(all(plan$layer %in% c(NA, 0L, 1L)))
  expect_equal(sum(plan$bytes), b[["total"]])
  expect_output(print(est), "training step: batch 2, 3 steps of 5x4, float32, optimizer adam")
  expect_output(print(est), "activations")
  expect_output(print(plan), "<convlstm_plan> [0-9]+ buffers")
  # plain SGD has no state; inference plans no gradients for a fresh model
  b <- estimate_bytes_of(convlstm_memory_estimate(model, 2, 3, 5, 4, optimizer = convlstm_optimizer_sgd(0.1)))
  expect_equal(b[["optimizer"]], 0)
  b <- estimate_bytes_of(convlstm_memory_estimate(model, 2, 3, 5, 4, training = FALSE))
  expect_equal(unname(b[c("gradients", "optimizer")]), c(0, 0))
  expect_gt(b[["states"]], 0)
  b1 <- estimate_bytes_of(convlstm_memory_estimate(model, 2, 3, 5, 4, training = FALSE,
                                          outputs = "last_state"))
  expect_lt(b1[["total"]], b[["total"]])
  # nothing was allocated
  expect_equal(convlstm_memory_stats(model)$allocated, 920 * 4)
})

test_that("the estimate follows the optimizer state a model holds", {
  set.seed(3)
  model <- est_model(2, c(3, 2), 3)
  on.exit(convlstm_release(model))
  x <- array(runif(2 * 3 * 2 * 5 * 4), c(2, 3, 2, 5, 4))
  convlstm_train_step(model, x, array(runif(2 * 2 * 5 * 4), c(2, 2, 5, 4)),
             convlstm_optimizer_sgd(0.1, momentum = 0.9))
  est <- convlstm_memory_estimate(model, 2, 3, 5, 4)
  expect_equal(attr(est, "optimizer"), "sgd")
  expect_equal(estimate_bytes_of(est)[["optimizer"]], 920 * 4)
  # an inference estimate counts what the model holds
  b <- estimate_bytes_of(convlstm_memory_estimate(model, 2, 3, 5, 4, training = FALSE))
  expect_equal(b[["gradients"]], 920 * 4)
  expect_equal(b[["optimizer"]], 920 * 4)
})

test_that("every plan row is named by the core's one table of buffers", {
  buf <- convlstm:::c_buffer_names()
  expect_identical(names(buf), c("kind", "name", "other"))
  known <- c(buf$name, buf$other[!is.na(buf$other)])
  expect_false(anyDuplicated(known) > 0)
  m <- est_model(2, c(3, 2), 3, dropout = 0.2, recurrent_dropout = 0.1)
  rows <- character()
  plans <- list(
    convlstm_memory_estimate(m, 2, 4, 5, 5, optimizer = convlstm_optimizer_adam(amsgrad = TRUE), checkpoint = 2),
    convlstm_memory_estimate(m, 2, 4, 5, 5, optimizer = convlstm_optimizer_sgd(0.1, momentum = 0.9),
                    recompute_gates = TRUE),
    convlstm_memory_estimate(m, 2, 4, 5, 5, optimizer = convlstm_optimizer_adam(), tbptt = 2),
    convlstm_memory_estimate(m, 2, 4, 5, 5, training = FALSE)
  )
  for (est in plans) rows <- c(rows, attr(est, "plan")$name)
  expect_true(all(sub("\\[[0-9]+\\]$", "", rows) %in% known))
  # the table's names are the ones the rows carry: sgd's other name, the chunk's
  expect_true(all(c("sgd.momentum_buffer", "gates_recompute", "adam.max_exp_avg_sq",
                    "carry_h[0]", "checkpoint_h[1]", "dropout_mask_h[0]") %in% rows))
  convlstm_release(m)
})

test_that("convlstm_memory_estimate() checks its arguments", {
  model <- est_model(1, 2, 3)
  on.exit(convlstm_release(model))
  expect_convlstm_error(convlstm_memory_estimate(model, 0, 3, 4, 4), regexp = "`batch_size`")
  expect_convlstm_error(convlstm_memory_estimate(model, 2, 3.5, 4, 4), regexp = "`seq_len`")
  expect_convlstm_error(convlstm_memory_estimate(model, 2, 3, 4, 4, checkpoint = -1),
                        regexp = "`checkpoint`")
  expect_convlstm_error(convlstm_memory_estimate(model, 2, 3, 4, 4, accumulation_steps = 3),
                        regexp = "`accumulation_steps`")
  expect_convlstm_error(convlstm_memory_estimate(model, 2, 3, 4, 4, dtype = "float64"),
                        regexp = "`dtype`")
  expect_convlstm_error(convlstm_memory_estimate(model, 2, 3, 4, 4, optimizer = "adam"),
                        regexp = "`optimizer`")
  expect_convlstm_error(convlstm_memory_estimate(model, 2, 6, 4, 4, checkpoint = 2, tbptt = 2),
                        regexp = "cannot be combined")
  expect_convlstm_error(convlstm_memory_estimate("model", 2, 3, 4, 4), regexp = "`model`")
  expect_convlstm_error(convlstm_memory_estimate(model, 2, 3, 4, 4, target = "last"), regexp = "`target`")
})

test_that("a batch near INT_MAX in as many micro-batches plans one sample, not a crash", {
  # (B + m - 1) / m overflowed int and the planner divided by the zero it wrapped to (SIGFPE)
  model <- est_model(1, 2, 3)
  on.exit(convlstm_release(model))
  big <- .Machine$integer.max
  one <- estimate_bytes_of(convlstm_memory_estimate(model, 1, 3, 4, 4))
  est <- estimate_bytes_of(convlstm_memory_estimate(model, big, 3, 4, 4, accumulation_steps = big))
  expect_equal(est[["activations"]], one[["activations"]])
  expect_equal(est[["data"]], one[["data"]])
  half <- estimate_bytes_of(convlstm_memory_estimate(model, big, 3, 4, 4, accumulation_steps = big - 1))
  expect_equal(half[["activations"]], 2 * one[["activations"]])
})

test_that("summary(model, input_shape) adds the training estimate for that input", {
  model <- est_model(1, c(8, 1), 3)
  on.exit(convlstm_release(model))
  s <- summary(model, input_shape = c(4, 10, 1, 16, 16))
  expect_s3_class(s$estimate, "convlstm_memory_estimate")
  expect_equal(s$estimate$bytes, convlstm_memory_estimate(model, 4, 10, 16, 16)$bytes)
  out <- capture.output(print(s))
  expect_true(any(grepl("Total parameters", out)))
  expect_true(any(grepl("Input shape: [4, 10, 1, 16, 16]", out, fixed = TRUE)))
  expect_true(any(grepl("activations", out)))
  expect_true(any(grepl("total", out)))
  # options reach the estimate
  s2 <- summary(model, input_shape = c(4, 10, 1, 16, 16), checkpoint = 3)
  expect_lt(estimate_bytes_of(s2$estimate)[["activations"]],
            estimate_bytes_of(s$estimate)[["activations"]])
  expect_null(summary(model)$estimate)
  expect_convlstm_error(summary(model, input_shape = c(4, 10, 2, 16, 16)), regexp = "channel")
  expect_convlstm_error(summary(model, input_shape = c(4, 10, 16)), regexp = "`input_shape`")
})

test_that("convlstm_memory_estimate(world_size = ) keeps each rank's plan and lists the buckets reduced in place", {
  model <- convlstm(1, c(4, 3), 3, device = "cpu")
  one <- convlstm_memory_estimate(model, 4, 3, 8, 8)
  four <- convlstm_memory_estimate(model, 4, 3, 8, 8, world_size = 4)
  expect_identical(four$bytes, one$bytes) # no buffer of its own: in place
  expect_null(attr(one, "communication"))
  comm <- attr(four, "communication")
  expect_identical(comm$layer, c(1L, 0L)) # the last layer's backward ends first
  # the buckets are the gradients, layer by layer (weights and bias, float32)
  sd <- convlstm_state_dict(model)
  per_layer <- c(length(sd[["cell_list.1.conv.weight"]]) + length(sd[["cell_list.1.conv.bias"]]),
                 length(sd[["cell_list.0.conv.weight"]]) + length(sd[["cell_list.0.conv.bias"]]))
  expect_identical(comm$bytes, 4 * per_layer)
  expect_identical(sum(comm$bytes), estimate_bytes_of(four)[["gradients"]])
  expect_equal(comm$sent_per_rank, comm$bytes * 2 * 3 / 4)
  expect_output(print(four), "data parallel over 4 ranks")
  expect_error(convlstm_memory_estimate(model, 4, 3, 8, 8, world_size = 0), class = "convlstm_error",
               regexp = "world_size")
  convlstm_release(model)
})
