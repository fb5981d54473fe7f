# test-advise.R -- convlstm_memory_advise() and convlstm_fit(memory_budget = ,
# batch_size = "max"): for random models and budgets, the configuration the
# advisor picks trains under memory_limit = budget and its peaks as the
# allocator accounts them (the plan read back, not a measurement) are the
# planned ones; the closest one it rejects fails with the out-of-memory
# error; rows are sorted, labelled and printed as documented.

advise_case <- function(seed) {
  set.seed(seed)
  n_layers <- sample(1:2, 1)
  list(
    input_dim = sample(1:3, 1), hidden = sample(2:6, n_layers, replace = TRUE),
    kernel = sample(c(1, 3), n_layers, replace = TRUE),
    B = sample(2:6, 1), T = sample(2:6, 1), H = sample(3:8, 1), W = sample(3:8, 1)
  )
}

advise_model <- function(case, ...) {
  convlstm(case$input_dim, case$hidden, case$kernel, device = "cpu", threads = 1, ...)
}

advise_data <- function(case, hidden_last) {
  list(x = array(runif(case$B * case$T * case$input_dim * case$H * case$W),
                 c(case$B, case$T, case$input_dim, case$H, case$W)),
       y = array(runif(case$B * hidden_last * case$H * case$W),
                 c(case$B, hidden_last, case$H, case$W)))
}

# A step of configuration `row` on a fresh model limited to `budget`.
train_row <- function(case, row, budget, d) {
  model <- advise_model(case, dtype = row$dtype, memory_limit = budget)
  on.exit(convlstm_release(model))
  loss <- convlstm_train_step(model, d$x, d$y, convlstm_optimizer_adam(), checkpoint = row$checkpoint,
                     accumulation_steps = row$accumulation_steps, tbptt = row$tbptt,
                     recompute_gates = row$recompute_gates)
  s <- convlstm_memory_stats(model)
  list(loss = loss, peak = s$peak_allocated, peak_reserved = s$peak_reserved)
}

test_that("the pick trains under memory_limit = budget at its planned peak; the closest reject is oom", {
  for (seed in 1:8) {
    case <- advise_case(seed)
    probe <- advise_model(case)
    all_fit <- convlstm_memory_advise(probe, "1 GiB", case$B, case$T, case$H, case$W)
    # a budget between the smallest and the largest plan, so some fit and some do not
    budget <- floor(stats::quantile(all_fit$reserved, runif(1, 0.1, 0.9), names = FALSE))
    advice <- convlstm_memory_advise(probe, budget, case$B, case$T, case$H, case$W)
    convlstm_release(probe)
    info <- sprintf("seed %d, budget %s", seed, format(budget))
    expect_true(any(advice$fits), info = info)
    expect_true(any(!advice$fits), info = info)
    d <- advise_data(case, case$hidden[[length(case$hidden)]])
    pick <- advice[1, ]
    run <- train_row(case, pick, budget, d)
    expect_true(is.finite(run$loss), info = info)
    expect_equal(run$peak, pick$total, info = info)
    expect_equal(run$peak_reserved, pick$reserved, info = info)
    expect_lte(run$peak_reserved, budget)
    reject <- advice[!advice$fits, ][1, ]
    expect_gt(reject$reserved, budget)
    expect_convlstm_error(train_row(case, reject, budget, d), status = "oom",
                          regexp = "out of memory")
  }
})

test_that("rows: every dtype, checkpoint and micro-batch; fitting ones first, fastest first", {
  set.seed(3)
  model <- convlstm(1, c(8, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  budget <- 3 * 2^20
  a <- convlstm_memory_advise(model, budget, 16, 8, 16, 16)
  expect_s3_class(a, c("convlstm_memory_advice", "data.frame"))
  expect_setequal(unique(a$dtype), c("float32", "float16", "bfloat16"))
  expect_setequal(unique(a$checkpoint), c(0, 1, 2, 3, 4))
  expect_setequal(unique(a$recompute_gates), c(0, 1))
  expect_setequal(unique(a$accumulation_steps), c(1, 2, 4, 8, 16))
  expect_true(all(a$tbptt == 0))
  expect_equal(a$micro_batch, ceiling(16 / a$accumulation_steps))
  expect_equal(a$fits, a$reserved <= budget)
  # fitting rows first, sorted by predicted time; then by bytes over the budget
  expect_false(is.unsorted(!a$fits))
  expect_false(is.unsorted(a$time_ratio[a$fits]))
  expect_false(is.unsorted(a$reserved[!a$fits]))
  expect_true(all(a$reason[a$fits] == ""))
  expect_true(all(grepl("over the budget", a$reason[!a$fits])))
  # each row is convlstm_memory_estimate()'s plan for that configuration
  for (i in c(1, nrow(a))) {
    est <- convlstm_memory_estimate(model, 16, 8, 16, 16, dtype = a$dtype[[i]],
                           checkpoint = a$checkpoint[[i]],
                           accumulation_steps = a$accumulation_steps[[i]],
                           recompute_gates = a$recompute_gates[[i]],
                           optimizer = convlstm_optimizer_adam())
    expect_equal(unlist(a[i, c(est$category)]), stats::setNames(est$bytes, est$category))
  }
  plain <- a$dtype == "float32" & a$checkpoint == 0 & a$accumulation_steps == 1 &
    a$recompute_gates == 0
  expect_equal(a$time_ratio[plain], 1)
  # recomputing the gates: fewer activations, more time, at the same dtype
  rc <- a$dtype == "float32" & a$checkpoint == 0 & a$accumulation_steps == 1 &
    a$recompute_gates > 0
  expect_gt(a$time_ratio[rc], 1)
  expect_lt(a$activations[rc], a$activations[plain])
  # recomputing forward segments costs time in the model, at the same dtype
  ck <- a$dtype == "float32" & a$checkpoint == 1 & a$accumulation_steps == 1 &
    a$recompute_gates == 0
  expect_gt(a$time_ratio[ck], 1)
  expect_equal(attr(a, "budget"), budget)
  expect_named(attr(a, "rates"), c("flops", "bytes", "weights", "threads", "device", "half"))
  # tbptt only when allowed, and never together with checkpointing
  t <- convlstm_memory_advise(model, budget, 16, 8, 16, 16, allow_tbptt = TRUE)
  expect_true(any(t$tbptt > 0))
  expect_true(all(t$checkpoint[t$tbptt > 0] == 0))
  # sizes with units as memory_limit takes them
  expect_equal(attr(convlstm_memory_advise(model, "3 MiB", 16, 8, 16, 16), "budget"), budget)
})

test_that("sizes far beyond any device are answered without a crash or a warning", {
  model <- convlstm(2, 3, 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  big <- .Machine$integer.max
  expect_no_warning(a <- convlstm_memory_advise(model, "80 GiB", 2^20, 2^20, 64, 64))
  expect_true(all(is.finite(a$time_ratio)))
  expect_false(all(a$fits))
  # sizes the planner cannot hold: rows with the planner's reason
  expect_no_warning(b <- convlstm_memory_advise(model, "80 GiB", big, 3, big, big))
  expect_false(any(b$fits))
  expect_true(all(grepl("overflow", b$reason)))
})

test_that("print() shows what fits with its predicted time and why the others do not", {
  model <- convlstm(1, c(8, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  a <- convlstm_memory_advise(model, "3 MiB", 16, 8, 16, 16)
  out <- capture.output(print(a, n = 3))
  expect_match(out[[1]], "training batch 16, 8 steps of 16x16", fixed = TRUE)
  expect_true(any(grepl("budget 3 MiB: [0-9]+ of [0-9]+ configurations fit", out)))
  expect_true(any(grepl("Fits, fastest first", out)))
  expect_true(any(grepl("Does not fit", out)))
  expect_true(any(grepl("over the budget", out)))
  expect_true(any(grepl("[0-9.]+x$", out)))
  expect_true(any(grepl("n = Inf", out)))
  nothing <- convlstm_memory_advise(model, 1000, 16, 8, 16, 16)
  out <- capture.output(print(nothing))
  expect_false(any(grepl("Fits, fastest first", out)))
  expect_true(any(grepl("0 of [0-9]+ configurations fit", out)))
})

test_that("convlstm_memory_advise() checks its arguments", {
  model <- convlstm(1, 2, 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  expect_convlstm_error(convlstm_memory_advise(model, "lots", 2, 3, 4, 4), regexp = "`budget`")
  expect_convlstm_error(convlstm_memory_advise(model, -1, 2, 3, 4, 4), regexp = "`budget`")
  expect_convlstm_error(convlstm_memory_advise(model, "1 MiB", 0, 3, 4, 4), regexp = "`batch_size`")
  expect_convlstm_error(convlstm_memory_advise(model, "1 MiB", 2, 3, 4, 4, optimizer = "adam"),
                        regexp = "`optimizer`")
  expect_convlstm_error(convlstm_memory_advise(model, "1 MiB", 2, 3, 4, 4, target = "all"),
                        regexp = "`target`")
  expect_convlstm_error(convlstm_memory_advise(model, "1 MiB", 2, 3, 4, 4, allow_tbptt = NA),
                        regexp = "`allow_tbptt`")
  expect_convlstm_error(convlstm_memory_advise("model", "1 MiB", 2, 3, 4, 4), regexp = "`model`")
})

test_that("convlstm_fit(memory_budget = ) trains with the advisor's pick and says which", {
  set.seed(5)
  case <- list(input_dim = 1, hidden = c(4, 1), kernel = 3, B = 8, T = 6, H = 8, W = 8)
  d <- advise_data(case, 1)
  model <- advise_model(case)
  on.exit(convlstm_release(model))
  advice <- convlstm_memory_advise(model, 2^20, 8, 6, 8, 8)
  budget <- floor(stats::quantile(advice$reserved, 0.3, names = FALSE))
  advice <- convlstm_memory_advise(model, budget, 8, 6, 8, 8)
  pick <- advice[1, ]
  limited <- advise_model(case, memory_limit = budget)
  on.exit(convlstm_release(limited), add = TRUE)
  msgs <- character()
  h <- withCallingHandlers(
    convlstm_fit(limited, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, batch_size = 8,
                 shuffle = FALSE, memory_budget = budget, data_on_device = FALSE),
    message = function(m) {
      msgs <<- c(msgs, conditionMessage(m))
      invokeRestart("muffleMessage")
    }
  )
  expect_equal(nrow(h), 1)
  expect_true(is.finite(h$loss))
  expect_equal(limited$dtype, pick$dtype)
  expect_lte(convlstm_memory_stats(limited)$peak_reserved, budget)
  expect_equal(convlstm_memory_stats(limited)$peak_allocated, pick$total)
  line <- grep("memory_budget", msgs, value = TRUE)
  expect_length(line, 1)
  expect_match(line, pick$dtype, fixed = TRUE)
  expect_match(line, sprintf("%.2fx", pick$time_ratio), fixed = TRUE)
  # the same configuration given by hand is the same training
  manual <- advise_model(case, dtype = pick$dtype)
  fresh <- advise_model(case)
  on.exit(convlstm_release(manual), add = TRUE)
  on.exit(convlstm_release(fresh), add = TRUE)
  convlstm_load_state_dict(manual, convlstm_state_dict(model))
  convlstm_load_state_dict(fresh, convlstm_state_dict(model))
  h1 <- convlstm_fit(fresh, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, batch_size = 8,
                     shuffle = FALSE, memory_budget = budget, verbose = FALSE)
  h2 <- convlstm_fit(manual, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, batch_size = 8,
                     shuffle = FALSE, checkpoint = pick$checkpoint,
                     accumulation_steps = pick$accumulation_steps,
                     recompute_gates = pick$recompute_gates, verbose = FALSE)
  expect_equal(h1$loss, h2$loss)
  # nothing fits: the out-of-memory error, before any training
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, memory_budget = 1000,
                 verbose = FALSE),
    status = "oom", regexp = "does not fit in the memory budget")
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, memory_budget = budget,
                 checkpoint = 2, verbose = FALSE),
    regexp = "`memory_budget` chooses")
  expect_convlstm_error(
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, memory_budget = "lots",
                 verbose = FALSE),
    regexp = "`memory_budget`")
})

test_that("a tight budget picks recomputed gates, and convlstm_fit() says so", {
  set.seed(8)
  case <- list(input_dim = 1, hidden = c(8, 1), kernel = 3, B = 8, T = 12, H = 8, W = 8)
  d <- advise_data(case, 1)
  model <- advise_model(case)
  on.exit(convlstm_release(model))
  all <- convlstm_memory_advise(model, "1 GiB", 8, 12, 8, 8)
  budget <- min(all$reserved) # only the leanest configuration fits
  advice <- convlstm_memory_advise(model, budget, 8, 12, 8, 8)
  pick <- advice[1, ]
  expect_gt(pick$recompute_gates, 0)
  # without it, the same configuration does not fit
  plainer <- all[all$dtype == pick$dtype & all$checkpoint == pick$checkpoint &
                   all$accumulation_steps == pick$accumulation_steps &
                   all$recompute_gates == 0, ]
  expect_gt(plainer$reserved, budget)
  msgs <- character()
  withCallingHandlers(
    convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, batch_size = 8,
                 shuffle = FALSE, memory_budget = budget, data_on_device = FALSE),
    message = function(m) {
      msgs <<- c(msgs, conditionMessage(m))
      invokeRestart("muffleMessage")
    }
  )
  expect_match(paste(msgs, collapse = "\n"), "gates recomputed in backward, 1 step at a time")
  expect_lte(convlstm_memory_stats(model)$peak_reserved, budget)
})

test_that("convlstm_fit(batch_size = \"max\") trains at convlstm_max_batch_size() for the configuration", {
  set.seed(6)
  case <- list(input_dim = 1, hidden = c(4, 1), kernel = 3, B = 40, T = 4, H = 8, W = 8)
  d <- advise_data(case, 1)
  model <- advise_model(case)
  on.exit(convlstm_release(model))
  budget <- 400 * 1024
  # the batches a fit slices from the arrays (the data set stays in R) are
  # planned as an arrays source's: two of x and y as doubles beside the step
  src <- convlstm_source_arrays(d$x, d$y)
  b <- as.integer(convlstm_max_batch_size(model, 4, 8, 8, budget = budget, optimizer = convlstm_optimizer_adam(),
                                 checkpoint = 2, source = src))
  unsliced <- as.integer(convlstm_max_batch_size(model, 4, 8, 8, budget = budget,
                                        optimizer = convlstm_optimizer_adam(), checkpoint = 2))
  expect_lt(b, unsliced)
  expect_gt(b, 1)
  expect_lt(b, 40)
  convlstm_set_memory_limit(model, budget)
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, batch_size = "max",
                    checkpoint = 2, verbose = FALSE, data_on_device = FALSE)
  expect_equal(attr(h, "batch_size"), b)
  expect_lte(convlstm_memory_stats(model)$peak_reserved, budget)
  # with a budget: the advisor's configuration (the plain step fits the
  # plain step's largest batch, and nothing is predicted faster than it on
  # the CPU), at its largest batch
  m2 <- advise_model(case)
  on.exit(convlstm_release(m2), add = TRUE)
  h2 <- convlstm_fit(m2, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, batch_size = "max",
                     memory_budget = budget, verbose = FALSE, data_on_device = FALSE)
  plain <- as.integer(convlstm_max_batch_size(m2, 4, 8, 8, budget = budget, optimizer = convlstm_optimizer_adam(),
                                    source = src))
  expect_gte(attr(h2, "batch_size"), plain)
  # all samples when they fit
  h3 <- convlstm_fit(m2, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, batch_size = "max",
                     memory_budget = "1 GiB", verbose = FALSE)
  expect_equal(attr(h3, "batch_size"), 40)
  expect_convlstm_error(
    convlstm_fit(m2, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, batch_size = "all",
                 verbose = FALSE),
    regexp = "`batch_size`")
})

test_that("a fit on plain R arrays plans the batches it slices as an arrays source's fit does", {
  set.seed(9)
  case <- list(input_dim = 1, hidden = c(4, 1), kernel = 3, B = 23, T = 4, H = 8, W = 8)
  d <- advise_data(case, 1)
  src <- convlstm_source_arrays(d$x, d$y)
  opt <- convlstm_optimizer_adam()
  fit_max <- function(x, y, budget, ...) {
    model <- advise_model(case)
    on.exit(convlstm_release(model))
    h <- convlstm_fit(model, x, y, opt, epochs = 1, batch_size = "max", memory_budget = budget,
                      verbose = FALSE, shuffle = FALSE, ...)
    attr(h, "batch_size")
  }
  m <- advise_model(case)
  on.exit(convlstm_release(m))
  budget <- 300 * 1024
  step_only <- as.integer(convlstm_max_batch_size(m, 4, 8, 8, budget = budget, optimizer = opt))
  sliced <- as.integer(convlstm_max_batch_size(m, 4, 8, 8, budget = budget, optimizer = opt,
                                               source = src))
  expect_lt(sliced, step_only) # the slices (two of x and y, as doubles) take room
  expect_lt(step_only, 23)
  # batches sliced in R (the data set kept there): the source's pick
  expect_identical(fit_max(d$x, d$y, budget, data_on_device = FALSE), sliced)
  expect_identical(fit_max(src, NULL, budget), sliced)
  # one batch of every sample is not sliced: all of them where the step
  # alone fits them, though a batch of one fewer, sliced, does not fit (23
  # samples: the search over batch sizes, 16, 32, 24, 20, ..., meets the
  # sliced batches that do not fit before it meets 23)
  all <- convlstm_memory_estimate(m, 23, 4, 8, 8, optimizer = opt)
  all_bytes <- all$bytes[all$category == "reserved"]
  fewer <- convlstm_memory_estimate(m, 22, 4, 8, 8, optimizer = opt, source = src)
  expect_gt(fewer$bytes[fewer$category == "reserved"], all_bytes)
  expect_identical(fit_max(d$x, d$y, all_bytes, data_on_device = FALSE), 23L)
  # data_on_device = "auto": the data set does not fit beside the step
  # the budget's pick fills, so it stays in R and its batches are sliced:
  # planned so, at the sliced pick, not the step's
  model <- advise_model(case)
  on.exit(convlstm_release(model), add = TRUE)
  h <- convlstm_fit(model, d$x, d$y, opt, epochs = 1, batch_size = "max", memory_budget = budget,
                    verbose = FALSE, shuffle = FALSE)
  expect_false(attr(h, "data_on_device"))
  expect_identical(attr(h, "batch_size"), sliced)
  # with room for the data set beside a batch of every sample, it goes to
  # the device (nothing sliced)
  roomy <- convlstm_memory_estimate(m, 23, 4, 8, 8, optimizer = opt)
  h <- convlstm_fit(model, d$x, d$y, opt, epochs = 1, batch_size = "max", verbose = FALSE,
                    memory_budget = roomy$bytes[roomy$category == "reserved"] + 2^20)
  expect_true(attr(h, "data_on_device"))
  expect_identical(attr(h, "batch_size"), 23L)
})

test_that("convlstm_fit(batch_size = \"max\", horizon = ) plans the steps the fit takes", {
  # two horizons: with 6 the teacher-forced step takes more memory than the
  # free-running one, with 3 less; with the batches sliced for each (a
  # teacher-forced epoch's hold the true frames too) the two kinds fit
  # different batches at this budget, so a fit that planned the wrong kind
  # of step would train at another batch size
  for (K in c(6, 3)) {
    set.seed(8)
    case <- list(input_dim = 1, hidden = c(4, 1), kernel = 3, B = 40, T = 3, H = 8, W = 8)
    d <- advise_data(case, 1)
    y <- array(stats::runif(40 * K * 64), c(40, K, 1, 8, 8))
    budget <- 1400 * 1024
    opt <- convlstm_optimizer_adam()
    # the fit slices its batches in R (a horizon's data set stays there):
    # planned as an arrays source's, whose x is a teacher-forced epoch's
    # inputs (x and then the true frames but the last) or a free-running
    # one's (x)
    largest <- function(model, tf) {
      src <- convlstm_source_arrays(array(0, c(40, if (isTRUE(tf)) 3 + K - 1 else 3, 1, 8, 8)), y)
      as.integer(convlstm_max_batch_size(model, 3, 8, 8, budget = budget, optimizer = opt, horizon = K,
                                teacher_forcing = tf, source = src))
    }
    fit_max <- function(tf) {
      model <- advise_model(case)
      on.exit(convlstm_release(model))
      convlstm_set_memory_limit(model, budget)
      h <- convlstm_fit(model, d$x, y, opt, epochs = 2, batch_size = "max", horizon = K,
                        teacher_forcing = tf, verbose = FALSE, shuffle = FALSE)
      expect_lte(convlstm_memory_stats(model)$peak_reserved, budget)
      list(batch = attr(h, "batch_size"), teacher = largest(model, TRUE),
           free = largest(model, FALSE))
    }
    teacher <- fit_max(TRUE)
    expect_lt(teacher$batch, 40)
    expect_identical(teacher$batch, teacher$teacher, info = K)
    expect_false(identical(teacher$teacher, teacher$free), info = K)
    expect_identical(fit_max(FALSE)$batch, teacher$free, info = K)
    # scheduled sampling: free-running's plan
    expect_identical(fit_max(0.5)$batch, teacher$free, info = K)
    # a schedule runs both kinds of step (here epoch 1 teacher-forced, epoch
    # 2 free-running): the batch fits both
    sched <- fit_max(convlstm_sampling_schedule("linear", k = 1))
    expect_identical(sched$batch, min(teacher$teacher, teacher$free), info = K)
  }
})

# ---- forecasting: convlstm_memory_advise(horizon =, teacher_forcing =) -------------

forecast_case <- list(input_dim = 1, hidden = c(4, 1), kernel = 3, B = 4, T = 4, H = 8, W = 8,
                      K = 3)

forecast_data <- function(case) {
  list(x = array(runif(case$B * case$T * case$H * case$W), c(case$B, case$T, 1, case$H, case$W)),
       y = array(runif(case$B * case$K * case$H * case$W), c(case$B, case$K, 1, case$H, case$W)))
}

# The planned reservation of configuration `row` for a forecast step with
# teacher forcing tf.
forecast_reserved <- function(model, case, row, tf) {
  est <- convlstm_memory_estimate(model, case$B, case$T, case$H, case$W, dtype = row$dtype,
                         checkpoint = row$checkpoint, recompute_gates = row$recompute_gates,
                         accumulation_steps = row$accumulation_steps, tbptt = row$tbptt,
                         optimizer = convlstm_optimizer_adam(), horizon = case$K, teacher_forcing = tf)
  est$bytes[est$category == "reserved"]
}

# One forecast training step of configuration `row` on a fresh model
# limited to `limit`.
forecast_step <- function(case, row, limit, d, tf) {
  model <- advise_model(case, dtype = row$dtype, memory_limit = limit)
  on.exit(convlstm_release(model))
  loss <- convlstm_train_step(model, d$x, d$y, convlstm_optimizer_adam(), horizon = case$K, teacher_forcing = tf,
                     checkpoint = row$checkpoint, recompute_gates = row$recompute_gates,
                     accumulation_steps = row$accumulation_steps, tbptt = row$tbptt)
  list(loss = loss, peak_reserved = convlstm_memory_stats(model)$peak_reserved)
}

test_that("a forecast's pick trains within the budget for every step it plans; less memory fails", {
  set.seed(11)
  case <- forecast_case
  d <- forecast_data(case)
  probe <- advise_model(case)
  on.exit(convlstm_release(probe))
  schedule <- convlstm_sampling_schedule("exponential", k = 0.5)
  for (tf in list(TRUE, FALSE, 0.5, schedule)) {
    modes <- if (is.function(tf)) list(TRUE, FALSE) else list(tf)
    label <- if (is.function(tf)) "schedule" else format(tf)
    all <- convlstm_memory_advise(probe, "1 GiB", case$B, case$T, case$H, case$W, horizon = case$K,
                         teacher_forcing = tf)
    expect_equal(attr(all, "horizon"), case$K)
    free <- !isTRUE(tf)
    if (free) { # a free-running step refuses these: none is listed
      expect_true(all(all$checkpoint == 0 & all$recompute_gates == 0 & all$tbptt == 0),
                  info = label)
    } else {
      expect_true(any(all$checkpoint > 0) && any(all$recompute_gates > 0), info = label)
    }
    budget <- floor(stats::quantile(all$reserved, 0.3, names = FALSE))
    advice <- convlstm_memory_advise(probe, budget, case$B, case$T, case$H, case$W, horizon = case$K,
                            teacher_forcing = tf)
    pick <- advice[1, ]
    expect_true(pick$fits, info = label)
    # the row is the plan of every step the pick may take (a schedule: both)
    each <- vapply(modes, function(m) forecast_reserved(probe, case, pick, m), numeric(1))
    expect_equal(pick$reserved, max(each), info = label)
    expect_true(all(each <= budget), info = label)
    for (m in modes) {
      run <- forecast_step(case, pick, budget, d, m)
      expect_true(is.finite(run$loss), info = label)
      expect_lte(run$peak_reserved, budget)
    }
    # one byte less than the pick reserves: the step that needs it all fails
    hungry <- modes[[which.max(each)]]
    expect_convlstm_error(forecast_step(case, pick, pick$reserved - 1, d, hungry),
                          status = "oom", regexp = "memory")
  }
})

test_that("a tight teacher-forced budget picks checkpoint or recompute_gates; free-running never", {
  set.seed(12)
  case <- forecast_case
  d <- forecast_data(case)
  probe <- advise_model(case)
  on.exit(convlstm_release(probe))
  all <- convlstm_memory_advise(probe, "1 GiB", case$B, case$T, case$H, case$W, horizon = case$K)
  budget <- min(all$reserved)
  pick <- convlstm_memory_advise(probe, budget, case$B, case$T, case$H, case$W, horizon = case$K)[1, ]
  expect_true(pick$checkpoint > 0 || pick$recompute_gates > 0)
  expect_lte(forecast_step(case, pick, budget, d, TRUE)$peak_reserved, budget)
  # free-running at the same budget: nothing it may use fits, and its print says why
  free <- convlstm_memory_advise(probe, budget, case$B, case$T, case$H, case$W, horizon = case$K,
                        teacher_forcing = FALSE)
  expect_false(any(free$fits))
  expect_output(print(free), "no checkpoint, tbptt or recompute_gates")
  expect_output(print(all), "teacher-forced steps planned")
})

test_that("convlstm_fit(memory_budget = , horizon = ) trains the advisor's pick and says which", {
  set.seed(13)
  case <- forecast_case
  d <- forecast_data(case)
  probe <- advise_model(case)
  on.exit(convlstm_release(probe))
  schedule <- convlstm_sampling_schedule("exponential", k = 0.5)
  for (tf in list(TRUE, FALSE, schedule)) {
    label <- if (is.function(tf)) "schedule" else format(tf)
    all <- convlstm_memory_advise(probe, "1 GiB", case$B, case$T, case$H, case$W, horizon = case$K,
                         teacher_forcing = tf)
    budget <- floor(stats::quantile(all$reserved, 0.2, names = FALSE))
    pick <- convlstm_memory_advise(probe, budget, case$B, case$T, case$H, case$W, horizon = case$K,
                          teacher_forcing = tf)[1, ]
    model <- advise_model(case, memory_limit = budget)
    msgs <- character()
    h <- withCallingHandlers(
      convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), epochs = 3, batch_size = case$B,
                   shuffle = FALSE, horizon = case$K, teacher_forcing = tf,
                   memory_budget = budget),
      message = function(m) {
        msgs <<- c(msgs, conditionMessage(m))
        invokeRestart("muffleMessage")
      }
    )
    expect_true(all(is.finite(h$loss)), info = label)
    expect_equal(model$dtype, pick$dtype, info = label)
    expect_lte(convlstm_memory_stats(model)$peak_reserved, budget)
    line <- grep("memory_budget", msgs, value = TRUE)
    expect_length(line, 1)
    expect_match(line, sprintf("forecast of %d frames", case$K), fixed = TRUE)
    expect_match(line, sprintf("%.2fx", pick$time_ratio), fixed = TRUE)
    if (!isTRUE(tf)) expect_false(grepl("checkpoint|recomputed", line), info = label)
    if (is.function(tf)) expect_true(any(h$teacher_forcing < 1) && h$teacher_forcing[[1]] == 1)
    convlstm_release(model)
  }
  # batch_size = "max" with a budget: every plan of the schedule fits the batch chosen
  model <- advise_model(case)
  on.exit(convlstm_release(model), add = TRUE)
  budget <- 300 * 1024
  h <- convlstm_fit(model, d$x, d$y, convlstm_optimizer_adam(), epochs = 2, batch_size = "max",
                    horizon = case$K, teacher_forcing = schedule, memory_budget = budget,
                    shuffle = FALSE, verbose = FALSE)
  expect_lte(convlstm_memory_stats(model)$peak_reserved, budget)
  expect_gte(attr(h, "batch_size"), 1)
})

test_that("convlstm_memory_advise() predicts times for non-square kernels (kernel sizes as a list)", {
  model <- convlstm(1, c(4, 1), list(c(3, 5), 3), device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  square <- convlstm(1, c(4, 1), list(c(3, 3), 3), device = "cpu", threads = 1)
  on.exit(convlstm_release(square), add = TRUE)
  advice <- convlstm_memory_advise(model, "1 GiB", 4, 4, 8, 8, horizon = 2)
  expect_true(all(is.finite(advice$time_ratio)))
  # the 3 x 5 layer's convolutions count 15 taps, the 3 x 3 one's 9
  conf <- function(m) convlstm:::c_model_config(convlstm:::model_ptr(m))
  cfg <- list(dtype = "float32", checkpoint = 0L, accumulation_steps = 1L, tbptt = 0L)
  work <- function(m) {
    convlstm:::step_work(convlstm:::model_ptr(m), conf(m), cfg, 4, 4, 8, 8, "sequence", "adam", 1)
  }
  expect_gt(work(model)[["flops"]], work(square)[["flops"]])
})

test_that("the cost model runs a free-running step's fed-back steps one per call", {
  model <- convlstm(1, c(4, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  conf <- convlstm:::c_model_config(convlstm:::model_ptr(model))
  cfg <- function(fed, m) list(dtype = "float32", checkpoint = 0L, accumulation_steps = m,
                               tbptt = 0L, fed = fed)
  work <- function(fed, m, threads) {
    convlstm:::step_work(convlstm:::model_ptr(model), conf, cfg(fed, m), 4, 6, 8, 8, "sequence",
                         "adam", threads)
  }
  # one thread: the arithmetic more by layer 0's input gradient of the 2
  # fed-back steps (4 samples, 64 pixels, 4 gates of 4 channels from 1, 3 x 3),
  # in more calls, each reading the weights
  extra <- 4 * 2 * (2 * 64 * 4 * 4 * 1 * 9)
  expect_equal(work(2, 1, 1)[["flops"]] - work(0, 1, 1)[["flops"]], extra)
  expect_gt(work(2, 1, 1)[["weights"]], work(0, 1, 1)[["weights"]])
  # two threads: a batch of 4 keeps both busy; micro-batches of one sample
  # leave one idle in every call of a fed-back step
  expect_equal(work(2, 1, 2)[["flops"]] - work(0, 1, 2)[["flops"]], extra)
  expect_gt(work(2, 4, 2)[["flops"]] - work(0, 4, 2)[["flops"]], 2 * extra)
})

test_that("the cost model reads the step's convolution calls from the core", {
  model <- convlstm(2, c(3, 4), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(model))
  ptr <- convlstm:::model_ptr(model)
  calls <- convlstm:::c_conv_calls(ptr, c(2, 5, 6, 6), TRUE, NULL, FALSE)
  expect_named(calls, c("layer", "half", "direction", "N", "C", "K", "kh", "kw", "dh", "dw",
                        "groups", "H", "W", "count"))
  n <- function(dir, layer, half) {
    on <- calls$direction == dir & calls$layer == layer & calls$half == half
    sum(calls$N[on] * calls$count[on])
  }
  # a plain step: each layer's input half over all 2 x 5 images forward and
  # in its filter gradient; the hidden half per step after the first
  for (l in 0:1) {
    expect_equal(n("forward", l, 0), 10)
    expect_equal(n("backward_filter", l, 0), 10)
    expect_equal(n("forward", l, 1), 8)
    expect_equal(n("backward_data", l, 1), 8)
  }
  expect_equal(n("backward_data", 0, 0), 0) # no gradient into x
  expect_equal(n("backward_data", 1, 0), 10)
  expect_true(all(calls$K[calls$layer == 1] == 16))
  # checkpointing runs the first segment forward twice; tbptt with a
  # last-state target runs only the last window backward
  opts <- function(...) convlstm:::check_step_options(..., batch_size = 2)
  ck <- convlstm:::c_conv_calls(ptr, c(2, 5, 6, 6), TRUE, opts(checkpoint = 3), FALSE)
  on <- ck$direction == "forward" & ck$layer == 0 & ck$half == 0
  expect_equal(sum(ck$N[on] * ck$count[on]), 16)
  tb <- convlstm:::c_conv_calls(ptr, c(2, 5, 6, 6), TRUE, opts(tbptt = 3), FALSE)
  on <- tb$direction == "backward_filter" & tb$layer == 0 & tb$half == 0
  expect_equal(sum(tb$N[on] * tb$count[on]), 4)
  inf <- convlstm:::c_conv_calls(ptr, c(2, 5, 6, 6), FALSE, NULL, FALSE)
  expect_setequal(inf$direction, "forward")
})

test_that("the cost model counts a joined layer's steps as its two halves' (CONVLSTM_JOIN=0)", {
  # 1 input channel beside 16 hidden: layer 1 joins its hidden half in
  # training (src/core/forward.c), one call a step over 17 channels; the
  # same model made with CONVLSTM_JOIN=0 runs the halves apart
  joined <- convlstm(1, c(16, 1), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(joined))
  withr_env <- Sys.getenv("CONVLSTM_JOIN", NA)
  Sys.setenv(CONVLSTM_JOIN = "0")
  apart <- tryCatch(convlstm(1, c(16, 1), 3, device = "cpu", threads = 1),
                    finally = if (is.na(withr_env)) Sys.unsetenv("CONVLSTM_JOIN") else
                      Sys.setenv(CONVLSTM_JOIN = withr_env))
  on.exit(convlstm_release(apart), add = TRUE)
  calls <- function(m) convlstm:::c_conv_calls(convlstm:::model_ptr(m), c(4L, 5L, 8L, 8L), TRUE,
                                              NULL, TRUE)
  on <- function(cl) cl$layer == 0 & cl$half == 1 & cl$direction == "forward"
  expect_true(all(calls(joined)$C[on(calls(joined))] == 17))
  expect_true(all(calls(apart)$C[on(calls(apart))] == 16))
  conf <- convlstm:::c_model_config(convlstm:::model_ptr(joined))
  cfg <- list(dtype = "float32", checkpoint = 0L, accumulation_steps = 1L, tbptt = 0L)
  work <- function(m) {
    convlstm:::step_work(convlstm:::model_ptr(m), conf, cfg, 4, 5, 8, 8, "sequence", "adam", 1)
  }
  # the same products and the same traffic; the joined weights are read
  # once a step instead of the halves' once a call
  expect_equal(work(joined)[["flops"]], work(apart)[["flops"]])
  expect_equal(work(joined)[["bytes"]], work(apart)[["bytes"]])
})
