# optimizers.R -- optimizer descriptions: validated hyperparameters in a
# small classed list. They hold no state: Adam's moments, SGD's momentum and
# RMSprop's averages
# live in the model's C memory (created at the first step, reset when the
# kind of optimizer changes), so one optimizer object can drive several
# models and a model's state survives a new optimizer object of the same kind.

#' Optimizers
#'
#' `convlstm_optimizer_adam()`, `convlstm_optimizer_adamw()`, `convlstm_optimizer_sgd()` and
#' `convlstm_optimizer_rmsprop()` describe the
#' update that [convlstm_train_step()], [convlstm_fit()] and [convlstm_optimizer_step()] apply,
#' with the semantics of torch's `optim_adam()` / `torch.optim.Adam` (weight
#' decay is L2, added to the gradient), `optim_adamw()` / `torch.optim.AdamW`
#' (decoupled weight decay: each parameter is first multiplied by
#' `1 - lr * weight_decay`, and the gradient is left as it is) and
#' `optim_sgd()` / `torch.optim.SGD` (the momentum buffer starts as the
#' first gradient) and `optim_rmsprop()` / `torch.optim.RMSprop` (the
#' running average of the squared gradient `square_avg`, weight decay as L2
#' added to the gradient, `eps` added to the root, not under it; with
#' `momentum > 0` a `momentum_buffer` and with `centered = TRUE` the running
#' average of the gradient `grad_avg`, each starting at zeros). With `amsgrad = TRUE` Adam and AdamW divide by the
#' running maximum of the second moment (torch's `max_exp_avg_sq`, one more
#' tensor of the parameters' size, counted by [convlstm_memory_estimate()] and saved
#' by [convlstm_save()]).
#'
#' The optimizer's state (Adam's first and second moments and step count,
#' SGD's momentum buffer, RMSprop's `square_avg`, `momentum_buffer` and
#' `grad_avg`) is kept in the model, next to the parameters it
#' updates, so it is counted in [convlstm_memory_stats()] under `optimizer`. It is
#' created by the first step and reset when a step uses the other kind of
#' optimizer.
#'
#' **Coming from torch:** `optim_adam(model$parameters, lr = 0.01)` is
#' written `convlstm_optimizer_adam(lr = 0.01)` here, with no parameters (the model
#' holds them, and the optimizer's state), and `opt$step()` is
#' [convlstm_train_step()] or [convlstm_optimizer_step()]. Learning-rate schedules take the
#' optimizer as in torch: [convlstm_lr_step()] and the others ([lr_schedulers]).
#'
#' @param lr Learning rate.
#' @param betas Coefficients of the running averages of the gradient and of
#'   its square.
#' @param eps Term added to the denominator for numerical stability.
#' @param weight_decay L2 penalty (Adam, SGD); for AdamW, the decoupled
#'   decay rate (torch's default there is 0.01).
#' @param amsgrad Use the AMSGrad variant (the maximum of past second
#'   moments in the denominator).
#' @param momentum Momentum factor (0: none).
#' @param alpha RMSprop's smoothing constant of the squared gradient's
#'   running average, in \[0, 1).
#' @param centered RMSprop: divide by the root of the gradient's estimated
#'   variance (the running average of its square minus the square of its
#'   running average) instead of the root of its running mean square.
#' @return An object of class `convlstm_optimizer`.
#' @name optimizers
#' @aliases optim_adam optim_adamw optim_sgd optim_rmsprop
#' @examples
#' convlstm_optimizer_adam(lr = 0.01)
#' convlstm_optimizer_adamw(lr = 0.01, weight_decay = 0.05, amsgrad = TRUE)
#' convlstm_optimizer_sgd(lr = 0.1, momentum = 0.9)
#' convlstm_optimizer_rmsprop(lr = 1e-3, alpha = 0.9, centered = TRUE)
#'
#' # one RMSprop step on the CPU
#' model <- convlstm(input_dim = 1, hidden_dims = 2, kernel_sizes = 3)
#' x <- array(runif(2 * 3 * 1 * 6 * 6), c(2, 3, 1, 6, 6))
#' y <- array(runif(2 * 2 * 6 * 6), c(2, 2, 6, 6))
#' convlstm_train_step(model, x, y, convlstm_optimizer_rmsprop())
#' convlstm_release(model)
NULL

#' @rdname optimizers
#' @export
convlstm_optimizer_adam <- function(lr = 1e-3, betas = c(0.9, 0.999), eps = 1e-8, weight_decay = 0,
                           amsgrad = FALSE) {
  adam_family("adam", lr, betas, eps, weight_decay, amsgrad, sys.call())
}

#' @rdname optimizers
#' @export
convlstm_optimizer_adamw <- function(lr = 1e-3, betas = c(0.9, 0.999), eps = 1e-8, weight_decay = 0.01,
                            amsgrad = FALSE) {
  adam_family("adamw", lr, betas, eps, weight_decay, amsgrad, sys.call())
}

# Adam and AdamW: the same hyperparameters, checked alike.
adam_family <- function(kind, lr, betas, eps, weight_decay, amsgrad, call) {
  lr <- check_number(lr, "lr", min = 0, call = call)
  if (!is.numeric(betas) || length(betas) != 2 || anyNA(betas) || any(betas < 0) ||
      any(betas >= 1)) {
    abort_arg("betas", "two numbers in [0, 1)", betas, call)
  }
  eps <- check_number(eps, "eps", min = 0, min_inclusive = FALSE, call = call)
  weight_decay <- check_number(weight_decay, "weight_decay", min = 0, call = call)
  amsgrad <- check_flag(amsgrad, "amsgrad", call = call)
  opt <- structure(
    list(kind = kind, lr = lr, betas = as.double(betas), eps = eps,
         weight_decay = weight_decay, amsgrad = amsgrad),
    class = c(paste0("convlstm_optimizer_", kind), "convlstm_optimizer")
  )
  c_optim_check(opt) # as the 32-bit floats the update uses
  opt
}

#' @rdname optimizers
#' @export
convlstm_optimizer_sgd <- function(lr, momentum = 0, weight_decay = 0) {
  if (missing(lr)) {
    abort_convlstm("`lr` must be given: SGD has no default learning rate.", call = sys.call())
  }
  lr <- check_number(lr, "lr", min = 0)
  momentum <- check_number(momentum, "momentum", min = 0)
  weight_decay <- check_number(weight_decay, "weight_decay", min = 0)
  opt <- structure(
    list(kind = "sgd", lr = lr, momentum = momentum, weight_decay = weight_decay),
    class = c("convlstm_optimizer_sgd", "convlstm_optimizer")
  )
  c_optim_check(opt) # as the 32-bit floats the update uses
  opt
}

#' @rdname optimizers
#' @export
convlstm_optimizer_rmsprop <- function(lr = 0.01, alpha = 0.99, eps = 1e-8, weight_decay = 0,
                              momentum = 0, centered = FALSE) {
  call <- sys.call()
  lr <- check_number(lr, "lr", min = 0, call = call)
  alpha <- check_number(alpha, "alpha", min = 0, call = call)
  if (alpha >= 1) abort_arg("alpha", "a number in [0, 1)", alpha, call)
  eps <- check_number(eps, "eps", min = 0, min_inclusive = FALSE, call = call)
  weight_decay <- check_number(weight_decay, "weight_decay", min = 0, call = call)
  momentum <- check_number(momentum, "momentum", min = 0, call = call)
  centered <- check_flag(centered, "centered", call = call)
  opt <- structure(
    list(kind = "rmsprop", lr = lr, alpha = alpha, eps = eps, weight_decay = weight_decay,
         momentum = momentum, centered = centered),
    class = c("convlstm_optimizer_rmsprop", "convlstm_optimizer")
  )
  c_optim_check(opt) # as the 32-bit floats the update uses
  opt
}

#' @export
print.convlstm_optimizer <- function(x, ...) {
  hp <- if (identical(x$kind, "rmsprop")) {
    sprintf("lr = %s, alpha = %s, eps = %s, weight_decay = %s, momentum = %s%s",
            format(x$lr), format(x$alpha), format(x$eps), format(x$weight_decay),
            format(x$momentum), if (isTRUE(x$centered)) ", centered" else "")
  } else if (identical(x$kind, "sgd")) {
    sprintf("lr = %s, momentum = %s, weight_decay = %s",
            format(x$lr), format(x$momentum), format(x$weight_decay))
  } else {
    sprintf("lr = %s, betas = (%s, %s), eps = %s, weight_decay = %s%s",
            format(x$lr), format(x$betas[[1]]), format(x$betas[[2]]), format(x$eps),
            format(x$weight_decay), if (isTRUE(x$amsgrad)) ", amsgrad" else "")
  }
  cat(sprintf("<convlstm_optimizer> %s: %s\n", optimizer_names[[x$kind]], hp))
  invisible(x)
}

# The kinds, by the core's names (cl_optim_kind_name), as people write them.
optimizer_names <- c(adam = "Adam", adamw = "AdamW", sgd = "SGD", rmsprop = "RMSprop")

check_optimizer <- function(x, arg = "optimizer", call = sys.call(-1)) {
  if (!inherits(x, "convlstm_optimizer") || !isTRUE(x$kind %in% names(optimizer_names))) {
    abort_arg(arg, paste("an optimizer made by convlstm_optimizer_adam(), convlstm_optimizer_adamw(),",
                         "convlstm_optimizer_sgd() or convlstm_optimizer_rmsprop()"), x, call)
  }
  x
}
