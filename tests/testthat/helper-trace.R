# helper-trace.R -- counting calls to the package's own functions from
# outside (base R's trace()), for tests that must show which path a fit
# took, and such fits compared bit for bit (test-arrays-prefetch.R,
# test-staged-batches.R).

# Counts of calls to the package's functions `fns` while expr runs.
count_calls <- function(fns, expr) {
  seen <- new.env()
  for (fn in fns) {
    seen[[fn]] <- 0
    suppressMessages(trace(fn, where = asNamespace("convlstm"), print = FALSE,
                           tracer = bquote(assign(.(fn), get(.(fn), .(seen)) + 1, envir = .(seen)))))
  }
  on.exit(for (fn in fns) suppressMessages(untrace(fn, where = asNamespace("convlstm"))))
  force(expr)
  mget(fns, envir = seen)
}

# A fit of `make()`'s model on x, y with or without reading ahead (and
# with or without staging the batches read ahead: NULL, the device's
# default); the weights after every batch (a callback reads the model), the
# history and the calls made to the functions `count`.
fit_arrays <- function(make, x, y, prefetch, ..., stage = NULL,
                       count = c("c_train_step_start", "arrays_slice")) {
  old <- options(convlstm.prefetch = prefetch, convlstm.stage_batches = stage)
  on.exit(options(old))
  m <- make()
  on.exit(convlstm_release(m), add = TRUE)
  seen <- list()
  cb <- convlstm_callback(on_batch_end = function(ctx) {
    seen[[length(seen) + 1L]] <<- convlstm_state_dict(ctx$model)
  })
  set.seed(7) # the same shuffles, splits and coins
  calls <- count_calls(count, {
    h <- convlstm_fit(m, x, y, convlstm_optimizer_adam(0.02), callbacks = list(cb),
                      verbose = FALSE, data_on_device = FALSE, ...)
  })
  list(h = h, seen = seen, w = convlstm_state_dict(m), calls = calls)
}

expect_same_fit <- function(a, b) {
  expect_identical(a$h$loss, b$h$loss)
  expect_identical(a$h$val_loss, b$h$val_loss)
  expect_identical(length(a$seen), length(b$seen))
  expect_identical(a$seen, b$seen)
  expect_identical(a$w, b$w)
}
