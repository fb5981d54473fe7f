# convlstm_grid_windows() and convlstm_grid_restore(): a time series of rasters (array, stars,
# terra, ncdf4) into input/target windows and forecasts back onto the grid.

stageiv <- function() system.file("nc/test_stageiv_xyt.nc", package = "stars")

drifting_blob <- function() {
  series <- array(0, c(12, 16, 8))
  for (t in 1:8) series[5:8, t + 0:3, t] <- t
  series
}

test_that("an array [height, width, time] is cut into windows in the models' layout", {
  series <- drifting_blob()
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2)
  expect_s3_class(w, "convlstm_grid_windows")
  expect_identical(dim(w$x), c(4L, 3L, 1L, 12L, 16L))
  expect_identical(dim(w$y), c(4L, 2L, 1L, 12L, 16L))
  expect_identical(w$target_frames, rbind(4:5, 5:6, 6:7, 7:8))
  for (i in 1:4) {
    for (k in 1:3) expect_identical(w$x[i, k, 1, , ], series[, , i + k - 1])
    for (k in 1:2) expect_identical(w$y[i, k, 1, , ], series[, , i + k + 2])
  }
  s2 <- convlstm_grid_windows(series, seq_len = 2, horizon = 1, stride = 3)
  expect_identical(s2$input_frames, rbind(1:2, 4:5))
  expect_output(print(w), "4 windows of 3 input and 2 target frames")
})

test_that("grid_restore gives back the array's own layout at the targets' times", {
  series <- drifting_blob()
  dimnames(series) <- list(NULL, NULL, paste0("h", 1:8))
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2)
  back <- convlstm_grid_restore(w$y, w, window = 2)
  expect_identical(back, series[, , 5:6, drop = FALSE])
  expect_identical(convlstm_grid_restore(array(w$y[3, , , , ], dim(w$y)[-1]), w, window = 3), series[, , 6:7, drop = FALSE])
  # time first and a channel dimension: [time, channels, height, width]
  multi <- aperm(array(c(series, -series), c(12, 16, 8, 2)), c(3, 4, 1, 2))
  wm <- convlstm_grid_windows(multi, seq_len = 2, horizon = 3, layout = "tchw")
  expect_identical(dim(wm$x), c(4L, 2L, 2L, 12L, 16L))
  expect_identical(wm$x[2, 1, 2, , ], -unname(series[, , 2]))
  expect_identical(convlstm_grid_restore(wm$y, wm, window = 4), multi[6:8, , , , drop = FALSE])
})

test_that("a stars series keeps its grid, units and times", {
  skip_if_no_raster_pkg("stars")
  rain <- suppressMessages(stars::read_stars(stageiv()))
  w <- convlstm_grid_windows(rain, seq_len = 4, horizon = 2, stride = 2)
  expect_identical(dim(w$x), c(9L, 4L, 1L, 118L, 87L))
  raw <- unclass(rain[[1]]) # [x, y, time]
  expect_equal(w$x[3, 2, 1, , ], t(raw[, , 6]), ignore_attr = TRUE)
  expect_equal(w$y[9, 2, 1, , ], t(raw[, , 22]), ignore_attr = TRUE)
  times <- stars::st_get_dimension_values(rain, "time")
  expect_identical(w$times, times)
  fc <- w$y * 0.5
  back <- convlstm_grid_restore(fc, w, window = 5)
  expect_s3_class(back, "stars")
  expect_identical(stars::st_get_dimension_values(back, "time"), times[w$target_frames[5, ]])
  expect_equal(as.vector(unclass(back[[1]])), 0.5 * as.vector(raw[, , 13:14]))
  expect_identical(w$target_frames[5, ], 13:14)
  expect_identical(units(back[[1]]), units(rain[[1]]))
  expect_identical(stars::st_dimensions(back)$x$refsys, stars::st_dimensions(rain)$x$refsys)
  expect_equal(stars::st_get_dimension_values(back, "x"), stars::st_get_dimension_values(rain, "x"))
})

test_that("a fourth stars dimension becomes the channels", {
  skip_if_no_raster_pkg("stars")
  a <- array(seq_len(5 * 4 * 2 * 6), c(5, 4, 2, 6)) # [x, y, band, time]
  s <- stars::st_as_stars(a)
  s <- stars::st_set_dimensions(s, 1, name = "x")
  s <- stars::st_set_dimensions(s, 2, name = "y")
  s <- stars::st_set_dimensions(s, 3, name = "band")
  s <- stars::st_set_dimensions(s, 4, name = "time",
                                values = as.POSIXct("2020-01-01", tz = "UTC") + 3600 * (0:5))
  w <- convlstm_grid_windows(s, seq_len = 2, horizon = 2)
  expect_identical(dim(w$x), c(3L, 2L, 2L, 4L, 5L))
  expect_identical(w$x[2, 1, 2, , ], t(a[, , 2, 2]) + 0)
  back <- convlstm_grid_restore(w$y, w, window = 3)
  expect_equal(as.vector(back[[1]]), as.vector(a[, , , 5:6]))
})

test_that("a terra SpatRaster with times is read and restored", {
  skip_if_no_raster_pkg("terra")
  skip_if_no_raster_pkg("stars")
  rain <- suppressMessages(stars::read_stars(stageiv()))
  r <- suppressWarnings({
    out <- NULL
    utils::capture.output(out <- terra::rast(stageiv()))
    out
  })
  terra::time(r) <- stars::st_get_dimension_values(rain, "time")
  w <- convlstm_grid_windows(r, seq_len = 4, horizon = 2)
  expect_equal(w$x, convlstm_grid_windows(rain, seq_len = 4, horizon = 2)$x)
  back <- convlstm_grid_restore(w$y, w, window = 3)
  expect_s4_class(back, "SpatRaster")
  expect_equal(terra::values(back), terra::values(r[[7:8]]), ignore_attr = TRUE)
  expect_identical(terra::time(back), terra::time(r)[7:8])
  expect_equal(as.vector(terra::ext(back)), as.vector(terra::ext(r)))
  terra::time(r) <- NULL
  expect_error(convlstm_grid_windows(r, seq_len = 4, horizon = 2), "`data` has no time axis",
               class = "convlstm_error_invalid")
})

test_that("an ncdf4 variable is read, and forecasts are written to a new netCDF file", {
  skip_if_no_raster_pkg("ncdf4")
  nc <- ncdf4::nc_open(stageiv())
  on.exit(ncdf4::nc_close(nc))
  var <- "Total_precipitation_surface_1_Hour_Accumulation"
  w <- convlstm_grid_windows(nc, seq_len = 5, horizon = 3, var = var)
  raw <- ncdf4::ncvar_get(nc, var) # [x, y, time]
  expect_identical(dim(w$x), c(16L, 5L, 1L, 118L, 87L))
  expect_equal(w$x[2, 1, 1, , ], t(raw[, , 2]))
  path <- tempfile(fileext = ".nc")
  expect_identical(convlstm_grid_restore(w$y, w, window = 4, path = path), path)
  out <- ncdf4::nc_open(path)
  on.exit(ncdf4::nc_close(out), add = TRUE)
  expect_equal(ncdf4::ncvar_get(out, var), raw[, , 9:11], tolerance = 1e-6)
  expect_equal(out$dim$time$vals, nc$dim$time$vals[9:11])
  expect_identical(out$dim$time$units, nc$dim$time$units)
  expect_equal(ncdf4::ncvar_get(out, "lat"), ncdf4::ncvar_get(nc, "lat"))
  expect_error(convlstm_grid_restore(w$y, w, window = 4, path = path), "`path`.*exists",
               class = "convlstm_error_invalid")
  expect_error(convlstm_grid_windows(nc, seq_len = 5, horizon = 3, var = "lat"), "`data` has no time axis",
               class = "convlstm_error_invalid")
  expect_error(convlstm_grid_windows(nc, seq_len = 5, horizon = 3, var = "rain"), "`var`",
               class = "convlstm_error_invalid")
})

test_that("bad input is a classed error naming the argument", {
  series <- drifting_blob()
  expect_error(convlstm_grid_windows(series, seq_len = 6, horizon = 3), "`seq_len` \\+ `horizon`.*8 frames",
               class = "convlstm_error_invalid")
  expect_error(convlstm_grid_windows(series[, , 1], seq_len = 1, horizon = 1), "`data`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_grid_windows(list(1), seq_len = 1, horizon = 1), "`data`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_grid_windows(series, seq_len = 0, horizon = 1), "`seq_len`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_grid_windows(series, seq_len = 2, horizon = 1, time_dim = 4), "`time_dim`",
               class = "convlstm_error_invalid")
  series[1, 1, 1] <- NA
  expect_error(convlstm_grid_windows(series, seq_len = 2, horizon = 1), "`data`",
               class = "convlstm_error_invalid")
  w <- convlstm_grid_windows(drifting_blob(), seq_len = 3, horizon = 2)
  expect_error(convlstm_grid_restore(w$x, w), "`frames`", class = "convlstm_error_invalid")
  expect_error(convlstm_grid_restore(w$y, w, window = 5), "`window`", class = "convlstm_error_invalid")
  expect_error(convlstm_grid_restore(w$y[1:2, , , , , drop = FALSE], w, window = 2), "`frames`.*one row per window",
               class = "convlstm_error_invalid")
  expect_identical(convlstm_grid_restore(w$y[3, , , , , drop = FALSE], w, window = 3),
                   convlstm_grid_restore(w$y, w, window = 3))
  expect_error(convlstm_grid_restore(w$y, list()), "`windows`", class = "convlstm_error_invalid")
  skip_if_no_raster_pkg("stars")
  flat <- stars::st_as_stars(matrix(1, 4, 5))
  expect_error(convlstm_grid_windows(flat, seq_len = 1, horizon = 1), "`data` has no time axis",
               class = "convlstm_error_invalid")
})

test_that("a missing optional package is a classed message naming it", {
  expect_error(need_package("convlstmNoSuchPackage", "A test series", NULL),
               "needs the package 'convlstmNoSuchPackage'", class = "convlstm_error_unsupported")
})
