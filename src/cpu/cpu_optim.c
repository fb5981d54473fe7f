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
#include "../host/x86.h" /* CL_CPU_X86 */

#include <float.h>
#include <math.h>

/* torch's operations, each rounded once: no a * b + c fused into one FMA
 * (GCC fuses across statements and intrinsics in GNU C mode, which R
 * builds in), so that Adam's vector lanes and its floats agree bit for bit
 * (cpu_adam_tmpl.h). */
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_PAR_MIN 32768

/* The guards' dry runs go in blocks of this many elements (a whole number
 * of vectors), and Adam's update in the same blocks. */
#define CL_GUARD_BLOCK 256

static size_t block_end(size_t lo, size_t n) {
  return lo + CL_GUARD_BLOCK < n ? lo + CL_GUARD_BLOCK : n;
}

/* torch's Adam: the factors in double rounded to float once (adam_consts),
 * the rest in float (cpu_adam_tmpl.h). The update and its guard both run
 * adam_run, so the guard checks exactly the numbers the update writes. */
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

#define CL_SIMD 1
#include "cpu_simd.h"
#include "cpu_adam_tmpl.h" /* l2_decayed_generic, adam_vec_generic, adam_run_generic, ... */
#if CL_CPU_X86
#define CL_SIMD 512
#include "cpu_simd.h"
#include "cpu_adam_tmpl.h" /* adam_span_avx512, adam_flags_avx512 */
#define CL_SIMD 256
#include "cpu_simd.h"
#include "cpu_adam_tmpl.h" /* adam_span_avx2, adam_flags_avx2 */
#endif

/* An instruction set's two passes over a block (cpu_adam_tmpl.h). */
typedef struct adam_fns {
  void (*span)(const adam_k *k, float *p, const float *g, float *m, float *v, float *vmax,
               size_t lo, size_t hi);
  int (*flags)(const adam_k *k, const float *p, const float *g, const float *m, const float *v,
               const float *vmax, size_t lo, size_t hi);
} adam_fns;

/* The backend's instruction set's passes (the GEMM kind's, cl_cpu_isa_of). */
static adam_fns adam_fns_of(const cl_backend *be) {
#if CL_CPU_X86
  const cl_cpu_gemm_kind isa = cl_cpu_isa_of(be);
  if (isa == CL_CPU_GEMM_AVX512) return (adam_fns){adam_span_avx512, adam_flags_avx512};
  if (isa == CL_CPU_GEMM_AVX2) return (adam_fns){adam_span_avx2, adam_flags_avx2};
#endif
  (void)be;
  return (adam_fns){adam_span_generic, adam_flags_generic};
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
  const adam_fns fns = adam_fns_of(be);
  if (!hp->amsgrad) vmax = NULL;
  /* blocks of the guard's (CL_GUARD_BLOCK, a whole number of vectors), so
   * that an element is in a vector or a float as in the guard's dry run */
  const long long nb = (long long)((n + CL_GUARD_BLOCK - 1) / CL_GUARD_BLOCK);
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (n > CL_CPU_PAR_MIN)
#endif
  for (long long b = 0; b < nb; b++) {
    const size_t lo = (size_t)b * CL_GUARD_BLOCK;
    fns.span(&k, p, g, m, v, vmax, lo, block_end(lo, n));
  }
  return CL_OK;
}

/* torch's SGD, one element (dampening 0, no Nesterov); buf is read only when
 * momentum is on and it is not the first update. Shared by the update and its guard. */
static inline void sgd_elem(const cl_sgd_hp *hp, float d, float *p, float *buf) {
  d = l2_decayed_generic(d, hp->weight_decay, *p);
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
 * Shared by the update and its guard. */
typedef struct rms_k {
  float alpha, one_m_alpha, eps, wd, momentum, neg_lr;
} rms_k;

static rms_k rms_consts(const cl_rmsprop_hp *hp) {
  rms_k k = {hp->alpha,        (float)(1.0 - (double)hp->alpha), hp->eps, hp->weight_decay,
             hp->momentum, -hp->lr};
  return k;
}

static inline void rms_elem(const rms_k *k, float gi, float *p, float *v, float *buf, float *ga) {
  gi = l2_decayed_generic(gi, k->wd, *p);
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

/* A guard's dry run over elements lo..hi-1: the update's new values of
 * each, without writing them, and whether any is not finite (as the scan
 * below needs them: bad flags only, or the values too when out is not
 * NULL). A block, not an element, per call: the loop stays inlined. */
typedef struct dry_block {
  float m[CL_GUARD_BLOCK], v[CL_GUARD_BLOCK], p[CL_GUARD_BLOCK];
} dry_block;
typedef int (*dry_fn)(const void *ctx, size_t lo, size_t hi, dry_block *out);

static inline int elem_bad(float g, float m, float v, float p) {
  return !(fin(g) & fin(m) & fin(v) & fin(p));
}

/* A block's flag for cl_cpu_sum_chunks (cpu_sum.c): 1 when it holds a fault. */
typedef struct scan_ctx {
  dry_fn dry;
  const void *ctx;
  size_t n;
} scan_ctx;

static double block_bad(long long b, void *p) {
  const scan_ctx *sc = p;
  const size_t lo = (size_t)b * CL_GUARD_BLOCK;
  return sc->dry(sc->ctx, lo, block_end(lo, sc->n), NULL);
}

/* The one scan of the three guards. The common case is all finite: one
 * parallel pass sums the blocks' flags only; on a fault a serial pass finds
 * the first (a step that fails anyway). */
static uint64_t guard_scan(cl_backend *be, const float *g, size_t n, dry_fn dry,
                           const void *ctx) {
  scan_ctx sc = {dry, ctx, n};
  const long long nb = (long long)((n + CL_GUARD_BLOCK - 1) / CL_GUARD_BLOCK);
  if (cl_cpu_sum_chunks(be->n_threads, nb, n > CL_CPU_PAR_MIN, block_bad, &sc) == 0.0)
    return CL_FAULT_NONE;
  for (size_t lo = 0; lo < n; lo += CL_GUARD_BLOCK) {
    const size_t hi = block_end(lo, n);
    dry_block d;
    if (!dry(ctx, lo, hi, &d)) continue;
    for (size_t i = lo; i < hi; i++) {
      const uint64_t f = first_fault(i, g[i], d.m[i - lo], d.v[i - lo], d.p[i - lo]);
      if (f != CL_FAULT_NONE) return f;
    }
  }
  return CL_FAULT_NONE;
}

/* Each dry run copies its context to the stack, so that the loop keeps it
 * in registers rather than rereading it after each store to out. */
typedef struct adam_dry_ctx {
  adam_k k;
  adam_fns fns;
  const float *p, *g, *m, *v, *vmax; /* vmax NULL without amsgrad */
} adam_dry_ctx;

/* The flags through the backend's adam_flags, the values (a fault's block, once)
 * one float at a time. */
static int adam_dry(const void *ctx, size_t lo, size_t hi, dry_block *out) {
  const adam_dry_ctx c = *(const adam_dry_ctx *)ctx;
  if (!out) return c.fns.flags(&c.k, c.p, c.g, c.m, c.v, c.vmax, lo, hi);
  int bad = 0;
  for (size_t i = lo; i < hi; i++) {
    float pi = c.p[i], mi = c.m ? c.m[i] : 0.0f, vi = c.v ? c.v[i] : 0.0f;
    float xi = c.vmax ? c.vmax[i] : 0.0f;
    adam_vec_generic(&c.k, c.g[i], &pi, &mi, &vi, c.vmax ? &xi : NULL);
    out->p[i - lo] = pi, out->m[i - lo] = mi, out->v[i - lo] = vi;
    bad |= elem_bad(c.g[i], mi, vi, pi);
  }
  return bad;
}

cl_status cl_cpu_adam_check(cl_backend *be, const float *p, const float *g, const float *m,
                            const float *v, const float *vmax, size_t n, const cl_adam_hp *hp,
                            uint64_t *fault) {
  *fault = CL_FAULT_NONE;
  if (adam_step_ok(be, hp) != CL_OK) return CL_E_INVALID;
  const adam_dry_ctx c = {adam_consts(hp), adam_fns_of(be), p, g, m, v, hp->amsgrad ? vmax : NULL};
  *fault = guard_scan(be, g, n, adam_dry, &c);
  return CL_OK;
}

typedef struct sgd_dry_ctx {
  cl_sgd_hp k;
  const float *p, *g, *buf;
} sgd_dry_ctx;

/* SGD's parts: the buffer as M; it has no V (0, never a fault). */
static int sgd_dry(const void *ctx, size_t lo, size_t hi, dry_block *out) {
  const sgd_dry_ctx c = *(const sgd_dry_ctx *)ctx;
  int bad = 0;
  for (size_t i = lo; i < hi; i++) {
    float pi = c.p[i], b = c.buf && !c.k.first ? c.buf[i] : 0.0f;
    sgd_elem(&c.k, c.g[i], &pi, &b);
    if (out) out->p[i - lo] = pi, out->m[i - lo] = b, out->v[i - lo] = 0.0f;
    bad |= elem_bad(c.g[i], b, 0.0f, pi);
  }
  return bad;
}

cl_status cl_cpu_sgd_check(cl_backend *be, const float *p, const float *g, const float *buf,
                           size_t n, const cl_sgd_hp *hp, uint64_t *fault) {
  const sgd_dry_ctx c = {*hp, p, g, hp->momentum == 0.0f ? NULL : buf};
  *fault = guard_scan(be, g, n, sgd_dry, &c);
  return CL_OK;
}

/* RMSprop's guard: the parts are grad, momentum_buffer (M), square_avg (V),
 * p; grad_avg is a running mean of finite gradients, finite when they are. */
typedef struct rms_dry_ctx {
  rms_k k;
  const float *p, *g, *v, *buf, *gavg;
  int mom, cen;
} rms_dry_ctx;

static int rms_dry(const void *ctx, size_t lo, size_t hi, dry_block *out) {
  const rms_dry_ctx c = *(const rms_dry_ctx *)ctx;
  int bad = 0;
  for (size_t i = lo; i < hi; i++) {
    float pi = c.p[i], vi = c.v ? c.v[i] : 0.0f, bi = c.buf ? c.buf[i] : 0.0f;
    float ai = c.gavg ? c.gavg[i] : 0.0f;
    rms_elem(&c.k, c.g[i], &pi, &vi, c.mom ? &bi : NULL, c.cen ? &ai : NULL);
    if (out) out->p[i - lo] = pi, out->m[i - lo] = bi, out->v[i - lo] = vi;
    bad |= elem_bad(c.g[i], bi, vi, pi);
  }
  return bad;
}

cl_status cl_cpu_rmsprop_check(cl_backend *be, const float *p, const float *g, const float *v,
                               const float *buf, const float *gavg, size_t n,
                               const cl_rmsprop_hp *hp, uint64_t *fault) {
  const rms_dry_ctx c = {rms_consts(hp), p, g, v, buf, gavg, hp->momentum != 0.0f, hp->centered};
  *fault = guard_scan(be, g, n, rms_dry, &c);
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
