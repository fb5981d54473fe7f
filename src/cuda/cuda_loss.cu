/*
 * cuda/cuda_loss.cu -- the CUDA backend's loss slot (twin of
 * src/cpu/cpu_loss.c): MSE, MAE, Huber and binary cross-entropy on logits,
 * each mean-reduced with its gradient in one pass, as torch 1.13's. Each
 * block leaves the double sum of its elements' losses in the context's
 * partials (the scratch the core hands over) and a fixed-order pass adds
 * them: the host (cl_cuda_sum_partials) for the loss slot, one device
 * thread for loss_acc (cuda_step.cu). Unweighted MSE has a kernel of its
 * own (the plain step's); with a per-element weight MSE runs in the
 * general kernel (mse_kernel's formula), each element's loss and gradient
 * factor times w, a weight of one giving the unweighted bits.
 */
#include <stdio.h> /* snprintf */

#include "cuda_common.h" /* context, check macros, cl_ld, cl_block_sum */

/* ---- mean squared error, unweighted -------------------------------------- */

/* Each block leaves the double sum of its squared differences in
 * partials[blockIdx.x]; the host adds the partials in order, so the loss is
 * the same from run to run. grad may alias target (no __restrict__): each
 * element is read before it is written, by the same thread. */
template <typename T>
__global__ void mse_kernel(const T *pred, const float *target, size_t n, float gscale,
                           float *grad, double *partials) {
  double sum = 0.0;
  CL_CUDA_FOR(i, n) {
    /* the difference in float, squared in double: cpu_loss.c's formula */
    const float d = cl_ld(pred[i]) - target[i];
    sum += (double)d * (double)d;
    if (grad) grad[i] = gscale * d;
  }
  sum = cl_block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

template <typename T>
static void mse_t(cl_cuda_ctx *ctx, const void *pred, const float *target, size_t n, float gscale,
                  float *grad, unsigned blocks) {
  mse_kernel<T><<<blocks, CL_CUDA_THREADS, 0, ctx->stream>>>(
      (const T *)pred, target, n, gscale, grad, ctx->d_partials);
}

static cl_status mse_launch(cl_backend *be, const void *pred, const float *target, size_t n,
                            cl_dtype dtype, float scale, float *grad, unsigned *blocks) {
  if (n == 0) {
    snprintf(be->err, sizeof be->err, "cuda mse: no elements");
    return CL_E_INVALID;
  }
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const float gscale = (float)(2.0 * (double)scale / (double)n);
  *blocks = cl_cuda_partial_blocks(n);
  switch (dtype) {
  case CL_F32:
    mse_t<float>(ctx, pred, target, n, gscale, grad, *blocks);
    break;
  case CL_F16:
    mse_t<__half>(ctx, pred, target, n, gscale, grad, *blocks);
    break;
  case CL_BF16:
    mse_t<__nv_bfloat16>(ctx, pred, target, n, gscale, grad, *blocks);
    break;
  default:
    return cl_cuda_bad_dtype(be, dtype, "mse");
  }
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}


/* ---- the other losses, and weighted ones --------------------------------- */

struct loss_k {
  int kind;
  float delta, pos_weight;
};

/* cpu_loss.c's loss_elem, the same operations. */
__device__ __forceinline__ float loss_elem(const loss_k &k, float x, float y, float &g) {
  if (k.kind == CL_LOSS_MAE) {
    const float d = x - y;
    g = (float)((d > 0) - (d < 0));
    return fabsf(d);
  }
  if (k.kind == CL_LOSS_HUBER) {
    const float d = x - y, z = fabsf(d);
    g = d < -k.delta ? -k.delta : d > k.delta ? k.delta : d;
    return z < k.delta ? 0.5f * z * z : k.delta * (z - 0.5f * k.delta);
  }
  const float m = x < 0 ? -x : 0.0f, lw = (k.pos_weight - 1.0f) * y + 1.0f;
  const float t = k.pos_weight * y;
  g = (t + 1.0f - y) * (1.0f / (1.0f + expf(-x))) - t;
  return (1.0f - y) * x + lw * (logf(expf(-m) + expf(-x - m)) + m);
}

/* grad may alias target (no __restrict__): read before written, same thread.
 * weight NULL: the unweighted loss, as before weights existed. */
template <typename T>
__global__ void loss_kernel(loss_k k, const T *pred, const float *target, const float *weight,
                            size_t n, float gscale, float *grad, double *partials) {
  double sum = 0.0;
  CL_CUDA_FOR(i, n) {
    float d;
    if (!weight) {
      sum += (double)loss_elem(k, cl_ld(pred[i]), target[i], d);
      if (grad) grad[i] = gscale * d;
    } else if (k.kind == CL_LOSS_MSE) { /* gscale: 2 scale / n, as mse_kernel's */
      d = cl_ld(pred[i]) - target[i];
      sum += (double)weight[i] * ((double)d * (double)d);
      if (grad) grad[i] = gscale * weight[i] * d;
    } else {
      sum += (double)weight[i] * (double)loss_elem(k, cl_ld(pred[i]), target[i], d);
      if (grad) grad[i] = gscale * weight[i] * d;
    }
  }
  sum = cl_block_sum(sum);
  if (threadIdx.x == 0) partials[blockIdx.x] = sum;
}

template <typename T>
static void loss_t(cl_cuda_ctx *ctx, loss_k k, const void *pred, const float *target,
                   const float *weight, size_t n, float gscale, float *grad, unsigned blocks) {
  loss_kernel<T><<<blocks, CL_CUDA_THREADS, 0, ctx->stream>>>(k, (const T *)pred, target, weight,
                                                             n, gscale, grad, ctx->d_partials);
}

cl_status cl_cuda_loss_launch(cl_backend *be, const cl_loss_fn *f, const void *pred,
                              const float *target, const float *weight, size_t n, cl_dtype dtype,
                              float scale, float *grad, unsigned *blocks) {
  if (n == 0) {
    snprintf(be->err, sizeof be->err, "cuda loss: no elements");
    return CL_E_INVALID;
  }
  if (!f || (f->kind == CL_LOSS_MSE && !weight))
    return mse_launch(be, pred, target, n, dtype, scale, grad, blocks);
  if (f->kind != CL_LOSS_MAE && f->kind != CL_LOSS_HUBER && f->kind != CL_LOSS_BCE_LOGITS &&
      f->kind != CL_LOSS_MSE) {
    snprintf(be->err, sizeof be->err, "cuda loss: no kernel for loss %d", (int)f->kind);
    return CL_E_INVALID;
  }
  const loss_k k = {(int)f->kind, (float)f->delta, (float)f->pos_weight};
  const float gscale = f->kind == CL_LOSS_MSE ? (float)(2.0 * (double)scale / (double)n)
                                              : (float)(1.0 / (double)n) * scale;
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  *blocks = cl_cuda_partial_blocks(n);
  switch (dtype) {
  case CL_F32:
    loss_t<float>(ctx, k, pred, target, weight, n, gscale, grad, *blocks);
    break;
  case CL_F16:
    loss_t<__half>(ctx, k, pred, target, weight, n, gscale, grad, *blocks);
    break;
  case CL_BF16:
    loss_t<__nv_bfloat16>(ctx, k, pred, target, weight, n, gscale, grad, *blocks);
    break;
  default:
    return cl_cuda_bad_dtype(be, dtype, "loss");
  }
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

cl_status cl_cuda_loss(cl_backend *be, const cl_loss_fn *f, const void *pred, const float *target,
                       const float *weight, size_t n, cl_dtype dtype, float scale, float *grad,
                       double *loss) {
  unsigned blocks = 0;
  double sum = 0.0;
  cl_status st =
      cl_cuda_loss_launch(be, f, pred, target, weight, n, dtype, scale, grad, &blocks);
  if (st == CL_OK) st = cl_cuda_sum_partials(be, blocks, &sum);
  if (st == CL_OK) *loss = sum / (double)n;
  return st;
}
