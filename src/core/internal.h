/*
 * core/internal.h -- what the core's files share and nobody else sees: the
 * model struct, its layers and step buffers, the accounting allocator and the
 * error helpers. Callers outside src/core use convlstm.h only.
 */
#ifndef CONVLSTM_CORE_INTERNAL_H
#define CONVLSTM_CORE_INTERNAL_H

#include "../convlstm.h"
#include "backend.h"   /* cl_backend, kernel shapes */
#include "alloc.h"     /* cl_allocator */
#include "plan.h"      /* cl_buf_kind, plan construction */

/* One ConvLSTM layer. Its torch weight [4h, in+h, k, k] is kept as two packed
 * halves, wx [4h, in, k, k] and wh [4h, h, k, k], because the input half runs
 * once over all steps (the fast path) and the hidden half once per step, and
 * cuDNN filters cannot be strided views. Offsets count floats in the flat
 * parameter (and gradient) buffer, so one optimizer launch updates all. */
typedef struct cl_layer {
  int in, hidden, k;
  size_t off_wx, off_wh, off_b; /* off_b unused without bias */
  size_t n_wx, n_wh, n_b;
} cl_layer;

/* Buffers of one planned step, views into allocations made from the plan. */
typedef struct cl_step {
  int valid;
  int B, T, H, W, training;
  cl_plan plan;
  void **ptr; /* one per plan entry */
  float *x;
  float *gates[CL_MAX_LAYERS], *cell[CL_MAX_LAYERS], *hid[CL_MAX_LAYERS];
  float *dh[CL_MAX_LAYERS];
  float *dc;
  void *ws;
} cl_step;

/* Where the model is between calls; backward consumes a training forward
 * because it overwrites the saved gate activations with their gradients. */
typedef enum cl_phase {
  CL_PHASE_NONE = 0,
  CL_PHASE_INFERENCE,
  CL_PHASE_TRAINING,  /* forward kept activations, backward possible */
  CL_PHASE_LOSS,      /* and cl_model_mse stored d loss / d output */
  CL_PHASE_CONSUMED   /* backward ran: a new forward is needed */
} cl_phase;

struct cl_model {
  cl_config cfg;
  cl_backend *be;
  cl_allocator mem;
  cl_layer layer[CL_MAX_LAYERS];
  int n_tensors;
  char tensor_name[2 * CL_MAX_LAYERS][40];
  size_t n_params;
  float *params, *grads;
  /* optimizer state, created at the first step */
  cl_optim_kind opt_kind;
  float *opt_m, *opt_v;
  int64_t opt_steps;
  cl_step step;
  cl_phase phase;
  cl_target loss_target;
  char err[CL_ERRMSG_LEN];
};

/* Errors: write into the model's buffer and return the status. */
cl_status cl_fail(cl_model *m, cl_status s, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
/* Pass a backend failure on with its message. */
cl_status cl_fail_backend(cl_model *m, cl_status s, const char *what);
#define CL_TRY(expr)                     \
  do {                                   \
    cl_status cl_try_s_ = (expr);        \
    if (cl_try_s_ != CL_OK) return cl_try_s_; \
  } while (0)
/* A kernel call: on failure copy the backend's message into the model's. */
#define CL_KERNEL(m, expr)                                          \
  do {                                                              \
    cl_status cl_k_s_ = (expr);                                     \
    if (cl_k_s_ != CL_OK) return cl_fail_backend((m), cl_k_s_, #expr); \
  } while (0)

/* Options this build cannot honour yet are refused, never ignored. */
cl_status cl_check_options(cl_model *m, const cl_step_options *o);
/* Sizes with overflow checks: 0 on overflow. */
size_t cl_mul_size(size_t a, size_t b);

/* step.c */
cl_status cl_step_prepare(cl_model *m, int B, int T, int H, int W, int training);
void cl_step_release(cl_model *m);
/* grads.c / params.c */
cl_status cl_grads_ensure(cl_model *m);
/* host <-> device with staging when the device is not host memory */
cl_status cl_put_host(cl_model *m, float *dev, const cl_host_array *src, size_t n);
cl_status cl_get_host(cl_model *m, cl_host_array *dst, const float *dev, size_t n);

#endif
