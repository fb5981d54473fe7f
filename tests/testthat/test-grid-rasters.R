# convlstm_grid_windows()/convlstm_grid_restore() on tiny rasters whose every cell is known:
# an array's declared layout, ncdf4 files with a horizon of 1 and time
# first, stars attributes as channels, and NA cells masked (issue 35 item 6).
# Cell values encode their place: 1000 h + 100 w + 10 c + t (arrays), or
# 100 x + 10 y + t (netCDF, stars), so an expected value is read off by hand.

hwct <- function() {
  a <- array(0, c(2, 3, 2, 4)) # [height, width, channels, time]
  for (h in 1:2) for (w in 1:3) for (k in 1:2) for (t in 1:4) a[h, w, k, t] <- 1000 * h + 100 * w + 10 * k + t
  a
}

test_that("an [H, W, C, T] array is read as declared: layout = \"hwct\"", {
  a <- hwct()
  w <- convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = "hwct")
  expect_identical(dim(w$x), c(3L, 1L, 2L, 2L, 3L)) # [n, input, channels, height, width]
  # by hand: window 2's input is frame 2; channel 2, row 1, column 3: 1000 + 300 + 20 + 2
  expect_identical(w$x[2, 1, 2, 1, 3], 1322)
  # window 1's target is frame 2; channel 1, row 2, column 1: 2000 + 100 + 10 + 2
  expect_identical(w$y[1, 1, 1, 2, 1], 2112)
  expect_identical(w$y[3, 1, 2, , ], rbind(c(1124, 1224, 1324), c(2124, 2224, 2324)))
  # restored in the array's own order, at the target's time (frame 4)
  expect_identical(convlstm_grid_restore(w$y, w, window = 3), a[, , , 4, drop = FALSE])
  # undeclared, four dimensions are refused (they were read as [channels, height, width,
  # time]: 2 channels of 3 x 2, silently); declared as that, they are read so
  expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1),
                        regexp = "four-dimensional array's order.*`layout`")
  expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1, time_dim = 4),
                        regexp = "four-dimensional array's order.*`layout`")
  d <- convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = "chwt")
  expect_identical(dim(d$x), c(3L, 1L, 2L, 3L, 2L))
  expect_identical(d$x[2, 1, 2, 1, 2], a[2, 1, 2, 2])
  # time first: [time, height, width, channels]
  tf <- aperm(a, c(4, 1, 2, 3))
  wt <- convlstm_grid_windows(tf, seq_len = 1, horizon = 1, layout = "thwc")
  expect_identical(wt$x, w$x)
  expect_identical(convlstm_grid_restore(wt$y, wt, window = 3), tf[4, , , , drop = FALSE])
  # three dimensions, [time, width, height]
  a3 <- aperm(a[, , 1, ], c(3, 2, 1))
  w3 <- convlstm_grid_windows(a3, seq_len = 2, horizon = 1, layout = "twh")
  expect_identical(w3$y[1, 1, 1, 2, 3], 2313) # frame 3, row 2, column 3, channel 1
  expect_identical(convlstm_grid_restore(w3$y, w3, window = 2), a3[4, , , drop = FALSE])
})

test_that("named dimensions declare the layout; a layout that contradicts them is refused", {
  a <- hwct()
  dimnames(a) <- list(height = c("n", "s"), width = c("w1", "w2", "w3"), channel = c("u", "v"),
                      time = paste0("t", 1:4))
  w <- convlstm_grid_windows(a, seq_len = 1, horizon = 1)
  expect_identical(w$x[2, 1, 2, 1, 3], 1322)
  expect_identical(dim(w$y), c(3L, 1L, 2L, 2L, 3L))
  expect_identical(convlstm_grid_restore(w$y, w, window = 1), a[, , , 2, drop = FALSE]) # dimnames kept
  expect_identical(convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = "hwct")$x, w$x)
  expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = "chwt"), regexp = "`layout`.*contradicts")
  # names that are not all of time/height/width/channel declare nothing: refused
  names(dimnames(a))[[1]] <- "lat"
  expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1),
                        regexp = "four-dimensional array's order")
})

test_that("a layout that is not one letter per dimension, or that time_dim contradicts, is refused", {
  a <- hwct()
  for (bad in list("hwc", "hwctt", "hwcc", "hwcx", "xhwt", c("h", "w", "c", "t"), 1, NA_character_)) {
    expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = bad), regexp = "`layout`")
  }
  expect_convlstm_error(convlstm_grid_windows(a[, , 1, ], seq_len = 1, horizon = 1, layout = "chwt"), regexp = "`layout`")
  expect_convlstm_error(convlstm_grid_windows(a[, , 1, ], seq_len = 1, horizon = 1, layout = "chw"), regexp = "`layout`")
  expect_identical(dim(convlstm_grid_windows(a[, , 1, ], seq_len = 1, horizon = 1, layout = "hwt")$x), c(3L, 1L, 1L, 2L, 3L))
  # time_dim agreeing with the layout is accepted, one dimension off is refused
  expect_identical(convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = "hwct", time_dim = 4)$x,
                   convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = "hwct")$x)
  expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = "hwct", time_dim = 3),
                        regexp = "`time_dim`.*contradicts")
  skip_if_no_raster_pkg("stars")
  s <- stars::st_as_stars(a[, , 1, ])
  expect_convlstm_error(convlstm_grid_windows(s, seq_len = 1, horizon = 1, layout = "hwt"), regexp = "`layout`")
})

# a netCDF file whose variable v is 100 x + 10 y + t on x = 1..3, y = 1..2
tiny_nc <- function(path, steps, time_first = FALSE) {
  dx <- ncdf4::ncdim_def("x", "m", as.double(1:3))
  dy <- ncdf4::ncdim_def("y", "m", as.double(1:2))
  dt <- ncdf4::ncdim_def("time", "hours since 2020-01-01 00:00:00", as.double(seq_len(steps) - 1),
                         unlim = !time_first)
  dims <- if (time_first) list(dt, dx, dy) else list(dx, dy, dt)
  v <- ncdf4::ncvar_def("v", "mm", dims, missval = -9999, prec = "float")
  vals <- array(0, vapply(dims, function(d) length(d$vals), 1))
  for (x in 1:3) for (y in 1:2) for (t in seq_len(steps)) {
    if (time_first) vals[t, x, y] <- 100 * x + 10 * y + t else vals[x, y, t] <- 100 * x + 10 * y + t
  }
  nc <- ncdf4::nc_create(path, list(v))
  ncdf4::ncvar_put(nc, v, vals)
  ncdf4::nc_close(nc)
  vals
}

test_that("ncdf4: a horizon of 1 is written back to a netCDF file", {
  skip_if_no_raster_pkg("ncdf4")
  src <- tempfile(fileext = ".nc")
  tiny_nc(src, steps = 3)
  nc <- ncdf4::nc_open(src)
  on.exit(ncdf4::nc_close(nc))
  w <- convlstm_grid_windows(nc, seq_len = 2, horizon = 1, var = "v")
  expect_identical(dim(w$y), c(1L, 1L, 1L, 2L, 3L)) # rows y, columns x
  expect_identical(w$y[1, 1, 1, , ], rbind(c(113, 213, 313), c(123, 223, 323)))
  path <- tempfile(fileext = ".nc")
  expect_identical(convlstm_grid_restore(w$y + 0.5, w, window = 1, path = path), path)
  out <- ncdf4::nc_open(path)
  on.exit(ncdf4::nc_close(out), add = TRUE)
  got <- ncdf4::ncvar_get(out, "v", collapse_degen = FALSE)
  expect_identical(dim(got), c(3L, 2L, 1L))
  expect_equal(got[, , 1], cbind(c(113.5, 213.5, 313.5), c(123.5, 223.5, 323.5)))
  expect_equal(as.vector(out$dim$time$vals), 2) # the third frame: 2 hours since
})

test_that("ncdf4: a variable whose time dimension comes first is read and written", {
  skip_if_no_raster_pkg("ncdf4")
  src <- tempfile(fileext = ".nc")
  vals <- tiny_nc(src, steps = 4, time_first = TRUE) # [time, x, y]
  nc <- ncdf4::nc_open(src)
  on.exit(ncdf4::nc_close(nc))
  w <- convlstm_grid_windows(nc, seq_len = 1, horizon = 2, var = "v")
  expect_identical(dim(w$x), c(2L, 1L, 1L, 2L, 3L))
  expect_identical(w$x[2, 1, 1, , ], rbind(c(112, 212, 312), c(122, 222, 322)))
  expect_identical(w$y[1, 2, 1, 2, 1], 123)
  for (h in 1:2) {
    path <- tempfile(fileext = ".nc")
    fc <- w$y[, seq_len(h), , , , drop = FALSE]
    wh <- convlstm_grid_windows(nc, seq_len = 1, horizon = h, var = "v")
    convlstm_grid_restore(wh$y, wh, window = 2, path = path)
    out <- ncdf4::nc_open(path)
    got <- ncdf4::ncvar_get(out, "v", collapse_degen = FALSE)
    names_out <- vapply(out$var$v$dim, `[[`, "", "name")
    times_out <- out$dim$time$vals
    ncdf4::nc_close(out)
    expect_identical(names_out, c("time", "x", "y"))
    expect_identical(dim(got), c(h, 3L, 2L))
    expect_equal(got, vals[2 + seq_len(h), , , drop = FALSE]) # frames 3.. of window 2
    expect_equal(as.vector(times_out), 1 + seq_len(h))
  }
})

# a stars object with attributes rain = 100 x + 10 y + t and temp = -(...)
two_attributes <- function(first = "rain") {
  a <- array(0, c(3, 2, 4)) # [x, y, time]
  for (x in 1:3) for (y in 1:2) for (t in 1:4) a[x, y, t] <- 100 * x + 10 * y + t
  l <- list(rain = a, temp = -a)
  if (first == "temp") l <- l[2:1]
  s <- stars::st_as_stars(l[[1]]) # (st_as_stars() of a list leaves x and y no raster)
  names(s) <- names(l)[[1]]
  s[[names(l)[[2]]]] <- l[[2]]
  s <- stars::st_set_dimensions(s, 1, name = "x")
  s <- stars::st_set_dimensions(s, 2, name = "y")
  stars::st_set_dimensions(s, 3, name = "time",
                           values = as.POSIXct("2020-01-01", tz = "UTC") + 3600 * (0:3))
}

test_that("a stars object's attributes are its channels, in attribute order", {
  skip_if_no_raster_pkg("stars")
  s <- two_attributes()
  w <- convlstm_grid_windows(s, seq_len = 2, horizon = 1)
  expect_identical(dim(w$x), c(2L, 2L, 2L, 2L, 3L))
  expect_identical(w$x[2, 1, 1, , ], rbind(c(112, 212, 312), c(122, 222, 322)))
  expect_identical(w$x[2, 1, 2, 1, 3], -312)
  expect_identical(w$y[1, 1, 2, 2, 1], -123)
  swapped <- convlstm_grid_windows(two_attributes("temp"), seq_len = 2, horizon = 1)
  expect_identical(swapped$x[2, 1, 1, 1, 3], -312)
  back <- convlstm_grid_restore(w$y * 2, w, window = 2)
  expect_identical(names(back), c("rain", "temp"))
  expect_equal(as.vector(back[[1]]), 2 * as.vector(s[[1]][, , 4]))
  expect_equal(as.vector(back[[2]]), -2 * as.vector(s[[1]][, , 4]))
  expect_equal(back[[2]][3, 2, 1], -2 * 324, ignore_attr = TRUE)
  # attributes and a band dimension: two meanings of channels, refused
  b <- stars::st_as_stars(array(1, c(3, 2, 2, 4)))
  b$q <- array(2, c(3, 2, 2, 4))
  b <- stars::st_set_dimensions(b, 1, name = "x")
  b <- stars::st_set_dimensions(b, 2, name = "y")
  b <- stars::st_set_dimensions(b, 4, name = "time")
  expect_convlstm_error(convlstm_grid_windows(b, seq_len = 1, horizon = 1), regexp = "`data` has 2 attributes")
})

test_that("na = \"mask\": NA cells become 0 with a loss weight of 0 shaped as y", {
  a <- array(1:12 + 0, c(2, 2, 3)) # [height, width, time]
  a[2, 1, 1] <- NA
  a[1, 2, 3] <- NaN
  expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1), regexp = "`data`.*1 NA and 1 NaN")
  w <- convlstm_grid_windows(a, seq_len = 1, horizon = 1, na = "mask")
  expect_identical(w$x[1, 1, 1, , ], rbind(c(1, 3), c(0, 4)))
  expect_identical(w$y[2, 1, 1, , ], rbind(c(9, 0), c(10, 12)))
  expect_identical(dim(w$weight), dim(w$y))
  expect_identical(w$weight[1, 1, 1, , ], matrix(1, 2, 2)) # frame 2 has no NA
  expect_identical(w$weight[2, 1, 1, , ], rbind(c(1, 0), c(1, 1))) # frame 3's NaN at [1, 2]
  expect_identical(sum(w$weight), 7)
  # without NA the weight is all 1; with na = "refuse" there is none
  full <- convlstm_grid_windows(array(1:12 + 0, c(2, 2, 3)), seq_len = 1, horizon = 2, na = "mask")
  expect_identical(full$weight, array(1, c(1L, 2L, 1L, 2L, 2L)))
  expect_null(convlstm_grid_windows(array(1:12 + 0, c(2, 2, 3)), seq_len = 1, horizon = 1)$weight)
  a[1, 1, 2] <- Inf
  expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1, na = "mask"), regexp = "`data`.*Inf")
  expect_convlstm_error(convlstm_grid_windows(a, seq_len = 1, horizon = 1, na = "zero"), regexp = "`na`")
})

test_that("the mask's weight is what train_step takes: a masked cell does not change the loss", {
  a <- array(seq(0.05, 0.6, length.out = 2 * 16 * 16 * 4), c(16, 16, 2, 4)) / 2
  a[3, 5, 1, 2] <- NA
  w <- convlstm_grid_windows(a, seq_len = 1, horizon = 1, layout = "hwct", na = "mask")
  expect_identical(w$weight[1, 1, 1, 3, 5], 0)
  m <- twin_models(input_dim = 2)
  on.exit(release_all(m))
  y2 <- w$y
  y2[1, 1, 1, 3, 5] <- 100 # the masked cell only
  la <- convlstm_train_step(m$a, w$x, w$y, convlstm_optimizer_sgd(lr = 0), target = "sequence", weight = w$weight)
  lb <- convlstm_train_step(m$b, w$x, y2, convlstm_optimizer_sgd(lr = 0), target = "sequence", weight = w$weight)
  expect_equal(lb, la)
  y2[1, 1, 1, 3, 6] <- 100 # an observed cell
  lc <- convlstm_train_step(m$b, w$x, y2, convlstm_optimizer_sgd(lr = 0), target = "sequence", weight = w$weight)
  expect_gt(abs(lc - la), 1)
})
