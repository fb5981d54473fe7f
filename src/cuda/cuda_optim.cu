/*
 * cuda/cuda_optim.cu -- loss and optimizer slots of the CUDA backend (twin of
 * src/cpu/cpu_optim.c): the mean squared error with its gradient, the
 * unscale-and-check of float16 loss scaling, and one launch each for
 * torch.optim.Adam and torch.optim.SGD over the flat array of all parameters.
 *
 * The updates follow torch 1.13's single-tensor code operation for operation
 * (weight decay added to the gradient, bias corrections in double on the
 * host, addcdiv's order), so that a run tracks PyTorch's step by step. Only
 * the prediction is in the storage type; targets, gradients, parameters and
 * optimizer state are float32. The loss scaler's policy (when to grow or cut
 * the scale, skipping a step) lives in the core, not here.
 */
#include <math.h>  /* pow, sqrt */
#include <stdio.h> /* snprintf */

#include "cuda_common.h" /* context, check macros, cl_ld/cl_st, cl_block_sum */

/* ---- mean squared error ------------------------------------------------ */

/* Each block leaves the double sum of its squared differences in
 * partials[blockIdx.x]; the host adds the partials in order, so the loss is
 * the same from run to run. grad may alias target (no __restrict__): each
 * element is read before it is written, by the same thread. */
template <typename T>
__global__ void mse_kernel(const T *pred, const float *target, size_t n, float gscale,
                           float *grad, double *partials) {
  double sum = 0.0;
  CL_CUDA_FOR(i, n) {
    /* the difference in float, squared in double: cpu_optim.c's formula */
    const float d = cl_ld(pred[i]) - target[i];
    sum += (double)d * (double)d;
    if (grad) grad[i] = gscale * d;
  }
  sum = cl_block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

template <typename T>
static cl_status mse_t(cl_backend *be, const void *pred, const float *target, size_t n,
                       float gscale, float *grad, double *sum) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  unsigned blocks = cl_cuda_blocks(n);
  if (blocks > CL_CUDA_MAX_PARTIALS) blocks = CL_CUDA_MAX_PARTIALS;
  mse_kernel<T><<<blocks, CL_CUDA_THREADS, 0, ctx->stream>>>(
      (const T *)pred, target, n, gscale, grad, ctx->d_partials);
  CL_CUDA_LAUNCH_CHECK(be);
  CL_CUDA_CHECK(be, cudaMemcpyAsync(ctx->h_partials, ctx->d_partials, blocks * sizeof(double),
                                    cudaMemcpyDeviceToHost, ctx->stream));
  CL_CUDA_CHECK(be, cudaStreamSynchronize(ctx->stream));
  double s = 0.0;
  for (unsigned b = 0; b < blocks; b++) s += ctx->h_partials[b];
  *sum = s;
  return CL_OK;
}

cl_status cl_cuda_mse(cl_backend *be, const void *pred, const float *target, size_t n,
                      cl_dtype dtype, float scale, float *grad, double *loss) {
  if (n == 0) {
    snprintf(be->err, sizeof be->err, "cuda mse: no elements");
    return CL_E_INVALID;
  }
  const float gscale = (float)(2.0 * (double)scale / (double)n);
  double sum = 0.0;
  cl_status st;
  switch (dtype) {
  case CL_F32:
    st = mse_t<float>(be, pred, target, n, gscale, grad, &sum);
    break;
  case CL_F16:
    st = mse_t<__half>(be, pred, target, n, gscale, grad, &sum);
    break;
  case CL_BF16:
    st = mse_t<__nv_bfloat16>(be, pred, target, n, gscale, grad, &sum);
    break;
  default:
    return cl_cuda_bad_dtype(be, dtype, "mse");
  }
  if (st == CL_OK) *loss = sum / (double)n;
  return st;
}

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

/* torch 1.13 _single_tensor_adam, amsgrad and maximize off:
 *   g += wd * p
 *   m = m * b1 + (1 - b1) * g;   v = v * b2 + (1 - b2) * g * g
 *   p += -step_size * (m / (sqrt(v) / sqrt(bc2) + eps)),  step_size = lr / bc1 */
__global__ void adam_kernel(float *p, const float *g, float *m, float *v, size_t n, float b1,
                            float one_minus_b1, float b2, float one_minus_b2, float step_size,
                            float bc2_sqrt, float eps, float wd) {
  CL_CUDA_FOR(i, n) {
    const float pi = p[i];
    float gi = g[i];
    if (wd != 0.0f) gi = gi + wd * pi;
    const float mi = m[i] * b1 + one_minus_b1 * gi;
    const float vi = v[i] * b2 + one_minus_b2 * gi * gi; /* addcmul: (value * g) * g */
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] = pi - step_size * (mi / denom);
  }
}

cl_status cl_cuda_adam_update(cl_backend *be, float *p, const float *g, float *m, float *v,
                              size_t n, const cl_adam_hp *hp) {
  if (hp->step < 1) {
    snprintf(be->err, sizeof be->err, "cuda adam: step %lld, expected 1 or more",
             (long long)hp->step);
    return CL_E_INVALID;
  }
  if (n == 0) return CL_OK;
  /* As torch does in Python floats: the corrections in double, then one
   * rounding to float where the kernel uses them. */
  const double b1 = hp->beta1, b2 = hp->beta2;
  const double bc1 = 1.0 - pow(b1, (double)hp->step);
  const double bc2 = 1.0 - pow(b2, (double)hp->step);
  adam_kernel<<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, cl_cuda_ctx_of(be)->stream>>>(
      p, g, m, v, n, hp->beta1, (float)(1.0 - b1), hp->beta2, (float)(1.0 - b2),
      (float)((double)hp->lr / bc1), (float)sqrt(bc2), hp->eps, hp->weight_decay);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* ---- SGD --------------------------------------------------------------- */

/* torch 1.13 _single_tensor_sgd, dampening 0, nesterov off:
 *   g += wd * p;  buf = first ? g : buf * momentum + g;  p += -lr * buf
 * buf is NULL when momentum is 0, and then p += -lr * g. */
__global__ void sgd_kernel(float *p, const float *g, float *buf, size_t n, float lr,
                           float momentum, float wd, int first) {
  CL_CUDA_FOR(i, n) {
    const float pi = p[i];
    float d = g[i];
    if (wd != 0.0f) d = d + wd * pi;
    if (buf) {
      const float b = first ? d : buf[i] * momentum + d;
      buf[i] = b;
      d = b;
    }
    p[i] = pi - lr * d;
  }
}

cl_status cl_cuda_sgd_update(cl_backend *be, float *p, const float *g, float *buf, size_t n,
                             const cl_sgd_hp *hp) {
  if (hp->momentum != 0.0f && !buf) {
    snprintf(be->err, sizeof be->err, "cuda sgd: momentum %g needs a momentum buffer",
             (double)hp->momentum);
    return CL_E_INVALID;
  }
  if (n == 0) return CL_OK;
  sgd_kernel<<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, cl_cuda_ctx_of(be)->stream>>>(
      p, g, hp->momentum != 0.0f ? buf : NULL, n, hp->lr, hp->momentum, hp->weight_decay,
      hp->first ? 1 : 0);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}
