# convlstm_evaluate(metrics = ) and convlstm_fit(metrics = ): the model's
# output scored by convlstm_forecast_metrics(), checked against predict() scored
# directly.

tiny_model <- function() {
  set.seed(7)
  convlstm(1, c(4, 1), 3, device = "cpu")
}

test_that("convlstm_evaluate with metrics scores what predict() returns", {
  model <- tiny_model()
  on.exit(convlstm_release(model))
  d <- convlstm_moving_beams(n = 10, n_frames = 5, size = 12, seed = 3)
  plain <- convlstm_evaluate(model, d$x, d$y, batch_size = 4)
  got <- convlstm_evaluate(model, d$x, d$y, batch_size = 4,
                           metrics = list(metrics = c("mse", "ssim"), thresholds = 0.5))
  pred <- predict(model, d$x, what = "last_state")
  want <- convlstm_forecast_metrics(pred, d$y, metrics = c("mse", "ssim"), thresholds = 0.5)$overall
  expect_identical(names(got), c("loss", names(want)))
  expect_identical(got[["loss"]], plain)
  expect_equal(got[-1], want, tolerance = 1e-6)
  expect_identical(convlstm_evaluate(model, d$x, d$y, metrics = "mae")[["mae"]],
                   convlstm_evaluate(model, d$x, d$y, batch_size = 3, metrics = "mae")[["mae"]])
})

test_that("with a horizon the free-running forecast is scored", {
  model <- tiny_model()
  on.exit(convlstm_release(model))
  d <- convlstm_moving_digits(n = 6, n_frames = 7, size = 12, n_digits = 1, scale = 1, horizon = 3, seed = 2)
  got <- convlstm_evaluate(model, d$x, d$y, horizon = 3, metrics = c("mse", "psnr"))
  want <- convlstm_forecast_metrics(predict(model, d$x, horizon = 3), d$y, metrics = c("mse", "psnr"))
  expect_equal(got[c("mse", "psnr")], want$overall, tolerance = 1e-6)
})

test_that("convlstm_fit records val_<metric> per epoch, the last as evaluate gives it", {
  model <- tiny_model()
  on.exit(convlstm_release(model))
  d <- convlstm_moving_beams(n = 16, n_frames = 5, size = 12, seed = 4)
  v <- convlstm_moving_beams(n = 6, n_frames = 5, size = 12, seed = 5)
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(lr = 0.01), epochs = 2, batch_size = 8,
                    validation_data = list(v$x, v$y), verbose = FALSE,
                    metrics = list(metrics = c("mae", "ssim"), thresholds = 0.5))
  expect_true(all(c("val_mae", "val_ssim", "val_csi_0.5", "val_pod_0.5", "val_far_0.5") %in% names(h)))
  after <- convlstm_evaluate(model, v$x, v$y,
                             metrics = list(metrics = c("mae", "ssim"), thresholds = 0.5))
  expect_equal(h$val_mae[[2]], after[["mae"]], tolerance = 1e-6)
  expect_equal(h$val_ssim[[2]], after[["ssim"]], tolerance = 1e-6)
  expect_false(isTRUE(all.equal(h$val_mae[[1]], h$val_mae[[2]])))
})

test_that("bad metrics stop before anything is trained", {
  model <- tiny_model()
  on.exit(convlstm_release(model))
  d <- convlstm_moving_beams(n = 8, n_frames = 5, size = 12, seed = 4)
  before <- convlstm_state_dict(model)
  opt <- convlstm_optimizer_adam(lr = 0.01)
  expect_error(convlstm_fit(model, d$x, d$y, opt, epochs = 1, verbose = FALSE, metrics = "mse"),
               "`metrics` needs held-out data", class = "convlstm_error_invalid")
  expect_error(convlstm_fit(model, d$x, d$y, opt, epochs = 1, verbose = FALSE,
                            validation_split = 0.25, metrics = list(thresholds = 3)),
               "`thresholds`", class = "convlstm_error_invalid")
  expect_error(convlstm_fit(model, d$x, d$y, opt, epochs = 1, verbose = FALSE,
                            validation_split = 0.25, metrics = "rmse"),
               "`metrics`", class = "convlstm_error_invalid")
  expect_error(convlstm_evaluate(model, d$x, d$y, metrics = list(window = 3)), "`metrics`",
               class = "convlstm_error_invalid")
  expect_identical(convlstm_state_dict(model), before)
})
