# The per-layer parameter tables that print(model) and summary(model) show,
# pinned by numbers computed apart (issue 38): each row equals the count
# written out here from the layer's shapes, and the rows (with the
# encoder-forecaster's 1x1 head) sum to the count of the tensors the core
# holds (convlstm_state_dict()) and to the total printed in the header; for the plain
# stack (one kernel or separate input and recurrent kernels, bias or not, no
# peepholes, per-channel and per-position peepholes) and for Shi et al.'s
# encoder-forecaster, Table 1's 7,585,296-parameter model included.

# A ConvLSTM layer's parameters: the four gates' convolutions of the input
# (in channels, k x k) and of the hidden state (h channels, rk x rk), a bias
# per gate channel, and three peepholes (i, f, o) per channel or per pixel.
cell_count <- function(inp, h, k, rk = k, bias = TRUE, peephole = "none", pixels = 1) {
  4 * h * (inp * k^2 + h * rk^2) + (if (bias) 4 * h else 0) +
    switch(peephole, none = 0, channel = 3 * h, position = 3 * h * pixels)
}

# The count of the tensors the core holds.
core_count <- function(model) sum(vapply(convlstm_state_dict(model), length, numeric(1)))

# The printed table's column `name` (right-aligned under its header, as
# print.data.frame() writes it), as text, for the table whose header line
# starts with "layer".
printed_column <- function(lines, name) {
  head <- grep("^ *layer +input +hidden", lines)
  expect_length(head, 1)
  rows <- lines[seq(head + 1L, length(lines))]
  rows <- rows[seq_len(match(FALSE, grepl("^ *[0-9]+ ", rows), nomatch = length(rows) + 1L) - 1L)]
  m <- gregexpr("\\S+", lines[[head]])[[1]]
  names_at <- regmatches(lines[[head]], list(m))[[1]]
  ends <- as.integer(m) + attr(m, "match.length") - 1L
  j <- match(name, names_at)
  start <- if (j == 1) 1L else ends[[j - 1L]] + 1L
  trimws(substr(rows, start, ends[[j]]))
}

as_count <- function(text) as.numeric(gsub(",", "", text))

# The plain stack: rows by formula, sums by the core, in print() and summary().
expect_plain_table <- function(model, want_rows) {
  s <- summary(model)
  expect_equal(s$layers$parameters, want_rows)
  expect_equal(s$layers$bytes, 4 * want_rows)
  expect_equal(sum(want_rows), core_count(model))
  expect_equal(s$n_parameters, core_count(model))
  expect_equal(model$n_parameters, core_count(model))
  printed <- capture.output(print(model))
  expect_equal(as_count(printed_column(printed, "parameters")), want_rows)
  expect_match(printed[[1]], sprintf(" %s parameters ", format(core_count(model), big.mark = ",")),
               fixed = TRUE)
  printed_summary <- capture.output(print(s))
  expect_equal(as_count(printed_column(printed_summary, "parameters")), want_rows)
  expect_true(any(grepl(sprintf("Total parameters: %s ", format(core_count(model), big.mark = ",")),
                        printed_summary, fixed = TRUE)))
}

test_that("a plain stack's printed table: rows by the shapes' formula, sums by the core", {
  m <- convlstm(2, c(3, 2), 3, device = "cpu")
  on.exit(convlstm_release(m))
  # 4 * 3 * (2 + 3) * 9 + 12 = 552; 4 * 2 * (3 + 2) * 9 + 8 = 368
  expect_plain_table(m, c(552, 368))
  expect_identical(c(cell_count(2, 3, 3), cell_count(3, 2, 3)), c(552, 368))
})

test_that("a plain stack's printed table: separate kernels, no bias, per-channel peepholes", {
  m <- convlstm(2, c(3, 2, 4), c(3, 5, 1), recurrent_kernel_sizes = c(1, 3, 5), bias = FALSE,
                peephole = "channel", device = "cpu")
  on.exit(convlstm_release(m))
  want <- c(cell_count(2, 3, 3, 1, bias = FALSE, peephole = "channel"),
            cell_count(3, 2, 5, 3, bias = FALSE, peephole = "channel"),
            cell_count(2, 4, 1, 5, bias = FALSE, peephole = "channel"))
  # by hand: 4*3*(2*9 + 3*1) + 3*3, 4*2*(3*25 + 2*9) + 3*2, 4*4*(2*1 + 4*25) + 3*4
  expect_equal(want, c(261, 750, 1644))
  expect_plain_table(m, want)
})

test_that("a plain stack's printed table: per-position peepholes count 3 h H W", {
  m <- convlstm(1, c(4, 2), 3, peephole = TRUE, frame_size = c(6, 5), device = "cpu")
  on.exit(convlstm_release(m))
  want <- c(cell_count(1, 4, 3, peephole = "position", pixels = 30),
            cell_count(4, 2, 3, peephole = "position", pixels = 30))
  expect_plain_table(m, want)
})

# --- the encoder-forecaster ---------------------------------------------------------------------

# Its table's rows by formula: the encoder's layer 1 reads the C p^2 channels
# of a patched frame, the forecaster's reads nothing (one convolution over
# its h, the recurrent kernel), the upper layers the layer below; and the
# head, a 1x1 convolution with bias from every forecaster layer's h to the
# C p^2 channels.
forecaster_rows <- function(C, hidden, k, rk = k, p, bias = TRUE, peephole = "channel") {
  inputs <- c(C * p^2, hidden[-length(hidden)])
  cell <- function(inp, h, k, rk) cell_count(inp, h, k, rk, bias = bias, peephole = peephole)
  list(encoder = mapply(cell, inputs, hidden, k, rk),
       forecaster = mapply(cell, c(0, inputs[-1]), hidden, k, rk),
       head = C * p^2 * sum(hidden) + C * p^2)
}

expect_forecaster_table <- function(model, want) {
  total <- sum(want$encoder) + sum(want$forecaster) + want$head
  expect_equal(total, core_count(model))
  s <- summary(model)
  expect_equal(s$layers$encoder, want$encoder)
  expect_equal(s$layers$forecaster, want$forecaster)
  expect_equal(s$n_parameters, core_count(model))
  expect_equal(s$parameter_bytes, 4 * core_count(model))
  printed <- capture.output(print(model))
  expect_equal(as_count(printed_column(printed, "encoder")), want$encoder)
  expect_equal(as_count(printed_column(printed, "forecaster")), want$forecaster)
  expect_match(printed[[1]], sprintf(" %s parameters ", format(total, big.mark = ",")),
               fixed = TRUE)
  printed_summary <- capture.output(print(s))
  expect_equal(as_count(printed_column(printed_summary, "encoder")), want$encoder)
  expect_equal(as_count(printed_column(printed_summary, "forecaster")), want$forecaster)
  expect_match(printed_summary[[1]], sprintf("%s parameters", format(total, big.mark = ",")),
               fixed = TRUE)
}

test_that("Table 1's encoder-forecaster prints rows that sum to its 7,585,296 parameters", {
  m <- convlstm_forecaster(1, c(128, 64, 64), 5, patch = 4, device = "cpu")
  on.exit(convlstm_release(m))
  want <- forecaster_rows(1, c(128, 64, 64), 5, p = 4)
  # by hand: 4*128*(16*25 + 128*25) + 4*128 + 3*128 = 1,844,096; its forecaster
  # layer reads no input: 4*128*128*25 + 896 = 1,639,296; the head 16*256 + 16
  expect_equal(want$encoder, c(1844096, 1229248, 819648))
  expect_equal(want$forecaster, c(1639296, 1229248, 819648))
  expect_equal(want$head, 4112)
  expect_equal(sum(want$encoder) + sum(want$forecaster) + want$head, 7585296)
  expect_forecaster_table(m, want)
})

test_that("an encoder-forecaster's table: separate kernels, no cell bias, no peepholes", {
  m <- convlstm_forecaster(2, c(5, 3, 4), c(3, 5, 3), patch = 2, recurrent_kernel_sizes = 1,
                           bias = FALSE, peephole = "none", device = "cpu")
  on.exit(convlstm_release(m))
  want <- forecaster_rows(2, c(5, 3, 4), c(3, 5, 3), rk = 1, p = 2, bias = FALSE,
                          peephole = "none")
  expect_equal(want$head, 8 * 12 + 8)
  expect_forecaster_table(m, want)
})
