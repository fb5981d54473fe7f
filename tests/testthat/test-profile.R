# test-profile.R -- convlstm_max_batch_size() and convlstm_memory_profile(): the largest batch
# the plan says fits does train under memory_limit = budget, one more sample is an
# out-of-memory error after which the model still trains; the profile measures
# what the estimate says, leaves the model and R's random stream alone, and
# prints and plots.

batch_model <- function(...) convlstm(1, c(4, 1), 3, device = "cpu", threads = 1, ...)
batch_data <- function(B, T = 3, H = 6, W = 6) {
  list(x = array(runif(B * T * H * W), c(B, T, 1, H, W)), y = array(runif(B * H * W), c(B, 1, H, W)))
}

test_that("the largest batch trains under memory_limit = budget; one more is an oom error", {
  set.seed(11)
  probe <- batch_model()
  on.exit(convlstm_release(probe))
  budget <- 150 * 1024
  b <- convlstm_max_batch_size(probe, seq_len = 3, height = 6, width = 6, budget = budget)
  expect_gt(b, 1)
  expect_lte(attr(b, "bytes"), budget)
  expect_equal(attr(b, "budget"), budget)
  reserved <- function(b) {
    est <- convlstm_memory_estimate(probe, b, 3, 6, 6)
    est$bytes[est$category == "reserved"]
  }
  expect_equal(attr(b, "bytes"), reserved(b))
  expect_gt(reserved(b + 1), budget)

  model <- batch_model(memory_limit = budget)
  on.exit(convlstm_release(model), add = TRUE)
  opt <- convlstm_optimizer_adam()
  d <- batch_data(b)
  expect_true(is.finite(convlstm_train_step(model, d$x, d$y, opt)))
  expect_lte(convlstm_memory_stats(model)$peak_reserved, budget)
  d1 <- batch_data(b + 1)
  expect_convlstm_error(convlstm_train_step(model, d1$x, d1$y, opt), status = "oom",
                        regexp = "^out of memory: tried to allocate")
  expect_true(is.finite(convlstm_train_step(model, d$x, d$y, opt)))
  expect_lte(convlstm_memory_stats(model)$reserved, budget)
})

test_that("convlstm_max_batch_size() passes step options through and takes sizes with units", {
  set.seed(12)
  probe <- batch_model()
  on.exit(convlstm_release(probe))
  plain <- convlstm_max_batch_size(probe, 20, 6, 6, budget = "1 MiB")
  ck <- convlstm_max_batch_size(probe, 20, 6, 6, budget = "1 MiB", checkpoint = 4)
  half <- convlstm_max_batch_size(probe, 20, 6, 6, budget = "1 MiB", dtype = "float16")
  expect_gt(ck, plain)
  expect_gt(half, plain)
  expect_equal(attr(plain, "budget"), 2^20)
  # the checkpointed batch trains under the limit, and one more does not
  model <- batch_model(memory_limit = "1 MiB")
  on.exit(convlstm_release(model), add = TRUE)
  d <- batch_data(ck, T = 20)
  expect_true(is.finite(convlstm_train_step(model, d$x, d$y, convlstm_optimizer_adam(), checkpoint = 4)))
  d1 <- batch_data(ck + 1, T = 20)
  expect_convlstm_error(convlstm_train_step(model, d1$x, d1$y, convlstm_optimizer_adam(), checkpoint = 4),
                        status = "oom")
  # so with the gates recomputed in backward
  rc <- convlstm_max_batch_size(probe, 20, 6, 6, budget = "1 MiB", recompute_gates = TRUE)
  expect_gt(rc, plain)
  d <- batch_data(rc, T = 20)
  expect_true(is.finite(convlstm_train_step(model, d$x, d$y, convlstm_optimizer_adam(), recompute_gates = TRUE)))
  d1 <- batch_data(rc + 1, T = 20)
  expect_convlstm_error(convlstm_train_step(model, d1$x, d1$y, convlstm_optimizer_adam(), recompute_gates = TRUE),
                        status = "oom")
  # budgets far beyond this machine are answered from the plan alone
  b16 <- convlstm_max_batch_size(probe, 10, 64, 64, budget = "16 GiB")
  b80 <- convlstm_max_batch_size(probe, 10, 64, 64, budget = "80 GiB")
  expect_gt(b80, 4 * b16)
  expect_lte(attr(b80, "bytes"), 80 * 2^30)
  # the default budget is what the model holds plus what the device has free:
  # under a memory limit (free memory of a real device moves), the limit
  convlstm_set_memory_limit(probe, "10 MiB")
  expect_equal(attr(convlstm_max_batch_size(probe, seq_len = 3, height = 6, width = 6), "budget"), 10 * 2^20)
  s <- convlstm_memory_stats(probe)
  expect_equal(s$device_free + s$reserved, 10 * 2^20)
  convlstm_set_memory_limit(probe, NULL)
  # not even one sample
  expect_equal(as.integer(convlstm_max_batch_size(probe, 3, 6, 6, budget = 100)), 0L)
  expect_convlstm_error(convlstm_max_batch_size(probe, 3, 6, 6, budget = "lots"), regexp = "`budget`")
})

test_that("convlstm_memory_profile() measures what the estimate says, per batch size", {
  set.seed(13)
  model <- batch_model()
  on.exit(convlstm_release(model))
  before <- convlstm_state_dict(model)
  seed <- .Random.seed
  prof <- convlstm_memory_profile(model, batch_sizes = c(1, 3, 2), seq_len = 3, height = 6, width = 6)
  expect_identical(.Random.seed, seed)
  expect_identical(convlstm_state_dict(model), before)
  expect_s3_class(prof, c("convlstm_memory_profile", "data.frame"))
  expect_named(prof, c("batch_size", "parameters", "gradients", "optimizer", "activations",
                       "states", "workspace", "data", "peak", "reserved", "estimate",
                       "seconds_per_step", "samples_per_second", "oom"))
  expect_equal(prof$batch_size, c(1, 3, 2))
  expect_equal(prof$peak, prof$estimate)
  # reserved adds the arena's alignment to the allocated bytes, and nothing else
  for (i in seq_len(nrow(prof))) {
    est <- convlstm_memory_estimate(model, prof$batch_size[[i]], 3, 6, 6)
    expect_equal(prof$reserved[[i]], est$bytes[est$category == "reserved"])
    expect_lt(prof$reserved[[i]] - prof$peak[[i]],
              (256 + arena_guard_bytes()) * nrow(attr(est, "plan")))
  }
  for (i in seq_len(nrow(prof))) {
    est <- convlstm_memory_estimate(model, prof$batch_size[[i]], 3, 6, 6)
    expect_equal(unlist(prof[i, est$category[1:7]]), stats::setNames(est$bytes[1:7], est$category[1:7]))
  }
  expect_true(all(prof$seconds_per_step > 0))
  expect_equal(prof$samples_per_second, prof$batch_size / prof$seconds_per_step)
  expect_false(any(prof$oom))
  expect_equal(attr(prof, "capacity"), convlstm_memory_stats(model)$device_total)
  out <- capture.output(print(prof))
  expect_match(out[[1]], "<convlstm_memory_profile> 3 batch sizes, 3 steps of 6x6")
  expect_true(any(grepl("activations", out)))
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_invisible(plot(prof))
  expect_invisible(plot(prof, log = "x", capacity = 2 * max(prof$peak)))
})

test_that("convlstm_memory_profile(steps = 0) gives the estimate per category without running", {
  model <- batch_model()
  on.exit(convlstm_release(model))
  prof <- convlstm_memory_profile(model, 1:64, 3, 6, 6, steps = 0, checkpoint = 2)
  expect_equal(nrow(prof), 64)
  expect_equal(convlstm_memory_stats(model)$peak_allocated, convlstm_memory_stats(model)$allocated)
  est <- convlstm_memory_estimate(model, 40, 3, 6, 6, checkpoint = 2, optimizer = convlstm_optimizer_adam())
  expect_equal(unlist(prof[40, est$category[1:7]]),
               stats::setNames(est$bytes[1:7], est$category[1:7]))
  expect_equal(prof$estimate[[40]], est$bytes[[8]])
  expect_true(all(is.na(prof$peak)) && all(is.na(prof$seconds_per_step)))
  out <- capture.output(print(prof))
  expect_match(out[[1]], "estimated \\(no steps run\\)")
  expect_false(any(grepl("s/step", out)))
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_invisible(plot(prof))
})

test_that("convlstm_memory_profile() records batches that run out of memory and goes on", {
  set.seed(14)
  model <- batch_model(memory_limit = "100 KiB")
  on.exit(convlstm_release(model))
  fits <- convlstm_max_batch_size(model, seq_len = 3, height = 6, width = 6)
  prof <- convlstm_memory_profile(model, c(1, fits, fits + 5), 3, 6, 6, steps = 1, checkpoint = 2)
  expect_equal(prof$oom, c(FALSE, FALSE, TRUE))
  expect_true(all(is.na(prof[3, c("activations", "peak", "seconds_per_step")])))
  expect_equal(prof$peak[1:2], prof$estimate[1:2])
  expect_gt(prof$estimate[[3]], 100 * 1024)
  expect_equal(attr(prof, "capacity"), 100 * 1024)
  expect_equal(attr(prof, "options")$checkpoint, 2)
  expect_output(print(prof), "OOM")
  rc <- convlstm_memory_profile(model, 1, 3, 6, 6, steps = 1, recompute_gates = TRUE)
  expect_equal(rc$peak, rc$estimate)
  expect_lt(rc$activations, convlstm_memory_profile(model, 1, 3, 6, 6, steps = 0)$activations)
  expect_equal(attr(rc, "options")$recompute_gates, 1L)
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_invisible(plot(prof))
  expect_convlstm_error(convlstm_memory_profile(model, 1, 3, 6, 6, dtype = "float16"),
                        regexp = "`dtype`")
})
