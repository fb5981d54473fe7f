/*
 * host/half.h -- float32 <-> float16 / bfloat16 storage conversion on the
 * host, exact round-to-nearest-even, bit-compatible with IEEE binary16 and
 * with torch's bfloat16 (NaN stays NaN, overflow goes to infinity,
 * subnormals kept). The scalar functions here are the reference and the
 * tails of the vectorized runs declared at the end.
 * Storage types are uint16_t bit patterns; no arithmetic is done in half.
 */
#ifndef CONVLSTM_HOST_HALF_H
#define CONVLSTM_HOST_HALF_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "convlstm.h" /* cl_dtype */

static inline uint32_t cl_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

static inline float cl_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t cl_f32_to_bf16(float f) {
  uint32_t u = cl_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

static inline float cl_bf16_to_f32(uint16_t h) { return cl_bits_f32((uint32_t)h << 16); }

static inline uint16_t cl_f32_to_f16(float f) {
  uint32_t u = cl_f32_bits(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) /* inf or NaN */
    return (uint16_t)(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u | ((a >> 13) & 0x3ffu) : 0));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past 65504 */
  if (a < 0x38800000u) {                                    /* subnormal or zero in half */
    if (a < 0x33000000u) return (uint16_t)sign;             /* below half the smallest */
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14..24: value = mant * 2^(e-150), unit 2^-24 */
    uint32_t q = mant >> shift, rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u); /* ties to even on the 13 dropped bits */
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}

static inline float cl_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (e == 0x1f) return cl_bits_f32(sign | 0x7f800000u | (mant << 13));
  if (e == 0) { /* zero or subnormal: mant * 2^-24 exactly */
    float v = (float)mant * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  return cl_bits_f32(sign | ((e + 112u) << 23) | (mant << 13));
}

/* Runs of n values in t, float16 or bfloat16 (half.c): the same bits as
 * the scalar functions above, through the AVX-512F conversion instructions
 * where the CPU has them. The host's one vectorized conversion: the core
 * packs batches with it (pack.c), the CPU backend's kernels convert at
 * their edges with it (cpu/cpu_half.c). */
void cl_half_store(cl_dtype t, const float *src, uint16_t *dst, size_t n);
void cl_half_load(cl_dtype t, const uint16_t *src, float *dst, size_t n);
/* rows runs of n: dst[r ds + i] = src[r ss + i] */
void cl_half_load_rows(cl_dtype t, const uint16_t *src, size_t ss, float *dst, size_t ds,
                       size_t n, size_t rows);
/* dst[i] = round(widen(dst[i]) + src[i]): rounded once. */
void cl_half_acc(cl_dtype t, const float *src, uint16_t *dst, size_t n);

#endif
