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

__attribute__((target("avx512f"))) static inline __m512 bf16_to_f32_x16(const uint16_t *s) {
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)s));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* cl_f32_to_bf16 on 16 lanes: round to nearest even, a NaN made quiet. */
__attribute__((target("avx512f"))) static inline __m256i f32_to_bf16_x16(__m512 v) {
  const __m512i u = _mm512_castps_si512(v), hi = _mm512_srli_epi32(u, 16);
  const __m512i odd = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  const __m512i bias = _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd);
  __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
  const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                _mm512_set1_epi32(0x7f800000));
  r = _mm512_mask_or_epi32(r, nan, hi, _mm512_set1_epi32(0x40));
  return _mm512_cvtepi32_epi16(r);
}

__attribute__((target("avx512f"))) static size_t load_bf16_avx512(const uint16_t *s, float *d,
                                                                  size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, bf16_to_f32_x16(s + i));
  return i;
}

__attribute__((target("avx512f"))) static size_t store_bf16_avx512(const float *s, uint16_t *d,
                                                                   size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(d + i), f32_to_bf16_x16(_mm512_loadu_ps(s + i)));
  return i;
}

/* d[i] = round(d[i] + s[i]): the stored value widened, the sum rounded once. */
__attribute__((target("avx512f"))) static size_t acc_avx512(cl_dtype t, const float *s,
                                                            uint16_t *d, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i *at = (__m256i *)(d + i);
    if (t == CL_F16)
      _mm256_storeu_si256(at, _mm512_cvtps_ph(_mm512_add_ps(_mm512_cvtph_ps(_mm256_loadu_si256(at)),
                                                            _mm512_loadu_ps(s + i)),
                                              _MM_FROUND_TO_NEAREST_INT));
    else
      _mm256_storeu_si256(at, f32_to_bf16_x16(_mm512_add_ps(bf16_to_f32_x16(d + i),
                                                            _mm512_loadu_ps(s + i))));
  }
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
#if CL_CPU_X86
    if (have_avx512()) i = load_bf16_avx512(s, dst, n);
#endif
    for (; i < n; i++) dst[i] = cl_bf16_to_f32(s[i]);
  }
}

void cl_cpu_load_stride(cl_dtype t, const void *src, size_t off, size_t stride, float *dst,
                        size_t n) {
  if (stride == 1) {
    cl_cpu_load(t, src, off, dst, n);
    return;
  }
  for (size_t i = 0; i < n; i++) cl_cpu_load(t, src, off + i * stride, dst + i, 1);
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
  size_t i = 0;
  if (accumulate) {
#if CL_CPU_X86
    if (have_avx512()) i = acc_avx512(t, src, d, n);
#endif
    for (; i < n; i++)
      d[i] = t == CL_F16 ? cl_f32_to_f16(cl_f16_to_f32(d[i]) + src[i])
                         : cl_f32_to_bf16(cl_bf16_to_f32(d[i]) + src[i]);
    return;
  }
  if (t == CL_F16) {
#if CL_CPU_X86
    if (have_avx512()) i = store_f16_avx512(src, d, n);
#endif
    for (; i < n; i++) d[i] = cl_f32_to_f16(src[i]);
  } else {
#if CL_CPU_X86
    if (have_avx512()) i = store_bf16_avx512(src, d, n);
#endif
    for (; i < n; i++) d[i] = cl_f32_to_bf16(src[i]);
  }
}
