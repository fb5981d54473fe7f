# sampling.R -- scheduled sampling for forecasting (Bengio et al. 2015):
# `teacher_forcing` as a probability p, the coins that decide which of a
# train step's fed-back steps read the true frame, and schedules of p over
# epochs for convlstm_fit() (convlstm_sampling_schedule()).
#
# The coins are drawn here, from R's generator, so set.seed() reproduces a
# run; the step itself (src/core/train.c, forward.c, backward.c) only reads
# them. One coin per fed-back step for the whole batch, not per sequence:
# the choice is then which launches the step makes (a copy of the model's
# frame, and backward's path into it), with no mask kernel in either
# backend and nothing more in the memory plan.

#' Schedules of the teacher-forcing probability (scheduled sampling)
#'
#' Scheduled sampling (Bengio et al. 2015, "Scheduled Sampling for Sequence
#' Prediction with Recurrent Neural Networks") trains a forecast by feeding
#' back the true frame with a probability that decays over training, so the
#' model moves from teacher forcing towards reading its own predictions, as
#' it must when it forecasts. `convlstm_sampling_schedule()` makes such a decay for
#' `convlstm_fit(teacher_forcing = )`: a function of the epoch number
#' (1, 2, ...) returning the probability `p` of that epoch's steps, with `i
#' = epoch - 1` the epochs completed before it:
#'
#' * `"inverse_sigmoid"`: `p = max(min, k / (k + exp(i / k)))`, `k >= 1` (the
#'   paper's inverse sigmoid decay; larger `k` decays later).
#' * `"exponential"`: `p = max(min, k^i)`, `0 < k < 1`.
#' * `"linear"`: `p = max(min, 1 - k * i)`, `k > 0`.
#'
#' Each is at most 1 and decays towards its floor `min` (0 by default). An epoch whose `p` is
#' exactly 1 trains teacher-forced and one whose `p` is 0 free-running, as
#' `teacher_forcing = TRUE` and `FALSE` do; in between, each of a step's
#' `horizon - 1` fed-back steps reads the true frame with probability `p`
#' (see [convlstm_train_step()]). Any function of the epoch returning a number in
#' `[0, 1]` serves as well.
#'
#' @param type `"inverse_sigmoid"`, `"exponential"` or `"linear"`.
#' @param k The schedule's rate, as above.
#' @param min The floor every schedule decays towards (in `[0, 1]`).
#' @return A function of the epoch number returning `p`, of class
#'   `convlstm_sampling_schedule` (it prints its first values).
#' @seealso [convlstm_fit()], [convlstm_train_step()] with `teacher_forcing` a
#'   probability.
#' @export
#' @examples
#' s <- convlstm_sampling_schedule("inverse_sigmoid", k = 3)
#' s
#' round(s(1:10), 3)
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' y <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' history <- convlstm_fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 3,
#'                         batch_size = 4, horizon = 3, verbose = FALSE,
#'                         teacher_forcing = convlstm_sampling_schedule("linear", k = 0.4))
#' history$teacher_forcing # 1, 0.6, 0.2: the p each epoch trained with
#' convlstm_release(model)
convlstm_sampling_schedule <- function(type = c("inverse_sigmoid", "exponential", "linear"), k,
                              min = 0) {
  call <- sys.call()
  type <- check_choice(type, c("inverse_sigmoid", "exponential", "linear"), "type", call = call)
  if (missing(k)) abort_convlstm("`k`, the schedule's rate, is missing.", call = call)
  k <- switch(type,
    inverse_sigmoid = check_number(k, "k", min = 1, call = call),
    exponential = check_number(k, "k", min = 0, max = 1, min_inclusive = FALSE, call = call),
    linear = check_number(k, "k", min = 0, min_inclusive = FALSE, call = call)
  )
  if (type == "exponential" && k == 1) abort_arg("k", "a number in (0, 1) here", k, call)
  min <- check_number(min, "min", min = 0, max = 1, call = call)
  force(type)
  decay <- switch(type,
    inverse_sigmoid = function(i) k / (k + exp(i / k)),
    exponential = function(i) k^i,
    linear = function(i) 1 - k * i
  )
  f <- function(epoch) pmax(min, decay(epoch - 1))
  structure(f, class = c("convlstm_sampling_schedule", "function"), type = type, k = k,
            min = min)
}

#' @export
print.convlstm_sampling_schedule <- function(x, ...) {
  type <- attr(x, "type")
  cat(sprintf("<sampling schedule: %s, k = %s%s>\n", type, format(attr(x, "k")),
              if (type == "linear" || attr(x, "min") > 0) {
                paste0(", min = ", format(attr(x, "min")))
              } else ""))
  cat("p by epoch 1..5:", paste(signif(x(1:5), 4)), "\n")
  invisible(x)
}

# `teacher_forcing` of a train step: TRUE, FALSE or a probability in [0, 1],
# as a double p (TRUE is 1, FALSE 0).
# Without a horizon there are no frames to feed back: FALSE or a p below 1
# there would train as if it were TRUE, so it is refused. horizon_given: a
# horizon was asked for.
check_teacher_forcing <- function(x, horizon_given = TRUE, call = sys.call(-1)) {
  ok <- (is.logical(x) || is.numeric(x)) && length(x) == 1 && is.null(dim(x)) && !is.na(x) &&
    x >= 0 && x <= 1
  if (!ok) abort_arg("teacher_forcing", "TRUE, FALSE or a probability in [0, 1]", x, call)
  if (x < 1 && !horizon_given) {
    abort_convlstm(paste("`teacher_forcing` below 1 (FALSE or a probability) applies with a",
                         "`horizon` (how its frames are fed back); without one there is nothing",
                         "to feed back."), call = call)
  }
  as.double(x)
}

# convlstm_fit()'s `teacher_forcing`: as a step's, or a function of the
# epoch (a schedule). Returns a function of the epoch giving p, checked
# each time it is read (what a user's function returns is known only then).
check_teacher_schedule <- function(x, call = sys.call(-1)) {
  if (!is.function(x)) {
    p <- check_teacher_forcing(x, call = call)
    return(function(epoch) p)
  }
  function(epoch) {
    # a function that cannot be called so (no argument, an error of its own)
    # is named, classed, rather than R's "unused argument"
    p <- tryCatch(x(epoch), error = function(e) {
      abort_convlstm(sprintf("`teacher_forcing` failed for epoch %d: %s", epoch,
                             conditionMessage(e)), call = call)
    })
    ok <- (is.logical(p) || is.numeric(p)) && length(p) == 1 && !is.na(p) && p >= 0 && p <= 1
    if (!ok) {
      abort_convlstm(sprintf(
        "`teacher_forcing` must return a probability in [0, 1] for epoch %d, not %s.", epoch,
        describe(p)), call = call)
    }
    as.double(p)
  }
}

# The coins of one train step with p and a horizon of K frames: NULL when
# none are needed (p is 0 or 1, or nothing is fed back; R's generator is
# then left untouched), else K - 1 integer flags, the k-th 1 with
# probability p: fed-back step k reads the true frame y[, k].
draw_truth <- function(p, K) {
  if (p <= 0 || p >= 1 || K < 2) return(NULL)
  as.integer(stats::runif(K - 1L) < p)
}
