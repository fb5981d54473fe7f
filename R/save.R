# save.R -- saving a model (and its optimizer) to a safetensors file and
# loading it back, so training resumes exactly where it stopped, and reading
# what a file holds. The file format and its checks are the C core's
# (src/core/model_file_read.c over safetensors.c and json.c); this file checks the
# R arguments and builds the model and optimizer objects.

#' Save and load models
#'
#' `convlstm_save()` writes a model's weights and, with `optimizer`, the
#' optimizer's hyperparameters and state (Adam's moments and step count,
#' SGD's momentum buffer; for float16 models also the loss scale) to a
#' safetensors file (the format of Hugging Face's safetensors library).
#' `convlstm_load()` creates a model from such a file; if the file holds an
#' optimizer, its state is restored inside the model, so that the next
#' [convlstm_train_step()] or [convlstm_fit()] with the saved optimizer continues the
#' saved run exactly: the losses are those of a run that was never
#' interrupted (same data order, same number of threads on the CPU).
#' `convlstm_file_info()` reads a file's description without creating a
#' model.
#'
#' The tensors are named as in [convlstm_state_dict()] (`cell_list.<l>.conv.weight`,
#' `cell_list.<l>.conv.bias`; `conv_x.weight`, `conv_x.bias` and
#' `conv_h.weight` for a layer of two kernels, whose sizes the metadata
#' keeps as `convlstm.recurrent_kernel_sizes` and
#' `convlstm.recurrent_kernel_widths`), float32 in torch's layout, so the file opens
#' in PyTorch with `safetensors.torch.load_file()` and loads into the R
#' torch tutorial's module with `convlstm_load_state_dict()`. Optimizer state is in
#' extra tensors named `optimizer.exp_avg.<name>`,
#' `optimizer.exp_avg_sq.<name>`, `optimizer.momentum_buffer.<name>` (and
#' for RMSprop `optimizer.square_avg.<name>`, `optimizer.grad_avg.<name>`), and
#' the architecture, optimizer and step count in the file's metadata under
#' `convlstm.*` names. Files without that metadata, such as a state dict
#' saved from PyTorch, load too: the architecture is read from the weights'
#' shapes.
#'
#' The file is written to a temporary file in the same directory and renamed
#' over `path` once complete, so an interrupted save never leaves a
#' half-written file. When `path` is a symbolic link (or a chain of them),
#' the file it points to is replaced and the link stays a link; a dangling
#' link gets its file made where it points, as with [saveRDS()]. A `path`
#' that leads to a directory, device, FIFO or socket is refused with an
#' error of class `convlstm_error_invalid` and left as it was. Loading checks the whole file (header, offsets, sizes,
#' names, shapes, finite values) and refuses a damaged or foreign file with an
#' error of class `convlstm_error_invalid`.
#'
#' Models cannot be kept with [saveRDS()]: their memory lives in C. Use these
#' functions instead.
#'
#' @param model A model created by [convlstm()] or `convlstm_load()`.
#' @param path File name; `.safetensors` is the usual extension.
#' @param optimizer `NULL` to save the weights only, or the optimizer
#'   ([convlstm_optimizer_adam()], [convlstm_optimizer_sgd()]) the model is being trained with:
#'   its hyperparameters and the state the model holds for it are saved.
#' @param metadata `NULL`, or a named character vector (or named list of
#'   single strings) of your own entries for the file's metadata, such as
#'   `c(epoch = "12")`. Names `"format"`, `"convlstm.*"` and `"fit.*"` (a
#'   fit checkpoint's state, see [convlstm_callback_model_checkpoint()]) are reserved.
#' @return `convlstm_save()`: `path`, invisibly.
#' @seealso [convlstm_state_dict()] for the weights as R arrays.
#' @export
#' @examples
#' set.seed(1)
#' model <- convlstm(1, c(4, 1), 3, device = "cpu")
#' x <- array(runif(4 * 3 * 6 * 6), dim = c(4, 3, 1, 6, 6))
#' y <- array(runif(4 * 6 * 6), dim = c(4, 1, 6, 6))
#' opt <- convlstm_optimizer_adam(lr = 0.01)
#' convlstm_train_step(model, x, y, opt)
#' path <- tempfile(fileext = ".safetensors")
#' convlstm_save(model, path, optimizer = opt, metadata = c(epoch = "1"))
#' convlstm_file_info(path)$metadata[["epoch"]]
#'
#' resumed <- convlstm_load(path, device = "cpu")
#' opt <- attr(resumed, "optimizer")   # convlstm_optimizer_adam(lr = 0.01)
#' # the same loss as convlstm_train_step(model, x, y, opt) would give
#' convlstm_train_step(resumed, x, y, opt)
#' convlstm_train_step(model, x, y, opt)
#' convlstm_release(model); convlstm_release(resumed); unlink(path)
convlstm_save <- function(model, path, optimizer = NULL, metadata = NULL) {
  ptr <- model_ptr(model)
  call <- sys.call()
  path <- check_path(path, call)
  if (!is.null(optimizer)) optimizer <- check_optimizer(optimizer)
  metadata <- check_metadata(metadata, call)
  c_model_save(ptr, path, optimizer, metadata)
  invisible(path)
}

#' @rdname convlstm_save
#' @param device `"auto"` (a CUDA GPU when one is usable, else the CPU),
#'   `"cpu"`, `"cuda"` or `"cuda:N"` (as in [convlstm()]): where the loaded
#'   model lives, whatever device it was saved from. This is how a model
#'   moves between devices: `convlstm_save(model, path)`, then
#'   `convlstm_load(path, device = "cuda:0")`; an optimizer saved with it
#'   travels too (`with_optimizer`).
#' @param dtype `NULL` for the storage type the model was saved with, or
#'   `"float32"`, `"float16"`, `"bfloat16"` (see [convlstm()]).
#' @param memory_limit,threads As in [convlstm()].
#' @param with_optimizer Restore the optimizer state the file holds
#'   (`TRUE`), or load the weights only (`FALSE`: the next step starts a
#'   fresh optimizer).
#' @return `convlstm_load()`: a model. If the file holds an optimizer, the
#'   model's attribute `"optimizer"` is that optimizer (an
#'   [convlstm_optimizer_adam()] or [convlstm_optimizer_sgd()] with the saved
#'   hyperparameters), to pass to [convlstm_train_step()] or [convlstm_fit()];
#'   otherwise it is `NULL`. The attribute `"metadata"` holds the file's own
#'   metadata entries (those that `convlstm_save()` was given) as a named
#'   character vector.
#' @export
convlstm_load <- function(path, device = "auto", dtype = NULL, memory_limit = NULL,
                          threads = NULL, with_optimizer = TRUE) {
  call <- sys.call()
  path <- check_path(path, call, must_exist = TRUE)
  device <- resolve_device(device, call)
  if (!is.null(dtype)) dtype <- check_choice(dtype, dtypes(), "dtype")
  memory_limit <- parse_bytes(memory_limit, "memory_limit", call)
  threads <- check_threads(threads, call)
  with_optimizer <- check_flag(with_optimizer, "with_optimizer")
  info <- c_file_info(path)
  config <- info$config
  ptr <- with_model_options(call, c_model_create(
    config$input_dim, config$hidden_dims, config$geometry, config$bias,
    device = device,
    dtype = dtype %||% config$dtype, threads = threads,
    memory_limit = memory_limit, peephole = config$peephole_spec,
    dropout = config$dropout, recurrent_dropout = config$recurrent_dropout,
    dropout_masks = config$dropout_masks,
    structure = c(as.integer(isTRUE(config$forecaster)), config$patch %||% 1L,
                  as.integer(isTRUE(config$head)))
  ))
  # The file is read again into the model; the glue checks that it still
  # has this architecture.
  info <- c_model_load_into(ptr, path, with_optimizer)
  model <- new_convlstm_model(ptr)
  attr(model, "optimizer") <- if (with_optimizer) saved_optimizer(info) else NULL
  attr(model, "metadata") <- user_metadata(info$metadata)
  model
}

#' @rdname convlstm_save
#' @return `convlstm_file_info()`: a list with `config` (`input_dim`,
#'   `hidden_dims`, `kernel_sizes`, `recurrent_kernel_sizes`, `dilation`,
#'   `n_layers`, `bias`, `dtype`), `optimizer`
#'   (as for `convlstm_load()`, or `NULL`), `optimizer_steps`, `loss_scale`
#'   (`NULL` unless a float16 model was saved with its optimizer), `metadata`
#'   (your entries), `all_metadata` (every entry, convlstm's included) and
#'   `tensors` (a data frame: `name`, `dtype`, `shape`), of class
#'   `convlstm_file_info`, which prints a few lines: kind, layers, format
#'   version, parameters (count and bytes), optimizer, metadata and the
#'   first tensors.
#' @export
convlstm_file_info <- function(path) {
  path <- check_path(path, sys.call(), must_exist = TRUE)
  info <- c_file_info(path)
  tensors <- data.frame(name = info$tensors$name, dtype = info$tensors$dtype)
  tensors$shape <- vapply(info$tensors$shape, format_dims, character(1))
  structure(list(
    config = info$config,
    optimizer = saved_optimizer(info),
    optimizer_steps = info$optimizer_steps,
    loss_scale = info$loss_scale,
    metadata = user_metadata(info$metadata),
    all_metadata = info$metadata,
    tensors = tensors
  ), class = "convlstm_file_info")
}

# A file's description in a few lines: what the file holds (kind, layers,
# format version), the parameters (count and bytes, from the tensors'
# shapes and types), the optimizer, the user's metadata and the first
# tensors, then how many more.
#' @export
print.convlstm_file_info <- function(x, n = 6, ...) {
  cfg <- x$config
  meta <- x$all_metadata
  t <- x$tensors
  elements <- vapply(strsplit(gsub("[][ ]", "", t$shape), ",", fixed = TRUE),
                     function(d) prod(as.numeric(d)), numeric(1))
  size <- c(F64 = 8, F32 = 4, F16 = 2, BF16 = 2)[t$dtype]
  model <- !startsWith(t$name, "optimizer.")
  n_params <- sum(elements[model])
  cat(sprintf("<convlstm_file_info> %s, format version %s\n",
              if (isTRUE(cfg$forecaster)) "encoder-forecaster" else "ConvLSTM stack",
              meta[["convlstm.format_version"]] %||% "unknown"))
  cat(sprintf("  %s (hidden %s), %d input channel%s, %s\n", layers_text(cfg),
              paste(model_layers(cfg, "hidden_dims"), collapse = ", "), cfg$input_dim,
              if (cfg$input_dim == 1) "" else "s", cfg$dtype))
  cat(sprintf("  parameters: %s (%s)\n", format_count(n_params),
              format_bytes(sum((elements * size)[model]))))
  opt <- x$optimizer
  cat(sprintf("  optimizer: %s\n", if (is.null(opt)) "none saved" else {
    sprintf("%s, lr %s, %s step%s", opt$kind, format(opt$lr), format_count(x$optimizer_steps),
            if (identical(as.numeric(x$optimizer_steps), 1)) "" else "s")
  }))
  if (!is.null(x$loss_scale)) cat(sprintf("  loss scale: %s\n", format(x$loss_scale)))
  if (length(x$metadata) > 0) {
    cat(sprintf("  metadata: %s\n", paste(names(x$metadata), collapse = ", ")))
  }
  cat(sprintf("  tensors: %d\n", nrow(t)))
  shown <- utils::head(t, n)
  print(shown, row.names = FALSE, right = FALSE)
  if (nrow(t) > nrow(shown)) cat(sprintf("  ... %d more\n", nrow(t) - nrow(shown)))
  invisible(x)
}

# list(kind, lr, beta1, beta2, eps, momentum, weight_decay, amsgrad, alpha,
# centered) from the
# glue (r_optim_list), as an optimizer object; the values are exactly the
# saved ones.
saved_optimizer <- function(info) {
  v <- info$optimizer
  if (is.null(v)) return(NULL)
  if (v$kind %in% c("adam", "adamw")) {
    make <- if (identical(v$kind, "adam")) convlstm_optimizer_adam else convlstm_optimizer_adamw
    make(lr = v$lr, betas = c(v$beta1, v$beta2), eps = v$eps, weight_decay = v$weight_decay,
         amsgrad = isTRUE(v$amsgrad))
  } else if (identical(v$kind, "rmsprop")) {
    convlstm_optimizer_rmsprop(lr = v$lr, alpha = v$alpha, eps = v$eps, weight_decay = v$weight_decay,
                      momentum = v$momentum, centered = isTRUE(v$centered))
  } else {
    convlstm_optimizer_sgd(lr = v$lr, momentum = v$momentum, weight_decay = v$weight_decay)
  }
}

user_metadata <- function(meta) {
  keep <- names(meta) != "format" & !startsWith(names(meta), "convlstm.")
  meta[keep]
}

check_path <- function(path, call, must_exist = FALSE) {
  if (!is.character(path) || length(path) != 1 || is.na(path) || !nzchar(path)) {
    abort_arg("path", "a single file name", path, call)
  }
  path <- path.expand(path)
  if (must_exist && !file.exists(path)) {
    abort_convlstm(sprintf("`path` names no file: '%s' does not exist.", path), call = call)
  }
  if (must_exist && dir.exists(path)) {
    abort_convlstm(sprintf("`path` must name a file, not the directory '%s'.", path), call = call)
  }
  if (!must_exist && !dir.exists(dirname(path))) {
    abort_convlstm(sprintf("`path`'s directory '%s' does not exist.", dirname(path)), call = call)
  }
  # Symbolic links are followed; what they lead to must be a file or nothing.
  why <- if (!must_exist) c_save_target_check(path)
  if (!is.null(why)) {
    abort_convlstm(sprintf("`path` must name a regular file or a new one; %s.", why), call = call)
  }
  path
}

check_metadata <- function(metadata, call) {
  if (is.null(metadata)) return(NULL)
  ok_list <- is.list(metadata) &&
    all(vapply(metadata, function(v) is.character(v) && length(v) == 1, logical(1)))
  if (!(is.character(metadata) || ok_list) || length(metadata) == 0 || is.null(names(metadata))) {
    abort_arg("metadata", "NULL or a named character vector such as c(epoch = \"12\")",
              metadata, call)
  }
  values <- vapply(metadata, function(v) v[[1]], character(1))
  keys <- names(metadata)
  if (anyNA(values) || anyNA(keys) || any(!nzchar(keys)) || anyDuplicated(keys)) {
    abort_convlstm("`metadata` must have unique, non-empty names and no NA values.", call = call)
  }
  # bytes-encoded strings cannot be translated to the file's UTF-8 (enc2utf8
  # below would stop with an unclassed error)
  if (any(Encoding(c(values, keys)) == "bytes")) {
    abort_convlstm(
      "`metadata` names and values must be text that converts to UTF-8, not strings marked as \"bytes\".",
      call = call
    )
  }
  # fit.*: a fit checkpoint's state (convlstm_callback_model_checkpoint()), which
  # convlstm_fit(resume = ) trusts
  reserved <- keys == "format" | startsWith(keys, "convlstm.") | startsWith(keys, "fit.")
  if (any(reserved)) {
    abort_convlstm(sprintf(
      "`metadata` names %s are reserved (convlstm writes \"format\", \"convlstm.*\" and \"fit.*\" itself).",
      paste0('"', keys[reserved], '"', collapse = ", ")
    ), call = call)
  }
  stats::setNames(enc2utf8(unname(values)), enc2utf8(keys))
}
