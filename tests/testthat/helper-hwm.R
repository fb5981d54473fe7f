# Skips where the process's resident high-water mark (VmHWM) cannot be
# measured: off Linux, on CRAN, or where /proc/self/clear_refs is missing or
# cannot be written (writing "5" to it resets VmHWM, as the probe scripts in
# scripts/ do before each measured window).
skip_without_hwm_reset <- function() {
  skip_on_cran()
  skip_on_os(c("windows", "mac", "solaris"))
  skip_if_not(file.exists("/proc/self/clear_refs"), "no /proc/self/clear_refs to reset VmHWM")
  ok <- tryCatch({
    writeLines("5", "/proc/self/clear_refs")
    TRUE
  }, error = function(e) FALSE, warning = function(w) FALSE)
  skip_if_not(ok, "cannot reset VmHWM through /proc/self/clear_refs here")
}
