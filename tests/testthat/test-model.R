# convlstm(): argument checks, recycling, the callable model and what it
# returns, print/summary/$ and predict().

test_that("model(x) returns the tutorial's structure and shapes", {
  set.seed(1)
  model <- api_model()
  on.exit(convlstm_release(model))
  expect_s3_class(model, "convlstm_model")
  expect_true(is.function(model))
  x <- api_x(B = 2, T = 3, C = 2, H = 5, W = 4)
  out <- model(x)
  expect_type(out, "list")
  expect_named(out, c("layer_outputs", "layer_last_states"))
  expect_length(out[[1]], 2)
  expect_length(out[[2]], 2)
  expect_equal(dim(out[[1]][[1]]), c(2, 3, 3, 5, 4))
  expect_equal(dim(out[[1]][[2]]), c(2, 3, 2, 5, 4))
  for (l in 1:2) {
    hc <- out[[2]][[l]]
    expect_named(hc, c("h", "c"))
    expect_equal(dim(hc$h), c(2, c(3, 2)[l], 5, 4))
    expect_equal(dim(hc$c), c(2, c(3, 2)[l], 5, 4))
    expect_type(hc$h, "double")
    # the last state h is the output sequence's last step
    expect_equal(hc$h, out[[1]][[l]][, 3, , , , drop = TRUE], tolerance = 1e-6)
  }
  expect_true(all(abs(out[[1]][[2]]) < 1))
  # inference is deterministic and integer input is accepted
  expect_identical(model(x), out)
  xi <- array(1L, dim = c(1, 2, 2, 3, 3))
  expect_equal(dim(model(xi)[[1]][[2]]), c(1, 2, 2, 3, 3))
})

test_that("hidden_dims and kernel_sizes recycle from length 1", {
  model <- convlstm(1, 4, 3, n_layers = 3, device = "cpu")
  on.exit(convlstm_release(model))
  expect_equal(model$hidden_dims, c(4L, 4L, 4L))
  expect_equal(model$kernel_sizes, c(3L, 3L, 3L))
  expect_equal(model$n_layers, 3L)
  m2 <- convlstm(1, c(4, 2), c(5, 1), device = "cpu", bias = FALSE)
  on.exit(convlstm_release(m2), add = TRUE)
  expect_equal(m2$kernel_sizes, c(5L, 1L))
  expect_false(m2$bias)
  expect_equal(names(convlstm_state_dict(m2)), c("cell_list.0.conv.weight", "cell_list.1.conv.weight"))
})

test_that("argument errors name the argument", {
  expect_convlstm_error(convlstm(0, 4, 3), regexp = "`input_dim`")
  expect_convlstm_error(convlstm(1.5, 4, 3), regexp = "`input_dim`")
  expect_convlstm_error(convlstm("a", 4, 3), regexp = "`input_dim`")
  expect_convlstm_error(convlstm(1, c(4, 0), 3), regexp = "`hidden_dims`")
  expect_convlstm_error(convlstm(1, c(4, 4, 4), c(3, 3)), regexp = "`kernel_sizes`.*length 1 or `n_layers` \\(3\\)")
  expect_convlstm_error(convlstm(1, c(4, 4), 3, n_layers = 3), regexp = "`hidden_dims`")
  expect_convlstm_error(convlstm(1, 4, 4), regexp = "`kernel_sizes` must be odd")
  expect_convlstm_error(convlstm(1, 4, 3, n_layers = 0), regexp = "`n_layers`")
  expect_convlstm_error(convlstm(1, 4, 3, n_layers = 40), regexp = "`n_layers`.*at most")
  expect_convlstm_error(convlstm(1, 4, 3, bias = NA), regexp = "`bias`")
  expect_convlstm_error(convlstm(1, 4, 3, device = "gpu"), regexp = "`device`")
  expect_convlstm_error(convlstm(1, 4, 3, dtype = "float64"), regexp = "`dtype`")
  expect_convlstm_error(convlstm(1, 4, 3, memory_limit = -1), regexp = "`memory_limit`")
  expect_convlstm_error(convlstm(1, 4, 3, memory_limit = "lots"), regexp = "`memory_limit`")
  expect_convlstm_error(convlstm(1, 4, 3, threads = 0), regexp = "`threads`")
  # the call reported is the user's
  err <- tryCatch(convlstm(1, 4, 4), error = identity)
  expect_equal(err$call[[1]], quote(convlstm))
  expect_s3_class(err, "convlstm_error")
})

test_that("unsupported devices are clear errors; half dtypes are supported", {
  if (!convlstm_gpu_available()) {
    expect_convlstm_error(convlstm(1, 4, 3, device = "cuda"), status = "unsupported")
  }
  expect_convlstm_error(convlstm(1, 4, 3, device = "cpu", dtype = "float64"),
                        regexp = "`dtype`")
  model <- convlstm(1, 4, 3, device = "cpu", dtype = "float16")
  on.exit(convlstm_release(model))
  expect_equal(model$dtype, "float16")
})

test_that("memory_limit accepts bytes and sizes with units", {
  expect_equal(convlstm:::parse_bytes("2 MiB", "m", NULL), 2^21)
  expect_equal(convlstm:::parse_bytes("1.5GB", "m", NULL), 1.5e9)
  expect_equal(convlstm:::parse_bytes(1e6, "m", NULL), 1e6)
  expect_equal(convlstm:::parse_bytes(NULL, "m", NULL), 0)
  model <- convlstm(1, 4, 3, device = "cpu", memory_limit = "64 MiB")
  on.exit(convlstm_release(model))
  expect_equal(model$config$memory_limit, 64 * 2^20)
  expect_equal(convlstm_memory_stats(model)$limit, 64 * 2^20)
})

test_that("x is checked before C sees it", {
  model <- api_model()
  on.exit(convlstm_release(model))
  expect_convlstm_error(model(array(0, c(2, 3, 2, 4))), regexp = "`x` must be a numeric array with 5 dimensions")
  expect_convlstm_error(model(api_x(C = 3)), regexp = "`x` must have 2 channels")
  x <- api_x()
  x[1] <- NA
  expect_convlstm_error(model(x), regexp = "missing")
  expect_convlstm_error(model("a"), regexp = "`x`")
})

test_that("$ gives fields and methods, and unknown fields are errors", {
  model <- api_model()
  on.exit(convlstm_release(model))
  cfg <- model$config
  expect_equal(cfg$input_dim, 2L)
  expect_equal(cfg$hidden_dims, c(3L, 2L))
  expect_equal(model$device, "cpu")
  expect_equal(model$dtype, "float32")
  expect_equal(model$backend, "cpu")
  expect_equal(model$n_parameters, 4 * 3 * (2 + 3) * 9 + 12 + 4 * 2 * (3 + 2) * 9 + 8)
  expect_equal(model$n_parameters, cfg$n_params)
  expect_identical(model$parameters, convlstm_state_dict(model))
  expect_identical(model$state_dict(), convlstm_state_dict(model))
  expect_identical(model[["dtype"]], "float32")
  expect_convlstm_error(model$nope, regexp = "no field `nope`")
  expect_convlstm_error(model$bias <- FALSE, regexp = "read-only")
  expect_true("state_dict" %in% utils::.DollarNames(model, "state"))
})

test_that("torch idioms work or say in one line what to do instead", {
  model <- api_model()
  on.exit(convlstm_release(model))
  params <- model$parameters
  expect_type(params, "list")
  expect_true(all(vapply(params, is.double, logical(1))))
  expect_identical(names(params), names(convlstm_state_dict(model)))
  # without dropout, train() and eval() change nothing and say so once a
  # session (test-dropout.R: with dropout they switch model(x))
  env <- environment(convlstm:::no_mode_note)$the
  env$no_mode_noted <- NULL
  expect_message(out <- model$train(), "no train/eval mode")
  expect_identical(out, model)
  expect_silent(model$eval())
  x <- api_x()
  expect_identical(model(x), model(x))
  # no to(), cuda() or cpu(): not offered in completion, and calling one
  # says how to move a model (save, then load with device =) or change dtype
  expect_false(any(c("to", "cuda", "cpu") %in% utils::.DollarNames(model, "")))
  for (call in list(quote(model$to("cuda")), quote(model$to("cpu")), quote(model$cuda()),
                    quote(model$cpu()))) {
    expect_convlstm_error(eval(call), regexp = paste0(
      "no `\\$(to|cuda|cpu)\\(\\)`: it stays on the device it was made on \\(cpu\\)",
      ".*convlstm_save\\(model, path\\) then convlstm_load\\(path, device = \"cuda:0\\\")",
      ".*\\$half\\(\\)"))
  }
  # ?optim_adam leads to convlstm_optimizer_adam()'s page
  expect_true("optim_adam" %in% names(readRDS(system.file("help", "aliases.rds",
                                                          package = "convlstm"))))
})

test_that("print() and summary() show layers, parameters, device and dtype", {
  model <- api_model()
  on.exit(convlstm_release(model))
  out <- capture.output(print(model))
  expect_match(out[1], "<convlstm_model> 2 layers, 920 parameters .* device cpu, dtype float32")
  expect_true(any(grepl("layer +input +hidden +kernel +parameters", out)))
  expect_true(any(grepl("3x3", out)))
  s <- summary(model)
  expect_s3_class(s, "summary.convlstm_model")
  expect_equal(s$n_parameters, 920)
  expect_equal(s$parameter_bytes, 920 * 4)
  expect_equal(s$layers$input, c(2, 3))
  expect_equal(s$layers$hidden, c(3, 2))
  expect_s3_class(s$memory, "convlstm_memory_stats")
  out <- capture.output(print(s))
  expect_true(any(grepl("Total parameters: 920", out)))
  expect_true(any(grepl("parameters", out)))
})

test_that("predict() returns the last layer's sequence or last state", {
  set.seed(2)
  model <- api_model()
  on.exit(convlstm_release(model))
  x <- api_x(B = 5)
  full <- model(x)
  seq <- predict(model, x)
  expect_equal(dim(seq), c(5, 3, 2, 5, 4))
  expect_equal(seq, full[[1]][[2]])
  last <- predict(model, x, what = "last_state")
  expect_equal(dim(last), c(5, 2, 5, 4))
  expect_equal(last, full[[2]][[2]]$h)
  # batched prediction gives the same numbers
  expect_equal(predict(model, x, batch_size = 2), seq, tolerance = 1e-6)
  expect_equal(predict(model, x, what = "last_state", batch_size = 3), last, tolerance = 1e-6)
  expect_convlstm_error(predict(model, x, what = "all"), regexp = "`what`")
})

test_that("set.seed() makes initialisation reproducible", {
  set.seed(42)
  a <- api_model()
  set.seed(42)
  b <- api_model()
  c <- api_model()
  on.exit({
    convlstm_release(a)
    convlstm_release(b)
    convlstm_release(c)
  })
  expect_identical(convlstm_state_dict(a), convlstm_state_dict(b))
  expect_false(identical(convlstm_state_dict(a), convlstm_state_dict(c)))
  # torch's default bound: 1 / sqrt(fan_in), fan_in = (in + h) k k
  w <- convlstm_state_dict(a)[["cell_list.0.conv.weight"]]
  expect_true(all(abs(w) <= 1 / sqrt((2 + 3) * 9)))
  expect_gt(stats::sd(w), 0.5 / sqrt(3) / sqrt((2 + 3) * 9))
})

test_that("convlstm_gpu_available() answers TRUE or FALSE", {
  expect_type(convlstm_gpu_available(), "logical")
  expect_length(convlstm_gpu_available(), 1)
})

test_that("options(convlstm.cuda_tf32) is checked, and hands CONVLSTM_CUDA_TF32 back as it was", {
  old <- options(convlstm.cuda_tf32 = "yes")
  on.exit(options(old), add = TRUE)
  expect_convlstm_error(api_model(), regexp = "convlstm.cuda_tf32")
  options(convlstm.cuda_tf32 = NA)
  expect_convlstm_error(api_model(), regexp = "NULL, TRUE or FALSE")
  env <- Sys.getenv("CONVLSTM_CUDA_TF32", unset = NA)
  on.exit(if (is.na(env)) Sys.unsetenv("CONVLSTM_CUDA_TF32") else
    Sys.setenv(CONVLSTM_CUDA_TF32 = env), add = TRUE)
  Sys.setenv(CONVLSTM_CUDA_TF32 = "7")
  options(convlstm.cuda_tf32 = FALSE)
  m <- api_model()
  expect_identical(Sys.getenv("CONVLSTM_CUDA_TF32"), "7")
  # the CPU's convolutions have no such choice: nothing to report
  expect_identical(m$config$conv_math, "")
  expect_false(any(grepl("float32 convolutions", capture.output(print(m)))))
  convlstm_release(m)
  Sys.unsetenv("CONVLSTM_CUDA_TF32")
  m <- api_model()
  expect_true(is.na(Sys.getenv("CONVLSTM_CUDA_TF32", unset = NA)))
  convlstm_release(m)
})

test_that("CUDA float32 convolutions: TF32 by the option's TRUE, strict float32 by FALSE", {
  skip_if_not(convlstm_gpu_available(), "no usable CUDA GPU")
  set.seed(12)
  cpu <- api_model()
  x <- api_x()
  ref <- cpu(x)
  old <- options(convlstm.cuda_tf32 = TRUE)
  on.exit(options(old), add = TRUE)
  tf32 <- convlstm(2, c(3, 2), 3, device = "cuda")
  options(convlstm.cuda_tf32 = FALSE)
  strict <- convlstm(2, c(3, 2), 3, device = "cuda")
  on.exit({
    convlstm_release(cpu)
    convlstm_release(tf32)
    convlstm_release(strict)
  }, add = TRUE)
  expect_identical(tf32$config$conv_math, "tf32")
  expect_identical(strict$config$conv_math, "float32")
  expect_match(capture.output(print(tf32)), "TF32 tensor cores", all = FALSE)
  expect_match(capture.output(print(strict)), "strict float32", all = FALSE)
  convlstm_load_state_dict(tf32, convlstm_state_dict(cpu))
  convlstm_load_state_dict(strict, convlstm_state_dict(cpu))
  # strict: float32 rounding only, summed in another order
  expect_equal(strict(x), ref, tolerance = 1e-5)
  # TF32 rounds both operands of every product to 10 mantissa bits (2^-11
  # relative each); over these 18- to 45-term sums of mixed signs, through
  # sigmoid/tanh (slopes <= 1), 5e-3 relative bounds it with room
  expect_equal(tf32(x), ref, tolerance = 5e-3)
})
