/*
 * init.c -- registers the glue's .Call entry points with R, and the core's
 * public functions as C callables for other packages (convlstm_api.h).
 *
 * Exact arity for every entry, no dynamic symbol lookup, and forced symbols,
 * so R code can only reach them as .Call(ffi_xxx, ...) through the objects
 * that useDynLib(convlstm, .registration = TRUE) creates (R/ffi.R makes every
 * such call). It is not where anything else happens at load time.
 */
#include <R_ext/Rdynload.h>   /* R_CallMethodDef, R_registerRoutines */
#include <R_ext/Visibility.h> /* attribute_visible */

#include "r_convlstm.h"
#include "convlstm_api.h" /* CONVLSTM_API_FUNCTIONS: the C callables other packages use */

/* The detour through void (*)(void), the type gcc treats as matching every
 * function, keeps -Wextra's -Wcast-function-type quiet about the table. */
#define CALLDEF(name, n) {#name, (DL_FUNC)(void (*)(void))&name, n}

static const R_CallMethodDef call_entries[] = {
    CALLDEF(ffi_model_create, 12),
    CALLDEF(ffi_dropout_draw, 2),
    CALLDEF(ffi_model_release, 1),
    CALLDEF(ffi_model_status, 1),
    CALLDEF(ffi_model_config, 1),
    CALLDEF(ffi_dtype_names, 0),
    CALLDEF(ffi_model_init_params, 1),
    CALLDEF(ffi_models_alive, 0),
    CALLDEF(ffi_gpu_available, 0),
    CALLDEF(ffi_gpu_info, 0),
    CALLDEF(ffi_tensor_info, 1),
    CALLDEF(ffi_get_tensors, 2),
    CALLDEF(ffi_set_tensors, 2),
    CALLDEF(ffi_forward, 5),
    CALLDEF(ffi_last_shape, 1),
    CALLDEF(ffi_backward, 3),
    CALLDEF(ffi_mse, 3),
    CALLDEF(ffi_zero_grad, 1),
    CALLDEF(ffi_optimizer_step, 2),
    CALLDEF(ffi_optimizer_steps, 1),
    CALLDEF(ffi_optimizer_reset, 1),
    CALLDEF(ffi_optim_check, 1),
    CALLDEF(ffi_train_step, 6),
    CALLDEF(ffi_train_step_start, 8),
    CALLDEF(ffi_staged_fill, 6),
    CALLDEF(ffi_staged_unreserve, 1),
    CALLDEF(ffi_staged_layout_bytes, 3),
    CALLDEF(ffi_train_step_wait, 1),
    CALLDEF(ffi_train_step_finish, 1),
    CALLDEF(ffi_reset_state, 1),
    CALLDEF(ffi_carried_state, 1),
    CALLDEF(ffi_memory_stats, 1),
    CALLDEF(ffi_memory_reset_peak, 1),
    CALLDEF(ffi_empty_cache, 1),
    CALLDEF(ffi_test_overrun, 2),
    CALLDEF(ffi_test_arena, 1),
    CALLDEF(ffi_model_plan, 5),
    CALLDEF(ffi_conv_calls, 5),
    CALLDEF(ffi_buffer_names, 0),
    CALLDEF(ffi_capabilities, 0),
    CALLDEF(ffi_model_capability, 2),
    CALLDEF(ffi_grad_buckets, 1),
    CALLDEF(ffi_dist_init, 2),
    CALLDEF(ffi_dist_info, 0),
    CALLDEF(ffi_dist_available, 0),
    CALLDEF(ffi_dist_broadcast_params, 2),
    CALLDEF(ffi_dist_broadcast_ints, 2),
    CALLDEF(ffi_dist_barrier, 0),
    CALLDEF(ffi_dist_abort, 1),
    CALLDEF(ffi_dist_finalize, 0),
    CALLDEF(ffi_dist_stats, 1),
    CALLDEF(ffi_set_memory_limit, 2),
    CALLDEF(ffi_set_dtype, 2),
    CALLDEF(ffi_loss_scale, 1),
    CALLDEF(ffi_set_loss_scale, 5),
    CALLDEF(ffi_model_save, 4),
    CALLDEF(ffi_save_target_check, 1),
    CALLDEF(ffi_file_info, 1),
    CALLDEF(ffi_model_load_into, 3),
    CALLDEF(ffi_data_create, 4),
    CALLDEF(ffi_data_release, 1),
    CALLDEF(ffi_data_status, 1),
    CALLDEF(ffi_data_info, 1),
    CALLDEF(ffi_data_alive, 0),
    CALLDEF(ffi_data_bytes_for, 3),
    CALLDEF(ffi_train_step_data, 5),
    CALLDEF(ffi_fa_open, 2),
    CALLDEF(ffi_fa_close, 1),
    CALLDEF(ffi_fa_info, 1),
    CALLDEF(ffi_fa_read, 3),
    CALLDEF(ffi_fa_writer_open, 4),
    CALLDEF(ffi_fa_writer_append, 2),
    CALLDEF(ffi_fa_writer_finish, 1),
    CALLDEF(ffi_fa_writer_abort, 1),
    CALLDEF(ffi_fa_ahead_new, 1),
    CALLDEF(ffi_fa_ahead_start, 6),
    CALLDEF(ffi_fa_ahead_wait, 1),
    CALLDEF(ffi_fa_ahead_take, 1),
    CALLDEF(ffi_float_finite, 1),
    {NULL, NULL, 0}};

/* What convlstm_api_check() in another package compares with what it was
 * compiled against: the interface's version, and the size of each struct of
 * CL_API_STRUCTS as this library was built (the first n of them). */
static int api_layout(size_t *sizes, int n) {
#define API_SIZE(type) sizeof(type),
  static const size_t ours[] = {CL_API_STRUCTS(API_SIZE)};
#undef API_SIZE
  for (int i = 0; i < n && i < (int)(sizeof ours / sizeof ours[0]); i++) sizes[i] = ours[i];
  return CL_API_VERSION;
}

/* Each entry of convlstm_api.h's list, registered under "cl_<name>". The
 * pointer is first stored with the list's type, so the compiler checks the
 * list against convlstm.h's declaration. */
#define API_REGISTER(ret, name, params, args)                                               \
  {                                                                                         \
    ret(*fn) params = &cl_##name;                                                           \
    R_RegisterCCallable("convlstm", "cl_" #name, (DL_FUNC)(void (*)(void))fn);               \
  }
#define API_REGISTER_VOID(name, params, args) API_REGISTER(void, name, params, args)

/* The one symbol the shared library exports (the build hides the rest). */
void attribute_visible R_init_convlstm(DllInfo *dll) {
  R_registerRoutines(dll, NULL, call_entries, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  R_forceSymbols(dll, TRUE);
  R_RegisterCCallable("convlstm", "cl_api_layout", (DL_FUNC)(void (*)(void))&api_layout);
  CONVLSTM_API_FUNCTIONS(API_REGISTER, API_REGISTER_VOID)
}
