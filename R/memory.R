# memory.R -- what the model's accounting allocator reports and the knobs on
# it: bytes per category (parameters, gradients, optimizer, activations,
# states, workspace, data), current and peak, allocation counts, what is
# reserved from the device and what the device has free (convlstm_memory_stats(),
# convlstm_memory_summary()); resetting the peaks, giving the step buffers back and
# the memory limit. Estimates from the memory plan are in estimate.R, runs
# over batch sizes in profile.R.

mem_categories <- c("parameters", "gradients", "optimizer", "activations", "states",
                    "workspace", "data")

#' Memory held by a model
#'
#' Every byte the model holds on its device goes through one accounting
#' allocator, with a category. `convlstm_memory_stats()` reports, per category, the
#' bytes held now and at the peak, and how many allocations and frees were
#' made; and in total what is allocated, what the allocator has reserved
#' from the device, the model's `memory_limit`, and the device's free and
#' total memory.
#'
#' The categories: `parameters` (the weights, float32), `gradients` (one
#' float32 per parameter), `optimizer` (Adam's two moments or SGD's momentum
#' buffer), `activations` (what a training forward keeps for backward: gate
#' activations, cell and hidden states per time step, and checkpointed
#' states; and the output sequences an inference forward returns), `states`
#' (the running h and c of an inference forward, and the state truncated
#' backpropagation carries between windows), `workspace` (convolution workspace,
#' gradients of activations, temporaries) and `data` (the batch's inputs
#' and targets on the device).
#'
#' Peaks run from the model's creation or the last
#' [convlstm_reset_peak_memory_stats()]. On the CPU, "device" memory is the
#' machine's: the total is the `memory_limit` if one is set, else physical
#' memory.
#'
#' **Planned and measured.** The per-category numbers are the allocator's:
#' it counts what the plan asked for, so they equal [convlstm_memory_estimate()] by
#' construction. What the memory costs is measured apart, by the operating
#' system and the driver, and reported beside them: `process_rss` and
#' `process_peak` are the whole R process's resident memory now and its
#' high-water mark (`VmRSS` and `VmHWM` of `/proc/self/status`; `NA` where
#' the platform has no `/proc`, with the reason in `measured_note`); on a GPU
#' `device_used` is the device memory in use as the driver reports it
#' (`cudaMemGetInfo`: total - free, all processes on the device) and
#' `device_used_change` how much it changed since the model was created
#' (`NA` on the CPU, whose "device" is the host: there `process_rss` is the
#' measure). These count everything, not only the model: R's own objects,
#' other models, and on a GPU other processes. The test suite compares them
#' with the plan in fresh processes (`test-memory-measured.R`).
#'
#' @param model A model created by [convlstm()].
#' @return An object of class `convlstm_memory_stats`: a list with
#'   `by_category` (a data frame with columns `category`, `current`, `peak`,
#'   `n_alloc`, `n_free`; bytes), and the numbers `allocated`,
#'   `peak_allocated`, `reserved`, `peak_reserved`, `limit` (0: none),
#'   `device_free` and `device_total` (bytes), all planned (counted by the
#'   allocator); and measured: `process_rss`, `process_peak`, `device_used`,
#'   `device_used_change` (bytes, `NA` where not measurable),
#'   `measured_note` (why a measure is `NA`; `""` when none is) and
#'   `runtime` (the process's device memory outside every model, measured
#'   once per process: see [convlstm_memory_estimate()]; 0 on the CPU), and
#'   `cuda_graphs`: what one-graph-per-training-step did (a list: `asked`,
#'   `on`, the steps `captured`, `replayed` and run `plain`, graphs `held`,
#'   the device `bytes` their instantiation took as the driver's free memory
#'   fell -- outside the allocator and the plan -- and `off`, why graphs were
#'   turned off, `""` if not: a step that could not be captured, or a
#'   data-parallel fit on several ranks). Graphs are asked for with the environment
#'   variable `CONVLSTM_CUDA_GRAPHS=1` or `options(convlstm.cuda_graphs =
#'   TRUE)` when the model is created (off by default: not yet verified on a
#'   GPU); all zero on the CPU.
#'   `as.data.frame()` gives `by_category` with the totals as attributes.
#' @seealso [convlstm_memory_summary()] for a printed table, [convlstm_memory_estimate()] for
#'   what a step will take before running it.
#' @export
#' @examples
#' model <- convlstm(1, c(8, 1), 3, device = "cpu")
#' x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
#' y <- array(runif(2 * 8 * 8), dim = c(2, 1, 8, 8))
#' convlstm_train_step(model, x, y, convlstm_optimizer_adam())
#' convlstm_memory_stats(model)
#' convlstm_release(model)
convlstm_memory_stats <- function(model) {
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
as.data.frame.convlstm_memory_stats <- function(x, ...) {
  df <- x$by_category
  for (name in setdiff(names(x), "by_category")) attr(df, name) <- x[[name]]
  df
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
  cat(measured_line(x), "\n", sep = "")
  g <- x$cuda_graphs
  if (isTRUE(g$asked))
    cat(sprintf("cuda graphs: %s; %s steps captured, %s replayed, %s plain; %d held, %s%s\n",
                if (g$on) "on" else "off", format_count(g$captured), format_count(g$replayed),
                format_count(g$plain), g$held, format_bytes(g$bytes),
                if (nzchar(g$off)) paste0(" (turned off: ", g$off, ")") else ""))
  invisible(x)
}

#' A printed table of a model's memory
#'
#' The numbers of [convlstm_memory_stats()] as one table, in the spirit of torch's
#' `cuda_memory_summary()`: per category the bytes held now and at the
#' peak and the number of allocations and frees; then allocated and
#' reserved memory, the memory limit and the device's free and total memory.
#'
#' Two columns: `Planned` is the allocator's count of what the plan took
#' (as [convlstm_memory_estimate()] said before the step), `Measured` what the
#' operating system or the driver reports (see [convlstm_memory_stats()]): the
#' process's resident memory and its high-water mark, and on a GPU the
#' device memory in use and its change since the model was created.
#'
#' @param model A model created by [convlstm()].
#' @return The table as a single string, invisibly (it is printed).
#' @export
#' @examples
#' model <- convlstm(1, c(8, 1), 3, device = "cpu")
#' x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
#' y <- array(runif(2 * 8 * 8), dim = c(2, 1, 8, 8))
#' convlstm_train_step(model, x, y, convlstm_optimizer_adam())
#' convlstm_memory_summary(model)
#' convlstm_release(model)
convlstm_memory_summary <- function(model) {
  ptr <- model_ptr(model)
  s <- convlstm_memory_stats(model)
  config <- c_model_config(ptr)
  text <- format_memory_summary(s, config)
  cat(text, "\n", sep = "")
  invisible(text)
}

format_memory_summary <- function(s, config) {
  width <- 75L
  rule <- function(ch) paste0("|", strrep(ch, width), "|")
  line <- function(txt) paste0("|", formatC(txt, width = -width), "|")
  centre <- function(txt) {
    pad <- max(0L, width - nchar(txt))
    line(paste0(strrep(" ", pad %/% 2), txt))
  }
  row <- function(label, ...) {
    cells <- vapply(list(...), function(v) formatC(v, width = 10), character(1))
    paste0("| ", formatC(label, width = -21), " | ", paste(cells, collapse = " | "), " |")
  }
  by <- s$by_category
  lines <- c(
    rule("="),
    centre(sprintf("convlstm memory summary, device %s (backend %s, %s)", config$device,
                   config$backend, config$dtype)),
    rule("-"),
    row("Category", "Cur Usage", "Peak Usage", "Allocs", "Frees"),
    rule("-"),
    vapply(seq_len(nrow(by)), function(i) {
      row(by$category[[i]], format_bytes(by$current[[i]]), format_bytes(by$peak[[i]]),
          format_count(by$n_alloc[[i]]), format_count(by$n_free[[i]]))
    }, character(1)),
    rule("-"),
    row("Allocated memory", format_bytes(s$allocated), format_bytes(s$peak_allocated),
        format_count(sum(by$n_alloc)), format_count(sum(by$n_free))),
    row("Reserved memory", format_bytes(s$reserved), format_bytes(s$peak_reserved), "", ""),
    rule("-"),
    row("Memory limit", if (s$limit > 0) format_bytes(s$limit) else "none", "", "", ""),
    row("Device free / total", format_bytes(s$device_free), format_bytes(s$device_total),
        "", ""),
    rule("-"),
    row("Planned vs measured", "Planned", "Measured", "", ""),
    row("Held now", format_bytes(s$reserved), measured_bytes(s$process_rss), "", ""),
    row("High-water mark", format_bytes(s$peak_reserved), measured_bytes(s$process_peak), "", ""),
    if (!is.na(s$device_used)) {
      c(row("Device in use", format_bytes(s$reserved), format_bytes(s$device_used), "", ""),
        row("... since creation", format_bytes(s$reserved), measured_bytes(s$device_used_change),
            "", ""))
    },
    line(" Planned: the model's allocator. Measured: the whole process (VmRSS/VmHWM)"),
    line(if (nzchar(s$measured_note)) paste0(" ", s$measured_note)
         else " or the device (driver), R's own objects included."),
    rule("=")
  )
  paste(lines, collapse = "\n")
}

# Measured bytes, or why there are none.
measured_bytes <- function(x) {
  if (is.na(x)) "n/a" else if (x < 0) paste0("-", format_bytes(-x)) else format_bytes(x)
}

measured_line <- function(x) {
  txt <- sprintf("measured: process resident %s (high-water %s)", measured_bytes(x$process_rss),
                 measured_bytes(x$process_peak))
  if (!is.na(x$device_used)) {
    txt <- paste0(txt, sprintf("   device in use %s (%s since the model was created)",
                               format_bytes(x$device_used), measured_bytes(x$device_used_change)))
  }
  if (nzchar(x$measured_note)) txt <- paste0(txt, "\n  (", x$measured_note, ")")
  txt
}

#' Reset peaks and give back step memory
#'
#' `convlstm_reset_peak_memory_stats()` starts the peaks of [convlstm_memory_stats()] afresh
#' from what is held now (as torch's `cuda_reset_peak_memory_stats()`), so
#' the peak of the next step can be read on its own. `convlstm_empty_cache()` gives
#' back the buffers of the last step (activations, states, workspace, data);
#' parameters, gradients and optimizer state stay. The next step plans and
#' allocates again. A model's memory is otherwise kept between steps of the
#' same shape, so no allocation happens inside a training loop.
#'
#' @param model A model created by [convlstm()].
#' @return `model`, invisibly.
#' @export
#' @examples
#' model <- convlstm(1, c(8, 1), 3, device = "cpu")
#' x <- array(runif(2 * 3 * 8 * 8), dim = c(2, 3, 1, 8, 8))
#' y <- array(runif(2 * 8 * 8), dim = c(2, 1, 8, 8))
#' convlstm_train_step(model, x, y, convlstm_optimizer_adam())
#' convlstm_memory_stats(model)$allocated
#' convlstm_empty_cache(model)
#' convlstm_memory_stats(model)$allocated    # parameters, gradients, optimizer state
#' convlstm_reset_peak_memory_stats(model)
#' convlstm_memory_stats(model)$peak_allocated
#' convlstm_release(model)
convlstm_reset_peak_memory_stats <- function(model) {
  c_memory_reset_peak(model_ptr(model))
  invisible(model)
}

#' @rdname convlstm_reset_peak_memory_stats
#' @export
convlstm_empty_cache <- function(model) {
  c_empty_cache(model_ptr(model))
  invisible(model)
}

#' Limit the memory a model may hold
#'
#' Sets the most memory the model's allocator may reserve on its device, on
#' any device. An allocation beyond it fails with an error of class
#' `convlstm_error_oom`, in the form "out of memory: tried to allocate ...
#' (device ...; ... total capacity; ... already allocated; ... free; ...
#' reserved)", and the model stays usable: a smaller batch then trains. On
#' the CPU a limit stands in for a small GPU. `convlstm(memory_limit = )`
#' sets it at creation.
#'
#' A limit below what the model holds now takes effect at its next
#' allocation; nothing held is given back (see [convlstm_empty_cache()]).
#'
#' @param model A model created by [convlstm()].
#' @param bytes `NULL` (no limit beyond the device's capacity), or the limit
#'   in bytes, or as a string with a unit: `"512 MiB"`, `"2 GiB"`, `"1.5GB"`
#'   (KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB, TB of 1000).
#' @return `model`, invisibly.
#' @seealso [convlstm_max_batch_size()] for the largest batch under a limit.
#' @export
#' @examples
#' model <- convlstm(1, c(8, 1), 3, device = "cpu")
#' convlstm_set_memory_limit(model, "64 KiB")
#' x <- array(runif(32 * 4 * 16 * 16), dim = c(32, 4, 1, 16, 16))
#' y <- array(runif(32 * 16 * 16), dim = c(32, 1, 16, 16))
#' err <- tryCatch(convlstm_train_step(model, x, y, convlstm_optimizer_adam()),
#'                 convlstm_error_oom = function(e) e)
#' conditionMessage(err)
#' convlstm_set_memory_limit(model, NULL)
#' convlstm_train_step(model, x, y, convlstm_optimizer_adam())
#' convlstm_release(model)
convlstm_set_memory_limit <- function(model, bytes) {
  ptr <- model_ptr(model)
  bytes <- parse_bytes(bytes, "bytes", sys.call())
  c_set_memory_limit(ptr, bytes)
  invisible(model)
}
