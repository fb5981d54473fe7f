# budget.R -- what convlstm_fit(memory_budget = ) holds beside its training
# step, kept inside the budget: the data set that `data_on_device` uploads
# (held for the whole fit), and the validation forwards, whose other shape
# re-plans the step arena and grows it when its inference plan is larger
# (src/core/step.c keeps the largest arena a call needed). The training
# step itself is fit_memory_plan()'s (advise.R). Not here: what R holds
# (the arrays, the predictions evaluate_loss() gets back), host memory of
# R's own.

# The fit's data_on_device and the batch size of its validation forwards.
# fits: fit_memory_plan()'s answer (its `budget` and `held`: NULL without a
# memory_budget, when everything stays as given); x_dim: the training
# array's dim; validation: NULL or list(x, y); batch_size: the training
# batch; data_on_device as given ("auto", TRUE, FALSE), can_upload: whether
# this fit could upload its data set at all (not with a weight or a
# horizon); K: an encoder-forecaster's target frames. The budget must hold
# the model's buffers, the larger of the
# training and the validation arena, and the data set.
fit_budget <- function(model, fits, x_dim, validation, batch_size, target, data_on_device,
                       can_upload, horizon = 0L, call = sys.call(-1), K = NULL) {
  uploads <- if (can_upload) data_on_device else FALSE
  out <- list(data_on_device = data_on_device, validation_batch = batch_size)
  held <- fits$held
  if (is.null(held)) return(out)
  budget <- held$budget
  val_arena <- function(b) {
    if (is.null(validation) || b == 0) return(0)
    validation_arena(model, b, dim(validation$x), target, horizon, fits$dtype)
  }
  peak <- function(b, data) held$model_bytes + max(held$arena, val_arena(b)) + data
  data <- if (!isFALSE(uploads)) c_data_bytes_for(model_ptr(model), data_shape(x_dim, K), target)
          else 0
  if (data > 0 && peak(1, data) > budget) {
    if (isTRUE(uploads)) {
      abort_no_fit(budget, sprintf(paste0(
        "the data set on the device (%s, `data_on_device = TRUE`) does not fit beside the ",
        "step (%s)"), format_bytes(data), format_bytes(peak(1, 0))), call)
    }
    out$data_on_device <- FALSE
    data <- 0
  }
  if (!is.null(validation)) {
    b <- largest_batch(batch_size, function(b) peak(b, data) <= budget)
    if (b == 0) {
      vd <- dim(validation$x)
      abort_no_fit(budget, sprintf(paste0(
        "validation forwards of %d steps of %dx%d need %s beside the training step even one ",
        "sample at a time"), vd[[2]], vd[[4]], vd[[5]], format_bytes(peak(1, data))), call)
    }
    out$validation_batch <- b
  }
  out
}

# The step arena of an inference forward of b validation samples, as
# evaluate_loss() runs it (the last state, every output, or the forecast
# frames): its plan's reserved bytes less the model's own buffers, in the
# dtype the fit will train in (the model is converted only once every
# argument is checked, after this).
validation_arena <- function(model, b, vd, target, horizon, dtype = NULL) {
  est <- estimate_bytes(convlstm_memory_estimate(
    model, b, vd[[2]], vd[[4]], vd[[5]], training = FALSE, dtype = dtype,
    outputs = if (horizon == 0 && identical(target, "last_state")) "last_state" else "all",
    horizon = horizon))
  est[["reserved"]] - sum(est[c("parameters", "gradients", "optimizer")])
}

# The largest b in 1..n with ok(b) (ok decreasing in b), 0 if none.
largest_batch <- function(n, ok) {
  if (ok(n)) return(n)
  lo <- 0L
  hi <- n
  while (hi - lo > 1L) {
    mid <- (lo + hi) %/% 2L
    if (ok(mid)) lo <- mid else hi <- mid
  }
  lo
}

# What fit_memory_plan() knows of the training step it planned, for
# fit_budget(): the budget, the model's own buffers (parameters, gradients,
# optimizer state) and the largest step arena among the fit's plans.
held_of <- function(budget, estimates) {
  b <- lapply(estimates, estimate_bytes)
  model_bytes <- max(vapply(b, function(e) sum(e[c("parameters", "gradients", "optimizer")]),
                            numeric(1)))
  arena <- max(vapply(b, function(e) {
    e[["reserved"]] - sum(e[c("parameters", "gradients", "optimizer")])
  }, numeric(1)))
  list(budget = budget, model_bytes = model_bytes, arena = arena)
}
