# tools/fit_identity.R -- the losses (and final weights' checksum) of a few
# convlstm_fit() set-ups, each printed with 17 significant digits, so that
# two installs (before/after a refactor of the fit) can be compared
# bit for bit:
#   R_LIBS=/tmp/lib-a Rscript tools/fit_identity.R > a.txt
#   R_LIBS=/tmp/lib-b Rscript tools/fit_identity.R > b.txt; cmp a.txt b.txt
suppressPackageStartupMessages(library(convlstm))
show <- function(label, h, model) {
  force(h) # train first, then read the weights
  w <- unlist(convlstm_state_dict(model))
  cat(label, ":", sprintf("%.17g", h$loss), "| val", sprintf("%.17g", h$val_loss),
      "| lr", sprintf("%.17g", h$lr), "| sum w", sprintf("%.17g", sum(w * seq_along(w))), "\n")
}
data <- function(n, T = 3, s = 6, seed = 1) {
  set.seed(seed)
  x <- array(runif(n * T * s * s), dim = c(n, T, 1, s, s))
  list(x = x, y = array(x[, T, 1, , ], dim = c(n, 1, s, s)),
       y2 = array(runif(n * 2 * s * s), dim = c(n, 2, 1, s, s)))
}
d <- data(12)
fresh <- function(...) { set.seed(7); convlstm(1, c(4, 1), 3, device = "cpu", threads = 1, ...) }

m <- fresh(); set.seed(2)
show("plain", convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 3, batch_size = 5,
                           verbose = FALSE), m)
m <- fresh(); set.seed(3); opt <- convlstm_optimizer_sgd(0.1, momentum = 0.9)
show("split+sched+clip", convlstm_fit(m, d$x, d$y, opt, epochs = 4, batch_size = 4,
     validation_split = 0.25, lr_scheduler = convlstm_lr_step(opt, step_size = 2, gamma = 0.5),
     max_grad_norm = 0.5, verbose = FALSE), m)
m <- fresh(); set.seed(4); opt <- convlstm_optimizer_adam(0.02)
show("onecycle+huber+weight", convlstm_fit(m, d$x, d$y, opt, epochs = 2, batch_size = 4,
     lr_scheduler = convlstm_lr_one_cycle(opt, max_lr = 0.05, epochs = 2, steps_per_epoch = 3),
     loss = "huber", weight = array(runif(length(d$y)), dim(d$y)), verbose = FALSE), m)
m <- fresh(); set.seed(5)
show("forecast sampling", convlstm_fit(m, d$x, d$y2, convlstm_optimizer_adam(0.01), epochs = 3,
     batch_size = 6, horizon = 2,
     teacher_forcing = convlstm_sampling_schedule("linear", k = 0.3), verbose = FALSE), m)
m <- fresh(); set.seed(6)
show("carry free", convlstm_fit(m, d$x, d$y2, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 4,
     horizon = 2, teacher_forcing = FALSE, state = "carry", shuffle = FALSE, verbose = FALSE), m)
# convlstm_memory_advise() picks by rates it times once per process, so the pick can
# differ between runs; fixed rates here make it the same on both installs
assign(paste(m$device, m$config$threads, sep = ":"),
       list(flops = c(float32 = 1e9, float16 = 2e9, bfloat16 = 1.5e9), bytes = 1e9,
            weights = 1e9, threads = 1L, device = "cpu"),
       envir = convlstm:::advise_cache)
m <- fresh(); set.seed(8)
show(paste("budget", m$dtype), convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 6,
     memory_budget = 60000, target = "last_state", verbose = FALSE), m)
m <- fresh(); set.seed(9)
show("ondevice ckpt", convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 4,
     data_on_device = TRUE, checkpoint = 1, accumulation_steps = 2, verbose = FALSE), m)
m <- fresh(dropout = 0.2, peephole = "channel"); set.seed(10)
show("dropout peephole", convlstm_fit(m, d$x, d$y, convlstm_optimizer_adam(0.01), epochs = 2,
     batch_size = 4, verbose = FALSE), m)
# resume: two epochs, then two more from the file
path <- tempfile(fileext = ".safetensors")
m <- fresh(); set.seed(11); opt <- convlstm_optimizer_adam(0.01)
h <- convlstm_fit(m, d$x, d$y, opt, epochs = 2, batch_size = 4, verbose = FALSE,
                  lr_scheduler = convlstm_lr_cosine_annealing(opt, T_max = 4),
                  callbacks = list(convlstm_callback_model_checkpoint(path)))
m2 <- fresh(); set.seed(99)
show("resume", convlstm_fit(m2, d$x, d$y, opt, epochs = 4, batch_size = 4, verbose = FALSE,
     lr_scheduler = convlstm_lr_cosine_annealing(opt, T_max = 4), resume = path), m2)
unlink(path)
