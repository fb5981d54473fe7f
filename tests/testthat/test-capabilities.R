# test-capabilities.R -- the capability table (src/core/capability.c,
# convlstm_capabilities()) against every R entry point that takes its options:
# convlstm_train_step(), convlstm_fit(), convlstm_memory_estimate(), convlstm_max_batch_size(),
# convlstm_memory_advise(), convlstm_data() and the forward. For each row refused for a
# kind of model, every entry point that can ask for the option refuses it with
# class convlstm_error_unsupported and exactly the row's reason as its message;
# for each supported row, every such entry point accepts it. Which options an
# encoder-forecaster refuses today is written out here by hand (issue 34 turns
# them on row by row: this list and the table must then change together; the
# fit loop's rows, callbacks to metrics, are on: one loop for every model).

# the rows an encoder-forecaster refuses today (issue 33's list, from the code
# before the table: call.c, model.c, forward.c, data.c and R's copies)
forecaster_refuses <- c(
  "tbptt", "horizon", "teacher_forcing < 1 (free running)", "state = given",
  "state = carry", "target = last_state", "peephole = position",
  "separate forward/backward"
)

# A model of each kind with the arrays of a step: a plain stack of hidden 1
# (= input channels, so that a horizon feeds frames back), an
# encoder-forecaster of one layer per stack, patch 2; frames 4 x 4, 3 steps,
# 2 sequences; y the default target (plain: the last state; forecaster: 2
# frames), yh a horizon's 2 frames.
cap_setup <- function(kind) {
  set.seed(3)
  model <- if (kind == "encoder_forecaster") {
    convlstm_forecaster(1, 1, 3, patch = 2, device = "cpu", threads = 1)
  } else {
    convlstm(1, 1, 3, device = "cpu", threads = 1,
             head = if (kind == "convlstm_head") "top" else "none")
  }
  x <- array(runif(2 * 3 * 16), dim = c(2, 3, 1, 4, 4))
  yh <- array(runif(2 * 2 * 16), dim = c(2, 2, 1, 4, 4))
  seq <- array(runif(2 * 3 * 16), dim = c(2, 3, 1, 4, 4))
  # the default target: the last state, a forecaster's frames, a head's sequence
  y <- switch(kind, convlstm = array(runif(2 * 16), dim = c(2, 1, 4, 4)),
              encoder_forecaster = yh, convlstm_head = seq)
  list(model = model, x = x, y = y, yh = yh, seq = seq,
       h = if (kind == "encoder_forecaster") 2 else 0, kind = kind)
}

# Per option, the calls that ask for it (each a function of cap_setup()'s
# list); NULL where no R entry point asks it of that kind (no R call asks
# for dropout masks alone:
# test_core_capability.c checks the core's refusals; a resume reads the
# checkpoint a fit of one epoch wrote).
cap_calls <- function(option, s) {
  m <- s$model
  x <- s$x
  y <- s$y
  h <- s$h
  opt <- convlstm_optimizer_sgd(0)
  plan <- function(...) convlstm_memory_estimate(m, 2, 3, 4, 4, horizon = h, ...)
  most <- function(...) convlstm_max_batch_size(m, 3, 4, 4, budget = "1 GiB", horizon = h, ...)
  fit <- function(...) convlstm_fit(m, x, y, opt, epochs = 1, verbose = FALSE, ...)
  step <- function(...) convlstm_train_step(m, x, y, opt, ...)
  fc <- s$kind == "encoder_forecaster"
  sq <- s$kind != "convlstm" # trains on a sequence target by default
  head <- if (s$kind == "convlstm_head") "top" else "none"
  switch(option,
    "dtype = float16/bfloat16 training" = list(
      train_step = function() {
        convlstm_set_dtype(m, "float16")
        on.exit(convlstm_set_dtype(m, "float32"))
        convlstm_train_step(m, x, y, opt)
      },
      memory_estimate = function() plan(dtype = "float16"),
      max_batch_size = function() most(dtype = "bfloat16")),
    checkpoint = list(train_step = function() step(checkpoint = 2),
                      convlstm_fit = function() fit(checkpoint = 2),
                      memory_estimate = function() plan(checkpoint = 2),
                      max_batch_size = function() most(checkpoint = 2)),
    tbptt = list(train_step = function() step(tbptt = 2), convlstm_fit = function() fit(tbptt = 2),
                 memory_estimate = function() plan(tbptt = 2),
                 max_batch_size = function() most(tbptt = 2)),
    recompute_gates = list(train_step = function() step(recompute_gates = TRUE),
                           convlstm_fit = function() fit(recompute_gates = TRUE),
                           memory_estimate = function() plan(recompute_gates = TRUE),
                           max_batch_size = function() most(recompute_gates = TRUE)),
    accumulation_steps = list(train_step = function() step(accumulation_steps = 2),
                              convlstm_fit = function() fit(accumulation_steps = 2),
                              memory_estimate = function() plan(accumulation_steps = 2),
                              max_batch_size = function() most(accumulation_steps = 2)),
    horizon = list(train_step = function() convlstm_train_step(m, x, s$yh, opt, horizon = 2),
                   convlstm_fit = function() convlstm_fit(m, x, s$yh, opt, epochs = 1,
                                                          verbose = FALSE, horizon = 2)),
    "teacher_forcing < 1 (free running)" = list(
      train_step = function() convlstm_train_step(m, x, s$yh, opt, horizon = if (!fc) 2,
                                         teacher_forcing = FALSE),
      convlstm_fit = function() convlstm_fit(m, x, s$yh, opt, epochs = 1, verbose = FALSE,
                                             horizon = if (!fc) 2, teacher_forcing = 0.5),
      memory_estimate = function() convlstm_memory_estimate(m, 2, 3, 4, 4, horizon = 2,
                                                   teacher_forcing = FALSE),
      max_batch_size = function() convlstm_max_batch_size(m, 3, 4, 4, budget = "1 GiB", horizon = 2,
                                                 teacher_forcing = FALSE),
      memory_advise = function() convlstm_memory_advise(m, "1 GiB", 2, 3, 4, 4, horizon = 2,
                                               teacher_forcing = FALSE)),
    "state = given" = list(
      train_step = function() step(state = list(list(h = array(0, c(2, 1, 4, 4)),
                                                     c = array(0, c(2, 1, 4, 4))))),
      memory_estimate = function() plan(state = "given")),
    "state = carry" = list(train_step = function() step(state = "carry"),
                           convlstm_fit = function() fit(state = "carry", shuffle = FALSE),
                           memory_estimate = function() plan(state = "carry")),
    weight = list(train_step = function() step(weight = array(1, dim(y))),
                  convlstm_fit = function() fit(weight = array(1, dim(y))),
                  memory_estimate = function() plan(weight = if (sq) "sequence" else "last_state")),
    "target = last_state" = list(
      train_step = function() convlstm_train_step(m, x, array(0, c(2, 1, 4, 4)), opt, target = "last_state"),
      convlstm_fit = function() convlstm_fit(m, x, array(0, c(2, 1, 4, 4)), opt, epochs = 1,
                                             verbose = FALSE, target = "last_state"),
      memory_estimate = function() plan(target = "last_state"),
      max_batch_size = function() most(target = "last_state"),
      memory_advise = function() convlstm_memory_advise(m, "1 GiB", 2, 3, 4, 4, horizon = h,
                                               target = "last_state")),
    dropout_masks = NULL,
    dropout = if (!fc) list(convlstm = function() {
      d <- convlstm(1, 1, 3, dropout = 0.2, device = "cpu", threads = 1, head = head)
      convlstm_release(d)
    }) else list(convlstm_forecaster = function() {
      d <- convlstm_forecaster(1, 1, 3, patch = 2, dropout = 0.2, recurrent_dropout = 0.1,
                               device = "cpu", threads = 1)
      on.exit(convlstm_release(d))
      convlstm_train_step(d, x, y, opt)
    }),
    "peephole = position" = if (!fc) list(convlstm = function() {
      p <- convlstm(1, 1, 3, peephole = "position", frame_size = c(4, 4), device = "cpu",
                    threads = 1, head = head)
      convlstm_release(p)
    }) else list(convlstm_forecaster = function() {
      convlstm_forecaster(1, 1, 3, patch = 2, peephole = "position", device = "cpu")
    }),
    "data parallel" = list(memory_estimate = function() plan(world_size = 2),
                           max_batch_size = function() most(world_size = 2)),
    "data set on the device (convlstm_data)" = list(
      convlstm_data = function() convlstm_data(m, x, y, target = if (sq) "sequence" else "last_state"),
      convlstm_fit = function() fit(data_on_device = TRUE)),
    "separate forward/backward" = list(convlstm_forward = function() convlstm_forward(m, x)),
    callbacks = list(convlstm_fit = function() {
      fit(callbacks = list(convlstm_callback_early_stopping(monitor = "loss", patience = 1)))
    }),
    lr_scheduler = list(convlstm_fit = function() fit(lr_scheduler = convlstm_lr_step(opt, step_size = 1))),
    validation_split = list(convlstm_fit = function() fit(validation_split = 0.5, batch_size = 1)),
    resume = list(convlstm_fit = function() {
      path <- tempfile(fileext = ".safetensors")
      on.exit(unlink(path))
      fit(callbacks = list(convlstm_callback_model_checkpoint(path)))
      convlstm_fit(m, x, y, opt, epochs = 2, verbose = FALSE, resume = path)
    }),
    memory_budget = list(convlstm_fit = function() fit(memory_budget = "1 GiB")),
    metrics = list(convlstm_fit = function() {
      fit(metrics = "mse", validation_data = list(x, y))
    }),
    stop("no calls for option ", option)
  )
}

test_that("the table lists every option once per kind, and an encoder-forecaster refuses today's list", {
  caps <- convlstm_capabilities()
  expect_s3_class(caps, "data.frame")
  expect_identical(names(caps), c("option", "model", "supported", "status", "reason"))
  expect_setequal(unique(caps$model), c("convlstm", "encoder_forecaster", "convlstm_head"))
  expect_false(anyDuplicated(caps[c("option", "model")]) > 0)
  for (o in unique(caps$option)) expect_identical(sum(caps$option == o), 3L)
  hd <- caps[caps$model == "convlstm_head", ]
  expect_setequal(hd$option[!hd$supported], c("teacher_forcing < 1 (free running)",
                                              "target = last_state", "separate forward/backward"))
  expect_true(all(caps$supported[caps$model == "convlstm"]))
  fc <- caps[caps$model == "encoder_forecaster", ]
  expect_setequal(fc$option[!fc$supported], forecaster_refuses)
  expect_identical(caps$status, ifelse(caps$supported, "ok", "unsupported"))
  expect_identical(caps$reason == "", caps$supported)
})

test_that("a refused row: every entry point refuses it with its class and exactly its reason", {
  caps <- convlstm_capabilities()
  refused <- caps[!caps$supported, ]
  for (i in seq_len(nrow(refused))) {
    s <- cap_setup(refused$model[[i]])
    calls <- cap_calls(refused$option[[i]], s)
    for (entry in names(calls)) {
      e <- tryCatch({
        calls[[entry]]()
        NULL
      }, error = function(e) e)
      label <- sprintf("%s of %s through %s", refused$option[[i]], refused$model[[i]], entry)
      expect_s3_class(e, "convlstm_error_unsupported")
      expect_identical(conditionMessage(e), refused$reason[[i]], label = label)
    }
    convlstm_release(s$model)
  }
})

test_that("a supported row: every entry point accepts it", {
  caps <- convlstm_capabilities()
  taken <- caps[caps$supported, ]
  for (i in seq_len(nrow(taken))) {
    s <- cap_setup(taken$model[[i]])
    calls <- cap_calls(taken$option[[i]], s)
    for (entry in names(calls)) {
      e <- tryCatch({
        calls[[entry]]()
        NULL
      }, error = function(e) e)
      expect_null(e, label = sprintf("%s of %s through %s: %s", taken$option[[i]],
                                     taken$model[[i]], entry,
                                     if (!is.null(e)) conditionMessage(e) else ""))
    }
    convlstm_release(s$model)
  }
})

test_that("convlstm_memory_advise() offers an encoder-forecaster nothing its training refuses", {
  s <- cap_setup("encoder_forecaster")
  on.exit(convlstm_release(s$model))
  advice <- convlstm_memory_advise(s$model, "1 GiB", 2, 3, 4, 4, horizon = 2, allow_tbptt = TRUE)
  # no tbptt (refused); float16, bfloat16, micro-batches, checkpoint and
  # recomputed gates (supported) among the configurations
  expect_true(all(advice$tbptt == 0))
  expect_true(any(advice$checkpoint > 0) && any(advice$recompute_gates > 0))
  expect_true(all(c("float16", "bfloat16") %in% advice$dtype))
  expect_true(any(advice$accumulation_steps > 1))
  # and each configuration offered trains
  for (i in seq_len(nrow(advice))) {
    convlstm_set_dtype(s$model, advice$dtype[[i]])
    loss <- convlstm_train_step(s$model, s$x, s$y, convlstm_optimizer_adam(),
                                accumulation_steps = advice$accumulation_steps[[i]])
    expect_true(is.finite(loss), label = paste(advice$dtype[[i]], advice$accumulation_steps[[i]]))
  }
})

test_that("the default convlstm_memory_estimate() is what a default convlstm_train_step() holds (random hidden sizes)", {
  set.seed(33)
  for (i in 1:6) {
    layers <- sample(1:2, 1)
    hidden <- sample(1:9, layers, replace = TRUE)
    B <- sample(1:3, 1)
    T <- sample(2:4, 1)
    H <- sample(3:6, 1)
    W <- sample(3:6, 1)
    m <- convlstm(2, hidden, 3, device = "cpu", threads = 1)
    est <- convlstm_memory_estimate(m, B, T, H, W, optimizer = convlstm_optimizer_adam())
    planned <- est$bytes[est$category == "reserved"]
    x <- array(runif(B * T * 2 * H * W), dim = c(B, T, 2, H, W))
    y <- array(runif(B * hidden[[layers]] * H * W), dim = c(B, hidden[[layers]], H, W))
    convlstm_train_step(m, x, y, convlstm_optimizer_adam()) # the default target: the last state
    held <- convlstm_memory_stats(m)$peak_reserved # the executor's allocations, at their peak
    expect_identical(planned, held,
                     label = sprintf("plan of hidden %s, B %d, T %d, %dx%d",
                                     paste(hidden, collapse = "-"), B, T, H, W))
    convlstm_release(m)
  }
})
