# helper-fixtures.R -- reads the PyTorch fixtures written by
# tools/make_fixtures.py and compares arrays with a float32-aware tolerance.
# Base R only. It knows the fixture format, not the package: the tests that
# use it decide what to compare.

fixture_root <- function() testthat::test_path("fixtures")

fixture_names <- function() {
  root <- fixture_root()
  dirs <- list.dirs(root, full.names = FALSE, recursive = FALSE)
  dirs[file.exists(file.path(root, dirs, "manifest.txt"))]
}

# A row-major (C order) buffer of dims d read as R's x[d1, ..., dn]: R fills
# the first index fastest, so the buffer is R's array over rev(d), and
# reversing the axes gives the torch indexing.
row_major_array <- function(v, d) {
  if (length(d) <= 1L) {
    return(v)
  }
  aperm(array(v, rev(d)), rev(seq_along(d)))
}

read_fixture_tensor <- function(folder, file, dims) {
  path <- file.path(folder, file)
  n <- prod(dims)
  con <- file(path, "rb")
  on.exit(close(con))
  v <- readBin(con, "numeric", n = n + 1L, size = 4L, endian = "little")
  if (length(v) != n) {
    stop(sprintf("fixture %s holds %d values, the manifest says %d", path, length(v), n))
  }
  row_major_array(v, dims)
}

# list(config = list(input_dim, hidden_dims, kernel_sizes, bias, B, T, H, W,
# target, adam_*), tensors = named list, info = named character), with the
# tensors' names as in the manifest ("weights/cell_list.0.conv.weight", "x",
# "output/0", "last_h/0", "grad/...", "adam_params/...", ...).
read_fixture <- function(name) {
  folder <- file.path(fixture_root(), name)
  lines <- readLines(file.path(folder, "manifest.txt"))
  if (length(lines) == 0L || lines[1] != "convlstm-fixture 1") {
    stop(sprintf("%s: not a version 1 convlstm fixture (first line %s)", folder,
                 encodeString(lines[1], quote = '"')))
  }
  config <- list()
  tensors <- list()
  info <- character()
  for (line in lines[-1]) {
    f <- strsplit(line, " ", fixed = TRUE)[[1]]
    switch(f[1],
      config = {
        v <- f[-(1:2)]
        num <- suppressWarnings(as.numeric(v))
        config[[f[2]]] <- if (all(v %in% c("TRUE", "FALSE"))) {
          as.logical(v)
        } else if (!anyNA(num)) {
          num
        } else {
          v
        }
      },
      tensor = {
        ndim <- as.integer(f[4])
        dims <- as.integer(f[4L + seq_len(ndim)])
        tensors[[f[2]]] <- read_fixture_tensor(folder, f[3], dims)
      },
      info = {
        info[[f[2]]] <- paste(f[-(1:2)], collapse = " ")
      },
      stop(sprintf("%s: unknown record %s", folder, encodeString(f[1], quote = '"')))
    )
  }
  list(name = name, config = config, tensors = tensors, info = info)
}

# The tensors under a prefix ("weights/", "grad/", ...), named without it.
fixture_group <- function(fx, prefix) {
  keep <- startsWith(names(fx$tensors), prefix)
  out <- fx$tensors[keep]
  names(out) <- substring(names(out), nchar(prefix) + 1L)
  out
}

# Rounds doubles to the nearest float32, so that R-side references see
# exactly the numbers a float32 model holds.
as_f32 <- function(x) {
  d <- dim(x)
  v <- readBin(writeBin(as.double(x), raw(), size = 4L), "numeric", n = length(x), size = 4L)
  dim(v) <- d
  v
}

# |actual - expected| <= rel * max|expected| + abs, elementwise. The scale is
# the tensor's largest value, not each element's: float32 sums of mixed-sign
# terms carry errors relative to the terms, not to a result that cancels to
# near zero. On failure the message gives the largest difference, where, and
# the tolerance.
max_abs_diff <- function(actual, expected) {
  max(abs(as.vector(actual) - as.vector(expected)))
}

compare_arrays <- function(actual, expected, rel = 1e-5, abs = 1e-8) {
  da <- dim(actual)
  de <- dim(expected)
  # a 1-d tensor may come back as a plain vector or a 1-d array
  if (length(de) <= 1L) de <- length(expected)
  if (length(da) <= 1L) da <- length(actual)
  if (!identical(as.integer(da), as.integer(de))) {
    return(list(ok = FALSE, msg = sprintf("dim %s, expected %s",
                                          paste(da, collapse = "x"), paste(de, collapse = "x"))))
  }
  a <- as.vector(actual)
  e <- as.vector(expected)
  if (anyNA(a)) {
    return(list(ok = FALSE, msg = sprintf("%d NA/NaN values", sum(is.na(a)))))
  }
  scale <- max(abs(e))
  diff <- abs(a - e)
  tol <- rel * scale + abs
  worst <- which.max(diff)
  where <- paste(arrayInd(worst, de), collapse = ",")
  list(
    ok = diff[worst] <= tol,
    max_diff = diff[worst],
    rel_diff = diff[worst] / if (scale > 0) scale else 1,
    msg = sprintf("max |diff| %.3g at [%s] (got %.8g, expected %.8g); max |expected| %.3g; tolerance %.3g (rel %.0e)",
                  diff[worst], where, a[worst], e[worst], scale, tol, rel)
  )
}

# Every comparison's relative difference is kept here, so a run can report the
# largest seen (see the last test in test-parity-torch.R).
parity_log <- new.env(parent = emptyenv())
parity_log$rows <- list()

expect_close <- function(actual, expected, rel = 1e-5, abs = 1e-8, label = NULL) {
  label <- label %||% deparse(substitute(actual))
  res <- compare_arrays(actual, expected, rel = rel, abs = abs)
  if (!is.null(res$max_diff)) {
    parity_log$rows[[length(parity_log$rows) + 1L]] <-
      data.frame(label = label, max_diff = res$max_diff, rel_diff = res$rel_diff)
  }
  testthat::expect(isTRUE(res$ok), sprintf("%s: %s", label, res$msg))
  invisible(res)
}

# Each tensor of `got` (a named list: gradients, a state_dict) against the
# fixture's tensor of that name under `prefix` ("grad/", "adam_params/"),
# labelled `label` and the name.
expect_fixture_tensors <- function(got, fx, prefix, rel = 1e-5, label = NULL) {
  for (k in names(got)) {
    expect_close(got[[k]], fx$tensors[[paste0(prefix, k)]], rel = rel, label = paste(label, k))
  }
}

# An Adam run against the fixture's: the losses of its steps (adam_losses)
# and the parameters after them (params, a named list as convlstm_state_dict()
# gives; adam_params/), each within rel.
expect_adam_run <- function(losses, params, fx, rel, label) {
  expect_close(losses, fx$tensors$adam_losses, rel = rel, label = paste(label, "losses"))
  expect_fixture_tensors(params, fx, "adam_params/", rel = rel, label = paste(label, "params"))
}

`%||%` <- function(a, b) if (is.null(a)) b else a

# A fixture's kernels and dilations in convlstm()'s forms: square kernels
# unless it records kernel_widths (and dilation_h / _w); the state kernels
# (recurrent_kernel_sizes) NULL unless it records them.
fixture_kernels <- function(cfg) {
  pairs <- function(h, w) Map(c, h, w)
  rk <- if (!is.null(cfg$recurrent_kernel_sizes))
    pairs(cfg$recurrent_kernel_sizes, cfg$recurrent_kernel_widths)
  if (is.null(cfg$kernel_widths)) {
    return(list(kernel_sizes = cfg$kernel_sizes, dilation = 1, recurrent_kernel_sizes = rk))
  }
  list(kernel_sizes = pairs(cfg$kernel_sizes, cfg$kernel_widths),
       dilation = pairs(cfg$dilation_h, cfg$dilation_w), recurrent_kernel_sizes = rk)
}

# The fixture's masks as local_dropout_masks() takes them: per layer the
# input mask then the h mask, NULL where that rate is 0.
fixture_masks <- function(fx) {
  n <- length(fx$config$hidden_dims)
  masks <- vector("list", 2 * n)
  for (l in seq_len(n)) {
    masks[2 * l - 1] <- list(fx$tensors[[sprintf("mask_x/%d", l - 1)]])
    masks[2 * l] <- list(fx$tensors[[sprintf("mask_h/%d", l - 1)]])
  }
  masks
}
