# calibration-probe.R -- the memory of convlstm_memory_advise()'s first calibration
# on this machine, in a fresh R process: the growth of the resident
# high-water mark (VmHWM, reset through /proc/self/clear_refs) over the
# measurement of the rates that convlstm_memory_advise() makes when none are stored
# (backend_rates(); R_USER_CACHE_DIR must name an empty folder), beside the
# bound ?convlstm_memory_advise states (calibration_bytes(): the largest calibration
# step's plan plus the calibration's data). The advisor's own work (its
# plans of every configuration) is not in the window.
#
#   Rscript calibration-probe.R LIB OUT
# Writes one line: growth=... bound=... stored=...
args <- commandArgs(trailingOnly = TRUE)
lib <- args[[1]]
out <- args[[2]]
suppressPackageStartupMessages(library(convlstm, lib.loc = lib))
ns <- asNamespace("convlstm")
status <- function(key) {
  l <- readLines("/proc/self/status")
  as.numeric(sub("^[^0-9]*([0-9]+).*$", "\\1", grep(paste0("^", key, ":"), l, value = TRUE))) *
    1024
}
model <- convlstm(1, c(8, 1), 3, device = "cpu", threads = 1)
opt <- convlstm_optimizer_adam()
# warm-up: the process's own costs (the package's code, the thread pool,
# each dtype's and kernel size's first use), paid before the window by tiny
# steps of the kinds the calibration runs
x <- array(runif(2 * 2 * 8 * 8), c(2, 2, 1, 8, 8))
y <- array(runif(2 * 8 * 8), c(2, 1, 8, 8))
invisible(convlstm_train_step(model, x, y, opt))
for (dtype in c("float32", "float16", "bfloat16")) {
  for (k in c(1, 3)) {
    w <- convlstm(1, 1, k, device = "cpu", dtype = dtype, threads = 1)
    invisible(convlstm_train_step(w, x, y, convlstm_optimizer_adam(), accumulation_steps = 2))
    convlstm_release(w)
  }
}
config <- ns$c_model_config(ns$model_ptr(model))
bound <- ns$calibration_bytes(config)
# and the rates' key and file, which read the machine's description and
# the package's: R's costs, not the calibration's
invisible(ns$read_rates_file())
invisible(ns$rates_key(config))
invisible(gc())
r0 <- status("VmRSS")
writeLines("5", "/proc/self/clear_refs")
invisible(ns$backend_rates(config))
growth <- status("VmHWM") - r0
stored <- file.exists(ns$rates_file())
writeLines(sprintf("growth=%.0f bound=%.0f stored=%d", growth, bound, stored), out)
