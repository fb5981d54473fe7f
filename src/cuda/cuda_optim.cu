/*
 * cuda/cuda_optim.cu -- optimizer slots of the CUDA backend (twin of
 * src/cpu/cpu_optim.c): the unscale-and-check of float16 loss scaling, and
 * one launch each for
 * torch.optim.Adam (amsgrad too), torch.optim.AdamW, torch.optim.SGD and
 * torch.optim.RMSprop over the flat array of all parameters.
 *
 * The updates follow torch 1.13's single-tensor code operation for operation
 * (weight decay added to the gradient, bias corrections in double on the
 * host, addcdiv's order), so that a run tracks PyTorch's step by step.
 * Gradients, parameters and optimizer state are float32. Each update has a guard (adam_check,
 * sgd_check, rmsprop_check), a dry run that finds the first value it would make
 * non-finite; the step's end (update_step, in cuda_step.cu) stages
 * the constants (update_stage) and launches the guarded update decided on
 * the device (update_launch). The loss scaler's policy (when to grow or cut
 * the scale, skipping a step) lives in the core, not here.
 */
#include <math.h>  /* pow, sqrt */
#include <stdio.h>  /* snprintf */
#include <string.h> /* memcpy */

#include "cuda_common.h" /* context, check macros, cl_ld/cl_st, cl_block_sum */

/* ---- loss-scale unscaling ---------------------------------------------- */

/* torch's _amp_foreach_non_finite_check_and_unscale_: g *= inv_scale, and
 * *flag = 1 if any element was inf or NaN before or after. Many threads may
 * store 1 at once, a benign race (the same value); one store per warp keeps
 * the traffic down. Every thread of a warp reaches the vote: the loop is
 * left by all of them, and blockDim.x is a multiple of 32. */
__global__ void grad_unscale_kernel(float *g, size_t n, float inv_scale, int *flag) {
  bool bad = false;
  CL_CUDA_FOR(i, n) {
    const float v = g[i], u = v * inv_scale;
    bad |= !isfinite(v) || !isfinite(u);
    g[i] = u;
  }
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

cl_status cl_cuda_grad_unscale(cl_backend *be, float *g, size_t n, float inv_scale,
                               int *found_nonfinite) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  *found_nonfinite = 0;
  if (n == 0) return CL_OK;
  CL_CUDA_CHECK(be, cudaMemsetAsync(ctx->d_flag, 0, sizeof(int), ctx->stream));
  grad_unscale_kernel<<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, ctx->stream>>>(g, n, inv_scale,
                                                                            ctx->d_flag);
  CL_CUDA_LAUNCH_CHECK(be);
  CL_CUDA_CHECK(be, cudaMemcpyAsync(ctx->h_flag, ctx->d_flag, sizeof(int), cudaMemcpyDeviceToHost,
                                    ctx->stream));
  CL_CUDA_CHECK(be, cudaStreamSynchronize(ctx->stream));
  *found_nonfinite = *ctx->h_flag != 0;
  return CL_OK;
}

/* ---- Adam -------------------------------------------------------------- */

/* torch 1.13 _single_tensor_adam (and _single_tensor_adamw), maximize off:
 *   Adam: g += wd * p;   AdamW: p *= 1 - lr * wd
 *   m = m * b1 + (1 - b1) * g;   v = v * b2 + (1 - b2) * g * g
 *   amsgrad: vmax = max(vmax, v), used below in place of v
 *   p += -step_size * (m / (sqrt(v) / sqrt(bc2) + eps)),  step_size = lr / bc1
 * The factors: as torch does in Python floats, the corrections in double on
 * the host, then one rounding to float. The update and its guard both call
 * adam_elem, so the guard checks exactly the numbers the update writes. */
struct adam_k {
  float b1, one_minus_b1, b2, one_minus_b2, step_size, bc2_sqrt, eps, wd;
  float decay; /* AdamW: 1 - lr * weight_decay (then wd is 0); Adam: 1 */
};

static adam_k adam_consts(const cl_adam_hp *hp) {
  const double b1 = hp->beta1, b2 = hp->beta2;
  const double bc1 = 1.0 - pow(b1, (double)hp->step);
  const double bc2 = 1.0 - pow(b2, (double)hp->step);
  /* AdamW's p.mul_(1 - lr * weight_decay): the factor a Python float */
  const double decay = hp->decoupled ? 1.0 - (double)hp->lr * (double)hp->weight_decay : 1.0;
  adam_k k = {hp->beta1, (float)(1.0 - b1), hp->beta2, (float)(1.0 - b2),
              (float)((double)hp->lr / bc1), (float)sqrt(bc2), hp->eps,
              hp->decoupled ? 0.0f : hp->weight_decay, (float)decay};
  return k;
}

/* p, m, v (and amsgrad's running maximum x when AMS): the element's values
 * before on entry, after on return. */
template <bool AMS>
__device__ __forceinline__ void adam_elem(const adam_k &k, float gi, float &p, float &m,
                                          float &v, float &x) {
  if (k.wd != 0.0f) gi = gi + k.wd * p;
  if (k.decay != 1.0f) p = p * k.decay;
  m = m * k.b1 + k.one_minus_b1 * gi;
  v = v * k.b2 + k.one_minus_b2 * gi * gi; /* addcmul: (value * g) * g */
  float den_v = v;
  if (AMS) { /* torch.maximum: a NaN v stays NaN */
    x = x > v ? x : v;
    den_v = x;
  }
  const float denom = sqrtf(den_v) / k.bc2_sqrt + k.eps;
  p = p - k.step_size * (m / denom);
}

/* The grid's share of the update; the plain kernel's and the step's. */
template <bool AMS>
__device__ __forceinline__ void adam_apply(const adam_k &k, float *p, const float *g, float *m,
                                           float *v, float *vmax, size_t n) {
  CL_CUDA_FOR(i, n) {
    float pi = p[i], mi = m[i], vi = v[i], xi = AMS ? vmax[i] : 0.0f;
    adam_elem<AMS>(k, g[i], pi, mi, vi, xi);
    m[i] = mi;
    v[i] = vi;
    if (AMS) vmax[i] = xi;
    p[i] = pi;
  }
}

template <bool AMS>
__global__ void adam_kernel(float *p, const float *g, float *m, float *v, float *vmax, size_t n,
                            adam_k k) {
  adam_apply<AMS>(k, p, g, m, v, vmax, n);
}

static cl_status adam_step_ok(cl_backend *be, const cl_adam_hp *hp) {
  if (hp->step >= 1) return CL_OK;
  snprintf(be->err, sizeof be->err, "cuda adam: step %lld, expected 1 or more",
           (long long)hp->step);
  return CL_E_INVALID;
}

cl_status cl_cuda_adam_update(cl_backend *be, float *p, const float *g, float *m, float *v,
                              float *vmax, size_t n, const cl_adam_hp *hp) {
  if (adam_step_ok(be, hp) != CL_OK) return CL_E_INVALID;
  if (hp->amsgrad && !vmax) {
    snprintf(be->err, sizeof be->err, "cuda adam: amsgrad needs max_exp_avg_sq");
    return CL_E_INVALID;
  }
  if (n == 0) return CL_OK;
  cudaStream_t s = cl_cuda_ctx_of(be)->stream;
  if (hp->amsgrad)
    adam_kernel<true><<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, s>>>(p, g, m, v, vmax, n,
                                                                   adam_consts(hp));
  else
    adam_kernel<false><<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, s>>>(p, g, m, v, NULL, n,
                                                                    adam_consts(hp));
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* ---- SGD --------------------------------------------------------------- */

/* torch 1.13 _single_tensor_sgd, dampening 0, nesterov off:
 *   g += wd * p;  buf = first ? g : buf * momentum + g;  p += -lr * buf
 * buf is NULL when momentum is 0, and then p += -lr * g. One element,
 * shared by the update and its guard as adam_elem is. */
__device__ __forceinline__ void sgd_elem(float lr, float momentum, float wd, int first,
                                         bool has_buf, float d, float &p, float &b) {
  if (wd != 0.0f) d = d + wd * p;
  if (has_buf) {
    b = first ? d : b * momentum + d;
    d = b;
  }
  p = p - lr * d;
}

__device__ __forceinline__ void sgd_apply(float *p, const float *g, float *buf, size_t n, float lr,
                                          float momentum, float wd, int first) {
  CL_CUDA_FOR(i, n) {
    float pi = p[i], b = buf && !first ? buf[i] : 0.0f;
    sgd_elem(lr, momentum, wd, first, buf != NULL, g[i], pi, b);
    if (buf) buf[i] = b;
    p[i] = pi;
  }
}

__global__ void sgd_kernel(float *p, const float *g, float *buf, size_t n, float lr,
                           float momentum, float wd, int first) {
  sgd_apply(p, g, buf, n, lr, momentum, wd, first);
}

static cl_status sgd_buf_ok(cl_backend *be, const float *buf, const cl_sgd_hp *hp) {
  if (hp->momentum == 0.0f || buf) return CL_OK;
  snprintf(be->err, sizeof be->err, "cuda sgd: momentum %g needs a momentum buffer",
           (double)hp->momentum);
  return CL_E_INVALID;
}

cl_status cl_cuda_sgd_update(cl_backend *be, float *p, const float *g, float *buf, size_t n,
                             const cl_sgd_hp *hp) {
  if (sgd_buf_ok(be, buf, hp) != CL_OK) return CL_E_INVALID;
  if (n == 0) return CL_OK;
  sgd_kernel<<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, cl_cuda_ctx_of(be)->stream>>>(
      p, g, hp->momentum != 0.0f ? buf : NULL, n, hp->lr, hp->momentum, hp->weight_decay,
      hp->first ? 1 : 0);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* ---- RMSprop ----------------------------------------------------------- */

/* torch 1.13 _single_tensor_rmsprop (the CPU twin's rms_elem):
 *   g += wd * p;  v = v * alpha + (1 - alpha) * g * g
 *   centered: ga = ga * alpha + (1 - alpha) * g;  avg = sqrt(v - ga * ga) + eps
 *   else avg = sqrt(v) + eps
 *   momentum: buf = buf * momentum + g / avg;  p += -lr * buf
 *   else p += (-lr * g) / avg
 * 1 - alpha a Python float rounded to float once, on the host. */
struct rms_k {
  float alpha, one_m_alpha, eps, wd, momentum, neg_lr;
};

static rms_k rms_consts(const cl_rmsprop_hp *hp) {
  rms_k k = {hp->alpha,        (float)(1.0 - (double)hp->alpha), hp->eps, hp->weight_decay,
             hp->momentum, -hp->lr};
  return k;
}

/* p, v, buf (MOM), ga (CEN): the element's values before on entry, after
 * on return. Shared by the update and its guard as adam_elem is. */
template <bool MOM, bool CEN>
__device__ __forceinline__ void rms_elem(const rms_k &k, float gi, float &p, float &v, float &b,
                                         float &ga) {
  if (k.wd != 0.0f) gi = gi + k.wd * p;
  v = v * k.alpha + k.one_m_alpha * gi * gi;
  float avg;
  if (CEN) {
    ga = ga * k.alpha + k.one_m_alpha * gi;
    avg = sqrtf(v - ga * ga);
  } else {
    avg = sqrtf(v);
  }
  avg = avg + k.eps;
  if (MOM) {
    b = b * k.momentum + gi / avg;
    p = p + k.neg_lr * b;
  } else {
    p = p + k.neg_lr * gi / avg;
  }
}

template <bool MOM, bool CEN>
__device__ __forceinline__ void rms_apply(const rms_k &k, float *p, const float *g, float *v,
                                          float *buf, float *gavg, size_t n) {
  CL_CUDA_FOR(i, n) {
    float pi = p[i], vi = v[i], bi = MOM ? buf[i] : 0.0f, ai = CEN ? gavg[i] : 0.0f;
    rms_elem<MOM, CEN>(k, g[i], pi, vi, bi, ai);
    v[i] = vi;
    if (MOM) buf[i] = bi;
    if (CEN) gavg[i] = ai;
    p[i] = pi;
  }
}

template <bool MOM, bool CEN>
__global__ void rms_kernel(float *p, const float *g, float *v, float *buf, float *gavg, size_t n,
                           rms_k k) {
  rms_apply<MOM, CEN>(k, p, g, v, buf, gavg, n);
}

/* The update needs its state (its guard may run before it exists: zeros). */
static cl_status rms_state_ok(cl_backend *be, const float *v, const float *buf, const float *ga,
                              const cl_rmsprop_hp *hp) {
  if (v && (hp->momentum == 0.0f || buf) && (!hp->centered || ga)) return CL_OK;
  snprintf(be->err, sizeof be->err, "cuda rmsprop: needs square_avg%s%s",
           hp->momentum != 0.0f ? ", momentum_buffer" : "", hp->centered ? ", grad_avg" : "");
  return CL_E_INVALID;
}

/* The four variants' launch (momentum on or off, centered or not); Args:
 * the kernel's arguments after p, g, v, buf, gavg, n. */
#define RMS_LAUNCH(kernel, mom, cen, grid, stream, ...)                                           \
  do {                                                                                            \
    if (mom && cen)                                                                               \
      kernel<true, true><<<grid, CL_CUDA_THREADS, 0, stream>>>(__VA_ARGS__);                      \
    else if (mom)                                                                                 \
      kernel<true, false><<<grid, CL_CUDA_THREADS, 0, stream>>>(__VA_ARGS__);                     \
    else if (cen)                                                                                 \
      kernel<false, true><<<grid, CL_CUDA_THREADS, 0, stream>>>(__VA_ARGS__);                     \
    else                                                                                          \
      kernel<false, false><<<grid, CL_CUDA_THREADS, 0, stream>>>(__VA_ARGS__);                    \
  } while (0)

cl_status cl_cuda_rmsprop_update(cl_backend *be, float *p, const float *g, float *v, float *buf,
                                 float *gavg, size_t n, const cl_rmsprop_hp *hp) {
  if (rms_state_ok(be, v, buf, gavg, hp) != CL_OK) return CL_E_INVALID;
  if (n == 0) return CL_OK;
  const bool mom = hp->momentum != 0.0f, cen = hp->centered != 0;
  RMS_LAUNCH(rms_kernel, mom, cen, cl_cuda_blocks(n), cl_cuda_ctx_of(be)->stream, p, g, v,
             mom ? buf : NULL, cen ? gavg : NULL, n, rms_consts(hp));
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* ---- the guards: a dry run of the update ------------------------------- */

/* The first fault (backend.h's key) of element i's new values, or
 * CL_FAULT_NONE. The same order as the CPU twin: gradient, m, v, p. */
__device__ __forceinline__ unsigned long long fault_of(size_t i, float g, float m, float v,
                                                       float p) {
  const float x[4] = {g, m, v, p};
  for (int part = 0; part < 4; part++)
    if (!isfinite(x[part]))
      return (unsigned long long)i * 8u + (unsigned long long)part * 2u + (isnan(x[part]) ? 1u : 0u);
  return CL_FAULT_NONE;
}

/* The lowest key over the grid by atomicMin on one 64-bit word: only
 * threads that found a fault store, so the finite case costs a read of the
 * inputs and no traffic. */
template <bool AMS>
__device__ __forceinline__ void adam_guard(const adam_k &k, const float *p, const float *g,
                                           const float *m, const float *v, const float *vmax,
                                           size_t n, unsigned long long *fault) {
  CL_CUDA_FOR(i, n) {
    float pi = p[i], mi = m ? m[i] : 0.0f, vi = v ? v[i] : 0.0f, xi = vmax ? vmax[i] : 0.0f;
    adam_elem<AMS>(k, g[i], pi, mi, vi, xi);
    const unsigned long long f = fault_of(i, g[i], mi, vi, pi);
    if (f != CL_FAULT_NONE) atomicMin(fault, f);
  }
}

template <bool AMS>
__global__ void adam_check_kernel(const float *p, const float *g, const float *m, const float *v,
                                  const float *vmax, size_t n, adam_k k,
                                  unsigned long long *fault) {
  adam_guard<AMS>(k, p, g, m, v, vmax, n, fault);
}

__device__ __forceinline__ void sgd_guard(const float *p, const float *g, const float *buf,
                                          size_t n, float lr, float momentum, float wd, int first,
                                          unsigned long long *fault) {
  CL_CUDA_FOR(i, n) {
    float pi = p[i], b = buf && !first ? buf[i] : 0.0f;
    sgd_elem(lr, momentum, wd, first, momentum != 0.0f, g[i], pi, b);
    const unsigned long long f = fault_of(i, g[i], b, 0.0f, pi);
    if (f != CL_FAULT_NONE) atomicMin(fault, f);
  }
}

__global__ void sgd_check_kernel(const float *p, const float *g, const float *buf, size_t n,
                                 float lr, float momentum, float wd, int first,
                                 unsigned long long *fault) {
  sgd_guard(p, g, buf, n, lr, momentum, wd, first, fault);
}

/* RMSprop's: the parts are grad, momentum_buffer (m), square_avg (v), p;
 * grad_avg is a running mean of finite gradients, finite when they are. */
template <bool MOM, bool CEN>
__device__ __forceinline__ void rms_guard(const rms_k &k, const float *p, const float *g,
                                          const float *v, const float *buf, const float *gavg,
                                          size_t n, unsigned long long *fault) {
  CL_CUDA_FOR(i, n) {
    float pi = p[i], vi = v ? v[i] : 0.0f, bi = MOM && buf ? buf[i] : 0.0f,
          ai = CEN && gavg ? gavg[i] : 0.0f;
    rms_elem<MOM, CEN>(k, g[i], pi, vi, bi, ai);
    const unsigned long long f = fault_of(i, g[i], bi, vi, pi);
    if (f != CL_FAULT_NONE) atomicMin(fault, f);
  }
}

template <bool MOM, bool CEN>
__global__ void rms_check_kernel(const float *p, const float *g, const float *v, const float *buf,
                                 const float *gavg, size_t n, rms_k k, unsigned long long *fault) {
  rms_guard<MOM, CEN>(k, p, g, v, buf, gavg, n, fault);
}

/* The 64-bit word is the first slot of the loss's partial sums (8 bytes,
 * aligned), free between calls: no buffer of its own. */
static unsigned long long *fault_word(cl_cuda_ctx *ctx) {
  return reinterpret_cast<unsigned long long *>(ctx->d_partials);
}

static cl_status fault_begin(cl_backend *be, cl_cuda_ctx *ctx) {
  CL_CUDA_CHECK(be, cudaMemsetAsync(fault_word(ctx), 0xff, sizeof(unsigned long long),
                                    ctx->stream));
  return CL_OK;
}

static cl_status fault_end(cl_backend *be, cl_cuda_ctx *ctx, uint64_t *fault) {
  CL_CUDA_LAUNCH_CHECK(be);
  CL_CUDA_CHECK(be, cudaMemcpyAsync(ctx->h_partials, fault_word(ctx), sizeof(unsigned long long),
                                    cudaMemcpyDeviceToHost, ctx->stream));
  CL_CUDA_CHECK(be, cudaStreamSynchronize(ctx->stream));
  unsigned long long f;
  memcpy(&f, ctx->h_partials, sizeof f);
  *fault = (uint64_t)f;
  return CL_OK;
}

cl_status cl_cuda_adam_check(cl_backend *be, const float *p, const float *g, const float *m,
                             const float *v, const float *vmax, size_t n, const cl_adam_hp *hp,
                             uint64_t *fault) {
  *fault = CL_FAULT_NONE;
  if (adam_step_ok(be, hp) != CL_OK) return CL_E_INVALID;
  if (n == 0) return CL_OK;
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const cl_status st = fault_begin(be, ctx);
  if (st != CL_OK) return st;
  if (hp->amsgrad)
    adam_check_kernel<true><<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, ctx->stream>>>(
        p, g, m, v, vmax, n, adam_consts(hp), fault_word(ctx));
  else
    adam_check_kernel<false><<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, ctx->stream>>>(
        p, g, m, v, NULL, n, adam_consts(hp), fault_word(ctx));
  return fault_end(be, ctx, fault);
}

cl_status cl_cuda_sgd_check(cl_backend *be, const float *p, const float *g, const float *buf,
                            size_t n, const cl_sgd_hp *hp, uint64_t *fault) {
  *fault = CL_FAULT_NONE;
  if (n == 0) return CL_OK;
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const cl_status st = fault_begin(be, ctx);
  if (st != CL_OK) return st;
  sgd_check_kernel<<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, ctx->stream>>>(
      p, g, hp->momentum != 0.0f ? buf : NULL, n, hp->lr, hp->momentum, hp->weight_decay,
      hp->first ? 1 : 0, fault_word(ctx));
  return fault_end(be, ctx, fault);
}

cl_status cl_cuda_rmsprop_check(cl_backend *be, const float *p, const float *g, const float *v,
                                const float *buf, const float *gavg, size_t n,
                                const cl_rmsprop_hp *hp, uint64_t *fault) {
  *fault = CL_FAULT_NONE;
  if (n == 0) return CL_OK;
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const cl_status st = fault_begin(be, ctx);
  if (st != CL_OK) return st;
  const bool mom = hp->momentum != 0.0f, cen = hp->centered != 0;
  RMS_LAUNCH(rms_check_kernel, mom, cen, cl_cuda_blocks(n), ctx->stream, p, g, v, buf, gavg, n,
             rms_consts(hp), fault_word(ctx));
  return fault_end(be, ctx, fault);
}

/* ---- the training step's update, decided on the device ------------------
 * backend.h's cl_update_args: the guard, the decision and the update read
 * the step's results (cl_step_vals) and the update's constants from device
 * memory, never from the host, so the launches below are the same at every
 * step and a graph of them replays any step: the constants change (the
 * bias corrections with the step count, a schedule's lr) through h_consts,
 * a pinned block the host rewrites at each call and the stream copies. */
struct step_consts {
  adam_k a;
  rms_k r;
  float lr, momentum, wd; /* SGD */
  int first;
};
static_assert(sizeof(step_consts) <= CL_CUDA_CONSTS_BYTES, "step constants outgrew their scratch");

template <bool AMS>
__global__ void adam_step_guard_kernel(const float *p, const float *g, const float *m,
                                       const float *v, const float *vmax, size_t n,
                                       const step_consts *c, cl_step_vals *vals, int check_loss) {
  if (vals->found_inf || (check_loss && !isfinite(vals->loss))) return;
  adam_guard<AMS>(c->a, p, g, m, v, vmax, n, reinterpret_cast<unsigned long long *>(&vals->fault));
}

__global__ void sgd_step_guard_kernel(const float *p, const float *g, const float *buf, size_t n,
                                      const step_consts *c, cl_step_vals *vals, int check_loss) {
  if (vals->found_inf || (check_loss && !isfinite(vals->loss))) return;
  sgd_guard(p, g, buf, n, c->lr, c->momentum, c->wd, c->first,
            reinterpret_cast<unsigned long long *>(&vals->fault));
}

template <bool MOM, bool CEN>
__global__ void rms_step_guard_kernel(const float *p, const float *g, const float *v,
                                      const float *buf, const float *gavg, size_t n,
                                      const step_consts *c, cl_step_vals *vals, int check_loss) {
  if (vals->found_inf || (check_loss && !isfinite(vals->loss))) return;
  rms_guard<MOM, CEN>(c->r, p, g, v, buf, gavg, n,
                      reinterpret_cast<unsigned long long *>(&vals->fault));
}

__global__ void step_decide_kernel(cl_step_vals *v, int check_loss) {
  v->skipped = v->found_inf || v->fault != CL_FAULT_NONE || (check_loss && !isfinite(v->loss));
}

template <bool AMS>
__global__ void adam_step_kernel(float *p, const float *g, float *m, float *v, float *vmax,
                                 size_t n, const step_consts *c, const cl_step_vals *vals) {
  if (vals->skipped) return;
  adam_apply<AMS>(c->a, p, g, m, v, vmax, n);
}

__global__ void sgd_step_kernel(float *p, const float *g, float *buf, size_t n,
                                const step_consts *c, const cl_step_vals *vals) {
  if (vals->skipped) return;
  sgd_apply(p, g, buf, n, c->lr, c->momentum, c->wd, c->first);
}

template <bool MOM, bool CEN>
__global__ void rms_step_kernel(float *p, const float *g, float *v, float *buf, float *gavg,
                                size_t n, const step_consts *c, const cl_step_vals *vals) {
  if (vals->skipped) return;
  rms_apply<MOM, CEN>(c->r, p, g, v, buf, gavg, n);
}

cl_status cl_cuda_update_stage(cl_backend *be, const cl_update_args *u) {
  step_consts c;
  memset(&c, 0, sizeof c);
  if (u->adam) {
    if (adam_step_ok(be, &u->ahp) != CL_OK) return CL_E_INVALID;
    if (u->ahp.amsgrad && !u->vmax) {
      snprintf(be->err, sizeof be->err, "cuda adam: amsgrad needs max_exp_avg_sq");
      return CL_E_INVALID;
    }
    c.a = adam_consts(&u->ahp);
  } else if (u->rmsprop) {
    if (rms_state_ok(be, u->v, u->m, u->vmax, &u->rhp) != CL_OK) return CL_E_INVALID;
    c.r = rms_consts(&u->rhp);
  } else {
    if (sgd_buf_ok(be, u->m, &u->shp) != CL_OK) return CL_E_INVALID;
    c.lr = u->shp.lr;
    c.momentum = u->shp.momentum;
    c.wd = u->shp.weight_decay;
    c.first = u->shp.first ? 1 : 0;
  }
  memcpy(cl_cuda_ctx_of(be)->h_consts, &c, sizeof c);
  return CL_OK;
}

cl_status cl_cuda_update_launch(cl_backend *be, const cl_update_args *u, cl_step_vals *vals) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  cudaStream_t s = ctx->stream;
  const step_consts *c = (const step_consts *)ctx->d_consts;
  const size_t n = u->n;
  const unsigned blocks = cl_cuda_blocks(n);
  CL_CUDA_CHECK(be, cudaMemcpyAsync(ctx->d_consts, ctx->h_consts, sizeof(step_consts),
                                    cudaMemcpyHostToDevice, s));
  if (u->unscale) {
    grad_unscale_kernel<<<blocks, CL_CUDA_THREADS, 0, s>>>(u->g, n, u->inv_scale, &vals->found_inf);
    CL_CUDA_LAUNCH_CHECK(be);
  }
  if (u->max_norm > 0) {
    const cl_status st = cl_cuda_clip_launch(be, u, vals);
    if (st != CL_OK) return st;
  }
  CL_CUDA_CHECK(be, cudaMemsetAsync(&vals->fault, 0xff, sizeof vals->fault, s));
  const int cl = u->check_loss;
  const bool mom = u->rhp.momentum != 0.0f, cen = u->rhp.centered != 0;
  if (u->rmsprop)
    RMS_LAUNCH(rms_step_guard_kernel, mom, cen, blocks, s, u->p, u->g, u->v, mom ? u->m : NULL,
               cen ? u->vmax : NULL, n, c, vals, cl);
  else if (u->adam && u->ahp.amsgrad)
    adam_step_guard_kernel<true><<<blocks, CL_CUDA_THREADS, 0, s>>>(u->p, u->g, u->m, u->v,
                                                                   u->vmax, n, c, vals, cl);
  else if (u->adam)
    adam_step_guard_kernel<false><<<blocks, CL_CUDA_THREADS, 0, s>>>(u->p, u->g, u->m, u->v, NULL,
                                                                    n, c, vals, cl);
  else
    sgd_step_guard_kernel<<<blocks, CL_CUDA_THREADS, 0, s>>>(
        u->p, u->g, u->shp.momentum != 0.0f ? u->m : NULL, n, c, vals, cl);
  CL_CUDA_LAUNCH_CHECK(be);
  step_decide_kernel<<<1, 1, 0, s>>>(vals, cl);
  CL_CUDA_LAUNCH_CHECK(be);
  if (u->rmsprop)
    RMS_LAUNCH(rms_step_kernel, mom, cen, blocks, s, u->p, u->g, u->v, mom ? u->m : NULL,
               cen ? u->vmax : NULL, n, c, vals);
  else if (u->adam && u->ahp.amsgrad)
    adam_step_kernel<true><<<blocks, CL_CUDA_THREADS, 0, s>>>(u->p, u->g, u->m, u->v, u->vmax, n,
                                                             c, vals);
  else if (u->adam)
    adam_step_kernel<false><<<blocks, CL_CUDA_THREADS, 0, s>>>(u->p, u->g, u->m, u->v, NULL, n, c,
                                                              vals);
  else
    sgd_step_kernel<<<blocks, CL_CUDA_THREADS, 0, s>>>(
        u->p, u->g, u->shp.momentum != 0.0f ? u->m : NULL, n, c, vals);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}
