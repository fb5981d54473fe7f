# Mixed precision that cannot train: inputs beyond float16's range make every
# step overflow. The steps are skipped and the scale halves (GradScaler), a
# warning comes every 10th skipped step in a row, and once the scale would
# fall below 1 the step is an error that names the cause; the parameters
# never change on the way.

test_that("float16 steps that keep overflowing warn, then fail with advice, weights untouched", {
  set.seed(3)
  m <- api_model(dtype = "float16")
  before <- convlstm_state_dict(m)
  x <- api_x() * 1e6 # finite doubles, beyond float16's 65504
  y <- api_y()
  opt <- convlstm_optimizer_adam()
  warned <- integer()
  err <- NULL
  for (i in 1:40) {
    err <- tryCatch(
      withCallingHandlers(convlstm_train_step(m, x, y, opt), convlstm_warning_loss_scale = function(w) {
        warned <<- c(warned, i)
        invokeRestart("muffleWarning")
      }),
      convlstm_error = identity
    )
    if (inherits(err, "convlstm_error")) break
  }
  # 65536 halves 16 times to 1, the 17th skip would go below it
  expect_s3_class(err, "convlstm_error_invalid")
  expect_match(conditionMessage(err), "17 steps in a row overflowed")
  expect_match(conditionMessage(err), "65504")
  expect_identical(i, 17L)
  expect_identical(warned, 10L)
  expect_identical(convlstm_state_dict(m), before)
  ls <- convlstm_loss_scale(m)
  expect_identical(ls$skipped_in_a_row, 17L)
  expect_identical(ls$skipped_steps, 17)
  convlstm_release(m)
})

test_that("an update resets the run of skipped steps", {
  set.seed(4)
  m <- api_model(dtype = "float16")
  x <- api_x()
  y <- api_y()
  opt <- convlstm_optimizer_adam()
  expect_warning(for (i in 1:3) convlstm_train_step(m, x * 1e6, y, opt), NA)
  expect_identical(convlstm_loss_scale(m)$skipped_in_a_row, 3L)
  convlstm_train_step(m, x, y, opt)
  expect_identical(convlstm_loss_scale(m)$skipped_in_a_row, 0L)
  expect_identical(convlstm_loss_scale(m)$skipped_steps, 3)
  convlstm_release(m)
})

test_that("convlstm_fit() warns on a run of skipped float16 steps as convlstm_train_step() does", {
  set.seed(5)
  m <- api_model(dtype = "float16")
  x <- api_x(B = 4) * 1e6
  y <- api_y(B = 4)
  expect_warning(
    tryCatch(convlstm_fit(m, x, y, convlstm_optimizer_adam(), epochs = 12, batch_size = 4, verbose = FALSE),
             convlstm_error = function(e) NULL),
    class = "convlstm_warning_loss_scale"
  )
  convlstm_release(m)
})

test_that("convlstm_set_loss_scale() sets GradScaler's settings, kept across convlstm_set_dtype() and a file", {
  set.seed(6)
  m <- api_model(dtype = "float16")
  x <- api_x()
  y <- api_y()
  opt <- convlstm_optimizer_adam()
  convlstm_set_loss_scale(m, init_scale = 1024, growth_factor = 3, backoff_factor = 0.25,
                 growth_interval = 2)
  ls <- convlstm_loss_scale(m)
  expect_identical(c(ls$scale, ls$init_scale, ls$growth_factor, ls$backoff_factor),
                   c(1024, 1024, 3, 0.25))
  convlstm_train_step(m, x * 1e6, y, opt) # overflows: skipped, scale times 0.25
  expect_identical(convlstm_loss_scale(m)$scale, 256)
  convlstm_train_step(m, x, y, opt)
  convlstm_train_step(m, x, y, opt) # two clean steps: times 3
  expect_identical(convlstm_loss_scale(m)$scale, 768)
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(m, path, optimizer = opt)
  loaded <- convlstm_load(path)
  expect_identical(unclass(convlstm_loss_scale(loaded)), unclass(convlstm_loss_scale(m)))
  convlstm_set_dtype(m, "float32")
  convlstm_set_dtype(m, "float16") # the scale starts again, the settings stay
  ls <- convlstm_loss_scale(m)
  expect_identical(c(ls$scale, ls$growth_factor, ls$backoff_factor, ls$growth_interval),
                   c(1024, 3, 0.25, 2))
  convlstm_release(m)
  convlstm_release(loaded)
})

