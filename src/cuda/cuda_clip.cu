/*
 * cuda/cuda_clip.cu -- the CUDA backend's sum_squares (twin of
 * src/cpu/cpu_clip.c): the squared L2 norm of the flat gradient buffer for
 * gradient clipping (core/grad_norm.c). Each block leaves its double partial sum
 * in the context's partials (in the scratch the core hands over, shared with the losses),
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

/* clip_grad_norm_ on the device, for the step's update (backend.h,
 * cl_update_args step 2): one thread adds the partial sums in the host's
 * order and forms the coefficient with the host's operations, rounded as
 * they are (the _rn intrinsics: no contraction into fused multiply-adds),
 * so that the bits are those of cpu/cpu_step.c's clip; 1 means no
 * scaling (a non-finite norm, a coefficient not below 1, a lost loss). */
__global__ void clip_coef_kernel(const double *partials, unsigned blocks, double max_norm,
                                 int check_loss, cl_step_vals *v, float *coef) {
  float c = 1.0f;
  if (!(check_loss && !isfinite(v->loss))) {
    double s = 0.0;
    for (unsigned b = 0; b < blocks; b++) s = __dadd_rn(s, partials[b]);
    v->sumsq = s;
    const double norm = __dsqrt_rn(s);
    if (isfinite(norm)) {
      const float k = __double2float_rn(__ddiv_rn(max_norm, __dadd_rn(norm, 1e-6)));
      if (k < 1.0f) c = k;
    }
  }
  *coef = c;
}

/* grad_unscale's multiply, by the coefficient on the device. */
__global__ void clip_scale_kernel(float *g, size_t n, const float *coef) {
  const float c = *coef;
  if (!(c < 1.0f)) return;
  CL_CUDA_FOR(i, n) g[i] = g[i] * c;
}

cl_status cl_cuda_clip_launch(cl_backend *be, const cl_update_args *u, cl_step_vals *vals) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const unsigned blocks = cl_cuda_partial_blocks(u->n);
  sum_squares_kernel<<<blocks, CL_CUDA_THREADS, 0, ctx->stream>>>(u->g, u->n, ctx->d_partials);
  CL_CUDA_LAUNCH_CHECK(be);
  clip_coef_kernel<<<1, 1, 0, ctx->stream>>>(ctx->d_partials, blocks, u->max_norm, u->check_loss,
                                             vals, ctx->d_coef);
  CL_CUDA_LAUNCH_CHECK(be);
  clip_scale_kernel<<<cl_cuda_blocks(u->n), CL_CUDA_THREADS, 0, ctx->stream>>>(u->g, u->n,
                                                                             ctx->d_coef);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}
