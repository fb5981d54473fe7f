# fit_loop.R -- convlstm_fit()'s epochs: the loop over epochs with its
# callbacks (fit_epochs()), one epoch (fit_epoch()) and one training step
# (fit_batch()). They read the plan that fit_check.R made and keep their
# running values in it (f$rows, f$running, f$peak, f$x_teacher).

fit_epochs <- function(f) {
  f$rows <- if (is.null(f$past)) list() else split(f$past$history, seq_len(nrow(f$past$history)))
  f$running <- NA_real_
  f$peak <- "-"
  f$batch_hooks <- Filter(function(cb) !is.null(cb$on_batch_end), f$callbacks)
  f$per_batch <- !is.null(f$scheduler) && identical(f$scheduler$per, "batch")
  world <- f$world
  ctx <- fit_context(f)
  interrupted <- FALSE
  fit_set_history(f, ctx)
  ctx$epoch <- f$initial_epoch
  ctx$optimizer <- fit_optimizer(f)
  run_callbacks(f$callbacks, "on_fit_begin", ctx)
  # the step buffers earlier calls left are given back, so that the first
  # epoch's peak (fit_epoch()) counts this fit's memory alone
  c_empty_cache(f$ptr)
  tryCatch(
    for (epoch in seq_len(f$epochs)[seq_len(f$epochs) > f$initial_epoch]) {
      ctx$epoch <- epoch # the epoch running: on_batch_end sees it
      f$rows[[length(f$rows) + 1L]] <- fit_epoch(f, ctx, epoch)
      fit_set_history(f, ctx)
      ctx$logs <- as.list(f$rows[[length(f$rows)]])
      ctx$optimizer <- fit_optimizer(f)
      run_callbacks(f$callbacks, "on_epoch_end", ctx)
      if (isTRUE(ctx$stop)) break
    },
    interrupt = function(cnd) {
      # a rank that stops alone would leave the others in an all-reduce
      if (world > 1) c_dist_abort("interrupted")
      interrupted <<- TRUE
    },
    # the other ranks would wait for this one's gradients for ever
    error = function(cnd) {
      if (world > 1) c_dist_abort(conditionMessage(cnd))
      stop(cnd)
    }
  )
  if (interrupted && f$verbose) {
    cli::cli_alert_warning(sprintf(
      "Interrupted: returning the %d complete epoch%s.", length(f$rows),
      if (length(f$rows) == 1) "" else "s"
    ))
  }
  fit_set_history(f, ctx)
  ctx$epoch <- fit_epochs_done(f) # an interrupted epoch is not one of them
  run_callbacks(f$callbacks, "on_fit_end", ctx)
  history <- ctx$history
  attr(history, "data_on_device") <- !is.null(f$data)
  history
}

# The callbacks' context (see ?convlstm_callback for its fields).
fit_context <- function(f) {
  ctx <- new.env(parent = emptyenv())
  ctx$model <- f$model
  ctx$epochs <- f$epochs
  ctx$n_batches <- f$n_batches
  ctx$lr_scheduler <- f$scheduler
  ctx$has_validation <- !is.null(f$validation)
  ctx$initial_epoch <- f$initial_epoch
  ctx$verbose <- f$verbose
  ctx$stop <- FALSE
  ctx$grad_norm <- NA_real_
  ctx$rank <- f$rank
  ctx$world_size <- f$world
  # the state after the last complete epoch (mid-epoch, ctx$epoch is the
  # one running, not yet in the history)
  ctx$save_checkpoint <- function(path) {
    if (f$rank != 0L) return(invisible(NULL))
    save_fit_checkpoint(f$ptr, path, fit_optimizer(f), f$scheduler, fit_epochs_done(f),
                        ctx$history)
  }
  ctx
}

fit_epochs_done <- function(f) {
  if (length(f$rows) == 0) f$initial_epoch else f$rows[[length(f$rows)]]$epoch
}

fit_set_history <- function(f, ctx) {
  ctx$history <- new_history(f$rows, target = f$target, batch_size = f$batch_size,
                             optimizer = f$optimizer, loss = f$loss_fn$kind %||% "mse",
                             reduction = f$loss_fn$reduction %||% "mean")
}

# The optimizer of the next step: the schedule's, with its current rate.
fit_optimizer <- function(f) if (is.null(f$scheduler)) f$optimizer else f$scheduler$optimizer

# The inputs of an epoch whose teacher forcing is p: teacher forcing (a p of
# 1) reads x and then the true frames, joined once, when an epoch first
# needs them.
fit_batch_x <- function(f, p) {
  if (is.null(f$forecast) || p < 1 || !is.null(f$source)) return(f$x) # a source's: per batch
  if (is.null(f$x_teacher)) f$x_teacher <- teacher_sequence(f$x, f$y)
  f$x_teacher
}

# One epoch: its steps, its validation loss and the schedule's step; returns
# the history's row.
fit_epoch <- function(f, ctx, epoch) {
  c_memory_reset_peak(f$ptr)
  if (f$carry) c_reset_state(f$ptr) # every epoch reads the streams from their start
  t0 <- proc.time()[["elapsed"]]
  p <- if (is.null(f$forecast)) 1 else f$p_by_epoch[[epoch]]
  epoch_options <- if (p < 1) fit_step_options(f, f$batch_size, p) else f$options
  xs <- fit_batch_x(f, p)
  order <- if (f$shuffle && f$n_batches > 1) sample.int(f$n) else seq_len(f$n)
  source_epoch_begin(f, order, epoch) # a source's next batch read during each step
  on.exit(source_epoch_end(f), add = TRUE)
  if (f$verbose) pb <- fit_progress_bar(f, environment())
  total <- 0
  seen <- 0
  summed <- identical(f$loss_fn$reduction, "sum") # the epoch's sum, not an average
  for (b in seq_len(f$n_batches)) {
    global <- fit_global_rows(f, order, b)
    if (length(global) < f$world) next # a rank would have nothing to train on
    loss <- fit_batch(f, ctx, b, global, xs, p, epoch_options)
    total <- total + loss * if (summed) 1 else length(global) # the global batch's loss
    seen <- seen + length(global)
    f$running <- if (summed) total else total / seen
    if (f$verbose) {
      f$peak <- format_bytes(c_memory_stats(f$ptr)$peak_allocated)
      cli::cli_progress_update(id = pb)
    }
  }
  if (f$verbose) cli::cli_progress_done(id = pb)
  val_loss <- if (is.null(f$validation)) {
    NA_real_
  } else {
    evaluate_loss(f$ptr, f$validation$x, f$validation$y, f$target, f$held$validation_batch,
                  f$loss_fn, f$validation$weight, horizon = f$val_horizon)
  }
  row <- data.frame(
    epoch = epoch, loss = if (summed) total else total / seen, val_loss = val_loss, lr = f$last_lr,
    seconds = proc.time()[["elapsed"]] - t0,
    peak_bytes = c_memory_stats(f$ptr)$peak_allocated
  )
  if (!is.null(f$forecast)) row$teacher_forcing <- p
  if (!is.null(f$metric_spec)) { # val_<metric> columns, convlstm_forecast_metrics() overall
    scores <- evaluate_metrics(f$ptr, f$validation$x, f$validation$y, f$target,
                               f$held$validation_batch, f$val_horizon, f$metric_spec)
    row[paste0("val_", names(scores))] <- as.list(scores)
  }
  if (!is.null(f$scheduler) && !f$per_batch) {
    f$scheduler$step(if (is.na(val_loss)) row$loss else val_loss)
  }
  if (f$verbose) fit_epoch_line(f, row, epoch)
  row
}

# The rows of batch b of an epoch drawn in `order`, all ranks'; this
# rank's share of them.
fit_global_rows <- function(f, order, b) {
  order[((b - 1L) * f$global_batch + 1L):min(f$n, b * f$global_batch)]
}
fit_rank_rows <- function(f, global) if (f$world > 1) shard_rows(global, f$rank, f$world) else global
fit_batch_label <- function(b, epoch) sprintf("batch %d of epoch %d", b, epoch)

# One training step on the global batch's rows `global` (this rank's share
# of them); returns the step's loss, after the batch's callbacks.
fit_batch <- function(f, ctx, b, global, xs, p, epoch_options) {
  idx <- fit_rank_rows(f, global)
  opts <- if (length(idx) == f$batch_size) epoch_options else fit_step_options(f, length(idx), p)
  if (!is.null(f$forecast)) opts$truth <- draw_truth(p, f$forecast$horizon)
  if (!is.null(f$dist)) { # this rank's share of the global batch's loss
    opts <- opts %||% c_step_options()
    opts$comm_share <- length(idx) / length(global)
  }
  opt <- fit_optimizer(f)
  f$last_lr <- opt$lr # the history's lr: the epoch's last step's
  if (!is.null(f$data)) {
    loss <- c_train_step_data(f$ptr, f$data, idx, opt, opts)
  } else if (!is.null(f$source)) { # read (or read ahead), checked before the step (R/source*.R)
    batch <- source_fit_batch(f, idx, fit_batch_label(b, ctx$epoch), p, b)
    loss <- source_train_step(f, batch, opt, opts, b) # the next batch read meanwhile
    source_step_done(f)
  } else if (f$n_batches == 1 && f$world == 1) {
    loss <- c_train_step(f$ptr, xs, f$y, f$target, opt, opts)
  } else { # sliced with a weight's rows (or sliced ahead, R/source_prefetch.R)
    loss <- arrays_train_step(f, xs, idx, opt, opts, b)
  }
  grad_norm <- attr(loss, "grad_norm") %||% NA_real_
  loss <- as.double(loss)
  if (f$per_batch) f$scheduler$step()
  if (length(f$batch_hooks) > 0) {
    ctx$batch <- b
    ctx$loss <- loss
    ctx$grad_norm <- grad_norm
    ctx$lr <- opt$lr
    ctx$optimizer <- fit_optimizer(f)
    ctx$peak_bytes <- c_memory_stats(f$ptr)$peak_allocated
    run_callbacks(f$batch_hooks, "on_batch_end", ctx)
  }
  loss
}

# The epoch's progress bar, closed when `envir` (fit_epoch()'s frame, where
# its `epoch` and `f` are read) ends. The line is made to fit the console
# (fit_progress_line()), so that cli never cuts it mid-field.
fit_progress_bar <- function(f, envir) {
  cli::cli_progress_bar(
    format = paste0(
      "{fit_progress_line(epoch, f$epochs, cli::pb_current, cli::pb_total, ",
      "format_loss(f$running), cli::pb_elapsed, f$peak)}"
    ),
    total = f$n_batches, clear = TRUE, .envir = envir
  )
}

# The progress line at most `width` characters wide: "Epoch e/E <bar>
# b/n | loss x | elapsed | peak p" where it fits; else the bar shrinks (30
# down to 10 cells), then the elapsed time goes, then the bar, then the
# peak, then the batch count; the epoch and the loss stay (cut only on a
# console too narrow for them alone).
fit_progress_line <- function(epoch, epochs, current, total, loss, elapsed, peak,
                              width = cli::console_width()) {
  head <- sprintf("Epoch %d/%d", as.integer(epoch), as.integer(epochs))
  count <- sprintf("%d/%d", as.integer(current), as.integer(total))
  fields <- list(loss = paste("loss", loss), elapsed = elapsed, peak = paste("peak", peak))
  layouts <- list(
    list(bar = TRUE, count = TRUE, keep = c("loss", "elapsed", "peak")),
    list(bar = TRUE, count = TRUE, keep = c("loss", "peak")),
    list(bar = FALSE, count = TRUE, keep = c("loss", "peak")),
    list(bar = FALSE, count = TRUE, keep = "loss"),
    list(bar = FALSE, count = FALSE, keep = "loss")
  )
  for (l in layouts) {
    tail <- paste(c(if (l$count) count, unlist(fields[l$keep])), collapse = " | ")
    if (!l$bar) {
      line <- paste(head, tail)
      if (nchar(line) <= width) return(line)
      next
    }
    cells <- min(30L, width - nchar(head) - nchar(tail) - 2L) # a space either side
    if (cells >= 10L) return(paste(head, progress_cells(current, total, cells), tail))
  }
  strtrim(paste(head, fields$loss), width)
}

# A bar of `cells` characters, the done share filled.
progress_cells <- function(current, total, cells) {
  done <- if (is.na(total) || total <= 0) 0L else
    as.integer(round(cells * min(1, current / total)))
  full <- if (cli::is_utf8_output()) "\u25a0" else "="
  paste0(strrep(full, done), strrep(" ", cells - done))
}

fit_epoch_line <- function(f, row, epoch) {
  cli::cli_text(sprintf(
    "Epoch %d/%d: loss %s%s%s, %.2fs, peak %s", epoch, f$epochs, format_loss(row$loss),
    if (is.na(row$val_loss)) "" else paste0(", val_loss ", format_loss(row$val_loss)),
    if (is.null(f$scheduler)) "" else paste0(", lr ", format_loss(row$lr)),
    row$seconds, format_bytes(row$peak_bytes)
  ))
}
