# peephole.R -- peephole connections as R takes and shows them: convlstm()'s
# `peephole` and `frame_size`, the integer c(kind, height, width) that
# crosses to C (cl_peephole in convlstm.h) and comes back in the model's
# configuration, and the check that per-position peepholes see frames of
# their size. The weights themselves are parameters like the others
# (cell_list.<l>.w_ci, .w_cf, .w_co; state_dict.R).

peephole_kinds <- c("none", "channel", "position")

# convlstm()'s peephole and frame_size -> c(kind, height, width).
peephole_spec <- function(peephole, frame_size, call = sys.call(-1)) {
  kind <- if (isFALSE(peephole)) {
    "none"
  } else if (isTRUE(peephole)) {
    "position"
  } else if (is.character(peephole) && length(peephole) == 1 && !is.na(peephole) &&
             peephole %in% peephole_kinds) {
    peephole
  } else {
    abort_arg("peephole",
              'FALSE, TRUE (per position, as in Shi et al. 2015), "position", "channel" or "none"',
              peephole, call)
  }
  if (kind != "position") {
    if (!is.null(frame_size)) {
      abort_convlstm(sprintf(paste0(
        "`frame_size` applies to per-position peepholes (`peephole = TRUE` or \"position\"), ",
        "not to `peephole = %s`."), describe(peephole)), call = call)
    }
    return(c(match(kind, peephole_kinds) - 1L, 0L, 0L))
  }
  if (is.null(frame_size)) {
    abort_convlstm(paste0(
      "`frame_size` must be given with per-position peepholes (`peephole = TRUE` or ",
      "\"position\"): their weights are [hidden, height, width], so c(height, width) of the ",
      "frames is part of the model (or use `peephole = \"channel\"`, which fits any size)."),
      call = call)
  }
  if (!is_whole(frame_size) || !length(frame_size) %in% 1:2 || any(frame_size < 1) ||
      any(frame_size > .Machine$integer.max)) {
    abort_arg("frame_size", "c(height, width) of the frames (positive whole numbers)",
              frame_size, call)
  }
  c(2L, as.integer(rep_len(frame_size, 2)))
}

# The configuration's peephole entries as users read them: peephole
# ("none", "channel", "position") and frame_size (c(height, width), or NULL).
peephole_config <- function(config) {
  p <- config$peephole %||% c(0L, 0L, 0L)
  config$peephole_spec <- as.integer(p)
  config$peephole <- peephole_kinds[[p[[1]] + 1L]]
  config["frame_size"] <- list(if (p[[1]] == 2L) as.integer(p[2:3]) else NULL)
  config
}

# Parameters of one layer's peepholes: three weights of hidden channels,
# times height * width per position.
peephole_params <- function(config, hidden) {
  p <- config$peephole_spec %||% c(0L, 0L, 0L)
  per <- switch(p[[1]] + 1L, 0, 1, as.double(p[[2]]) * p[[3]])
  3 * as.double(hidden) * per
}

# Frames of dim(x)[4:5] for a model whose per-position peepholes fix the size.
check_frame_size <- function(dims, config, arg, call = sys.call(-1)) {
  fs <- config$frame_size
  if (is.null(fs) || (dims[[1]] == fs[[1]] && dims[[2]] == fs[[2]])) return(invisible())
  abort_convlstm(sprintf(paste0(
    "`%s`: frames of %d x %d pixels, but the model's per-position peepholes fix them to ",
    "%d x %d (its `frame_size`); a model with `peephole = \"channel\"` takes any size."),
    arg, dims[[1]], dims[[2]], fs[[1]], fs[[2]]), call = call)
}
