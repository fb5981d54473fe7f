/*
 * cpu/cpu_optim.c -- optimizer kernels of the CPU backend (backend.h:
 * grad_unscale, adam_update, sgd_update, rmsprop_update and their guards
 * adam_check, sgd_check, rmsprop_check; the loss slot is cpu_loss.c's, the
 * step's end cpu_step.c's).
 *
 * The updates follow torch.optim.Adam (amsgrad too), torch.optim.AdamW,
 * torch.optim.SGD and torch.optim.RMSprop (torch 1.13, single-tensor path)
 * operation by operation: per-element math in float,
 * scalar factors computed in double as Python computes them and then
 * rounded to float as torch's kernels do, so that a model trained here and
 * one trained in torch stay within float rounding of each other.
 *
 * grad_unscale is the float16 loss scaler's check (torch's
 * GradScaler.unscale_); choosing the scale is the core's. Not here:
 * gradient clipping, other optimizers.
 */
#include "cpu_kernels.h"

#include <float.h>
#include <math.h>

/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_PAR_MIN 32768

/* torch's Adam, one element: the factors in double rounded to float once
 * (adam_consts), the rest in float. The update and its guard both call
 * adam_elem, so the guard checks exactly the numbers the update writes. */
typedef struct adam_k {
  float beta1, beta2, one_m_b1, one_m_b2, bc2_sqrt, neg_step, eps, wd;
  float decay; /* AdamW: 1 - lr * weight_decay (then wd is 0); Adam: 1 */
} adam_k;

static adam_k adam_consts(const cl_adam_hp *hp) {
  const double b1 = hp->beta1, b2 = hp->beta2;
  const double bc1 = 1.0 - pow(b1, (double)hp->step), bc2 = 1.0 - pow(b2, (double)hp->step);
  /* AdamW's p.mul_(1 - lr * weight_decay): the factor a Python float */
  const double decay = hp->decoupled ? 1.0 - (double)hp->lr * (double)hp->weight_decay : 1.0;
  adam_k k = {hp->beta1,        hp->beta2,
              (float)(1.0 - b1), (float)(1.0 - b2),
              (float)sqrt(bc2),  (float)(-(double)hp->lr / bc1),
              hp->eps,           hp->decoupled ? 0.0f : hp->weight_decay,
              (float)decay};
  return k;
}

/* torch's L2 weight decay (Adam, SGD, RMSprop): wd * p added to the
 * gradient; wd 0 leaves it exactly as it was. */
static inline float l2_decayed(float g, float wd, float p) { return wd != 0.0f ? g + wd * p : g; }

/* p, m, v (and amsgrad's vmax, when not NULL): the element's values before
 * on entry, after on return. */
static inline void adam_elem(const adam_k *k, float gi, float *p, float *m, float *v,
                             float *vmax) {
  gi = l2_decayed(gi, k->wd, *p);
  if (k->decay != 1.0f) *p = *p * k->decay;
  *m = *m * k->beta1 + k->one_m_b1 * gi;
  *v = *v * k->beta2 + k->one_m_b2 * gi * gi;
  float den_v = *v;
  if (vmax) { /* torch.maximum: a NaN v stays NaN */
    *vmax = *vmax > *v ? *vmax : *v;
    den_v = *vmax;
  }
  float denom = sqrtf(den_v) / k->bc2_sqrt + k->eps;
  *p = *p + k->neg_step * *m / denom;
}

static cl_status adam_step_ok(cl_backend *be, const cl_adam_hp *hp) {
  if (hp->step >= 1) return CL_OK;
  return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: adam step must be >= 1 (got %lld)",
                     (long long)hp->step);
}

cl_status cl_cpu_adam_update(cl_backend *be, float *p, const float *g, float *m, float *v,
                             float *vmax, size_t n, const cl_adam_hp *hp) {
  if (adam_step_ok(be, hp) != CL_OK) return CL_E_INVALID;
  if (hp->amsgrad && !vmax)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: amsgrad needs max_exp_avg_sq");
  const adam_k k = adam_consts(hp);
  const long long nn = (long long)n;
  if (!hp->amsgrad) vmax = NULL;
  /* two loops, so that the plain one keeps no test of vmax per element */
  if (vmax) {
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (nn > CL_CPU_PAR_MIN)
#endif
    for (long long i = 0; i < nn; i++) adam_elem(&k, g[i], &p[i], &m[i], &v[i], &vmax[i]);
  } else {
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (nn > CL_CPU_PAR_MIN)
#endif
    for (long long i = 0; i < nn; i++) adam_elem(&k, g[i], &p[i], &m[i], &v[i], NULL);
  }
  return CL_OK;
}

/* torch's SGD, one element (dampening 0, no Nesterov); buf is read only when
 * momentum is on and it is not the first update. Shared as adam_elem is. */
static inline void sgd_elem(const cl_sgd_hp *hp, float d, float *p, float *buf) {
  d = l2_decayed(d, hp->weight_decay, *p);
  if (hp->momentum != 0.0f) {
    /* torch starts the buffer as a copy of the first gradient. */
    *buf = hp->first ? d : *buf * hp->momentum + d;
    d = *buf;
  }
  *p = *p + -hp->lr * d;
}

cl_status cl_cpu_sgd_update(cl_backend *be, float *p, const float *g, float *buf, size_t n,
                            const cl_sgd_hp *hp) {
  if (hp->momentum != 0.0f && !buf)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: sgd with momentum needs a buffer");
  const cl_sgd_hp k = *hp;
  if (k.momentum == 0.0f) buf = NULL; /* a buffer kept from earlier momentum stays as it is */
  const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (nn > CL_CPU_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++) {
    float b = buf && !k.first ? buf[i] : 0.0f;
    sgd_elem(&k, g[i], &p[i], &b);
    if (buf) buf[i] = b;
  }
  return CL_OK;
}

/* torch's RMSprop, one element, in its order:
 *   g += wd * p;  v = v * alpha + (1 - alpha) * g * g
 *   centered: ga = ga * alpha + (1 - alpha) * g;  avg = sqrt(v - ga * ga) + eps
 *   else avg = sqrt(v) + eps
 *   momentum: buf = buf * momentum + g / avg;  p += -lr * buf
 *   else p += (-lr * g) / avg                 (addcdiv: (value * t1) / t2)
 * 1 - alpha is a Python float rounded to float once. buf, ga NULL: off.
 * Shared by the update and its guard as adam_elem is. */
typedef struct rms_k {
  float alpha, one_m_alpha, eps, wd, momentum, neg_lr;
} rms_k;

static rms_k rms_consts(const cl_rmsprop_hp *hp) {
  rms_k k = {hp->alpha,        (float)(1.0 - (double)hp->alpha), hp->eps, hp->weight_decay,
             hp->momentum, -hp->lr};
  return k;
}

static inline void rms_elem(const rms_k *k, float gi, float *p, float *v, float *buf, float *ga) {
  gi = l2_decayed(gi, k->wd, *p);
  *v = *v * k->alpha + k->one_m_alpha * gi * gi;
  float avg;
  if (ga) {
    *ga = *ga * k->alpha + k->one_m_alpha * gi;
    avg = sqrtf(*v - *ga * *ga);
  } else {
    avg = sqrtf(*v);
  }
  avg = avg + k->eps;
  if (buf) {
    *buf = *buf * k->momentum + gi / avg;
    *p = *p + k->neg_lr * *buf;
  } else {
    *p = *p + k->neg_lr * gi / avg;
  }
}

/* The update needs its state (its guard may run before it exists: zeros). */
static cl_status rms_state_ok(cl_backend *be, const float *v, const float *buf, const float *ga,
                              const cl_rmsprop_hp *hp) {
  if (v && (hp->momentum == 0.0f || buf) && (!hp->centered || ga)) return CL_OK;
  return cl_cpu_fail(be, CL_E_INVALID,
                     "cpu backend: rmsprop needs square_avg%s%s",
                     hp->momentum != 0.0f ? ", momentum_buffer" : "",
                     hp->centered ? ", grad_avg" : "");
}

cl_status cl_cpu_rmsprop_update(cl_backend *be, float *p, const float *g, float *v, float *buf,
                                float *gavg, size_t n, const cl_rmsprop_hp *hp) {
  if (rms_state_ok(be, v, buf, gavg, hp) != CL_OK) return CL_E_INVALID;
  const rms_k k = rms_consts(hp);
  if (hp->momentum == 0.0f) buf = NULL; /* a buffer kept from earlier momentum stays */
  if (!hp->centered) gavg = NULL;
  const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (nn > CL_CPU_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++)
    rms_elem(&k, g[i], &p[i], &v[i], buf ? &buf[i] : NULL, gavg ? &gavg[i] : NULL);
  return CL_OK;
}

/* ---- the guards: a dry run of the update ------------------------------- */

/* Finite, as a comparison that vectorizes (NaN compares false). */
static inline int fin(float x) { return fabsf(x) <= FLT_MAX; }

static inline uint64_t fault_key(size_t i, int part, float x) {
  return (uint64_t)i * 8u + (uint64_t)part * 2u + (x != x);
}

/* The first fault among the new values of element i, or CL_FAULT_NONE. */
static inline uint64_t first_fault(size_t i, float g, float m, float v, float p) {
  if (!fin(g)) return fault_key(i, CL_PART_GRAD, g);
  if (!fin(m)) return fault_key(i, CL_PART_M, m);
  if (!fin(v)) return fault_key(i, CL_PART_V, v);
  if (!fin(p)) return fault_key(i, CL_PART_PARAM, p);
  return CL_FAULT_NONE;
}

/* The common case is all finite: one parallel pass reduces a flag only;
 * on a fault a serial pass finds the first (a step that fails anyway). */
cl_status cl_cpu_adam_check(cl_backend *be, const float *p, const float *g, const float *m,
                            const float *v, const float *vmax, size_t n, const cl_adam_hp *hp,
                            uint64_t *fault) {
  *fault = CL_FAULT_NONE;
  if (adam_step_ok(be, hp) != CL_OK) return CL_E_INVALID;
  const adam_k k = adam_consts(hp);
  const long long nn = (long long)n;
  const int ams = hp->amsgrad;
  int bad = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    reduction(|                                                      \
              : bad) if (nn > CL_CPU_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++) {
    float pi = p[i], mi = m ? m[i] : 0.0f, vi = v ? v[i] : 0.0f, xi = vmax ? vmax[i] : 0.0f;
    adam_elem(&k, g[i], &pi, &mi, &vi, ams ? &xi : NULL);
    bad |= !(fin(g[i]) & fin(mi) & fin(vi) & fin(pi));
  }
  for (size_t i = 0; bad && i < n; i++) {
    float pi = p[i], mi = m ? m[i] : 0.0f, vi = v ? v[i] : 0.0f, xi = vmax ? vmax[i] : 0.0f;
    adam_elem(&k, g[i], &pi, &mi, &vi, ams ? &xi : NULL);
    if ((*fault = first_fault(i, g[i], mi, vi, pi)) != CL_FAULT_NONE) break;
  }
  return CL_OK;
}

cl_status cl_cpu_sgd_check(cl_backend *be, const float *p, const float *g, const float *buf,
                           size_t n, const cl_sgd_hp *hp, uint64_t *fault) {
  *fault = CL_FAULT_NONE;
  const cl_sgd_hp k = *hp;
  if (k.momentum == 0.0f) buf = NULL;
  const long long nn = (long long)n;
  int bad = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    reduction(|                                                      \
              : bad) if (nn > CL_CPU_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++) {
    float pi = p[i], b = buf && !k.first ? buf[i] : 0.0f;
    sgd_elem(&k, g[i], &pi, &b);
    bad |= !(fin(g[i]) & fin(b) & fin(pi));
  }
  for (size_t i = 0; bad && i < n; i++) {
    float pi = p[i], b = buf && !k.first ? buf[i] : 0.0f;
    sgd_elem(&k, g[i], &pi, &b);
    if ((*fault = first_fault(i, g[i], b, 0.0f, pi)) != CL_FAULT_NONE) break;
  }
  return CL_OK;
}

/* RMSprop's guard: the parts are grad, momentum_buffer (M), square_avg (V),
 * p; grad_avg is a running mean of finite gradients, finite when they are. */
cl_status cl_cpu_rmsprop_check(cl_backend *be, const float *p, const float *g, const float *v,
                               const float *buf, const float *gavg, size_t n,
                               const cl_rmsprop_hp *hp, uint64_t *fault) {
  *fault = CL_FAULT_NONE;
  const rms_k k = rms_consts(hp);
  const int mom = hp->momentum != 0.0f, cen = hp->centered;
  const long long nn = (long long)n;
  int bad = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    reduction(|                                                      \
              : bad) if (nn > CL_CPU_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++) {
    float pi = p[i], vi = v ? v[i] : 0.0f, bi = buf ? buf[i] : 0.0f, ai = gavg ? gavg[i] : 0.0f;
    rms_elem(&k, g[i], &pi, &vi, mom ? &bi : NULL, cen ? &ai : NULL);
    bad |= !(fin(g[i]) & fin(bi) & fin(vi) & fin(pi));
  }
  for (size_t i = 0; bad && i < n; i++) {
    float pi = p[i], vi = v ? v[i] : 0.0f, bi = buf ? buf[i] : 0.0f, ai = gavg ? gavg[i] : 0.0f;
    rms_elem(&k, g[i], &pi, &vi, mom ? &bi : NULL, cen ? &ai : NULL);
    if ((*fault = first_fault(i, g[i], bi, vi, pi)) != CL_FAULT_NONE) break;
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
