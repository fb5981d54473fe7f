# helper-api.R -- tiny models and data for the API tests (test-model.R, test-train.R, ...): shapes
# small enough that the whole API suite runs in seconds on two cores.

api_model <- function(input_dim = 2, hidden_dims = c(3, 2), kernel_sizes = 3, ...) {
  convlstm(input_dim, hidden_dims, kernel_sizes, device = "cpu", threads = 1, ...)
}

api_x <- function(B = 2, T = 3, C = 2, H = 5, W = 4) {
  array(stats::runif(B * T * C * H * W, -1, 1), dim = c(B, T, C, H, W))
}

api_y <- function(B = 2, C = 2, H = 5, W = 4, T = NULL) {
  d <- if (is.null(T)) c(B, C, H, W) else c(B, T, C, H, W)
  array(stats::runif(prod(d), -1, 1), dim = d)
}

# Rows `rows` of an array of any rank (its first dimension), kept as an array.
rows_of <- function(x, rows) {
  args <- c(list(x, rows), rep(list(quote(expr = )), length(dim(x)) - 1L), list(drop = FALSE))
  do.call(`[`, args)
}

# The class a package error must carry for a given status.
expect_convlstm_error <- function(expr, status = "invalid", regexp = NULL) {
  testthat::expect_error(expr, regexp = regexp, class = paste0("convlstm_error_", status))
}

# Two models with the same weights, and their release.
twin_models <- function(...) {
  a <- api_model(...)
  b <- api_model(...)
  convlstm_load_state_dict(b, convlstm_state_dict(a))
  list(a = a, b = b)
}
release_all <- function(models) for (m in models) convlstm_release(m)

# Twins m (twin_models()) take `steps` steps of opt; m$a is saved with its
# optimizer, whose state tensors `states` (torch's names) the file must hold,
# and loaded: its next step and weights must equal m$b's, bit for bit (one
# thread, as m$b: the same sums). Returns the file's convlstm_file_info().
expect_resumes_exactly <- function(m, x, y, opt, states, steps = 2) {
  for (i in seq_len(steps)) {
    convlstm_train_step(m$a, x, y, opt)
    convlstm_train_step(m$b, x, y, opt)
  }
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  convlstm_save(m$a, path, optimizer = opt)
  info <- convlstm_file_info(path)
  for (state in states) {
    expect_true(any(startsWith(info$tensors$name, paste0("optimizer.", state, "."))),
                label = paste0("the file holds optimizer.", state, ".*"))
  }
  expect_identical(info$optimizer, opt)
  loaded <- convlstm_load(path, device = "cpu", threads = 1)
  on.exit(convlstm_release(loaded), add = TRUE)
  expect_identical(convlstm_train_step(loaded, x, y, opt), convlstm_train_step(m$b, x, y, opt))
  expect_identical(convlstm_state_dict(loaded), convlstm_state_dict(m$b))
  invisible(info)
}
