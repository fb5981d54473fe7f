# utils.R -- small helpers shared by the R files: byte formatting for print
# methods and progress output, and a null default. No calls into C here.

`%||%` <- function(x, y) if (is.null(x)) y else x

# Bytes in binary units (as torch's memory summaries print them): 1 KiB =
# 1024 bytes.
format_bytes <- function(bytes, digits = 3) {
  units <- c("B", "KiB", "MiB", "GiB", "TiB")
  vapply(bytes, function(b) {
    if (is.na(b)) return(NA_character_)
    p <- if (b < 1024) 0 else min(floor(log(b, 1024)), length(units) - 1)
    if (p == 0) return(paste(format(b, big.mark = ","), "B"))
    paste(trimws(formatC(b / 1024^p, digits = digits, format = "fg")), units[[p + 1]])
  }, character(1))
}

format_count <- function(n) format(n, big.mark = ",", scientific = FALSE, trim = TRUE)
