# test-advise-stored.R -- convlstm_memory_advise()'s ranking is the same in every
# process on one machine (its rates are measured once and stored), and on
# the CPU it never ranks a half type ahead of float32: each checked in
# fresh R processes (scripts/advise-probe.R) sharing one cache folder.

run_advise_probe <- function(cache, threads) {
  out <- tempfile(fileext = ".rds")
  on.exit(unlink(out))
  lib <- dirname(find.package("convlstm"))
  rc <- system2(file.path(R.home("bin"), "Rscript"),
                c(shQuote(test_path("scripts", "advise-probe.R")), shQuote(lib), shQuote(out),
                  threads),
                # R CMD check's marker off: under it nothing is stored
                env = c(paste0("R_USER_CACHE_DIR=", cache), "OMP_NUM_THREADS=2",
                        "_R_CHECK_PACKAGE_NAME_="),
                stdout = FALSE, stderr = FALSE)
  if (rc != 0 || !file.exists(out)) stop("advise-probe.R failed (exit ", rc, ")")
  readRDS(out)
}

test_that("two fresh processes give the same advice and pick; the rates are stored once", {
  skip_on_cran()
  cache <- tempfile("cache")
  dir.create(cache)
  on.exit(unlink(cache, recursive = TRUE))
  for (threads in 1:2) {
    a <- run_advise_probe(cache, threads)
    stored <- file.path(cache, "R", "convlstm", "advise-rates.rds")
    expect_true(file.exists(stored))
    b <- run_advise_probe(cache, threads)
    # the same doubles, not nearly: a rate timed in each process differs in
    # its last digits at least
    expect_identical(b$advice, a$advice)
    expect_identical(b$rates, a$rates)
    expect_identical(b$dtype, a$dtype)
    expect_identical(b$loss, a$loss)
    expect_length(readRDS(stored), threads) # one key per thread count
  }
})

test_that("on the CPU no half type is predicted faster than float32; a budget it fits keeps it", {
  skip_on_cran()
  cache <- tempfile("cache")
  dir.create(cache)
  on.exit(unlink(cache, recursive = TRUE))
  for (threads in 1:2) {
    p <- run_advise_probe(cache, threads)
    a <- p$advice
    expect_true(all(p$rates$half >= 1))
    opts <- c("checkpoint", "recompute_gates", "accumulation_steps", "tbptt")
    key <- do.call(paste, a[opts])
    f32 <- stats::setNames(a$time_ratio[a$dtype == "float32"], key[a$dtype == "float32"])
    half <- a$dtype != "float32"
    expect_true(all(a$time_ratio[half] >= f32[key[half]]))
    expect_true(all(a$fits))
    # the plain float32 step fits, so it is the pick, and the fit kept float32
    expect_identical(a$dtype[[1]], "float32")
    expect_equal(unlist(a[1, opts], use.names = FALSE), c(0, 0, 1, 0))
    expect_identical(a$time_ratio[[1]], 1)
    expect_identical(p$dtype, "float32")
  }
})

# Issue #27: the first calibration on a machine held its five calibration
# models at once, 47 MiB of the process's high-water mark outside any
# budget. Now one model is alive at a time: the calibration holds at most
# its largest step's plan and its data (calibration_bytes(), ?convlstm_memory_advise),
# measured from outside in a fresh process with an empty cache folder.
test_that("the first calibration grows the high-water mark by at most its largest step and its data", {
  skip_without_hwm_reset()
  cache <- tempfile("cache")
  dir.create(cache)
  out <- tempfile(fileext = ".txt")
  on.exit(unlink(c(cache, out), recursive = TRUE))
  rc <- system2(file.path(R.home("bin"), "Rscript"),
                c(shQuote(test_path("scripts", "calibration-probe.R")),
                  shQuote(dirname(find.package("convlstm"))), shQuote(out)),
                env = c(paste0("R_USER_CACHE_DIR=", cache), "_R_CHECK_PACKAGE_NAME_=",
                        "OMP_NUM_THREADS=1", "MALLOC_MMAP_THRESHOLD_=65536"),
                stdout = FALSE, stderr = FALSE)
  expect_identical(rc, 0L)
  kv <- strsplit(strsplit(readLines(out), " ")[[1]], "=")
  v <- stats::setNames(as.numeric(vapply(kv, `[`, "", 2)), vapply(kv, `[`, "", 1))
  expect_identical(v[["stored"]], 1) # the window did calibrate (and stored the rates)
  expect_lte(v[["growth"]], 1.01 * v[["bound"]] + 2 * 2^20,
             label = sprintf("first calibration: VmHWM growth %.1f MiB (bound %.1f MiB)",
                             v[["growth"]] / 2^20, v[["bound"]] / 2^20))
  message(sprintf("first calibration: VmHWM growth %.1f MiB, bound %.1f MiB",
                  v[["growth"]] / 2^20, v[["bound"]] / 2^20))
})
