# client.R -- thin R wrappers of src/client.c, the test client of convlstm's
# C interface. Each returns what the C interface answered; a failure of the
# core comes back as an R error with its message.

client_api_check <- function() .Call(c_api_check)

# A model made in C from a configuration, its weights drawn by the core's
# torch-style initialiser from a seeded generator of this package.
client_model <- function(input_dim, hidden_dims, kernel_sizes, bias = TRUE, threads = 1L,
                         seed = 1) {
  .Call(c_model, as.integer(input_dim), as.integer(hidden_dims), as.integer(kernel_sizes),
        as.logical(bias), as.integer(threads), as.double(seed))
}
client_load <- function(path, threads = 1L) {
  .Call(c_load, normalizePath(path, mustWork = TRUE), as.integer(threads))
}
client_free <- function(model) invisible(.Call(c_free, model))
client_alive <- function() .Call(c_alive)
client_plan <- function(model, batch_size, seq_len, height, width, training = TRUE,
                        lr = 1e-3) {
  .Call(c_plan, model, as.integer(c(batch_size, seq_len, height, width)),
        as.logical(training), as.double(lr))
}
client_train_step <- function(model, x, y, lr = 1e-3) {
  storage.mode(x) <- "double"
  storage.mode(y) <- "double"
  .Call(c_train_step, model, x, y, as.double(lr))
}
client_memory_stats <- function(model) .Call(c_memory_stats, model)
# The weights as the core holds them: torch's layout (row-major), by name.
client_params <- function(model) .Call(c_params, model)
