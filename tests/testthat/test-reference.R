# test-reference.R -- the package against a plain-R ConvLSTM written from the
# equations (loops over time, layers and kernel offsets; double precision),
# and its gradients against central finite differences. The PyTorch
# comparisons are in test-parity-torch.R; this file needs no fixture except to
# show that the R reference itself agrees with PyTorch.

# ---- the reference -------------------------------------------------------

ref_sigmoid <- function(z) 1 / (1 + exp(-z))

# torch's Conv2d (a cross-correlation) with stride 1, dilation c(dh, dw) and
# "same" zero padding d (k - 1) / 2. x [B, Cin, H, W], w [Cout, Cin, kh, kw],
# b [Cout] or NULL -> [B, Cout, H, W].
ref_conv2d <- function(x, w, b = NULL, dilation = c(1L, 1L)) {
  d <- dim(x)
  B <- d[1]; cin <- d[2]; H <- d[3]; W <- d[4]
  cout <- dim(w)[1]
  kh <- dim(w)[3]
  kw <- dim(w)[4]
  ph <- dilation[[1]] * (kh - 1L) %/% 2L
  pw <- dilation[[2]] * (kw - 1L) %/% 2L
  xp <- array(0, c(B, cin, H + 2L * ph, W + 2L * pw))
  xp[, , ph + seq_len(H), pw + seq_len(W)] <- x
  out <- array(0, c(cout, B, H, W))
  for (u in seq_len(kh)) {
    for (v in seq_len(kw)) {
      patch <- xp[, , (u - 1L) * dilation[[1]] + seq_len(H), (v - 1L) * dilation[[2]] + seq_len(W),
                  drop = FALSE]
      # channels first, so one matrix product sums over the input channels
      pm <- matrix(aperm(patch, c(2, 1, 3, 4)), cin)
      wm <- matrix(w[, , u, v], cout, cin)
      out <- out + array(wm %*% pm, c(cout, B, H, W))
    }
  }
  out <- aperm(out, c(2, 1, 3, 4))
  if (!is.null(b)) {
    out <- out + rep(b, each = B)
  }
  out
}

# The tutorial's convlstm forward. x [B, T, C, H, W]; sd a state dict (named
# list, torch names and shapes). Returns list(layer_outputs, layer_last_states)
# shaped as model(x) returns it. dilation: NULL (none) or per layer c(dh, dw).
ref_convlstm <- function(x, sd, hidden_dims, dilation = NULL) {
  d <- dim(x)
  B <- d[1]; Tn <- d[2]; H <- d[4]; W <- d[5]
  cur <- x
  outputs <- list()
  states <- list()
  for (l in seq_along(hidden_dims)) {
    hd <- hidden_dims[l]
    cin <- dim(cur)[3]
    w <- sd[[sprintf("cell_list.%d.conv.weight", l - 1L)]]
    b <- sd[[sprintf("cell_list.%d.conv.bias", l - 1L)]]
    h <- array(0, c(B, hd, H, W))
    cc <- h
    seq_out <- array(0, c(B, Tn, hd, H, W))
    gate <- function(z, j) z[, (j - 1L) * hd + seq_len(hd), , , drop = FALSE]
    for (t in seq_len(Tn)) {
      combined <- array(0, c(B, cin + hd, H, W))
      combined[, seq_len(cin), , ] <- cur[, t, , , , drop = FALSE]
      combined[, cin + seq_len(hd), , ] <- h
      z <- ref_conv2d(combined, w, b, if (is.null(dilation)) c(1L, 1L) else dilation[[l]])
      cc <- ref_sigmoid(gate(z, 2)) * cc + ref_sigmoid(gate(z, 1)) * tanh(gate(z, 4))
      h <- ref_sigmoid(gate(z, 3)) * tanh(cc)
      seq_out[, t, , , ] <- h
    }
    outputs[[l]] <- seq_out
    states[[l]] <- list(h, cc)
    cur <- seq_out
  }
  list(outputs, states)
}

ref_prediction <- function(out, target) {
  n <- length(out[[1]])
  if (target == "last_state") out[[2]][[n]][[1]] else out[[1]][[n]]
}

ref_loss <- function(x, y, sd, hidden_dims, target) {
  mean((ref_prediction(ref_convlstm(x, sd, hidden_dims), target) - y)^2)
}

# A state dict of the given architecture with values drawn here (rounded to
# float32, so the model holds exactly what the reference uses).
random_state_dict <- function(input_dim, hidden_dims, kernel_sizes, bias = TRUE, scale = 0.4) {
  sd <- list()
  cin <- input_dim
  for (l in seq_along(hidden_dims)) {
    h <- hidden_dims[l]
    k <- kernel_sizes[l]
    sd[[sprintf("cell_list.%d.conv.weight", l - 1L)]] <-
      as_f32(array(stats::runif(4 * h * (cin + h) * k * k, -scale, scale), c(4 * h, cin + h, k, k)))
    if (bias) {
      sd[[sprintf("cell_list.%d.conv.bias", l - 1L)]] <- as_f32(stats::runif(4 * h, -scale, scale))
    }
    cin <- h
  }
  sd
}

# ---- the reference is right: it reproduces PyTorch ------------------------

test_that("the R reference reproduces the PyTorch fixtures", {
  for (name in fixture_names()) {
    fx <- read_fixture(name)
    cfg <- fx$config
    dil <- if (is.null(cfg$dilation_h)) NULL else Map(c, cfg$dilation_h, cfg$dilation_w)
    out <- ref_convlstm(fx$tensors$x, fixture_group(fx, "weights/"), cfg$hidden_dims, dil)
    for (l in seq_along(cfg$hidden_dims)) {
      expect_close(out[[1]][[l]], fx$tensors[[sprintf("output/%d", l - 1L)]],
                   label = sprintf("%s: reference output %d", name, l))
      expect_close(out[[2]][[l]][[2]], fx$tensors[[sprintf("last_c/%d", l - 1L)]],
                   label = sprintf("%s: reference last c %d", name, l))
    }
    loss <- mean((ref_prediction(out, cfg$target) - fx$tensors$y)^2)
    expect_close(loss, fx$tensors$loss, label = sprintf("%s: reference loss", name))
  }
})

# ---- the package against the reference -----------------------------------

reference_cases <- list(
  list(input_dim = 2, hidden_dims = c(3, 2), kernel_sizes = c(3, 1), bias = TRUE,
       B = 2, T = 3, H = 4, W = 5, target = "last_state"),
  list(input_dim = 1, hidden_dims = 2, kernel_sizes = 5, bias = FALSE,
       B = 1, T = 2, H = 5, W = 3, target = "sequence")
)

make_case <- function(case, seed) {
  set.seed(seed)
  sd <- random_state_dict(case$input_dim, case$hidden_dims, case$kernel_sizes, case$bias)
  x <- as_f32(array(stats::runif(case$B * case$T * case$input_dim * case$H * case$W),
                    c(case$B, case$T, case$input_dim, case$H, case$W)))
  c_last <- case$hidden_dims[length(case$hidden_dims)]
  ydim <- if (case$target == "last_state") {
    c(case$B, c_last, case$H, case$W)
  } else {
    c(case$B, case$T, c_last, case$H, case$W)
  }
  y <- as_f32(array(stats::runif(prod(ydim), -0.5, 0.5), ydim))
  model <- convlstm(case$input_dim, case$hidden_dims, case$kernel_sizes, bias = case$bias)
  convlstm_load_state_dict(model, sd)
  list(model = model, sd = sd, x = x, y = y)
}

test_that("model(x) matches the plain-R reference", {
  for (i in seq_along(reference_cases)) {
    case <- reference_cases[[i]]
    s <- make_case(case, seed = 100 + i)
    ref <- ref_convlstm(s$x, s$sd, case$hidden_dims)
    out <- s$model(s$x)
    expect_length(out, 2)
    expect_length(out[[1]], length(case$hidden_dims))
    for (l in seq_along(case$hidden_dims)) {
      lab <- sprintf("case %d layer %d", i, l)
      expect_close(out[[1]][[l]], ref[[1]][[l]], label = paste(lab, "output"))
      expect_close(out[[2]][[l]][[1]], ref[[2]][[l]][[1]], label = paste(lab, "last h"))
      expect_close(out[[2]][[l]][[2]], ref[[2]][[l]][[2]], label = paste(lab, "last c"))
    }
  }
})

# The package's gradient of mean((prediction - y)^2), through the API for
# losses written in R.
package_gradients <- function(s, target) {
  convlstm_zero_grad(s$model)
  pred <- ref_prediction(convlstm_forward(s$model, s$x, training = TRUE), target)
  convlstm_backward(s$model, 2 * (pred - s$y) / length(s$y))
  convlstm_gradients(s$model)
}

# A few elements of each tensor: the first, the last and some in between.
probe_indices <- function(n, k = 4) unique(c(1L, n, sample.int(n, min(n, k))))

test_that("gradients match central differences of the double-precision reference", {
  for (i in seq_along(reference_cases)) {
    case <- reference_cases[[i]]
    s <- make_case(case, seed = 200 + i)
    g <- package_gradients(s, case$target)
    expect_setequal(names(g), names(s$sd))
    # In double precision, eps = 1e-4 leaves a truncation error near 1e-8 and
    # a rounding error near 1e-12, so the differences are exact for our
    # purpose; what remains is float32 in the package (about 1e-7 of the
    # largest gradient; 8.5e-8 over every element of both cases when this was
    # written). 1e-5 of the largest gradient passes that and catches any
    # wrong term.
    eps <- 1e-4
    for (name in names(s$sd)) {
      for (j in probe_indices(length(s$sd[[name]]))) {
        plus <- minus <- s$sd
        plus[[name]][j] <- plus[[name]][j] + eps
        minus[[name]][j] <- minus[[name]][j] - eps
        fd <- (ref_loss(s$x, s$y, plus, case$hidden_dims, case$target) -
                 ref_loss(s$x, s$y, minus, case$hidden_dims, case$target)) / (2 * eps)
        tol <- 1e-5 * max(abs(g[[name]])) + 1e-9
        expect(abs(g[[name]][j] - fd) <= tol,
               sprintf("case %d %s[%d]: package %.8g, finite difference %.8g (tolerance %.2g)",
                       i, name, j, g[[name]][j], fd, tol))
      }
    }
  }
})

test_that("gradients match central differences of the package's own forward", {
  # Black box: perturb a parameter through convlstm_load_state_dict, evaluate the loss
  # with model(x) in float32. The loss is smooth and about 0.1, so float32
  # rounding in it (~1e-8) over 2 * eps = 2e-2 is ~1e-6, and the O(eps^2)
  # truncation ~1e-4 of the largest gradient (9e-5 over every element when
  # this was written): 1e-3 of the largest gradient is a fair bar.
  case <- reference_cases[[1]]
  s <- make_case(case, seed = 300)
  g <- package_gradients(s, case$target)
  loss_at <- function(sd) {
    convlstm_load_state_dict(s$model, sd)
    mean((ref_prediction(s$model(s$x), case$target) - s$y)^2)
  }
  eps <- 1e-2
  for (name in names(s$sd)) {
    for (j in probe_indices(length(s$sd[[name]]), k = 2)) {
      plus <- minus <- s$sd
      plus[[name]][j] <- plus[[name]][j] + eps
      minus[[name]][j] <- minus[[name]][j] - eps
      fd <- (loss_at(plus) - loss_at(minus)) / (2 * eps)
      tol <- 1e-3 * max(abs(g[[name]])) + 1e-6
      expect(abs(g[[name]][j] - fd) <= tol,
             sprintf("%s[%d]: package %.6g, finite difference %.6g (tolerance %.2g)",
                     name, j, g[[name]][j], fd, tol))
    }
  }
})
