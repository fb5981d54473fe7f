# fit_resume.R -- what a fit checkpoint holds beyond convlstm_save()'s
# weights and optimizer state, and how convlstm_fit(resume = ) restores it:
# the epoch, the learning-rate schedule's state, R's random number generator
# (so the next epoch draws the same shuffle) and the history so far, as file
# metadata entries named "fit.*". Doubles are written with 17 significant
# digits, so they come back exactly.

save_fit_checkpoint <- function(ptr, path, optimizer, scheduler, epoch, history) {
  seed <- get0(".Random.seed", envir = globalenv(), inherits = FALSE)
  metadata <- c(
    fit.epoch = as.character(epoch),
    fit.rng = if (is.null(seed)) "none" else paste(seed, collapse = ","),
    fit.rng_kind = paste(RNGkind(), collapse = ","),
    fit.history = encode_history(history)
  )
  if (!is.null(scheduler)) {
    metadata[["fit.scheduler"]] <- encode_numbers(unlist(scheduler$state_dict()[-1]))
    metadata[["fit.scheduler_kind"]] <- scheduler$kind
  }
  c_model_save(ptr, path, optimizer, metadata)
}

# The fit state of the checkpoint at path, checked whole against the model
# (its architecture) and the fit's schedule without loading anything, so
# that a file that cannot be resumed leaves the model, the schedule and R's
# random number generator as they were: list(epoch, meta, history,
# scheduler_state) for resume_fit().
read_fit_checkpoint <- function(path, scheduler, config, call) {
  info <- c_file_info(path)
  all <- info$metadata
  meta <- as.list(all[startsWith(names(all), "fit.")])
  if (is.null(meta[["fit.epoch"]])) {
    abort_convlstm(sprintf(paste0(
      "`resume`: '%s' was not written by convlstm_callback_model_checkpoint() (it has no fit state); ",
      "to start from its weights, use convlstm_load()."), path), call = call)
  }
  if (!same_architecture(info$config, config)) {
    abort_convlstm(sprintf(paste0(
      "`resume`: '%s' holds a model of another architecture; the file: %s; the model: %s. ",
      "Resume into a model made as the saved one (convlstm_file_info() shows it)."),
      path, describe_architecture(info$config), describe_architecture(config)), call = call)
  }
  kind <- meta[["fit.scheduler_kind"]]
  if (!identical(kind, if (is.null(scheduler)) NULL else scheduler$kind)) {
    abort_convlstm(sprintf(paste0(
      "`resume`: the checkpoint was saved %s, but `lr_scheduler` is %s; pass the same kind ",
      "of schedule."),
      if (is.null(kind)) "without a schedule" else sprintf("with a %s schedule", kind),
      if (is.null(scheduler)) "NULL" else sprintf("a %s schedule", scheduler$kind)
    ), call = call)
  }
  damaged <- function(what) {
    abort_convlstm(sprintf(paste0(
      "`resume`: the fit state in '%s' is incomplete or damaged (%s); it cannot be resumed. ",
      "To start from its weights, use convlstm_load()."), path, what), call = call)
  }
  state <- tryCatch(decode_fit_state(meta, scheduler), error = function(e) {
    damaged(conditionMessage(e))
  })
  if (is.character(state)) damaged(state)
  state
}

# The fit.* entries decoded and checked; a string saying what is wrong
# when they are not whole.
decode_fit_state <- function(meta, scheduler) {
  missing <- setdiff(c("fit.epoch", "fit.rng", "fit.rng_kind", "fit.history",
                       if (!is.null(scheduler)) "fit.scheduler"), names(meta))
  if (length(missing) > 0) return(paste("no", paste(missing, collapse = ", ")))
  epoch <- suppressWarnings(as.numeric(meta[["fit.epoch"]]))
  if (length(epoch) != 1 || !is_whole(epoch) || epoch < 0 || epoch > .Machine$integer.max) {
    return(sprintf("fit.epoch is \"%s\", not an epoch number", meta[["fit.epoch"]]))
  }
  kinds <- strsplit(meta[["fit.rng_kind"]], ",", fixed = TRUE)[[1]]
  if (length(kinds) != 3 || !kinds[[1]] %in% c("Wichmann-Hill", "Marsaglia-Multicarry",
      "Super-Duper", "Mersenne-Twister", "Knuth-TAOCP", "user-supplied", "Knuth-TAOCP-2002",
      "L'Ecuyer-CMRG")) {
    return("fit.rng_kind is not R's RNGkind()")
  }
  seed <- meta[["fit.rng"]]
  if (!identical(seed, "none") &&
      anyNA(suppressWarnings(as.integer(strsplit(seed, ",", fixed = TRUE)[[1]])))) {
    return("fit.rng is not a state of R's random number generator")
  }
  history <- decode_history(meta[["fit.history"]])
  if (!all(history_columns %in% names(history)) || anyNA(history$epoch) ||
      nrow(history) > epoch) {
    return(sprintf("fit.history does not hold the %d epochs done", epoch))
  }
  sched <- NULL
  if (!is.null(scheduler)) {
    sched <- decode_numbers(meta[["fit.scheduler"]])
    fields <- setdiff(scheduler$state_fields, "momentum")
    if (!all(fields %in% names(sched)) ||
        !all(vapply(sched[fields], function(v) is.numeric(v) && length(v) == 1 && !is.na(v),
                    logical(1)))) {
      return("fit.scheduler does not hold the schedule's state")
    }
  }
  list(epoch = as.integer(epoch), meta = meta, history = history, scheduler_state = sched)
}

# Whether a file's architecture (convlstm_file_info()$config) is the
# model's: what the core checks when it loads the weights.
same_architecture <- function(a, b) {
  identical(as.integer(a$input_dim), as.integer(b$input_dim)) &&
    identical(as.integer(a$hidden_dims), as.integer(b$hidden_dims)) &&
    identical(unname(as.integer(a$geometry)), unname(as.integer(b$geometry))) &&
    identical(isTRUE(a$bias), isTRUE(b$bias)) &&
    identical(as.integer(a$peephole_spec), as.integer(b$peephole_spec)) &&
    identical(isTRUE(a$forecaster), isTRUE(b$forecaster)) &&
    identical(as.integer(a$patch %||% 1L), as.integer(b$patch %||% 1L))
}

describe_architecture <- function(config) {
  sprintf("input %d, hidden %s, kernels %s, bias %s, peepholes %s%s", config$input_dim,
          paste(config$hidden_dims, collapse = "-"),
          paste(geometry_labels(config$geometry), collapse = ", "),
          if (isTRUE(config$bias)) "yes" else "no", config$peephole,
          if (is.null(config$frame_size)) "" else
            sprintf(" (frames %s)", paste(config$frame_size, collapse = "x")))
}

# Loads the checkpoint at path (read_fit_checkpoint()'s `state`) into the
# model and scheduler and restores the RNG; returns list(epoch, history).
resume_fit <- function(ptr, path, scheduler, state) {
  meta <- state$meta
  c_model_load_into(ptr, path, TRUE)
  if (!is.null(scheduler)) {
    scheduler$load_state_dict(c(kind = scheduler$kind, state$scheduler_state))
  }
  restore_rng(meta[["fit.rng"]], meta[["fit.rng_kind"]])
  list(epoch = state$epoch, history = state$history)
}

restore_rng <- function(seed, kind) {
  do.call(RNGkind, as.list(strsplit(kind, ",", fixed = TRUE)[[1]]))
  if (identical(seed, "none")) {
    if (exists(".Random.seed", envir = globalenv(), inherits = FALSE)) {
      rm(".Random.seed", envir = globalenv())
    }
  } else {
    assign(".Random.seed", as.integer(strsplit(seed, ",", fixed = TRUE)[[1]]),
           envir = globalenv())
  }
}

encode_history <- function(history) {
  # a forecasting fit's p per epoch too (convlstm_fit(teacher_forcing = ))
  columns <- c(history_columns, intersect("teacher_forcing", names(history)))
  df <- as.data.frame(history)[columns]
  lines <- apply(as.matrix(df), 1, function(r) paste(sprintf("%.17g", r), collapse = ","))
  paste(c(paste(columns, collapse = ","), lines), collapse = "\n")
}

decode_history <- function(text) {
  df <- utils::read.csv(text = text, colClasses = "numeric")
  df$epoch <- as.integer(df$epoch)
  df
}

check_lr_scheduler <- function(scheduler, optimizer, call = sys.call(-1)) {
  if (is.null(scheduler)) return(NULL)
  if (!is_lr_scheduler(scheduler)) {
    abort_arg("lr_scheduler", "NULL or a schedule made by convlstm_lr_step(), convlstm_lr_cosine_annealing(), ...",
              scheduler, call)
  }
  if (!identical(unclass(scheduler$base_optimizer), unclass(optimizer))) {
    abort_convlstm(paste0(
      "`lr_scheduler` was made from another optimizer than `optimizer`; make it from the ",
      "same one, e.g. convlstm_lr_step(optimizer, step_size = 10)."
    ), call = call)
  }
  scheduler
}

# convlstm_lr_one_cycle() stops at its total_steps: check before training that the
# fit's batches fit in what is left of it (last_epoch: the steps taken, a
# resume file's when resuming).
check_schedule_length <- function(scheduler, epochs, n_batches, call,
                                  last_epoch = scheduler$last_epoch) {
  if (is.null(scheduler) || is.null(scheduler$total_steps)) return(invisible())
  left <- scheduler$total_steps - last_epoch
  need <- epochs * n_batches
  if (need > left) {
    abort_convlstm(sprintf(paste0(
      "`lr_scheduler` (convlstm_lr_one_cycle) has %d steps left, but the fit takes %d (%d epochs of %d ",
      "batches); make it with epochs = %d, steps_per_epoch = %d."),
      left, need, epochs, n_batches, epochs, n_batches), call = call)
  }
  invisible()
}

# State as one metadata string for a checkpoint ("key=value;..." with every
# double written exactly) and back.
encode_numbers <- function(v) {
  paste0(names(v), "=", vapply(v, function(x) sprintf("%.17g", x), ""), collapse = ";")
}

decode_numbers <- function(s) {
  parts <- strsplit(strsplit(s, ";", fixed = TRUE)[[1]], "=", fixed = TRUE)
  values <- lapply(parts, function(p) if (p[[2]] == "NA") NA_real_ else as.numeric(p[[2]]))
  stats::setNames(values, vapply(parts, `[[`, "", 1))
}
