# demo/tutorial.R -- the R torch ConvLSTM tutorial's training, with convlstm:
# a two-layer ConvLSTM (hidden c(64, 1), 3x3 kernels) learns to predict the
# next frame of the "moving beams" movies, with Adam on the MSE of the last
# layer's last hidden state. It runs on the CPU for a few epochs, prints the
# losses and what the model holds in memory. `make demo` runs it; so does
# demo("tutorial", package = "convlstm"). It is a demonstration, not a test.

library(convlstm)

set.seed(777)
epochs <- as.integer(Sys.getenv("CONVLSTM_DEMO_EPOCHS", "6"))

# 100 movies of 6 frames, as in the tutorial: x = the first 5 frames, y = the 6th.
beams <- convlstm_moving_beams(n = 100, n_frames = 6, size = 24, seed = 1)
valid <- convlstm_moving_beams(n = 20, n_frames = 6, size = 24, seed = 2)
cat(sprintf("data: x [%s], y [%s]\n",
            paste(dim(beams$x), collapse = ", "), paste(dim(beams$y), collapse = ", ")))

# The tutorial: convlstm(input_dim = 1, hidden_dims = c(64, 1), kernel_sizes = c(3, 3), n_layers = 2)
model <- convlstm(input_dim = 1, hidden_dims = c(64, 1), kernel_sizes = c(3, 3),
                  n_layers = 2, device = "cpu")
print(model)

# The tutorial's Adam, with lr 0.005 instead of 0.001 and batches of 10 so
# that a few epochs, not a hundred, show the beams being learnt (at 0.01
# this model often collapses to predicting zeros).
opt <- convlstm_optimizer_adam(lr = 0.005)
history <- convlstm_fit(model, beams$x, beams$y, opt, epochs = epochs, batch_size = 10,
                        target = "last_state", validation_data = list(valid$x, valid$y))

first <- history$loss[[1]]
last <- history$loss[[length(history$loss)]]
zero <- mean(beams$y^2)
cat(sprintf("\ntraining loss: %.5f after epoch 1, %.5f after epoch %d (%.1fx lower);\n",
            first, last, epochs, first / last))
cat(sprintf("an all-zero forecast would score %.5f (%.1fx the final loss)\n", zero, zero / last))

cat("\nmemory held by the model (bytes, by category):\n")
print(convlstm_memory_stats(model))

# The tutorial's inspection: the target frame next to the prediction.
pred <- predict(model, valid$x[1:1, , , , , drop = FALSE], what = "last_state")
cat("\ntarget, rows 6-15, columns 10-19 of the first validation movie:\n")
print(round(valid$y[1, 1, 6:15, 10:19], 1))
cat("prediction:\n")
print(round(array(pred, dim = dim(valid$y[1:1, , , , drop = FALSE]))[1, 1, 6:15, 10:19], 1))

convlstm_release(model)
