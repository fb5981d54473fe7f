# test-print-methods.R -- output that reads well (issue 35 item 5): what the
# print and str methods write, checked against numbers computed here from the
# object's own fields or from the model's shapes, and their widths measured
# with nchar().

# A layer's parameters: the four gates' convolutions of the input (inp
# channels) and of the hidden state (h channels), k x k, and a bias per gate
# channel.
cell_params <- function(inp, h, k) 4 * h * (inp * k^2 + h * k^2) + 4 * h

# Bytes as written here: below 1 KiB "n B", else in the largest binary unit
# that leaves at least 1, to three significant digits (whole from 100 up).
bytes_text <- function(b) {
  units <- c("B", "KiB", "MiB", "GiB", "TiB")
  p <- if (b < 1024) 0 else min(floor(log(b) / log(1024)), 4)
  if (p == 0) return(paste(b, "B"))
  v <- b / 1024^p
  paste(if (v >= 100) as.character(round(v)) else as.character(signif(v, 3)), units[[p + 1]])
}

# --- 6. a windows object names its source with the right article ------------

test_that("a windows object says \"from an array\", \"from a stars object\"", {
  series <- array(seq_len(6 * 5 * 7), c(6, 5, 7))
  w <- grid_windows(series, input = 3, horizon = 2)
  out <- capture.output(print(w))
  # 7 frames, windows of 3 + 2: 7 - 5 + 1 of them
  expect_identical(out, sprintf(paste0("<convlstm_grid_windows> %d windows of 3 input and 2 target ",
                                       "frames, 1 channel, 6 x 5, from an array"), 7 - 5 + 1))
  # the article follows the kind's first letter: a consonant takes "a"
  for (kind in c("stars object", "SpatRaster", "netCDF variable")) {
    w$grid$kind <- kind
    expect_match(capture.output(print(w)), paste0(", from a ", kind, "$"), fixed = FALSE)
  }
  capture.output(expect_invisible(print(w)))
})

# --- 4. memory_summary() prints its table once ------------------------------

test_that("memory_summary() returns its table invisibly: printed once at top level", {
  m <- api_model()
  on.exit(convlstm_release(m))
  train_step(m, api_x(), api_y(), optimizer_adam())
  capture.output(expect_invisible(memory_summary(m)))
  # capture.output() prints a visible value, as the console does: the table
  # must come out once, not a second time as a character string
  out <- capture.output(text <- memory_summary(m))
  expect_identical(out, strsplit(text, "\n", fixed = TRUE)[[1]])
  expect_false(any(startsWith(out, "[1]")))
  # its parameters row: 920 float32 parameters (the two layers' convolutions)
  n <- cell_params(2, 3, 3) + cell_params(3, 2, 3)
  expect_identical(n, 920)
  expect_true(any(grepl(paste0("| parameters +| +", bytes_text(4 * n), " |"), out)))
})
