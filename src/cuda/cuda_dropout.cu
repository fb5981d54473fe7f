/*
 * cuda/cuda_dropout.cu -- the CUDA backend's mask_mul (twin of
 * src/cpu/cpu_dropout.c): a dropout mask drawn once per sequence, multiplied
 * into every step of it (forward: a layer's input and its h_{t-1};
 * backward: the gradients flowing back through them). Storage float,
 * __half or __nv_bfloat16, the mask float, the product float rounded once.
 */
#include "cuda_common.h" /* context, check macros, cl_ld/cl_st, CL_CUDA_FOR */

template <typename T>
__global__ void mask_mul_kernel(const T *in, const float *mask, T *out, size_t n, size_t total,
                                int accumulate) {
  CL_CUDA_FOR(e, total) {
    float v = cl_ld(in[e]) * mask[e % n];
    out[e] = cl_st<T>(accumulate ? cl_ld(out[e]) + v : v);
  }
}

template <typename T>
static cl_status launch(cl_backend *be, const void *in, const float *mask, void *out, size_t n,
                        size_t total, int accumulate) {
  mask_mul_kernel<T><<<cl_cuda_blocks(total), CL_CUDA_THREADS, 0, cl_cuda_ctx_of(be)->stream>>>(
      (const T *)in, mask, (T *)out, n, total, accumulate);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

cl_status cl_cuda_mask_mul(cl_backend *be, const void *in, const float *mask, void *out, size_t n,
                           size_t reps, cl_dtype t, int accumulate) {
  if (n == 0 || reps == 0) return CL_OK;
  const size_t total = n * reps;
  switch (t) {
  case CL_F32: return launch<float>(be, in, mask, out, n, total, accumulate);
  case CL_F16: return launch<__half>(be, in, mask, out, n, total, accumulate);
  case CL_BF16: return launch<__nv_bfloat16>(be, in, mask, out, n, total, accumulate);
  default: return cl_cuda_bad_dtype(be, t, "mask_mul");
  }
}
