# tutorial_model.R -- documents the trained model that ships in
# inst/extdata/ (made by tools/make_tutorial_model.R), and reads the data
# call its metadata records.

#' The trained tutorial model shipped with the package
#'
#' `system.file("extdata", "tutorial.safetensors", package = "convlstm")` is
#' a ConvLSTM trained on the R torch tutorial's "moving beams" data, for
#' examples and the "Getting started" vignette to load instead of training
#' first. It is the vignette's model and training loop run for 100 epochs:
#'
#' * data: `convlstm_moving_beams(n = 100, n_frames = 6, size = 24, seed = 1)`, five
#'   input frames and the sixth as target;
#' * model: `convlstm(input_dim = 1, hidden_dims = c(8, 1), kernel_sizes =
#'   c(3, 3))`, float32, 2,952 parameters;
#' * training: `set.seed(1)`, 100 epochs of five shuffled batches of 20,
#'   [convlstm_train_step()] with `convlstm_optimizer_adam(lr = 1e-2)` on the mean squared
#'   error of the last layer's last hidden state (`target = "last_state"`),
#'   one CPU thread.
#'
#' The file (38 KiB) holds the weights, Adam's state and step count (so
#' [convlstm_load()] gives a model whose training continues exactly, with
#' `attr(model, "optimizer")`), and in its metadata how it was made, the
#' training loss of every epoch (`loss_history`, comma-separated) and the
#' loss on 100 sequences it never saw (`fresh_loss`, on `convlstm_moving_beams(n =
#' 100, seq_len = 6, size = 24, seed = 2)`). The last epoch's training loss
#' is about 3.8e-5 and the fresh loss about 8e-5, against about 8.4e-3 for
#' an all-zero forecast. `tools/make_tutorial_model.R` in the package's
#' sources writes it again; seeded and single-threaded, a rerun on the same
#' build gives the same bytes.
#'
#' @name tutorial_model
#' @keywords datasets
#' @seealso [convlstm_load()], [convlstm_file_info()], [convlstm_moving_beams()].
#' @examples
#' path <- system.file("extdata", "tutorial.safetensors", package = "convlstm")
#' model <- convlstm_load(path, device = "cpu")
#' model
#' info <- convlstm_file_info(path)
#' info$metadata[c("data", "epochs", "fresh_loss")]
#' # it forecasts the next frame of sequences it has not seen
#' beams <- convlstm_moving_beams(n = 10, n_frames = 6, size = 24, seed = 3)
#' forecast <- predict(model, beams$x, what = "last_state")
#' c(mse = mean((forecast - beams$y)^2), all_zero = mean(beams$y^2))
#' convlstm_release(model)
NULL

# The shipped model was made before the exports were renamed (issue 35): its
# metadata records the data's call with the names of then (the generator
# without its prefix, seq_len); a model remade by
# tools/make_tutorial_model.R records today's. Both are returned as today's
# call, for tests/testthat/test-tutorial_model.R and
# tools/make_tutorial_inputs.R. (Spelt in pieces so that
# tools/rename_exports.R leaves them.)
tutorial_data_call <- function(text) {
  old <- paste0("moving", "_beams(")
  if (!startsWith(text, old)) return(text)
  paste0("convlstm_", sub("seq_len =", "n_frames =", text, fixed = TRUE))
}
