# test-forecaster-dropout.R -- dropout in both stacks of an encoder-forecaster
# (convlstm_forecaster(dropout =, recurrent_dropout =, dropout_masks =),
# issue 34): with given masks the step's loss and every gradient against
# PyTorch's (scripts/forecaster-dropout.py on inst/python/torch_convlstm.py,
# run here: it needs python3 with torch, else the test skips), masks of ones
# the step without dropout bit for bit, drawn masks reproducible and in
# training only.

# 2 layers per stack (hidden 3, 2), patch 2, frames 8 x 8 (4 x 4 patched), T 3, K 2.
fdrop_model <- function(dropout = 0, recurrent_dropout = 0, kind = "per_gate") {
  convlstm_forecaster(1, c(3, 2), 3, patch = 2, device = "cpu", threads = 1, dropout = dropout,
                      recurrent_dropout = recurrent_dropout, dropout_masks = kind)
}

fdrop_data <- function(B = 2) {
  set.seed(21)
  list(x = array(runif(B * 3 * 64), c(B, 3, 1, 8, 8)), y = array(runif(B * 2 * 64), c(B, 2, 1, 8, 8)))
}

# Masks of the 4 core layers (encoder 0, 1; forecaster 2, 3), per layer the
# input's then h's, NULL where the rate is 0 (the forecaster's first layer
# reads no input): keep 1 - p, each kept element 1 / (1 - p); `ones`: every
# element 1 (the identity, not a draw).
fdrop_masks <- function(B, p, q, per_gate, ones = FALSE) {
  ins <- c(4, 3, 0, 3)
  hid <- c(3, 2, 3, 2)
  one <- function(C, rate) {
    if (rate == 0 || C == 0) return(NULL)
    d <- if (per_gate) c(B, 4, C, 4, 4) else c(B, C, 4, 4)
    if (ones) return(array(1, d))
    array((runif(prod(d)) >= rate) / (1 - rate), d)
  }
  unlist(lapply(1:4, function(l) list(one(ins[[l]], p), one(hid[[l]], q))), recursive = FALSE)
}

# One SGD step at lr 0 of fdrop_model(...) with weights w and the given
# masks (NULL: drawn after set.seed(seed)): its loss and gradients.
fdrop_step <- function(w, d, masks = NULL, seed = 1, ...) {
  m <- fdrop_model(...)
  on.exit(convlstm_release(m))
  convlstm_load_state_dict(m, w)
  if (!is.null(masks)) convlstm:::local_dropout_masks(masks)
  set.seed(seed)
  loss <- convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(lr = 0))
  list(loss = as.numeric(loss), g = convlstm_gradients(m))
}

fdrop_weights <- function() {
  set.seed(4)
  m <- fdrop_model()
  on.exit(convlstm_release(m))
  w <- convlstm_state_dict(m)
  # peepholes start at zero: give them values, so that their gradients count
  for (n in grep("w_c", names(w), value = TRUE)) w[[n]][] <- runif(length(w[[n]]), -0.5, 0.5)
  w
}

# PyTorch's loss and gradients of the same step (scripts/forecaster-dropout.py).
torch_step <- function(w, d, masks) {
  py <- python_torch()[[1]]
  dir <- tempfile("fdrop-")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE))
  spec <- c("config 1 2 channel 3 2 3 3", paste("x", paste(dim(d$x), collapse = " ")),
            paste("y", paste(dim(d$y), collapse = " ")))
  w <- lapply(w, as.array) # a bias too has dims
  for (i in seq_along(w)) {
    spec <- c(spec, paste("tensor", names(w)[[i]], paste(dim(w[[i]]), collapse = " ")))
    write_f32(w[[i]], file.path(dir, sprintf("t%d.f32", i - 1L)))
  }
  for (j in seq_along(masks)) {
    if (is.null(masks[[j]])) next
    l <- (j - 1L) %/% 2L
    k <- (j - 1L) %% 2L
    spec <- c(spec, paste("mask", l, k, paste(dim(masks[[j]]), collapse = " ")))
    write_f32(masks[[j]], file.path(dir, sprintf("m%d_%d.f32", l, k)))
  }
  writeLines(spec, file.path(dir, "spec.txt"))
  write_f32(d$x, file.path(dir, "x.f32"))
  write_f32(d$y, file.path(dir, "y.f32"))
  out <- system2(py, c(shQuote(test_path("scripts", "forecaster-dropout.py")), shQuote(dir),
                       shQuote(system.file("python", package = "convlstm"))),
                 stdout = TRUE, stderr = TRUE)
  expect_null(attr(out, "status"), label = paste(out, collapse = "\n"))
  g <- lapply(seq_along(w), function(i) read_f32(file.path(dir, sprintf("g%d.f32", i - 1L)),
                                                 dim(w[[i]])))
  list(loss = as.numeric(readLines(file.path(dir, "loss.txt"))), g = stats::setNames(g, names(w)))
}

for (kind in c("per_gate", "shared")) {
  test_that(sprintf("with given masks, a forecaster's loss and gradients match PyTorch [%s]", kind), {
    w <- fdrop_weights()
    d <- fdrop_data()
    set.seed(8)
    masks <- fdrop_masks(2, 0.3, 0.4, kind == "per_gate")
    ours <- fdrop_step(w, d, masks, dropout = 0.3, recurrent_dropout = 0.4, kind = kind)
    ref <- torch_step(w, d, masks)
    expect_close(ours$loss, ref$loss, rel = 1e-5, label = paste(kind, "loss"))
    for (n in names(w)) expect_close(ours$g[[n]], ref$g[[n]], rel = 1e-5, label = paste(kind, n))
    # the masks mattered: without them both the loss and the gradients differ
    none <- fdrop_step(w, d)
    expect_gt(abs(none$loss - ours$loss), 1e-4)
    expect_gt(max(abs(none$g[["forecaster.cell_list.0.conv.weight"]] -
                      ours$g[["forecaster.cell_list.0.conv.weight"]])), 1e-5)
  })
}

test_that("masks of ones (shared) and rates of 0 train as no dropout", {
  w <- fdrop_weights()
  d <- fdrop_data()
  none <- fdrop_step(w, d)
  zero <- fdrop_step(w, d, dropout = 0, recurrent_dropout = 0)
  expect_identical(zero, none)
  # input masks of ones: the masked copy is x itself, bit for bit
  ones <- fdrop_step(w, d, fdrop_masks(2, 0.5, 0, FALSE, ones = TRUE), dropout = 0.5,
                     kind = "shared")
  expect_identical(ones, none)
  # h masks of ones: the same forward and loss bit for bit; h_{t-1}'s gradient
  # is summed through the masks' buffer (another rounding of the same sum)
  ones <- fdrop_step(w, d, fdrop_masks(2, 0.5, 0.5, FALSE, ones = TRUE), dropout = 0.5,
                     recurrent_dropout = 0.5, kind = "shared")
  expect_identical(ones$loss, none$loss)
  for (n in names(w)) expect_close(ones$g[[n]], none$g[[n]], rel = 1e-6, label = n)
})

test_that("a forecaster's drawn masks follow set.seed(), in training only", {
  w <- fdrop_weights()
  d <- fdrop_data()
  a <- fdrop_step(w, d, seed = 3, dropout = 0.3, recurrent_dropout = 0.2)
  b <- fdrop_step(w, d, seed = 3, dropout = 0.3, recurrent_dropout = 0.2)
  c <- fdrop_step(w, d, seed = 4, dropout = 0.3, recurrent_dropout = 0.2)
  expect_identical(a, b)
  expect_gt(abs(a$loss - c$loss), 1e-6)
  # predict() applies no dropout: the forecast of the model without it
  m <- fdrop_model(0.3, 0.2)
  plain <- fdrop_model()
  on.exit({
    convlstm_release(m)
    convlstm_release(plain)
  })
  convlstm_load_state_dict(m, w)
  convlstm_load_state_dict(plain, w)
  expect_identical(predict(m, d$x, horizon = 2), predict(plain, d$x, horizon = 2))
  # accumulation: micro-batches draw their own rows of the same masks
  set.seed(5)
  whole <- convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(0))
  set.seed(5)
  halves <- convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(0), accumulation_steps = 2)
  expect_equal(as.numeric(halves), as.numeric(whole), tolerance = 1e-6)
})

test_that("a forecaster's rates read back per layer of a stack, and are checked", {
  m <- fdrop_model(c(0.1, 0.2), 0.3, "shared")
  on.exit(convlstm_release(m))
  expect_equal(m$dropout, c(0.1, 0.2))
  expect_equal(m$recurrent_dropout, c(0.3, 0.3))
  expect_identical(m$dropout_masks, "shared")
  expect_output(print(m), "0.1 / 0.3, 0.2 / 0.3; masks shared")
  expect_convlstm_error(fdrop_model(1), regexp = "dropout")
  expect_convlstm_error(fdrop_model(c(0.1, 0.2, 0.3)), regexp = "dropout")
  expect_convlstm_error(fdrop_model(0, -0.1), regexp = "recurrent_dropout")
  expect_convlstm_error(fdrop_model(kind = "each"), regexp = "dropout_masks")
  # the plan holds the masks
  plan <- attr(convlstm_memory_estimate(m, 2, 3, 8, 8, horizon = 2), "plan")
  expect_true(all(c("dropout_mask_x[0]", "dropout_mask_h[2]") %in% plan$name))
  expect_false("dropout_mask_x[2]" %in% plan$name) # the forecaster's first layer reads no input
})

test_that("the plan of a forecaster's step with dropout or a weight is what the step reserves", {
  set.seed(1)
  x <- array(runif(2 * 3 * 64), c(2, 3, 1, 8, 8))
  y <- array(runif(2 * 4 * 64), c(2, 4, 1, 8, 8)) # K 4 > T 3: the forecaster's steps the longest
  cases <- list(list(), list(dropout = 0.3, recurrent_dropout = 0.2),
                list(dropout = 0.3, recurrent_dropout = 0.2, kind = "shared"))
  for (args in cases) for (weighted in c(FALSE, TRUE)) {
    m <- do.call(fdrop_model, args)
    est <- convlstm_memory_estimate(m, 2, 3, 8, 8, horizon = 4, optimizer = convlstm_optimizer_adam(),
                                    weight = if (weighted) "sequence")
    convlstm_train_step(m, x, y, convlstm_optimizer_adam(), weight = if (weighted) array(1, dim(y)))
    expect_identical(est$bytes[est$category == "reserved"], convlstm_memory_stats(m)$peak_reserved,
                     label = paste(length(args), weighted))
    convlstm_release(m)
  }
})
