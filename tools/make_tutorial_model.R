# tools/make_tutorial_model.R -- writes inst/extdata/tutorial.safetensors, the
# trained tutorial model that ships with the package (documented in
# ?tutorial_model): the "Getting started" vignette's model and training loop
# (the R torch ConvLSTM tutorial's moving beams, hidden c(8, 1), Adam with
# lr 1e-2, batches of 20), run for 100 epochs instead of the vignette's few.
#
#   Rscript tools/make_tutorial_model.R [OUT]     (from the repository root,
#                                                  with convlstm installed)
#
# Seeded and single-threaded, so a rerun on the same build writes the same
# file byte for byte; another BLAS may change the last bits of the weights.
# The file holds the weights, Adam's state (so training can continue
# exactly) and, in its metadata, how it was made and the loss of every
# epoch. It is not part of the package: R CMD build leaves tools/ out.

library(convlstm)

out <- commandArgs(trailingOnly = TRUE)[1]
if (is.na(out)) out <- file.path("inst", "extdata", "tutorial.safetensors")

epochs <- 100
batch_size <- 20
seed <- 1
data_call <- "convlstm_moving_beams(n = 100, n_frames = 6, size = 24, seed = 1)"
beams <- eval(parse(text = data_call)[[1]])
n <- dim(beams$x)[1]

set.seed(seed)
model <- convlstm(input_dim = 1, hidden_dims = c(8, 1), kernel_sizes = c(3, 3),
                  device = "cpu", threads = 1)
optimizer <- convlstm_optimizer_adam(lr = 1e-2)

losses <- numeric(epochs)
elapsed <- system.time({
  for (epoch in seq_len(epochs)) {
    batches <- split(sample(n), ceiling(seq_len(n) / batch_size))
    batch_losses <- vapply(batches, function(b) {
      convlstm_train_step(model, beams$x[b, , , , , drop = FALSE], beams$y[b, , , , drop = FALSE],
                 optimizer, target = "last_state")
    }, numeric(1))
    losses[epoch] <- mean(batch_losses)
    if (epoch %% 10 == 0) cat(sprintf("epoch %3d  training loss %.6g\n", epoch, losses[epoch]))
  }
})[["elapsed"]]

fresh <- convlstm_moving_beams(n = 100, n_frames = 6, size = 24, seed = 2)
fresh_loss <- mean((predict(model, fresh$x, what = "last_state") - fresh$y)^2)

dir.create(dirname(out), showWarnings = FALSE, recursive = TRUE)
convlstm_save(model, out, optimizer = optimizer, metadata = c(
  description = paste("The R torch ConvLSTM tutorial's moving-beams model as in the",
                      "'Getting started' vignette: hidden c(8, 1), kernels 3, Adam (lr 1e-2),",
                      "MSE of the last layer's last h against the next frame"),
  made_by = "tools/make_tutorial_model.R",
  data = data_call,
  seed = as.character(seed),
  epochs = as.character(epochs),
  batch_size = as.character(batch_size),
  threads = "1",
  loss_history = paste(sprintf("%.9g", losses), collapse = ","),
  fresh_data = "convlstm_moving_beams(n = 100, n_frames = 6, size = 24, seed = 2)",
  fresh_loss = sprintf("%.9g", fresh_loss),
  package_version = as.character(utils::packageVersion("convlstm"))
))
convlstm_release(model)

cat(sprintf("%s: %d bytes; %d epochs in %.1f s; training loss %.6g, on fresh data %.6g\n",
            out, file.size(out), epochs, elapsed, losses[epochs], fresh_loss))
