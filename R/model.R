# model.R -- the model object: convlstm() builds one, calling it runs an
# inference forward, and print(), summary(), `$`, predict() and
# convlstm_release() inspect, use and free it.
#
# A model is a closure (so model(x) works as it does with an R torch module)
# of class c("convlstm_model", "function"); its environment holds the
# external pointer to the C model and the configuration it was created with.
# Training lives in train.R and fit.R, weights in state_dict.R.

#' Create a convolutional LSTM
#'
#' Builds a ConvLSTM with the same mathematics and parameter layout as the R
#' torch tutorial's `convlstm` module (itself after ndrplz/ConvLSTM_pytorch):
#' per layer one 2-d convolution over the concatenation of the input and the
#' previous hidden state, with weight `[4 * hidden, in + hidden, k, k]` and
#' bias `[4 * hidden]`, gates in the order i, f, o, g, "same" padding and a
#' zero initial state. Layer `l + 1` reads layer `l`'s output sequence.
#'
#' Weights are initialised as torch's `nn_conv2d()` does (uniform in
#' `+-1/sqrt(fan_in)`), drawn from R's random number generator, so
#' [set.seed()] makes a model reproducible.
#'
#' @param input_dim Number of channels of the input.
#' @param hidden_dims Hidden channels per layer: one value for every layer or
#'   one per layer.
#' @param kernel_sizes Odd square kernel size per layer: one value for every
#'   layer or one per layer.
#' @param n_layers Number of stacked layers.
#' @param bias Whether the convolutions have a bias.
#' @param device `"auto"` (a CUDA GPU when one is usable, else the CPU),
#'   `"cpu"` or `"cuda"`.
#' @param dtype Storage type of activations: `"float32"`. (`"float16"` and
#'   `"bfloat16"` are reserved for mixed precision; builds that lack them say
#'   so.) Parameters, gradients and optimizer state are always float32.
#' @param memory_limit `NULL` (no limit beyond the device's capacity), or the
#'   most memory the model may hold, in bytes or as a string such as
#'   `"512 MiB"` or `"2GB"`. An allocation beyond it fails with an error of
#'   class `convlstm_error_oom`, leaving the model usable.
#' @param threads `NULL` (the backend's default) or the number of CPU threads.
#'
#' @return A model: a function of class `convlstm_model`. Calling it on an
#'   array `x` of dim `[batch, time, channels, height, width]` runs an
#'   inference forward and returns what the tutorial's module returns:
#'   `list(layer_outputs, layer_last_states)`, where `layer_outputs[[l]]` has
#'   dim `[batch, time, hidden_dims[l], height, width]` and
#'   `layer_last_states[[l]]` is `list(h = , c = )`, each of dim
#'   `[batch, hidden_dims[l], height, width]`. Fields are available with `$`:
#'   `config`, `input_dim`, `hidden_dims`, `kernel_sizes`, `n_layers`,
#'   `bias`, `device`, `dtype`, `backend`, `n_parameters`, `parameters`
#'   (the state dict), and the methods `state_dict()`, `load_state_dict()`,
#'   `zero_grad()`, `forward()`.
#'
#' @seealso [train_step()], [convlstm_fit()], [state_dict()],
#'   [memory_stats()], [convlstm_release()].
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(input_dim = 1, hidden_dims = c(8, 1), kernel_sizes = 3,
#'                   device = "cpu")
#' model
#' x <- array(runif(2 * 4 * 1 * 6 * 6), dim = c(2, 4, 1, 6, 6))
#' out <- model(x)
#' dim(out[[1]][[2]])      # layer 2 output: [2, 4, 1, 6, 6]
#' dim(out[[2]][[2]]$h)    # layer 2 last h:  [2, 1, 6, 6]
#' convlstm_release(model)
convlstm <- function(input_dim, hidden_dims, kernel_sizes, n_layers = length(hidden_dims),
                     bias = TRUE, device = "auto", dtype = "float32", memory_limit = NULL,
                     threads = NULL) {
  input_dim <- check_count(input_dim, "input_dim")
  n_layers <- check_count(n_layers, "n_layers")
  if (n_layers > max_layers) {
    abort_convlstm(sprintf("`n_layers` must be at most %d, not %d.", max_layers, n_layers),
                   call = sys.call())
  }
  hidden_dims <- recycle_layers(check_counts(hidden_dims, "hidden_dims"), n_layers, "hidden_dims")
  kernel_sizes <- recycle_layers(check_counts(kernel_sizes, "kernel_sizes"), n_layers,
                                 "kernel_sizes")
  if (any(kernel_sizes %% 2 == 0)) {
    abort_arg("kernel_sizes", "odd (so that padding k %/% 2 keeps the image size)",
              kernel_sizes, sys.call())
  }
  bias <- check_flag(bias, "bias")
  device <- check_choice(device, c("auto", "cpu", "cuda"), "device")
  dtype <- check_choice(dtype, c("float32", "float16", "bfloat16"), "dtype")
  memory_limit <- parse_bytes(memory_limit, "memory_limit", sys.call())
  threads <- if (is.null(threads)) 0L else check_count(threads, "threads")

  if (identical(device, "auto")) device <- if (gpu_available()) "cuda" else "cpu"
  ptr <- c_model_create(
    input_dim, hidden_dims, kernel_sizes, bias,
    device = match(device, c("cpu", "cuda")) - 1L,
    dtype = match(dtype, c("float32", "float16", "bfloat16")) - 1L,
    threads = threads, memory_limit = memory_limit
  )
  c_model_init_params(ptr)
  new_convlstm_model(ptr)
}

max_layers <- 32L

# The tutorial gives hidden_dims and kernel_sizes per layer; a single value
# stands for every layer.
recycle_layers <- function(x, n_layers, arg, call = sys.call(-1)) {
  if (length(x) == 1) return(rep(x, n_layers))
  if (length(x) != n_layers) {
    abort_convlstm(sprintf(
      "`%s` must have length 1 or `n_layers` (%d), not %d.", arg, n_layers, length(x)
    ), call = call)
  }
  x
}

parse_bytes <- function(x, arg, call) {
  if (is.null(x)) return(0)
  if (is.character(x) && length(x) == 1 && !is.na(x)) {
    m <- regmatches(x, regexec("^\\s*([0-9.]+(?:[eE][0-9]+)?)\\s*([KMGT]i?B|B)?\\s*$", x,
                               perl = TRUE))[[1]]
    if (length(m) == 3) {
      unit <- if (nzchar(m[[3]])) m[[3]] else "B"
      mult <- c(B = 1, KB = 1e3, MB = 1e6, GB = 1e9, TB = 1e12,
                KiB = 2^10, MiB = 2^20, GiB = 2^30, TiB = 2^40)[[unit]]
      x <- as.numeric(m[[2]]) * mult
    }
  }
  if (!is.numeric(x) || length(x) != 1 || is.na(x) || !is.finite(x) || x < 1) {
    abort_arg(arg, 'NULL, a number of bytes or a size such as "512 MiB" or "2 GB"', x, call)
  }
  floor(x)
}

new_convlstm_model <- function(ptr) {
  config <- c_model_config(ptr)
  model <- function(x) {
    x <- check_input(x, config, "x")
    c_forward(ptr, x, training = FALSE, what = "all")
  }
  class(model) <- c("convlstm_model", "function")
  model
}

is_convlstm_model <- function(x) inherits(x, "convlstm_model")

model_ptr <- function(model, arg = "model", call = sys.call(-1)) {
  if (!is_convlstm_model(model)) {
    abort_arg(arg, "a model created by convlstm()", model, call)
  }
  environment(model)$ptr
}

# The configuration as the C model reports it; the stored copy when the
# model no longer has C memory (released, or restored by readRDS).
model_config <- function(model) {
  ptr <- model_ptr(model)
  if (identical(c_model_status(ptr), "live")) c_model_config(ptr) else environment(model)$config
}

check_input <- function(x, config, arg, call = sys.call(-1)) {
  x <- check_array(x, arg, 5, call = call)
  if (dim(x)[[3]] != config$input_dim) {
    abort_convlstm(sprintf(
      "`%s` must have %d channel%s (dim 3 of [batch, time, channels, height, width]), not %d.",
      arg, config$input_dim, if (config$input_dim == 1) "" else "s", dim(x)[[3]]
    ), call = call)
  }
  x
}

layer_table <- function(config) {
  L <- config$n_layers
  h <- config$hidden_dims
  k <- config$kernel_sizes
  inp <- c(config$input_dim, h[-L])
  params <- 4 * h * (inp + h) * k * k + if (isTRUE(config$bias)) 4 * h else 0
  data.frame(
    layer = seq_len(L), input = inp, hidden = h, kernel = paste0(k, "x", k),
    parameters = params, bytes = params * 4
  )
}

#' @export
print.convlstm_model <- function(x, ...) {
  status <- c_model_status(model_ptr(x))
  config <- model_config(x)
  layers <- layer_table(config)
  n <- sum(layers$parameters)
  cat(sprintf(
    "<convlstm_model> %d layer%s, %s parameters (%s), device %s, dtype %s\n",
    config$n_layers, if (config$n_layers == 1) "" else "s", format_count(n),
    format_bytes(n * 4), config$device, config$dtype
  ))
  if (status == "released") cat("  released: this model holds no memory any more\n")
  if (status == "restored") {
    cat("  no C memory (restored by readRDS?): use convlstm_save() / convlstm_load()\n")
  }
  shown <- layers[c("layer", "input", "hidden", "kernel", "parameters")]
  shown$parameters <- format_count(shown$parameters)
  print(shown, row.names = FALSE)
  invisible(x)
}

#' Summarise a convlstm model
#'
#' Layers (input and hidden channels, kernel), parameter counts and bytes,
#' device, dtype and, for a live model, the memory it holds per category.
#'
#' @param object A model created by [convlstm()].
#' @param ... Unused.
#' @return An object of class `summary.convlstm_model`: a list with `layers`
#'   (a data frame), `n_parameters`, `parameter_bytes`, `device`, `dtype`,
#'   `backend`, `status` and `memory` ([memory_stats()] or `NULL`).
#' @export
#' @examples
#' model <- convlstm(1, c(4, 2), 3, device = "cpu")
#' summary(model)
#' convlstm_release(model)
summary.convlstm_model <- function(object, ...) {
  ptr <- model_ptr(object, "object")
  status <- c_model_status(ptr)
  config <- model_config(object)
  layers <- layer_table(config)
  structure(list(
    layers = layers,
    n_parameters = sum(layers$parameters),
    parameter_bytes = sum(layers$bytes),
    device = config$device,
    dtype = config$dtype,
    backend = config$backend %||% config$device,
    bias = config$bias,
    status = status,
    memory = if (status == "live") memory_stats(object) else NULL
  ), class = "summary.convlstm_model")
}

#' @export
print.summary.convlstm_model <- function(x, ...) {
  cat(sprintf(
    "ConvLSTM: %d layer%s on %s (backend %s), activations %s, bias %s\n\n",
    nrow(x$layers), if (nrow(x$layers) == 1) "" else "s", x$device, x$backend, x$dtype,
    if (isTRUE(x$bias)) "yes" else "no"
  ))
  shown <- x$layers
  shown$output <- sprintf("[B, T, %d, H, W]", shown$hidden)
  shown$parameters <- format_count(shown$parameters)
  shown$bytes <- format_bytes(shown$bytes)
  print(shown[c("layer", "input", "hidden", "kernel", "output", "parameters", "bytes")],
        row.names = FALSE)
  cat(sprintf("\nTotal parameters: %s (%s as float32)\n", format_count(x$n_parameters),
              format_bytes(x$parameter_bytes)))
  if (!is.null(x$memory)) {
    cat("\n")
    print(x$memory)
  } else if (x$status != "live") {
    cat(sprintf("Model status: %s (no memory held)\n", x$status))
  }
  invisible(x)
}

model_fields <- c(
  "config", "input_dim", "hidden_dims", "kernel_sizes", "n_layers", "bias", "device",
  "dtype", "backend", "n_parameters", "parameters", "state_dict", "load_state_dict",
  "zero_grad", "forward"
)

#' @export
`$.convlstm_model` <- function(x, name) {
  model <- x
  switch(name,
    config = model_config(model),
    input_dim = , hidden_dims = , kernel_sizes = , n_layers = , bias = , device = ,
    dtype = , backend = model_config(model)[[name]],
    n_parameters = sum(layer_table(model_config(model))$parameters),
    parameters = state_dict(model),
    state_dict = function() state_dict(model),
    load_state_dict = function(state_dict, strict = TRUE) {
      load_state_dict(model, state_dict, strict = strict)
    },
    zero_grad = function() zero_grad(model),
    forward = function(x, training = TRUE, target = NULL) {
      convlstm_forward(model, x, training = training, target = target)
    },
    abort_convlstm(sprintf(
      "A convlstm model has no field `%s`; available: %s.", name,
      paste(model_fields, collapse = ", ")
    ), call = sys.call())
  )
}

#' @export
`[[.convlstm_model` <- function(x, i, ...) `$.convlstm_model`(x, i)

#' @export
`$<-.convlstm_model` <- function(x, name, value) {
  abort_convlstm(
    "A convlstm model's fields are read-only; use load_state_dict() to change its weights.",
    call = sys.call()
  )
}

#' @export
`[[<-.convlstm_model` <- `$<-.convlstm_model`

#' @rawNamespace S3method(utils::.DollarNames, convlstm_model)
.DollarNames.convlstm_model <- function(x, pattern = "") {
  grep(pattern, model_fields, value = TRUE)
}

#' Predict with a convlstm model
#'
#' Runs an inference forward (no activations are kept for backward, so
#' memory does not grow with training state) and returns the last layer's
#' output.
#'
#' @param object A model created by [convlstm()].
#' @param x Input array `[batch, time, channels, height, width]`.
#' @param what `"sequence"`: the last layer's output at every step,
#'   `[batch, time, hidden, height, width]`; `"last_state"`: its hidden state
#'   after the last step, `[batch, hidden, height, width]` (the tutorial's
#'   `model(x)[[2]][[n_layers]][[1]]`).
#' @param batch_size `NULL` to run all of `x` at once, or the number of
#'   samples per forward call (bounds memory for large inputs).
#' @param ... Unused.
#' @return A double array as described for `what`.
#' @export
#' @examples
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(3 * 5 * 8 * 8), dim = c(3, 5, 1, 8, 8))
#' dim(predict(model, x))                       # [3, 5, 1, 8, 8]
#' dim(predict(model, x, what = "last_state"))  # [3, 1, 8, 8]
#' convlstm_release(model)
predict.convlstm_model <- function(object, x, what = c("sequence", "last_state"),
                                   batch_size = NULL, ...) {
  ptr <- model_ptr(object, "object")
  what <- check_choice(what, c("sequence", "last_state"), "what")
  x <- check_input(x, model_config(object), "x")
  n <- dim(x)[[1]]
  batch_size <- if (is.null(batch_size)) n else check_count(batch_size, "batch_size")
  if (batch_size >= n) return(c_forward(ptr, x, training = FALSE, what = what))
  out <- NULL
  for (start in seq(1L, n, by = batch_size)) {
    idx <- start:min(n, start + batch_size - 1L)
    part <- c_forward(ptr, slice_batch(x, idx), training = FALSE, what = what)
    if (is.null(out)) out <- array(0, dim = c(n, dim(part)[-1]))
    out <- assign_batch(out, idx, part)
  }
  out
}

# x[idx, , , ...] for an array of any rank, keeping every dimension.
slice_batch <- function(x, idx) {
  args <- c(list(x, idx), rep(list(quote(expr = )), length(dim(x)) - 1L), list(drop = FALSE))
  do.call(`[`, args)
}

assign_batch <- function(x, idx, value) {
  args <- c(list(x, idx), rep(list(quote(expr = )), length(dim(x)) - 1L), list(value = value))
  do.call(`[<-`, args)
}

#' Release a model's memory now
#'
#' Frees every byte the model holds (parameters, gradients, optimizer state,
#' activations) at once, instead of when R's garbage collector happens to
#' finalise it. The model cannot be used afterwards; using it is an error of
#' class `convlstm_error_state`. Releasing twice is harmless.
#'
#' @param model A model created by [convlstm()].
#' @return `TRUE` if memory was released, `FALSE` if the model held none,
#'   invisibly.
#' @export
#' @examples
#' model <- convlstm(1, 4, 3, device = "cpu")
#' convlstm_release(model)
#' try(model(array(0, c(1, 1, 1, 4, 4))))
convlstm_release <- function(model) {
  invisible(c_model_release(model_ptr(model)))
}

#' Is a CUDA GPU usable?
#'
#' `TRUE` when this build of convlstm has CUDA support and a CUDA device can
#' be used; `device = "auto"` in [convlstm()] then picks it.
#'
#' @return `TRUE` or `FALSE`.
#' @export
#' @examples
#' gpu_available()
gpu_available <- function() {
  c_gpu_available()
}
