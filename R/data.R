# data.R -- a training set uploaded to the model's device once
# (convlstm_data()), so that convlstm_train_step() and convlstm_fit() gather each
# batch's rows there instead of slicing, converting and uploading it from R
# at every step. The data set belongs to its model: releasing the model
# frees it too. The C side is src/r_data.c and src/core/data.c.

#' Upload a training set to the model's device once
#'
#' Converts `x` and `y` into the model's storage type and layout and keeps
#' them on the model's device (the GPU for a CUDA model), so that each
#' training step takes its batch by row number: no slicing of R arrays and
#' no transfer per step. [convlstm_train_step()] accepts the data set in place of `x`
#' with `rows`; [convlstm_fit()] makes one itself when the data fit
#' (`data_on_device`). The loss and gradients are exactly those of the same
#' rows passed as arrays.
#'
#' The bytes count under `"data"` in [convlstm_memory_stats()] and against
#' [convlstm_set_memory_limit()]; a data set that does not fit is an error of class
#' `convlstm_error_oom` and the model stays usable. The data set belongs to
#' `model`: [convlstm_release()] of the model frees it too (using it
#' afterwards is an error of class `convlstm_error_state`), and
#' `convlstm_release(data)` or `rm(data); gc()` frees it alone. It holds
#' `x` in the model's dtype at the time it is made; after [convlstm_set_dtype()] make
#' it again.
#'
#' @param model A model created by [convlstm()] or [convlstm_forecaster()].
#' @param x Inputs `[n, time, channels, height, width]`.
#' @param y Targets: `[n, hidden, height, width]` for `"last_state"`,
#'   `[n, time, hidden, height, width]` for `"sequence"`. For an
#'   encoder-forecaster ([convlstm_forecaster()]): the frames it forecasts,
#'   `[n, K, channels, height, width]` (any `K`; its target is always the
#'   sequence of frames).
#' @param target Which output the loss of steps on this data set is
#'   computed on.
#' @return An object of class `convlstm_data`, with a `print()` method;
#'   `data$n` is its number of rows.
#' @seealso [convlstm_train_step()], [convlstm_fit()].
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' y <- array(runif(8 * 6 * 6), dim = c(8, 1, 6, 6))
#' data <- convlstm_data(model, x, y)
#' data
#' opt <- convlstm_optimizer_adam(lr = 0.01)
#' convlstm_train_step(model, data, optimizer = opt, rows = c(3, 1, 8, 5))
#' # the same step as on the rows sliced in R:
#' # convlstm_train_step(model, x[c(3, 1, 8, 5), , , , , drop = FALSE],
#' #            y[c(3, 1, 8, 5), , , , drop = FALSE], opt)
#' convlstm_memory_stats(model)$by_category
#' convlstm_release(model) # frees the data set too
convlstm_data <- function(model, x, y, target = c("last_state", "sequence")) {
  ptr <- model_ptr(model)
  require_capabilities(model, step_capabilities(data = TRUE))
  config <- model_config(model)
  x <- check_input(x, config, "x")
  if (is_convlstm_forecaster(model)) { # y: the frames to forecast, any number of them
    if (!missing(target)) require_capabilities(model, step_capabilities(target = target))
    target <- "sequence"
    y <- check_input(y, config, "y") # the patch and the pair's sizes: the core's checks
  } else {
    target <- check_choice(target, c("last_state", "sequence"), "target")
    y <- check_target_array(y, dim(x), config, target, "y")
  }
  dptr <- c_data_create(ptr, x, y, target)
  info <- c_data_info(dptr)
  structure(
    list(ptr = dptr, n = dim(x)[[1]], x_dim = dim(x), y_dim = dim(y), target = target,
         dtype = info$dtype, bytes = info$bytes, device = config$device),
    class = "convlstm_data"
  )
}

is_convlstm_data <- function(x) inherits(x, "convlstm_data")

#' @export
print.convlstm_data <- function(x, ...) {
  x <- unclass(x)
  status <- c_data_status(x$ptr)
  cat(sprintf(
    "<convlstm_data> %d sequence%s on %s, %s, %s%s\n", x$n, if (x$n == 1) "" else "s",
    x$device, x$dtype, format_bytes(x$bytes),
    switch(status, live = "", released = " (released)",
           "model released" = " (released with its model)",
           restored = " (restored by readRDS: no device memory)")
  ))
  cat(sprintf("  x: %s  y: %s  target: %s\n", format_dims(x$x_dim), format_dims(x$y_dim),
              x$target))
  invisible(structure(x, class = "convlstm_data"))
}

# The step's rows of a data set of n rows: 1-based, any order, repeats
# allowed; NULL is every row in order.
check_rows <- function(rows, n, call = sys.call(-1)) {
  if (is.null(rows)) return(seq_len(n))
  if (!is.numeric(rows) || length(rows) < 1 || !is_whole(rows) || any(rows < 1) ||
      any(rows > n)) {
    abort_arg("rows", sprintf("a vector of row numbers between 1 and %d (the data set's rows)", n),
              rows, call)
  }
  if (length(rows) > .Machine$integer.max) abort_arg("rows", "shorter", rows, call)
  as.integer(rows)
}

# convlstm_train_step() on a data set: y must not be given (the targets are in the
# data set); a target given explicitly must be the data set's.
train_step_data <- function(model, data, y, optimizer, target, target_given, checkpoint,
                            accumulation_steps, tbptt, rows, state, call, max_grad_norm = NULL,
                            loss = NULL, recompute_gates = 0L) {
  ptr <- model_ptr(model, call = call)
  if (!is.null(y)) {
    abort_convlstm(paste0(
      "`y` must be NULL when `x` is a data set: its targets are in the data set; ",
      "choose the rows with `rows`."
    ), call = call)
  }
  if (target_given) {
    target <- check_choice(target, c("last_state", "sequence"), "target", call = call)
    if (!identical(target, data$target)) {
      abort_convlstm(sprintf(
        "`target` is \"%s\" but the data set was made for target = \"%s\".", target, data$target
      ), call = call)
    }
  }
  rows <- check_rows(rows, data$n, call = call)
  optimizer <- check_optimizer(optimizer)
  if (!is.null(state) && !identical(state, "carry")) {
    abort_arg("state", 'NULL or "carry" when `x` is a data set', state, call)
  }
  state <- list(mode = if (is.null(state)) "zero" else "carry", arrays = NULL)
  options <- check_step_options(checkpoint, accumulation_steps, tbptt, batch_size = length(rows),
                                state = state, max_grad_norm = max_grad_norm, loss = loss,
                                recompute_gates = recompute_gates, call = call)
  c_train_step_data(ptr, data$ptr, rows, optimizer, options)
}

# The shape cl_data_bytes_for() sizes a data set by: c(N, T, H, W) of its
# inputs x_dim, and K, an encoder-forecaster's target frames (NULL: none).
data_shape <- function(x_dim, K = NULL) c(x_dim[c(1, 2, 4, 5)], K)

# Whether a data set of inputs x_dim and the training step of batch_size
# rows fit together in the capacity convlstm_memory_stats() reports: the memory limit
# when one is set, else what the device has free plus what the model holds
# already. The data set's bytes are core/data.c's own (cl_data_bytes_for).
data_set_fits <- function(ptr, x_dim, target, batch_size, optimizer, options, K = NULL) {
  shape <- data_shape(x_dim, K)
  if (!is.null(K)) { # an encoder-forecaster's step plans its K forecast frames
    options <- options %||% c_step_options()
    options$horizon <- as.integer(K)
  }
  plan <- c_model_plan(ptr, c(batch_size, shape[2:4]), TRUE, optimizer, options)
  data_bytes <- c_data_bytes_for(ptr, shape, target)
  s <- c_memory_stats(ptr)
  capacity <- if (s$limit > 0) s$limit else s$device_free + s$reserved
  data_bytes > 0 && data_bytes + plan$reserved <= capacity
}
