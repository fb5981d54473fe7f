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
