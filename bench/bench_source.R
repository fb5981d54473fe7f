# bench/bench_source.R -- training from a frame file (issue 36 item 4 (a),
# (b)), measured in one fresh R process:
#
#   (a) memory: convlstm_fit(memory_budget = B) on a frame file of 8 x B
#       (and, for comparison, of 2 x B): the growth of the process's
#       resident high-water mark (VmHWM from /proc/self/status, reset
#       through /proc/self/clear_refs: the operating system's count, not
#       the package's) over the fit, against the plan's reserved bytes, the
#       batch the R side stages (x and y of one batch as doubles, and the
#       validation forwards' outputs) and a stated constant;
#   (b) time: epochs from a memory-mapped frame file against the same
#       windows in R arrays (data_on_device "auto" and FALSE), alternated,
#       the median epoch of each.
#
#   Rscript bench/bench_source.R [--budget-mib=16] [--rounds=3]
#
# Prints a table; nothing here fails on a slow or large result. One thread
# (OMP_NUM_THREADS=1, threads = 1) so the figures do not depend on the load.
source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]])),
                 "bench_args.R")) # bench_arg()
budget_mib <- as.numeric(bench_arg("budget-mib", 16))
rounds <- as.numeric(bench_arg("rounds", 3))
suppressPackageStartupMessages(library(convlstm))

status <- function() {
  l <- readLines("/proc/self/status")
  kb <- function(key) as.numeric(sub("^[^0-9]*([0-9]+).*$", "\\1", grep(paste0("^", key, ":"), l, value = TRUE)))
  c(rss = kb("VmRSS") * 1024, hwm = kb("VmHWM") * 1024)
}
reset_hwm <- function() writeLines("5", "/proc/self/clear_refs")
mib <- function(b) sprintf("%.1f MiB", b / 2^20)

H <- 64L
W <- 64L
seq_len <- 8L
frame_bytes <- H * W * 4 # float32
model_args <- list(1, c(4, 1), 3, device = "cpu", threads = 1)

# A moving-square series generated a chunk at a time: never held whole.
frames_fn <- function(frames) {
  out <- array(0, c(length(frames), 1, H, W))
  for (k in seq_along(frames)) {
    t <- frames[[k]]
    r <- (t * 3) %% (H - 8)
    c <- (t * 5) %% (W - 8)
    out[k, 1, r + 1:8, c + 1:8] <- 1
  }
  out + 0.01 * (frames %% 7)
}

write_series <- function(n_frames) {
  path <- tempfile(fileext = ".frames")
  convlstm_frame_file_write(frames_fn, path, n_frames = n_frames, chunk_frames = 64)
  path
}

# ---- (a) memory ----
budget <- budget_mib * 2^20
# warm-up outside the window: R's code paths, OpenMP, the advisor's rates
warm <- write_series(200)
m <- do.call(convlstm, model_args)
invisible(convlstm_fit(m, convlstm_source_frames(warm, seq_len, 1, stride = 9), NULL,
                       convlstm_optimizer_adam(), epochs = 1, batch_size = 4, verbose = FALSE,
                       memory_budget = budget, validation_split = 0.1))
convlstm_release(m)

memory_case <- function(times) {
  n_frames <- ceiling(times * budget / frame_bytes)
  path <- write_series(n_frames)
  on.exit(unlink(path))
  src <- convlstm_source_frames(path, seq_len, 1, stride = seq_len + 1L) # every frame read once
  model <- do.call(convlstm, model_args)
  on.exit(convlstm_release(model), add = TRUE)
  gc(full = TRUE)
  reset_hwm()
  before <- status()
  t0 <- proc.time()[["elapsed"]]
  h <- convlstm_fit(model, src, NULL, convlstm_optimizer_adam(), epochs = 1, batch_size = 4,
                    memory_budget = budget, validation_split = 0.1, verbose = FALSE)
  secs <- proc.time()[["elapsed"]] - t0
  after <- status()
  b <- attr(h, "batch_size")
  plan <- h$peak_bytes[[1]] # what the allocator held at its peak (within the budget)
  staging <- 2 * (b * seq_len + b) * H * W * 8 # x and y of a batch, read and converted, as doubles
  data.frame(file = mib(file.size(path)), x_budget = times, windows = src$n, batch = b,
             seconds = round(secs, 1), plan_peak = mib(plan), staging = mib(staging),
             hwm_growth = mib(after[["hwm"]] - before[["rss"]]),
             growth_minus_plan_staging = mib(after[["hwm"]] - before[["rss"]] - plan - staging))
}
cat(sprintf("(a) memory: budget %s, frames %dx%d float32, seq_len %d, model hidden c(4, 1)\n",
            mib(budget), H, W, seq_len))
mem <- do.call(rbind, lapply(c(2, 8), memory_case))
print(mem, row.names = FALSE)

# ---- (b) time ----
n_frames <- 2000L
path <- write_series(n_frames)
src <- convlstm_source_frames(path, seq_len, 1)
x <- convlstm_source_read(src, seq_len(src$n)) # the same windows, in memory
y <- array(x$y, c(src$n, 1, H, W))
x <- x$x
epoch <- function(kind) {
  model <- do.call(convlstm, model_args)
  on.exit(convlstm_release(model))
  set.seed(1)
  h <- switch(kind,
    file = convlstm_fit(model, src, NULL, convlstm_optimizer_adam(), epochs = 1, batch_size = 16,
                        verbose = FALSE),
    auto = convlstm_fit(model, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = 16,
                        verbose = FALSE),
    sliced = convlstm_fit(model, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = 16,
                          data_on_device = FALSE, verbose = FALSE))
  h$seconds[[1]]
}
kinds <- c("file", "auto", "sliced")
times <- matrix(NA_real_, rounds, length(kinds), dimnames = list(NULL, kinds))
invisible(epoch("file")) # warm-up
for (r in seq_len(rounds)) for (k in kinds) times[r, k] <- epoch(k)
med <- apply(times, 2, stats::median)
cat(sprintf("\n(b) time: %d windows of %d frames %dx%d, batch 16, %d rounds alternated\n",
            src$n, seq_len, H, W, rounds))
print(data.frame(source = c("frame file (mmap)", "arrays, data_on_device auto",
                            "arrays, data_on_device FALSE"),
                 median_epoch_s = round(med, 2),
                 file_over_this = c(NA, round(med[["file"]] / med[["auto"]], 3),
                                    round(med[["file"]] / med[["sliced"]], 3))),
      row.names = FALSE)
unlink(path)
