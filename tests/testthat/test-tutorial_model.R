# test-tutorial_model.R -- the trained model in inst/extdata (?tutorial_model,
# made by tools/make_tutorial_model.R): it ships, loads as documented, has
# learned the moving beams, carries its optimizer, and its recorded losses
# are those of the documented loop.

tutorial_path <- function() {
  path <- system.file("extdata", "tutorial.safetensors", package = "convlstm")
  if (!nzchar(path)) testthat::skip("the convlstm in use has no extdata/tutorial.safetensors")
  path
}

tutorial_losses <- function(metadata) as.numeric(strsplit(metadata[["loss_history"]], ",")[[1]])

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
  expect_identical(meta[["data"]], "moving_beams(n = 100, seq_len = 6, size = 24, seed = 1)")
  expect_identical(meta[["made_by"]], "tools/make_tutorial_model.R")
  expect_length(tutorial_losses(meta), as.integer(meta[["epochs"]]))
})

test_that("the shipped model forecasts unseen beams far better than an all-zero forecast", {
  path <- tutorial_path()
  model <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(model))
  meta <- convlstm_file_info(path)$metadata
  fresh <- eval(parse(text = meta[["fresh_data"]])[[1]])
  loss <- convlstm_evaluate(model, fresh$x, fresh$y)
  # the recorded loss is what this build computes from the file's weights
  expect_equal(loss, as.numeric(meta[["fresh_loss"]]), tolerance = 1e-4)
  expect_lt(loss, mean(fresh$y^2) / 50)
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
  beams <- moving_beams(n = 20, seq_len = 6, size = 24, seed = 1)
  loss <- train_step(model, beams$x, beams$y, opt)
  expect_lt(loss, 10 * tail(tutorial_losses(meta), 1))
})

test_that("the recorded losses are those of the documented loop (its first two epochs rerun)", {
  path <- tutorial_path()
  meta <- convlstm_file_info(path)$metadata
  beams <- eval(parse(text = meta[["data"]])[[1]])
  batch_size <- as.integer(meta[["batch_size"]])
  set.seed(as.integer(meta[["seed"]]))
  model <- convlstm(1, c(8, 1), c(3, 3), device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  opt <- optimizer_adam(lr = 1e-2)
  losses <- vapply(1:2, function(epoch) {
    batches <- split(sample(100), ceiling(seq_len(100) / batch_size))
    mean(vapply(batches, function(b) {
      train_step(model, beams$x[b, , , , , drop = FALSE], beams$y[b, , , , drop = FALSE], opt)
    }, numeric(1)))
  }, numeric(1))
  expect_equal(losses, tutorial_losses(meta)[1:2], tolerance = 1e-5)
})
