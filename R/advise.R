# advise.R -- making training fit: convlstm_memory_advise() lists every way of
# running a training step that keeps its result (dtype, checkpointing,
# gradient accumulation; truncated backpropagation only when allowed), with
# the memory plan of each (convlstm_memory_estimate(): the planner itself, no second
# estimator here), whether it fits a budget, and its step time relative to
# the plain float32 step from a small cost model of the backend. The cost
# model's rates are measured once per machine and stored (backend_rates()).
# convlstm_fit(memory_budget = , batch_size = "max") asks it through
# fit_memory_plan().

#' Which way of training fits a memory budget, and how fast is it?
#'
#' Lists every configuration of a training step that keeps the result of
#' training -- storage type `float32`, `float16` or `bfloat16` (see
#' [convlstm_set_dtype()]), checkpointing every `k` time steps, keeping only the
#' states and recomputing the gates in backward (`recompute_gates`), and
#' accumulation over `m` micro-batches (see [convlstm_train_step()]) -- with the
#' memory plan of each
#' ([convlstm_memory_estimate()]: the bytes the step will then hold, per category),
#' whether it fits `budget`, and its step time predicted relative to the
#' plain float32 step. Truncated backpropagation (`tbptt`) changes the
#' gradient, so it is listed only with `allow_tbptt = TRUE`. Nothing is
#' allocated for the plans, so any budget can be asked about, e.g. a GPU's
#' that this machine does not have.
#'
#' A configuration fits when its `reserved` bytes (what the device must hand
#' over: the model's buffers plus the step arena, as for [convlstm_max_batch_size()])
#' are at most `budget`: a model with `memory_limit = budget` then trains in
#' it, and one that does not fit fails with an error of class
#' `convlstm_error_oom`.
#'
#' @section The time prediction:
#' The predicted time of a step is `flops / R_flop[dtype] + bytes /
#' R_bytes + weights / R_weights`: `flops` counts the multiply-adds of every
#' convolution the step runs (forward, backward for data and filter, and the
#' forward that checkpointing and `recompute_gates` run again), call by
#' call as the package's C core lists the step's convolutions (the same
#' list its memory plan sizes the convolution workspace from), on the CPU
#' counting the idle
#' threads of a call over fewer images than threads; `bytes` what the cell
#' kernels and convolutions read and write per time step, the batch's upload
#' and the optimizer's update; `weights` the weight (or its gradient) that
#' every convolution call reads, so many small micro-batches cost more. The
#' rates are measured once per machine, device and thread count, from
#' training steps of small calibration models on the model's device: one
#' mostly convolution arithmetic (in each dtype, as the CPU computes half
#' types through conversions, and in micro-batches of one sample), one
#' mostly memory traffic. Only ratios are reported, relative to the plain
#' float32 step of the same shape. An encoder-forecaster's step is priced
#' the same way from its own list of calls: the encoder over the input
#' frames, the forecaster over the `horizon` target frames, the head, each
#' at the patches' size, and what checkpointing and `recompute_gates` run
#' again in each stack. The first call on a machine runs 25
#' calibration steps (1.3 s on one thread of the machine below, 12 s on two
#' threads while it was loaded) and stores the rates in the user's cache
#' folder for the package (`tools::R_user_dir("convlstm", "cache")`, file
#' `advise-rates.rds`; delete it to measure again), so every later process
#' on the machine ranks the same configurations the same way and
#' `convlstm_fit(memory_budget = )` picks the same one. Where that folder
#' cannot be written, and while `R CMD check` runs the package, the rates
#' are measured once per R session. The calibration's five small models
#' are made, timed and released one at a time, so it holds at most the
#' largest of their planned steps (the one mostly memory traffic: 15.4 MiB
#' on the CPU, its [convlstm_memory_estimate()] total) plus their data (R arrays,
#' 3.1 MiB): 18.5 MiB, outside any `memory_budget`. Measured from outside
#' (the growth of the process's high-water mark over the calibration, a
#' fresh process on this package's development machine): 18.4 MiB; 37.8 MiB
#' when it held the five at once. So the first budgeted fit on a machine
#' holds up to that beside its model before its own step is allocated; a
#' budget below it is exceeded then, once.
#'
#' On the CPU a half type's step is predicted as the float32 step's times
#' the ratio its calibration step measured, at least 1: the CPU converts
#' half storage to float32 and computes in float32, so half types save
#' memory there, never time, and a budget the float32 step fits keeps
#' float32. Configurations predicted equally fast are ranked float32 first,
#' then with the fewest options changed, then by their plan, so a budget
#' the plain step fits trains the plain step unless another is predicted
#' faster.
#'
#' How good the prediction is was measured on the CPU this package was
#' developed on (2 cores, shared with other work throughout: load average
#' 11 to 14), with `bench/bench_advise.R`: the tutorial model
#' (`convlstm(1, c(64, 1), 3)`) at batch 8, 6 steps of 24 x 24, ten
#' configurations alternating for 4 rounds of 2 steps, each timed by the
#' process's CPU time (the wall clock of a step varied by a factor of three
#' on that machine), predicted against measured ratio to the plain float32
#' step (the half types' predictions are those of the model before it
#' predicted them from their calibration ratio, as above):
#'
#' | configuration | 1 thread: predicted | measured | 2 threads: predicted | measured |
#' |---|---|---|---|---|
#' | checkpoint 2 | 1.21 | 1.21 | 1.21 | 1.14 |
#' | checkpoint 4 | 1.21 | 1.21 | 1.21 | 1.24 |
#' | checkpoint 1 | 1.28 | 1.29 | 1.27 | 1.45 |
#' | 2 micro-batches | 1.00 | 1.00 | 1.00 | 1.13 |
#' | 8 micro-batches (of 1 sample) | 1.00 | 0.99 | 1.60 | 3.53 |
#' | float16 | 1.48 | 1.17 | 0.61 | 0.92 |
#' | bfloat16 | 1.48 | 1.18 | 0.68 | 0.99 |
#' | float16, checkpoint 2, 2 micro-batches | 1.78 | 1.43 | 0.73 | 2.10 |
#' | bfloat16, 8 micro-batches | 1.48 | 1.21 | 1.10 | 2.27 |
#'
#' On one thread, checkpointing and accumulation were predicted within 1 %
#' and the half types 23 to 27 % too slow (largest error 27 %, rank
#' correlation 0.64); a second run measured the same rates to three digits
#' and the same errors within 2 points. On two threads the largest error was
#' 65 % (rank correlation 0.70): micro-batches of one sample and half types
#' in short segments run many small parallel convolution calls, whose
#' threads wait for each other at every call (worse on a loaded machine),
#' which the model counts only as idle threads. A second run on two threads
#' went wrong in the calibration itself: one slow calibration step gave the
#' per-call weight term most of the float32 step, bfloat16 was predicted at
#' 4.00 against 1.18 measured, and the largest error was 239 % (rank
#' correlation 0.45). So on a shared machine with several threads the
#' ratios can change from one session to the next; read them as a ranking
#' of alternatives of similar memory, not as a timing. The memory columns,
#' by contrast, are the plan itself and exact. On a GPU the rates are
#' measured the same way, but the prediction has not been checked there.
#'
#' Forecasting steps (`horizon = 4` after 6 steps, batch 8, the same model;
#' `bench/bench_advise_forecast.R`, load average 3.4): on one thread the
#' free-running float32 step with 2 or 8 micro-batches was predicted within
#' 3 %, the teacher-forced one with checkpointing or `recompute_gates`
#' within 1 %, the half types 20 to 24 % too slow (rank correlation 0.63).
#' On two threads the largest error was 65 % (bfloat16 predicted at 0.46
#' against 1.31) and free-running micro-batches of one sample were
#' predicted at 1.99 against 3.60 measured: the same limits as above.
#'
#' @inheritParams convlstm_memory_estimate
#' @param budget Bytes the training step may take in all, parameters
#'   included: a number or a string such as `"16 GiB"` (as `memory_limit` in
#'   [convlstm()] takes); `NULL`: what the model holds now plus what its
#'   device (or its `memory_limit`) has free, as in [convlstm_max_batch_size()].
#' @param optimizer The optimizer whose state to plan ([convlstm_optimizer_adam()],
#'   [convlstm_optimizer_sgd()], [convlstm_optimizer_rmsprop()]).
#' @param target The output the loss is on, as in [convlstm_train_step()]: it decides
#'   how much of the sequence a truncated backpropagation runs backward.
#' @param allow_tbptt Also list truncated backpropagation through time
#'   (windows of `tbptt` steps), which saves memory but does not compute the
#'   same gradient.
#' @param horizon `0`, or plan the forecasting step of [convlstm_train_step()] with
#'   `horizon`: `seq_len` input steps and the `horizon` frames that follow
#'   (a step over `seq_len + horizon - 1` steps, [convlstm_memory_estimate()] with
#'   `horizon`); `target` is then `"sequence"`. The time prediction counts
#'   that many steps, of which a free-running step's `horizon - 1` fed-back
#'   ones run their input convolutions one step per call (a schedule is
#'   predicted free-running). For an encoder-forecaster
#'   ([convlstm_forecaster()]): the frames it forecasts, at least 1. The
#'   advice lists only configurations whose every option the model's kind
#'   supports ([convlstm_capabilities()]): for an encoder-forecaster every
#'   dtype, micro-batches, `checkpoint` and `recompute_gates` (not `tbptt`); a
#'   `teacher_forcing` or `target` it does not support is refused as
#'   [convlstm_train_step()] refuses it.
#' @param teacher_forcing With a `horizon`: `TRUE` plans teacher-forced
#'   steps; `FALSE` or a probability below 1 free-running ones (scheduled
#'   sampling plans as free-running, see [convlstm_memory_estimate()]), which cannot
#'   use `checkpoint`, `tbptt` or `recompute_gates`, so these are left out of
#'   the list; a function of the epoch (a schedule, [convlstm_sampling_schedule()])
#'   plans both, as [convlstm_fit()] may take either: a row's bytes are then
#'   those of the plan that reserves more, and free-running's exclusions
#'   apply. `TRUE` without a `horizon`.
#' @param source `NULL`, or the data source a fit reads its batches from:
#'   every configuration's plan then holds the source's staging buffers of
#'   a batch of `batch_size` (under `data`, see [convlstm_memory_estimate()]).
#' @return A data frame of class `convlstm_memory_advice`, one row per
#'   configuration: the fitting ones first, fastest first; then the others,
#'   closest to fitting first. Columns: `dtype`, `checkpoint`,
#'   `recompute_gates` (0, or the steps recomputed at once),
#'   `accumulation_steps`, `tbptt`, `micro_batch` (samples per
#'   micro-batch); the planned bytes per category (`parameters`,
#'   `gradients`, `optimizer`, `activations`, `states`, `workspace`,
#'   `data`), `total` (the planned peak), `reserved` and `runtime` (what the
#'   process needs beside the model, taken off a budget given); `fits`; `time_ratio`
#'   (predicted step time over the plain float32 step's); `reason` (why it
#'   does not fit, `""` when it does). Attributes: `budget`, `shape`,
#'   `target`, `optimizer`, `rates` (the cost model's measured rates),
#'   `horizon` and `teacher_forcing` (the teacher forcing of each plan: 1,
#'   below 1, or both for a schedule).
#'   It has a `print()` method (`n` rows of each kind).
#' @seealso [convlstm_memory_estimate()], [convlstm_max_batch_size()], [convlstm_fit()] with
#'   `memory_budget`.
#' @export
#' @examples
#' model <- convlstm(1, c(16, 1), 3, device = "cpu")
#' advice <- convlstm_memory_advise(model, budget = "40 MiB", batch_size = 32, seq_len = 10,
#'                         height = 32, width = 32)
#' advice
#' advice[1, c("dtype", "checkpoint", "accumulation_steps", "reserved", "time_ratio")]
#' convlstm_release(model)
#' # forecasting 3 frames: teacher-forced, free-running (no checkpoint), a schedule
#' fc <- convlstm(1, c(16, 1), 3, device = "cpu")
#' convlstm_memory_advise(fc, "40 MiB", 32, 10, 32, 32, horizon = 3)
#' free <- convlstm_memory_advise(fc, "40 MiB", 32, 10, 32, 32, horizon = 3, teacher_forcing = FALSE)
#' any(free$checkpoint > 0 | free$recompute_gates > 0) # FALSE
#' convlstm_memory_advise(fc, "40 MiB", 32, 10, 32, 32, horizon = 3,
#'               teacher_forcing = convlstm_sampling_schedule("exponential", k = 0.5))
#' convlstm_release(fc)
convlstm_memory_advise <- function(model, budget, batch_size, seq_len, height, width,
                          optimizer = convlstm_optimizer_adam(), target = c("last_state", "sequence"),
                          allow_tbptt = FALSE, horizon = 0, teacher_forcing = TRUE,
                          source = NULL) {
  call <- sys.call()
  ptr <- model_ptr(model)
  forecaster <- is_convlstm_forecaster(model)
  # what the model's kind does not run, refused as convlstm_train_step() refuses it
  require_capabilities(model, step_capabilities(
    teacher_forcing = teacher_forcing, target = if (!missing(target)) target))
  budget <- resolve_budget(ptr, budget, "budget", call)
  B <- check_count(batch_size, "batch_size")
  T <- check_count(seq_len, "seq_len")
  H <- check_count(height, "height")
  W <- check_count(width, "width")
  optimizer <- check_optimizer(optimizer)
  forecast <- if (forecaster) forecaster_forecast(horizon, call)
              else advise_forecast(horizon, teacher_forcing, ptr, call)
  if (forecast$horizon > 0) {
    if (!missing(target) && !identical(target, "sequence")) {
      abort_arg("target", '"sequence" with a `horizon`', target, call)
    }
    target <- "sequence"
  }
  target <- target_choice(target, model_config(model), missing(target))
  allow_tbptt <- check_flag(allow_tbptt, "allow_tbptt")
  # a forecast trains over the sequence and the frames fed back after it
  steps <- T + forecast$horizon - (forecast$horizon > 0)

  grid <- offered(model, advise_grid(B, steps, allow_tbptt, forecast$free_run))
  plans <- lapply(seq_len(nrow(grid)), function(i) {
    plan_of(model, grid[i, ], B, T, H, W, optimizer, forecast, target, source)
  })
  bytes <- do.call(rbind, lapply(plans, `[[`, "bytes"))
  rows <- cbind(grid, micro_batch = ceiling(B / grid$accumulation_steps), as.data.frame(bytes))
  rows$fits <- !is.na(rows$reserved) & rows$reserved <= budget
  config <- c_model_config(ptr)
  rates <- backend_rates(config)
  # a free-running step's fed-back steps (a schedule's too: predicted free-running)
  fed <- if (forecast$free_run) max(0L, forecast$horizon - 1L) else 0L
  # an encoder-forecaster's step: T input frames, its horizon's target frames
  priced <- if (forecaster) list(T = T, horizon = forecast$horizon) else list(T = steps, horizon = 0L)
  seconds <- vapply(seq_len(nrow(grid)), function(i) {
    predicted_seconds(ptr, config, c(grid[i, ], fed = fed, horizon = priced$horizon), B,
                      priced$T, H, W, target, optimizer, rates)
  }, numeric(1))
  rows$time_ratio <- seconds / seconds[[1]] # row 1 is the plain float32 step
  rows$reason <- ifelse(rows$fits, "", vapply(seq_len(nrow(rows)), function(i) {
    plans[[i]]$error %||% why_not(rows[i, ], budget)
  }, character(1)))
  over <- ifelse(is.na(rows$reserved), Inf, rows$reserved - budget)
  # ties (a CPU half type predicted no slower than float32; micro-batches
  # whose per-call cost the calibration could not see) go to float32 and to
  # the fewest options changed, so a fitting plain step is never passed
  # over for one that is not predicted faster; then to the smaller plan
  changed <- (rows$checkpoint > 0) + (rows$recompute_gates > 0) +
    (rows$accumulation_steps > 1) + (rows$tbptt > 0)
  order <- order(!rows$fits, ifelse(rows$fits, rows$time_ratio, over),
                 rows$dtype != "float32", changed, rows$reserved)
  out <- rows[order, , drop = FALSE]
  rownames(out) <- NULL
  structure(out, class = c("convlstm_memory_advice", "data.frame"), budget = budget,
            shape = c(batch_size = B, seq_len = T, height = H, width = W), target = target,
            optimizer = optimizer$kind, rates = rates, horizon = forecast$horizon,
            teacher_forcing = forecast$modes)
}

# An encoder-forecaster's horizon (the frames its forecaster runs, >= 1),
# in advise_forecast()'s form (its teacher forcing: the capability table).
forecaster_forecast <- function(horizon, call) {
  K <- check_count(horizon, "horizon", min = 1, call = call)
  list(horizon = K, modes = 1, free_run = FALSE)
}

# The configurations of a grid whose every option the model's kind supports
# (the capability table): the advisor offers nothing training refuses.
offered <- function(model, grid) {
  asked <- lapply(seq_len(nrow(grid)), function(i) {
    step_capabilities(dtype = grid$dtype[[i]], checkpoint = grid$checkpoint[[i]],
                      tbptt = grid$tbptt[[i]], recompute_gates = grid$recompute_gates[[i]],
                      accumulation_steps = grid$accumulation_steps[[i]])
  })
  options <- unique(unlist(asked))
  ok <- stats::setNames(supports(model, options), options)
  keep <- vapply(asked, function(a) all(ok[a]), logical(1))
  out <- grid[keep, , drop = FALSE]
  rownames(out) <- NULL
  out
}

# convlstm_memory_advise()'s horizon and teacher_forcing: the horizon (0: none), the
# teacher forcing of every step to plan (modes: 1 teacher-forced, below 1
# free-running; a schedule's steps may be either, so both), and whether
# any step runs free (it refuses checkpoint, tbptt and recompute_gates:
# check_step_options()).
advise_forecast <- function(horizon, teacher_forcing, ptr, call) {
  K <- check_count(horizon, "horizon", min = 0, call = call)
  if (K == 0) {
    if (is.function(teacher_forcing)) {
      abort_arg("teacher_forcing", "TRUE without a `horizon`", teacher_forcing, call)
    }
    check_teacher_forcing(teacher_forcing, FALSE, call)
    return(list(horizon = 0L, modes = 1, free_run = FALSE))
  }
  check_horizon(K, c_model_config(ptr), call = call)
  modes <- if (is.function(teacher_forcing)) c(1, 0)
           else check_teacher_forcing(teacher_forcing, TRUE, call)
  list(horizon = K, modes = modes, free_run = any(modes < 1))
}

# Every configuration that keeps the gradient: each dtype, no checkpoint or
# one of a few segment lengths, the gates kept or recomputed in backward,
# one or more micro-batches; row 1 is the
# plain float32 step. tbptt windows (never with checkpointing) when allowed.
# A free-running step takes none of checkpoint, tbptt and recompute_gates.
advise_grid <- function(B, T, allow_tbptt, free_run = FALSE) {
  splits <- if (free_run) integer() else time_splits(T)
  micro <- micro_splits(B)
  grid <- expand.grid(dtype = dtypes(), checkpoint = c(0L, splits),
                      recompute_gates = c(0L, if (!free_run) recompute_chunk),
                      accumulation_steps = micro, tbptt = 0L, stringsAsFactors = FALSE,
                      KEEP.OUT.ATTRS = FALSE)
  if (allow_tbptt && length(splits) > 0) {
    grid <- rbind(grid, expand.grid(dtype = dtypes(), checkpoint = 0L, recompute_gates = 0L,
                                    accumulation_steps = micro, tbptt = splits,
                                    stringsAsFactors = FALSE, KEEP.OUT.ATTRS = FALSE))
  }
  grid
}

# Segment (or window) lengths below T worth trying: powers of two and
# sqrt(T), where checkpointing's T / k + k is smallest.
time_splits <- function(T) {
  if (T < 2) return(integer())
  k <- c(2^(0:floor(log2(T - 1))), ceiling(sqrt(T)))
  as.integer(sort(unique(k[k < T])))
}

# Micro-batch counts: powers of two and the whole batch one sample at a
# time, each giving a different micro-batch size.
micro_splits <- function(B) {
  m <- unique(c(2^(0:floor(log2(B))), B))
  m <- m[!duplicated(ceiling(B / m))]
  as.integer(sort(m))
}

# One configuration's plan by category (NA with the reason when its sizes
# overflow what the planner can hold); with several teacher-forcing modes
# (forecast$modes) the plan of the one that reserves the most, so that the
# configuration fits every step.
plan_of <- function(model, cfg, B, T, H, W, optimizer, forecast, target, source = NULL) {
  cols <- c(mem_categories, "total", "reserved", "runtime")
  tryCatch({
    each <- lapply(forecast$modes, function(tf) {
      est <- convlstm_memory_estimate(model, B, T, H, W, dtype = cfg$dtype, checkpoint = cfg$checkpoint,
                             accumulation_steps = cfg$accumulation_steps, tbptt = cfg$tbptt,
                             optimizer = optimizer, recompute_gates = cfg$recompute_gates,
                             horizon = forecast$horizon, teacher_forcing = tf,
                             target = target, source = source)
      estimate_bytes(est)[cols]
    })
    list(bytes = each[[which.max(vapply(each, function(b) b[["reserved"]], numeric(1)))]])
  }, convlstm_error_invalid = function(e) {
    list(bytes = stats::setNames(rep(NA_real_, length(cols)), cols),
         error = conditionMessage(e))
  })
}

why_not <- function(row, budget) {
  step <- unlist(row[c("activations", "states", "workspace", "data")])
  big <- names(step)[which.max(step)]
  sprintf("%s over the budget (%s %s)", format_bytes(row$reserved - budget), big,
          format_bytes(max(step)))
}

# ---- the cost model ------------------------------------------------------

# Convolution FLOPs and bytes moved by one training step of a configuration
# (cfg: dtype, checkpoint, accumulation_steps, tbptt, recompute_gates, and
# fed, a free-running forecast's fed-back steps) of the model behind ptr.
# The convolutions are the step's own calls as the core lists them
# (c_conv_calls, src/core/conv_calls.c: the executor's schedule written
# once, in C), each call's FLOPs 2 N H W K (C / groups) kh kw. On the CPU
# a convolution call shares its images among `threads`
# (src/cpu/cpu_conv.c), so a call over fewer images than threads leaves
# some idle: its FLOPs are counted as the work of the threads it occupies.
# A weight (or its gradient) is read once per call. The cells' and
# activations' traffic follows the steps each sample runs forward and
# backward: the images of layer 1's input half in its forward calls and
# in its filter gradients.
step_work <- function(ptr, config, cfg, B, T, H, W, target, optimizer_kind, threads) {
  fed <- cfg$fed %||% 0
  # an encoder-forecaster's horizon: the target frames its forecaster runs
  # (T is then its input frames, and the calls are at the patches' size)
  K <- cfg$horizon %||% 0L
  options <- check_step_options(cfg$checkpoint, cfg$accumulation_steps, cfg$tbptt,
                                dtype = cfg$dtype, batch_size = B,
                                state = list(mode = "zero", arrays = NULL,
                                             horizon = if (fed > 0) fed + 1L else K,
                                             free_run = fed > 0),
                                recompute_gates = cfg$recompute_gates %||% 0L)
  calls <- c_conv_calls(ptr, c(B, T, H, W), TRUE, options, identical(target, "sequence"))
  B <- as.double(B) # products of sizes overflow integers
  P <- as.double(H) * W
  e <- if (identical(cfg$dtype, "float32")) 4 else 2
  f <- 4 # gradients of activations are float32 whatever the storage
  n <- as.double(calls$N)
  taps <- as.double(calls$K) * calls$C / calls$groups * calls$kh * calls$kw
  busy <- function(n) n / (threads * ceiling(n / threads)) # share of threads at work
  # each call's pixels: a forecaster's calls are at (H / patch) x (W / patch)
  px <- as.double(calls$H) * calls$W
  flops <- sum(2 * px * taps * n * calls$count / busy(n))
  weights <- sum(4 * taps * calls$count)
  hid <- as.double(config$hidden_dims)
  L <- length(hid)
  # per layer: the steps each sample runs it forward and backward (the
  # images of its input half's forward calls and filter gradients; a layer
  # reading nothing, a forecaster's first, its hidden half's; a layer whose
  # input joins its hidden half, src/core/forward.c, both halves' forward
  # calls: the joined steps listed as its hidden half's, over h + in
  # channels, and a first step without a state as its input half's), the
  # channels it reads (0: none) and whether its input's gradient is needed
  images <- function(dir, half) {
    on <- calls$direction == dir & calls$half == half
    v <- tapply(n[on] * calls$count[on], factor(calls$layer[on], levels = seq_len(L) - 1), sum)
    ifelse(is.na(v), 0, v) / B
  }
  has_x <- images("backward_filter", 0) > 0 # the input's filter gradient never joins
  joined <- vapply(seq_len(L) - 1, function(l) {
    on <- calls$layer == l & calls$half == 1 & calls$direction == "forward"
    any(calls$C[on] / calls$groups[on] > hid[[l + 1]])
  }, logical(1))
  fwd <- ifelse(joined, images("forward", 0) + images("forward", 1),
                ifelse(has_x, images("forward", 0), images("forward", 1)))
  bwd <- ifelse(has_x, images("backward_filter", 0), images("backward_filter", 1))
  inp <- vapply(seq_len(L) - 1, function(l) {
    c0 <- calls$C[calls$layer == l & calls$half == 0]
    if (length(c0)) as.double(c0[[1]]) else 0
  }, numeric(1))
  below <- seq_len(L) > 1 & has_x
  # per sample and step: forward convolutions and cell; backward cell,
  # convolutions (data and filter) and the gradients they accumulate
  lp <- if (isTRUE(config$forecaster)) px[[1]] else P # a layer's pixels
  fwd_bytes <- lp * e * (inp + 19 * hid)
  bwd_bytes <- lp * (e * (inp + 23 * hid) + f * 5 * hid + below * (e * 4 * hid + f * inp))
  data <- if (isTRUE(config$forecaster)) { # T input and K target frames
    B * P * config$input_dim * (T * (8 + e) + K * (8 + f))
  } else {
    C_out <- hid[[L]]
    B * P * (T * config$input_dim * (8 + e) +
               (if (target == "sequence") T else 1) * C_out * (8 + f))
  }
  update <- config$n_params * 4 * if (identical(optimizer_kind, "adam")) 10 else 6
  bytes <- B * sum(fwd_bytes * fwd + bwd_bytes * bwd) + data + update
  c(flops = flops, bytes = bytes, weights = weights)
}

# On the CPU a half type's step is the float32 step's times the ratio the
# calibration measured, at least 1: the CPU converts half storage to float32
# where the convolutions and cells read it and computes in float32, so it
# saves memory, never time (measured 1.17-1.76 times float32's step), and
# the byte count alone would predict it faster.
predicted_seconds <- function(ptr, config, cfg, B, T, H, W, target, optimizer, rates) {
  if (!is.null(rates$half) && !identical(cfg$dtype, "float32")) {
    plain <- cfg
    plain$dtype <- "float32"
    return(predicted_seconds(ptr, config, plain, B, T, H, W, target, optimizer, rates) *
             rates$half[[cfg$dtype]])
  }
  work <- step_work(ptr, config, cfg, B, T, H, W, target, optimizer$kind, rates$threads)
  work[["flops"]] / rates$flops[[cfg$dtype]] + work[["bytes"]] / rates$bytes +
    work[["weights"]] / rates$weights
}

# The threads a CPU model's convolutions share images among: its `threads`,
# else OpenMP's default (OMP_NUM_THREADS, else one per core). A GPU runs a
# call's images at once.
conv_threads <- function(config) {
  if (!identical(config$device, "cpu")) return(1L)
  if (config$threads > 0) return(as.integer(config$threads))
  omp <- suppressWarnings(as.integer(Sys.getenv("OMP_NUM_THREADS")))
  if (!is.na(omp) && omp > 0) return(omp)
  cores <- if (requireNamespace("parallel", quietly = TRUE)) parallel::detectCores() else NA
  if (is.na(cores) || cores < 1) 1L else as.integer(cores)
}

# The cost model's rates for a model's device and thread count: measured
# once per machine and stored (rates_file()), so that every process on the
# machine ranks the same configurations the same way and convlstm_fit()'s
# memory_budget picks the same one (a rate measured in each process made
# one script train in bfloat16 in one run and float16 in the next). Kept in
# the session too; measured again only when no stored rates match the key.
advise_cache <- new.env(parent = emptyenv())

backend_rates <- function(config) {
  key <- rates_key(config)
  if (is.null(advise_cache[[key]])) {
    advise_cache[[key]] <- stored_rates(key) %||% store_rates(key, measure_rates(config))
  }
  advise_cache[[key]]
}

# What the rates depend on: the device and its threads, the machine (its
# name, processor and cores, or the GPU's name), this package's version
# (its kernels) and the cost model's (the work the rates divide: rates
# stored by another step_work() are measured again). One key, one line of
# the file.
cost_model_version <- 2L # 2: the work of the core's list of convolution calls
rates_key <- function(config) {
  threads <- conv_threads(config)
  machine <- if (identical(config$device, "cpu")) cpu_model() else gpu_name()
  paste(config$device, threads, Sys.info()[["nodename"]], machine, R.version$platform,
        as.character(utils::packageVersion("convlstm")),
        paste("cost model", cost_model_version), sep = " | ")
}

cpu_model <- function() {
  info <- tryCatch(readLines("/proc/cpuinfo", warn = FALSE), error = function(e) character())
  model <- sub(".*:\\s*", "", grep("^model name", info, value = TRUE)[1])
  cores <- if (requireNamespace("parallel", quietly = TRUE)) parallel::detectCores() else NA
  paste(if (is.na(model)) Sys.info()[["machine"]] else model, cores, "cores")
}

gpu_name <- function() {
  tryCatch(paste(c_gpu_info()$name, collapse = ", "), error = function(e) "gpu")
}

# The file of stored rates: one per user, in R's cache folder for the
# package (tools::R_user_dir(); the environment variable R_USER_CACHE_DIR
# moves it). Deleting it makes the next convlstm_memory_advise() measure again.
rates_file <- function() {
  file.path(tools::R_user_dir("convlstm", which = "cache"), "advise-rates.rds")
}

read_rates_file <- function() {
  f <- rates_file()
  all <- if (file.exists(f)) tryCatch(readRDS(f), error = function(e) NULL)
  if (is.list(all)) all else list()
}

stored_rates <- function(key) {
  r <- read_rates_file()[[key]]
  if (is.list(r) && all(c("flops", "bytes", "weights", "threads", "device") %in% names(r))) r
}

# Adds the rates under `key` (the file keeps at most 20 keys, the newest);
# a folder that cannot be written leaves them to this session alone, and so
# does R CMD check (which sets _R_CHECK_PACKAGE_NAME_ and must find no new
# files in the user's folders afterwards).
store_rates <- function(key, rates) {
  if (nzchar(Sys.getenv("_R_CHECK_PACKAGE_NAME_"))) return(rates)
  all <- read_rates_file()
  all[[key]] <- rates
  all <- utils::tail(all, 20)
  f <- rates_file()
  tryCatch({
    dir.create(dirname(f), recursive = TRUE, showWarnings = FALSE)
    tmp <- tempfile("rates", tmpdir = dirname(f))
    saveRDS(all, tmp)
    if (!file.rename(tmp, f)) unlink(tmp)
  }, error = function(e) NULL, warning = function(w) NULL)
  rates
}

# Calibration steps on the model's device give the three rates of time =
# flops / R_flop[dtype] + bytes / R_bytes + weights / R_weights: a layer as
# wide as the tutorial's, mostly convolution arithmetic, in every dtype and
# once more in micro-batches of one sample (whose many small convolution
# calls each read the whole weight); and a step of 1x1 kernels on two
# channels, mostly memory traffic. Steps are timed by the CPU time of the
# process (all its threads), not the wall clock: on a machine shared with
# other work the wall clock of a short step varies by a factor of two or
# more, its CPU time far less, and only the ratios of the rates matter.
# The steps alternate for four rounds and each keeps its least time. One
# calibration model is alive at a time (made, run once untimed to plan and
# allocate, timed, released), so the calibration holds at most its largest
# step's plan (calibration_bytes()), not the five together. R's random
# stream is left as it was.
measure_rates <- function(config) {
  seed <- get0(".Random.seed", envir = globalenv(), inherits = FALSE)
  on.exit(restore_seed(seed), add = TRUE)
  threads <- conv_threads(config)
  runs <- calibration_runs()
  data <- lapply(runs, function(r) calibration_data(r[[1]]))
  t <- rep(Inf, length(runs))
  for (round in 1:4) {
    for (i in seq_along(runs)) {
      r <- runs[[i]]
      t[[i]] <- min(t[[i]], calibration_step(config, r[[1]], r[[2]], r[[3]], data[[i]]))
    }
  }
  w <- lapply(runs, function(r) {
    cal <- r[[1]]
    conf <- list(input_dim = cal$input_dim, hidden_dims = cal$hidden, kernel_sizes = cal$kernel,
                 n_params = 4 * cal$hidden * ((cal$input_dim + cal$hidden) * cal$kernel^2 + 1))
    cfg <- list(dtype = r[[2]], checkpoint = 0L, accumulation_steps = r[[3]], tbptt = 0L)
    model <- calibration_model(config, cal, r[[2]]) # its calls listed, no step run
    on.exit(convlstm_release(model))
    step_work(model_ptr(model), conf, cfg, cal$B, cal$T, cal$size, cal$size, "last_state",
              "adam", threads)
  })
  per_byte <- t[[3]] / w[[3]][["bytes"]] # the light step: its arithmetic is negligible
  rest <- function(i) t[[i]] - w[[i]][["bytes"]] * per_byte
  # seconds per weight byte: what the heavy step in micro-batches takes beyond
  # its arithmetic at the whole step's rate (none if noise makes it negative)
  per_flop <- rest(1) / w[[1]][["flops"]]
  per_weight <- max(0, (rest(2) - w[[2]][["flops"]] * per_flop) / w[[2]][["weights"]])
  # at least a quarter of a heavy step is arithmetic, so that noise in the
  # other rates cannot make the convolutions free
  flop_rate <- function(i) {
    w[[i]][["flops"]] / max(rest(i) - w[[i]][["weights"]] * per_weight, t[[i]] / 4)
  }
  # the CPU's half types: their heavy step over the float32 one (see
  # predicted_seconds())
  half <- if (identical(config$device, "cpu")) {
    c(float16 = max(1, t[[4]] / t[[1]]), bfloat16 = max(1, t[[5]] / t[[1]]))
  }
  list(flops = stats::setNames(vapply(c(1, 4, 5), flop_rate, numeric(1)),
                               c("float32", "float16", "bfloat16")),
       bytes = 1 / per_byte, weights = 1 / per_weight, threads = threads,
       device = config$device, half = half)
}

# CPU seconds of this process, all threads together.
cpu_seconds <- function() {
  t <- proc.time()
  t[["user.self"]] + t[["sys.self"]]
}

# The calibration's steps: a model (its shape), its dtype and its
# micro-batches. heavy: mostly convolution arithmetic; light: 1x1 kernels
# on two channels, mostly memory traffic.
calibration_runs <- function() {
  heavy <- list(input_dim = 1L, hidden = 64L, kernel = 3L, B = 2L, T = 3L, size = 12L)
  light <- list(input_dim = 1L, hidden = 2L, kernel = 1L, B = 8L, T = 8L, size = 64L)
  list(list(heavy, "float32", 1L), list(heavy, "float32", 2L), list(light, "float32", 1L),
       list(heavy, "float16", 1L), list(heavy, "bfloat16", 1L))
}

# A calibration step's data, made once for all its rounds: x and y, each
# the uniforms themselves given dims (array() would copy them, leaving the
# first copy for the garbage collector while the steps run).
calibration_data <- function(cal) {
  x <- stats::runif(cal$B * cal$T * cal$input_dim * cal$size^2)
  dim(x) <- c(cal$B, cal$T, cal$input_dim, cal$size, cal$size)
  y <- stats::runif(cal$B * cal$hidden * cal$size^2)
  dim(y) <- c(cal$B, cal$hidden, cal$size, cal$size)
  list(x = x, y = y)
}

# A calibration step's model (cal: its shape) on the device of `config`.
calibration_model <- function(config, cal, dtype) {
  convlstm(cal$input_dim, cal$hidden, cal$kernel, device = config$device, dtype = dtype,
           threads = if (config$threads > 0) config$threads else NULL)
}

# One timing of a calibration step on data d: a fresh model, a first step
# that plans and allocates (not timed), then the CPU seconds of a second,
# returned; the model is released before it returns, and R's garbage of the
# call (its objects, not the step's buffers) collected, so that the next
# step starts from what the last one started from.
calibration_step <- function(config, cal, dtype, accumulation_steps, d) {
  model <- calibration_model(config, cal, dtype)
  on.exit({
    convlstm_release(model)
    invisible(gc(full = FALSE))
  })
  opt <- convlstm_optimizer_adam()
  run <- function() convlstm_train_step(model, d$x, d$y, opt, accumulation_steps = accumulation_steps)
  run()
  t0 <- cpu_seconds()
  run()
  cpu_seconds() - t0
}

# The most memory the calibration holds at once: the largest of its steps'
# plans (convlstm_memory_estimate()'s total: model, optimizer state and step) on the
# device of `config`, plus the data of every step (R doubles, made once).
# Made without running a step.
calibration_bytes <- function(config) {
  seed <- get0(".Random.seed", envir = globalenv(), inherits = FALSE)
  on.exit(restore_seed(seed), add = TRUE)
  runs <- calibration_runs()
  plans <- vapply(runs, function(r) {
    cal <- r[[1]]
    model <- calibration_model(config, cal, r[[2]])
    on.exit(convlstm_release(model))
    e <- convlstm_memory_estimate(model, cal$B, cal$T, cal$size, cal$size,
                         accumulation_steps = r[[3]], optimizer = convlstm_optimizer_adam(),
                         target = "last_state") # convlstm_train_step()'s default, as run() below
    e$bytes[e$category == "total"]
  }, numeric(1))
  data <- vapply(runs, function(r) {
    cal <- r[[1]]
    8 * cal$B * cal$size^2 * (cal$T * cal$input_dim + cal$hidden)
  }, numeric(1))
  max(plans) + sum(data)
}

# ---- printing ------------------------------------------------------------

#' @export
print.convlstm_memory_advice <- function(x, n = 10, ...) {
  shape <- attr(x, "shape")
  if (is.null(shape) || !all(c("dtype", "fits", "time_ratio", "reason") %in% names(x))) {
    return(print(as_plain_df(x), ...))
  }
  fit <- x[x$fits, , drop = FALSE]
  out <- x[!x$fits, , drop = FALSE]
  cat(sprintf(paste0(
    "<convlstm_memory_advice> training batch %d, %d step%s of %dx%d, %s, target %s\n",
    "budget %s: %d of %d configurations fit\n"),
    shape[["batch_size"]], shape[["seq_len"]], if (shape[["seq_len"]] == 1) "" else "s",
    shape[["height"]], shape[["width"]], attr(x, "optimizer"), attr(x, "target"),
    format_bytes(attr(x, "budget")), nrow(fit), nrow(x)))
  forecast_line(attr(x, "horizon") %||% 0L, attr(x, "teacher_forcing") %||% 1)
  shown <- function(d) {
    data.frame(
      dtype = d$dtype,
      checkpoint = ifelse(d$checkpoint > 0, as.character(d$checkpoint), "-"),
      recompute_gates = ifelse(d$recompute_gates > 0, as.character(d$recompute_gates), "-"),
      micro_batches = ifelse(d$accumulation_steps > 1,
                             sprintf("%d x %d", d$accumulation_steps, d$micro_batch), "-"),
      tbptt = ifelse(d$tbptt > 0, as.character(d$tbptt), "-"),
      activations = ifelse(is.na(d$activations), "-", format_bytes(d$activations)),
      reserved = ifelse(is.na(d$reserved), "-", format_bytes(d$reserved)),
      time = sprintf("%.2fx", d$time_ratio),
      stringsAsFactors = FALSE
    )
  }
  drop_tbptt <- function(d) if (all(d$tbptt == "-")) d[names(d) != "tbptt"] else d
  if (nrow(fit) > 0) {
    cat("\nFits, fastest first (time: predicted, relative to the plain float32 step):\n")
    print(drop_tbptt(shown(utils::head(fit, n))), row.names = FALSE, right = TRUE)
    if (nrow(fit) > n) cat(sprintf("... and %d more that fit\n", nrow(fit) - n))
  }
  if (nrow(out) > 0) {
    cat("\nDoes not fit, closest first:\n")
    d <- shown(utils::head(out, n))
    d$activations <- d$time <- NULL
    d <- drop_tbptt(d)
    # columns padded by hand: a data frame print would wrap the long reasons
    cols <- lapply(names(d), function(nm) {
      v <- c(nm, d[[nm]])
      formatC(v, width = -max(nchar(v)))
    })
    lines <- do.call(paste, c(cols, list(c("reason", utils::head(out$reason, n)))))
    cat(paste0(" ", lines), sep = "\n")
    if (nrow(out) > n) cat(sprintf("... and %d more that do not fit\n", nrow(out) - n))
  }
  if (nrow(x) > 2 * n || nrow(fit) > n || nrow(out) > n) {
    cat("(print(x, n = Inf) shows every row)\n")
  }
  invisible(x)
}

# The print's line on a forecast: which steps are planned, and what a
# free-running one leaves out of the list.
forecast_line <- function(K, modes) {
  if (K == 0) return(invisible())
  steps <- if (length(modes) > 1) "teacher-forced and free-running steps (a schedule), each"
           else if (modes < 1) "free-running steps" else "teacher-forced steps"
  cat(sprintf("forecast of %d frame%s: %s planned%s\n", K, if (K == 1) "" else "s", steps,
              if (any(modes < 1)) {
                "; no checkpoint, tbptt or recompute_gates (a free-running step refuses them)"
              } else ""))
}

# ---- convlstm_fit(memory_budget = , batch_size = "max") ---------------------

# The batch size and step options convlstm_fit() trains with. With a
# memory_budget the advisor picks the fastest configuration that fits (its
# `dtype`, which convlstm_fit() converts the model to once every argument is
# checked: nothing is changed here) and says which in one `line` (printed
# by the fit); batch_size = "max" trains at convlstm_max_batch_size() for that
# configuration (for the options given when there is no budget), at most
# the n samples there are. Without either, the arguments as given. A
# forecast's fit gives the plans of its steps (fit_forecast()) and its
# teacher_forcing: the pick and the batch fit every one of them. A
# source's staging buffers (source_staging()) are planned with each step.
fit_memory_plan <- function(model, xd, batch_size, memory_budget, optimizer, target,
                            checkpoint, accumulation_steps, tbptt,
                            plans = list(list()), recompute_gates = FALSE,
                            teacher_forcing = TRUE, source = NULL, call = sys.call(-1)) {
  given <- list(batch_size = batch_size, checkpoint = checkpoint,
                accumulation_steps = accumulation_steps, tbptt = tbptt,
                recompute_gates = recompute_gates)
  is_max <- identical(batch_size, "max")
  if (is.null(memory_budget) && !is_max) return(given)
  if (!is_max && !(is.numeric(batch_size) && length(batch_size) == 1)) {
    abort_arg("batch_size", 'a positive whole number or "max"', batch_size, call)
  }
  ptr <- model_ptr(model, call = call)
  n <- xd[[1]]
  shape <- list(seq_len = xd[[2]], height = xd[[4]], width = xd[[5]])
  budget <- resolve_budget(ptr, memory_budget, "memory_budget", call)
  # plans: the forecast options of every step the fit may take (a
  # forecast's, fit_forecast()); the batch must fit each
  largest <- function(opts, dtype = NULL) {
    at_most <- function(src) {
      min(vapply(plans, function(f) {
        as.double(do.call(convlstm_max_batch_size, c(list(model), shape,
                                            list(budget = budget, optimizer = optimizer,
                                                 dtype = dtype, source = src), opts, f)))
      }, numeric(1)))
    }
    b <- at_most(source)
    # plain arrays in one batch are not sliced (source_staging()): all of
    # them where the step alone fits them, though fewer sliced do not fit
    if (b < n && isTRUE(source$plain) && at_most(NULL) >= n) b <- n
    min(n, as.integer(b))
  }
  horizon <- plans[[1]]$horizon %||% 0L
  if (is.null(memory_budget)) { # "max" with the options given
    opts <- given[-1]
    b <- largest(opts)
    if (b == 0) {
      abort_no_fit(budget, "not even a batch of one sample (or one per micro-batch)", call)
    }
    chosen <- c(list(batch_size = b), opts)
    line <- sprintf("batch_size = \"max\": %d samples per batch%s", b,
                    if (b == n) " (all of them)" else sprintf(" (the most that fit in %s)",
                                                              format_bytes(budget)))
  } else {
    if (checkpoint != 0 || accumulation_steps != 1 || tbptt != 0 ||
        check_recompute_gates(recompute_gates, call = call) != 0) {
      abort_convlstm(paste0(
        "`memory_budget` chooses `checkpoint`, `recompute_gates` and `accumulation_steps` ",
        "itself: leave them and `tbptt` out, or give them without a budget."), call = call)
    }
    B <- if (is_max) max(1L, largest(list()))
         else min(n, check_count(batch_size, "batch_size", call = call))
    advice <- convlstm_memory_advise(model, budget, B, shape$seq_len, shape$height, shape$width,
                            optimizer = optimizer, target = target, horizon = horizon,
                            teacher_forcing = teacher_forcing, source = source)
    if (!any(advice$fits)) {
      abort_no_fit(budget, sprintf("no configuration of a batch of %d fits; the closest is %s",
                                   B, advice$reason[[1]]), call)
    }
    pick <- advice[1, ]
    opts <- list(checkpoint = pick$checkpoint, accumulation_steps = pick$accumulation_steps,
                 tbptt = pick$tbptt, recompute_gates = pick$recompute_gates)
    b <- if (is_max) largest(opts, pick$dtype) else batch_size # more than n: the fit says so
    trained <- min(b, n) # the default batch of 32 is lowered to the samples there are
    estimates <- lapply(plans, function(f) {
      do.call(convlstm_memory_estimate, c(list(model, trained), shape,
                                 list(optimizer = optimizer, dtype = pick$dtype, source = source),
                                 opts, f))
    })
    planned <- max(vapply(estimates, function(e) estimate_bytes(e)[["reserved"]], numeric(1)))
    # held: what fit_budget() (budget.R) fits the data set and validation beside
    chosen <- c(list(batch_size = b), opts,
                list(dtype = pick$dtype, held = held_of(budget, estimates)))
    line <- sprintf(
      paste0("memory_budget %s: batch %d, %s%s%s (planned %s; step time predicted %.2fx the ",
             "plain float32 step's)"),
      format_bytes(budget), trained, pick$dtype, describe_options(c(opts, outputs = "all")),
      describe_forecast(horizon, if (!is_convlstm_forecaster(model)) teacher_forcing),
      format_bytes(planned), pick$time_ratio)
  }
  c(chosen, list(line = line))
}

# A forecasting fit's steps, for the budget's line (teacher_forcing NULL:
# an encoder-forecaster's, which feeds nothing back).
describe_forecast <- function(K, teacher_forcing) {
  if (K == 0) return("")
  if (is.null(teacher_forcing)) return(sprintf(", forecast of %d frame%s", K, if (K == 1) "" else "s"))
  steps <- if (is.function(teacher_forcing)) "teacher-forced and free-running steps"
           else if (teacher_forcing < 1) "free-running steps" else "teacher-forced steps"
  sprintf(", forecast of %d frame%s, %s", K, if (K == 1) "" else "s", steps)
}

abort_no_fit <- function(budget, what, call) {
  abort_convlstm(sprintf("Training does not fit in the memory budget of %s: %s.",
                         format_bytes(budget), what), status = "oom", call = call)
}
