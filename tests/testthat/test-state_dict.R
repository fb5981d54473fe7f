# convlstm_state_dict() / convlstm_load_state_dict(): torch's names and shapes, the
# element order torch uses, round trips and the errors of a bad state dict.

# A "same"-padded 2-d convolution in plain R, indexing the weight as torch
# does: w[o, i, kh, kw] with kh over rows and kw over columns.
ref_conv <- function(x, w, b) {
  # x [I, H, W]; w [O, I, k, k]
  I <- dim(x)[1]; H <- dim(x)[2]; W <- dim(x)[3]
  O <- dim(w)[1]; k <- dim(w)[3]; p <- k %/% 2
  xp <- array(0, c(I, H + 2 * p, W + 2 * p))
  xp[, p + seq_len(H), p + seq_len(W)] <- x
  y <- array(0, c(O, H, W))
  for (o in seq_len(O)) for (r in seq_len(H)) for (cc in seq_len(W)) {
    y[o, r, cc] <- b[o] + sum(w[o, , , ] * xp[, r + 0:(k - 1), cc + 0:(k - 1)])
  }
  y
}

ref_cell <- function(x_seq, w, b, hidden) {
  # x_seq [T, I, H, W]; returns h and c after the last step
  sig <- function(z) 1 / (1 + exp(-z))
  H <- dim(x_seq)[3]; W <- dim(x_seq)[4]
  h <- array(0, c(hidden, H, W)); c <- h
  for (t in seq_len(dim(x_seq)[1])) {
    I <- dim(x_seq)[2]
    inp <- array(0, c(I + hidden, H, W))
    inp[seq_len(I), , ] <- x_seq[t, , , ]
    inp[I + seq_len(hidden), , ] <- h
    z <- ref_conv(inp, w, b)
    gi <- sig(z[1:hidden, , , drop = FALSE])
    gf <- sig(z[hidden + 1:hidden, , , drop = FALSE])
    go <- sig(z[2 * hidden + 1:hidden, , , drop = FALSE])
    gg <- tanh(z[3 * hidden + 1:hidden, , , drop = FALSE])
    c <- gf * c + gi * gg
    h <- go * tanh(c)
  }
  list(h = h, c = c)
}

test_that("convlstm_state_dict() has torch's names, shapes and element order", {
  set.seed(3)
  model <- convlstm(2, c(3, 2), c(3, 1), device = "cpu")
  on.exit(convlstm_release(model))
  sd <- convlstm_state_dict(model)
  expect_named(sd, c("cell_list.0.conv.weight", "cell_list.0.conv.bias",
                     "cell_list.1.conv.weight", "cell_list.1.conv.bias"))
  expect_equal(dim(sd[[1]]), c(12, 5, 3, 3))
  expect_null(dim(sd[[2]]))
  expect_length(sd[[2]], 12)
  expect_equal(dim(sd[[3]]), c(8, 5, 1, 1))
  expect_length(sd[[4]], 8)
  expect_true(all(vapply(sd, is.double, logical(1))))

  # Non-symmetric random weights, a non-square image and two steps: only the
  # torch element order reproduces the model's numbers.
  x <- api_x(B = 1, T = 2, C = 2, H = 4, W = 5)
  out <- model(x)
  ref <- ref_cell(x[1, , , , ], sd[[1]], sd[[2]], 3)
  expect_equal(out$layer_last_states[[1]]$h[1, , , ], ref$h, tolerance = 1e-5)
  expect_equal(out$layer_last_states[[1]]$c[1, , , ], ref$c, tolerance = 1e-5)
})

test_that("state_dict round trips through convlstm_load_state_dict()", {
  set.seed(4)
  a <- api_model()
  b <- api_model()
  on.exit({
    convlstm_release(a)
    convlstm_release(b)
  })
  x <- api_x()
  expect_false(isTRUE(all.equal(a(x), b(x))))
  sd <- convlstm_state_dict(a)
  expect_invisible(convlstm_load_state_dict(b, sd))
  expect_identical(convlstm_state_dict(b), sd)
  expect_identical(b(x), a(x))
  # values are stored as float32
  sd2 <- sd
  sd2[[1]][1, 1, 1, 1] <- 0.1
  convlstm_load_state_dict(b, sd2)
  expect_equal(convlstm_state_dict(b)[[1]][1, 1, 1, 1], 0.1, tolerance = 1e-7)
  expect_false(identical(convlstm_state_dict(b)[[1]][1, 1, 1, 1], 0.1))
  # integer values and 1-d arrays are accepted
  sd3 <- sd
  sd3[[2]] <- array(seq_len(12), 12)
  convlstm_load_state_dict(b, sd3)
  expect_equal(convlstm_state_dict(b)[[2]], as.double(1:12))
  # strict = FALSE loads a subset
  convlstm_load_state_dict(b, sd["cell_list.0.conv.bias"], strict = FALSE)
  expect_identical(convlstm_state_dict(b)[[2]], sd[[2]])
  # the method form
  b$load_state_dict(sd)
  expect_identical(convlstm_state_dict(b), sd)
})

test_that("convlstm_load_state_dict() errors name what is wrong", {
  model <- api_model()
  on.exit(convlstm_release(model))
  sd <- convlstm_state_dict(model)
  expect_convlstm_error(convlstm_load_state_dict(model, sd[-1]),
                        regexp = "missing: cell_list.0.conv.weight")
  extra <- c(sd, list(cell_list.9.conv.weight = 1))
  expect_convlstm_error(convlstm_load_state_dict(model, extra),
                        regexp = "unexpected: cell_list.9.conv.weight")
  bad <- sd
  bad[[1]] <- array(0, c(12, 5, 3, 2))
  expect_convlstm_error(convlstm_load_state_dict(model, bad),
                        regexp = "`state_dict\\$cell_list.0.conv.weight` must be a numeric array of dim \\[12, 5, 3, 3\\]")
  bad <- sd
  bad[[2]] <- rep(0, 11)
  expect_convlstm_error(convlstm_load_state_dict(model, bad), regexp = "cell_list.0.conv.bias")
  bad <- sd
  bad[[2]][1] <- NA
  expect_convlstm_error(convlstm_load_state_dict(model, bad), regexp = "missing values")
  bad <- sd
  bad[[2]] <- as.character(bad[[2]])
  expect_convlstm_error(convlstm_load_state_dict(model, bad), regexp = "numeric array")
  expect_convlstm_error(convlstm_load_state_dict(model, unname(sd)), regexp = "named list")
  expect_convlstm_error(convlstm_load_state_dict(model, 1:3), regexp = "`state_dict`")
  expect_convlstm_error(convlstm_load_state_dict(model, list(foo = 1), strict = FALSE),
                        regexp = "no entry of this model")
  expect_convlstm_error(convlstm_load_state_dict(model, c(sd, sd[1])), regexp = "unique")
  expect_convlstm_error(convlstm_load_state_dict(1, sd), regexp = "`model`")
  # nothing was changed by the failed loads
  expect_identical(convlstm_state_dict(model), sd)
})
