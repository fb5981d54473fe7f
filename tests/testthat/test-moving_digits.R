# test-moving_digits.R -- convlstm_moving_digits(): shapes and the horizon split, the
# glyphs drawn whole from the font, motion at the given speed with bounces
# inside the frame, and seeding from R's random number generator.

test_that("frames are [n, seq_len, 1, size, size] of 0s and 1s, split at the horizon", {
  d <- convlstm_moving_digits(n = 3, n_frames = 7, size = 24, seed = 11)
  expect_identical(dim(d$x), c(3L, 7L, 1L, 24L, 24L))
  expect_null(d$y)
  expect_true(all(d$x %in% c(0, 1)))
  expect_identical(dim(d$digits), c(3L, 2L))
  expect_true(all(d$digits %in% 0:9))
  s <- convlstm_moving_digits(n = 3, n_frames = 7, size = 24, horizon = 3, seed = 11)
  expect_identical(dim(s$x), c(3L, 4L, 1L, 24L, 24L))
  expect_identical(dim(s$y), c(3L, 3L, 1L, 24L, 24L))
  expect_identical(s$x, d$x[, 1:4, , , , drop = FALSE])
  expect_identical(s$y, d$x[, 5:7, , , , drop = FALSE])
})

test_that("one digit is its whole glyph in every frame, moving speed pixels a frame", {
  d <- convlstm_moving_digits(n = 4, n_frames = 12, size = 32, n_digits = 1, scale = 2, speed = 3,
                     seed = 12)
  for (i in 1:4) {
    glyph <- digit_glyph(d$digits[i, 1], 2)
    expect_identical(dim(glyph), c(14L, 10L))
    centre <- matrix(0, 12, 2)
    for (t in 1:12) {
      f <- d$x[i, t, 1, , ]
      expect_identical(sum(f), sum(glyph)) # never clipped by the frame
      lit <- which(f > 0, arr.ind = TRUE)
      # the glyph's place: its first lit row and column sit this far inside
      top <- min(lit[, 1]) - min(which(rowSums(glyph) > 0))
      left <- min(lit[, 2]) - min(which(colSums(glyph) > 0))
      # the glyph itself, at some place
      expect_identical(f[top + 1:14, left + 1:10] >= glyph, matrix(TRUE, 14, 10))
      centre[t, ] <- colMeans(lit)
    }
    step <- sqrt(rowSums(diff(centre)^2))
    expect_true(all(step <= 3 + 1.5), info = paste(round(step, 2), collapse = " "))
    expect_gt(mean(step), 1)
  }
  # speed 0: a still picture
  still <- convlstm_moving_digits(n = 1, n_frames = 4, size = 16, speed = 0, seed = 1)
  for (t in 2:4) expect_identical(still$x[1, t, , , ], still$x[1, 1, , , ])
})

test_that("positions bounce off the edges and stay inside", {
  p <- bounce(1, -3, 10, 8)
  expect_identical(p[1:3], c(1, 2, 5))
  expect_true(all(p >= 0 & p <= 10))
  q <- bounce(9, 4, 10, 3)
  expect_identical(q, c(9, 7, 3))
})

test_that("set.seed() reproduces the data; seed = leaves the caller's stream alone", {
  set.seed(5)
  a <- convlstm_moving_digits(n = 2, n_frames = 3, size = 16)
  set.seed(5)
  b <- convlstm_moving_digits(n = 2, n_frames = 3, size = 16)
  expect_identical(a, b)
  set.seed(6)
  before <- .Random.seed
  c1 <- convlstm_moving_digits(n = 2, n_frames = 3, size = 16, seed = 99)
  expect_identical(.Random.seed, before)
  expect_identical(convlstm_moving_digits(n = 2, n_frames = 3, size = 16, seed = 99), c1)
  expect_false(identical(c1, a))
})

test_that("a model forecasts moving digits with predict(horizon = )", {
  set.seed(13)
  d <- convlstm_moving_digits(n = 2, n_frames = 5, size = 16, scale = 1, horizon = 2)
  m <- convlstm(1, c(4, 1), 3, device = "cpu")
  frames <- predict(m, d$x, horizon = 2)
  expect_identical(dim(frames), dim(d$y))
  convlstm_release(m)
})
