# evaluate_metrics.R -- convlstm_forecast_metrics() of a model's inference output on
# held-out data: what convlstm_evaluate(metrics = ) returns beside the loss
# and convlstm_fit(metrics = ) records per epoch. It runs the inference
# forwards batch by batch as the loss evaluation does, assembles the output
# (the size of `y`) and scores it once.

# `metrics`: NULL, metric names, or a list of convlstm_forecast_metrics() arguments
# (metrics, thresholds, data_range, ssim_window, ssim_gaussian). Checked
# against the targets `y` up front, so a bad threshold stops a fit before
# it trains. Returns NULL or the list of arguments.
metrics_spec <- function(metrics, y, call) {
  if (is.null(metrics)) return(NULL)
  spec <- if (is.character(metrics)) list(metrics = metrics) else metrics
  known <- c("metrics", "thresholds", "data_range", "ssim_window", "ssim_gaussian")
  if (!is.list(spec) || length(spec) == 0 || is.null(names(spec)) || !all(names(spec) %in% known)) {
    abort_arg("metrics", paste0("metric names or a list of convlstm_forecast_metrics() arguments (",
                                paste(known, collapse = ", "), ")"), metrics, call)
  }
  if (is.null(y)) {
    abort_convlstm("`metrics` needs held-out data to score: give `validation_data` or `validation_split`.",
                   call = call)
  }
  # before the probe, which would name its own `observed` for a target in its row
  if ("cross_entropy" %in% spec$metrics && (min(y) < 0 || max(y) > 1)) {
    abort_convlstm("`metrics` has \"cross_entropy\", which needs targets in [0, 1].", call = call)
  }
  # convlstm_forecast_metrics() checks the rest; y against itself is cheap at this size
  probe <- slice_batch(y, 1L)
  tryCatch(do.call(convlstm_forecast_metrics, c(list(probe, probe), spec[names(spec) != "thresholds"])),
           convlstm_error = function(cnd) {
             cnd$call <- call
             stop(cnd)
           })
  if (!is.null(spec$thresholds)) check_thresholds(spec$thresholds, y, call)
  spec
}

# The overall metrics of the model's output on x against y, a named vector.
evaluate_metrics <- function(ptr, x, y, target, batch_size, horizon, spec) {
  what <- if (horizon > 0) "frames" else target
  options <- if (horizon > 0) {
    forward_options(what, list(mode = "zero", horizon = horizon))
  } else {
    inference_options(target)
  }
  n <- dim(x)[[1]]
  pred <- array(0, dim(y))
  blank <- rep(list(quote(expr = )), length(dim(y)) - 1L)
  for (start in seq(1L, n, by = batch_size)) {
    idx <- start:min(n, start + batch_size - 1L)
    out <- c_forward(ptr, slice_batch(x, idx), training = FALSE, what = what, options)
    pred <- do.call(`[<-`, c(list(pred, idx), blank, list(value = out)))
  }
  do.call(convlstm_forecast_metrics, c(list(pred, y), spec))$overall
}
