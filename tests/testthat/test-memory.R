# test-memory.R -- convlstm_memory_stats(), convlstm_memory_summary(), convlstm_reset_peak_memory_stats(),
# convlstm_empty_cache() and the memory limit (convlstm(memory_limit =), convlstm_set_memory_limit()),
# with the out-of-memory error users know. Tiny shapes: the file runs in well under a
# second.

stats_model <- function(...) convlstm(2, c(3, 2), 3, device = "cpu", threads = 1, ...)
stats_x <- function(B = 2, T = 3, H = 5, W = 4) array(stats::runif(B * T * 2 * H * W), c(B, T, 2, H, W))
stats_y <- function(B = 2, H = 5, W = 4) array(stats::runif(B * 2 * H * W), c(B, 2, H, W))

test_that("convlstm_memory_stats() has every category, totals and an as.data.frame() method", {
  set.seed(1)
  model <- stats_model()
  on.exit(convlstm_release(model))
  convlstm_train_step(model, stats_x(), stats_y(), convlstm_optimizer_adam())
  s <- convlstm_memory_stats(model)
  by <- s$by_category
  expect_equal(by$category, c("parameters", "gradients", "optimizer", "activations", "states",
                              "workspace", "data"))
  expect_true(all(by$peak >= by$current))
  expect_true(all(by$n_alloc >= by$n_free))
  expect_equal(s$allocated, sum(by$current))
  # the model's own buffers plus the step arena, each step buffer at an aligned offset
  est <- convlstm_memory_estimate(model, 2, 3, 5, 4)
  expect_equal(s$reserved, est$bytes[est$category == "reserved"])
  expect_gt(s$reserved, s$allocated)
  plan <- attr(est, "plan")
  in_arena <- !is.na(plan$offset)
  expect_equal(plan$offset[in_arena] %% 256, rep(0, sum(in_arena)))
  expect_true(all(diff(plan$offset[in_arena]) >= plan$bytes[in_arena][-sum(in_arena)]))
  expect_gte(s$device_total, s$device_free)
  df <- as.data.frame(s)
  expect_s3_class(df, "data.frame")
  expect_equal(df$peak, by$peak)
  expect_equal(attr(df, "reserved"), s$reserved)
  expect_equal(attr(df, "device_total"), s$device_total)
})

test_that("convlstm_memory_summary() prints a table of every category and returns it", {
  set.seed(1)
  model <- stats_model()
  on.exit(convlstm_release(model))
  convlstm_train_step(model, stats_x(), stats_y(), convlstm_optimizer_adam())
  out <- capture.output(text <- convlstm_memory_summary(model))
  expect_type(text, "character")
  expect_match(text, "convlstm memory summary, device cpu")
  for (cat_name in c("parameters", "gradients", "optimizer", "activations", "workspace",
                     "data", "Allocated memory", "Reserved memory", "Memory limit",
                     "Device free / total")) {
    expect_true(any(grepl(cat_name, out, fixed = TRUE)), info = cat_name)
  }
  expect_true(any(grepl("| parameters +| +3.59 KiB | +3.59 KiB | +1 | +0 |", out)))
  # every line has the same width, as in torch's summary
  expect_equal(length(unique(nchar(out))), 1L)
})

test_that("convlstm_reset_peak_memory_stats() restarts the peaks; convlstm_empty_cache() frees step buffers", {
  set.seed(1)
  model <- stats_model()
  on.exit(convlstm_release(model))
  opt <- convlstm_optimizer_adam()
  convlstm_train_step(model, stats_x(B = 4, H = 8, W = 8), stats_y(B = 4, H = 8, W = 8), opt)
  big <- convlstm_memory_stats(model)$peak_allocated
  expect_invisible(convlstm_empty_cache(model))
  s <- convlstm_memory_stats(model)
  by <- stats::setNames(s$by_category$current, s$by_category$category)
  expect_equal(unname(by[c("activations", "states", "workspace", "data")]), c(0, 0, 0, 0))
  expect_equal(by[["parameters"]], 920 * 4)
  expect_equal(by[["optimizer"]], 2 * 920 * 4)
  expect_equal(s$peak_allocated, big)
  expect_invisible(convlstm_reset_peak_memory_stats(model))
  s <- convlstm_memory_stats(model)
  expect_equal(s$by_category$peak, s$by_category$current)
  expect_equal(s$peak_allocated, s$allocated)
  convlstm_train_step(model, stats_x(), stats_y(), opt)
  expect_lt(convlstm_memory_stats(model)$peak_allocated, big)
})

test_that("convlstm_set_memory_limit() takes bytes, sizes with units and NULL", {
  model <- stats_model()
  on.exit(convlstm_release(model))
  expect_invisible(convlstm_set_memory_limit(model, "512 MiB"))
  expect_equal(convlstm_memory_stats(model)$limit, 512 * 2^20)
  expect_equal(model$memory_limit, 512 * 2^20)
  expect_equal(convlstm_memory_stats(model)$device_total, 512 * 2^20)
  convlstm_set_memory_limit(model, "2 GiB")
  expect_equal(convlstm_memory_stats(model)$limit, 2 * 2^30)
  convlstm_set_memory_limit(model, "1.5GB")
  expect_equal(convlstm_memory_stats(model)$limit, 1.5e9)
  convlstm_set_memory_limit(model, 123456)
  expect_equal(convlstm_memory_stats(model)$limit, 123456)
  convlstm_set_memory_limit(model, NULL)
  expect_equal(convlstm_memory_stats(model)$limit, 0)
  expect_convlstm_error(convlstm_set_memory_limit(model, "lots"), regexp = "`bytes`")
  expect_convlstm_error(convlstm_set_memory_limit(model, -5), regexp = "`bytes`")
  expect_convlstm_error(convlstm_set_memory_limit(function(x) x, 10), regexp = "`model`")
})

test_that("over the limit: an oom error in torch's form, and the model stays usable", {
  set.seed(1)
  model <- stats_model(memory_limit = "64 KiB")
  on.exit(convlstm_release(model))
  x <- stats_x(B = 16, H = 16, W = 16)
  y <- stats_y(B = 16, H = 16, W = 16)
  err <- tryCatch(convlstm_train_step(model, x, y, convlstm_optimizer_adam()), error = identity)
  expect_s3_class(err, "convlstm_error_oom")
  expect_match(conditionMessage(err), paste0(
    "^out of memory: tried to allocate [0-9.]+ [KMG]iB \\(device cpu; 64.00 KiB total capacity; ",
    "[0-9.]+ (bytes|KiB) already allocated; [0-9.]+ (bytes|KiB) free; [0-9.]+ (bytes|KiB) reserved\\)$"
  ))
  expect_lte(convlstm_memory_stats(model)$reserved, 64 * 1024)
  expect_true(is.finite(convlstm_train_step(model, stats_x(), stats_y(), convlstm_optimizer_adam())))
  # raising the limit lets the large batch train
  convlstm_set_memory_limit(model, "64 MiB")
  expect_true(is.finite(convlstm_train_step(model, x, y, convlstm_optimizer_adam())))
})

test_that("convlstm_memory_stats() reports the process's resident memory as /proc/self/status says, beside the plan", {
  m <- api_model()
  on.exit(convlstm_release(m))
  convlstm_train_step(m, api_x(), api_y(), convlstm_optimizer_adam())
  s <- convlstm_memory_stats(m)
  expect_true(all(c("process_rss", "process_peak", "device_used", "device_used_change",
                    "measured_note") %in% names(s)))
  expect_true(is.na(s$device_used)) # the CPU's "device" is the host: process_rss measures it
  expect_true(is.na(s$device_used_change))
  text <- paste(capture.output(convlstm_memory_summary(m)), collapse = "\n")
  expect_match(text, "Planned vs measured")
  skip_if_not(file.exists("/proc/self/status"), "no /proc/self/status")
  expect_identical(s$measured_note, "")
  kb <- function(key) {
    line <- grep(paste0("^", key, ":"), readLines("/proc/self/status"), value = TRUE)
    as.numeric(sub("^[^0-9]*([0-9]+) kB.*$", "\\1", line)) * 1024
  }
  # read a moment apart: equal up to what R allocated in between
  expect_lt(abs(s$process_rss - kb("VmRSS")), 2^20)
  expect_gte(s$process_peak, s$process_rss)
  expect_lte(s$process_peak, kb("VmHWM"))
})

test_that("convlstm_memory_stats()$cuda_graphs: the CPU records no graph, even when graphs are asked for", {
  old_opts <- options(convlstm.cuda_graphs = TRUE)
  on.exit(options(old_opts))
  before <- Sys.getenv("CONVLSTM_CUDA_GRAPHS", unset = NA)
  m <- api_model()
  on.exit(convlstm_release(m), add = TRUE)
  # the option holds for the creation only: the environment is as it was
  expect_identical(Sys.getenv("CONVLSTM_CUDA_GRAPHS", unset = NA), before)
  for (i in 1:3) convlstm_train_step(m, api_x(), api_y(), convlstm_optimizer_adam())
  g <- convlstm_memory_stats(m)$cuda_graphs
  expect_identical(names(g), c("asked", "on", "captured", "replayed", "plain", "held", "bytes",
                               "off"))
  expect_false(g$asked) # the CPU backend has no graphs: every step is launched
  expect_identical(c(g$captured, g$replayed, g$bytes), c(0, 0, 0))
})
