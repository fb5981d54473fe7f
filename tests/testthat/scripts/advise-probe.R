# advise-probe.R -- convlstm_memory_advise() and convlstm_fit(memory_budget = ) in a
# fresh R process, for test-advise-stored.R: two such processes must give
# the same advice to the bit and pick the same configuration.
#
#   Rscript advise-probe.R LIB OUT THREADS
#
# Writes to OUT (saveRDS) the advice (a data frame) and the dtype and step
# options convlstm_fit() trained with under a budget that the plain float32
# step fits.
args <- commandArgs(trailingOnly = TRUE)
.libPaths(c(args[[1]], .libPaths()))
suppressPackageStartupMessages(library(convlstm))
threads <- as.integer(args[[3]])
set.seed(1) # the weights and the data; convlstm_memory_advise() leaves R's stream as it was
model <- convlstm(1, c(8, 1), 3, device = "cpu", threads = threads)
advice <- convlstm_memory_advise(model, "64 MiB", 8, 6, 16, 16)
x <- array(runif(8 * 6 * 16 * 16), c(8, 6, 1, 16, 16))
y <- array(runif(8 * 16 * 16), c(8, 1, 16, 16))
fit <- convlstm_fit(model, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = 8,
                    memory_budget = "64 MiB", verbose = FALSE, data_on_device = FALSE)
saveRDS(list(advice = as.data.frame(advice), rates = attr(advice, "rates"),
             dtype = convlstm:::model_config(model)$dtype, loss = fit$loss), args[[2]])
