# convlstm_distributed() and convlstm_fit(distributed = ): in this process
# (one rank), and as 2- and 3-process jobs under mpirun (scripts/
# mpi-train.R), against one process training the whole global batch.
# CONVLSTM_MPI_TESTS=require (make test) turns a skip for want of mpirun or
# of MPI in the build into a failure.

mpi_tests_required <- function() identical(Sys.getenv("CONVLSTM_MPI_TESTS"), "require")

skip_without_mpi <- function() {
  # several processes per test, each loading R: make test runs them
  skip_on_cran()
  if (nzchar(Sys.getenv("_R_CHECK_PACKAGE_NAME_"))) {
    skip("mpirun jobs run in make test, not in R CMD check")
  }
  why <- if (!nzchar(Sys.which("mpirun"))) {
    "mpirun is not on the PATH (Debian: apt-get install openmpi-bin libopenmpi-dev)"
  } else if (!nzchar(Sys.which("timeout"))) {
    "no timeout(1) to bound the mpirun jobs"
  } else if (!convlstm:::c_dist_available()$mpi) {
    "this build of convlstm has no MPI (reinstall with libopenmpi-dev)"
  }
  if (is.null(why)) return(invisible())
  if (mpi_tests_required()) fail(paste("CONVLSTM_MPI_TESTS=require, but", why))
  skip(why)
}

# One mpirun job, bounded in time; its output and exit status.
run_mpi <- function(np, mode, out, n, batch, epochs, fail_rank = -1L, limit = 120) {
  lib <- dirname(find.package("convlstm"))
  rscript <- file.path(R.home("bin"), "Rscript")
  args <- c(as.character(limit), "mpirun", "--oversubscribe", "--allow-run-as-root",
            "-np", np, shQuote(rscript), shQuote(test_path("scripts", "mpi-train.R")),
            shQuote(lib), shQuote(out), mode, n, batch, epochs, fail_rank)
  t0 <- proc.time()[["elapsed"]]
  log <- suppressWarnings(system2("timeout", args, stdout = TRUE, stderr = TRUE,
                                  env = c("OMP_NUM_THREADS=1", "OMPI_MCA_btl=self,vader,tcp")))
  list(status = attr(log, "status") %||% 0L, log = paste(log, collapse = "\n"),
       seconds = proc.time()[["elapsed"]] - t0)
}

ranks_of <- function(out, np) lapply(seq_len(np) - 1L, function(r) {
  readRDS(file.path(out, sprintf("w%d.rds", r)))
})

source(test_path("scripts", "mpi-case.R"))

# The one-process reference: the same data, rank 0's initial weights and
# generator, the whole global batch per step.
big_batch <- function(n, batch, epochs, max_grad_norm = NULL, resume = NULL, mode = "train") {
  # mode: as mpi-train.R's, or "teacher" (its forecast, teacher-forced) or
  # "noshuffle" (carry's order, each batch from zeros)
  forecast <- mode %in% c("freerun", "teacher")
  case <- mpi_case(n, seed_model = 100, forecast = forecast, peephole = mode == "peephole")
  set.seed(1000)
  h <- convlstm_fit(case$model, case$x, case$y, convlstm_optimizer_adam(0.01), epochs = epochs,
                    batch_size = batch, verbose = FALSE, max_grad_norm = max_grad_norm,
                    resume = resume, shuffle = !mode %in% c("carry", "noshuffle"),
                    horizon = if (forecast) 3L, teacher_forcing = mode != "freerun",
                    state = if (mode == "carry") "carry")
  out <- list(weights = convlstm_state_dict(case$model), loss = h$loss)
  convlstm_release(case$model)
  out
}

# a fresh folder in the session's temporary one (removed with it)
temp_dir <- function() {
  d <- tempfile("mpi-")
  dir.create(d)
  d
}

max_diff <- function(a, b) max(mapply(function(u, v) max(abs(u - v)), a, b))

test_that("convlstm_distributed() without mpirun is one process that trains as without it", {
  d <- convlstm_distributed()
  expect_s3_class(d, "convlstm_distributed")
  expect_equal(c(d$rank, d$size), c(0L, 1L))
  expect_output(print(d), "rank 0 of 1")
  fit_once <- function(distributed, on_device = TRUE) {
    case <- mpi_case(8)
    set.seed(3)
    h <- convlstm_fit(case$model, case$x, case$y, convlstm_optimizer_adam(0.01), epochs = 2,
                      batch_size = 3, verbose = FALSE, distributed = distributed,
                      max_grad_norm = 0.1, data_on_device = on_device)
    list(loss = h$loss, w = convlstm_state_dict(case$model))
  }
  expect_identical(fit_once(d), fit_once(NULL)) # bit for bit: size 1 reduces nothing
  # batches sliced from R's arrays: steps on R's thread with a communicator
  # (no step on a thread of its own, which takes none), bit for bit as well
  expect_identical(fit_once(d, FALSE), fit_once(NULL, FALSE))
  # one communicator per process: MPI cannot start beside the one-process one
  if (convlstm:::c_dist_available()$mpi) {
    expect_error(convlstm_distributed("mpi"), class = "convlstm_error_state",
                 regexp = "'local' communicator already")
  }
  expect_identical(convlstm_distributed("local"), d) # asking again is the same one
})

test_that("convlstm_distributed() and convlstm_fit(distributed = ) refuse bad input", {
  expect_error(convlstm_distributed("carrier-pigeon"), class = "convlstm_error")
  case <- mpi_case(4)
  expect_error(convlstm_fit(case$model, case$x, case$y, convlstm_optimizer_adam(), epochs = 1,
                            distributed = "yes", verbose = FALSE),
               class = "convlstm_error", regexp = "distributed")
  if (!convlstm:::c_dist_available()$nccl) {
    expect_error(convlstm_distributed("nccl"), class = "convlstm_error_unsupported",
                 regexp = "no NCCL")
  }
})

test_that("a global batch is cut into contiguous shards, as equal as may be", {
  idx <- c(9L, 4L, 7L, 1L, 3L)
  shards <- lapply(0:2, convlstm:::shard_rows, idx = idx, size = 3L)
  expect_identical(unlist(shards), idx)
  expect_identical(lengths(shards), c(1L, 2L, 2L))
  expect_identical(convlstm:::shard_rows(idx, 0L, 1L), idx)
})

test_that("2 ranks x batch 2 train as 1 x batch 4, the same on every rank, every run", {
  skip_without_mpi()
  out <- temp_dir()
  run <- run_mpi(2, "train", out, n = 12, batch = 2, epochs = 3)
  expect_equal(run$status, 0L, info = run$log)
  r <- ranks_of(out, 2)
  expect_identical(r[[1]]$weights, r[[2]]$weights) # identical weights after training
  expect_identical(r[[1]]$loss, r[[2]]$loss)
  ref <- big_batch(12, 4, 3)
  # float32: the big batch sums its 4 samples' weight gradients in one
  # convolution, the ranks 2 + 2 then the sum of two halves: other roundings
  expect_lt(max_diff(r[[1]]$weights, ref$weights), 1e-5)
  expect_equal(r[[1]]$loss, ref$loss, tolerance = 1e-5)
  # 3 epochs of 3 steps, each reducing every bucket convlstm_memory_estimate() lists
  st <- r[[2]]$stats
  expect_equal(st$steps, 9)
  expect_equal(st$bytes, 9 * sum(r[[2]]$buckets$bytes))
  expect_gte(st$wait_seconds, 0)
  # rank 0 alone wrote the log: one header and three epochs
  expect_length(readLines(file.path(out, "log.csv")), 4)
  # a deterministic reduction order: a second run is the same bit for bit
  out2 <- temp_dir()
  run2 <- run_mpi(2, "train", out2, n = 12, batch = 2, epochs = 3)
  expect_equal(run2$status, 0L, info = run2$log)
  expect_identical(ranks_of(out2, 2)[[1]]$weights, r[[1]]$weights)
})

# A 2-rank job of MODE (12 samples, batch 2, 2 epochs) against one process
# with batch 4: the same weights on both ranks, the big batch's within
# float32 rounding. Returns rank 0's result and the reference.
two_ranks_as_big_batch <- function(mode) {
  out <- temp_dir()
  run <- run_mpi(2, mode, out, n = 12, batch = 2, epochs = 2)
  expect_equal(run$status, 0L, info = run$log)
  r <- ranks_of(out, 2)
  expect_identical(r[[1]]$weights, r[[2]]$weights)
  ref <- big_batch(12, 4, 2, mode = mode)
  expect_lt(max_diff(r[[1]]$weights, ref$weights), 1e-5)
  expect_equal(r[[1]]$loss, ref$loss, tolerance = 1e-5)
  list(rank0 = r[[1]], ref = ref)
}

test_that("2 ranks train a free-running horizon as 1 x batch 4 (buckets of the roll's backward)", {
  skip_without_mpi()
  got <- two_ranks_as_big_batch("freerun")
  # every bucket of every step went through the communicator: 2 epochs x 3
  st <- got$rank0$stats
  expect_equal(st$steps, 6)
  expect_equal(st$bytes, 6 * sum(got$rank0$buckets$bytes))
  # teacher forcing trains other weights: the free-running backward was used
  tf <- big_batch(12, 4, 2, mode = "teacher")
  expect_gt(max_diff(tf$weights, got$ref$weights), 1e-4)
})

test_that("2 ranks train peepholes as 1 x batch 4 (their gradients in the buckets)", {
  skip_without_mpi()
  got <- two_ranks_as_big_batch("peephole")
  # the peepholes trained (they start at zero), on both sides
  expect_gt(max(abs(got$ref$weights[["cell_list.0.w_ci"]])), 1e-4)
  expect_equal(got$rank0$stats$bytes, 6 * sum(got$rank0$buckets$bytes))
})

test_that("2 ranks, each split by batch across two threads, train as 1 x batch 4", {
  skip_without_mpi()
  got <- two_ranks_as_big_batch("split")
  expect_gt(got$rank0$thread_rows, 0) # the ranks' plans: each thread's buffers
  expect_equal(got$rank0$stats$bytes, 6 * sum(got$rank0$buckets$bytes))
})

test_that("2 ranks carrying the state train as 1 x batch 4 carrying it", {
  skip_without_mpi()
  got <- two_ranks_as_big_batch("carry")
  # the carried state mattered: starting each batch from zeros trains otherwise
  zeros <- big_batch(12, 4, 2, mode = "noshuffle")
  expect_gt(max_diff(zeros$weights, got$ref$weights), 1e-6)
})

# The encoder-forecaster's fit of 12 sequences, batch `batch`, 2 epochs in
# one process: the reference of its 2-rank jobs.
forecaster_big_batch <- function(batch, weighted) {
  case <- mpi_case(12, seed_model = 100, forecaster = TRUE)
  on.exit(convlstm_release(case$model))
  set.seed(1000)
  h <- convlstm_fit(case$model, case$x, case$y, convlstm_optimizer_adam(0.01), epochs = 2,
                    batch_size = batch, verbose = FALSE,
                    weight = if (weighted) mpi_forecaster_weight(case$y))
  list(weights = convlstm_state_dict(case$model), loss = h$loss)
}

for (mode in c("forecaster", "forecaster_data")) {
  test_that(sprintf("2 ranks train an encoder-forecaster as 1 x batch 4 (%s)", mode), {
    skip_without_mpi()
    out <- temp_dir()
    run <- run_mpi(2, mode, out, n = 12, batch = 2, epochs = 2)
    expect_equal(run$status, 0L, info = run$log)
    r <- ranks_of(out, 2)
    expect_identical(r[[1]]$weights, r[[2]]$weights)
    expect_identical(r[[1]]$loss, r[[2]]$loss)
    expect_identical(r[[1]]$on_device, mode == "forecaster_data")
    weighted <- mode == "forecaster"
    ref <- forecaster_big_batch(4, weighted)
    expect_lt(max_diff(r[[1]]$weights, ref$weights), 1e-5)
    expect_equal(r[[1]]$loss, ref$loss, tolerance = 1e-5)
    # every bucket of each of the 6 steps, the head's among them, was reduced
    st <- r[[2]]$stats
    expect_equal(st$steps, 6)
    expect_true(4L %in% r[[2]]$buckets$layer) # the head: the pseudo-layer after 4 layers
    expect_equal(st$bytes, 6 * sum(r[[2]]$buckets$bytes))
    expect_equal(sum(r[[2]]$buckets$bytes), 4 * sum(lengths(ref$weights)))
    # the ranks' batch of 2 alone trains otherwise: the reduction was used
    small <- forecaster_big_batch(2, weighted)
    expect_gt(max_diff(small$weights, ref$weights), 1e-4)
  })
}

test_that("3 ranks with uneven shards and clipping train as one process (the global norm)", {
  skip_without_mpi()
  out <- temp_dir()
  # 16 samples, global batch 6: batches of 6, 6 and 4 (shards 1, 1, 2)
  run <- run_mpi(3, "clip", out, n = 16, batch = 2, epochs = 2)
  expect_equal(run$status, 0L, info = run$log)
  r <- ranks_of(out, 3)
  expect_identical(r[[1]]$weights, r[[2]]$weights)
  expect_identical(r[[1]]$weights, r[[3]]$weights)
  ref <- big_batch(16, 6, 2, max_grad_norm = 0.05)
  expect_lt(max_diff(r[[1]]$weights, ref$weights), 1e-5)
  expect_equal(r[[3]]$loss, ref$loss, tolerance = 1e-5)
  # clipping was in force, so a per-rank norm would have told
  unclipped <- big_batch(16, 6, 2)
  expect_gt(max_diff(unclipped$weights, ref$weights), 1e-4)
})

test_that("a checkpoint written by 2 ranks resumes on 3 ranks as in one process", {
  skip_without_mpi()
  out <- temp_dir()
  run <- run_mpi(2, "train", out, n = 12, batch = 2, epochs = 3)
  expect_equal(run$status, 0L, info = run$log)
  ckpt <- file.path(out, "ckpt.safetensors")
  saved <- file.path(temp_dir(), "ckpt.safetensors")
  file.copy(ckpt, saved)
  run <- run_mpi(3, "resume", out, n = 12, batch = 2, epochs = 5)
  expect_equal(run$status, 0L, info = run$log)
  r <- ranks_of(out, 3)
  expect_identical(r[[1]]$weights, r[[3]]$weights)
  expect_length(r[[1]]$loss, 5) # 3 epochs from the file, 2 trained
  ref <- big_batch(12, 6, 5, resume = saved)
  expect_lt(max_diff(r[[2]]$weights, ref$weights), 1e-5)
  expect_equal(r[[1]]$loss, ref$loss, tolerance = 1e-5)
})

test_that("ranks given different data sizes refuse to start, naming the rank, and none hangs", {
  skip_without_mpi()
  out <- temp_dir()
  run <- run_mpi(2, "mismatch", out, n = 12, batch = 2, epochs = 2, fail_rank = 1L, limit = 90)
  expect_false(run$status %in% c(0L, 124L), info = run$log)
  expect_match(run$log, "rank 1 has samples 11, rank 0 samples 12", info = run$log)
  expect_false(file.exists(file.path(out, "ckpt.safetensors"))) # no step was taken
})

for (how in c("error", "kill")) {
  test_that(sprintf("a rank that fails (%s) stops all in bounded time; the checkpoint survives",
                    how), {
    skip_without_mpi()
    out <- temp_dir()
    run <- run_mpi(3, how, out, n = 12, batch = 2, epochs = 3, fail_rank = 1L, limit = 90)
    expect_false(run$status %in% c(0L, 124L), info = run$log) # failed, not stopped by timeout
    expect_lt(run$seconds, 80)
    expect_match(run$log, "rank 1", info = run$log) # the failing rank is named
    expect_false(any(file.exists(file.path(out, sprintf("w%d.rds", 0:2))))) # no rank went on
    # epoch 1's checkpoint is whole and loads
    ckpt <- file.path(out, "ckpt.safetensors")
    expect_true(file.exists(ckpt))
    expect_identical(convlstm_file_info(ckpt)$metadata[["fit.epoch"]], "1")
    m <- convlstm_load(ckpt, device = "cpu")
    expect_s3_class(m, "convlstm_model")
    convlstm_release(m)
  })
}

# A source's data-parallel fit (issue 36 item 1: each rank reads its own
# rows): 12 windows of mpi_series(12), batch 2 per rank, 2 epochs, against
# one process reading batches of 4 from an R function source whose calls
# are recorded (the global batches, in order).
source_big_batch <- function() {
  series <- mpi_series(12)
  asked <- list()
  src <- convlstm_source_function(function(i) {
    asked[[length(asked) + 1L]] <<- i
    mpi_windows(series, i)
  }, n = 12, x_dim = c(3, 1, 6, 6), y_dim = c(1, 1, 6, 6))
  model <- mpi_source_model(100)
  on.exit(convlstm_release(model))
  set.seed(1000)
  h <- convlstm_fit(model, src, NULL, convlstm_optimizer_adam(0.01), epochs = 2, batch_size = 4,
                    verbose = FALSE)
  list(weights = convlstm_state_dict(model), loss = h$loss, asked = asked)
}

for (mode in c("source_frames", "source_function")) {
  test_that(sprintf("2 ranks train from %s as 1 x batch 4, each reading its half of each batch",
                    if (mode == "source_frames") "a frame file" else "a function source"), {
    skip_without_mpi()
    out <- temp_dir()
    convlstm_frame_file_write(mpi_series(12), file.path(out, "series.frames"))
    run <- run_mpi(2, mode, out, n = 12, batch = 2, epochs = 2)
    expect_equal(run$status, 0L, info = run$log)
    r <- ranks_of(out, 2)
    expect_identical(r[[1]]$weights, r[[2]]$weights)
    expect_identical(r[[1]]$loss, r[[2]]$loss)
    ref <- source_big_batch()
    expect_lt(max_diff(r[[1]]$weights, ref$weights), 1e-5)
    expect_equal(r[[1]]$loss, ref$loss, tolerance = 1e-5)
    # the rows each rank read, per batch: a frame file's reader thread reads
    # them ahead on each rank (the first frame of window i is frame i);
    # a function is called at each step (no step thread on 2 ranks)
    reads <- lapply(r, function(k) if (mode == "source_frames") k$starts else k$asked)
    for (k in 1:2) {
      expect_length(reads[[k]], 2 * 3) # 3 steps an epoch
      expect_true(all(lengths(reads[[k]]) == 2))
      expect_equal(r[[k]]$takes, if (mode == "source_frames") 6 else 0)
      expect_equal(r[[k]]$threaded, 0)
    }
    # rank 0 the first half of each global batch, rank 1 the second
    expect_length(ref$asked, 2 * 3)
    for (b in seq_along(ref$asked)) {
      expect_equal(reads[[1]][[b]], ref$asked[[b]][1:2], info = b)
      expect_equal(reads[[2]][[b]], ref$asked[[b]][3:4], info = b)
    }
  })
}
