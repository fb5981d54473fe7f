# gpu.R -- convlstm_gpu_info(): what the CUDA device and libraries are, for users
# deciding on a device and for bug reports. convlstm_gpu_available() stays in model.R
# beside convlstm(), whose device = "auto" it serves. Nothing here creates a
# model or holds device memory.

#' Describe the CUDA GPU
#'
#' Asks the CUDA driver afresh for the device that `device = "cuda"` would
#' use: its name, compute capability, free and total memory, and the versions
#' of the driver, of the CUDA runtime and of cuDNN. It works in every build:
#' without CUDA support, or without a usable GPU, `available` is `FALSE` and
#' `reason` says why (the versions that could be read are still filled in,
#' since an old driver is the usual reason).
#'
#' The memory figures are the whole device's, as `cudaMemGetInfo()` reports
#' them, including what other processes hold; a model's own use is in
#' [convlstm_memory_stats()].
#'
#' @return A list of class `convlstm_gpu_info` with
#'   * `available`: `TRUE` when a model can be created with `device = "cuda"`
#'     (the same answer as [convlstm_gpu_available()]);
#'   * `reason`: why not (`""` when available);
#'   * `cuda_build`: whether this installation was built with CUDA;
#'   * `device`, `n_devices`: the device's index and how many are visible;
#'   * `name`, `compute_capability` (e.g. `"9.0"`), `multiprocessors`;
#'   * `memory_free`, `memory_total`: bytes;
#'   * `driver_version`: the CUDA version the driver supports (`"13.0"`);
#'   * `runtime_version`: the CUDA runtime in use;
#'   * `cudnn_version`: the cuDNN library loaded, `cudnn_build_version`: the
#'     one the package was compiled against.
#'
#'   Fields that could not be read are `NA`.
#' @seealso [convlstm_gpu_available()], [convlstm_memory_stats()]
#' @export
#' @examples
#' info <- convlstm_gpu_info()
#' info
#' if (info$available) info$name else info$reason
convlstm_gpu_info <- function() {
  structure(c_gpu_info(), class = "convlstm_gpu_info")
}

#' @export
print.convlstm_gpu_info <- function(x, ...) {
  if (isTRUE(x$available)) {
    cat(sprintf("GPU %d: %s (compute capability %s, %d multiprocessors)\n", x$device,
                x$name, x$compute_capability, x$multiprocessors))
    cat(sprintf("memory: %s free of %s\n", format_bytes(x$memory_free),
                format_bytes(x$memory_total)))
  } else {
    cat("no usable GPU: ", x$reason, "\n", sep = "")
  }
  if (isTRUE(x$cuda_build)) {
    na <- function(v) if (is.na(v)) "unknown" else v
    cat(sprintf("CUDA driver %s, runtime %s; cuDNN %s (built with %s)\n", na(x$driver_version),
                na(x$runtime_version), na(x$cudnn_version), na(x$cudnn_build_version)))
  }
  invisible(x)
}
