# hwm-probe.R -- one model in a fresh R process, measured by the operating
# system: how far the process's resident high-water mark (VmHWM in
# /proc/self/status) grows over creating the model and its first step, and
# over a second step, against convlstm_memory_estimate() for that step.
#
#   Rscript hwm-probe.R LIB OUT key=value ...
#
# The case, one key=value per argument (a vector comma-separated: dropout=0.2,0):
# - the step's: input_dim hidden kernel B T H W dtype, checkpoint
#   accumulation tbptt (0, 1, 0 when not given), mode, horizon (0),
#   state ("zero", "given" or "carry"), weight (0 or 1: a per-element loss
#   weight), recompute_gates (0, or the steps whose gates backward
#   recomputes at once), threads (the measured model's, 1 when not given),
#   thread_split ("call", "batch" or "auto": options(convlstm.thread_split)
#   when it is made).
# - every other key is an argument of convlstm() for the measured model, as
#   given (numbers where every element parses as one): peephole, dropout,
#   recurrent_dropout, ... (peephole = "position" gets frame_size = c(H, W)).
# The model has two layers: `hidden` channels, then 1; with layers=1 one
# layer of `hidden` channels (its d_hidden holds one step on a last state).
# mode: "last_state" / "sequence" (a training step with that target), or
# "infer_all" / "infer_last" (an inference forward, model(x) keeping every
# output, or only the last states), or "roll_teacher" / "roll_free" (a
# training step over a horizon of `horizon` frames after the T steps,
# teacher-forced or free-running; input_dim must be 1, the last layer's
# size), or "seq2seq" / "seq2seq_predict" (an encoder-forecaster,
# convlstm_forecaster(), of `hidden` channels per layer (a vector) and
# `patch` patches: a training step forecasting `horizon` frames, or the
# prediction of `horizon` frames). Writes one line of key=value to OUT.
#
# Isolating the model from the R session (each point below is something the
# R session would otherwise add to the high-water mark):
# - Writing "5" to /proc/self/clear_refs resets VmHWM to the resident memory
#   now (Linux >= 4.0), so each window measures its own peak from its own
#   start, not the session's earlier peaks.
# - A throwaway model first creates and trains once at a tiny shape: R's
#   byte-compiled package code and the OpenMP thread pool are the
#   process's, not the model's (convlstm_memory_stats()$runtime's kind of cost), and
#   are paid before the windows open.
# - The inputs (x, y, a given state, a weight) are made and checked before
#   the windows, gc() runs before each, and the step is the native call
#   (.Call) with already checked arguments, so R's own argument checks
#   allocate nothing inside.
# - What the native call leaves to R is counted explicitly: the step's loss
#   is one double; an inference forward's arrays are R doubles of the
#   output's size (object.size() of the result). A training call of a
#   model with dropout leaves nothing: its masks are drawn into the plan's
#   own buffers (src/core/dropout.c), from a seed of two uniforms.
args <- commandArgs(trailingOnly = TRUE)
lib <- args[[1]]
out <- args[[2]]
kv <- regmatches(args[-(1:2)], regexpr("=", args[-(1:2)]), invert = TRUE)
if (any(lengths(kv) != 2)) stop("hwm-probe.R: arguments after LIB OUT are key=value")
case <- lapply(kv, function(p) {
  v <- strsplit(p[[2]], ",", fixed = TRUE)[[1]]
  n <- suppressWarnings(as.numeric(v))
  if (anyNA(n)) v else n
})
names(case) <- vapply(kv, `[[`, "", 1)
step_keys <- c("input_dim", "hidden", "kernel", "B", "T", "H", "W", "dtype", "checkpoint",
               "accumulation", "tbptt", "mode", "horizon", "state", "weight", "recompute_gates",
               "patch", "layers", "threads", "thread_split")
arg <- function(key, default) if (is.null(case[[key]])) default else case[[key]]
num <- vapply(c("input_dim", "hidden", "kernel", "B", "T", "H", "W"),
              function(k) as.integer(arg(k, stop("hwm-probe.R: no ", k))[[1]]), 0L)
num[c("checkpoint", "accumulation", "tbptt")] <- c(arg("checkpoint", 0), arg("accumulation", 1),
                                                    arg("tbptt", 0))
dtype <- arg("dtype", "float32")
mode <- arg("mode", "last_state")
K <- as.integer(arg("horizon", 0))
state_mode <- arg("state", "zero")
weighted <- arg("weight", 0) == 1
rc <- as.integer(arg("recompute_gates", 0)) # gates recomputed in backward, rc steps at a time
# the measured model's own arguments, passed through to convlstm()
model_args <- case[setdiff(names(case), step_keys)]
if (identical(model_args$peephole, "position") && is.null(model_args$frame_size)) {
  model_args$frame_size <- num[c("H", "W")]
}
roll <- mode %in% c("roll_teacher", "roll_free")
seq2seq <- mode %in% c("seq2seq", "seq2seq_predict")
target <- if (roll || seq2seq) "sequence" else mode
suppressPackageStartupMessages(library(convlstm, lib.loc = lib))
ns <- asNamespace("convlstm")

status <- function() {
  l <- readLines("/proc/self/status")
  kb <- function(key) {
    as.numeric(sub("^[^0-9]*([0-9]+).*$", "\\1", grep(paste0("^", key, ":"), l, value = TRUE)))
  }
  c(rss = kb("VmRSS") * 1024, hwm = kb("VmHWM") * 1024)
}
# The peak growth of expr over the resident memory at its start.
window <- function(expr) {
  invisible(gc())
  writeLines("5", "/proc/self/clear_refs")
  s0 <- status()
  force(expr)
  s1 <- status()
  unname(s1[["hwm"]] - s0[["rss"]])
}
training <- mode %in% c("last_state", "sequence", "seq2seq") || roll
n <- num[["input_dim"]]
B <- num[["B"]]
H <- num[["H"]]
W <- num[["W"]]
x <- array(runif(B * num[["T"]] * n * H * W), c(B, num[["T"]], n, H, W))
hid <- if (seq2seq) {
  as.integer(case$hidden)
} else if (arg("layers", 2) == 1) {
  num[["hidden"]]
} else {
  c(num[["hidden"]], 1L)
}
oc <- hid[[length(hid)]] # the output's channels
y <- if (seq2seq) {
  array(runif(B * K * n * H * W), c(B, K, n, H, W))
} else if (roll) {
  array(runif(B * K * oc * H * W), c(B, K, oc, H, W))
} else if (identical(mode, "sequence")) {
  array(runif(B * num[["T"]] * oc * H * W), c(B, num[["T"]], oc, H, W))
} else {
  array(runif(B * oc * H * W), c(B, oc, H, W))
}
opt <- convlstm_optimizer_adam(lr = 1e-3)
# a given initial state: h then c of each layer, flat, as check_state() makes it
given <- if (state_mode == "given") {
  unlist(lapply(hid, function(h) replicate(2, array(runif(B * h * H * W), c(B, h, H, W)),
                                           simplify = FALSE)), recursive = FALSE)
}
weight <- if (weighted) array(runif(length(y)), dim(y))
options <- if (seq2seq) { # a training step's target steps are y's: no horizon option
  if (training) {
    ns$check_step_options(num[["checkpoint"]], num[["accumulation"]], batch_size = B,
                          recompute_gates = rc)
  } else {
    ns$c_step_options(outputs = "last_state", horizon = K)
  }
} else if (training) {
  ns$check_step_options(num[["checkpoint"]], num[["accumulation"]], num[["tbptt"]],
                        batch_size = B,
                        state = list(mode = state_mode, arrays = given, horizon = K,
                                     free_run = identical(mode, "roll_free")),
                        weight = weight, recompute_gates = rc)
} else {
  ns$c_step_options(outputs = if (mode == "infer_last") "last_state" else "all",
                    state_mode = state_mode, state = given)
}
what <- if (mode == "infer_last") "last_states" else if (seq2seq) "frames" else "all"

# warm-up: the process's first model pays the process's costs. It is tiny
# (one channel, 1x1 kernels), so that the heap pages it frees cannot hide the
# measured model's small buffers (malloc'ed below 1 MiB, see cpu_alloc).
w <- convlstm(n, c(1, 1), 1, device = "cpu", dtype = dtype, threads = 1)
tw <- seq_len(min(2L, num[["T"]])) # a rollout's x may have one step
wx <- x[1, tw, , 1:min(4L, H), 1:min(4L, W), drop = FALSE]
# (an inference forward: with a horizon's options it would forecast)
if (!seq2seq) {
  invisible(ns$c_forward(ns$model_ptr(w), wx, training = FALSE, what = what,
                         if (roll) NULL else ns$c_step_options(outputs = options$outputs)))
} else { # a tiny encoder-forecaster, its code paths once
  convlstm_release(w)
  p <- as.integer(arg("patch", 1))
  w <- convlstm_forecaster(n, 1, 1, patch = p, device = "cpu", dtype = dtype, threads = 1)
  wx <- x[1, tw, , 1:p, 1:p, drop = FALSE]
  invisible(ns$c_forward(ns$model_ptr(w), wx, training = FALSE, what = "frames",
                         ns$c_step_options(outputs = "last_state", horizon = 1L)))
  if (training) invisible(ns$c_train_step(ns$model_ptr(w), wx, wx, "sequence", opt, NULL))
}
if (training && !seq2seq) {
  wy <- if (identical(target, "sequence")) y[1, tw, 1, 1:min(4L, H), 1:min(4L, W), drop = FALSE]
        else y[1, 1, 1:min(4L, H), 1:min(4L, W), drop = FALSE]
  invisible(ns$c_train_step(ns$model_ptr(w), wx, wy, target, opt, NULL))
}
convlstm_release(w)
rm(w, wx, tw)
# teacher forcing reads x, then the true frames: joined before the windows
if (identical(mode, "roll_teacher")) x <- ns$teacher_sequence(x, y)
T_in <- num[["T"]]

run <- function(ptr) {
  if (training) ns$c_train_step(ptr, x, y, target, opt, options)
  else ns$c_forward(ptr, x, training = FALSE, what = what, options)
}
# The first window of a session grows R's own heap (~2.7 MiB, a first full
# collection's bookkeeping): an empty window takes it.
invisible(window(NULL))
model <- NULL
ptr <- NULL
result <- NULL
make <- if (seq2seq) convlstm_forecaster else convlstm
if (seq2seq) model_args$patch <- as.integer(arg("patch", 1))
# threads: the measured model's (1 unless given); thread_split: how its
# steps share them (options(convlstm.thread_split))
if (!is.null(case$thread_split)) options(convlstm.thread_split = case$thread_split)
grow_create <- window({
  model <- do.call(make, c(list(n, hid, num[["kernel"]], device = "cpu", dtype = dtype,
                                threads = as.integer(arg("threads", 1))), model_args))
})
ptr <- ns$model_ptr(model)
grow_first <- window(result <- run(ptr))
result_bytes <- as.numeric(utils::object.size(result))
rm(result)
result <- NULL
grow_second <- window(result <- run(ptr))
# Which pages of the step arena the steps touched, from /proc/self/pagemap
# (one 64-bit word per page; bit 63: present in memory) at the arena's
# address (a test-only hook): TRUE / FALSE per page, NULL where pagemap
# cannot be read. Read after the windows, so its reading costs them
# nothing. (The arena cannot be found in /proc/self/smaps by its size: the
# kernel merges its mapping with its neighbours', the parameters'.)
arena_pages <- function() {
  arena <- ns$c_test_arena(ptr)
  con <- tryCatch(file("/proc/self/pagemap", "rb"), error = function(e) NULL,
                  warning = function(w) NULL)
  if (is.null(con) || arena[[2]] == 0) return(NULL)
  on.exit(close(con))
  first <- floor(arena[[1]] / 4096)
  n <- ceiling((arena[[1]] + arena[[2]]) / 4096) - first
  seek(con, first * 8)
  words <- readBin(con, "raw", n * 8)
  if (length(words) != n * 8) return(NULL)
  structure(as.integer(words[seq(8, n * 8, by = 8)]) >= 128, # little-endian: byte 8, bit 7
            first = first, base = arena[[1]])
}
# Per step buffer of the plan, the bytes of its whole pages (those it shares
# with no 256-byte aligned neighbour) that are not resident.
cold_bytes <- function(present, plan) {
  inside <- !is.na(plan$offset) & plan$bytes > 0
  at <- attr(present, "base") + plan$offset[inside]
  a <- ceiling(at / 4096) - attr(present, "first")
  b <- floor((at + plan$bytes[inside]) / 4096) - attr(present, "first")
  cold <- vapply(seq_along(a), function(i) {
    if (b[[i]] > a[[i]]) sum(!present[(a[[i]] + 1):b[[i]]]) * 4096 else 0
  }, 0)
  stats::setNames(cold, plan$name[inside])
}

# convlstm_memory_estimate() of the step the windows ran
est <- convlstm_memory_estimate(model, B, T_in, H, W,
                       training = training, checkpoint = num[["checkpoint"]],
                       accumulation_steps = num[["accumulation"]], tbptt = num[["tbptt"]],
                       optimizer = if (training) opt else NULL,
                       outputs = if (mode == "infer_last") "last_state" else "all",
                       state = state_mode, weight = if (weighted) target,
                       horizon = K, teacher_forcing = !identical(mode, "roll_free"),
                       recompute_gates = if (training) rc else 0L,
                       target = if (training) target)
b <- stats::setNames(est$bytes, est$category)
plan <- attr(est, "plan")
ms <- convlstm_memory_stats(model)
# reserved pages the steps never wrote cost nothing: the test counts them
# apart, and names the buffers they lie in
present <- arena_pages()
untouched <- if (is.null(present)) NA else sum(!present) * 4096
cold <- if (!is.null(present)) cold_bytes(present, plan)
cold <- if (is.null(present)) "NA" else if (!any(cold > 0)) "none" else {
  paste0(names(cold)[cold > 0], ":", cold[cold > 0], collapse = ",")
}
writeLines(paste0(
  "grow_create=", grow_create, " grow_first=", grow_first, " grow_second=", grow_second,
  " result_bytes=", result_bytes, " total=", b[["total"]],
  " reserved=", b[["reserved"]], " peak_reserved=", ms$peak_reserved,
  " dropout_planned=", sum(plan$bytes[grepl("^dropout_", plan$name)]),
  " threads_planned=", length(unique(sub(":.*", "", grep("^thread [0-9]+:", plan$name,
                                                          value = TRUE)))),
  " untouched=", untouched, " cold=", cold
), out)
