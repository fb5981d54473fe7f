# test-geometry.R -- non-square kernels and dilation (R/geometry.R): the forms
# convlstm() takes and gives back, the weights' shapes, files that keep them,
# "same" padding (the image size is kept), and memory planned to the byte.
# Parity with PyTorch is in test-parity-torch.R (fixtures kernel_3x5 and
# dilated); every backend's convolutions against a reference in tests/c/test_backend_ops.c.

test_that("kernel_sizes and dilation take numbers or c(height, width) pairs and read back", {
  m <- convlstm(2, c(3, 2), list(c(3, 5), 1), dilation = list(c(2, 1), 3), device = "cpu")
  expect_identical(m$kernel_sizes, list(c(3L, 5L), c(1L, 1L)))
  expect_identical(m$dilation, list(c(2L, 1L), c(3L, 3L)))
  sd <- convlstm_state_dict(m)
  expect_identical(dim(sd$cell_list.0.conv.weight), c(12L, 5L, 3L, 5L))
  expect_identical(dim(sd$cell_list.1.conv.weight), c(8L, 5L, 1L, 1L))
  expect_identical(m$n_parameters, 12 * 5 * 15 + 12 + 8 * 5 + 8)
  expect_output(print(m), "3x5 d2x1")
  # square kernels and one dilation keep the plain forms
  sq <- convlstm(1, c(2, 2), c(3, 5), dilation = 2, device = "cpu")
  expect_identical(sq$kernel_sizes, c(3L, 5L))
  expect_identical(sq$dilation, c(2L, 2L))
  # one pair for every layer
  one <- convlstm(1, c(2, 2), list(c(1, 3)), device = "cpu")
  expect_identical(one$kernel_sizes, list(c(1L, 3L), c(1L, 3L)))
  for (x in list(m, sq, one)) convlstm_release(x)
})

test_that("\"same\" padding keeps the image size; a 1 x 1 kernel ignores dilation", {
  set.seed(7)
  x <- api_x(T = 2, C = 2, H = 5, W = 4)
  m <- convlstm(2, 3, list(c(5, 3)), dilation = list(c(3, 2)), device = "cpu")
  out <- m(x)
  expect_identical(dim(out[[1]][[1]]), c(2L, 2L, 3L, 5L, 4L))
  a <- convlstm(2, 3, 1, device = "cpu")
  b <- convlstm(2, 3, 1, dilation = 4, device = "cpu")
  convlstm_load_state_dict(b, convlstm_state_dict(a))
  expect_identical(b(x), a(x))
  for (z in list(m, a, b)) convlstm_release(z)
})

test_that("a file keeps kernels and dilations, and a model of another geometry refuses it", {
  set.seed(8)
  m <- convlstm(2, c(3, 2), list(c(3, 5), 3), dilation = list(c(1, 2), 2), device = "cpu")
  x <- api_x()
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  convlstm_save(m, path)
  loaded <- convlstm_load(path, device = "cpu")
  expect_identical(loaded$kernel_sizes, m$kernel_sizes)
  expect_identical(loaded$dilation, m$dilation)
  expect_identical(loaded(x), m(x))
  other <- convlstm(2, c(3, 2), list(c(3, 5), 3), device = "cpu") # no dilation
  expect_convlstm_error(c_model_load_into(model_ptr(other), path, FALSE), regexp = "dilations")
  for (z in list(m, loaded, other)) convlstm_release(z)
})

test_that("memory of a dilated, non-square model is planned to the byte", {
  set.seed(9)
  m <- convlstm(2, c(4, 2), list(c(5, 3), c(1, 3)), dilation = list(c(2, 1), 3), device = "cpu",
                threads = 1)
  x <- api_x(T = 4, H = 7, W = 6)
  y <- api_y(H = 7, W = 6)
  est <- convlstm_memory_estimate(m, 2, 4, 7, 6, optimizer = convlstm_optimizer_adam())
  convlstm_train_step(m, x, y, convlstm_optimizer_adam())
  s <- convlstm_memory_stats(m)
  measured <- stats::setNames(s$by_category$peak, s$by_category$category)
  expect_identical(measured, estimate_bytes(est)[names(measured)])
  convlstm_release(m)
})
