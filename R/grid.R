# grid.R -- a time series of rasters (a stars object, a terra SpatRaster, a
# netCDF variable read with ncdf4, or a plain array with a time axis) cut
# into input/target windows in the models' [batch, time, channels, height,
# width] layout, and forecasts put back onto the same grid (same class,
# coordinates and reference system, the targets' times). stars, terra and
# ncdf4 stay optional: each is needed only for its own kind of input.

#' Cut a time series of rasters into input and target windows
#'
#' Turns a gridded time series -- a `stars` object, a `terra` `SpatRaster`
#' with a time axis, a variable of an open netCDF file (`ncdf4`), or a plain
#' array -- into overlapping windows of `seq_len` frames followed by the
#' `horizon` frames to forecast, in the layout [convlstm()] models and
#' `predict(model, x, horizon = )` use. [convlstm_grid_restore()] puts forecasts
#' back onto the grid.
#'
#' Frames are `[height, width]` with row 1 the first row of the grid as its
#' source stores it: the `y` dimension of a `stars` object, the raster rows
#' of a `SpatRaster` (north first), the second dimension of a netCDF
#' variable as `ncdf4` reads it. Window `i` starts at frame
#' `1 + (i - 1) * stride`.
#'
#' @param data The series: a `stars` object with dimensions `x`, `y` and a
#'   time dimension (values of class `POSIXct`, `Date` or `PCICt`, or named
#'   `"time"`), and as channels either a fourth dimension or several
#'   attributes (channel `k` is attribute `k`), not both;
#'   a `SpatRaster` whose layers have times ([terra::time()]); an `ncdf4`
#'   object from [ncdf4::nc_open()] with `var`; or a numeric array whose
#'   dimensions are time, height, width and optionally channels, in the
#'   order `layout` (or its dimension names) declares.
#' @param seq_len Frames in each window's input: the input steps, as
#'   `seq_len` is in [convlstm_memory_estimate()].
#' @param horizon Frames to forecast after them.
#' @param stride Frames between the starts of consecutive windows.
#' @param var For an `ncdf4` object: the name of the variable.
#' @param time_dim For a three-dimensional array without `layout` or named
#'   dimensions: which dimension is time (by default the last); the others
#'   are then `[height, width]` in that order. With a layout it must agree
#'   with it.
#' @param layout For an array: its dimension order, one letter per
#'   dimension, `"t"` (time), `"h"` (height), `"w"` (width) once each and
#'   `"c"` (channels) at most once: `"chwt"` for `[channels, height, width,
#'   time]`, `"hwt"` (the default for three dimensions), `"hwct"` for
#'   `[height, width, channels, time]`, `"tchw"`, ... `NULL` reads it from the
#'   names of the array's dimnames when they are `time`, `height`, `width` and
#'   optionally `channel` (a `layout` that contradicts them is an error), else,
#'   for three dimensions, uses `time_dim`. A four-dimensional array's
#'   order cannot be told from its values: it must be declared, by `layout`
#'   or by named dimensions.
#' @param na What to do with missing cells (`NA`, `NaN`): `"refuse"` (an
#'   error that counts them), or `"mask"`: they become 0 in `x` and `y`,
#'   and the result has a loss weight `weight`, shaped as `y`, 0 where the
#'   target cell was missing and 1 elsewhere, to pass with `y` as
#'   `convlstm_fit(weight = )` or `convlstm_train_step(weight = )`. Infinite values
#'   are refused either way.
#' @param ... Nothing: `input`, this argument's name before `seq_len`, is
#'   refused with an error naming `seq_len`.
#' @return An object of class `convlstm_grid_windows`, a list with
#'   \item{x}{array `[n, seq_len, channels, height, width]`;}
#'   \item{y}{array `[n, horizon, channels, height, width]`;}
#'   \item{input_frames, target_frames}{integer matrices `[n, seq_len]` and
#'     `[n, horizon]`: the frames of the series in each window;}
#'   \item{times}{the time of each frame of the series (an integer sequence
#'     for an array);}
#'   \item{grid}{what [convlstm_grid_restore()] needs to rebuild the grid;}
#'   \item{weight}{with `na = "mask"` only: an array shaped as `y`, 1 where
#'     the target cell was observed and 0 where it was missing.}
#' @seealso [convlstm_grid_restore()]; [convlstm_forecast_metrics()] for CSI, POD and FAR;
#'   `vignette("rain", package = "convlstm")`.
#' @export
#' @examples
#' # a plain array [height, width, time]: a blob drifting east
#' series <- array(0, c(12, 16, 8))
#' for (t in 1:8) series[5:8, t + 0:3, t] <- 1
#' w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2)
#' dim(w$x)   # [4, 3, 1, 12, 16]
#' dim(w$y)   # [4, 2, 1, 12, 16]
#' w$target_frames
#'
#' # real rain: NCEP Stage IV hourly precipitation, with stars
#' if (requireNamespace("stars", quietly = TRUE)) {
#'   f <- system.file("nc/test_stageiv_xyt.nc", package = "stars")
#'   rain <- suppressMessages(stars::read_stars(f))
#'   w <- convlstm_grid_windows(rain, seq_len = 4, horizon = 2, stride = 3)
#'   dim(w$x)
#'   range(w$times)
#' }
convlstm_grid_windows <- function(data, seq_len, horizon, stride = 1, var = NULL, time_dim = NULL,
                         layout = NULL, na = c("refuse", "mask"), ...) {
  call <- sys.call()
  dots <- list(...)
  if ("input" %in% names(dots)) {
    abort_renamed_arg("input", "seq_len", "the input frames of each window, as `seq_len` is in convlstm_memory_estimate().", call)
  }
  check_dots(dots, character(), "convlstm_grid_windows", names = "seq_len", call = call)
  input <- check_count(seq_len, "seq_len", call = call)
  horizon <- check_count(horizon, "horizon", call = call)
  stride <- check_count(stride, "stride", call = call)
  if (!is.character(na) || length(na) < 1 || !na[[1]] %in% c("refuse", "mask")) {
    abort_arg("na", '"refuse" or "mask"', na, call)
  }
  na <- na[[1]]
  if (!is.null(layout) && !(is.array(data) && (is.numeric(data) || is.logical(data)))) {
    abort_arg("layout", "NULL unless `data` is an array", layout, call)
  }
  series <- grid_read(data, var, time_dim, layout, call)
  frames <- series$frames # [time, channels, height, width]
  missing <- if (na == "mask") is.na(frames) else NULL
  if (!is.null(missing)) frames[missing] <- 0
  check_finite(frames, "data", call)
  steps <- dim(frames)[[1]]
  if (input + horizon > steps) {
    abort_convlstm(sprintf(
      "`seq_len` + `horizon` (%d + %d frames) is longer than the series (%d frames).",
      input, horizon, steps), call = call)
  }
  starts <- seq(1L, steps - input - horizon + 1L, by = stride)
  input_frames <- outer(starts, seq_len(input) - 1L, `+`)
  target_frames <- outer(starts, input + seq_len(horizon) - 1L, `+`)
  take <- function(idx) {
    out <- frames[as.vector(t(idx)), , , , drop = FALSE] # window by window
    d <- dim(frames)
    dim(out) <- c(ncol(idx), length(starts), d[-1])
    aperm(out, c(2, 1, 3, 4, 5))
  }
  out <- list(x = take(input_frames), y = take(target_frames),
              input_frames = input_frames, target_frames = target_frames,
              times = series$times, grid = series$grid)
  if (!is.null(missing)) {
    frames <- array(as.double(!missing), dim(frames)) # 1 where observed, 0 where NA
    out$weight <- take(target_frames)
  }
  structure(out, class = "convlstm_grid_windows")
}

#' @export
print.convlstm_grid_windows <- function(x, ...) {
  d <- dim(x$x)
  cat(sprintf(paste0("<convlstm_grid_windows> %d window%s of %d input and %d target frames, ",
                     "%d channel%s, %d x %d, from %s %s\n"),
              d[[1]], if (d[[1]] == 1) "" else "s", d[[2]], dim(x$y)[[2]], d[[3]],
              if (d[[3]] == 1) "" else "s", d[[4]], d[[5]], article(x$grid$kind), x$grid$kind))
  invisible(x)
}

# "an" before a vowel ("an array"), "a" otherwise ("a stars object", "a
# SpatRaster", "a netCDF variable").
article <- function(word) if (grepl("^[aeiouAEIOU]", word)) "an" else "a"

#' Put forecast frames back onto the grid they came from
#'
#' The inverse of [convlstm_grid_windows()] for one window: frames in the models'
#' layout become an object of the series' own kind, on its grid, at the
#' times of that window's targets. A `stars` object keeps its dimensions,
#' coordinates, reference system and units; a `SpatRaster` its extent,
#' resolution, reference system and layer times; an array its dimension
#' order and names. For an `ncdf4` series the frames are written to a new
#' netCDF file at `path` with the variable's dimensions, coordinate values,
#' units and the targets' times, plus any variable of the source file
#' defined on its two spatial dimensions only (latitude and longitude of a
#' curvilinear grid, for instance).
#'
#' @param frames The forecasts: `[n, horizon, channels, height, width]` with
#'   a row per window (as `predict(model, windows$x, horizon = )` returns
#'   them; row `window` is used), or one window's, `[1, horizon, channels,
#'   height, width]` or `[horizon, channels, height, width]`.
#' @param windows What [convlstm_grid_windows()] returned.
#' @param window Which window the frames forecast: their times are that
#'   window's target times.
#' @param path For an `ncdf4` series: the netCDF file to write (it must not
#'   exist).
#' @return A `stars` object, a `SpatRaster`, an array, or for an `ncdf4`
#'   series `path`, invisibly.
#' @seealso [convlstm_grid_windows()].
#' @export
#' @examples
#' series <- array(0, c(12, 16, 8))
#' for (t in 1:8) series[5:8, t + 0:3, t] <- 1
#' w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2)
#' persistence <- w$x[, rep(3, 2), , , , drop = FALSE] # the last input frame, copied
#' back <- convlstm_grid_restore(persistence, w, window = 4)
#' dim(back)   # [12, 16, 2]: the array's own layout
#' identical(back[, , 1], series[, , 6])
#'
#' if (requireNamespace("stars", quietly = TRUE)) {
#'   f <- system.file("nc/test_stageiv_xyt.nc", package = "stars")
#'   rain <- suppressMessages(stars::read_stars(f))
#'   w <- convlstm_grid_windows(rain, seq_len = 4, horizon = 2)
#'   convlstm_grid_restore(w$x[, c(4, 4), , , , drop = FALSE], w, window = 10)
#' }
convlstm_grid_restore <- function(frames, windows, window = 1, path = NULL) {
  call <- sys.call()
  if (!inherits(windows, "convlstm_grid_windows")) {
    abort_arg("windows", "what convlstm_grid_windows() returned", windows, call)
  }
  n <- nrow(windows$target_frames)
  window <- check_count(window, "window", call = call)
  if (window > n) {
    abort_convlstm(sprintf("`window` (%d) must be at most the number of windows (%d).", window, n),
                   call = call)
  }
  target <- dim(windows$y)[-1]
  d <- dim(frames)
  if (!is.numeric(frames) || !(identical(as.integer(d[-1]), as.integer(target)) && length(d) == 5 ||
                                identical(as.integer(d), as.integer(target)))) {
    abort_arg("frames", sprintf("a numeric array [n, %s] or [%s] (the windows' targets)",
                                paste(target, collapse = ", "), paste(target, collapse = ", ")),
              frames, call)
  }
  if (length(d) == 5) {
    if (d[[1]] != n && d[[1]] != 1L) {
      abort_convlstm(sprintf(
        "`frames` must have one row per window (%d) or a single row, not %d rows.", n, d[[1]]),
        call = call)
    }
    frames <- frames[if (d[[1]] == 1L) 1L else window, , , , , drop = TRUE]
    dim(frames) <- target
  }
  grid_write(frames, windows$grid, windows$target_frames[window, ], windows$times, path, call)
}

# ---- reading: each kind of series to [time, channels, height, width] --------

grid_read <- function(data, var, time_dim, layout, call) {
  if (inherits(data, "stars")) return(grid_read_stars(data, call))
  if (inherits(data, "SpatRaster")) return(grid_read_terra(data, call))
  if (inherits(data, "ncdf4")) return(grid_read_ncdf4(data, var, call))
  if (is.array(data) && (is.numeric(data) || is.logical(data))) {
    return(grid_read_array(data, time_dim, layout, call))
  }
  abort_arg("data", "a stars object, a SpatRaster, an ncdf4 object or a numeric array", data, call)
}

need_package <- function(pkg, what, call) {
  if (!requireNamespace(pkg, quietly = TRUE)) {
    abort_convlstm(sprintf("%s needs the package '%s': install.packages(\"%s\").", what, pkg, pkg),
                   status = "unsupported", call = call)
  }
}

no_time_axis <- function(arg, what, call) {
  abort_convlstm(sprintf("`%s` has no time axis: %s.", arg, what), call = call)
}

# plain doubles; NA, NaN and Inf are convlstm_grid_windows()'s to refuse or mask
grid_frames_finite <- function(frames, call) {
  dim(frames) <- unname(dim(frames))
  storage.mode(frames) <- "double"
  frames
}

grid_read_stars <- function(data, call) {
  need_package("stars", "A stars series", call)
  if (inherits(data, "stars_proxy")) data <- stars::st_as_stars(data) # read the cells
  if (length(data) < 1) abort_arg("data", "a stars object with at least one attribute", data, call)
  dims <- stars::st_dimensions(data)
  xy <- attr(dims, "raster")$dimensions
  is_time <- vapply(names(dims), function(nm) {
    v <- stars::st_get_dimension_values(data, nm)
    inherits(v, c("POSIXct", "Date", "PCICt")) || identical(nm, "time")
  }, logical(1))
  if (!any(is_time)) {
    no_time_axis("data", paste0("none of its dimensions (", paste(names(dims), collapse = ", "),
                                ") holds times or is named \"time\""), call)
  }
  time_name <- names(dims)[is_time][[1]]
  other <- setdiff(names(dims), c(xy, time_name))
  if (length(other) > 1 || !all(xy %in% names(dims))) {
    abort_convlstm(sprintf(
      "`data` must have the dimensions x, y, time and at most one more (channels), not %s.",
      paste(names(dims), collapse = ", ")), call = call)
  }
  attrs <- length(data)
  if (attrs > 1 && length(other) > 0) {
    abort_convlstm(sprintf(paste0(
      "`data` has %d attributes and a dimension \"%s\": the channels are either its attributes ",
      "or that dimension (merge them with stars' merge() or split())."), attrs, other), call = call)
  }
  order <- match(c(time_name, other, xy[[2]], xy[[1]]), names(dims))
  # each attribute [time, (channels,) rows, cols]; several attributes are the channels, in order
  frames <- lapply(seq_len(attrs), function(k) {
    aperm(array(as.vector(unclass(data[[k]])), dim(data[[k]])), order)
  })
  frames <- array(unlist(frames, use.names = FALSE), c(dim(frames[[1]]), attrs))
  d <- dim(frames)
  if (length(other) == 0) {
    # [time, rows, cols, attributes] -> [time, attributes, rows, cols]
    frames <- aperm(frames, c(1, 4, 2, 3))
  } else {
    dim(frames) <- d[-length(d)]
  }
  list(frames = grid_frames_finite(frames, call),
       times = stars::st_get_dimension_values(data, time_name),
       grid = list(kind = "stars object", template = data, names = names(dims), order = order,
                   time = time_name, channels = length(other) > 0))
}

grid_read_terra <- function(data, call) {
  need_package("terra", "A SpatRaster series", call)
  times <- terra::time(data)
  if (length(times) == 0 || all(is.na(times))) {
    no_time_axis("data", "its layers have no times (set them with terra::time(data) <- ...)", call)
  }
  a <- terra::as.array(data) # [rows, cols, layers]
  frames <- aperm(a, c(3, 1, 2))
  dim(frames) <- c(dim(a)[[3]], 1L, dim(a)[1:2])
  list(frames = grid_frames_finite(frames, call), times = times,
       grid = list(kind = "SpatRaster", template = data))
}

grid_read_ncdf4 <- function(data, var, call) {
  ax <- grid_ncdf4_axes(data, var, call)
  a <- ncdf4::ncvar_get(data, var, collapse_degen = FALSE)
  list(frames = grid_frames_finite(grid_ncdf4_frames(a, ax), call), times = ax$dims[[ax$t_at]]$vals,
       grid = list(kind = "netCDF variable", nc = data, var = var, time_at = ax$t_at,
                   spatial = ax$sp))
}

# A netCDF variable's axes, checked: its dims, which is time (t_at) and the
# spatial ones (sp, in ncdf4's order: x (columns) first, then y (rows)).
# Also read by the frame file writer, which reads the time axis in chunks.
grid_ncdf4_axes <- function(data, var, call) {
  need_package("ncdf4", "A netCDF series", call)
  if (!is.character(var) || length(var) != 1 || !var %in% names(data$var)) {
    abort_arg("var", paste0("the name of one of the file's variables (",
                            paste0('"', names(data$var), '"', collapse = ", "), ")"), var, call)
  }
  v <- data$var[[var]]
  dims <- v$dim
  is_time <- vapply(dims, function(d) identical(d$name, "time") || grepl(" since ", d$units),
                    logical(1))
  if (!any(is_time)) {
    no_time_axis("data", sprintf("variable \"%s\" has no dimension named time or in units \"... since ...\"",
                                 var), call)
  }
  if (length(dims) != 3) {
    abort_convlstm(sprintf("`var` (\"%s\") must have two spatial dimensions and time, not %d dimensions.",
                           var, length(dims)), call = call)
  }
  t_at <- which(is_time)[[1]]
  list(dims = dims, t_at = t_at, sp = setdiff(seq_along(dims), t_at))
}

# ncdf4's values of some times, in the variable's order, as frames
# [time, 1, rows, columns].
grid_ncdf4_frames <- function(a, ax) {
  frames <- aperm(a, c(ax$t_at, ax$sp[[2]], ax$sp[[1]]))
  dim(frames) <- c(dim(frames)[[1]], 1L, dim(frames)[-1])
  frames
}

# The array's layout: one letter per dimension, "t" (time), "h" (height),
# "w" (width) once each and "c" (channels) at most once. From `layout`, or
# from the names of the array's dimnames (time, channel, height, width), or
# by default the others in the order [channels,] height, width with time at
# `time_dim` (the last by default).
grid_layout <- function(data, time_dim, layout, call) {
  d <- dim(data)
  n <- length(d)
  letters_ok <- function(l) {
    length(l) == n && !anyDuplicated(l) && all(l %in% c("c", "h", "w", "t")) &&
      all(c("h", "w", "t") %in% l)
  }
  if (!is.null(time_dim)) time_dim <- check_count(time_dim, "time_dim", call = call)
  dn <- names(dimnames(data))
  named <- NULL
  if (!is.null(dn) && all(dn %in% c("channel", "height", "width", "time"))) {
    named <- c(channel = "c", height = "h", width = "w", time = "t")[dn]
    if (!letters_ok(named)) named <- NULL
  }
  if (!is.null(layout)) {
    if (!is.character(layout) || length(layout) != 1 || is.na(layout) ||
        !letters_ok(strsplit(layout, "")[[1]])) {
      abort_arg("layout", sprintf(paste0(
        "one letter per dimension of the %d-dimensional array: \"t\", \"h\" and \"w\" once each ",
        "and \"c\" at most once (\"%s\")"), n, if (n == 4) "chwt" else "hwt"), layout, call)
    }
    l <- strsplit(layout, "")[[1]]
    if (!is.null(named) && !identical(unname(named), l)) {
      abort_convlstm(sprintf("`layout` (\"%s\") contradicts the array's named dimensions (%s).",
                             layout, paste(dn, collapse = ", ")), call = call)
    }
  } else if (!is.null(named)) {
    l <- unname(named)
  } else {
    if (n == 4) { # [C, H, W, T] and [H, W, C, T] alike have four numbers: say which
      abort_convlstm(paste0(
        "A four-dimensional array's order cannot be told from its values: declare it with ",
        "`layout` (\"chwt\" for [channels, height, width, time], \"hwct\", \"tchw\", ...) or ",
        "with dimnames named channel, height, width and time."), call = call)
    }
    if (is.null(time_dim)) time_dim <- n
    if (time_dim > n) {
      abort_convlstm(sprintf("`time_dim` (%d) must be one of the array's %d dimensions.",
                             time_dim, n), call = call)
    }
    l <- append(if (n == 4) c("c", "h", "w") else c("h", "w"), "t", after = time_dim - 1L)
  }
  if (!is.null(time_dim) && !identical(match("t", l), as.integer(time_dim))) {
    abort_convlstm(sprintf("`time_dim` (%s) contradicts the layout \"%s\" (time is dimension %d).",
                           format(time_dim), paste(l, collapse = ""), match("t", l)), call = call)
  }
  l
}

grid_read_array <- function(data, time_dim, layout, call) {
  d <- dim(data)
  if (!length(d) %in% 3:4) {
    abort_arg("data", "an array [height, width] or [channels, height, width] plus a time dimension",
              data, call)
  }
  l <- grid_layout(data, time_dim, layout, call)
  perm <- match(intersect(c("t", "c", "h", "w"), l), l) # the array's dims in [time, (c,) h, w]
  frames <- aperm(data, perm)
  if (length(d) == 3) dim(frames) <- c(d[[perm[[1]]]], 1L, d[perm[-1]])
  list(frames = grid_frames_finite(frames, call), times = seq_len(d[[perm[[1]]]]),
       grid = list(kind = "array", dim = d, dimnames = dimnames(data), time_dim = perm[[1]],
                   perm = perm))
}

# ---- writing: [horizon, channels, height, width] back to the series' kind ---

grid_write <- function(frames, grid, idx, times, path, call) {
  switch(grid$kind,
    "stars object" = grid_write_stars(frames, grid, idx, call),
    "SpatRaster" = grid_write_terra(frames, grid, idx, call),
    "netCDF variable" = grid_write_ncdf4(frames, grid, idx, times, path, call),
    "array" = grid_write_array(frames, grid, idx)
  )
}

grid_write_stars <- function(frames, grid, idx, call) {
  need_package("stars", "A stars series", call)
  out <- grid$template
  args <- rep(list(quote(expr = )), length(grid$names) + 1L)
  args[[match(grid$time, grid$names) + 1L]] <- idx
  out <- do.call(`[`, c(list(out), args))
  for (k in seq_along(out)) {
    # several attributes: channel k is attribute k
    f <- if (length(out) > 1) frames[, k, , , drop = FALSE] else frames
    if (!grid$channels) dim(f) <- dim(f)[-2]
    vals <- aperm(f, order(grid$order))
    a <- out[[k]]
    a[] <- vals # keeps the attribute's class and units
    out[[k]] <- a
  }
  out
}

grid_write_terra <- function(frames, grid, idx, call) {
  need_package("terra", "A SpatRaster series", call)
  out <- grid$template[[idx]]
  # terra's cells run along rows: [cols, rows, layers] flattened
  vals <- aperm(frames[, 1L, , , drop = FALSE], c(4, 3, 1, 2))
  terra::setValues(out, matrix(vals, ncol = length(idx)))
}

grid_write_array <- function(frames, grid, idx) {
  d <- grid$dim
  d[[grid$time_dim]] <- length(idx)
  inner <- if (length(d) == 3) frames[, 1L, , , drop = TRUE] else frames
  dim(inner) <- d[grid$perm]
  out <- aperm(inner, order(grid$perm))
  if (!is.null(grid$dimnames)) {
    dn <- grid$dimnames
    if (!is.null(dn[[grid$time_dim]])) dn[[grid$time_dim]] <- dn[[grid$time_dim]][idx]
    dimnames(out) <- dn
  }
  out
}

grid_write_ncdf4 <- function(frames, grid, idx, times, path, call) {
  need_package("ncdf4", "A netCDF series", call)
  if (!is.character(path) || length(path) != 1 || is.na(path) || !nzchar(path)) {
    abort_arg("path", "the path of the netCDF file to write", path, call)
  }
  if (file.exists(path)) {
    abort_convlstm(sprintf("`path` (\"%s\") exists already; give a new file.", path), call = call)
  }
  nc <- grid$nc
  v <- nc$var[[grid$var]]
  src <- v$dim
  remake <- function(d, vals = d$vals, unlim = FALSE) {
    ncdf4::ncdim_def(d$name, d$units, vals, unlim = unlim, create_dimvar = isTRUE(d$create_dimvar),
                     longname = d$longname %||% d$name)
  }
  # netCDF allows an unlimited dimension only as the slowest-varying one
  # (the last in ncdf4's order): time elsewhere is written fixed-length
  dims <- lapply(seq_along(src), function(k) {
    if (k == grid$time_at) {
      remake(src[[k]], vals = times[idx], unlim = k == length(src))
    } else {
      remake(src[[k]])
    }
  })
  spatial_names <- vapply(src[grid$spatial], `[[`, "", "name")
  fill <- if (is.null(v$missval) || is.na(v$missval)) NA else v$missval
  main <- ncdf4::ncvar_def(v$name, v$units, dims, missval = fill, longname = v$longname,
                           prec = "float")
  # auxiliary coordinates (latitude, longitude, ...) on the two spatial dims
  aux <- Filter(function(a) {
    a$name != v$name && length(a$dim) == 2 &&
      setequal(vapply(a$dim, `[[`, "", "name"), spatial_names)
  }, nc$var)
  aux_defs <- lapply(aux, function(a) {
    ad <- dims[match(vapply(a$dim, `[[`, "", "name"), vapply(dims, `[[`, "", "name"))]
    ncdf4::ncvar_def(a$name, a$units, ad, missval = NA, longname = a$longname, prec = "double")
  })
  tmp <- paste0(path, ".part")
  out <- ncdf4::nc_create(tmp, c(list(main), unname(aux_defs)))
  ok <- FALSE
  on.exit(if (!ok) unlink(tmp), add = TRUE)
  # [horizon, 1, rows, cols] -> the variable's own order (x, y, time in ncdf4)
  first <- frames[, 1L, , , drop = FALSE]
  dim(first) <- dim(frames)[-2] # [horizon, rows, cols], a horizon of 1 kept
  ordered <- aperm(first, c(3, 2, 1))
  dim(ordered) <- c(dim(frames)[[4]], dim(frames)[[3]], dim(frames)[[1]])
  perm <- order(c(grid$spatial[[1]], grid$spatial[[2]], grid$time_at))
  ncdf4::ncvar_put(out, main, aperm(ordered, perm))
  for (k in seq_along(aux)) ncdf4::ncvar_put(out, aux_defs[[k]], ncdf4::ncvar_get(nc, aux[[k]]$name))
  # the attributes that carry the georeference (coordinates, grid_mapping,
  # Conventions, ...), copied as they are
  copy_atts <- function(from, to) {
    atts <- ncdf4::ncatt_get(nc, from)
    skip <- c("_FillValue", "missing_value", "units", "long_name")
    for (a in setdiff(names(atts), skip)) ncdf4::ncatt_put(out, to, a, atts[[a]])
  }
  copy_atts(0, 0)
  copy_atts(v$name, main)
  for (k in seq_along(aux)) copy_atts(aux[[k]]$name, aux_defs[[k]])
  ncdf4::nc_close(out)
  file.rename(tmp, path)
  ok <- TRUE
  invisible(path)
}
