# test-api-linkingto.R -- the C interface other packages use
# (inst/include/convlstm_api.h): a small package in linkingto/ with
# LinkingTo: convlstm is built and installed into a temporary library from
# the installed convlstm's headers, loaded in a fresh R (so that convlstm is
# loaded through its Imports, as it would be for any user), and its C calls
# are checked against convlstm's R API: the same loss and weights after a
# step from the same weights and data, the same memory plan, the same
# memory statistics, and models freed by the caller.

# The client's source, copied (the tests folder may be read-only) and
# installed; its library path, or a skip that says why it cannot be. With
# edit_header, the client compiles against a copy of the installed
# convlstm.h that edit_header rewrote (a stale or newer header).
install_client <- function(edit_header = NULL) {
  testthat::skip_on_cran()
  testthat::skip_if_not_installed("callr")
  if (!nzchar(system.file("include", "convlstm_api.h", package = "convlstm"))) {
    testthat::skip("the convlstm in use has no include/convlstm_api.h (not an installed package)")
  }
  cc <- callr::rcmd("config", "CC", fail_on_status = FALSE)$stdout
  cc <- strsplit(trimws(cc), "[[:space:]]+")[[1]][1]
  if (is.na(cc) || !nzchar(Sys.which(cc))) {
    testthat::skip(sprintf("no C compiler (R CMD config CC says '%s')", cc))
  }
  dir <- tempfile("linkingto-")
  lib <- file.path(dir, "lib")
  dir.create(lib, recursive = TRUE)
  file.copy(test_path("linkingto"), dir, recursive = TRUE)
  if (!is.null(edit_header)) {
    src <- file.path(dir, "linkingto", "src")
    inc <- system.file("include", package = "convlstm")
    # convlstm_api.h includes "convlstm.h" from its own folder: copy both.
    file.copy(file.path(inc, "convlstm_api.h"), src)
    header <- readLines(file.path(inc, "convlstm.h"))
    writeLines(edit_header(header), file.path(src, "convlstm.h"))
    # PKG_CPPFLAGS come before LinkingTo's include path: the copies win.
    writeLines("PKG_CPPFLAGS = -I.", file.path(src, "Makevars"))
  }
  res <- callr::rcmd("INSTALL", c("--no-multiarch", "-l", lib, file.path(dir, "linkingto")),
                     libpath = .libPaths(), fail_on_status = FALSE)
  if (res$status != 0) {
    testthat::fail(paste(c("R CMD INSTALL of the client failed:", res$stdout, res$stderr),
                         collapse = "\n"))
  }
  lib
}

# Runs in a fresh R: everything the client answers beside what convlstm's R
# API answers for the same model, data and shapes.
client_session <- function(lib) {
  # by a name in a variable: R CMD check would look a literal name up in the
  # package repositories, as an undeclared dependency of the tests
  client <- "convlstmclient"
  library(client, lib.loc = lib, character.only = TRUE)
  # A row-major (torch layout) vector as the R array of the same logical
  # dims that convlstm_state_dict() holds (a bias is a plain vector there).
  to_r <- function(v, like) {
    d <- dim(like)
    if (is.null(d)) v else aperm(array(v, rev(d)), rev(seq_along(d)))
  }
  out <- list(check = client_api_check(), alive0 = client_alive())
  out$bad_config <- tryCatch(client_model(0, c(3, 2), c(3, 3)), error = conditionMessage)
  out$alive_after_bad <- client_alive()

  set.seed(3)
  x <- array(stats::runif(2 * 3 * 2 * 5 * 4, -1, 1), dim = c(2, 3, 2, 5, 4))
  y <- array(stats::runif(2 * 2 * 5 * 4, -1, 1), dim = c(2, 2, 5, 4))

  # A model made and initialised in C; its weights loaded into an R model.
  cm <- client_model(2, c(3, 2), c(3, 3), threads = 1, seed = 7)
  out$alive_c <- client_alive()
  rm_ <- convlstm::convlstm(2, c(3, 2), c(3, 3), device = "cpu", threads = 1)
  sd <- convlstm::convlstm_state_dict(rm_)
  w0 <- client_params(cm)
  out$names <- list(c = names(w0), r = names(sd))
  convlstm::convlstm_load_state_dict(rm_, Map(to_r, w0[names(sd)], sd))
  out$init_range <- range(unlist(w0))

  # The plan before the step, then one Adam step on both sides.
  out$plan <- list(c = client_plan(cm, 2, 3, 5, 4, lr = 0.01),
                   r = convlstm::convlstm_memory_estimate(rm_, 2, 3, 5, 4,
                                                 optimizer = convlstm::convlstm_optimizer_adam(0.01)))
  out$loss <- c(c = client_train_step(cm, x, y, lr = 0.01),
                r = convlstm::convlstm_train_step(rm_, x, y, convlstm::convlstm_optimizer_adam(lr = 0.01)))
  w1 <- client_params(cm)
  sd1 <- convlstm::convlstm_state_dict(rm_)
  out$w_diff <- max(abs(unlist(Map(function(v, r) to_r(v, r) - r, w1[names(sd1)], sd1))))
  out$w_moved <- max(abs(unlist(w1) - unlist(w0)))
  out$stats <- list(c = client_memory_stats(cm), r = convlstm::convlstm_memory_stats(rm_))

  # A model saved by R, loaded by the client: the same next step.
  path <- tempfile(fileext = ".safetensors")
  convlstm::convlstm_save(rm_, path)
  lm <- client_load(path, threads = 1)
  # (The loss is that of the weights the step starts from, the saved ones;
  # the R model's Adam state only changes the update that follows.)
  out$loss2 <- c(c = client_train_step(lm, x, y, lr = 0.01),
                 r = convlstm::convlstm_train_step(rm_, x, y, convlstm::convlstm_optimizer_adam(lr = 0.01)))

  # Lifetime: explicit free (twice is harmless), and the finalizer on gc().
  before <- client_alive()
  client_free(lm)
  client_free(lm)
  out$alive_freed <- c(before = before, after = client_alive())
  out$freed_use <- tryCatch(client_params(lm), error = conditionMessage)
  convlstm::convlstm_release(rm_)
  rm(cm, lm)
  invisible(gc())
  out$alive_end <- client_alive()
  out
}

test_that("a package with LinkingTo: convlstm builds and calls the C interface", {
  lib <- install_client()
  res <- callr::r(client_session, list(lib), libpath = c(lib, .libPaths()))

  # The header and the installed library agree, and lookups succeeded.
  expect_identical(res$check, "")
  # Failures come back as a status and a message, not as a crash or a leak.
  expect_match(res$bad_config, "input_dim")
  expect_identical(res$alive_after_bad, res$alive0)
  expect_identical(res$alive_c, res$alive0 + 1L)

  # The same parameter names as the R state dict; the core's initialiser drew them.
  expect_setequal(res$names$c, res$names$r)
  expect_true(res$init_range[1] < 0 && res$init_range[2] > 0)

  # The plan the C caller reads is convlstm_memory_estimate()'s, category by category.
  est <- res$plan$r
  r_bytes <- stats::setNames(est$bytes, est$category)
  shared <- intersect(names(res$plan$c), names(r_bytes))
  expect_setequal(shared, c(res$stats$r$by_category$category, "total", "reserved"))
  expect_identical(res$plan$c[shared], r_bytes[shared])

  # One step from the same weights and data: the same loss, the same weights.
  expect_equal(res$loss[["c"]], res$loss[["r"]], tolerance = 1e-12)
  expect_true(res$w_moved > 0)
  expect_lt(res$w_diff, 1e-7)

  # Memory statistics: the same bytes per category and in total as R reports.
  r_stats <- res$stats$r
  bc <- r_stats$by_category
  expect_identical(unname(res$stats$c$peak), as.numeric(bc$peak))
  expect_identical(unname(res$stats$c$current), as.numeric(bc$current))
  expect_identical(names(res$stats$c$peak), bc$category)
  for (k in c("allocated", "peak_allocated", "reserved", "peak_reserved")) {
    expect_identical(res$stats$c[[k]], as.numeric(r_stats[[k]]), label = k)
  }
  # ... and the planned peak is what the step took.
  expect_identical(res$stats$c$peak_allocated, res$plan$c[["total"]])

  # A file saved by R, loaded through the C interface: the next step agrees.
  expect_equal(res$loss2[["c"]], res$loss2[["r"]], tolerance = 1e-12)

  # The caller frees its models; a freed one says so; the finalizer frees the rest.
  expect_identical(res$alive_freed[["after"]], res$alive_freed[["before"]] - 1L)
  expect_match(res$freed_use, "freed")
  expect_identical(res$alive_end, res$alive0)
})

test_that("a client compiled against another convlstm.h is told so, not left to misread", {
  # A field added to cl_optim without a new CL_API_VERSION: caught by size.
  lib <- install_client(function(h) {
    at <- grep("^} cl_optim;", h)
    stopifnot(length(at) == 1)
    append(h, "  double added_by_a_newer_header;", after = at - 1)
  })
  msg <- callr::r(function(lib) {
    client <- "convlstmclient"
    library(client, lib.loc = lib, character.only = TRUE)
    client_api_check()
  }, list(lib), libpath = c(lib, .libPaths()))
  expect_match(msg, "cl_optim has [0-9]+ bytes, but the installed convlstm's has [0-9]+")
  expect_match(msg, "reinstall")

  # A new version number: caught before any struct is compared.
  lib <- install_client(function(h) {
    sub("^#define CL_API_VERSION [0-9]+", "#define CL_API_VERSION 9999", h)
  })
  msg <- callr::r(function(lib) {
    client <- "convlstmclient"
    library(client, lib.loc = lib, character.only = TRUE)
    client_api_check()
  }, list(lib), libpath = c(lib, .libPaths()))
  expect_match(msg, "version 9999, but the installed convlstm has version [0-9]+")
})
