# convlstm_fit()'s history pinned by numbers computed apart (issue 38): each
# epoch's loss is that of convlstm_train_step() called by hand on a twin model (the
# same weights, one thread, the same optimizer) over the same batches in the
# same order, reduced as the documentation says (the batches' losses averaged
# over their sequences, or summed for reduction = "sum"); the validation loss
# is the loss of predict()'s output written out in R; shuffle = TRUE draws
# another order from R's random number generator, the same one for the same
# seed. For the plain stack and the encoder-forecaster; an uneven last batch
# everywhere (5 sequences in batches of 2), so that weighting the batches
# alike, or by the wrong size, shows.

# The elements' losses written out here (torch's formulas), in double.
values_loss_elems <- function(pred, y, kind) {
  switch(kind,
    mse = (pred - y)^2,
    mae = abs(pred - y),
    bce_logits = pmax(pred, 0) - pred * y + log1p(exp(-abs(pred)))
  )
}

# The reduced loss of pred against y (n sequences).
values_reduce <- function(elems, n, reduction) {
  switch(reduction, mean = sum(elems) / length(elems), sum = sum(elems),
         batchmean = sum(elems) / n)
}

# The rows of each batch of n sequences in batches of b, in `order`.
values_batches <- function(order, b) unname(split(order, ceiling(seq_along(order) / b)))

# The epoch's loss from the batches' losses `l` of sizes `sizes`.
values_epoch_loss <- function(l, sizes, reduction) {
  if (identical(reduction, "sum")) sum(l) else sum(l * sizes) / sum(sizes)
}

# Bit for bit the same weights (compared as one named vector, which testthat prints well).
expect_same_weights <- function(a, b) {
  expect_identical(unlist(convlstm_state_dict(a)), unlist(convlstm_state_dict(b)))
}

# The loss column print(history) shows (its second), as numbers.
printed_losses <- function(h) {
  out <- capture.output(print(h))
  expect_match(out[[2]], "^ *epoch +loss")
  rows <- out[2 + seq_len(nrow(h))] # the epochs' lines; the units' lines follow
  as.numeric(vapply(strsplit(trimws(rows), " +"), `[`, "", 2))
}

# --- the plain stack ----------------------------------------------------------------------------

values_plain_pair <- function(seed = 11) {
  set.seed(seed)
  a <- convlstm(2, c(3, 2), 3, device = "cpu", threads = 1)
  b <- convlstm(2, c(3, 2), 3, device = "cpu", threads = 1)
  convlstm_load_state_dict(b, convlstm_state_dict(a))
  list(a = a, b = b)
}

values_plain_data <- function(n = 5, seed = 3) {
  set.seed(seed)
  list(x = array(runif(n * 3 * 2 * 5 * 4, -1, 1), c(n, 3, 2, 5, 4)),
       y = array(runif(n * 2 * 5 * 4, -1, 1), c(n, 2, 5, 4)))
}

# Twin b trained by hand over `orders` (one order of rows per epoch) in
# batches of bs: the epochs' losses.
values_plain_by_hand <- function(b, d, opt, orders, bs, loss, reduction, data_x = d$x,
                                 data_y = d$y) {
  vapply(orders, function(order) {
    batches <- values_batches(order, bs)
    l <- vapply(batches, function(i) {
      convlstm_train_step(b, rows_of(data_x, i), rows_of(data_y, i), opt, loss = loss,
                 reduction = reduction)
    }, numeric(1))
    values_epoch_loss(l, lengths(batches), reduction)
  }, numeric(1))
}

for (case in list(list(loss = "mse", reduction = "mean"), list(loss = "mae", reduction = "batchmean"),
                  list(loss = "mse", reduction = "sum"))) {
  test_that(sprintf("a plain fit's epoch loss is its train steps' (%s, %s), last batch uneven",
                    case$loss, case$reduction), {
    m <- values_plain_pair()
    on.exit(release_all(m))
    d <- values_plain_data()
    opt <- convlstm_optimizer_adam(0.01)
    h <- convlstm_fit(m$a, d$x, d$y, opt, epochs = 2, batch_size = 2, shuffle = FALSE,
                      verbose = FALSE, loss = case$loss, reduction = case$reduction)
    want <- values_plain_by_hand(m$b, d, opt, list(1:5, 1:5), 2, case$loss, case$reduction)
    expect_equal(h$loss, want, tolerance = 1e-12)
    expect_equal(printed_losses(h), want, tolerance = 1e-4) # printed to 5 digits
    expect_same_weights(m$a, m$b)
  })
}

test_that("a plain fit's validation loss over several batches is the loss of predict()", {
  d <- values_plain_data(4)
  v <- values_plain_data(5, seed = 4) # 5 validation sequences: batches of 2, 2 and 1
  for (reduction in c("mean", "batchmean", "sum")) {
    m <- values_plain_pair()
    h <- convlstm_fit(m$a, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 1, batch_size = 2,
                      shuffle = FALSE, verbose = FALSE, loss = "mae", reduction = reduction,
                      validation_data = list(v$x, v$y),
                      metrics = c("mse", "mae", "mse_frame", "mae_frame"))
    # batch by batch, as the fit runs it, each batch's loss summed here
    elems <- unlist(lapply(values_batches(1:5, 2), function(i) {
      values_loss_elems(predict(m$a, rows_of(v$x, i), what = "last_state"), rows_of(v$y, i),
                        "mae")
    }))
    expect_equal(h$val_loss, values_reduce(elems, 5, reduction), tolerance = 1e-10,
                 label = reduction)
    # the metrics: "mse", "mae" means over every element; "_frame": each
    # sequence's (one frame's) errors summed, averaged over the 5
    p <- predict(m$a, v$x, what = "last_state")
    expect_equal(h$val_mse, mean((p - v$y)^2), tolerance = 1e-10)
    expect_equal(h$val_mae, mean(abs(p - v$y)), tolerance = 1e-10)
    expect_equal(h$val_mse_frame, sum((p - v$y)^2) / 5, tolerance = 1e-10)
    expect_equal(h$val_mae_frame, sum(abs(p - v$y)) / 5, tolerance = 1e-10)
    # in the loss's unit: the metric MAE is the mean-reduced MAE loss (from C)
    if (reduction == "mean") expect_equal(h$val_mae, h$val_loss, tolerance = 1e-6)
    release_all(m)
  }
})

# A fit with shuffle = TRUE after set.seed(seed) trains in the orders
# sample.int() draws (one permutation of the n sequences per epoch, batches
# of 2, a twin trained in that order by hand with by_hand()), repeats bit
# for bit with the same seed, and differs from shuffle = FALSE and from
# seed + 1. pair() makes twin models; fit_args go to convlstm_fit().
expect_shuffle_by_seed <- function(pair, d, opt, by_hand, seed, ...) {
  n <- dim(d$x)[[1]]
  fit_with <- function(model, shuffle, s) {
    set.seed(s)
    convlstm_fit(model, d$x, d$y, opt, epochs = 2, batch_size = 2, shuffle = shuffle,
                 verbose = FALSE, ...)
  }
  m <- pair()
  m2 <- pair()
  m3 <- pair()
  on.exit(release_all(c(m, m2, m3)))
  h_shuffled <- fit_with(m$a, TRUE, seed)
  h_again <- fit_with(m2$a, TRUE, seed)
  # the same seed: the same order, bit for bit
  expect_identical(h_again$loss, h_shuffled$loss)
  expect_same_weights(m2$a, m$a)
  # the orders R's generator gives for that seed, one permutation per epoch
  set.seed(seed)
  orders <- list(sample.int(n), sample.int(n))
  expect_false(identical(orders[[1]], seq_len(n)))
  want <- by_hand(m$b, d, opt, orders, 2, "mse", "mean")
  expect_equal(h_shuffled$loss, want, tolerance = 1e-12)
  expect_same_weights(m$a, m$b)
  # and not the order of shuffle = FALSE
  fit_with(m2$b, FALSE, seed)
  expect_false(identical(convlstm_state_dict(m2$b), convlstm_state_dict(m$a)))
  # another seed, another order
  h_other <- fit_with(m3$a, TRUE, seed + 1)
  expect_false(identical(h_other$loss, h_shuffled$loss))
}

test_that("a plain fit's shuffle draws another order, the same for the same seed", {
  expect_shuffle_by_seed(values_plain_pair, values_plain_data(6), convlstm_optimizer_sgd(0.1),
                         values_plain_by_hand, seed = 21, data_on_device = FALSE)
})

# --- the encoder-forecaster ---------------------------------------------------------------------

values_fc_pair <- function(seed = 12) {
  set.seed(seed)
  a <- convlstm_forecaster(1, c(3, 2), 3, patch = 2, device = "cpu", threads = 1)
  b <- convlstm_forecaster(1, c(3, 2), 3, patch = 2, device = "cpu", threads = 1)
  convlstm_load_state_dict(b, convlstm_state_dict(a))
  list(a = a, b = b)
}

values_fc_data <- function(n = 5, K = 2, seed = 5) {
  set.seed(seed)
  list(x = array(runif(n * 3 * 4 * 4), c(n, 3, 1, 4, 4)),
       y = array(runif(n * K * 4 * 4), c(n, K, 1, 4, 4)))
}

values_fc_by_hand <- function(b, d, opt, orders, bs, loss, reduction) {
  vapply(orders, function(order) {
    batches <- values_batches(order, bs)
    l <- vapply(batches, function(i) {
      convlstm_train_step(b, rows_of(d$x, i), rows_of(d$y, i), opt, loss = loss, reduction = reduction)
    }, numeric(1))
    values_epoch_loss(l, lengths(batches), reduction)
  }, numeric(1))
}

for (case in list(list(loss = "mse", reduction = "mean"),
                  list(loss = "bce_logits", reduction = "batchmean"),
                  list(loss = "bce_logits", reduction = "sum"))) {
  test_that(sprintf("a forecaster fit's epoch loss is its train steps' (%s, %s), last batch uneven",
                    case$loss, case$reduction), {
    m <- values_fc_pair()
    on.exit(release_all(m))
    d <- values_fc_data()
    opt <- convlstm_optimizer_rmsprop(lr = 1e-2, alpha = 0.9)
    h <- convlstm_fit(m$a, d$x, d$y, opt, epochs = 2, batch_size = 2, shuffle = FALSE,
                      verbose = FALSE, loss = case$loss, reduction = case$reduction)
    want <- values_fc_by_hand(m$b, d, opt, list(1:5, 1:5), 2, case$loss, case$reduction)
    expect_equal(h$loss, want, tolerance = 1e-12)
    expect_equal(printed_losses(h), want, tolerance = 1e-4)
    expect_same_weights(m$a, m$b)
  })
}

test_that("a forecaster fit's validation loss over several batches is the loss of predict()", {
  d <- values_fc_data(4)
  v <- values_fc_data(5, K = 3, seed = 6) # 5 sequences of 3 frames (training: 2)
  for (reduction in c("mean", "batchmean", "sum")) {
    m <- values_fc_pair()
    h <- convlstm_fit(m$a, d$x, d$y, convlstm_optimizer_rmsprop(lr = 1e-2), epochs = 1, batch_size = 2,
                      shuffle = FALSE, verbose = FALSE, loss = "bce_logits",
                      reduction = reduction, validation_data = list(v$x, v$y))
    elems <- unlist(lapply(values_batches(1:5, 2), function(i) {
      values_loss_elems(predict(m$a, rows_of(v$x, i), horizon = 3), rows_of(v$y, i),
                        "bce_logits")
    }))
    expect_equal(h$val_loss, values_reduce(elems, 5, reduction), tolerance = 1e-10,
                 label = reduction)
    release_all(m)
  }
})

test_that("a forecaster fit's shuffle draws another order, the same for the same seed", {
  expect_shuffle_by_seed(values_fc_pair, values_fc_data(6), convlstm_optimizer_sgd(0.5),
                         values_fc_by_hand, seed = 31)
})
