# test-vignette-prose.R -- a figure the vignettes' prose quotes (a size, a
# time, a ratio) is computed where the page is built (inline `r ...`), so it
# cannot drift from the code's output; the few typed in (GPU figures,
# measurements of bench/ runs, figures the questions quote) are in a
# committed allow-list, fixtures/vignette-figures.tsv, which names where each
# comes from. The scanner is helper-vignette-prose.R.

vignette_sources <- function() {
  dir <- normalizePath(file.path(testthat::test_path(), "..", "..", "vignettes"), mustWork = FALSE)
  files <- Sys.glob(file.path(dir, "*.Rmd"))
  if (length(files) == 0) {
    testthat::skip("no vignette sources beside the tests (a built package has none)")
  }
  stats::setNames(files, sub("\\.Rmd$", "", basename(files)))
}

allowed_figures <- function() {
  utils::read.delim(testthat::test_path("fixtures", "vignette-figures.tsv"),
                    colClasses = "character")
}

# A vignette's typed figures, from its prose as one text (a figure may
# break across lines).
typed_figures <- function(file) {
  prose_figures(paste(vignette_prose(readLines(file, warn = FALSE)), collapse = "\n"))
}

test_that("the scanner finds typed figures and leaves computed and quoted code alone", {
  rmd <- c("---", "title: \"10 MiB\"", "---", "",
           "A step takes 12.5 MiB, 7.92 ms and 1,024", "bytes; 40 % less, 1.4x faster.",
           "Frames of 24x24 and 32 x", "32 pixels, a 128-byte header.",
           "Computed: `r 3 * 4` MiB, in code: `budget = \"8 GiB\"`.",
           "```{r}", "x <- \"16 GiB\" # 5 ms", "```", "<!-- 99 MiB -->")
  found <- prose_figures(paste(vignette_prose(rmd), collapse = "\n"))
  expect_identical(found, c("12.5 MiB", "7.92 ms", "1,024\nbytes", "40 %", "1.4x", "128-byte"))
})

test_that("every figure the vignettes' prose types in is allow-listed with its source", {
  files <- vignette_sources()
  allowed <- allowed_figures()
  for (name in names(files)) {
    typed <- gsub("\\s+", " ", typed_figures(files[[name]]))
    extra <- setdiff(typed, allowed$figure[allowed$vignette == name])
    expect(length(extra) == 0, sprintf(paste0(
      "%s.Rmd types in %s: compute it inline (`r ...`) or, if it cannot be computed when ",
      "the page is built, say where it comes from and add it to fixtures/vignette-figures.tsv"),
      name, paste0("\"", extra, "\"", collapse = ", ")))
  }
})

test_that("the allow-list is short, current, and its figures are in the files it names", {
  files <- vignette_sources()
  allowed <- allowed_figures()
  expect_lt(nrow(allowed), 40)
  expect_true(all(nzchar(allowed$source)))
  root <- dirname(dirname(files[[1]]))
  for (i in seq_len(nrow(allowed))) {
    a <- allowed[i, ]
    # each entry is still typed in its vignette (else it is stale)
    typed <- if (a$vignette %in% names(files)) gsub("\\s+", " ", typed_figures(files[[a$vignette]]))
    expect(a$figure %in% typed, sprintf("%s: \"%s\" is no longer in its prose", a$vignette, a$figure))
    # a figure from a file of this repository: its number is in that file
    if (!startsWith(a$source, "quoted:")) {
      src <- file.path(root, a$source)
      expect(file.exists(src), sprintf("%s: the source %s does not exist", a$figure, a$source))
      if (file.exists(src)) {
        number <- gsub(",", "", regmatches(a$figure, regexpr("^[0-9][0-9,.]*", a$figure)))
        text <- gsub("(?<=[0-9]),(?=[0-9]{3})", "", paste(readLines(src, warn = FALSE), collapse = "\n"),
                     perl = TRUE)
        pattern <- paste0("(?<![0-9.])", gsub(".", "\\.", number, fixed = TRUE), "(?![0-9])")
        expect(grepl(pattern, text, perl = TRUE),
               sprintf("%s (%s): %s is not in %s", a$figure, a$vignette, number, a$source))
      }
    }
  }
})
