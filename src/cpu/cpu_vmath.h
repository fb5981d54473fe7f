/*
 * cpu/cpu_vmath.h -- vector exp, sigmoid and tanh for the fused cell
 * (cpu_cell.c), in AVX-512F and AVX2+FMA versions behind target attributes.
 *
 * Why: the cell evaluates five transcendental functions per element of
 * every time step; through scalar libm calls that costs about as much as
 * the convolutions. These follow the classic Cephes single-precision
 * algorithms (exp: Cody-Waite reduction by ln 2 and a degree-5 polynomial;
 * tanh: an odd polynomial below 0.625, 1 - 2 / (exp(2|x|) + 1) above), which
 * stay within a few ulp of expf/tanhf (tests/c/test_backend_ops.c measures
 * it), well inside the 1e-5 parity tolerance against PyTorch.
 *
 * Not a general math library: no errno, and inputs outside the float range
 * saturate instead of overflowing exactly where libm would.
 */
#ifndef CONVLSTM_CPU_VMATH_H
#define CONVLSTM_CPU_VMATH_H

#include "../host/x86.h" /* CL_CPU_X86 */

#if CL_CPU_X86

#define CL_VM_AVX512 __attribute__((target("avx512f"), always_inline)) static inline
#define CL_VM_AVX2 __attribute__((target("avx2,fma"), always_inline)) static inline

/* Cephes expf constants: ln 2 split so that n * LN2_HI is exact, and the
 * minimax polynomial of (e^r - 1 - r) / r^2 on [-ln2/2, ln2/2]. */
#define CL_VM_LOG2E 1.44269504088896341f
#define CL_VM_LN2_HI 0.693359375f
#define CL_VM_LN2_LO -2.12194440e-4f
#define CL_VM_EXP_P0 1.9875691500e-4f
#define CL_VM_EXP_P1 1.3981999507e-3f
#define CL_VM_EXP_P2 8.3334519073e-3f
#define CL_VM_EXP_P3 4.1665795894e-2f
#define CL_VM_EXP_P4 1.6666665459e-1f
#define CL_VM_EXP_P5 5.0000001201e-1f
/* Cephes tanhf: odd polynomial for |x| < 0.625. */
#define CL_VM_TANH_P0 -5.70498872745e-3f
#define CL_VM_TANH_P1 2.06390887954e-2f
#define CL_VM_TANH_P2 -5.37397155531e-2f
#define CL_VM_TANH_P3 1.33314422036e-1f
#define CL_VM_TANH_P4 -3.33332819422e-1f

/* ---- AVX-512F ------------------------------------------------------------ */

/* e^r for r in [-ln2/2, ln2/2]. */
CL_VM_AVX512 __m512 cl_vm_exp_poly512(__m512 r) {
  __m512 p = _mm512_set1_ps(CL_VM_EXP_P0);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CL_VM_EXP_P1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CL_VM_EXP_P2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CL_VM_EXP_P3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CL_VM_EXP_P4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(CL_VM_EXP_P5));
  return _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
}

/* scalef applies 2^n with correct overflow to inf and underflow to 0; the
 * clamp only keeps n finite. */
CL_VM_AVX512 __m512 cl_vm_exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(100.0f)), _mm512_set1_ps(-110.0f));
  __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(CL_VM_LOG2E)),
                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(CL_VM_LN2_HI), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(CL_VM_LN2_LO), r);
  return _mm512_scalef_ps(cl_vm_exp_poly512(r), n);
}

CL_VM_AVX512 __m512 cl_vm_sigmoid512(__m512 x) {
  __m512 one = _mm512_set1_ps(1.0f);
  return _mm512_div_ps(one,
                       _mm512_add_ps(one, cl_vm_exp512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}

CL_VM_AVX512 __m512 cl_vm_tanh512(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 ax = _mm512_abs_ps(x);
  __m512 z = _mm512_mul_ps(x, x);
  __m512 p = _mm512_set1_ps(CL_VM_TANH_P0);
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(CL_VM_TANH_P1));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(CL_VM_TANH_P2));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(CL_VM_TANH_P3));
  p = _mm512_fmadd_ps(p, z, _mm512_set1_ps(CL_VM_TANH_P4));
  __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, z), x, x);
  /* Past |x| = 10, 1 - 2 / (e^{2|x|} + 1) rounds to exactly 1 anyway. */
  __m512 e =
      cl_vm_exp512(_mm512_mul_ps(_mm512_min_ps(ax, _mm512_set1_ps(10.0f)), _mm512_set1_ps(2.0f)));
  __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
  /* big >= 0: or-ing in the sign bit of x makes it odd. */
  __m512i sign = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32((int)0x80000000u));
  big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big), sign));
  __mmask16 is_small = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm512_mask_blend_ps(is_small, big, small);
}

/* ---- AVX2 + FMA ------------------------------------------------------------ */

CL_VM_AVX2 __m256 cl_vm_exp_poly256(__m256 r) {
  __m256 p = _mm256_set1_ps(CL_VM_EXP_P0);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CL_VM_EXP_P1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CL_VM_EXP_P2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CL_VM_EXP_P3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CL_VM_EXP_P4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(CL_VM_EXP_P5));
  return _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
}

/* 2^n is built in the exponent field, so x is clamped to keep n within the
 * normal range [-126, 127]: e^88.3 is near FLT_MAX, e^-87.3 near FLT_MIN;
 * the sigmoid and tanh below tolerate the saturation. */
CL_VM_AVX2 __m256 cl_vm_exp256(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3f)), _mm256_set1_ps(-87.3f));
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(CL_VM_LOG2E)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(CL_VM_LN2_HI), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(CL_VM_LN2_LO), r);
  __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(cl_vm_exp_poly256(r), _mm256_castsi256_ps(e));
}

CL_VM_AVX2 __m256 cl_vm_sigmoid256(__m256 x) {
  __m256 one = _mm256_set1_ps(1.0f);
  return _mm256_div_ps(one,
                       _mm256_add_ps(one, cl_vm_exp256(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

CL_VM_AVX2 __m256 cl_vm_tanh256(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
  __m256 ax = _mm256_andnot_ps(sign, x);
  __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(CL_VM_TANH_P0);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(CL_VM_TANH_P1));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(CL_VM_TANH_P2));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(CL_VM_TANH_P3));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(CL_VM_TANH_P4));
  __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  /* Past |x| = 10, 1 - 2 / (e^{2|x|} + 1) rounds to exactly 1 anyway. */
  __m256 e =
      cl_vm_exp256(_mm256_mul_ps(_mm256_min_ps(ax, _mm256_set1_ps(10.0f)), _mm256_set1_ps(2.0f)));
  __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
  big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
  __m256 is_small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.625f), _CMP_LT_OQ);
  return _mm256_blendv_ps(big, small, is_small);
}

#endif /* CL_CPU_X86 */
#endif
