# convlstm_forecast_metrics(scales = ): the fractions skill score (Roberts and Lean
# 2008) against pysteps' formula computed independently in numpy
# (tests/testthat/fixtures/fss, made by tools/make_fixtures_fss.py), against
# tiny cases worked by hand, and the limits of `scales`; and the column
# labels of thresholds that agree to 7 digits.

read_fss_fixture <- function() {
  fields <- utils::read.csv(test_path("fixtures", "fss", "fields.csv"),
                            stringsAsFactors = FALSE)
  scores <- utils::read.csv(test_path("fixtures", "fss", "fss.csv"), stringsAsFactors = FALSE,
                            colClasses = c("character", "numeric", "integer", "character", "numeric"))
  arrays <- list()
  for (case in unique(fields$case)) {
    for (which in c("forecast", "observed")) {
      f <- fields[fields$case == case & fields$array == which, ]
      idx <- as.matrix(f[, c("seq", "frame", "channel", "row", "col")])
      a <- array(NA_real_, apply(idx, 2, max))
      a[idx] <- f$value
      arrays[[case]][[which]] <- a
    }
  }
  list(arrays = arrays, scores = scores)
}

test_that("FSS is pysteps' fss_accum/fss_compute on the fixture's fields, per frame and overall", {
  fx <- read_fss_fixture()
  seen <- 0
  for (case in names(fx$arrays)) {
    a <- fx$arrays[[case]]
    expect_false(anyNA(a$forecast))
    sc <- fx$scores[fx$scores$case == case, ]
    thresholds <- unique(sc$threshold)
    scales <- unique(sc$scale)
    m <- convlstm_forecast_metrics(a$forecast, a$observed, metrics = "mse", thresholds = thresholds,
                          scales = scales)
    for (t in thresholds) {
      for (s in scales) {
        name <- paste0("fss_", format(t), "_scale", s)
        want <- sc[sc$threshold == t & sc$scale == s, ]
        expect_equal(m$per_frame[[name]], want$fss[want$frame != "all"], tolerance = 1e-12,
                     label = paste(case, name, "per frame"))
        expect_equal(m$overall[[name]], want$fss[want$frame == "all"], tolerance = 1e-12,
                     label = paste(case, name, "overall"))
        seen <- seen + 1
      }
    }
  }
  expect_equal(seen, 2 * 7 + 2 * 4) # every (threshold, scale) of the fixture compared
})

test_that("FSS of one event displaced by one cell in a 3 x 3 field, worked by hand", {
  obs <- array(0, c(1, 1, 1, 3, 3))
  fc <- obs
  obs[1, 1, 1, 2, 2] <- 1 # the centre
  fc[1, 1, 1, 2, 3] <- 1  # one cell to the right
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = 1, scales = c(1, 2, 3))
  # scale 1: no overlap, sum (Pf - Po)^2 = 2 = sum Pf^2 + sum Po^2
  expect_identical(m$overall[["fss_1_scale1"]], 0)
  # scale 3: Po = 1/9 at all 9 cells; Pf = 1/9 at the 6 cells of columns 2-3;
  # sum (Pf - Po)^2 = 3/81, sum Pf^2 + sum Po^2 = 15/81: 1 - 3/15
  expect_equal(m$overall[["fss_1_scale3"]], 0.8, tolerance = 1e-15)
  # scale 2: scipy's even window is rows i-1..i, columns j-1..j; Po = 1/4 at
  # (2,2), (2,3), (3,2), (3,3); Pf = 1/4 at (2,3), (3,3): 1 - (2/16) / (6/16)
  # (the window i..i+1 would give 1 - 4/8 = 0.5)
  expect_equal(m$overall[["fss_1_scale2"]], 2 / 3, tolerance = 1e-15)
  expect_equal(m$per_frame$fss_1_scale3, 0.8, tolerance = 1e-15)
  # values equal to the threshold are events (>=, not >): with `>` no event
  # would remain and the score would be NaN
  expect_false(is.nan(m$overall[["fss_1_scale1"]]))
})

test_that("a scale as large as the frame or larger sees the totals only", {
  # 3 x 3: observed 1 event, forecast 2; from scale 5 on every square covers
  # the whole frame: Pf = 2/s^2, Po = 1/s^2 everywhere: 1 - 1/(4 + 1)
  obs <- array(0, c(1, 1, 1, 3, 3))
  fc <- obs
  obs[1, 1, 1, 1, 1] <- 1
  fc[1, 1, 1, 3, 3] <- 1
  fc[1, 1, 1, 3, 2] <- 1
  big <- .Machine$integer.max
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = 1, scales = c(5, 101, big))
  expect_equal(m$overall[["fss_1_scale5"]], 0.8, tolerance = 1e-15)
  expect_equal(m$overall[["fss_1_scale101"]], 0.8, tolerance = 1e-15)
  expect_equal(m$overall[[paste0("fss_1_scale", big)]], 0.8, tolerance = 1e-12)
})

test_that("a perfect forecast scores 1; a frame without events NaN, the others pooled", {
  set.seed(35)
  obs <- array(round(runif(2 * 3 * 2 * 6 * 5) * 4) / 2, c(2, 3, 2, 6, 5))
  m <- convlstm_forecast_metrics(obs, obs, metrics = "mse", thresholds = c(0.5, 1.5), scales = c(1, 2, 3, 8))
  fss <- grep("^fss_", names(m$overall), value = TRUE)
  expect_length(fss, 8)
  expect_identical(unname(m$overall[fss]), rep(1, 8))
  expect_identical(unlist(m$per_frame[fss], use.names = FALSE), rep(1, 8 * 3))
  # frame 2 has no event in either field: 0 / 0, NaN; frame 1 and overall
  # are the frame-1 sums only (one event each, 1 cell apart)
  obs <- array(0, c(1, 2, 1, 1, 4))
  fc <- obs
  obs[1, 1, 1, 1, 1] <- 2
  fc[1, 1, 1, 1, 2] <- 3
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = 2, scales = c(1, 3))
  expect_true(is.nan(m$per_frame$fss_2_scale1[[2]]))
  expect_true(is.nan(m$per_frame$fss_2_scale3[[2]]))
  expect_identical(m$per_frame$fss_2_scale1[[1]], 0)
  # scale 3 on 1 x 4: Po = (1, 1, 0, 0)/9, Pf = (1, 1, 1, 0)/9: 1 - 1/5
  expect_equal(m$per_frame$fss_2_scale3[[1]], 0.8, tolerance = 1e-15)
  expect_equal(m$overall[["fss_2_scale3"]], 0.8, tolerance = 1e-15)
})

test_that("`scales` is checked at its edges: classed errors naming it", {
  obs <- array(0, c(1, 1, 1, 3, 3))
  obs[1, 1, 1, 2, 2] <- 1
  ok <- convlstm_forecast_metrics(obs, obs, metrics = "mse", thresholds = 1, scales = 1)
  expect_identical(ok$overall[["fss_1_scale1"]], 1)
  expect_identical(convlstm_forecast_metrics(obs, obs, metrics = "mse", thresholds = 1,
                                    scales = 2L)$overall[["fss_1_scale2"]], 1)
  for (bad in list(0, -1, 1.5, NA, c(3, 3), numeric(), "3", Inf, .Machine$integer.max + 1)) {
    expect_convlstm_error(convlstm_forecast_metrics(obs, obs, metrics = "mse", thresholds = 1, scales = bad),
                          status = "invalid", regexp = "`scales`")
  }
  expect_convlstm_error(convlstm_forecast_metrics(obs, obs, metrics = "mse", scales = 3),
                        status = "invalid", regexp = "`scales` needs `thresholds`")
  # without scales, no FSS columns
  expect_false(any(startsWith(names(convlstm_forecast_metrics(obs, obs, metrics = "mse",
                                                     thresholds = 1)$overall), "fss")))
})

test_that("thresholds equal to 7 digits get distinct, exact labels; others keep 7 digits", {
  # 1 x 4 pixels; at 0.5 observed events at 1, 2, 4 and forecast at 1, 3:
  # H 1 M 2 F 1; at 0.50000001 observed at 2, 4, forecast at 3: H 0 M 2 F 1
  obs <- array(c(0.5, 0.50000001, 0, 1), c(1, 1, 1, 1, 4))
  fc <- array(c(0.5, 0, 0.50000001, 0), c(1, 1, 1, 1, 4))
  m <- convlstm_forecast_metrics(fc, obs, metrics = "mse", thresholds = c(0.5, 0.50000001), scales = 1)
  expect_identical(names(m$per_frame),
                   c("frame", "mse", "csi_0.5", "pod_0.5", "far_0.5", "csi_0.50000001",
                     "pod_0.50000001", "far_0.50000001", "fss_0.5_scale1", "fss_0.50000001_scale1"))
  expect_identical(m$overall[["csi_0.5"]], 1 / 4)
  expect_identical(m$overall[["pod_0.5"]], 1 / 3)
  expect_identical(m$overall[["csi_0.50000001"]], 0)
  expect_identical(m$overall[["far_0.50000001"]], 1)
  # scale 1: FSS = 2H / (2H + M + F)
  expect_equal(m$overall[["fss_0.5_scale1"]], 2 / 5, tolerance = 1e-15)
  expect_identical(m$overall[["fss_0.50000001_scale1"]], 0)
  # the far side: 0.3 and 0.1 + 0.2 differ only in the 17th digit
  obs2 <- array(c(0.1 + 0.2, 0.3, 0, 1), c(1, 1, 1, 1, 4))
  m2 <- convlstm_forecast_metrics(obs2, obs2, metrics = "mse", thresholds = c(0.3, 0.1 + 0.2))
  expect_identical(grep("^csi", names(m2$overall), value = TRUE),
                   c("csi_0.3", "csi_0.30000000000000004"))
  expect_identical(m2$contingency$hits, c(3, 3, 2, 2)) # 0.3 <= 0.1 + 0.2: both events at 0.3
  # thresholds that 7 digits tell apart keep the short labels
  m3 <- convlstm_forecast_metrics(obs2, obs2, metrics = "mse", thresholds = c(0.1, 0.3))
  expect_identical(grep("^csi", names(m3$overall), value = TRUE), c("csi_0.1", "csi_0.3"))
  # the same threshold twice is refused
  expect_convlstm_error(convlstm_forecast_metrics(obs2, obs2, metrics = "mse", thresholds = c(0.5, 0.5)),
                        status = "invalid", regexp = "`thresholds`")
})
