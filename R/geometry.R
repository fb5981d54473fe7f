# geometry.R -- a layer's kernels and dilation as R takes and shows them:
# `kernel_sizes`, `recurrent_kernel_sizes` and `dilation` in the forms
# convlstm() accepts (a number per layer for square kernels and equal
# dilation, or a list of c(height, width) pairs), and the 6 x n_layers
# integer matrix (rows: input kernel height, width, dilation height, width,
# recurrent kernel height, width) that crosses to C and comes back in the
# model's configuration. Padding is always "same", for each kernel, and
# computed by the core (cl_conv_pad_h / cl_conv_pad_w in
# src/core/backend.h).

geometry_rows <- c("kernel_h", "kernel_w", "dilation_h", "dilation_w", "recurrent_kernel_h",
                   "recurrent_kernel_w")

# x as a 2 x n_layers matrix of (height, width): a numeric vector gives one
# square value per layer (or one for all), a list one value or pair per
# layer (or one for all).
layer_pairs <- function(x, n_layers, arg, what, min = 1, call = sys.call(-1)) {
  bad <- function() {
    abort_arg(arg, sprintf(
      "%s: one positive whole number per layer (or one for all), or a list of c(height, width) pairs",
      what), x, call)
  }
  if (is.list(x) && !is.data.frame(x)) {
    if (!length(x) %in% c(1L, n_layers)) {
      abort_convlstm(sprintf("`%s` must have length 1 or `n_layers` (%d), not %d.", arg, n_layers,
                             length(x)), call = call)
    }
    ok <- vapply(x, function(p) is_whole(p) && length(p) %in% 1:2 && all(p >= min) &&
                   all(p <= .Machine$integer.max), logical(1))
    if (!all(ok)) bad()
    pairs <- vapply(x, function(p) as.integer(rep_len(p, 2)), integer(2))
    if (length(x) == 1) pairs <- pairs[, rep(1L, n_layers), drop = FALSE]
    return(pairs)
  }
  if (!is_whole(x) || length(x) == 0 || any(x < min) || any(x > .Machine$integer.max)) bad()
  v <- recycle_layers(as.integer(x), n_layers, arg, call = call)
  rbind(v, v, deparse.level = 0)
}

# The geometry matrix of convlstm()'s kernel_sizes, dilation and
# recurrent_kernel_sizes (NULL: the input kernels), checked.
layer_geometry <- function(kernel_sizes, dilation, n_layers, call = sys.call(-1),
                           recurrent_kernel_sizes = NULL) {
  k <- odd_kernels(kernel_sizes, n_layers, "kernel_sizes", call)
  d <- layer_pairs(dilation, n_layers, "dilation", "dilations", call = call)
  r <- if (is.null(recurrent_kernel_sizes)) k else
    odd_kernels(recurrent_kernel_sizes, n_layers, "recurrent_kernel_sizes", call)
  g <- rbind(k, d, r)
  storage.mode(g) <- "integer"
  dimnames(g) <- list(geometry_rows, NULL)
  g
}

odd_kernels <- function(x, n_layers, arg, call) {
  k <- layer_pairs(x, n_layers, arg, "odd kernel sizes", call = call)
  if (any(k %% 2 == 0)) {
    abort_arg(arg, "odd (so that \"same\" padding keeps the image size)", x, call)
  }
  k
}

# The forms convlstm() takes, from a geometry matrix: a vector when every
# layer is square (or equally dilated), else a list of pairs.
kernel_spec <- function(g) pair_spec(g[1, ], g[2, ])
dilation_spec <- function(g) pair_spec(g[3, ], g[4, ])
recurrent_kernel_spec <- function(g) pair_spec(g[5, ], g[6, ])
# Whether layer l's two kernels differ (its weight is then two tensors).
split_kernels <- function(g) g[1, ] != g[5, ] | g[2, ] != g[6, ]
pair_spec <- function(h, w) {
  h <- as.integer(h)
  w <- as.integer(w)
  if (identical(h, w)) return(h)
  lapply(seq_along(h), function(l) c(h[[l]], w[[l]]))
}

# A configuration from C (c_model_config(), c_file_info()) in R's forms.
user_config <- function(config) {
  g <- config$geometry
  dimnames(g) <- list(geometry_rows, NULL)
  config$geometry <- g
  config$kernel_sizes <- kernel_spec(g)
  config$dilation <- dilation_spec(g)
  config$recurrent_kernel_sizes <- recurrent_kernel_spec(g)
  peephole_config(config)
}

# "3x3", "3x5 d2x2", and with two kernels "9x9-1x1" (input-to-state, then
# state-to-state, as Shi et al.'s "ConvLSTM(9x9)-1x1") per layer, for
# printing.
geometry_labels <- function(g) {
  k <- paste0(g[1, ], "x", g[2, ])
  k <- ifelse(split_kernels(g), paste0(k, "-", g[5, ], "x", g[6, ]), k)
  dil <- g[3, ] != 1 | g[4, ] != 1
  ifelse(dil, paste0(k, " d", g[3, ], "x", g[4, ]), k)
}
