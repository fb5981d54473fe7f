# metrics.R -- the scores forecasters report, computed from a forecast and
# the frames observed: MSE and MAE as means per element (torchmetrics' and
# Keras' unit) or summed per frame as the Moving MNIST literature sums them
# (mse_frame, mae_frame), SSIM (scikit-image's definition), PSNR, Shi et al.'s
# cross-entropy, and the precipitation scores CSI, POD and FAR at
# thresholds, and the fractions skill score (FSS) at thresholds and spatial
# scales as pysteps computes it. Pure R on arrays: it runs no model (convlstm_evaluate() with
# `metrics` runs the model and calls convlstm_forecast_metrics()).

metric_names <- c("mse", "mae", "mse_frame", "mae_frame", "ssim", "psnr", "cross_entropy")

# What each measure's value is, said once: the prints of convlstm_forecast_metrics()
# and of a fit's history (its val_<name> columns) read it.
metric_units <- c(
  mse = "mean squared error per element",
  mae = "mean absolute error per element",
  mse_frame = "squared error summed over a frame's elements",
  mae_frame = "absolute error summed over a frame's elements",
  ssim = "structural similarity, 1 for a perfect frame",
  psnr = "peak signal-to-noise ratio in dB",
  cross_entropy = "Shi et al.'s cross-entropy summed over a frame's elements (overall: per sequence)",
  csi = "critical success index at the threshold",
  pod = "probability of detection at the threshold",
  far = "false alarm ratio at the threshold",
  fss = "fractions skill score at the threshold and scale"
)

# One line "<name>: <unit>" for each kind of measure among `columns`
# (names as convlstm_forecast_metrics() gives them, after `prefix`: "val_" for a
# fit's history); a threshold's columns (csi_0.5, fss_0.5_scale3) share one
# line, csi_*.
metric_footnotes <- function(columns, prefix = "") {
  base <- substring(columns[startsWith(columns, prefix)], nchar(prefix) + 1L)
  exact <- base %in% names(metric_units)
  kind <- ifelse(exact, base, sub("_.*$", "", base))
  keep <- !duplicated(kind) & kind %in% names(metric_units)
  label <- paste0(prefix, kind, ifelse(exact, "", "_*"))
  sprintf("%s: %s", label[keep], metric_units[kind[keep]])
}

# Each of `lines` on a line of its own; nothing for none.
cat_lines <- function(lines) if (length(lines) > 0) cat(paste0(lines, "\n"), sep = "")

#' Score a forecast: MSE, MAE, SSIM, PSNR, cross-entropy, CSI, POD, FAR, FSS
#'
#' Compares forecast frames with the frames observed, frame by frame, with
#' the measures the ConvLSTM literature reports, and averages them over the
#' sequences and over the frames.
#'
#' Per sequence and frame (a frame's pixels over all its channels):
#' \describe{
#'   \item{`mse`, `mae`}{the mean squared and mean absolute error per
#'     element (a pixel of a channel), as torchmetrics and Keras report them
#'     and as the loss `"mse"` / `"mae"` of [convlstm_fit()] is;}
#'   \item{`mse_frame`, `mae_frame`}{the squared and absolute errors *summed*
#'     over the frame's elements, as Moving MNIST results are reported (e.g.
#'     an MSE of about 100 per 64 x 64 frame): `mse` times the elements of a
#'     frame (channels x height x width);}
#'   \item{`ssim`}{the structural similarity of Wang et al. (2004) exactly as
#'     scikit-image's `structural_similarity()` computes it with
#'     `data_range = data_range`, `win_size = ssim_window`,
#'     `use_sample_covariance = True`, `K1 = 0.01`, `K2 = 0.03` and, with
#'     `ssim_gaussian = TRUE`, `gaussian_weights = True` (sigma 1.5, an 11 x 11
#'     window): the mean over the windows that lie wholly inside the frame,
#'     averaged over channels;}
#'   \item{`psnr`}{`10 * log10(data_range^2 / m)` with `m` the mean squared
#'     error over the frame's pixels (`Inf` for a perfect frame);}
#'   \item{`cross_entropy`}{Shi et al. (2015)'s loss,
#'     \eqn{-\sum (y \log p + (1 - y) \log(1 - p))} summed over the frame's
#'     pixels, for `observed` in \[0, 1\]; forecast values are clipped to
#'     \[1e-7, 1 - 1e-7\] first.}
#' }
#' These are averaged over the sequences for each frame (`per_frame`) and
#' then over the frames (`overall`), except `cross_entropy`, whose overall
#' value is per *sequence* (summed over the frames, as Table 1 of Shi et al.
#' reports it).
#'
#' With `thresholds`, each pixel of each frame is an event where its value
#' is at least the threshold, and the forecast's hits H, misses M and false
#' alarms F are counted over all sequences (per frame, and over all frames
#' for `overall`): critical success index `CSI = H / (H + M + F)`,
#' probability of detection `POD = H / (H + M)` and false alarm ratio
#' `FAR = F / (H + F)` (`NaN` where the denominator is 0). The counts are in
#' `contingency`.
#'
#' With `scales` as well, the fractions skill score of Roberts and Lean
#' (2008) at each threshold and scale, as pysteps'
#' `pysteps.verification.spatialscores.fss()` computes it: the event fields
#' `forecast >= threshold` and `observed >= threshold` (0 or 1) of each
#' sequence, frame and channel become fractions, the mean over the
#' `scale x scale` square around each pixel with the cells outside the frame
#' counted as 0 (scipy's `uniform_filter(size = scale, mode = "constant",
#' cval = 0)`; for an even scale the square reaches `scale / 2` pixels up and
#' left of the pixel and `scale / 2 - 1` down and right, as scipy places it;
#' scale 1 is the events themselves), and
#' \deqn{FSS = 1 - \frac{\sum (P_f - P_o)^2}{\sum P_f^2 + \sum P_o^2}}{
#'   FSS = 1 - sum((Pf - Po)^2) / (sum(Pf^2) + sum(Po^2))}
#' with the sums over the pixels of all sequences and channels of a frame
#' (pysteps' `fss_accum()` of each field, then `fss_compute()`), and over all
#' frames for `overall`. It is 1 for a perfect forecast and 0 where no
#' forecast fraction overlaps an observed one. Where neither field has an
#' event (the denominator is 0) it is `NaN`, pysteps' `1 - 0 / 0`.
#'
#' @param forecast,observed Arrays of the same dimensions: frames
#'   `[n, time, channels, height, width]` (as [predict()] with `horizon`
#'   returns them) or one frame per sequence, `[n, channels, height, width]`.
#' @param metrics Which of `"mse"`, `"mae"`, `"mse_frame"`, `"mae_frame"`,
#'   `"ssim"`, `"psnr"` and `"cross_entropy"` to compute. `print()` says
#'   each one's unit under the table.
#' @param thresholds `NULL`, or values at which to count events for CSI,
#'   POD and FAR; each must lie within the range of `observed` (above its
#'   minimum, at most its maximum), so that events and non-events exist.
#'   Column names carry each threshold as `format()` prints it, with 7
#'   significant digits; thresholds that agree to 7 digits are written with
#'   as many as it takes to read back as themselves (at most 17), so the
#'   names are distinct: `csi_0.5` and `csi_0.50000001` for
#'   `c(0.5, 0.50000001)`, `csi_0.3` and `csi_0.30000000000000004` for
#'   `c(0.3, 0.1 + 0.2)`.
#' @param data_range The range of the values (1 for frames in \[0, 1\]): the
#'   peak of PSNR and the scale of SSIM's constants.
#' @param ssim_window Side of SSIM's square window, odd, at least 3 and at
#'   most the frame's height and width (scikit-image's `win_size`).
#' @param ssim_gaussian `TRUE` for Gaussian-weighted windows (sigma 1.5,
#'   11 x 11; `ssim_window` is then not used), as Wang et al. (2004) and
#'   scikit-image's `gaussian_weights = True`.
#' @param scales `NULL`, or the sides of the square neighbourhoods, in
#'   pixels, at which to compute the fractions skill score at each of
#'   `thresholds` (which it needs): distinct positive whole numbers, odd or
#'   even, as pysteps takes them; a scale larger than the frame is allowed
#'   (every pixel's square then covers the whole frame).
#' @return An object of class `convlstm_forecast_metrics`, a list with
#'   \item{per_frame}{a data frame, one row per frame: `frame`, the
#'     metrics, and `csi_<threshold>`, `pod_<threshold>`, `far_<threshold>`,
#'     and with `scales`, `fss_<threshold>_scale<scale>` (e.g.
#'     `fss_0.5_scale3`), thresholds in turn, each at every scale;}
#'   \item{overall}{a named numeric vector of the same measures over all
#'     frames;}
#'   \item{contingency}{`NULL`, or a data frame of `threshold`, `frame`
#'     (`NA` for all frames), `hits`, `misses`, `false_alarms` and
#'     `correct_negatives`;}
#'   \item{n, data_range}{the number of sequences and the range used.}
#' @references Wang, Z., Bovik, A. C., Sheikh, H. R. and Simoncelli, E. P.
#'   (2004). Image quality assessment: from error visibility to structural
#'   similarity. IEEE Transactions on Image Processing 13(4), 600-612.
#'
#'   Shi, X. et al. (2015). Convolutional LSTM network: a machine learning
#'   approach for precipitation nowcasting. NeurIPS.
#'
#'   Roberts, N. M. and Lean, H. W. (2008). Scale-selective verification of
#'   rainfall accumulations from high-resolution forecasts of convective
#'   events. Monthly Weather Review 136(1), 78-97.
#' @seealso [convlstm_evaluate()] with `metrics`, which runs the model and
#'   calls this; [convlstm_moving_mnist()]; [convlstm_grid_windows()] for rain fields.
#' @export
#' @examples
#' d <- convlstm_moving_mnist(n = 4, seed = 1)
#' # the simplest forecast: the last input frame, copied
#' persistence <- d$x[, rep(10, 10), , , , drop = FALSE]
#' m <- convlstm_forecast_metrics(persistence, d$y, metrics = c("mse", "mae", "ssim", "psnr",
#'                       "cross_entropy"), thresholds = c(0.25, 0.5))
#' m
#' m$per_frame[, c("frame", "mse", "ssim", "csi_0.5")]
#' # the fractions skill score over 1, 5 and 9 pixel squares
#' f <- convlstm_forecast_metrics(persistence, d$y, metrics = "mse", thresholds = 0.5,
#'                       scales = c(1, 5, 9))
#' f$overall
convlstm_forecast_metrics <- function(forecast, observed, metrics = c("mse", "mae", "ssim", "psnr"),
                             thresholds = NULL, data_range = 1, ssim_window = 7,
                             ssim_gaussian = FALSE, scales = NULL) {
  call <- sys.call()
  d <- dim(observed)
  observed <- metrics_frames(observed, "observed", NULL, call)
  forecast <- metrics_frames(forecast, "forecast", d, call)
  metrics <- check_metrics(metrics, call)
  data_range <- check_number(data_range, "data_range", min = 0, min_inclusive = FALSE, call = call)
  ssim_gaussian <- check_flag(ssim_gaussian, "ssim_gaussian", call = call)
  weights <- if ("ssim" %in% metrics) ssim_weights(ssim_window, ssim_gaussian, dim(observed), call)
  if (!is.null(thresholds)) thresholds <- check_thresholds(thresholds, observed, call)
  if (!is.null(scales)) scales <- check_scales(scales, thresholds, call)
  if ("cross_entropy" %in% metrics && (min(observed) < 0 || max(observed) > 1)) {
    abort_convlstm(sprintf(
      "`observed` must lie in [0, 1] for the cross-entropy, not in [%s, %s].",
      format(min(observed)), format(max(observed))), call = call)
  }
  n <- dim(observed)[[1]]
  steps <- dim(observed)[[2]]
  # [n, time] of each measure, one value per sequence and frame
  per_seq <- list()
  elements <- prod(dim(observed)[3:5]) # of a frame: channels x height x width
  sq <- if (any(c("mse", "mse_frame", "psnr") %in% metrics)) frame_sums((forecast - observed)^2)
  ab <- if (any(c("mae", "mae_frame") %in% metrics)) frame_sums(abs(forecast - observed))
  if ("mse" %in% metrics) per_seq$mse <- sq / elements
  if ("mae" %in% metrics) per_seq$mae <- ab / elements
  if ("mse_frame" %in% metrics) per_seq$mse_frame <- sq
  if ("mae_frame" %in% metrics) per_seq$mae_frame <- ab
  if ("ssim" %in% metrics) per_seq$ssim <- ssim_frames(forecast, observed, weights, data_range)
  if ("psnr" %in% metrics) per_seq$psnr <- 10 * log10(data_range^2 / (sq / elements))
  if ("cross_entropy" %in% metrics) {
    p <- pmin(pmax(forecast, 1e-7), 1 - 1e-7)
    per_seq$cross_entropy <- frame_sums(-(observed * log(p) + (1 - observed) * log(1 - p)))
  }
  per_frame <- data.frame(frame = seq_len(steps))
  overall <- numeric()
  for (m in names(per_seq)) {
    per_frame[[m]] <- colMeans(per_seq[[m]])
    overall[[m]] <- if (m == "cross_entropy") sum(per_frame[[m]]) else mean(per_frame[[m]])
  }
  contingency <- NULL
  if (!is.null(thresholds)) {
    tables <- lapply(thresholds, contingency_counts, forecast = forecast, observed = observed)
    contingency <- do.call(rbind, tables)
    labels <- threshold_labels(thresholds)
    for (k in seq_along(thresholds)) {
      tab <- tables[[k]]
      label <- labels[[k]]
      scores <- categorical_scores(tab)
      each <- !is.na(tab$frame)
      for (s in names(scores)) {
        per_frame[[paste0(s, "_", label)]] <- scores[[s]][each]
        overall[[paste0(s, "_", label)]] <- scores[[s]][!each]
      }
    }
    for (k in seq_along(thresholds)) {
      for (s in scales) {
        score <- fss_frames(thresholds[[k]], s, forecast, observed)
        name <- paste0("fss_", labels[[k]], "_scale", s)
        per_frame[[name]] <- score$per_frame
        overall[[name]] <- score$overall
      }
    }
  }
  structure(list(per_frame = per_frame, overall = overall, contingency = contingency,
                 n = n, data_range = data_range),
            class = "convlstm_forecast_metrics")
}

#' @export
print.convlstm_forecast_metrics <- function(x, digits = 4, ...) {
  cat(sprintf("<convlstm_forecast_metrics> %d sequence%s, %d frame%s, data range %s\n",
              x$n, if (x$n == 1) "" else "s", nrow(x$per_frame),
              if (nrow(x$per_frame) == 1) "" else "s", format(x$data_range)))
  shown <- x$per_frame
  shown[-1] <- lapply(shown[-1], signif, digits = digits)
  print(shown, row.names = FALSE)
  cat("overall:\n")
  print(signif(x$overall, digits))
  cat_lines(metric_footnotes(names(x$overall)))
  invisible(x)
}

# An observed or forecast array as [n, time, channels, height, width].
metrics_frames <- function(x, arg, like, call) {
  d <- dim(x)
  if (!is.numeric(x) || !length(d) %in% 4:5 || any(d == 0)) {
    abort_arg(arg, "a numeric array [n, time, channels, height, width] or [n, channels, height, width]",
              x, call)
  }
  if (!is.null(like) && !identical(as.integer(d), as.integer(like))) {
    abort_convlstm(sprintf("`%s` must have the dimensions of `observed` (%s), not %s.", arg,
                           paste(like, collapse = " x "), paste(d, collapse = " x ")), call = call)
  }
  check_finite(x, arg, call)
  if (length(d) == 4) dim(x) <- c(d[[1]], 1L, d[-1])
  storage.mode(x) <- "double"
  x
}

check_metrics <- function(metrics, call) {
  if (!is.character(metrics) || length(metrics) < 1 || anyNA(metrics) ||
      !all(metrics %in% metric_names) || anyDuplicated(metrics)) {
    abort_arg("metrics", paste0("distinct names among ", paste0('"', metric_names, '"', collapse = ", ")),
              metrics, call)
  }
  metrics
}

check_thresholds <- function(thresholds, observed, call) {
  lo <- min(observed)
  hi <- max(observed)
  if (!is.numeric(thresholds) || length(thresholds) < 1 || anyNA(thresholds) ||
      any(!is.finite(thresholds)) || anyDuplicated(thresholds)) {
    abort_arg("thresholds", "distinct finite numbers", thresholds, call)
  }
  out <- thresholds <= lo | thresholds > hi
  if (any(out)) {
    abort_convlstm(sprintf(paste0(
      "`thresholds` must lie within the range of `observed` (above %s, at most %s) so that ",
      "events and non-events both occur; %s %s not."),
      format(lo), format(hi), paste(format(thresholds[out]), collapse = ", "),
      if (sum(out) == 1) "is" else "are"), call = call)
  }
  as.double(thresholds)
}

# Labels of distinct thresholds for column names: format()'s 7 significant
# digits, except where two thresholds share them: those get the fewest
# digits (up to 17) that read back as the threshold itself, so the labels
# are distinct and exact.
threshold_labels <- function(thresholds) {
  labels <- vapply(thresholds, format, "", digits = 7)
  clash <- labels %in% labels[duplicated(labels)]
  labels[clash] <- vapply(thresholds[clash], function(t) {
    for (digits in 8:17) {
      label <- format(t, digits = digits)
      if (as.numeric(label) == t) break
    }
    label
  }, "")
  labels
}

check_scales <- function(scales, thresholds, call) {
  if (length(scales) < 1 || !is_whole(scales) || any(scales < 1) ||
      any(scales > .Machine$integer.max) || anyDuplicated(scales)) {
    abort_arg("scales", "distinct positive whole numbers", scales, call)
  }
  if (is.null(thresholds)) {
    abort_convlstm(paste("`scales` needs `thresholds`: the fractions skill score counts",
                         "events at thresholds."), call = call)
  }
  as.integer(scales)
}

# Sums over each frame's channels and pixels: [n, time, c, h, w] -> [n, time].
frame_sums <- function(a) {
  d <- dim(a)
  matrix(rowSums(matrix(a, d[[1]] * d[[2]])), d[[1]], d[[2]])
}

# Hits, misses, false alarms and correct negatives at one threshold, per
# frame (summed over sequences) and over all frames (frame NA).
contingency_counts <- function(threshold, forecast, observed) {
  f <- forecast >= threshold
  o <- observed >= threshold
  count <- function(a) colSums(frame_sums(a))
  per <- data.frame(threshold = threshold, frame = seq_len(dim(observed)[[2]]),
                    hits = count(f & o), misses = count(!f & o),
                    false_alarms = count(f & !o), correct_negatives = count(!f & !o))
  all <- data.frame(threshold = threshold, frame = NA_integer_, hits = sum(per$hits),
                    misses = sum(per$misses), false_alarms = sum(per$false_alarms),
                    correct_negatives = sum(per$correct_negatives))
  rbind(per, all)
}

categorical_scores <- function(tab) {
  ratio <- function(a, b) ifelse(b > 0, a / b, NaN)
  list(csi = ratio(tab$hits, tab$hits + tab$misses + tab$false_alarms),
       pod = ratio(tab$hits, tab$hits + tab$misses),
       far = ratio(tab$false_alarms, tab$hits + tab$false_alarms))
}

# The 1-d weights of SSIM's separable window: scikit-image's uniform
# win_size x win_size filter, or its Gaussian (sigma 1.5, truncated at 3.5
# sigma: radius 5, 11 taps).
ssim_weights <- function(window, gaussian, d, call) {
  if (gaussian) {
    x <- -5:5
    w <- exp(-0.5 * x^2 / 1.5^2)
    w <- w / sum(w)
  } else {
    window <- check_count(window, "ssim_window", min = 3, call = call)
    if (window %% 2 == 0) abort_arg("ssim_window", "an odd whole number", window, call)
    w <- rep(1 / window, window)
  }
  if (length(w) > min(d[4:5])) {
    abort_convlstm(sprintf(
      "SSIM's %d x %d window (`ssim_window`, `ssim_gaussian`) is larger than the %d x %d frames.",
      length(w), length(w), d[[4]], d[[5]]), call = call)
  }
  w
}

# The mean SSIM of each frame, [n, time]: scikit-image's local statistics
# over windows wholly inside the frame (those its crop keeps), the sample
# covariance normalisation N / (N - 1), averaged over channels.
ssim_frames <- function(forecast, observed, w, data_range) {
  d <- dim(observed)
  stack <- function(a) array(a, c(prod(d[1:3]), d[[4]], d[[5]]))
  x <- stack(forecast)
  y <- stack(observed)
  filt <- function(a) valid_filter(valid_filter(a, w, 2L), w, 3L)
  ux <- filt(x)
  uy <- filt(y)
  cov_norm <- length(w)^2 / (length(w)^2 - 1)
  vx <- cov_norm * (filt(x * x) - ux * ux)
  vy <- cov_norm * (filt(y * y) - uy * uy)
  vxy <- cov_norm * (filt(x * y) - ux * uy)
  c1 <- (0.01 * data_range)^2
  c2 <- (0.03 * data_range)^2
  s <- ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux^2 + uy^2 + c1) * (vx + vy + c2))
  per <- rowMeans(matrix(s, dim(s)[[1]]))         # per sequence, frame and channel
  per <- array(per, d[1:3])
  apply(per, c(1, 2), mean)
}

# Correlates the stack a [k, h, w] with the weights w along dimension
# `along` (2 or 3), keeping only the positions where w fits wholly.
valid_filter <- function(a, w, along) {
  m <- dim(a)[[along]] - length(w) + 1L
  out <- 0
  for (j in seq_along(w)) {
    idx <- j - 1L + seq_len(m)
    out <- out + w[[j]] * (if (along == 2L) a[, idx, , drop = FALSE] else a[, , idx, drop = FALSE])
  }
  out
}

# The fractions skill score at one threshold and scale: pysteps' fss_accum()
# over each frame's sequences and channels, fss_compute() per frame and over
# all frames; NaN where neither field has an event.
fss_frames <- function(threshold, scale, forecast, observed) {
  d <- dim(observed)
  stack <- function(a) array(a >= threshold, c(prod(d[1:3]), d[[4]], d[[5]]))
  pf <- box_fraction(stack(forecast), scale)
  po <- box_fraction(stack(observed), scale)
  # back to [n, time, channels, h, w]: per frame, summed over the rest
  per <- function(a) colSums(frame_sums(array(a, d)))
  num <- per((pf - po)^2)
  den <- per(pf^2) + per(po^2)
  skill <- function(num, den) ifelse(den > 0, 1 - num / den, NaN)
  list(per_frame = skill(num, den), overall = skill(sum(num), sum(den)))
}

# The mean of the scale x scale square around each pixel of the stack a
# [k, h, w], zero outside: rows i - scale %/% 2 to i + scale - 1 - scale %/% 2
# (scipy.ndimage's uniform_filter, mode "constant"), columns likewise.
box_fraction <- function(a, scale) {
  box_sum(box_sum(a, scale, 2L), scale, 3L) / scale^2
}

# Window sums along dimension `along` (2 or 3) of a [k, h, w], from running
# sums (exact for counts).
box_sum <- function(a, scale, along) {
  d <- dim(a)
  m <- d[[along]]
  cs <- array(0, replace(d, along, m + 1L))
  for (i in seq_len(m)) {
    if (along == 2L) {
      cs[, i + 1L, ] <- cs[, i, ] + a[, i, ]
    } else {
      cs[, , i + 1L] <- cs[, , i] + a[, , i]
    }
  }
  lo <- scale %/% 2L
  hi <- scale - 1L - lo
  top <- pmin(seq_len(m) + hi, m) + 1L
  bottom <- pmax(seq_len(m) - lo, 1L)
  if (along == 2L) {
    cs[, top, , drop = FALSE] - cs[, bottom, , drop = FALSE]
  } else {
    cs[, , top, drop = FALSE] - cs[, , bottom, drop = FALSE]
  }
}
