# The autoplot() methods reach ggplot2's generic whether ggplot2 is loaded
# before or after this package (the load hook), in a fresh R session.

test_that("autoplot methods are registered when ggplot2 loads later", {
  skip_if_not_installed("ggplot2")
  skip_if_not_installed("callr")
  found <- callr::r(function(lib) {
    .libPaths(c(lib, .libPaths()))
    loadNamespace("convlstm")
    before <- isNamespaceLoaded("ggplot2")
    loadNamespace("ggplot2")
    c(before = before,
      history = !is.null(utils::getS3method("autoplot", "convlstm_history", optional = TRUE,
                                            envir = asNamespace("ggplot2"))),
      profile = !is.null(utils::getS3method("autoplot", "convlstm_memory_profile",
                                            optional = TRUE, envir = asNamespace("ggplot2"))))
  }, args = list(lib = dirname(find.package("convlstm"))))
  expect_identical(found, c(before = FALSE, history = TRUE, profile = TRUE))
})
