# forecast_metrics(): the column labels of thresholds that agree to 7
# digits.

test_that("thresholds equal to 7 digits get distinct, exact labels; others keep 7 digits", {
  # 1 x 4 pixels; at 0.5 observed events at 1, 2, 4 and forecast at 1, 3:
  # H 1 M 2 F 1; at 0.50000001 observed at 2, 4, forecast at 3: H 0 M 2 F 1
  obs <- array(c(0.5, 0.50000001, 0, 1), c(1, 1, 1, 1, 4))
  fc <- array(c(0.5, 0, 0.50000001, 0), c(1, 1, 1, 1, 4))
  m <- forecast_metrics(fc, obs, metrics = "mse", thresholds = c(0.5, 0.50000001))
  expect_identical(names(m$per_frame),
                   c("frame", "mse", "csi_0.5", "pod_0.5", "far_0.5", "csi_0.50000001",
                     "pod_0.50000001", "far_0.50000001"))
  expect_identical(m$overall[["csi_0.5"]], 1 / 4)
  expect_identical(m$overall[["pod_0.5"]], 1 / 3)
  expect_identical(m$overall[["csi_0.50000001"]], 0)
  expect_identical(m$overall[["far_0.50000001"]], 1)
  # the far side: 0.3 and 0.1 + 0.2 differ only in the 17th digit
  obs2 <- array(c(0.1 + 0.2, 0.3, 0, 1), c(1, 1, 1, 1, 4))
  m2 <- forecast_metrics(obs2, obs2, metrics = "mse", thresholds = c(0.3, 0.1 + 0.2))
  expect_identical(grep("^csi", names(m2$overall), value = TRUE),
                   c("csi_0.3", "csi_0.30000000000000004"))
  expect_identical(m2$contingency$hits, c(3, 3, 2, 2)) # 0.3 <= 0.1 + 0.2: both events at 0.3
  # thresholds that 7 digits tell apart keep the short labels
  m3 <- forecast_metrics(obs2, obs2, metrics = "mse", thresholds = c(0.1, 0.3))
  expect_identical(grep("^csi", names(m3$overall), value = TRUE), c("csi_0.1", "csi_0.3"))
  # the same threshold twice is refused
  expect_convlstm_error(forecast_metrics(obs2, obs2, metrics = "mse", thresholds = c(0.5, 0.5)),
                        status = "invalid", regexp = "`thresholds`")
})
