# Makefile -- developer entry points for the convlstm R package:
#
#   make demo     install what is missing, build + install, train the tutorial model on CPU
#   make test     install what is missing, build + install, testthat suite (the C unit
#                 tests included: tests/testthat/test-c.R builds and runs them; the
#                 PyTorch interop tests must run, not skip)
#   make deps     apt-get install what is missing (root or sudo; Debian/Ubuntu)
#   make docs     roxygen2: NAMESPACE and man/
#   make install  R CMD build (the vignettes built), then R CMD INSTALL of the tarball
#                 (configure runs: OpenMP, BLAS, CUDA/cuDNN)
#   make install-code  R CMD INSTALL of the source tree: no vignettes, one compile (make test)
#   make build    docs, then R CMD build -> convlstm_<version>.tar.gz
#   make check    build, then R CMD check --as-cran --no-manual
#   make test-guard  the testthat suite with CONVLSTM_GUARD=1 (guard bands checked after every step)
#   make site     the pkgdown site into build/site (no network), links checked
#   make ctest    C unit tests only (src/Makefile.standalone), also: asan, valgrind,
#                 bench-smoke (each C benchmark run once, small)
#   make fuzz     the model-file loader and the JSON reader under libFuzzer + ASan/UBSan, FUZZ_SECONDS (60) in all
#   make harness-check  the GPU harness without a GPU: bench_gpu.py's ctypes mirror against the
#                 C compiler (no torch), its --cpu-smoke, gpu_session.sh under DRY_RUN=1
#   make blas-check  the step's allocations and bits under the reference BLAS and OpenBLAS (threads)
#   make fixtures-check  every fixture generator rerun into a temporary folder, diffed
#                 against tests/testthat/fixtures (PyTorch; the package installed)
#   make bench    one training step here vs PyTorch on CPU (bench/)
#   make bench-peak  the convolutions' share of this CPU's FMA peak, beside PyTorch's
#   make clean
#
# It is not part of the package: R CMD build ignores it, and the package
# builds through configure and src/Makevars.in alone.

R ?= R
RSCRIPT ?= Rscript
# Debian's Python, the one python3-torch installs into (reference values,
# fixtures and the GPU harness; never a dependency of the package)
PYTHON ?= /usr/bin/python3
PKG := convlstm
VERSION := $(shell sed -n 's/^Version: *//p' DESCRIPTION)
TARBALL := $(PKG)_$(VERSION).tar.gz
NPROC := $(shell nproc 2>/dev/null || echo 1)

# Debian packages, and for each how to tell it is already there some other
# way (an R package installed from CRAN, a tool built from source).
DEB_PKGS := r-base-dev r-cran-cli r-cran-generics r-cran-ggplot2 r-cran-testthat r-cran-roxygen2 r-cran-knitr \
            r-cran-rmarkdown r-cran-pkgdown pandoc qpdf valgrind \
            chromium-headless-shell python3 python3-torch fonts-font-awesome libopenmpi-dev openmpi-bin \
            r-cran-stars r-cran-terra r-cran-ncdf4 r-cran-yaml dataset-fashion-mnist

# Where Debian's dataset-fashion-mnist puts the files test-moving_mnist.R reads.
FASHION_MNIST := /usr/share/datasets/fashion-mnist

.NOTPARALLEL:
.PHONY: all deps check-deps docs install install-code build check test test-guard ctest bench-smoke asan valgrind fuzz demo bench bench-peak site clean \
        harness-check fixtures-check blas-check

all: install

deps:
	@missing=""; \
	for p in $(DEB_PKGS); do \
	  if command -v dpkg-query >/dev/null 2>&1 && \
	     dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed'; then continue; fi; \
	  case $$p in \
	    r-base-dev) command -v R >/dev/null 2>&1 && [ -f "$$(R RHOME 2>/dev/null)/include/Rinternals.h" ] \
	                && command -v make >/dev/null 2>&1 && command -v gcc >/dev/null 2>&1 && continue ;; \
	    fonts-font-awesome) [ -f /usr/share/fonts-font-awesome/css/font-awesome.min.css ] && continue ;; \
	    python3-torch) $(PYTHON) -c 'import torch' >/dev/null 2>&1 && continue ;; \
	    dataset-fashion-mnist) [ -f $(FASHION_MNIST)/t10k-images-idx3-ubyte.gz ] && continue ;; \
	    r-cran-*) r=$$(echo $$p | sed 's/^r-cran-//'); \
	              command -v Rscript >/dev/null 2>&1 && \
	              Rscript -e "quit(status = !requireNamespace('$$r', quietly = TRUE))" >/dev/null 2>&1 && continue ;; \
	    *) command -v $$p >/dev/null 2>&1 && continue ;; \
	  esac; \
	  missing="$$missing $$p"; \
	done; \
	if [ -z "$$missing" ]; then echo "deps: all present"; exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "deps: missing:$$missing -- no apt-get here; install R >= 4.2 and these yourself"; exit 1; fi; \
	if [ "$$(id -u)" = 0 ]; then sudo=""; \
	elif command -v sudo >/dev/null 2>&1; then sudo="sudo"; \
	else echo "deps: missing:$$missing -- run as root or with sudo to install them"; exit 1; fi; \
	echo "deps: installing$$missing"; \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
	$$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing

docs:
	$(RSCRIPT) -e 'roxygen2::roxygenise()'

# --preclean runs ./cleanup before configure, so objects never outlive a
# change of flags (say CONVLSTM_NO_CUDA) or of a header. It installs into the
# first writable library, or creates R_LIBS_USER. R's own make gets -j of its
# own (here, in build and in check): it cannot share this make's jobserver,
# whose descriptors R does not pass on ("read jobs pipe: Bad file descriptor"
# when another file has taken their numbers).
#
# make install installs the vignettes built, as an install from CRAN has
# them (vignette("getting-started", package = "convlstm")): R CMD build makes
# the tarball in build/install (it installs the package in a temporary
# library to run the vignettes), then R CMD INSTALL installs the tarball.
# Without knitr, rmarkdown or pandoc (make deps installs them) it says so and
# installs from the source tree, without vignettes, as install-code does.
# install-code: one compile, no vignettes -- what make test needs (the
# vignettes run in make check and make site).
LIB_DIR = $$($(RSCRIPT) -e 'p <- .libPaths(); w <- p[file.access(p, 2) == 0]; \
	  if (length(w)) cat(w[1]) else { u <- path.expand(strsplit(Sys.getenv("R_LIBS_USER"), .Platform$$path.sep)[[1]][1]); \
	  dir.create(u, recursive = TRUE, showWarnings = FALSE); cat(u) }')
VIGNETTE_TOOLS = $(RSCRIPT) -e 'quit(status = !(requireNamespace("knitr", quietly = TRUE) && \
	  requireNamespace("rmarkdown", quietly = TRUE) && rmarkdown::pandoc_available()))' >/dev/null 2>&1
INSTALL_SOURCE = MAKEFLAGS=-j$(NPROC) $(R) CMD INSTALL --preclean --no-multiarch -l "$$lib" .
install:
	@lib=$(LIB_DIR); \
	if ! $(VIGNETTE_TOOLS); then \
	  echo "install: knitr, rmarkdown or pandoc missing (make deps installs them): no vignettes"; \
	  echo "install: into $$lib"; $(INSTALL_SOURCE); exit $$?; fi; \
	echo "install: building the vignettes, then into $$lib"; \
	rm -rf build/install && mkdir -p build/install && \
	(cd build/install && MAKEFLAGS=-j$(NPROC) $(R) CMD build --no-manual ../..) && \
	MAKEFLAGS=-j$(NPROC) $(R) CMD INSTALL --no-multiarch -l "$$lib" build/install/$(TARBALL)

install-code:
	@lib=$(LIB_DIR); echo "install-code: into $$lib"; $(INSTALL_SOURCE)

build: docs
	MAKEFLAGS=-j$(NPROC) $(R) CMD build .

# --as-cran wants checkbashisms (Debian's devscripts) for configure and
# cleanup. The remote CRAN queries and the clock check need the network, so
# they are off. The library is installed without its debugging information
# (3.2 MB with it trips the 5 MB installed-size note); --strip-debug, not R's
# default --strip-unneeded, keeps the symbol table that the compiled-code
# check reads with nm.
check: check-deps build
	@mkdir -p build/check
	cd build/check && MAKEFLAGS=-j$(NPROC) _R_CHECK_CRAN_INCOMING_REMOTE_=false _R_CHECK_SYSTEM_CLOCK_=false \
	  _R_SHLIB_STRIP_=true R_STRIP_SHARED_LIB="strip --strip-debug" \
	  $(R) CMD check --as-cran --no-manual ../../$(TARBALL)
	@if grep -q '^Status:.*\(ERROR\|WARNING\|NOTE\)' build/check/$(PKG).Rcheck/00check.log; then \
	  echo "check: R CMD check reported an ERROR, a WARNING or a NOTE (goal: none)"; exit 1; fi

check-deps: deps
	@command -v checkbashisms >/dev/null 2>&1 || $(MAKE) deps DEB_PKGS=devscripts

# The full suite (NOT_CRAN) against the installed package. test-c.R builds and
# runs the C tests in it, one test each; CONVLSTM_C_TESTS=require makes a
# reason for it to skip them (no compiler, no source tree) a failure here;
# CONVLSTM_MPI_TESTS=require likewise for test-distributed.R's mpirun jobs
# (2 and 3 processes on the CPU; Open MPI is in DEB_PKGS);
# CONVLSTM_TORCH_TESTS=require likewise for the tests that run PyTorch
# (python3-torch is in DEB_PKGS); and CONVLSTM_RASTER_TESTS=require for
# test-grid*.R's stars, terra and ncdf4 series (r-cran-stars, r-cran-terra
# and r-cran-ncdf4 are in DEB_PKGS); and CONVLSTM_DATASET_TESTS=require for
# the tests that read a Debian data set (test-moving_mnist.R's Fashion-MNIST:
# dataset-fashion-mnist is in DEB_PKGS).
# A log (not a terminal) gets the summary reporter: one line per file.
TESTTHAT = r <- as.data.frame(testthat::test_dir("tests/testthat", package = "$(PKG)", \
  load_package = "installed", stop_on_failure = TRUE, reporter = if (isatty(stdout())) "progress" else "summary")); \
  cat(sprintf("testthat: %d expectations, %d failed, %d errors, %d skipped, %d warnings, %.0fs\n", \
  sum(r$$nb), sum(r$$failed), sum(r$$error), sum(r$$skipped), sum(r$$warning), sum(r$$real)))
test: deps install-code
	NOT_CRAN=true CONVLSTM_C_TESTS=require CONVLSTM_MPI_TESTS=require CONVLSTM_TORCH_TESTS=require \
	  CONVLSTM_RASTER_TESTS=require CONVLSTM_DATASET_TESTS=require \
	  CONVLSTM_PYTHON=$(PYTHON) $(RSCRIPT) -e '$(TESTTHAT)'

# The testthat suite once more with guard bands after every step buffer
# (CONVLSTM_GUARD=1): an overrun anywhere in it fails with the buffer's name.
# It tests the package as installed (make install or make test first).
test-guard:
	CONVLSTM_GUARD=1 CONVLSTM_C_TESTS=skip NOT_CRAN=true $(RSCRIPT) -e '$(TESTTHAT)'

ctest:
	$(MAKE) -C src -f Makefile.standalone test

# Every C benchmark run once, small (the build test-c.R made is reused).
bench-smoke:
	$(MAKE) -C src -f Makefile.standalone bench-smoke

asan:
	$(MAKE) -C src -f Makefile.standalone asan

valgrind:
	$(MAKE) -C src -f Makefile.standalone valgrind

# tests/fuzz/run.sh builds the libFuzzer targets (the model-file loader and the
# JSON reader, FUZZ_SECONDS split between them) with clang and fails on any
# crash; each first replays its regressions folder. Debian ships libFuzzer's
# runtime in libclang-rt-dev, only recommended by clang, so both are named.
FUZZ_SECONDS ?= 60
fuzz:
	@$(MAKE) --no-print-directory deps DEB_PKGS="clang libclang-rt-dev"
	sh tests/fuzz/run.sh $(FUZZ_SECONDS)

# The pkgdown site (_pkgdown.yml) into build/site, from the installed
# package: tools/site.R turns off pkgdown's network look-ups, renders the
# markdown pages the home page links to (doc/, the subfolders' READMEs), and
# fails on a broken local link or image;
# then a headless Chromium (tools/site-browser.py) opens three pages, fails
# unless every image on them decodes and every internal link resolves, and
# saves screenshots into build/site-shots. SITE_BROWSER=0 skips the browser
# (for a machine without Chromium; CI never sets it). SITE_DEPS= skips the
# install when the package was just installed (CI, after `make test`).
SITE_DEPS ?= deps install
SITE_BROWSER ?= 1
site: $(SITE_DEPS)
	SITE_BROWSER=$(SITE_BROWSER) $(RSCRIPT) tools/site.R

# The GPU harness checked where there is no GPU, so that a GPU session's
# minutes never go to a harness that cannot start (issue 24): the ctypes
# mirror of inst/include/convlstm.h in bench/gpu/bench_gpu.py against the C
# compiler's sizeof/offsetof and the header's field names, run with torch
# made unimportable (--layout must not need it); profile_gpu.py imports; the
# harness's --cpu-smoke (its checks and benchmark at tiny sizes on the CPU,
# PyTorch on the CPU) against the standalone library; and
# tools/device/gpu_session.sh under DRY_RUN=1 with every stage (each known,
# each script it runs there). Outputs in build/harness.
# HARNESS_BUILD: the standalone build folder whose library the smoke loads.
HARNESS_STAGES = info build ctest checks ab profile bench rinstall rtest roverlap sanitize
HARNESS_BUILD ?= build
harness-check:
	@mkdir -p build/harness
	$(PYTHON) -c 'import runpy, sys; sys.modules["torch"] = None; \
	  sys.argv = ["bench_gpu.py", "build/harness/layout", "--layout"]; \
	  runpy.run_path("bench/gpu/bench_gpu.py", run_name="__main__")'
	$(PYTHON) bench/gpu/profile_gpu.py --help > /dev/null
	$(MAKE) -C src -f Makefile.standalone BUILD=../$(HARNESS_BUILD) ../$(HARNESS_BUILD)/libconvlstm.so
	$(PYTHON) bench/gpu/bench_gpu.py build/harness/smoke --cpu-smoke --lib $(HARNESS_BUILD)/libconvlstm.so
	DRY_RUN=1 OUT=build/harness/gpu-session PYTHON=$(PYTHON) LOGDIR=build/harness/gpu-logs \
	  bash tools/device/gpu_session.sh $(HARNESS_STAGES) > build/harness/gpu-session.log 2>&1 || \
	  { cat build/harness/gpu-session.log; exit 1; }
	@cat build/harness/gpu-session/summary.txt

# tests/c/run_openblas.sh under the reference BLAS and under Debian's
# OpenBLAS with threads, unpacked into a temporary folder (apt-get download +
# dpkg -x: installing it would switch libblas.so.3 for every other job) and
# selected per process through the library path. The C tests must be built
# in build/ (make ctest, or test-c.R in make test); a missing BLAS fails here.
blas-check:
	@dir=$$(mktemp -d) && (cd "$$dir" && apt-get download libopenblas0-pthread >/dev/null && \
	  dpkg -x libopenblas0-pthread_*.deb root) && \
	  OPENBLAS_PTHREAD_DIR=$$(ls -d "$$dir"/root/usr/lib/*/openblas-pthread) \
	  CONVLSTM_BLAS_R_TESTS=1 sh tests/c/run_openblas.sh build; rc=$$?; rm -rf "$$dir"; \
	  [ $$rc -eq 0 ] || { echo "blas-check: failed or skipped (exit $$rc)"; exit 1; }

# tools/fixtures_check.sh: each generator (tools/make_fixtures*.py,
# make_training_fixtures.py, make_lr_fixtures.py, the tutorial's inputs and
# PyTorch losses) into a temporary folder, then tools/fixtures_diff.py
# against tests/testthat/fixtures: equal bit for bit, or within float32 noise
# where another CPU's PyTorch rounds otherwise (said so). Needs the package
# installed (the tutorial's inputs come from R).
fixtures-check:
	PYTHON=$(PYTHON) RSCRIPT=$(RSCRIPT) sh tools/fixtures_check.sh

demo: deps install
	$(RSCRIPT) demo/tutorial.R

bench: install
	bash bench/bench_cpu.sh

bench-peak:
	PYTHON=$(PYTHON) bash bench/cpu_peak.sh

clean:
	./cleanup
	rm -rf build $(PKG).Rcheck $(PKG)_*.tar.gz
