# profile.R -- memory per batch size, measured: convlstm_memory_profile() runs real
# training steps on random data for each batch size and records the peak of
# every memory category, the reserved memory, the plan's estimate and the
# speed; print() and plot() show the result. Estimates alone (no steps) are
# in estimate.R.

#' Measure memory and speed per batch size
#'
#' For each batch size, runs `steps` real training steps on random data
#' (uniform in \[0, 1\]) and records the peak bytes of every memory category,
#' the peak of all together and of reserved memory, the plan's estimate for
#' that step, and the time per step. This is "measure memory per batch size
#' from an R session": the table and its plot show how each category grows
#' with the batch and where the device's capacity is reached.
#'
#' The steps run on a copy of `model` (same configuration, weights, dtype,
#' device and memory limit), so `model` itself is neither trained nor
#' changed, and R's random number stream is left as it was. A batch size
#' that does not fit (an error of class `convlstm_error_oom`) gets a row
#' with `oom = TRUE` and missing measurements; the others still run.
#'
#' @inheritParams convlstm_memory_estimate
#' @param batch_sizes Batch sizes to run (whole numbers).
#' @param seq_len,height,width The input's number of time steps, height and
#'   width.
#' @param steps Training steps per batch size. The first step of each size
#'   plans and allocates; when `steps > 1` it is not timed. `0` runs nothing:
#'   the category columns then hold the plan's estimate (instant for any
#'   batch size, any budget), `peak`, `reserved` and the timings are `NA`.
#' @param target,optimizer As in [convlstm_train_step()].
#' @param ... Step options passed to [convlstm_train_step()] and [convlstm_memory_estimate()]:
#'   `checkpoint`, `accumulation_steps`, `tbptt`, `recompute_gates`.
#' @return A data frame of class `convlstm_memory_profile`, one row per
#'   batch size, with columns `batch_size`; the peak bytes of each category
#'   (`parameters`, `gradients`, `optimizer`, `activations`, `states`,
#'   `workspace`, `data`); `peak` (all categories together), `reserved`
#'   (peak reserved), `estimate` (the plan's total), `seconds_per_step`,
#'   `samples_per_second` and `oom`. Attributes record the shape, options,
#'   dtype, device and `capacity` (the device's total memory, or the memory
#'   limit). It has `print()` and `plot()` methods.
#' @seealso [convlstm_memory_estimate()] for the estimate alone (any batch size,
#'   instantly), [convlstm_max_batch_size()].
#' @export
#' @examples
#' model <- convlstm(1, c(8, 1), 3, device = "cpu")
#' prof <- convlstm_memory_profile(model, batch_sizes = c(1, 2, 4, 8), seq_len = 4,
#'                        height = 16, width = 16)
#' prof
#' plot(prof)
#' convlstm_release(model)
convlstm_memory_profile <- function(model, batch_sizes, seq_len, height, width, steps = 2,
                           target = c("last_state", "sequence"),
                           optimizer = convlstm_optimizer_adam(), ...) {
  ptr <- model_ptr(model)
  batch_sizes <- check_counts(batch_sizes, "batch_sizes")
  seq_len <- check_count(seq_len, "seq_len")
  height <- check_count(height, "height")
  width <- check_count(width, "width")
  steps <- check_count(steps, "steps", min = 0)
  target <- check_choice(target, c("last_state", "sequence"), "target")
  optimizer <- check_optimizer(optimizer)
  dots <- list(...)
  unknown <- setdiff(names(dots), c("checkpoint", "accumulation_steps", "tbptt",
                                    "recompute_gates"))
  if (length(unknown) > 0 || (length(dots) > 0 && is.null(names(dots)))) {
    abort_convlstm(sprintf(paste(
      "`...` takes only the step options checkpoint, accumulation_steps, tbptt and",
      "recompute_gates, not %s."),
      if (length(unknown) > 0) paste0("`", unknown, "`", collapse = ", ") else "unnamed values"
    ), call = sys.call())
  }
  checkpoint <- dots$checkpoint %||% 0
  accumulation_steps <- dots$accumulation_steps %||% 1
  tbptt <- dots$tbptt %||% 0
  recompute_gates <- check_recompute_gates(dots$recompute_gates %||% FALSE)
  check_step_options(checkpoint, accumulation_steps, tbptt, batch_size = min(batch_sizes),
                     recompute_gates = recompute_gates)

  config <- c_model_config(ptr)
  seed <- get0(".Random.seed", envir = globalenv(), inherits = FALSE)
  on.exit(restore_seed(seed), add = TRUE)
  # estimates alone allocate nothing, so they can ask the model itself
  copy <- if (steps == 0) model else copy_model(model, config)
  if (steps > 0) on.exit(convlstm_release(copy), add = TRUE)
  copy_ptr <- model_ptr(copy)

  C <- config$input_dim
  rows <- lapply(batch_sizes, function(B) {
    est <- convlstm_memory_estimate(copy, B, seq_len, height, width, optimizer = optimizer,
                           checkpoint = checkpoint, accumulation_steps = accumulation_steps,
                           tbptt = tbptt, recompute_gates = recompute_gates, target = target)
    if (steps == 0) {
      eb <- estimate_bytes(est)
      return(data.frame(
        batch_size = B, as.list(eb[mem_categories]), peak = NA_real_, reserved = NA_real_,
        estimate = eb[["total"]], seconds_per_step = NA_real_, samples_per_second = NA_real_,
        oom = FALSE
      ))
    }
    x <- array(stats::runif(B * seq_len * C * height * width), c(B, seq_len, C, height, width))
    yd <- output_dims(dim(x), config, target)
    y <- array(stats::runif(prod(yd)), yd)
    # start each size from the model-wide buffers only, so its peaks are its own
    c_empty_cache(copy_ptr)
    c_memory_reset_peak(copy_ptr)
    times <- numeric(steps)
    oom <- FALSE
    for (i in seq_len(steps)) {
      t0 <- now()
      ok <- tryCatch({
        convlstm_train_step(copy, x, y, optimizer, target = target, checkpoint = checkpoint,
                   accumulation_steps = accumulation_steps, tbptt = tbptt,
                   recompute_gates = recompute_gates)
        TRUE
      }, convlstm_error_oom = function(e) FALSE)
      times[[i]] <- now() - t0
      if (!ok) {
        oom <- TRUE
        break
      }
    }
    s <- c_memory_stats(copy_ptr)
    peaks <- stats::setNames(as.list(s$peak), s$category)[mem_categories]
    sec <- if (oom) NA_real_ else mean(if (steps > 1) times[-1] else times)
    if (oom) peaks[] <- NA_real_
    data.frame(
      batch_size = B, peaks, peak = if (oom) NA_real_ else s$peak_allocated,
      reserved = if (oom) NA_real_ else s$peak_reserved,
      estimate = estimate_bytes(est)[["total"]], seconds_per_step = sec,
      samples_per_second = B / sec, oom = oom
    )
  })
  df <- do.call(rbind, rows)
  capacity <- c_memory_stats(ptr)$device_total
  structure(
    df, class = c("convlstm_memory_profile", "data.frame"),
    shape = c(seq_len = seq_len, height = height, width = width), steps = steps,
    options = list(checkpoint = checkpoint, recompute_gates = recompute_gates,
                   accumulation_steps = accumulation_steps, tbptt = tbptt, outputs = "all"),
    dtype = config$dtype, device = config$device, optimizer = optimizer$kind,
    capacity = capacity
  )
}

as_plain_df <- function(x) {
  class(x) <- "data.frame"
  x
}

# Wall-clock seconds with sub-millisecond resolution (proc.time() has 1 ms,
# too coarse for the small steps of a test or an example).
now <- function() as.numeric(Sys.time())

# One colour per category, the same in every plot.
category_colours <- c(
  parameters = "#4E79A7", gradients = "#F28E2B", optimizer = "#E15759",
  activations = "#76B7B2", states = "#59A14F", workspace = "#EDC948", data = "#B07AA1"
)

# A model with the same configuration and weights as `model`, for runs that
# must not touch the original.
copy_model <- function(model, config) {
  copy <- convlstm(
    config$input_dim, config$hidden_dims, config$kernel_sizes, bias = config$bias,
    dilation = config$dilation, recurrent_kernel_sizes = config$recurrent_kernel_sizes,
    peephole = config$peephole, frame_size = config$frame_size,
    dropout = config$dropout, recurrent_dropout = config$recurrent_dropout,
    dropout_masks = config$dropout_masks,
    device = config$device, dtype = config$dtype,
    memory_limit = if (config$memory_limit > 0) config$memory_limit else NULL,
    threads = if (config$threads > 0) config$threads else NULL
  )
  convlstm_load_state_dict(copy, convlstm_state_dict(model))
  copy
}

restore_seed <- function(seed) {
  if (is.null(seed)) {
    if (exists(".Random.seed", envir = globalenv(), inherits = FALSE)) {
      rm(".Random.seed", envir = globalenv())
    }
  } else {
    assign(".Random.seed", seed, envir = globalenv())
  }
}

#' @export
print.convlstm_memory_profile <- function(x, ...) {
  # a subset (x[rows, cols]) keeps the class but not the attributes
  if (is.null(attr(x, "steps")) || !all(c("batch_size", mem_categories) %in% names(x))) {
    return(print(as_plain_df(x), ...))
  }
  shape <- attr(x, "shape")
  steps <- attr(x, "steps")
  cat(sprintf(
    "<convlstm_memory_profile> %d batch size%s, %d steps of %dx%d, %s on %s%s, %s\n",
    nrow(x), if (nrow(x) == 1) "" else "s", shape[["seq_len"]], shape[["height"]],
    shape[["width"]], attr(x, "dtype"), attr(x, "device"), describe_options(attr(x, "options")),
    if (steps == 0) "estimated (no steps run)"
    else sprintf("%d training step%s each", steps, if (steps == 1) "" else "s")
  ))
  shown <- data.frame(batch = x$batch_size)
  for (cat_name in c(mem_categories, "peak", "reserved", "estimate")) {
    v <- x[[cat_name]]
    if (cat_name %in% mem_categories && all(is.na(v) | v == 0)) next
    shown[[cat_name]] <- ifelse(is.na(v), "-", format_bytes(v))
  }
  if (steps == 0) {
    shown$peak <- shown$reserved <- NULL
  } else {
    shown[["s/step"]] <- ifelse(is.na(x$seconds_per_step), "OOM",
                                formatC(x$seconds_per_step, digits = 3, format = "g"))
    shown[["samples/s"]] <- ifelse(is.na(x$samples_per_second), "-",
                                   formatC(x$samples_per_second, digits = 4, format = "g"))
  }
  print(shown, row.names = FALSE, right = TRUE)
  cat(sprintf("device capacity: %s\n", format_bytes(attr(x, "capacity"))))
  invisible(x)
}

#' Plot memory per batch size
#'
#' Stacked areas of the peak bytes of each memory category against the
#' batch size, the plan's estimate as points on top (measured and estimated
#' totals coincide), batch sizes that ran out of memory as red crosses at
#' their estimate, and the device's capacity as a horizontal line (noted in
#' the legend when it lies far above the data). For a profile of estimates
#' (`steps = 0`) the areas are the estimate's categories. Base graphics.
#'
#' @param x A `convlstm_memory_profile` from [convlstm_memory_profile()].
#' @param y Unused.
#' @param capacity The capacity line, in bytes: the device's (or the memory
#'   limit) by default; `NA` for none.
#' @param log `""` or `"x"` (a logarithmic batch-size axis).
#' @param main Title; by default the shape, dtype and options.
#' @param ... Passed to [plot()].
#' @return `x`, invisibly.
#' @export
plot.convlstm_memory_profile <- function(x, y, capacity = attr(x, "capacity"), log = "",
                                         main = NULL, ...) {
  shape <- attr(x, "shape")
  if (is.null(main) && !is.null(shape)) {
    main <- sprintf("%s per batch size: %d steps of %dx%d, %s%s",
                    if (identical(attr(x, "steps"), 0L)) "Estimated memory" else "Memory",
                    shape[["seq_len"]], shape[["height"]], shape[["width"]], attr(x, "dtype"),
                    describe_options(attr(x, "options")))
  }
  cats <- mem_categories[vapply(mem_categories, function(cn) any(x[[cn]] > 0, na.rm = TRUE),
                                logical(1))]
  ok <- !x$oom
  bs <- x$batch_size
  m <- as.matrix(x[ok, cats, drop = FALSE])
  tops <- c(if (any(ok)) rowSums(m), x$estimate)
  ymax <- max(c(tops, 1), na.rm = TRUE)
  show_cap <- !is.null(capacity) && !is.na(capacity) && capacity > 0
  cap_in_view <- show_cap && capacity <= 4 * ymax
  if (cap_in_view) ymax <- max(ymax, capacity)
  p <- max(0, min(4, floor(log(ymax, 1024))))
  unit <- c("B", "KiB", "MiB", "GiB", "TiB")[[p + 1]]
  scale <- 1024^p
  cols <- category_colours[cats]
  # headroom for the legend in the top left corner
  graphics::plot(range(bs), c(0, ymax / scale * 1.35), type = "n", log = log,
                 xlab = "batch size", ylab = paste0("memory (", unit, ")"), main = main,
                 cex.main = 0.95, font.main = 1, ...)
  if (sum(ok) >= 1) {
    xs <- bs[ok]
    base <- rep(0, sum(ok))
    for (j in seq_along(cats)) {
      top <- base + m[, j]
      if (length(xs) == 1) {
        graphics::segments(xs, base / scale, xs, top / scale, col = cols[[j]], lwd = 8, lend = 1)
      } else {
        graphics::polygon(c(xs, rev(xs)), c(top, rev(base)) / scale, col = cols[[j]],
                          border = NA)
      }
      base <- top
    }
  }
  measured <- !identical(attr(x, "steps"), 0L)
  if (measured) graphics::points(bs[ok], x$estimate[ok] / scale, pch = 19, cex = 0.7)
  if (any(!ok)) graphics::points(bs[!ok], x$estimate[!ok] / scale, pch = 4, col = "red", lwd = 2)
  labels <- c(rev(cats), if (measured) "estimate (plan total)")
  fill <- c(rev(cols), if (measured) NA)
  pch <- c(rep(NA, length(cats)), if (measured) 19)
  lty <- c(rep(0, length(cats)), if (measured) 0)
  colr <- c(rep(NA, length(cats)), if (measured) "black")
  if (any(!ok)) {
    labels <- c(labels, "out of memory")
    fill <- c(fill, NA); pch <- c(pch, 4); lty <- c(lty, 0); colr <- c(colr, "red")
  }
  if (show_cap) {
    if (cap_in_view) graphics::abline(h = capacity / scale, lty = 2, col = "firebrick")
    labels <- c(labels, sprintf("device capacity %s%s", format_bytes(capacity),
                                if (cap_in_view) "" else " (above the plot)"))
    fill <- c(fill, NA); pch <- c(pch, NA); lty <- c(lty, if (cap_in_view) 2 else 0)
    colr <- c(colr, "firebrick")
  }
  graphics::legend("topleft", legend = labels, fill = fill, border = NA, pch = pch, lty = lty,
                   col = colr, bty = "n", cex = 0.8)
  invisible(x)
}
