/*
 * cuda/cuda_dropout.cu -- the CUDA backend's mask_mul (twin of
 * src/cpu/cpu_dropout.c): dropout masks drawn once per sequence, multiplied
 * into every step of it (forward: a layer's input and its h_{t-1};
 * backward: the gradients flowing back through them); with per-gate masks
 * forward spreads each image into its G masked copies and backward gathers
 * their G gradients into one (backend.h: cl_mask_shape). Storage float,
 * __half or __nv_bfloat16, the mask float, products and sums float, rounded
 * once. And mask_draw: a mask drawn into its planned buffer from the
 * numbers of core/dropout_rng.h, the CPU backend's bit for bit.
 */
#include <cstdio>

#include "../core/dropout_rng.h" /* cl_rng_mask_value */
#include "cuda_common.h"         /* context, check macros, cl_ld/cl_st, CL_CUDA_FOR */

/* One thread per element of out: e = (q, g, i) spreading (q = r J + j, the
 * step's image), e = (q, i) gathering. */
template <typename T>
__global__ void mask_mul_kernel(const T *in, const float *mask, T *out, size_t row, size_t J,
                                size_t G, int gather, size_t total, int accumulate) {
  CL_CUDA_FOR(e, total) {
    size_t i = e % row, q = e / row;
    float v;
    if (gather) {
      const float *mk = mask + (q % J) * G * row + i;
      const T *x = in + q * G * row + i;
      v = 0.0f;
      for (size_t g = 0; g < G; g++) v += cl_ld(x[g * row]) * mk[g * row];
    } else {
      size_t g = q % G, img = q / G;
      v = cl_ld(in[img * row + i]) * mask[((img % J) * G + g) * row + i];
    }
    out[e] = cl_st<T>(accumulate ? cl_ld(out[e]) + v : v);
  }
}

template <typename T>
static cl_status launch(cl_backend *be, const cl_mask_shape *s, const void *in, const float *mask,
                        void *out) {
  const size_t G = (size_t)s->groups, row = G > 1 ? s->row : s->n, J = s->n / row;
  const int gather = G > 1 && s->gather;
  const size_t total = s->n * s->reps * (gather ? 1 : G);
  mask_mul_kernel<T><<<cl_cuda_blocks(total), CL_CUDA_THREADS, 0, cl_cuda_ctx_of(be)->stream>>>(
      (const T *)in, mask, (T *)out, row, J, G, gather, total, s->accumulate);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

cl_status cl_cuda_mask_mul(cl_backend *be, const cl_mask_shape *s, const void *in,
                           const float *mask, void *out) {
  if (s->n == 0 || s->reps == 0) return CL_OK;
  const size_t row = s->groups > 1 ? s->row : s->n;
  if (s->groups < 1 || row == 0 || s->n % row != 0) {
    snprintf(be->err, sizeof be->err, "cuda backend: mask_mul of %zu elements in rows of %zu, "
             "%d groups", s->n, s->row, s->groups);
    return CL_E_INVALID;
  }
  switch (s->dtype) {
  case CL_F32: return launch<float>(be, s, in, mask, out);
  case CL_F16: return launch<__half>(be, s, in, mask, out);
  case CL_BF16: return launch<__nv_bfloat16>(be, s, in, mask, out);
  default: return cl_cuda_bad_dtype(be, s->dtype, "mask_mul");
  }
}

/* The seed from its device word, which a replayed graph's upload has just
 * written (the kernel's arguments stay as recorded). */
__global__ void mask_draw_kernel(cl_mask_draw d, float *mask) {
  const uint64_t key = cl_rng_key(*d.seed, d.layer, d.kind);
  CL_CUDA_FOR(e, (size_t)d.n) mask[e] = cl_rng_mask_value(key, d.first + e, d.cut, d.keep);
}

cl_status cl_cuda_mask_draw(cl_backend *be, const cl_mask_draw *d, float *mask) {
  if (d->n == 0) return CL_OK;
  mask_draw_kernel<<<cl_cuda_blocks((size_t)d->n), CL_CUDA_THREADS, 0,
                     cl_cuda_ctx_of(be)->stream>>>(*d, mask);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}
