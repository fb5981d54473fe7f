# tools/sweep_round3.R -- an adversarial sweep of the newest features
# (forecasting horizons, scheduled sampling, per-gate dropout, peepholes,
# memory_budget, resume, callbacks, files, and the classes of issue #29),
# every case in a fresh R process under a timeout.
#
#   Rscript tools/sweep_round3.R [out.csv]      # the runner: all cases, 2 at a time
#
# Each case is one call with what it must do: "error" (a classed
# convlstm_error whose message matches the pattern), "accept" (it returns,
# and the check on what it returned holds) or "either" (a damaged file that
# may still be valid: a classed error or a correct load). The child process
# snapshots the model (weights, dtype, carried state) and the shared fixture
# files before the call and compares after it. Outcomes:
#   clear_error     expected error, classed, message names the thing
#   unclear_error   an error, but unclassed or its message lacks the name
#   correct_accept  expected accept, and the result checks out
#   false_refusal   expected accept, but an error
#   silent_accept   expected error, but the call returned
#   corruption      the model or a shared file changed on a failed call, the
#                   model no longer trains, or an accepted result is wrong
#   crash           the process died without a result
#   hang            the process ran past the timeout (60 s)
# The runner prints a table by family and in all, and writes every case's
# row to out.csv (default: sweep_round3.csv in the working directory).

args <- commandArgs(trailingOnly = TRUE)

# ---- the fixtures every child reads (made once by the runner) ----------

make_fixtures <- function(dir) {
  suppressPackageStartupMessages(library(convlstm))
  set.seed(2)
  new_model <- function(h = c(3, 2)) convlstm(2, h, 3, device = "cpu", threads = 1)
  x <- array(runif(4 * 3 * 2 * 5 * 4, -1, 1), c(4, 3, 2, 5, 4))
  y <- array(runif(4 * 2 * 5 * 4, -1, 1), c(4, 2, 5, 4))
  m <- new_model()
  opt <- convlstm_optimizer_adam(0.01)
  ckpt <- file.path(dir, "ckpt.safetensors")
  h <- convlstm_fit(m, x, y, opt, epochs = 1, batch_size = 2, verbose = FALSE,
                    callbacks = list(convlstm_callback_model_checkpoint(ckpt)))
  sched <- file.path(dir, "ckpt_sched.safetensors")
  h <- convlstm_fit(new_model(), x, y, opt, epochs = 1, batch_size = 2, verbose = FALSE,
                    lr_scheduler = convlstm_lr_step(opt, step_size = 1),
                    callbacks = list(convlstm_callback_model_checkpoint(sched)))
  other <- file.path(dir, "ckpt_other.safetensors")
  h <- convlstm_fit(new_model(c(4, 2)), x, y, opt, epochs = 1, batch_size = 2, verbose = FALSE,
                    callbacks = list(convlstm_callback_model_checkpoint(other)))
  convlstm_save(m, file.path(dir, "plain.safetensors"), optimizer = opt)
  meta <- convlstm_file_info(ckpt)$all_metadata
  fit_meta <- meta[startsWith(names(meta), "fit.")]
  damaged <- list(epoch_x = c(fit.epoch = "x"), epoch_neg = c(fit.epoch = "-1"),
                  epoch_frac = c(fit.epoch = "1.5"), rng_kind = c(fit.rng_kind = "bogus,a,b"),
                  rng = c(fit.rng = "1,a,3"), history = c(fit.history = "nonsense"),
                  history_long = c(fit.epoch = "0"))
  for (name in names(damaged)) {
    v <- fit_meta
    v[names(damaged[[name]])] <- damaged[[name]]
    convlstm:::c_model_save(convlstm:::model_ptr(m), file.path(dir, paste0("dmg_", name,
                            ".safetensors")), opt, v)
  }
  convlstm:::c_model_save(convlstm:::model_ptr(m), file.path(dir, "dmg_only_epoch.safetensors"),
                          opt, c(fit.epoch = "1"))
  v <- fit_meta
  v[["fit.scheduler_kind"]] <- "step"
  v[["fit.scheduler"]] <- "last_epoch=1"
  convlstm:::c_model_save(convlstm:::model_ptr(m), file.path(dir, "dmg_sched.safetensors"),
                          opt, v)
  writeBin(raw(0), file.path(dir, "empty.safetensors"))
  writeBin(as.raw(sample(0:255, 4096, TRUE)), file.path(dir, "random.safetensors"))
  bytes <- readBin(ckpt, "raw", file.size(ckpt))
  writeBin(bytes[1:200], file.path(dir, "truncated.safetensors"))
  flip <- bytes
  flip[length(flip) - 10] <- as.raw(0xff) # a weight's byte: NaN/Inf or another value
  writeBin(flip, file.path(dir, "flipped.safetensors"))
  writeLines("not a model", file.path(dir, "text.safetensors"))
  system2("mkfifo", file.path(dir, "fifo"))
  dir.create(file.path(dir, "adir"))
  invisible(dir)
}

# ---- a child: one case ---------------------------------------------------

child_env <- function(dir) {
  suppressPackageStartupMessages(library(convlstm))
  e <- new.env()
  set.seed(3)
  e$dir <- dir
  e$fx <- function(name) file.path(dir, name)
  e$new_model <- function(h = c(3, 2), ...) convlstm(2, h, 3, device = "cpu", threads = 1, ...)
  e$m <- e$new_model()
  e$x <- array(runif(4 * 3 * 2 * 5 * 4, -1, 1), c(4, 3, 2, 5, 4))
  e$y <- array(runif(4 * 2 * 5 * 4, -1, 1), c(4, 2, 5, 4))
  e$ys <- array(runif(4 * 3 * 2 * 5 * 4, -1, 1), c(4, 3, 2, 5, 4))
  e$y2 <- array(runif(4 * 2 * 2 * 5 * 4, -1, 1), c(4, 2, 2, 5, 4))
  e$opt <- convlstm_optimizer_adam(0.01)
  # the frames a horizon h needs (y2 when h is not a usable horizon)
  e$frames <- function(h) {
    ok <- is.numeric(h) && length(h) == 1 && is.finite(h) && h >= 1 && h <= 5 && h == round(h)
    if (ok) array(runif(4 * h * 2 * 5 * 4), c(4, h, 2, 5, 4)) else e$y2
  }
  e$fit1 <- function(..., epochs = 1, batch_size = 2, verbose = FALSE) {
    convlstm_fit(e$m, e$x, e$y, e$opt, epochs = epochs, batch_size = batch_size,
                 verbose = verbose, ...)
  }
  e$fit2 <- function(...) convlstm_fit(e$m, e$x, e$y2, e$opt, epochs = 2, batch_size = 2,
                                       horizon = 2, verbose = FALSE, ...)
  e$finite <- function(v) is.numeric(v) && length(v) > 0 && all(is.finite(unlist(v)))
  e$hist_ok <- function(h) inherits(h, "convlstm_history") && e$finite(h$loss)
  e
}

snapshot <- function(e) {
  list(sd = convlstm::convlstm_state_dict(e$m), dtype = e$m$dtype,
       carried = convlstm::convlstm_carried_state(e$m))
}

fixture_sums <- function(dir) {
  files <- list.files(dir, full.names = TRUE)
  files <- files[!dir.exists(files) & !grepl("fifo$", files)]
  tools::md5sum(files)
}

run_child <- function(case, dir) {
  e <- child_env(dir)
  if (!is.null(case$setup)) eval(parse(text = case$setup), e)
  before <- snapshot(e)
  sums <- fixture_sums(dir)
  res <- tryCatch(list(value = eval(parse(text = case$code), e)), error = function(err) err)
  failed <- inherits(res, "error")
  changed <- !identical(fixture_sums(dir), sums) ||
    (failed && !isTRUE(case$changes_ok) && !identical(snapshot(e), before))
  trains <- tryCatch(is.finite(convlstm::convlstm_train_step(e$m, e$x, e$y, e$opt)) ||
                       !identical(e$m$dtype, "float32"), error = function(err) FALSE)
  msg <- if (failed) gsub("[\t\n]", " ", conditionMessage(res)) else ""
  outcome <- if (changed || !trains) {
    "corruption"
  } else if (case$expect == "error" || (case$expect == "either" && failed)) {
    if (!failed) {
      "silent_accept"
    } else if ((inherits(res, "convlstm_error") || isTRUE(case$users_own)) &&
               (is.null(case$pattern) || grepl(case$pattern, msg))) {
      "clear_error"
    } else {
      "unclear_error"
    }
  } else if (failed) {
    "false_refusal"
  } else {
    ok <- if (is.null(case$check)) TRUE else {
      e$.value <- res$value
      isTRUE(tryCatch(eval(parse(text = case$check), e), error = function(err) FALSE))
    }
    if (ok) "correct_accept" else "corruption"
  }
  cat(sprintf("RESULT\t%s\t%s\n", outcome, substr(msg, 1, 300)))
}

# ---- the cases -----------------------------------------------------------

cases <- list()
# changes_ok: a failure that may leave the model trained (an error raised
# by the user's own callback after an epoch, as an interrupt would);
# users_own: the error is the user's own condition, which must come through
# unchanged (its class is the user's, the message matches `pattern`)
add <- function(family, label, code, expect, pattern = NULL, check = NULL, setup = NULL,
                changes_ok = FALSE, users_own = FALSE) {
  cases[[length(cases) + 1L]] <<- list(family = family, label = label, code = code,
                                      expect = expect, pattern = pattern, check = check,
                                      setup = setup, changes_ok = changes_ok,
                                      users_own = users_own)
}

# One case per value: its label and code are templates with the value for %s.
add_each <- function(family, label, code, values, expect, pattern = NULL, check = NULL) {
  for (v in values) add(family, sprintf(label, v), sprintf(code, v), expect, pattern, check)
}

# One refused case per triple (what, the argument's code, the message's pattern).
add_refused <- function(family, label, code, triples) {
  for (t in triples) add(family, sprintf(label, t[[1]]), sprintf(code, t[[2]]), "error", t[[3]])
}

# horizons, in every function that takes one
bad_h <- c("0", "-1", "1.5", "NA", "'2'", "c(1, 2)", "Inf", "1e10", "TRUE", "NaN")
good_h <- c("1", "2", "3")
for (h in c(bad_h, good_h)) {
  ok <- h %in% good_h
  exp <- if (ok) "accept" else "error"
  pat <- if (ok) NULL else "`horizon`"
  add("horizon", paste("predict horizon", h), sprintf("predict(m, x, horizon = %s)", h), exp, pat,
      check = sprintf("identical(dim(.value), c(4L, as.integer(%s), 2L, 5L, 4L)) && finite(.value)", h))
  add("horizon", paste("evaluate horizon", h),
      sprintf("convlstm_evaluate(m, x, frames(%s), horizon = %s)", h, h), exp, pat,
      check = "finite(.value)")
  add("horizon", paste("train_step horizon", h),
      sprintf("convlstm_train_step(m, x, frames(%s), opt, horizon = %s)", h, h), exp, pat,
      check = "finite(.value)")
  add("horizon", paste("fit horizon", h),
      sprintf("convlstm_fit(m, x, frames(%s), opt, epochs = 1, batch_size = 2, horizon = %s, verbose = FALSE)", h, h),
      exp, pat, check = "hist_ok(.value)")
}

# teacher forcing: a probability, a flag or (a fit) a schedule
bad_tf <- c("-0.1", "1.1", "NA", "'a'", "c(0.5, 0.5)", "NaN", "Inf", "list(0.5)")
for (tf in bad_tf) {
  add("teacher_forcing", paste("train_step teacher_forcing", tf),
      sprintf("convlstm_train_step(m, x, y2, opt, horizon = 2, teacher_forcing = %s)", tf), "error",
      "`teacher_forcing`")
  add("teacher_forcing", paste("fit teacher_forcing", tf),
      sprintf("fit2(teacher_forcing = %s)", tf), "error", "`teacher_forcing`")
}
for (tf in c("0.5", "0", "1", "TRUE", "FALSE")) {
  add("teacher_forcing", paste("train_step teacher_forcing", tf),
      sprintf("convlstm_train_step(m, x, y2, opt, horizon = 2, teacher_forcing = %s)", tf), "accept",
      check = "finite(.value)")
  add("teacher_forcing", paste("fit teacher_forcing", tf),
      sprintf("fit2(teacher_forcing = %s)", tf), "accept",
      check = sprintf("hist_ok(.value) && all(.value$teacher_forcing == as.numeric(%s))", tf))
}
add_each("teacher_forcing", "fit schedule %s", "fit2(teacher_forcing = %s)",
         c("function(e) 2", "function(e) NA", "function(e) c(0.1, 0.2)", "function(e) 'a'",
           "function() 0.5"), "error", "teacher_forcing")
add("teacher_forcing", "fit schedule linear", "fit2(teacher_forcing = convlstm_sampling_schedule('linear', k = 0.5))",
    "accept", check = "identical(.value$teacher_forcing, c(1, 0.5))")
add("teacher_forcing", "fit schedule function", "fit2(teacher_forcing = function(e) 0.3)", "accept",
    check = "all(.value$teacher_forcing == 0.3)")
add("teacher_forcing", "train_step schedule function",
    "convlstm_train_step(m, x, y2, opt, horizon = 2, teacher_forcing = function(e) 0.3)", "error",
    "`teacher_forcing`")
add("teacher_forcing", "fit p < 1 without horizon", "fit1(teacher_forcing = 0.5)", "error",
    "`teacher_forcing`")
add("teacher_forcing", "fit schedule without horizon",
    "fit1(teacher_forcing = convlstm_sampling_schedule('linear', k = 0.5))", "error", "`teacher_forcing`")
add("teacher_forcing", "free running with checkpoint", "fit2(teacher_forcing = 0.5, checkpoint = 1)",
    "error", "checkpoint")
add("teacher_forcing", "free running with recompute_gates",
    "fit2(teacher_forcing = FALSE, recompute_gates = TRUE)", "error", "recompute_gates")

# convlstm_sampling_schedule()
add_each("sampling_schedule", "type %s", "convlstm_sampling_schedule(%s, k = 0.5)",
         c("'bogus'", "NA", "1", "c('linear', 'exponential')"), "error", "`type`")
ks <- list(inverse_sigmoid = list(bad = c("0.5", "0", "-1", "NA", "Inf", "'a'"), good = c("1", "5")),
           exponential = list(bad = c("0", "1", "1.5", "-0.1", "NA", "Inf"), good = c("0.5", "0.99")),
           linear = list(bad = c("0", "-1", "NA", "Inf", "'a'"), good = c("0.1", "2")))
for (t in names(ks)) {
  add_each("sampling_schedule", paste(t, "k %s"), sprintf("convlstm_sampling_schedule('%s', k = %%s)", t),
           ks[[t]]$bad, "error", "`k`")
  add_each("sampling_schedule", paste(t, "k %s min 0.3"),
           sprintf("convlstm_sampling_schedule('%s', k = %%s, min = 0.3)(1:50)", t), ks[[t]]$good, "accept",
           check = "all(.value >= 0.3 & .value <= 1) && min(.value) == 0.3 || all(.value >= 0.3)")
  add_each("sampling_schedule", paste(t, "min %s"),
           sprintf("convlstm_sampling_schedule('%s', k = %s, min = %%s)", t, ks[[t]]$good[[1]]),
           c("-0.1", "1.1", "NA", "'a'"), "error", "`min`")
}
add("sampling_schedule", "missing k", "convlstm_sampling_schedule('linear')", "error", "`k`")

# dropout, per gate and shared
for (arg in c("dropout", "recurrent_dropout")) {
  add_each("dropout", paste(arg, "%s"), sprintf("new_model(%s = %%s)", arg),
           c("-0.1", "1", "1.5", "NA", "'a'", "c(0.1, 0.2, 0.3)", "Inf", "NaN"), "error",
           sprintf("`%s`", arg))
  add_each("dropout", paste(arg, "%s trains"),
           sprintf("{ d <- new_model(%s = %%s); convlstm_train_step(d, x, y, opt) }", arg),
           c("0", "0.5", "c(0.1, 0.2)", "0.999"), "accept", check = "finite(.value)")
}
add_each("dropout", "dropout_masks %s", "new_model(dropout = 0.2, dropout_masks = %s)",
         c("'x'", "NA", "1", "c('per_gate', 'per_gate')"), "error", "`dropout_masks`")
add_each("dropout", "dropout_masks %s fit with horizon",
         "{ m <- new_model(dropout = 0.3, recurrent_dropout = 0.2, dropout_masks = %s); fit2() }",
         c("'shared'", "'per_gate'"), "accept", check = "hist_ok(.value)")
add("dropout", "eval mode is deterministic",
    "{ d <- new_model(dropout = 0.5); d$eval(); identical(predict(d, x), predict(d, x)) }",
    "accept", check = "isTRUE(.value)")
add("dropout", "train mode draws masks",
    "{ d <- new_model(dropout = 0.5); d$train(); identical(d(x)[[1]], d(x)[[1]]) }",
    "accept", check = "isFALSE(.value)")

# peepholes
add_each("peephole", "peephole %s", "new_model(peephole = %s)",
         c("'bogus'", "NA", "1", "c(TRUE, FALSE)", "TRUE", "'position'"), "error",
         "peephole|frame_size")
add_each("peephole", "frame_size %s", "new_model(peephole = TRUE, frame_size = %s)",
         c("c(0, 4)", "c(5, 4, 3)", "c(NA, 4)", "'a'", "c(5.5, 4)", "c(-5, 4)"), "error",
         "`frame_size`")
add_each("peephole", "peephole %s fits a forecast",
         "{ m <- new_model(peephole = %s); fit2(teacher_forcing = 0.5) }",
         c("'channel'", "FALSE", "TRUE, frame_size = c(5, 4)", "'position', frame_size = c(5, 4)"),
         "accept", check = "hist_ok(.value)")
add("peephole", "position peepholes on other frames",
    "{ p <- new_model(peephole = TRUE, frame_size = c(5, 4)); predict(p, array(0, c(1, 3, 2, 6, 4))) }",
    "error", "`x`|frame")
add("peephole", "channel peepholes on other frames",
    "{ p <- new_model(peephole = 'channel'); predict(p, array(0, c(1, 3, 2, 6, 4))) }", "accept",
    check = "finite(.value)")
add("peephole", "position peephole save/load round trip",
    "{ p <- new_model(peephole = TRUE, frame_size = c(5, 4)); f <- tempfile(); convlstm_save(p, f); q <- convlstm_load(f, device = 'cpu'); identical(predict(p, x), predict(q, x)) }",
    "accept", check = "isTRUE(.value)")

# memory_budget
add_each("memory_budget", "budget %s", "fit1(memory_budget = %s)",
         c("'lots'", "-1", "0", "NA", "Inf", "'1 XB'", "c(1, 2)", "TRUE"), "error", "`memory_budget`")
add("memory_budget", "budget too small", "fit1(memory_budget = 100)", "error", "memory budget")
add_each("memory_budget", "budget %s", "fit1(memory_budget = %s)",
         c("'1 GiB'", "30000", "1e6", "'64 KiB'"), "accept", check = "hist_ok(.value)")
add_each("memory_budget", "budget with %s", "fit1(memory_budget = '1 GiB', %s)",
         c("checkpoint = 1", "recompute_gates = TRUE", "accumulation_steps = 2", "tbptt = 1"),
         "error", "`memory_budget` chooses")
add("memory_budget", "budget with carry",
    "fit1(memory_budget = '1 GiB', state = 'carry', shuffle = FALSE)", "error", "memory_budget")
add("memory_budget", "budget and max batch", "fit1(memory_budget = 30000, batch_size = 'max')",
    "accept", check = "hist_ok(.value)")
add_each("memory_budget", "budget 30000 with %s", "fit1(memory_budget = 30000, %s)",
         c("loss = 'bogus'", "callbacks = 'x'", "lr_scheduler = 1", "resume = fx('plain.safetensors')",
           "validation_split = 2", "max_grad_norm = 1e-300", "weight = 'w'",
           "resume = fx('dmg_only_epoch.safetensors')"), "error")
add("memory_budget", "budget with horizon free", "fit2(memory_budget = 1e6, teacher_forcing = FALSE)",
    "accept", check = "hist_ok(.value)")
add("memory_budget", "budget with a schedule",
    "fit2(memory_budget = 1e6, teacher_forcing = convlstm_sampling_schedule('exponential', k = 0.5))",
    "accept", check = "hist_ok(.value)")
add("memory_budget", "batch_size a word", "fit1(batch_size = 'all')", "error", "`batch_size`")

# resume
resume_bad <- list(
  c("missing", "tempfile()", "`path`|resume"), c("a directory", "fx('adir')", "directory|`path`"),
  c("/dev/null", "'/dev/null'", "device|regular"), c("a FIFO", "fx('fifo')", "FIFO"),
  c("empty", "fx('empty.safetensors')", "safetensors|empty|bytes"),
  c("random bytes", "fx('random.safetensors')", "safetensors|header"),
  c("truncated", "fx('truncated.safetensors')", "safetensors|header|truncat"),
  c("text", "fx('text.safetensors')", "safetensors|header"),
  c("no fit state", "fx('plain.safetensors')", "fit state"),
  c("other architecture", "fx('ckpt_other.safetensors')", "another architecture"),
  c("saved with a schedule", "fx('ckpt_sched.safetensors')", "schedule"),
  c("only fit.epoch", "fx('dmg_only_epoch.safetensors')", "damaged"),
  c("epoch x", "fx('dmg_epoch_x.safetensors')", "damaged"),
  c("epoch -1", "fx('dmg_epoch_neg.safetensors')", "damaged"),
  c("epoch 1.5", "fx('dmg_epoch_frac.safetensors')", "damaged"),
  c("rng kind", "fx('dmg_rng_kind.safetensors')", "damaged"),
  c("rng", "fx('dmg_rng.safetensors')", "damaged"),
  c("history", "fx('dmg_history.safetensors')", "damaged"),
  c("history longer than the epochs", "fx('dmg_history_long.safetensors')", "damaged"),
  c("schedule state damaged", "fx('dmg_sched.safetensors')", "damaged"),
  c("path NA", "NA_character_", "`path`"), c("path a number", "1", "`path`"))
for (r in resume_bad) {
  sched <- if (grepl("sched", r[[2]])) ", lr_scheduler = convlstm_lr_step(opt, step_size = 1)" else ""
  if (r[[1]] == "saved with a schedule") sched <- ""
  add("resume", paste("resume", r[[1]]),
      sprintf("convlstm_fit(m, x, y, opt, epochs = 3, batch_size = 2, verbose = FALSE, resume = %s%s)",
              r[[2]], sched), "error", r[[3]])
}
add("resume", "resume a schedule into no schedule... the reverse",
    "convlstm_fit(m, x, y, opt, epochs = 3, batch_size = 2, verbose = FALSE, resume = fx('ckpt.safetensors'), lr_scheduler = convlstm_lr_step(opt, step_size = 1))",
    "error", "schedule")
add("resume", "resume good", "convlstm_fit(m, x, y, opt, epochs = 3, batch_size = 2, verbose = FALSE, resume = fx('ckpt.safetensors'))",
    "accept", check = "identical(.value$epoch, 1:3) && hist_ok(.value)")
add("resume", "resume with its schedule", "convlstm_fit(m, x, y, opt, epochs = 2, batch_size = 2, verbose = FALSE, resume = fx('ckpt_sched.safetensors'), lr_scheduler = convlstm_lr_step(opt, step_size = 1))",
    "accept", check = "identical(.value$epoch, 1:2)")
add("resume", "resume already done", "convlstm_fit(m, x, y, opt, epochs = 1, batch_size = 2, verbose = FALSE, resume = fx('ckpt.safetensors'))",
    "accept", check = "identical(.value$epoch, 1L)")

# callbacks
add_each("callbacks", "callbacks %s", "fit1(callbacks = %s)",
         c("'x'", "1", "list(1)", "list(function(ctx) 1)"), "error", "`callbacks`")
add_each("callbacks", "callback %s", "convlstm_callback(%s)",
         c("on_epoch_end = 1", "on_fit_begin = 'f'", "on_batch_end = list()"), "error", "`on_")
paths_bad <- list(c("NA", "NA_character_", "`path`"), c("a number", "1", "`path`"),
                  c("empty", "''", "`path`"), c("two", "c('a', 'b')", "`path`"),
                  c("missing dir", "file.path(tempfile(), 'f')", "does not exist"),
                  c("/proc", "'/proc/convlstm-x'", "cannot write"),
                  c("a directory", "fx('adir')", "directory"),
                  c("a FIFO", "fx('fifo')", "FIFO"), c("/dev/null", "'/dev/null'", "device"))
for (p in paths_bad) { # interleaved, as the case numbers have always been
  add_refused("callbacks", "checkpoint path %s",
              "fit1(memory_budget = 30000, callbacks = list(convlstm_callback_model_checkpoint(%s)))", list(p))
  add_refused("callbacks", "csv path %s", "fit1(callbacks = list(convlstm_callback_csv_logger(%s)))", list(p))
}
add("callbacks", "early stopping monitor bogus", "convlstm_callback_early_stopping(monitor = 'bogus')", "error", "`monitor`")
add("callbacks", "early stopping patience -1", "convlstm_callback_early_stopping(patience = -1)", "error", "`patience`")
add("callbacks", "early stopping mode x", "convlstm_callback_early_stopping(mode = 'x')", "error", "`mode`")
add("callbacks", "early stopping val_loss without validation",
    "fit1(callbacks = list(convlstm_callback_early_stopping()))", "error", "val_loss")
add("callbacks", "checkpoint save_best_only val_loss without validation",
    "fit1(callbacks = list(convlstm_callback_model_checkpoint(tempfile(), save_best_only = TRUE)))", "error", "val_loss")
add("callbacks", "early stopping works",
    "convlstm_fit(m, x, y, opt, epochs = 30, batch_size = 2, validation_split = 0.5, verbose = FALSE, callbacks = list(convlstm_callback_early_stopping(patience = 0, min_delta = 10)))",
    "accept", check = "nrow(.value) == 2")
add("callbacks", "checkpoint per epoch files",
    "{ d <- tempfile(); dir.create(d); h <- convlstm_fit(m, x, y, opt, epochs = 2, batch_size = 2, verbose = FALSE, callbacks = list(convlstm_callback_model_checkpoint(file.path(d, 'e{epoch}.safetensors')))); sort(list.files(d)) }",
    "accept", check = "identical(.value, c('e1.safetensors', 'e2.safetensors'))")
add("callbacks", "csv logger lines",
    "{ f <- tempfile(); h <- convlstm_fit(m, x, y, opt, epochs = 3, batch_size = 2, verbose = FALSE, callbacks = list(convlstm_callback_csv_logger(f))); length(readLines(f)) }",
    "accept", check = "identical(.value, 4L)")
add("callbacks", "ctx$epoch in on_batch_end",
    "{ s <- integer(); cb <- convlstm_callback(on_batch_end = function(ctx) s <<- c(s, ctx$epoch)); h <- convlstm_fit(m, x, y, opt, epochs = 2, batch_size = 2, verbose = FALSE, callbacks = list(cb)); s }",
    "accept", check = "identical(.value, c(1L, 1L, 2L, 2L))")
add("callbacks", "ctx$stop", "convlstm_fit(m, x, y, opt, epochs = 5, batch_size = 2, verbose = FALSE, callbacks = list(convlstm_callback(on_epoch_end = function(ctx) ctx$stop <- TRUE)))",
    "accept", check = "nrow(.value) == 1")
add("callbacks", "a callback's own error propagates",
    "fit1(callbacks = list(convlstm_callback(on_epoch_end = function(ctx) stop('mine'))))", "error",
    "^mine$", changes_ok = TRUE, users_own = TRUE)
add("callbacks", "fit typo in ...", "generics::fit(m, x, y, opt, epochz = 1)", "error", "`epochz`")

# files
load_bad <- list(c("missing", "tempfile()", "`path`"), c("a directory", "fx('adir')", "directory"),
                 c("/dev/null", "'/dev/null'", "device"), c("a FIFO", "fx('fifo')", "FIFO"),
                 c("empty", "fx('empty.safetensors')", "."), c("random", "fx('random.safetensors')", "."),
                 c("truncated", "fx('truncated.safetensors')", "."), c("text", "fx('text.safetensors')", "."),
                 c("path NA", "NA_character_", "`path`"), c("path a vector", "c('a', 'b')", "`path`"))
for (l in load_bad) {
  add_refused("files", "load %s", "convlstm_load(%s, device = 'cpu')", list(l))
  add_refused("files", "file_info %s", "convlstm_file_info(%s)", list(l))
}
add("files", "load a flipped byte", "convlstm_load(fx('flipped.safetensors'), device = 'cpu')", "either")
for (f in c("plain", "ckpt", "ckpt_other")) {
  add("files", paste("load", f), sprintf("predict(convlstm_load(fx('%s.safetensors'), device = 'cpu'), x)", f),
      "accept", check = "finite(.value)")
}
save_bad <- list(c("a directory", "fx('adir')", "directory"), c("a FIFO", "fx('fifo')", "FIFO"),
                 c("/dev/null", "'/dev/null'", "device"), c("missing dir", "file.path(tempfile(), 'x')", "does not exist"),
                 c("path NA", "NA_character_", "`path`"), c("path 1", "1", "`path`"),
                 c("/proc", "'/proc/convlstm-x'", "."))
add_refused("files", "save to %s", "convlstm_save(m, %s)", save_bad)
add_each("files", "save metadata %s", "convlstm_save(m, tempfile(), metadata = %s)",
         c("c(format = 'x')", "c(convlstm.a = 'x')", "c(fit.epoch = '1')", "c(fit.history = 'x')",
           "c(a = NA)", "c('x')", "c(a = 'x', a = 'y')", "list(a = 1)"), "error", "`metadata`")
add("files", "save over 0600 keeps 0600",
    "{ f <- tempfile(); convlstm_save(m, f); Sys.chmod(f, '600', use_umask = FALSE); convlstm_save(m, f, optimizer = opt); format(file.info(f)$mode) }",
    "accept", check = "identical(.value, '600')")
add("files", "save over a 0640 checkpoint from a fit keeps 0640",
    "{ f <- tempfile(); convlstm_save(m, f); Sys.chmod(f, '640', use_umask = FALSE); h <- fit1(callbacks = list(convlstm_callback_model_checkpoint(f))); format(file.info(f)$mode) }",
    "accept", check = "identical(.value, '640')")
add("files", "save through a symlink keeps the link",
    "{ f <- tempfile(); l <- tempfile(); convlstm_save(m, f); file.symlink(f, l); convlstm_save(m, l); c(nzchar(Sys.readlink(l)), file.exists(f)) }",
    "accept", check = "all(.value)")
add("files", "round trip with metadata",
    "{ f <- tempfile(); convlstm_save(m, f, metadata = c(note = '1.5')); convlstm_file_info(f)$metadata[['note']] }",
    "accept", check = "identical(.value, '1.5')")
for (name in c("plain.safetensors", "ckpt.safetensors")) {
  add("files", paste("load under a comma locale", name),
      sprintf("{ old <- Sys.getlocale('LC_NUMERIC'); stopifnot(nzchar(suppressWarnings(Sys.setlocale('LC_NUMERIC', 'de_DE.UTF-8')))); on.exit(Sys.setlocale('LC_NUMERIC', old)); r <- attr(convlstm_load(fx('%s'), device = 'cpu'), 'optimizer'); Sys.setlocale('LC_NUMERIC', old); r$lr }", name),
      "accept", check = "isTRUE(all.equal(.value, 0.01))")
}
add("files", "tutorial model under a comma locale",
    "{ old <- Sys.getlocale('LC_NUMERIC'); stopifnot(nzchar(suppressWarnings(Sys.setlocale('LC_NUMERIC', 'de_DE.UTF-8')))); t <- convlstm_load(system.file('extdata', 'tutorial.safetensors', package = 'convlstm'), device = 'cpu'); Sys.setlocale('LC_NUMERIC', old); t$n_layers }",
    "accept", check = "is.numeric(.value)")

# the silent classes of #29
for (call in c("predict(m, X)", "convlstm_train_step(m, X, y, opt)", "convlstm_evaluate(m, X, y)",
               "convlstm_fit(m, X, y, opt, epochs = 1, verbose = FALSE)")) {
  for (v in c("{ X <- x; X[1:2] <- 1e308; X }", "{ X <- x; X[5] <- 1e39; X }",
              "{ X <- x; X[5] <- -1e39; X }", "{ X <- x; X[2] <- Inf; X }",
              "{ X <- x; X[3] <- NA; X }")) {
    add("silent", paste(call, "with", v), sprintf("{ X <- %s; %s }", v, call), "error", "`x`")
  }
}
for (call in c("predict(h, X)", "convlstm_evaluate(h, X, y)", "h(X)",
               "convlstm_forward(h, X, training = FALSE)")) {
  add("silent", paste("float16", call, "1e5"),
      sprintf("{ h <- new_model(dtype = 'float16'); X <- x; X[7] <- 1e5; %s }", call), "error",
      "float16's range")
}
add("silent", "float16 train_step 1e5 skips the step and says so",
    "{ h <- new_model(dtype = 'float16'); X <- x; X[7] <- 1e5; suppressWarnings(convlstm_train_step(h, X, y, opt)); convlstm_loss_scale(h)$skipped_steps }",
    "accept", check = ".value >= 1")
add("silent", "float16 predict 65504",
    "{ h <- new_model(dtype = 'float16'); X <- x; X[7] <- 65504; predict(h, X) }", "accept",
    check = "finite(.value)")
add("silent", "bfloat16 predict 1e5",
    "{ h <- new_model(dtype = 'bfloat16'); X <- x; X[7] <- 1e5; predict(h, X) }", "accept",
    check = "finite(.value)")
add_each("silent", "train_step max_grad_norm %s", "convlstm_train_step(m, x, y, opt, max_grad_norm = %s)",
         c("1e-300", "1e-40", "0", "-1", "NA", "'a'", "c(1, 2)"), "error", "`max_grad_norm`")
add_each("silent", "fit max_grad_norm %s", "fit1(max_grad_norm = %s)", c("1e-300", "0"), "error",
         "`max_grad_norm`")
add_each("silent", "train_step max_grad_norm %s", "convlstm_train_step(m, x, y, opt, max_grad_norm = %s)",
         c("1e-30", "Inf", "1"), "accept", check = "finite(.value)")
add("silent", "data_on_device TRUE with horizon", "fit2(data_on_device = TRUE)", "error", "data_on_device")
add("silent", "data_on_device TRUE with weight", "fit1(data_on_device = TRUE, weight = array(1, dim(y)))",
    "error", "data_on_device")
add("silent", "data_on_device 'yes'", "fit1(data_on_device = 'yes')", "error", "`data_on_device`")
add("silent", "data_on_device TRUE", "fit1(data_on_device = TRUE)", "accept",
    check = "isTRUE(attr(.value, 'data_on_device'))")
for (d in c("predict(m, x, horizont = 3)", "predict(m, x, batchsize = 1)",
            "generics::evaluate(m, x, y, horizont = 2)", "summary(m, input_shape = c(2, 3, 2, 5, 4), chekpoint = 1)",
            "convlstm_max_batch_size(m, 3, 5, 4, '1 MiB', acumulation_steps = 2)",
            "generics::fit(m, x, y, opt, verbos = FALSE)")) {
  add("silent", paste("typo", d), d, "error", "has no argument")
}
add("silent", "logical weight mask", "convlstm_train_step(m, x, y, opt, weight = array(c(TRUE, FALSE), dim(y)))",
    "accept", check = "finite(.value)")
for (w in c("array(NA, dim(y))", "array(-1, dim(y))", "array(1, c(4, 2, 5, 3))", "array('a', dim(y))",
            "array(Inf, dim(y))", "1")) {
  add("silent", paste("weight", w), sprintf("convlstm_train_step(m, x, y, opt, weight = %s)", w), "error", "`weight`")
}

# fits whose arguments conflict
conflicts <- list(c("validation_split = 1", "`validation_split`"), c("validation_split = -0.1", "`validation_split`"),
                  c("validation_split = NA", "`validation_split`"), c("validation_split = 0.99", "validation_split"),
                  c("validation_data = list(x)", "`validation_data`"),
                  c("validation_data = list(x, y), validation_split = 0.5", "not both"),
                  c("state = 'carry'", "shuffle"), c("state = 'carry', shuffle = FALSE, batch_size = 3", "multiple"),
                  c("state = 'bogus'", "`state`"), c("batch_size = 5", "`batch_size`"),
                  c("epochs = 0", "`epochs`"), c("epochs = 1.5", "`epochs`"),
                  c("target = 'bogus'", "`target`"), c("loss = 'bogus'", "`loss`"),
                  c("loss = 'huber', delta = -1", "`delta`"), c("pos_weight = 0", "`pos_weight`"),
                  c("accumulation_steps = 0", "`accumulation_steps`"), c("checkpoint = -1", "`checkpoint`"),
                  c("tbptt = 'a'", "`tbptt`"), c("recompute_gates = 'x'", "recompute_gates"),
                  c("lr_scheduler = convlstm_lr_one_cycle(opt, max_lr = 0.1, total_steps = 1)", "steps left"),
                  c("shuffle = NA", "`shuffle`"), c("verbose = 2", "`verbose`"))
for (cf in conflicts) {
  add("fit", paste("fit", cf[[1]]), sprintf("fit1(%s)", cf[[1]]), "error", cf[[2]])
}
add("fit", "fit horizon with target last_state", "fit2(target = 'last_state')", "error", "`target`")
for (ok in c("state = 'carry', shuffle = FALSE", "accumulation_steps = 2", "checkpoint = 1",
             "recompute_gates = TRUE", "loss = 'huber'", "loss = 'mae'", "validation_split = 0.5",
             "lr_scheduler = convlstm_lr_one_cycle(opt, max_lr = 0.1, total_steps = 2)", "tbptt = 1",
             "target = 'sequence', y = NULL")) {
  code <- if (grepl("y = NULL", ok)) "convlstm_fit(m, x, ys, opt, epochs = 1, batch_size = 2, target = 'sequence', verbose = FALSE)"
          else sprintf("fit1(%s)", ok)
  add("fit", paste("fit", ok), code, "accept", check = "hist_ok(.value)")
}
add("fit", "carried free-running forecast", "fit2(state = 'carry', shuffle = FALSE, teacher_forcing = FALSE)",
    "accept", check = "hist_ok(.value)")
add("fit", "forecast with validation", "fit2(validation_split = 0.5, teacher_forcing = 0.5)",
    "accept", check = "all(is.finite(.value$val_loss))")

add("teacher_forcing", "a schedule bad at epoch 2 fails before training",
    "fit2(teacher_forcing = function(e) if (e == 2) 2 else 0.5)", "error", "epoch 2")
add("teacher_forcing", "a schedule that errors at epoch 2 fails before training",
    "fit2(teacher_forcing = function(e) if (e == 2) stop('no') else 0.5)", "error", "epoch 2")
add("fit", "fit accumulation_steps above the batch is capped", "fit1(accumulation_steps = 3)",
    "accept", check = "hist_ok(.value)")

# ---- the runner ----------------------------------------------------------

if (length(args) >= 1 && args[[1]] == "--case") {
  run_child(cases[[as.integer(args[[2]])]], args[[4]])
  quit(save = "no")
}

out_csv <- if (length(args) >= 1) args[[1]] else "sweep_round3.csv"
dir <- tempfile("sweep")
dir.create(dir)
make_fixtures(dir)
script <- normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]]))
rscript <- file.path(R.home("bin"), "Rscript")
# a locale with a decimal comma for the locale cases: built when the system has none
locpath <- character()
if (!nzchar(suppressWarnings(Sys.setlocale("LC_NUMERIC", "de_DE.UTF-8")))) {
  loc <- file.path(dir, "locale")
  dir.create(loc)
  system2("localedef", c("-i", "de_DE", "-f", "UTF-8", file.path(loc, "de_DE.UTF-8")),
          stdout = FALSE, stderr = FALSE)
  locpath <- paste0("LOCPATH=", loc)
}
invisible(Sys.setlocale("LC_NUMERIC", "C"))
run_one <- function(i) {
  t0 <- proc.time()[["elapsed"]]
  out <- suppressWarnings(system2("timeout", c("60", rscript, script, "--case", i, "--dir", dir),
                                  stdout = TRUE, stderr = TRUE, env = locpath))
  status <- attr(out, "status") %||% 0L
  line <- grep("^RESULT\t", out, value = TRUE)
  if (length(line) == 1) {
    parts <- strsplit(line, "\t", fixed = TRUE)[[1]]
    c(outcome = parts[[2]], message = if (length(parts) >= 3) parts[[3]] else "",
      seconds = proc.time()[["elapsed"]] - t0)
  } else {
    c(outcome = if (identical(status, 124L)) "hang" else "crash",
      message = paste(utils::tail(out, 3), collapse = " | "), seconds = proc.time()[["elapsed"]] - t0)
  }
}
`%||%` <- function(a, b) if (is.null(a)) b else a
# SWEEP_ONLY=3,17: those cases only
only <- Sys.getenv("SWEEP_ONLY")
run <- if (nzchar(only)) as.integer(strsplit(only, ",", fixed = TRUE)[[1]]) else seq_along(cases)
res <- parallel::mclapply(run, run_one, mc.cores = 2)
names(res) <- run
rows <- do.call(rbind, lapply(run, function(i) {
  r <- res[[as.character(i)]]
  data.frame(case = i, family = cases[[i]]$family, label = cases[[i]]$label,
             expect = cases[[i]]$expect, outcome = r[["outcome"]],
             message = r[["message"]], seconds = as.numeric(r[["seconds"]]))
}))
utils::write.csv(rows, out_csv, row.names = FALSE)
levels <- c("clear_error", "correct_accept", "crash", "hang", "corruption", "silent_accept",
            "unclear_error", "false_refusal")
tab <- table(factor(rows$family, levels = unique(rows$family)), factor(rows$outcome, levels = levels))
tab <- cbind(cases = rowSums(tab), tab)
tab <- rbind(tab, all = colSums(tab))
print(tab)
bad <- rows[!rows$outcome %in% c("clear_error", "correct_accept"), ]
if (nrow(bad) > 0) {
  cat("\nCases to look at:\n")
  for (i in seq_len(nrow(bad))) {
    cat(sprintf("  %d [%s] %s (%s): %s\n", bad$case[[i]], bad$family[[i]], bad$label[[i]],
                bad$outcome[[i]], bad$message[[i]]))
  }
}
unlink(dir, recursive = TRUE)
