# source_prefetch.R -- reading a source's next batch while the step runs
# (issue 36 item 2). The batches, and so the losses and weights, are bit
# for bit those of reading each batch when its step comes; what changes is
# only when they are read.
#
# - A frame file: a C thread (src/core/filearray.c's cl_fa_async) decodes
#   the next batch's windows into the second of two staging buffers (R
#   arrays made on R's thread and held by the reader's handle,
#   src/r_filearray.c) while the step runs here; it is joined after the
#   step (source_step_done()), so nothing reads the file while callbacks
#   run.
# - An R function: the step runs on a C thread (src/r_train.c's
#   ffi_train_step_start; the core calls no R API) while R calls the
#   function for the next batch and checks it. An error in it is kept and
#   raised when that batch's turn comes (after this step's callbacks, as
#   without reading ahead); an interrupt waits for the step to finish, so
#   the model is the step's, complete. Only on one process (no
#   communicator off R's thread), without a test's fixed dropout masks;
#   otherwise the function is called at its step. On a GPU the thread
#   binds the model's device first (cl_model_bind_thread). An
#   arrays source (convlstm_source_arrays()) is read, sliced and checked,
#   the same way.
# - Plain R arrays (convlstm_fit(model, x, y), batches sliced in R, not
#   the data set on the device): the same, the next batch's slices of x,
#   y and a weight cut while the step runs (arrays_train_step()).
#
# - On a GPU, the next batch read ahead is also converted on R's thread
#   while the step runs (a staged batch: src/core/staged.c, page-locked
#   memory), so that its step only uploads it instead of converting it on
#   the step's thread while the device waits (stage_batch()), and then sent
#   ahead: uploaded on the copy stream into a device buffer while the
#   step's kernels run, so that its step only copies it on the device
#   (send_enabled(), src/core/ahead.c).
#
# f$ahead, for the epoch running: its kind ("file", "thread" for a
# function or arrays source, "arrays" for plain arrays), order and epoch,
# the batch read ahead (`pending`) and, but for a file, that batch (or a
# function's error); NULL when nothing reads ahead.

# The switch: options(convlstm.prefetch = FALSE), else the environment
# variable CONVLSTM_PREFETCH=0, turns reading ahead off.
prefetch_enabled <- function() {
  opt <- getOption("convlstm.prefetch")
  if (!is.null(opt)) return(isTRUE(opt))
  !identical(Sys.getenv("CONVLSTM_PREFETCH"), "0")
}

# Whether a fit reads s's next batch while a step runs (the plan counts
# two staging buffers then: source_staging()).
source_overlaps <- function(s) s$kind %in% c("frames", "function", "arrays") && prefetch_enabled()

# Whether this fit's steps may run on a thread of their own: no
# communicator, not even the one-process one (its calls, like MPI's and
# NCCL's, stay on R's thread), on the CPU or a GPU.
fit_step_thread <- function(f) {
  is.null(f$dist) && f$config$backend %in% c("cpu", "cuda") && is.null(the$dropout_masks)
}

source_epoch_begin <- function(f, order, epoch) {
  f$ahead <- NULL
  s <- f$source
  if (is.null(s)) return(arrays_epoch_begin(f, order, epoch)) # plain R arrays
  if (!source_overlaps(s)) return(invisible(f))
  if (s$kind %in% c("function", "arrays")) { # read by R while the step runs on a thread
    if (fit_step_thread(f)) {
      f$ahead <- list(kind = "thread", order = order, epoch = epoch, pending = NA_integer_)
    }
    return(invisible(f))
  }
  if (is.null(f$ahead_reader)) f$ahead_reader <- c_fa_ahead_new(s$file)
  f$ahead <- list(kind = "file", order = order, epoch = epoch, pending = NA_integer_, slot = 1L)
  source_ahead_start(f, 1L) # batch 1, now
}

# After a step, and when the epoch ends (an error or an interrupt
# included): a file's read in flight is waited for.
source_step_done <- function(f) {
  if (identical(f$ahead$kind, "file")) c_fa_ahead_wait(f$ahead_reader)
  invisible(f)
}
source_epoch_end <- function(f) {
  source_step_done(f)
  if (send_enabled(f)) { # the buffers batches were sent ahead into (none left by a released model)
    tryCatch(c_staged_unreserve(f$ptr), convlstm_error_state = function(cnd) NULL)
  }
  f$ahead <- NULL
  invisible(f)
}

# The first batch from b on that trains (fit_epoch() skips a batch of fewer
# rows than ranks): list(b, rows), or NULL past the epoch's last.
ahead_batch <- function(f, b) {
  while (b <= f$n_batches) {
    global <- fit_global_rows(f, f$ahead$order, b)
    if (length(global) >= f$world) return(list(b = b, rows = f$x$rows[fit_rank_rows(f, global)]))
    b <- b + 1L
  }
  NULL
}

# Whether a batch read ahead is converted ahead too: on a GPU, where its
# step would convert it while the device waits; not on the CPU, where a step
# converts straight into its own buffers and staging would add a copy.
# options(convlstm.stage_batches = TRUE or FALSE) decides instead (a test
# stages on the CPU; a benchmark compares).
stage_enabled <- function(f) {
  opt <- getOption("convlstm.stage_batches")
  if (!is.null(opt)) return(isTRUE(opt))
  !identical(f$config$backend, "cpu")
}

# Whether a staged batch is also sent ahead: uploaded into one of two
# device buffers of the model on the backend's copy stream while the step
# before computes (src/core/ahead.c), so that its step copies it on the
# device instead of waiting for the upload. On a GPU; on the CPU the copy
# gains nothing. options(convlstm.send_ahead = TRUE or FALSE) decides
# instead (a test sends on the CPU; a benchmark compares).
send_enabled <- function(f) {
  if (!stage_enabled(f)) return(FALSE)
  opt <- getOption("convlstm.send_ahead")
  if (!is.null(opt)) return(isTRUE(opt))
  !identical(f$config$backend, "cpu")
}

# A batch read ahead, converted now for the model (while the step before
# runs), and sent ahead where send_enabled(): its staged handle, the memory
# of f$ahead$spare (the last step's, which has ended) reused; NULL when not
# staged, and then its step converts it. Out of host memory for it is that:
# NULL.
stage_batch <- function(f, batch) {
  if (!stage_enabled(f) || inherits(batch, "condition")) return(NULL)
  spare <- f$ahead$spare
  f$ahead$spare <- NULL # its batch moves into the new handle
  tryCatch(c_staged_fill(f$ptr, batch$x, batch$y, f$target, spare, send_enabled(f)),
           convlstm_error_oom = function(cnd) NULL)
}

# Whether this fit's steps stage the next batch (stage_batch(): plain
# arrays, or a source whose batches reach their steps as read) and send it
# ahead: each step then first makes the model's buffers it is sent into.
fit_sends <- function(f) send_enabled(f) && (is.null(f$source) || source_stages(f))

# Whether a source's batch reaches its step as read (so that a batch staged
# from its arrays is the step's): not when y loses its steps' dimension
# (a last-state target) nor when a forecast appends the true frames to x
# (source_fit_batch()).
source_stages <- function(f) !f$y$drop && is.null(f$forecast)

# The step of a batch on a thread of its own (its staged conversion when it
# has one); its staged memory kept for the next batch's.
thread_train_step <- function(f, batch, opt, opts, read_next) {
  job <- c_train_step_start(f$ptr, batch$x, batch$y, f$target, opt, opts, batch$staged,
                            reserve = fit_sends(f))
  on.exit(c_train_step_wait(job)) # an interrupt while reading: the step ends first
  read_next()
  loss <- c_train_step_finish(f$ptr, job)
  f$ahead$spare <- batch$staged
  loss
}

# ---- a frame file ----

# Starts reading batch b (or the next that trains) into the slot not read
# last.
source_ahead_start <- function(f, b) {
  c_fa_ahead_wait(f$ahead_reader) # one read in flight at most
  a <- f$ahead
  a$pending <- NA_integer_
  nxt <- ahead_batch(f, b)
  if (!is.null(nxt)) {
    s <- f$source
    first <- s$starts(nxt$rows)
    a$slot <- 1L - a$slot
    c_fa_ahead_start(f$ahead_reader, a$slot, first, s$x_dim[[1]], first + s$x_dim[[1]],
                     s$y_dim[[1]])
    a$pending <- nxt$b
  }
  f$ahead <- a
  invisible(f)
}

# The reader source_fetch() calls for batch b's rows: a file's, the batch
# read during the step before (read now if it was not), the next batch's
# read started to run during this batch's step; its errors are the read's
# (a file truncated or changed: classed, naming the file), which
# source_fetch() names the batch in. Else the source's own.
source_reader <- function(f, b) {
  if (!identical(f$ahead$kind, "file")) return(f$source$read)
  function(rows) {
    if (!identical(f$ahead$pending, b)) source_ahead_start(f, b)
    batch <- c_fa_ahead_take(f$ahead_reader)
    source_ahead_start(f, b + 1L)
    batch
  }
}

# ---- an R function ----

# The step of batch b on a thread of its own while the function reads the
# next batch (source_ahead_fetch()); else c_train_step().
source_train_step <- function(f, batch, opt, opts, b) {
  if (!identical(f$ahead$kind, "thread")) {
    return(c_train_step(f$ptr, batch$x, batch$y, f$target, opt, opts))
  }
  thread_train_step(f, batch, opt, opts, function() source_ahead_fetch(f, b + 1L))
}

# Batch b (or the next that trains) read and checked as source_fetch()
# reads it at its step, kept with its rows; its error kept, to be raised
# at its turn.
source_ahead_fetch <- function(f, b) {
  nxt <- ahead_batch(f, b)
  if (is.null(nxt)) return(invisible(f))
  batch <- tryCatch(
    source_fetch(f$source, nxt$rows, fit_batch_label(nxt$b, f$ahead$epoch), f$call, keep = FALSE),
    convlstm_error = function(cnd) cnd)
  if (!inherits(batch, "condition") && source_stages(f)) batch$staged <- stage_batch(f, batch)
  f$ahead$pending <- nxt$b
  f$ahead$rows <- nxt$rows
  f$ahead$batch <- batch
  invisible(f)
}

# Batch b of these rows as read ahead by kind ("thread": a source's read,
# its error raised now; "arrays": slices cut), or NULL when it was not.
ahead_taken <- function(f, kind, b, rows) {
  a <- f$ahead
  if (!identical(a$kind, kind) || !identical(a$pending, b) || !identical(a$rows, rows)) {
    return(NULL)
  }
  f$ahead$pending <- NA_integer_
  f$ahead$batch <- NULL # the step's alone from here
  if (inherits(a$batch, "condition")) stop(a$batch)
  a$batch
}

# ---- plain R arrays ----

# Reading ahead for an epoch of batches sliced from R arrays: not the data
# set on the device (nothing is sliced), not one batch of every row (the
# arrays are the batch).
arrays_epoch_begin <- function(f, order, epoch) {
  sliced <- is.null(f$data) && f$n_batches > 1
  if (sliced && prefetch_enabled() && fit_step_thread(f)) {
    f$ahead <- list(kind = "arrays", order = order, epoch = epoch, pending = NA_integer_)
  }
  invisible(f)
}

# The step of batch b on the rows idx of xs (the epoch's inputs) and f$y:
# its slices, cut during the step before when read ahead, the next batch's
# cut while this step runs on a thread of its own.
arrays_train_step <- function(f, xs, idx, opt, opts, b) {
  batch <- ahead_taken(f, "arrays", b, idx) %||% arrays_slice(f, xs, idx)
  if (!is.null(batch$weight)) opts$weight <- batch$weight
  if (!identical(f$ahead$kind, "arrays")) {
    return(c_train_step(f$ptr, batch$x, batch$y, f$target, opt, opts))
  }
  thread_train_step(f, batch, opt, opts, function() arrays_ahead_slice(f, xs, b + 1L))
}

# A batch's slices: x, y and a weight's rows (one batch of every row on
# one process is not sliced: fit_batch()).
arrays_slice <- function(f, xs, idx) {
  list(x = slice_batch(xs, idx), y = slice_batch(f$y, idx),
       weight = if (!is.null(f$weight)) slice_batch(f$weight, idx))
}

# Batch b's slices cut now, kept with its rows (one process: its rows are
# the global batch's, and every batch trains).
arrays_ahead_slice <- function(f, xs, b) {
  if (b > f$n_batches) return(invisible(f))
  rows <- fit_global_rows(f, f$ahead$order, b)
  batch <- arrays_slice(f, xs, rows)
  batch$staged <- stage_batch(f, batch)
  f$ahead$batch <- batch
  f$ahead$rows <- rows
  f$ahead$pending <- b
  invisible(f)
}
