# mpi-train.R -- one rank of a data-parallel fit, started by mpirun from
# test-distributed.R (never run by R CMD check itself):
#
#   mpirun -np N Rscript mpi-train.R LIB OUT MODE N_SAMPLES BATCH EPOCHS [FAIL_RANK]
#
# The data and the model come from fixed seeds (mpi_case() below, which the
# test repeats in one process for the big-batch reference); each rank starts
# its generator from a different seed, so the fit must give rank 0's to all.
# MODE:
#   train   3-epoch fit, a checkpoint at OUT/ckpt.safetensors after each
#           epoch (rank 0), then every rank writes OUT/w<rank>.rds: its
#           weights and the history
#   clip    as train, with max_grad_norm (the global norm must be used)
#   resume  continue OUT/ckpt.safetensors (written by any number of ranks)
#           up to EPOCHS epochs; writes OUT/w<rank>.rds
#   error   rank FAIL_RANK raises an R error in epoch 2; the checkpoint of
#           epoch 1 must survive and every rank must stop
#   kill    rank FAIL_RANK is killed (SIGKILL) in epoch 2
#   mismatch  rank FAIL_RANK gives one sample fewer: it must refuse to start
#   freerun as train, forecasting 3 frames free-running (horizon = 3,
#           teacher_forcing = FALSE: buckets from cl_backward_free_run)
#   carry   as train, state = "carry" without shuffling (each rank carries
#           its rows of the global batch)
#   peephole  as train, 2 epochs, the model with per-position peepholes
#   split   as train, 2 epochs, each rank's model on two threads, its step
#           split by batch (options(convlstm.thread_split = "batch"))
#   forecaster  an encoder-forecaster (mpi_case(forecaster = TRUE)), no
#           callbacks, with a loss weight (mpi_forecaster_weight())
#   forecaster_data  the same without the weight, its data set on the device
#   source_frames  a fit from the frame file OUT/series.frames (written by
#           the test: mpi_series(N_SAMPLES)), windows of 3 frames and the
#           next; OUT/w<rank>.rds also holds the first frame of every
#           window the rank's reader read, per read, and the reads it took
#   source_function  the same windows from an R function source; the rows
#           it was asked for, per call, and the steps run on a thread
args <- commandArgs(trailingOnly = TRUE)
lib <- args[[1]]
out <- args[[2]]
mode <- args[[3]]
n <- as.integer(args[[4]])
batch <- as.integer(args[[5]])
epochs <- as.integer(args[[6]])
fail_rank <- if (length(args) >= 7) as.integer(args[[7]]) else -1L
suppressPackageStartupMessages(library(convlstm, lib.loc = lib))

d <- convlstm_distributed()
source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE))),
                 "mpi-case.R"))
if (mode == "mismatch" && d$rank == fail_rank) n <- n - 1L
if (mode %in% c("forecaster", "forecaster_data")) {
  case <- mpi_case(n, seed_model = 100 + d$rank, forecaster = TRUE)
  set.seed(1000 + d$rank)
  h <- convlstm_fit(case$model, case$x, case$y, convlstm_optimizer_adam(0.01), epochs = epochs,
                    batch_size = batch, verbose = FALSE, distributed = d,
                    weight = if (mode == "forecaster") mpi_forecaster_weight(case$y),
                    data_on_device = mode == "forecaster_data")
  saveRDS(list(weights = convlstm_state_dict(case$model), loss = h$loss, rank = d$rank,
               on_device = attr(h, "data_on_device"), stats = convlstm:::c_dist_stats(),
               buckets = attr(convlstm_memory_estimate(case$model, batch, 3, 6, 6, horizon = 2,
                                                       world_size = d$size), "communication")),
          file.path(out, sprintf("w%d.rds", d$rank)))
  quit(save = "no")
}
if (mode %in% c("source_frames", "source_function")) {
  model <- mpi_source_model(100 + d$rank)
  series <- mpi_series(n)
  rec <- new.env()
  rec$asked <- list()
  rec$starts <- list()
  rec$takes <- 0
  rec$threaded <- 0
  ns <- asNamespace("convlstm")
  trace_in <- function(fn, tracer) {
    suppressMessages(trace(fn, where = ns, print = FALSE, tracer = tracer))
  }
  trace_in("c_fa_ahead_start", bquote(assign("starts", c(get("starts", .(rec)), list(starts_x)),
                                             envir = .(rec))))
  trace_in("c_fa_ahead_take", bquote(assign("takes", get("takes", .(rec)) + 1, envir = .(rec))))
  trace_in("c_train_step_start", bquote(assign("threaded", get("threaded", .(rec)) + 1,
                                               envir = .(rec))))
  src <- if (mode == "source_frames") {
    convlstm_source_frames(file.path(out, "series.frames"), 3, 1)
  } else {
    convlstm_source_function(function(i) {
      rec$asked[[length(rec$asked) + 1L]] <- i
      mpi_windows(series, i)
    }, n = n, x_dim = c(3, 1, 6, 6), y_dim = c(1, 1, 6, 6))
  }
  set.seed(1000 + d$rank)
  h <- convlstm_fit(model, src, NULL, convlstm_optimizer_adam(0.01), epochs = epochs,
                    batch_size = batch, verbose = FALSE, distributed = d)
  saveRDS(list(weights = convlstm_state_dict(model), loss = h$loss, rank = d$rank,
               asked = rec$asked, starts = rec$starts, takes = rec$takes,
               threaded = rec$threaded),
          file.path(out, sprintf("w%d.rds", d$rank)))
  quit(save = "no")
}
if (mode == "split") options(convlstm.thread_split = "batch")
case <- mpi_case(n, seed_model = 100 + d$rank, # different initial weights per rank
                 forecast = mode == "freerun", peephole = mode == "peephole",
                 threads = if (mode == "split") 2 else 1)
set.seed(1000 + d$rank)                         # and different generators
ckpt <- file.path(out, "ckpt.safetensors")
callbacks <- list(convlstm_callback_model_checkpoint(ckpt), convlstm_callback_csv_logger(file.path(out, "log.csv")))
if (mode %in% c("error", "kill")) {
  callbacks <- c(callbacks, list(convlstm_callback(on_batch_end = function(ctx) {
    # after epoch 2's first step: the other ranks wait in the second's
    if (ctx$epoch == 2L && ctx$batch == 1L && ctx$rank == fail_rank) {
      if (mode == "kill") tools::pskill(Sys.getpid(), tools::SIGKILL)
      stop("rank ", fail_rank, " fails on purpose")
    }
  })))
}
h <- convlstm_fit(case$model, case$x, case$y, convlstm_optimizer_adam(0.01), epochs = epochs,
                  batch_size = batch, shuffle = mode != "carry", verbose = FALSE, distributed = d,
                  callbacks = callbacks, max_grad_norm = if (mode == "clip") 0.05,
                  resume = if (mode == "resume") ckpt,
                  horizon = if (mode == "freerun") 3L, teacher_forcing = mode != "freerun",
                  state = if (mode == "carry") "carry")
est <- convlstm_memory_estimate(case$model, batch, 3, 6, 6, world_size = d$size)
saveRDS(list(weights = convlstm_state_dict(case$model), loss = h$loss, rank = d$rank, size = d$size,
             stats = convlstm:::c_dist_stats(), buckets = attr(est, "communication"),
             thread_rows = sum(grepl("^thread [0-9]+:", attr(est, "plan")$name))),
        file.path(out, sprintf("w%d.rds", d$rank)))
