# The R API on a CUDA model: the same calls and results as on the CPU.
# Skipped unless this build has CUDA and a usable GPU.

test_that("device = 'auto' picks the GPU and the API gives the CPU's results", {
  skip_if_not(convlstm_gpu_available(), "no usable CUDA GPU")
  set.seed(11)
  cpu <- api_model()
  gpu <- convlstm(2, c(3, 2), 3, device = "auto")
  on.exit({
    convlstm_release(cpu)
    convlstm_release(gpu)
  })
  expect_equal(gpu$device, "cuda")
  convlstm_load_state_dict(gpu, convlstm_state_dict(cpu))
  expect_identical(convlstm_state_dict(gpu), convlstm_state_dict(cpu))
  x <- api_x()
  y <- api_y()
  expect_equal(gpu(x), cpu(x), tolerance = 1e-4)
  opt <- convlstm_optimizer_adam(0.01)
  for (i in 1:3) {
    expect_equal(convlstm_train_step(gpu, x, y, opt), convlstm_train_step(cpu, x, y, opt), tolerance = 1e-4)
  }
  sg <- convlstm_state_dict(gpu)
  sc <- convlstm_state_dict(cpu)
  for (name in names(sc)) expect_equal(sg[[name]], sc[[name]], tolerance = 1e-3)
  s <- convlstm_memory_stats(gpu)
  expect_gt(s$device_total, 0)
  expect_gt(s$device_free, 0)
  expect_equal(s$by_category$current[1], 920 * 4)
})

test_that("releasing a GPU model returns its memory", {
  skip_if_not(convlstm_gpu_available(), "no usable CUDA GPU")
  gc()
  before <- convlstm:::c_models_alive()
  local({
    m <- convlstm(2, 8, 3, device = "cuda")
    convlstm_train_step(m, api_x(), api_y(C = 8), convlstm_optimizer_adam())
    expect_equal(convlstm:::c_models_alive(), before + 1L)
  })
  gc()
  expect_equal(convlstm:::c_models_alive(), before)
})
