# test-print-methods.R -- output that reads well (issue 35 item 5): what the
# print and str methods write, checked against numbers computed here from the
# object's own fields or from the model's shapes, and their widths measured
# with nchar().

# A layer's parameters: the four gates' convolutions of the input (inp
# channels) and of the hidden state (h channels), k x k, and a bias per gate
# channel.
cell_params <- function(inp, h, k) 4 * h * (inp * k^2 + h * k^2) + 4 * h

# Bytes as written here: below 1 KiB "n B", else three significant digits and
# the largest binary unit that leaves at least 1.
bytes_text <- function(b) {
  units <- c("B", "KiB", "MiB", "GiB", "TiB")
  p <- if (b < 1024) 0 else min(floor(log(b) / log(1024)), 4)
  if (p == 0) return(paste(b, "B"))
  paste(sub("\\.?0+$", "", sprintf("%.3g", b / 1024^p)), units[[p + 1]])
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
