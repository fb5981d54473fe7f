# capabilities.R -- the core's capability table (src/core/capability.c) as R
# sees it: convlstm_capabilities() lists it, and require_capabilities() is
# the one R helper that asks it before a call reaches the core (the fit
# loop's options, a plan's data parallelism). step_capabilities() names the
# rows a call's arguments ask for; no R code writes a refusal of its own.

#' What each kind of model supports
#'
#' The capability table of the core: one row per option and kind of model
#' (`"convlstm"`, a plain stack; `"encoder_forecaster"`,
#' [convlstm_forecaster()]; `"convlstm_head"`, a plain stack with a head,
#' `convlstm(head = "top")`), whether that kind supports it and, if not, the
#' reason. Every entry point ([convlstm_train_step()], [convlstm_fit()],
#' [convlstm_memory_estimate()], [convlstm_max_batch_size()], [convlstm_memory_advise()],
#' [convlstm_data()]) refuses an unsupported option with the same classed
#' error (`convlstm_error_unsupported`) and the row's reason as its message,
#' and [convlstm_memory_advise()] offers no configuration the table refuses.
#'
#' @return A data frame with columns `option` (as the argument is written),
#'   `model`, `supported` (logical), `status` (`"ok"` or `"unsupported"`)
#'   and `reason` (`""` when supported).
#' @export
#' @examples
#' caps <- convlstm_capabilities()
#' caps[caps$model == "encoder_forecaster" & !caps$supported, c("option", "reason")]
convlstm_capabilities <- function() {
  as.data.frame(c_capabilities(), stringsAsFactors = FALSE)
}

# Asks the table for each option (a row's `option`) of this model's kind:
# the first one refused stops with the core's error, as the call would.
require_capabilities <- function(model, options) {
  if (length(options) == 0) return(invisible())
  ptr <- model_ptr(model)
  for (option in options) c_model_capability(ptr, option)
  invisible()
}

# A refusal before any model exists (a constructor's argument): the table's
# row for that kind and option, raised as the core raises it.
refuse_by_table <- function(kind, option, call) {
  table <- c_capabilities()
  row <- which(table$model == kind & table$option == option)
  if (length(row) != 1 || isTRUE(table$supported[[row]])) return(invisible())
  abort_convlstm(table$reason[[row]], status = table$status[[row]], call = call)
}

# Whether the model's kind supports each option (no error).
supports <- function(model, options) {
  ptr <- model_ptr(model)
  vapply(options, function(o) {
    tryCatch({
      c_model_capability(ptr, o)
      TRUE
    }, convlstm_error_unsupported = function(e) FALSE)
  }, logical(1), USE.NAMES = FALSE)
}

# The rows of the table a call's arguments ask for (arguments left at their
# defaults ask for none). Values that are not even well formed ask for none:
# the argument's own check names them.
step_capabilities <- function(dtype = NULL, checkpoint = 0, tbptt = 0, recompute_gates = FALSE,
                              accumulation_steps = 1, horizon = NULL, teacher_forcing = TRUE,
                              state = NULL, weight = NULL, target = NULL, data = FALSE,
                              parallel = FALSE) {
  num <- function(x) if (is.numeric(x) && length(x) == 1 && !is.na(x)) x else 0
  c(if (is.character(dtype) && length(dtype) == 1 && dtype %in% c("float16", "bfloat16")) {
      "dtype = float16/bfloat16 training"
    },
    if (num(checkpoint) > 0) "checkpoint",
    if (num(tbptt) > 0) "tbptt",
    if (isTRUE(recompute_gates) || num(recompute_gates) > 0) "recompute_gates",
    if (num(accumulation_steps) > 1) "accumulation_steps",
    if (!is.null(horizon)) "horizon",
    if (is.function(teacher_forcing) || identical(teacher_forcing, FALSE) ||
        is.numeric(teacher_forcing) && num(teacher_forcing) < 1) {
      "teacher_forcing < 1 (free running)"
    },
    if (identical(state, "given") || is.list(state)) "state = given",
    if (identical(state, "carry")) "state = carry",
    if (!is.null(weight)) "weight",
    if (identical(target, "last_state")) "target = last_state",
    if (isTRUE(data)) "data set on the device (convlstm_data)",
    if (isTRUE(parallel)) "data parallel")
}

# The rows of the table convlstm_fit()'s own loop asks for.
fit_capabilities <- function(callbacks = list(), lr_scheduler = NULL, validation_split = 0,
                             resume = NULL, memory_budget = NULL, metrics = NULL) {
  c(if (length(callbacks) > 0) "callbacks",
    if (!is.null(lr_scheduler)) "lr_scheduler",
    if (is.numeric(validation_split) && length(validation_split) == 1 &&
        isTRUE(validation_split > 0)) "validation_split",
    if (!is.null(resume)) "resume",
    if (!is.null(memory_budget)) "memory_budget",
    if (!is.null(metrics)) "metrics")
}
