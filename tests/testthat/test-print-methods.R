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
  w <- convlstm_grid_windows(series, seq_len = 3, horizon = 2)
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

# --- 4. convlstm_memory_summary() prints its table once ------------------------------

test_that("convlstm_memory_summary() returns its table invisibly: printed once at top level", {
  m <- api_model()
  on.exit(convlstm_release(m))
  convlstm_train_step(m, api_x(), api_y(), convlstm_optimizer_adam())
  capture.output(expect_invisible(convlstm_memory_summary(m)))
  # capture.output() prints a visible value, as the console does: the table
  # must come out once, not a second time as a character string
  out <- capture.output(text <- convlstm_memory_summary(m))
  expect_identical(out, strsplit(text, "\n", fixed = TRUE)[[1]])
  expect_false(any(startsWith(out, "[1]")))
  # its parameters row: 920 float32 parameters (the two layers' convolutions)
  n <- cell_params(2, 3, 3) + cell_params(3, 2, 3)
  expect_identical(n, 920)
  expect_true(any(grepl(paste0("| parameters +| +", bytes_text(4 * n), " |"), out)))
})

# --- 5. convlstm_max_batch_size() prints one line, and stays a number ----------------

test_that("convlstm_max_batch_size() prints \"Largest batch: b (planned bytes of budget)\"", {
  m <- api_model()
  on.exit(convlstm_release(m))
  budget <- 16 * 2^20 # 16 MiB, and no runtime on the CPU
  b <- convlstm_max_batch_size(m, 3, 5, 4, budget = budget)
  n <- as.integer(b)
  expect_gt(n, 1000L) # a number with a thousands separator
  out <- capture.output(expect_invisible(print(b)))
  expect_identical(out, sprintf("Largest batch: %s (planned %s of 16 MiB)",
                                formatC(n, big.mark = ",", format = "d"),
                                bytes_text(attr(b, "bytes"))))
  # the printed figures read back to the attributes (three digits)
  planned <- as.numeric(sub(".*planned ([0-9.]+) MiB.*", "\\1", out)) * 2^20
  expect_lt(abs(planned - attr(b, "bytes")), 0.005 * attr(b, "bytes"))
  # a budget halfway between the plans of batches 1 and 2: the planned bytes
  # (batch 1's) and the budget printed apart
  reserved <- function(b) {
    est <- convlstm_memory_estimate(m, b, 3, 5, 4)
    est$bytes[est$category == "reserved"]
  }
  r <- c(reserved(1), reserved(2))
  one <- convlstm_max_batch_size(m, 3, 5, 4, budget = mean(r))
  expect_identical(attr(one, "bytes"), r[[1]])
  expect_identical(capture.output(print(one)), sprintf(
    "Largest batch: 1 (planned %s of %s)", bytes_text(r[[1]]), bytes_text(attr(one, "budget"))))
  expect_false(identical(bytes_text(r[[1]]), bytes_text(mean(r))))
  # nothing fits: said so, with the budget
  none <- convlstm_max_batch_size(m, 3, 5, 4, budget = 100)
  expect_identical(capture.output(print(none)),
                   "Largest batch: 0 (not even the smallest batch fits in 100 B)")
  # still a plain integer for arithmetic, comparisons and as.integer()
  expect_true(inherits(b, "convlstm_batch_size"))
  expect_true(is.integer(b))
  expect_identical(b + 1L, n + 1L)
  expect_identical(b + 1, n + 1)
  expect_identical(2L * b, 2L * n)
  expect_identical(-b, -n)
  expect_identical(b > n - 1L, TRUE)
  expect_identical(as.integer(b), n)
  expect_null(attributes(as.integer(b)))
  expect_identical(attr(b, "budget"), budget)
})

# --- 1. a file's description in a few lines ---------------------------------

test_that("convlstm_file_info() prints a header, the parameters and the first tensors", {
  m <- api_model()
  on.exit(convlstm_release(m))
  convlstm_train_step(m, api_x(), api_y(), convlstm_optimizer_adam(lr = 0.002))
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(m, path, optimizer = convlstm_optimizer_adam(lr = 0.002),
                metadata = c(epoch = "3", note = "x"))
  info <- convlstm_file_info(path)
  expect_s3_class(info, "convlstm_file_info")
  out <- capture.output(expect_invisible(print(info)))
  n <- cell_params(2, 3, 3) + cell_params(3, 2, 3)
  # per layer a weight and a bias; with Adam's two moments each, three times
  n_tensors <- 2 * 2 * 3
  expect_identical(out[1:6], c(
    paste0("<convlstm_file_info> ConvLSTM stack, format version ",
           info$all_metadata[["convlstm.format_version"]]),
    "  2 layers (hidden 3, 2), 2 input channels, float32",
    sprintf("  parameters: %d (%s)", n, bytes_text(4 * n)),
    "  optimizer: adam, lr 0.002, 1 step",
    "  metadata: epoch, note",
    sprintf("  tensors: %d", n_tensors)
  ))
  expect_identical(out[[2]], "  2 layers (hidden 3, 2), 2 input channels, float32")
  # a table of the first 6 tensors, in the file's order, then the count left
  expect_match(out[[7]], "^ *name +dtype +shape *$")
  rows <- out[8:13]
  expect_identical(sub("^ *(\\S+) .*$", "\\1", rows), info$tensors$name[1:6])
  expect_identical(out[[14]], sprintf("  ... %d more", n_tensors - 6))
  expect_length(out, 14)
  # all tensors shown: no "more" line
  all <- capture.output(print(info, n = n_tensors))
  expect_length(all, 7 + n_tensors)
  expect_false(any(grepl("more$", all)))
})

test_that("an encoder-forecaster's file prints its 2 + 2 layers and its count", {
  fc <- convlstm_forecaster(1, c(4, 4), 3, device = "cpu")
  on.exit(convlstm_release(fc))
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(fc, path)
  out <- capture.output(print(convlstm_file_info(path)))
  # Shi et al.'s cells with per-channel peepholes (3 h); the forecaster's
  # first layer has no input; a 1x1 head over the 8 hidden channels
  cell <- function(inp, h) 4 * h * (inp * 9 + h * 9) + 4 * h + 3 * h
  n <- cell(1, 4) + cell(4, 4) + cell(0, 4) + cell(4, 4) + (8 + 1)
  expect_identical(n, 3721)
  expect_match(out[[1]], "^<convlstm_file_info> encoder-forecaster, format version")
  expect_identical(out[[2]], "  2 + 2 layers (hidden 4, 4), 1 input channel, float32")
  expect_identical(out[[3]], sprintf("  parameters: 3,721 (%s)", bytes_text(4 * n)))
  expect_identical(out[[4]], "  optimizer: none saved")
})

# --- 2. str(model): one line, not the closure -------------------------------

test_that("str(model) is one line: layers, parameters, device, dtype, status", {
  m <- api_model()
  n <- cell_params(2, 3, 3) + cell_params(3, 2, 3)
  line <- function(status) {
    sprintf(" <convlstm_model> 2 layers (hidden 3, 2), %d parameters, on cpu, float32, %s",
            n, status)
  }
  out <- capture.output(expect_invisible(str(m)))
  expect_identical(out, line("live"))
  expect_false(any(grepl("function", out)))
  # inside a list, the same line after the element's name
  expect_identical(capture.output(str(list(m = m)))[[2]], paste0(" $ m:", line("live")))
  convlstm_release(m)
  expect_identical(capture.output(str(m)), line("released"))
  one <- convlstm(1, 4, 3, device = "cpu")
  on.exit(convlstm_release(one))
  expect_identical(capture.output(str(one)), sprintf(
    " <convlstm_model> 1 layer (hidden 4), %d parameters, on cpu, float32, live",
    cell_params(1, 4, 3)))
})

test_that("str() of an encoder-forecaster counts its 2 + 2 layers and head", {
  fc <- convlstm_forecaster(1, c(4, 4), 3, device = "cpu")
  on.exit(convlstm_release(fc))
  cell <- function(inp, h) 4 * h * (inp * 9 + h * 9) + 4 * h + 3 * h
  n <- cell(1, 4) + cell(4, 4) + cell(0, 4) + cell(4, 4) + (8 + 1)
  expect_identical(capture.output(str(fc)), sprintf(
    " <convlstm_forecaster> 2 + 2 layers (hidden 4, 4), %s parameters, on cpu, float32, live",
    formatC(n, big.mark = ",", format = "d")))
})

# --- 3. the progress line fits the console ----------------------------------

test_that("the progress line fits its width, dropping fields, never the loss", {
  line <- function(width) {
    convlstm:::fit_progress_line(3, 10, 12, 40, "0.1234", "3.2s", "42.2 KiB", width = width)
  }
  fields <- "12/40 | loss 0.1234 | 3.2s | peak 42.2 KiB"
  # wide: every field and a bar of 30 cells, 12/40 of them (9) filled
  wide <- line(200)
  expect_identical(nchar(wide), nchar("Epoch 3/10 ") + 30L + 1L + nchar(fields))
  expect_identical(substring(wide, 42), paste0(" ", fields))
  expect_identical(nchar(trimws(substr(wide, 12, 41), "right")), as.integer(round(30 * 12 / 40)))
  for (width in 20:120) {
    got <- line(width)
    expect_lte(nchar(got), width)
    if (width >= nchar("Epoch 3/10 loss 0.1234")) {
      expect_match(got, "^Epoch 3/10 .*loss 0\\.1234( |$)", label = paste("width", width))
    }
  }
  # the bar shrinks first: at 80 columns every field is there, bar narrower
  at80 <- line(80)
  expect_identical(nchar(at80), 80L)
  expect_true(endsWith(at80, fields))
  # then the elapsed time goes (bar of at least 10 cells kept), then the bar,
  # then the peak, then the count
  tail2 <- "12/40 | loss 0.1234 | peak 42.2 KiB"
  w <- nchar("Epoch 3/10 ") + 10L + 1L + nchar(fields) - 1L # one short of the 10-cell bar
  expect_identical(substring(line(w), w - nchar(tail2) + 1L), tail2)
  expect_false(grepl("3.2s", line(w), fixed = TRUE))
  w2 <- nchar("Epoch 3/10 ") + 10L + 1L + nchar(tail2) - 1L
  expect_identical(line(w2), paste("Epoch 3/10", tail2))
  expect_identical(line(nchar("Epoch 3/10 ") + nchar(tail2) - 1L), "Epoch 3/10 12/40 | loss 0.1234")
  expect_identical(line(nchar("Epoch 3/10 12/40 | loss 0.1234") - 1L), "Epoch 3/10 loss 0.1234")
})

test_that("convlstm_fit()'s progress lines are at most getOption(\"width\") wide", {
  old <- options(width = 60, cli.width = NULL, cli.progress_show_after = 0)
  on.exit(options(old))
  m <- api_model()
  on.exit(convlstm_release(m), add = TRUE)
  msgs <- character()
  h <- withCallingHandlers(
    convlstm_fit(m, api_x(B = 8), api_y(B = 8), convlstm_optimizer_adam(), epochs = 2, batch_size = 2,
                 verbose = TRUE),
    message = function(cnd) {
      msgs <<- c(msgs, conditionMessage(cnd))
      invokeRestart("muffleMessage")
    })
  lines <- unlist(strsplit(msgs, "\n", fixed = TRUE))
  progress <- grep("^Epoch [0-9]+/2 .*[0-9]+/4 \\|", lines, value = TRUE)
  expect_gte(length(progress), 1)
  expect_true(all(nchar(lines) <= 60), info = paste(lines, collapse = "\n"))
  # the loss field whole: "loss " and a number, then " |" or the end
  number <- "-?[0-9]+(\\.[0-9]+)?(e[+-]?[0-9]+)?"
  expect_true(all(grepl(paste0("\\| loss ", number, "( \\||$)"), progress)),
              info = paste(progress, collapse = "\n"))
  # nothing cut by cli ("..." or, in UTF-8, an ellipsis at the end)
  expect_false(any(grepl("(\\.\\.\\.|\u2026)$", lines)))
  # the epochs' lines carry the history's losses, four digits
  for (e in 1:2) {
    expect_true(any(startsWith(lines, sprintf("Epoch %d/2: loss %s,", e,
                                               sprintf("%.4g", h$loss[[e]])))))
  }
})

test_that("convlstm_forecast_metrics() prints each measure's unit under the table", {
  obs <- array(c(0, 1, 0, 0), c(1, 1, 1, 2, 2))
  fc <- array(c(1, 0, 0, 0), c(1, 1, 1, 2, 2))
  out <- capture.output(print(convlstm_forecast_metrics(fc, obs, metrics = c("mae", "mse_frame", "psnr"),
                                               thresholds = c(0.5, 0.75))))
  expect_true("mae: mean absolute error per element" %in% out)
  expect_true("mse_frame: squared error summed over a frame's elements" %in% out)
  expect_true("psnr: peak signal-to-noise ratio in dB" %in% out)
  # two thresholds' columns: one line each kind, not one per threshold
  expect_equal(sum(startsWith(out, "csi_*: critical success index")), 1L)
  expect_equal(sum(startsWith(out, "far_*: false alarm ratio")), 1L)
  expect_false(any(grepl("^mse: ", out)))
})

test_that("a fit's history prints its val_<metric> columns and their units", {
  set.seed(3)
  model <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  x <- array(stats::runif(6 * 3 * 16), c(6, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(6, 1, 4, 4))
  h <- convlstm_fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 1, batch_size = 3,
                    validation_split = 0.5, verbose = FALSE,
                    metrics = list(metrics = c("mae", "mae_frame"), thresholds = 0.5))
  out <- capture.output(print(h))
  header <- out[[2]]
  for (col in c("val_loss", "val_mae", "val_mae_frame", "val_csi_0.5")) {
    expect_match(header, col, fixed = TRUE)
  }
  # the value printed is the history's, to 5 digits
  expect_match(out[[3]], formatC(h$val_mae, digits = 5, format = "g"), fixed = TRUE)
  expect_true("val_mae: mean absolute error per element" %in% out)
  expect_true("val_mae_frame: absolute error summed over a frame's elements" %in% out)
  expect_true("val_csi_*: critical success index at the threshold" %in% out)
  # no metrics: the loss's and the peak's lines only, no empty line
  h0 <- convlstm_fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 1, batch_size = 3,
                     verbose = FALSE)
  out0 <- capture.output(print(h0))
  expect_identical(out0[4:5], c(
    "loss: squared error, mean per element (reduction \"mean\")",
    "peak: the most bytes the model's allocator held at once during the epoch"))
  expect_length(out0, 5) # header, column names, one epoch, two units
})

test_that("a fit's history says its loss's unit as its loss and reduction make it", {
  set.seed(4)
  x <- array(stats::runif(4 * 3 * 16), c(4, 3, 1, 4, 4))
  y <- array(stats::runif(4 * 16), c(4, 1, 4, 4))
  unit_line <- function(model, ...) {
    h <- convlstm_fit(model, x, y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 2,
                      verbose = FALSE, ...)
    out <- capture.output(print(h))
    list(h = h, line = grep("^loss", out, value = TRUE))
  }
  model <- convlstm(1, c(2, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  pred <- model(x)[[2]][[2]][[1]] # lr 0: the same weights for every batch and fit
  e <- (pred - y)
  # each reduction's value by hand, so the unit the line names is the value's
  mean_el <- unit_line(model)
  expect_identical(mean_el$line, "loss: squared error, mean per element (reduction \"mean\")")
  expect_equal(mean_el$h$loss, mean(e^2), tolerance = 1e-5)
  per_seq <- unit_line(model, reduction = "batchmean", loss = "mae", validation_data = list(x, y))
  expect_identical(per_seq$line, paste0("loss, val_loss: absolute error summed over a sequence's ",
                                        "elements, mean per sequence (reduction \"batchmean\")"))
  expect_equal(per_seq$h$loss, sum(abs(e)) / 4, tolerance = 1e-5)
  summed <- unit_line(model, reduction = "sum")
  expect_identical(summed$line, paste0("loss: squared error summed over every element of the ",
                                       "epoch's data (reduction \"sum\")"))
  expect_equal(summed$h$loss, sum(e^2), tolerance = 1e-5)
})

test_that("an encoder-forecaster's history says the same units", {
  set.seed(5)
  fc <- convlstm_forecaster(1, 2, 3, device = "cpu")
  on.exit(convlstm_release(fc))
  x <- array(stats::runif(2 * 2 * 16), c(2, 2, 1, 4, 4))
  y <- array(stats::runif(2 * 2 * 16), c(2, 2, 1, 4, 4))
  h <- convlstm_fit(fc, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = 2,
                    loss = "bce_logits", reduction = "batchmean", verbose = FALSE,
                    metrics = "mse_frame", validation_data = list(x, y))
  out <- capture.output(print(h))
  expect_true(paste0("loss, val_loss: binary cross-entropy of the logits summed over a ",
                     "sequence's elements, mean per sequence (reduction \"batchmean\")") %in% out)
  expect_true("peak: the most bytes the model's allocator held at once during the epoch" %in% out)
  expect_true("val_mse_frame: squared error summed over a frame's elements" %in% out)
})
