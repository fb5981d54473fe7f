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
# link Bootstrap's own files locally, and font awesome, headroom,
# clipboard.js, bootstrap-toc (the "On this page" list) and the search
# scripts from a CDN when a browser opens them; the headless browser of the
# screenshots below goes through the same closed proxy, so offline pages
# lack those. Traced with strace -f -e connect: the build itself opens no
# internet socket; the browser's CDN requests all end at 127.0.0.1:9.
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

# The README (the home page) links to READMEs in subfolders (bench/, src/core/,
# tools/device/); pkgdown renders only the top folder's, so these are
# rendered here as pages of the site, where the home page's links point.
readme <- readLines("README.md", warn = FALSE)
linked <- unlist(regmatches(readme, gregexpr("\\]\\([^)#:]+\\.md\\)", readme)))
linked <- unique(sub("^\\]\\((.*)\\)$", "\\1", linked))
for (md in linked[file.exists(linked)]) {
  body <- pkgdown:::markdown_body(normalizePath(md), strip_header = TRUE)
  title <- if (is.null(attr(body, "title"))) md else attr(body, "title")
  dir.create(file.path(dest, dirname(md)), recursive = TRUE, showWarnings = FALSE)
  pkgdown::render_page(pkg, "title-body", path = sub("\\.md$", ".html", md),
                       data = list(pagetitle = title, body = body))
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

# Screenshots of the home page, a reference page and the memory article, for
# a person to look at, where a headless Chromium is installed (Debian's
# chromium-headless-shell or chromium; not a dependency of `make site`).
browser <- Sys.which(c("chromium-headless-shell", "chromium"))
browser <- browser[nzchar(browser)]
if (length(browser) == 0) {
  cat("site: no headless Chromium here; screenshots skipped\n")
} else {
  shots <- file.path(dirname(dest), "site-shots")
  dir.create(shots, showWarnings = FALSE)
  for (page in c("index.html", "reference/memory_estimate.html",
                 "articles/gpu-memory-answered.html")) {
    png <- file.path(shots, paste0(gsub("[/.]", "_", sub("\\.html$", "", page)), ".png"))
    status <- system2(browser[[1]], c(
      "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
      "--window-size=1280,1600", "--virtual-time-budget=5000",
      paste0("--screenshot=", normalizePath(png, mustWork = FALSE)),
      paste0("file://", normalizePath(file.path(dest, page)))
    ), stdout = FALSE, stderr = FALSE, timeout = 120)
    if (status != 0 || !file.exists(png) || file.size(png) == 0) {
      stop(sprintf("site: the browser could not open %s (status %d)", page, status),
           call. = FALSE)
    }
  }
  cat(sprintf("site: screenshots of 3 pages in %s (%s)\n", shots, basename(browser[[1]])))
}
cat(sprintf("site: built %s in %.0f s\n", dest, proc.time()[["elapsed"]] - t0))
