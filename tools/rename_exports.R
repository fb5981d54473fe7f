# rename_exports.R -- applies tools/exports_renamed.tsv (issue 35, item 1:
# every export named convlstm_*, so that none masks a keras, keras3, torch or
# luz function) and tools/arguments_renamed.tsv (item 2: one name per idea)
# to the sources, then regenerates man/ and NAMESPACE with roxygen2.
#
#   Rscript tools/rename_exports.R            # from the package root
#   Rscript tools/rename_exports.R --dry-run  # count, change nothing
#
# Idempotent: a second run changes nothing (every pattern needs the old
# name as a whole word, and convlstm_<old> is not one). What it rewrites,
# in R, Rmd, md and yml files under R/, tests/testthat/ (not fixtures/),
# vignettes/, doc/, demo/, inst/, bench/, tools/ and README.md:
#   - calls and `name()` in prose or roxygen links: old( -> new(
#   - convlstm::old -> convlstm::new (another package's torch::old is left)
#   - definitions at the start of a line: old <- function
#   - roxygen topics: @rdname/@inheritParams/@inherit.../@describeIn old,
#     \link{old}, [old], ?old, help(old)
#   - the function as a value where only a function goes: do.call(old, ...),
#     formals(old), match.fun(old), body(old), args(old), environment(old),
#     and the call's name: quote(old), as.name("old")
#   - for names that are nothing but our function (no local variable,
#     argument or field shares them: see `ambiguous` below), also bare
#     references (do.call(old, ...), formals(old), `old`) and the string
#     "old" (a function's name in its messages)
#   - tests/mutate/mutants.tsv: the same rules on each row's snippet and
#     replacement, so that each snippet still quotes its line; rows whose
#     snippet no longer occurs exactly once are listed (fix them by hand)
#   - _pkgdown.yml: reference entries and starts_with() prefixes
#   - shell scripts (*.sh, e.g. an Rscript -e '...' in tools/device/): calls
#     old( and convlstm::old only
#   - src/r_*.c and src/core/: old() inside a C string literal (an error
#     message naming the R function), nothing else.
# A file that defines a name for itself (a test's local fit <- function())
# keeps its uses of that name (local_names()).
# It never matches $old, x@old, pkg::old (pkg other than convlstm), .old,
# old. , x_old or old_x: so model$state_dict(), torch::lr_step() and
# convlstm_lr_step() are left alone.
# A row whose new name is pkg::old (fit, evaluate: the generics package's
# generics, which convlstm only re-exported) is dropped from the exports:
# its re-export block is removed and calls read pkg::old(...).

args <- commandArgs(trailingOnly = TRUE)
dry_run <- "--dry-run" %in% args
if (!file.exists("DESCRIPTION") || !file.exists("tools/exports_renamed.tsv")) {
  stop("run from the package root (tools/exports_renamed.tsv not found)")
}
map <- utils::read.delim("tools/exports_renamed.tsv", colClasses = "character")
arg_map <- utils::read.delim("tools/arguments_renamed.tsv", colClasses = "character")

# Names a local variable, an argument, a list field or a prose word can
# share: only their unmistakable forms (a call, a link, a definition) are
# rewritten, never a bare word or a string.
ambiguous <- c("fit", "evaluate", "callback", "gradients", "state_dict", "loss_scale",
               "memory_stats", "gpu_info", "carried_state", "reset_state",
               "sampling_schedule", "forecast_metrics", "train_step", "zero_grad",
               "optimizer_step", "set_dtype", "empty_cache", "read_idx", "gpu_available",
               "memory_profile", "memory_summary")

ID <- "A-Za-z0-9._"
NOT_BEFORE <- sprintf("(?<![%s$@:])", ID) # not x$old, x@old, pkg::old, .old, x_old
NOT_AFTER <- sprintf("(?![%s])", ID)      # not old_x, old.x

gsub_count <- function(pattern, replacement, text) {
  hits <- gregexpr(pattern, text, perl = TRUE)[[1]]
  n <- if (hits[[1]] == -1) 0L else length(hits)
  list(text = if (n > 0) gsub(pattern, replacement, text, perl = TRUE) else text, n = n)
}

# The rules for one (old, new) pair, as (pattern, replacement) pairs.
rules_for <- function(old, new, type) {
  dropped <- grepl("::", new, fixed = TRUE)
  q <- old # names are [a-z_]+: no regex metacharacters
  r <- list(
    c(paste0(NOT_BEFORE, q, "(?=\\()"), new),                               # old(
    c(paste0("convlstm::", q, NOT_AFTER), if (dropped) new else paste0("convlstm::", new))
  )
  if (type %in% c("R", "Rmd", "md")) {
    r <- c(r, list(
      c(paste0("(?m)^", q, "(?=\\s*<-\\s*function)"), new),                # definition
      c(paste0("(@rdname|@inheritParams|@inheritDotParams|@inheritSection|@inherit|",
               "@describeIn|@family)(\\s+)", q, NOT_AFTER), paste0("\\1\\2", new)),
      c(paste0("\\\\link\\{", q, "\\}"), paste0("\\\\link{", new, "}")),
      c(paste0("(?<!\\])\\[", q, "\\](?![(\\[])"), paste0("[", new, "]")),   # [old]
      c(paste0("(?<![A-Za-z0-9])\\?", q, NOT_AFTER), paste0("?", new)),     # ?old
      c(paste0("help\\((\"?)", q, "(\"?)(?=[,)])"), paste0("help(\\1", new, "\\2")),
      # the function as a value, where only a function goes: do.call(old, ...)
      c(paste0("(?<![A-Za-z0-9._$])((?:do\\.call|formals|match\\.fun|body|args|environment|quote|bquote)\\(\\s*)",
               q, NOT_AFTER, "(?!\\s*\\()"), paste0("\\1", new)),
      c(paste0("((?:as\\.name|as\\.symbol)\\(\\s*\")", q, "(?=\")"), paste0("\\1", new))
    ))
    if (!old %in% ambiguous && !dropped) {
      r <- c(r, list(
        # a bare reference: not an argument name (old =), not in a string
        c(paste0(sprintf("(?<![%s$@:\"'])", ID), q, sprintf("(?![%s(\"'])(?!\\s*=[^=])", ID)),
          new),
        c(paste0("(?<=[\"'])", q, "(?=[\"'])"), new)                      # "old"
      ))
    }
  }
  r
}

# Renamed arguments: within a call of fn (old or new name), a top-level
# `old =` becomes `new =`.
rename_call_args <- function(text) {
  n <- 0L
  for (i in seq_len(nrow(arg_map))) {
    fn <- arg_map$`function`[[i]]
    new_fn <- map$new[match(fn, map$old)]
    fns <- unique(stats::na.omit(c(fn, new_fn)))
    for (f in fns) {
      starts <- gregexpr(paste0(NOT_BEFORE, f, "\\("), text, perl = TRUE)[[1]]
      if (starts[[1]] == -1) next
      for (s in rev(as.integer(starts) + nchar(f))) { # s: the "(" (from the end: offsets hold)
        chars <- strsplit(substr(text, s, min(nchar(text), s + 5000L)), "")[[1]]
        depth <- 0L; quote <- ""; end <- length(chars); top <- logical(length(chars))
        for (k in seq_along(chars)) {
          ch <- chars[[k]]
          if (nzchar(quote)) { if (ch == quote && (k == 1 || chars[[k - 1]] != "\\")) quote <- ""; next }
          if (ch %in% c("\"", "'", "`")) { quote <- ch; next }
          if (ch %in% c("(", "[", "{")) depth <- depth + 1L
          if (ch %in% c(")", "]", "}")) { depth <- depth - 1L; if (depth == 0L) { end <- k; break } }
          top[[k]] <- depth == 1L
        }
        inner <- paste(chars[seq_len(end)], collapse = "")
        pat <- paste0("(?<=[(,\\s])", arg_map$old[[i]], "(?=\\s*=[^=])")
        hits <- gregexpr(pat, inner, perl = TRUE)[[1]]
        if (hits[[1]] == -1) next
        keep <- hits[top[as.integer(hits)]]
        for (h in rev(keep)) {
          inner <- paste0(substr(inner, 1, h - 1), arg_map$new[[i]],
                          substr(inner, h + nchar(arg_map$old[[i]]), nchar(inner)))
          n <- n + 1L
        }
        text <- paste0(substr(text, 1, s - 1), inner, substr(text, s + end, nchar(text)))
      }
    }
  }
  list(text = text, n = n)
}

# A re-export of another package's generic that the map drops: the block
# "#' @export\npkg::old\n" loses its @export and its line (the @importFrom
# that registers our S3 method stays, on NULL).
drop_reexports <- function(text) {
  n <- 0L
  for (new in map$new[grepl("::", map$new, fixed = TRUE)]) {
    pat <- paste0("#' @export\\n", gsub(".", "\\.", new, fixed = TRUE), "\\n")
    res <- gsub_count(pat, "NULL\n", text)
    text <- res$text; n <- n + res$n
  }
  list(text = text, n = n)
}

# Names a file defines for itself (a test's local `fit <- function(...)`, a
# script's own helper): there old(...) calls that, not ours, so the file's
# uses of the name are left alone. In R/ a definition at the start of a
# line is ours (the one renamed); anywhere else any assignment is local.
local_names <- function(text, path) {
  ours_at_col0 <- startsWith(path, "R/")
  map$old[vapply(map$old, function(old) {
    grepl(sprintf("(?m)^\\s+%s\\s*<-", old), text, perl = TRUE) ||
      (!ours_at_col0 && grepl(sprintf("(?m)^%s\\s*<-", old), text, perl = TRUE))
  }, logical(1))]
}

rename_text <- function(text, type, skip_names = character()) {
  if (type == "C") return(rename_c_strings(text))
  n <- 0L
  for (i in seq_len(nrow(map))) {
    if (map$old[[i]] %in% skip_names) next
    for (rule in rules_for(map$old[[i]], map$new[[i]], type)) {
      res <- gsub_count(rule[[1]], rule[[2]], text)
      text <- res$text; n <- n + res$n
    }
  }
  if (type %in% c("R", "Rmd", "md")) {
    res <- rename_call_args(text); text <- res$text; n <- n + res$n
  }
  if (type == "R") {
    res <- drop_reexports(text); text <- res$text; n <- n + res$n
  }
  list(text = text, n = n)
}

file_type <- function(path) {
  ext <- tolower(tools::file_ext(path))
  if (ext == "r") "R" else if (ext == "rmd") "Rmd" else if (ext == "md") "md" else
    if (ext %in% c("c", "h", "cu", "cuh")) "C" else if (ext == "sh") "sh" else ""
}

# C sources (src/r_*.c, src/core/): only the R function named in an error
# message, "... call old() ...", inside a string literal; C identifiers,
# comments and everything else are left alone.
rename_c_strings <- function(text) {
  n <- 0L
  lit <- gregexpr('"(?:[^"\\\\\n]|\\\\.)*"', text, perl = TRUE)
  regmatches(text, lit) <- lapply(regmatches(text, lit), function(strings) {
    for (i in seq_len(nrow(map))) {
      if (grepl("::", map$new[[i]], fixed = TRUE)) next
      pat <- paste0(NOT_BEFORE, map$old[[i]], "(?=\\(\\))")
      hits <- vapply(gregexpr(pat, strings, perl = TRUE), function(h) sum(h > 0), 0L)
      n <<- n + sum(hits)
      strings <- gsub(pat, map$new[[i]], strings, perl = TRUE)
    }
    strings
  })
  list(text = text, n = n)
}

skip <- c("tools/rename_exports.R", "tools/exports_renamed.tsv", "tools/arguments_renamed.tsv",
          "NEWS.md", # NEWS keeps the names each release had
          "tests/testthat/test-exports-mask-nothing.R") # quotes other packages' names
files <- c("README.md", unlist(lapply(
  c("R", "tests/testthat", "vignettes", "doc", "demo", "inst", "bench", "tools", "src"),
  function(d) list.files(d, recursive = TRUE, full.names = TRUE, all.files = FALSE))))
files <- files[file.exists(files) & nzchar(vapply(files, file_type, ""))]
files <- files[!startsWith(files, "tests/testthat/fixtures/") & !files %in% skip]
# in src/, only the R glue's and the core's C (see rename_c_strings())
files <- files[!startsWith(files, "src/") | (vapply(files, file_type, "") == "C" &
                 (grepl("^src/r_[^/]*\\.c$", files) | startsWith(files, "src/core/")))]

read_text <- function(p) paste(readLines(p, warn = FALSE, encoding = "UTF-8"), collapse = "\n")
write_text <- function(p, text) writeLines(text, p, useBytes = TRUE)

changed <- list()
for (p in files) {
  text <- read_text(p)
  res <- rename_text(text, file_type(p), local_names(text, p))
  if (res$n > 0 && !identical(res$text, text)) {
    changed[[p]] <- res$n
    if (!dry_run) write_text(p, res$text)
  }
}

# _pkgdown.yml: "  - old" entries and starts_with("prefix") of renamed names
if (file.exists("_pkgdown.yml")) {
  lines <- readLines("_pkgdown.yml", warn = FALSE)
  before <- lines
  for (i in seq_len(nrow(map))) {
    at <- grepl(paste0("^\\s*-\\s*", map$old[[i]], "\\s*$"), lines)
    if (grepl("::", map$new[[i]], fixed = TRUE)) {
      lines <- lines[!at]
    } else {
      lines[at] <- sub(map$old[[i]], map$new[[i]], lines[at], fixed = TRUE)
    }
  }
  sw <- regmatches(lines, regexpr("starts_with\\(\"[^\"]+\"\\)", lines))
  for (m in unique(sw)) {
    prefix <- sub("starts_with\\(\"([^\"]+)\"\\)", "\\1", m)
    if (!startsWith(prefix, "convlstm") && any(startsWith(map$old, prefix))) {
      lines <- gsub(m, sprintf("starts_with(\"convlstm_%s\")", prefix), lines, fixed = TRUE)
    }
  }
  if (!identical(lines, before)) {
    changed[["_pkgdown.yml"]] <- sum(lines[seq_len(min(length(lines), length(before)))] !=
                                       before[seq_len(min(length(lines), length(before)))]) +
      abs(length(before) - length(lines))
    if (!dry_run) writeLines(lines, "_pkgdown.yml")
  }
}

# tests/mutate/mutants.tsv: the same rules on snippet (4) and replacement (5)
# of each row whose file the rules read; then every snippet must occur
# exactly once in its (renamed) file.
mutants <- "tests/mutate/mutants.tsv"
bad_rows <- character()
if (file.exists(mutants)) {
  rows <- readLines(mutants, warn = FALSE)
  out <- rows
  n_mut <- 0L
  for (j in seq_along(rows)) {
    if (!nzchar(rows[[j]]) || startsWith(rows[[j]], "#")) next
    f <- strsplit(rows[[j]], "\t", fixed = TRUE)[[1]]
    if (length(f) < 5 || !f[[3]] %in% files) next
    type <- file_type(f[[3]])
    skip_names <- local_names(read_text(f[[3]]), f[[3]])
    for (k in 4:5) {
      res <- rename_text(f[[k]], type, skip_names)
      f[[k]] <- res$text; n_mut <- n_mut + res$n
    }
    out[[j]] <- paste(f, collapse = "\t")
    body <- if (dry_run) rename_text(read_text(f[[3]]), type, skip_names)$text else read_text(f[[3]])
    hits <- gregexpr(f[[4]], body, fixed = TRUE)[[1]]
    if (sum(hits > 0) != 1) bad_rows <- c(bad_rows, sprintf("%s (%d in %s)", f[[1]], sum(hits > 0), f[[3]]))
  }
  if (!identical(out, rows)) {
    changed[[mutants]] <- n_mut
    if (!dry_run) writeLines(out, mutants)
  }
}

for (p in names(changed)) cat(sprintf("%6d  %s\n", changed[[p]], p))
cat(sprintf("%d files, %d substitutions%s\n", length(changed), sum(unlist(changed)),
            if (dry_run) " (dry run: nothing written)" else ""))
if (length(bad_rows) > 0) {
  cat("mutant rows whose snippet no longer occurs exactly once:\n",
      paste0("  ", bad_rows, "\n"), sep = "")
}
if (!dry_run && length(changed) > 0) roxygen2::roxygenise()
