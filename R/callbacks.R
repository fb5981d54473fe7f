# callbacks.R -- hooks into convlstm_fit()'s loop in the style of luz and
# keras: convlstm_callback() from R functions, and the built-in early stopping, model
# checkpoint and CSV logger. A callback is a list of functions of one
# argument, `ctx`: the fit's context, an environment that fit.R fills (see
# ?convlstm_callback for its fields). Per-epoch work only; the per-batch hook runs in
# R between two native steps.

#' Callbacks for convlstm_fit()
#'
#' `convlstm_callback()` makes a callback from R functions; `convlstm_fit(callbacks =
#' list(...))` calls them at these points:
#'
#' * `on_fit_begin(ctx)`: before the first epoch (after a resume's state is
#'   restored);
#' * `on_batch_end(ctx)`: after every training step;
#' * `on_epoch_end(ctx)`: after each epoch, its validation and the
#'   schedule's step;
#' * `on_fit_end(ctx)`: once at the end, also after an early stop or an
#'   interrupt.
#'
#' `ctx` is an environment (changes made to it are seen by later callbacks)
#' with: `model`, `epoch` (the epoch running, from 1: at `on_batch_end`
#' the one the step belongs to; at `on_fit_begin` the epochs done before, at
#' `on_fit_end` the last complete one), `epochs`, `n_batches`, `batch` (within the
#' epoch), `optimizer` (with the rate of the next step), `lr_scheduler`
#' (or `NULL`), `history` (a data frame of the epochs so far, as
#' [convlstm_fit()] returns), `logs` (the last epoch's row as a list:
#' `loss`, `val_loss`, `lr`, ...), `has_validation`, `initial_epoch` (epochs
#' done before a resume) and `stop` (set it to `TRUE` to end training after
#' this epoch). At `on_batch_end`, also `loss` (the step's), `lr` (the rate
#' the step used), `peak_bytes` (the peak memory the model held since the
#' epoch began) and `grad_norm`: the gradients' global norm before
#' clipping when `convlstm_fit()` was given `max_grad_norm` (`Inf` measures
#' it without clipping), else `NA`.
#'
#' @param on_fit_begin,on_epoch_end,on_batch_end,on_fit_end `NULL` or a
#'   function of `ctx`.
#' @return A callback: an object of class `convlstm_callback`.
#' @seealso [convlstm_callback_early_stopping()], [convlstm_callback_model_checkpoint()],
#'   [convlstm_callback_csv_logger()].
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' y <- array(x[, 3, 1, , ], dim = c(8, 1, 6, 6))
#' losses <- numeric()
#' keep <- convlstm_callback(on_batch_end = function(ctx) losses <<- c(losses, ctx$loss))
#' h <- convlstm_fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 4,
#'                   callbacks = list(keep), verbose = FALSE)
#' losses  # four steps
#' convlstm_release(model)
convlstm_callback <- function(on_fit_begin = NULL, on_epoch_end = NULL, on_batch_end = NULL,
                     on_fit_end = NULL) {
  hooks <- list(on_fit_begin = on_fit_begin, on_epoch_end = on_epoch_end,
                on_batch_end = on_batch_end, on_fit_end = on_fit_end)
  for (name in names(hooks)) {
    f <- hooks[[name]]
    if (!is.null(f) && !is.function(f)) abort_arg(name, "NULL or a function of ctx", f, sys.call())
  }
  structure(hooks, class = "convlstm_callback")
}

#' Stop training when a monitored loss stops improving
#'
#' After each epoch, compares the monitored value with the best so far; once
#' it has not improved by more than `min_delta` for `patience` epochs in a
#' row, training stops. With `restore_best`, the model's weights are set back
#' to those of the best epoch when training ends (whether it stopped early or
#' not), as keras's `restore_best_weights` and luz's
#' `luz_callback_keep_best_model()` do; the optimizer state is not rolled
#' back. After `convlstm_fit(resume = )`, the best value and the count are
#' rebuilt from the history; the best weights only from the epochs run since.
#'
#' @param monitor A column of the history: `"val_loss"` (needs validation
#'   data) or `"loss"`.
#' @param patience Epochs without improvement before stopping.
#' @param min_delta The least change that counts as an improvement.
#' @param mode `"min"` (lower is better) or `"max"`.
#' @param restore_best Set the weights of the best epoch at the end.
#' @return A callback for [convlstm_fit()].
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(10 * 3 * 4 * 4), dim = c(10, 3, 1, 4, 4))
#' y <- array(x[, 3, 1, , ], dim = c(10, 1, 4, 4))
#' h <- convlstm_fit(model, x, y, convlstm_optimizer_sgd(0.5), epochs = 10, batch_size = 8,
#'                   validation_split = 0.2, verbose = FALSE,
#'                   callbacks = list(convlstm_callback_early_stopping(patience = 1)))
#' nrow(h)  # at most 10
#' convlstm_release(model)
convlstm_callback_early_stopping <- function(monitor = "val_loss", patience = 0, min_delta = 0,
                                    mode = c("min", "max"), restore_best = TRUE) {
  monitor <- check_monitor(monitor)
  patience <- check_count(patience, "patience", min = 0)
  min_delta <- abs(check_number(min_delta, "min_delta"))
  sign <- if (check_choice(mode, c("min", "max"), "mode") == "min") 1 else -1
  restore_best <- check_flag(restore_best, "restore_best")
  best <- Inf
  best_epoch <- 0L
  wait <- 0L
  weights <- NULL
  improved <- function(v) !is.na(v) && sign * v < best - min_delta
  convlstm_callback(
    on_fit_begin = function(ctx) {
      require_monitor(ctx, monitor, "convlstm_callback_early_stopping")
      best <<- Inf
      best_epoch <<- 0L
      wait <<- 0L
      weights <<- NULL
      for (i in seq_len(nrow(ctx$history))) { # a resumed fit's past epochs
        v <- ctx$history[[monitor]][[i]]
        if (improved(v)) {
          best <<- sign * v
          best_epoch <<- ctx$history$epoch[[i]]
          wait <<- 0L
        } else {
          wait <<- wait + 1L
        }
      }
    },
    on_epoch_end = function(ctx) {
      v <- ctx$logs[[monitor]]
      if (improved(v)) {
        best <<- sign * v
        best_epoch <<- ctx$epoch
        wait <<- 0L
        if (restore_best) weights <<- convlstm_state_dict(ctx$model)
        return()
      }
      wait <<- wait + 1L
      if (wait > patience) {
        ctx$stop <- TRUE
        if (ctx$verbose) {
          cli::cli_alert_info(sprintf(
            "Early stopping: %s has not improved for %d epoch%s (best %s at epoch %d).",
            monitor, wait, if (wait == 1) "" else "s", format_loss(sign * best), best_epoch
          ))
        }
      }
    },
    on_fit_end = function(ctx) {
      if (restore_best && !is.null(weights) && best_epoch != ctx$epoch) {
        convlstm_load_state_dict(ctx$model, weights)
        ctx$restored_epoch <- best_epoch
        if (ctx$verbose) {
          cli::cli_alert_info(sprintf("Restored the weights of epoch %d.", best_epoch))
        }
      }
    }
  )
}

#' Save the model during training
#'
#' After each epoch (or only when the monitored value improves), writes the
#' model with [convlstm_save()]: weights, the optimizer's state and
#' hyperparameters, and, as file metadata, what `convlstm_fit(resume = )`
#' needs to continue exactly: the epoch, the learning-rate schedule's state,
#' R's random number generator state (for the next epoch's shuffle) and the
#' history so far. [convlstm_load()] reads such a file as any other.
#'
#' @param path File to write. `"{epoch}"` in it is replaced by the epoch
#'   number, to keep one file per epoch; otherwise the file is overwritten.
#' @param monitor With `save_best_only`, the column of the history to
#'   watch: `"val_loss"` or `"loss"`.
#' @param save_best_only Save only when `monitor` is better than at every
#'   earlier save.
#' @param mode `"min"` (lower is better) or `"max"`.
#' @return A callback for [convlstm_fit()].
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' y <- array(x[, 3, 1, , ], dim = c(8, 1, 6, 6))
#' path <- tempfile(fileext = ".safetensors")
#' opt <- convlstm_optimizer_adam(0.01)
#' h <- convlstm_fit(model, x, y, opt, epochs = 2, batch_size = 4, verbose = FALSE,
#'                   callbacks = list(convlstm_callback_model_checkpoint(path)))
#' convlstm_file_info(path)$metadata[["fit.epoch"]]
#' # two more epochs, continuing from the file
#' h <- convlstm_fit(model, x, y, opt, epochs = 4, batch_size = 4, verbose = FALSE,
#'                   resume = path)
#' h$epoch
#' convlstm_release(model); unlink(path)
convlstm_callback_model_checkpoint <- function(path, monitor = "val_loss", save_best_only = FALSE,
                                      mode = c("min", "max")) {
  if (!is.character(path) || length(path) != 1 || is.na(path) || !nzchar(path)) {
    abort_arg("path", "a single file name", path, sys.call())
  }
  path <- path.expand(path)
  monitor <- check_monitor(monitor)
  save_best_only <- check_flag(save_best_only, "save_best_only")
  sign <- if (check_choice(mode, c("min", "max"), "mode") == "min") 1 else -1
  best <- Inf
  cb <- convlstm_callback(
    on_fit_begin = function(ctx) {
      if (save_best_only) require_monitor(ctx, monitor, "convlstm_callback_model_checkpoint")
      past <- ctx$history[[monitor]]
      best <<- if (length(past) > 0 && any(!is.na(past))) min(sign * past, na.rm = TRUE) else Inf
    },
    on_epoch_end = function(ctx) {
      if (save_best_only) {
        v <- ctx$logs[[monitor]]
        if (is.na(v) || sign * v >= best) return()
        best <<- sign * v
      }
      ctx$save_checkpoint(checkpoint_path(path, ctx$epoch))
    }
  )
  # checked by convlstm_fit() before it changes anything (the first file
  # the fit would write: the same directory as every later one)
  structure(cb, targets = function(initial_epoch) {
    list(path = checkpoint_path(path, initial_epoch + 1L), replace = TRUE,
         who = "convlstm_callback_model_checkpoint()")
  })
}

checkpoint_path <- function(path, epoch) gsub("{epoch}", epoch, path, fixed = TRUE)

#' Write the history to a CSV file during training
#'
#' Writes a header when training begins and a row per epoch as it ends (the
#' columns of [convlstm_fit()]'s history), flushed at once so another
#' process can follow it. A resumed fit (or `append = TRUE`) adds to an
#' existing file instead of starting a new one.
#'
#' @param path File to write.
#' @param append Add to an existing file.
#' @return A callback for [convlstm_fit()].
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' y <- array(x[, 3, 1, , ], dim = c(8, 1, 6, 6))
#' path <- tempfile(fileext = ".csv")
#' h <- convlstm_fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 3, batch_size = 4,
#'                   verbose = FALSE, callbacks = list(convlstm_callback_csv_logger(path)))
#' read.csv(path)
#' convlstm_release(model); unlink(path)
convlstm_callback_csv_logger <- function(path, append = FALSE) {
  if (!is.character(path) || length(path) != 1 || is.na(path) || !nzchar(path)) {
    abort_arg("path", "a single file name", path, sys.call())
  }
  append <- check_flag(append, "append")
  # data parallel: rank 0 alone writes it (convlstm_fit(distributed = ))
  path <- path.expand(path)
  # a file that cannot be written (it vanished, its disk filled) is a
  # classed error naming the callback, not R's "cannot open the connection"
  write <- function(text, append) {
    tryCatch(cat(text, file = path, append = append),
             error = function(e) abort_target(path, "convlstm_callback_csv_logger()",
                                              conditionMessage(e), NULL),
             warning = function(w) abort_target(path, "convlstm_callback_csv_logger()",
                                                conditionMessage(w), NULL))
  }
  structure(convlstm_callback(
    on_fit_begin = function(ctx) {
      keep <- (append || ctx$initial_epoch > 0) && file.exists(path)
      if (!keep) write(paste0(paste(history_columns, collapse = ","), "\n"), FALSE)
    },
    on_epoch_end = function(ctx) {
      row <- ctx$logs[history_columns]
      write(paste0(paste(vapply(row, function(v) if (is.na(v)) "NA" else format(v, digits = 10),
                                ""), collapse = ","), "\n"), TRUE)
    }
  ), writes_files = TRUE, targets = function(initial_epoch) {
    list(path = path, replace = FALSE, who = "convlstm_callback_csv_logger()")
  })
}

check_monitor <- function(monitor, call = sys.call(-1)) {
  check_choice(monitor, c("val_loss", "loss"), "monitor", call = call)
}

require_monitor <- function(ctx, monitor, who) {
  if (identical(monitor, "val_loss") && !ctx$has_validation) {
    abort_convlstm(sprintf(paste0(
      "%s() monitors \"val_loss\", but the fit has no validation data: give ",
      "`validation_data` or `validation_split`, or monitor = \"loss\"."), who), call = NULL)
  }
}

check_callbacks <- function(callbacks, call = sys.call(-1)) {
  if (inherits(callbacks, "convlstm_callback")) return(list(callbacks))
  ok <- is.list(callbacks) &&
    all(vapply(callbacks, inherits, logical(1), "convlstm_callback"))
  if (!ok) {
    abort_arg("callbacks", "a list of callbacks made by convlstm_callback() or callback_*()", callbacks,
              call)
  }
  callbacks
}

# Calls every callback's hook `name`, in the order given.
run_callbacks <- function(callbacks, name, ctx) {
  for (cb in callbacks) if (!is.null(cb[[name]])) cb[[name]](ctx)
}

# The files the fit's callbacks will write, checked before the fit changes
# anything or trains an epoch: each directory must exist and take a new
# file, and what stands at each path must be a regular file this process
# may write (or nothing). A callback's attribute `targets(initial_epoch)`
# gives its path, whether it is replaced by a rename (a new file beside it)
# and the callback's name.
check_callback_targets <- function(callbacks, initial_epoch, call) {
  for (cb in callbacks) {
    targets <- attr(cb, "targets")
    if (is.null(targets)) next
    t <- targets(initial_epoch)
    dir <- dirname(t$path)
    if (!dir.exists(dir)) {
      abort_target(t$path, t$who, sprintf("its directory '%s' does not exist", dir), call)
    }
    why <- c_save_target_check(t$path)
    if (!is.null(why)) abort_target(t$path, t$who, why, call)
    exists <- file.exists(t$path)
    if (exists && file.access(t$path, 2) != 0) {
      abort_target(t$path, t$who, "the file is not writable by this process", call)
    }
    if ((t$replace || !exists) && !dir_takes_files(dir)) {
      abort_target(t$path, t$who, sprintf(
        "the directory '%s' does not take new files from this process", dir), call)
    }
  }
  invisible()
}

# Whether a file can be made in dir: tried (file.access() says yes to root
# on read-only or virtual file systems), the probe removed at once.
dir_takes_files <- function(dir) {
  probe <- tempfile(".convlstm-probe-", tmpdir = dir)
  ok <- suppressWarnings(file.create(probe, showWarnings = FALSE))
  if (ok) unlink(probe)
  isTRUE(ok)
}

abort_target <- function(path, who, why, call) {
  abort_convlstm(sprintf("`callbacks`: %s cannot write '%s': %s.", who, path, why), call = call)
}
