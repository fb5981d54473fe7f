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
