# fit-budget-probe.R -- convlstm_fit(memory_budget = ) in a fresh R process,
# measured by the operating system: the growth of the process's resident
# high-water mark (VmHWM, reset through /proc/self/clear_refs) over a fit
# whose validation frames are larger than the training frames and whose
# data set data_on_device = "auto" may upload, for test-fit-budget.R.
#
#   Rscript fit-budget-probe.R LIB OUT extra n batch H W vH vW [data_on_device]
#
# The budget is the plain float32 training step's reserved bytes (at `batch`
# of HxW) plus `extra` bytes. Writes one line of key=value to OUT: growth
# (bytes), budget (bytes),
# r_bytes (what R itself allocates inside the window, an upper bound from the
# shapes: a validation batch sliced and its predictions, and a training
# batch sliced, as doubles), data_on_device, and the estimate of a
# validation batch of all the validation samples (val_all), for the test to
# check that the case is one the budget must act on.
args <- commandArgs(trailingOnly = TRUE)
lib <- args[[1]]
out <- args[[2]]
num <- as.numeric(args[3:9])
names(num) <- c("extra", "n", "batch", "H", "W", "vH", "vW")
dod <- if (length(args) > 9 && args[[10]] == "FALSE") FALSE else "auto"
suppressPackageStartupMessages(library(convlstm, lib.loc = lib))
status <- function() {
  l <- readLines("/proc/self/status")
  kb <- function(key) {
    as.numeric(sub("^[^0-9]*([0-9]+).*$", "\\1", grep(paste0("^", key, ":"), l, value = TRUE)))
  }
  c(rss = kb("VmRSS") * 1024, hwm = kb("VmHWM") * 1024)
}
set.seed(3)
T <- 4L
n <- num[["n"]]
H <- num[["H"]]
W <- num[["W"]]
vH <- num[["vH"]]
vW <- num[["vW"]]
x <- array(runif(n * T * H * W), c(n, T, 1L, H, W))
y <- array(runif(n * H * W), c(n, 1L, H, W))
vx <- array(runif(n * T * vH * vW), c(n, T, 1L, vH, vW))
vy <- array(runif(n * vH * vW), c(n, 1L, vH, vW))
# warm-up: R's code, the OpenMP threads and a fit's own R objects are the
# process's, paid before the window
w <- convlstm(1, c(2, 1), 1, device = "cpu", threads = 1)
small <- function(a) {
  if (length(dim(a)) == 5) a[1:2, , , 1:4, 1:4, drop = FALSE] else a[1:2, , 1:4, 1:4, drop = FALSE]
}
invisible(convlstm_fit(w, small(x), small(y), convlstm_optimizer_adam(), epochs = 1, verbose = FALSE,
                       validation_data = list(small(vx), small(vy))))
convlstm_release(w)
model <- convlstm(1, c(8, 1), 3, device = "cpu", threads = 1)
# the advisor's rates, measured once per machine (?convlstm_memory_advise: its
# calibration models are outside any budget) and stored: measured in another
# process when the test's cache folder is new, so that this one reads them
# as every later process on a machine does (calibrating in this process
# before the window still left the fit's growth at 15 MiB against 7 MiB)
calibrate <- sprintf(paste0("suppressPackageStartupMessages(library(convlstm, lib.loc = %s)); ",
                            "invisible(convlstm_memory_advise(convlstm(1, c(8, 1), 3, device = 'cpu', ",
                            "threads = 1), 2^30, 1L, 4L, 8L, 8L))"), deparse(lib))
system2(file.path(R.home("bin"), "Rscript"), c("-e", shQuote(calibrate)))
step <- convlstm_memory_estimate(model, num[["batch"]], T, H, W, optimizer = convlstm_optimizer_adam())
budget <- step$bytes[step$category == "reserved"] + num[["extra"]]
val_all <- convlstm_memory_estimate(model, n, T, vH, vW, training = FALSE, outputs = "last_state")
invisible(gc())
writeLines("5", "/proc/self/clear_refs")
s0 <- status()
h <- convlstm_fit(model, x, y, convlstm_optimizer_adam(), epochs = 1, batch_size = num[["batch"]],
                  memory_budget = budget, validation_data = list(vx, vy), verbose = FALSE,
                  shuffle = FALSE, data_on_device = dod)
s1 <- status()
# R's own arrays inside the window, at most: a validation batch of x, its
# prediction, y's slice and the loss's temporaries; a training batch of x and
# y (doubles)
b <- num[["batch"]]
r_bytes <- 8 * (b * T * vH * vW + 4 * b * vH * vW + b * T * H * W + 4 * b * H * W)
writeLines(paste0("growth=", s1[["hwm"]] - s0[["rss"]], " budget=", budget,
                  " r_bytes=", r_bytes, " data_on_device=", attr(h, "data_on_device"),
                  " val_all=", val_all$bytes[val_all$category == "reserved"]), out)
