/*
 * cpu/cpu_dropout.c -- the CPU backend's mask_mul (backend.h): dropout
 * masks, drawn once per sequence by the caller, multiplied into the steps of
 * that sequence (forward: the layer's input and its h_{t-1}; backward: the
 * gradients that flow back through them). With per-gate masks (G groups)
 * forward spreads each image into its G masked copies and backward gathers
 * the G gradients back into one. One multiply per element, in float chunks,
 * rounded once on the way out; the row loops are vector code
 * (cpu_mask_tmpl.h) that rounds exactly as the scalar loops do. And
 * mask_draw: a mask drawn into its planned buffer from the numbers of
 * core/dropout_rng.h (the CUDA backend's are the same).
 */
#include "cpu_kernels.h"
#include "../core/dropout_rng.h"

#include "../host/x86.h" /* CL_CPU_X86 */
#if defined(__GNUC__) && !defined(__clang__)
#define CL_MASK_EXACT __attribute__((optimize("fp-contract=off")))
#else
#define CL_MASK_EXACT /* clang fuses only within one expression: none here */
#endif

#define CL_SIMD 1
#include "cpu_simd.h"
#include "cpu_mask_tmpl.h" /* mask_rows_generic, add_rows_generic */
#if CL_CPU_X86
#define CL_SIMD 512
#include "cpu_simd.h"
#include "cpu_mask_tmpl.h" /* mask_rows_avx512, add_rows_avx512 */
#define CL_SIMD 256
#include "cpu_simd.h"
#include "cpu_mask_tmpl.h" /* mask_rows_avx2, add_rows_avx2 */
#endif

/* Elements per chunk: a parallel task, and a block converted to float on
 * the stack. */
#define CL_CPU_MASK_CHUNK 2048
/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_MASK_PAR_MIN 65536

typedef void (*mask_rows_fn)(float *y, const float *x, const float *m, size_t k, int acc);
typedef void (*add_rows_fn)(float *y, const float *s, size_t k);

/* The row loops of one instruction set. */
typedef struct mask_fns {
  mask_rows_fn mul;
  add_rows_fn add;
} mask_fns;

static mask_fns fns_of(cl_cpu_gemm_kind isa) {
  mask_fns f = {mask_rows_generic, add_rows_generic};
#if CL_CPU_X86
  if (isa == CL_CPU_GEMM_AVX512) f.mul = mask_rows_avx512, f.add = add_rows_avx512;
  if (isa == CL_CPU_GEMM_AVX2) f.mul = mask_rows_avx2, f.add = add_rows_avx2;
#endif
  (void)isa;
  return f;
}

/* mask_chunk in float32, straight on in and out (out may be in itself with
 * one group: each element is read before it is written). A gather without
 * accumulate sums into out itself, in the order of the stack sum it
 * replaces (x_0 m_0 + x_1 m_1 + ...). */
static void mask_chunk_f32(const mask_fns *f, const cl_mask_shape *s, size_t G, size_t row,
                           size_t q, size_t i0, size_t k, const float *in, const float *mk,
                           float *out) {
  const int acc = s->accumulate;
  if (!s->gather || G == 1) {
    const float *x = in + q * row + i0;
    for (size_t g = 0; g < G; g++) f->mul(out + (q * G + g) * row + i0, x, mk + g * row, k, acc);
    return;
  }
  float *y = out + q * row + i0, sum[CL_CPU_MASK_CHUNK];
  const float *x = in + q * G * row + i0;
  float *into = acc ? sum : y;
  for (size_t g = 0; g < G; g++) f->mul(into, x + g * row, mk + g * row, k, g > 0);
  if (acc) f->add(y, sum, k);
}

/* Elements [i0, i0 + k) of image j of step r (q = r J + j), k <=
 * CL_CPU_MASK_CHUNK: spread or gather over the G masks of that image. */
static void mask_chunk(const mask_fns *f, const cl_mask_shape *s, size_t J, size_t q, size_t i0,
                       size_t k, const void *in, const float *mask, void *out) {
  const size_t row = s->groups > 1 ? s->row : s->n, G = (size_t)s->groups;
  const float *mk = mask + (q % J) * G * row + i0; /* group g's: + g row */
  if (s->dtype == CL_F32) { /* in place: no staging copies */
    mask_chunk_f32(f, s, G, row, q, i0, k, (const float *)in, mk, (float *)out);
    return;
  }
  float buf[CL_CPU_MASK_CHUNK], acc[CL_CPU_MASK_CHUNK];
  if (!s->gather || G == 1) {
    cl_cpu_load(s->dtype, in, q * row + i0, buf, k);
    for (size_t g = 0; g < G; g++) {
      f->mul(acc, buf, mk + g * row, k, 0);
      cl_cpu_store(s->dtype, acc, out, (q * G + g) * row + i0, k, s->accumulate);
    }
    return;
  }
  for (size_t i = 0; i < k; i++) acc[i] = 0.0f; /* 0 + (-0) is +0: as before, not x_0 m_0 */
  for (size_t g = 0; g < G; g++) {
    cl_cpu_load(s->dtype, in, (q * G + g) * row + i0, buf, k);
    f->mul(acc, buf, mk + g * row, k, 1);
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
  const mask_fns f = fns_of(cl_cpu_isa_of(be));
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (s->n * s->reps * (size_t)s->groups > CL_CPU_MASK_PAR_MIN)
#endif
  for (long long c = 0; c < nchunks; c++) {
    size_t q = (size_t)c / per, i0 = (size_t)c % per * CL_CPU_MASK_CHUNK;
    size_t k = row - i0 < CL_CPU_MASK_CHUNK ? row - i0 : CL_CPU_MASK_CHUNK;
    mask_chunk(&f, s, J, q, i0, k, in, mask, out);
  }
  return CL_OK;
}

cl_status cl_cpu_mask_draw(cl_backend *be, const cl_mask_draw *d, float *mask) {
  const long long n = (long long)d->n;
  const uint64_t key = cl_rng_key(*d->seed, d->layer, d->kind); /* the word, in host memory */
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (d->n > CL_CPU_MASK_PAR_MIN)
#endif
  for (long long e = 0; e < n; e++)
    mask[e] = cl_rng_mask_value(key, d->first + (uint64_t)e, d->cut, d->keep);
  (void)be;
  return CL_OK;
}
