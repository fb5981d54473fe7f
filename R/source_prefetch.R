# source_prefetch.R -- reading a source's next batch while the step runs
# (issue 36 item 2). For a frame file, a C thread (src/core/filearray.c's
# cl_fa_async) decodes the next batch's windows into the second of two
# staging buffers (R arrays made here, on the main thread, and held by the
# reader's handle in src/r_filearray.c) while the step runs on this one;
# the fit takes it after the step. The batches, and so the losses and
# weights, are bit for bit those of reading each batch when its step
# comes.

# The switch: options(convlstm.prefetch = FALSE), else the environment
# variable CONVLSTM_PREFETCH=0, turns reading ahead off.
prefetch_enabled <- function() {
  opt <- getOption("convlstm.prefetch")
  if (!is.null(opt)) return(isTRUE(opt))
  !identical(Sys.getenv("CONVLSTM_PREFETCH"), "0")
}

# Whether a fit reads s's next batch while a step runs.
source_overlaps <- function(s) identical(s$kind, "frames") && prefetch_enabled()

# The epoch's reading ahead (fit_epoch()), where the fit's source reads
# ahead: batch 1's read starts now, each next one when a batch is taken
# (source_ahead_read()). f$ahead: the epoch's order, the batch read last
# (`pending`) and its slot; NULL when nothing reads ahead.
source_epoch_begin <- function(f, order) {
  f$ahead <- NULL
  if (is.null(f$source) || !source_overlaps(f$source)) return(invisible(f))
  if (is.null(f$ahead_reader)) f$ahead_reader <- c_fa_ahead_new(f$source$file)
  f$ahead <- list(order = order, pending = NA_integer_, slot = 1L)
  source_ahead_start(f, 1L)
}

# After a step, or when the epoch ends (an error or an interrupt
# included): the read in flight is waited for, so that nothing reads the
# file while R's callbacks run, nor after the fit.
source_step_done <- function(f) {
  if (!is.null(f$ahead)) c_fa_ahead_wait(f$ahead_reader)
  invisible(f)
}
source_epoch_end <- function(f) {
  source_step_done(f)
  f$ahead <- NULL
  invisible(f)
}

# Starts reading batch b (or the first after it that trains: fit_epoch()
# skips a batch of fewer rows than ranks) into the slot not read last.
source_ahead_start <- function(f, b) {
  a <- f$ahead
  a$pending <- NA_integer_
  while (b <= f$n_batches) {
    global <- fit_global_rows(f, a$order, b)
    if (length(global) >= f$world) break
    b <- b + 1L
  }
  if (b <= f$n_batches) {
    s <- f$source
    first <- s$starts(f$x$rows[fit_rank_rows(f, global)])
    a$slot <- 1L - a$slot
    c_fa_ahead_start(f$ahead_reader, a$slot, first, s$x_dim[[1]], first + s$x_dim[[1]],
                     s$y_dim[[1]])
    a$pending <- b
  }
  f$ahead <- a
  invisible(f)
}

# The reader of batch b's rows for source_fetch(): the batch read during
# the step before (read now if it was not), and the next batch's read
# started, to run during this batch's step. Its errors are the read's (a
# file truncated or changed: classed, naming the file), which
# source_fetch() names the batch in, as when it reads the batch itself.
source_ahead_read <- function(f, b) {
  function(rows) {
    if (!identical(f$ahead$pending, b)) source_ahead_start(f, b)
    batch <- c_fa_ahead_take(f$ahead_reader)
    source_ahead_start(f, b + 1L)
    batch
  }
}
