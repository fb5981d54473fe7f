/*
 * cpu/cpu_loss.c -- the CPU backend's loss slot (backend.h):
 * MSE, MAE, Huber and binary cross-entropy on logits, each mean-reduced
 * with its gradient in one pass, as torch 1.13's mse_loss, l1_loss,
 * huber_loss and binary_cross_entropy_with_logits (pos_weight) and their
 * backwards. The per-element loss is float (MSE's square is double), summed
 * in double. With a per-element weight w the loss is (w l).mean() as torch
 * computes it; no weight reads as a weight of one, which changes no bit
 * (w multiplies the loss in double and the gradient's factor before the
 * derivative, both exact for one).
 */
#include "cpu_kernels.h"

#include <math.h>

/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_LOSS_PAR_MIN 32768
enum { LOSS_CHUNK = 1024 };

/* gscale and post: the gradient is gscale * w * dl/dx * post, the
 * multiplications in that order as torch's backward does them (MSE: 2 / n,
 * then the loss scale last; the others: 1 / n times the scale first). */
typedef struct loss_k {
  cl_loss_kind kind;
  float delta, pos_weight, gscale, post;
} loss_k;

/* The loss of one element and, in *g, its derivative by the prediction x.
 * kind is a constant where chunk() is inlined, so each kind's loop keeps
 * none of the others' tests. */
static inline double loss_elem(const loss_k *k, cl_loss_kind kind, float x, float y, float *g) {
  if (kind == CL_LOSS_MSE) {
    const float d = x - y;
    *g = d; /* torch's 2 (x - y): the 2 is in gscale */
    return (double)d * (double)d;
  }
  if (kind == CL_LOSS_MAE) {
    const float d = x - y;
    *g = (float)((d > 0) - (d < 0)); /* torch's sgn: 0 at 0 */
    return fabsf(d);
  }
  if (kind == CL_LOSS_HUBER) {
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

/* One chunk: the sum of w l in double; g may alias t, each element's t is
 * read before its g is written. w NULL: a weight of one. */
static inline double chunk(const loss_k *k, cl_loss_kind kind, const float *p, const float *t,
                           const float *w, float *g, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    float d;
    const double l = loss_elem(k, kind, p[i], t[i], &d);
    const float wi = w ? w[i] : 1.0f;
    sum += (double)wi * l;
    if (g) g[i] = k->gscale * wi * d * k->post;
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
  const float *t = c->target + i0, *w = c->weight ? c->weight + i0 : NULL;
  float *g = c->grad ? c->grad + i0 : NULL;
  switch (c->k->kind) {
  case CL_LOSS_MSE: return chunk(c->k, CL_LOSS_MSE, p, t, w, g, m);
  case CL_LOSS_MAE: return chunk(c->k, CL_LOSS_MAE, p, t, w, g, m);
  case CL_LOSS_HUBER: return chunk(c->k, CL_LOSS_HUBER, p, t, w, g, m);
  default: return chunk(c->k, CL_LOSS_BCE_LOGITS, p, t, w, g, m);
  }
}

/* The slot's work, once the kind is known to be one of the four. */
static cl_status loss_run(cl_backend *be, const cl_loss_fn *f, const void *pred,
                          const float *target, const float *weight, size_t n, cl_dtype dtype,
                          float scale, float *grad, double *loss) {
  if (dtype != CL_F32 && dtype != CL_F16 && dtype != CL_BF16)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: unknown storage dtype %d", (int)dtype);
  if (n == 0) return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: loss of an empty tensor");
  /* torch's mean backward: the gradient times (1 / n as a float); mse's
   * (2 / n as a float) * (pred - target) * grad_output */
  const int mse = f->kind == CL_LOSS_MSE;
  const float gscale = mse ? (float)(2.0 / (double)n) : (float)(1.0 / (double)n) * scale;
  const loss_k k = {f->kind, (float)f->delta, (float)f->pos_weight, gscale, mse ? scale : 1.0f};
  loss_ctx c = {&k, pred, target, weight, grad, n, dtype};
  const long long chunks = (long long)((n + LOSS_CHUNK - 1) / LOSS_CHUNK);
  const double sum =
      cl_cpu_sum_chunks(be->n_threads, chunks, n > CL_CPU_LOSS_PAR_MIN, loss_part, &c);
  *loss = sum / (double)n;
  return CL_OK;
}

/* The loss slot; f NULL is MSE. */
cl_status cl_cpu_loss(cl_backend *be, const cl_loss_fn *f, const void *pred, const float *target,
                      const float *weight, size_t n, cl_dtype dtype, float scale, float *grad,
                      double *loss) {
  static const cl_loss_fn mse = {CL_LOSS_MSE, 0.0, 0.0, CL_REDUCE_MEAN};
  if (!f) f = &mse;
  if (f->kind != CL_LOSS_MSE && f->kind != CL_LOSS_MAE && f->kind != CL_LOSS_HUBER &&
      f->kind != CL_LOSS_BCE_LOGITS)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: no loss kernel for loss %d", (int)f->kind);
  return loss_run(be, f, pred, target, weight, n, dtype, scale, grad, loss);
}
