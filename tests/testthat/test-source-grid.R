# convlstm_source_grid(): the windows of convlstm_grid_windows(), read lazily.
# Expected values come from convlstm_grid_windows() on the same series, which
# reads the whole series its own way (st_as_stars, terra::as.array, one
# ncvar_get), or from plain R slicing of the array.

read_rows <- function(src, rows) { # a batch, without the storage types the fit keeps
  b <- convlstm_source_read(src, rows)
  attr(b, "types") <- NULL
  b
}
windows_rows <- function(w, rows) {
  list(x = w$x[rows, , , , , drop = FALSE], y = w$y[rows, , , , , drop = FALSE])
}

test_that("an array source's batches are the windows' rows, in the order asked", {
  set.seed(1)
  series <- array(runif(5 * 6 * 11), c(5, 6, 11)) # [height, width, time]
  src <- convlstm_source_grid(series, seq_len = 3, horizon = 2, stride = 2)
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2, stride = 2)
  expect_equal(src$n, dim(w$x)[[1]])
  expect_identical(read_rows(src, c(4, 1, 3)), windows_rows(w, c(4, 1, 3)))
  # by hand: window 2 starts at frame 3 (stride 2), its target frames 6 and 7
  b <- convlstm_source_read(src, 2)
  expect_identical(b$x[1, 2, 1, , ], series[, , 4])
  expect_identical(b$y[1, 2, 1, , ], series[, , 7])
  expect_identical(src$target_frames[2, ], 6:7)
})

test_that("a netCDF source reads only the frames of the windows asked for", {
  skip_if_not_installed("ncdf4")
  path <- tempfile(fileext = ".nc")
  set.seed(2)
  vals <- array(runif(4 * 3 * 20), c(4, 3, 20)) # ncdf4's order: x, y, time
  dx <- ncdf4::ncdim_def("x", "m", 1:4)
  dy <- ncdf4::ncdim_def("y", "m", 1:3)
  dt <- ncdf4::ncdim_def("time", "hours since 2020-01-01", 0:19)
  v <- ncdf4::ncvar_def("rain", "mm", list(dx, dy, dt), prec = "double")
  nc <- ncdf4::nc_create(path, v)
  ncdf4::ncvar_put(nc, v, vals)
  ncdf4::nc_close(nc)
  nc <- ncdf4::nc_open(path)
  on.exit(ncdf4::nc_close(nc))
  src <- convlstm_source_grid(nc, seq_len = 4, horizon = 2, var = "rain")
  w <- convlstm_grid_windows(nc, seq_len = 4, horizon = 2, var = "rain")
  expect_identical(read_rows(src, c(9, 1, 15)), windows_rows(w, c(9, 1, 15)))
  # frame t of window 1 by hand: [rows = y, cols = x]
  expect_equal(convlstm_source_read(src, 1)$x[1, 2, 1, , ], t(vals[, , 2]))
  # ncdf4's own reads, counted where ncdf4 does them: windows 1 and 15 take
  # frames 1-6 and 15-20, two reads of 6 time steps, not the 20 of the file
  seen <- new.env()
  seen$counts <- list()
  trace("ncvar_get", where = asNamespace("ncdf4"), print = FALSE,
        tracer = substitute(assign("counts", c(E$counts, list(count)), envir = E), list(E = seen)))
  on.exit(untrace("ncvar_get", where = asNamespace("ncdf4")), add = TRUE)
  convlstm_source_read(src, c(15, 1))
  expect_equal(length(seen$counts), 2)
  expect_equal(vapply(seen$counts, function(k) k[[3]], numeric(1)), c(6, 6))
})

test_that("a SpatRaster source on a file equals the windows of the whole raster", {
  skip_if_not_installed("terra")
  set.seed(3)
  r <- terra::rast(array(runif(5 * 6 * 9), c(5, 6, 9)))
  path <- tempfile(fileext = ".tif")
  terra::writeRaster(r, path, datatype = "FLT8S")
  r <- terra::rast(path)
  terra::time(r) <- as.POSIXct("2020-01-01", tz = "UTC") + 3600 * (0:8)
  src <- convlstm_source_grid(r, seq_len = 2, horizon = 3)
  w <- convlstm_grid_windows(r, seq_len = 2, horizon = 3)
  expect_identical(read_rows(src, c(5, 2)), windows_rows(w, c(5, 2)))
  expect_identical(src$times, w$times)
})

test_that("a stars_proxy source reads bands or files and equals st_as_stars()'s windows", {
  skip_if_not_installed("stars")
  skip_if_not_installed("terra")
  set.seed(4)
  times <- as.POSIXct("2020-01-01", tz = "UTC") + 3600 * (0:7)
  vals <- array(runif(5 * 6 * 8), c(5, 6, 8))
  one <- tempfile(fileext = ".tif") # the times as bands of one file
  terra::writeRaster(terra::rast(vals), one, datatype = "FLT8S")
  p <- suppressWarnings(stars::read_stars(one, proxy = TRUE, quiet = TRUE))
  p <- stars::st_set_dimensions(p, "band", values = times, names = "time")
  src <- convlstm_source_grid(p, seq_len = 3, horizon = 2)
  w <- convlstm_grid_windows(p, seq_len = 3, horizon = 2)
  expect_identical(read_rows(src, c(4, 1)), windows_rows(w, c(4, 1)))
  expect_equal(convlstm_source_read(src, 1)$x[1, 1, 1, , ], vals[, , 1]) # rows are the raster's
  each <- vapply(1:8, function(k) { # one file per time
    f <- tempfile(fileext = ".tif")
    terra::writeRaster(terra::rast(vals[, , k]), f, datatype = "FLT8S")
    f
  }, character(1))
  q <- suppressWarnings(stars::read_stars(each, along = "time", proxy = TRUE, quiet = TRUE))
  q <- stars::st_set_dimensions(q, "time", values = times)
  src2 <- convlstm_source_grid(q, seq_len = 3, horizon = 2)
  expect_identical(read_rows(src2, c(4, 1)), windows_rows(w, c(4, 1)))
})

test_that("a fit from a grid source equals the fit from the windows' arrays", {
  set.seed(5)
  series <- array(runif(6 * 6 * 12), c(6, 6, 12))
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 1)
  src <- convlstm_source_grid(series, seq_len = 3, horizon = 1)
  fit_once <- function(x, y) {
    set.seed(9)
    m <- convlstm(1, 1, 3, device = "cpu")
    on.exit(convlstm_release(m))
    h <- convlstm_fit(m, x, y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 3,
                      verbose = FALSE)
    list(loss = h$loss, w = convlstm_state_dict(m))
  }
  y <- array(w$y, dim(w$y)[-2]) # one target frame: [n, channels, height, width]
  a <- fit_once(w$x, y)
  src1 <- convlstm_source_function(function(i) {
    b <- convlstm_source_read(src, i)
    list(x = b$x, y = array(b$y, dim(b$y)[-2]))
  }, n = src$n)
  expect_identical(fit_once(src1, NULL), a)
})

test_that("bad grid sources are refused with classed errors", {
  series <- array(0, c(4, 4, 5))
  expect_convlstm_error(convlstm_source_grid(series, seq_len = 4, horizon = 2), "invalid",
                        "longer than the series")
  expect_convlstm_error(convlstm_source_grid(series, seq_len = 0, horizon = 2), "invalid", "seq_len")
  expect_convlstm_error(convlstm_source_grid(list(1), seq_len = 2, horizon = 1), "invalid", "data")
  series[2, 2, 4] <- NA
  src <- convlstm_source_grid(series, seq_len = 2, horizon = 1)
  expect_silent(convlstm_source_read(src, 1)) # frames 1-3
  expect_convlstm_error(convlstm_source_read(src, 2), "invalid", "missing")
})
