# schedulers.R -- learning-rate schedules with R torch's names and
# semantics (convlstm_lr_step(), convlstm_lr_multiplicative(), convlstm_lr_cosine_annealing(),
# convlstm_lr_one_cycle(), convlstm_lr_reduce_on_plateau()).
#
# An optimizer here is a value (a validated list the step reads), not an
# object holding parameters, and its moments live in the model, keyed only by
# the optimizer's kind: a step with another lr keeps them. A scheduler is
# therefore a small mutable object (an environment) holding the optimizer it
# was made from and its schedule's state; `$step()` advances it and
# `$optimizer` is the optimizer with the current lr, to pass to the next
# convlstm_train_step(). The values follow torch's schedulers (checked against
# PyTorch 1.13 in test-schedulers.R).

#' Learning-rate schedules
#'
#' Schedules with the names, arguments and values of R torch's (and
#' PyTorch's) learning-rate schedulers. Make one from an optimizer, then call
#' `sched$step()` after each epoch (or, for `convlstm_lr_one_cycle()`, after each
#' batch) and train with `sched$optimizer`, the optimizer with the current
#' learning rate. [convlstm_fit()] does both when given `lr_scheduler =`.
#'
#' * `convlstm_lr_step()`: the rate times `gamma` every `step_size` epochs
#'   (`torch.optim.lr_scheduler.StepLR`). Steps per epoch.
#' * `convlstm_lr_multiplicative()`: the rate times `lr_lambda(epoch)` at every step
#'   (`MultiplicativeLR`). Steps per epoch.
#' * `convlstm_lr_cosine_annealing()`: from the optimizer's rate down to `eta_min`
#'   over `T_max` epochs along a half cosine, then back up, periodically
#'   (`CosineAnnealingLR`). With `warmup > 0`, first a linear warm-up from
#'   `warmup_start_factor` times the rate to the rate over `warmup` epochs,
#'   and then the cosine (as torch's `SequentialLR` of `LinearLR` and
#'   `CosineAnnealingLR` with the milestone `warmup`). Steps per epoch.
#' * `convlstm_lr_one_cycle()`: the 1cycle policy (`OneCycleLR`): up from
#'   `max_lr / div_factor` to `max_lr` over the first `pct_start` of
#'   `total_steps`, then down to `max_lr / div_factor / final_div_factor`;
#'   with `cycle_momentum`, Adam's first beta (or SGD's or RMSprop's
#'   momentum) moves the
#'   opposite way between `max_momentum` and `base_momentum`. **Steps per
#'   batch**, as in R torch: `total_steps` is `epochs * steps_per_epoch`
#'   batches, and stepping past it is an error.
#' * `convlstm_lr_reduce_on_plateau()`: the rate times `factor` once the monitored
#'   value has not improved for more than `patience` epochs
#'   (`ReduceLROnPlateau`); `sched$step(value)` takes that value.
#'   [convlstm_fit()] passes the validation loss, or the training loss
#'   without validation data. Steps per epoch.
#'
#' The object's fields and methods, as in R torch: `sched$step()` (or
#' `sched$step(value)` for `convlstm_lr_reduce_on_plateau()`), `sched$get_lr()` (the
#' current rate), `sched$last_epoch` (steps taken), `sched$optimizer` (the
#' optimizer to use for the next step), `sched$state_dict()` and
#' `sched$load_state_dict(state)`. The schedule's state is saved with the
#' model by [convlstm_callback_model_checkpoint()] and restored by
#' `convlstm_fit(resume = )`. Values equal PyTorch's to a relative 1e-12;
#' the step itself uses them as 32-bit floats.
#'
#' @param optimizer An optimizer made by [convlstm_optimizer_adam()],
#'   [convlstm_optimizer_adamw()], [convlstm_optimizer_sgd()] or [convlstm_optimizer_rmsprop()]: its
#'   rate is the schedule's starting (base) rate.
#' @param step_size Epochs between two decays.
#' @param gamma Factor of each decay.
#' @param lr_lambda A function of the epoch number (1, 2, ...) returning the
#'   factor applied at that step.
#' @param T_max Epochs from the base rate down to `eta_min`.
#' @param eta_min Lowest rate.
#' @param warmup Epochs of linear warm-up before the cosine (0: none).
#' @param warmup_start_factor Fraction of the base rate the warm-up starts
#'   from.
#' @param max_lr Highest rate of the cycle.
#' @param total_steps Batches in the cycle, or `NULL` to give `epochs` and
#'   `steps_per_epoch`.
#' @param epochs,steps_per_epoch Their product is `total_steps`.
#' @param pct_start Fraction of the cycle spent increasing the rate.
#' @param anneal_strategy `"cos"` or `"linear"`.
#' @param cycle_momentum Move Adam's first beta (SGD's, RMSprop's momentum) inversely
#'   to the rate.
#' @param base_momentum,max_momentum Its bounds.
#' @param div_factor The starting rate is `max_lr / div_factor`.
#' @param final_div_factor The last rate is the starting rate divided by it.
#' @param three_phase A third phase annihilating the rate, as in PyTorch.
#' @param mode `"min"` (lower is better, as for a loss) or `"max"`.
#' @param factor Factor of each reduction.
#' @param patience Epochs without improvement tolerated before a reduction.
#' @param threshold,threshold_mode What counts as an improvement: in
#'   `"rel"` mode a value better than `best * (1 - threshold)` (for `"min"`),
#'   in `"abs"` mode better than `best - threshold`.
#' @param cooldown Epochs after a reduction during which none is counted.
#' @param min_lr Lowest rate.
#' @param eps Reductions smaller than this are skipped.
#' @return A scheduler: an object of class `convlstm_lr_scheduler`.
#' @name lr_schedulers
#' @seealso [convlstm_fit()], [convlstm_optimizer_adam()].
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(4 * 3 * 6 * 6), dim = c(4, 3, 1, 6, 6))
#' y <- array(runif(4 * 6 * 6), dim = c(4, 1, 6, 6))
#' sched <- convlstm_lr_cosine_annealing(convlstm_optimizer_adam(0.01), T_max = 5, warmup = 2)
#' for (epoch in 1:6) {
#'   loss <- convlstm_train_step(model, x, y, sched$optimizer)
#'   cat(sprintf("epoch %d: lr %.5f, loss %.4f\n", epoch, sched$get_lr(), loss))
#'   sched$step()
#' }
#' # per batch: the 1cycle policy over 3 epochs of 4 batches
#' sched <- convlstm_lr_one_cycle(convlstm_optimizer_sgd(0.1, momentum = 0.9), max_lr = 0.1,
#'                       epochs = 3, steps_per_epoch = 4)
#' lrs <- vapply(1:12, function(i) { lr <- sched$get_lr(); sched$step(); lr }, 0)
#' round(lrs, 4)
#' convlstm_release(model)
NULL

#' @rdname lr_schedulers
#' @export
convlstm_lr_step <- function(optimizer, step_size, gamma = 0.1) {
  step_size <- check_count(step_size, "step_size")
  gamma <- check_number(gamma, "gamma", min = 0)
  new_lr_scheduler(optimizer, "step", "epoch", function(s, metric) {
    list(lr = s$base_lr * gamma^(s$last_epoch %/% step_size))
  })
}

#' @rdname lr_schedulers
#' @export
convlstm_lr_multiplicative <- function(optimizer, lr_lambda) {
  if (!is.function(lr_lambda)) {
    abort_arg("lr_lambda", "a function of the epoch", lr_lambda, sys.call())
  }
  new_lr_scheduler(optimizer, "multiplicative", "epoch", function(s, metric) {
    if (s$last_epoch == 0) return(list(lr = s$lr))
    f <- lr_lambda(s$last_epoch)
    if (!is.numeric(f) || length(f) != 1 || is.na(f) || f < 0) {
      abort_convlstm(sprintf(
        "`lr_lambda(%d)` must return one non-negative number, not %s.", s$last_epoch, describe(f)
      ), call = NULL)
    }
    list(lr = s$lr * f)
  })
}

#' @rdname lr_schedulers
#' @export
convlstm_lr_cosine_annealing <- function(optimizer, T_max, eta_min = 0, warmup = 0,
                                warmup_start_factor = 1 / 3) {
  T_max <- check_count(T_max, "T_max")
  eta_min <- check_number(eta_min, "eta_min", min = 0)
  warmup <- check_count(warmup, "warmup", min = 0)
  warmup_start_factor <- check_number(warmup_start_factor, "warmup_start_factor", min = 0,
                                      max = 1, min_inclusive = FALSE)
  new_lr_scheduler(optimizer, "cosine_annealing", "epoch", function(s, metric) {
    e <- s$last_epoch
    if (e < warmup) {
      return(list(lr = s$base_lr * (warmup_start_factor + (1 - warmup_start_factor) * e / warmup)))
    }
    e <- e - warmup
    list(lr = eta_min + (s$base_lr - eta_min) * (1 + cos(pi * e / T_max)) / 2)
  })
}

#' @rdname lr_schedulers
#' @export
convlstm_lr_one_cycle <- function(optimizer, max_lr, total_steps = NULL, epochs = NULL,
                         steps_per_epoch = NULL, pct_start = 0.3,
                         anneal_strategy = c("cos", "linear"), cycle_momentum = TRUE,
                         base_momentum = 0.85, max_momentum = 0.95, div_factor = 25,
                         final_div_factor = 1e4, three_phase = FALSE) {
  call <- sys.call()
  max_lr <- check_number(max_lr, "max_lr", min = 0, min_inclusive = FALSE)
  if (is.null(total_steps)) {
    if (is.null(epochs) || is.null(steps_per_epoch)) {
      abort_convlstm("Give `total_steps`, or both `epochs` and `steps_per_epoch`.", call = call)
    }
    total_steps <- check_count(epochs, "epochs") * check_count(steps_per_epoch, "steps_per_epoch")
  }
  total_steps <- check_count(total_steps, "total_steps")
  pct_start <- check_number(pct_start, "pct_start", min = 0, max = 1)
  anneal <- switch(check_choice(anneal_strategy, c("cos", "linear"), "anneal_strategy"),
    cos = function(a, b, pct) b + (a - b) / 2 * (cos(pi * pct) + 1),
    linear = function(a, b, pct) (b - a) * pct + a
  )
  cycle_momentum <- check_flag(cycle_momentum, "cycle_momentum")
  base_momentum <- check_number(base_momentum, "base_momentum", min = 0)
  max_momentum <- check_number(max_momentum, "max_momentum", min = 0)
  div_factor <- check_number(div_factor, "div_factor", min = 0, min_inclusive = FALSE)
  final_div_factor <- check_number(final_div_factor, "final_div_factor", min = 0,
                                   min_inclusive = FALSE)
  three_phase <- check_flag(three_phase, "three_phase")
  initial_lr <- max_lr / div_factor
  min_lr <- initial_lr / final_div_factor
  # torch's phases: end step, and the rate and momentum at its start and end
  p1 <- pct_start * total_steps - 1
  phases <- if (three_phase) {
    list(list(end = p1, lr = c(initial_lr, max_lr), m = c(max_momentum, base_momentum)),
         list(end = 2 * pct_start * total_steps - 2, lr = c(max_lr, initial_lr),
              m = c(base_momentum, max_momentum)),
         list(end = total_steps - 1, lr = c(initial_lr, min_lr), m = c(max_momentum, max_momentum)))
  } else {
    list(list(end = p1, lr = c(initial_lr, max_lr), m = c(max_momentum, base_momentum)),
         list(end = total_steps - 1, lr = c(max_lr, min_lr), m = c(base_momentum, max_momentum)))
  }
  sched <- new_lr_scheduler(optimizer, "one_cycle", "batch", function(s, metric) {
    e <- s$last_epoch
    if (e > total_steps) {
      abort_convlstm(sprintf(paste0(
        "convlstm_lr_one_cycle(): stepped %d times, beyond its total_steps (%d); make it with the ",
        "fit's epochs and batches per epoch."), e, total_steps), call = NULL)
    }
    start <- 0
    for (i in seq_along(phases)) {
      ph <- phases[[i]]
      if (e <= ph$end || i == length(phases)) {
        pct <- (e - start) / (ph$end - start)
        return(list(lr = anneal(ph$lr[[1]], ph$lr[[2]], pct),
                    momentum = if (cycle_momentum) anneal(ph$m[[1]], ph$m[[2]], pct)))
      }
      start <- ph$end
    }
  })
  sched$total_steps <- total_steps
  sched
}

#' @rdname lr_schedulers
#' @export
convlstm_lr_reduce_on_plateau <- function(optimizer, mode = c("min", "max"), factor = 0.1, patience = 10,
                                 threshold = 1e-4, threshold_mode = c("rel", "abs"),
                                 cooldown = 0, min_lr = 0, eps = 1e-8) {
  mode <- check_choice(mode, c("min", "max"), "mode")
  factor <- check_number(factor, "factor", min = 0)
  if (factor >= 1) abort_arg("factor", "a number in [0, 1)", factor, sys.call())
  patience <- check_count(patience, "patience", min = 0)
  threshold <- check_number(threshold, "threshold", min = 0)
  threshold_mode <- check_choice(threshold_mode, c("rel", "abs"), "threshold_mode")
  cooldown <- check_count(cooldown, "cooldown", min = 0)
  min_lr <- check_number(min_lr, "min_lr", min = 0)
  eps <- check_number(eps, "eps", min = 0)
  sign <- if (mode == "min") 1 else -1
  # in "min" terms: a value is better when below the bar
  bar <- function(best) {
    if (threshold_mode == "rel") best * (1 - sign * threshold) else best - sign * threshold
  }
  sched <- new_lr_scheduler(optimizer, "reduce_on_plateau", "epoch", function(s, metric) {
    if (s$last_epoch == 0) return(list(lr = s$lr))
    if (!is.numeric(metric) || length(metric) != 1 || is.na(metric)) {
      abort_convlstm(sprintf(
        "convlstm_lr_reduce_on_plateau()$step() needs the monitored value (one number), not %s.",
        describe(metric)
      ), call = NULL)
    }
    if (sign * metric < sign * bar(s$best)) {
      s$best <- metric
      s$num_bad_epochs <- 0
    } else {
      s$num_bad_epochs <- s$num_bad_epochs + 1
    }
    if (s$cooldown_counter > 0) {
      s$cooldown_counter <- s$cooldown_counter - 1
      s$num_bad_epochs <- 0
    }
    lr <- s$lr
    if (s$num_bad_epochs > patience) {
      new <- max(lr * factor, min_lr)
      if (lr - new > eps) lr <- new
      s$cooldown_counter <- cooldown
      s$num_bad_epochs <- 0
    }
    list(lr = lr)
  })
  sched$best <- sign * Inf
  sched$num_bad_epochs <- 0
  sched$cooldown_counter <- 0
  sched$state_fields <- c(sched$state_fields, "best", "num_bad_epochs", "cooldown_counter")
  sched
}

# The common object: `rule(s, metric)` returns the rate (and momentum, or
# NULL) for s$last_epoch, from s's state; it runs once at creation (epoch 0,
# as torch's constructors step once) and at every $step().
new_lr_scheduler <- function(optimizer, kind, per, rule, call = sys.call(-1)) {
  optimizer <- check_optimizer(optimizer, call = call)
  s <- new.env(parent = emptyenv())
  s$kind <- kind
  s$per <- per
  s$base_lr <- optimizer$lr
  s$lr <- optimizer$lr
  s$momentum <- NULL
  s$last_epoch <- 0L
  s$optimizer <- optimizer
  s$base_optimizer <- optimizer
  s$state_fields <- c("last_epoch", "lr", "momentum")
  apply_rule <- function(metric) {
    v <- rule(s, metric)
    s$lr <- v$lr
    s$momentum <- v$momentum
    s$optimizer <- with_hyperparameters(optimizer, v$lr, v$momentum)
  }
  s$step <- function(metrics = NULL) {
    s$last_epoch <- s$last_epoch + 1L
    apply_rule(metrics)
    invisible(s)
  }
  s$get_lr <- function() s$lr
  s$state_dict <- function() {
    v <- mget(s$state_fields, envir = s)
    v$momentum <- v$momentum %||% NA_real_
    c(kind = kind, lapply(v, as.double))
  }
  s$load_state_dict <- function(state) {
    if (!is.list(state) || !identical(state$kind, kind)) {
      abort_convlstm(sprintf("This state is not a %s scheduler's.", kind), call = NULL)
    }
    for (f in s$state_fields) assign(f, state[[f]], envir = s)
    s$last_epoch <- as.integer(s$last_epoch)
    if (is.na(s$momentum)) s$momentum <- NULL
    s$optimizer <- with_hyperparameters(optimizer, s$lr, s$momentum)
    invisible(s)
  }
  apply_rule(NULL)
  class(s) <- c(paste0("convlstm_lr_", kind), "convlstm_lr_scheduler")
  s
}

# The optimizer with another rate (and momentum: Adam's first beta, SGD's
# and RMSprop's momentum), checked as the step will read it. The moments in the model are
# kept: they depend only on the optimizer's kind. A negative rate becomes 0:
# torch's linear convlstm_lr_one_cycle() extrapolates below 0 at step total_steps,
# which no training step uses (the schedule's own value stays torch's).
with_hyperparameters <- function(optimizer, lr, momentum = NULL) {
  optimizer$lr <- max(lr, 0)
  if (!is.null(momentum)) {
    if (optimizer$kind %in% c("adam", "adamw")) optimizer$betas[[1]] <- momentum
    else optimizer$momentum <- momentum
  }
  c_optim_check(optimizer)
  optimizer
}

is_lr_scheduler <- function(x) inherits(x, "convlstm_lr_scheduler")

#' @export
print.convlstm_lr_scheduler <- function(x, ...) {
  cat(sprintf("<convlstm_lr_scheduler> %s, steps per %s: %d step%s taken, lr %s%s\n",
              x$kind, x$per, x$last_epoch, if (x$last_epoch == 1) "" else "s", format(x$lr),
              if (is.null(x$momentum)) "" else paste0(", momentum ", format(x$momentum))))
  invisible(x)
}
