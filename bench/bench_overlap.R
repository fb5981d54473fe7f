# bench/bench_overlap.R -- a generator read while the step runs (issue 36
# item 4 (c)), measured paired in one fresh R process: epochs of
# convlstm_fit() over an R function source whose read takes about half a
# step, with the step on its own thread while the function reads the next
# batch (the default) and without (options(convlstm.prefetch = FALSE)),
# against the same epoch over a generator that costs nothing (the step
# alone). The read's half step is sized from such an epoch first; two kinds of
# read: Sys.sleep() (waiting, as for a disk or a network) and busy R work
# (arithmetic in R for that long: it needs a core of its own beside the
# step's).
#
#   Rscript bench/bench_overlap.R [--rounds=5] [--batches=24]
#
# Prints a table of median epoch seconds and their ratio to the step alone;
# the target is under 1.15 with overlap (about 1.5 without). Nothing here
# fails on a slow result. The CPU backend runs on one thread, so the step
# takes one core and R the other.
args <- commandArgs(trailingOnly = TRUE)
opt <- function(name, default) {
  hit <- grep(paste0("^--", name, "="), args, value = TRUE)
  if (length(hit) == 0) default else as.numeric(sub("^[^=]*=", "", hit[[1]]))
}
rounds <- opt("rounds", 5)
n_batches <- opt("batches", 24)
suppressPackageStartupMessages(library(convlstm))

B <- 8L
T <- 6L
S <- 32L
n <- B * n_batches
set.seed(1)
x <- array(stats::runif(n * T * S * S), c(n, T, 1, S, S))
y <- array(x[, T, 1, , ], c(n, 1, S, S))
batch_of <- function(i) list(x = x[i, , , , , drop = FALSE], y = y[i, , , , drop = FALSE])

# A generator whose read takes `secs` more than slicing: waiting, or busy.
generator <- function(secs, kind) {
  function(i) {
    if (secs > 0) {
      if (kind == "sleep") {
        Sys.sleep(secs)
      } else {
        t0 <- proc.time()[["elapsed"]]
        v <- 0
        while (proc.time()[["elapsed"]] - t0 < secs) v <- v + sum(sqrt(seq_len(2000)))
      }
    }
    batch_of(i)
  }
}

model <- convlstm(1, c(16, 1), 3, device = "cpu", threads = 1)
opt_adam <- convlstm_optimizer_adam(0.001)
epoch <- function(fun, overlap) {
  old <- options(convlstm.prefetch = overlap)
  on.exit(options(old))
  src <- convlstm_source_function(fun, n, x_dim = c(T, 1, S, S), y_dim = c(1, S, S))
  set.seed(2)
  h <- convlstm_fit(model, src, NULL, opt_adam, epochs = 1, batch_size = B, shuffle = FALSE,
                    verbose = FALSE)
  h$seconds[[1]]
}

# "a step": the step alone's share of an epoch (the step itself, slicing
# and checking its batch), from an epoch over a generator that costs
# nothing, after a warm-up one; the read takes half of it
invisible(epoch(generator(0, "sleep"), FALSE))
step_s <- epoch(generator(0, "sleep"), FALSE) / n_batches
read_s <- step_s / 2
core_s <- stats::median(vapply(1:5, function(k) { # the training step's own time, for reference
  b <- batch_of(((k - 1) %% n_batches) * B + seq_len(B))
  t0 <- proc.time()[["elapsed"]]
  convlstm_train_step(model, b$x, b$y, opt_adam)
  proc.time()[["elapsed"]] - t0
}, numeric(1)))
cat(sprintf(paste0("(c) a generator read while the step runs: %d batches of %d, %d steps of ",
                   "%dx%d, hidden c(16, 1), 1 CPU thread; a step %.1f ms of the epoch ",
                   "(convlstm_train_step() alone %.1f ms), the read %.1f ms\n"),
            n_batches, B, T, S, S, 1000 * step_s, 1000 * core_s, 1000 * read_s))

cases <- list(
  step_alone = list(fun = generator(0, "sleep"), overlap = FALSE),
  free_overlap = list(fun = generator(0, "sleep"), overlap = TRUE), # the thread's own cost
  sleep_overlap = list(fun = generator(read_s, "sleep"), overlap = TRUE),
  sleep_no_overlap = list(fun = generator(read_s, "sleep"), overlap = FALSE),
  busy_overlap = list(fun = generator(read_s, "busy"), overlap = TRUE),
  busy_no_overlap = list(fun = generator(read_s, "busy"), overlap = FALSE)
)
times <- matrix(NA_real_, rounds, length(cases), dimnames = list(NULL, names(cases)))
for (r in seq_len(rounds)) {
  for (k in names(cases)) times[r, k] <- epoch(cases[[k]]$fun, cases[[k]]$overlap)
}
med <- apply(times, 2, stats::median)
print(data.frame(case = names(cases), median_epoch_s = round(med, 3),
                 over_step_alone = round(med / med[["step_alone"]], 3)), row.names = FALSE)
cat(sprintf("load average: %s\n", paste(readLines("/proc/loadavg", warn = FALSE), collapse = " ")))
convlstm_release(model)
