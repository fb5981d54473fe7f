# The C tests of tests/c as testthat tests: src/Makefile.standalone builds
# them (into build/ of the source tree, the folder `make ctest` uses, so a
# second build is incremental), tests/c/run.sh runs them, and each C test
# program becomes one test here: passed, skipped (it exited 77) or failed
# with its output. A part a program skipped on its own ("skip cuda: no
# usable GPU" from test_backend_ops) is a skip of its own.
#
# They need the source tree: R CMD build leaves tests/c and
# src/Makefile.standalone out of the package (.Rbuildignore), so under
# R CMD check, and wherever the source is not beside these tests, they skip
# and say why; so they do without make or a C compiler. With
# CONVLSTM_C_TESTS=require (the top-level Makefile's `make test`) a reason
# to skip is a failure instead: there the C tests must run. With
# CONVLSTM_C_TESTS=skip (`make test-guard`, a second pass) they skip.
# A program that needs a GPU and finds none prints "skip cuda: ..." and
# exits 77 (test_cuda_graphs): that is a skip, counted as one, and the one
# reason to skip that CONVLSTM_C_TESTS=require accepts (CI has no GPU;
# tools/device/gpu_session.sh makes a missing GPU fail with
# CONVLSTM_REQUIRE_GPU=1).

c_tests_required <- function() identical(Sys.getenv("CONVLSTM_C_TESTS"), "require")

# A skip for want of a GPU ("skip cuda: ..."), not of anything CI provides.
c_tests_no_gpu <- function(line) grepl("^skip cuda: ", line)

# Why the C tests cannot run here, or NULL when they can. root must be the
# source tree these very tests are in (R CMD check copies them elsewhere).
c_tests_unavailable <- function(root) {
  if (identical(Sys.getenv("CONVLSTM_C_TESTS"), "skip")) {
    return("CONVLSTM_C_TESTS=skip (the C tests ran once already, in `make test`)")
  }
  here <- normalizePath(testthat::test_path(), mustWork = FALSE)
  if (!identical(normalizePath(file.path(root, "tests", "testthat"), mustWork = FALSE), here) ||
      !file.exists(file.path(root, "tests", "c", "run.sh")) ||
      !file.exists(file.path(root, "src", "Makefile.standalone"))) {
    return(paste("no source tree beside the tests (tests/c and src/Makefile.standalone are",
                 "not in the built package); run them from a source checkout"))
  }
  cc <- Sys.getenv("CC", "cc")
  for (tool in c("make", "sh", cc)) {
    if (!nzchar(Sys.which(tool))) return(sprintf("no '%s' on the PATH", tool))
  }
  NULL
}

# Splits run.sh's output into one record per C test: its status line and
# the output that came before it.
c_tests_parse <- function(out) {
  status_re <- "^(ok  |skip|FAIL) (test_[A-Za-z0-9_]+) \\((.*)\\)$"
  at <- grep(status_re, out)
  from <- c(1L, head(at, -1L) + 1L)
  lapply(seq_along(at), function(i) {
    line <- out[at[i]]
    list(status = trimws(sub(status_re, "\\1", line)), name = sub(status_re, "\\2", line),
         detail = sub(status_re, "\\3", line),
         output = out[seq.int(from[i], length.out = at[i] - from[i])])
  })
}

c_tests_run <- function() {
  root <- normalizePath(file.path(testthat::test_path(), "..", ".."), mustWork = FALSE)
  why <- c_tests_unavailable(root)
  if (!is.null(why)) return(list(skip = why))
  # a MAKEFLAGS inherited from `make test` names a jobserver this make
  # cannot reach (it would build on one core): its own -j instead
  jobs <- sprintf("-j%d", max(1L, parallel::detectCores(), na.rm = TRUE))
  build <- suppressWarnings(system2("make", c("-C", shQuote(file.path(root, "src")), "-f",
                                              "Makefile.standalone", jobs, "all"),
                                    stdout = TRUE, stderr = TRUE, env = "MAKEFLAGS="))
  if (!is.null(attr(build, "status"))) {
    return(list(build_failed = paste(tail(build, 40), collapse = "\n")))
  }
  out <- suppressWarnings(system2("sh", c(shQuote(file.path(root, "tests", "c", "run.sh")),
                                          shQuote(file.path(root, "build"))),
                                  stdout = TRUE, stderr = TRUE))
  list(tests = c_tests_parse(out), summary = grep("^C tests:", out, value = TRUE),
       sources = sub("\\.c$", "", list.files(file.path(root, "tests", "c"), "^test_.*\\.c$")))
}

skip_on_cran()
c_run <- c_tests_run()

if (!is.null(c_run$skip)) {
  test_that("the C tests run (tests/c/run.sh)", {
    if (c_tests_required()) {
      fail(paste("CONVLSTM_C_TESTS=require, but:", c_run$skip))
    } else {
      skip(c_run$skip)
    }
  })
} else if (!is.null(c_run$build_failed)) {
  test_that("the C tests build (make -f src/Makefile.standalone)", {
    fail(paste0("the build failed:\n", c_run$build_failed))
  })
} else {
  test_that("every tests/c/test_*.c was built and run, and run.sh summed them up", {
    expect_setequal(vapply(c_run$tests, function(t) t$name, ""), c_run$sources)
    expect_length(c_run$summary, 1)
  })
  for (t in c_run$tests) {
    local({
      t <- t
      test_that(paste("C test", t$name), {
        last <- tail(c("", t$output), 1)
        why <- paste(t$name, "skipped itself:", last)
        if (t$status == "skip" && c_tests_required() && !c_tests_no_gpu(last)) {
          fail(paste("CONVLSTM_C_TESTS=require, but", why))
        } else if (t$status == "skip") {
          skip(why)
        } else if (t$status == "FAIL") {
          fail(paste0(t$name, " (", t$detail, "):\n", paste(tail(t$output, 60), collapse = "\n")))
        } else {
          succeed(paste(t$name, t$detail))
        }
      })
      # parts a program skipped while the rest of it ran, e.g. "skip cuda: ..."
      # (a program skipped whole is one skip above, not a part again)
      parts <- grep("^skip [A-Za-z0-9_]+: ", t$output, value = TRUE)
      if (t$status == "skip") parts <- character()
      for (part in parts) {
        test_that(paste("C test", t$name, "part", sub("^skip ([A-Za-z0-9_]+):.*", "\\1", part)), {
          skip(sub("^skip ", "", part))
        })
      }
    })
  }
}
