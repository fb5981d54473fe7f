# test-pkgdown-index.R -- the pkgdown reference index (_pkgdown.yml, in the
# source tree only: R CMD build leaves it out) lists every help topic once,
# by name: a topic listed twice shows twice on the site, one not listed is
# not on the site at all.

pkgdown_source_root <- function() {
  root <- normalizePath(file.path(testthat::test_path(), "..", ".."), mustWork = FALSE)
  if (!file.exists(file.path(root, "_pkgdown.yml")) || !dir.exists(file.path(root, "man"))) {
    testthat::skip("no source tree beside the tests (_pkgdown.yml and man/ are not in the built package)")
  }
  root
}

# The \name of every Rd file, and whether it is keyword internal.
rd_topics <- function(man) {
  files <- list.files(man, "\\.Rd$", full.names = TRUE)
  one <- function(f) {
    lines <- readLines(f, warn = FALSE)
    name <- sub("^\\\\name\\{(.*)\\}$", "\\1", grep("^\\\\name\\{", lines, value = TRUE)[[1]])
    c(name = name, internal = any(grepl("^\\\\keyword\\{internal\\}", lines)))
  }
  m <- vapply(files, one, character(2), USE.NAMES = FALSE)
  data.frame(name = m[1, ], internal = m[2, ] == "TRUE")
}

test_that("the reference index names every exported topic exactly once, without selectors", {
  skip_if_not_installed("yaml")
  root <- pkgdown_source_root()
  ref <- yaml::read_yaml(file.path(root, "_pkgdown.yml"))$reference
  listed <- unlist(lapply(ref, `[[`, "contents"))
  expect_false(any(grepl("[(]|^-", listed)), label = "a selector or an exclusion in the index")
  expect_identical(listed[duplicated(listed)], character(0))
  topics <- rd_topics(file.path(root, "man"))
  public <- topics$name[!topics$internal]
  expect_setequal(setdiff(listed, topics$name[topics$internal]), public)
  expect_true(all(c("convlstm_reset_state", "convlstm_carried_state", "autoplot.convlstm") %in% listed))
})
