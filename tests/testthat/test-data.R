# Data sets on the device (convlstm_data()): steps on their rows equal steps
# on the same rows sliced in R, convlstm_fit() gives the same history with
# and without one, their memory is accounted and returned, and their
# lifetime follows the model's.

test_that("steps on a data set equal steps on the same rows sliced in R", {
  set.seed(3)
  x <- api_x(B = 6, T = 4)
  cases <- list(
    list(target = "last_state", y = api_y(B = 6), opts = list()),
    list(target = "sequence", y = api_y(B = 6, T = 4), opts = list(checkpoint = 2)),
    list(target = "sequence", y = api_y(B = 6, T = 4), opts = list(tbptt = 3)),
    list(target = "last_state", y = api_y(B = 6), opts = list(accumulation_steps = 2)),
    list(target = "sequence", y = api_y(B = 6, T = 4),
         opts = list(recompute_gates = TRUE, checkpoint = 3))
  )
  batches <- list(c(4, 1, 6), c(2, 2, 5, 2), 1:6)
  for (case in cases) {
    m <- twin_models()
    data <- convlstm_data(m$a, x, case$y, target = case$target)
    opt <- convlstm_optimizer_adam(0.01)
    for (rows in batches) {
      la <- do.call(convlstm_train_step, c(list(m$a, data, optimizer = opt, rows = rows), case$opts))
      lb <- do.call(convlstm_train_step, c(list(m$b, rows_of(x, rows), rows_of(case$y, rows), opt,
                                       target = case$target), case$opts))
      expect_identical(la, lb)
      expect_identical(convlstm_gradients(m$a), convlstm_gradients(m$b))
    }
    expect_identical(convlstm_state_dict(m$a), convlstm_state_dict(m$b))
    convlstm_release(m$a)
    convlstm_release(m$b)
  }
})

test_that("train_step on a data set takes the optimizer in y's place and every row by default", {
  set.seed(4)
  m <- twin_models()
  on.exit(lapply(m, convlstm_release))
  x <- api_x(B = 3)
  y <- api_y(B = 3)
  data <- convlstm_data(m$a, x, y)
  opt <- convlstm_optimizer_sgd(0.1)
  expect_identical(convlstm_train_step(m$a, data, opt), convlstm_train_step(m$b, x, y, opt))
  expect_identical(convlstm_train_step(m$a, data, opt, target = "last_state"), convlstm_train_step(m$b, x, y, opt))
})

test_that("a float16 model's data set gives the host path's losses", {
  set.seed(5)
  m <- twin_models(dtype = "float16")
  on.exit(lapply(m, convlstm_release))
  x <- api_x(B = 4)
  y <- api_y(B = 4)
  data <- convlstm_data(m$a, x, y)
  expect_output(print(data), "float16")
  opt <- convlstm_optimizer_adam(0.01)
  for (rows in list(c(1, 3), c(4, 4, 2))) {
    expect_identical(convlstm_train_step(m$a, data, optimizer = opt, rows = rows),
                     convlstm_train_step(m$b, rows_of(x, rows), rows_of(y, rows), opt))
  }
  expect_identical(convlstm_state_dict(m$a), convlstm_state_dict(m$b))
  # after a change of dtype the data set no longer matches the model
  convlstm_set_dtype(m$a, "float32")
  expect_convlstm_error(convlstm_train_step(m$a, data, optimizer = opt), status = "state",
                        regexp = "uploaded as float16")
})

test_that("convlstm_fit gives the same history with the data on the device or not", {
  x <- api_x(B = 10, T = 3)
  y <- api_y(B = 10, T = 3)
  fit <- function(on_device, ...) {
    set.seed(42)
    model <- api_model()
    on.exit(convlstm_release(model))
    h <- convlstm_fit(model, x, y, convlstm_optimizer_adam(0.01), epochs = 3, batch_size = 4,
                      target = "sequence", verbose = FALSE, data_on_device = on_device, ...)
    list(h = h, sd = convlstm_state_dict(model))
  }
  host <- fit(FALSE)
  dev <- fit(TRUE)
  auto <- fit("auto")
  expect_false(attr(host$h, "data_on_device"))
  expect_true(attr(dev$h, "data_on_device"))
  expect_true(attr(auto$h, "data_on_device")) # a few KiB fit anywhere
  expect_identical(dev$h$loss, host$h$loss)
  expect_identical(auto$h$loss, host$h$loss)
  expect_identical(dev$sd, host$sd)
  acc <- fit(TRUE, accumulation_steps = 3, checkpoint = 2)
  expect_identical(acc$h$loss, fit(FALSE, accumulation_steps = 3, checkpoint = 2)$h$loss)
  expect_equal(convlstm:::c_data_alive(), 0L) # fit frees its data set
})

test_that("data_on_device = 'auto' keeps the data in R when it does not fit, TRUE is an oom", {
  set.seed(6)
  model <- api_model()
  on.exit(convlstm_release(model))
  x <- api_x(B = 64, T = 3, H = 8, W = 8)
  y <- api_y(B = 64, H = 8, W = 8)
  # room for a step of 8 but not for 64 sequences more
  est <- convlstm_memory_estimate(model, 8, 3, 8, 8, optimizer = convlstm_optimizer_adam())
  convlstm_set_memory_limit(model, est$bytes[est$category == "total"] + 4096)
  h <- convlstm_fit(model, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = 8, verbose = FALSE)
  expect_false(attr(h, "data_on_device"))
  expect_convlstm_error(
    convlstm_fit(model, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = 8, verbose = FALSE,
                 data_on_device = TRUE),
    status = "oom", regexp = "tried to allocate"
  )
  data_before <- convlstm_memory_stats(model)$by_category$current[7]
  # more than the whole limit, even once the cached step arena is given back
  xl <- api_x(B = 1024, T = 3, H = 8, W = 8)
  yl <- api_y(B = 1024, H = 8, W = 8)
  expect_convlstm_error(convlstm_data(model, xl, yl), status = "oom")
  expect_equal(convlstm_memory_stats(model)$by_category$current[7], data_before)
  expect_equal(convlstm:::c_data_alive(), 0L)
  # the model is still usable
  expect_true(is.finite(convlstm_train_step(model, rows_of(x, 1:8), rows_of(y, 1:8), convlstm_optimizer_adam())))
})

test_that("memory_stats shows a data set under 'data' and release returns it", {
  set.seed(7)
  model <- api_model()
  on.exit(convlstm_release(model))
  x <- api_x(B = 5, T = 3)
  y <- api_y(B = 5)
  before <- convlstm_memory_stats(model)$by_category
  data <- convlstm_data(model, x, y)
  after <- convlstm_memory_stats(model)$by_category
  bytes <- 5 * 3 * 2 * 5 * 4 * 4 + 5 * 2 * 5 * 4 * 4
  expect_equal(data$bytes, bytes)
  expect_equal(after$current[after$category == "data"] - before$current[before$category == "data"],
               bytes + 5 * 4) # and the index buffer of every row
  expect_output(print(data), "5 sequences on cpu, float32")
  expect_true(convlstm_release(data))
  expect_false(convlstm_release(data))
  expect_equal(convlstm_memory_stats(model)$by_category$current[7], before$current[7])
  expect_output(print(data), "released")
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = convlstm_optimizer_sgd(0.1)), status = "state",
                        regexp = "released")
})

test_that("releasing the model invalidates its data sets; gc frees them in any order", {
  gc()
  models <- convlstm:::c_models_alive()
  model <- api_model()
  data <- convlstm_data(model, api_x(), api_y())
  expect_equal(convlstm:::c_data_alive(), 1L)
  convlstm_release(model)
  expect_equal(convlstm:::c_data_alive(), 0L)
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = convlstm_optimizer_sgd(0.1)), status = "state")
  other <- api_model()
  on.exit(convlstm_release(other))
  expect_convlstm_error(convlstm_train_step(other, data, optimizer = convlstm_optimizer_sgd(0.1)), status = "state",
                        regexp = "model of this data set was released")
  expect_output(print(data), "released with its model")
  expect_false(convlstm_release(data))
  # the data set keeps its model alive until both are unreachable
  local({
    m <- api_model()
    d <- convlstm_data(m, api_x(), api_y())
    rm(m)
    gc()
    expect_equal(convlstm:::c_data_alive(), 1L)
    expect_true(is.finite(convlstm_train_step(other, api_x(), api_y(), convlstm_optimizer_sgd(0.1))))
  })
  gc()
  expect_equal(convlstm:::c_data_alive(), 0L)
  expect_equal(convlstm:::c_models_alive(), models + 1L)
  # a data set restored by readRDS explains itself
  d2 <- convlstm_data(other, api_x(), api_y())
  restored <- unserialize(serialize(d2, NULL))
  expect_convlstm_error(convlstm_train_step(other, restored, optimizer = convlstm_optimizer_sgd(0.1)),
                        status = "state", regexp = "readRDS")
  expect_output(print(restored), "restored")
})

test_that("a data set of another model is refused", {
  a <- api_model()
  b <- api_model()
  on.exit({
    convlstm_release(a)
    convlstm_release(b)
  })
  data <- convlstm_data(a, api_x(), api_y())
  expect_convlstm_error(convlstm_train_step(b, data, optimizer = convlstm_optimizer_sgd(0.1)), regexp = "another model")
})

test_that("bad arguments are refused with the argument's name", {
  model <- api_model()
  on.exit(convlstm_release(model))
  x <- api_x(B = 3)
  y <- api_y(B = 3)
  expect_convlstm_error(convlstm_data(model, x[, , 1, , , drop = FALSE], y), regexp = "`x`")
  expect_convlstm_error(convlstm_data(model, x, api_y(B = 2)), regexp = "`y`")
  expect_convlstm_error(convlstm_data(model, x, y, target = "sequence"), regexp = "`y`")
  expect_convlstm_error(convlstm_data(model, x, y, target = "middle"), regexp = "`target`")
  expect_convlstm_error(convlstm_data("model", x, y), regexp = "`model`")
  data <- convlstm_data(model, x, y)
  opt <- convlstm_optimizer_adam()
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = opt, rows = 0), regexp = "`rows`")
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = opt, rows = 4), regexp = "`rows`")
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = opt, rows = 1.5), regexp = "`rows`")
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = opt, rows = c(1, NA)), regexp = "`rows`")
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = opt, rows = integer()), regexp = "`rows`")
  expect_convlstm_error(convlstm_train_step(model, data, y, opt), regexp = "`y` must be NULL")
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = opt, target = "sequence"),
                        regexp = "`target`")
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = opt, rows = 1:2,
                                   accumulation_steps = 3), regexp = "`accumulation_steps`")
  expect_convlstm_error(convlstm_train_step(model, data, optimizer = "adam"), regexp = "`optimizer`")
  expect_convlstm_error(convlstm_train_step(model, x, y, opt, rows = 1:2), regexp = "`rows`")
  expect_convlstm_error(convlstm_fit(model, x, y, opt, data_on_device = "yes"),
                        regexp = "`data_on_device`")
})

test_that("a data set on the GPU gives the CPU's steps", {
  skip_if_not(convlstm_gpu_available(), "no usable CUDA GPU")
  set.seed(11)
  cpu <- api_model()
  gpu <- convlstm(2, c(3, 2), 3, device = "cuda")
  on.exit({
    convlstm_release(cpu)
    convlstm_release(gpu)
  })
  convlstm_load_state_dict(gpu, convlstm_state_dict(cpu))
  x <- api_x(B = 6)
  y <- api_y(B = 6)
  data <- convlstm_data(gpu, x, y)
  expect_output(print(data), "on cuda")
  opt <- convlstm_optimizer_adam(0.01)
  for (rows in list(c(5, 2, 2), 1:6)) {
    expect_equal(convlstm_train_step(gpu, data, optimizer = opt, rows = rows),
                 convlstm_train_step(cpu, rows_of(x, rows), rows_of(y, rows), opt), tolerance = 1e-4)
  }
  sg <- convlstm_state_dict(gpu)
  sc <- convlstm_state_dict(cpu)
  for (name in names(sc)) expect_equal(sg[[name]], sc[[name]], tolerance = 1e-3)
  s <- convlstm_memory_stats(gpu)$by_category
  expect_gte(s$current[s$category == "data"], data$bytes)
  # the same history from fit on the GPU with and without the data set
  # (cuDNN may sum in another order from run to run: equal, not identical)
  sd0 <- convlstm_state_dict(cpu)
  fit <- function(on_device) {
    set.seed(1)
    m <- convlstm(2, c(3, 2), 3, device = "cuda")
    on.exit(convlstm_release(m))
    convlstm_load_state_dict(m, sd0)
    h <- convlstm_fit(m, x, y, opt, epochs = 2, batch_size = 4, verbose = FALSE,
                      data_on_device = on_device)
    expect_identical(attr(h, "data_on_device"), on_device)
    h$loss
  }
  expect_equal(fit(TRUE), fit(FALSE), tolerance = 1e-6)
})
