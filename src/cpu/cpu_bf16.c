/*
 * cpu/cpu_bf16.c -- the CPU backend's bfloat16 convolution products
 * (see cpu_bf16.h): AVX512_BF16's vdpbf16ps with float32 sums, for
 * convolutions whose activations are stored in bfloat16.
 *
 * The kernels are compiled per function with __attribute__((target)) and
 * run only where cl_cpu_bf16_dot_of() says the CPU has them and they pay:
 * some cores that have the instruction run it at half the float32 FMA's
 * rate, where bfloat16 storage on the float32 kernels is the faster path.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime, CLOCK_THREAD_CPUTIME_ID under -std=c11 */
#endif
#include "cpu_bf16.h"
#include "../host/half.h" /* cl_f32_to_bf16: the one rounding rule */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_clock.h" /* cl_cpu_thread_seconds */
#include "../host/x86.h"   /* CL_CPU_X86 */

/* vdpbf16ps multiplies 32 pairs of bfloat16 and adds each lane's two
 * products into a float32 accumulator. A product of two bfloat16 (8-bit
 * significands) has at most 16 significant bits, so it is exact in float32:
 * the only rounding left is the float32 sum's, as in the float32 kernels.
 * The operands are rounded to bfloat16 (nearest even) where they are packed;
 * activations stored in bfloat16 pass unchanged, the float32 weights are
 * rounded as PyTorch's bfloat16 autocast rounds them. The pairs run along
 * the reduced dimension: for the rows kernel two channels of the padded
 * image interleaved pixel by pixel (packed here, once per image: each tap's
 * shifted view of the interleaved image is then a row of pairs, with no
 * im2col copy), for the dot kernel two neighbouring pixels (already side by
 * side in a row). */

#if CL_CPU_X86 && (defined(__clang__) ? __clang_major__ >= 9 : __GNUC__ >= 10)
#define CL_GEMM_BF16 1
#define CL_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* dst[i] = bf16(src[i]), i < n (nearest even). */
CL_TARGET_BF16 static void to_bf16(const float *src, size_t n, uint16_t *dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(dst + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(src + i)));
  if (i < n) {
    __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
    __m256i v = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
    _mm256_mask_storeu_epi16(dst + i, m, v);
  }
}

/* Channels 2 cp and 2 cp + 1 (c1 NULL: zeros) of a padded image, n floats
 * each, as n pairs: dst[2 i] = bf16(c0[i]), dst[2 i + 1] = bf16(c1[i]). */
CL_TARGET_BF16 static void pack_pair(const float *c0, const float *c1, size_t n, uint16_t *dst) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512i lo = _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(c0 + i)));
    __m512i hi = c1 ? _mm512_cvtepu16_epi32((__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(c1 + i)))
                    : _mm512_setzero_si512();
    _mm512_storeu_si512((void *)(dst + 2 * i), _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16)));
  }
  uint16_t t[32];
  float z[16] = {0}, a[16] = {0}, b[16] = {0};
  if (i == n) return;
  memcpy(a, c0 + i, sizeof(float) * (n - i));
  if (c1) memcpy(b, c1 + i, sizeof(float) * (n - i));
  pack_pair(a, c1 ? b : z, 16, t);
  memcpy(dst + 2 * i, t, sizeof(uint16_t) * 2 * (n - i));
}

enum { BF_MR = 4, BF_NV = 6 }; /* 24 zmm accumulators, as the float32 rows kernel */

/* C[i][q] = sum_r pair(a_i, r) . pair(bp, off[r] + q): a row's pairs at
 * ap + 2 Kh i, each (r) a 32-bit word; bp pairs of channels. */
CL_TARGET_BF16 static void bf16_rows_kernel(int M, int N, int Kh, const uint16_t *ap,
                                            const uint16_t *bp, const ptrdiff_t *off, float *C,
                                            int ldc) {
  for (int i0 = 0; i0 < M; i0 += BF_MR) {
    const uint32_t *a[BF_MR];
    for (int i = 0; i < BF_MR; i++)
      a[i] = (const uint32_t *)(ap + 2 * (size_t)Kh * (i0 + i < M ? i0 + i : M - 1));
    for (int q0 = 0; q0 < N; q0 += 16 * BF_NV) {
      __m512 acc[BF_MR][BF_NV];
#pragma GCC unroll 4
      for (int i = 0; i < BF_MR; i++)
#pragma GCC unroll 6
        for (int v = 0; v < BF_NV; v++) acc[i][v] = _mm512_setzero_ps();
      for (int r = 0; r < Kh; r++) {
        const uint16_t *b = bp + 2 * (off[r] + (ptrdiff_t)q0);
        __m512i bv[BF_NV];
#pragma GCC unroll 6
        for (int v = 0; v < BF_NV; v++) bv[v] = _mm512_loadu_si512((const void *)(b + 32 * v));
#pragma GCC unroll 4
        for (int i = 0; i < BF_MR; i++) {
          __m512i ai = _mm512_set1_epi32((int)a[i][r]);
#pragma GCC unroll 6
          for (int v = 0; v < BF_NV; v++)
            acc[i][v] = _mm512_dpbf16_ps(acc[i][v], (__m512bh)ai, (__m512bh)bv[v]);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < BF_MR; i++)
        if (i0 + i < M)
#pragma GCC unroll 6
          for (int v = 0; v < BF_NV; v++)
            _mm512_storeu_ps(C + (size_t)(i0 + i) * ldc + q0 + 16 * v, acc[i][v]);
    }
  }
}

enum { BD_MR = 4, BD_NR = 6 };

CL_TARGET_BF16 static void bf16_dot_kernel(int M, int N, int K, const uint16_t *A, int lda,
                                           const uint16_t *B, const ptrdiff_t *boff, float *C,
                                           int ldc) {
  for (int i0 = 0; i0 < M; i0 += BD_MR)
    for (int j0 = 0; j0 < N; j0 += BD_NR) {
      const uint16_t *a[BD_MR], *b[BD_NR];
#pragma GCC unroll 4
      for (int i = 0; i < BD_MR; i++) a[i] = A + (size_t)(i0 + i < M ? i0 + i : M - 1) * lda;
#pragma GCC unroll 6
      for (int j = 0; j < BD_NR; j++) b[j] = B + boff[j0 + j < N ? j0 + j : N - 1];
      __m512 acc[BD_MR][BD_NR];
#pragma GCC unroll 4
      for (int i = 0; i < BD_MR; i++)
#pragma GCC unroll 6
        for (int j = 0; j < BD_NR; j++) acc[i][j] = _mm512_setzero_ps();
      for (int p = 0; p < K; p += 32) {
        __m512i av[BD_MR];
#pragma GCC unroll 4
        for (int i = 0; i < BD_MR; i++) av[i] = _mm512_loadu_si512((const void *)(a[i] + p));
#pragma GCC unroll 6
        for (int j = 0; j < BD_NR; j++) {
          __m512i bv = _mm512_loadu_si512((const void *)(b[j] + p));
#pragma GCC unroll 4
          for (int i = 0; i < BD_MR; i++)
            acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)av[i], (__m512bh)bv);
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < BD_MR; i++)
#pragma GCC unroll 6
        for (int j = 0; j < BD_NR; j++)
          if (i0 + i < M && j0 + j < N)
            C[(size_t)(i0 + i) * ldc + j0 + j] += _mm512_reduce_add_ps(acc[i][j]);
    }
}
#else
#define CL_GEMM_BF16 0
#endif

int cl_cpu_bf16_dot_pays(double dot_gflops, double fma_gflops) {
  return dot_gflops > 0.0 && dot_gflops >= fma_gflops;
}

#if CL_GEMM_BF16
/* Register-only loops over 12 accumulators (more than latency times pipes
 * on any core): GFLOP/s, a vdpbf16ps counting 64 flops (16 lanes of two
 * products, each a multiply and an add) and a zmm FMA 32. */
enum { RATE_ITERS = 20000, RATE_ACCS = 12 };

/* The loops start from a volatile read after the first clock reading and
 * end in a volatile write before the second: arithmetic without memory
 * effects may otherwise be moved across the clock calls. */
static volatile float rate_seed = 1.0f, rate_sink;

/* NAME(): GFLOP/s of RATE_ITERS rounds of a[i] = STEP(a[i]) over the
 * accumulators, FLOPS per instruction, in a TARGET function. */
#define CL_RATE_LOOP(NAME, TARGET, STEP, FLOPS)                                                  \
  TARGET static double NAME(void) {                                                              \
    __m512 a[RATE_ACCS];                                                                         \
    double t0 = cl_cpu_thread_seconds();                                                         \
    const float s0 = rate_seed;                                                                  \
    for (int i = 0; i < RATE_ACCS; i++) a[i] = _mm512_set1_ps(s0 + (float)i);                    \
    for (int k = 0; k < RATE_ITERS; k++)                                                         \
      _Pragma("GCC unroll 12") for (int i = 0; i < RATE_ACCS; i++) a[i] = STEP(a[i]);            \
    __m512 sum = a[0];                                                                           \
    for (int i = 1; i < RATE_ACCS; i++) sum = _mm512_add_ps(sum, a[i]);                          \
    rate_sink = _mm512_reduce_add_ps(sum);                                                       \
    return (FLOPS) * RATE_ACCS * RATE_ITERS / (cl_cpu_thread_seconds() - t0) / 1e9;              \
  }

#define DOT_STEP(a)                                                                              \
  _mm512_dpbf16_ps((a), (__m512bh)_mm512_set1_epi32(0x3f803f80),                                 \
                   (__m512bh)_mm512_set1_epi32(0x3c003c00))
#define FMA_STEP(a) _mm512_fmadd_ps((a), _mm512_set1_ps(0.999999f), _mm512_set1_ps(1e-7f))
CL_RATE_LOOP(dot_loop, CL_TARGET_BF16, DOT_STEP, 64.0)
CL_RATE_LOOP(fma_loop, __attribute__((target("avx512f"))), FMA_STEP, 32.0)
#undef DOT_STEP
#undef FMA_STEP
#undef CL_RATE_LOOP

static double rate_dot, rate_fma;

/* Best of five each, the two in turn after a warm-up of both, so that a
 * clock still settling charges neither; clocked in the thread's CPU time,
 * so a neighbour holding the core is not charged. */
static void measure_rates(void) {
  dot_loop(), fma_loop();
  for (int r = 0; r < 5; r++) {
    double d = dot_loop(), f = fma_loop();
    if (d > rate_dot) rate_dot = d;
    if (f > rate_fma) rate_fma = f;
  }
}

static int isa_has_dot(cl_cpu_gemm_kind kind) {
  return cl_cpu_gemm_internal_of(kind) == CL_CPU_GEMM_AVX512 &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bf16");
}
#endif

int cl_cpu_bf16_rates(double *dot_gflops, double *fma_gflops) {
  *dot_gflops = *fma_gflops = 0.0;
#if CL_GEMM_BF16
  if (!isa_has_dot(CL_CPU_GEMM_AVX512)) return 0;
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, measure_rates);
  *dot_gflops = rate_dot, *fma_gflops = rate_fma;
  return 1;
#else
  return 0;
#endif
}

int cl_cpu_bf16_dot_of(cl_cpu_gemm_kind kind) {
#if CL_GEMM_BF16
  const char *e = getenv("CONVLSTM_BF16_DOT");
  if (e && strcmp(e, "0") == 0) return 0;
  if (!isa_has_dot(kind)) return 0;
  if (e && strcmp(e, "1") == 0) return 1;
  double dot, fma;
  cl_cpu_bf16_rates(&dot, &fma);
  return cl_cpu_bf16_dot_pays(dot, fma);
#else
  (void)kind;
  return 0;
#endif
}

static size_t a64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

size_t cl_cpu_bf16_rows_scratch_bytes(int M, int channels, int taps, size_t b_len) {
  size_t Kh = (size_t)(channels + 1) / 2 * taps;
  return a64(sizeof(uint32_t) * M * Kh) + a64(sizeof(ptrdiff_t) * Kh) +
         a64(sizeof(uint32_t) * b_len);
}

size_t cl_cpu_bf16_dot_scratch_bytes(int M, int lda, size_t b_len) {
  return a64(sizeof(uint16_t) * M * (size_t)lda) + a64(sizeof(uint16_t) * b_len);
}

void cl_cpu_bf16_rows(int M, int N, int channels, int taps, const float *A, int lda,
                      const float *B, size_t plane, size_t b_len, const ptrdiff_t *boff, float *C,
                      int ldc, void *scratch) {
#if CL_GEMM_BF16
  if (M <= 0 || N <= 0) return;
  /* pairs of channels (c even, c + 1) at each tap: A[i][(c / 2) taps + t]
   * holds w[i][c][t] and w[i][c + 1][t]; the image's pair cp at cp plane */
  const int Cp = (channels + 1) / 2, Kh = Cp * taps;
  uint16_t *ap = scratch;
  ptrdiff_t *off = (ptrdiff_t *)((char *)scratch + a64(sizeof(uint32_t) * M * (size_t)Kh));
  uint16_t *bp = (uint16_t *)((char *)off + a64(sizeof(ptrdiff_t) * (size_t)Kh));
  for (int i = 0; i < M; i++)
    for (int cp = 0; cp < Cp; cp++) {
      const float *w0 = A + (size_t)i * lda + (size_t)2 * cp * taps;
      for (int t = 0; t < taps; t++) {
        uint16_t *d = ap + 2 * ((size_t)i * Kh + (size_t)cp * taps + t);
        d[0] = cl_f32_to_bf16(w0[t]);
        d[1] = 2 * cp + 1 < channels ? cl_f32_to_bf16(w0[taps + t]) : 0;
      }
    }
  for (int cp = 0; cp < Cp; cp++) {
    for (int t = 0; t < taps; t++) off[cp * taps + t] = (ptrdiff_t)(cp * plane) + boff[t];
    /* the pair's plane, and past the last one what the most shifted view reads */
    size_t n = cp + 1 < Cp ? plane : b_len - (size_t)2 * cp * plane;
    if (2 * cp + 1 < channels && n > b_len - (size_t)(2 * cp + 1) * plane)
      n = b_len - (size_t)(2 * cp + 1) * plane;
    pack_pair(B + (size_t)2 * cp * plane,
              2 * cp + 1 < channels ? B + (size_t)(2 * cp + 1) * plane : NULL, n,
              bp + 2 * (size_t)cp * plane);
  }
  bf16_rows_kernel(M, N, Kh, ap, bp, off, C, ldc);
#else
  (void)M, (void)N, (void)channels, (void)taps, (void)A, (void)lda, (void)B, (void)plane;
  (void)b_len, (void)boff, (void)C, (void)ldc, (void)scratch;
#endif
}

void cl_cpu_bf16_dot(int M, int N, int K, const float *A, int lda, const float *B, size_t b_len,
                     const ptrdiff_t *boff, float *C, int ldc, void *scratch) {
#if CL_GEMM_BF16
  if (M <= 0 || N <= 0) return;
  uint16_t *ab = scratch,
           *bb = (uint16_t *)((char *)scratch + a64(sizeof(uint16_t) * M * (size_t)lda));
  to_bf16(A, (size_t)M * lda, ab);
  to_bf16(B, b_len, bb);
  bf16_dot_kernel(M, N, K, ab, lda, bb, boff, C, ldc);
#else
  (void)M, (void)N, (void)K, (void)A, (void)lda, (void)B, (void)b_len, (void)boff, (void)C;
  (void)ldc, (void)scratch;
#endif
}
