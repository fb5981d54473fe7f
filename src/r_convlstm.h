/*
 * r_convlstm.h -- what the R glue files (src/init.c, src/r_*.c) share: the
 * .Call entry points they register and the helpers that turn SEXPs into core
 * arguments and core failures into R conditions.
 *
 * It is the only header that includes R's; the core and the backends never
 * see it. It is not a public interface: nothing outside src/r_*.c and
 * src/init.c includes it.
 */
#ifndef CONVLSTM_R_CONVLSTM_H
#define CONVLSTM_R_CONVLSTM_H

/* configure may pass these as -D flags too; define them only once. */
#ifndef R_NO_REMAP
#define R_NO_REMAP
#endif
#ifndef STRICT_R_HEADERS
#define STRICT_R_HEADERS
#endif
#include <R.h>           /* GetRNGstate, unif_rand, R_alloc */
#include <Rinternals.h>  /* SEXP, PROTECT, external pointers */

#include "convlstm.h"    /* the core: the only interface the glue calls */

/* ---- r_errors.c ---- */

/* Raises the classed R condition convlstm_error_<status> with msg, through
 * the R function signal_core_error() so that R code builds the condition.
 * Never returns. Callers must hold no C memory when they call it. */
NORET void r_raise(cl_status s, const char *msg);
/* Raises the model's last core error (cl_model_error). */
NORET void r_raise_model(cl_status s, const cl_model *m);
/* An invalid argument found by the glue itself (the R layer checks first, so
 * reaching this means the R layer let something through). */
#if defined(__GNUC__)
#define R_CL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define R_CL_PRINTF(a, b)
#endif
NORET void r_raise_invalid(const char *fmt, ...) R_CL_PRINTF(1, 2);

/* The glue's one way out of a failed core call. On any status but CL_OK:
 * R_CL_CHECK raises the model's message (r_raise_model); R_CL_CHECK_MSG a
 * message of the caller's (a call that has no model yet). The _FREE forms
 * first run `release`, which gives back what the caller holds (UNPROTECT,
 * a free: the error longjmps past the caller's own cleanup). */
#define R_CL_ON_FAILURE_(status, release, raise)                                \
  do {                                                                          \
    const cl_status r_cl_st_ = (status);                                        \
    if (r_cl_st_ != CL_OK) {                                                    \
      release;                                                                  \
      raise;                                                                    \
    }                                                                           \
  } while (0)
#define R_CL_CHECK_FREE(m, status, release)                                     \
  R_CL_ON_FAILURE_(status, release, r_raise_model(r_cl_st_, (m)))
#define R_CL_CHECK(m, status) R_CL_CHECK_FREE(m, status, (void)0)
#define R_CL_CHECK_MSG_FREE(msg, status, release)                               \
  R_CL_ON_FAILURE_(status, release, r_raise(r_cl_st_, (msg)))
#define R_CL_CHECK_MSG(msg, status) R_CL_CHECK_MSG_FREE(msg, status, (void)0)

/* ---- r_handle.c ---- */

/* The live model behind an external pointer, or a state error that says why
 * there is none (released, restored by readRDS) or why it cannot be used
 * now (its training step runs on a thread of its own). */
cl_model *r_model(SEXP ptr);
/* The same model for a call that only reads its configuration and layout,
 * allowed while its step runs on a thread of its own (cl_staged_fill). */
const cl_model *r_model_beside_step(SEXP ptr);
/* While a model's training step runs on a thread of its own (r_train.c),
 * r_model and convlstm_release() refuse it: R would read or free what the
 * step writes. step_begin marks it; step_end puts back the mark it had
 * (kept by the caller) and allocates nothing: it runs in a finalizer too. */
void r_model_step_begin(SEXP ptr);
void r_model_step_end(SEXP ptr, SEXP mark);
/* An external pointer with no address yet, its finalizer registered and,
 * when cls is not NULL, that class: made before the object it will own, so
 * that no R allocation can fail while an unowned object is held. Unprotected. */
SEXP r_new_handle(SEXP tag, SEXP prot, R_CFinalizer_t finalize, const char *cls);
/* A new model handle (r_new_handle's, marked live, class convlstm_ptr), for
 * the model ffi_model_create is about to make. Unprotected. */
SEXP r_model_handle(void);

/* ---- r_arrays.c ---- */

/* Describes an R double array as a host array (no copy). ndim is 4 or 5;
 * arg names the argument in messages. */
void r_host_array(SEXP x, int ndim, const char *arg, cl_host_array *out);
/* A new, unprotected double array of the given dims. */
SEXP r_alloc_array(int ndim, const int *dims);
/* A new, unprotected list of n elements (NULLs) named names[0..n-1]. */
SEXP r_named_list(const char *const *names, int n);
/* The element `name` of a named list (step options), or R_NilValue. */
SEXP r_option(SEXP opts, const char *name);
/* TRUE when x (double, integer, logical) holds only finite values within a
 * float's range: check_finite()'s one pass. */
SEXP ffi_float_finite(SEXP x);
/* A configuration's kernels and dilations, integer [CL_R_GEOMETRY_ROWS,
 * n_layers]: kernel height, width, dilation height, width, recurrent kernel
 * height, width (R/geometry.R's geometry_rows). */
#define CL_R_GEOMETRY_ROWS 6
SEXP r_geometry(const cl_config *c);
/* Its peepholes, integer c(kind, height, width) (cl_peephole; the frame
 * size 0 unless per position): what ffi_model_create takes back. New,
 * unprotected. */
SEXP r_peephole(const cl_config *c);
/* Reads a row-major float tensor into a new column-major double array of the
 * same logical dims (so torch's w[o, i, kh, kw] is R's w[o+1, i+1, kh+1, kw+1]). */
void r_row_major_to_r(const float *src, int ndim, const int *dims, double *dst);
void r_r_to_row_major(const double *src, int ndim, const int *dims, float *dst);

/* ---- r_dropout.c ---- */

/* A training call of B sequences of H x W of a model with dropout: a seed
 * from R's generator for the masks the core draws into its planned buffers
 * (o->draw_masks, o->dropout_seed), or, given in opts$dropout_masks
 * (tests), the masks themselves into o->mask_x / o->mask_h (R_alloc'ed:
 * valid until the .Call returns). */
void r_dropout_masks(cl_model *m, SEXP opts, int B, int H, int W, cl_step_options *o);
SEXP ffi_dropout_draw(SEXP ptr, SEXP shape);

/* ---- r_options.c: what crosses .Call as names ---- */

/* An optimizer (c_optim() in R/ffi.R) and step options (c_step_options()),
 * named lists; both raise on a malformed one. NULL opts gives the plain
 * step. */
void r_optim(SEXP opt, cl_optim *out);
/* R's NULL as a NULL optimizer (the state the model holds), else r_optim into buf. */
const cl_optim *r_optim_or_null(SEXP opt, cl_optim *buf);
SEXP r_optim_list(const cl_optim *o);
/* state_buf: room for 2 * CL_MAX_LAYERS arrays, which a given initial
 * state (opts$state) points into for as long as opts lives. */
/* Host arrays r_step_options may point into: a given state's h and c of
 * every layer, then the loss weight. */
#define R_OPT_ARRAYS (2 * CL_MAX_LAYERS + 1)
void r_step_options(SEXP opts, cl_step_options *out, cl_host_array *state_buf);
/* A training step's loss as R returns it: attribute grad_norm when measured. */
SEXP r_step_loss(const cl_model *m, double loss);
/* Enums by name: "float32"..., "cpu" / "cuda", "last_state" / "sequence". */
cl_dtype r_dtype(SEXP s);
size_t r_bytes(SEXP s, const char *arg);
cl_device r_device(SEXP s);
cl_target r_target(SEXP s);
/* What ffi_forward returns: "all" (the tutorial's list of outputs and
 * states), "sequence" (the last layer's outputs), "last_state" (its last h),
 * "none", "last_states" (no outputs, every layer's last states), "frames"
 * (the frames of a forward with a horizon, [B, K, C, H, W]). */
typedef enum r_forward_what {
  R_FWD_ALL = 0,
  R_FWD_SEQUENCE,
  R_FWD_LAST_STATE,
  R_FWD_NONE,
  R_FWD_LAST_STATES,
  R_FWD_FRAMES
} r_forward_what;
r_forward_what r_forward_mode(SEXP s);

/* ---- r_comm.c: the process's communicators ---- */

/* The one gradients go over (convlstm_distributed()); an R error when
 * there is none yet. */
cl_comm *r_dist_comm(void);
/* The host communicator (local or MPI: host collectives, abort) and the
 * gradients' one (the host one, or NCCL's over it); NULL when none. */
cl_comm *r_dist_host(void);
cl_comm *r_dist_grad(void);
/* Both at once, as r_dist.c makes or frees them. */
void r_dist_set(cl_comm *host, cl_comm *grad);

/* ---- entry points (registered in init.c) ---- */

/* r_handle.c: ffi_model_release, ffi_model_status; r_model.c the rest */
SEXP ffi_model_create(SEXP input_dim, SEXP hidden_dims, SEXP kernel_sizes, SEXP bias,
                      SEXP device, SEXP dtype, SEXP threads, SEXP memory_limit, SEXP peephole,
                      SEXP dropout, SEXP dropout_masks, SEXP structure);
SEXP ffi_model_release(SEXP ptr);
SEXP ffi_model_status(SEXP ptr);
SEXP ffi_model_config(SEXP ptr);
SEXP ffi_dtype_names(void);
SEXP ffi_model_init_params(SEXP ptr);
SEXP ffi_models_alive(void);
SEXP ffi_set_dtype(SEXP ptr, SEXP dtype);
SEXP ffi_loss_scale(SEXP ptr);
SEXP ffi_set_loss_scale(SEXP ptr, SEXP init_scale, SEXP growth_factor, SEXP backoff_factor,
                        SEXP growth_interval);

/* r_params.c */
SEXP ffi_tensor_info(SEXP ptr);
SEXP ffi_get_tensors(SEXP ptr, SEXP grad);
SEXP ffi_set_tensors(SEXP ptr, SEXP tensors);

/* r_train.c */
SEXP ffi_forward(SEXP ptr, SEXP x, SEXP training, SEXP what, SEXP opts);
SEXP ffi_last_shape(SEXP ptr);
SEXP ffi_backward(SEXP ptr, SEXP grad, SEXP target);
SEXP ffi_mse(SEXP ptr, SEXP y, SEXP target);
SEXP ffi_zero_grad(SEXP ptr);
SEXP ffi_optimizer_step(SEXP ptr, SEXP opt);
SEXP ffi_optimizer_steps(SEXP ptr);
SEXP ffi_optimizer_reset(SEXP ptr);
SEXP ffi_optim_check(SEXP opt);
SEXP ffi_train_step(SEXP ptr, SEXP x, SEXP y, SEXP target, SEXP opt, SEXP opts);
SEXP ffi_train_step_start(SEXP ptr, SEXP x, SEXP y, SEXP target, SEXP opt, SEXP opts,
                          SEXP staged, SEXP reserve);
SEXP ffi_staged_fill(SEXP ptr, SEXP x, SEXP y, SEXP target, SEXP spare, SEXP send);
SEXP ffi_staged_unreserve(SEXP ptr);
SEXP ffi_staged_layout_bytes(SEXP dtype, SEXP x_dims, SEXP y_dims);
SEXP ffi_train_step_wait(SEXP h);
SEXP ffi_train_step_finish(SEXP h);

/* r_state.c */
SEXP ffi_reset_state(SEXP ptr);
SEXP ffi_carried_state(SEXP ptr);

/* r_memory.c */
SEXP ffi_memory_stats(SEXP ptr);
SEXP ffi_memory_reset_peak(SEXP ptr);
SEXP ffi_empty_cache(SEXP ptr);
SEXP ffi_test_overrun(SEXP ptr, SEXP buffer);
SEXP ffi_test_arena(SEXP ptr);
SEXP ffi_set_memory_limit(SEXP ptr, SEXP bytes);

/* r_dist.c */
SEXP ffi_dist_init(SEXP engine, SEXP device);
SEXP ffi_dist_info(void);
SEXP ffi_dist_available(void);
SEXP ffi_dist_broadcast_ints(SEXP x, SEXP root);
SEXP ffi_dist_barrier(void);
SEXP ffi_dist_abort(SEXP msg);
SEXP ffi_dist_finalize(void);
SEXP ffi_dist_stats(SEXP reset);
SEXP ffi_dist_broadcast_params(SEXP ptr, SEXP root);

/* r_plan.c */
SEXP ffi_model_plan(SEXP ptr, SEXP shape, SEXP training, SEXP opt, SEXP opts);
SEXP ffi_conv_calls(SEXP ptr, SEXP shape, SEXP training, SEXP opts, SEXP sequence);
SEXP ffi_buffer_names(void);
SEXP ffi_grad_buckets(SEXP ptr);

/* r_capability.c */
SEXP ffi_capabilities(void);
SEXP ffi_model_capability(SEXP ptr, SEXP option);

/* r_io.c */
SEXP ffi_model_save(SEXP ptr, SEXP path, SEXP optimizer, SEXP metadata);
SEXP ffi_save_target_check(SEXP path);
SEXP ffi_file_info(SEXP path);
SEXP ffi_model_load_into(SEXP ptr, SEXP path, SEXP with_optimizer);

/* r_gpu.c */
SEXP ffi_gpu_info(void);
SEXP ffi_gpu_available(void);

/* r_data.c */
SEXP ffi_data_create(SEXP ptr, SEXP x, SEXP y, SEXP target);
SEXP ffi_data_release(SEXP ptr);
SEXP ffi_data_status(SEXP ptr);
SEXP ffi_data_info(SEXP ptr);
SEXP ffi_data_alive(void);
SEXP ffi_data_bytes_for(SEXP ptr, SEXP shape, SEXP target);
SEXP ffi_train_step_data(SEXP ptr, SEXP dptr, SEXP rows, SEXP opt, SEXP opts);

/* r_filearray.c */
SEXP ffi_fa_open(SEXP path, SEXP verify);
SEXP ffi_fa_close(SEXP ptr);
SEXP ffi_fa_info(SEXP ptr);
SEXP ffi_fa_read(SEXP ptr, SEXP starts, SEXP len);
SEXP ffi_fa_writer_open(SEXP path, SEXP dtype, SEXP dims, SEXP scale_offset);
SEXP ffi_fa_writer_append(SEXP ptr, SEXP x);
SEXP ffi_fa_writer_finish(SEXP ptr);
SEXP ffi_fa_writer_abort(SEXP ptr);
SEXP ffi_fa_ahead_new(SEXP fa);
SEXP ffi_fa_ahead_start(SEXP ptr, SEXP slot, SEXP starts_x, SEXP len_x, SEXP starts_y,
                        SEXP len_y);
SEXP ffi_fa_ahead_wait(SEXP ptr);
SEXP ffi_fa_ahead_take(SEXP ptr);

#endif
