# Saving and resuming: convlstm_save() / convlstm_load() / convlstm_file_info()
# round trips, training that resumes with exactly the losses of an
# uninterrupted run, the atomic write, damaged files refused with classed
# errors, and the file opening in PyTorch (inst/python/safetensors_check.py through
# helper-torch.R's python_torch(): skipped without a Python with torch, failed
# then under CONVLSTM_TORCH_TESTS=require).

save_data <- function(n = 8, seed = 3) {
  set.seed(seed)
  x <- array(stats::runif(n * 4 * 2 * 5 * 4, -1, 1), c(n, 4, 2, 5, 4))
  y <- array(stats::runif(n * 2 * 5 * 4, -1, 1), c(n, 2, 5, 4))
  list(x = x, y = y)
}

st_file <- function() tempfile(fileext = ".safetensors")

test_that("weights, architecture and metadata round-trip", {
  set.seed(1)
  model <- api_model(bias = FALSE)
  on.exit(convlstm_release(model))
  path <- st_file()
  on.exit(unlink(path), add = TRUE)
  expect_identical(convlstm_save(model, path, metadata = c(epoch = "7", note = "caf\u00e9")), path)
  info <- convlstm_file_info(path)
  expect_equal(info$config$input_dim, 2L)
  expect_equal(info$config$hidden_dims, c(3L, 2L))
  expect_equal(info$config$kernel_sizes, c(3L, 3L))
  expect_false(info$config$bias)
  expect_null(info$optimizer)
  expect_equal(info$metadata, c(epoch = "7", note = "caf\u00e9"))
  expect_equal(info$all_metadata[["convlstm.format_version"]], "1")
  expect_equal(info$tensors$name, c("cell_list.0.conv.weight", "cell_list.1.conv.weight"))
  expect_equal(info$tensors$shape, c("[12, 5, 3, 3]", "[8, 5, 3, 3]"))
  loaded <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(loaded), add = TRUE)
  expect_identical(convlstm_state_dict(loaded), convlstm_state_dict(model))
  expect_null(attr(loaded, "optimizer"))
  expect_equal(attr(loaded, "metadata"), c(epoch = "7", note = "caf\u00e9"))
  x <- api_x()
  expect_identical(predict(loaded, x), predict(model, x))
  expect_equal(loaded$device, "cpu")
})

# The same run twice: straight through, and stopped after `first` epochs,
# saved, loaded into a new model and continued. Everything must agree to the
# last bit.
resume_check <- function(optimizer, dtype = "float32", epochs = 4, first = 2, ...) {
  # The CPU backend picks BLAS or its own GEMM per model by timing both; under
  # load two models may pick differently and round differently, so the
  # kernels are pinned (CONVLSTM_GEMM is read when a model is created).
  gemm <- Sys.getenv("CONVLSTM_GEMM", NA)
  Sys.setenv(CONVLSTM_GEMM = "internal")
  on.exit(if (is.na(gemm)) Sys.unsetenv("CONVLSTM_GEMM") else Sys.setenv(CONVLSTM_GEMM = gemm))
  d <- save_data()
  set.seed(11)
  a <- api_model(dtype = dtype)
  on.exit(convlstm_release(a), add = TRUE)
  b <- api_model(dtype = dtype)
  on.exit(convlstm_release(b), add = TRUE)
  convlstm_load_state_dict(b, convlstm_state_dict(a))
  set.seed(5)
  ha <- convlstm_fit(a, d$x, d$y, optimizer, epochs = epochs, batch_size = 3, verbose = FALSE, ...)
  set.seed(5)
  hb1 <- convlstm_fit(b, d$x, d$y, optimizer, epochs = first, batch_size = 3, verbose = FALSE, ...)
  path <- st_file()
  on.exit(unlink(path), add = TRUE)
  convlstm_save(b, path, optimizer = optimizer)
  convlstm_release(b)
  r <- convlstm_load(path, device = "cpu", threads = 1)
  on.exit(convlstm_release(r), add = TRUE)
  opt <- attr(r, "optimizer")
  expect_identical(unclass(opt), unclass(optimizer))
  expect_identical(class(opt), class(optimizer))
  hb2 <- convlstm_fit(r, d$x, d$y, opt, epochs = epochs - first, batch_size = 3, verbose = FALSE,
                      ...)
  expect_identical(c(hb1$loss, hb2$loss), ha$loss)
  expect_identical(convlstm_state_dict(r), convlstm_state_dict(a))
  expect_identical(unclass(convlstm_loss_scale(r)), unclass(convlstm_loss_scale(a)))
  # without the optimizer state the continuation differs (the optimizer starts afresh)
  if (!identical(optimizer$kind, "sgd") || optimizer$momentum > 0) {
    e <- convlstm_load(path, device = "cpu", threads = 1, with_optimizer = FALSE)
    on.exit(convlstm_release(e), add = TRUE)
    expect_null(attr(e, "optimizer"))
    set.seed(5)
    invisible(convlstm_fit(e, d$x, d$y, optimizer, epochs = first, batch_size = 3, verbose = FALSE))
    he <- convlstm_fit(e, d$x, d$y, optimizer, epochs = epochs - first, batch_size = 3,
                       verbose = FALSE, ...)
    expect_false(identical(he$loss, hb2$loss))
  }
}

test_that("Adam resumes with exactly the losses of an uninterrupted run", {
  resume_check(convlstm_optimizer_adam(lr = 0.01, weight_decay = 1e-3))
})

test_that("SGD with momentum resumes exactly", {
  resume_check(convlstm_optimizer_sgd(lr = 0.05, momentum = 0.9))
})

test_that("plain SGD (no optimizer state) resumes exactly", {
  resume_check(convlstm_optimizer_sgd(lr = 0.05))
})

test_that("resuming is exact with checkpointing and accumulation too", {
  resume_check(convlstm_optimizer_adam(lr = 0.01), checkpoint = 2, accumulation_steps = 2)
})

test_that("a float16 model resumes exactly, loss scale included", {
  resume_check(convlstm_optimizer_adam(lr = 0.01), dtype = "float16")
})

test_that("the loss scale after skipped steps is saved and restored", {
  set.seed(2)
  model <- api_model(dtype = "float16")
  on.exit(convlstm_release(model))
  x <- api_x()
  huge <- api_y() * 1e6 # overflows float16 gradients: the step is skipped, the scale halves
  opt <- convlstm_optimizer_adam(lr = 0.01)
  for (i in 1:3) convlstm_train_step(model, x, huge, opt)
  before <- convlstm_loss_scale(model)
  expect_equal(before$skipped_steps, 3)
  expect_equal(before$scale, 65536 / 8)
  path <- st_file()
  on.exit(unlink(path), add = TRUE)
  convlstm_save(model, path, optimizer = opt)
  info <- convlstm_file_info(path)
  expect_equal(info$loss_scale$scale, before$scale)
  loaded <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(loaded), add = TRUE)
  expect_identical(unclass(convlstm_loss_scale(loaded)), unclass(before))
})

test_that("saving refuses wrong arguments with classed errors naming them", {
  model <- api_model()
  on.exit(convlstm_release(model))
  path <- st_file()
  expect_convlstm_error(convlstm_save(model, 1), regexp = "`path`")
  expect_convlstm_error(convlstm_save(model, c("a", "b")), regexp = "`path`")
  expect_convlstm_error(convlstm_save(model, NA_character_), regexp = "`path`")
  expect_convlstm_error(convlstm_save(model, file.path(tempdir(), "no", "such", "x.st")),
                        regexp = "`path`'s directory")
  expect_convlstm_error(convlstm_save(model, tempdir()), regexp = "a directory, not a regular file")
  expect_convlstm_error(convlstm_save(model, path, optimizer = "adam"), regexp = "`optimizer`")
  expect_convlstm_error(convlstm_save(model, path, metadata = c("x")), regexp = "`metadata`")
  expect_convlstm_error(convlstm_save(model, path, metadata = list(a = 1)), regexp = "`metadata`")
  expect_convlstm_error(convlstm_save(model, path, metadata = c(a = "1", a = "2")),
                        regexp = "`metadata`")
  expect_convlstm_error(convlstm_save(model, path, metadata = c(format = "x")),
                        regexp = "reserved")
  expect_convlstm_error(convlstm_save(model, path, metadata = c(convlstm.bias = "x")),
                        regexp = "reserved")
  expect_convlstm_error(convlstm_save(model, path, metadata = c(a = NA)), regexp = "`metadata`")
  expect_convlstm_error(convlstm_save("model", path), regexp = "`model`")
  convlstm_train_step(model, api_x(), api_y(), convlstm_optimizer_adam())
  expect_convlstm_error(convlstm_save(model, path, optimizer = convlstm_optimizer_sgd(0.1)),
                        regexp = "Adam's")
  expect_false(file.exists(path))
  convlstm_release(model)
  expect_convlstm_error(convlstm_save(model, path), status = "state", regexp = "released")
})

test_that("saving replaces a file atomically and leaves nothing beside it", {
  dir <- tempfile("savedir")
  dir.create(dir)
  on.exit(unlink(dir, recursive = TRUE))
  path <- file.path(dir, "m.safetensors")
  set.seed(4)
  a <- api_model()
  on.exit(convlstm_release(a), add = TRUE)
  b <- api_model()
  on.exit(convlstm_release(b), add = TRUE)
  convlstm_save(a, path)
  convlstm_save(b, path)
  expect_equal(list.files(dir), "m.safetensors")
  r <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(r), add = TRUE)
  expect_identical(convlstm_state_dict(r), convlstm_state_dict(b))
  # a failed save (a directory in the way) leaves the old file and no temporary one
  expect_error(convlstm_save(a, dir))
  expect_equal(list.files(dir), "m.safetensors")
})

test_that("damaged and foreign files are refused with classed errors", {
  model <- api_model()
  on.exit(convlstm_release(model))
  path <- st_file()
  on.exit(unlink(path), add = TRUE)
  convlstm_save(model, path, optimizer = convlstm_optimizer_adam())
  bytes <- readBin(path, "raw", file.size(path))
  bad <- st_file()
  on.exit(unlink(bad), add = TRUE)
  try_bytes <- function(b) {
    writeBin(b, bad)
    tryCatch({
      m <- convlstm_load(bad, device = "cpu")
      convlstm_release(m)
      NULL
    }, error = identity)
  }
  gc()
  alive <- convlstm:::c_models_alive()
  # truncated anywhere
  for (n in c(0, 3, 8, 9, 40, length(bytes) %/% 2, length(bytes) - 1)) {
    err <- try_bytes(bytes[seq_len(n)])
    expect_s3_class(err, "convlstm_error_invalid")
    expect_match(conditionMessage(err), bad, fixed = TRUE)
  }
  # one longer
  expect_s3_class(try_bytes(c(bytes, as.raw(0))), "convlstm_error_invalid")
  # an impossible header length
  b <- bytes
  b[8] <- as.raw(0x7f)
  expect_match(conditionMessage(try_bytes(b)), "header length")
  # a NaN in the weights is counted
  hl <- sum(as.integer(bytes[1:4]) * 256^(0:3))
  b <- bytes
  b[8 + hl + 1:8] <- writeBin(c(NaN, Inf), raw(), size = 4, endian = "little")
  expect_match(conditionMessage(try_bytes(b)), "2 non-finite values")
  # random bytes
  set.seed(6)
  for (i in 1:20) {
    expect_s3_class(try_bytes(as.raw(sample(0:255, sample(1:200, 1), replace = TRUE))),
                    "convlstm_error_invalid")
  }
  # flipped bytes in the header: refused or loaded, never a crash
  set.seed(7)
  for (i in 1:200) {
    b <- bytes
    at <- sample(9:(8 + hl), 3)
    b[at] <- as.raw(sample(0:255, 3))
    err <- try_bytes(b)
    if (!is.null(err)) expect_s3_class(err, "convlstm_error")
  }
  gc()
  expect_equal(convlstm:::c_models_alive(), alive)
  # not files
  expect_convlstm_error(convlstm_load(file.path(tempdir(), "nope.safetensors")),
                        regexp = "does not exist")
  expect_convlstm_error(convlstm_load(tempdir()), regexp = "directory")
  expect_convlstm_error(convlstm_load(42), regexp = "`path`")
  expect_convlstm_error(convlstm_file_info(NULL), regexp = "`path`")
  expect_convlstm_error(convlstm_load(path, device = "tpu"), regexp = "`device`")
  expect_convlstm_error(convlstm_load(path, dtype = "int8"), regexp = "`dtype`")
  expect_convlstm_error(convlstm_load(path, with_optimizer = NA), regexp = "`with_optimizer`")
  expect_convlstm_error(convlstm_load(path, threads = 0), regexp = "`threads`")
  expect_convlstm_error(convlstm_load(path, memory_limit = -1), regexp = "`memory_limit`")
})

test_that("a load that runs out of memory frees what it made", {
  model <- api_model()
  on.exit(convlstm_release(model))
  path <- st_file()
  on.exit(unlink(path), add = TRUE)
  convlstm_train_step(model, api_x(), api_y(), convlstm_optimizer_adam())
  convlstm_save(model, path, optimizer = convlstm_optimizer_adam())
  gc()
  alive <- convlstm:::c_models_alive()
  # parameters (3680 bytes) fit, the optimizer state does not
  expect_convlstm_error(convlstm_load(path, device = "cpu", memory_limit = 6000), status = "oom",
                        regexp = "out of memory")
  gc()
  expect_equal(convlstm:::c_models_alive(), alive)
  ok <- convlstm_load(path, device = "cpu", memory_limit = 6000, with_optimizer = FALSE)
  on.exit(convlstm_release(ok), add = TRUE)
  expect_identical(convlstm_state_dict(ok), convlstm_state_dict(model))
})

test_that("the file loads in PyTorch and computes the same outputs", {
  pt <- python_torch()
  set.seed(12)
  model <- convlstm(2, c(4, 3), c(3, 1), device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  d <- save_data(n = 3)
  opt <- convlstm_optimizer_sgd(0.05, momentum = 0.9)
  convlstm_train_step(model, d$x, array(stats::runif(3 * 3 * 5 * 4), c(3, 3, 5, 4)), opt)
  path <- st_file()
  on.exit(unlink(path), add = TRUE)
  convlstm_save(model, path, optimizer = opt, metadata = c(epoch = "1"))
  torch <- torch_check(pt, "read", path, d$x, c(3, 4, 3, 5, 4))
  expect_match(torch$summary, "\"cell_list.0.conv.weight\": \\[16, 6, 3, 3\\]")
  expect_match(torch$summary, "\"optimizer.momentum_buffer.cell_list.1.conv.bias\": \\[12\\]")
  expect_match(torch$summary, "\"epoch\": \"1\"")
  ours <- predict(model, d$x)
  expect_equal(ours, torch$output, tolerance = 1e-5)
})

test_that("a file with peepholes loads in PyTorch and computes the same outputs", {
  pt <- python_torch()
  set.seed(13)
  d <- save_data(n = 2)
  for (kind in c("position", "channel")) local({
    model <- convlstm(2, c(3, 2), 3, device = "cpu", threads = 1, peephole = kind,
                      frame_size = if (kind == "position") dim(d$x)[4:5])
    path <- st_file()
    on.exit({ # also when a check below errs
      convlstm_release(model)
      unlink(path)
    })
    sd <- convlstm_state_dict(model)
    for (k in grep("w_c", names(sd), value = TRUE)) {
      sd[[k]][] <- stats::runif(length(sd[[k]]), -1, 1)
    }
    convlstm_load_state_dict(model, sd)
    convlstm_save(model, path)
    ours <- predict(model, d$x)
    torch <- torch_check(pt, "read", path, d$x, dim(ours))
    expect_match(torch$summary, "\"cell_list.1.w_co\": \\[2, ")
    expect_equal(ours, torch$output, tolerance = 1e-5)
  })
})

# Square kernels hide a writer that swaps kh and kw in a weight's shape:
# PyTorch builds Conv2d(kernel_size = (kh, kw)) from the metadata and its
# convlstm_load_state_dict(strict = TRUE) refuses a [out, in, kw, kh] weight.
test_that("a file with non-square, dilated kernels loads in PyTorch: [out, in, kh, kw]", {
  pt <- python_torch()
  set.seed(14)
  d <- save_data(n = 2)
  model <- convlstm(2, c(3, 2), list(c(3, 5), c(5, 1)), device = "cpu", threads = 1,
                    dilation = list(c(1, 2), 1))
  path <- st_file()
  on.exit({
    convlstm_release(model)
    unlink(path)
  })
  convlstm_save(model, path)
  ours <- predict(model, d$x)
  torch <- torch_check(pt, "read", path, d$x, dim(ours))
  expect_match(torch$summary, "\"cell_list.0.conv.weight\": \\[12, 5, 3, 5\\]")
  expect_match(torch$summary, "\"cell_list.1.conv.weight\": \\[8, 5, 5, 1\\]")
  expect_equal(ours, torch$output, tolerance = 1e-5)
})

test_that("a state dict saved from PyTorch loads, architecture read from the shapes", {
  pt <- python_torch()
  d <- save_data(n = 2)
  path <- st_file()
  on.exit(unlink(path))
  torch <- torch_check(pt, "write", path, d$x, c(2, 4, 1, 5, 4),
                       args = c("7", "2", "5,1", "3,3", "true"))
  info <- convlstm_file_info(path)
  expect_equal(info$config$hidden_dims, c(5L, 1L))
  expect_equal(info$config$kernel_sizes, c(3L, 3L))
  expect_true(info$config$bias)
  expect_length(info$all_metadata, 0)
  model <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(model), add = TRUE)
  expect_equal(predict(model, d$x), torch$output, tolerance = 1e-5)
})
