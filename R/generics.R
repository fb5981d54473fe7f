# generics.R -- methods of the generics package's generics fit and evaluate
# (which luz and keras use) for a convlstm model, calling convlstm_fit() and
# convlstm_evaluate(). The generics are imported, not re-exported (issue 35:
# an export named fit or evaluate would mask keras's, keras3's and luz's);
# generics::fit(model, ...), or the fit of any package that re-exports it,
# reaches them.

#' @importFrom generics fit
NULL

#' @importFrom generics evaluate
NULL

#' Train and evaluate with the generics::fit() and generics::evaluate() generics
#'
#' `generics::fit(model, x, y, optimizer, ...)` is [convlstm_fit()] and
#' `generics::evaluate(model, x, y, ...)` is [convlstm_evaluate()], for code written
#' against the generics that luz, keras and tidymodels share.
#'
#' @param object For `generics::fit()`: a model made by [convlstm()].
#' @param x For `generics::fit()`: the inputs, as in [convlstm_fit()]. For `generics::evaluate()`:
#'   the model (the generic's first argument is called `x`).
#' @param y Targets, as in [convlstm_fit()].
#' @param optimizer As in [convlstm_fit()].
#' @param newdata For `generics::evaluate()`: the inputs.
#' @param ... Further arguments of [convlstm_fit()] or
#'   [convlstm_evaluate()].
#' @return `generics::fit()`: the history; `generics::evaluate()`: the loss.
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(8 * 3 * 6 * 6), dim = c(8, 3, 1, 6, 6))
#' y <- array(x[, 3, 1, , ], dim = c(8, 1, 6, 6))
#' h <- generics::fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 2, verbose = FALSE)
#' generics::evaluate(model, x, y)
#' convlstm_release(model)
fit.convlstm_model <- function(object, x, y, optimizer, ...) {
  check_dots(list(...), names(formals(convlstm_fit))[-(1:4)], "fit", positional = TRUE)
  convlstm_fit(object, x, y, optimizer, ...)
}

#' @rdname fit.convlstm_model
#' @export
evaluate.convlstm_model <- function(x, newdata, y, ...) {
  check_dots(list(...), names(formals(convlstm_evaluate))[-(1:3)], "evaluate",
             positional = TRUE)
  convlstm_evaluate(x, newdata, y, ...)
}
