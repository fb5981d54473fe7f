/*
 * cpu/cpu_step.c -- the CPU backend's part of the sync-free training step
 * (core/backend.h, cl_step_vals), twin of src/cuda/cuda_step.cu: the loss
 * of each segment added into the step's block (loss_acc), and the step's
 * end (update_step).
 *
 * Where device memory is host memory, the slots that hand their result to
 * the host (loss, grad_unscale, sum_squares, the guards) cost no
 * synchronisation, so the step's end is composed of them here, deciding on
 * the host exactly as the CUDA backend's update_step decides on the device
 * (backend.h, cl_update_args). The block itself is the core's, in host
 * memory (the CPU has no step_vals slot).
 */
#include "cpu_kernels.h"

#include <math.h>

cl_status cl_cpu_loss_acc(cl_backend *be, const cl_loss_fn *f, const void *pred,
                          const float *target, const float *weight, size_t n, cl_dtype dtype,
                          float scale, float *grad, double share, double *acc) {
  double mean = 0;
  cl_status s = cl_cpu_loss(be, f, pred, target, weight, n, dtype, scale, grad, &mean);
  if (s != CL_OK) return s;
  const double part = share * mean;
  *acc += part;
  return CL_OK;
}

/* clip_grad_norm_'s scaling: coef = max_norm / (norm + 1e-6) in float32,
 * skipped when not below 1 (a multiply by 1 changes nothing) and when the
 * norm is not finite (the guard then refuses the gradients by name). */
static cl_status clip(cl_backend *be, const cl_update_args *u, cl_step_vals *vals) {
  double sum = 0;
  cl_status s = cl_cpu_sum_squares(be, u->g, u->n, &sum);
  if (s != CL_OK) return s;
  vals->sumsq = sum;
  const double norm = sqrt(sum);
  if (!isfinite(norm)) return CL_OK;
  const float coef = (float)(u->max_norm / (norm + 1e-6));
  if (!(coef < 1.0f)) return CL_OK;
  int bad = 0;
  return cl_cpu_grad_unscale(be, u->g, u->n, coef, &bad);
}

cl_status cl_cpu_update_step(cl_backend *be, const cl_update_args *u, cl_step_vals *vals) {
  cl_status s = CL_OK;
  int bad = 0;
  if (u->unscale) s = cl_cpu_grad_unscale(be, u->g, u->n, u->inv_scale, &bad);
  if (s != CL_OK) return s;
  vals->found_inf = bad;
  const int lost = u->check_loss && !isfinite(vals->loss);
  if (u->max_norm > 0 && !lost && (s = clip(be, u, vals)) != CL_OK) return s;
  uint64_t fault = CL_FAULT_NONE;
  if (!bad && !lost)
    s = u->adam      ? cl_cpu_adam_check(be, u->p, u->g, u->m, u->v, u->vmax, u->n, &u->ahp, &fault)
        : u->rmsprop ? cl_cpu_rmsprop_check(be, u->p, u->g, u->v, u->m, u->vmax, u->n, &u->rhp,
                                            &fault)
                     : cl_cpu_sgd_check(be, u->p, u->g, u->m, u->n, &u->shp, &fault);
  if (s != CL_OK) return s;
  vals->fault = fault;
  vals->skipped = bad || lost || fault != CL_FAULT_NONE;
  if (vals->skipped) return CL_OK;
  if (u->rmsprop) return cl_cpu_rmsprop_update(be, u->p, u->g, u->v, u->m, u->vmax, u->n, &u->rhp);
  return u->adam ? cl_cpu_adam_update(be, u->p, u->g, u->m, u->v, u->vmax, u->n, &u->ahp)
                 : cl_cpu_sgd_update(be, u->p, u->g, u->m, u->n, &u->shp);
}
