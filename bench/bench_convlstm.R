# bench/bench_convlstm.R -- times one training step of the R torch tutorial's
# ConvLSTM in the installed convlstm package (convlstm_train_step(): forward, MSE on
# the last state, backward and Adam in one .Call) and measures the process's
# peak resident memory growth. Run by bench_cpu.sh, which runs the PyTorch
# twin (bench_torch.py) in the same invocation; not a test. With
# --model=forecaster: Shi et al.'s encoder-forecaster at issue 34's shape
# (convlstm_forecaster(1, c(48, 48), 5, patch = 4), 10 input and 10 target
# frames of 64x64, MSE over the forecast, Adam), bench_torch.py's twin. With
# --model=plain: a plain stack where the convolutions are the work
# (convlstm(16, c(48, 48), c(5, 5)), 20 frames of 16x16, MSE over the top
# layer's sequence, Adam). --dtype=bfloat16 or float16: the model's storage
# type (float32 by default).
#
# Prints one line: RESULT impl=convlstm median=<s> min=<s> rss_peak=<bytes>
#   alloc_peak=<bytes> reserved_peak=<bytes> steps=<n> loss=<last loss>

source(file.path(dirname(sub("^--file=", "", grep("^--file=", commandArgs(), value = TRUE)[[1]])),
                 "bench_args.R")) # bench_arg()
steps <- as.integer(bench_arg("steps", "20"))
warmup <- as.integer(bench_arg("warmup", "2"))
threads <- as.integer(bench_arg("threads", "2"))
B <- as.integer(bench_arg("batch", "100"))
kind <- bench_arg("model", "tutorial")
dtype <- bench_arg("dtype", "float32")
fc <- identical(kind, "forecaster")
plain <- identical(kind, "plain")
T <- if (fc) 10L else if (plain) 20L else 5L
C <- if (plain) 16L else 1L
H <- W <- if (fc) 64L else if (plain) 16L else 24L

suppressPackageStartupMessages(library(convlstm))

status_bytes <- function(key) {
  s <- readLines("/proc/self/status")
  line <- grep(paste0("^", key, ":"), s, value = TRUE)
  as.numeric(sub("^[^0-9]*([0-9]+).*$", "\\1", line)) * 1024
}
# Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0).
reset_hwm <- function() {
  tryCatch({ cat("5\n", file = "/proc/self/clear_refs"); TRUE }, error = function(e) FALSE)
}

set.seed(1)
x <- array(runif(B * T * C * H * W), dim = c(B, T, C, H, W))
y <- if (fc) array(runif(B * T * C * H * W), dim = c(B, T, C, H, W)) else
  if (plain) array(runif(B * T * 48 * H * W), dim = c(B, T, 48L, H, W)) else
  array(runif(B * 1 * H * W), dim = c(B, 1L, H, W))
invisible(gc())

rss0 <- status_bytes("VmRSS")
hwm_ok <- reset_hwm()

model <- if (fc) {
  convlstm_forecaster(1, c(48, 48), c(5, 5), patch = 4, device = "cpu", dtype = dtype,
                      threads = threads)
} else if (plain) {
  convlstm(input_dim = C, hidden_dims = c(48, 48), kernel_sizes = c(5, 5),
           n_layers = 2, device = "cpu", dtype = dtype, threads = threads)
} else {
  convlstm(input_dim = 1, hidden_dims = c(64, 1), kernel_sizes = c(3, 3),
           n_layers = 2, device = "cpu", dtype = dtype, threads = threads)
}
target <- if (fc || plain) "sequence" else "last_state"
opt <- convlstm_optimizer_adam(lr = 1e-3)
for (i in seq_len(warmup)) loss <- convlstm_train_step(model, x, y, opt, target = target)
times <- numeric(steps)
for (i in seq_len(steps)) {
  t0 <- proc.time()[["elapsed"]]
  loss <- convlstm_train_step(model, x, y, opt, target = target)
  times[i] <- proc.time()[["elapsed"]] - t0
}
rss_peak <- if (hwm_ok) status_bytes("VmHWM") - rss0 else NA
ms <- convlstm_memory_stats(model)
pick <- function(name) {
  v <- tryCatch(ms[[name]], error = function(e) NULL)
  if (is.null(v) || !length(v)) NA else sum(as.numeric(v))
}
cat(sprintf("RESULT impl=convlstm median=%.6f min=%.6f rss_peak=%.0f alloc_peak=%.0f reserved_peak=%.0f steps=%d loss=%.6g backend=%s-%s\n",
            stats::median(times), min(times), rss_peak, pick("peak_allocated"),
            pick("peak_reserved"), steps, loss, model$backend, dtype))
