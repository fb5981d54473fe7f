# fit.R -- training over epochs and mini-batches (convlstm_fit(): its
# documentation and its three pieces in order: fit_check.R's checks and
# plan, fit_begin()'s changes, fit_loop.R's epochs), evaluation of the loss
# without training (convlstm_evaluate()), and the history they produce with
# its print and plot methods.
#
# The loop is in R on purpose: each mini-batch is one .Call running a whole
# training step in C, so R's per-call cost is paid once per batch, and R
# checks for interrupts between batches (an interrupt leaves the model valid
# and returns the history so far).

#' Train a model over epochs and mini-batches
#'
#' Runs [convlstm_train_step()] on every mini-batch of `x` and `y`, `epochs` times,
#' showing a progress bar with the loss, the elapsed time and the peak
#' memory, and returns the per-epoch history. The last batch of an epoch may
#' be smaller than `batch_size`. Pressing Esc or Ctrl-C stops training after
#' the current batch and returns the epochs completed so far.
#'
#' @inheritParams convlstm_train_step
#' @param x Inputs `[n, time, channels, height, width]`; or a data source
#'   read batch by batch instead of `x` and `y` ([convlstm_source_frames()]:
#'   windows of a file on disk; [convlstm_source_function()]: an R function
#'   of the rows; [convlstm_source_arrays()]), with `y = NULL`. Shuffling,
#'   `validation_split` (the last rows), `batch_size` and the losses are as
#'   for the same data in arrays; not with `weight` or `metrics`, and never
#'   uploaded (`data_on_device`).
#' @param y Targets: `[n, hidden, height, width]` for `"last_state"`,
#'   `[n, time, hidden, height, width]` for `"sequence"`; with a `horizon`
#'   of K, the K frames that follow each sequence, `[n, K, channels, height,
#'   width]`. For an encoder-forecaster ([convlstm_forecaster()]) the K
#'   frames it forecasts, `[n, K, channels, height, width]`, any K (not
#'   necessarily `x`'s time steps).
#' @param epochs Number of passes over the data.
#' @param batch_size Samples per training step, at most the number of
#'   samples (the default, 32, is lowered to it); or `"max"`: the largest
#'   batch that fits ([convlstm_max_batch_size()]) in `memory_budget` (without one,
#'   in what the device has free), for the configuration trained with (with
#'   a `horizon`, its teacher-forced or free-running step, or with a
#'   schedule of `teacher_forcing` both).
#' @param shuffle Draw a new order of the samples every epoch (with R's
#'   random number generator). Must be `FALSE` with `state = "carry"`.
#' @param validation_data `NULL`, or `list(x, y)` on which the loss is
#'   computed (without training) after every epoch. It is checked whole
#'   before anything trains (an error leaves the model as it was). For an
#'   encoder-forecaster, `y` may hold another number of frames than the
#'   training `y` (the validation loss is that of the forecast of
#'   `dim(y)[2]` frames) and the frames may be of another size than the
#'   training frames, as long as the patch divides it.
#' @param validation_split A fraction in `[0, 1)`: hold out the last
#'   `validation_split` of the samples of `x` and `y` (before any shuffle, as
#'   keras does) as validation data. Not with `validation_data`.
#' @param verbose Show progress and a line per epoch.
#' @param checkpoint,accumulation_steps,tbptt,recompute_gates Memory-saving
#'   step options, as in [convlstm_train_step()]; `accumulation_steps` is capped by
#'   the size of each mini-batch.
#' @param data_on_device `"auto"`, `TRUE` or `FALSE`: upload the whole of
#'   `x` and `y` to the model's device once ([convlstm_data()]) and take each
#'   batch there by row numbers, instead of slicing the batch out of the R
#'   arrays and uploading it at every step. `"auto"` does so when the data
#'   set and the training step fit together in the capacity
#'   [convlstm_memory_stats()] reports (the memory limit when one is set, else what
#'   the device has free); `TRUE` always (an error of class
#'   `convlstm_error_oom` if it does not fit); `FALSE` never. The losses are
#'   the same either way; the data set is freed when training ends. The
#'   validation data stay in R. An encoder-forecaster's fit uploads only
#'   with `TRUE` (`"auto"` slices in R). Sliced in R (one process, on the
#'   CPU or a GPU), the next batch is sliced while the step of this one runs on
#'   a thread of its own, with the same losses and weights;
#'   `options(convlstm.prefetch = FALSE)` slices each batch at its step. On a
#'   GPU that next batch is also converted into the model's layout and
#'   storage type meanwhile, into page-locked host memory, so that its step
#'   only uploads it (`options(convlstm.stage_batches = FALSE)` leaves the
#'   conversion to the step; `TRUE` stages on the CPU too, where it only adds
#'   a copy); that upload runs on a copy stream while the step before
#'   computes, into one of two device buffers of the model held while the
#'   epoch trains (`options(convlstm.send_ahead = FALSE)` uploads it at its
#'   step).
#' @param callbacks A list of callbacks ([convlstm_callback()],
#'   [convlstm_callback_early_stopping()], [convlstm_callback_model_checkpoint()],
#'   [convlstm_callback_csv_logger()]), called in that order at each point.
#' @param lr_scheduler `NULL`, or a learning-rate schedule made from
#'   `optimizer` ([lr_schedulers]). It is stepped after every epoch
#'   (`convlstm_lr_reduce_on_plateau()` with the validation loss, or the training
#'   loss without validation data), or after every batch for
#'   `convlstm_lr_one_cycle()`, and is left in its final state.
#' @param loss,delta,pos_weight,reduction The loss, as in [convlstm_train_step()];
#'   the validation loss is the same one. An epoch's loss is its batches'
#'   losses averaged over their sequences (for `reduction = "sum"`: summed,
#'   the sum over the epoch's data), for every kind of model.
#' @param weight `NULL`, or a per-element loss weight shaped as `y`, as in
#'   [convlstm_train_step()], sliced with each batch (the training set is then not
#'   uploaded as a data set); with `validation_split` its held-out part
#'   weights the validation loss, while `validation_data` is unweighted.
#' @param max_grad_norm `NULL`, or clip every step's gradients by their
#'   global norm, as in [convlstm_train_step()]; callbacks' `on_batch_end` then sees
#'   the norm before clipping as `grad_norm`.
#' @param resume `NULL`, or a file written by [convlstm_callback_model_checkpoint()]:
#'   load its weights and optimizer state into `model`, its schedule state
#'   into `lr_scheduler`, restore R's random number generator and the
#'   history, and continue with the epoch after the saved one up to `epochs`.
#'   Given the same data and arguments, the losses are those of a fit that
#'   was never interrupted (bit for bit on the CPU).
#' @param memory_budget `NULL`, or the memory training may take (bytes or a
#'   string such as `"2 GiB"`): the fastest configuration that fits
#'   ([convlstm_memory_advise()]: dtype, `checkpoint`, `recompute_gates`,
#'   `accumulation_steps`) is trained with, said in one line; the model's
#'   dtype is converted if another is chosen. Leave `checkpoint`,
#'   `recompute_gates`, `accumulation_steps` and `tbptt` out then. With a
#'   `horizon`, the forecasting step ([convlstm_memory_advise()] with `horizon` and
#'   `teacher_forcing`): free-running (`teacher_forcing` below 1) without
#'   `checkpoint` or `recompute_gates`, and with a schedule a configuration
#'   that fits both the teacher-forced and the free-running step. For an
#'   encoder-forecaster, its step forecasting `dim(y)[2]` frames. Not with
#'   `state = "carry"` (the advisor does not plan the carried state). The
#'   budget holds the whole fit: a data set `data_on_device = "auto"` would
#'   upload stays in R when it does not fit beside the step (`TRUE` is then
#'   an error of class `convlstm_error_oom`), and validation data run in
#'   smaller batches when a batch of theirs would not fit. With a source
#'   as `x`, its staging buffers (a batch of `x` and `y`, two where the
#'   next batch is read while the step runs: [convlstm_memory_estimate()]
#'   with `source`) are planned with the step. So are the batches a fit on
#'   R arrays slices from `x` and `y` where they stay in R (a `weight`, a
#'   `horizon`, `data_on_device = FALSE`, or a data set that `"auto"` leaves
#'   in R: the fit is then planned again with them), as for [convlstm_source_arrays()]
#'   of them (a teacher-forced step's `x` with the true frames but the last
#'   appended; none for a batch of every sample, which is not sliced; a
#'   weight's slices are not counted); the arrays themselves are R's
#'   memory, held before the fit.
#' @param horizon,teacher_forcing `NULL`, or train every batch as
#'   [convlstm_train_step()] with `horizon` (the forecast of the frames in `y`) and
#'   `teacher_forcing` (`TRUE`: the true frames fed back; `FALSE`:
#'   free-running, the model's own; a probability `p`: scheduled sampling,
#'   each fed-back step of each batch the true frame with probability `p`).
#'   `teacher_forcing` may also be a function of the epoch number (1, 2,
#'   ...) returning that epoch's `p`, such as a decay made by
#'   [convlstm_sampling_schedule()]; the history then has a column `teacher_forcing`,
#'   the `p` each epoch trained with (every forecasting fit has it). The
#'   coins are drawn from R's random number generator before each batch.
#'   `target` is then `"sequence"`, the batches are sliced from R arrays
#'   (not uploaded as a data set), and the validation loss is that of the
#'   free-running forecast ([convlstm_evaluate()] with `horizon`), whichever
#'   way training feeds the frames back. `teacher_forcing` other than `TRUE` needs a
#'   `horizon`.
#' @param state `NULL` (every batch starts from zeros) or `"carry"`:
#'   stateful training over consecutive chunks of long sequences, as
#'   Keras's `stateful = TRUE`. Each batch starts from the state the batch
#'   before ended with (detached, [convlstm_train_step()] with `state = "carry"`),
#'   so row `i` of batch `k + 1` must continue row `i` of batch `k`: sample
#'   `(k - 1) * batch_size + i` is chunk `k` of stream `i`. Hence `shuffle
#'   = FALSE` is required and the number of training samples must be a
#'   multiple of `batch_size` (every batch the same size); the state is reset
#'   ([convlstm_reset_state()]) at the start of every epoch and kept after the last
#'   batch. Validation losses start from zeros.
#' @param distributed `NULL` (one process), `TRUE` or the result of
#'   [convlstm_distributed()]: train data parallel on every process `mpirun`
#'   started. Each step takes a global batch of `size * batch_size` samples
#'   (`batch_size` is per rank) from the same shuffle on every rank (rank
#'   0's random number generator is given to all), each rank trains on its
#'   contiguous share of it, and the gradients are summed over the ranks,
#'   each weighted by its share, before clipping and the update: the step of
#'   one process with the whole global batch, within float32 rounding. Rank
#'   0's weights are given to all first, so all ranks hold the same weights
#'   after every step. Only rank 0 prints and runs the callbacks that write
#'   files; every rank returns the history. A last global batch smaller than
#'   the number of ranks is skipped. A rank that fails stops all of them.
#'   With a `horizon` (free-running too), as with one process. With `state =
#'   "carry"` the streams are the global batch's rows: sample `(k - 1) * size
#'   * batch_size + i` is chunk `k` of stream `i`, each rank carrying the
#'   state of its own rows, and the samples must be a multiple of the global
#'   batch. From a source each rank reads only its share's rows (a frame
#'   file's reader thread reading them ahead on each rank; a function, or
#'   arrays, called at each step: the step runs on R's thread when there
#'   are several ranks).
#' @param metrics `NULL`, or score the validation data after every epoch
#'   with [convlstm_forecast_metrics()] (metric names, or a list of its arguments as
#'   in [convlstm_evaluate()]): the history gets a column `val_<name>` per
#'   overall value (`val_mse`, `val_ssim`, `val_csi_0.5`, ...). `"mse"` and
#'   `"mae"` are means per element, the unit of the loss `"mse"`;
#'   `"mse_frame"` and `"mae_frame"` the per-frame sums of the Moving MNIST
#'   literature. `print()` shows these columns with their units under the
#'   table. Needs `validation_data` or `validation_split`.
#' @return A `convlstm_history`: a data frame with one row per epoch and
#'   columns `epoch`, `loss` (mean training loss over the epoch's batches,
#'   weighted by batch size), `val_loss` (`NA` without validation data),
#'   `lr` (the learning rate of the epoch's steps; for a per-batch schedule,
#'   of its last step), `seconds` and `peak_bytes` (bytes: the most the
#'   model's allocator held allocated at once during the epoch, validation
#'   included, i.e. [convlstm_memory_stats()]'s `peak_allocated` after a
#'   [convlstm_reset_peak_memory_stats()] at the epoch's start; the step buffers
#'   earlier calls left are given back ([convlstm_empty_cache()]) before the first
#'   epoch, so they do not count; the same for an encoder-forecaster), and the attribute `data_on_device` (whether the
#'   training set was on the device). It has `print()` (under the table, a
#'   line per unit: the loss's, from `loss` and `reduction`, the peak's and
#'   each `val_<metric>`'s), `plot()` and (with ggplot2) `autoplot()` methods. With a `horizon`, also the
#'   column `teacher_forcing`.
#' @seealso [generics::fit()][fit.convlstm_model] for the same through the generic.
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(16 * 3 * 6 * 6), dim = c(16, 3, 1, 6, 6))
#' y <- array(x[, 3, 1, , ], dim = c(16, 1, 6, 6))  # predict the last frame
#' history <- convlstm_fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 3,
#'                         batch_size = 8, verbose = FALSE)
#' history
#' plot(history)
#' # a schedule, a validation split and early stopping
#' opt <- convlstm_optimizer_adam(0.02)
#' history <- convlstm_fit(model, x, y, opt, epochs = 10, batch_size = 4,
#'                         validation_split = 0.25, verbose = FALSE,
#'                         lr_scheduler = convlstm_lr_cosine_annealing(opt, T_max = 10),
#'                         callbacks = list(convlstm_callback_early_stopping(patience = 3)))
#' history$lr
#' # forecasting 2 frames, free-running, the state carried from batch to batch
#' y2 <- array(runif(16 * 2 * 6 * 6), dim = c(16, 2, 1, 6, 6))
#' convlstm_fit(model, x, y2, opt, epochs = 2, batch_size = 8, horizon = 2,
#'              teacher_forcing = FALSE, state = "carry", shuffle = FALSE,
#'              verbose = FALSE)
#' # scheduled sampling, the true frame fed back less and less often
#' h <- convlstm_fit(model, x, y2, opt, epochs = 3, batch_size = 8, horizon = 2,
#'                   teacher_forcing = convlstm_sampling_schedule("exponential", k = 0.5),
#'                   verbose = FALSE)
#' h$teacher_forcing
#' convlstm_release(model)
convlstm_fit <- function(model, x, y, optimizer, epochs = 10, batch_size = 32,
                         target = c("last_state", "sequence"), shuffle = TRUE,
                         validation_data = NULL, verbose = TRUE, checkpoint = 0,
                         accumulation_steps = 1, tbptt = 0, data_on_device = "auto",
                         validation_split = 0, callbacks = list(), lr_scheduler = NULL,
                         resume = NULL, memory_budget = NULL, max_grad_norm = NULL,
                         loss = "mse", delta = 1, pos_weight = 1, weight = NULL,
                         horizon = NULL, teacher_forcing = TRUE, state = NULL,
                         distributed = NULL, recompute_gates = FALSE, metrics = NULL,
                         reduction = "mean") {
  call <- sys.call()
  # what the model's kind does not run: the capability table's refusal,
  # before anything trains
  require_capabilities(model, c(
    step_capabilities(checkpoint = checkpoint, tbptt = tbptt, recompute_gates = recompute_gates,
                      accumulation_steps = accumulation_steps, horizon = horizon,
                      teacher_forcing = teacher_forcing, state = state, weight = weight,
                      target = if (!missing(target)) target, data = isTRUE(data_on_device),
                      parallel = !is.null(distributed)),
    fit_capabilities(callbacks, lr_scheduler, validation_split, resume, memory_budget, metrics)))
  # data parallel: whatever stops this rank must stop the others, or they
  # wait for it in an all-reduce (armed once the ranks are known)
  guard <- new.env(parent = emptyenv())
  on.exit(if (isTRUE(guard$armed)) {
    c_dist_abort("convlstm_fit() stopped on this rank (its error above)")
  }, add = TRUE)
  # three pieces: every check (fit_check.R), then every change to the model
  # (its dtype, a resume, the data set), then the epochs (fit_loop.R)
  f <- fit_check(environment(), missing(target), missing(batch_size), guard, call)
  fit_begin(f)
  if (!is.null(f$data)) on.exit(c_data_release(f$data), add = TRUE)
  history <- fit_epochs(f)
  guard$armed <- FALSE
  history
}

# The hold-out of validation_split: the last samples, as keras takes them.
split_validation <- function(x, y, fraction, validation, call) {
  fraction <- check_number(fraction, "validation_split", min = 0, max = 1, call = call)
  if (fraction == 0) return(list(x = x, y = y))
  if (fraction >= 1) abort_arg("validation_split", "a fraction in [0, 1)", fraction, call)
  if (!is.null(validation)) {
    abort_convlstm("Give `validation_data` or `validation_split`, not both.", call = call)
  }
  n <- dim(x)[[1]]
  n_train <- floor(n * (1 - fraction))
  if (n_train < 1 || n_train >= n) {
    abort_convlstm(sprintf(paste0(
      "`validation_split` = %s of %d samples leaves %d for training and %d for validation; ",
      "each needs at least one."), format(fraction), n, n_train, n - n_train), call = call)
  }
  train <- seq_len(n_train)
  held <- (n_train + 1L):n
  list(x = slice_batch(x, train), y = slice_batch(y, train),
       validation = list(x = slice_batch(x, held), y = slice_batch(y, held)))
}

check_data_on_device <- function(x, call = sys.call(-1)) {
  if (identical(x, "auto") || isTRUE(x) || isFALSE(x)) return(x)
  abort_arg("data_on_device", '"auto", TRUE or FALSE', x, call)
}

# The training set on the device for convlstm_fit(), or NULL to slice
# batches in R: "auto" uploads when the data set and the step fit together
# (and falls back to slicing if the upload still runs out of memory), TRUE
# always uploads, FALSE never.
fit_data_set <- function(ptr, x, y, target, data_on_device, batch_size, optimizer,
                         options, K = NULL) {
  if (isFALSE(data_on_device)) return(NULL)
  if (isTRUE(data_on_device)) return(c_data_create(ptr, x, y, target))
  if (!data_set_fits(ptr, dim(x), target, batch_size, optimizer, options, K)) return(NULL)
  tryCatch(c_data_create(ptr, x, y, target), convlstm_error_oom = function(cnd) NULL)
}

format_loss <- function(x) if (is.na(x)) "-" else formatC(x, digits = 4, format = "g")

check_validation_data <- function(v, config, target, horizon = NULL, call = sys.call(-1)) {
  if (is.null(v)) return(NULL)
  if (!is.list(v) || length(v) != 2) {
    abort_arg("validation_data", "NULL or a list of two arrays, list(x, y)", v, call)
  }
  vx <- check_input(v[[1]], config, "validation_data[[1]]", call = call, forward = TRUE)
  vy <- if (is.null(horizon)) {
    check_target(v[[2]], dim(vx), config, target, "validation_data[[2]]", call = call)
  } else {
    check_frames(v[[2]], dim(vx), horizon, config, "validation_data[[2]]", call)
  }
  list(x = vx, y = vy)
}

# A fit's horizon: NULL, or list(horizon, p_of), checked as convlstm_train_step()
# checks them; p_of(epoch): the epoch's teacher forcing as a probability
# (a constant, or a schedule's value checked when it is read).
fit_forecast <- function(horizon, teacher_forcing, target_missing, target, config, call) {
  if (is.null(horizon)) {
    # a schedule, or a p below 1, has nothing to feed back without a horizon
    if (is.function(teacher_forcing)) {
      abort_arg("teacher_forcing", "TRUE without a `horizon`", teacher_forcing, call)
    }
    check_teacher_forcing(teacher_forcing, FALSE, call)
    return(NULL)
  }
  K <- check_horizon(horizon, config, call = call)
  p_of <- check_teacher_schedule(teacher_forcing, call = call)
  if (!target_missing && !identical(target, "sequence")) {
    abort_arg("target", '"sequence" with a `horizon`', target, call)
  }
  teacher_only <- !is.function(teacher_forcing) && p_of(1L) == 1
  # the memory plans its steps take (batch_size = "max" must fit each): a p
  # of 1 the teacher-forced one, below 1 the free-running one, a schedule
  # either
  teacher <- list(horizon = K, teacher_forcing = TRUE)
  free <- list(horizon = K, teacher_forcing = FALSE)
  plans <- if (teacher_only) list(teacher)
           else if (is.function(teacher_forcing)) list(teacher, free) else list(free)
  list(horizon = K, p_of = p_of, teacher_only = teacher_only, plans = plans,
       teacher_forcing = teacher_forcing)
}

# Whether a fit carries the state between batches (state = "carry"), which
# needs the batches in order and of one size, chosen by the user.
fit_state <- function(state, shuffle, batch_size, memory_budget, call) {
  if (is.null(state)) return(FALSE)
  if (!identical(state, "carry")) abort_arg("state", 'NULL or "carry"', state, call)
  if (!isFALSE(shuffle)) {
    abort_convlstm(paste0(
      "`state = \"carry\"` needs `shuffle = FALSE`: row i of each batch continues row i of ",
      "the batch before, so the batches must come in order."), call = call)
  }
  if (identical(batch_size, "max")) {
    abort_convlstm(paste0(
      "`state = \"carry\"` needs a batch size chosen by you (the rows of a batch are the ",
      "streams): not `batch_size = \"max\"`."), call = call)
  }
  # convlstm_memory_advise() plans no carried state (its arrays, kept between steps),
  # so a pick could fail on the first step it undersized
  if (!is.null(memory_budget)) {
    abort_convlstm(paste0(
      "`state = \"carry\"` takes no `memory_budget`: convlstm_memory_advise() does not plan the carried ",
      "state. Choose the options yourself (convlstm_memory_estimate(..., state = \"carry\") shows what ",
      "they take)."), call = call)
  }
  TRUE
}

# Mean squared error of the chosen output over all samples, from inference
# forwards of batch_size samples each (nothing is kept for backward).
# loss: check_loss()'s (NULL: MSE); weight: check_weight()'s (NULL: none),
# each element's loss times it, the mean still over all elements.
# horizon > 0: the loss of the free-running forecast of that many frames.
evaluate_loss <- function(ptr, x, y, target, batch_size, loss = NULL, weight = NULL,
                          horizon = 0L) {
  n <- dim(x)[[1]]
  total <- 0
  what <- if (horizon > 0) "frames" else target
  options <- if (horizon > 0) {
    forward_options(what, list(mode = "zero", horizon = horizon))
  } else {
    inference_options(target)
  }
  for (start in seq(1L, n, by = batch_size)) {
    idx <- start:min(n, start + batch_size - 1L)
    if (length(idx) == n && is.array(x)) { # a source's part (R/source.R) is read by slice_batch()
      pred <- c_forward(ptr, x, training = FALSE, what = what, options)
      total <- total + loss_sum(pred, y, loss, weight)
    } else {
      pred <- c_forward(ptr, slice_batch(x, idx), training = FALSE, what = what, options)
      w <- if (!is.null(weight)) slice_batch(weight, idx)
      total <- total + loss_sum(pred, slice_batch(y, idx), loss, w)
    }
  }
  total / loss_divisor(loss, length(y), n)
}

#' Evaluate a model's loss without training
#'
#' The loss (by default the mean squared error) between the model's chosen
#' output and `y`, from inference forwards (no activations kept, parameters
#' unchanged).
#'
#' @inheritParams convlstm_fit
#' @param x Inputs `[n, time, channels, height, width]`.
#' @param batch_size Samples per forward call.
#' @param loss,delta,pos_weight,weight,reduction The loss, as in [convlstm_train_step()].
#' @param horizon `NULL`, or the loss of the forecast of `horizon` frames
#'   ([predict()] with `horizon`: free-running, each predicted frame fed
#'   back) against `y`, `[n, horizon, channels, height, width]`; `target` is
#'   then not used. For an encoder-forecaster ([convlstm_forecaster()]),
#'   which feeds nothing back, any `horizon`: the loss of its forecast of
#'   that many frames, `predict(model, x, horizon)`, against `y` (`NULL`:
#'   `y`'s frames, `dim(y)[2]`); `target` is not used.
#' @param metrics `NULL`, or also score the output with [convlstm_forecast_metrics()]:
#'   metric names (`"mse"`, `"mae"`: means per element; `"mse_frame"`,
#'   `"mae_frame"`: sums per frame; `"ssim"`, `"psnr"`,
#'   `"cross_entropy"`) or a list of its arguments, e.g. `list(metrics =
#'   "mse", thresholds = c(0.5, 2))` for CSI, POD and FAR too.
#' @return The loss over all of `y` (a number), reduced as `reduction` says
#'   (by default its mean; `"batchmean"`: its sum per sequence, averaged); with `metrics`, a
#'   named vector: `loss` and the overall value of each metric.
#' @export
#' @examples
#' # the trained tutorial model (?tutorial_model) on sequences it has not seen
#' path <- system.file("extdata", "tutorial.safetensors", package = "convlstm")
#' model <- convlstm_load(path, device = "cpu")
#' beams <- convlstm_moving_beams(n = 20, n_frames = 6, size = 24, seed = 2)
#' convlstm_evaluate(model, beams$x, beams$y)
#' mean(beams$y^2)   # the loss of an all-zero forecast
#' convlstm_evaluate(model, beams$x, beams$y, loss = "mae")
#' convlstm_evaluate(model, beams$x, beams$y,
#'                   metrics = list(metrics = c("mae", "ssim"), thresholds = 0.5))
#' convlstm_release(model)
convlstm_evaluate <- function(model, x, y, target = c("last_state", "sequence"),
                              batch_size = 32, loss = "mse", delta = 1, pos_weight = 1,
                              weight = NULL, horizon = NULL, metrics = NULL,
                              reduction = "mean") {
  ptr <- model_ptr(model)
  config <- model_config(model)
  x <- check_input(x, config, "x", forward = TRUE)
  forecaster <- is_convlstm_forecaster(model)
  if (is.null(horizon) && !forecaster) {
    target <- target_choice(target, config, missing(target))
    y <- check_target_array(y, dim(x), config, target, "y")
    K <- 0L
  } else {
    # an encoder-forecaster feeds nothing back: any horizon, by default y's frames
    K <- if (!forecaster) {
      check_horizon(horizon, config)
    } else if (is.null(horizon)) {
      dim(check_array(y, "y", 5))[[2]]
    } else {
      check_count(horizon, "horizon")
    }
    target <- "sequence"
    y <- check_frames(y, dim(x), K, config, "y")
  }
  batch_size <- check_count(batch_size, "batch_size")
  loss <- check_loss(loss, delta, pos_weight, reduction)
  weight <- check_weight(weight, dim(y), target)
  spec <- metrics_spec(metrics, y, sys.call())
  value <- evaluate_loss(ptr, x, y, target, batch_size, loss, weight, horizon = K)
  if (is.null(spec)) return(value)
  c(loss = value, evaluate_metrics(ptr, x, y, target, batch_size, K, spec))
}

history_columns <- c("epoch", "loss", "val_loss", "lr", "seconds", "peak_bytes")

new_history <- function(rows, target, batch_size, optimizer, loss = "mse", reduction = "mean") {
  df <- if (length(rows) > 0) {
    do.call(rbind, rows)
  } else {
    data.frame(epoch = integer(), loss = double(), val_loss = double(), lr = double(),
               seconds = double(), peak_bytes = double())
  }
  structure(df, class = c("convlstm_history", "data.frame"), target = target,
            batch_size = batch_size, optimizer = optimizer$kind, loss = loss, reduction = reduction)
}

# What a history's columns hold, one line each, under print(): the loss in
# its reduction's unit (an epoch's loss is its batches' averaged over their
# sequences, summed for "sum") and the peak; the val_<metric> columns'
# units are metric_units'.
history_footnotes <- function(x) {
  error <- c(mse = "squared error", mae = "absolute error", huber = "Huber loss",
             bce_logits = "binary cross-entropy of the logits")[[attr(x, "loss") %||% "mse"]]
  reduction <- attr(x, "reduction") %||% "mean"
  unit <- switch(reduction,
    mean = sprintf("%s, mean per element", error),
    batchmean = sprintf("%s summed over a sequence's elements, mean per sequence", error),
    sum = sprintf("%s summed over every element of the epoch's data", error))
  c(sprintf("%s: %s (reduction \"%s\")",
            if (all(is.na(x$val_loss))) "loss" else "loss, val_loss", unit, reduction),
    "peak: the most bytes the model's allocator held at once during the epoch")
}

# The axis label of a history's loss.
loss_label <- function(history) {
  names <- c(mse = "MSE", mae = "MAE", huber = "Huber", bce_logits = "BCE with logits")
  paste(names[[attr(history, "loss") %||% "mse"]], "loss")
}

#' @export
print.convlstm_history <- function(x, ...) {
  cat(sprintf(
    "<convlstm_history> %d epoch%s, target %s, batch size %s, %s\n", nrow(x),
    if (nrow(x) == 1) "" else "s", attr(x, "target") %||% "?",
    attr(x, "batch_size") %||% "?", attr(x, "optimizer") %||% "?"
  ))
  if (nrow(x) == 0) return(invisible(x))
  shown <- data.frame(
    epoch = x$epoch,
    loss = formatC(x$loss, digits = 5, format = "g"),
    val_loss = ifelse(is.na(x$val_loss), "-", formatC(x$val_loss, digits = 5, format = "g")),
    lr = if (is.null(x$lr)) NA else formatC(x$lr, digits = 4, format = "g"),
    seconds = sprintf("%.2f", x$seconds),
    peak = format_bytes(x$peak_bytes)
  )
  if (all(is.na(x$val_loss))) shown$val_loss <- NULL
  if (is.null(x$lr)) shown$lr <- NULL
  if (!is.null(x$teacher_forcing)) { # a forecasting fit: p per epoch
    shown$teacher_forcing <- formatC(x$teacher_forcing, digits = 4, format = "g")
  }
  scored <- setdiff(grep("^val_", names(x), value = TRUE), "val_loss") # convlstm_fit(metrics =)
  shown[scored] <- lapply(x[scored], formatC, digits = 5, format = "g")
  print(shown, row.names = FALSE, right = TRUE)
  cat_lines(c(history_footnotes(x), metric_footnotes(scored, prefix = "val_")))
  invisible(x)
}

#' Plot a training history
#'
#' Training (and validation) loss per epoch, with base graphics.
#'
#' @param x A `convlstm_history` from [convlstm_fit()].
#' @param y Unused.
#' @param log Passed to [plot()]: `"y"` for a logarithmic loss axis.
#' @param ... Passed to [plot()].
#' @return `x`, invisibly.
#' @export
plot.convlstm_history <- function(x, y, log = "y", ...) {
  has_val <- any(!is.na(x$val_loss))
  losses <- c(x$loss, if (has_val) x$val_loss)
  losses <- losses[is.finite(losses)]
  if (grepl("y", log) && (length(losses) == 0 || any(losses <= 0))) log <- sub("y", "", log)
  ylim <- if (length(losses) > 0) range(losses) else c(0, 1)
  graphics::plot(x$epoch, x$loss, type = "b", pch = 19, col = "steelblue", ylim = ylim,
                 log = log, xlab = "epoch", ylab = loss_label(x), ...)
  if (has_val) {
    graphics::lines(x$epoch, x$val_loss, type = "b", pch = 17, col = "darkorange")
    # in the top margin, above the data
    graphics::legend("bottom", inset = c(0, 1), xpd = TRUE, horiz = TRUE, bty = "n",
                     legend = c("training", "validation"), col = c("steelblue", "darkorange"),
                     pch = c(19, 17), lty = 1, cex = 0.85)
  }
  invisible(x)
}
