# check_finite() (R/errors.R) accepts a batch in one pass in C
# (ffi_float_finite, src/r_arrays.c) and asks R what is wrong only when that
# pass fails. Here: the pass finds a bad value wherever it sits (first
# element, either side of its 4096-value blocks, last element), keeps a
# float's largest value and refuses the next double beyond it, and the
# error that follows still names the value.

float_max <- 3.4028234663852886e38
past_max <- float_max * (1 + 2^-52) # the next double above it

test_that("the one pass finds a bad value at any place of a long vector", {
  n <- 3L * 4096L + 17L
  for (bad in list(NA_real_, NaN, Inf, -Inf, past_max, -past_max)) {
    for (at in c(1L, 4096L, 4097L, 8192L, n)) {
      x <- seq_len(n) / n
      x[at] <- bad
      expect_false(.Call(convlstm:::ffi_float_finite, x), label = sprintf("%s at %d", bad, at))
    }
  }
  x <- seq_len(n) / n
  expect_true(.Call(convlstm:::ffi_float_finite, x))
  x[c(5L, n)] <- c(float_max, -float_max)
  expect_true(.Call(convlstm:::ffi_float_finite, x))
})

test_that("integer and logical values pass unless NA; other types go to R", {
  expect_true(.Call(convlstm:::ffi_float_finite, c(1L, .Machine$integer.max, -5L)))
  expect_false(.Call(convlstm:::ffi_float_finite, c(1L, NA_integer_)))
  expect_true(.Call(convlstm:::ffi_float_finite, c(TRUE, FALSE)))
  expect_false(.Call(convlstm:::ffi_float_finite, c(TRUE, NA)))
  expect_false(.Call(convlstm:::ffi_float_finite, "1"))
  expect_true(.Call(convlstm:::ffi_float_finite, numeric(0)))
})

test_that("a value past a float's largest is refused by name; the largest is kept", {
  x <- array(runif(2 * 3 * 1 * 8 * 8), dim = c(2, 3, 1, 8, 8))
  x[2, 3, 1, 8, 8] <- past_max
  expect_convlstm_error(convlstm:::check_array(x, "x", 5), regexp = "`x`.*32-bit float's range.*\\[2, 3, 1, 8, 8\\]")
  x[2, 3, 1, 8, 8] <- -float_max
  expect_identical(convlstm:::check_array(x, "x", 5), x)
  x[1, 1, 1, 1, 2] <- NaN
  expect_convlstm_error(convlstm:::check_array(x, "x", 5), regexp = "1 NaN of 384 values; the first at \\[1, 1, 1, 1, 2\\]")
  l <- array(TRUE, dim = c(2, 2, 2, 2))
  l[2] <- NA
  expect_convlstm_error(convlstm:::check_array(l, "y", 4), regexp = "`y`.*1 NA of 16")
})
