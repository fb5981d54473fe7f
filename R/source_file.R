# source_file.R -- frame files: a series of frames [time, channels, height,
# width] on disk (float32, float16, or uint8 with a scale and an offset;
# the format is in inst/include/convlstm_file.h), written chunk by chunk
# from R (convlstm_frame_file_write()) and read as a data source of windows
# (convlstm_source_frames()), each batch's windows decoded in C from the
# memory-mapped file (src/core/filearray.c), nothing else of it resident.

frame_dtypes <- c(float32 = 0L, float16 = 1L, uint8 = 2L)

#' Write a series of frames to a frame file
#'
#' Turns a series into a frame file that [convlstm_source_frames()] trains
#' from without loading it: the frames are converted and written a chunk
#' at a time, to a temporary name beside `path` that is renamed to `path`
#' only once the last frame and the header (dtype, dims, a checksum of the
#' data) are written, so that an interrupted or failed write leaves no file
#' (never half of one).
#'
#' @param data The series: a numeric array `[time, channels, height,
#'   width]`; what [convlstm_grid_windows()] returned (the series' frames
#'   its windows cover, in order; every frame from the first to the last
#'   must be in a window); or a function `function(frames)` returning the
#'   frames asked for (integers), `[length(frames), channels, height,
#'   width]`, with `n_frames`, so that a series larger than memory is
#'   never held whole; a variable of an open netCDF file (an `ncdf4`
#'   object with `var`), read `chunk_frames` times at a time; or a `stars`
#'   object or `SpatRaster` (in memory already), read as
#'   [convlstm_grid_windows()] reads them.
#' @param path The file to write.
#' @param dtype `"float32"`, `"float16"` (half the bytes; values within
#'   +-65504) or `"uint8"` (a quarter; each value stored as `round((v -
#'   offset) / scale)` in 0..255, read as `offset + scale * q`).
#' @param scale,offset For `"uint8"`: the step and the value of 0. `NULL`
#'   (`scale`): for an array, its range over 255 steps from its minimum;
#'   for a function, required. A value outside `offset + scale * [0, 255]`
#'   is an error.
#' @param n_frames For a function: the series' length.
#' @param var For an `ncdf4` object: the variable's name.
#' @param chunk_frames Frames converted and written at a time.
#' @param overwrite Replace an existing `path`.
#' @return `path`, invisibly.
#' @seealso [convlstm_source_frames()].
#' @export
#' @examples
#' series <- array(runif(20 * 1 * 8 * 8), c(20, 1, 8, 8))
#' path <- tempfile(fileext = ".frames")
#' convlstm_frame_file_write(series, path, chunk_frames = 8)
#' file.size(path)   # 128 header bytes + 20 * 64 float32 values
#' # generated a chunk at a time, stored in a byte per value
#' make <- function(frames) array(frames %% 5, c(length(frames), 1, 8, 8))
#' path8 <- tempfile(fileext = ".frames")
#' convlstm_frame_file_write(make, path8, dtype = "uint8", scale = 1, offset = 0,
#'                           n_frames = 1000)
#' file.size(path8)
convlstm_frame_file_write <- function(data, path, dtype = c("float32", "float16", "uint8"),
                                      scale = NULL, offset = 0, n_frames = NULL, var = NULL,
                                      chunk_frames = 64, overwrite = FALSE) {
  call <- sys.call()
  dtype <- check_choice(dtype, names(frame_dtypes), "dtype", call = call)
  path <- check_frame_path(path, overwrite, call)
  chunk_frames <- check_count(chunk_frames, "chunk_frames", call = call)
  frames <- frame_reader(data, n_frames, var, call)
  first <- frames$get(seq_len(min(chunk_frames, frames$n)))
  so <- frame_scale(dtype, scale, offset, if (is.null(frames$range)) NULL else frames$range(), call)
  w <- c_fa_writer_open(path, frame_dtypes[[dtype]], c(frames$n, dim(first)[-1]), so)
  done <- FALSE
  on.exit(if (!done) c_fa_writer_abort(w), add = TRUE) # an interrupt or error: no file
  for (start in seq(1L, frames$n, by = chunk_frames)) {
    idx <- start:min(frames$n, start + chunk_frames - 1L)
    chunk <- if (start == 1L) first else frames$get(idx)
    c_fa_writer_append(w, check_frame_chunk(chunk, idx, dim(first)[-1], call))
  }
  c_fa_writer_finish(w)
  done <- TRUE
  invisible(path)
}

check_frame_path <- function(path, overwrite, call) {
  if (!is.character(path) || length(path) != 1 || is.na(path) || !nzchar(path)) {
    abort_arg("path", "a file name", path, call)
  }
  overwrite <- check_flag(overwrite, "overwrite", call = call)
  if (file.exists(path) && !overwrite) {
    abort_convlstm(sprintf("'%s' exists; give `overwrite = TRUE` to replace it.", path), call = call)
  }
  path.expand(path)
}

# list(n, get(frames) -> [k, C, H, W], range() or NULL) for each kind of data.
frame_reader <- function(data, n_frames, var, call) {
  if (is.function(data)) {
    if (is.null(n_frames)) abort_convlstm("A function as `data` needs `n_frames`.", call = call)
    n <- check_count(n_frames, "n_frames", call = call)
    return(list(n = n, get = data, range = NULL))
  }
  if (inherits(data, "convlstm_grid_windows")) return(windows_frames(data, call))
  if (inherits(data, "ncdf4")) return(ncdf4_frames(data, var, call))
  if (inherits(data, c("stars", "SpatRaster"))) { # already in memory: its frames, as the windows read them
    data <- grid_read(data, NULL, NULL, NULL, call)$frames
  }
  if (!(is.numeric(data) || is.logical(data)) || length(dim(data)) != 4) {
    abort_arg("data", paste0("an array [time, channels, height, width], convlstm_grid_windows() output, ",
                             "a function, an ncdf4 object, a stars object or a SpatRaster"), data, call)
  }
  list(n = dim(data)[[1]], get = function(idx) data[idx, , , , drop = FALSE],
       range = function() range(data, na.rm = TRUE))
}

# A netCDF variable's frames, read a chunk of times at a time.
ncdf4_frames <- function(nc, var, call) {
  ax <- grid_ncdf4_axes(nc, var, call)
  get <- function(idx) {
    start <- rep(1L, length(ax$dims))
    count <- rep(-1L, length(ax$dims))
    start[[ax$t_at]] <- idx[[1]]
    count[[ax$t_at]] <- length(idx)
    a <- ncdf4::ncvar_get(nc, var, start = start, count = count, collapse_degen = FALSE)
    grid_ncdf4_frames(a, ax)
  }
  list(n = ax$dims[[ax$t_at]]$len, get = get, range = NULL)
}

# The series' frames from convlstm_grid_windows() output: frame t from the
# first window holding it (as input or as target).
windows_frames <- function(w, call) {
  where <- rbind(cbind(frame = as.vector(w$input_frames), row = as.vector(row(w$input_frames)),
                       col = as.vector(col(w$input_frames)), part = 1L),
                 cbind(frame = as.vector(w$target_frames), row = as.vector(row(w$target_frames)),
                       col = as.vector(col(w$target_frames)), part = 2L))
  where <- where[!duplicated(where[, "frame"]), , drop = FALSE]
  where <- where[order(where[, "frame"]), , drop = FALSE]
  first <- where[1, "frame"]
  if (!all(where[, "frame"] == seq(first, length.out = nrow(where)))) {
    abort_convlstm(paste0("The windows of `data` leave frames of the series out (a `stride` longer ",
                          "than `seq_len` + `horizon`): write the series itself."), call = call)
  }
  get <- function(idx) {
    d <- dim(w$x)
    out <- array(0, c(length(idx), d[3:5]))
    for (k in seq_along(idx)) {
      r <- where[idx[[k]], ]
      src <- if (r[["part"]] == 1) w$x else w$y
      out[k, , , ] <- src[r[["row"]], r[["col"]], , , ]
    }
    out
  }
  list(n = nrow(where), get = get, range = function() range(c(range(w$x), range(w$y))))
}

# c(scale, offset) as the header stores them.
frame_scale <- function(dtype, scale, offset, range, call) {
  if (dtype != "uint8") return(c(1, 0))
  if (is.null(scale)) {
    if (is.null(range)) abort_convlstm("`dtype = \"uint8\"` with a function or a netCDF variable as `data` needs `scale`.",
                                       call = call)
    offset <- range[[1]]
    scale <- if (range[[2]] > range[[1]]) (range[[2]] - range[[1]]) / 255 else 1
  }
  c(check_number(scale, "scale", min = 0, min_inclusive = FALSE, call = call),
    check_number(offset, "offset", call = call))
}

check_frame_chunk <- function(chunk, idx, frame_dim, call) {
  d <- dim(chunk)
  if (!(is.numeric(chunk) || is.logical(chunk)) || length(d) != 4 || d[[1]] != length(idx) ||
      !all(d[-1] == frame_dim)) {
    abort_convlstm(sprintf(paste0(
      "The frames %d to %d of `data` are %s where a numeric array of dim %s was expected."),
      idx[[1]], idx[[length(idx)]], describe(chunk), paste(c(length(idx), frame_dim), collapse = " x ")),
      call = call)
  }
  storage.mode(chunk) <- "double"
  chunk
}

#' Train from a frame file: windows of a series on disk
#'
#' A data source ([convlstm_fit()] takes it as `x`, with `y = NULL`) of the
#' windows of a series written by [convlstm_frame_file_write()], cut as
#' [convlstm_grid_windows()] cuts them: window `i` is `seq_len` input frames
#' from frame `1 + (i - 1) * stride`, and its target the `horizon` frames
#' after them, `[horizon, channels, height, width]` (with `horizon = 1`
#' and the `"last_state"` target, the next frame `[channels, height,
#' width]`). The file is memory-mapped; each batch's windows are decoded
#' from it in C into the batch's arrays, and the pages read are given back,
#' so what a fit holds does not grow with the file. While a step runs, the
#' next batch's windows are decoded by a thread of their own into a second
#' staging buffer (both planned: [convlstm_memory_estimate()] with
#' `source`); `options(convlstm.prefetch = FALSE)` (or the environment
#' variable `CONVLSTM_PREFETCH=0`) reads each batch at its step instead,
#' with the same results bit for bit.
#'
#' The file is checked when opened: its header, its size (a truncated file
#' is an error) and, with `verify`, the checksum of its data (a changed
#' file is an error; it reads the file once). Before every batch it is
#' checked again for a change of size or time of modification. Each is an
#' error of class `convlstm_error_invalid` naming the file (and in a fit,
#' the batch); the model stays as its last completed step left it.
#'
#' @param path A file written by [convlstm_frame_file_write()].
#' @param seq_len Input frames of each window.
#' @param horizon Target frames after them.
#' @param stride Frames between the starts of consecutive windows.
#' @param verify Check the data against the header's checksum now.
#' @return A `convlstm_source`.
#' @seealso [convlstm_source_read()], [convlstm_source_function()].
#' @export
#' @examples
#' # a blob drifting east, 60 frames of 8 x 8, on disk
#' series <- array(0, c(60, 1, 8, 8))
#' for (t in 1:60) series[t, 1, 3:5, (t %% 6) + 1:2] <- 1
#' path <- tempfile(fileext = ".frames")
#' convlstm_frame_file_write(series, path, dtype = "float16")
#' src <- convlstm_source_frames(path, seq_len = 4, horizon = 1, stride = 2)
#' src
#' model <- convlstm(1, 1, 3, device = "cpu")
#' set.seed(1)
#' h <- convlstm_fit(model, src, NULL, convlstm_optimizer_adam(0.02), epochs = 2,
#'                   batch_size = 8, validation_split = 0.2, verbose = FALSE)
#' h
#' convlstm_release(model)
convlstm_source_frames <- function(path, seq_len, horizon = 1, stride = 1, verify = TRUE) {
  call <- sys.call()
  if (!is.character(path) || length(path) != 1 || is.na(path)) abort_arg("path", "a file name", path, call)
  seq_len <- check_count(seq_len, "seq_len", call = call)
  horizon <- check_count(horizon, "horizon", call = call)
  stride <- check_count(stride, "stride", call = call)
  verify <- check_flag(verify, "verify", call = call)
  path <- normalizePath(path, mustWork = FALSE)
  fa <- tryCatch(c_fa_open(path, verify), convlstm_error = function(cnd) {
    abort_convlstm(conditionMessage(cnd), status = cnd$status, call = call, path = path)
  })
  info <- c_fa_info(fa)
  steps <- info$dims[[1]]
  if (seq_len + horizon > steps) {
    abort_convlstm(sprintf("`seq_len` + `horizon` (%d + %d frames) is longer than '%s' (%d frames).",
                           seq_len, horizon, path, steps), call = call)
  }
  n <- (steps - seq_len - horizon) %/% stride + 1
  starts <- function(rows) 1 + (rows - 1) * stride # the windows' first frames
  read <- function(rows) {
    first <- starts(rows)
    list(x = c_fa_read(fa, first, seq_len), y = c_fa_read(fa, first + seq_len, horizon))
  }
  new_source("frames", n, c(seq_len, info$dims[-1]), c(horizon, info$dims[-1]), read,
             extra = list(path = path, info = info, stride = stride, file = fa, starts = starts))
}
