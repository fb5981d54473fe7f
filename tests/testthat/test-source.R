# Data sources (issue 36): frame files written and read window by window,
# a fit from a file, an R function or arrays against the same data in R
# arrays, and the errors of a damaged file or a bad generator.

# float32's rounding of x, by R's own writer and reader (not the package's).
as_float32 <- function(x) {
  tf <- tempfile()
  on.exit(unlink(tf))
  writeBin(as.vector(x), tf, size = 4)
  array(readBin(tf, "double", length(x), size = 4), dim(x))
}

# A series [time, channels, height, width] and its windows, cut by hand:
# window i is frames i .. i + s - 1, its target the next h frames.
series_windows <- function(series, s, h) {
  n <- dim(series)[[1]] - s - h + 1
  cut <- function(first, len) {
    out <- array(0, c(n, len, dim(series)[-1]))
    for (i in seq_len(n)) out[i, , , , ] <- series[first(i) + seq_len(len) - 1L, , , , drop = FALSE]
    out
  }
  list(x = cut(function(i) i, s), y = cut(function(i) i + s, h))
}

source_series <- function(t = 30, c = 1, hw = 5, seed = 1) {
  set.seed(seed)
  array(stats::runif(t * c * hw * hw), c(t, c, hw, hw))
}

write_frames <- function(series, ...) {
  path <- tempfile(fileext = ".frames")
  convlstm_frame_file_write(series, path, ...)
  path
}

# A frame file of source_series(t = 30), its source of windows of 4 frames
# and 1 target, and a model of it (the test releases f$m).
frame_fit <- function() {
  path <- write_frames(source_series(t = 30))
  list(path = path, src = convlstm_source_frames(path, 4, 1),
       m = convlstm(1, c(3, 1), 3, device = "cpu", threads = 1))
}

twin <- function() {
  a <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  b <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  convlstm_load_state_dict(b, convlstm_state_dict(a))
  list(a = a, b = b)
}

test_that("a frame file has its header and size, and windows read equal the series' slices", {
  series <- source_series(t = 23, c = 2, hw = 4)
  path <- write_frames(series, chunk_frames = 5)
  expect_equal(file.size(path), 128 + 23 * 2 * 4 * 4 * 4)
  expect_identical(readChar(path, 8, useBytes = TRUE), "CLFRAME1")
  src <- convlstm_source_frames(path, seq_len = 3, horizon = 2)
  expect_s3_class(src, "convlstm_source")
  expect_equal(src$n, 23 - 5 + 1)
  want <- series_windows(as_float32(series), 3, 2)
  rows <- c(19, 1, 7, 7)
  got <- convlstm_source_read(src, rows)
  expect_identical(got$x, want$x[rows, , , , , drop = FALSE])
  expect_identical(got$y, want$y[rows, , , , , drop = FALSE])
  # a stride: window i starts at frame 1 + (i - 1) * stride
  s3 <- convlstm_source_frames(path, seq_len = 2, horizon = 1, stride = 3)
  expect_equal(s3$n, (23 - 3) %/% 3 + 1)
  expect_identical(convlstm_source_read(s3, 4)$x[1, , , , ], as_float32(series)[10:11, , , ])
})

test_that("float16 and uint8 frame files store what their formats hold", {
  series <- source_series(t = 12, hw = 3) * 10 - 2
  p16 <- write_frames(series, dtype = "float16")
  expect_equal(file.size(p16), 128 + 12 * 9 * 2)
  x16 <- convlstm_source_read(convlstm_source_frames(p16, 12 - 1, 1), 1)$x[1, , , , ]
  # float16 keeps 11 significant bits: relative error at most 2^-11
  expect_true(all(abs(x16 - series[1:11, , , ]) <= abs(series[1:11, , , ]) * 2^-11))
  expect_false(identical(x16, series[1:11, , , ]))
  p8 <- write_frames(series, dtype = "uint8", scale = 0.05, offset = -2)
  expect_equal(file.size(p8), 128 + 12 * 9)
  x8 <- convlstm_source_read(convlstm_source_frames(p8, 11, 1), 1)$x[1, , , , ]
  expect_equal(x8, -2 + 0.05 * round((series[1:11, , , ] + 2) / 0.05), tolerance = 1e-12)
  # a value uint8 cannot hold is refused, and no file is left
  p_bad <- tempfile(fileext = ".frames")
  expect_convlstm_error(
    convlstm_frame_file_write(series, p_bad, dtype = "uint8", scale = 0.01, offset = 0),
    regexp = "outside what uint8")
  expect_false(file.exists(p_bad))
  expect_length(Sys.glob(paste0(p_bad, ".part-*")), 0)
})

test_that("the writer takes a function chunk by chunk and grid windows, and leaves no half file", {
  calls <- 0
  make <- function(frames) {
    calls <<- calls + 1
    array(rep(frames, each = 1), c(length(frames), 1, 2, 2)) * 0.5
  }
  path <- tempfile(fileext = ".frames")
  convlstm_frame_file_write(make, path, n_frames = 10, chunk_frames = 4)
  expect_equal(calls, 3) # frames 1-4, 5-8, 9-10
  got <- convlstm_source_read(convlstm_source_frames(path, 9, 1), 1)
  expect_identical(got$x[1, , 1, 1, 1], (1:9) * 0.5)
  expect_identical(got$y[1, 1, 1, 1, 1], 5)
  # a failing chunk: the write stops and nothing is created
  broken <- function(frames) if (frames[[1]] > 4) array(NA_real_, c(length(frames), 1, 2, 2)) else make(frames)
  p2 <- tempfile(fileext = ".frames")
  expect_convlstm_error(convlstm_frame_file_write(broken, p2, n_frames = 10, chunk_frames = 4),
                        regexp = "finite")
  expect_false(file.exists(p2))
  expect_length(Sys.glob(paste0(p2, ".part-*")), 0)
  # a chunk of the wrong shape (found in R): no file either
  odd <- function(frames) if (frames[[1]] > 4) array(0, c(length(frames), 1, 3, 2)) else make(frames)
  expect_convlstm_error(convlstm_frame_file_write(odd, p2, n_frames = 10, chunk_frames = 4),
                        regexp = "frames 5 to 8")
  expect_false(file.exists(p2))
  expect_length(Sys.glob(paste0(p2, ".part-*")), 0)
  # an existing file is kept unless overwrite
  expect_convlstm_error(convlstm_frame_file_write(make, path, n_frames = 10), regexp = "exists")
  # convlstm_grid_windows() output: the series it was cut from
  series <- array(stats::runif(4 * 5 * 9), c(4, 5, 9)) # [height, width, time]
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2)
  pw <- write_frames(w)
  back <- convlstm_source_read(convlstm_source_frames(pw, 8, 1), 1)
  expect_identical(back$x[1, , 1, , ], aperm(as_float32(series), c(3, 1, 2))[1:8, , ])
})

test_that("a fit from a frame file equals the same windows in memory, bit for bit", {
  series <- source_series(t = 30)
  path <- write_frames(series)
  w <- series_windows(as_float32(series), 4, 1)
  m <- twin()
  on.exit(release_all(m))
  opt <- convlstm_optimizer_adam(0.01)
  set.seed(11)
  h_mem <- convlstm_fit(m$a, w$x, array(w$y, c(dim(w$y)[1], 1, 5, 5)), opt, epochs = 2,
                        batch_size = 6, validation_split = 0.25, verbose = FALSE)
  set.seed(11)
  h_file <- convlstm_fit(m$b, convlstm_source_frames(path, 4, 1), NULL, opt, epochs = 2,
                         batch_size = 6, validation_split = 0.25, verbose = FALSE)
  expect_identical(h_file$loss, h_mem$loss)
  expect_identical(h_file$val_loss, h_mem$val_loss)
  expect_false(anyNA(h_file$val_loss))
  expect_identical(convlstm_state_dict(m$b), convlstm_state_dict(m$a))
  expect_false(attr(h_file, "data_on_device"))
})

test_that("a forecasting fit from a frame file equals the arrays' (teacher forcing per batch)", {
  series <- source_series(t = 20, seed = 2)
  path <- write_frames(series)
  w <- series_windows(as_float32(series), 3, 2)
  m <- twin()
  on.exit(release_all(m))
  opt <- convlstm_optimizer_sgd(0.05)
  set.seed(5)
  h_mem <- convlstm_fit(m$a, w$x, w$y, opt, epochs = 2, batch_size = 4, horizon = 2,
                        verbose = FALSE)
  set.seed(5)
  h_file <- convlstm_fit(m$b, convlstm_source_frames(path, 3, 2), NULL, opt, epochs = 2,
                         batch_size = 4, horizon = 2, verbose = FALSE)
  expect_identical(h_file$loss, h_mem$loss)
  expect_identical(convlstm_state_dict(m$b), convlstm_state_dict(m$a))
})

test_that("a function source and an arrays source train as the arrays do", {
  set.seed(3)
  x <- array(stats::runif(10 * 3 * 4 * 4), c(10, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(10, 1, 4, 4))
  asked <- list()
  fun <- function(i) {
    asked[[length(asked) + 1]] <<- i
    list(x = x[i, , , , , drop = FALSE], y = y[i, , , , drop = FALSE])
  }
  src <- convlstm_source_function(fun, n = 10)
  expect_equal(src$x_dim, c(3L, 1L, 4L, 4L))
  runs <- lapply(list(list(x, y), list(src, NULL), list(convlstm_source_arrays(x, y), NULL)),
                 function(d) {
                   set.seed(4) # the same weights, then the same shuffles
                   m <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
                   on.exit(convlstm_release(m))
                   h <- convlstm_fit(m, d[[1]], d[[2]], convlstm_optimizer_adam(0.02), epochs = 3,
                                     batch_size = 4, validation_split = 0.2, verbose = FALSE)
                   list(h = h, w = convlstm_state_dict(m))
                 })
  expect_identical(runs[[2]]$h$loss, runs[[1]]$h$loss)
  expect_identical(runs[[2]]$h$val_loss, runs[[1]]$h$val_loss)
  expect_identical(runs[[2]]$w, runs[[1]]$w)
  expect_identical(runs[[3]]$h$loss, runs[[1]]$h$loss)
  # the training batches ask for rows 1..8 only (the last 2 are validation)
  expect_true(all(sort(unique(unlist(asked[-1]))) %in% 1:10))
  expect_true(any(vapply(asked[-1], function(i) all(i %in% 9:10), logical(1))))
  expect_false(any(vapply(asked[-1], function(i) any(i %in% 9:10) && any(i %in% 1:8), logical(1))))
})

# A fit over a generator that goes wrong at its third call during training;
# the weights after the last completed step, recorded by a callback.
fit_until_bad <- function(bad) {
  set.seed(3)
  x <- array(stats::runif(12 * 3 * 4 * 4), c(12, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(12, 1, 4, 4))
  calls <- 0
  fun <- function(i) {
    calls <<- calls + 1
    b <- list(x = x[i, , , , , drop = FALSE], y = y[i, , , , drop = FALSE])
    if (calls == 4) b <- bad(b) # call 1 is the probe
    b
  }
  src <- convlstm_source_function(fun, n = 12)
  m <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  last <- NULL
  cb <- convlstm_callback(on_batch_end = function(ctx) last <<- convlstm_state_dict(ctx$model))
  err <- tryCatch(convlstm_fit(m, src, NULL, convlstm_optimizer_adam(0.02), epochs = 2,
                               batch_size = 4, callbacks = list(cb), verbose = FALSE),
                  error = function(e) e)
  out <- list(err = err, after = convlstm_state_dict(m), last = last)
  convlstm_release(m)
  out
}

test_that("a generator's wrong shape, NA, other dtype or error stops the fit naming the batch", {
  cases <- list(
    shape = list(function(b) list(x = b$x[, 1:2, , , , drop = FALSE], y = b$y), "dim 4 x 3 x 1 x 4 x 4"),
    na = list(function(b) { b$y[1] <- NA; b }, "1 missing or infinite"),
    dtype = list(function(b) { storage.mode(b$x) <- "integer"; b }, "type integer where the first batch's was double"),
    error = list(function(b) stop("disk on fire"), "disk on fire"),
    not_list = list(function(b) b$x, "not list")
  )
  for (name in names(cases)) {
    r <- fit_until_bad(cases[[name]][[1]])
    expect_s3_class(r$err, "convlstm_error_invalid")
    expect_match(conditionMessage(r$err), "batch 3 of epoch 1", fixed = TRUE, info = name)
    expect_match(conditionMessage(r$err), cases[[name]][[2]], fixed = TRUE, info = name)
    expect_identical(r$err$batch, "batch 3 of epoch 1", info = name)
    # two steps were taken; the model is as the second left it
    expect_false(is.null(r$last), info = name)
    expect_identical(r$after, r$last, info = name)
  }
})

test_that("a truncated or changed frame file is an error naming the file", {
  series <- source_series(t = 16)
  path <- write_frames(series)
  bytes <- readBin(path, "raw", file.size(path))
  cut <- tempfile(fileext = ".frames")
  writeBin(bytes[seq_len(length(bytes) - 10)], cut)
  e <- expect_convlstm_error(convlstm_source_frames(cut, 3, 1), regexp = "truncated")
  expect_match(conditionMessage(e), basename(cut), fixed = TRUE)
  changed <- tempfile(fileext = ".frames")
  flip <- bytes
  flip[500] <- as.raw(bitwXor(as.integer(flip[500]), 1L))
  writeBin(flip, changed)
  e <- expect_convlstm_error(convlstm_source_frames(changed, 3, 1), regexp = "changed since it was written")
  expect_match(conditionMessage(e), basename(changed), fixed = TRUE)
  # without verify the change is not looked for (the header is still whole)
  expect_s3_class(convlstm_source_frames(changed, 3, 1, verify = FALSE), "convlstm_source")
  not_frames <- tempfile()
  writeBin(as.raw(1:200), not_frames)
  expect_convlstm_error(convlstm_source_frames(not_frames, 3, 1), regexp = "not a convlstm frame file")
})

test_that("a frame file truncated during a fit stops it before the next step, the model kept", {
  f <- frame_fit()
  on.exit(convlstm_release(f$m))
  last <- NULL
  cb <- convlstm_callback(on_batch_end = function(ctx) {
    last <<- convlstm_state_dict(ctx$model)
    if (ctx$batch == 2) { # cut the file in half under the map
      bytes <- readBin(f$path, "raw", file.size(f$path))
      writeBin(bytes[seq_len(length(bytes) %/% 2)], f$path)
    }
  })
  e <- expect_convlstm_error(
    convlstm_fit(f$m, f$src, NULL, convlstm_optimizer_adam(0.01), epochs = 1, batch_size = 5,
                 shuffle = FALSE, callbacks = list(cb), verbose = FALSE),
    regexp = "batch 3 of epoch 1")
  expect_match(conditionMessage(e), "truncated")
  expect_match(conditionMessage(e), basename(f$path), fixed = TRUE)
  expect_identical(convlstm_state_dict(f$m), last)
})

test_that("a source refuses y, weight, metrics and data_on_device = TRUE", {
  series <- source_series(t = 12)
  src <- convlstm_source_frames(write_frames(series), 3, 1)
  m <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(m))
  opt <- convlstm_optimizer_adam(0.01)
  y <- array(0, c(10, 1, 5, 5))
  expect_convlstm_error(convlstm_fit(m, src, y, opt, epochs = 1, verbose = FALSE), regexp = "must be NULL")
  expect_convlstm_error(convlstm_fit(m, src, NULL, opt, epochs = 1, weight = y, verbose = FALSE),
                        status = "unsupported", regexp = "weight")
  expect_convlstm_error(convlstm_fit(m, src, NULL, opt, epochs = 1, data_on_device = TRUE,
                                     verbose = FALSE), status = "unsupported")
  # a frame source's one frame is a last_state target only for a model of that many channels
  m2 <- convlstm(1, 2, 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(m2), add = TRUE)
  expect_convlstm_error(convlstm_fit(m2, src, NULL, opt, epochs = 1, verbose = FALSE))
  expect_convlstm_error(convlstm_source_read(src, 10), regexp = "1:9")
  expect_convlstm_error(convlstm_source_function(function(i) 1, n = 3), regexp = "probe fun\\(1L\\)")
})

test_that("reading a frame file leaves its pages out of the resident set", {
  skip_on_cran()
  skip_on_os(c("windows", "mac", "solaris"))
  skip_if_not(file.exists("/proc/self/status"))
  rss_file <- function() { # the file-backed resident pages, as the OS counts them
    l <- grep("^RssFile:", readLines("/proc/self/status"), value = TRUE)
    as.numeric(sub("^[^0-9]*([0-9]+).*$", "\\1", l)) * 1024
  }
  skip_if(length(rss_file()) == 0, "no RssFile line in /proc/self/status")
  frames <- function(f) array(f %% 251 / 251, c(length(f), 1, 64, 64))
  path <- tempfile(fileext = ".frames")
  on.exit(unlink(path))
  convlstm_frame_file_write(frames, path, n_frames = 3072, chunk_frames = 256) # 48 MiB
  before <- rss_file() # before the checksum's pass over the file, which gives its pages back too
  src <- convlstm_source_frames(path, seq_len = 2, horizon = 1, stride = 3)
  set.seed(1)
  order <- sample.int(src$n) # shuffled, as a fit reads them
  for (i in seq(1, src$n, by = 8)) invisible(convlstm_source_read(src, order[i:min(src$n, i + 7)]))
  grown <- rss_file() - before
  expect_lt(grown, file.size(path) / 8,
            label = sprintf("file-backed resident growth %.1f MiB over a %.0f MiB file",
                            grown / 2^20, file.size(path) / 2^20))
})

test_that("a netCDF variable is written a chunk of times at a time, as the windows read it", {
  skip_if_no_raster_pkg("ncdf4")
  nc_path <- tempfile(fileext = ".nc")
  steps <- 9
  dx <- ncdf4::ncdim_def("x", "m", as.double(1:3))
  dy <- ncdf4::ncdim_def("y", "m", as.double(1:2))
  dt <- ncdf4::ncdim_def("time", "hours since 2020-01-01 00:00:00", as.double(seq_len(steps) - 1),
                         unlim = TRUE)
  v <- ncdf4::ncvar_def("v", "mm", list(dx, dy, dt), missval = -9999, prec = "float")
  vals <- array(0, c(3, 2, steps))
  for (x in 1:3) for (y in 1:2) for (t in seq_len(steps)) vals[x, y, t] <- 100 * x + 10 * y + t
  nc <- ncdf4::nc_create(nc_path, list(v))
  ncdf4::ncvar_put(nc, v, vals)
  ncdf4::nc_close(nc)
  nc <- ncdf4::nc_open(nc_path)
  on.exit(ncdf4::nc_close(nc))
  path <- tempfile(fileext = ".frames")
  convlstm_frame_file_write(nc, path, var = "v", chunk_frames = 4)
  got <- convlstm_source_read(convlstm_source_frames(path, seq_len = 8, horizon = 1), 1)
  # frame t is [rows (y), columns (x)]: 100 x + 10 y + t, by hand
  want <- outer(1:2, 1:3, function(y, x) 100 * x + 10 * y)
  for (t in 1:8) expect_identical(got$x[1, t, 1, , ], want + t)
  expect_identical(got$y[1, 1, 1, , ], want + 9)
  # the same frames as convlstm_grid_windows() cuts from it
  w <- convlstm_grid_windows(nc, seq_len = 8, horizon = 1, var = "v")
  expect_identical(got$x, w$x)
  expect_convlstm_error(convlstm_frame_file_write(nc, tempfile(), var = "v", dtype = "uint8"),
                        regexp = "needs `scale`")
})

test_that("a function source with declared dims takes the first batch's types and checks its shape", {
  x <- array(1:24, c(2, 3, 1, 2, 2)) # integers: the first batch's type
  fun <- function(i) list(x = x[i, , , , , drop = FALSE], y = array(0L, c(length(i), 1, 2, 2)))
  src <- convlstm_source_function(fun, n = 2, x_dim = c(3, 1, 2, 2), y_dim = c(1, 2, 2))
  b <- convlstm_source_read(src, 2:1)
  expect_identical(b$x[1, , 1, , ], array(as.double(x[2, , 1, , ]), c(3, 2, 2)))
  expect_true(is.double(b$x))
  bad <- convlstm_source_function(fun, n = 2, x_dim = c(4, 1, 2, 2), y_dim = c(1, 2, 2))
  expect_convlstm_error(convlstm_source_read(bad, 1), regexp = "dim 1 x 4 x 1 x 2 x 2")
  expect_convlstm_error(convlstm_source_function(fun, n = 2, x_dim = c(3, 1, 2, 2)),
                        regexp = "both")
  expect_convlstm_error(convlstm_source_arrays(x, array(0, c(3, 1, 2, 2))), regexp = "2 rows")
})

test_that("a fit from a source resumes as one never interrupted, and takes batch_size = \"max\"", {
  series <- source_series(t = 24, seed = 4)
  path <- write_frames(series)
  src <- convlstm_source_frames(path, 3, 1)
  w <- series_windows(as_float32(series), 3, 1)
  m <- twin()
  on.exit(release_all(m))
  opt <- convlstm_optimizer_adam(0.01)
  set.seed(2)
  whole <- convlstm_fit(m$a, src, NULL, opt, epochs = 3, batch_size = 5, verbose = FALSE)
  ck <- tempfile(fileext = ".safetensors")
  set.seed(2)
  convlstm_fit(m$b, src, NULL, opt, epochs = 2, batch_size = 5, verbose = FALSE,
               callbacks = list(convlstm_callback_model_checkpoint(ck)))
  resumed <- convlstm_fit(m$b, src, NULL, opt, epochs = 3, batch_size = 5, verbose = FALSE,
                          resume = ck)
  expect_identical(resumed$loss, whole$loss)
  expect_identical(convlstm_state_dict(m$b), convlstm_state_dict(m$a))
  # "max": the batch the same budget gives the same windows in arrays
  h_src <- convlstm_fit(m$a, src, NULL, opt, epochs = 1, batch_size = "max",
                        memory_budget = "2 MiB", verbose = FALSE)
  h_arr <- convlstm_fit(m$b, w$x, array(w$y, c(dim(w$y)[1], 1, 5, 5)), opt, epochs = 1,
                        batch_size = "max", memory_budget = "2 MiB", verbose = FALSE)
  expect_identical(attr(h_src, "batch_size"), attr(h_arr, "batch_size"))
})

test_that("a source's staging buffers are planned under data: a batch of x and y in doubles, two when read ahead", {
  f <- frame_fit()
  src <- f$src # x [4, 1, 5, 5], y [1, 1, 5, 5]
  m <- f$m
  on.exit(convlstm_release(m))
  by <- function(e) stats::setNames(e$bytes, e$category)
  plain <- by(convlstm_memory_estimate(m, 6, 4, 5, 5))
  one <- 6 * (4 * 1 * 5 * 5 + 1 * 1 * 5 * 5) * 8 # batch x shape x 8 bytes, x and y
  grown <- function(e) by(e)[c("data", "total", "reserved")] - plain[c("data", "total", "reserved")]
  est <- convlstm_memory_estimate(m, 6, 4, 5, 5, source = src)
  expect_equal(unname(grown(est)), rep(2 * one, 3)) # read ahead: two of each
  rows <- attr(est, "plan")
  expect_equal(rows$bytes[match(c("source_x", "source_y", "source_x_next", "source_y_next"),
                                rows$name)], c(4800, 1200, 4800, 1200))
  expect_true(all(rows$category[grepl("^source_", rows$name)] == "data"))
  old <- options(convlstm.prefetch = FALSE)
  off <- convlstm_memory_estimate(m, 6, 4, 5, 5, source = src)
  options(old)
  expect_equal(unname(grown(off)), rep(one, 3))
  # a function's next batch is read while the step runs: two of each too
  fun_src <- convlstm_source_function(function(i) convlstm_source_read(src, i), n = src$n)
  expect_equal(unname(grown(convlstm_memory_estimate(m, 6, 4, 5, 5, source = fun_src))),
               rep(2 * one, 3))
  # the advisor's every configuration holds them
  adv <- convlstm_memory_advise(m, "64 MiB", 6, 4, 5, 5)
  adv_src <- convlstm_memory_advise(m, "64 MiB", 6, 4, 5, 5, source = src)
  key <- function(a) paste(a$dtype, a$checkpoint, a$recompute_gates, a$accumulation_steps)
  adv_src <- adv_src[match(key(adv), key(adv_src)), ]
  expect_equal(adv_src$data - adv$data, rep(2 * one, nrow(adv)))
  expect_equal(adv_src$reserved - adv$reserved, rep(2 * one, nrow(adv)))
  # memory_budget: "max" is the largest batch whose step and staging fit
  per <- 2 * (4 * 25 + 25) * 8
  budget <- by(convlstm_memory_estimate(m, 8, 4, 5, 5, dtype = "float32"))[["reserved"]] + 8 * per
  h <- convlstm_fit(m, src, NULL, convlstm_optimizer_adam(0.01), epochs = 1, batch_size = "max",
                    memory_budget = budget, verbose = FALSE)
  expect_equal(attr(h, "batch_size"), 8)
})

test_that("a fit reading a frame file ahead equals, bit for bit, the fit that reads each batch at its step", {
  series <- source_series(t = 40, seed = 5)
  src <- convlstm_source_frames(write_frames(series), 4, 1, stride = 1) # 36 windows
  m <- twin()
  on.exit(release_all(m))
  opt <- convlstm_optimizer_adam(0.01)
  fit <- function(model, prefetch) {
    old <- options(convlstm.prefetch = prefetch)
    on.exit(options(old))
    set.seed(3) # shuffled batches of 5, the last of 2, a validation split
    convlstm_fit(model, src, NULL, opt, epochs = 2, batch_size = 5, validation_split = 0.2,
                 verbose = FALSE)
  }
  taken <- new.env()
  taken$n <- 0
  suppressMessages(trace("c_fa_ahead_take", where = asNamespace("convlstm"), print = FALSE,
                         tracer = bquote(assign("n", get("n", .(taken)) + 1, envir = .(taken)))))
  on.exit(suppressMessages(untrace("c_fa_ahead_take", where = asNamespace("convlstm"))),
          add = TRUE)
  ahead <- fit(m$a, TRUE)
  expect_equal(taken$n, 2 * 6) # every training batch came from the reader ahead
  taken$n <- 0
  plain <- fit(m$b, FALSE)
  expect_equal(taken$n, 0)
  expect_identical(ahead$loss, plain$loss)
  expect_identical(ahead$val_loss, plain$val_loss)
  expect_identical(convlstm_state_dict(m$a), convlstm_state_dict(m$b))
  # the environment variable turns it off as the option does
  withr_env <- Sys.getenv("CONVLSTM_PREFETCH", unset = NA)
  Sys.setenv(CONVLSTM_PREFETCH = "0")
  on.exit(if (is.na(withr_env)) Sys.unsetenv("CONVLSTM_PREFETCH")
          else Sys.setenv(CONVLSTM_PREFETCH = withr_env), add = TRUE)
  set.seed(3)
  convlstm_fit(m$b, src, NULL, opt, epochs = 1, batch_size = 5, verbose = FALSE)
  expect_equal(taken$n, 0)
})

test_that("a frame file truncated before a batch read ahead stops the fit naming that batch, the model kept", {
  f <- frame_fit()
  on.exit(convlstm_release(f$m))
  last <- NULL
  cb <- convlstm_callback(
    on_batch_end = function(ctx) last <<- convlstm_state_dict(ctx$model),
    # the header alone is left: the reader's thread, starting epoch 2's
    # batch 1, must find it truncated before it touches the map
    on_epoch_end = function(ctx) writeBin(readBin(f$path, "raw", 128), f$path))
  e <- expect_convlstm_error(
    convlstm_fit(f$m, f$src, NULL, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 5,
                 shuffle = FALSE, callbacks = list(cb), verbose = FALSE),
    status = "invalid", regexp = "batch 1 of epoch 2")
  expect_match(conditionMessage(e), "truncated")
  expect_match(conditionMessage(e), basename(f$path), fixed = TRUE)
  expect_identical(e$batch, "batch 1 of epoch 2")
  expect_identical(convlstm_state_dict(f$m), last)
})

# A fit over a generator of 14 samples of [3, 1, 4, 4] (batches of 4: the
# last of 2), with or without reading ahead; stop_at: the call of the
# generator (1 is the probe) that signals an interrupt instead.
fit_generator <- function(prefetch, threads = 1, stop_at = 0) {
  set.seed(3)
  x <- array(stats::runif(14 * 3 * 4 * 4), c(14, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(14, 1, 4, 4))
  calls <- 0
  fun <- function(i) {
    calls <<- calls + 1
    if (calls == stop_at) signalCondition(structure(class = c("interrupt", "condition"),
                                                    list(message = "", call = NULL)))
    list(x = x[i, , , , , drop = FALSE], y = y[i, , , , drop = FALSE])
  }
  src <- convlstm_source_function(fun, n = 14)
  old <- options(convlstm.prefetch = prefetch)
  on.exit(options(old))
  m <- convlstm(1, c(3, 1), 3, device = "cpu", threads = threads)
  on.exit(convlstm_release(m), add = TRUE)
  set.seed(5)
  h <- convlstm_fit(m, src, NULL, convlstm_optimizer_adam(0.02), epochs = 2, batch_size = 4,
                    validation_split = 0.15, verbose = FALSE)
  list(h = h, w = convlstm_state_dict(m))
}

test_that("a fit whose step runs on a C thread while the generator reads the next batch equals the one that does not", {
  steps <- new.env()
  steps$n <- 0
  suppressMessages(trace("c_train_step_finish", where = asNamespace("convlstm"), print = FALSE,
                         tracer = bquote(assign("n", get("n", .(steps)) + 1, envir = .(steps)))))
  on.exit(suppressMessages(untrace("c_train_step_finish", where = asNamespace("convlstm"))))
  for (threads in 1:2) { # the CPU backend's worker threads, started from the step's thread
    ahead <- fit_generator(TRUE, threads)
    expect_equal(steps$n, 2 * 3, info = threads) # 12 training samples, batches 4, 4, 4
    steps$n <- 0
    plain <- fit_generator(FALSE, threads)
    expect_equal(steps$n, 0, info = threads)
    expect_identical(ahead$h$loss, plain$h$loss, info = threads)
    expect_identical(ahead$h$val_loss, plain$h$val_loss, info = threads)
    expect_identical(ahead$w, plain$w, info = threads)
  }
})

test_that("an interrupt while the generator reads ahead ends the fit after the running step, the model valid", {
  # call 4 reads batch 3 of epoch 1: during step 2 when reading ahead, after it otherwise
  ahead <- fit_generator(TRUE, stop_at = 4)
  plain <- fit_generator(FALSE, stop_at = 4)
  expect_equal(nrow(ahead$h), 0) # no epoch completed
  expect_identical(ahead$w, plain$w) # both after step 2, complete
  untouched <- fit_generator(FALSE, stop_at = 3) # after step 1
  expect_false(identical(ahead$w, untouched$w))
  expect_true(all(vapply(ahead$w, function(v) all(is.finite(v)), logical(1))))
})
