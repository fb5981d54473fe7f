/*
 * host/half.c -- runs of float32 stored as float16 / bfloat16 and back, on
 * the host (half.h). One vectorized path for every caller: batches packed
 * for any backend (core/pack.c) and the CPU backend's kernels
 * (cpu/cpu_half.c).
 * AVX-512F where the CPU has it (asked at run time), the scalar
 * reference of half.h elsewhere and for the tails; both round to nearest
 * even and give the same bits, which tests/c/test_cpu_simd.c checks.
 */
#include "half.h"

#include "x86.h" /* CL_CPU_X86: whether this compiler builds x86 vector code */

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

/* libgcc's check includes the OS (XCR0) enabling the wide registers. */
static int have_avx512(void) { return __builtin_cpu_supports("avx512f"); }
#endif

void cl_half_store(cl_dtype t, const float *src, uint16_t *dst, size_t n) {
  size_t i = 0;
  if (t == CL_F16) {
#if CL_CPU_X86
    if (have_avx512()) i = store_f16_avx512(src, dst, n);
#endif
    for (; i < n; i++) dst[i] = cl_f32_to_f16(src[i]);
  } else {
#if CL_CPU_X86
    if (have_avx512()) i = store_bf16_avx512(src, dst, n);
#endif
    for (; i < n; i++) dst[i] = cl_f32_to_bf16(src[i]);
  }
}

void cl_half_load(cl_dtype t, const uint16_t *src, float *dst, size_t n) {
  cl_half_load_rows(t, src, n, dst, n, n, 1);
}

/* The instruction set asked once for all the rows: the kernels load
 * images row by row, 16 values a row for a 16x16 map. */
void cl_half_load_rows(cl_dtype t, const uint16_t *src, size_t ss, float *dst, size_t ds,
                       size_t n, size_t rows) {
#if CL_CPU_X86
  const int wide = have_avx512();
#endif
  for (size_t r = 0; r < rows; r++, src += ss, dst += ds) {
    size_t i = 0;
    if (t == CL_F16) {
#if CL_CPU_X86
      if (wide) i = load_f16_avx512(src, dst, n);
#endif
      for (; i < n; i++) dst[i] = cl_f16_to_f32(src[i]);
    } else {
#if CL_CPU_X86
      if (wide) i = load_bf16_avx512(src, dst, n);
#endif
      for (; i < n; i++) dst[i] = cl_bf16_to_f32(src[i]);
    }
  }
}

void cl_half_acc(cl_dtype t, const float *src, uint16_t *dst, size_t n) {
  size_t i = 0;
#if CL_CPU_X86
  if (have_avx512()) i = acc_avx512(t, src, dst, n);
#endif
  for (; i < n; i++)
    dst[i] = t == CL_F16 ? cl_f32_to_f16(cl_f16_to_f32(dst[i]) + src[i])
                         : cl_f32_to_bf16(cl_bf16_to_f32(dst[i]) + src[i]);
}
