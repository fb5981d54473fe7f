/*
 * cpu/cpu_loss.c -- the CPU backend's loss slot (backend.h): MAE, Huber and
 * binary cross-entropy on logits, each mean-reduced with its gradient in one
 * pass, as torch 1.13's l1_loss, huber_loss and
 * binary_cross_entropy_with_logits (pos_weight) and their backwards. The
 * per-element loss is float, summed in double; MSE is cpu_optim.c's, but
 * with a per-element weight this slot takes MSE too: (w l).mean() as torch
 * computes it, a weight of one giving the unweighted bits (w multiplies the
 * loss in double and the gradient's factor before the derivative).
 */
#include "cpu_kernels.h"

#include <math.h>

#define CL_CPU_LOSS_PAR_MIN 32768
enum { LOSS_CHUNK = 1024 };

typedef struct loss_k {
  cl_loss_kind kind;
  float delta, pos_weight;
} loss_k;

/* The loss of one element and, in *g, its derivative by the prediction x. */
static inline float loss_elem(const loss_k *k, float x, float y, float *g) {
  if (k->kind == CL_LOSS_MAE) {
    const float d = x - y;
    *g = (float)((d > 0) - (d < 0)); /* torch's sgn: 0 at 0 */
    return fabsf(d);
  }
  if (k->kind == CL_LOSS_HUBER) {
    const float d = x - y, z = fabsf(d);
    *g = d < -k->delta ? -k->delta : d > k->delta ? k->delta : d;
    return z < k->delta ? 0.5f * z * z : k->delta * (z - 0.5f * k->delta);
  }
  /* torch: (1 - y) x + (1 + (pw - 1) y) (log(e^-m + e^(-x-m)) + m), m = max(-x, 0);
   * backward ((pw y + 1 - y) sigmoid(x) - pw y) */
  const float m = x < 0 ? -x : 0.0f, lw = (k->pos_weight - 1.0f) * y + 1.0f;
  const float t = k->pos_weight * y;
  *g = (t + 1.0f - y) * (1.0f / (1.0f + expf(-x))) - t;
  return (1.0f - y) * x + lw * (logf(expf(-m) + expf(-x - m)) + m);
}

static double loss_chunk(const loss_k *k, const float *p, const float *t, float *g, size_t n,
                         float gscale) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    float d;
    sum += (double)loss_elem(k, p[i], t[i], &d);
    if (g) g[i] = gscale * d; /* after t[i] is read: g may alias t */
  }
  return sum;
}

/* Weighted: MSE as cpu_optim.c's mse_chunk (gscale then holds 2 / n), the
 * others as loss_chunk, each element's loss and gradient factor times w. */
static double weighted_chunk(const loss_k *k, const float *p, const float *t, const float *w,
                             float *g, size_t n, float gscale, float scale) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    if (k->kind == CL_LOSS_MSE) {
      const float d = p[i] - t[i];
      sum += (double)w[i] * ((double)d * (double)d);
      if (g) g[i] = gscale * w[i] * d * scale;
      continue;
    }
    float d;
    sum += (double)w[i] * (double)loss_elem(k, p[i], t[i], &d);
    if (g) g[i] = gscale * w[i] * d;
  }
  return sum;
}

typedef struct loss_ctx {
  const loss_k *k;
  const void *pred;
  const float *target, *weight;
  float *grad;
  size_t n;
  cl_dtype dtype;
  float gscale, scale;
} loss_ctx;

/* Chunk ch of the loss: float16 / bfloat16 converted on the stack first. */
static double loss_part(long long ch, void *ctx) {
  const loss_ctx *c = (const loss_ctx *)ctx;
  size_t i0 = (size_t)ch * LOSS_CHUNK, m = c->n - i0 < LOSS_CHUNK ? c->n - i0 : LOSS_CHUNK;
  float buf[LOSS_CHUNK];
  const float *p = (const float *)c->pred + i0;
  if (c->dtype != CL_F32) {
    cl_cpu_load(c->dtype, c->pred, i0, buf, m);
    p = buf;
  }
  float *gi = c->grad ? c->grad + i0 : NULL;
  return c->weight ? weighted_chunk(c->k, p, c->target + i0, c->weight + i0, gi, m, c->gscale,
                                    c->scale)
                   : loss_chunk(c->k, p, c->target + i0, gi, m, c->gscale);
}

cl_status cl_cpu_loss(cl_backend *be, const cl_loss_fn *f, const void *pred, const float *target,
                      const float *weight, size_t n, cl_dtype dtype, float scale, float *grad,
                      double *loss) {
  if (dtype != CL_F32 && dtype != CL_F16 && dtype != CL_BF16)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: unknown storage dtype %d", (int)dtype);
  if (n == 0) return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: loss of an empty tensor");
  if (f->kind != CL_LOSS_MAE && f->kind != CL_LOSS_HUBER && f->kind != CL_LOSS_BCE_LOGITS &&
      !(weight && f->kind == CL_LOSS_MSE))
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: no loss kernel for loss %d", (int)f->kind);
  const loss_k k = {f->kind, (float)f->delta, (float)f->pos_weight};
  /* torch's mean backward: the gradient times (1 / n as a float) */
  const int mse = f->kind == CL_LOSS_MSE; /* weighted only */
  const float gscale = mse ? (float)(2.0 / (double)n) : (float)(1.0 / (double)n) * scale;
  loss_ctx c = {&k, pred, target, weight, grad, n, dtype, gscale, scale};
  const long long chunks = (long long)((n + LOSS_CHUNK - 1) / LOSS_CHUNK);
  const double sum =
      cl_cpu_sum_chunks(be->n_threads, chunks, n > CL_CPU_LOSS_PAR_MIN, loss_part, &c);
  *loss = sum / (double)n;
  return CL_OK;
}
