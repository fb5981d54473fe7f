/*
 * cpu/cpu_simd.h -- the vector vocabulary that the CPU templates are written
 * in (cpu_direct_tmpl.h for the GEMM, cpu_cell_tmpl.h for the cell), one
 * instruction set at a time. Define CL_SIMD as 512 (AVX-512F), 256 (AVX2 +
 * FMA) or 1 (plain float) and include this: it defines FN(name) (name_avx512,
 * name_avx2, name_generic), TGT (the target attribute), V (the vector type),
 * VW (its float lanes), VZERO(), VLOADU(p), VSTOREU(p, v), VSET1(x),
 * VADD(a, b), VSUB(a, b), VMUL(a, b), VDIV(a, b), VSQRT(a), VMAX(a, b)
 * (a > b ? a : b, lane by lane: b when either is NaN), VBAD(a) (an int,
 * 1 when any lane is not finite; <float.h> first) and VFMA(a, b, c) = a * b + c, and
 * for strided reads VI (a vector of VW int offsets), VSTRIDES(s) (lane i:
 * i s) and VGATHER(p, vi) (lane i: p[vi[i]]); for a vector's first n
 * lanes, 0 <= n <= VW, VLOADN(p, n) (zeros past them; nothing past p + n
 * read), VGATHERN(p, vi, n) (zeros past them, no other lane's offset
 * read) and VSTOREN(p, v, n) (nothing past p + n written). A template includes
 * cpu_simd_end.h at its end, which undefines them all.
 *
 * No include guard: it is included once per instruction set. The x86 ones
 * need <immintrin.h> included first.
 */
#if CL_SIMD == 512
#define FN(name) name##_avx512
#define TGT __attribute__((target("avx512f")))
#define V __m512
#define VW 16
#define VZERO() _mm512_setzero_ps()
#define VLOADU(p) _mm512_loadu_ps(p)
#define VSTOREU(p, v) _mm512_storeu_ps((p), (v))
#define VSET1(x) _mm512_set1_ps(x)
#define VADD(a, b) _mm512_add_ps((a), (b))
#define VSUB(a, b) _mm512_sub_ps((a), (b))
#define VMUL(a, b) _mm512_mul_ps((a), (b))
#define VDIV(a, b) _mm512_div_ps((a), (b))
#define VSQRT(a) _mm512_sqrt_ps(a)
#define VMAX(a, b) _mm512_max_ps((a), (b))
#define VBAD(a)                                                                                    \
  (int)(_mm512_cmp_ps_mask(_mm512_abs_ps(a), _mm512_set1_ps(FLT_MAX), _CMP_LE_OQ) != 0xFFFF)
#define VFMA(a, b, c) _mm512_fmadd_ps((a), (b), (c))
#define VI __m512i
#define VSTRIDES(s)                                                                                \
  _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),      \
                     _mm512_set1_epi32(s))
#define VGATHER(p, vi) _mm512_i32gather_ps((vi), (p), 4)
#define VGATHERN(p, vi, n)                                                                         \
  _mm512_mask_i32gather_ps(_mm512_setzero_ps(), (__mmask16)((1u << (n)) - 1u), (vi), (p), 4)
#define VLOADN(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1u), (p))
#define VSTOREN(p, v, n) _mm512_mask_storeu_ps((p), (__mmask16)((1u << (n)) - 1u), (v))
#elif CL_SIMD == 256
#define FN(name) name##_avx2
#define TGT __attribute__((target("avx2,fma")))
#define V __m256
#define VW 8
#define VZERO() _mm256_setzero_ps()
#define VLOADU(p) _mm256_loadu_ps(p)
#define VSTOREU(p, v) _mm256_storeu_ps((p), (v))
#define VSET1(x) _mm256_set1_ps(x)
#define VADD(a, b) _mm256_add_ps((a), (b))
#define VSUB(a, b) _mm256_sub_ps((a), (b))
#define VMUL(a, b) _mm256_mul_ps((a), (b))
#define VDIV(a, b) _mm256_div_ps((a), (b))
#define VSQRT(a) _mm256_sqrt_ps(a)
#define VMAX(a, b) _mm256_max_ps((a), (b))
#define VBAD(a)                                                                                    \
  (int)(_mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), (a)),             \
                                         _mm256_set1_ps(FLT_MAX), _CMP_LE_OQ)) != 0xFF)
#define VFMA(a, b, c) _mm256_fmadd_ps((a), (b), (c))
#define VI __m256i
#define VSTRIDES(s) _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(s))
#define VGATHER(p, vi) _mm256_i32gather_ps((p), (vi), 4)
#define VLANES(n) _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define VLOADN(p, n) _mm256_maskload_ps((p), VLANES(n))
#define VGATHERN(p, vi, n)                                                                         \
  _mm256_mask_i32gather_ps(_mm256_setzero_ps(), (p), (vi), _mm256_castsi256_ps(VLANES(n)), 4)
#define VSTOREN(p, v, n) _mm256_maskstore_ps((p), VLANES(n), (v))
#elif CL_SIMD == 1
#define FN(name) name##_generic
#define TGT
#define V float
#define VW 1
#define VZERO() 0.0f
#define VLOADU(p) (*(p))
#define VSTOREU(p, v) (*(p) = (v))
#define VSET1(x) (x)
#define VADD(a, b) ((a) + (b))
#define VSUB(a, b) ((a) - (b))
#define VMUL(a, b) ((a) * (b))
#define VDIV(a, b) ((a) / (b))
#define VSQRT(a) sqrtf(a)
#define VMAX(a, b) ((a) > (b) ? (a) : (b))
#define VBAD(a) ((int)!(fabsf(a) <= FLT_MAX))
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VI int
#define VSTRIDES(s) 0
#define VGATHER(p, vi) ((p)[vi])
#define VGATHERN(p, vi, n) ((n) > 0 ? (p)[vi] : 0.0f)
#define VLOADN(p, n) ((n) > 0 ? *(p) : 0.0f)
#define VSTOREN(p, v, n) ((n) > 0 ? (void)(*(p) = (v)) : (void)0)
#else
#error "cpu_simd.h: define CL_SIMD as 512, 256 or 1 first"
#endif
