# helper-torch.R -- the Python with PyTorch that some tests run to read what
# this package wrote (inst/python/safetensors_check.py). PyTorch is never a
# dependency of the package: without it those tests skip and say why,
# except under CONVLSTM_TORCH_TESTS=require (the top-level Makefile's
# `make test`, CI, which installs python3-torch), where a reason to skip is a
# failure. CONVLSTM_PYTHON names the Python (default Debian's
# /usr/bin/python3, which python3-torch installs into).

torch_tests_required <- function() identical(Sys.getenv("CONVLSTM_TORCH_TESTS"), "require")

skip_or_fail_torch <- function(why) {
  if (torch_tests_required()) {
    testthat::fail(paste("CONVLSTM_TORCH_TESTS=require, but", why))
    testthat::skip("failed above")
  }
  testthat::skip(why)
}

# c(python, safetensors_check.py), or a skip (a failure when required).
python_torch <- function() {
  py <- Sys.getenv("CONVLSTM_PYTHON", "/usr/bin/python3")
  script <- system.file("python", "safetensors_check.py", package = "convlstm")
  if (!file.exists(py) && !nzchar(Sys.which(py))) skip_or_fail_torch(paste("no", py))
  if (!nzchar(script)) skip_or_fail_torch("the convlstm in use has no python/safetensors_check.py")
  ok <- suppressWarnings(system2(py, c("-c", shQuote("import torch")), stdout = FALSE,
                                 stderr = FALSE))
  if (ok != 0) skip_or_fail_torch(paste(py, "has no torch (Debian: python3-torch)"))
  c(py, script)
}

# Row-major float32 files, as safetensors_check.py reads and writes them:
# R's array reversed in its dims.
write_f32 <- function(x, path) {
  writeBin(as.vector(aperm(x, rev(seq_along(dim(x))))), path, size = 4, endian = "little")
}
read_f32 <- function(path, d) {
  v <- readBin(path, "numeric", n = prod(d), size = 4, endian = "little")
  aperm(array(v, rev(d)), rev(seq_along(d)))
}

# safetensors_check.py (pt = python_torch()) on the model file `path` and the
# input x: mode "read" loads the file and runs it; "write" builds a model
# from `args` (before the input), saves it to path and runs it; `tail` goes
# after the output file. The script must succeed. Returns its printed
# summary (one line of JSON, matched as text) and its output, an array of
# dims d (NULL when the script wrote none).
torch_check <- function(pt, mode, path, x, d, args = character(), tail = character()) {
  xf <- tempfile()
  of <- tempfile()
  on.exit(unlink(c(xf, of)))
  write_f32(x, xf)
  out <- system2(pt[[1]], c(shQuote(pt[[2]]), mode, shQuote(path), args, shQuote(xf), dim(x),
                            shQuote(of), tail), stdout = TRUE, stderr = TRUE)
  testthat::expect_null(attr(out, "status"))
  list(summary = paste(out, collapse = "\n"), output = if (file.exists(of)) read_f32(of, d))
}
