# source_grid.R -- a raster series on disk as a data source (issue 36): the
# windows convlstm_grid_windows() would cut, read frame by frame as a fit
# asks for them, so that a series larger than memory trains without being
# loaded. Each kind of series is opened into a "lazy series": its length,
# the shape of a frame and a function reading some of its frames as
# [time, channels, height, width], the layout grid.R's readers produce.

#' Use a raster series on disk as a data source
#'
#' The windows of [convlstm_grid_windows()] -- `seq_len` input frames and the
#' `horizon` frames after them, window `i` starting at frame
#' `1 + (i - 1) * stride` -- as a source [convlstm_fit()] takes, reading only
#' the frames of the windows each batch asks for: from a `stars_proxy`
#' (`stars::read_stars(proxy = TRUE)`) of x, y and time whose attributes are
#' each one file with the times as bands (only those bands are read) or one
#' file per time (only those files), a `SpatRaster` backed by files, or
#' a variable of an open netCDF file (`ncdf4`, read with `start`/`count` along
#' its time axis). A batch equals the same rows of
#' `convlstm_grid_windows(data, ...)`'s `x` and `y`. In-memory `stars`
#' objects and arrays work too (they are sliced where they are).
#'
#' Missing cells are refused batch by batch (the error names the batch); to
#' train through them with a loss weight, use `convlstm_grid_windows(na =
#' "mask")`, whose arrays fit in memory, or write the series to a frame file
#' with the missing cells filled ([convlstm_frame_file_write()]).
#'
#' @inheritParams convlstm_grid_windows
#' @param data The series: a `stars` or `stars_proxy` object, a `SpatRaster`
#'   whose layers have times, an `ncdf4` object with `var`, or an array as
#'   [convlstm_grid_windows()] takes it.
#' @return A `convlstm_source` with, besides the common fields, the series'
#'   `times` and each window's `input_frames` and `target_frames`.
#' @seealso [convlstm_grid_windows()], [convlstm_source_frames()],
#'   [convlstm_source_read()].
#' @export
#' @examples
#' series <- array(0, c(12, 16, 8)) # [height, width, time]
#' for (t in 1:8) series[5:8, t + 0:3, t] <- 1
#' src <- convlstm_source_grid(series, seq_len = 3, horizon = 2)
#' src
#' b <- convlstm_source_read(src, 2:3)
#' identical(b$x, convlstm_grid_windows(series, 3, 2)$x[2:3, , , , , drop = FALSE])
#'
#' # a netCDF file read a few hours at a time
#' if (requireNamespace("ncdf4", quietly = TRUE) && requireNamespace("stars", quietly = TRUE)) {
#'   nc <- ncdf4::nc_open(system.file("nc/test_stageiv_xyt.nc", package = "stars"))
#'   rain <- "Total_precipitation_surface_1_Hour_Accumulation"
#'   src <- convlstm_source_grid(nc, seq_len = 4, horizon = 2, var = rain)
#'   print(dim(convlstm_source_read(src, 1)$x)) # [1, 4, 1, 118, 87]
#'   ncdf4::nc_close(nc)
#' }
convlstm_source_grid <- function(data, seq_len, horizon, stride = 1, var = NULL, time_dim = NULL,
                                 layout = NULL) {
  call <- sys.call()
  input <- check_count(seq_len, "seq_len", call = call)
  horizon <- check_count(horizon, "horizon", call = call)
  stride <- check_count(stride, "stride", call = call)
  s <- grid_lazy(data, var, time_dim, layout, call)
  if (input + horizon > s$steps) {
    abort_convlstm(sprintf(
      "`seq_len` + `horizon` (%d + %d frames) is longer than the series (%d frames).",
      input, horizon, s$steps), call = call)
  }
  starts <- seq(1L, s$steps - input - horizon + 1L, by = stride)
  input_frames <- outer(starts, seq_len(input) - 1L, `+`)
  target_frames <- outer(starts, input + seq_len(horizon) - 1L, `+`)
  read <- function(rows) {
    idx <- cbind(input_frames[rows, , drop = FALSE], target_frames[rows, , drop = FALSE])
    need <- sort(unique(as.vector(idx)))
    frames <- s$read(need) # only the frames these windows cover
    take <- function(w) {
      out <- frames[match(as.vector(t(w)), need), , , , drop = FALSE]
      dim(out) <- c(ncol(w), nrow(w), s$frame)
      aperm(out, c(2, 1, 3, 4, 5))
    }
    list(x = take(input_frames[rows, , drop = FALSE]), y = take(target_frames[rows, , drop = FALSE]))
  }
  new_source("grid", length(starts), c(input, s$frame), c(horizon, s$frame), read,
             extra = list(times = s$times, input_frames = input_frames,
                          target_frames = target_frames, series = s$kind))
}

# ---- lazy series: each kind opened without reading its cells ----------------

# list(kind, steps, frame = c(channels, height, width), times, read(idx)).
grid_lazy <- function(data, var, time_dim, layout, call) {
  if (inherits(data, "stars")) return(grid_lazy_stars(data, call))
  if (inherits(data, "SpatRaster")) return(grid_lazy_terra(data, call))
  if (inherits(data, "ncdf4")) return(grid_lazy_ncdf4(data, var, call))
  s <- grid_read(data, var, time_dim, layout, call) # an array: in memory already
  d <- dim(s$frames)
  list(kind = "array", steps = d[[1]], frame = d[-1], times = s$times,
       read = function(idx) s$frames[idx, , , , drop = FALSE])
}

grid_lazy_stars <- function(data, call) {
  need_package("stars", "A stars series", call)
  if (!inherits(data, "stars_proxy")) { # its cells are in memory: sliced there
    s <- grid_read_stars(data, call)
    return(list(kind = "stars object", steps = dim(s$frames)[[1]], frame = dim(s$frames)[-1],
                times = s$times, read = function(idx) s$frames[idx, , , , drop = FALSE]))
  }
  dims <- stars::st_dimensions(data)
  xy <- attr(dims, "raster")$dimensions
  at <- which(vapply(names(dims), function(nm) {
    v <- stars::st_get_dimension_values(data, nm)
    inherits(v, c("POSIXct", "Date", "PCICt")) || identical(nm, "time")
  }, logical(1)))
  if (length(at) == 0) {
    no_time_axis("data", paste0("none of its dimensions (", paste(names(dims), collapse = ", "),
                                ") holds times or is named \"time\" (name it with ",
                                "stars::st_set_dimensions())"), call)
  }
  steps <- dim(data)[[at[[1]]]]
  files <- lapply(unclass(data), as.character)
  if (length(dims) != 3 || !identical(names(dims)[1:2], xy) || length(attr(data, "call_list")) ||
      !all(lengths(files) %in% c(1L, steps))) {
    abort_convlstm(paste0(
      "`data` must be a stars_proxy of x, y and time, each attribute one file whose bands are the ",
      "times or one file per time, with no pending operations: read it with ",
      "stars::st_as_stars() (into memory), or pass terra::rast() of its files."),
      status = "unsupported", call = call)
  }
  nx <- dim(data)[[1]]
  ny <- dim(data)[[2]]
  band <- function(f, idx) { # [x, y, length(idx)]: only these bands, or only these files
    v <- if (length(f) == 1) {
      stars::read_stars(f, RasterIO = list(bands = idx), quiet = TRUE)[[1]]
    } else {
      unlist(lapply(f[idx], function(one) as.vector(stars::read_stars(one, quiet = TRUE)[[1]])))
    }
    array(as.vector(v), c(nx, ny, length(idx)))
  }
  read <- function(idx) {
    ch <- lapply(files, function(f) aperm(band(f, idx), c(3, 2, 1))) # [time, rows, cols] each
    frames <- aperm(array(unlist(ch, use.names = FALSE), c(length(idx), ny, nx, length(ch))),
                    c(1, 4, 2, 3))
    grid_frames_finite(frames, call)
  }
  list(kind = "stars proxy", steps = steps, frame = c(length(files), ny, nx),
       times = stars::st_get_dimension_values(data, names(dims)[[at[[1]]]]), read = read)
}

grid_lazy_terra <- function(data, call) {
  need_package("terra", "A SpatRaster series", call)
  times <- terra::time(data)
  if (length(times) == 0 || all(is.na(times))) {
    no_time_axis("data", "its layers have no times (set them with terra::time(data) <- ...)", call)
  }
  list(kind = "SpatRaster", steps = terra::nlyr(data),
       frame = c(1L, terra::nrow(data), terra::ncol(data)), times = times,
       read = function(idx) grid_read_terra(data[[idx]], call)$frames)
}

grid_lazy_ncdf4 <- function(data, var, call) {
  ax <- grid_ncdf4_axes(data, var, call)
  lens <- vapply(ax$dims, function(d) d$len, numeric(1))
  read <- function(idx) {
    runs <- split(idx, cumsum(c(1, diff(idx) != 1))) # consecutive frames, one read each
    parts <- lapply(runs, function(r) {
      start <- rep(1L, length(lens))
      count <- lens
      start[[ax$t_at]] <- r[[1]]
      count[[ax$t_at]] <- length(r)
      grid_ncdf4_frames(ncdf4::ncvar_get(data, var, start = start, count = count,
                                         collapse_degen = FALSE), ax)
    })
    d <- dim(parts[[1]])
    out <- array(unlist(lapply(parts, function(p) aperm(p, c(2, 3, 4, 1))), use.names = FALSE),
                 c(d[-1], length(idx)))
    grid_frames_finite(aperm(out, c(4, 1, 2, 3)), call)
  }
  list(kind = "netCDF variable", steps = lens[[ax$t_at]],
       frame = c(1L, lens[[ax$sp[[2]]]], lens[[ax$sp[[1]]]]), times = ax$dims[[ax$t_at]]$vals,
       read = read)
}
