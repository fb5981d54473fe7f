# test-forecaster-file.R -- an encoder-forecaster's model file says the
# model's per-layer lists as convlstm_forecaster() was given them (format
# version 2: one stack's layers), and files written before (version 1: both
# stacks' layers listed) still load to the same model.

# A safetensors file's JSON header rewritten by f (8 bytes of length, the
# header, the tensors' bytes after it, whose offsets count from the header's
# end and so stay right).
rewrite_header <- function(path, f) {
  bytes <- readBin(path, "raw", file.size(path))
  len <- readBin(bytes[1:4], "integer", size = 4, endian = "little")
  header <- f(rawToChar(bytes[8 + seq_len(len)]))
  header <- paste0(header, strrep(" ", (8 - nchar(header) %% 8) %% 8)) # padded, as writers do
  con <- file(path, "wb")
  on.exit(close(con))
  writeBin(c(nchar(header), 0L), con, size = 4, endian = "little")
  writeBin(charToRaw(header), con)
  writeBin(bytes[-seq_len(8 + len)], con)
}

test_that("a forecaster's file lists hidden_dims and kernels as given, and a version 1 file loads the same", {
  set.seed(3)
  fc <- convlstm_forecaster(1, c(6, 5), c(3, 5), patch = 2, device = "cpu", threads = 1)
  on.exit(convlstm_release(fc))
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(fc, path)
  meta <- convlstm_file_info(path)$all_metadata
  expect_identical(meta[["convlstm.hidden_dims"]], "[6, 5]")
  expect_identical(meta[["convlstm.kernel_sizes"]], "[3, 5]")
  expect_identical(meta[["convlstm.model"]], "encoder_forecaster")
  expect_identical(meta[["convlstm.format_version"]], "2")
  x <- array(runif(2 * 3 * 8 * 8), c(2, 3, 1, 8, 8))
  want <- predict(fc, x, horizon = 2)
  back <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(back), add = TRUE)
  expect_identical(back$hidden_dims, c(6L, 5L))
  expect_identical(predict(back, x, horizon = 2), want)
  # the same model as files of before wrote it: every layer of both stacks listed
  rewrite_header(path, function(h) {
    h <- sub("\"convlstm.format_version\":\"2\"", "\"convlstm.format_version\":\"1\"", h, fixed = TRUE)
    h <- sub("\"convlstm.hidden_dims\":\"[6, 5]\"", "\"convlstm.hidden_dims\":\"[6, 5, 6, 5]\"", h,
             fixed = TRUE)
    sub("\"convlstm.kernel_sizes\":\"[3, 5]\"", "\"convlstm.kernel_sizes\":\"[3, 5, 3, 5]\"", h,
        fixed = TRUE)
  })
  expect_identical(convlstm_file_info(path)$all_metadata[["convlstm.hidden_dims"]], "[6, 5, 6, 5]")
  old <- convlstm_load(path, device = "cpu")
  on.exit(convlstm_release(old), add = TRUE)
  expect_identical(old$hidden_dims, c(6L, 5L))
  expect_identical(predict(old, x, horizon = 2), want)
  # version 2 without an encoder-forecaster is refused, naming the version
  rewrite_header(path, function(h) {
    h <- sub("\"convlstm.format_version\":\"1\"", "\"convlstm.format_version\":\"2\"", h, fixed = TRUE)
    h <- sub("\"convlstm.patch\":\"2\",", "", h, fixed = TRUE)
    sub("\"convlstm.model\":\"encoder_forecaster\",", "", h, fixed = TRUE)
  })
  expect_convlstm_error(convlstm_load(path, device = "cpu"), status = "invalid",
                        regexp = "format version 2 is an encoder-forecaster's")
})

test_that("a plain stack's file stays format version 1 with every layer listed", {
  m <- convlstm(1, c(4, 4), 3, device = "cpu", threads = 1)
  on.exit(convlstm_release(m))
  path <- tempfile(fileext = ".safetensors")
  on.exit(unlink(path), add = TRUE)
  convlstm_save(m, path)
  meta <- convlstm_file_info(path)$all_metadata
  expect_identical(meta[["convlstm.hidden_dims"]], "[4, 4]")
  expect_identical(meta[["convlstm.format_version"]], "1")
})
