# fit_check.R -- convlstm_fit()'s first piece: every check of its arguments
# and the plan of the fit, before anything is changed; then fit_begin(), the
# changes the plan asks for (the model's dtype, a resume, the ranks' common
# start, the data set on the device). A call that fails a check leaves the
# model, its optimizer state, the schedule, R's random number generator and
# every file as they were. The epochs are fit_loop.R's.
#
# The plan is an environment, `f`: what the checks return (the arrays, the
# step options, the callbacks, ...), read by the later pieces, and the loop's
# running values (rows, running loss), which fit_loop.R updates.

# a: convlstm_fit()'s frame (its arguments, read here once each).
fit_check <- function(a, target_missing, batch_size_missing, guard, call) {
  f <- new.env(parent = emptyenv())
  f$call <- call
  f$model <- a$model
  f$ptr <- model_ptr(a$model, call = call)
  f$config <- model_config(a$model)
  # before batch_size is planned; "max" is capped at the samples
  f$batch_size_given <- !batch_size_missing && !identical(a$batch_size, "max")
  fit_check_data(f, a, target_missing, call)
  f$optimizer <- check_optimizer(a$optimizer, call = call)
  f$epochs <- check_count(a$epochs, "epochs", call = call)
  f$shuffle <- check_flag(a$shuffle, "shuffle", call = call)
  f$verbose <- check_flag(a$verbose, "verbose", call = call)
  fit_check_memory(f, a, call)
  f$validation <- check_validation_data(a$validation_data, f$config, f$target,
                                        f$forecast$horizon, call = call)
  f$max_grad_norm <- check_max_grad_norm(a$max_grad_norm, call = call)
  f$loss_fn <- check_loss(a$loss, a$delta, a$pos_weight, a$reduction, call = call)
  check_step_options(f$checkpoint, f$accumulation_steps, f$tbptt,
                     recompute_gates = f$recompute_gates, call = call)
  f$data_on_device <- check_data_on_device(a$data_on_device, call = call)
  if (isTRUE(f$data_on_device) && (!is.null(f$weight) || !is.null(f$forecast))) {
    abort_convlstm(sprintf(paste0(
      "`data_on_device = TRUE` cannot be used with %s: its batches are sliced from the R ",
      "arrays (the data set on the device holds x and y only). Use \"auto\" or FALSE."),
      if (!is.null(f$weight)) "a `weight`" else "a `horizon`"), call = call)
  }
  f$callbacks <- check_callbacks(a$callbacks, call = call)
  f$scheduler <- check_lr_scheduler(a$lr_scheduler, f$optimizer, call = call)
  f$resume <- if (!is.null(a$resume)) check_path(a$resume, call, must_exist = TRUE)
  f$dist <- check_distributed(a$distributed, call)
  f$rank <- f$dist$rank %||% 0L
  f$world <- f$dist$size %||% 1L
  if (f$world > 1) guard$armed <- TRUE
  if (f$rank != 0L) {
    f$verbose <- FALSE
    f$callbacks <- Filter(function(cb) !isTRUE(attr(cb, "writes_files")), f$callbacks)
  }
  fit_check_split(f, a$validation_split, call)
  # the frames a validation forward forecasts: the horizon's, or an
  # encoder-forecaster's validation y's own (any number of them)
  f$val_horizon <- fit_horizon(f$config, f$validation$y, f$forecast)
  f$metric_spec <- metrics_spec(a$metrics, f$validation$y, call)
  fit_check_batches(f, call)
  # what the budget holds beside the step: the data set, validation batches
  fit_check_held(f, f$data_on_device, call)
  if (fit_sliced_unplanned(f)) { # "auto" left the data set in R: plan the slices
    fit_check_memory(f, a, call, data_on_device = FALSE)
    fit_check_batches(f, call)
    fit_check_held(f, FALSE, call)
  }
  fit_check_resume(f, call)
  # each epoch's teacher forcing, read (and checked) now rather than after
  # some epochs have trained
  if (!is.null(f$forecast)) {
    todo <- seq_len(f$epochs)[seq_len(f$epochs) > f$initial_epoch]
    f$p_by_epoch <- rep(NA_real_, f$epochs)
    f$p_by_epoch[todo] <- vapply(todo, f$forecast$p_of, numeric(1))
  }
  check_callback_targets(f$callbacks, f$initial_epoch, call)
  if (!is.null(f$dist)) { # the same steps, shuffles and weights on every rank
    check_same_on_ranks(c(samples = f$n, batch_size = f$batch_size, epochs = f$epochs,
                          first_epoch = f$initial_epoch), f$rank, call)
  }
  f
}

# x, y, the forecast, the carried state and the weight.
fit_check_data <- function(f, a, target_missing, call) {
  if (is_convlstm_source(a$x)) return(source_fit_check(f, a, target_missing, call)) # R/source.R
  f$x <- check_input(a$x, f$config, "x", call = call)
  f$forecast <- fit_forecast(a$horizon, a$teacher_forcing, target_missing, a$target, f$config,
                             call)
  if (is.null(f$forecast)) {
    f$target <- target_choice(a$target, f$config, target_missing, call = call)
    f$y <- check_target(a$y, dim(f$x), f$config, f$target, "y", call = call)
  } else {
    f$target <- "sequence"
    f$y <- check_frames(a$y, dim(f$x), f$forecast$horizon, f$config, "y", call)
  }
  f$carry <- fit_state(a$state, a$shuffle, a$batch_size, a$memory_budget, call)
  f$weight <- check_weight(a$weight, dim(f$y), f$target, call = call)
  # the training set may go to the device as a data set (fit_data_set()):
  # not with a weight or a horizon (their batches are sliced in R), nor for
  # a kind of model the capability table keeps on arrays
  f$can_upload <- is.null(f$weight) && is.null(f$forecast) &&
    supports(f$model, "data set on the device (convlstm_data)")
  invisible(f)
}

# The frames a fit's forward forecasts from held-out data y (NULL: none):
# a horizon's (fit_forecast()), an encoder-forecaster's dim(y)[2] (its
# validation may forecast another number of frames than its training), else
# 0 (the chosen output, no forecast).
fit_horizon <- function(config, y, forecast) {
  if (isTRUE(config$forecaster) && !is.null(y)) return(dim(y)[[2]])
  forecast$horizon %||% 0L
}

# The target frames of a data set of the training set: an
# encoder-forecaster's y's K (NULL for other models: their x's).
fit_data_steps <- function(f) if (isTRUE(f$config$forecaster)) dim(f$y)[[2]]

# The forecast options of every step a fit may take, which its memory plan
# must fit (fit_memory_plan()): a horizon's plans (fit_forecast()), an
# encoder-forecaster's step of y's frames, else the plain step.
fit_plans <- function(f) {
  if (isTRUE(f$config$forecaster)) return(list(list(horizon = fit_data_steps(f))))
  f$forecast$plans %||% list(list())
}

# The batch size and step options (a memory_budget's pick, which may name
# another dtype: converted by fit_begin(), after every check).
fit_check_memory <- function(f, a, call, data_on_device = a$data_on_device) {
  fits <- fit_memory_plan(f$model, dim(f$x), a$batch_size, a$memory_budget, f$optimizer,
                          f$target, a$checkpoint, a$accumulation_steps, a$tbptt,
                          plans = fit_plans(f),
                          recompute_gates = a$recompute_gates,
                          teacher_forcing = f$forecast$teacher_forcing %||% TRUE,
                          source = f$source %||% fit_sliced_source(f, data_on_device),
                          call = call)
  f$checkpoint <- fits$checkpoint
  f$recompute_gates <- fits$recompute_gates
  f$accumulation_steps <- fits$accumulation_steps
  f$tbptt <- fits$tbptt
  f$dtype <- fits$dtype
  f$fits <- fits
  f$budget_line <- fits$line
  f$batch_size <- check_count(fits$batch_size, "batch_size", call = call)
  invisible(f)
}

# What a fit on plain R arrays holds of its batches, as the planner sees a
# source (source_staging()): the batches sliced from x and y in R (two
# where the next is sliced while the step runs), and on a GPU their staged
# and sent copies (R/source_prefetch.R's arrays path), exactly as an arrays
# source's fit holds them. NULL where the arrays may go to the device as a
# data set instead (fit_data_set(): then nothing is sliced, and
# fit_budget() plans the data set). A batch of every sample is the arrays
# themselves, not sliced, and a teacher-forced step's x holds the true
# frames too: both planned by source_staging(). A weight's slices are not
# counted.
fit_sliced_source <- function(f, data_on_device) {
  if (f$can_upload && !isFALSE(data_on_device)) return(NULL)
  xd <- dim(f$x)
  new_source("arrays", xd[[1]], xd[-1], dim(f$y)[-1], read = NULL, extra = list(plain = TRUE))
}

# Whether a budget's plan left out batches the fit will slice: the data
# set "auto" would upload does not fit beside the step (fit_budget()), so
# the batches are sliced in R after all, which the plan, made for the data
# set, did not count (fit_sliced_source()).
fit_sliced_unplanned <- function(f) {
  !is.null(f$fits$held) && is.null(f$source) && f$can_upload &&
    !isFALSE(f$data_on_device) && isFALSE(f$held$data_on_device)
}

# What the budget holds beside the step (fit_budget()): whether the data
# set goes on the device, the validation batch.
fit_check_held <- function(f, data_on_device, call) {
  f$held <- fit_budget(f$model, f$fits, dim(f$x), f$validation, f$batch_size, f$target,
                       data_on_device, f$can_upload, f$val_horizon, call, fit_data_steps(f))
  invisible(f)
}

# validation_split's hold-out, with the same split of the weight.
fit_check_split <- function(f, fraction, call) {
  if (!is.null(f$source)) return(source_fit_split(f, fraction, call)) # rows of the source
  held_out <- split_validation(f$x, f$y, fraction, f$validation, call)
  f$x <- held_out$x
  f$y <- held_out$y
  f$validation <- held_out$validation %||% f$validation
  if (!is.null(f$weight) && !is.null(held_out$validation)) {
    n_train <- dim(f$x)[[1]]
    f$validation$weight <- slice_batch(f$weight, (n_train + 1L):dim(f$weight)[[1]])
    f$weight <- slice_batch(f$weight, seq_len(n_train))
  }
  invisible(f)
}

# The batches of an epoch and the step options they take.
fit_check_batches <- function(f, call) {
  n <- dim(f$x)[[1]]
  world <- f$world
  # The default stands for "all of it" on small data; a larger size given on
  # purpose is more likely a mix-up (of x, or of arguments) than a wish.
  f$n <- n
  f$batch_size <- fit_batch_size(f$batch_size, f$batch_size_given, n, world, call)
  f$global_batch <- f$batch_size * world
  f$n_batches <- ceiling(n / f$global_batch)
  if (f$carry && n %% f$global_batch != 0) {
    abort_convlstm(sprintf(paste0(
      "With `state = \"carry\"` every batch must have the same size: %d training samples are ",
      "not a multiple of `batch_size` (%d)%s."), n, f$batch_size,
      if (world > 1) sprintf(" times the %d ranks", world) else ""), call = call)
  }
  f$options <- fit_step_options(f, f$batch_size)
  # what free-running steps cannot be combined with, before the first epoch
  if (!is.null(f$forecast) && !f$forecast$teacher_only) fit_step_options(f, f$batch_size, 0)
  invisible(f)
}

# A resume file's fit state, read (not yet loaded), and the epochs left.
fit_check_resume <- function(f, call) {
  f$resume_state <- if (!is.null(f$resume)) {
    read_fit_checkpoint(f$resume, f$scheduler, f$config, call)
  }
  f$initial_epoch <- f$resume_state$epoch %||% 0L
  steps_taken <- if (!is.null(f$resume_state) && !is.null(f$scheduler)) {
    f$resume_state$scheduler_state$last_epoch
  } else {
    f$scheduler$last_epoch
  }
  check_schedule_length(f$scheduler, f$epochs - f$initial_epoch, f$n_batches, call,
                        last_epoch = steps_taken)
  invisible(f)
}

# The step options of a batch of b samples (the last batch may be smaller
# than accumulation_steps); p: the epoch's teacher forcing (below 1 the step
# runs free, the coins drawn per batch).
fit_step_options <- function(f, b, p = 1) {
  check_step_options(f$checkpoint, min(f$accumulation_steps, b), f$tbptt,
                     state = list(mode = if (f$carry) "carry" else "zero", arrays = NULL,
                                  horizon = f$forecast$horizon %||% 0L, free_run = p < 1),
                     max_grad_norm = f$max_grad_norm, loss = f$loss_fn, weight = f$weight,
                     recompute_gates = f$recompute_gates, call = f$call)
}

# Every change the fit makes before its first step, once every check passed.
fit_begin <- function(f) {
  if (!is.null(f$budget_line) && f$verbose) cli::cli_alert_info(f$budget_line)
  if (!is.null(f$dtype) && !identical(f$dtype, f$config$dtype)) convlstm_set_dtype(f$model, f$dtype)
  # a resumed fit continues after the saved epoch, with its state restored
  f$past <- if (!is.null(f$resume)) {
    resume_fit(f$ptr, f$resume, f$scheduler, f$resume_state)
  }
  if (!is.null(f$dist)) { # the same shuffles and weights on every rank
    sync_rng()
    c_dist_broadcast_params(f$ptr, 0L)
  }
  # a weighted loss slices its weight with each batch, and a horizon applies
  # to arrays: from R arrays
  f$data <- if (f$can_upload) {
    fit_data_set(f$ptr, f$x, f$y, f$target, f$held$data_on_device, f$batch_size, f$optimizer,
                 f$options, fit_data_steps(f))
  }
  invisible(f)
}

# The batch size of a fit of n samples on `world` ranks: one given on purpose
# may not exceed the samples (more likely a mix-up of x, or of arguments, than
# a wish); the default stands for "all of it" on small data.
fit_batch_size <- function(batch_size, given, n, world, call) {
  if (given && batch_size * world > n) {
    abort_convlstm(sprintf(
      "`batch_size` (%d%s) must not exceed the number of samples in `x` (%d); leave it out to train on all %d at once.",
      batch_size, if (world > 1) sprintf(" on each of %d ranks", world) else "", n, n
    ), call = call)
  }
  min(batch_size, n %/% world)
}
