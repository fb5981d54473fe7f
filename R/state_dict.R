# state_dict.R -- the model's weights as a named list of R arrays, under
# torch's names and shapes, and loading them back with every name and shape
# checked here (the C side only copies).

#' Get and set a model's weights
#'
#' `convlstm_state_dict()` returns the parameters as a named list of arrays with the
#' names and shapes of torch's state dict for the same module:
#' `cell_list.<l>.conv.weight` of dim `[4 * hidden, in + hidden, k, k]` and,
#' with bias, `cell_list.<l>.conv.bias` of length `4 * hidden` (layers count
#' from 0); a layer whose state-to-state kernel differs from its input
#' kernel (`convlstm(recurrent_kernel_sizes =)`) has
#' `cell_list.<l>.conv_x.weight` `[4 * hidden, in, kh, kw]`,
#' `cell_list.<l>.conv_x.bias` and `cell_list.<l>.conv_h.weight`
#' `[4 * hidden, hidden, rkh, rkw]` instead, as a torch cell of two
#' convolutions. Element `[o, i, kh, kw]` of an R array is torch's
#' `w[o - 1, i - 1, kh - 1, kw - 1]`, so weights move between this package,
#' R torch (`as_array()`, `torch_tensor()`) and PyTorch unchanged.
#'
#' `convlstm_load_state_dict()` copies such a list into the model. Values are stored
#' as float32.
#'
#' @param model A model created by [convlstm()].
#' @param state_dict A named list of numeric arrays, as `convlstm_state_dict()`
#'   returns.
#' @param strict If `TRUE`, `state_dict` must have exactly the model's
#'   entries; if `FALSE`, missing entries keep their values and unknown ones
#'   are an error only if none match.
#' @return `convlstm_state_dict()`: a named list of double arrays (biases are plain
#'   vectors). `convlstm_load_state_dict()`: `model`, invisibly.
#' @export
#' @examples
#' set.seed(1)
#' a <- convlstm(1, 4, 3, device = "cpu")
#' b <- convlstm(1, 4, 3, device = "cpu")
#' sd <- convlstm_state_dict(a)
#' str(sd)
#' convlstm_load_state_dict(b, sd)
#' identical(convlstm_state_dict(b), sd)
#' convlstm_release(a); convlstm_release(b)
convlstm_state_dict <- function(model) {
  c_get_tensors(model_ptr(model), grad = FALSE)
}

#' @rdname convlstm_state_dict
#' @export
convlstm_load_state_dict <- function(model, state_dict, strict = TRUE) {
  ptr <- model_ptr(model)
  strict <- check_flag(strict, "strict")
  call <- sys.call()
  if (!is.list(state_dict) || (length(state_dict) > 0 && is.null(names(state_dict)))) {
    abort_arg("state_dict", "a named list of arrays as convlstm_state_dict() returns", state_dict, call)
  }
  info <- c_tensor_info(ptr)
  have <- names(state_dict)
  if (anyNA(have) || any(!nzchar(have)) || anyDuplicated(have)) {
    abort_convlstm("`state_dict` must have unique, non-empty names.", call = call)
  }
  missing <- setdiff(names(info), have)
  extra <- setdiff(have, names(info))
  if (strict && (length(missing) > 0 || length(extra) > 0)) {
    abort_convlstm(paste0(
      "`state_dict` does not match the model:",
      if (length(missing) > 0) paste0("\n  missing: ", paste(missing, collapse = ", ")),
      if (length(extra) > 0) paste0("\n  unexpected: ", paste(extra, collapse = ", ")),
      "\n(use strict = FALSE to load only the matching entries)"
    ), call = call)
  }
  keep <- intersect(have, names(info))
  if (length(keep) == 0 && length(have) > 0) {
    abort_convlstm(sprintf(
      "`state_dict` has no entry of this model (it has %s; the model has %s).",
      paste(utils::head(have, 3), collapse = ", "), paste(names(info), collapse = ", ")
    ), call = call)
  }
  values <- lapply(stats::setNames(keep, keep), function(name) {
    value <- state_dict[[name]]
    want <- info[[name]]
    d <- dim(value) %||% length(value)
    if (!(is.numeric(value) || is.logical(value)) || !identical(as.integer(d), want)) {
      abort_convlstm(sprintf(
        "`state_dict$%s` must be a numeric array of dim %s, not %s.",
        name, format_dims(want), describe(value)
      ), call = call)
    }
    check_finite(value, paste0("state_dict$", name), call)
    storage.mode(value) <- "double"
    value
  })
  c_set_tensors(ptr, values)
  invisible(model)
}
