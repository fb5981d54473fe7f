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
#' @param kernel_sizes Odd kernel size per layer: one value for every layer
#'   or one per layer (square kernels), or a list of `c(height, width)`
#'   pairs, one for every layer or one per layer (`list(c(3, 5))`), as
#'   torch's `nn_conv2d(kernel_size = c(3, 5))`.
#' @param n_layers Number of stacked layers.
#' @param bias Whether the convolutions have a bias.
#' @param device `"auto"` (a CUDA GPU when one is usable, else the CPU),
#'   `"cpu"`, `"cuda"` (the process's current CUDA device) or `"cuda:N"` as
#'   torch writes it, where `N` must be the current device (usually 0: a
#'   model runs on the GPU the process uses; start R with
#'   `CUDA_VISIBLE_DEVICES=N` to use GPU `N` as `"cuda:0"`). A model stays
#'   on the device it is made on; to move one, [convlstm_save()] it and
#'   [convlstm_load()] it with `device =`. On CUDA, float32 convolutions may use TF32 tensor
#'   cores (inputs rounded to 10 mantissa bits, float32 accumulation), as
#'   PyTorch's default `torch.backends.cudnn.allow_tf32 = TRUE`; everything
#'   else stays float32. `options(convlstm.cuda_tf32 = FALSE)` (or the
#'   environment variable `CONVLSTM_CUDA_TF32=0`) when the model is created
#'   gives strict float32 convolutions, which match the CPU backend to
#'   float32 rounding; `print(model)` says which a CUDA model uses.
#' @param dtype Storage type of activations and convolution inputs:
#'   `"float32"`, or `"float16"` / `"bfloat16"` for mixed precision, which
#'   halves activation memory. Parameters (the master weights), gradients and
#'   optimizer state stay float32; with `"float16"` the loss is scaled
#'   dynamically as torch's `GradScaler` does (see [convlstm_loss_scale()]). On the CPU
#'   the half types are storage only (round-to-nearest-even), arithmetic is
#'   float32. [convlstm_set_dtype()] (or `model$half()`, `model$bfloat16()`,
#'   `model$float()`) converts an existing model.
#' @param memory_limit `NULL` (no limit beyond the device's capacity), or the
#'   most memory the model may hold, in bytes or as a string such as
#'   `"512 MiB"` or `"2GB"`. An allocation beyond it fails with an error of
#'   class `convlstm_error_oom`, leaving the model usable.
#' @param threads `NULL` (the backend's default) or the number of CPU threads
#'   (at most 1024). A CPU model computes on them. A GPU model uses them only
#'   for converting each batch into its layout on the host before the upload
#'   (at most 8 there, as for a CPU model's own conversion; `NULL`: OpenMP's
#'   default). A CPU model splits each convolution and cell call across its
#'   threads, each sum over images in one order whatever their number, so it
#'   trains to the same results bit for bit on any number of threads; made with `options(convlstm.thread_split = "batch")` (or the
#'   environment variable `CONVLSTM_SPLIT=batch`), its training steps instead
#'   give each thread a part of the batch for the whole step and sum their
#'   gradients before the one update. That is faster where the cores share no
#'   cache, slower where they do (`doc/speed.md`), and holds each thread's
#'   activations apart, as [convlstm_memory_estimate()] shows. `"auto"` times
#'   both ways over the first 12 steps and every 500 steps after, and runs the
#'   faster: its results then depend on the timings, so runs are not bit for
#'   bit alike. With gradient accumulation each thread runs its share of
#'   the batch in smaller micro-batches, and with dropout each draws its own
#'   sequences' masks (the same masks as the usual step); a carried state
#'   is the model's, each thread keeping its own rows; in data-parallel
#'   training the ranks sum the model's gradients once its threads' are in.
#'   `print(model)` says which was asked for.
#' @param dilation Dilation of each layer's convolution, in the forms of
#'   `kernel_sizes` (a number for every layer, one per layer, or a list of
#'   `c(height, width)` pairs). Padding stays "same": `dilation * (k - 1) /
#'   2` on each side, so every layer keeps the image size, as torch's
#'   `nn_conv2d(dilation = d, padding = "same")`.
#' @param recurrent_kernel_sizes `NULL` (the default: each layer's
#'   `kernel_sizes`), or the odd size of each layer's state-to-state kernel,
#'   the one that convolves `h[t-1]`, in the forms of `kernel_sizes`: Shi et
#'   al. (2015)'s "ConvLSTM(9x9)-1x1" is `kernel_sizes = 9,
#'   recurrent_kernel_sizes = 1`. The name follows Keras's `ConvLSTM2D`,
#'   whose state-to-state weights are its `recurrent_kernel`. Each of the two
#'   convolutions pads "same" for its own kernel; `dilation` applies to both,
#'   so that equal kernels given apart are exactly the one-convolution model
#'   (Keras dilates only the input kernel; a 1x1 state kernel is the same
#'   either way). A layer whose kernels differ has two weight tensors, as a
#'   torch cell of two `nn_conv2d()` has: `cell_list.<l>.conv_x.weight`
#'   `[4 * hidden, in, kh, kw]` with the bias `cell_list.<l>.conv_x.bias`,
#'   and `cell_list.<l>.conv_h.weight` `[4 * hidden, hidden, rkh, rkw]` (no
#'   bias), each initialised for its own fan-in; a layer with equal kernels
#'   keeps the one `conv.weight`.
#' @param peephole Peephole connections as in Shi et al. (2015): the input
#'   and forget gates also see `w_ci * c[t-1]` and `w_cf * c[t-1]`, the
#'   output gate `w_co * c[t]` (elementwise products with the cell state).
#'   `FALSE` (or `"none"`, the default): the tutorial's cell. `TRUE` or
#'   `"position"`: one weight per hidden channel and pixel,
#'   `[hidden, height, width]`, as the paper's equations (3) write them
#'   (Hadamard products with weights of the cell state's shape), which fix
#'   the frame size to `frame_size` (an input of another size is an error
#'   naming the argument). `"channel"`: one weight per hidden channel,
#'   `[hidden, 1, 1]`, for any frame size: the cell whose parameters the
#'   paper counts, since Table 1's 7,585,296 for its encoder-forecaster
#'   hold 3 peephole weights per hidden channel (per-position ones would
#'   add 3 per channel and pixel), and [convlstm_forecaster()]'s. The weights are parameters named `cell_list.<l>.w_ci`,
#'   `.w_cf` and `.w_co` (after the layer's conv weight and bias), trained,
#'   clipped, saved and loaded like the others; they start at zero, so a
#'   new model computes what the same model without peepholes computes, and
#'   [set.seed()] draws it the same convolution weights.
#' @param frame_size With per-position peepholes, `c(height, width)` of the
#'   frames (one number for square frames); `NULL` otherwise.
#' @param dropout,recurrent_dropout Dropout of each layer's input `x_t` and
#'   of its previous hidden state `h_{t-1}`, as Keras's `ConvLSTM2D(dropout =
#'   , recurrent_dropout = )`: a fraction in `[0, 1)`, one for every layer or
#'   one per layer (default 0: none). In training ([convlstm_train_step()],
#'   [convlstm_fit()], `model$forward()`, and `model(x)` after
#'   `model$train()`) each sequence gets masks per layer and kind (Gal and
#'   Ghahramani's variational dropout), of the shape of one step of what they
#'   mask (`[batch, channels, height, width]`), with each element kept with
#'   probability `1 - p` and scaled by `1 / (1 - p)`. The same masks then
#'   serve every time step, a checkpoint's recomputation and the backward
#'   pass; `dropout_masks` says whether each gate has its own. Each
#'   training call takes a seed from R's random number generator (two
#'   uniforms), so [set.seed()] reproduces a run, and the masks are drawn
#'   from it on the model's device, straight into their planned buffers (a
#'   counter-based generator, the same masks on the CPU and a GPU for the
#'   same seed). Inference ([predict()], [convlstm_evaluate()], `model(x)`
#'   in eval mode, the default) applies no dropout.
#'   The masks and one masked copy are planned step buffers
#'   (`dropout_mask_x`, `dropout_mask_h`, `dropout_masked` in
#'   [convlstm_memory_estimate()]): a step with dropout takes no memory beyond them.
#' @param dropout_masks With dropout, `"per_gate"` (the default) gives each
#'   of the four gates (i, f, o, g) masks of its own, as Keras 3's
#'   `ConvLSTM2D` does: each gate convolves its own masked copies of `x_t` and
#'   `h_{t-1}` with its rows of the weight (run as one grouped convolution
#'   over the four copies: the unmasked convolution's arithmetic, four times
#'   the masks' and the masked copy's memory). `"shared"`: one mask per kind
#'   for all four gates (the tied variant). Saved with the model; a file
#'   written before this option loads as `"shared"`, what it trained with.
#' @param head `"none"` (the default): the model's output at each step is
#'   the last layer's hidden state `h`, bounded by `tanh` to `(-1, 1)`.
#'   `"top"`: a 1x1 convolution with bias over the last layer's `h` gives
#'   each step's output, a frame of `input_dim` channels on any scale (rain
#'   rates in mm/h, temperatures), as [convlstm_forecaster()]'s head does.
#'   It adds `head.weight` `[input_dim, hidden_dims[n_layers], 1, 1]` and
#'   `head.bias` `[input_dim]` to the parameters (initialised as torch's
#'   `nn_conv2d()`). Then [predict()] returns the head's frames, the
#'   training target ([convlstm_train_step()], [convlstm_fit()]) has `input_dim`
#'   channels and is a sequence (`target = "sequence"`), and a `horizon`
#'   feeds the head's frames back, whatever the last layer's size
#'   (teacher forcing in training: `teacher_forcing = FALSE` is refused).
#'   Checkpointing, truncation, accumulation, recomputed gates, dropout,
#'   float16 and bfloat16 (the head's gradient in the storage type, under
#'   the loss scale) and data parallel training all work with it.
#'   `model(x)` still returns the layers' outputs and states.
#'
#' @return A model: a function of class `convlstm_model`. Calling it on an
#'   array `x` of dim `[batch, time, channels, height, width]` runs an
#'   inference forward and returns what the tutorial's module returns:
#'   `list(layer_outputs, layer_last_states)`, where `layer_outputs[[l]]` has
#'   dim `[batch, time, hidden_dims[l], height, width]` and
#'   `layer_last_states[[l]]` is `list(h = , c = )`, each of dim
#'   `[batch, hidden_dims[l], height, width]`. `model(x, outputs =
#'   "last_state")` returns only the last states (`layer_outputs` is an
#'   empty list) from a forward that keeps no output sequence, so its memory
#'   does not grow with the number of time steps. `kernel_sizes`,
#'   `recurrent_kernel_sizes` and `dilation` read back in the forms
#'   `convlstm()` takes. `model(x, state = s)`
#'   starts from the state `s` instead of zeros, given as the model returns
#'   it (`layer_last_states`: one `list(h = , c = )` per layer), so
#'   `model(x2, state = model(x1)$layer_last_states)` continues the
#'   sequence `x1` with `x2`. Fields are available with
#'   `$`: `config`, `input_dim`, `hidden_dims`, `kernel_sizes`,
#'   `recurrent_kernel_sizes`, `dilation`, `n_layers`,
#'   `bias`, `device`, `dtype`, `backend`, `memory_limit`, `peephole`
#'   (`"none"`, `"channel"` or `"position"`), `frame_size`, `dropout`,
#'   `recurrent_dropout`, `dropout_masks`, `n_parameters`,
#'   `parameters` (the state dict: a named list of the weights as R arrays),
#'   and the methods `convlstm_state_dict()`, `convlstm_load_state_dict()`, `convlstm_zero_grad()`,
#'   `forward()`, and `half()`, `bfloat16()`, `float()` (storage type
#'   conversion, see [convlstm_set_dtype()]). For code written for torch modules:
#'   `train()` makes `model(x)` apply the model's dropout (a training
#'   forward, which keeps activations, as torch's train mode with autograd
#'   does) and `eval()` turns that off again (the default); a model without
#'   dropout infers either way, and says so once a session. [predict()]
#'   always infers and [convlstm_train_step()] always trains. A model has no
#'   `to()`, `cuda()` or `cpu()`: it stays on the device it was made on, and
#'   moves by [convlstm_save()] then [convlstm_load()] with `device =`
#'   (calling one of them says so). Optimizers
#'   are not built from `model$parameters` as with torch's `optim_adam()`:
#'   see [convlstm_optimizer_adam()].
#'
#' @seealso [convlstm_train_step()], [convlstm_fit()], [convlstm_state_dict()],
#'   [convlstm_memory_stats()], [convlstm_memory_estimate()], [convlstm_set_memory_limit()],
#'   [convlstm_release()].
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
#' # only the last states: memory independent of the sequence length
#' str(model(x, outputs = "last_state")$layer_last_states[[2]])
#' convlstm_release(model)
#' # peepholes as the paper's equations write them: per channel and pixel, 6 x 6 frames
#' pm <- convlstm(input_dim = 1, hidden_dims = 4, kernel_sizes = 3,
#'                peephole = TRUE, frame_size = c(6, 6), device = "cpu")
#' pm
#' dim(pm$parameters[["cell_list.0.w_ci"]])   # [4, 6, 6]
#' convlstm_release(pm)
#' # dropout on each layer's input and hidden state, in training only
#' dropped <- convlstm(1, c(8, 1), 3, device = "cpu", dropout = 0.2,
#'                     recurrent_dropout = 0.2)  # masks per gate, as Keras
#' dropped$dropout_masks
#' dropped$train()
#' dim(dropped(x)[[1]][[2]])  # a training forward, with fresh masks
#' dropped$eval()
#' identical(dropped(x), dropped(x))  # eval mode: no dropout
#' convlstm_release(dropped)
#' # Shi et al.'s "ConvLSTM(9x9)-1x1": a 9x9 input kernel, a 1x1 state kernel
#' shi <- convlstm(1, 4, kernel_sizes = 9, recurrent_kernel_sizes = 1,
#'                 device = "cpu")
#' shi
#' names(shi$parameters)  # conv_x.weight, conv_x.bias, conv_h.weight
#' convlstm_release(shi)
#' # a head: outputs on the data's scale, not bounded by tanh
#' rain <- convlstm(1, c(8, 8), 3, head = "top", device = "cpu")
#' dim(rain$parameters[["head.weight"]])  # [1, 8, 1, 1]
#' y <- 20 * x                            # mm/h, say
#' convlstm_train_step(rain, x, y, convlstm_optimizer_adam(lr = 0.01))
#' dim(predict(rain, x))                  # [2, 4, 1, 6, 6]: frames
#' convlstm_release(rain)
convlstm <- function(input_dim, hidden_dims, kernel_sizes, n_layers = length(hidden_dims),
                     bias = TRUE, device = "auto", dtype = "float32", memory_limit = NULL,
                     threads = NULL, dilation = 1, peephole = FALSE, frame_size = NULL,
                     dropout = 0, recurrent_dropout = 0,
                     dropout_masks = c("per_gate", "shared"), recurrent_kernel_sizes = NULL,
                     head = c("none", "top")) {
  input_dim <- check_count(input_dim, "input_dim")
  # n_layers defaults to length(hidden_dims): an empty hidden_dims is its fault
  if (missing(n_layers)) hidden_dims <- check_counts(hidden_dims, "hidden_dims")
  n_layers <- check_count(n_layers, "n_layers")
  if (n_layers > max_layers) {
    abort_convlstm(sprintf("`n_layers` must be at most %d, not %d.", max_layers, n_layers),
                   call = sys.call())
  }
  hidden_dims <- recycle_layers(check_counts(hidden_dims, "hidden_dims"), n_layers, "hidden_dims")
  geometry <- layer_geometry(kernel_sizes, dilation, n_layers, sys.call(),
                             recurrent_kernel_sizes = recurrent_kernel_sizes)
  check_layer_sizes(input_dim, hidden_dims, geometry, sys.call())
  bias <- check_flag(bias, "bias")
  device <- resolve_device(device, sys.call())
  dtype <- check_choice(dtype, dtypes(), "dtype")
  memory_limit <- parse_bytes(memory_limit, "memory_limit", sys.call())
  threads <- check_threads(threads, sys.call())
  peephole <- peephole_spec(peephole, frame_size, sys.call())
  dropout <- check_rates(dropout, "dropout", n_layers, sys.call())
  recurrent_dropout <- check_rates(recurrent_dropout, "recurrent_dropout", n_layers, sys.call())
  dropout_masks <- check_choice(dropout_masks, c("per_gate", "shared"), "dropout_masks")
  head <- check_choice(head, c("none", "top"), "head")

  ptr <- with_model_options(sys.call(), c_model_create(
    input_dim, hidden_dims, geometry, bias,
    device = device,
    dtype = dtype, threads = threads, memory_limit = memory_limit, peephole = peephole,
    dropout = dropout, recurrent_dropout = recurrent_dropout, dropout_masks = dropout_masks,
    structure = c(0L, 0L, as.integer(head == "top"))
  ))
  c_model_init_params(ptr)
  new_convlstm_model(ptr)
}

max_layers <- 32L

# options(convlstm.cuda_tf32 =): NULL (the environment's CONVLSTM_CUDA_TF32,
# else TF32 allowed) or TRUE / FALSE.
cuda_tf32_option <- function(call) {
  v <- getOption("convlstm.cuda_tf32")
  if (is.null(v)) return(NULL)
  if (!is.logical(v) || length(v) != 1 || is.na(v)) {
    abort_arg("options(convlstm.cuda_tf32)", "NULL, TRUE or FALSE", v, call)
  }
  if (v) "1" else "0"
}

# options(convlstm.thread_split =): NULL (the environment's CONVLSTM_SPLIT,
# else "call") or "call" / "batch" / "auto".
thread_split_option <- function(call) {
  v <- getOption("convlstm.thread_split")
  if (is.null(v)) return(NULL)
  if (!is.character(v) || length(v) != 1 || !v %in% c("call", "batch", "auto")) {
    abort_arg("options(convlstm.thread_split)", 'NULL, "call", "batch" or "auto"', v, call)
  }
  v
}

# The backends and the core read CONVLSTM_CUDA_TF32 and CONVLSTM_SPLIT when a
# model is created (the one place each is read): the options are checked
# first, handed over through them for the duration of `expr`, and the
# variables restored after.
with_model_options <- function(call, expr) {
  set <- list(CONVLSTM_CUDA_TF32 = cuda_tf32_option(call),
              CONVLSTM_SPLIT = thread_split_option(call))
  set <- set[!vapply(set, is.null, logical(1))]
  if (length(set) == 0) return(expr)
  old <- Sys.getenv(names(set), unset = NA, names = TRUE)
  on.exit(for (v in names(set)) {
    if (is.na(old[[v]])) {
      Sys.unsetenv(v)
    } else {
      do.call(Sys.setenv, stats::setNames(list(old[[v]]), v))
    }
  })
  do.call(Sys.setenv, set)
  expr
}

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

# NULL -> 0 (no limit); bytes or a size with a unit -> whole bytes.
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
  training <- FALSE # model$train() / model$eval(): whether model(x) applies dropout
  model <- function(x, outputs = c("all", "last_state"), state = NULL) {
    x <- check_input(x, config, "x", forward = TRUE)
    outputs <- check_choice(outputs, c("all", "last_state"), "outputs")
    state <- state_option(state, config, dim(x), allow_carry = FALSE)
    # train mode with dropout: a training forward, with masks
    train <- training && has_dropout(config)
    if (identical(outputs, "all")) {
      return(c_forward(ptr, x, training = train, what = "all", forward_options("all", state)))
    }
    c_forward(ptr, x, training = train, what = "last_states",
              options = forward_options("last_state", state))
  }
  class(model) <- c(if (isTRUE(config$forecaster)) "convlstm_forecaster", "convlstm_model",
                     "function")
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

# forward: x is run forward only (an output the user reads), where float16
# storage would turn values beyond its range into silent zeros; a training
# step instead skips the overflowing step and says so (convlstm_loss_scale()).
check_input <- function(x, config, arg, call = sys.call(-1), forward = FALSE) {
  x <- check_array(x, arg, 5, call = call)
  if (dim(x)[[3]] != config$input_dim) {
    abort_convlstm(sprintf(
      "`%s` must have %d channel%s (dim 3 of [batch, time, channels, height, width]), not %d.",
      arg, config$input_dim, if (config$input_dim == 1) "" else "s", dim(x)[[3]]
    ), call = call)
  }
  check_frame_size(dim(x)[4:5], config, arg, call)
  check_patch(dim(x), config, arg, call)
  if (forward) check_half_range(x, config, arg, call)
  x
}

# A float16 model stores its inputs as float16: a value beyond 65504 would
# become Inf there and a forward's output silently 0 or NaN, so it is
# refused with what to do. (bfloat16 has float32's range, checked by
# check_finite().)
float16_max <- 65504
check_half_range <- function(x, config, arg, call) {
  if (!identical(config$dtype, "float16")) return(invisible(x))
  if (min(x) >= -float16_max && max(x) <= float16_max) return(invisible(x))
  first <- which(abs(x) > float16_max)[[1]]
  abort_convlstm(sprintf(paste0(
    "`%s` has %s of %s values beyond float16's range (magnitude at most 65504), the model's ",
    "storage type; the first, %s, at [%s]. Scale the data, or use a float32 or bfloat16 model ",
    "(convlstm_set_dtype())."), arg, format_count(sum(abs(x) > float16_max)), format_count(length(x)),
    format(x[[first]]), paste(arrayInd(first, dim(x)), collapse = ", ")), call = call)
}

# Per layer: its input channels (input_dim, then the layer below's hidden)
# and the elements of its weight [4h, in + h, kh, kw] (or of its two,
# [4h, in, kh, kw] and [4h, h, rkh, rkw]) and bias [4h], in double (no
# integer overflow): the one place R writes these shapes down.
# geometry: layer_geometry()'s matrix.
layer_shapes <- function(input_dim, hidden_dims, geometry) {
  h <- as.double(hidden_dims)
  taps <- as.double(geometry[1, ]) * as.double(geometry[2, ])
  rtaps <- as.double(geometry[5, ]) * as.double(geometry[6, ])
  inp <- c(as.double(input_dim), h[-length(h)])
  list(input = inp, weight = 4 * h * (inp * taps + h * rtaps), bias = 4 * h,
       taps = pmax(taps, rtaps))
}

layer_table <- function(config) {
  h <- config$hidden_dims
  shapes <- layer_shapes(config$input_dim, h, config$geometry)
  params <- shapes$weight + (if (isTRUE(config$bias)) shapes$bias else 0) +
    peephole_params(config, h)
  data.frame(
    layer = seq_len(config$n_layers), input = shapes$input, hidden = h,
    kernel = geometry_labels(config$geometry), parameters = params, bytes = params * 4
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
  if (!identical(config$peephole, "none")) {
    cat(sprintf("  peepholes: %s\n", if (is.null(config$frame_size)) "per channel" else
      sprintf("per position, frames of %d x %d", config$frame_size[[1]], config$frame_size[[2]])))
  }
  if (nzchar(config$conv_math %||% "")) {
    cat(sprintf("  float32 convolutions: %s\n", if (identical(config$conv_math, "tf32")) {
      "TF32 tensor cores, as PyTorch's default (options(convlstm.cuda_tf32 = FALSE): strict)"
    } else {
      "strict float32"
    }))
  }
  if (!identical(config$thread_split %||% "call", "call")) {
    cat(sprintf("  training steps %s (options(convlstm.thread_split))\n",
                if (identical(config$thread_split, "batch")) "split by batch across its threads"
                else "split by batch or by call, whichever a probe finds faster"))
  }
  if (status == "released") cat("  released: this model holds no memory any more\n")
  if (status == "restored") {
    cat("  no C memory (restored by readRDS?): use convlstm_save() / convlstm_load()\n")
  }
  shown <- layers[c("layer", "input", "hidden", "kernel", "parameters")]
  shown$parameters <- format_count(shown$parameters)
  # input / recurrent rates, shown only for a model that has dropout
  if (has_dropout(config)) shown$dropout <- paste(config$dropout, config$recurrent_dropout,
                                                    sep = " / ")
  print(shown, row.names = FALSE)
  if (has_dropout(config)) {
    cat(sprintf("  dropout masks: %s\n", if (identical(config$dropout_masks, "shared"))
      "one shared by the four gates (\"shared\")" else "one per gate, as Keras (\"per_gate\")"))
  }
  invisible(x)
}

# str(model): one line, as torch prints a module's header, instead of the
# closure's arguments.
#' @rawNamespace S3method(utils::str, convlstm_model)
str.convlstm_model <- function(object, ...) {
  status <- c_model_status(model_ptr(object))
  config <- model_config(object)
  cat(sprintf(" <%s> %s (hidden %s), %s parameters, on %s, %s, %s\n", class(object)[[1]],
              layers_text(config), paste(model_layers(config, "hidden_dims"), collapse = ", "),
              format_count(config$n_params), config$device, config$dtype, status))
  invisible()
}

# "2 layers" or, for an encoder-forecaster, "2 + 2 layers".
layers_text <- function(config) {
  L <- model_layers(config, "n_layers")
  sprintf("%s layer%s", if (isTRUE(config$forecaster)) sprintf("%d + %d", L, L) else L,
          if (L == 1 && !isTRUE(config$forecaster)) "" else "s")
}

#' Summarise a convlstm model
#'
#' Layers (input and hidden channels, kernel), parameter counts and bytes,
#' device, dtype and, for a live model, the memory it holds per category.
#' Given an `input_shape`, also what a training step on that input takes,
#' per category, from the memory plan ([convlstm_memory_estimate()]): like a
#' keras or torchinfo summary that also knows training memory.
#'
#' @param object A model created by [convlstm()].
#' @param input_shape `NULL`, or the dims of an input, `c(batch, time,
#'   channels, height, width)`, for which to estimate a training step's
#'   memory.
#' @param ... Passed to [convlstm_memory_estimate()] with `input_shape`: `training`,
#'   `dtype`, `checkpoint`, `accumulation_steps`, `tbptt`, `optimizer`.
#' @return An object of class `summary.convlstm_model`: a list with `layers`
#'   (a data frame), `n_parameters`, `parameter_bytes`, `device`, `dtype`,
#'   `backend`, `status`, `memory` ([convlstm_memory_stats()] or `NULL`) and
#'   `estimate` ([convlstm_memory_estimate()] for `input_shape`, or `NULL`).
#' @export
#' @examples
#' model <- convlstm(1, c(4, 2), 3, device = "cpu")
#' summary(model)
#' summary(model, input_shape = c(8, 10, 1, 16, 16))
#' convlstm_release(model)
summary.convlstm_model <- function(object, input_shape = NULL, ...) {
  check_dots(list(...), estimate_options(), "summary",
             names = c("input_shape", estimate_options()))
  ptr <- model_ptr(object, "object")
  status <- c_model_status(ptr)
  config <- model_config(object)
  layers <- layer_table(config)
  estimate <- NULL
  if (!is.null(input_shape)) {
    shape <- check_input_shape(input_shape, config)
    estimate <- convlstm_memory_estimate(object, shape[[1]], shape[[2]], shape[[4]], shape[[5]], ...)
  }
  structure(list(
    layers = layers,
    n_parameters = sum(layers$parameters),
    parameter_bytes = sum(layers$bytes),
    device = config$device,
    dtype = config$dtype,
    backend = config$backend %||% config$device,
    bias = config$bias,
    status = status,
    memory = if (status == "live") convlstm_memory_stats(object) else NULL,
    input_shape = if (is.null(estimate)) NULL else as.integer(input_shape),
    estimate = estimate
  ), class = "summary.convlstm_model")
}

check_input_shape <- function(x, config, call = sys.call(-1)) {
  if (length(x) != 5 || !is_whole(x) || any(x < 1) || any(x > .Machine$integer.max)) {
    abort_arg("input_shape", "five positive whole numbers c(batch, time, channels, height, width)",
              x, call)
  }
  if (x[[3]] != config$input_dim) {
    abort_convlstm(sprintf(
      "`input_shape` must have %d channel%s (its third element), not %s.", config$input_dim,
      if (config$input_dim == 1) "" else "s", format(x[[3]])
    ), call = call)
  }
  as.integer(x)
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
  if (!is.null(x$estimate)) {
    cat(sprintf("\nInput shape: %s\n", format_dims(x$input_shape)))
    print(x$estimate)
  } else if (!is.null(x$memory)) {
    cat("\n")
    print(x$memory)
  } else if (x$status != "live") {
    cat(sprintf("Model status: %s (no memory held)\n", x$status))
  }
  invisible(x)
}

model_fields <- c(
  "config", "input_dim", "hidden_dims", "kernel_sizes", "recurrent_kernel_sizes", "dilation",
  "n_layers", "bias", "device",
  "dtype", "backend", "memory_limit", "peephole", "frame_size", "dropout", "recurrent_dropout",
  "dropout_masks", "n_parameters", "parameters", "state_dict",
  "convlstm_load_state_dict", "zero_grad", "forward", "half", "bfloat16", "float", "train", "eval"
)

# torch modules switch between training and evaluation mode. Here
# predict() and convlstm_evaluate() always infer and convlstm_train_step() and
# convlstm_fit() always train; model$train() and model$eval() decide only
# whether model(x) applies the model's dropout, so for a model without
# dropout they change nothing, and say so once a session.
no_mode_note <- function() {
  if (isTRUE(the$no_mode_noted)) return(invisible())
  the$no_mode_noted <- TRUE
  message(paste0(
    "This convlstm model has no dropout, so it has no train/eval mode: model(x), predict() and ",
    "convlstm_evaluate() infer, convlstm_train_step() and convlstm_fit() train; model$train() and ",
    "model$eval() change nothing."
  ))
}

set_mode <- function(model, training) {
  if (!has_dropout(model_config(model))) no_mode_note()
  environment(model)$training <- training
  invisible(model)
}

the <- new.env(parent = emptyenv())

# torch's module$to(), $cuda() and $cpu() move a module in place. A convlstm
# model's memory is planned and held on the device it was made on, and a
# move could not be shown to work without a GPU, so the model has no such
# methods (they do not appear in completion); calling one says how to move
# a model: save it and load it with `device =`.
no_move <- function(model, name, call) {
  abort_convlstm(sprintf(paste0(
    "A convlstm model has no `$%s()`: it stays on the device it was made on (%s). To move it, ",
    "convlstm_save(model, path) then convlstm_load(path, device = \"cuda:0\") (or \"cpu\"); ",
    "for another dtype, $half(), $bfloat16() or $float()."), name, model_config(model)$device),
    call = call)
}

#' @export
`$.convlstm_model` <- function(x, name) {
  model <- x
  switch(name,
    config = model_config(model),
    input_dim = , bias = , device = ,
    dtype = , backend = , memory_limit = , peephole = , frame_size = ,
    dropout_masks = model_config(model)[[name]],
    hidden_dims = , kernel_sizes = , recurrent_kernel_sizes = , dilation = , n_layers = ,
    dropout = , recurrent_dropout = model_layers(model_config(model), name),
    n_parameters = model_config(model)$n_params,
    parameters = convlstm_state_dict(model),
    state_dict = function() convlstm_state_dict(model),
    load_state_dict = function(state_dict, strict = TRUE) {
      convlstm_load_state_dict(model, state_dict, strict = strict)
    },
    zero_grad = function() convlstm_zero_grad(model),
    forward = function(x, training = TRUE, target = NULL) {
      convlstm_forward(model, x, training = training, target = target)
    },
    half = function() convlstm_set_dtype(model, "float16"),
    bfloat16 = function() convlstm_set_dtype(model, "bfloat16"),
    float = function() convlstm_set_dtype(model, "float32"),
    train = function(mode = TRUE) {
      mode <- check_flag(mode, "mode")
      set_mode(model, mode)
    },
    eval = function() set_mode(model, FALSE),
    to = , cuda = , cpu = no_move(model, name, sys.call()),
    abort_convlstm(sprintf(
      "A convlstm model has no field `%s`; available: %s.", name,
      paste(model_fields, collapse = ", ")
    ), call = sys.call())
  )
}

# A per-layer field as the user gave it: an encoder-forecaster's core holds
# both stacks (the encoder's layers, then the forecaster's of the same
# sizes), and convlstm_forecaster() was given one stack's.
model_layers <- function(config, name) {
  value <- config[[name]]
  if (!isTRUE(config$forecaster)) return(value)
  L <- config$n_layers %/% 2L
  if (identical(name, "n_layers")) L else value[seq_len(L)]
}

#' @export
`[[.convlstm_model` <- function(x, i, ...) `$.convlstm_model`(x, i)

#' @export
`$<-.convlstm_model` <- function(x, name, value) {
  abort_convlstm(
    "A convlstm model's fields are read-only; use convlstm_load_state_dict() to change its weights.",
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
#' output. With `what = "last_state"` the forward keeps no output sequence
#' either: only the running states, so its memory is the same for 10 time
#' steps or 1000.
#'
#' With `horizon = K` it forecasts: after the steps of `x` the model rolls on
#' K - 1 more steps, each fed the frame it predicted last (the last layer's
#' hidden state), and returns the K predicted frames. This needs the last
#' layer's hidden size to equal `input_dim`, as in an encoder-forecaster
#' whose last layer outputs frames. The rollout keeps only the running
#' states and the frames: [convlstm_memory_estimate()] with `training = FALSE,
#' horizon = K` plans it.
#'
#' @param object A model created by [convlstm()].
#' @param x Input array `[batch, time, channels, height, width]`.
#' @param what `"sequence"`: the last layer's output at every step,
#'   `[batch, time, hidden, height, width]`; `"last_state"`: its hidden state
#'   after the last step, `[batch, hidden, height, width]` (the tutorial's
#'   `model(x)[[2]][[n_layers]][[1]]`).
#' @param batch_size `NULL` to run all of `x` at once, or the number of
#'   samples per forward call (bounds memory for large inputs).
#' @param state `NULL` to start from zeros, or the state to start from as
#'   the model returns it (`model(x)$layer_last_states`: one `list(h = , c =
#'   )` per layer, each `[batch, hidden, height, width]`).
#' @param horizon `NULL`, or the number of frames to forecast (then `what`
#'   is not used).
#' @param ... Unused.
#' @return A double array as described for `what`; with a `horizon` of K,
#'   the frames `[batch, K, channels, height, width]`: frame 1 is the
#'   prediction after the last step of `x`, frame k + 1 the model's output
#'   with frame k as input.
#' @export
#' @examples
#' # the trained tutorial model (?tutorial_model) on sequences it has not seen
#' path <- system.file("extdata", "tutorial.safetensors", package = "convlstm")
#' model <- convlstm_load(path, device = "cpu")
#' beams <- convlstm_moving_beams(n = 3, n_frames = 6, size = 24, seed = 2)
#' dim(predict(model, beams$x))                  # [3, 5, 1, 24, 24]
#' forecast <- predict(model, beams$x, what = "last_state")
#' dim(forecast)                                 # [3, 1, 24, 24]: the next frame
#' # the forecast where the true next frame has its beam, and elsewhere
#' round(range(forecast[beams$y == 1]), 2)
#' round(range(forecast[beams$y == 0]), 2)
#' # forecast 4 frames after the 6 of each sequence
#' dim(predict(model, beams$x, horizon = 4))     # [3, 4, 1, 24, 24]
#' convlstm_release(model)
predict.convlstm_model <- function(object, x, what = c("sequence", "last_state"),
                                   batch_size = NULL, state = NULL, horizon = NULL, ...) {
  check_dots(list(...), character(), "predict",
             names = c("what", "batch_size", "state", "horizon"))
  ptr <- model_ptr(object, "object")
  what <- check_choice(what, c("sequence", "last_state"), "what")
  config <- model_config(object)
  x <- check_input(x, config, "x", forward = TRUE)
  n <- dim(x)[[1]]
  batch_size <- if (is.null(batch_size)) n else check_count(batch_size, "batch_size")
  state <- state_option(state, config, dim(x), allow_carry = FALSE)
  if (!is.null(horizon)) {
    state$horizon <- check_horizon(horizon, config)
    what <- "frames"
  }
  if (batch_size >= n) {
    return(c_forward(ptr, x, training = FALSE, what = what, forward_options(what, state)))
  }
  out <- NULL
  for (start in seq(1L, n, by = batch_size)) {
    idx <- start:min(n, start + batch_size - 1L)
    part_state <- state
    if (!is.null(state$arrays)) part_state$arrays <- lapply(state$arrays, slice_batch, idx)
    part <- c_forward(ptr, slice_batch(x, idx), training = FALSE, what = what,
                      forward_options(what, part_state))
    if (is.null(out)) out <- array(0, dim = c(n, dim(part)[-1]))
    out <- assign_batch(out, idx, part)
  }
  out
}

# An inference forward whose caller reads only the last layer's last state
# keeps only the running states (memory independent of T).
inference_options <- function(what) {
  if (identical(what, "last_state")) c_step_options(outputs = "last_state") else NULL
}

# The options of a forward: what it keeps (see inference_options()), where
# it starts (state_option()) and the frames it forecasts (state$horizon).
forward_options <- function(what, state) {
  horizon <- state$horizon %||% 0L
  if ((is.null(state) || identical(state$mode, "zero")) && horizon == 0) {
    return(inference_options(what))
  }
  c_step_options(outputs = if (identical(what, "last_state")) "last_state" else "all",
                 state_mode = state$mode, state = state$arrays, horizon = horizon)
}

# x[idx, , , ...] for an array of any rank, keeping every dimension.
slice_batch <- function(x, idx) {
  if (inherits(x, "convlstm_source_part")) return(source_part_slice(x, idx)) # R/source.R
  args <- c(list(x, idx), rep(list(quote(expr = )), length(dim(x)) - 1L), list(drop = FALSE))
  do.call(`[`, args)
}

assign_batch <- function(x, idx, value) {
  args <- c(list(x, idx), rep(list(quote(expr = )), length(dim(x)) - 1L), list(value = value))
  do.call(`[<-`, args)
}

#' Change a model's storage type
#'
#' Converts the storage of activations and convolution inputs between
#' float32 and the half types (mixed precision). Parameters stay float32
#' (they are the master weights), so converting back and forth loses
#' nothing; the step buffers are given back and re-planned at the next step.
#' `model$half()`, `model$bfloat16()` and `model$float()` do the same, as
#' torch modules' methods of those names do.
#'
#' With `"float16"` the loss is scaled dynamically, as torch's `GradScaler`
#' does: [convlstm_loss_scale()] reports the scaler.
#'
#' @param model A model created by [convlstm()].
#' @param dtype `"float32"`, `"float16"` or `"bfloat16"`.
#' @return `model`, invisibly.
#' @seealso [convlstm_memory_estimate()] to see what each dtype takes before
#'   converting.
#' @export
#' @examples
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
#' convlstm_set_dtype(model, "bfloat16")
#' model$dtype
#' dim(predict(model, x, what = "last_state"))
#' model$float()
#' model$dtype
#' convlstm_release(model)
convlstm_set_dtype <- function(model, dtype) {
  ptr <- model_ptr(model)
  dtype <- check_choice(dtype, dtypes(), "dtype")
  c_set_dtype(ptr, dtype)
  invisible(model)
}

#' The float16 loss scaler
#'
#' With `dtype = "float16"` small gradients would underflow, so the loss is
#' multiplied by a scale before backward and the gradients divided by it
#' before the update, as torch's `GradScaler` does: a step whose gradients
#' hold an infinity or NaN is skipped and the scale halves; after
#' `growth_interval` clean steps in a row the scale doubles. Every 10th
#' skipped step in a row, [convlstm_train_step()] and [convlstm_fit()] warn (class
#' `convlstm_warning_loss_scale`): the parameters have not changed since.
#' When the scale would fall below 1 the gradients overflow float16 even
#' unscaled, and the step is an error that says why and what to do.
#'
#' @param model A model created by [convlstm()].
#' @return An object of class `convlstm_loss_scale`: a list with `scale`,
#'   `growth_interval`, `clean_steps` (since the last growth or skip),
#'   `skipped_steps` (in all), `skipped_in_a_row` (since the last update),
#'   and `dtype`, the model's storage type. The scaler only acts for float16.
#' @export
#' @examples
#' model <- convlstm(1, c(4, 1), 3, device = "cpu", dtype = "float16")
#' x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
#' y <- array(runif(2 * 8 * 8), dim = c(2, 1, 8, 8))
#' for (i in 1:3) convlstm_train_step(model, x, y, convlstm_optimizer_adam())
#' convlstm_loss_scale(model)
#' convlstm_release(model)
convlstm_loss_scale <- function(model) {
  ptr <- model_ptr(model)
  structure(c(c_loss_scale(ptr), list(dtype = model_config(model)$dtype)),
            class = "convlstm_loss_scale")
}

#' @export
print.convlstm_loss_scale <- function(x, ...) {
  cat(sprintf(
    "<convlstm_loss_scale> scale %s, %d clean step%s since the last change (grows after %d), %s skipped%s\n",
    format(x$scale), x$clean_steps, if (x$clean_steps == 1) "" else "s", x$growth_interval,
    format_count(x$skipped_steps),
    if (identical(x$dtype, "float16")) "" else sprintf(" (inactive: dtype %s)", x$dtype)
  ))
  cat(sprintf("  starts at %s, times %s after %d clean steps, times %s after a skip\n",
              format(x$init_scale), format(x$growth_factor), x$growth_interval,
              format(x$backoff_factor)))
  invisible(x)
}

#' Set the float16 loss scaler's behaviour
#'
#' The settings of torch's `GradScaler`, with its defaults: the scale starts
#' at `init_scale`, is multiplied by `backoff_factor` after a step whose
#' gradients overflow (the step is skipped) and by `growth_factor` after
#' `growth_interval` clean steps in a row. Setting them starts the scale again
#' at `init_scale`. They are kept across [convlstm_set_dtype()] and saved with the
#' model by [convlstm_save()]; they act only while the model stores float16.
#'
#' @param model A model created by [convlstm()].
#' @param init_scale The starting scale, a number > 0 (and finite as a 32-bit
#'   float, as the scale is used).
#' @param growth_factor A number > 1.
#' @param backoff_factor A number in (0, 1).
#' @param growth_interval A whole number >= 1.
#' @return The model's [convlstm_loss_scale()], invisibly.
#' @export
#' @examples
#' model <- convlstm(1, c(4, 1), 3, device = "cpu", dtype = "float16")
#' convlstm_set_loss_scale(model, init_scale = 1024, growth_interval = 100)
#' convlstm_loss_scale(model)
#' convlstm_release(model)
convlstm_set_loss_scale <- function(model, init_scale = 65536, growth_factor = 2, backoff_factor = 0.5,
                           growth_interval = 2000) {
  ptr <- model_ptr(model)
  call <- sys.call()
  init_scale <- check_number(init_scale, "init_scale", min = 0, min_inclusive = FALSE, call = call)
  growth_factor <- check_number(growth_factor, "growth_factor", min = 1, min_inclusive = FALSE,
                                call = call)
  backoff_factor <- check_number(backoff_factor, "backoff_factor", min = 0, max = 1,
                                 min_inclusive = FALSE, call = call)
  growth_interval <- check_count(growth_interval, "growth_interval", call = call)
  c_set_loss_scale(ptr, init_scale, growth_factor, backoff_factor, growth_interval)
  invisible(convlstm_loss_scale(model))
}

#' Release a model's memory now
#'
#' Frees every byte the model holds (parameters, gradients, optimizer state,
#' activations) at once, instead of when R's garbage collector happens to
#' finalise it. The model cannot be used afterwards; using it is an error of
#' class `convlstm_error_state`. Releasing twice is harmless.
#'
#' Releasing a model frees its data sets ([convlstm_data()]) too;
#' `convlstm_release()` of a data set frees that data set alone.
#'
#' @param model A model created by [convlstm()], or a data set made by
#'   [convlstm_data()].
#' @return `TRUE` if memory was released, `FALSE` if the model held none,
#'   invisibly.
#' @export
#' @examples
#' model <- convlstm(1, 4, 3, device = "cpu")
#' convlstm_release(model)
#' try(model(array(0, c(1, 1, 1, 4, 4))))
convlstm_release <- function(model) {
  if (is_convlstm_data(model)) return(invisible(c_data_release(unclass(model)$ptr)))
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
#' convlstm_gpu_available()
convlstm_gpu_available <- function() {
  c_gpu_available()
}
