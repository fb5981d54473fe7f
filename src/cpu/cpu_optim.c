/*
 * cpu/cpu_optim.c -- loss and optimizer kernels of the CPU backend
 * (backend.h: mse, grad_unscale, adam_update, sgd_update).
 *
 * The updates follow torch.optim.Adam and torch.optim.SGD (torch 1.13,
 * single-tensor path) operation by operation: per-element math in float,
 * scalar factors computed in double as Python computes them and then
 * rounded to float as torch's kernels do, so that a model trained here and
 * one trained in torch stay within float rounding of each other.
 *
 * grad_unscale is the float16 loss scaler's check (torch's
 * GradScaler.unscale_); choosing the scale is the core's. Not here:
 * gradient clipping, other optimizers.
 */
#include "cpu_kernels.h"

#include <math.h>

/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_PAR_MIN 32768

enum { MSE_CHUNK = 1024 };

/* One chunk of the loss: sum of squares in double; grad may alias target,
 * each element is read before it is written. */
static double mse_chunk(const float *p, const float *t, float *g, size_t n, float norm,
                        float scale) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    float d = p[i] - t[i];
    sum += (double)d * (double)d;
    if (g) g[i] = norm * d * scale;
  }
  return sum;
}

cl_status cl_cpu_mse(cl_backend *be, const void *pred, const float *target, size_t n,
                     cl_dtype dtype, float scale, float *grad, double *loss) {
  if (dtype != CL_F32 && dtype != CL_F16 && dtype != CL_BF16)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: unknown storage dtype %d", (int)dtype);
  if (n == 0) return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: mse of an empty tensor");
  /* torch's mse backward: (2 / n as a float) * (pred - target) * grad_output. */
  const float norm = (float)(2.0 / (double)n);
  const long long chunks = (long long)((n + MSE_CHUNK - 1) / MSE_CHUNK);
  double sum = 0.0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    reduction(+ : sum) if (n > CL_CPU_PAR_MIN)
#endif
  for (long long ch = 0; ch < chunks; ch++) {
    size_t i0 = (size_t)ch * MSE_CHUNK, m = n - i0 < MSE_CHUNK ? n - i0 : MSE_CHUNK;
    float buf[MSE_CHUNK];
    const float *p = (const float *)pred + i0;
    if (dtype != CL_F32) {
      cl_cpu_load(dtype, pred, i0, buf, m);
      p = buf;
    }
    sum += mse_chunk(p, target + i0, grad ? grad + i0 : NULL, m, norm, scale);
  }
  *loss = sum / (double)n;
  return CL_OK;
}

cl_status cl_cpu_adam_update(cl_backend *be, float *p, const float *g, float *m, float *v, size_t n,
                             const cl_adam_hp *hp) {
  if (hp->step < 1)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: adam step must be >= 1 (got %lld)",
                       (long long)hp->step);
  const double b1 = hp->beta1, b2 = hp->beta2;
  const double bc1 = 1.0 - pow(b1, (double)hp->step), bc2 = 1.0 - pow(b2, (double)hp->step);
  const float beta1 = hp->beta1, beta2 = hp->beta2, wd = hp->weight_decay, eps = hp->eps;
  const float one_m_b1 = (float)(1.0 - b1), one_m_b2 = (float)(1.0 - b2);
  const float bc2_sqrt = (float)sqrt(bc2), neg_step = (float)(-(double)hp->lr / bc1);
  const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (nn > CL_CPU_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++) {
    float gi = g[i];
    if (wd != 0.0f) gi = gi + wd * p[i];
    m[i] = m[i] * beta1 + one_m_b1 * gi;
    v[i] = v[i] * beta2 + one_m_b2 * gi * gi;
    float denom = sqrtf(v[i]) / bc2_sqrt + eps;
    p[i] = p[i] + neg_step * m[i] / denom;
  }
  return CL_OK;
}

cl_status cl_cpu_sgd_update(cl_backend *be, float *p, const float *g, float *buf, size_t n,
                            const cl_sgd_hp *hp) {
  const float mom = hp->momentum, wd = hp->weight_decay, neg_lr = -hp->lr;
  if (mom != 0.0f && !buf)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: sgd with momentum needs a buffer");
  const int first = hp->first;
  const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (nn > CL_CPU_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++) {
    float d = g[i];
    if (wd != 0.0f) d = d + wd * p[i];
    if (mom != 0.0f) {
      /* torch starts the buffer as a copy of the first gradient. */
      buf[i] = first ? d : buf[i] * mom + d;
      d = buf[i];
    }
    p[i] = p[i] + neg_lr * d;
  }
  return CL_OK;
}

cl_status cl_cpu_grad_unscale(cl_backend *be, float *g, size_t n, float inv_scale,
                              int *found_nonfinite) {
  (void)be; /* read only by the OpenMP pragma */
  int bad = 0;
  const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    reduction(|                                                      \
              : bad) if (nn > CL_CPU_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++) {
    float v = g[i] * inv_scale;
    bad |= !isfinite(v); /* inf or NaN before scaling stays so after */
    g[i] = v;
  }
  *found_nonfinite = bad;
  return CL_OK;
}
