# estimate.R -- memory before running: convlstm_memory_estimate() reads the plan of a
# step (every buffer the executor will allocate, with its category and
# bytes) from the core without allocating anything, and convlstm_max_batch_size()
# searches that plan for the largest batch under a budget. The plan is the
# allocation itself, so these numbers are the ones convlstm_memory_stats() then
# measures; measured runs over batch sizes are in profile.R.

#' Estimate the memory of a step before running it
#'
#' Asks the model's memory planner for every buffer a step of the given
#' shape needs -- the same plan the executor then allocates -- without
#' allocating anything, and sums it per category. After a step of that shape
#' on a fresh model (or after [convlstm_reset_peak_memory_stats()] and
#' [convlstm_empty_cache()]), the peaks of [convlstm_memory_stats()] equal these numbers to
#' the byte.
#'
#' The step's buffers live in one arena, reserved at the first step and
#' grown only when a step needs more than it holds: a smaller step
#' afterwards (validation, the last batch of an epoch) reuses it without
#' asking the device for memory, so `reserved` in [convlstm_memory_stats()] stays at
#' the largest step's until [convlstm_empty_cache()].
#'
#' Knobs that shrink memory are planned too: a half `dtype` halves
#' activations and data; `checkpoint` keeps states only every `checkpoint`
#' steps; `accumulation_steps` plans one micro-batch; `tbptt` plans one
#' window of time steps; an inference estimate (`training = FALSE`) has no
#' activations, gradients or optimizer state beyond what the model already
#' holds, and with `outputs = "last_state"` it does not grow with
#' `seq_len`.
#'
#' @param model A model created by [convlstm()].
#' @param batch_size,seq_len,height,width The shape of the input: `[batch,
#'   time, channels, height, width]` (channels are the model's `input_dim`).
#' @param training `TRUE` for a training step ([convlstm_train_step()]), `FALSE` for
#'   an inference forward (`model(x)`, [predict()]).
#' @param dtype `NULL` for the model's storage type, or `"float32"`,
#'   `"float16"`, `"bfloat16"` to see what the model would take after
#'   [convlstm_set_dtype()].
#' @param recompute_gates Plan a training step that keeps only the hidden
#'   and cell states of each time step and recomputes the gates in backward
#'   (one chunk of gates instead of every step's), as in [convlstm_train_step()].
#' @param checkpoint,accumulation_steps,tbptt Step options, as in
#'   [convlstm_train_step()].
#' @param optimizer The optimizer whose state to plan ([convlstm_optimizer_adam()],
#'   [convlstm_optimizer_sgd()], [convlstm_optimizer_rmsprop()]); `NULL`: the state the model holds, or for a
#'   training step of a model that has not taken one, Adam's.
#' @param outputs For an inference estimate: `"all"` keeps every layer's
#'   output sequence (as `model(x)`), `"last_state"` only the last states
#'   (as `predict(what = "last_state")`).
#' @param state Where the step starts: `"zero"`; `"given"`, an initial
#'   state passed as `state =` (planned as `initial_h` and `initial_c` per
#'   layer, under `states`); or `"carry"` (training only), the state
#'   `convlstm_train_step(state = "carry")` keeps in the model (`carried_state`,
#'   under `states`). A model that carries a state has it in every plan.
#' @param weight `NULL`, or for a training estimate with a per-element loss
#'   weight (`convlstm_train_step(..., weight = )`) the target it is shaped as,
#'   `"last_state"` or `"sequence"`: its buffer on the device (`weight`,
#'   under `data`) is planned too.
#' @param target For a training estimate, the target of the planned
#'   [convlstm_train_step()]: `NULL` plans the default call's (`"last_state"`; with a
#'   `horizon`, or for an encoder-forecaster, `"sequence"`), so that the
#'   default estimate is what a default `convlstm_train_step()` holds. The targets
#'   differ for a model of one layer trained on its last state, whose
#'   `d_hidden` holds one time step instead of every step (only the last
#'   step receives the loss's gradient, and nothing comes from a layer
#'   above).
#' @param horizon `0`, or for an inference estimate the frames a forecast
#'   `predict(model, x, horizon = )` rolls on after `seq_len` steps (planned
#'   as `frames`, under `activations`, with only the running states kept);
#'   for a training estimate the frames `convlstm_train_step(..., horizon = )` trains
#'   after `seq_len` input steps (a step over `seq_len + horizon - 1` steps).
#' @param teacher_forcing For a training estimate with a `horizon`, as in
#'   [convlstm_train_step()]: `FALSE` plans free-running training, whose fed-back
#'   frames sit in `x`'s slots of the later steps and whose backward through
#'   them keeps, per layer, its own `d_cell` and (below the last layer) two
#'   steps of `d_hidden_rollout` (one for a horizon of 2), under
#'   `workspace`. A probability below 1 (scheduled sampling) plans the same
#'   as `FALSE`, whatever the coins of a step say: the true frames go into
#'   the slots the fed-back frames would take. `FALSE` or a probability
#'   below 1 needs a `horizon` above 0.
#' @param world_size For a training estimate, the number of ranks of a
#'   data-parallel fit ([convlstm_fit()]`(distributed = )`), `batch_size`
#'   being each rank's. The plan is each rank's and does not change: the
#'   gradients are summed over the ranks in place, in one bucket per layer
#'   (a view of the gradients, no buffer of its own). Above 1 the estimate
#'   gets the attribute `communication`: a data frame of the buckets, with
#'   `layer`, `bytes` (all-reduced per step) and `sent_per_rank` (what a
#'   ring all-reduce sends from each rank, `2 (N - 1) / N` of them), in the
#'   order they are reduced (the last layer first).
#' @param source `NULL`, or the data source a fit reads this step's batch
#'   from ([convlstm_source_frames()], [convlstm_source_function()],
#'   [convlstm_source_arrays()]): the host staging buffers of its batch, `x`
#'   and `y` as the step takes them (doubles, `batch_size` samples of the
#'   source's shapes), are planned too, under `data`, as `source_x` and
#'   `source_y`; where the next batch is read while the step runs (every
#'   kind of source, unless `options(convlstm.prefetch = FALSE)`), twice
#'   (`source_x_next`, `source_y_next`); on a GPU a function or arrays
#'   source's next batch is also converted ahead (`staged_batch`,
#'   `staged_batch_next`: x in the storage dtype, y in float32, page-locked;
#'   `options(convlstm.stage_batches)`, [convlstm_fit()]). They are host memory, outside the
#'   allocator ([convlstm_memory_stats()] does not count them), so they
#'   are added to `total` and `reserved` too: what a fit from the source
#'   takes, which `memory_budget` must hold. Where those batches are sent
#'   ahead on the GPU's copy stream (`options(convlstm.send_ahead)`), the
#'   two device buffers they are sent into are planned as well
#'   (`staged_device`, `staged_device_next`: the same bytes, y from a
#'   multiple of 256), device memory of the model while an epoch trains.
#' @return A data frame of class `convlstm_memory_estimate` with columns
#'   `category` and `bytes`: one row per category (`parameters`,
#'   `gradients`, `optimizer`, `activations`, `states`, `workspace`,
#'   `data`), then `total` (their sum: everything the step holds at its
#'   peak) and `reserved` (what the allocator reserves from the device for
#'   it: the model's own buffers plus the step arena, in which each step
#'   buffer sits at an offset aligned to 256 bytes, followed by a guard band
#'   when the model was created with `CONVLSTM_GUARD=1`), then `runtime`:
#'   what the process holds on the device outside every model, measured
#'   once per process when the backend first started (on a GPU the CUDA
#'   context, the cuDNN handle and the stream; on the CPU 0, since the CPU
#'   backend's own costs -- its OpenMP threads' stacks -- are the process's
#'   host memory, which
#'   [convlstm_memory_stats()] measures as `process_peak`). It is in neither `total` nor `reserved`.
#'   The estimate is the same on every run for the same model, shape,
#'   build and machine (the CPU's GEMM is a fixed rule, its workspace that
#'   of the convolutions it will run); `runtime` is a measurement. Attribute `plan` holds
#'   the buffers (a data frame of class `convlstm_plan`: `name`,
#'   `category`, `bytes`, `layer`, where layers count from 0 as in the
#'   buffer names and the state dict, and `NA` marks model-wide buffers,
#'   and `offset`, the buffer's place in the step arena, `NA` for the
#'   parameters, gradients and optimizer state, which are allocations of
#'   their own, and for a training step `first_op` and `last_op`: the first
#'   and last operation of a micro-batch's list of operations that uses the
#'   buffer, counted from 1 (in the planner's summary of the list, where more
#'   than four segments or windows list the middle ones once), `NA` for what
#'   lives the whole call (model
#'   buffers, dropout masks, the convolution workspace; every buffer of an
#'   inference call). Buffers whose operations do not overlap may share
#'   memory: the layers' `d_cell` is one buffer unless two layers' lifetimes
#'   overlap (checkpoint segments, free running). `shape`,
#'   `training`, `dtype`, `options` and `optimizer` record the question.
#' @seealso [convlstm_max_batch_size()], [convlstm_memory_profile()], [convlstm_memory_stats()].
#' @export
#' @examples
#' model <- convlstm(1, c(64, 1), 3, device = "cpu")
#' est <- convlstm_memory_estimate(model, batch_size = 16, seq_len = 10, height = 64, width = 64)
#' est
#' attr(est, "plan")
#' # half the activation memory in float16, less again with checkpointing
#' convlstm_memory_estimate(model, 16, 10, 64, 64, dtype = "float16", checkpoint = 3)
#' # the gates recomputed in backward instead of kept
#' convlstm_memory_estimate(model, 16, 10, 64, 64, recompute_gates = TRUE)
#' # inference, keeping only the last state
#' convlstm_memory_estimate(model, 16, 1000, 64, 64, training = FALSE, outputs = "last_state")
#' # each of 8 data-parallel ranks with batch 16: the same plan, and what is reduced
#' attr(convlstm_memory_estimate(model, 16, 10, 64, 64, world_size = 8), "communication")
#' convlstm_release(model)
convlstm_memory_estimate <- function(model, batch_size, seq_len, height, width, training = TRUE,
                            dtype = NULL, checkpoint = 0, accumulation_steps = 1, tbptt = 0,
                            optimizer = NULL, outputs = c("all", "last_state"),
                            state = c("zero", "given", "carry"), horizon = 0,
                            weight = NULL, teacher_forcing = TRUE, world_size = 1,
                            recompute_gates = FALSE, target = NULL, source = NULL) {
  ptr <- model_ptr(model)
  shape <- c(
    check_count(batch_size, "batch_size"), check_count(seq_len, "seq_len"),
    check_count(height, "height"), check_count(width, "width")
  )
  check_frame_size(shape[3:4], model_config(model), "height, width", sys.call())
  training <- check_flag(training, "training")
  outputs <- check_choice(outputs, c("all", "last_state"), "outputs")
  state <- check_choice(state, c("zero", "given", "carry"), "state")
  if (identical(state, "carry") && !training) {
    abort_convlstm('`state` = "carry" applies to training steps (convlstm_train_step()) only.',
                   call = sys.call())
  }
  horizon <- check_count(horizon, "horizon", min = 0)
  teacher_forcing <- check_teacher_forcing(teacher_forcing, horizon > 0, sys.call())
  forecaster <- is_convlstm_forecaster(model)
  # the step convlstm_train_step() would run: its default target, and what the
  # model's kind does not run refused as convlstm_train_step() refuses it
  if (training && is.null(target)) {
    target <- if (forecaster || horizon > 0 || isTRUE(model_config(model)$head)) "sequence"
              else "last_state"
  }
  require_capabilities(model, step_capabilities(
    dtype = if (training) dtype, checkpoint = if (training) checkpoint,
    tbptt = if (training) tbptt, recompute_gates = if (training) recompute_gates,
    accumulation_steps = if (training) accumulation_steps,
    teacher_forcing = if (training) teacher_forcing, state = if (state != "zero") state,
    weight = weight, target = if (training) target,
    parallel = training && is.numeric(world_size) && isTRUE(world_size > 1)))
  if (forecaster) {
    # the forecaster's steps: the frames it forecasts (core: the plan's horizon)
    if (horizon < 1) abort_arg("horizon", "the frames an encoder-forecaster forecasts (>= 1)",
                               horizon, sys.call())
  } else if (horizon > 0) {
    check_horizon(horizon, c_model_config(ptr), call = sys.call())
    # x, then the true (or, free-running, the fed-back) frames
    if (training) shape[[2]] <- shape[[2]] + horizon - 1L
    if (shape[[2]] > .Machine$integer.max) abort_arg("horizon", "smaller", horizon, sys.call())
  }
  if (!is.null(weight)) {
    if (!is.character(weight) || length(weight) != 1 ||
        !weight %in% c("last_state", "sequence") || !training) {
      abort_arg("weight", paste('NULL, or (training) the target a loss weight is shaped as:',
                                '"last_state" or "sequence"'), weight, sys.call())
    }
  }
  options <- check_step_options(checkpoint, accumulation_steps, tbptt,
                                outputs = if (training) "all" else outputs, dtype = dtype,
                                batch_size = shape[[1]],
                                state = list(mode = state, arrays = NULL, horizon = horizon,
                                             free_run = training && teacher_forcing < 1),
                                weight = if (!is.null(weight)) {
                                  if (weight == "sequence") 5L else 4L
                                }, recompute_gates = recompute_gates)
  if (!is.null(target)) {
    target <- check_choice(target, c("last_state", "sequence"), "target")
    if (training) { # the plain step has no options list: one to carry it
      options <- options %||% c_step_options()
      options$target <- target
    }
  }
  recompute_gates <- if (training) options$recompute_gates %||% 0L else 0L
  optimizer <- plan_optimizer(ptr, optimizer, training)
  world_size <- check_count(world_size, "world_size")
  plan <- c_model_plan(ptr, shape, training, optimizer, options)
  config <- c_model_config(ptr)
  if (!is.null(source)) {
    staged_for <- list(backend = config$backend, dtype = dtype %||% config$dtype,
                       teacher_frames = if (training && !forecaster && horizon > 0 &&
                                            teacher_forcing >= 1) horizon - 1L else 0L)
    plan <- plan_with_staging(plan, source_staging(source, shape[[1]], sys.call(), staged_for))
  }
  est <- new_memory_estimate(
    plan, shape = shape, training = training, dtype = dtype %||% config$dtype,
    options = list(checkpoint = checkpoint, recompute_gates = recompute_gates,
                   accumulation_steps = accumulation_steps, tbptt = tbptt, outputs = if (training) "all" else outputs, state = state,
                   horizon = horizon, weight = weight, target = target,
                   teacher_forcing = if (training && horizon > 1) teacher_forcing else 1),
    optimizer = optimizer$kind %||% planned_optimizer(plan$name)
  )
  if (training && world_size > 1) attr(est, "communication") <- grad_buckets(ptr, world_size)
  est
}

# The optimizer state a plan should include: the one given; else what the
# model holds; else, for a first training step, Adam's (the usual choice and
# the larger state), so that the estimate covers the step that creates it.
plan_optimizer <- function(ptr, optimizer, training, call = sys.call(-1)) {
  if (!is.null(optimizer)) return(check_optimizer(optimizer, call = call))
  if (training && c_optimizer_steps(ptr) == 0) return(convlstm_optimizer_adam())
  NULL
}

# Which optimizer state a plan holds, from its buffer names (core/plan.c).
planned_optimizer <- function(names) {
  buf <- c_buffer_names()
  if (buf$name[buf$kind == "RMS_SQ"] %in% names) "rmsprop"
  else if (buf$name[buf$kind == "OPT_V"] %in% names) "adam"
  else if (buf$other[buf$kind == "OPT_M"] %in% names) "sgd"
  else "none"
}

new_memory_estimate <- function(plan, shape, training, dtype, options, optimizer) {
  by <- plan$by_category[mem_categories]
  df <- data.frame(
    category = c(mem_categories, "total", "reserved", "runtime"),
    bytes = unname(c(by, plan$total, plan$reserved, plan$runtime))
  )
  buffers <- data.frame(name = plan$name, category = plan$category, bytes = plan$bytes,
                        layer = plan$layer, offset = plan$offset, first_op = plan$first_op,
                        last_op = plan$last_op)
  class(buffers) <- c("convlstm_plan", "data.frame")
  structure(df, class = c("convlstm_memory_estimate", "data.frame"), plan = buffers,
            shape = stats::setNames(shape, c("batch_size", "seq_len", "height", "width")),
            training = training, dtype = dtype, options = options, optimizer = optimizer)
}

# The core's plan with a source's host staging buffers (source_staging(),
# R/source.R) added as rows of `data`, and to the total and the reserved
# bytes: they are not in the arena, but a fit holds them beside it.
plan_with_staging <- function(plan, staging) {
  n <- length(staging)
  plan$name <- c(plan$name, names(staging))
  plan$category <- c(plan$category, rep("data", n))
  plan$bytes <- c(plan$bytes, unname(staging))
  plan$layer <- c(plan$layer, rep(NA_integer_, n))
  plan$offset <- c(plan$offset, rep(NA_real_, n))
  plan$first_op <- c(plan$first_op, rep(NA_integer_, n))
  plan$last_op <- c(plan$last_op, rep(NA_integer_, n))
  plan$by_category[["data"]] <- plan$by_category[["data"]] + sum(staging)
  plan$total <- plan$total + sum(staging)
  plan$reserved <- plan$reserved + sum(staging)
  plan
}

# The estimate's bytes by category name (with total and reserved).
estimate_bytes <- function(est) stats::setNames(est$bytes, est$category)

describe_options <- function(options) {
  parts <- c(
    if (options$checkpoint > 0) sprintf("checkpoint every %d steps", options$checkpoint),
    if (isTRUE(options$recompute_gates > 0)) {
      sprintf("gates recomputed in backward, %d step%s at a time", options$recompute_gates,
              if (options$recompute_gates == 1) "" else "s")
    },
    if (options$accumulation_steps > 1) {
      sprintf("%d micro-batches", options$accumulation_steps)
    },
    if (options$tbptt > 0) sprintf("tbptt window %d", options$tbptt),
    if (identical(options$outputs, "last_state")) "last state only",
    if (isTRUE(options$horizon > 0)) {
      tf <- options$teacher_forcing %||% 1
      sprintf("forecast of %d frames%s", options$horizon,
              if (tf == 0) ", free-running"
              else if (tf < 1) sprintf(", scheduled sampling (p = %s)", format(tf)) else "")
    },
    if (!is.null(options$state) && !identical(options$state, "zero")) {
      sprintf("%s initial state", options$state)
    }
  )
  if (length(parts) == 0) "" else paste0(", ", paste(parts, collapse = ", "))
}

#' @export
print.convlstm_memory_estimate <- function(x, ...) {
  if (is.null(attr(x, "shape")) || !all(c("category", "bytes") %in% names(x))) {
    return(print(as_plain_df(x), ...))
  }
  shape <- attr(x, "shape")
  cat(sprintf(
    "<convlstm_memory_estimate> %s: batch %d, %d step%s of %dx%d, %s%s%s\n",
    if (isTRUE(attr(x, "training"))) "training step" else "inference",
    shape[[1]], shape[[2]], if (shape[[2]] == 1) "" else "s", shape[[3]], shape[[4]],
    attr(x, "dtype"), describe_options(attr(x, "options")),
    if (isTRUE(attr(x, "training"))) paste0(", optimizer ", attr(x, "optimizer")) else ""
  ))
  total <- x$bytes[x$category == "total"]
  shown <- data.frame(
    category = x$category,
    bytes = format_bytes(x$bytes),
    share = ifelse(x$category %in% mem_categories & total > 0,
                   sprintf("%.1f%%", 100 * x$bytes / total), "")
  )
  print(shown, row.names = FALSE, right = TRUE)
  comm <- attr(x, "communication")
  if (!is.null(comm)) {
    cat(sprintf(paste0(
      "data parallel over %d ranks (per rank above): gradients summed in place in %d ",
      "bucket%s, %s all-reduced per step, %s sent per rank (ring); no extra buffer\n"),
      attr(comm, "world_size"), nrow(comm), if (nrow(comm) == 1) "" else "s",
      format_bytes(sum(comm$bytes)), format_bytes(sum(comm$sent_per_rank))))
  }
  invisible(x)
}

# The gradient buckets of a data-parallel step (core/dist.c decides them).
grad_buckets <- function(ptr, world_size) {
  b <- c_grad_buckets(ptr)
  structure(data.frame(layer = b$layer, bytes = b$bytes,
                       sent_per_rank = b$bytes * 2 * (world_size - 1) / world_size),
            world_size = world_size)
}

#' @export
print.convlstm_plan <- function(x, ...) {
  if (!all(c("name", "category", "bytes", "layer") %in% names(x))) {
    return(print(as_plain_df(x), ...))
  }
  cat(sprintf("<convlstm_plan> %d buffers, %s\n", nrow(x), format_bytes(sum(x$bytes))))
  shown <- data.frame(
    name = x$name, category = x$category, bytes = format_bytes(x$bytes),
    layer = ifelse(is.na(x$layer), "-", as.character(x$layer))
  )
  if (!is.null(x$offset)) {
    shown$arena_offset <- ifelse(is.na(x$offset), "-", format(x$offset, scientific = FALSE,
                                                              trim = TRUE))
  }
  print(shown, row.names = FALSE, right = TRUE)
  invisible(x)
}

#' The largest batch that fits
#'
#' Searches the memory plan (doubling the batch, then bisecting) for the
#' largest batch size whose step fits in `budget` bytes (its `reserved`
#' bytes: what the device must hand over; with a `budget` given, plus the
#' `runtime` line of [convlstm_memory_estimate()], which the device's memory must
#' hold too). Nothing is
#' allocated, so it answers for budgets far beyond this machine, e.g. for
#' the GPU a model is meant to train on. A model with `memory_limit =
#' budget` trains with that batch, and one more sample fails with an error
#' of class `convlstm_error_oom`.
#'
#' @inheritParams convlstm_memory_estimate
#' @param seq_len,height,width The input's number of time steps, height and
#'   width.
#' @param budget Bytes the step may take in all, parameters included: a
#'   number or a string such as `"16 GiB"`. It comes second, as in
#'   [convlstm_memory_advise()]; a call in the order before (shape, then budget) is
#'   refused. `NULL`: what the model holds now
#'   plus what its device (or its `memory_limit`) has free.
#' @param ... Passed to [convlstm_memory_estimate()]: `training`, `dtype`,
#'   `checkpoint`, `recompute_gates`, `accumulation_steps`, `tbptt`,
#'   `optimizer`, `outputs`, `source`.
#' @return The batch size (an integer; 0 if not even the smallest batch
#'   fits), with attributes `bytes` (the plan's reserved bytes at that
#'   batch) and `budget`, of class `convlstm_batch_size`, which prints as
#'   "Largest batch: 12 (planned 45.2 MiB of 64 MiB)". Arithmetic and
#'   comparisons on it give plain numbers; `as.integer()` drops the rest.
#' @seealso [convlstm_memory_estimate()], [convlstm_set_memory_limit()].
#' @export
#' @examples
#' model <- convlstm(1, c(64, 1), 3, device = "cpu")
#' convlstm_max_batch_size(model, seq_len = 10, height = 64, width = 64, budget = "16 GiB")
#' convlstm_max_batch_size(model, "16 GiB", 10, 64, 64, dtype = "float16", checkpoint = 3)
#' convlstm_release(model)
convlstm_max_batch_size <- function(model, budget = NULL, seq_len, height, width, ...) {
  if (!missing(budget) && !"budget" %in% names(sys.call())) {
    check_budget_second(budget, if (missing(width)) NULL else width, sys.call())
  }
  check_dots(list(...), estimate_options(), "convlstm_max_batch_size")
  ptr <- model_ptr(model)
  dots <- list(...)
  if (is_convlstm_forecaster(model)) {
    # checked here, so that the error names this function, not convlstm_memory_estimate()
    h <- dots$horizon
    if (is.null(h) || (is.numeric(h) && length(h) == 1 && !is.na(h) && h < 1)) {
      abort_convlstm(sprintf(paste0(
        "convlstm_max_batch_size() of an encoder-forecaster needs `horizon`, the frames it forecasts ",
        "(a whole number >= 1), not %s."), if (is.null(h)) "none" else describe(h)),
        call = sys.call())
    }
  }
  budget <- resolve_budget(ptr, budget, "budget", sys.call())
  first <- max(1L, as.integer(dots$accumulation_steps %||% 1L))
  reserved_at <- function(b) {
    est <- convlstm_memory_estimate(model, b, seq_len, height, width, ...)
    est$bytes[est$category == "reserved"]
  }
  # The first plan runs unguarded so that bad options are reported; later
  # ones may overflow size_t for absurd batches, which just does not fit.
  fits <- function(b) {
    tryCatch(reserved_at(b) <= budget, convlstm_error_invalid = function(e) FALSE)
  }
  result <- function(b) {
    structure(as.integer(b), bytes = if (b > 0) reserved_at(b) else 0, budget = budget,
              class = "convlstm_batch_size")
  }
  if (reserved_at(first) > budget) return(result(0L))
  lo <- first
  hi <- NA_integer_
  cap <- .Machine$integer.max
  while (is.na(hi)) {
    nxt <- if (lo > cap %/% 2) cap else 2L * lo
    if (nxt == lo) return(result(lo))
    if (fits(nxt)) lo <- nxt else hi <- nxt
  }
  while (hi - lo > 1L) {
    mid <- lo + (hi - lo) %/% 2L
    if (fits(mid)) lo <- mid else hi <- mid
  }
  result(lo)
}

# Until issue 35 the budget came after the shape (model, seq_len, height,
# width, budget); it is second now, as in convlstm_memory_advise(). A call in the old
# order would be misread silently (seq_len taken as a budget of a few bytes),
# so a budget given by position is refused where it reads as that order: a
# number under 64 KiB (no step fits in it) or no `width` (or a string there).
check_budget_second <- function(budget, width, call) {
  old_order <- is.null(width) || is.character(width) ||
    (is.numeric(budget) && length(budget) == 1 && !is.na(budget) && budget < 65536)
  if (old_order) {
    abort_convlstm(paste0(
      "convlstm_max_batch_size() takes `budget` second, as convlstm_memory_advise() does: ",
      "convlstm_max_batch_size(model, budget, seq_len, height, width). A call in the old order ",
      "(the shape first, then the budget) reads its shape as the budget; name the ",
      "arguments or put the budget second."), call = call)
  }
}

#' @export
print.convlstm_batch_size <- function(x, ...) {
  b <- as.integer(x)
  budget <- format_bytes(attr(x, "budget"))
  cat(if (b > 0) {
    sprintf("Largest batch: %s (planned %s of %s)\n", format_count(b),
            format_bytes(attr(x, "bytes")), budget)
  } else {
    sprintf("Largest batch: 0 (not even the smallest batch fits in %s)\n", budget)
  })
  invisible(x)
}

# convlstm_max_batch_size()'s answer in arithmetic and comparisons is the number
# alone: b + 1 is a batch size, not a plan's answer.
#' @export
Ops.convlstm_batch_size <- function(e1, e2) {
  plain <- function(v) if (inherits(v, "convlstm_batch_size")) as.integer(v) else v
  if (missing(e2)) get(.Generic)(plain(e1)) else get(.Generic)(plain(e1), plain(e2))
}

# A budget as convlstm_max_batch_size() and convlstm_memory_advise() read it: bytes or a size
# with a unit, as memory_limit; NULL: what the model holds plus what its
# device (or its limit) has free.
resolve_budget <- function(ptr, budget, arg, call) {
  s <- c_memory_stats(ptr)
  # the device's free memory already excludes the runtime (CUDA context,
  # cuDNN); a budget given is the whole device's, the runtime's share included
  if (is.null(budget)) return(s$device_free + s$reserved)
  parse_bytes(budget, arg, call) - s$runtime
}

# The options convlstm_memory_estimate() takes beyond the model and the shape (what
# summary() and convlstm_max_batch_size() pass on through `...`).
estimate_options <- function() {
  setdiff(names(formals(convlstm_memory_estimate)), c("model", "batch_size", "seq_len", "height", "width"))
}
