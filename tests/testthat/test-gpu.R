# convlstm_gpu_info() in every build, and (with a GPU only) what it reports and the
# pinned staging of host arrays on a CUDA model.

test_that("convlstm_gpu_info() answers in every build, and agrees with convlstm_gpu_available()", {
  info <- convlstm_gpu_info()
  expect_s3_class(info, "convlstm_gpu_info")
  expect_named(info, c(
    "available", "reason", "cuda_build", "device", "n_devices", "name",
    "compute_capability", "multiprocessors", "memory_free", "memory_total",
    "driver_version", "runtime_version", "cudnn_version", "cudnn_build_version"
  ))
  expect_identical(info$available, convlstm_gpu_available())
  expect_type(info$reason, "character")
  expect_type(info$cuda_build, "logical")
  expect_type(info$memory_total, "double")
  if (!info$available) {
    expect_true(nzchar(info$reason))
    expect_true(is.na(info$name))
    expect_true(is.na(info$memory_total))
  }
  if (!info$cuda_build) {
    expect_false(info$available)
    expect_match(info$reason, "no CUDA backend")
    expect_true(all(is.na(unlist(info[c("driver_version", "cudnn_version")]))))
  } else {
    # what this build was compiled against is known without any device
    expect_match(info$cudnn_build_version, "^[0-9]+\\.[0-9]+\\.[0-9]+$")
    expect_match(info$runtime_version, "^[0-9]+\\.[0-9]+$")
  }
  out <- capture.output(print(info))
  expect_true(length(out) >= 1)
  expect_match(out[[1]], if (info$available) "^GPU " else "^no usable GPU")
})

test_that("convlstm_gpu_info() describes a usable GPU", {
  skip_if_not(convlstm_gpu_available(), "no usable CUDA GPU")
  info <- convlstm_gpu_info()
  expect_true(info$cuda_build)
  expect_identical(info$reason, "")
  expect_true(nzchar(info$name))
  expect_gte(info$n_devices, 1L)
  expect_gte(info$device, 0L)
  expect_gt(info$multiprocessors, 0L)
  # the package is built for sm_80 and newer
  expect_gte(as.numeric(sub("\\..*", "", info$compute_capability)), 8)
  expect_gt(info$memory_total, 0)
  expect_lte(info$memory_free, info$memory_total)
  expect_gte(as.numeric(sub("\\..*", "", info$cudnn_version)), 9)
  # the driver supports at least the runtime it runs
  v <- function(s) sum(as.numeric(strsplit(s, ".", fixed = TRUE)[[1]]) * c(1000, 10))
  expect_gte(v(info$driver_version), v(info$runtime_version))
  # the model's view of the device agrees with the driver's
  m <- convlstm(1, 4, 3, device = "cuda")
  on.exit(convlstm_release(m))
  expect_equal(convlstm_memory_stats(m)$device_total, info$memory_total)
})

test_that("host arrays of changing sizes go through the pinned staging buffer intact", {
  skip_if_not(convlstm_gpu_available(), "no usable CUDA GPU")
  set.seed(5)
  cpu <- convlstm(2, c(6, 3), 3, device = "cpu")
  gpu <- convlstm(2, c(6, 3), 3, device = "cuda")
  on.exit({
    convlstm_release(cpu)
    convlstm_release(gpu)
  })
  convlstm_load_state_dict(gpu, convlstm_state_dict(cpu))
  # small, larger (the buffer grows), smaller again (it is reused), and one
  # above 1 MiB so that several MiB-rounded sizes are crossed
  for (b in c(1, 9, 3, 100)) {
    x <- array(runif(b * 4 * 2 * 13 * 11), c(b, 4, 2, 13, 11))
    expect_equal(gpu(x), cpu(x), tolerance = 1e-4)
  }
})

test_that("device is read as torch writes it: \"cpu\", \"cuda\", \"cuda:N\", \"auto\"", {
  parse <- convlstm:::parse_device
  expect_identical(parse("cpu"), list(device = "cpu", index = NA_integer_))
  expect_identical(parse("auto"), list(device = "auto", index = NA_integer_))
  expect_identical(parse("cuda"), list(device = "cuda", index = NA_integer_))
  expect_identical(parse("cuda:0"), list(device = "cuda", index = 0L))
  expect_identical(parse("cuda:12"), list(device = "cuda", index = 12L))
  for (bad in list("gpu", "cuda:", "cuda:-1", "cuda:1.5", "CUDA", "cuda:0 ", "cpu:0",
                   "cuda:99999", c("cpu", "cuda"), NA_character_, 0L, NULL)) {
    expect_convlstm_error(parse(bad),
                          regexp = "`device` must be \"auto\", \"cpu\", \"cuda\" or \"cuda:N\"")
  }
})

test_that("\"cuda:N\" reaches the request \"cuda\" makes, or is refused naming `device`", {
  resolve <- convlstm:::resolve_device
  two <- list(available = TRUE, n_devices = 2L, device = 0L) # GPU 0 of 2 is current
  none <- list(available = FALSE, n_devices = NA_integer_, device = NA_integer_)
  # the same internal request as device = "cuda" on the current device 0
  expect_identical(resolve("cuda:0", gpu = two), "cuda")
  expect_identical(resolve("cuda", gpu = two), "cuda")
  expect_identical(resolve("auto", gpu = two), "cuda")
  expect_identical(resolve("auto", gpu = none), "cpu")
  expect_identical(resolve("cpu", gpu = none), "cpu")
  # another GPU than the current one: how to select it
  expect_convlstm_error(resolve("cuda:1", gpu = two), status = "unsupported",
                        regexp = "`device` is \"cuda:1\".*\"cuda:0\".*CUDA_VISIBLE_DEVICES=1")
  expect_identical(resolve("cuda:1", gpu = list(available = TRUE, n_devices = 2L, device = 1L)),
                   "cuda")
  # out of range: the indices there are
  expect_convlstm_error(resolve("cuda:2", gpu = two),
                        regexp = "`device` is \"cuda:2\", but this process sees 2 CUDA GPUs: use \"cuda:0\" or \"cuda:1\"")
  # no GPU: every CUDA spelling is refused the same way
  for (d in c("cuda", "cuda:0", "cuda:3")) {
    expect_convlstm_error(resolve(d, gpu = none), status = "unsupported",
                          regexp = sprintf("`device` is \"%s\", but no CUDA GPU is usable", d))
  }
})

test_that("convlstm(), convlstm_forecaster() and convlstm_load() take \"cuda:N\"", {
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  m <- convlstm(1, 2, 3, device = "cpu")
  convlstm_save(m, path)
  convlstm_release(m)
  makers <- list(
    convlstm = function(d) convlstm(1, 2, 3, device = d),
    convlstm_forecaster = function(d) convlstm_forecaster(1, 2, 3, device = d),
    convlstm_load = function(d) convlstm_load(path, device = d)
  )
  for (name in names(makers)) {
    expect_convlstm_error(makers[[name]]("cuda:x"), regexp = "`device` must be")
    if (convlstm_gpu_available()) {
      m <- makers[[name]](sprintf("cuda:%d", convlstm_gpu_info()$device))
      expect_identical(m$device, "cuda")
      convlstm_release(m)
      expect_convlstm_error(makers[[name]](sprintf("cuda:%d", convlstm_gpu_info()$n_devices)))
    } else {
      expect_convlstm_error(makers[[name]]("cuda:0"), status = "unsupported",
                            regexp = "`device` is \"cuda:0\", but no CUDA GPU")
    }
  }
})
