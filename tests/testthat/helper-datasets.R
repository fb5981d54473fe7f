# helper-datasets.R -- data sets that Debian packages ship, which tests read
# where they are installed (dataset-fashion-mnist for test-moving_mnist.R).
# They are never dependencies of the package: without one, its tests skip
# and say why, except under CONVLSTM_DATASET_TESTS=require (the top-level
# Makefile's `make test`, CI, whose `make deps` installs them), where a
# reason to skip is a failure.

dataset_tests_required <- function() identical(Sys.getenv("CONVLSTM_DATASET_TESTS"), "require")

# Skips (or, required, fails) unless every file of `paths` is there; `pkg`
# is the Debian package that installs them.
skip_if_no_dataset <- function(paths, pkg) {
  missing <- paths[!file.exists(paths)]
  if (length(missing) == 0) return(invisible(TRUE))
  why <- sprintf("Debian's %s is not installed (no %s)", pkg, missing[[1]])
  if (dataset_tests_required()) {
    testthat::fail(paste("CONVLSTM_DATASET_TESTS=require, but", why))
    testthat::skip("failed above")
  }
  testthat::skip(why)
}
