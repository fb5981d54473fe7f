# test-fit-budget.R -- convlstm_fit(memory_budget = ) keeps what the whole
# fit holds inside the budget, measured by the operating system in a fresh
# R process (scripts/fit-budget-probe.R: the growth of VmHWM over the fit):
# the data set that data_on_device = "auto" would upload, and validation
# frames larger than the training frames (their inference arena).

run_budget_probe <- function(extra, n, batch, H, W, vH, vW, data_on_device = "auto") {
  out <- tempfile()
  on.exit(unlink(out))
  lib <- dirname(find.package("convlstm"))
  rc <- system2(file.path(R.home("bin"), "Rscript"),
                c(shQuote(test_path("scripts", "fit-budget-probe.R")), shQuote(lib), shQuote(out),
                  extra, n, batch, H, W, vH, vW, data_on_device),
                env = "OMP_NUM_THREADS=1", stdout = FALSE, stderr = FALSE)
  if (rc != 0 || !file.exists(out)) stop("fit-budget-probe.R failed (exit ", rc, ")")
  kv <- strsplit(strsplit(readLines(out), " ")[[1]], "=")
  v <- stats::setNames(lapply(kv, `[`, 2), vapply(kv, `[`, "", 1))
  v[names(v) != "data_on_device"] <- lapply(v[names(v) != "data_on_device"], as.numeric)
  v
}

# growth of the high-water mark within the budget plus what R allocated
# itself, 1 % + 2 MiB (the bound of test-memory-measured.R)
expect_within_budget <- function(p, label) {
  bound <- (p$budget + p$r_bytes) * 1.01 + 2 * 2^20
  expect_lte(p$growth, bound,
             label = sprintf("%s: VmHWM growth %.1f MiB (budget %.1f MiB, R's arrays %.1f MiB)",
                             label, p$growth / 2^20, p$budget / 2^20, p$r_bytes / 2^20))
}

test_that("validation frames larger than the training frames stay in the budget", {
  skip_without_hwm_reset()
  # the probe reads the advisor's stored rates; R CMD check stores none
  # (?convlstm_memory_advise), so the fit would calibrate inside the measured window
  skip_if(nzchar(Sys.getenv("_R_CHECK_PACKAGE_NAME_")),
          "R CMD check: the advisor's rates are not stored (make test runs this)")
  # training 8x8, validation 96x96: a validation forward of the training
  # batch plans far more than the whole budget
  p <- run_budget_probe(extra = 6 * 2^20, n = 8, batch = 8, H = 8, W = 8, vH = 96, vW = 96)
  expect_gt(p$val_all, 2 * p$budget) # the case needs the budget to act
  expect_within_budget(p, "validation 96x96")
})

test_that("data_on_device = \"auto\" uploads only a data set that fits the budget", {
  skip_without_hwm_reset()
  # 512 samples of 32x32 (10 MiB as float32) beside a step at batch 8 with
  # 3 MiB to spare: the data set must stay in R. R's own copies of the
  # arrays (doubles, twice the data set) are the same in a fit with
  # data_on_device = FALSE, so the two fresh processes' growths differ by
  # what the model uploaded.
  args <- list(n = 512, batch = 8, H = 32, W = 32, vH = 32, vW = 32)
  auto <- do.call(run_budget_probe, c(list(extra = 3 * 2^20), args))
  kept <- do.call(run_budget_probe, c(list(extra = 3 * 2^20, data_on_device = FALSE), args))
  expect_identical(auto$data_on_device, "FALSE")
  expect_lte(auto$growth - kept$growth, 2 * 2^20,
             label = sprintf(paste("VmHWM growth with \"auto\" %.1f MiB, with FALSE %.1f MiB",
                                   "(budget %.1f MiB)"),
                             auto$growth / 2^20, kept$growth / 2^20, auto$budget / 2^20))
  # with room for it, it is uploaded: the control that the pair sees it
  room <- do.call(run_budget_probe, c(list(extra = 16 * 2^20), args))
  expect_identical(room$data_on_device, "TRUE")
  expect_gt(room$growth - kept$growth, 8 * 2^20)
})
