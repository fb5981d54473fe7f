# dropout.R -- dropout's R side: the rates convlstm() takes, whether a model
# has any, and, for tests, masks given instead of drawn. The masks of a
# training call are drawn by the core into its planned buffers from a seed
# taken from R's generator (src/r_dropout.c, src/core/dropout.c); see
# convlstm()'s `dropout`.

# A dropout rate per layer: one value for every layer or one per layer,
# each in [0, 1) (1 would drop everything and scale by 1 / 0).
check_rates <- function(x, arg, n_layers, call = sys.call(-1)) {
  if (!is.numeric(x) || !(length(x) %in% c(1, n_layers)) || anyNA(x) || any(!is.finite(x)) ||
      any(x < 0) || any(x >= 1)) {
    abort_arg(arg, sprintf("a number in [0, 1), one for every layer or one per layer (%d)",
                           n_layers), x, call)
  }
  rep_len(as.double(x), n_layers)
}

has_dropout <- function(config) any(config$dropout > 0) || any(config$recurrent_dropout > 0)

# Tests: dropout masks given instead of drawn (src/r_dropout.c), set by
# local_dropout_masks() for the calls made meanwhile.
with_fixed_masks <- function(options) {
  masks <- the$dropout_masks
  if (is.null(masks)) return(options)
  c(options %||% c_step_options(), list(dropout_masks = masks))
}

# masks: per layer the input mask then the h mask, each an array [batch,
# channels, height, width] or NULL where that rate is 0. Until `envir` ends,
# every training call takes these instead of drawing its own.
local_dropout_masks <- function(masks, envir = parent.frame()) {
  old <- the$dropout_masks
  the$dropout_masks <- masks
  do.call(on.exit, list(substitute(the$dropout_masks <- old, list(old = old)), add = TRUE),
          envir = envir)
  invisible()
}

