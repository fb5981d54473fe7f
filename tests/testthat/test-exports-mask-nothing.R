# test-exports-mask-nothing.R -- issue 35, item 1: R users attach convlstm
# beside keras, keras3, torch and luz; an export with a name one of them
# exports masks the other (whichever is attached last wins, with another
# signature). Our exports, read from the installed package, are compared
# with those packages' export lists, committed under fixtures/namespaces/
# (the README there names the repository and commit of each). The scheme:
# every export is convlstm or convlstm_*; S3 methods are registered, not
# exported, so they mask nothing.

namespace_fixture <- function(pkg) {
  path <- test_path("fixtures", "namespaces", paste0(pkg, ".txt"))
  names <- readLines(path, warn = FALSE)
  names[nzchar(names)]
}

test_that("the export lists of keras, keras3, torch and luz are there and read whole", {
  lists <- lapply(c(keras = "keras", keras3 = "keras3", torch = "torch", luz = "luz"),
                  namespace_fixture)
  # sizes of the committed lists, counted when they were taken (README)
  expect_equal(lengths(lists), c(keras = 670, keras3 = 792, torch = 758, luz = 44))
  # a few names each exports, so a truncated or mangled list fails here
  expect_true(all(c("optimizer_adam", "callback_early_stopping", "fit") %in% lists$keras3))
  expect_true(all(c("lr_step", "load_state_dict", "torch_tensor") %in% lists$torch))
  expect_true(all(c("luz_callback", "fit", "evaluate") %in% lists$luz))
  expect_true("%>%" %in% lists$keras)
})

test_that("no export of convlstm is also an export of keras, keras3, torch or luz", {
  ours <- getNamespaceExports("convlstm")
  expect_gt(length(ours), 20)
  overlaps <- lapply(c("keras", "keras3", "torch", "luz"), function(pkg) {
    both <- sort(intersect(ours, namespace_fixture(pkg)))
    if (length(both) > 0) sprintf("%s: %s", pkg, paste(both, collapse = ", "))
  })
  overlaps <- unlist(overlaps)
  expect(length(overlaps) == 0, paste0(
    "convlstm exports names that mask other packages' exports:\n",
    paste(overlaps, collapse = "\n")))
})

test_that("every export is convlstm or starts with convlstm_ (the package's own prefix)", {
  ours <- getNamespaceExports("convlstm")
  stray <- sort(ours[ours != "convlstm" & !startsWith(ours, "convlstm_")])
  expect(length(stray) == 0,
         paste0("exports without the convlstm_ prefix: ", paste(stray, collapse = ", ")))
})
