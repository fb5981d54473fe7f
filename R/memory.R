# memory.R -- what the model's accounting allocator reports: bytes per
# category (parameters, gradients, optimizer, activations, states,
# workspace, data), current and peak, allocation counts, what is reserved
# from the device and what the device has free. The planner's estimates are
# not here (a later issue adds them).

#' Memory held by a model
#'
#' Every byte the model holds on its device goes through one accounting
#' allocator, with a category. `memory_stats()` reports, per category, the
#' bytes held now and at the peak, and how many allocations and frees were
#' made; and in total what is allocated, what the allocator has reserved
#' from the device, the model's `memory_limit`, and the device's free and
#' total memory.
#'
#' @param model A model created by [convlstm()].
#' @return An object of class `convlstm_memory_stats`: a list with
#'   `by_category` (a data frame with columns `category`, `current`, `peak`,
#'   `n_alloc`, `n_free`; bytes), and the numbers `allocated`,
#'   `peak_allocated`, `reserved`, `peak_reserved`, `limit` (0: none),
#'   `device_free` and `device_total` (bytes).
#' @export
#' @examples
#' model <- convlstm(1, c(8, 1), 3, device = "cpu")
#' x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
#' y <- array(runif(2 * 8 * 8), dim = c(2, 1, 8, 8))
#' train_step(model, x, y, optimizer_adam())
#' memory_stats(model)
#' convlstm_release(model)
memory_stats <- function(model) {
  s <- c_memory_stats(model_ptr(model))
  by_category <- data.frame(
    category = s$category, current = s$current, peak = s$peak,
    n_alloc = s$n_alloc, n_free = s$n_free
  )
  structure(
    c(list(by_category = by_category), s[setdiff(names(s), names(by_category))]),
    class = "convlstm_memory_stats"
  )
}

#' @export
print.convlstm_memory_stats <- function(x, ...) {
  cat("<convlstm_memory_stats>\n")
  shown <- x$by_category
  shown$current <- format_bytes(shown$current)
  shown$peak <- format_bytes(shown$peak)
  shown$n_alloc <- format_count(shown$n_alloc)
  shown$n_free <- format_count(shown$n_free)
  print(shown, row.names = FALSE, right = TRUE)
  cat(sprintf("allocated: %s (peak %s)   reserved: %s (peak %s)\n",
              format_bytes(x$allocated), format_bytes(x$peak_allocated),
              format_bytes(x$reserved), format_bytes(x$peak_reserved)))
  cat(sprintf("device: %s free of %s%s\n", format_bytes(x$device_free),
              format_bytes(x$device_total),
              if (x$limit > 0) paste0("   limit: ", format_bytes(x$limit)) else ""))
  invisible(x)
}
