# Bad input, round three (issue #29): by class, each test able to fail for
# the reason its name gives.
#  1. a failed call changes nothing (checks first, then changes);
#  2. nothing silent (float ranges, thresholds that are 0 as floats, options
#     a fit would ignore, typos in `...`, a schedule's floor);
#  3. no hang (files that are not regular are refused before open() blocks);
#  4. the locale (metadata numbers read whatever LC_NUMERIC says);
#  5. files keep their owners' intent (mode and owner of a replaced file);
#  6. paths checked when a fit begins (callbacks' files);
#  7. ctx$epoch in on_batch_end is the epoch running;
#  8. messages that name the right thing.

# A budget in which only a half type fits a batch of 2 of r3_data() on m: one
# byte less than the smallest float32 configuration the advisor plans (the
# model's state counted: Adam moments after a step, guard bands under
# CONVLSTM_GUARD=1), so the fit would convert the model.
r3_half_budget <- function(m, d) {
  # the fit slices batches of 2 from d's 4 samples (its data set does not
  # fit beside the step in such a budget): planned with them
  a <- convlstm_memory_advise(m, 2^40, 2L, 3L, 5L, 4L, optimizer = convlstm_optimizer_adam(0.01),
                              source = convlstm_source_arrays(d$x, d$y))
  budget <- min(a$reserved[a$dtype == "float32"]) - 1
  stopifnot(min(a$reserved[a$dtype != "float32"]) <= budget)
  budget
}

r3_data <- function(n = 4, T = 3) {
  set.seed(31)
  x <- api_x(B = n, T = T)
  list(x = x, y = api_y(B = n), y2 = api_y(B = n, T = 2))
}

# the model's whole observable state: weights, dtype, carried state
r3_snapshot <- function(m) {
  list(sd = convlstm_state_dict(m), dtype = m$dtype, carried = convlstm_carried_state(m))
}

# ---- 1. a failed call changes nothing ------------------------------------

r3_failing_fits <- list(
  "bogus loss" = list(loss = "bogus"),
  "callbacks not callbacks" = list(callbacks = "x"),
  "lr_scheduler of another optimizer" = list(lr_scheduler = "sched"),
  "resume a missing file" = list(resume = "missing")
)

for (what in names(r3_failing_fits)) {
  test_that(sprintf(
    "a fit with memory_budget and a %s changes neither dtype, weights nor carried state", what), {
    d <- r3_data()
    m <- api_model()
    opt <- convlstm_optimizer_adam(0.01)
    convlstm_train_step(m, d$x, d$y, opt, state = "carry") # a state is carried
    before <- r3_snapshot(m)
    expect_false(is.null(before$carried))
    args <- r3_failing_fits[[what]]
    if (identical(args$lr_scheduler, "sched")) args$lr_scheduler <- convlstm_lr_step(convlstm_optimizer_sgd(0.1), 2)
    if (identical(args$resume, "missing")) args$resume <- tempfile(fileext = ".safetensors")
    # a budget in which only a half type fits: the model would be converted
    budget <- r3_half_budget(m, d)
    err <- tryCatch(do.call(convlstm_fit, c(list(m, d$x, d$y, opt, epochs = 1, batch_size = 2,
                                                 memory_budget = budget, verbose = FALSE), args)),
                    error = identity)
    expect_s3_class(err, "convlstm_error_invalid")
    expect_identical(r3_snapshot(m), before)
    convlstm_release(m)
  })
}

test_that("the budget test above does pick another dtype (so it can see a conversion)", {
  d <- r3_data()
  m <- api_model()
  h <- convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 1, batch_size = 2,
                    memory_budget = r3_half_budget(m, d), verbose = FALSE)
  expect_false(identical(m$dtype, "float32"))
  convlstm_release(m)
})

test_that("a resume file with fit.epoch but not the rest is refused before its weights load", {
  d <- r3_data()
  src <- api_model()
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  # written as a user could before: convlstm_save() now refuses fit.* names
  convlstm:::c_model_save(convlstm:::model_ptr(src), path, NULL, c(fit.epoch = "1"))
  m <- api_model()
  before <- r3_snapshot(m)
  expect_false(identical(convlstm_state_dict(src), before$sd))
  seed <- .Random.seed
  err <- tryCatch(convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 2,
                               resume = path, verbose = FALSE), error = identity)
  expect_s3_class(err, "convlstm_error_invalid")
  expect_match(conditionMessage(err), "incomplete or damaged", fixed = TRUE)
  expect_identical(r3_snapshot(m), before)
  expect_identical(.Random.seed, seed)
  convlstm_release(m)
  convlstm_release(src)
})

test_that("a resume file with a damaged history or epoch is refused, the model unchanged", {
  d <- r3_data()
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  m <- api_model()
  h <- convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 1, batch_size = 2,
                    verbose = FALSE, callbacks = list(convlstm_callback_model_checkpoint(path)))
  meta <- convlstm_file_info(path)$all_metadata
  fit_meta <- meta[startsWith(names(meta), "fit.")]
  for (bad in list(c(fit.epoch = "x"), c(fit.epoch = "-1"), c(fit.rng_kind = "nonsense"),
                   c(fit.history = "nonsense"), c(fit.rng = "a,b"))) {
    m2 <- api_model()
    broken <- fit_meta
    broken[names(bad)] <- bad
    convlstm:::c_model_save(convlstm:::model_ptr(m2), path, convlstm_optimizer_adam(0.01), broken)
    target <- api_model()
    before <- r3_snapshot(target)
    err <- tryCatch(convlstm_fit(target, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 2,
                                 batch_size = 2, resume = path, verbose = FALSE),
                    error = identity)
    expect_s3_class(err, "convlstm_error_invalid")
    expect_identical(r3_snapshot(target), before, info = names(bad))
    convlstm_release(target)
    convlstm_release(m2)
  }
  convlstm_release(m)
})

test_that("a teacher_forcing schedule that fails at epoch 2 fails before epoch 1 trains", {
  d <- r3_data()
  m <- api_model()
  before <- r3_snapshot(m)
  for (tf in list(function(e) if (e == 2) 2 else 0.5, function(e) if (e == 2) stop("no") else 1,
                  function() 0.5)) {
    err <- tryCatch(convlstm_fit(m, d$x, d$y2, convlstm_optimizer_adam(), epochs = 2, batch_size = 2,
                                 horizon = 2, teacher_forcing = tf, verbose = FALSE),
                    error = identity)
    expect_s3_class(err, "convlstm_error_invalid")
    expect_match(conditionMessage(err), "`teacher_forcing`", fixed = TRUE)
    expect_identical(r3_snapshot(m), before)
  }
  convlstm_release(m)
})

test_that("convlstm_save() refuses the reserved fit.* metadata names and writes nothing", {
  m <- api_model()
  path <- tempfile(fileext = ".safetensors")
  expect_convlstm_error(convlstm_save(m, path, metadata = c(fit.epoch = "1")),
                        regexp = "fit.*", status = "invalid")
  expect_false(file.exists(path))
  convlstm_release(m)
})

# ---- 2. nothing silent ---------------------------------------------------

test_that("two finite values whose sum overflows are still beyond a float's range", {
  m <- api_model()
  x <- api_x()
  x[1:2] <- 1e308
  expect_convlstm_error(predict(m, x), regexp = "32-bit float's range")
  expect_convlstm_error(convlstm_train_step(m, x, api_y(), convlstm_optimizer_adam()), regexp = "`x`")
  convlstm_release(m)
})

test_that("a float16 model's forwards refuse inputs beyond 65504 instead of returning zeros", {
  m <- api_model(dtype = "float16")
  x <- api_x()
  x[3] <- 1e5
  expect_convlstm_error(predict(m, x), regexp = "float16's range")
  expect_convlstm_error(convlstm_evaluate(m, x, api_y()), regexp = "float16's range")
  expect_convlstm_error(m(x), regexp = "float16's range")
  expect_convlstm_error(convlstm_forward(m, x, training = FALSE), regexp = "float16's range")
  expect_convlstm_error(convlstm_fit(m, api_x(), api_y(), convlstm_optimizer_adam(), epochs = 1,
                                     validation_data = list(x, api_y()), verbose = FALSE),
                        regexp = "validation_data")
  # a training step skips the overflowing step and says so (test-reliability-float16.R)
  suppressWarnings(convlstm_train_step(m, x * 10, api_y(), convlstm_optimizer_adam()))
  expect_gte(convlstm_loss_scale(m)$skipped_steps, 1)
  x[3] <- 65504 # the largest float16: accepted
  expect_true(all(is.finite(predict(m, x))))
  convlstm_release(m)
})

test_that("max_grad_norm that is 0 or subnormal as a float is refused", {
  d <- r3_data()
  m <- api_model()
  before <- convlstm_state_dict(m)
  expect_convlstm_error(convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(0.1), max_grad_norm = 1e-300),
                        regexp = "`max_grad_norm`")
  expect_convlstm_error(convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(0.1), max_grad_norm = 1e-40),
                        regexp = "`max_grad_norm`")
  expect_convlstm_error(convlstm_fit(m, d$x, d$y, convlstm_optimizer_sgd(0.1), epochs = 1,
                                     max_grad_norm = 1e-300, verbose = FALSE),
                        regexp = "`max_grad_norm`")
  expect_identical(convlstm_state_dict(m), before)
  expect_true(is.finite(convlstm_train_step(m, d$x, d$y, convlstm_optimizer_sgd(0.1), max_grad_norm = 2^-126)))
  convlstm_release(m)
})

test_that("data_on_device = TRUE with a horizon or a weight is an error, not ignored", {
  d <- r3_data()
  m <- api_model()
  expect_convlstm_error(convlstm_fit(m, d$x, d$y2, convlstm_optimizer_adam(), epochs = 1, horizon = 2,
                                     data_on_device = TRUE, verbose = FALSE),
                        regexp = "`data_on_device = TRUE`")
  expect_convlstm_error(convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(), epochs = 1,
                                     weight = array(1, dim(d$y)), data_on_device = TRUE,
                                     verbose = FALSE), regexp = "a `weight`")
  convlstm_release(m)
})

test_that("a misspelt argument in `...` is refused, naming it, wherever a typo could pass", {
  d <- r3_data()
  m <- api_model()
  err <- tryCatch(predict(m, d$x, horizont = 3), error = identity)
  expect_s3_class(err, "convlstm_error_invalid")
  expect_match(conditionMessage(err), "`horizont`.*did you mean `horizon`")
  expect_convlstm_error(predict(m, d$x, "sequence", NULL, NULL, NULL, 3), regexp = "unnamed")
  expect_convlstm_error(generics::fit(m, d$x, d$y, convlstm_optimizer_adam(), epochz = 1), regexp = "`epochz`")
  expect_convlstm_error(generics::evaluate(m, d$x, d$y, batchsize = 1), regexp = "`batchsize`")
  expect_convlstm_error(summary(m, input_shape = c(2, 3, 2, 5, 4), chekpoint = 1),
                        regexp = "`chekpoint`")
  expect_convlstm_error(convlstm_max_batch_size(m, "1 MiB", 3, 5, 4, acumulation_steps = 2),
                        regexp = "`acumulation_steps`")
  # what is meant passes
  expect_equal(dim(predict(m, d$x, horizon = 2))[[2]], 2)
  expect_s3_class(summary(m, input_shape = c(2, 3, 2, 5, 4), checkpoint = 1),
                  "summary.convlstm_model")
  convlstm_release(m)
})

test_that("convlstm_sampling_schedule()'s min is the floor of every type", {
  for (type in c("inverse_sigmoid", "exponential", "linear")) {
    k <- if (type == "exponential") 0.5 else 2
    s <- convlstm_sampling_schedule(type, k = k, min = 0.5)
    expect_equal(min(s(1:200)), 0.5, info = type)
    expect_equal(s(1), 1 * (type != "inverse_sigmoid") + (type == "inverse_sigmoid") *
                   max(0.5, 2 / (2 + 1)), info = type)
  }
  # without a floor, the decay is the paper's
  expect_equal(convlstm_sampling_schedule("inverse_sigmoid", k = 2)(3), 2 / (2 + exp(1)))
})

# ---- 3. no hang ----------------------------------------------------------

test_that("a FIFO with no writer is refused by load, file_info and resume without blocking", {
  skip_on_os("windows")
  fifo <- tempfile()
  if (system2("mkfifo", fifo) != 0) skip("mkfifo failed")
  on.exit(unlink(fifo))
  # in another process, so that a regression hangs that process, not the suite
  code <- sprintf(paste(
    "suppressPackageStartupMessages(library(convlstm))",
    "f <- %s",
    "m <- convlstm(2, c(3, 2), 3, device = 'cpu')",
    "x <- array(runif(2 * 3 * 2 * 5 * 4), c(2, 3, 2, 5, 4)); y <- array(0, c(2, 2, 5, 4))",
    "r <- c(tryCatch({convlstm_load(f); 'loaded'}, convlstm_error_invalid = function(e) 'refused'),",
    "  tryCatch({convlstm_file_info(f); 'read'}, convlstm_error_invalid = function(e) 'refused'),",
    "  tryCatch({convlstm_fit(m, x, y, convlstm_optimizer_adam(), epochs = 1, resume = f, verbose = FALSE);",
    "  'resumed'}, convlstm_error_invalid = function(e) 'refused'))",
    "cat(r)", sep = "\n"), deparse(fifo))
  script <- tempfile(fileext = ".R")
  writeLines(code, script)
  on.exit(unlink(script), add = TRUE)
  t0 <- proc.time()[["elapsed"]]
  out <- suppressWarnings(system2("timeout", c("60", file.path(R.home("bin"), "Rscript"), script),
                                  stdout = TRUE, stderr = FALSE,
                                  env = paste0("R_LIBS=", paste(.libPaths(), collapse = ":"))))
  expect_lt(proc.time()[["elapsed"]] - t0, 55)
  expect_identical(out, "refused refused refused")
})

test_that("a directory or a device is refused by convlstm_load() with a classed error", {
  expect_convlstm_error(convlstm_load(tempdir()), regexp = "`path`")
  skip_if_not(file.exists("/dev/null"))
  expect_convlstm_error(convlstm_file_info("/dev/null"), regexp = "device")
})

# ---- 4. the locale -------------------------------------------------------

# A locale whose decimal point is a comma: one the system has, or one built
# with localedef into a temporary LOCPATH. NULL when neither can be had.
comma_locale <- function() {
  for (name in c("de_DE.UTF-8", "de_DE.utf8", "fr_FR.UTF-8", "fr_FR.utf8")) {
    ok <- suppressWarnings(Sys.setlocale("LC_NUMERIC", name))
    Sys.setlocale("LC_NUMERIC", "C")
    if (nzchar(ok)) return(list(name = name, env = character()))
  }
  if (!nzchar(Sys.which("localedef"))) return(NULL)
  dir <- tempfile("locale")
  dir.create(dir)
  st <- suppressWarnings(system2("localedef", c("-i", "de_DE", "-f", "UTF-8",
                                                file.path(dir, "de_DE.UTF-8")),
                                 stdout = FALSE, stderr = FALSE))
  if (st != 0 || !dir.exists(file.path(dir, "de_DE.UTF-8"))) return(NULL)
  list(name = "de_DE.UTF-8", env = paste0("LOCPATH=", dir))
}

test_that("with a comma decimal point in LC_NUMERIC, files with fractional metadata load", {
  skip_on_os("windows")
  loc <- comma_locale()
  if (is.null(loc)) skip("no locale with a decimal comma, and none could be built")
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  m <- api_model()
  convlstm_save(m, path, optimizer = convlstm_optimizer_adam(lr = 0.0125, betas = c(0.85, 0.975)))
  convlstm_release(m)
  code <- sprintf(paste(
    "suppressPackageStartupMessages(library(convlstm))",
    "stopifnot(nzchar(suppressWarnings(Sys.setlocale('LC_NUMERIC', %s))))",
    "stopifnot(Sys.localeconv()[['decimal_point']] == ',')",
    "m <- convlstm_load(%s, device = 'cpu')",
    "o <- attr(m, 'optimizer')",
    "t <- convlstm_load(system.file('extdata', 'tutorial.safetensors', package = 'convlstm'),",
    "                   device = 'cpu')",
    "Sys.setlocale('LC_NUMERIC', 'C')",
    "cat(sprintf('%%.17g', c(o$lr, o$betas)), sep = ' ')", sep = "\n"),
    deparse(loc$name), deparse(path))
  # the values as read in the C locale, here
  m <- convlstm_load(path, device = "cpu")
  o <- attr(m, "optimizer")
  want <- paste(sprintf("%.17g", c(o$lr, o$betas)), collapse = " ")
  convlstm_release(m)
  script <- tempfile(fileext = ".R")
  writeLines(code, script)
  on.exit(unlink(script), add = TRUE)
  out <- suppressWarnings(system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE,
                                  stderr = TRUE,
                                  env = c(loc$env, paste0("R_LIBS=", paste(.libPaths(),
                                                                          collapse = ":")))))
  expect_identical(out[length(out)], want, info = paste(out, collapse = "\n"))
})

# ---- 5. files keep their owners' intent ----------------------------------

test_that("saving over a 0600 checkpoint keeps it 0600 (and its owner, where allowed)", {
  skip_on_os("windows")
  m <- api_model()
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  convlstm_save(m, path)
  Sys.chmod(path, "600", use_umask = FALSE)
  convlstm_save(m, path, optimizer = convlstm_optimizer_adam())
  expect_identical(format(file.info(path)$mode), "600")
  Sys.chmod(path, "640", use_umask = FALSE)
  h <- convlstm_fit(m, r3_data()$x, r3_data()$y, convlstm_optimizer_adam(), epochs = 1, verbose = FALSE,
                    callbacks = list(convlstm_callback_model_checkpoint(path)))
  expect_identical(format(file.info(path)$mode), "640")
  # a new file: the umask's mode, as before
  fresh <- tempfile(fileext = ".safetensors")
  on.exit(unlink(fresh), add = TRUE)
  convlstm_save(m, fresh)
  expect_identical(file.info(fresh)$mode, as.octmode(bitwAnd(0x1b6, bitwNot(Sys.umask()))))
  # root may give the file to another user: it stays theirs
  if (identical(unname(Sys.info()[["effective_user"]]), "root") &&
      system2("chown", c("65534:65534", path)) == 0) {
    convlstm_save(m, path)
    expect_identical(file.info(path)$uid, 65534L)
    expect_identical(format(file.info(path)$mode), "640")
  }
  convlstm_release(m)
})

# ---- 6. paths checked when a fit begins ----------------------------------

# A directory this process cannot make files in: /proc (even for root).
r3_unwritable_dir <- function() {
  if (dir.exists("/proc/self") && !file.create("/proc/convlstm-probe", showWarnings = FALSE)) {
    return("/proc")
  }
  NULL
}

test_that("convlstm_callback_model_checkpoint() into an unwritable directory fails before training", {
  dir <- r3_unwritable_dir()
  if (is.null(dir)) skip("no unwritable directory")
  d <- r3_data()
  m <- api_model()
  before <- r3_snapshot(m)
  err <- tryCatch(convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(), epochs = 3,
                               memory_budget = r3_half_budget(m, d),
                               verbose = FALSE,
                               callbacks = list(convlstm_callback_model_checkpoint(
                                 file.path(dir, "ckpt-{epoch}.safetensors")))),
                  error = identity)
  expect_s3_class(err, "convlstm_error_invalid")
  expect_match(conditionMessage(err), "convlstm_callback_model_checkpoint() cannot write", fixed = TRUE)
  expect_identical(r3_snapshot(m), before) # nothing trained, nothing converted
  expect_convlstm_error(convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, verbose = FALSE,
                                     callbacks = list(convlstm_callback_model_checkpoint(
                                       file.path(tempfile(), "m.safetensors")))),
                        regexp = "does not exist")
  expect_identical(r3_snapshot(m), before)
  convlstm_release(m)
})

test_that("convlstm_callback_csv_logger() into an unwritable directory is a classed error before training", {
  dir <- r3_unwritable_dir()
  if (is.null(dir)) skip("no unwritable directory")
  d <- r3_data()
  m <- api_model()
  before <- convlstm_state_dict(m)
  err <- tryCatch(convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, verbose = FALSE,
                               callbacks = list(convlstm_callback_csv_logger(file.path(dir, "h.csv")))),
                  error = identity)
  expect_s3_class(err, "convlstm_error_invalid")
  expect_match(conditionMessage(err), "convlstm_callback_csv_logger() cannot write", fixed = TRUE)
  expect_identical(convlstm_state_dict(m), before)
  convlstm_release(m)
})

test_that("a CSV log that cannot be written mid-fit is a classed error naming the callback", {
  d <- r3_data()
  m <- api_model()
  dir <- tempfile()
  dir.create(dir)
  path <- file.path(dir, "h.csv")
  gone <- convlstm_callback(on_epoch_end = function(ctx) unlink(dir, recursive = TRUE))
  err <- tryCatch(convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(), epochs = 2, verbose = FALSE,
                               callbacks = list(gone, convlstm_callback_csv_logger(path))),
                  error = identity)
  expect_s3_class(err, "convlstm_error_invalid")
  expect_match(conditionMessage(err), "convlstm_callback_csv_logger()", fixed = TRUE)
  convlstm_release(m)
})

# ---- 7. ctx$epoch in on_batch_end ----------------------------------------

test_that("ctx$epoch in on_batch_end is the epoch the step belongs to", {
  d <- r3_data()
  m <- api_model()
  seen <- integer()
  cb <- convlstm_callback(on_batch_end = function(ctx) seen <<- c(seen, ctx$epoch))
  ends <- integer()
  cb_end <- convlstm_callback(on_fit_end = function(ctx) ends <<- ctx$epoch)
  h <- convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(), epochs = 2, batch_size = 2, shuffle = FALSE,
                    verbose = FALSE, callbacks = list(cb, cb_end))
  expect_identical(seen, c(1L, 1L, 2L, 2L))
  expect_identical(ends, 2L)
  convlstm_release(m)
})

test_that("a checkpoint saved mid-epoch holds the last complete epoch, and resumes from it", {
  d <- r3_data()
  m <- api_model()
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  mid <- convlstm_callback(on_batch_end = function(ctx) {
    if (ctx$epoch == 2 && ctx$batch == 1) ctx$save_checkpoint(path)
  })
  h <- convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(), epochs = 2, batch_size = 2, verbose = FALSE,
                    callbacks = list(mid))
  expect_identical(convlstm_file_info(path)$metadata[["fit.epoch"]], "1")
  m2 <- api_model()
  h2 <- convlstm_fit(m2, d$x, d$y, convlstm_optimizer_adam(), epochs = 2, batch_size = 2,
                     verbose = FALSE, resume = path)
  expect_identical(h2$epoch, 1:2)
  convlstm_release(m)
  convlstm_release(m2)
})

# ---- 8. messages that name the right thing -------------------------------

test_that("a logical weight mask is a mask (TRUE 1, FALSE 0), not a complaint about dims", {
  d <- r3_data()
  mask <- array(c(TRUE, FALSE), dim(d$y))
  m1 <- api_model()
  sd <- convlstm_state_dict(m1)
  m2 <- api_model()
  convlstm_load_state_dict(m2, sd)
  l1 <- convlstm_train_step(m1, d$x, d$y, convlstm_optimizer_sgd(0.1), weight = mask)
  l2 <- convlstm_train_step(m2, d$x, d$y, convlstm_optimizer_sgd(0.1), weight = mask * 1)
  expect_identical(l1, l2)
  expect_convlstm_error(convlstm_train_step(m1, d$x, d$y, convlstm_optimizer_sgd(0.1), weight = "a"),
                        regexp = "numeric \\(or logical\\)", status = "invalid")
  convlstm_release(m1)
  convlstm_release(m2)
})

test_that("convlstm(1, integer(0), 3) blames hidden_dims, not n_layers", {
  err <- tryCatch(convlstm(1, integer(0), 3, device = "cpu"), error = identity)
  expect_s3_class(err, "convlstm_error_invalid")
  expect_match(conditionMessage(err), "`hidden_dims`", fixed = TRUE)
  expect_no_match(conditionMessage(err), "n_layers", fixed = TRUE)
})

test_that("a resume into another architecture describes the file and the model apart", {
  d <- r3_data()
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path))
  m <- api_model()
  h <- convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(), epochs = 1, verbose = FALSE,
                    callbacks = list(convlstm_callback_model_checkpoint(path)))
  other <- api_model(hidden_dims = c(4, 2))
  before <- r3_snapshot(other)
  err <- tryCatch(convlstm_fit(other, d$x, d$y, convlstm_optimizer_adam(), epochs = 2, verbose = FALSE,
                               resume = path), error = identity)
  expect_s3_class(err, "convlstm_error_invalid")
  expect_match(conditionMessage(err), "the file: input 2, hidden 3-2", fixed = TRUE)
  expect_match(conditionMessage(err), "the model: input 2, hidden 4-2", fixed = TRUE)
  expect_identical(r3_snapshot(other), before)
  convlstm_release(m)
  convlstm_release(other)
})
