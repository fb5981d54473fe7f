# convlstm_forecast_metrics(): SSIM and PSNR against scikit-image's values on fixed
# arrays (tests/testthat/fixtures/metrics_skimage.txt, made by
# tools/make_metrics_fixture.py), MSE, MAE and cross-entropy against sums
# written out here, CSI/POD/FAR against contingency tables counted by hand.

read_skimage_fixture <- function() {
  lines <- readLines(test_path("fixtures", "metrics_skimage.txt"))
  lines <- lines[!startsWith(lines, "#")]
  out <- list()
  for (l in lines) {
    parts <- strsplit(l, " : ", fixed = TRUE)[[1]]
    head <- strsplit(parts[[1]], " ", fixed = TRUE)[[1]]
    d <- as.integer(head[-1])
    v <- as.numeric(strsplit(parts[[2]], " ", fixed = TRUE)[[1]])
    # the file is in C order: fill the reversed shape, then reverse it back
    a <- array(v, rev(d))
    out[[head[[1]]]] <- if (length(d) > 1) aperm(a, rev(seq_along(d))) else v
  }
  out
}

test_that("SSIM is scikit-image's structural_similarity, window by window", {
  fx <- read_skimage_fixture()
  settings <- list(uniform7 = list(ssim_window = 7, ssim_gaussian = FALSE),
                   uniform5 = list(ssim_window = 5, ssim_gaussian = FALSE),
                   gaussian = list(ssim_window = 7, ssim_gaussian = TRUE))
  for (case in c("c1", "c2")) {
    fc <- fx[[paste0(case, "_forecast")]]
    obs <- fx[[paste0(case, "_observed")]]
    range <- if (case == "c1") 1 else 2
    for (s in names(settings)) {
      want <- fx[[paste0(case, "_ssim_", s)]] # [sequence, frame]
      for (i in 1:2) {
        m <- convlstm_forecast_metrics(fc[i, , , , , drop = FALSE], obs[i, , , , , drop = FALSE],
                              metrics = "ssim", data_range = range,
                              ssim_window = settings[[s]]$ssim_window,
                              ssim_gaussian = settings[[s]]$ssim_gaussian)
        expect_equal(m$per_frame$ssim, want[i, ], tolerance = 1e-12,
                     label = paste(case, s, "sequence", i))
      }
      both <- convlstm_forecast_metrics(fc, obs, metrics = "ssim", data_range = range,
                               ssim_window = settings[[s]]$ssim_window,
                               ssim_gaussian = settings[[s]]$ssim_gaussian)
      expect_equal(both$per_frame$ssim, colMeans(want), tolerance = 1e-12)
      expect_equal(both$overall[["ssim"]], mean(want), tolerance = 1e-12)
    }
  }
})

test_that("PSNR is scikit-image's peak_signal_noise_ratio averaged over sequences", {
  fx <- read_skimage_fixture()
  for (case in c("c1", "c2")) {
    range <- if (case == "c1") 1 else 2
    m <- convlstm_forecast_metrics(fx[[paste0(case, "_forecast")]], fx[[paste0(case, "_observed")]],
                          metrics = "psnr", data_range = range)
    expect_equal(m$per_frame$psnr, colMeans(fx[[paste0(case, "_psnr")]]), tolerance = 1e-12)
  }
  same <- array(0.5, c(1, 1, 1, 8, 8))
  expect_identical(convlstm_forecast_metrics(same, same, metrics = "psnr")$overall[["psnr"]], Inf)
})

test_that("MSE and MAE are means per element; mse_frame, mae_frame sums per frame", {
  obs <- array(0, c(2, 2, 1, 2, 2))
  fc <- obs
  fc[1, 1, 1, , ] <- c(1, 0, 0, 0.5)  # sequence 1, frame 1: errors 1, 0, 0, 0.5
  fc[2, 1, 1, , ] <- c(0, 0, 2, 0)    # sequence 2, frame 1: error 2
  fc[1, 2, 1, , ] <- -1               # sequence 1, frame 2: four errors of 1
  m <- convlstm_forecast_metrics(fc, obs, metrics = c("mse", "mae", "mse_frame", "mae_frame"))
  # frame 1: squared sums 1.25 and 4, absolute sums 1.5 and 2; frame 2: 4 and 0
  expect_equal(m$per_frame$mse_frame, c((1.25 + 4) / 2, (4 + 0) / 2))
  expect_equal(m$per_frame$mae_frame, c((1.5 + 2) / 2, (4 + 0) / 2))
  expect_equal(m$overall[["mse_frame"]], mean(c(2.625, 2)))
  # per element: each frame has 4, so the mean over the sequences' elements
  expect_equal(m$per_frame$mse, c(mean(c(1, 0, 0, 0.25, 0, 0, 4, 0)), mean(c(1, 1, 1, 1, 0, 0, 0, 0))))
  expect_equal(m$per_frame$mae, c(mean(c(1, 0, 0, 0.5, 0, 0, 2, 0)), mean(c(1, 1, 1, 1, 0, 0, 0, 0))))
  expect_equal(m$overall[["mse"]], mean((fc - obs)^2))
  expect_equal(m$overall[["mae"]], mean(abs(fc - obs)))
  # one frame per sequence, [n, channels, height, width], is one frame
  one <- convlstm_forecast_metrics(array(fc[, 1, , , ], c(2, 1, 2, 2)), array(obs[, 1, , , ], c(2, 1, 2, 2)),
                          metrics = c("mse", "mse_frame"))
  expect_equal(one$per_frame$mse_frame, 2.625)
  expect_equal(one$per_frame$mse, 2.625 / 4)
})

test_that("the cross-entropy is Shi et al.'s, per sequence over frames and pixels", {
  obs <- array(c(1, 0, 1, 0), c(1, 2, 1, 1, 2)) # frame 1: 1, 1; frame 2: 0, 0
  fc <- array(c(0.8, 0.1, 0.5, 0), c(1, 2, 1, 1, 2))
  m <- convlstm_forecast_metrics(fc, obs, metrics = "cross_entropy")
  f1 <- -(log(0.8) + log(0.5))
  f2 <- -(log(1 - 0.1) + log(1 - 1e-7)) # 0 is clipped to 1e-7
  expect_equal(m$per_frame$cross_entropy, c(f1, f2))
  expect_equal(m$overall[["cross_entropy"]], f1 + f2) # summed over frames
  two <- convlstm_forecast_metrics(fc[c(1, 1), , , , , drop = FALSE], obs[c(1, 1), , , , , drop = FALSE],
                          metrics = "cross_entropy")
  expect_equal(two$overall[["cross_entropy"]], f1 + f2) # a mean over sequences
  expect_error(convlstm_forecast_metrics(fc, obs + 1, metrics = "cross_entropy"), "`observed`.*\\[0, 1\\]",
               class = "convlstm_error_invalid")
})

test_that("CSI, POD and FAR come from the contingency table counted by hand", {
  # two sequences, two frames of 1 x 4 pixels; threshold 1
  obs <- array(0, c(2, 2, 1, 1, 4))
  fc <- obs
  obs[1, 1, 1, 1, ] <- c(2, 2, 0, 0); fc[1, 1, 1, 1, ] <- c(2, 0, 2, 0) # H1 M1 F1 N1
  obs[2, 1, 1, 1, ] <- c(1, 1, 1, 0); fc[2, 1, 1, 1, ] <- c(1, 1, 0, 0) # H2 M1 F0 N1
  obs[1, 2, 1, 1, ] <- c(0, 0, 0, 0); fc[1, 2, 1, 1, ] <- c(3, 0, 0, 0) # H0 M0 F1 N3
  obs[2, 2, 1, 1, ] <- c(5, 0, 0, 0); fc[2, 2, 1, 1, ] <- c(0.5, 0, 0, 0) # H0 M1 F0 N3
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = 1)
  tab <- m$contingency
  expect_equal(tab$hits, c(3, 0, 3))
  expect_equal(tab$misses, c(2, 1, 3))
  expect_equal(tab$false_alarms, c(1, 1, 2))
  expect_equal(tab$correct_negatives, c(2, 6, 8))
  expect_equal(m$per_frame$csi_1, c(3 / 6, 0 / 2))
  expect_equal(m$per_frame$pod_1, c(3 / 5, 0 / 1))
  expect_equal(m$per_frame$far_1, c(1 / 4, 1 / 1))
  expect_equal(m$overall[["csi_1"]], 3 / 8)
  expect_equal(m$overall[["pod_1"]], 3 / 6)
  expect_equal(m$overall[["far_1"]], 2 / 5)
  # a second threshold: events are values >= 2
  m2 <- convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = c(1, 2))
  expect_equal(m2$overall[["pod_2"]], 1 / 3) # observed >= 2: 3 pixels, forecast >= 2 at one
  expect_true(is.nan(convlstm_forecast_metrics(fc[, 2, , , , drop = FALSE], obs[, 2, , , , drop = FALSE],
                                      metrics = "mse", thresholds = 5)$per_frame$far_5)) # no forecast events
})

test_that("bad input is a classed error naming the argument", {
  obs <- array(runif(2 * 3 * 8 * 8), c(2, 3, 1, 8, 8))
  fc <- obs
  expect_error(convlstm_forecast_metrics(fc, obs, thresholds = 2), "`thresholds`.*range",
               class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, obs, thresholds = min(obs)), "`thresholds`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, obs, thresholds = NA), "`thresholds`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc[, 1:2, , , , drop = FALSE], obs), "`forecast`.*dimensions",
               class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, obs[, , 1, , ]), "`forecast`", class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, matrix(1, 2, 2)), "`observed`", class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, obs, metrics = "rmse"), "`metrics`", class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, obs, ssim_window = 9), "`ssim_window`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, obs, ssim_window = 4), "`ssim_window`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, obs, ssim_gaussian = TRUE), "`ssim_gaussian`",
               class = "convlstm_error_invalid")
  expect_error(convlstm_forecast_metrics(fc, obs, data_range = 0), "`data_range`",
               class = "convlstm_error_invalid")
  fc[1, 1, 1, 1, 1] <- NA
  expect_error(convlstm_forecast_metrics(fc, obs), "`forecast`", class = "convlstm_error_invalid")
})

test_that("the print method shows frames and the overall values", {
  d <- convlstm_moving_mnist(n = 2, n_frames = 4, horizon = 2, seed = 1)
  m <- convlstm_forecast_metrics(d$x, d$y, thresholds = 0.5)
  expect_s3_class(m, "convlstm_forecast_metrics")
  expect_output(print(m), "2 sequences, 2 frames")
  expect_output(print(m), "csi_0.5")
})
