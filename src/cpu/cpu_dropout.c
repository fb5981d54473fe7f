/*
 * cpu/cpu_dropout.c -- the CPU backend's mask_mul (backend.h): dropout
 * masks, drawn once per sequence by the caller, multiplied into the steps of
 * that sequence (forward: the layer's input and its h_{t-1}; backward: the
 * gradients that flow back through them). With per-gate masks (G groups)
 * forward spreads each image into its G masked copies and backward gathers
 * the G gradients back into one. One multiply per element, in float chunks,
 * rounded once on the way out.
 *
 * Not here: drawing the masks (the R glue does, from R's generator).
 */
#include "cpu_kernels.h"

/* Elements per chunk: a parallel task, and a block converted to float on
 * the stack. */
#define CL_CPU_MASK_CHUNK 2048
/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_MASK_PAR_MIN 65536

/* mask_chunk in float32, straight on in and out (out may be in itself with
 * one group: each element is read before it is written). */
static void mask_chunk_f32(const cl_mask_shape *s, size_t G, size_t row, size_t q, size_t i0,
                           size_t k, const float *in, const float *mk, float *out) {
  const int acc = s->accumulate;
  if (!s->gather || G == 1) {
    const float *x = in + q * row + i0;
    for (size_t g = 0; g < G; g++) {
      float *y = out + (q * G + g) * row + i0;
      const float *m = mk + g * row;
      if (acc)
        for (size_t i = 0; i < k; i++) y[i] += x[i] * m[i];
      else
        for (size_t i = 0; i < k; i++) y[i] = x[i] * m[i];
    }
    return;
  }
  float *y = out + q * row + i0, sum[CL_CPU_MASK_CHUNK];
  const float *x = in + q * G * row + i0;
  for (size_t i = 0; i < k; i++) sum[i] = x[i] * mk[i];
  for (size_t g = 1; g < G; g++)
    for (size_t i = 0; i < k; i++) sum[i] += x[g * row + i] * mk[g * row + i];
  if (acc)
    for (size_t i = 0; i < k; i++) y[i] += sum[i];
  else
    for (size_t i = 0; i < k; i++) y[i] = sum[i];
}

/* Elements [i0, i0 + k) of image j of step r (q = r J + j), k <=
 * CL_CPU_MASK_CHUNK: spread or gather over the G masks of that image. */
static void mask_chunk(const cl_mask_shape *s, size_t J, size_t q, size_t i0, size_t k,
                       const void *in, const float *mask, void *out) {
  const size_t row = s->groups > 1 ? s->row : s->n, G = (size_t)s->groups;
  const float *mk = mask + (q % J) * G * row + i0; /* group g's: + g row */
  if (s->dtype == CL_F32) { /* in place: no staging copies */
    mask_chunk_f32(s, G, row, q, i0, k, (const float *)in, mk, (float *)out);
    return;
  }
  float buf[CL_CPU_MASK_CHUNK], acc[CL_CPU_MASK_CHUNK];
  if (!s->gather || G == 1) {
    cl_cpu_load(s->dtype, in, q * row + i0, buf, k);
    for (size_t g = 0; g < G; g++) {
      for (size_t i = 0; i < k; i++) acc[i] = buf[i] * mk[g * row + i];
      cl_cpu_store(s->dtype, acc, out, (q * G + g) * row + i0, k, s->accumulate);
    }
    return;
  }
  for (size_t i = 0; i < k; i++) acc[i] = 0.0f;
  for (size_t g = 0; g < G; g++) {
    cl_cpu_load(s->dtype, in, (q * G + g) * row + i0, buf, k);
    for (size_t i = 0; i < k; i++) acc[i] += buf[i] * mk[g * row + i];
  }
  cl_cpu_store(s->dtype, acc, out, q * row + i0, k, s->accumulate);
}

cl_status cl_cpu_mask_mul(cl_backend *be, const cl_mask_shape *s, const void *in,
                          const float *mask, void *out) {
  if (s->dtype != CL_F32 && s->dtype != CL_F16 && s->dtype != CL_BF16)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: unknown storage dtype %d",
                       (int)s->dtype);
  if (s->n == 0 || s->reps == 0) return CL_OK;
  const size_t row = s->groups > 1 ? s->row : s->n;
  if (s->groups < 1 || row == 0 || s->n % row != 0)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: mask_mul of %zu elements in rows of %zu, "
                       "%d groups", s->n, s->row, s->groups);
  /* chunks never straddle two images: per image ceil(row / CHUNK) of them */
  const size_t J = s->n / row, per = (row + CL_CPU_MASK_CHUNK - 1) / CL_CPU_MASK_CHUNK;
  const long long nchunks = (long long)(per * J * s->reps);
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (s->n * s->reps * (size_t)s->groups > CL_CPU_MASK_PAR_MIN)
#endif
  for (long long c = 0; c < nchunks; c++) {
    size_t q = (size_t)c / per, i0 = (size_t)c % per * CL_CPU_MASK_CHUNK;
    size_t k = row - i0 < CL_CPU_MASK_CHUNK ? row - i0 : CL_CPU_MASK_CHUNK;
    mask_chunk(s, J, q, i0, k, in, mask, out);
  }
  return CL_OK;
}
