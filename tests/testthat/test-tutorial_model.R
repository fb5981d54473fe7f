# test-tutorial_model.R -- the trained model in inst/extdata (?tutorial_model,
# made by tools/make_tutorial_model.R): it ships, loads as documented, has
# learned the moving beams, carries its optimizer, and its recorded losses
# are PyTorch's on the same weights and data: the fixture
# tests/testthat/fixtures/tutorial/torch (tools/make_tutorial_fixtures.py,
# inst/python/torch_convlstm.py) from the inputs in tutorial/inputs
# (tools/make_tutorial_inputs.R), which are checked here to still be the
# package's beams, initial weights and order of batches.

tutorial_path <- function() {
  path <- system.file("extdata", "tutorial.safetensors", package = "convlstm")
  if (!nzchar(path)) testthat::skip("the convlstm in use has no extdata/tutorial.safetensors")
  path
}

tutorial_losses <- function(metadata) as.numeric(strsplit(metadata[["loss_history"]], ",")[[1]])

# The 1-based indices of the ones of a 0/1 array, sorted as the inputs are.
ones_of <- function(a) {
  i <- which(a == 1, arr.ind = TRUE)
  unname(i[do.call(order, as.data.frame(i)), , drop = FALSE])
}

# tutorial/inputs: the fixture's beams checked against convlstm_moving_beams() of the
# file's metadata; returns the fixture's tensors and config.
# The data call the shipped model's metadata records, as today's call
# (R/tutorial_model.R: it was made before the exports were renamed).
recorded_call <- function(text) convlstm:::tutorial_data_call(text)

tutorial_inputs <- function(meta) {
  fx <- read_fixture("tutorial/inputs")
  for (key in c("data", "fresh_data")) {
    beams <- eval(parse(text = recorded_call(meta[[key]]))[[1]])
    expect_equal(dim(beams$x), fx$config[[paste0(key, "_dims")]], info = key)
    expect_equal(ones_of(beams$x), unname(fx$tensors[[paste0(key, "/x_ones")]]), info = key)
    expect_equal(ones_of(beams$y), unname(fx$tensors[[paste0(key, "/y_ones")]]), info = key)
  }
  fx
}

test_that("the shipped model is small and has the documented architecture", {
  path <- tutorial_path()
  expect_lt(file.size(path), 300 * 1024)
  model <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(model))
  expect_identical(model$input_dim, 1L)
  expect_identical(model$hidden_dims, c(8L, 1L))
  expect_identical(model$kernel_sizes, c(3L, 3L))
  expect_equal(model$n_parameters, 2952)
  meta <- convlstm_file_info(path)$metadata
  expect_identical(recorded_call(meta[["data"]]),
                   "convlstm_moving_beams(n = 100, n_frames = 6, size = 24, seed = 1)")
  expect_identical(meta[["made_by"]], "tools/make_tutorial_model.R")
  expect_length(tutorial_losses(meta), as.integer(meta[["epochs"]]))
})

test_that("the shipped model forecasts unseen beams far better than an all-zero forecast", {
  path <- tutorial_path()
  model <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(model))
  meta <- convlstm_file_info(path)$metadata
  fresh <- eval(parse(text = recorded_call(meta[["fresh_data"]]))[[1]])
  loss <- convlstm_evaluate(model, fresh$x, fresh$y)
  expect_lt(loss, mean(fresh$y^2) / 50)
})

test_that("the shipped model's loss on fresh beams is PyTorch's on the same weights and data", {
  path <- tutorial_path()
  meta <- convlstm_file_info(path)$metadata
  tutorial_inputs(meta)
  torch_fx <- read_fixture("tutorial/torch")
  model <- convlstm_load(path, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  fresh <- eval(parse(text = recorded_call(meta[["fresh_data"]]))[[1]])
  loss <- convlstm_evaluate(model, fresh$x, fresh$y)
  torch_loss <- as.numeric(torch_fx$tensors[["losses"]])[3]
  # float32 on both sides, sums in another order (PyTorch: 7.969461e-05 vs 7.969462e-05 recorded)
  expect_equal(loss, torch_loss, tolerance = 1e-6)
  expect_equal(as.numeric(meta[["fresh_loss"]]), torch_loss, tolerance = 1e-6)
})

test_that("training continues from the shipped optimizer state", {
  path <- tutorial_path()
  model <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(model))
  opt <- attr(model, "optimizer")
  expect_s3_class(opt, "convlstm_optimizer")
  expect_identical(opt$kind, "adam")
  expect_equal(opt$lr, 1e-2)
  info <- convlstm_file_info(path)
  meta <- info$metadata
  # Adam's state after every step of the run: 100 sequences per epoch
  steps <- as.integer(meta[["epochs"]]) * 100 / as.integer(meta[["batch_size"]])
  expect_equal(as.numeric(info$optimizer_steps), steps)
  beams <- convlstm_moving_beams(n = 20, n_frames = 6, size = 24, seed = 1)
  loss <- convlstm_train_step(model, beams$x, beams$y, opt)
  expect_lt(loss, 10 * tail(tutorial_losses(meta), 1))
})

test_that("the recorded losses of the first two epochs are PyTorch's from the same start", {
  path <- tutorial_path()
  meta <- convlstm_file_info(path)$metadata
  fx <- tutorial_inputs(meta)
  torch_losses <- as.numeric(read_fixture("tutorial/torch")$tensors[["losses"]])[1:2]
  beams <- eval(parse(text = recorded_call(meta[["data"]]))[[1]])
  batch_size <- as.integer(meta[["batch_size"]])
  expect_identical(batch_size, as.integer(fx$config$batch_size))
  # the documented loop's start: its initial weights and its order of batches
  set.seed(as.integer(meta[["seed"]]))
  model <- convlstm(1, c(8, 1), c(3, 3), device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  sd <- convlstm_state_dict(model)
  for (name in names(sd)) {
    expect_equal(as_f32(sd[[name]]), fx$tensors[[paste0("weights/", name)]], info = name)
  }
  opt <- convlstm_optimizer_adam(lr = fx$config$adam_lr)
  losses <- vapply(1:2, function(epoch) {
    order <- sample(100)
    expect_equal(order, as.integer(fx$tensors[["order"]][epoch, ]), info = epoch)
    batches <- split(order, ceiling(seq_len(100) / batch_size))
    mean(vapply(batches, function(b) {
      convlstm_train_step(model, beams$x[b, , , , , drop = FALSE], beams$y[b, , , , drop = FALSE], opt)
    }, numeric(1)))
  }, numeric(1))
  # float32 on both sides, 10 Adam steps from the same start (4e-8 apart when made)
  expect_equal(losses, torch_losses, tolerance = 1e-6)
  expect_equal(tutorial_losses(meta)[1:2], torch_losses, tolerance = 1e-6)
})
