# test-values-grid.R -- convlstm_grid_windows() and convlstm_grid_restore() on plain arrays
# pinned by slices indexed by hand (issue 38, items 1 and 2): a series
# exactly input + horizon frames long gives one window and one frame
# shorter is refused by class; the last window of a stride ends where the
# series ends; convlstm_grid_restore() puts a window's frames back where they came
# from. stars, terra and ncdf4 are optional; their checks are in
# test-grid.R.

# A series [height 2, width 3, time T] whose cell (r, c) at time t holds
# 100 t + 10 r + c: every value names its place.
series3 <- function(T) {
  a <- array(0, c(2, 3, T))
  for (t in seq_len(T)) for (r in 1:2) for (cc in 1:3) a[r, cc, t] <- 100 * t + 10 * r + cc
  a
}

test_that("a series exactly input + horizon frames long is one window; one frame less is refused", {
  w <- convlstm_grid_windows(series3(7), seq_len = 3, horizon = 4)
  expect_identical(dim(w$x), c(1L, 3L, 1L, 2L, 3L))
  expect_identical(dim(w$y), c(1L, 4L, 1L, 2L, 3L))
  for (t in 1:3) for (r in 1:2) for (cc in 1:3) {
    expect_identical(w$x[1, t, 1, r, cc], 100 * t + 10 * r + cc)
  }
  for (h in 1:4) for (r in 1:2) for (cc in 1:3) {
    expect_identical(w$y[1, h, 1, r, cc], 100 * (3 + h) + 10 * r + cc)
  }
  expect_identical(w$input_frames, matrix(1:3, 1))
  expect_identical(w$target_frames, matrix(4:7, 1))
  expect_convlstm_error(convlstm_grid_windows(series3(6), seq_len = 3, horizon = 4), regexp = "longer than the series")
  # one frame more: two windows, the second one frame later
  w8 <- convlstm_grid_windows(series3(8), seq_len = 3, horizon = 4)
  expect_identical(dim(w8$x)[[1]], 2L)
  expect_identical(w8$x[2, 1, 1, 2, 3], 100 * 2 + 20 + 3)
  expect_identical(w8$y[2, 4, 1, 1, 1], 100 * 8 + 10 + 1)
})

test_that("a stride's last window ends at the series' end when it fits, not beyond", {
  # input 2, horizon 1, stride 3: windows start at 1, 4, 7, ... while start + 2 <= T
  w9 <- convlstm_grid_windows(series3(9), seq_len = 2, horizon = 1, stride = 3)
  expect_identical(w9$input_frames, rbind(1:2, 4:5, 7:8))
  expect_identical(w9$target_frames, matrix(c(3L, 6L, 9L), 3))
  expect_identical(w9$x[3, 2, 1, 1, 2], 100 * 8 + 10 + 2)
  expect_identical(w9$y[3, 1, 1, 2, 1], 100 * 9 + 20 + 1)
  w8 <- convlstm_grid_windows(series3(8), seq_len = 2, horizon = 1, stride = 3)
  expect_identical(w8$input_frames, rbind(1:2, 4:5))
  expect_identical(w8$y[2, 1, 1, 1, 1], 100 * 6 + 10 + 1)
})

test_that("channels and a time axis elsewhere: slices by hand", {
  # [time 5, channels 2, height 2, width 2]: value 1000 t + 100 ch + 10 r + c
  a <- array(0, c(5, 2, 2, 2))
  for (t in 1:5) for (ch in 1:2) for (r in 1:2) for (cc in 1:2) {
    a[t, ch, r, cc] <- 1000 * t + 100 * ch + 10 * r + cc
  }
  w <- convlstm_grid_windows(a, seq_len = 2, horizon = 2, layout = "tchw")
  expect_identical(dim(w$x), c(2L, 2L, 2L, 2L, 2L))
  expect_identical(w$x[2, 1, 2, 1, 2], 1000 * 2 + 200 + 10 + 2)
  expect_identical(w$y[2, 2, 1, 2, 1], 1000 * 5 + 100 + 20 + 1)
  expect_identical(w$y[1, 1, 2, 2, 2], 1000 * 3 + 200 + 20 + 2)
  # the same series as [channels, height, width, time], declared
  b <- aperm(a, c(2, 3, 4, 1))
  expect_identical(convlstm_grid_windows(b, seq_len = 2, horizon = 2, layout = "chwt")$x, w$x)
  # time_dim (three dimensions): one of the array's dimensions (3 here), not 4
  b3 <- b[1, , , ]
  expect_identical(convlstm_grid_windows(b3, seq_len = 2, horizon = 2, time_dim = 3)$x,
                   w$x[, , 1, , , drop = FALSE])
  expect_convlstm_error(convlstm_grid_windows(b3, seq_len = 2, horizon = 2, time_dim = 4), regexp = "`time_dim`")
})

test_that("grid_restore puts a window's forecast back on the series' layout, by hand", {
  a <- series3(9)
  dimnames(a) <- list(c("n", "s"), c("w", "m", "e"), paste0("t", 1:9))
  w <- convlstm_grid_windows(a, seq_len = 3, horizon = 2, stride = 2) # windows start at 1, 3, 5
  expect_identical(nrow(w$target_frames), 3L)
  fc <- array(0, c(3, 2, 1, 2, 3))
  for (i in 1:3) for (h in 1:2) for (r in 1:2) for (cc in 1:3) {
    fc[i, h, 1, r, cc] <- -(1000 * i + 100 * h + 10 * r + cc)
  }
  # the last window: at most the number of windows
  out <- convlstm_grid_restore(fc, w, window = 3)
  expect_identical(dim(out), c(2L, 3L, 2L))
  expect_identical(dimnames(out), list(c("n", "s"), c("w", "m", "e"), c("t8", "t9")))
  for (h in 1:2) for (r in 1:2) for (cc in 1:3) {
    expect_identical(out[r, cc, h], -(3000 + 100 * h + 10 * r + cc))
  }
  expect_convlstm_error(convlstm_grid_restore(fc, w, window = 4), regexp = "`window`")
  # window 1 (the default) and one forecast for all windows
  out1 <- convlstm_grid_restore(fc, w)
  expect_identical(dimnames(out1)[[3]], c("t4", "t5"))
  expect_identical(out1[2, 1, 2], -(1000 + 200 + 20 + 1))
  one <- fc[2, , , , , drop = FALSE]
  expect_identical(convlstm_grid_restore(one, w, window = 2), convlstm_grid_restore(fc, w, window = 2))
  # the windows' own targets come back as the series' frames
  expect_equal(convlstm_grid_restore(w$y, w, window = 2), a[, , 6:7], tolerance = 0)
  expect_convlstm_error(convlstm_grid_restore(fc[1:2, , , , , drop = FALSE], w), regexp = "one row per window")
})

test_that("stars and terra series at the edge: one window (when installed)", {
  skip_if_not_installed("terra")
  r <- terra::rast(nrows = 2, ncols = 3, nlyrs = 5, vals = seq_len(30))
  terra::time(r) <- as.Date("2020-01-01") + 0:4
  w <- convlstm_grid_windows(r, seq_len = 3, horizon = 2)
  expect_identical(dim(w$x)[[1]], 1L)
  # terra fills cells by rows: layer l, cell (r, c) holds 6 (l - 1) + 3 (r - 1) + c
  expect_identical(w$y[1, 2, 1, 2, 1], 6 * 4 + 3 + 1)
  expect_convlstm_error(convlstm_grid_windows(r, seq_len = 3, horizon = 3), regexp = "longer than the series")
})
