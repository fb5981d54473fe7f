# helper-rasters.R -- the raster packages (stars, terra, ncdf4) that
# convlstm_grid_windows() and convlstm_grid_restore() read and write. They are never hard
# dependencies of the package: without one, its tests skip and say why,
# except under CONVLSTM_RASTER_TESTS=require (the top-level Makefile's
# `make test`, CI, which installs r-cran-stars, r-cran-terra and
# r-cran-ncdf4), where a reason to skip is a failure.

raster_tests_required <- function() identical(Sys.getenv("CONVLSTM_RASTER_TESTS"), "require")

skip_if_no_raster_pkg <- function(pkg) {
  if (requireNamespace(pkg, quietly = TRUE)) return(invisible(TRUE))
  why <- sprintf("%s is not installed (Debian: r-cran-%s)", pkg, pkg)
  if (raster_tests_required()) {
    testthat::fail(paste("CONVLSTM_RASTER_TESTS=require, but", why))
    testthat::skip("failed above")
  }
  testthat::skip(why)
}
