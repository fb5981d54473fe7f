# autoplot() for a history and a memory profile, when ggplot2 is installed:
# the layers hold the data, the legend is below the panel.

test_that("autoplot() draws a history with the learning rate and the loss", {
  skip_if_not_installed("ggplot2")
  set.seed(1)
  model <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  x <- array(stats::runif(8 * 3 * 16), c(8, 3, 1, 4, 4))
  y <- array(x[, 3, 1, , ], c(8, 1, 4, 4))
  opt <- convlstm_optimizer_adam(0.01)
  h <- convlstm_fit(model, x, y, opt, epochs = 3, batch_size = 2, verbose = FALSE,
                    validation_split = 0.25, lr_scheduler = convlstm_lr_step(opt, 1, 0.5))
  p <- ggplot2::autoplot(h)
  expect_s3_class(p, "ggplot")
  expect_equal(p$theme$legend.position, "bottom")
  built <- ggplot2::ggplot_build(p)
  pts <- built$data[[2]]
  expect_equal(nrow(pts), 9) # training, validation and lr for 3 epochs
  expect_setequal(pts$y, c(h$loss, h$val_loss, h$lr))
  # a constant rate: one panel, the loss on a log axis
  h2 <- convlstm_fit(model, x, y, opt, epochs = 2, batch_size = 2, verbose = FALSE)
  b2 <- ggplot2::ggplot_build(ggplot2::autoplot(h2))
  expect_equal(b2$data[[2]]$y, log10(h2$loss))
  pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_silent(print(p))
})

test_that("autoplot() stacks a memory profile's categories", {
  skip_if_not_installed("ggplot2")
  model <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  prof <- convlstm_memory_profile(model, c(2, 4), 3, 6, 6, steps = 0)
  p <- ggplot2::autoplot(prof)
  expect_s3_class(p, "ggplot")
  expect_equal(p$theme$legend.position, "bottom")
  built <- ggplot2::ggplot_build(p)
  area <- built$data[[1]]
  tops <- tapply(area$ymax, area$x, max)[c("2", "4")] # geom_area pads the ends with 0
  cats <- intersect(c("parameters", "gradients", "optimizer", "activations", "states",
                      "workspace", "data"), names(prof))
  expect_equal(as.vector(tops), unname(rowSums(as.data.frame(prof)[cats])) / 2^20)
})
