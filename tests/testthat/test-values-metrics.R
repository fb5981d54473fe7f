# test-values-metrics.R -- convlstm_forecast_metrics() pinned by values written here
# by hand or by a formula in plain R on tiny arrays (issue 38, items 1 and
# 2): MSE, MAE, PSNR, SSIM (one and two windows, two channels), Shi et
# al.'s cross-entropy at the clip's edges (forecasts of exactly 0 and 1),
# CSI/POD/FAR from contingency counts made by hand with values exactly at
# the threshold, and every argument limit on both sides of its edge.
# (tests/testthat/test-metrics.R holds the scikit-image fixture checks.)

a5 <- function(v, d) array(as.double(v), d)

test_that("MSE, MAE and PSNR of a 2 x 2 frame, by hand", {
  obs <- a5(c(0, 0.5, 1, 0.25), c(1, 1, 1, 2, 2))
  fc <- a5(c(0.5, 0.5, 0, 1), c(1, 1, 1, 2, 2))
  # errors 0.5, 0, -1, 0.75
  m <- convlstm_forecast_metrics(fc, obs, metrics = c("mse", "mae", "psnr", "mse_frame", "mae_frame"))
  # "mse", "mae": means per element (4 of them); "_frame": the frame's sums
  expect_equal(m$overall[["mse"]], (0.25 + 0 + 1 + 0.5625) / 4, tolerance = 1e-15)
  expect_equal(m$overall[["mae"]], (0.5 + 0 + 1 + 0.75) / 4, tolerance = 1e-15)
  expect_equal(m$overall[["mse_frame"]], 0.25 + 0 + 1 + 0.5625, tolerance = 1e-15)
  expect_equal(m$overall[["mae_frame"]], 0.5 + 0 + 1 + 0.75, tolerance = 1e-15)
  expect_equal(m$overall[["psnr"]], 10 * log10(1 / (1.8125 / 4)), tolerance = 1e-14)
  # data_range 2: the peak is 2
  m2 <- convlstm_forecast_metrics(fc, obs, metrics = "psnr", data_range = 2)
  expect_equal(m2$overall[["psnr"]], 10 * log10(4 / (1.8125 / 4)), tolerance = 1e-14)
  # two channels: their pixels together make the frame (8 pixels)
  obs2 <- a5(c(0, 0.5, 1, 0.25, 0, 0, 0, 0), c(1, 1, 2, 2, 2))
  fc2 <- a5(c(0.5, 0.5, 0, 1, 0, 0, 0, 2), c(1, 1, 2, 2, 2))
  m3 <- convlstm_forecast_metrics(fc2, obs2, metrics = c("mse", "psnr", "mse_frame"))
  expect_equal(m3$overall[["mse"]], (1.8125 + 4) / 8, tolerance = 1e-15)
  expect_equal(m3$overall[["mse_frame"]], 1.8125 + 4, tolerance = 1e-15)
  expect_equal(m3$overall[["psnr"]], 10 * log10(1 / (5.8125 / 8)), tolerance = 1e-14)
})

# SSIM of one window of pixels x, y (vectors), Wang et al.'s formula with
# the sample (co)variances, as written in the documentation.
ssim_window_ref <- function(x, y, L = 1) {
  N <- length(x)
  ux <- mean(x)
  uy <- mean(y)
  vx <- sum((x - ux)^2) / (N - 1)
  vy <- sum((y - uy)^2) / (N - 1)
  vxy <- sum((x - ux) * (y - uy)) / (N - 1)
  c1 <- (0.01 * L)^2
  c2 <- (0.03 * L)^2
  ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux^2 + uy^2 + c1) * (vx + vy + c2))
}

test_that("SSIM of 3 x 3 and 3 x 4 frames with a 3 x 3 window, by formula", {
  x <- matrix(c(0.1, 0.9, 0.3, 0.4, 0.2, 0.8, 0.7, 0.5, 0.6), 3, 3)
  y <- matrix(c(0.2, 0.7, 0.3, 0.5, 0.1, 0.9, 0.6, 0.6, 0.4), 3, 3)
  m <- convlstm_forecast_metrics(a5(x, c(1, 1, 1, 3, 3)), a5(y, c(1, 1, 1, 3, 3)), metrics = "ssim",
                        ssim_window = 3)
  expect_equal(m$overall[["ssim"]], ssim_window_ref(as.vector(x), as.vector(y)), tolerance = 1e-12)
  # data_range 2 changes the constants only
  m2 <- convlstm_forecast_metrics(a5(x, c(1, 1, 1, 3, 3)), a5(y, c(1, 1, 1, 3, 3)), metrics = "ssim",
                         ssim_window = 3, data_range = 2)
  expect_equal(m2$overall[["ssim"]], ssim_window_ref(as.vector(x), as.vector(y), 2),
               tolerance = 1e-12)
  # a 3 x 4 frame: two windows (columns 1-3 and 2-4), their mean
  x4 <- cbind(x, c(0.9, 0, 0.2))
  y4 <- cbind(y, c(0.1, 0.3, 0.3))
  want <- mean(c(ssim_window_ref(as.vector(x4[, 1:3]), as.vector(y4[, 1:3])),
                 ssim_window_ref(as.vector(x4[, 2:4]), as.vector(y4[, 2:4]))))
  m4 <- convlstm_forecast_metrics(a5(x4, c(1, 1, 1, 3, 4)), a5(y4, c(1, 1, 1, 3, 4)), metrics = "ssim",
                         ssim_window = 3)
  expect_equal(m4$overall[["ssim"]], want, tolerance = 1e-12)
  # two channels: the mean of the channels' SSIM
  xc <- array(c(x, t(x)), c(1, 1, 2, 3, 3))
  yc <- array(c(y, y), c(1, 1, 2, 3, 3))
  want_c <- mean(c(ssim_window_ref(as.vector(x), as.vector(y)),
                   ssim_window_ref(as.vector(t(x)), as.vector(y))))
  expect_equal(convlstm_forecast_metrics(xc, yc, metrics = "ssim", ssim_window = 3)$overall[["ssim"]],
               want_c, tolerance = 1e-12)
  # identical frames: 1
  expect_equal(convlstm_forecast_metrics(a5(x, c(1, 1, 1, 3, 3)), a5(x, c(1, 1, 1, 3, 3)),
                                metrics = "ssim", ssim_window = 3)$overall[["ssim"]], 1,
               tolerance = 1e-14)
})

test_that("the cross-entropy clips forecasts of exactly 0 and 1 to [1e-7, 1 - 1e-7]: finite", {
  # one frame of four pixels: every corner of the clip
  obs <- a5(c(1, 0, 1, 0), c(1, 1, 1, 2, 2))
  fc <- a5(c(1, 0, 0, 1), c(1, 1, 1, 2, 2))
  m <- convlstm_forecast_metrics(fc, obs, metrics = "cross_entropy")
  lo <- 1e-7
  hi <- 1 - 1e-7
  want <- -log(hi) - log(1 - lo) - log(lo) - log(1 - hi)
  expect_true(is.finite(m$overall[["cross_entropy"]]))
  expect_equal(m$overall[["cross_entropy"]], want, tolerance = 1e-14)
  # right and sure: -log(1 - 1e-7) per pixel, about 1e-7, not 0
  right <- convlstm_forecast_metrics(obs, obs, metrics = "cross_entropy")$overall[["cross_entropy"]]
  expect_equal(right, -4 * log(1 - 1e-7), tolerance = 1e-12)
  # within the clip, values are used as they are: 1e-7 itself and 0.3
  fc3 <- a5(c(1e-7, 0.3, 0.3, 1 - 1e-7), c(1, 1, 1, 2, 2))
  obs3 <- a5(c(1, 0.5, 0, 1), c(1, 1, 1, 2, 2))
  want3 <- -(log(1e-7) + 0.5 * log(0.3) + 0.5 * log(0.7) + log(0.7) + log(1 - 1e-7))
  expect_equal(convlstm_forecast_metrics(fc3, obs3, metrics = "cross_entropy")$overall[["cross_entropy"]],
               want3, tolerance = 1e-13)
  # observed exactly 0 and 1 are accepted (above); just outside [0, 1] refused
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs + 1e-9, metrics = "cross_entropy"),
                        regexp = "`observed`")
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs - 1e-9, metrics = "cross_entropy"),
                        regexp = "`observed`")
})

test_that("an event is a value at least the threshold: values exactly at it count, on both sides", {
  # one sequence, two frames of 1 x 4 pixels; threshold 0.5
  obs <- a5(0, c(1, 2, 1, 1, 4))
  fc <- obs
  obs[1, 1, 1, 1, ] <- c(0.5, 0.5, 0.4999, 0.4999)
  fc[1, 1, 1, 1, ] <- c(0.5, 0.4999, 0.5, 0.4999) # H1 M1 F1 N1
  obs[1, 2, 1, 1, ] <- c(0.7, 0.5, 0.5, 0)
  fc[1, 2, 1, 1, ] <- c(0.5, 0.5, 0.2, 0.5)       # H2 M1 F1 N0
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mae", thresholds = 0.5)
  tab <- m$contingency
  expect_equal(tab$frame, c(1L, 2L, NA))
  expect_equal(tab$hits, c(1, 2, 3))
  expect_equal(tab$misses, c(1, 1, 2))
  expect_equal(tab$false_alarms, c(1, 1, 2))
  expect_equal(tab$correct_negatives, c(1, 0, 1))
  expect_equal(m$per_frame$csi_0.5, c(1 / 3, 2 / 4))
  expect_equal(m$per_frame$pod_0.5, c(1 / 2, 2 / 3))
  expect_equal(m$per_frame$far_0.5, c(1 / 2, 1 / 3))
  expect_equal(m$overall[["csi_0.5"]], 3 / 7)
  expect_equal(m$overall[["pod_0.5"]], 3 / 5)
  expect_equal(m$overall[["far_0.5"]], 2 / 5)
  # no observed events in a frame: POD's denominator is 0, NaN
  obs0 <- obs
  obs0[1, 2, 1, 1, ] <- 0
  m0 <- convlstm_forecast_metrics(fc, obs0, metrics = "mae", thresholds = 0.5)
  expect_true(is.nan(m0$per_frame$pod_0.5[[2]]))
  expect_equal(m0$per_frame$far_0.5[[2]], 1)
})

test_that("thresholds must lie above the observed minimum and at most its maximum", {
  obs <- a5(c(0.1, 0.4, 0.9, 0.6), c(1, 1, 1, 2, 2))
  fc <- a5(c(0.2, 0.9, 0.9, 0.1), c(1, 1, 1, 2, 2))
  # at the maximum: accepted, one observed event (0.9), forecast 0.9 twice
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mae", thresholds = 0.9)
  expect_equal(unlist(m$contingency[2, c("hits", "misses", "false_alarms", "correct_negatives")]),
               c(hits = 1, misses = 0, false_alarms = 1, correct_negatives = 2))
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs, metrics = "mae", thresholds = 0.9 + 1e-12),
                        regexp = "`thresholds`")
  # at the minimum: refused (everything would be an event); just above: accepted
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs, metrics = "mae", thresholds = 0.1),
                        regexp = "`thresholds`")
  m2 <- convlstm_forecast_metrics(fc, obs, metrics = "mae", thresholds = 0.1 + 1e-12)
  expect_equal(unlist(m2$contingency[2, c("hits", "misses", "false_alarms", "correct_negatives")]),
               c(hits = 2, misses = 1, false_alarms = 1, correct_negatives = 0))
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs, metrics = "mae", thresholds = c(0.5, 0.5)),
                        regexp = "`thresholds`")
})

test_that("SSIM's window and data_range at their limits", {
  obs <- array(seq(0, 1, length.out = 2 * 5 * 5), c(1, 2, 1, 5, 5))
  fc <- obs[, 2:1, , , , drop = FALSE]
  # a window of the frame's side: accepted, one window; the next odd size refused
  x <- fc[1, 1, 1, , ]
  y <- obs[1, 1, 1, , ]
  m <- convlstm_forecast_metrics(fc, obs, metrics = "ssim", ssim_window = 5)
  expect_equal(m$per_frame$ssim[[1]], ssim_window_ref(as.vector(x), as.vector(y)), tolerance = 1e-12)
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs, metrics = "ssim", ssim_window = 7),
                        regexp = "window")
  # the smallest window is 3; 1 is refused, an even size too
  expect_equal(length(convlstm_forecast_metrics(fc, obs, metrics = "ssim", ssim_window = 3)$per_frame$ssim), 2)
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs, metrics = "ssim", ssim_window = 1),
                        regexp = "`ssim_window`")
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs, metrics = "ssim", ssim_window = 4),
                        regexp = "`ssim_window`")
  # the Gaussian window is 11 x 11: an 11-pixel frame takes it, a 10-pixel one does not
  o11 <- array(seq(0, 1, length.out = 121), c(1, 1, 1, 11, 11))
  expect_true(is.finite(convlstm_forecast_metrics(o11, o11, metrics = "ssim", ssim_gaussian = TRUE)$overall[["ssim"]]))
  expect_convlstm_error(convlstm_forecast_metrics(o11[, , , 1:10, 1:10, drop = FALSE],
                                         o11[, , , 1:10, 1:10, drop = FALSE],
                                         metrics = "ssim", ssim_gaussian = TRUE), regexp = "window")
  # data_range: any positive number; 0 and below refused
  expect_true(is.finite(convlstm_forecast_metrics(fc, obs, metrics = "psnr", data_range = 1e-10)$overall[["psnr"]]))
  expect_convlstm_error(convlstm_forecast_metrics(fc, obs, metrics = "psnr", data_range = 0),
                        regexp = "`data_range`")
})
