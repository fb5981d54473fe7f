/*
 * cuda/cuda_clip.cu -- the CUDA backend's sum_squares (twin of
 * src/cpu/cpu_clip.c): the squared L2 norm of the flat gradient buffer for
 * gradient clipping (core/clip.c). Each block leaves its double partial sum
 * in the context's partials (in the scratch the core hands over, shared with mse),
 * and the host adds them in order, so the norm is the same from run to run.
 */
#include "cuda_common.h" /* context, check macros, cl_block_sum */

__global__ void sum_squares_kernel(const float *g, size_t n, double *partials) {
  double s = 0.0;
  CL_CUDA_FOR(i, n) s += (double)g[i] * (double)g[i];
  s = cl_block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

cl_status cl_cuda_sum_squares(cl_backend *be, const float *g, size_t n, double *sum) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  *sum = 0.0;
  if (n == 0) return CL_OK;
  const unsigned blocks = cl_cuda_partial_blocks(n);
  sum_squares_kernel<<<blocks, CL_CUDA_THREADS, 0, ctx->stream>>>(g, n, ctx->d_partials);
  return cl_cuda_sum_partials(be, blocks, sum);
}
