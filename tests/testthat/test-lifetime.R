# Lifetime of the C model behind a model object: explicit release, the
# finalizer, models restored by readRDS, core errors as classed conditions,
# and convlstm_memory_stats().

test_that("a released model errors with an explanation", {
  model <- api_model()
  expect_true(convlstm_release(model))
  expect_false(convlstm_release(model))
  expect_convlstm_error(model(api_x()), status = "state", regexp = "released")
  expect_convlstm_error(convlstm_state_dict(model), status = "state", regexp = "convlstm_release")
  expect_convlstm_error(convlstm_train_step(model, api_x(), api_y(), convlstm_optimizer_adam()), status = "state")
  expect_convlstm_error(convlstm_memory_stats(model), status = "state")
  # printing still works and says so
  expect_output(print(model), "released")
  expect_equal(summary(model)$status, "released")
  expect_equal(model$hidden_dims, c(3L, 2L))
})

test_that("a model restored by unserialize/readRDS explains saveRDS", {
  model <- api_model()
  on.exit(convlstm_release(model))
  path <- tempfile(fileext = ".rds")
  on.exit(unlink(path), add = TRUE)
  saveRDS(model, path)
  restored <- readRDS(path)
  expect_s3_class(restored, "convlstm_model")
  expect_convlstm_error(restored(api_x()), status = "state",
                        regexp = "saveRDS cannot store a model's C memory")
  expect_convlstm_error(convlstm_state_dict(restored), status = "state", regexp = "convlstm_save")
  expect_output(print(restored), "readRDS")
  again <- unserialize(serialize(model, NULL))
  expect_convlstm_error(predict(again, api_x()), status = "state", regexp = "readRDS")
  # the original is unaffected and releasing the copy is harmless
  expect_false(convlstm_release(restored))
  expect_equal(dim(model(api_x())[[1]][[1]]), c(2, 3, 3, 5, 4))
})

test_that("rm() and gc() free the C model", {
  gc()
  before <- convlstm:::c_models_alive()
  local({
    m <- api_model()
    expect_equal(convlstm:::c_models_alive(), before + 1L)
  })
  gc()
  expect_equal(convlstm:::c_models_alive(), before)
  m <- api_model()
  expect_equal(convlstm:::c_models_alive(), before + 1L)
  convlstm_release(m)
  expect_equal(convlstm:::c_models_alive(), before)
  rm(m)
  gc()
  expect_equal(convlstm:::c_models_alive(), before)
})

test_that("core errors arrive as classed conditions with the user's call", {
  model <- api_model()
  on.exit(convlstm_release(model))
  err <- tryCatch(convlstm:::signal_core_error("oom", "tried to allocate 1 GiB"),
                  error = identity)
  expect_s3_class(err, c("convlstm_error_oom", "convlstm_error", "error", "condition"),
                  exact = TRUE)
  expect_equal(conditionMessage(err), "tried to allocate 1 GiB")
  err <- tryCatch(convlstm:::signal_core_error("internal", "bad"), error = identity)
  expect_s3_class(err, "convlstm_error_internal")
  expect_match(conditionMessage(err), "please report")
  # a state error raised by the C core (backward after an inference forward)
  model(api_x())
  err <- tryCatch(convlstm_backward(model, api_y()), error = identity)
  expect_s3_class(err, "convlstm_error_state")
  expect_equal(err$call[[1]], quote(convlstm_backward))
  # a memory limit too small for a step is an oom error and the model stays usable
  small <- api_model(memory_limit = "64 KiB")
  on.exit(convlstm_release(small), add = TRUE)
  x <- api_x(B = 16, H = 16, W = 16)
  expect_convlstm_error(convlstm_train_step(small, x, api_y(B = 16, H = 16, W = 16), convlstm_optimizer_adam()),
                        status = "oom")
  expect_equal(dim(predict(small, api_x(B = 1, T = 1, H = 2, W = 2))), c(1, 1, 2, 2, 2))
})

test_that("convlstm_memory_stats() reports every category", {
  model <- api_model()
  on.exit(convlstm_release(model))
  convlstm_train_step(model, api_x(), api_y(), convlstm_optimizer_adam())
  s <- convlstm_memory_stats(model)
  expect_s3_class(s, "convlstm_memory_stats")
  cats <- c("parameters", "gradients", "optimizer", "activations", "states", "workspace",
            "data")
  expect_equal(s$by_category$category, cats)
  expect_named(s$by_category, c("category", "current", "peak", "n_alloc", "n_free"))
  by <- stats::setNames(s$by_category$current, cats)
  expect_equal(by[["parameters"]], 920 * 4)
  expect_equal(by[["gradients"]], 920 * 4)
  expect_equal(by[["optimizer"]], 2 * 920 * 4)
  expect_equal(s$allocated, sum(s$by_category$current))
  expect_gte(s$peak_allocated, s$allocated)
  expect_gte(s$reserved, 0)
  expect_gt(s$device_total, 0)
  expect_equal(s$limit, 0)
  expect_output(print(s), "parameters")
  expect_output(print(s), "allocated")
})
