# errors.R -- the package's conditions and argument checks.
#
# Every error the package signals has class
#   c("convlstm_error_<status>", "convlstm_error", "error", "condition")
# with <status> one of oom, invalid, unsupported, backend, state, internal:
# the core's status names (cl_status_name()), so an argument rejected here
# and one rejected by the C core are caught the same way. Errors from the C
# core arrive through signal_core_error(), which the glue (src/r_errors.c)
# calls. This file does not print or warn; it only checks and signals.

abort_convlstm <- function(message, status = "invalid", call = NULL, ...) {
  cnd <- structure(
    class = c(paste0("convlstm_error_", status), "convlstm_error", "error", "condition"),
    list(message = message, call = call, status = status, ...)
  )
  stop(cnd)
}

# Called from C with the core's status name and message. The call shown is
# the outermost package function on the stack, i.e. the one the user typed
# (convlstm_train_step(), convlstm_fit(), model(x), ...), not an internal helper.
signal_core_error <- function(status, message) {
  if (identical(status, "internal")) {
    message <- paste0(
      message, "\nThis is an internal error in convlstm; please report it with the code ",
      "that triggered it."
    )
  }
  if (!nzchar(message)) message <- paste0("convlstm core error (", status, ")")
  abort_convlstm(message, status = status, call = user_call())
}

user_call <- function() {
  ns <- topenv(environment(user_call))
  n <- sys.nframe()
  for (i in seq_len(n)) {
    f <- sys.function(i)
    if (!is.primitive(f) && identical(topenv(environment(f)), ns)) return(sys.call(i))
  }
  NULL
}

# ---- argument checks ---------------------------------------------------
# Each takes the argument's value, its name (for the message) and the call to
# report, which defaults to the call of the function that ran the check.

describe <- function(x) {
  if (is.null(x)) return("NULL")
  if (is.function(x)) return("a function")
  if ((is.numeric(x) || is.logical(x) || is.character(x)) && is.null(dim(x)) &&
      length(x) >= 1 && length(x) <= 6) {
    # digits = 15: 2.0000001 must not print as 2 in a message saying it is not whole
    v <- if (is.character(x)) ifelse(is.na(x), "NA", paste0('"', x, '"'))
         else format(x, trim = TRUE, digits = 15)
    return(if (length(v) == 1) v else paste0("c(", paste(v, collapse = ", "), ")"))
  }
  d <- dim(x)
  shape <- if (is.null(d)) paste0("length ", length(x)) else paste0("dim ", paste(d, collapse = " x "))
  cls <- class(x)[[1]]
  paste0(if (grepl("^[aeiou]", cls)) "an " else "a ", cls, " of ", shape)
}

# One spelling per idea (issue 35): a value an earlier version took, refused
# by check_choice() with a message naming the one it is spelled as now.
old_spellings <- c(last_states = "last_state")

# An argument an earlier version took under another name (or with another
# meaning), refused naming the one that replaced it. why: what changed.
abort_renamed_arg <- function(old, new, why, call) {
  abort_convlstm(sprintf("`%s` is now `%s`: %s", old, new, why), call = call, old = old,
                 new = new)
}

abort_arg <- function(arg, expected, x, call) {
  abort_convlstm(sprintf("`%s` must be %s, not %s.", arg, expected, describe(x)), call = call)
}

is_whole <- function(x) is.numeric(x) && !anyNA(x) && all(is.finite(x)) && all(x == round(x))

check_count <- function(x, arg, min = 1, call = sys.call(-1)) {
  if (length(x) != 1 || !is_whole(x) || x < min || x > .Machine$integer.max) {
    what <- if (min == 1) "a positive whole number" else sprintf("a whole number >= %d", min)
    abort_arg(arg, what, x, call)
  }
  as.integer(x)
}

check_counts <- function(x, arg, call = sys.call(-1)) {
  if (length(x) < 1 || !is_whole(x) || any(x < 1) || any(x > .Machine$integer.max)) {
    abort_arg(arg, "a vector of positive whole numbers", x, call)
  }
  as.integer(x)
}

check_flag <- function(x, arg, call = sys.call(-1)) {
  if (!is.logical(x) || length(x) != 1 || is.na(x)) abort_arg(arg, "TRUE or FALSE", x, call)
  x
}

check_number <- function(x, arg, min = -Inf, max = Inf, min_inclusive = TRUE,
                         call = sys.call(-1)) {
  ok <- is.numeric(x) && length(x) == 1 && !is.na(x) && is.finite(x) &&
    (if (min_inclusive) x >= min else x > min) && x <= max
  if (!ok) {
    lo <- if (is.finite(min)) sprintf(if (min_inclusive) ">= %s" else "> %s", format(min)) else NULL
    hi <- if (is.finite(max)) sprintf("<= %s", format(max)) else NULL
    range <- paste(c(lo, hi), collapse = " and ")
    abort_arg(arg, paste0("a finite number", if (nzchar(range)) paste0(" ", range) else ""), x, call)
  }
  as.double(x)
}

check_choice <- function(x, choices, arg, call = sys.call(-1)) {
  # A default of the whole choice vector means "the first", as match.arg().
  if (identical(x, choices)) return(choices[[1]])
  if (is.character(x) && length(x) == 1 && x %in% names(old_spellings) &&
      old_spellings[[x]] %in% choices) {
    abort_convlstm(sprintf('`%s = "%s"` is spelled `%s = "%s"` now.', arg, x, arg,
                           old_spellings[[x]]), call = call, old = x, new = old_spellings[[x]])
  }
  if (!is.character(x) || length(x) != 1 || is.na(x) || !x %in% choices) {
    abort_arg(arg, paste0("one of ", paste0('"', choices, '"', collapse = ", ")), x, call)
  }
  x
}

# A numeric array of rank ndim (integer or logical storage is converted to
# double, as the C core reads doubles), without missing values.
check_array <- function(x, arg, ndim, call = sys.call(-1)) {
  d <- dim(x)
  if (!(is.numeric(x) || is.logical(x)) || length(d) != ndim) {
    names <- if (ndim == 5) "[batch, time, channels, height, width]" else "[batch, channels, height, width]"
    abort_arg(arg, sprintf("a numeric array with %d dimensions %s", ndim, names), x, call)
  }
  if (any(d == 0)) abort_arg(arg, "an array with no zero-length dimension", x, call)
  check_finite(x, arg, call)
  if (!is.double(x)) storage.mode(x) <- "double"
  x
}

# Layer sizes whose tensors' dims or byte counts overflow what the C core
# can index (int dims, size_t bytes), refused here so the message names the
# arguments; sizes below that are left to the allocator (an oom error).
# geometry: layer_geometry()'s matrix.
check_layer_sizes <- function(input_dim, hidden_dims, geometry, call = sys.call(-1)) {
  hidden_dims <- as.double(hidden_dims) # integers would overflow to NA below
  shapes <- layer_shapes(input_dim, hidden_dims, geometry)
  inp <- shapes$input
  count <- shapes$weight + shapes$bias
  big <- 4 * hidden_dims > .Machine$integer.max | inp + hidden_dims > .Machine$integer.max |
    shapes$taps > .Machine$integer.max | count * 4 >= 2^53
  if (any(big)) {
    l <- which(big)[[1]]
    abort_convlstm(sprintf(paste0(
      "`input_dim`, `hidden_dims` and `kernel_sizes` are too large: layer %d's weight ",
      "[4 * %s, %s + %s, %s, %s] has %s elements, beyond what sizes and byte counts can hold."),
      l, format_count(hidden_dims[[l]]), format_count(inp[[l]]), format_count(hidden_dims[[l]]),
      format_count(geometry[1, l]), format_count(geometry[2, l]),
      format(count[[l]], digits = 3)
    ), call = call)
  }
  invisible(TRUE)
}

# NULL (the backend's default) or a thread count. OpenMP teams of tens of
# thousands of threads overflow libgomp's stack and take R down, and no CPU
# gains from more than a few per core, so counts are capped.
max_threads <- 1024L
check_threads <- function(threads, call = sys.call(-1)) {
  if (is.null(threads)) return(0L)
  threads <- check_count(threads, "threads", call = call)
  if (threads > max_threads) {
    abort_convlstm(sprintf("`threads` must be at most %d, not %s.", max_threads,
                           format_count(threads)), call = call)
  }
  threads
}

# The one reading of a `device` argument, written as torch writes devices:
# "cpu", "cuda" (the process's current CUDA device), "cuda:N" (GPU N as
# CUDA numbers them, after CUDA_VISIBLE_DEVICES) or "auto". The request:
# list(device = "auto" / "cpu" / "cuda", index = N, or NA for none given).
parse_device <- function(device, call = sys.call(-1)) {
  if (!is.character(device) || length(device) != 1 || is.na(device) ||
      !grepl("^(auto|cpu|cuda(:[0-9]{1,4})?)$", device)) {
    abort_arg("device", '"auto", "cpu", "cuda" or "cuda:N" (N the index of a GPU: 0, 1, ...)',
              device, call)
  }
  parts <- strsplit(device, ":", fixed = TRUE)[[1]]
  list(device = parts[[1]], index = if (length(parts) == 2) as.integer(parts[[2]]) else NA_integer_)
}

# The device a model is made on ("cpu" or "cuda"), from a `device` argument:
# "auto" is "cuda" where a GPU is usable. A GPU the model cannot use is
# refused here, naming `device`, rather than as the driver's message from
# deep in model creation. The core runs every model of a process on the
# process's current CUDA device (the one a data-parallel rank selected), so
# "cuda:N" must name that one; another index is refused with the way to
# select it (CUDA_VISIBLE_DEVICES). `gpu`: what convlstm_gpu_info() says (available,
# n_devices, device), asked only for a CUDA request; tests give their own.
resolve_device <- function(device, call = sys.call(-1), gpu = convlstm_gpu_info()) {
  req <- parse_device(device, call)
  if (identical(req$device, "cpu")) return("cpu")
  if (identical(req$device, "auto")) return(if (isTRUE(gpu$available)) "cuda" else "cpu")
  if (!isTRUE(gpu$available)) {
    abort_convlstm(sprintf(paste0(
      "`device` is \"%s\", but no CUDA GPU is usable here (no device, a driver too old for ",
      "the CUDA runtime, or a build without CUDA); use device = \"cpu\" or \"auto\"."), device),
      status = "unsupported", call = call)
  }
  if (is.na(req$index)) return("cuda")
  if (req$index >= gpu$n_devices) {
    abort_convlstm(sprintf(
      "`device` is \"%s\", but this process sees %d CUDA GPU%s: use %s.", device,
      gpu$n_devices, if (gpu$n_devices == 1) "" else "s",
      paste0('"cuda:', seq_len(gpu$n_devices) - 1L, '"', collapse = " or ")), call = call)
  }
  if (req$index != gpu$device) {
    abort_convlstm(sprintf(paste0(
      "`device` is \"%s\", but convlstm runs on the process's current CUDA device, ",
      "\"cuda:%d\" (or \"cuda\"); to use GPU %d, start R with CUDA_VISIBLE_DEVICES=%d, where ",
      "it is \"cuda:0\"."), device, gpu$device, req$index, req$index),
      status = "unsupported", call = call)
  }
  "cuda"
}

# No NA, NaN or Inf: they would train silently into NaN weights; and no
# finite value beyond a 32-bit float's range, which would arrive as Inf.
# The range check cannot be skipped: it does not depend on a sum (two
# values of 1e308 sum to Inf). The fast path is one pass in C over x in
# place (ffi_float_finite); only when it fails does R read x again to say
# what is wrong (abs(x) or range(x) would copy it: 18 MiB more peak RSS on
# the tutorial's batch).
check_finite <- function(x, arg, call = sys.call(-1)) {
  if (.Call(ffi_float_finite, x)) return(invisible(x))
  if (!is.logical(x) && !anyNA(x)) {
    lo <- min(x)
    hi <- max(x)
    if (lo >= -float_max && hi <= float_max) return(invisible(x))
    if (is.finite(lo) && is.finite(hi)) check_float_range(x, arg, call)
  }
  bad <- !is.finite(x)
  if (!any(bad)) return(invisible(x))
  n_nan <- sum(is.nan(x))
  n_na <- sum(is.na(x)) - n_nan
  n_inf <- sum(is.infinite(x))
  counts <- stats::setNames(c(n_na, n_nan, n_inf), c("NA", "NaN", "Inf"))
  counts <- counts[counts > 0]
  what <- paste(format_count(counts), names(counts))
  what <- if (length(what) > 1) {
    paste(paste(what[-length(what)], collapse = ", "), "and", what[[length(what)]])
  } else {
    what
  }
  first <- which(bad)[[1]]
  at <- if (is.null(dim(x))) first else paste(arrayInd(first, dim(x)), collapse = ", ")
  abort_convlstm(sprintf(
    "`%s` must contain only finite numbers (no missing values, NaN or Inf), but it has %s of %s values; the first at [%s].",
    arg, what, format_count(length(x)), at
  ), call = call)
}

# The largest finite 32-bit float: arrays cross to the core as floats, so a
# finite double beyond it would arrive as Inf.
float_max <- 3.4028234663852886e38

check_float_range <- function(x, arg, call) {
  first <- which(abs(x) > float_max)[[1]]
  at <- if (is.null(dim(x))) first else paste(arrayInd(first, dim(x)), collapse = ", ")
  abort_convlstm(sprintf(
    "`%s` must hold numbers within a 32-bit float's range (magnitude at most 3.4e38), but it has %s of %s values beyond it; the first, %s, at [%s].",
    arg, format_count(sum(abs(x) > float_max)), format_count(length(x)), format(x[[first]]), at
  ), call = call)
}


# `...` of a function that passes it on (or takes nothing through it): a
# name not in `allowed` (a typo such as `horizont`) or an unnamed value is
# refused here, naming it, instead of being swallowed or failing deep down
# with R's unclassed "unused argument". fn: the function's name, shown;
# names: the arguments a misspelt name is compared with; positional: unnamed
# values may pass (they are matched by position where they are passed on).
check_dots <- function(dots, allowed, fn, names = allowed, positional = FALSE,
                       call = sys.call(-1)) {
  if (length(dots) == 0) return(invisible())
  nm <- names(dots) %||% rep("", length(dots))
  bad <- which(if (positional) nzchar(nm) & !nm %in% allowed else !nzchar(nm) | !nm %in% allowed)
  if (length(bad) == 0) return(invisible())
  first <- nm[[bad[[1]]]]
  if (!nzchar(first)) {
    abort_convlstm(sprintf(
      "%s() was given an unnamed argument it has no place for (%s); name the arguments.",
      fn, describe(dots[[bad[[1]]]])), call = call)
  }
  near <- if (length(names) > 0) names[utils::adist(first, names)[1, ] <= 2] else character()
  abort_convlstm(sprintf("%s() has no argument `%s`%s.", fn, first,
                         if (length(near) > 0) sprintf("; did you mean `%s`?", near[[1]]) else ""),
                 call = call)
}
