# state.R -- where a forward or a training step starts from: an initial
# state given as the model returns its last states (`model(x, state = )`,
# `predict(state = )`, `convlstm_forward(state = )`, `convlstm_train_step(state = )`),
# or the state a model carries from one convlstm_train_step(state = "carry") to the
# next, with convlstm_reset_state() to forget it. The checks here name the argument;
# the core (src/core/state.c) checks again and owns the carried state.

#' Forget the state a model carries between training steps
#'
#' `convlstm_train_step(..., state = "carry")` starts each step from the hidden and
#' cell states the previous carrying step ended with, detached (no gradient
#' flows back into the previous step), as Keras's `stateful = TRUE` does for
#' a long sequence cut into consecutive chunks. The model holds that state
#' (counted under `states` by [convlstm_memory_stats()], and planned by
#' [convlstm_memory_estimate()] as `carried_state`) until `convlstm_reset_state()` gives it
#' back, [convlstm_set_dtype()] changes the storage type, or the model is released.
#' The carried state is not saved by [convlstm_save()]: as in Keras, a loaded
#' model starts from zeros.
#'
#' @param model A model created by [convlstm()].
#' @return `TRUE` if the model held a carried state, `FALSE` if not,
#'   invisibly.
#' @seealso [convlstm_train_step()] (its `state` argument), [convlstm_carried_state()].
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(2 * 6 * 6 * 6), dim = c(2, 6, 1, 6, 6))
#' y <- array(runif(2 * 6 * 6 * 6), dim = c(2, 6, 1, 6, 6))
#' opt <- convlstm_optimizer_adam(lr = 0.01)
#' # one long sequence in chunks of 3 steps, the state carried between them
#' for (chunk in list(1:3, 4:6)) {
#'   convlstm_train_step(model, x[, chunk, , , , drop = FALSE], y[, chunk, , , , drop = FALSE],
#'              opt, target = "sequence", state = "carry")
#' }
#' convlstm_carried_state(model)
#' convlstm_reset_state(model)
#' convlstm_carried_state(model)
#' convlstm_release(model)
convlstm_reset_state <- function(model) {
  ptr <- model_ptr(model)
  held <- !is.null(c_carried_state(ptr))
  c_reset_state(ptr)
  invisible(held)
}

#' The shape of the state a model carries
#'
#' @param model A model created by [convlstm()].
#' @return `NULL` when the model carries no state (see [convlstm_reset_state()]),
#'   else `c(batch, height, width)` of the state the next
#'   `convlstm_train_step(..., state = "carry")` starts from.
#' @export
#' @examples
#' model <- convlstm(1, 2, 3, device = "cpu")
#' convlstm_carried_state(model)
#' convlstm_release(model)
convlstm_carried_state <- function(model) {
  c_carried_state(model_ptr(model))
}

# An initial state as the model returns its last states: a list with one
# element per layer, each list(h = , c = ) (or two unnamed elements in that
# order), of dims [batch, hidden_dims[l], height, width] for an input of
# dims xd. Returns the arrays flat (h then c of layer 1, ...), as double, for
# c_step_options().
check_state <- function(state, config, xd, arg = "state", call = sys.call(-1)) {
  L <- config$n_layers
  if (!is.list(state) || is.data.frame(state) || length(state) != L) {
    abort_arg(arg, sprintf(
      "a list of %d layer state%s, each list(h = , c = ), as model(x)$layer_last_states", L,
      if (L == 1) "" else "s"), state, call)
  }
  out <- vector("list", 2 * L)
  for (l in seq_len(L)) {
    s <- state[[l]]
    if (is.list(s) && !is.null(names(s)) && all(c("h", "c") %in% names(s))) s <- s[c("h", "c")]
    if (!is.list(s) || length(s) != 2) {
      abort_convlstm(sprintf(
        "`%s[[%d]]` must be list(h = , c = ): layer %d's hidden and cell state, not %s.",
        arg, l, l, describe(s)), call = call)
    }
    want <- c(xd[[1]], config$hidden_dims[[l]], xd[[4]], xd[[5]])
    for (w in 1:2) {
      what <- sprintf("%s[[%d]]$%s", arg, l, c("h", "c")[[w]])
      a <- s[[w]]
      if (!(is.numeric(a) || is.logical(a)) || !identical(as.integer(dim(a)), as.integer(want))) {
        abort_convlstm(sprintf(
          "`%s` must be an array of dim %s ([batch, hidden, height, width] of layer %d for this x), not %s.",
          what, format_dims(want), l,
          if (is.null(dim(a))) describe(a) else paste("dim", format_dims(dim(a)))
        ), call = call)
      }
      check_finite(a, what, call)
      if (!is.double(a)) storage.mode(a) <- "double"
      out[[2 * l - 2 + w]] <- a
    }
  }
  out
}

# The state argument of convlstm_train_step(): NULL (zeros), "carry", or a given
# state. Returns list(mode, arrays) for c_step_options().
state_option <- function(state, config, xd, allow_carry = TRUE, call = sys.call(-1)) {
  if (is.null(state)) return(list(mode = "zero", arrays = NULL))
  if (is.character(state)) {
    if (allow_carry && identical(state, "carry")) return(list(mode = "carry", arrays = NULL))
    abort_arg("state", if (allow_carry) {
      'NULL, "carry" or a list of layer states list(h = , c = )'
    } else {
      "NULL or a list of layer states list(h = , c = )"
    }, state, call)
  }
  list(mode = "given", arrays = check_state(state, config, xd, call = call))
}

# A forecast's number of frames, for a model that can feed its output back.
check_horizon <- function(horizon, config, call = sys.call(-1)) {
  horizon <- check_count(horizon, "horizon", call = call)
  C <- output_channels(config)
  if (C != config$input_dim) {
    abort_convlstm(sprintf(paste0(
      "`horizon` needs the last layer's hidden size (%d) to equal `input_dim` (%d): each ",
      "predicted frame is fed back as the next input."), C, config$input_dim), call = call)
  }
  horizon
}
