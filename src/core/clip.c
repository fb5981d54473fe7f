/*
 * core/clip.c -- gradient clipping by global norm, as torch's
 * torch.nn.utils.clip_grad_norm_ (norm_type 2): the L2 norm over every
 * parameter's gradient, and the gradients scaled by max_norm / (norm + 1e-6)
 * when that is below 1. It runs in the training step after backward (and,
 * with float16, after the loss scale is divided out, as GradScaler.unscale_
 * before clipping), before the update's guard: the guard then checks the
 * numbers the update will use. The scaling reuses the backend's
 * grad_unscale (a multiply over the flat gradient buffer).
 */
#include "internal.h"

#include <math.h>

cl_status cl_clip_grads(cl_model *m, double max_norm) {
  m->grad_norm = NAN;
  if (!(max_norm > 0)) return CL_OK;
  if (!m->grads) return cl_fail(m, CL_E_STATE, "no gradients to clip: run backward first");
  const struct cl_backend_i *be = m->be->iface;
  double sum = 0;
  CL_KERNEL(m, be->sum_squares(m->be, m->grads, m->n_params, &sum));
  const double norm = sqrt(sum);
  m->grad_norm = norm;
  /* inf or NaN gradients: left as they are for the update's guard, which
   * refuses them naming the tensor (torch would multiply them by NaN) */
  if (!isfinite(norm)) return CL_OK;
  /* torch: clip_coef = max_norm / (total_norm + 1e-6) in float32, clamped
   * to 1 (a multiply by 1 changes nothing, so it is skipped) */
  const float coef = (float)(max_norm / (norm + 1e-6));
  if (!(coef < 1.0f)) return CL_OK;
  int bad = 0;
  CL_KERNEL(m, be->grad_unscale(m->be, m->grads, m->n_params, coef, &bad));
  return CL_OK;
}

double cl_model_grad_norm(const cl_model *m) { return m->grad_norm; }
