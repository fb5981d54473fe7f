# What convlstm_save() writes to when `path` is not a plain new or existing
# file: a symbolic link is followed (a chain too, a dangling one as
# saveRDS() does) and the file it points to is replaced, the link staying a
# link; a directory, FIFO or other non-regular file is refused with a classed
# error and left as it was; and a refused or failed save leaves the old file
# byte-identical. No test touches /dev or any real device node: the tests run
# as root in CI, where a regression would destroy it. The C core's own checks
# are tested in tests/c/test_core_safetensors.c.

skip_on_os("windows")

# A fresh directory; the caller removes it with on.exit().
targets_dir <- function() {
  d <- tempfile("targets")
  dir.create(d)
  normalizePath(d)
}

is_link <- function(p) {
  l <- Sys.readlink(p)
  !is.na(l) && nzchar(l)
}
is_fifo <- function(p) system2("test", c("-p", shQuote(p))) == 0

# path is a regular file holding model's weights.
expect_model_file <- function(path, model) {
  expect_true(file.exists(path) && !is_link(path), label = path)
  if (!file.exists(path)) return(invisible())
  r <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(r))
  expect_true(identical(convlstm_state_dict(r), convlstm_state_dict(model)), label = "the model in the file")
}

make_fifo <- function(path) {
  if (!nzchar(Sys.which("mkfifo"))) testthat::skip("no mkfifo")
  if (system2("mkfifo", shQuote(path)) != 0 || !is_fifo(path)) testthat::skip("mkfifo failed")
  path
}

# Each case: the links to make (name = what it points to, relative to the
# directory or absolute), the name to save to, and the file that must end up
# holding the model.
link_cases <- list(
  "a link" = list(links = c(link = "real.safetensors"), save = "link", file = "real.safetensors"),
  "a chain of two links" = list(links = c(outer = "inner", inner = "real.safetensors"),
                                save = "outer", file = "real.safetensors"),
  "a link into another directory" = list(links = c(link = "sub/real.safetensors"), save = "link",
                                         file = "sub/real.safetensors"),
  "an absolute link" = list(links = c(link = "<dir>/real.safetensors"), save = "link",
                            file = "real.safetensors")
)

for (case in names(link_cases)) {
  test_that(paste0("saving through ", case, " replaces the file it points to, the link stays"), {
    k <- link_cases[[case]]
    d <- targets_dir()
    on.exit(unlink(d, recursive = TRUE))
    dir.create(file.path(d, "sub"))
    set.seed(21)
    old <- api_model()
    on.exit(convlstm_release(old), add = TRUE)
    new <- api_model()
    on.exit(convlstm_release(new), add = TRUE)
    convlstm_save(old, file.path(d, k$file))
    for (name in names(k$links)) {
      to <- sub("<dir>", d, k$links[[name]], fixed = TRUE)
      expect_true(file.symlink(to, file.path(d, name)))
    }
    before <- list.files(d, recursive = TRUE, all.files = TRUE)
    convlstm_save(new, file.path(d, k$save))
    for (name in names(k$links)) {
      expect_identical(Sys.readlink(file.path(d, name)),
                       sub("<dir>", d, k$links[[name]], fixed = TRUE))
    }
    expect_model_file(file.path(d, k$file), new)
    # loading through the link reads the new model too
    r <- convlstm_load(file.path(d, k$save), device = "cpu")
    on.exit(convlstm_release(r), add = TRUE)
    expect_true(identical(convlstm_state_dict(r), convlstm_state_dict(new)), label = "the model through the link")
    # no temporary file left anywhere
    expect_identical(list.files(d, recursive = TRUE, all.files = TRUE), before)
  })
}

test_that("saving through a dangling link writes the file where it points, as saveRDS does", {
  d <- targets_dir()
  on.exit(unlink(d, recursive = TRUE))
  dir.create(file.path(d, "sub"))
  model <- api_model()
  on.exit(convlstm_release(model), add = TRUE)
  link <- file.path(d, "link")
  file.symlink("sub/new.safetensors", link)
  convlstm_save(model, link)
  expect_identical(Sys.readlink(link), "sub/new.safetensors")
  expect_model_file(file.path(d, "sub", "new.safetensors"), model)
  expect_identical(sort(list.files(d, recursive = TRUE, all.files = TRUE)),
                   c("link", "sub/new.safetensors"))
  # saveRDS() does the same with a dangling link (what the choice follows)
  rds <- file.path(d, "rds")
  file.symlink("sub/x.rds", rds)
  saveRDS(1, rds)
  expect_identical(Sys.readlink(rds), "sub/x.rds")
  expect_true(file.exists(file.path(d, "sub", "x.rds")))
  # pointing into a directory that does not exist: an error, the link untouched
  gone <- file.path(d, "gone")
  file.symlink("nowhere/new.safetensors", gone)
  expect_convlstm_error(convlstm_save(model, gone), regexp = "cannot create")
  expect_identical(Sys.readlink(gone), "nowhere/new.safetensors")
  expect_false(dir.exists(file.path(d, "nowhere")))
})

# Each case makes something that is not a regular file at a name in the
# directory d and returns a function checking that it is still there and the
# same; saving to it must be refused.
refused_cases <- list(
  "a directory" = function(d, name) {
    p <- file.path(d, name)
    dir.create(p)
    writeLines("keep", file.path(p, "inside"))
    function() {
      expect_true(dir.exists(p))
      expect_identical(list.files(p, all.files = TRUE, no.. = TRUE), "inside")
    }
  },
  "a link to a directory" = function(d, name) {
    dir.create(file.path(d, "adir"))
    file.symlink("adir", file.path(d, name))
    function() {
      expect_identical(Sys.readlink(file.path(d, name)), "adir")
      expect_identical(list.files(file.path(d, "adir"), all.files = TRUE, no.. = TRUE),
                       character(0))
    }
  },
  "a FIFO" = function(d, name) {
    p <- make_fifo(file.path(d, name))
    function() expect_true(is_fifo(p))
  },
  "a link to a FIFO" = function(d, name) {
    make_fifo(file.path(d, "afifo"))
    file.symlink("afifo", file.path(d, name))
    function() {
      expect_identical(Sys.readlink(file.path(d, name)), "afifo")
      expect_true(is_fifo(file.path(d, "afifo")))
    }
  }
)

for (case in names(refused_cases)) {
  test_that(paste0("saving to ", case, " is refused and leaves it as it was"), {
    d <- targets_dir()
    on.exit(unlink(d, recursive = TRUE))
    model <- api_model()
    on.exit(convlstm_release(model), add = TRUE)
    unchanged <- refused_cases[[case]](d, "target")
    target <- file.path(d, "target")
    # A FIFO opened for reading without blocking: should anything open the
    # FIFO to write, it cannot block (and what it wrote would show here).
    fifo <- file.path(d, if (case == "a FIFO") "target" else "afifo")
    reader <- NULL
    if (is_fifo(fifo)) {
      reader <- fifo(fifo, "rb", blocking = FALSE)
      on.exit(close(reader), add = TRUE)
    }
    before <- list.files(d, recursive = TRUE, all.files = TRUE, include.dirs = TRUE)
    err <- expect_convlstm_error(convlstm_save(model, target),
                                 regexp = "`path` must name a regular file")
    if (inherits(err, "condition")) expect_match(conditionMessage(err), target, fixed = TRUE)
    unchanged()
    expect_identical(list.files(d, recursive = TRUE, all.files = TRUE, include.dirs = TRUE), before)
    if (!is.null(reader)) expect_length(readBin(reader, "raw", 1e5), 0)
  })
}

test_that("a refused or failed save leaves the old file byte-identical", {
  d <- targets_dir()
  on.exit(unlink(d, recursive = TRUE))
  set.seed(22)
  old <- api_model()
  on.exit(convlstm_release(old), add = TRUE)
  new <- api_model()
  on.exit(convlstm_release(new), add = TRUE)
  real <- file.path(d, "real.safetensors")
  convlstm_save(old, real)
  bytes <- readBin(real, "raw", file.size(real))
  file.symlink("real.safetensors", file.path(d, "link"))
  dir.create(file.path(d, "adir"))
  convlstm_train_step(new, api_x(), api_y(), convlstm_optimizer_adam())
  refused <- list(
    reserved_metadata = function(p) convlstm_save(new, p, metadata = c(format = "x")),
    other_optimizer = function(p) convlstm_save(new, p, optimizer = convlstm_optimizer_sgd(0.1))
  )
  for (what in names(refused)) {
    for (p in c(real, file.path(d, "link"))) {
      expect_convlstm_error(refused[[what]](p))
      expect_identical(readBin(real, "raw", file.size(real) + 1), bytes, label = what)
      expect_identical(Sys.readlink(file.path(d, "link")), "real.safetensors")
    }
  }
  expect_convlstm_error(convlstm_save(new, file.path(d, "adir")), regexp = "regular file")
  expect_identical(readBin(real, "raw", file.size(real) + 1), bytes)
  expect_identical(sort(list.files(d, all.files = TRUE, no.. = TRUE)),
                   c("adir", "link", "real.safetensors"))
})

test_that("a save that fails while writing (file size limit) leaves the old file byte-identical", {
  rscript <- file.path(R.home("bin"), "Rscript")
  if (!file.exists(rscript) || !nzchar(Sys.which("sh"))) testthat::skip("no Rscript or sh")
  d <- targets_dir()
  on.exit(unlink(d, recursive = TRUE))
  model <- api_model()
  on.exit(convlstm_release(model), add = TRUE)
  real <- file.path(d, "real.safetensors")
  convlstm_save(model, real)
  bytes <- readBin(real, "raw", file.size(real) + 1)
  file.symlink("real.safetensors", file.path(d, "link"))
  # A new R process saves a bigger model through the link with files limited
  # to 1 KiB: its writes fail (EFBIG; SIGXFSZ is ignored so that the process
  # survives to report it) after the temporary file was created.
  code <- sprintf(paste(
    "library(convlstm, lib.loc = '%s')",
    "m <- convlstm(2, c(8, 8), 3, device = 'cpu', threads = 1)",
    "r <- tryCatch(convlstm_save(m, '%s'), convlstm_error = conditionMessage)",
    "cat('RESULT:', r, '\\n')", sep = "; "),
    dirname(find.package("convlstm")), file.path(d, "link"))
  script <- file.path(tempdir(), "save_limited.R")
  on.exit(unlink(script), add = TRUE)
  writeLines(code, script)
  out <- suppressWarnings(system2("sh", c("-c", shQuote(sprintf(
    "trap '' XFSZ; ulimit -f 2 && exec %s --vanilla %s", shQuote(rscript), shQuote(script)))),
    stdout = TRUE, stderr = TRUE))
  out <- paste(out, collapse = "\n")
  expect_match(out, "RESULT: cannot write", fixed = TRUE)
  expect_identical(readBin(real, "raw", file.size(real) + 1), bytes)
  expect_identical(Sys.readlink(file.path(d, "link")), "real.safetensors")
  expect_identical(sort(list.files(d, all.files = TRUE, no.. = TRUE)),
                   c("link", "real.safetensors"))
})
