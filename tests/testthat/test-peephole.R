# test-peephole.R -- convlstm(peephole =, frame_size =) (R/peephole.R): the
# configuration reads back, the weights have torch's names and shapes, start
# at zero without moving the other weights' draws, count as parameters
# everywhere (print, memory plan, optimizer, clipping), and survive
# save/load and state dicts. What they compute is test-parity-peephole.R's.

peep_x <- function(B = 2, T = 3, C = 1, H = 5, W = 4) {
  array(stats::runif(B * T * C * H * W, -1, 1), c(B, T, C, H, W))
}

# A copy of safetensors file f without its metadata (as PyTorch's
# save_file(state_dict) writes one): the header's __metadata__ object is
# blanked out with spaces, which keeps every offset.
strip_metadata <- function(f, g) {
  bytes <- readBin(f, "raw", file.size(f))
  n <- sum(as.numeric(bytes[1:8]) * 256^(0:7))
  header <- rawToChar(bytes[8 + seq_len(n)])
  m <- regexpr('"__metadata__":\\{[^}]*\\},?', header)
  stopifnot(m > 0)
  substr(header, m, m + attr(m, "match.length") - 1) <- strrep(" ", attr(m, "match.length"))
  bytes[8 + seq_len(n)] <- charToRaw(header)
  writeBin(bytes, g)
}

test_that("per-position peepholes read back and have torch's names and shapes", {
  m <- convlstm(1, c(3, 2), 3, device = "cpu", peephole = TRUE, frame_size = c(5, 4))
  on.exit(convlstm_release(m))
  expect_identical(m$config$peephole, "position")
  expect_identical(m$config$frame_size, c(5L, 4L))
  expect_identical(m$peephole, "position")
  expect_identical(m$frame_size, c(5L, 4L))
  p <- m$parameters
  expect_identical(names(p), c(
    "cell_list.0.conv.weight", "cell_list.0.conv.bias", "cell_list.0.w_ci", "cell_list.0.w_cf",
    "cell_list.0.w_co", "cell_list.1.conv.weight", "cell_list.1.conv.bias", "cell_list.1.w_ci",
    "cell_list.1.w_cf", "cell_list.1.w_co"))
  expect_identical(dim(p[["cell_list.0.w_co"]]), c(3L, 5L, 4L))
  expect_identical(dim(p[["cell_list.1.w_ci"]]), c(2L, 5L, 4L))
  expect_output(print(m), "peepholes: per position, frames of 5 x 4")
  # 4h(in+h)k^2 + 4h per layer, and three [h, 5, 4] weights
  n <- (12 * 4 * 9 + 12) + (8 * 5 * 9 + 8) + 3 * (3 + 2) * 20
  expect_identical(m$n_parameters, n)
})

test_that("per-channel peepholes are [hidden, 1, 1] and fit any frame size", {
  m <- convlstm(2, 3, c(3), device = "cpu", peephole = "channel", bias = FALSE)
  on.exit(convlstm_release(m))
  expect_identical(m$config$peephole, "channel")
  expect_null(m$config$frame_size)
  expect_null(m$frame_size)
  expect_identical(names(m$parameters),
                   c("cell_list.0.conv.weight", "cell_list.0.w_ci", "cell_list.0.w_cf",
                     "cell_list.0.w_co"))
  expect_identical(dim(m$parameters[["cell_list.0.w_cf"]]), c(3L, 1L, 1L))
  for (hw in list(c(5, 4), c(7, 9))) {
    out <- m(peep_x(C = 2, H = hw[[1]], W = hw[[2]]))
    expect_identical(dim(out[[1]][[1]]), as.integer(c(2, 3, 3, hw)))
  }
  expect_output(print(m), "peepholes: per channel")
})

test_that("FALSE and \"none\" are the tutorial's cell", {
  for (p in list(FALSE, "none")) {
    m <- convlstm(1, 2, 3, device = "cpu", peephole = p)
    expect_identical(m$config$peephole, "none")
    expect_false(any(grepl("w_c", names(m$parameters))))
    convlstm_release(m)
  }
})

test_that("peepholes start at zero: the same seed gives the same model as without them", {
  set.seed(7)
  plain <- convlstm(1, c(3, 1), 3, device = "cpu")
  set.seed(7)
  peep <- convlstm(1, c(3, 1), 3, device = "cpu", peephole = TRUE, frame_size = c(5, 4))
  on.exit({
    convlstm_release(plain)
    convlstm_release(peep)
  })
  pp <- peep$parameters
  for (k in grep("w_c", names(pp), value = TRUE)) expect_true(all(pp[[k]] == 0))
  expect_identical(pp[names(plain$parameters)], plain$parameters)
  x <- peep_x()
  expect_identical(peep(x), plain(x))
  # and the weights then move with training: the optimizer updates them
  y <- array(0.5, c(2, 1, 5, 4))
  convlstm_train_step(peep, x, y, convlstm_optimizer_adam(0.01))
  expect_gt(max(abs(peep$parameters[["cell_list.0.w_ci"]])), 1e-3)
  expect_gt(max(abs(peep$parameters[["cell_list.1.w_co"]])), 1e-3)
})

test_that("the memory plan counts the peepholes as parameters, gradients and Adam state", {
  m <- convlstm(1, c(4, 1), 3, device = "cpu", peephole = TRUE, frame_size = c(6, 6))
  plain <- convlstm(1, c(4, 1), 3, device = "cpu")
  on.exit({
    convlstm_release(m)
    convlstm_release(plain)
  })
  peep_bytes <- 4 * 3 * (4 + 1) * 36
  a <- convlstm_memory_estimate(m, 2, 3, 6, 6, optimizer = convlstm_optimizer_adam())
  b <- convlstm_memory_estimate(plain, 2, 3, 6, 6, optimizer = convlstm_optimizer_adam())
  grow <- stats::setNames(a$bytes - b$bytes, a$category)
  expect_identical(grow[["parameters"]], peep_bytes)
  expect_identical(grow[["gradients"]], peep_bytes)
  expect_identical(grow[["optimizer"]], 2 * peep_bytes)
  # and the model holds what the plan says after a step
  convlstm_train_step(m, peep_x(H = 6, W = 6), array(0, c(2, 1, 6, 6)), convlstm_optimizer_adam())
  s <- convlstm_memory_stats(m)
  expect_identical(stats::setNames(s$by_category$peak, s$by_category$category)[["parameters"]],
                   a$bytes[a$category == "parameters"])
})

test_that("gradient clipping's norm includes the peephole gradients", {
  set.seed(11)
  m <- convlstm(1, c(3, 1), 3, device = "cpu", peephole = TRUE, frame_size = c(5, 4))
  on.exit(convlstm_release(m))
  # random peepholes, so that they matter
  sd <- convlstm_state_dict(m)
  for (k in grep("w_c", names(sd), value = TRUE)) sd[[k]][] <- runif(length(sd[[k]]), -1, 1)
  convlstm_load_state_dict(m, sd)
  x <- peep_x()
  y <- array(stats::runif(2 * 5 * 4), c(2, 1, 5, 4))
  norms <- numeric()
  cb <- convlstm_callback(on_batch_end = function(ctx) norms <<- c(norms, ctx$grad_norm))
  convlstm_fit(m, x, y, convlstm_optimizer_sgd(0), epochs = 1, batch_size = 2, shuffle = FALSE,
               verbose = FALSE, callbacks = cb, max_grad_norm = Inf)
  # the step's gradients, as the norm saw them (lr 0, Inf: nothing changed)
  g <- convlstm_gradients(m)
  expect_gt(max(abs(g[["cell_list.0.w_co"]])), 0)
  sq <- vapply(g, function(a) sum(a^2), 0)
  full <- sqrt(sum(sq))
  without <- sqrt(sum(sq[!grepl("w_c", names(sq))]))
  # the same floats squared and summed in double: only the order differs
  expect_equal(norms, full, tolerance = 1e-12)
  expect_gt(abs(norms - without) / full, 1e4 * 1e-12)
})

test_that("peepholes are saved and loaded, and a file without metadata is read by its shapes", {
  set.seed(3)
  for (kind in c("position", "channel")) {
    m <- convlstm(1, c(3, 1), 3, device = "cpu", peephole = kind,
                  frame_size = if (kind == "position") c(5, 4))
    sd <- convlstm_state_dict(m)
    for (k in grep("w_c", names(sd), value = TRUE)) sd[[k]][] <- runif(length(sd[[k]]), -1, 1)
    convlstm_load_state_dict(m, sd)
    opt <- convlstm_optimizer_adam(0.01)
    x <- peep_x()
    convlstm_train_step(m, x, array(0.5, c(2, 1, 5, 4)), opt)
    f <- tempfile(fileext = ".safetensors")
    convlstm_save(m, f, optimizer = opt)
    info <- convlstm_file_info(f)
    expect_identical(info$config$peephole, kind)
    m2 <- convlstm_load(f, device = "cpu")
    expect_identical(m2$config$peephole, kind)
    expect_identical(m2$config$frame_size, m$config$frame_size)
    expect_identical(convlstm_state_dict(m2), convlstm_state_dict(m))
    expect_identical(m2(x), m(x))
    # the tensors alone, as PyTorch saves a state dict: the kind and frame
    # size come from w_ci's shape
    p <- tempfile(fileext = ".safetensors")
    convlstm_save(m, p)
    g <- tempfile(fileext = ".safetensors")
    strip_metadata(p, g)
    expect_false("convlstm.peephole" %in% names(convlstm_file_info(g)$metadata))
    m3 <- convlstm_load(g, device = "cpu")
    expect_identical(m3$config$peephole, kind)
    expect_identical(m3$config$frame_size, m$config$frame_size)
    expect_identical(convlstm_state_dict(m3), convlstm_state_dict(m))
    convlstm_release(m)
    convlstm_release(m2)
    convlstm_release(m3)
    unlink(c(f, g, p))
  }
})

test_that("a file of another peephole kind or frame size does not load into a model", {
  m <- convlstm(1, 3, 3, device = "cpu", peephole = TRUE, frame_size = c(5, 4))
  other <- convlstm(1, 3, 3, device = "cpu", peephole = TRUE, frame_size = c(4, 5))
  on.exit({
    convlstm_release(m)
    convlstm_release(other)
  })
  expect_error(convlstm_load_state_dict(m, convlstm_state_dict(other)), "cell_list.0.w_ci",
               class = "convlstm_error_invalid")
})

test_that("data-parallel gradient buckets hold the peephole gradients", {
  # each layer's bucket is its gradients, peepholes included: reduced over
  # the ranks as one (the mpirun test trains with them, test-distributed.R)
  for (kind in c("position", "channel")) {
    m <- convlstm(1, c(4, 3), 3, device = "cpu", peephole = kind,
                  frame_size = if (kind == "position") c(8, 8))
    est <- convlstm_memory_estimate(m, 4, 3, 8, 8, world_size = 2)
    comm <- attr(est, "communication")
    sd <- convlstm_state_dict(m)
    per_layer <- vapply(1:0, function(l) {
      sum(lengths(sd[startsWith(names(sd), sprintf("cell_list.%d.", l))]))
    }, numeric(1))
    expect_identical(comm$bytes, 4 * per_layer, label = kind)
    expect_identical(sum(comm$bytes), est$bytes[est$category == "gradients"], label = kind)
    convlstm_release(m)
  }
})

test_that("convlstm_memory_profile() runs a copy of a model with peepholes", {
  m <- convlstm(1, 3, 3, device = "cpu", threads = 1, peephole = TRUE, frame_size = c(6, 6))
  on.exit(convlstm_release(m))
  prof <- convlstm_memory_profile(m, batch_sizes = 2, seq_len = 2, height = 6, width = 6, steps = 1)
  expect_s3_class(prof, "data.frame")
  expect_gt(nrow(prof), 0)
})

# Peepholes act in the cell, dropout on the convolutions' inputs: with both,
# a model trains, and checkpointing or accumulating gives the plain step's
# gradients (the same masks: the same seed before each step).
test_that("peepholes and dropout together: training, and checkpointing's gradients", {
  x <- api_x(B = 4, T = 5)
  y <- api_y(B = 4, T = 5)
  make <- function(kind = "position", ...) {
    convlstm(2, c(3, 2), 3, device = "cpu", threads = 1, peephole = kind,
             frame_size = if (kind == "position") c(5, 4), dropout = 0.3,
             recurrent_dropout = 0.4, ...)
  }
  for (kind in c("position", "channel")) {
    set.seed(8)
    ref <- make(kind)
    w <- convlstm_state_dict(ref)
    convlstm_release(ref)
    # peepholes of the size of the conv weights' effect (they start at zero)
    for (k in grep("\\.w_c[ifo]$", names(w), value = TRUE)) w[[k]][] <- runif(length(w[[k]]), -0.8, 0.8)
    grads_of <- function(seed = 99, ...) {
      m <- make(kind)
      on.exit(convlstm_release(m))
      convlstm_load_state_dict(m, w)
      set.seed(seed) # the same masks for every variant
      convlstm_train_step(m, x, y, convlstm_optimizer_sgd(lr = 0), target = "sequence", ...)
      convlstm_gradients(m)
    }
    g0 <- grads_of()
    expect_gt(max(abs(g0[["cell_list.0.w_ci"]])), 0, label = kind)
    for (v in list(list(checkpoint = 2), list(checkpoint = 1),
                   list(accumulation_steps = 2, checkpoint = 3))) {
      g <- do.call(grads_of, v)
      for (k in names(g0)) {
        expect_close(g[[k]], g0[[k]], rel = 1e-5,
                     label = paste(kind, paste(names(v), v, collapse = " "), k))
      }
    }
    # other masks give other peephole gradients: dropout reaches them
    g1 <- grads_of(seed = 100)
    expect_gt(max(abs(g1[["cell_list.0.w_co"]] - g0[["cell_list.0.w_co"]])), 1e-6, label = kind)
  }
  # and it trains: the loss falls over Adam steps with fresh masks each step
  set.seed(3)
  m <- make("channel")
  on.exit(convlstm_release(m))
  opt <- convlstm_optimizer_adam(lr = 0.02)
  losses <- vapply(seq_len(30), function(i) {
    convlstm_train_step(m, x, y, opt, target = "sequence")
  }, numeric(1))
  expect_true(all(is.finite(losses)))
  expect_lt(mean(tail(losses, 5)), mean(head(losses, 5)))
  expect_gt(max(abs(convlstm_state_dict(m)[["cell_list.1.w_cf"]])), 1e-3) # the peepholes moved
})
