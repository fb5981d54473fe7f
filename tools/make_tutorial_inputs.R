# tools/make_tutorial_inputs.R -- what PyTorch needs to recompute the shipped
# tutorial model's losses (inst/extdata/tutorial.safetensors, made by
# tools/make_tutorial_model.R), in make_fixtures.py's fixture format, into
# tests/testthat/fixtures/tutorial/inputs/ (or OUT):
#
#   Rscript tools/make_tutorial_inputs.R [OUT]   (from the repository root,
#                                                 with convlstm installed)
#
# Only inputs, no result of this package: the pixels set to 1 in the
# moving beams of the recorded training data (seed 1) and of the fresh data
# (seed 2), as 1-based indices [n, t, c, h, w] of x and [n, c, h, w] of y;
# the model's initial weights (set.seed(seed), then convlstm(), as
# make_tutorial_model.R starts); and the order sample() gives the sequences
# in the first two epochs. tools/make_tutorial_fixtures.py reads them and
# writes PyTorch's losses beside them (tutorial/torch/);
# tests/testthat/test-tutorial_model.R checks that these are still the
# package's data, weights and order, then compares the shipped file's
# losses with PyTorch's. Seeded: a rerun writes the same bytes.

library(convlstm)

out <- commandArgs(trailingOnly = TRUE)[1]
if (is.na(out)) out <- file.path("tests", "testthat", "fixtures", "tutorial", "inputs")

shipped <- file.path("inst", "extdata", "tutorial.safetensors")
meta <- convlstm_file_info(shipped)$metadata
trained <- convlstm_load(shipped, device = "cpu")
lr <- attr(trained, "optimizer")$lr
convlstm_release(trained)
epochs_rerun <- 2L

# row-major float32, little-endian: the fixture's tensor format
lines <- "convlstm-fixture 1"
dir.create(out, showWarnings = FALSE, recursive = TRUE)
unlink(list.files(out, full.names = TRUE))
tensor <- function(name, x) {
  d <- if (is.null(dim(x))) length(x) else dim(x)
  file <- paste0(gsub("/", "__", name, fixed = TRUE), ".bin")
  v <- if (length(d) > 1) aperm(x, rev(seq_along(d))) else x
  writeBin(as.numeric(v), file.path(out, file), size = 4, endian = "little")
  lines <<- c(lines, paste("tensor", name, file, length(d), paste(d, collapse = " ")))
}
ones <- function(a) {
  i <- which(a == 1, arr.ind = TRUE)
  i[do.call(order, as.data.frame(i)), , drop = FALSE]
}

for (key in c("data", "fresh_data")) {
  beams <- eval(parse(text = convlstm:::tutorial_data_call(meta[[key]]))[[1]])
  if (key == "data") n <- dim(beams$x)[1]
  stopifnot(all(beams$x %in% c(0, 1)), all(beams$y %in% c(0, 1)))
  lines <- c(lines, paste("config", paste0(key, "_dims"), paste(dim(beams$x), collapse = " ")))
  tensor(paste0(key, "/x_ones"), ones(beams$x))
  tensor(paste0(key, "/y_ones"), ones(beams$y))
}

set.seed(as.integer(meta[["seed"]]))
model <- convlstm(1, c(8, 1), c(3, 3), device = "cpu", threads = 1)
for (name in names(convlstm_state_dict(model))) tensor(paste0("weights/", name), convlstm_state_dict(model)[[name]])
convlstm_release(model)
order <- t(vapply(seq_len(epochs_rerun), function(e) sample(n), integer(n)))
tensor("order", order)

lines <- c(lines,
           paste("config batch_size", meta[["batch_size"]]),
           paste("config adam_lr", format(lr, digits = 17)),
           paste("info made_by tools/make_tutorial_inputs.R from", meta[["made_by"]], "metadata"),
           paste("info data", gsub(" ", "", meta[["data"]])),
           paste("info fresh_data", gsub(" ", "", meta[["fresh_data"]])))
writeLines(lines, file.path(out, "manifest.txt"))
cat(sprintf("%s: %d records\n", out, length(lines) - 1))
