# generics::fit() and generics::evaluate() from the generics package call convlstm_fit() and
# convlstm_evaluate() with all their arguments.

test_that("generics::fit() and generics::evaluate() are convlstm_fit() and convlstm_evaluate()", {
  d <- array(stats::runif(6 * 3 * 16), c(6, 3, 1, 4, 4))
  y <- array(d[, 3, 1, , ], c(6, 1, 4, 4))
  run <- function(f) {
    set.seed(3)
    model <- convlstm(1, c(3, 1), 3, device = "cpu", threads = 1)
    on.exit(convlstm_release(model))
    h <- f(model, d, y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 3, verbose = FALSE)
    list(loss = h$loss, eval = generics::evaluate(model, d, y, batch_size = 2),
         direct = convlstm_evaluate(model, d, y, batch_size = 2)) # the same sums
  }
  a <- run(fit)
  b <- run(convlstm_fit)
  expect_identical(a$loss, b$loss)
  expect_identical(a$eval, b$direct)
  expect_identical(fit, generics::fit)
  expect_identical(evaluate, generics::evaluate)
})
