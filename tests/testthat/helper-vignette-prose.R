# helper-vignette-prose.R -- the prose of an R Markdown file (what a reader
# reads as typed text) and the figures with units in it, for
# test-vignette-prose.R.

# The lines of `lines` outside the YAML header and the code chunks, with
# inline code (`r ...` and any other `...`) and HTML comments blanked: what
# is left was typed, not computed.
vignette_prose <- function(lines) {
  keep <- rep(TRUE, length(lines))
  if (length(lines) > 0 && identical(trimws(lines[[1]]), "---")) {
    end <- which(trimws(lines) == "---")
    end <- end[end > 1][1]
    keep[seq_len(end)] <- FALSE
  }
  fence <- grepl("^\\s*```", lines)
  inside <- (cumsum(fence) %% 2 == 1) | fence # a fence line and what it encloses
  keep[inside] <- FALSE
  text <- ifelse(keep, lines, "")
  text <- gsub("`[^`]*`", " ", text)                 # inline code, computed or quoted
  gsub("<!--.*?-->", " ", text, perl = TRUE)
}

# The figures with a unit of size, time or ratio in `text` (a character
# vector): "12.5 MiB", "7.92 ms", "40 %", "1.4x", "128-byte". A product of
# sizes ("24x24", "32 x 32") is a shape, not a figure.
figure_regex <- paste0(
  "(?<![[:alnum:]._-])[0-9][0-9,]*(?:\\.[0-9]+)?",
  "(?:[\\s-]?(?:TiB|GiB|MiB|KiB|TB|GB|MB|KB|kB|bytes?|B|ms|s|seconds?)(?![[:alnum:]])",
  "|\\s?%|\\s?x(?![[:alnum:]]|\\s*[0-9]))"
)
prose_figures <- function(text) {
  unlist(regmatches(text, gregexpr(figure_regex, text, perl = TRUE)))
}
