# hwm-probe.R -- one model in a fresh R process, measured by the operating
# system: how far the process's resident high-water mark (VmHWM in
# /proc/self/status) grows over creating the model and its first step, and
# over a second step, against memory_estimate() for that step.
#
#   Rscript hwm-probe.R LIB OUT input_dim hidden kernel B T H W dtype
#                       checkpoint accumulation tbptt mode [horizon [peephole
#                       [recompute_gates]]]
#
# peephole: "none" (the default), "channel" or "position" (for H x W frames).
# recompute_gates: 0 (the default), or a training step that recomputes the
# gates in backward, that many steps at a time.
# mode: "last_state" / "sequence" (a training step with that target), or
# "infer_all" / "infer_last" (an inference forward, model(x) keeping every
# output, or only the last states), or "roll_teacher" / "roll_free" (a
# training step over a horizon of `horizon` frames after the T steps,
# teacher-forced or free-running; input_dim must be 1, the last layer's
# size). Writes one line of key=value to OUT.
#
# Isolating the model from the R session (each point below is something the
# R session would otherwise add to the high-water mark):
# - Writing "5" to /proc/self/clear_refs resets VmHWM to the resident memory
#   now (Linux >= 4.0), so each window measures its own peak from its own
#   start, not the session's earlier peaks.
# - A throwaway model first creates and trains once at a tiny shape: R's
#   byte-compiled package code, the OpenMP thread pool, the CPU GEMM choice
#   are the process's, not the model's (memory_stats()$runtime's kind of
#   cost), and are paid before the windows open.
# - The inputs are made and checked before the windows, gc() runs before
#   each, and the step is the native call (.Call) with already checked
#   arguments, so R's own argument checks allocate nothing inside.
# - What the native call returns to R is counted explicitly: the step's
#   loss is one double; an inference forward's arrays are R doubles of the
#   output's size, and object.size() of the result is added to the estimate.
args <- commandArgs(trailingOnly = TRUE)
lib <- args[[1]]
out <- args[[2]]
num <- as.integer(args[c(3:9, 11:13)])
names(num) <- c("input_dim", "hidden", "kernel", "B", "T", "H", "W", "checkpoint",
                "accumulation", "tbptt")
dtype <- args[[10]]
mode <- args[[14]]
K <- if (length(args) >= 15) as.integer(args[[15]]) else 0L
peephole <- if (length(args) >= 16) args[[16]] else "none"
rc <- if (length(args) >= 17) as.integer(args[[17]]) else 0L
roll <- mode %in% c("roll_teacher", "roll_free")
target <- if (roll) "sequence" else mode
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

training <- mode %in% c("last_state", "sequence") || roll
n <- num[["input_dim"]]
x <- array(runif(num[["B"]] * num[["T"]] * n * num[["H"]] * num[["W"]]),
           c(num[["B"]], num[["T"]], n, num[["H"]], num[["W"]]))
hid <- c(num[["hidden"]], 1L)
y <- if (roll) {
  array(runif(num[["B"]] * K * num[["H"]] * num[["W"]]), c(num[["B"]], K, 1L, num[["H"]], num[["W"]]))
} else if (identical(mode, "sequence")) {
  array(runif(num[["B"]] * num[["T"]] * num[["H"]] * num[["W"]]),
        c(num[["B"]], num[["T"]], 1L, num[["H"]], num[["W"]]))
} else {
  array(runif(num[["B"]] * num[["H"]] * num[["W"]]), c(num[["B"]], 1L, num[["H"]], num[["W"]]))
}
opt <- optimizer_adam(lr = 1e-3)
options <- if (training) {
  ns$check_step_options(num[["checkpoint"]], num[["accumulation"]], num[["tbptt"]],
                        batch_size = num[["B"]],
                        state = list(mode = "zero", arrays = NULL, horizon = K,
                                     free_run = identical(mode, "roll_free")),
                        recompute_gates = rc)
} else {
  ns$c_step_options(outputs = if (mode == "infer_last") "last_state" else "all")
}
what <- if (mode == "infer_last") "last_states" else "all"

# warm-up: the process's first model pays the process's costs. It is tiny
# (one channel, 1x1 kernels), so that the heap pages it frees cannot hide the
# measured model's small buffers (malloc'ed below 1 MiB, see cpu_alloc).
w <- convlstm(n, c(1, 1), 1, device = "cpu", dtype = dtype, threads = 1)
tw <- seq_len(min(2L, num[["T"]])) # a rollout's x may have one step
wx <- x[1, tw, , 1:min(4L, num[["H"]]), 1:min(4L, num[["W"]]), drop = FALSE]
# (an inference forward: with a horizon's options it would forecast)
invisible(ns$c_forward(ns$model_ptr(w), wx, training = FALSE, what = what,
                       if (roll) NULL else options))
if (training) {
  wy <- if (identical(target, "sequence")) y[1, tw, , 1:min(4L, num[["H"]]), 1:min(4L, num[["W"]]), drop = FALSE]
        else y[1, , 1:min(4L, num[["H"]]), 1:min(4L, num[["W"]]), drop = FALSE]
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
grow_create <- window({
  model <- convlstm(n, hid, num[["kernel"]], device = "cpu", dtype = dtype, threads = 1,
                    peephole = peephole,
                    frame_size = if (peephole == "position") num[c("H", "W")])
})
ptr <- ns$model_ptr(model)
grow_first <- window(result <- run(ptr))
# Pages of the step arena that the step never touched: the arena is one
# anonymous mapping (cpu_alloc maps blocks of 1 MiB and more), found in
# /proc/self/smaps by its size; Size - Rss of it is reserved, untouched.
arena_untouched <- function() {
  plan <- attr(estimate(), "plan")
  inside <- !is.na(plan$offset)
  arena <- max(plan$offset[inside] + ceiling(plan$bytes[inside] / 256) * 256)
  if (arena + 64 < 2^20) return(NA_real_) # from the heap, not a mapping of its own
  kb <- ceiling((arena + 64) / 4096) * 4
  sm <- readLines("/proc/self/smaps")
  size_at <- grep(paste0("^Size: +", kb, " kB$"), sm)
  if (length(size_at) != 1) return(NA_real_) # not found alone: merged or ambiguous
  rss_line <- grep("^Rss:", sm[size_at + 1:4], value = TRUE)[[1]]
  rss <- as.numeric(sub("^Rss: +([0-9]+) kB$", "\\1", rss_line))
  (kb - rss) * 1024
}
# memory_estimate() of the step the windows ran
estimate <- function() {
  memory_estimate(model, num[["B"]], T_in, num[["H"]], num[["W"]],
                  training = training, checkpoint = num[["checkpoint"]],
                  accumulation_steps = num[["accumulation"]], tbptt = num[["tbptt"]],
                  optimizer = if (training) opt else NULL,
                  outputs = if (mode == "infer_last") "last_state" else "all",
                  horizon = K, teacher_forcing = !identical(mode, "roll_free"),
                  recompute_gates = if (training) rc else 0L)
}
result_bytes <- as.numeric(utils::object.size(result))
rm(result)
result <- NULL
grow_second <- window(result <- run(ptr))
# Read after the second window, not between the two: /proc/self/smaps is
# large, and once collected, the heap it grew may be trimmed back to the
# system, so the second step's few small R objects touched fresh pages again
# (seen as 16-80 KiB under R CMD check). Both steps touch the same arena pages.
untouched <- arena_untouched()

est <- estimate()
b <- stats::setNames(est$bytes, est$category)
ms <- memory_stats(model)
writeLines(paste0(
  "grow_create=", grow_create, " grow_first=", grow_first, " grow_second=", grow_second,
  " result_bytes=", result_bytes, " total=", b[["total"]], " reserved=", b[["reserved"]],
  " peak_reserved=", ms$peak_reserved, " untouched=", untouched
), out)
