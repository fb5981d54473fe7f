# train.R -- one training step in one .Call (convlstm_train_step()), and the pieces
# of a step for losses written in R: convlstm_forward(), convlstm_backward(),
# convlstm_optimizer_step(), convlstm_zero_grad() and convlstm_gradients(). The epoch loop is in fit.R.
#
# Shapes are checked here, before C is called, so that a wrong y or
# grad_output is reported with the argument's name and the expected dims.

#' One training step
#'
#' Zeroes the gradients, runs a training forward, computes the mean squared
#' error against `y`, backpropagates and updates the parameters: the whole
#' step runs in C in a single call. With `target = "last_state"` the loss is
#' on the last layer's hidden state after the last step (the R torch
#' tutorial's `model(x)[[2]][[n_layers]][[1]]`); with `"sequence"` on the
#' last layer's output at every step.
#'
#' @param model A model created by [convlstm()].
#' @param x Input array `[batch, time, channels, height, width]`, or a data
#'   set on the model's device made by [convlstm_data()], whose `rows` are
#'   the batch.
#' @param y Target: `[batch, hidden, height, width]` for `"last_state"`,
#'   `[batch, time, hidden, height, width]` for `"sequence"`, where `hidden`
#'   is the last layer's hidden dimension. `NULL` when `x` is a data set
#'   (its targets are in it).
#' @param optimizer [convlstm_optimizer_adam()], [convlstm_optimizer_adamw()], [convlstm_optimizer_sgd()] or
#'   [convlstm_optimizer_rmsprop()].
#' @param target Which output the loss is computed on. For a data set, the
#'   one it was made for.
#' @param checkpoint `0`, or keep the hidden and cell states only every
#'   `checkpoint` time steps and recompute the rest during backward: the same
#'   gradients with activation memory that grows as `T / checkpoint +
#'   checkpoint` instead of `T`, for about one more forward's time.
#' @param recompute_gates `FALSE`, or keep only the hidden and cell states of
#'   every time step, not the four gates' activations, and recompute those
#'   during backward from the kept states and the input, a few steps at a
#'   time (`TRUE`: one step; a whole number: that many): activation memory
#'   per step falls from 6 to 2 times the hidden size (plus a chunk of
#'   gates), for about one more forward's time. The same gradients (within
#'   float32 rounding: the weight gradients are summed chunk by chunk).
#'   Combines with `checkpoint` (segments whose steps keep only the
#'   states), `tbptt`, `accumulation_steps`, dropout, peepholes and the half
#'   types; not with `teacher_forcing = FALSE`.
#' @param accumulation_steps Split the batch into this many micro-batches
#'   whose gradients are summed (each loss weighted by its share of the
#'   batch) before one update: the update of the whole batch, with the
#'   activation memory of one micro-batch.
#' @param tbptt `0`, or truncated backpropagation through time: forward and
#'   backward run over windows of `tbptt` time steps, the state carried from
#'   one window to the next without a gradient ("detached"), so memory does
#'   not grow with the sequence length beyond `tbptt` steps. Not the same
#'   gradient as full backpropagation.
#' @param rows When `x` is a data set: the row numbers of this step's batch
#'   (any order, repeats allowed; `NULL`: every row). The step is exactly
#'   `convlstm_train_step()` on `x[rows, , , , , drop = FALSE]` and the same rows of
#'   `y`, without copying them out of R.
#' @param max_grad_norm `NULL`, or clip the gradients by their global norm
#'   before the update, as torch's `nn_utils_clip_grad_norm_()` /
#'   `torch.nn.utils.clip_grad_norm_()`: when the L2 norm over all
#'   parameters' gradients exceeds `max_grad_norm`, every gradient is
#'   multiplied by `max_grad_norm / (norm + 1e-6)`. Computed on the model's
#'   device inside the step; with float16 the loss scale is divided out
#'   first, as `GradScaler.unscale_()` before clipping. `Inf` measures the
#'   norm without clipping.
#' @param loss The loss minimised, mean-reduced over the batch's target
#'   elements as torch's losses are by default: `"mse"` (squared error,
#'   `nn_mse_loss()`), `"mae"` (absolute error, `nn_l1_loss()`), `"huber"`
#'   (`nn_huber_loss(delta = delta)`: squared below `delta`, linear above) or
#'   `"bce_logits"` (binary cross-entropy on the output taken as logits,
#'   `nn_bce_with_logits_loss(pos_weight = pos_weight)`, for targets in
#'   `[0, 1]` such as rain / no-rain masks). Computed with its gradient in
#'   the step's one native call.
#' @param reduction How the elements' losses are reduced, as torch's
#'   `reduction`: `"mean"` (the default, over every target element),
#'   `"sum"`, or `"batchmean"` (the sum over every element of the batch
#'   divided by the number of sequences: the loss per sequence, summed over
#'   its frames and pixels, as `nn_kl_div_loss(reduction = "batchmean")`
#'   divides; Shi et al. (2015) report their cross-entropy this way, summed
#'   over a sequence's predicted frames). The step's gradient is that of the
#'   reduced loss; with `accumulation_steps` or data parallel the
#'   micro-batches' and ranks' parts add up to the whole batch's value.
#' @param delta Huber's threshold (`loss = "huber"`), > 0.
#' @param weight `NULL`, or a per-element weight of the loss: a numeric
#'   array of `y`'s shape (the target's), finite and >= 0, `0` masking an
#'   element (missing data). Each element's loss is multiplied by it before
#'   the mean over all elements, as torch's `(w * l)$mean()`, so masked
#'   elements still count in the mean's denominator. Arrays only, not data
#'   sets; uploaded with the target into a planned buffer
#'   (`convlstm_memory_estimate(weight = )`).
#' @param pos_weight The weight of positive targets for `loss =
#'   "bce_logits"` (> 1 raises recall), > 0.
#' @param state Where the step starts from: `NULL`, zeros (the tutorial's
#'   module); a list with one `list(h = , c = )` per layer, each `[batch,
#'   hidden, height, width]`, as `model(x)$layer_last_states` returns them (a
#'   constant: no gradient flows into it); or `"carry"`: the state the
#'   previous carrying step ended with (zeros the first time), and this
#'   step's last state is kept for the next, detached -- Keras's `stateful =
#'   TRUE`, for a long sequence cut into consecutive chunks. The batch size
#'   and frame size must stay the same while a state is carried;
#'   [convlstm_reset_state()] forgets it. A data set `x` takes `NULL` or `"carry"`.
#' @param horizon `NULL`, or train the forecast of `horizon` frames: `y` is
#'   `[batch, horizon, channels, height, width]`, the frames that follow
#'   `x`, and the loss is `loss` over the model's last `horizon` outputs
#'   against `y` -- what [predict()] with `horizon` forecasts. With
#'   `teacher_forcing = TRUE` the model reads `x` and then the true frames
#'   `y[, 1:(horizon - 1)]` (not its own predictions); with `FALSE` its own.
#'   With `state = "carry"` the state kept is the one after the last step
#'   the model ran: `x` and then the `horizon - 1` frames fed back.
#'   Needs the last layer's hidden size to equal `input_dim`; `target` must
#'   be `"sequence"`. Arrays only, not data sets.
#' @param teacher_forcing With a `horizon` (`FALSE` without one is an
#'   error: there is nothing to feed back): `TRUE` feeds the true frames
#'   back (above); `FALSE` trains free-running, as [predict()] forecasts:
#'   `x` is only the input frames, and each of the `horizon - 1` later steps
#'   reads the model's own previous frame (the last layer's hidden state of
#'   the step before), the loss over the `horizon` predicted frames against
#'   `y`. Backpropagation runs through the fed-back frames too: the error of
#'   frame k reaches the frames before it through the input path as well as
#'   the recurrence (what PyTorch does without `.detach()`). Not with
#'   `checkpoint` or `tbptt`; `accumulation_steps`, `state` and `weight`
#'   apply.
#'
#'   Or a probability `p` in `[0, 1]`: scheduled sampling (Bengio et al.
#'   2015). Each of the `horizon - 1` fed-back steps reads the true frame
#'   `y[, k]` with probability `p`, else the model's own, as `FALSE` does;
#'   where the true frame is read, no gradient flows into the prediction it
#'   replaces. One coin per fed-back step and call, for the whole batch
#'   (every sequence and micro-batch of the step takes the same choice): not
#'   per sequence. The coins come from R's random number generator
#'   (`stats::runif()`, drawn before the dropout masks' seed), so `set.seed()`
#'   reproduces them; `p` of 0 or 1 draws none. `1` is `TRUE` and `0` is
#'   `FALSE`, the same steps bit for bit. Between them the step is
#'   scheduled and planned as free-running (the most memory of the three:
#'   `convlstm_memory_estimate(teacher_forcing = p)`), with its limits.
#'   [convlstm_fit()] takes a schedule of `p` over epochs
#'   ([convlstm_sampling_schedule()]).
#' @return The loss before the update (a number): the chosen loss (by
#'   default the mean squared error) over the whole batch. With
#'   `max_grad_norm`, it carries the attribute `grad_norm`: the gradients'
#'   global norm before clipping (not finite when a gradient is not, and then
#'   the step is refused or, with float16, skipped).
#' @seealso [convlstm_fit()] for the loop over epochs and batches;
#'   [convlstm_memory_estimate()] for what each option saves.
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(4 * 3 * 6 * 6), dim = c(4, 3, 1, 6, 6))
#' y <- array(runif(4 * 6 * 6), dim = c(4, 1, 6, 6))
#' opt <- convlstm_optimizer_adam(lr = 0.01)
#' for (i in 1:3) print(convlstm_train_step(model, x, y, opt))
#' # the same update in two micro-batches of 2, keeping states every 2 steps
#' convlstm_train_step(model, x, y, opt, accumulation_steps = 2, checkpoint = 2)
#' # keeping only h and c of each step, the gates recomputed in backward
#' convlstm_train_step(model, x, y, opt, recompute_gates = TRUE)
#' # another loss: Huber, quadratic within 0.1 of the target
#' convlstm_train_step(model, x, y, opt, loss = "huber", delta = 0.1)
#' # gradients clipped to a global norm of 1; the norm before clipping
#' attr(convlstm_train_step(model, x, y, opt, max_grad_norm = 1), "grad_norm")
#' # the data uploaded once, a batch taken by row numbers
#' data <- convlstm_data(model, x, y)
#' convlstm_train_step(model, data, optimizer = opt, rows = c(4, 2))
#' # forecast the 2 frames after x, trained through the model's own frames
#' y2 <- array(runif(4 * 2 * 6 * 6), dim = c(4, 2, 1, 6, 6))
#' convlstm_train_step(model, x, y2, opt, horizon = 2, teacher_forcing = FALSE)
#' # scheduled sampling: the fed-back frame is the true one half the time
#' set.seed(2)
#' convlstm_train_step(model, x, y2, opt, horizon = 2, teacher_forcing = 0.5)
#' convlstm_release(model)
convlstm_train_step <- function(model, x, y = NULL, optimizer, target = c("last_state", "sequence"),
                       checkpoint = 0, accumulation_steps = 1, tbptt = 0, rows = NULL,
                       state = NULL, horizon = NULL, teacher_forcing = TRUE,
                       max_grad_norm = NULL, loss = "mse", delta = 1, pos_weight = 1,
                       weight = NULL, recompute_gates = FALSE, reduction = "mean") {
  loss <- check_loss(loss, delta, pos_weight, reduction)
  # what the model's kind does not run: the capability table's refusal
  require_capabilities(model, step_capabilities(
    checkpoint = checkpoint, tbptt = tbptt, recompute_gates = recompute_gates,
    accumulation_steps = accumulation_steps, horizon = horizon, teacher_forcing = teacher_forcing,
    state = state, weight = weight, target = if (!missing(target)) target,
    data = is_convlstm_data(x)))
  if (is_convlstm_forecaster(model)) {
    return(forecaster_train_step(model, x, y, optimizer, loss, max_grad_norm, sys.call(),
                                 accumulation_steps, weight = weight, rows = rows))
  }
  if (is.null(horizon)) check_teacher_forcing(teacher_forcing, FALSE, sys.call())
  if (is_convlstm_data(x)) {
    if (!is.null(weight)) {
      abort_arg("weight", "NULL when `x` is a data set (a loss weight applies to arrays)",
                weight, sys.call())
    }
    # convlstm_train_step(model, data, opt): the optimizer given where y would be
    if (missing(optimizer) && inherits(y, "convlstm_optimizer")) {
      optimizer <- y
      y <- NULL
    }
    if (!is.null(horizon)) {
      abort_arg("horizon", "NULL when `x` is a data set", horizon, sys.call())
    }
    return(train_step_data(model, x, y, optimizer, target, !missing(target), checkpoint,
                           accumulation_steps, tbptt, rows, state, call = sys.call(),
                           max_grad_norm = max_grad_norm, loss = loss,
                           recompute_gates = recompute_gates))
  }
  if (!is.null(rows)) {
    abort_convlstm("`rows` applies only when `x` is a data set made by convlstm_data().",
                   call = sys.call())
  }
  ptr <- model_ptr(model)
  config <- model_config(model)
  x <- check_input(x, config, "x")
  if (!is.null(horizon)) {
    tf <- horizon_batch(x, y, horizon, teacher_forcing, missing(target), target, config)
    x <- tf$x
    y <- tf$y
    target <- "sequence"
  } else {
    target <- target_choice(target, config, missing(target))
    y <- check_target_array(y, dim(x), config, target, "y")
  }
  optimizer <- check_optimizer(optimizer)
  state <- state_option(state, config, dim(x))
  state$horizon <- if (is.null(horizon)) 0L else dim(y)[[2]]
  state$free_run <- !is.null(horizon) && tf$p < 1
  weight <- check_weight(weight, dim(y), target)
  options <- check_step_options(checkpoint, accumulation_steps, tbptt, batch_size = dim(x)[[1]],
                                state = state, max_grad_norm = max_grad_norm, loss = loss,
                                weight = weight, recompute_gates = recompute_gates)
  if (!is.null(horizon)) options$truth <- draw_truth(tf$p, dim(y)[[2]])
  c_train_step(ptr, x, y, target, optimizer, options)
}

# The knobs that change a training step's schedule and plan, checked and
# encoded for the glue (NULL: the plain step). batch_size, when known, bounds
# accumulation_steps; max_grad_norm (NULL: none) clips the gradients; loss
# is check_loss()'s (NULL: MSE).
check_step_options <- function(checkpoint = 0, accumulation_steps = 1, tbptt = 0,
                               outputs = "all", dtype = NULL, batch_size = NULL,
                               state = list(mode = "zero", arrays = NULL),
                               max_grad_norm = NULL, loss = NULL, weight = NULL,
                               recompute_gates = 0L, call = sys.call(-1)) {
  checkpoint <- check_count(checkpoint, "checkpoint", min = 0, call = call)
  recompute_gates <- check_recompute_gates(recompute_gates, call = call)
  accumulation_steps <- check_count(accumulation_steps, "accumulation_steps", call = call)
  tbptt <- check_count(tbptt, "tbptt", min = 0, call = call)
  if (!is.null(batch_size) && accumulation_steps > batch_size) {
    abort_convlstm(sprintf(
      "`accumulation_steps` (%d) must not exceed the batch size (%d): each micro-batch needs a sample.",
      accumulation_steps, batch_size
    ), call = call)
  }
  if (!is.null(dtype)) dtype <- check_choice(dtype, dtypes(), "dtype", call = call)
  max_grad_norm <- check_max_grad_norm(max_grad_norm, call = call)
  horizon <- state$horizon %||% 0L
  if (checkpoint == 0 && recompute_gates == 0 && accumulation_steps == 1 && tbptt == 0 &&
      identical(outputs, "all") &&
      is.null(dtype) && identical(state$mode, "zero") && horizon == 0 &&
      is.null(max_grad_norm) && is.null(loss) && is.null(weight)) {
    return(NULL)
  }
  free_run <- isTRUE(state$free_run) && horizon > 0
  if (free_run && (checkpoint > 0 || tbptt > 0)) {
    abort_convlstm(paste0(
      "`teacher_forcing` other than TRUE cannot be combined with `checkpoint` or `tbptt`: the ",
      "fed-back frames run every layer step by step, which neither schedules. Use ",
      "accumulation_steps to save memory instead."), call = call)
  }
  if (free_run && recompute_gates > 0) {
    abort_convlstm(paste0(
      "`teacher_forcing` other than TRUE cannot be combined with `recompute_gates`: the fed-back ",
      "frames run backward step by step across the layers, which reads every step's gates. ",
      "Use accumulation_steps to save memory instead."), call = call)
  }
  opts <- c_step_options(checkpoint, tbptt, accumulation_steps, outputs, dtype, state$mode,
                         state$arrays, horizon, max_grad_norm, loss, weight, recompute_gates)
  if (free_run) opts$free_run <- 1L
  opts
}

# The steps whose gates backward recomputes at once when recompute_gates is
# TRUE: one. Longer chunks hold more gates and, on the CPU, ran no faster
# (bench/bench_recompute.R, doc/memory.md: chunks of 1, 2, 4 and 8 steps
# within 2.1 % of each other).
recompute_chunk <- 1L

# recompute_gates as the core takes it: 0 (every step's gates kept), or the
# steps whose gates backward recomputes at once (TRUE: recompute_chunk).
check_recompute_gates <- function(x, call = sys.call(-1)) {
  if (isTRUE(x)) return(recompute_chunk)
  if (isFALSE(x)) return(0L)
  if (length(x) != 1 || !is_whole(x) || x < 0 || x > .Machine$integer.max) {
    abort_arg("recompute_gates", paste("TRUE, FALSE or the number of steps whose gates are",
                                       "recomputed at once (a whole number >= 1)"), x, call)
  }
  as.integer(x)
}

# NULL, or the per-element loss weight: a numeric array of the target's dim
# ydim, finite and >= 0 (0 masks an element), as doubles.
check_weight <- function(weight, ydim, target, call = sys.call(-1)) {
  if (is.null(weight)) return(NULL)
  # a logical mask is a weight of 1 (TRUE) or 0 (FALSE)
  if (!is.numeric(weight) && !is.logical(weight)) {
    abort_arg("weight", "NULL or a numeric (or logical) array shaped as the target", weight,
              call)
  }
  if (!identical(as.integer(dim(weight)), as.integer(ydim))) {
    abort_arg("weight", sprintf("NULL or a numeric array of the target's dim %s (target = \"%s\")",
                                format_dims(ydim), target), weight, call)
  }
  if (anyNA(weight) || !all(is.finite(weight)) || any(weight < 0)) {
    abort_convlstm("`weight` must be finite and >= 0 everywhere (0 masks an element).",
                   call = call)
  }
  storage.mode(weight) <- "double"
  weight
}

# The losses by the core's names (cl_loss_name), in its order; the
# reductions too (cl_loss_reduction_name).
loss_names <- c("mse", "mae", "huber", "bce_logits")
loss_reductions <- c("mean", "sum", "batchmean")

# NULL for the mean MSE (the plain step), else list(kind, delta, pos_weight,
# reduction), checked.
check_loss <- function(loss, delta = 1, pos_weight = 1, reduction = "mean",
                       call = sys.call(-1)) {
  loss <- check_choice(loss, loss_names, "loss", call = call)
  delta <- check_number(delta, "delta", min = 0, min_inclusive = FALSE, call = call)
  pos_weight <- check_number(pos_weight, "pos_weight", min = 0, min_inclusive = FALSE,
                             call = call)
  reduction <- check_choice(reduction, loss_reductions, "reduction", call = call)
  if (identical(loss, "mse") && identical(reduction, "mean")) return(NULL)
  list(kind = loss, delta = delta, pos_weight = pos_weight, reduction = reduction)
}

# What divides a loss's sum over n sequences of `elements` elements in all:
# the mean's count, 1 for the sum, n for batchmean (a loss per sequence).
loss_divisor <- function(loss, elements, n) {
  switch(loss$reduction %||% "mean", mean = elements, sum = 1, batchmean = n)
}

# The loss's sum over the elements of pred against y, in double, with the
# formulas of torch's losses (and of the native step's kernels), each
# element's times weight (NULL: one).
loss_sum <- function(pred, y, loss, weight = NULL) {
  l <- loss_elems(pred, y, loss)
  if (is.null(weight)) sum(l) else sum(weight * l)
}

# Each element's loss (torch's formulas, as the native step's kernels).
loss_elems <- function(pred, y, loss) {
  d <- pred - y
  switch(loss$kind %||% "mse",
    mse = d^2,
    mae = abs(d),
    huber = {
      z <- abs(d)
      ifelse(z < loss$delta, 0.5 * z^2, loss$delta * (z - 0.5 * loss$delta))
    },
    bce_logits = {
      m <- pmax(-pred, 0)
      (1 - y) * pred + (1 + (loss$pos_weight - 1) * y) * (log(exp(-m) + exp(-pred - m)) + m)
    }
  )
}

# NULL, or a number > 0 (Inf: measure the norm only). The norm is compared
# as a 32-bit float: a bound that is 0 or subnormal there would make every
# step (nearly) a no-op, so it is refused.
check_max_grad_norm <- function(x, call = sys.call(-1)) {
  if (is.null(x)) return(NULL)
  if (!is.numeric(x) || length(x) != 1 || is.na(x) || !(x > 0)) {
    abort_arg("max_grad_norm", "NULL or a number > 0 (Inf: measure the norm, clip nothing)", x,
              call)
  }
  if (x < float_min_normal) {
    abort_arg("max_grad_norm", sprintf(paste0(
      "at least %s, the smallest normal 32-bit float (the gradients' norm is compared as one; ",
      "a smaller bound is 0 or subnormal there and every step would do nothing)"),
      format(float_min_normal, digits = 9)), x, call)
  }
  as.double(x)
}

# The smallest normal 32-bit float (FLT_MIN).
float_min_normal <- 2^-126

# The target a call trains on: as given, or by default the last state --
# but a model with a head trains on the sequence of its outputs.
target_choice <- function(target, config, target_missing, call = sys.call(-1)) {
  if (target_missing && isTRUE(config$head)) return("sequence")
  check_choice(target, c("last_state", "sequence"), "target", call = call)
}

# The channels of a model's output at each step: its head's frame, or the
# last layer's h.
output_channels <- function(config) {
  if (isTRUE(config$head)) config$input_dim else config$hidden_dims[[config$n_layers]]
}

# The shape of the chosen output for an input of dims xd.
output_dims <- function(xd, config, target) {
  C <- output_channels(config)
  if (identical(target, "sequence")) c(xd[[1]], xd[[2]], C, xd[[4]], xd[[5]])
  else c(xd[[1]], C, xd[[4]], xd[[5]])
}

format_dims <- function(d) paste0("[", paste(d, collapse = ", "), "]")

check_target_array <- function(y, xd, config, target, arg, call = sys.call(-1)) {
  want <- output_dims(xd, config, target)
  y <- check_array_rank(y, arg, length(want), target, call)
  if (!identical(as.integer(dim(y)), as.integer(want))) {
    what <- if (identical(target, "sequence")) {
      "[batch, time, hidden, height, width]"
    } else {
      "[batch, hidden, height, width]"
    }
    abort_convlstm(sprintf(
      "`%s` must have dim %s (%s of the last layer for target = \"%s\"), not %s.",
      arg, format_dims(want), what, target, format_dims(dim(y))
    ), call = call)
  }
  y
}

check_array_rank <- function(y, arg, ndim, target, call) {
  if (length(dim(y)) != ndim && (is.numeric(y) || is.logical(y))) {
    abort_convlstm(sprintf(
      "`%s` must be an array with %d dimensions for target = \"%s\", not %s.",
      arg, ndim, target, describe(y)
    ), call = call)
  }
  check_array(y, arg, ndim, call = call)
}

#' Forward, backward and update step by step
#'
#' For losses written in R, or to inspect gradients: `convlstm_forward()`
#' runs a forward pass (a training forward keeps what backward needs),
#' `convlstm_backward()` backpropagates the gradient of a loss with respect
#' to the model's output, `convlstm_optimizer_step()` updates the parameters from
#' their gradients, `convlstm_zero_grad()` sets the gradients to zero and
#' `convlstm_gradients()` returns them. As in torch, gradients accumulate over
#' backward calls until `convlstm_zero_grad()`.
#'
#' `convlstm_train_step(model, x, y, opt)` is the same as
#' `convlstm_zero_grad(model)`; `out <- convlstm_forward(model, x)`; backward of the
#' MSE `2 * (h - y) / length(y)`; `convlstm_optimizer_step(model, opt)`, in one call.
#'
#' @param model A model created by [convlstm()].
#' @param x Input array `[batch, time, channels, height, width]`.
#' @param training Keep the activations that backward needs (`TRUE`), or run
#'   an inference forward (`FALSE`).
#' @param target `NULL` to return every layer's outputs and last states, as
#'   `model(x)` does; `"last_state"` to return only the last layer's hidden
#'   state after the last step, `[batch, hidden, height, width]`;
#'   `"sequence"` to return only the last layer's output sequence,
#'   `[batch, time, hidden, height, width]`. Returning one array avoids
#'   copying the others out of the model.
#' @param state `NULL` (zeros), or the initial state as
#'   `model(x)$layer_last_states` returns it: one `list(h = , c = )` per
#'   layer, each `[batch, hidden, height, width]`. It is a constant: backward
#'   gives gradients of the parameters, none of the state.
#' @param grad_output Gradient of the loss with respect to the last layer's
#'   last hidden state, `[batch, hidden, height, width]` (as for
#'   `target = "last_state"`), or with respect to its whole output sequence,
#'   `[batch, time, hidden, height, width]` (`target = "sequence"`). Its rank
#'   says which.
#' @param optimizer [convlstm_optimizer_adam()], [convlstm_optimizer_adamw()], [convlstm_optimizer_sgd()] or
#'   [convlstm_optimizer_rmsprop()].
#' @return `convlstm_forward()`: the same list as `model(x)`, or with
#'   `target`, the chosen output.
#'   `convlstm_gradients()`: a named list of arrays with the names and shapes of
#'   [convlstm_state_dict()]. The others return `model`, invisibly.
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(2 * 3 * 6 * 6), dim = c(2, 3, 1, 6, 6))
#' y <- array(runif(2 * 6 * 6), dim = c(2, 1, 6, 6))
#' convlstm_zero_grad(model)
#' h <- convlstm_forward(model, x, target = "last_state")
#' # the same array as convlstm_forward(model, x)$layer_last_states[[2]]$h
#' loss <- mean((h - y)^2)
#' convlstm_backward(model, 2 * (h - y) / length(y))
#' str(convlstm_gradients(model))
#' convlstm_optimizer_step(model, convlstm_optimizer_sgd(lr = 0.1))
#' convlstm_release(model)
convlstm_forward <- function(model, x, training = TRUE, target = NULL, state = NULL) {
  ptr <- model_ptr(model)
  config <- model_config(model)
  x <- check_input(x, config, "x", forward = TRUE)
  training <- check_flag(training, "training")
  what <- if (is.null(target)) "all" else check_choice(target, c("last_state", "sequence"), "target")
  state <- state_option(state, config, dim(x), allow_carry = FALSE)
  c_forward(ptr, x, training = training, what = what,
            forward_options(if (training) "all" else what, state))
}

#' @rdname convlstm_forward
#' @export
convlstm_backward <- function(model, grad_output) {
  ptr <- model_ptr(model)
  config <- model_config(model)
  rank <- length(dim(grad_output))
  if (!rank %in% c(4L, 5L)) {
    abort_convlstm(sprintf(paste0(
      "`grad_output` must be an array of dim [batch, hidden, height, width] (gradient of the ",
      "last state) or [batch, time, hidden, height, width] (gradient of the output sequence), ",
      "not %s."), describe(grad_output)), call = sys.call())
  }
  target <- if (rank == 5L) "sequence" else "last_state"
  shape <- c_last_shape(ptr)
  if (shape[[1]] == 0L) {
    abort_convlstm(
      "No forward to backpropagate through: call convlstm_forward(model, x, training = TRUE) first.",
      status = "state", call = sys.call()
    )
  }
  xd <- c(shape[[1]], shape[[2]], config$input_dim, shape[[3]], shape[[4]])
  grad_output <- check_target_array(grad_output, xd, config, target, "grad_output")
  c_backward(ptr, grad_output, target)
  invisible(model)
}

#' @rdname convlstm_forward
#' @export
convlstm_optimizer_step <- function(model, optimizer) {
  ptr <- model_ptr(model)
  optimizer <- check_optimizer(optimizer)
  c_optimizer_step(ptr, optimizer)
  invisible(model)
}

#' @rdname convlstm_forward
#' @export
convlstm_zero_grad <- function(model) {
  c_zero_grad(model_ptr(model))
  invisible(model)
}

#' @rdname convlstm_forward
#' @export
convlstm_gradients <- function(model) {
  c_get_tensors(model_ptr(model), grad = TRUE)
}

# A float16 run whose steps keep overflowing changes nothing: say so every
# 10th skipped step in a row (the core errors once the scale falls below 1).
# Returns the step's loss.
watch_skips <- function(ptr, loss) {
  force(loss) # the step runs here, before its scaler is read
  ls <- c_loss_scale(ptr)
  n <- ls$skipped_in_a_row
  if (n > 0 && n %% 10 == 0) {
    warning(structure(class = c("convlstm_warning_loss_scale", "warning", "condition"), list(
      message = sprintf(paste0(
        "float16: the last %d steps overflowed and were skipped (loss scale now %s): the ",
        "parameters have not changed since. Inputs or targets beyond float16's range (65504) or ",
        "a diverging model cause this; see convlstm_loss_scale()."), n, format(ls$scale)),
      call = NULL
    )))
  }
  loss
}


# A training batch over a horizon of K frames, y [B, K, C, H, W] the frames
# after x. Teacher forcing: x followed by the true frames y[, 1:(K - 1)],
# whose last K outputs are trained against y. Free-running (teacher_forcing
# = FALSE) or scheduled sampling (a p below 1): x as it is; the core runs
# K - 1 more steps, on the model's own frames or, where the coins say, on
# y's. Returns list(x, y, p), checked (p: teacher_forcing as a number).
horizon_batch <- function(x, y, horizon, teacher_forcing, target_missing, target, config,
                          call = sys.call(-1)) {
  K <- check_horizon(horizon, config, call = call)
  p <- check_teacher_forcing(teacher_forcing, TRUE, call)
  if (!target_missing && !identical(target, "sequence")) {
    abort_arg("target", '"sequence" with a `horizon`', target, call)
  }
  y <- check_frames(y, dim(x), K, config, "y", call)
  if (K == 1 || p < 1) return(list(x = x, y = y, p = p))
  list(x = teacher_sequence(x, y), y = y, p = 1)
}

# The K frames that follow x (dim xd) for a horizon: [B, K, C, H, W].
check_frames <- function(y, xd, K, config, arg, call = sys.call(-1)) {
  y <- check_array(y, arg, 5, call = call)
  want <- c(xd[[1]], K, config$input_dim, xd[[4]], xd[[5]])
  if (!identical(as.integer(dim(y)), as.integer(want))) {
    abort_convlstm(sprintf(
      "`%s` must have dim %s (the %d frames that follow `x`), not %s.", arg, format_dims(want),
      K, format_dims(dim(y))), call = call)
  }
  if (xd[[2]] > .Machine$integer.max - K) abort_arg("horizon", "smaller", K, call)
  y
}

# Teacher forcing's input: x, then the true frames y[, 1:(K - 1)].
teacher_sequence <- function(x, y) {
  xd <- dim(x)
  K <- dim(y)[[2]]
  if (K == 1) return(x)
  xx <- array(0, c(xd[[1]], xd[[2]] + K - 1L, xd[-(1:2)]))
  xx[, seq_len(xd[[2]]), , , ] <- x
  xx[, xd[[2]] + seq_len(K - 1L), , , ] <- y[, seq_len(K - 1L), , , , drop = FALSE]
  xx
}
