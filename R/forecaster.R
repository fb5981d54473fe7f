# forecaster.R -- Shi et al. (2015)'s encoder-forecaster: its constructor,
# its prediction and how it prints. It trains and is evaluated through the
# same convlstm_train_step(), convlstm_fit() and convlstm_evaluate() as a
# plain stack (its target: the K frames of y); the core runs it
# (src/core/program.c); the model is a convlstm_model whose class says it is
# this one.

#' Create Shi et al.'s encoder-forecaster
#'
#' The model of Shi et al. (2015), section 3.3 and Fig. 3: an encoder
#' stack of ConvLSTM layers reads the input frames from zero states; a
#' forecaster stack of the same hidden sizes and kernels starts from the
#' encoder's last states, its first layer reading no input (its gates one
#' convolution over its own `h`, with the recurrent kernel) and each upper
#' layer the hidden state of the layer below; a 1x1 convolution with bias
#' (the head) over the channels of every forecaster layer's hidden state,
#' layer 1 first, gives each predicted frame. Frames enter as `patch` x
#' `patch` patches (space-to-depth, torch's `pixel_unshuffle()`: a 64x64x1
#' frame with 4x4 patches is 16 channels of 16x16) and leave the same way
#' (`pixel_shuffle()`). The head's output is the frame itself: train with
#' `loss = "bce_logits"` for frames in `[0, 1]` (the paper's cross-entropy)
#' and apply `plogis()` to [predict()]'s output, or with `"mse"`.
#'
#' The parameters' names are the encoder's `encoder.cell_list.<l>.*` and
#' the forecaster's `forecaster.cell_list.<l>.*` (as [convlstm()]'s
#' `cell_list.<l>.*`, from 0; the forecaster's first layer has one
#' convolution `conv.weight` `[4h, h, rkh, rkw]` and `conv.bias`), then
#' `head.weight` `[C p p, sum(hidden_dims), 1, 1]` and `head.bias`
#' (see [convlstm_state_dict()]). With 5x5 kernels, hidden sizes 128-64-64, one
#' channel and 4x4 patches it has 7,585,296 parameters, Table 1's.
#'
#' The model's fields read back what `convlstm_forecaster()` was given, one
#' stack's: `model$hidden_dims`, `$kernel_sizes`, `$recurrent_kernel_sizes`,
#' `$dilation`, `$dropout` and `$recurrent_dropout` have one value per layer
#' of a stack and `$n_layers` is `length(hidden_dims)` (the forecaster's
#' stack has the same); `$n_parameters` counts both stacks and the head.
#' Only `$config`, the core's description, lists both stacks' layers, the
#' encoder's first.
#'
#' Trained with [convlstm_train_step()] (`y` holds the frames to forecast: their
#' number, `dim(y)[2]`, is the forecaster's steps, which may differ from
#' `x`'s) or [convlstm_fit()], the same loop as a plain stack's: epochs of
#' mini-batches, `shuffle`, the progress bar, the loss and its reduction
#' (the history's epoch loss in the plain stack's units for each),
#' `max_grad_norm`, `callbacks`, `lr_scheduler`, `validation_split`,
#' `validation_data = list(x, y)` (whose frames to forecast may be as many
#' as you like and whose frames may be of another size than the training
#' ones; checked whole before anything trains: y has x's sequences and
#' frame size, the patch divides it), `metrics`, `resume` (the losses of an
#' uninterrupted fit) and `memory_budget` (the advisor's pick for the
#' forecast of `dim(y)[2]` frames; with `batch_size = "max"` the largest
#' batch [convlstm_max_batch_size()] plans for it). Predicted with [predict()]
#' and a `horizon`, evaluated with [convlstm_evaluate()] (any `horizon`),
#' saved with [convlstm_save()],
#' planned by [convlstm_memory_estimate()], [convlstm_max_batch_size()] and
#' [convlstm_memory_advise()] (give `horizon`, the forecast frames; the advice
#' offers only what its training runs: float32, float16 and bfloat16, with
#' or without micro-batches, checkpointing and recomputed gates). It trains in
#' float16 and bfloat16 (the head's gradient in the storage type, under the
#' loss scale), with `accumulation_steps`, and with `checkpoint` (each
#' stack's steps in segments of `checkpoint`, recomputed in backward) and
#' `recompute_gates`, as a plain stack does: the same loss, gradients within
#' float32 rounding, less memory; with a loss `weight` shaped as `y`; on a
#' data set on the device ([convlstm_data()]`(model, x, y)`, `y` its frames
#' to forecast; [convlstm_train_step()]'s `rows`, [convlstm_fit()]'s
#' `data_on_device = TRUE`), whose steps are those of the same rows given as
#' arrays, bit for bit; and data parallel over MPI ([convlstm_fit()]'s
#' `distributed`: the ranks train as one process on their global batch).
#' Not supported today: the rows of [convlstm_capabilities()] whose `model` is
#' `"encoder_forecaster"` and `supported` is `FALSE` (`tbptt`,
#' a `horizon` argument (the forecast
#' is `dim(y)[2]` frames), `teacher_forcing` below 1, given or carried states,
#' `target = "last_state"`). Every function refuses them alike: a classed
#' `convlstm_error_unsupported` whose message is the table's reason.
#'
#' @param input_dim Channels of a frame (before patching).
#' @param hidden_dims Hidden channels of each layer, for both stacks.
#' @param kernel_sizes Input-to-state kernel of each layer (odd; one value
#'   for all), as in [convlstm()]. The forecaster's first layer has none.
#' @param patch Patch size: it must divide the frames' height and width.
#' @param recurrent_kernel_sizes State-to-state kernels (`NULL`: the input
#'   kernels), as in [convlstm()].
#' @param peephole `"channel"` (the default: one weight per hidden channel,
#'   the cell whose parameters Table 1 counts) or `"none"`. The
#'   per-position peepholes of the paper's equations (3) ([convlstm()]'s
#'   `"position"`) would not give Table 1's counts: refused with the
#'   capability table's reason ([convlstm_capabilities()]).
#' @param bias Whether the cells' convolutions have a bias (the head always
#'   has one).
#' @param dropout,recurrent_dropout,dropout_masks As in [convlstm()], for the
#'   layers of both stacks (one rate for every layer, or one per layer of a
#'   stack): variational dropout of each layer's input `x_t` and its
#'   `h_{t-1}` in training, masks drawn once per sequence and call. The
#'   forecaster's first layer reads no input, so it has only
#'   `recurrent_dropout`; its first `h_{t-1}`, the encoder's last state, goes
#'   through its mask as every later one does. [predict()] applies none.
#' @param device,dtype,threads,memory_limit,dilation As in [convlstm()].
#' @return A model: a `convlstm_forecaster`, which is a `convlstm_model`.
#' @references Shi, X., Chen, Z., Wang, H., Yeung, D.-Y., Wong, W.-K. and
#'   Woo, W.-C. (2015). Convolutional LSTM network: a machine learning
#'   approach for precipitation nowcasting. NIPS 28.
#' @seealso [convlstm_moving_mnist()] for the paper's data.
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm_forecaster(1, c(8, 4), 3, patch = 2, device = "cpu")
#' model
#' x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
#' y <- array(runif(2 * 2 * 8 * 8), dim = c(2, 2, 1, 8, 8))
#' opt <- convlstm_optimizer_rmsprop(lr = 1e-3)
#' convlstm_train_step(model, x, y, opt, loss = "bce_logits", reduction = "sum")
#' dim(predict(model, x, horizon = 2))  # [2, 2, 1, 8, 8]
#' # a loss weight shaped as y (0 masks an element); the data uploaded once
#' convlstm_train_step(model, x, y, opt, weight = array(runif(length(y)) > 0.2, dim(y)))
#' data <- convlstm_data(model, x, y)
#' convlstm_train_step(model, data, optimizer = opt, rows = c(2, 1))
#' # variational dropout in both stacks, in training only
#' dropped <- convlstm_forecaster(1, c(8, 4), 3, patch = 2, dropout = 0.2,
#'                                recurrent_dropout = 0.2, device = "cpu")
#' convlstm_train_step(dropped, x, y, opt)
#' convlstm_release(dropped)
#' history <- convlstm_fit(model, x, y, opt, epochs = 2, batch_size = 1, verbose = FALSE,
#'                         loss = "bce_logits", validation_data = list(x, y),
#'                         lr_scheduler = convlstm_lr_step(opt, step_size = 1, gamma = 0.5))
#' history
#' convlstm_evaluate(model, x, y[, 1, , , , drop = FALSE], horizon = 1, loss = "bce_logits")
#' convlstm_release(model)
convlstm_forecaster <- function(input_dim, hidden_dims, kernel_sizes, patch = 1L,
                                recurrent_kernel_sizes = NULL, peephole = "channel",
                                bias = TRUE, device = "cpu", dtype = "float32", threads = NULL,
                                memory_limit = NULL, dilation = 1, dropout = 0,
                                recurrent_dropout = 0, dropout_masks = c("per_gate", "shared")) {
  call <- sys.call()
  input_dim <- check_count(input_dim, "input_dim")
  hidden_dims <- check_counts(hidden_dims, "hidden_dims")
  L <- length(hidden_dims)
  if (2L * L > max_layers - 2L) {
    abort_convlstm(sprintf("`hidden_dims` may have at most %d layers, not %d.",
                           (max_layers - 2L) %/% 2L, L), call = call)
  }
  patch <- check_count(patch, "patch")
  if (isTRUE(peephole) || identical(peephole, "position")) { # the table's row, as the core says it
    refuse_by_table("encoder_forecaster", "peephole = position", call)
  }
  peephole <- check_choice(peephole, c("channel", "none"), "peephole")
  geometry <- layer_geometry(kernel_sizes, dilation, L, call,
                             recurrent_kernel_sizes = recurrent_kernel_sizes)
  check_layer_sizes(input_dim * patch^2, hidden_dims, geometry, call)
  bias <- check_flag(bias, "bias")
  device <- resolve_device(device, call)
  dtype <- check_choice(dtype, dtypes(), "dtype")
  memory_limit <- parse_bytes(memory_limit, "memory_limit", call)
  threads <- check_threads(threads, call)
  dropout <- check_rates(dropout, "dropout", L, call)
  recurrent_dropout <- check_rates(recurrent_dropout, "recurrent_dropout", L, call)
  dropout_masks <- check_choice(dropout_masks, c("per_gate", "shared"), "dropout_masks")
  # the encoder's layers, then the forecaster's of the same sizes and kernels
  ptr <- with_model_options(call, c_model_create(
    input_dim, rep(hidden_dims, 2L), cbind(geometry, geometry), bias,
    device = device, dtype = dtype, threads = threads, memory_limit = memory_limit,
    peephole = peephole_spec(peephole, NULL, call), structure = c(1L, patch, 0L),
    # the forecaster's first layer has no input to drop
    dropout = c(dropout, 0, dropout[-1]), recurrent_dropout = rep(recurrent_dropout, 2L),
    dropout_masks = dropout_masks
  ))
  c_model_init_params(ptr)
  new_convlstm_model(ptr)
}

is_convlstm_forecaster <- function(x) inherits(x, "convlstm_forecaster")

#' @rdname convlstm_forecaster
#' @param object An encoder-forecaster.
#' @param x Input frames `[batch, time, channels, height, width]`.
#' @param horizon The number of frames to forecast.
#' @param batch_size `NULL`, or predict this many sequences at a time.
#' @param ... Nothing else.
#' @return `predict()`: the forecast frames `[batch, horizon, channels,
#'   height, width]`, the head's output (logits when trained with
#'   `"bce_logits"`).
#' @export
predict.convlstm_forecaster <- function(object, x, horizon, batch_size = NULL, ...) {
  check_dots(list(...), character(), "predict", names = c("horizon", "batch_size"))
  ptr <- model_ptr(object, "object")
  config <- model_config(object)
  if (missing(horizon)) {
    abort_arg("horizon", "the number of frames to forecast", NULL, sys.call())
  }
  horizon <- check_count(horizon, "horizon")
  x <- check_input(x, config, "x", forward = TRUE)
  n <- dim(x)[[1]]
  batch_size <- if (is.null(batch_size)) n else check_count(batch_size, "batch_size")
  options <- c_step_options(outputs = "last_state", horizon = horizon)
  out <- NULL
  for (start in seq(1L, n, by = batch_size)) {
    idx <- start:min(n, start + batch_size - 1L)
    part <- c_forward(ptr, slice_batch(x, idx), training = FALSE, what = "frames", options)
    if (batch_size >= n) return(part)
    if (is.null(out)) out <- array(0, dim = c(n, dim(part)[-1]))
    out <- assign_batch(out, idx, part)
  }
  out
}

# The stacks' layers as the user gave them (the encoder's; the forecaster
# has the same), with the parameters of each stack's layer and the head's.
forecaster_table <- function(config) {
  L <- config$n_layers %/% 2L
  g <- config$geometry
  C <- config$input_dim * config$patch^2
  h <- config$hidden_dims[seq_len(L)]
  cell <- function(inp, l, k) {
    4 * h[[l]] * (inp * g[1, l] * g[2, l] + h[[l]] * g[5, l] * g[6, l]) +
      (if (config$bias) 4 * h[[l]] else 0) + (if (config$peephole != "none") 3 * h[[l]] else 0)
  }
  inp <- c(C, h[-L])
  data.frame(
    layer = seq_len(L), input = inp, hidden = h,
    kernel = geometry_labels(g[, seq_len(L), drop = FALSE]),
    encoder = vapply(seq_len(L), function(l) cell(inp[[l]], l), numeric(1)),
    forecaster = vapply(seq_len(L), function(l) cell(if (l == 1) 0 else inp[[l]], l), numeric(1))
  )
}

#' @export
print.convlstm_forecaster <- function(x, ...) {
  config <- model_config(x)
  layers <- forecaster_table(config)
  cat(sprintf(paste0(
    "<convlstm_forecaster> encoder-forecaster (Shi et al. 2015), %d + %d layers, %s parameters ",
    "(%s), device %s, dtype %s\n"),
    nrow(layers), nrow(layers), format_count(config$n_params), format_bytes(config$n_params * 4),
    config$device, config$dtype))
  cat(sprintf("  frames of %d channel%s in %dx%d patches; peepholes: %s; head: 1x1 over %d channels\n",
              config$input_dim, if (config$input_dim == 1) "" else "s", config$patch,
              config$patch, config$peephole, sum(layers$hidden)))
  if (has_dropout(config)) { # per layer of a stack, both stacks alike
    cat(sprintf("  dropout (input / recurrent, per layer): %s; masks %s\n",
                paste(model_layers(config, "dropout"), model_layers(config, "recurrent_dropout"),
                      sep = " / ", collapse = ", "), config$dropout_masks))
  }
  shown <- layers
  shown$encoder <- format_count(shown$encoder)
  shown$forecaster <- format_count(shown$forecaster)
  print(shown, row.names = FALSE)
  invisible(x)
}

#' @export
summary.convlstm_forecaster <- function(object, ...) {
  config <- model_config(object)
  structure(list(layers = forecaster_table(config), n_parameters = config$n_params,
                 parameter_bytes = config$n_params * 4, patch = config$patch,
                 device = config$device, dtype = config$dtype),
            class = "summary.convlstm_forecaster")
}

#' @export
print.summary.convlstm_forecaster <- function(x, ...) {
  cat(sprintf("Encoder-forecaster: %s parameters (%s), %dx%d patches, device %s, dtype %s\n",
              format_count(x$n_parameters), format_bytes(x$parameter_bytes), x$patch, x$patch,
              x$device, x$dtype))
  print(x$layers, row.names = FALSE)
  invisible(x)
}

# An encoder-forecaster's frames enter as patch x patch patches: the patch
# must divide the frames' height and width (xd: [B, T, C, H, W]), for every
# array a call takes (check_input()), before anything is computed or trained.
check_patch <- function(xd, config, arg, call) {
  p <- config$patch %||% 1L
  if (xd[[4]] %% p == 0 && xd[[5]] %% p == 0) return(invisible())
  abort_convlstm(sprintf(
    "`%s` has frames of %d x %d pixels: the patch size %d must divide both.",
    arg, xd[[4]], xd[[5]], p), call = call)
}
