# test-citation.R -- inst/CITATION: citation("convlstm") gives the method's
# paper (Shi et al., 2015) and the package, as the installed package has them.

test_that("citation() gives the ConvLSTM paper and the package", {
  if (!nzchar(system.file("CITATION", package = "convlstm"))) {
    testthat::skip("the convlstm in use has no installed CITATION (not an installed package)")
  }
  cit <- utils::citation("convlstm")
  expect_length(cit, 2)

  paper <- cit[[1]]
  expect_identical(tolower(paper$bibtype), "inproceedings")
  expect_match(paper$title, "Convolutional {LSTM} Network", fixed = TRUE)
  expect_match(paper$title, "Precipitation Nowcasting")
  expect_identical(paper$year, "2015")
  expect_identical(paper$doi, "10.48550/arXiv.1506.04214")
  expect_identical(vapply(unclass(paper$author), `[[`, "", "family"),
                   c("Shi", "Chen", "Wang", "Yeung", "Wong", "Woo"))

  pkg <- cit[[2]]
  expect_identical(tolower(pkg$bibtype), "manual")
  expect_match(pkg$title, "^convlstm: ")
  expect_match(pkg$note, as.character(utils::packageVersion("convlstm")), fixed = TRUE)

  # Both print, in text and in BibTeX.
  text <- paste(format(cit, style = "text"), collapse = "\n")
  expect_match(text, "Shi X")
  expect_match(text, "R package version")
  bib <- paste(format(cit, style = "bibtex"), collapse = "\n")
  expect_match(bib, "@InProceedings{shi2015convlstm", fixed = TRUE)
  expect_match(bib, "@Manual{convlstm", fixed = TRUE)
})
