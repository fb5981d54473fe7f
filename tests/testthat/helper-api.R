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

# The class a package error must carry for a given status.
expect_convlstm_error <- function(expr, status = "invalid", regexp = NULL) {
  testthat::expect_error(expr, regexp = regexp, class = paste0("convlstm_error_", status))
}
