# convlstm-package.R -- the package's help page and the roxygen tags that
# generate NAMESPACE's useDynLib() line. No code.
# (Not "_PACKAGE": that would also claim the alias `convlstm`, which belongs
# to the constructor's page.)

#' convlstm: convolutional LSTMs trained in C, with exact memory accounting
#'
#' Train the ConvLSTM of the R torch tutorial with one `.Call` per training
#' step. Start with [convlstm()], then [convlstm_train_step()] or [convlstm_fit()];
#' [convlstm_state_dict()] moves weights to and from torch; [convlstm_memory_stats()] shows
#' what the model holds.
#'
#' Errors have class `c("convlstm_error_<status>", "convlstm_error",
#' "error", "condition")`, with `<status>` one of `invalid` (a bad argument),
#' `oom` (an allocation refused: device memory or `memory_limit`),
#' `unsupported` (this build lacks a feature), `backend` (a device call
#' failed), `state` (e.g. a released model, or backward without a training
#' forward) and `internal` (a bug; please report it).
#'
#' The package's help page is `convlstm-package` only: `?convlstm` is the
#' model constructor.
#'
#' @keywords internal
#' @docType package
#' @name convlstm-package
#' @aliases convlstm-package
#' @useDynLib convlstm, .registration = TRUE
NULL
