/*
 * cpu/cpu_mask_tmpl.h -- the two row loops of the CPU mask_mul
 * (cpu_dropout.c), written once in cpu_simd.h's vocabulary and included
 * once per instruction set:
 *   mask_rows(y, x, m, k, acc):  y[i] = x[i] m[i], or y[i] += x[i] m[i]
 *   add_rows(y, s, k):           y[i] += s[i]
 * Every product is rounded before it is added (CL_MASK_EXACT keeps the
 * compiler from fusing the two into an FMA): the same bits in every
 * instruction set as the scalar loops.
 *
 * No include guard: included once per instruction set, between cpu_simd.h
 * and cpu_simd_end.h (which this includes).
 */
TGT CL_MASK_EXACT static void FN(mask_rows)(float *y, const float *x, const float *m, size_t k,
                                           int acc) {
  size_t i = 0;
  if (acc) {
    for (; i + VW <= k; i += VW)
      VSTOREU(y + i, VADD(VLOADU(y + i), VMUL(VLOADU(x + i), VLOADU(m + i))));
    for (; i < k; i++) y[i] += x[i] * m[i];
  } else {
    for (; i + VW <= k; i += VW) VSTOREU(y + i, VMUL(VLOADU(x + i), VLOADU(m + i)));
    for (; i < k; i++) y[i] = x[i] * m[i];
  }
}

TGT CL_MASK_EXACT static void FN(add_rows)(float *y, const float *s, size_t k) {
  size_t i = 0;
  for (; i + VW <= k; i += VW) VSTOREU(y + i, VADD(VLOADU(y + i), VLOADU(s + i)));
  for (; i < k; i++) y[i] += s[i];
}

#include "cpu_simd_end.h"
