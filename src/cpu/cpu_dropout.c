/*
 * cpu/cpu_dropout.c -- the CPU backend's mask_mul (backend.h): a dropout
 * mask, drawn once per sequence by the caller, multiplied into the steps of
 * that sequence (forward: the layer's input and its h_{t-1}; backward: the
 * gradients that flow back through them). One multiply per element, in
 * float chunks for float16 / bfloat16 storage, rounded once on the way out.
 *
 * Not here: drawing the masks (the R glue does, from R's generator).
 */
#include "cpu_kernels.h"

/* Elements per chunk: a parallel task, and a half-type block converted to
 * float on the stack. */
#define CL_CPU_MASK_CHUNK 2048
/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_MASK_PAR_MIN 65536

/* Chunk [a, a + k) of the flat reps * n elements, k <= CL_CPU_MASK_CHUNK,
 * not crossing a block of n (so its mask is one slice). */
static void mask_chunk(const void *in, const float *mask, void *out, size_t a, size_t k,
                       cl_dtype t, int accumulate, size_t n) {
  const float *mk = mask + a % n;
  if (t == CL_F32) {
    const float *x = (const float *)in + a;
    float *y = (float *)out + a;
    if (accumulate)
      for (size_t i = 0; i < k; i++) y[i] += x[i] * mk[i];
    else
      for (size_t i = 0; i < k; i++) y[i] = x[i] * mk[i];
    return;
  }
  float buf[CL_CPU_MASK_CHUNK];
  cl_cpu_load(t, in, a, buf, k);
  for (size_t i = 0; i < k; i++) buf[i] *= mk[i];
  cl_cpu_store(t, buf, out, a, k, accumulate);
}

cl_status cl_cpu_mask_mul(cl_backend *be, const void *in, const float *mask, void *out, size_t n,
                          size_t reps, cl_dtype t, int accumulate) {
  if (t != CL_F32 && t != CL_F16 && t != CL_BF16)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: unknown storage dtype %d", (int)t);
  if (n == 0 || reps == 0) return CL_OK;
  /* chunks never straddle two blocks: per block ceil(n / CHUNK) of them */
  const size_t per = (n + CL_CPU_MASK_CHUNK - 1) / CL_CPU_MASK_CHUNK;
  const long long nchunks = (long long)(per * reps);
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (n * reps > CL_CPU_MASK_PAR_MIN)
#endif
  for (long long c = 0; c < nchunks; c++) {
    size_t r = (size_t)c / per, j = (size_t)c % per * CL_CPU_MASK_CHUNK;
    size_t k = n - j < CL_CPU_MASK_CHUNK ? n - j : CL_CPU_MASK_CHUNK;
    mask_chunk(in, mask, out, r * n + j, k, t, accumulate, n);
  }
  return CL_OK;
}
