# source.R -- data sources: what convlstm_fit(model, source, NULL, ...)
# trains on instead of whole R arrays (issue 36), as keras takes a generator
# for x. A source knows how many samples it has and the shape of one, and
# reads any rows on request; three kinds share that interface: R arrays
# (convlstm_source_arrays()), a frame file cut into windows
# (convlstm_source_frames(), R/source_file.R) and an R function
# (convlstm_source_function()).
#
# How a fit reads one (the hooks in fit_check.R and fit_loop.R): its x and
# y become two "parts" of the source, objects whose dim() is the array's
# they stand for, so that the plan (batch size, memory, batches per epoch)
# is made as for arrays without reading anything; each step reads its rows
# through source_fit_batch(), which checks the batch before the step, so a
# bad batch stops the fit with the model as the last step left it. Only
# the rows of one batch are ever held (the source's cache: x and y of the
# rows of the last validation batch, so that a validation pass reading x
# and then y reads once).
#
# The staging buffers a fit holds for a source's batches (x and y as the
# step takes them; two of each where the next batch is read while the step
# runs) are planned by source_staging(), a row of the plan's `data`
# (convlstm_memory_estimate(source = )). Reading ahead: source_prefetch.R.

# A source: an environment (its cache changes as it is read) of class
# c("convlstm_source_<kind>", "convlstm_source"). x_dim, y_dim: one
# sample's dims; read(rows): list(x, y) for those rows, unchecked; types:
# the storage type of x and y that every batch must keep.
new_source <- function(kind, n, x_dim, y_dim, read, types = c(x = "double", y = "double"),
                       extra = list()) {
  s <- new.env(parent = emptyenv())
  s$kind <- kind
  s$n <- as.integer(n)
  s$x_dim <- as.integer(x_dim)
  s$y_dim <- as.integer(y_dim)
  s$read <- read
  s$types <- types
  for (nm in names(extra)) s[[nm]] <- extra[[nm]]
  class(s) <- c(paste0("convlstm_source_", kind), "convlstm_source")
  s
}

is_convlstm_source <- function(x) inherits(x, "convlstm_source")

#' Use R arrays as a data source
#'
#' Wraps `x` and `y` in the interface every source has ([convlstm_fit()]
#' takes a source as its `x`, with `y = NULL`); training on it gives the
#' same losses as training on the arrays themselves. Mostly useful to write
#' code that takes any source, and to compare the others with it, and to
#' have a fit's batches planned ([convlstm_memory_estimate()] with
#' `source`). As for arrays given as `x` and `y`, a fit on one process (on
#' the CPU or a GPU) slices and checks the next batch while the step of this one
#' runs on a thread of its own, unless `options(convlstm.prefetch = FALSE)`;
#' the losses and weights are the same either way.
#'
#' @param x Inputs `[n, time, channels, height, width]`.
#' @param y Targets with `n` rows, shaped as [convlstm_fit()] takes them.
#' @return A `convlstm_source`.
#' @seealso [convlstm_source_frames()], [convlstm_source_function()],
#'   [convlstm_source_read()].
#' @export
#' @examples
#' x <- array(runif(8 * 3 * 6 * 6), c(8, 3, 1, 6, 6))
#' y <- array(x[, 3, 1, , ], c(8, 1, 6, 6)) # the last frame
#' src <- convlstm_source_arrays(x, y)
#' src
#' dim(convlstm_source_read(src, 2:3)$x)
convlstm_source_arrays <- function(x, y) {
  call <- sys.call()
  x <- check_array(x, "x", 5, call = call)
  if (!(is.numeric(y) || is.logical(y)) || !length(dim(y)) %in% 4:5 || dim(y)[[1]] != dim(x)[[1]]) {
    abort_arg("y", sprintf("a numeric array of 4 or 5 dimensions with %d rows, as `x`", dim(x)[[1]]),
              y, call)
  }
  y <- check_array(y, "y", length(dim(y)), call = call)
  new_source("arrays", dim(x)[[1]], dim(x)[-1], dim(y)[-1],
             function(rows) list(x = slice_batch(x, rows), y = slice_batch(y, rows)))
}

#' Use an R function as a data source
#'
#' A generator, as keras takes one for `x` and as a torch dataset's
#' `.getbatch()`: `fun(indices)` returns `list(x = , y = )`, the inputs and
#' targets of those samples (rows in the order asked). [convlstm_fit()] calls
#' it once per batch with the batch's rows, after shuffling and
#' `validation_split` are applied to the row numbers `1:n`, so the same
#' seed draws the same batches as with arrays.
#'
#' Every batch is checked before its step: `x` and `y` numeric arrays of
#' the shapes declared (or seen in the probe) with one row per index, no
#' missing or infinite value, and the storage type (`typeof()`) of the
#' first batch. A batch that fails, or an error inside `fun`, stops the fit
#' with an error of class `convlstm_error_invalid` naming the batch and
#' epoch (its field `batch`), and the model as its last completed step
#' left it.
#'
#' In a fit on one process (on the CPU or a GPU), `fun` is called for the next batch
#' while the step of this one runs on a thread of its own, so that a
#' generator's time hides behind the step's; the batches, losses and
#' weights are those of calling it at each step (a `fun` that draws R's
#' random numbers draws them in another order relative to the fit's own
#' draws -- dropout seeds, scheduled sampling's coins -- than when it is
#' called at its step). An error in it is raised
#' when that batch's turn comes; an interrupt while it runs ends the fit
#' once the running step is complete. `options(convlstm.prefetch = FALSE)`
#' (or the environment variable `CONVLSTM_PREFETCH=0`) calls it at its
#' step instead. `fun` must not use the model being fitted while reading
#' ahead: the step is writing it, so any use of it there (predicting,
#' reading its weights, releasing it) is refused (class
#' `convlstm_error_state`), which stops the fit as any error in `fun` does,
#' the model as the running step left it; without reading ahead `fun` runs
#' between steps and may use it.
#'
#' @param fun A function of one argument, the sample indices (integers in
#'   `1:n`), returning `list(x = , y = )`.
#' @param n The number of samples.
#' @param x_dim,y_dim One sample's dims: of `x`, `c(time, channels,
#'   height, width)`; of `y`, as [convlstm_fit()] takes it without its first
#'   dimension. `NULL` (both): read from a probe, `fun(1L)`, called once
#'   now.
#' @return A `convlstm_source`.
#' @seealso [convlstm_source_arrays()], [convlstm_source_frames()].
#' @export
#' @examples
#' # moving squares made on demand: nothing is held between batches
#' square <- function(i) {
#'   x <- array(0, c(length(i), 4, 1, 8, 8))
#'   for (k in seq_along(i)) for (t in 1:4) x[k, t, 1, 3:4, (i[k] + t) %% 6 + 1:2] <- 1
#'   list(x = x, y = array(x[, 4, , , ], c(length(i), 1, 8, 8)))
#' }
#' src <- convlstm_source_function(square, n = 12)
#' src
#' model <- convlstm(1, 1, 3, device = "cpu")
#' set.seed(1)
#' h <- convlstm_fit(model, src, NULL, convlstm_optimizer_adam(0.01), epochs = 2,
#'                   batch_size = 4, verbose = FALSE)
#' h$loss
#' convlstm_release(model)
convlstm_source_function <- function(fun, n, x_dim = NULL, y_dim = NULL) {
  call <- sys.call()
  if (!is.function(fun)) abort_arg("fun", "a function of the sample indices", fun, call)
  n <- check_count(n, "n", call = call)
  if (is.null(x_dim) != is.null(y_dim)) {
    abort_convlstm("Give both `x_dim` and `y_dim`, or neither (then `fun(1L)` is probed).",
                   call = call)
  }
  types <- c(x = "double", y = "double")
  if (is.null(x_dim)) {
    probe <- source_call(fun, 1L, "probe fun(1L)", call)
    probe <- source_check_batch(probe, 1L, NULL, NULL, NULL, "probe fun(1L)", call)
    x_dim <- dim(probe$x)[-1]
    y_dim <- dim(probe$y)[-1]
    types <- c(x = typeof(probe$x), y = typeof(probe$y))
  } else {
    x_dim <- check_counts(x_dim, "x_dim", call = call)
    y_dim <- check_counts(y_dim, "y_dim", call = call)
    if (length(x_dim) != 4) abort_arg("x_dim", "c(time, channels, height, width)", x_dim, call)
    if (!length(y_dim) %in% 3:4) abort_arg("y_dim", "3 or 4 dims (y's without its rows)", y_dim, call)
    types <- NULL # the first batch sets them
  }
  new_source("function", n, x_dim, y_dim, fun, types = types)
}

#' Read samples from a data source
#'
#' What a fit reads for a batch: the samples `indices` of `source`, checked
#' as each batch of a fit is (shapes, missing values, storage type).
#'
#' @param source A `convlstm_source`.
#' @param indices Sample numbers in `1:n`.
#' @return `list(x, y)`: double arrays with a row per index.
#' @seealso [convlstm_source_arrays()], [convlstm_source_frames()],
#'   [convlstm_source_function()].
#' @export
#' @examples
#' series <- array(rnorm(10 * 1 * 4 * 4), c(10, 1, 4, 4)) # [time, channels, height, width]
#' path <- tempfile(fileext = ".frames")
#' convlstm_frame_file_write(series, path)
#' src <- convlstm_source_frames(path, seq_len = 3, horizon = 1)
#' b <- convlstm_source_read(src, c(1, 5))
#' dim(b$x)   # [2, 3, 1, 4, 4]
#' max(abs(b$x[2, , , , ] - series[5:7, , , ])) # float32's rounding only
convlstm_source_read <- function(source, indices) {
  call <- sys.call()
  if (!is_convlstm_source(source)) abort_arg("source", "a convlstm_source", source, call)
  rows <- check_counts(indices, "indices", call = call)
  if (any(rows > source$n)) {
    abort_arg("indices", sprintf("sample numbers in 1:%d", source$n), indices, call)
  }
  source_fetch(source, rows, "indices", call, keep = FALSE)
}

#' @export
print.convlstm_source <- function(x, ...) {
  cat(sprintf("<convlstm_source> %s: %d samples, x [%s], y [%s]\n", x$kind, x$n,
              paste(x$x_dim, collapse = ", "), paste(x$y_dim, collapse = ", ")))
  if (!is.null(x$path)) cat(sprintf("  %s\n", x$path))
  invisible(x)
}

# fun(rows), an error inside it rethrown as the source's, naming the batch.
source_call <- function(fun, rows, label, call) {
  tryCatch(fun(rows), error = function(cnd) {
    abort_convlstm(sprintf("The source failed on %s: %s", label, conditionMessage(cnd)),
                   call = call, batch = label, parent = cnd)
  })
}

# The rows' batch, read and checked; keep: cache it (a validation pass
# reads x and then y of the same rows), else the caller's alone, so that
# nothing of a training batch outlives its step.
# read: the reader of the rows (a reader ahead's, R/source_prefetch.R).
source_fetch <- function(s, rows, label, call, keep = TRUE, read = s$read) {
  if (identical(s$cache_rows, rows)) return(s$cache)
  s$cache <- s$cache_rows <- NULL # the old batch goes before the new one is read
  b <- if (identical(s$kind, "function")) source_call(read, rows, label, call) else {
    tryCatch(read(rows), convlstm_error = function(cnd) {
      abort_convlstm(sprintf("Reading %s: %s", label, conditionMessage(cnd)),
                     status = cnd$status %||% "invalid", call = call, batch = label)
    })
  }
  b <- source_check_batch(b, length(rows), s$x_dim, s$y_dim, s$types, label, call)
  if (is.null(s$types)) s$types <- attr(b, "types")
  if (keep) {
    s$cache_rows <- rows
    s$cache <- b
  }
  b
}

# A batch checked: list(x, y) of numeric arrays with n rows (and the
# dims and types given, when not NULL), finite; returned as doubles, with
# the types it came in as its attribute "types".
source_check_batch <- function(b, n, x_dim, y_dim, types, label, call) {
  fail <- function(what) {
    abort_convlstm(sprintf("The source's %s: %s.", label, what), call = call, batch = label)
  }
  if (!is.list(b) || !all(c("x", "y") %in% names(b))) {
    fail(sprintf("returned %s, not list(x = , y = )", describe(b)))
  }
  got <- c(x = typeof(b$x), y = typeof(b$y))
  for (part in c("x", "y")) {
    v <- b[[part]]
    want <- list(x = x_dim, y = y_dim)[[part]]
    d <- dim(v)
    ok_rank <- if (!is.null(want)) length(d) == length(want) + 1
               else if (part == "x") length(d) == 5 else length(d) %in% 4:5
    if (!(is.numeric(v) || is.logical(v)) || is.null(d) || !ok_rank || d[[1]] != n ||
        (!is.null(want) && !all(d[-1] == want)) || (part == "y" && !length(d) %in% 4:5)) {
      fail(sprintf("`%s` is %s where %s was expected", part, describe(v),
                   if (is.null(want)) sprintf("a numeric array with %d rows", n)
                   else sprintf("a numeric array of dim %s", paste(c(n, want), collapse = " x "))))
    }
    if (!is.null(types) && got[[part]] != types[[part]]) {
      fail(sprintf("`%s` is of type %s where the first batch's was %s", part, got[[part]],
                   types[[part]]))
    }
    bad <- sum(!is.finite(v))
    if (bad > 0) fail(sprintf("`%s` has %d missing or infinite values", part, bad))
  }
  out <- list(x = b$x, y = b$y)
  storage.mode(out$x) <- "double"
  storage.mode(out$y) <- "double"
  attr(out, "types") <- got
  out
}

# The host staging buffers of a batch of batch_size samples of s: x and y
# as the step takes them (doubles), bytes by the plan's row name; twice
# where the next batch is read while the step runs (source_overlaps()).
# s may stand for a fit's plain R arrays (fit_sliced_source()): none for a
# batch of every sample, which trains on the arrays as they are. config:
# the model's backend and the step's dtype, and the frames a teacher-forced
# step appends to x (teacher_frames).
source_staging <- function(s, batch_size, call, config = NULL) {
  if (!is_convlstm_source(s)) abort_arg("source", "NULL or a convlstm_source", s, call)
  x_dim <- s$x_dim
  if (isTRUE(s$plain)) { # a fit's plain arrays (fit_sliced_source())
    if (batch_size >= s$n) return(NULL) # one batch: the arrays, not sliced
    # teacher-forced, the slices are of x and then the true frames but the
    # last (fit_batch_x(): teacher_sequence())
    x_dim[[1]] <- x_dim[[1]] + (config$teacher_frames %||% 0L)
  }
  one <- c(source_x = prod(as.double(x_dim)), source_y = prod(as.double(s$y_dim))) *
    8 * batch_size
  if (!source_overlaps(s)) return(one)
  c(one, stats::setNames(one, c("source_x_next", "source_y_next")),
    staged_staging(s$kind, x_dim, s$y_dim, batch_size, config))
}

# The batches a fit of a source of this kind (one sample's x_dim, y_dim)
# converts ahead (R/source_prefetch.R's
# stage_batch(): a function or arrays source on a model that stages, a GPU
# by default): two, in page-locked host memory; where they are sent ahead
# too (send_enabled()), the model's two device buffers they are sent into.
# Each takes the bytes the C core lays a staged batch out in (x in the
# storage dtype, y in float32 from a multiple of 256 bytes:
# c_staged_layout_bytes(), src/core/staged.c). Counted whenever such a fit
# may stage them (a last-state target or a forecast stages none:
# source_stages()).
staged_staging <- function(kind, x_dim, y_dim, batch_size, config) {
  f <- list(config = config)
  if (is.null(config) || !kind %in% c("function", "arrays") || !stage_enabled(f)) {
    return(NULL)
  }
  one <- c_staged_layout_bytes(config$dtype, c(batch_size, x_dim), c(batch_size, y_dim))
  host <- c(staged_batch = one, staged_batch_next = one)
  if (!send_enabled(f)) return(host)
  c(host, staged_device = one, staged_device_next = one)
}

# ---- a fit's view of a source (fit_check.R, fit_loop.R) ----

# x or y of a source, over `rows` of it; drop: y's second dim, of length
# 1, dropped (the next frame as a "last_state" target).
source_part <- function(s, part, rows = seq_len(s$n), drop = FALSE) {
  structure(list(source = s, part = part, rows = rows, drop = drop),
            class = "convlstm_source_part")
}

#' @export
dim.convlstm_source_part <- function(x) {
  d <- if (x$part == "x") x$source$x_dim else x$source$y_dim
  if (x$drop) d <- d[-1]
  c(length(x$rows), d)
}

#' @export
length.convlstm_source_part <- function(x) prod(as.double(dim(x)))

# Rows idx of a part, read (slice_batch() of a part: validation batches).
source_part_slice <- function(x, idx) {
  b <- source_fetch(x$source, x$rows[idx], sprintf("validation rows %s", row_span(x$rows[idx])),
                    user_call())
  v <- b[[x$part]]
  if (x$drop) dim(v) <- dim(v)[-2]
  v
}

row_span <- function(rows) {
  if (length(rows) <= 3) paste(rows, collapse = ", ") else sprintf("%d, ..., %d", rows[[1]], rows[[length(rows)]])
}

# fit_check_data()'s for a source: f$x and f$y its parts, checked against
# the model and target as arrays of one sample are (nothing is read).
source_fit_check <- function(f, a, target_missing, call) {
  s <- a$x
  if (!is.null(a$y)) {
    abort_convlstm("With a source as `x`, `y` must be NULL: the source gives the targets.",
                   call = call)
  }
  if (!is.null(a$weight) || !is.null(a$metrics) || isTRUE(a$data_on_device)) {
    what <- if (!is.null(a$weight)) "`weight`" else if (!is.null(a$metrics)) "`metrics`" else
      "`data_on_device = TRUE`"
    abort_convlstm(sprintf("%s cannot be used with a source as `x` (give R arrays for it).", what),
                   status = "unsupported", call = call)
  }
  f$source <- s
  f$forecast <- fit_forecast(a$horizon, a$teacher_forcing, target_missing, a$target, f$config, call)
  f$target <- if (is.null(f$forecast)) target_choice(a$target, f$config, target_missing, call = call)
              else "sequence"
  # a frame source's y is the next frames [K, C, H, W]: one frame is a
  # "last_state" target [C, H, W]
  drop <- is.null(f$forecast) && identical(f$target, "last_state") && length(s$y_dim) == 4 &&
    s$y_dim[[1]] == 1
  f$x <- source_part(s, "x")
  f$y <- source_part(s, "y", drop = drop)
  x1 <- check_input(array(0, c(1L, s$x_dim)), f$config, "x", call = call)
  y1 <- array(0, c(1L, dim(f$y)[-1]))
  if (is.null(f$forecast)) check_target(y1, dim(x1), f$config, f$target, "y", call = call)
  else check_frames(y1, dim(x1), f$forecast$horizon, f$config, "y", call)
  f$carry <- fit_state(a$state, a$shuffle, a$batch_size, a$memory_budget, call)
  f$weight <- NULL
  f$can_upload <- FALSE # its batches are read from the source, in R
  invisible(f)
}

# validation_split over a source: split_validation()'s rows, as parts.
source_fit_split <- function(f, fraction, call) {
  rows <- array(f$x$rows)
  held <- split_validation(rows, rows, fraction, f$validation, call)
  if (is.null(held$validation)) return(invisible(f))
  sub <- function(part, r) {
    part$rows <- as.vector(r)
    part
  }
  f$validation <- list(x = sub(f$x, held$validation$x), y = sub(f$y, held$validation$x))
  f$x <- sub(f$x, held$x)
  f$y <- sub(f$y, held$x)
  invisible(f)
}

# The step's x and y for the rows idx of the training parts (fit_batch()'s
# hook): read, checked, y shaped for the target, x teacher-forced when the
# epoch feeds the true frames back (p of 1). b: the batch's number, for
# a reader ahead (its batch read during the step before).
source_fit_batch <- function(f, idx, label, p, b = NULL) {
  rows <- f$x$rows[idx]
  got <- ahead_taken(f, "thread", b, rows) %||% # a function's, read during the last step
    source_fetch(f$source, rows, label, f$call, keep = FALSE, read = source_reader(f, b))
  y <- got$y
  if (f$y$drop) dim(y) <- dim(y)[-2]
  x <- if (!is.null(f$forecast) && p >= 1) teacher_sequence(got$x, y) else got$x
  list(x = x, y = y, staged = if (source_stages(f)) got$staged)
}
