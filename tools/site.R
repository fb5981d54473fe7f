# tools/site.R -- build the pkgdown site into build/site without the network
# (`make site`; CI runs it after `make test`). The package must be installed
# (the Makefile's `install` does it): examples and articles run against it.
#
# pkgdown 2.0.7 looks two things up on the internet unless told not to: a
# CRAN/Bioconductor link for the home page's sidebar (cran_link(), behind
# option pkgdown.internet) and release dates for the news page (behind
# `news: cran_dates` in _pkgdown.yml, false there). downlit, which links
# function names in code, fetches another package's pkgdown.yml only for
# packages whose DESCRIPTION has a URL field; this package refers only to
# base R's and its own, so it fetches nothing today; should a page come to
# name such a package, the proxy below (a closed local port, inherited by
# the processes that render the articles) makes the fetch fail at once,
# without leaving the machine, and downlit then links to rdrr.io. The pages
# link Bootstrap's own files locally; pkgdown's head.html would take font
# awesome, headroom, clipboard.js, bootstrap-toc (the "On this page" list),
# the search scripts and MathJax from a CDN, so this package overrides it
# (pkgdown/templates/head.html): Font Awesome is copied below from Debian's
# fonts-font-awesome, and pkgdown/assets/site.js does for a reader what
# pkgdown.js did with the others (none of which Debian packages). The
# browser check below fails should a page ask the network for anything.
# Traced with strace -f -e connect: the build itself opens no internet
# socket.
options(pkgdown.internet = FALSE)
no_net <- "http://127.0.0.1:9"
Sys.setenv(http_proxy = no_net, https_proxy = no_net, HTTP_PROXY = no_net,
           HTTPS_PROXY = no_net, ALL_PROXY = no_net, no_proxy = "", NO_PROXY = "")
dest <- Sys.getenv("CONVLSTM_SITE_DIR", "build/site")
t0 <- proc.time()[["elapsed"]]

# The last section of the reference and of the articles catches what the
# others do not list (functions and vignettes other branches add); pkgdown
# would show it as an empty heading when there is nothing to catch, so it
# is left out then.
pkg <- pkgdown::as_pkgdown(".", override = list(destination = dest))
drop_empty_last <- function(sections, select) {
  last <- sections[[length(sections)]]
  if (length(select(unlist(last$contents))) == 0) sections[-length(sections)] else sections
}
pkg$meta$reference <- drop_empty_last(
  pkg$meta$reference, function(x) pkgdown:::select_topics(x, pkg$topics))
pkg$meta$articles <- drop_empty_last(
  pkg$meta$articles, function(x) pkgdown:::select_vignettes(x, pkg$vignettes))
pkgdown::build_site(pkg, install = FALSE, new_process = FALSE, preview = FALSE)

# The README (the home page) links to the notes in doc/ and to READMEs in
# subfolders (bench/, src/core/, tools/device/), and those link on; pkgdown
# renders only the top folder's README, so every markdown file reachable from
# it through relative links is rendered here as a page of the site, where
# pkgdown's .md -> .html rewriting of the links points.
md_links <- function(md) {
  text <- readLines(md, warn = FALSE)
  to <- unlist(regmatches(text, gregexpr("\\]\\([^)#:]+\\.md\\)", text)))
  to <- sub("^\\]\\((.*)\\)$", "\\1", to)
  if (length(to) == 0) return(character())
  # repository-relative, with "dir/../" collapsed
  to <- file.path(dirname(md), to)
  to <- sub("^\\./", "", to)
  while (any(grepl("[^/.][^/]*/\\.\\./", to))) to <- sub("[^/.][^/]*/\\.\\./", "", to)
  unique(to)
}
linked <- character()
queue <- md_links("README.md")
while (length(queue) > 0) {
  md <- queue[[1]]
  queue <- queue[-1]
  if (md %in% linked || !file.exists(md)) next
  linked <- c(linked, md)
  queue <- c(queue, md_links(md))
}
for (md in linked) {
  body <- pkgdown:::markdown_body(normalizePath(md), strip_header = TRUE)
  title <- if (is.null(attr(body, "title"))) md else attr(body, "title")
  dir.create(file.path(dest, dirname(md)), recursive = TRUE, showWarnings = FALSE)
  pkgdown::render_page(pkg, "title-body", path = sub("\\.md$", ".html", md),
                       data = list(pagetitle = title, body = body))
}

# The README links the articles by their sources (vignettes/<name>.Rmd), which
# is where a reader on GitHub finds them; on the site they are
# articles/<name>.html.
for (page in list.files(dest, pattern = "\\.html$", recursive = TRUE, full.names = TRUE)) {
  html <- readLines(page, warn = FALSE, encoding = "UTF-8")
  vig <- 'href="((\\.\\./)*)vignettes/([A-Za-z0-9._-]+)\\.Rmd"'
  if (any(grepl(vig, html))) {
    writeLines(gsub(vig, 'href="\\1articles/\\3.html"', html), page, useBytes = TRUE)
  }
}

# pkgdown 2.0.7 writes an empty logo (<img src="" class="logo">) into the
# header of every page but the home page when the package has no logo (its
# templates test a list that holds a NULL): the browser fetches the page
# itself as an image and fails to decode it. Taken out here.
for (page in list.files(dest, pattern = "\\.html$", recursive = TRUE, full.names = TRUE)) {
  html <- readLines(page, warn = FALSE, encoding = "UTF-8")
  empty_logo <- '<img src="" class="logo" alt="" ?>'
  if (any(grepl(empty_logo, html))) writeLines(sub(empty_logo, "", html), page, useBytes = TRUE)
}

# Font Awesome 4.7 (the copy buttons' icon; CSS under MIT, font under the
# SIL OFL) from the Debian package, copied at build time, never committed.
fa <- "/usr/share/fonts-font-awesome"
if (dir.exists(fa)) {
  to <- file.path(dest, "vendor", "font-awesome")
  unlink(to, recursive = TRUE)
  dir.create(file.path(to, "css"), recursive = TRUE)
  dir.create(file.path(to, "fonts"))
  stopifnot(file.copy(file.path(fa, "css", "font-awesome.min.css"), file.path(to, "css")),
            file.copy(list.files(file.path(fa, "fonts"), pattern = "^fontawesome-webfont",
                                 full.names = TRUE), file.path(to, "fonts")))
} else {
  cat("site: no", fa, "(Debian's fonts-font-awesome, `make deps`): pages lack icons\n")
}

# Every page's local links and images must resolve to a file of the site,
# and every image must be a non-empty file: a broken one fails the build.
broken <- character()
pages <- list.files(dest, pattern = "\\.html$", recursive = TRUE, full.names = TRUE)
for (page in pages) {
  html <- xml2::read_html(page)
  refs <- c(xml2::xml_attr(xml2::xml_find_all(html, "//a[@href]"), "href"),
            xml2::xml_attr(xml2::xml_find_all(html, "//img[@src]"), "src"),
            xml2::xml_attr(xml2::xml_find_all(html, "//link[@href]"), "href"),
            xml2::xml_attr(xml2::xml_find_all(html, "//script[@src]"), "src"))
  refs <- sub("[#?].*$", "", refs)
  refs <- refs[nzchar(refs) & !grepl("^[a-z]+:", refs)]
  for (ref in unique(refs)) {
    target <- file.path(dirname(page), ref)
    if (dir.exists(target)) target <- file.path(target, "index.html")
    if (!file.exists(target) || file.size(target) == 0) {
      broken <- c(broken, sprintf("%s -> %s", sub(paste0("^", dest, "/"), "", page), ref))
    }
  }
}
if (length(broken) > 0) {
  stop(sprintf("site: %d broken local links or images:\n%s", length(broken),
               paste(broken, collapse = "\n")), call. = FALSE)
}
n_img <- sum(vapply(pages, function(p) {
  length(xml2::xml_find_all(xml2::read_html(p), "//img[@src]"))
}, integer(1)))
cat(sprintf("site: %d pages, %d images, every local link and image resolves\n",
            length(pages), n_img))

# A headless Chromium opens the home page, a reference page and the memory
# article: tools/site-browser.py fails unless the browser decoded every image
# on them, every internal link (and #fragment) resolves, nothing was asked of
# the network and no script threw; it saves screenshots for a person to look
# at. Mandatory (CI runs it); SITE_BROWSER=0 skips it where no Chromium is.
checked <- c("index.html", "reference/convlstm_memory_estimate.html",
             "articles/gpu-memory-answered.html")
if (identical(Sys.getenv("SITE_BROWSER"), "0")) {
  cat("site: SITE_BROWSER=0: browser check skipped\n")
} else {
  browser <- Sys.which(c("chromium-headless-shell", "chromium"))
  browser <- browser[nzchar(browser)]
  python <- Sys.which("python3")
  if (length(browser) == 0 || !nzchar(python)) {
    stop("site: the browser check needs Debian's chromium-headless-shell (or chromium) ",
         "and python3 (`make deps` installs them); `make site SITE_BROWSER=0` skips it",
         call. = FALSE)
  }
  # First the check on a small site with one fault at a time: it must fail
  # on each (tools/test-site-browser.py), then on the real pages.
  if (system2(python, c("tools/test-site-browser.py", browser[[1]]), timeout = 300) != 0) {
    stop("site: the browser check does not catch what it should (above)", call. = FALSE)
  }
  shots <- file.path(dirname(dest), "site-shots")
  status <- system2(python, c("tools/site-browser.py", browser[[1]], dest, shots, checked),
                    timeout = 300)
  if (status != 0) stop("site: the browser check failed (above)", call. = FALSE)
}
cat(sprintf("site: built %s in %.0f s\n", dest, proc.time()[["elapsed"]] - t0))
