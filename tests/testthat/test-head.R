# test-head.R -- a plain stack with a head (convlstm(head = "top")): a 1x1
# convolution with bias over the last layer's h, so that outputs are not
# bounded by tanh. Its outputs, loss and every gradient against PyTorch's
# reference (inst/python/torch_convlstm.py's ConvLSTM with its head, loaded
# from the file convlstm writes, by scripts/head-reference.py), with every
# memory technique of the step; its refusals; its file; its plan.

REL <- 1e-5

head_model <- function(hidden = c(4, 3), k = 3, ...) {
  set.seed(11)
  convlstm(2, hidden, k, head = "top", device = "cpu", ...)
}
head_x <- function(B = 3, T = 5, H = 6, W = 5) {
  set.seed(12)
  array(runif(B * T * 2 * H * W, -1, 1), c(B, T, 2, H, W))
}

# PyTorch's frames, loss and gradients for `model` on x, y (the last K steps).
torch_head <- function(model, x, y, K = 0) {
  pt <- python_torch()
  f <- tempfile(fileext = ".safetensors")
  dir <- tempfile()
  dir.create(dir)
  xf <- tempfile()
  yf <- tempfile()
  on.exit(unlink(c(f, dir, xf, yf), recursive = TRUE))
  convlstm_save(model, f)
  write_f32(x, xf)
  write_f32(y, yf)
  script <- testthat::test_path("scripts", "head-reference.py")
  out <- system2(pt[[1]], c(shQuote(script), shQuote(dirname(pt[[2]])), shQuote(f), shQuote(xf),
                            shQuote(yf), dim(x), shQuote(dir), if (K) K),
                 stdout = TRUE, stderr = TRUE)
  expect_null(attr(out, "status"), label = paste(out, collapse = "\n"))
  sd <- convlstm_state_dict(model)
  list(frames = read_f32(file.path(dir, "frames.bin"), dim(x)),
       loss = readBin(file.path(dir, "loss.bin"), "double", n = 1, size = 8, endian = "little"),
       grads = lapply(setNames(names(sd), names(sd)), function(k) {
         read_f32(file.path(dir, paste0("grad_", k, ".bin")), dim(sd[[k]]) %||% length(sd[[k]]))
       }))
}

test_that("a head adds head.weight [input_dim, h, 1, 1] and head.bias [input_dim]", {
  m <- head_model()
  on.exit(convlstm_release(m))
  sd <- convlstm_state_dict(m)
  expect_identical(tail(names(sd), 2), c("head.weight", "head.bias"))
  expect_identical(dim(sd[["head.weight"]]), c(2L, 3L, 1L, 1L))
  expect_identical(length(sd[["head.bias"]]), 2L)
  # two layers of the tutorial's cell (4h x (in + h) x 3 x 3 and 4h) and the head
  cell <- function(i, h) 4 * h * (i + h) * 9 + 4 * h
  expect_equal(m$n_parameters, cell(2, 4) + cell(4, 3) + 2 * 3 + 2)
  expect_equal(sum(vapply(sd, length, 0L)), m$n_parameters)
  # torch's nn_conv2d() initialisation: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), fan_in = 3
  expect_true(all(abs(sd[["head.weight"]]) <= 1 / sqrt(3)))
  expect_gt(max(abs(sd[["head.weight"]])), 0)
})

test_that("a head's frames match PyTorch's and are not bounded by tanh", {
  m <- head_model()
  on.exit(convlstm_release(m))
  sd <- convlstm_state_dict(m)
  sd[["head.bias"]] <- c(7, -9) # far outside (-1, 1)
  convlstm_load_state_dict(m, sd)
  x <- head_x()
  out <- predict(m, x)
  expect_identical(dim(out), dim(x))
  ref <- torch_head(m, x, x)
  expect_close(out, ref$frames, rel = REL)
  expect_gt(max(out), 5)
  expect_lt(min(out), -7)
})

test_that("a head's loss and every gradient match PyTorch, with every memory technique", {
  x <- head_x()
  set.seed(13)
  y <- array(rnorm(length(x), sd = 20), dim(x)) # rain rates, say
  m0 <- head_model()
  ref <- torch_head(m0, x, y)
  convlstm_release(m0)
  techniques <- list(plain = list(), checkpoint = list(checkpoint = 2),
                     accumulation = list(accumulation_steps = 2),
                     recompute = list(recompute_gates = 2),
                     all = list(checkpoint = 3, accumulation_steps = 3, recompute_gates = 2))
  for (t in names(techniques)) {
    m <- head_model()
    loss <- do.call(convlstm_train_step, c(list(m, x, y, convlstm_optimizer_sgd(lr = 0)), techniques[[t]]))
    expect_close(loss, ref$loss, rel = REL, label = paste(t, "loss"))
    g <- convlstm_gradients(m)
    expect_setequal(names(g), names(ref$grads))
    for (k in names(g)) expect_close(g[[k]], ref$grads[[k]], rel = REL, label = paste(t, k))
    convlstm_release(m)
  }
})

test_that("a head trains a teacher-forced horizon: the loss of its last K frames", {
  x <- head_x(T = 6)
  set.seed(14)
  y <- array(rnorm(3 * 2 * 2 * 6 * 5, sd = 0.5), c(3, 2, 2, 6, 5))
  m <- head_model(hidden = c(4, 5)) # the last layer need not have input_dim channels
  on.exit(convlstm_release(m))
  # teacher forcing reads x, then the true frame y[, 1]; the loss is the
  # last two outputs' against y
  xt <- array(c(aperm(x, c(1, 3, 4, 5, 2)), aperm(y[, 1, , , , drop = FALSE], c(1, 3, 4, 5, 2))),
              c(3, 2, 6, 5, 7))
  ref <- torch_head(m, aperm(xt, c(1, 5, 2, 3, 4)), y, K = 2)
  loss <- convlstm_train_step(m, x, y, convlstm_optimizer_sgd(lr = 0), horizon = 2, teacher_forcing = TRUE)
  expect_close(loss, ref$loss, rel = REL)
  g <- convlstm_gradients(m)
  for (k in names(g)) expect_close(g[[k]], ref$grads[[k]], rel = REL, label = k)
})

test_that("a head's forecast feeds its frames back, whatever the last layer's size", {
  m <- head_model(hidden = c(4, 5))
  on.exit(convlstm_release(m))
  x <- head_x(T = 4)
  fc <- predict(m, x, horizon = 3)
  expect_identical(dim(fc), c(3L, 3L, 2L, 6L, 5L))
  # frame 1 is the output after x's last step; frame k + 1 the output after
  # reading frame k: the same numbers as a plain forward over x and the frames
  seq <- predict(m, x)
  expect_identical(fc[, 1, , , ], seq[, 4, , , ])
  time_last <- c(1, 3, 4, 5, 2) # then c() appends along time
  x2 <- array(c(aperm(x, time_last), aperm(fc[, 1:2, , , , drop = FALSE], time_last)),
              c(3, 2, 6, 5, 6))
  longer <- predict(m, aperm(x2, c(1, 5, 2, 3, 4)))
  expect_identical(longer[, 1:4, , , ], seq)
  expect_lt(max(abs(fc[, 2, , , ] - longer[, 5, , , ])), 1e-6)
  expect_lt(max(abs(fc[, 3, , , ] - longer[, 6, , , ])), 1e-6)
})

test_that("a head model saves and loads whole; a plain stack's weights do not fit it", {
  m <- head_model()
  on.exit(convlstm_release(m))
  x <- head_x()
  convlstm_train_step(m, x, 3 * x, convlstm_optimizer_adam(lr = 0.01))
  f <- tempfile(fileext = ".safetensors")
  on.exit(unlink(f), add = TRUE)
  convlstm_save(m, f)
  back <- convlstm_load(f)
  expect_identical(predict(back, x), predict(m, x))
  expect_true(back$config$head)
  convlstm_release(back)
  expect_true(convlstm_file_info(f)$config$head)
  plain <- convlstm(2, c(4, 3), 3, device = "cpu")
  on.exit(convlstm_release(plain), add = TRUE)
  expect_false(plain$config$head)
  expect_error(convlstm_load_state_dict(m, convlstm_state_dict(plain)), class = "convlstm_error")
  expect_error(convlstm_load_state_dict(plain, convlstm_state_dict(m)), class = "convlstm_error")
})

test_that("a head trains in float16 and bfloat16: the gradients of float32, rounded", {
  x <- head_x()
  set.seed(15)
  y <- array(rnorm(length(x), sd = 3), dim(x))
  m <- head_model()
  on.exit(convlstm_release(m))
  convlstm_train_step(m, x, y, convlstm_optimizer_sgd(lr = 0))
  want <- convlstm_gradients(m)
  # bfloat16 keeps 8 bits of mantissa, float16 11: a gradient read in the
  # wrong format (d_head's float bits as half) is off by far more
  for (dt in c("float16", "bfloat16")) {
    h <- head_model(dtype = dt)
    convlstm_train_step(h, x, y, convlstm_optimizer_sgd(lr = 0), checkpoint = 2)
    g <- convlstm_gradients(h)
    tol <- if (dt == "float16") 0.01 else 0.05
    for (k in names(want)) {
      err <- max(abs(g[[k]] - want[[k]])) / max(abs(want[[k]]))
      expect_lt(err, tol, label = paste(dt, k))
    }
    expect_identical(dim(predict(h, x)), dim(x))
    convlstm_release(h)
  }
})

test_that("a head's step holds what convlstm_memory_estimate() plans", {
  m <- head_model()
  on.exit(convlstm_release(m))
  x <- head_x()
  convlstm_train_step(m, x, x, convlstm_optimizer_sgd(lr = 0), checkpoint = 2)
  est <- convlstm_memory_estimate(m, 3, 5, 6, 5, optimizer = convlstm_optimizer_sgd(lr = 0), checkpoint = 2)
  plan <- attr(est, "plan")
  expect_true(all(c("head_output", "d_head") %in% plan$name))
  expect_identical(convlstm_memory_stats(m)$reserved, est$bytes[est$category == "reserved"])
})

test_that("a head refuses what it cannot train, by class", {
  m <- head_model()
  on.exit(convlstm_release(m))
  x <- head_x()
  expect_convlstm_error(convlstm_train_step(m, x, x[, 5, , , ], convlstm_optimizer_sgd(lr = 0),
                                   target = "last_state"), status = "unsupported")
  m2 <- convlstm(2, c(4, 2), 3, head = "top", device = "cpu")
  on.exit(convlstm_release(m2), add = TRUE)
  expect_convlstm_error(convlstm_train_step(m2, x, x[, 4:5, , , ], convlstm_optimizer_sgd(lr = 0), horizon = 2,
                                   teacher_forcing = FALSE), status = "unsupported")
  expect_error(convlstm(2, 3, 3, head = "all", device = "cpu"), class = "convlstm_error_invalid")
  expect_error(convlstm(2, 3, 3, head = TRUE, device = "cpu"), class = "convlstm_error_invalid")
})

test_that("a model with a head trains on any rows of a data set as on the same arrays", {
  # y holds the head's channels (the input's), not the top layer's hidden
  # ones: rows of a data set are found at the head's row size
  set.seed(36)
  x <- array(runif(5 * 3 * 64), c(5, 3, 1, 8, 8))
  y <- array(runif(5 * 3 * 64), c(5, 3, 1, 8, 8))
  m <- convlstm(1, c(3, 2), 3, head = "top", device = "cpu")
  on.exit(convlstm_release(m))
  d <- convlstm_data(m, x, y, target = "sequence")
  opt <- convlstm_optimizer_sgd(lr = 0)
  for (r in list(1:5, 1:2, 5L, c(3L, 1L))) {
    on_device <- convlstm_train_step(m, d, optimizer = opt, rows = r)
    # the mean squared error of the same rows, in plain R from predict()
    pred <- predict(m, x[r, , , , , drop = FALSE])
    by_hand <- mean((pred - y[r, , , , , drop = FALSE])^2)
    expect_equal(as.numeric(on_device), by_hand, tolerance = 1e-6,
                 label = paste("rows", paste(r, collapse = ",")))
  }
})
