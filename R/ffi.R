# ffi.R -- the only file that calls .Call: one thin wrapper per C entry point
# (src/init.c registers them; useDynLib(.registration = TRUE) makes the
# ffi_* objects). The wrappers coerce types so the glue only ever sees what
# it expects; they do not check user arguments -- the exported functions do,
# with messages that name the argument. Options cross as named lists and
# enums as their names (dtype, device, target, what); src/r_options.c
# decodes them, by the same names.

# geometry: layer_geometry()'s 6 x n_layers matrix (kernel, dilation,
# recurrent kernel);
# peephole: peephole_spec()'s c(kind, height, width);
# dropout, recurrent_dropout: one rate per layer (check_rates());
# dropout_masks: "per_gate" or "shared";
# structure: c(forecaster, patch, head) (convlstm_forecaster(): c(1, patch, 0); a
# plain stack: c(0, 0, 0), with a head c(0, 0, 1)).
# options(convlstm.cuda_graphs = TRUE / FALSE) sets CONVLSTM_CUDA_GRAPHS for
# the creation only (the CUDA backend reads it then; convlstm_memory_stats() says
# what it did); NULL leaves the environment as it is.
c_model_create <- function(input_dim, hidden_dims, geometry, bias, device, dtype,
                           threads, memory_limit, peephole = c(0L, 0L, 0L), dropout = 0,
                           recurrent_dropout = 0, dropout_masks = "per_gate",
                           structure = c(0L, 0L, 0L)) {
  n <- length(hidden_dims)
  graphs <- getOption("convlstm.cuda_graphs")
  if (!is.null(graphs)) {
    old <- Sys.getenv("CONVLSTM_CUDA_GRAPHS", unset = NA)
    Sys.setenv(CONVLSTM_CUDA_GRAPHS = if (isTRUE(graphs)) "1" else "0")
    on.exit(if (is.na(old)) Sys.unsetenv("CONVLSTM_CUDA_GRAPHS")
            else Sys.setenv(CONVLSTM_CUDA_GRAPHS = old))
  }
  .Call(
    ffi_model_create, as.integer(input_dim), as.integer(hidden_dims),
    as.integer(geometry), as.logical(bias), device, dtype,
    as.integer(threads), as.double(memory_limit), as.integer(peephole),
    as.double(rbind(rep_len(dropout, n), rep_len(recurrent_dropout, n))),
    as.character(dropout_masks), as.integer(structure)
  )
}

c_model_release <- function(ptr) .Call(ffi_model_release, ptr)
c_model_status <- function(ptr) .Call(ffi_model_status, ptr)
c_model_config <- function(ptr) user_config(.Call(ffi_model_config, ptr))
c_model_init_params <- function(ptr) invisible(.Call(ffi_model_init_params, ptr))
c_models_alive <- function() .Call(ffi_models_alive)
c_gpu_available <- function() .Call(ffi_gpu_available)
c_gpu_info <- function() .Call(ffi_gpu_info)

c_tensor_info <- function(ptr) .Call(ffi_tensor_info, ptr)
c_get_tensors <- function(ptr, grad = FALSE) .Call(ffi_get_tensors, ptr, isTRUE(grad))
c_set_tensors <- function(ptr, tensors) invisible(.Call(ffi_set_tensors, ptr, tensors))

# what: "all", "sequence", "last_state", "none" or "last_states" (r_forward_what
# in src/r_convlstm.h); options: c_step_options() (NULL: the plain step)
c_forward <- function(ptr, x, training, what, options = NULL) {
  if (isTRUE(training)) options <- with_fixed_masks(options)
  .Call(ffi_forward, ptr, x, isTRUE(training), what, options)
}

c_last_shape <- function(ptr) .Call(ffi_last_shape, ptr)
c_backward <- function(ptr, grad, target) {
  invisible(.Call(ffi_backward, ptr, grad, target))
}
c_mse <- function(ptr, y, target) .Call(ffi_mse, ptr, y, target)
c_zero_grad <- function(ptr) invisible(.Call(ffi_zero_grad, ptr))
c_optimizer_step <- function(ptr, optimizer) {
  invisible(.Call(ffi_optimizer_step, ptr, c_optim(optimizer)))
}
c_optimizer_steps <- function(ptr) .Call(ffi_optimizer_steps, ptr)
c_optimizer_reset <- function(ptr) invisible(.Call(ffi_optimizer_reset, ptr))
c_optim_check <- function(optimizer) invisible(.Call(ffi_optim_check, c_optim(optimizer)))
c_train_step <- function(ptr, x, y, target, optimizer, options = NULL) {
  options <- with_fixed_masks(options)
  watch_skips(ptr, .Call(ffi_train_step, ptr, x, y, target, c_optim(optimizer), options))
}

# c_train_step() in halves, the step on a thread of its own between them
# (R/source_prefetch.R; not with a test's fixed dropout masks).
c_train_step_start <- function(ptr, x, y, target, optimizer, options = NULL, staged = NULL,
                               reserve = FALSE) {
  .Call(ffi_train_step_start, ptr, x, y, target, c_optim(optimizer), options, staged, reserve)
}
c_staged_fill <- function(ptr, x, y, target, spare = NULL, send = FALSE) {
  .Call(ffi_staged_fill, ptr, x, y, target, spare, send)
}
c_staged_unreserve <- function(ptr) invisible(.Call(ffi_staged_unreserve, ptr))
c_staged_layout_bytes <- function(dtype, x_dims, y_dims) {
  .Call(ffi_staged_layout_bytes, dtype, x_dims, y_dims)
}
c_train_step_wait <- function(job) .Call(ffi_train_step_wait, job)
c_train_step_finish <- function(ptr, job) watch_skips(ptr, .Call(ffi_train_step_finish, job))

c_memory_stats <- function(ptr) .Call(ffi_memory_stats, ptr)
c_memory_reset_peak <- function(ptr) invisible(.Call(ffi_memory_reset_peak, ptr))
c_empty_cache <- function(ptr) invisible(.Call(ffi_empty_cache, ptr))
# test-only: one byte past a step buffer, for the guard bands' tests
c_test_overrun <- function(ptr, buffer) invisible(.Call(ffi_test_overrun, ptr, buffer))
# test-only: c(address, bytes) of the step arena (a host backend's)
c_test_arena <- function(ptr) .Call(ffi_test_arena, ptr)
# test-only: the masks a training call of this shape would draw now (the
# same seed from R's stream; src/r_dropout.c, cl_model_dropout_mask), per
# layer the input mask then the h mask, NULL where that rate is 0
c_dropout_draw <- function(ptr, shape) .Call(ffi_dropout_draw, ptr, as.integer(shape))
c_set_memory_limit <- function(ptr, bytes) {
  invisible(.Call(ffi_set_memory_limit, ptr, as.double(bytes)))
}

# shape: c(batch, time, height, width); optimizer NULL: the state the model
# holds. Returns list(name, category, bytes, layer, by_category, total).
# The core's table of buffers: per kind its identifier ("OPT_V"), the name
# of its plan rows and its other name (NA: none).
c_buffer_names <- function() as.data.frame(.Call(ffi_buffer_names), stringsAsFactors = FALSE)
c_model_plan <- function(ptr, shape, training, optimizer = NULL, options = NULL) {
  .Call(
    ffi_model_plan, ptr, as.integer(shape), isTRUE(training),
    if (is.null(optimizer)) NULL else c_optim(optimizer), options
  )
}

# The convolution calls of a step of shape c(batch, time, height, width)
# (core/conv_calls.c): a data frame, one row per layer, half (0: input, 1:
# hidden), direction and shape, with how many times the step runs it.
c_conv_calls <- function(ptr, shape, training, options = NULL, sequence = FALSE) {
  as.data.frame(.Call(ffi_conv_calls, ptr, as.integer(shape), isTRUE(training), options,
                      isTRUE(sequence)), stringsAsFactors = FALSE)
}

c_set_dtype <- function(ptr, dtype) invisible(.Call(ffi_set_dtype, ptr, dtype))
c_loss_scale <- function(ptr) .Call(ffi_loss_scale, ptr)
c_set_loss_scale <- function(ptr, init_scale, growth_factor, backoff_factor, growth_interval) {
  invisible(.Call(ffi_set_loss_scale, ptr, as.double(init_scale), as.double(growth_factor),
                  as.double(backoff_factor), as.integer(growth_interval)))
}

# Model files (src/r_io.c): optimizer NULL or c_optim(); metadata NULL or a
# named character vector.
c_model_save <- function(ptr, path, optimizer, metadata) {
  invisible(.Call(ffi_model_save, ptr, path, if (is.null(optimizer)) NULL else c_optim(optimizer),
                  metadata))
}
# NULL, or why a save cannot write to path (what stands there).
c_save_target_check <- function(path) .Call(ffi_save_target_check, path)
c_file_info <- function(path) {
  info <- .Call(ffi_file_info, path)
  info$config <- user_config(info$config)
  info
}
c_model_load_into <- function(ptr, path, optimizer) {
  .Call(ffi_model_load_into, ptr, path, isTRUE(optimizer))
}

# The storage types' names in cl_dtype order, from the core's one table.
dtypes <- function() .Call(ffi_dtype_names)

# outputs "last_state" keeps only the last states of an inference forward;
# dtype NULL plans for the model's own storage type, a name for another one
# (cl_model_plan only); state_mode "zero", "given" (state: the flat list of
# h and c arrays check_state() returns) or "carry"; horizon: frames an
# inference forward rolls on (read with what = "frames"); recompute_gates:
# 0, or the steps whose gates backward recomputes at once.
c_step_options <- function(checkpoint = 0L, tbptt = 0L, accumulation_steps = 1L,
                           outputs = "all", dtype = NULL, state_mode = "zero", state = NULL,
                           horizon = 0L, max_grad_norm = NULL, loss = NULL, weight = NULL,
                           recompute_gates = 0L) {
  list(
    checkpoint = as.integer(checkpoint), tbptt = as.integer(tbptt),
    accumulation_steps = as.integer(accumulation_steps),
    outputs = if (identical(outputs, "last_state")) "last_state" else "all", dtype = dtype,
    state_mode = state_mode, state = state, horizon = as.integer(horizon),
    max_grad_norm = if (!is.null(max_grad_norm)) as.double(max_grad_norm),
    loss = loss$kind, delta = as.double(loss$delta %||% 1),
    pos_weight = as.double(loss$pos_weight %||% 1), reduction = loss$reduction, weight = weight,
    recompute_gates = as.integer(recompute_gates)
  )
}

c_reset_state <- function(ptr) invisible(.Call(ffi_reset_state, ptr))
c_carried_state <- function(ptr) .Call(ffi_carried_state, ptr)

c_optim <- function(optimizer) {
  betas <- optimizer$betas %||% c(0, 0)
  list(
    kind = optimizer$kind, lr = as.double(optimizer$lr), beta1 = as.double(betas[[1]]),
    beta2 = as.double(betas[[2]]), eps = as.double(optimizer$eps %||% 0),
    momentum = as.double(optimizer$momentum %||% 0),
    weight_decay = as.double(optimizer$weight_decay), amsgrad = isTRUE(optimizer$amsgrad),
    alpha = as.double(optimizer$alpha %||% 0), centered = isTRUE(optimizer$centered)
  )
}

# Data sets on the device (src/r_data.c). rows are R's 1-based indices; the
# glue takes them 0-based.
c_data_create <- function(ptr, x, y, target) .Call(ffi_data_create, ptr, x, y, target)
c_data_release <- function(dptr) .Call(ffi_data_release, dptr)
c_data_status <- function(dptr) .Call(ffi_data_status, dptr)
c_data_info <- function(dptr) .Call(ffi_data_info, dptr)
c_data_alive <- function() .Call(ffi_data_alive)
c_data_bytes_for <- function(ptr, shape, target) {
  .Call(ffi_data_bytes_for, ptr, as.integer(shape), target)
}
# Frame files (src/r_filearray.c): frames are 1-based here, 0-based in C.
c_fa_open <- function(path, verify) .Call(ffi_fa_open, path, verify)
c_fa_close <- function(fa) .Call(ffi_fa_close, fa)
c_fa_info <- function(fa) .Call(ffi_fa_info, fa)
c_fa_read <- function(fa, starts, len) .Call(ffi_fa_read, fa, as.double(starts), as.double(len))
c_fa_writer_open <- function(path, dtype, dims, scale_offset) {
  .Call(ffi_fa_writer_open, path, as.integer(dtype), as.double(dims), as.double(scale_offset))
}
c_fa_writer_append <- function(w, x) .Call(ffi_fa_writer_append, w, x)
c_fa_writer_finish <- function(w) .Call(ffi_fa_writer_finish, w)
c_fa_writer_abort <- function(w) .Call(ffi_fa_writer_abort, w)
c_fa_ahead_new <- function(fa) .Call(ffi_fa_ahead_new, fa)
c_fa_ahead_start <- function(h, slot, starts_x, len_x, starts_y, len_y) {
  .Call(ffi_fa_ahead_start, h, as.integer(slot), as.double(starts_x), as.double(len_x),
        as.double(starts_y), as.double(len_y))
}
c_fa_ahead_wait <- function(h) .Call(ffi_fa_ahead_wait, h)
c_fa_ahead_take <- function(h) .Call(ffi_fa_ahead_take, h)
c_train_step_data <- function(ptr, dptr, rows, optimizer, options = NULL) {
  options <- with_fixed_masks(options)
  watch_skips(ptr, .Call(ffi_train_step_data, ptr, dptr, as.integer(rows) - 1L,
                         c_optim(optimizer), options))
}

# several processes (src/r_dist.c)
c_dist_init <- function(engine, device = 0L) .Call(ffi_dist_init, engine, as.integer(device))
c_dist_info <- function() .Call(ffi_dist_info)
c_dist_available <- function() .Call(ffi_dist_available)
c_grad_buckets <- function(ptr) .Call(ffi_grad_buckets, ptr)
c_dist_broadcast_params <- function(ptr, root = 0L) {
  invisible(.Call(ffi_dist_broadcast_params, ptr, as.integer(root)))
}
c_dist_broadcast_ints <- function(x, root = 0L) {
  .Call(ffi_dist_broadcast_ints, as.integer(x), as.integer(root))
}
c_dist_barrier <- function() invisible(.Call(ffi_dist_barrier))
c_dist_abort <- function(msg) invisible(.Call(ffi_dist_abort, as.character(msg)[1]))
c_dist_finalize <- function() invisible(.Call(ffi_dist_finalize))
c_dist_stats <- function(reset = FALSE) .Call(ffi_dist_stats, isTRUE(reset))

# the capability table (src/r_capability.c): its rows as columns; one option
# asked of a model's kind, refused with the core's class and message
c_capabilities <- function() .Call(ffi_capabilities)
c_model_capability <- function(ptr, option) invisible(.Call(ffi_model_capability, ptr, option))
