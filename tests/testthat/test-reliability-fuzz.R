# Fuzzing the R API: calls with one or two arguments of a valid call
# replaced by a random mutation (wrong types, NA/NaN/Inf, zero, negative,
# huge, empty, wrong dims, corrupted arrays...). Every call must return or
# raise a classed convlstm error -- never crash R, never leak a model, never
# leave the model unusable. Bounded in count and time.

fuzz_values <- function(v) {
  d <- dim(v)
  list(
    NULL, NA, NA_real_, NaN, Inf, -Inf, 0, -1, 0.5, 1e10, 2^31, -2^31, .Machine$integer.max,
    TRUE, "a", character(), numeric(), integer(), list(), list(1, "a"), function(x) x,
    1i, c(1, 2, 3), matrix(1, 2, 2), array(0, c(1, 1, 1, 1, 1)), factor("a"),
    if (is.numeric(v) && length(v) > 0) -v,
    if (is.numeric(v) && length(v) > 0) v * 1e30,
    if (is.numeric(v) && length(v) > 1) v[-1],
    if (is.numeric(v) && length(v) > 0) c(v, v),
    if (!is.null(d)) array(v, rev(d)),
    if (!is.null(d)) array(v, c(d[-1], d[[1]])),
    if (!is.null(d)) {
      dd <- d
      dd[sample(length(d), 1)] <- dd[sample(length(d), 1)] + 1
      array(0.5, dd)
    },
    if (!is.null(d)) array(v, d[-length(d)]),
    if (!is.null(d)) array(v, c(d, 1)),
    if (!is.null(d)) {
      w <- v
      w[sample(length(w), 1)] <- sample(list(NA, NaN, Inf, -Inf), 1)[[1]]
      w
    },
    if (!is.null(d)) array(as.character(v), d),
    if (!is.null(d)) array(v > 0, d),
    if (!is.null(d)) {
      dd <- d
      dd[sample(length(d), 1)] <- 0
      array(0, dd)
    }
  )
}

mutate_args <- function(args, n_mut) {
  which <- sample(length(args), min(n_mut, length(args)))
  for (k in which) {
    vals <- Filter(Negate(is.null), fuzz_values(args[[k]]))
    pick <- sample(length(vals) + 1, 1)
    if (pick > length(vals)) {
      args[k] <- list(NULL) # the argument dropped to NULL
    } else {
      args[[k]] <- vals[[pick]]
    }
  }
  args
}

test_that("randomly mutated calls return or raise classed errors, and R stays up", {
  set.seed(20240607)
  # mutated paths (say "a") are written relative to the working directory
  wd <- setwd(tempdir())
  on.exit(setwd(wd), add = TRUE)
  gc()
  alive0 <- convlstm:::c_models_alive()
  m <- api_model()
  x <- api_x()
  y <- api_y()
  ys <- api_y(T = 3)
  y2 <- api_y(T = 2) # the 2 frames after x
  opt <- convlstm_optimizer_adam(0.01)
  sd <- convlstm_state_dict(m)
  path <- tempfile(fileext = ".safetensors")
  convlstm_save(m, path, optimizer = opt)
  on.exit(unlink(path), add = TRUE)
  opt_sgd <- convlstm_optimizer_sgd(0.1, momentum = 0.5)

  targets <- list(
    convlstm = list(fn = function(...) convlstm_release(convlstm(...)), args = list(input_dim = 2, hidden_dims = c(3, 2),
                                                kernel_sizes = 3, device = "cpu", threads = 1)),
    call = list(fn = function(x) m(x), args = list(x = x)),
    predict = list(fn = function(x, what, batch_size) predict(m, x, what, batch_size),
                   args = list(x = x, what = "sequence", batch_size = 1)),
    train_step = list(fn = function(x, y, optimizer, target) convlstm_train_step(m, x, y, optimizer, target),
                      args = list(x = x, y = y, optimizer = opt, target = "last_state")),
    train_step_seq = list(fn = function(x, y, optimizer, checkpoint, accumulation_steps, tbptt) {
      convlstm_train_step(m, x, y, optimizer, "sequence", checkpoint, accumulation_steps, tbptt)
    }, args = list(x = x, y = ys, optimizer = opt_sgd, checkpoint = 2, accumulation_steps = 2,
                   tbptt = 0)),
    fit = list(fn = function(x, y, optimizer, epochs, batch_size, shuffle) {
      # a valid but huge epoch count would only take long, not test anything
      if (is.numeric(epochs) && length(epochs) == 1 && isTRUE(epochs > 3)) epochs <- epochs * 1e30
      convlstm_fit(m, x, y, optimizer, epochs, batch_size, shuffle = shuffle, verbose = FALSE)
    }, args = list(x = x, y = y, optimizer = opt, epochs = 1, batch_size = 1, shuffle = TRUE)),
    # forecasting: free-running steps, fits over a horizon carrying the state
    train_step_free = list(fn = function(x, y, optimizer, horizon, teacher_forcing,
                                         accumulation_steps) {
      convlstm_train_step(m, x, y, optimizer, horizon = horizon, teacher_forcing = teacher_forcing,
                 accumulation_steps = accumulation_steps)
    }, args = list(x = x, y = y2, optimizer = opt, horizon = 2, teacher_forcing = FALSE,
                   accumulation_steps = 2)),
    fit_forecast = list(fn = function(x, y, horizon, teacher_forcing, state, shuffle) {
      convlstm_fit(m, x, y, opt, epochs = 1, batch_size = 1, horizon = horizon,
                   teacher_forcing = teacher_forcing, state = state, shuffle = shuffle,
                   verbose = FALSE)
    }, args = list(x = x, y = y2, horizon = 2, teacher_forcing = FALSE, state = "carry",
                   shuffle = FALSE)),
    estimate_free = list(fn = function(seq_len, horizon, teacher_forcing) {
      convlstm_memory_estimate(m, 2, seq_len, 5, 4, horizon = horizon, teacher_forcing = teacher_forcing)
    }, args = list(seq_len = 3, horizon = 2, teacher_forcing = FALSE)),
    evaluate = list(fn = function(x, y, batch_size) convlstm_evaluate(m, x, y, batch_size = batch_size),
                    args = list(x = x, y = y, batch_size = 2)),
    forward = list(fn = function(x, training, target) convlstm_forward(m, x, training, target),
                   args = list(x = x, training = TRUE, target = "last_state")),
    backward = list(fn = function(grad_output) {
      convlstm_forward(m, x, training = TRUE)
      convlstm_backward(m, grad_output)
    }, args = list(grad_output = y)),
    adam = list(fn = convlstm_optimizer_adam, args = list(lr = 0.01, betas = c(0.9, 0.999), eps = 1e-8,
                                                  weight_decay = 0)),
    sgd = list(fn = convlstm_optimizer_sgd, args = list(lr = 0.1, momentum = 0.9, weight_decay = 0)),
    load_state_dict = list(fn = function(state_dict, strict) convlstm_load_state_dict(m, state_dict, strict),
                           args = list(state_dict = sd, strict = TRUE)),
    estimate = list(fn = function(batch_size, seq_len, height, width) {
      convlstm_memory_estimate(m, batch_size, seq_len, height, width)
    }, args = list(batch_size = 2, seq_len = 3, height = 5, width = 4)),
    save = list(fn = function(path, optimizer, metadata) {
      convlstm_save(m, path, optimizer, metadata)
    }, args = list(path = tempfile(), optimizer = opt, metadata = c(a = "1"))),
    load = list(fn = function(path, device, dtype, with_optimizer) {
      r <- convlstm_load(path, device, dtype, with_optimizer = with_optimizer)
      convlstm_release(r)
    }, args = list(path = path, device = "cpu", dtype = "float32", with_optimizer = TRUE))
  )

  n_calls <- 0
  n_errors <- 0
  unclassed <- character()
  deadline <- Sys.time() + 60
  max_calls <- 1500
  while (n_calls < max_calls && Sys.time() < deadline) {
    t <- targets[[sample(length(targets), 1)]]
    args <- mutate_args(t$args, sample(1:2, 1))
    n_calls <- n_calls + 1
    res <- tryCatch({
      do.call(t$fn, args)
      "ok"
    }, error = function(e) e, warning = function(w) w)
    if (inherits(res, "error")) {
      n_errors <- n_errors + 1
      if (!inherits(res, "convlstm_error")) {
        unclassed <- c(unclassed, paste(deparse(conditionCall(res))[1], conditionMessage(res)))
      }
    }
  }
  # Errors R itself raises before any package code runs (a function given
  # where a number is expected is caught by our checks; these are e.g. R
  # failing to allocate a 1e10-element array we asked it to build) are
  # reported but do not count as failures; none are expected.
  expect_equal(unclassed, character(), info = paste(unique(unclassed), collapse = "\n"))
  expect_gt(n_calls, 200)
  expect_gt(n_errors, n_calls / 3)
  message(sprintf("fuzz: %d calls, %d errors, all classed", n_calls, n_errors))
  # the model survived: it trains, and nothing leaked
  convlstm_load_state_dict(m, sd)
  expect_true(is.finite(convlstm_train_step(m, x, y, opt)))
  convlstm_release(m)
  gc()
  expect_equal(convlstm:::c_models_alive(), alive0)
})
