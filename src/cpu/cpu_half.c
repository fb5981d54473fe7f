/*
 * cpu/cpu_half.c -- moving float16 / bfloat16 storage in and out of the
 * float32 the CPU kernels compute in (backend.h: activations may be stored
 * in shape->dtype; compute is float32 always).
 *
 * The kernels convert at their edges: the convolutions when they copy an
 * image into their padded buffer and when they write a result row, the cell
 * and the loss a chunk at a time. Conversions round to nearest even exactly
 * as core/half.h (the reference, also used here for the scalar path) and as
 * torch does; float16 goes through the AVX-512F conversion instructions when
 * the CPU has them, which round the same way.
 *
 * Not here: any arithmetic in half precision.
 */
#include "cpu_kernels.h"
#include "../core/half.h" /* cl_f32_to_f16, cl_f16_to_f32, cl_f32_to_bf16, cl_bf16_to_f32 */

#include <string.h>

#include "cpu_x86.h" /* CL_CPU_X86 */

#if CL_CPU_X86
/* Returns how many leading elements it converted (a multiple of 16). */
__attribute__((target("avx512f"))) static size_t load_f16_avx512(const uint16_t *s, float *d,
                                                                 size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
  return i;
}

__attribute__((target("avx512f"))) static size_t store_f16_avx512(const float *s, uint16_t *d,
                                                                  size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(d + i),
                        _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  return i;
}

static int have_avx512(void) { return cl_cpu_gemm_available(CL_CPU_GEMM_AVX512); }
#endif

void cl_cpu_load(cl_dtype t, const void *src, size_t off, float *dst, size_t n) {
  if (t == CL_F32) {
    memcpy(dst, (const float *)src + off, sizeof(float) * n);
    return;
  }
  const uint16_t *s = (const uint16_t *)src + off;
  size_t i = 0;
  if (t == CL_F16) {
#if CL_CPU_X86
    if (have_avx512()) i = load_f16_avx512(s, dst, n);
#endif
    for (; i < n; i++) dst[i] = cl_f16_to_f32(s[i]);
  } else {
    for (; i < n; i++) dst[i] = cl_bf16_to_f32(s[i]);
  }
}

/* dst[off + i] = src[i] + (accumulate ? dst[off + i] : 0), rounded once. */
void cl_cpu_store(cl_dtype t, const float *src, void *dst, size_t off, size_t n, int accumulate) {
  if (t == CL_F32) {
    float *d = (float *)dst + off;
    if (accumulate)
      for (size_t i = 0; i < n; i++) d[i] += src[i];
    else
      memcpy(d, src, sizeof(float) * n);
    return;
  }
  uint16_t *d = (uint16_t *)dst + off;
  if (accumulate) {
    for (size_t i = 0; i < n; i++)
      d[i] = t == CL_F16 ? cl_f32_to_f16(cl_f16_to_f32(d[i]) + src[i])
                         : cl_f32_to_bf16(cl_bf16_to_f32(d[i]) + src[i]);
    return;
  }
  size_t i = 0;
  if (t == CL_F16) {
#if CL_CPU_X86
    if (have_avx512()) i = store_f16_avx512(src, d, n);
#endif
    for (; i < n; i++) d[i] = cl_f32_to_f16(src[i]);
  } else {
    for (; i < n; i++) d[i] = cl_f32_to_bf16(src[i]);
  }
}
