/*
 * cpu/cpu_gemm.c -- the CPU backend's single-precision GEMM (see cpu_gemm.h).
 *
 * The internal kernel follows the GotoBLAS/BLIS structure: C is cut into
 * NC-column blocks, K into KC-deep slices; each KC x NC slice of op(B) is
 * packed once into NR-wide slivers (it then lives in L2 while all of M passes
 * over it), each MC x KC block of op(A) into MR-tall slivers (one sliver sits
 * in L1 during a row of micro-tiles), and a micro-kernel keeps an MR x NR tile
 * of C in vector registers for the whole KC loop. Packing makes every
 * micro-kernel load unit-stride whatever the transposes and leading
 * dimensions are, and zero-pads the edges so the micro-kernel always runs
 * full tiles (only its final store is masked). Where a sliver's k steps are
 * already contiguous runs of MR or NR floats (a transposed A; a row-major
 * op(B) on the tiles that keep one B sliver across the row tiles) the
 * micro-kernel reads them in place, a stride apart, and only a short last
 * sliver is packed: the Winograd products, whose B is used by as
 * few as 16 rows of A, had spent 11.5 % of a step packing B (doc/speed.md).
 *
 * For convolutions the packing step can also read op(B) as an im2col view of
 * a padded image (cl_cpu_sgemm_im2col), and two unpacked kernels
 * (cl_cpu_sgemm_rows, cl_cpu_sgemm_dot, from cpu_direct_tmpl.h) serve the
 * shapes where packing costs more than it saves.
 *
 * Vector code is compiled per function with __attribute__((target)) and
 * chosen with __builtin_cpu_supports at run time: R builds packages with
 * plain -O2, so global -m flags cannot be relied on.
 *
 * This file is not the convolution (cpu_conv.c lowers convolutions to these
 * calls). cl_cpu_gemm_choose() is a fixed rule (the CPU's best internal
 * kernel unless CONVLSTM_GEMM forces one); its one static mutable state is
 * the table of register tiles timed per shape (tile_pick), which changes
 * speed only, never a result.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#endif
#include "cpu_gemm.h"
#include "cpu_clock.h"   /* cl_cpu_thread_seconds */
#include "cpu_copy.h"    /* cl_cpu_copy_short */
#include "../host/threads.h" /* cl_cpu_threads */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "../host/x86.h" /* CL_CPU_X86 */

/* Cache blocking. KC bounds the depth of one pass (an A sliver of MR x KC
 * floats stays in L1), NC x KC floats of packed B (~720 KiB) fit the 1-2 MiB
 * L2 of current x86 cores, and NC is a multiple of every NR below so that a
 * 24x24 image (576 columns) is one block. MC only bounds the A pack buffer. */
enum { GEMM_KC = 256, GEMM_MC = 240, GEMM_NC = 720 };

/* Micro-kernel: C[0:m, 0:n] = alpha * (A sliver)(B sliver) + beta * C,
 * computing the full MR x NR tile in registers. The A sliver's MR rows are
 * contiguous at each k, the k steps as floats apart: MR when packed, lda
 * when a transposed A is read where it lies; the B sliver's NR columns
 * likewise, its k steps bs apart: NR packed, ldb read in place. */
typedef void (*gemm_ukernel)(int kc, const float *a, int as, const float *b, int bs, float *c,
                             int ldc, float alpha, float beta, int m, int n);

/* The same tile with B an im2col view read in place: row p of B starts at
 * xp + boff[p], and the tile's 16-column vector v at seg[v] from there. */
typedef void (*gemm_vkernel)(int kc, const float *a, int as, const float *xp, const ptrdiff_t *boff,
                             const ptrdiff_t *seg, float *c, int ldc, float alpha, float beta,
                             int m, int n);

typedef struct gemm_arch {
  int mr, nr;
  gemm_ukernel ukr;
  int avx_pack; /* the CPU has AVX: transposing packs may use 8 x 8 register transposes */
  int jr_outer; /* BLIS's loop order at any depth (else where a B sliver is short: jr_outer()) */
  const char *name;
  gemm_vkernel vukr; /* for views of images W % 16 == 0 wide: B is not packed (else NULL) */
  int area_pct;      /* how tile_least_padding weighs its padded area, in percent */
} gemm_arch;

static int imin(int a, int b) { return a < b ? a : b; }
static int round_up(int n, int m) { return (n + m - 1) / m * m; }

/* Length of the blocks when n is cut into ceil(n / max) nearly equal blocks
 * rounded up to `align`: equal blocks avoid a thin, inefficient last one. */
static int block_len(int n, int max, int align) {
  int nb = (n + max - 1) / max;
  int b = round_up((n + nb - 1) / nb, align);
  return b < n ? b : n;
}

/* ---- portable micro-kernel --------------------------------------------- */

enum { GEN_MR = 4, GEN_NR = 16 };

/* Writes an MR x NR tile held in memory (row stride nr) into C. */
static void store_tile(const float *t, int nr, float *c, int ldc, float alpha, float beta, int m,
                       int n) {
  for (int i = 0; i < m; i++) {
    float *cr = c + (size_t)i * ldc;
    const float *tr = t + (size_t)i * nr;
    if (beta == 0.0f) {
      for (int j = 0; j < n; j++) cr[j] = alpha * tr[j];
    } else {
      for (int j = 0; j < n; j++) cr[j] = alpha * tr[j] + beta * cr[j];
    }
  }
}

static inline __attribute__((always_inline)) void gen_sums(int kc, const float *a, int as,
                                                           const float *b, int bs, float *acc) {
  for (int p = 0; p < kc; p++) {
    const float *bp = b + (size_t)p * bs;
    for (int i = 0; i < GEN_MR; i++) {
      float ai = a[(size_t)p * as + i];
      for (int j = 0; j < GEN_NR; j++) acc[i * GEN_NR + j] += ai * bp[j];
    }
  }
}

static void ukr_generic(int kc, const float *a, int as, const float *b, int bs, float *c, int ldc,
                        float alpha, float beta, int m, int n) {
  float acc[GEN_MR * GEN_NR] = {0};
  /* a packed B's stride as a constant: as a variable, 192 x 256 x 48 ran at
   * 9-11 GFLOP/s in most runs, against 15-17 */
  if (bs == GEN_NR)
    gen_sums(kc, a, as, b, GEN_NR, acc);
  else
    gen_sums(kc, a, as, b, bs, acc);
  store_tile(acc, GEN_NR, c, ldc, alpha, beta, m, n);
}

#if CL_CPU_X86
/* How many k steps ahead the x86 tiles prefetch the A and B rows they
 * will read. A transposed A read in place steps a row of A (lda floats)
 * per k step, and so does a row-major B read in place: strides the
 * hardware prefetchers follow late. On an Intel Xeon the plain stack's
 * Winograd GEMMs of 48 channels rose by 0.03-0.12 of the peak (its hidden
 * halves' backward filter 0.74-0.75 -> 0.82-0.89), its step and the
 * forecaster's 0.91-0.98x the time; a packed operand's prefetch, needless,
 * measured no slower than skipping it (doc/speed.md). */
#define PREFETCH_K 16

/* Prefetch the line k steps of `step` floats after p. A prefetch never
 * faults, and the address is reckoned as an integer, so one past the end
 * of the operand is harmless. */
static inline __attribute__((always_inline)) void prefetch_k(const float *p, int step) {
  __builtin_prefetch((const void *)((uintptr_t)p + (uintptr_t)PREFETCH_K * (uintptr_t)step *
                                                       sizeof(float)),
                     0, 3);
}

/* ---- AVX2 + FMA micro-kernel: 6 x 16, twelve ymm accumulators ----------- */

#define CL_TARGET_AVX2 __attribute__((target("avx2,fma")))
enum { AVX2_MR = 6, AVX2_NR = 16 };

CL_TARGET_AVX2 static void ukr_avx2(int kc, const float *a, int as, const float *b, int bs,
                                    float *c, int ldc, float alpha, float beta, int m, int n) {
  /* Every loop over acc is fully unrolled so that it lives in registers. */
  __m256 acc[AVX2_MR][2];
#pragma GCC unroll 6
  for (int i = 0; i < AVX2_MR; i++) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int p = 0; p < kc; p++) {
    __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
    prefetch_k(a, as);
    prefetch_k(b, bs);
#pragma GCC unroll 6
    for (int i = 0; i < AVX2_MR; i++) {
      __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += as;
    b += bs;
  }
  __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  if (m == AVX2_MR && n == AVX2_NR) {
#pragma GCC unroll 6
    for (int i = 0; i < AVX2_MR; i++) {
      float *cr = c + (size_t)i * ldc;
      __m256 x0 = _mm256_mul_ps(va, acc[i][0]), x1 = _mm256_mul_ps(va, acc[i][1]);
      if (beta != 0.0f) {
        x0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), x0);
        x1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), x1);
      }
      _mm256_storeu_ps(cr, x0);
      _mm256_storeu_ps(cr + 8, x1);
    }
    return;
  }
  /* Edge tile (the last rows or columns of C): the same sums through lane
   * masks, no lane past n read or written. The loop over rows is unrolled,
   * so acc stays in registers. */
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i k0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane);
  const __m256i k1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(n - 8), lane);
#pragma GCC unroll 6
  for (int i = 0; i < AVX2_MR; i++) {
    if (i >= m) break;
    float *cr = c + (size_t)i * ldc;
    __m256 x0 = _mm256_mul_ps(va, acc[i][0]), x1 = _mm256_mul_ps(va, acc[i][1]);
    if (beta != 0.0f) {
      x0 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr, k0), x0);
      x1 = _mm256_fmadd_ps(vb, _mm256_maskload_ps(cr + 8, k1), x1);
    }
    _mm256_maskstore_ps(cr, k0, x0);
    _mm256_maskstore_ps(cr + 8, k1, x1);
  }
}

/* ---- AVX-512F micro-kernels ---------------------------------------------
 * Three register tiles. Two have 24 zmm accumulators: 8 x 48 (8 rows divide
 * the usual channel counts, 4 * hidden, and 48 columns divide 24 * 24
 * pixels; per k step 3 loads and 8 broadcasts feed 24 FMAs) and 12 x 32
 * (32 columns divide 16 * 16 pixels, where 48 leaves a sixth tile a third
 * used; 2 loads and 12 broadcasts per 24 FMAs). The third, 16 x 16, has 16:
 * it is for products with 16 rows or 16 columns (a first layer's 16 input
 * channels), which the others pad by a third or a half; per k step 1 load
 * and 16 broadcasts feed 16 FMAs. Which runs faster depends on the shape,
 * so cl_cpu_sgemm times them per shape (tile_pick below). All sum each
 * element of C over k in the same order with the same operations, so their
 * results are identical bit for bit. The loops over rows are unrolled in
 * full (16 at most): a runtime index would keep acc in memory. */

#define CL_TARGET_AVX512 __attribute__((target("avx512f")))

/* C[0:m, 0:n] = alpha acc + beta C for an MR x 16 NV tile of accumulators.
 * The loop over rows is unrolled in full, each row behind its test against
 * m, so that acc stays in registers: a loop to a runtime m spilled acc to
 * the stack at every tile and read it back, and 16 x 16 on K = 16 (a
 * first layer's Winograd products) spent about a quarter of its time
 * storing (doc/speed.md). */
#define CL_UKR_AVX512(NAME, MR, NV)                                                               \
  CL_TARGET_AVX512 __attribute__((always_inline)) static inline void NAME##_row(                  \
      const __m512 *acc, float *cr, __m512 va, __m512 vb, int scale, int add,                     \
      const __mmask16 *mk) {                                                                      \
    _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) {                                        \
      __m512 x = scale ? _mm512_mul_ps(va, acc[v]) : acc[v];                                      \
      if (add) x = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(mk[v], cr + 16 * v), x);             \
      _mm512_mask_storeu_ps(cr + 16 * v, mk[v], x);                                               \
    }                                                                                             \
  }                                                                                               \
  /* Inlined: a call costs a twentieth of a tile of K = 240. */                                 \
  CL_TARGET_AVX512 __attribute__((always_inline)) static inline void NAME##_store(                \
      __m512 acc[MR][NV], float *c, int ldc, float alpha, float beta, int m, int n) {             \
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);                           \
    const int scale = alpha != 1.0f, add = beta != 0.0f;                                          \
    __mmask16 mk[NV];                                                                             \
    for (int v = 0; v < NV; v++) {                                                                \
      int left = n - 16 * v;                                                                      \
      mk[v] = left >= 16 ? (__mmask16)0xFFFF : left <= 0 ? 0 : (__mmask16)((1u << left) - 1u);    \
    }                                                                                             \
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {                                       \
      if (i >= m) break;                                                                          \
      NAME##_row(acc[i], c + (size_t)i * ldc, va, vb, scale, add, mk);                            \
    }                                                                                             \
  }                                                                                               \
  CL_TARGET_AVX512 static void NAME(int kc, const float *a, int as, const float *b, int bs,      \
                                    float *c, int ldc, float alpha, float beta, int m, int n) {   \
    __m512 acc[MR][NV];                                                                           \
    _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++)                                         \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[i][v] = _mm512_setzero_ps();     \
    for (int p = 0; p < kc; p++) {                                                                \
      __m512 bv[NV];                                                                              \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + 16 * v);   \
      prefetch_k(a, as);                                                                          \
      _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) prefetch_k(b + 16 * v, bs);            \
      _Pragma("GCC unroll 16") for (int i = 0; i < MR; i++) {                                     \
        __m512 ai = _mm512_set1_ps(a[i]);                                                         \
        _Pragma("GCC unroll 4") for (int v = 0; v < NV; v++) acc[i][v] =                          \
            _mm512_fmadd_ps(ai, bv[v], acc[i][v]);                                                \
      }                                                                                           \
      a += as;                                                                                    \
      b += bs;                                                                                    \
    }                                                                                             \
    NAME##_store(acc, c, ldc, alpha, beta, m, n);                                                 \
  }

CL_UKR_AVX512(ukr_avx512, 8, 3)
CL_UKR_AVX512(ukr_avx512_12x32, 12, 2)
CL_UKR_AVX512(ukr_avx512_16x16, 16, 1)
#undef CL_UKR_AVX512

/* 12 x 32 with B read from the image in place. When the image is a multiple
 * of 16 pixels wide, each 16 columns of an im2col row are one image row's
 * segment shifted by the row's tap, so the loads that a packed sliver would
 * serve come straight from the zero-bordered image (in L1 across the row
 * tiles) and B is never packed. Products and sums are those of the packed
 * 12 x 32 kernel, in its order: the results are the same bit for bit. */
CL_TARGET_AVX512 static void vukr_avx512_12x32(int kc, const float *a, int as, const float *xp,
                                               const ptrdiff_t *boff, const ptrdiff_t *seg,
                                               float *c, int ldc, float alpha, float beta, int m,
                                               int n) {
  __m512 acc[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const __mmask16 m0 = n >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << n) - 1u);
  const __mmask16 m1 = n >= 32 ? (__mmask16)0xFFFF : n <= 16 ? 0 : (__mmask16)((1u << (n - 16)) - 1u);
  const float *s0 = xp + seg[0], *s1 = xp + seg[1];
  for (int p = 0; p < kc; p++) {
    const ptrdiff_t o = boff[p];
    __m512 b0 = _mm512_maskz_loadu_ps(m0, s0 + o), b1 = _mm512_maskz_loadu_ps(m1, s1 + o);
#pragma GCC unroll 12
    for (int i = 0; i < 12; i++) {
      __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += as;
  }
  /* A copy for the store, whose runtime-indexed loops would otherwise keep
   * acc in memory, written back on every k step. */
  __m512 out[12][2];
#pragma GCC unroll 12
  for (int i = 0; i < 12; i++) out[i][0] = acc[i][0], out[i][1] = acc[i][1];
  ukr_avx512_12x32_store(out, c, ldc, alpha, beta, m, n);
}
#endif /* CL_CPU_X86 */

static const gemm_arch ARCH_GENERIC = {GEN_MR, GEN_NR, ukr_generic, 0, 0, "4x16", NULL, 100};
#if CL_CPU_X86
static const gemm_arch ARCH_AVX2 = {AVX2_MR, AVX2_NR, ukr_avx2, 1, 0, "6x16", NULL, 100};
/* The AVX-512 tiles cl_cpu_sgemm chooses between, the first the default.
 * Tiles with a view kernel come last: a product they cannot read in place
 * chooses among the others (tiles_for), and forced, runs them packed.
 * 16 x 16's area weighs 5/4 when padding is compared: a first layer's
 * backward data (16 x 160 x 192), which it fits and 8 x 48 pads by a
 * fifth, ran at 0.27-0.32 of the peak on it against 0.33-0.34 on 8 x 48
 * (Zen 5, doc/speed.md); its backward filter (192 x 16), which 12 x 32 pads
 * by half, at 0.51-0.57 against 0.30-0.34. */
static const gemm_arch ARCH_AVX512[] = {
    {8, 48, ukr_avx512, 1, 0, "8x48", NULL, 100},
    {12, 32, ukr_avx512_12x32, 1, 1, "12x32", NULL, 100},
    {16, 16, ukr_avx512_16x16, 1, 1, "16x16", NULL, 125},
    {12, 32, ukr_avx512_12x32, 1, 1, "12x32-inplace", vukr_avx512_12x32, 100}};
#endif

static const gemm_arch *arch_of(cl_cpu_gemm_kind kind) {
#if CL_CPU_X86
  if (kind == CL_CPU_GEMM_AVX512) return &ARCH_AVX512[0];
  if (kind == CL_CPU_GEMM_AVX2) return &ARCH_AVX2;
#endif
  (void)kind;
  return &ARCH_GENERIC;
}

int cl_cpu_gemm_available(cl_cpu_gemm_kind kind) {
  switch (kind) {
    case CL_CPU_GEMM_GENERIC: return 1;
#if CL_CPU_X86
    /* libgcc's checks include the OS (XCR0) enabling the wide registers. */
    case CL_CPU_GEMM_AVX2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CL_CPU_GEMM_AVX512: return __builtin_cpu_supports("avx512f");
#endif
#ifdef CL_HAVE_BLAS
    case CL_CPU_GEMM_BLAS: return 1;
#endif
    default: return 0;
  }
}

cl_cpu_gemm_kind cl_cpu_gemm_best_internal(void) {
  if (cl_cpu_gemm_available(CL_CPU_GEMM_AVX512)) return CL_CPU_GEMM_AVX512;
  if (cl_cpu_gemm_available(CL_CPU_GEMM_AVX2)) return CL_CPU_GEMM_AVX2;
  return CL_CPU_GEMM_GENERIC;
}

cl_cpu_gemm_kind cl_cpu_gemm_internal_of(cl_cpu_gemm_kind kind) {
  return kind == CL_CPU_GEMM_BLAS ? cl_cpu_gemm_best_internal() : kind;
}

const char *cl_cpu_gemm_name(cl_cpu_gemm_kind kind) {
  switch (kind) {
    case CL_CPU_GEMM_GENERIC: return "internal-generic";
    case CL_CPU_GEMM_AVX2: return "internal-avx2";
    case CL_CPU_GEMM_AVX512: return "internal-avx512";
    case CL_CPU_GEMM_BLAS: return "blas";
  }
  return "?";
}

/* ---- packing ------------------------------------------------------------ */

/* Packing op(A) with A not transposed, and op(B) with B transposed, is a
 * transposition: scalar code moves about one float per cycle, which costs
 * the convolution's backward-filter GEMM (both operands transposed) a fifth
 * of its time. With AVX, 8 x 8 blocks go through registers instead. */

#if CL_CPU_X86
#define CL_TARGET_AVX __attribute__((target("avx")))

/* dst[q * ldd + i] = row[i][q] for an 8 x 8 block. */
CL_TARGET_AVX static inline void transpose8x8_rows(const float *const row[8], float *dst,
                                                   size_t ldd) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(row[i]);
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int q = 0; q < 4; q++) {
    _mm256_storeu_ps(dst + q * ldd, _mm256_permute2f128_ps(u[q], u[q + 4], 0x20));
    _mm256_storeu_ps(dst + (q + 4) * ldd, _mm256_permute2f128_ps(u[q], u[q + 4], 0x31));
  }
}

/* dst[q * ldd + i] = src[i * lds + q] for an 8 x 8 block. */
CL_TARGET_AVX static inline void transpose8x8(const float *src, size_t lds, float *dst,
                                              size_t ldd) {
  const float *row[8];
  for (int i = 0; i < 8; i++) row[i] = src + i * lds;
  transpose8x8_rows(row, dst, ldd);
}

/* An MR-tall sliver from mr full rows of A (mr a multiple of 4, at least 8):
 * dst[p * mr + i] = src[i * lda + p]. Row groups of 8 start at 0, 8, ...
 * and the last at mr - 8, so for mr = 12 rows 4-7 are written twice, with
 * the same values. */
CL_TARGET_AVX static void pack_rows_avx(const float *src, int lda, int kc, int mr, float *dst) {
  int p = 0;
  for (; p + 8 <= kc; p += 8)
    for (int g = 0; g < (mr + 7) / 8; g++) {
      const int r0 = imin(8 * g, mr - 8);
      transpose8x8(src + (size_t)r0 * lda + p, (size_t)lda, dst + (size_t)p * mr + r0, (size_t)mr);
    }
  for (; p < kc; p++)
    for (int i = 0; i < mr; i++) dst[(size_t)p * mr + i] = src[(size_t)i * lda + p];
}

/* An NR-wide sliver (NR a multiple of 8) from n rows of B, n <= NR:
 * dst[p * nr + j] = src[j * ldb + p]; columns j >= n are left to the caller. */
CL_TARGET_AVX static void pack_cols_avx(const float *src, int ldb, int kc, int n, int nr,
                                        float *dst) {
  int j = 0;
  for (; j + 8 <= n; j += 8) {
    const float *s = src + (size_t)j * ldb;
    int p = 0;
    for (; p + 8 <= kc; p += 8) transpose8x8(s + p, (size_t)ldb, dst + (size_t)p * nr + j, nr);
    for (; p < kc; p++)
      for (int i = 0; i < 8; i++) dst[(size_t)p * nr + j + i] = s[(size_t)i * ldb + p];
  }
  for (; j < n; j++)
    for (int p = 0; p < kc; p++) dst[(size_t)p * nr + j] = src[(size_t)j * ldb + p];
}
#endif /* CL_CPU_X86 */

/* op(A)[i0:i0+mc, p0:p0+kc] into MR-tall slivers, element (i, p) of a sliver
 * at [p * mr + i]; rows past mc are zero. */
static void pack_a(const gemm_arch *ar, int transA, const float *A, int lda, int i0, int p0, int mc,
                   int kc, float *dst) {
  const int mr = ar->mr;
  for (int s = 0; s < mc; s += mr, dst += (size_t)mr * kc) {
    int m = imin(mr, mc - s);
    if (m < mr) memset(dst, 0, sizeof(float) * (size_t)mr * kc);
    if (transA) {
      for (int p = 0; p < kc; p++)
        cl_cpu_copy_short(dst + (size_t)p * mr, A + (size_t)(p0 + p) * lda + i0 + s, m);
      continue;
    }
    const float *src = A + (size_t)(i0 + s) * lda + p0;
#if CL_CPU_X86
    if (ar->avx_pack && mr % 4 == 0 && mr >= 8 && m == mr) {
      pack_rows_avx(src, lda, kc, mr, dst);
      continue;
    }
#endif
    for (int i = 0; i < m; i++)
      for (int p = 0; p < kc; p++) dst[(size_t)p * mr + i] = src[(size_t)i * lda + p];
  }
}

/* Where op(B) comes from: a strided matrix or, for convolutions, an
 * implicit im2col matrix read from a padded image. */
typedef struct gemm_bsrc {
  int trans;
  const float *B;
  int ldb;
  const cl_cpu_im2col_view *view; /* when not NULL, B is this view */
} gemm_bsrc;

/* Row p0 + p of the view, columns [q, q + n): runs of image row segments. */
static void pack_view_row(const cl_cpu_im2col_view *v, int r, int q, int n, float *dst) {
  const float *src = v->xp + v->boff[r];
  int y = q / v->W, x = q % v->W;
  for (int jj = 0; jj < n; y++, x = 0) {
    int len = imin(v->W - x, n - jj);
    cl_cpu_copy_short(dst + jj, src + (size_t)y * v->Wp + x, len);
    jj += len;
  }
}

/* Row p0 + p of a transposed view, columns [j, j + n): element j is pixel
 * p0 + p of the view's row j (pixel q at (q / W) Wp + q % W). */
static void pack_tview(const cl_cpu_im2col_view *v, int p0, int kc, int j, int n, int nr,
                       int avx, float *dst) {
  int jj = 0;
#if CL_CPU_X86
  /* Eight view rows at a time: runs of 8 pixels within an image row are
   * 8 x 8 transposes from the image itself. */
  for (; avx && jj + 8 <= n; jj += 8) {
    const float *row[8];
    for (int p = 0; p < kc;) {
      int q = p0 + p, y = q / v->W, x = q % v->W;
      ptrdiff_t off = (ptrdiff_t)y * v->Wp + x;
      if (x + 8 <= v->W && p + 8 <= kc) {
        for (int i = 0; i < 8; i++) row[i] = v->xp + v->boff[j + jj + i] + off;
        transpose8x8_rows(row, dst + (size_t)p * nr + jj, (size_t)nr);
        p += 8;
      } else {
        for (int i = 0; i < 8; i++) dst[(size_t)p * nr + jj + i] = v->xp[v->boff[j + jj + i] + off];
        p++;
      }
    }
  }
#else
  (void)avx;
#endif
  for (; jj < n; jj++) {
    const float *src = v->xp + v->boff[j + jj];
    for (int p = 0; p < kc; p++) {
      int q = p0 + p;
      dst[(size_t)p * nr + jj] = src[(ptrdiff_t)(q / v->W) * v->Wp + q % v->W];
    }
  }
}

/* op(B)[p0:p0+kc, j0:j0+nc] into NR-wide slivers, element (p, j) of a sliver
 * at [p * nr + j]; columns past nc are zero. */
static void pack_b(const gemm_arch *ar, const gemm_bsrc *b, int p0, int j0, int kc, int nc,
                   float *dst) {
  const int nr = ar->nr, ldb = b->ldb;
  for (int t = 0; t < nc; t += nr, dst += (size_t)nr * kc) {
    int n = imin(nr, nc - t);
    if (n < nr) memset(dst, 0, sizeof(float) * (size_t)nr * kc);
    if (b->view && b->trans) {
      pack_tview(b->view, p0, kc, j0 + t, n, nr, ar->avx_pack, dst);
      continue;
    }
    if (b->view) {
      for (int p = 0; p < kc; p++) pack_view_row(b->view, p0 + p, j0 + t, n, dst + (size_t)p * nr);
      continue;
    }
    if (!b->trans) {
      for (int p = 0; p < kc; p++)
        cl_cpu_copy_short(dst + (size_t)p * nr, b->B + (size_t)(p0 + p) * ldb + j0 + t, n);
      continue;
    }
    const float *src = b->B + (size_t)(j0 + t) * ldb + p0;
#if CL_CPU_X86
    if (ar->avx_pack && nr % 8 == 0) {
      pack_cols_avx(src, ldb, kc, n, nr, dst);
      continue;
    }
#endif
    for (int j = 0; j < n; j++)
      for (int p = 0; p < kc; p++) dst[(size_t)p * nr + j] = src[(size_t)j * ldb + p];
  }
}

/* ---- the blocked driver -------------------------------------------------- */

typedef struct gemm_blocks {
  int kc, mc, nc;            /* block lengths */
  size_t a_floats, b_floats; /* pack buffer sizes, each a multiple of 16 floats */
} gemm_blocks;

static gemm_blocks blocks_of(const gemm_arch *ar, int M, int N, int K) {
  gemm_blocks bl;
  bl.kc = block_len(K, GEMM_KC, 1);
  bl.mc = block_len(M, GEMM_MC, ar->mr);
  bl.nc = block_len(N, GEMM_NC, ar->nr);
  /* 16 floats = 64 bytes keep the B buffer aligned after the A buffer. */
  bl.a_floats = (size_t)round_up(round_up(bl.mc, ar->mr) * bl.kc, 16);
  bl.b_floats = (size_t)round_up(round_up(bl.nc, ar->nr) * bl.kc, 16);
  return bl;
}

/* Where the micro-kernels read a block's A (or B): the slivers before row
 * (column) full at at + i * next, their k steps step floats apart; the
 * rest (a last, short sliver) packed at tail, its k steps MR (NR) apart. */
typedef struct sliver_view {
  const float *at, *tail;
  size_t next;
  int step, full;
} sliver_view;

/* The sliver from row (column) i; *step: its k-step stride. packed: MR or NR. */
static const float *sliver_of(const sliver_view *v, int i, int packed, int *step) {
  *step = i < v->full ? v->step : packed;
  return i < v->full ? v->at + (size_t)i * v->next : v->tail;
}

/* The most bytes of a B sliver (nr floats a k step) that a tile with its
 * row tiles outer keeps in L1 across them anyway: a third of a 48 KiB L1.
 * 8 x 48's at K 64 (12 KiB), read in place instead of packed, ran the
 * tutorial's Winograd forward products (72 x 240 x 64) 1.11-1.25x as fast
 * on an Intel Xeon (doc/speed.md). */
#define JR_B_BYTES ((size_t)16 << 10)

/* Whether a block of depth kc runs BLIS's loop order (one B sliver in L1
 * across the row tiles): the tile's own order, or a B sliver that short. */
static int jr_outer(const gemm_arch *ar, int kc) {
  return ar->jr_outer || (size_t)ar->nr * kc * sizeof(float) <= JR_B_BYTES;
}

static void macro_kernel(const gemm_arch *ar, int mc, int nc, int kc, const sliver_view *av,
                         const sliver_view *bv, float *c, int ldc, float alpha, float beta) {
  int as, bs;
  if (jr_outer(ar, kc)) {
    for (int jr = 0; jr < nc; jr += ar->nr) {
      const float *b = sliver_of(bv, jr, ar->nr, &bs);
      for (int ir = 0; ir < mc; ir += ar->mr) {
        const float *a = sliver_of(av, ir, ar->mr, &as);
        ar->ukr(kc, a, as, b, bs, c + (size_t)ir * ldc + jr, ldc, alpha, beta,
                imin(ar->mr, mc - ir), imin(ar->nr, nc - jr));
      }
    }
    return;
  }
  for (int ir = 0; ir < mc; ir += ar->mr) {
    const float *a = sliver_of(av, ir, ar->mr, &as);
    for (int jr = 0; jr < nc; jr += ar->nr) {
      const float *b = sliver_of(bv, jr, ar->nr, &bs);
      ar->ukr(kc, a, as, b, bs, c + (size_t)ir * ldc + jr, ldc, alpha, beta,
              imin(ar->mr, mc - ir), imin(ar->nr, nc - jr));
    }
  }
}

/* C = beta * C, for the degenerate products (K == 0 or alpha == 0). */
static void scale_c(int M, int N, float beta, float *C, int ldc) {
  for (int i = 0; i < M; i++) {
    float *cr = C + (size_t)i * ldc;
    if (beta == 0.0f)
      memset(cr, 0, sizeof(float) * N);
    else
      for (int j = 0; j < N; j++) cr[j] *= beta;
  }
}

/* Where A's block (ic, pc) is packed: into the scratch when A is packed
 * per call, or in a whole packed A (apack) laid out block by block, K slice
 * pc at pc round_up(M, mr) floats and its row block ic at ic kc from there. */
typedef struct gemm_asrc {
  int trans, lda;
  const float *A;
  const float *packed; /* the whole A, packed; NULL: pack into scratch */
} gemm_asrc;

static sliver_view a_block(const gemm_arch *ar, const gemm_asrc *a, int M, int ic, int pc,
                           int mc, int kc, float *scratch) {
  sliver_view v = {scratch, scratch, (size_t)kc, ar->mr, mc};
  if (a->packed) {
    v.at = a->packed + (size_t)pc * round_up(M, ar->mr) + (size_t)ic * kc;
    return v;
  }
  if (a->trans) {
    /* op(A)'s rows are A's columns: each k step of a sliver is MR floats
     * in a row of A already, so the kernels read them there; only a
     * sliver short of MR rows (past M) is packed, padded with zeros. */
    v.at = a->A + (size_t)pc * a->lda + ic, v.next = 1, v.step = a->lda;
    v.full = mc / ar->mr * ar->mr;
    if (v.full < mc) pack_a(ar, 1, a->A, a->lda, ic + v.full, pc, mc - v.full, kc, scratch);
    return v;
  }
  pack_a(ar, a->trans, a->A, a->lda, ic, pc, mc, kc, scratch);
  return v;
}

/* Nonzero when the tile reads a row-major op(B) where it lies: only when
 * one B sliver stays in L1 across the row tiles (jr_outer), where its
 * strided rows are fetched once a block. With the row tiles outer, each A
 * sliver streams all the block's B slivers again, and from strided rows
 * that cost: AVX2 at rows 4 KiB apart (96 x 1024 x 256) 86-88 GFLOP/s
 * packed, 65-66 in place; the portable kernel (192 x 256 x 48) 15.4-15.7
 * and 9.8-10.0. AVX-512 in place, 16 x 1024 x 192: 115 -> 169-172
 * (doc/speed.md). */
static int b_inplace(const gemm_arch *ar, const gemm_bsrc *b, int kc) {
  return jr_outer(ar, kc) && !b->trans && !b->view;
}

/* Where B's block (pc, jc) is read: a row-major op(B)'s whole slivers in
 * place (each k step of one is NR floats of a row already), only a short
 * last one packed, padded with zeros; any other B packed into scratch. */
static sliver_view b_block(const gemm_arch *ar, const gemm_bsrc *b, int pc, int jc, int kc,
                           int nc, float *scratch) {
  sliver_view v = {scratch, scratch, (size_t)kc, ar->nr, nc};
  if (!b_inplace(ar, b, kc)) {
    pack_b(ar, b, pc, jc, kc, nc, scratch);
    return v;
  }
  v.at = b->B + (size_t)pc * b->ldb + jc, v.next = 1, v.step = b->ldb;
  v.full = nc / ar->nr * ar->nr;
  if (v.full < nc) pack_b(ar, b, pc, jc + v.full, kc, nc - v.full, scratch);
  return v;
}

static void gemm_internal(const gemm_arch *ar, const gemm_asrc *A, const gemm_bsrc *B, int M,
                          int N, int K, float alpha, float beta, float *C, int ldc,
                          float *scratch) {
  gemm_blocks bl = blocks_of(ar, M, N, K);
  float *pa = scratch, *pb = scratch + bl.a_floats;
  for (int jc = 0; jc < N; jc += bl.nc) {
    int nc = imin(bl.nc, N - jc);
    for (int pc = 0; pc < K; pc += bl.kc) {
      int kc = imin(bl.kc, K - pc);
      /* Later K slices add to what the first one wrote. */
      float bta = pc == 0 ? beta : 1.0f;
      sliver_view b = b_block(ar, B, pc, jc, kc, nc, pb);
      for (int ic = 0; ic < M; ic += bl.mc) {
        int mc = imin(bl.mc, M - ic);
        sliver_view a = a_block(ar, A, M, ic, pc, mc, kc, pa);
        macro_kernel(ar, mc, nc, kc, &a, &b, C + (size_t)ic * ldc + jc, ldc, alpha, bta);
      }
    }
  }
}

/* All of A packed into dst in a_block's layout. */
static void pack_a_whole(const gemm_arch *ar, const gemm_asrc *a, int M, int K, float *dst) {
  gemm_blocks bl = blocks_of(ar, M, 1, K);
  for (int pc = 0; pc < K; pc += bl.kc) {
    int kc = imin(bl.kc, K - pc);
    for (int ic = 0; ic < M; ic += bl.mc)
      pack_a(ar, a->trans, a->A, a->lda, ic, pc, imin(bl.mc, M - ic), kc,
             dst + (size_t)pc * round_up(M, ar->mr) + (size_t)ic * kc);
  }
}

/* gemm_internal for an im2col view with a view kernel: only A is packed,
 * in the same blocks, and each tile's K slices are summed in the same order,
 * so C gets the floats the packed tile gives it. The row tiles run inner:
 * one A sliver and the image rows of a block's taps both stay in L1. */
enum { VIEW_SEG = 16, VIEW_SEGS_MAX = 4 }; /* a view kernel's vectors: 16 columns each */

static int view_inplace(const gemm_arch *ar, const gemm_bsrc *b) {
  return ar->vukr && b->view && !b->trans && b->view->W % VIEW_SEG == 0;
}

static void gemm_view_inplace(const gemm_arch *ar, const gemm_asrc *A, const cl_cpu_im2col_view *v,
                              int M, int N, int K, float alpha, float beta, float *C, int ldc,
                              float *scratch) {
  gemm_blocks bl = blocks_of(ar, M, N, K);
  for (int pc = 0; pc < K; pc += bl.kc) {
    int kc = imin(bl.kc, K - pc);
    float bta = pc == 0 ? beta : 1.0f;
    for (int ic = 0; ic < M; ic += bl.mc) {
      int mc = imin(bl.mc, M - ic);
      sliver_view a = a_block(ar, A, M, ic, pc, mc, kc, scratch);
      for (int jr = 0; jr < N; jr += ar->nr) {
        ptrdiff_t seg[VIEW_SEGS_MAX];
        for (int h = 0; h < ar->nr / VIEW_SEG; h++) {
          int q = jr + VIEW_SEG * h < N ? jr + VIEW_SEG * h : jr; /* past N: masked off, any row */
          seg[h] = (ptrdiff_t)(q / v->W) * v->Wp + q % v->W;
        }
        for (int ir = 0; ir < mc; ir += ar->mr) {
          int as;
          const float *ai = sliver_of(&a, ir, ar->mr, &as);
          ar->vukr(kc, ai, as, v->xp, v->boff + pc, seg, C + (size_t)(ic + ir) * ldc + jr, ldc,
                   alpha, bta, imin(ar->mr, mc - ir), imin(ar->nr, N - jr));
        }
      }
    }
  }
}

/* ---- unpacked kernels for convolutions with few channels; bias sums, stores */

#define CL_SIMD 1
#include "cpu_simd.h"
#define VSUM(v) (v)
#define ROWS_MR 4
#define ROWS_NV 4
#define DOT_MR 2
#define DOT_NR 4
#include "cpu_direct_tmpl.h" /* sgemm_rows_generic, sgemm_dot_generic */

#if CL_CPU_X86
CL_TARGET_AVX2 static inline float hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_shuffle_ps(s, s, 1)));
}

/* 16 ymm registers: 12 accumulators plus operands. */
#define CL_SIMD 256
#include "cpu_simd.h"
#define VSUM(v) hsum_avx2(v)
#define ROWS_MR 4
#define ROWS_NV 3
#define DOT_MR 3
#define DOT_NR 4
#include "cpu_direct_tmpl.h" /* sgemm_rows_avx2, sgemm_dot_avx2 */

/* 32 zmm registers: 24 accumulators plus operands. */
#define CL_SIMD 512
#include "cpu_simd.h"
#define VSUM(v) _mm512_reduce_add_ps(v)
#define ROWS_MR 4
#define ROWS_NV 6
#define DOT_MR 4
#define DOT_NR 6
#include "cpu_direct_tmpl.h" /* sgemm_rows_avx512, sgemm_dot_avx512 */
#endif /* CL_CPU_X86 */

void cl_cpu_sgemm_rows(cl_cpu_gemm_kind kind, int M, int N, int K, const float *A, int lda,
                       const float *B, const ptrdiff_t *boff, float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  switch (cl_cpu_gemm_internal_of(kind)) {
#if CL_CPU_X86
    case CL_CPU_GEMM_AVX512: sgemm_rows_avx512(M, N, K, A, lda, B, boff, C, ldc); return;
    case CL_CPU_GEMM_AVX2: sgemm_rows_avx2(M, N, K, A, lda, B, boff, C, ldc); return;
#endif
    default: sgemm_rows_generic(M, N, K, A, lda, B, boff, C, ldc); return;
  }
}

void cl_cpu_sgemm_dot(cl_cpu_gemm_kind kind, int M, int N, int K, const float *A, int lda,
                      const float *B, const ptrdiff_t *boff, float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  switch (cl_cpu_gemm_internal_of(kind)) {
#if CL_CPU_X86
    case CL_CPU_GEMM_AVX512: sgemm_dot_avx512(M, N, K, A, lda, B, boff, C, ldc); return;
    case CL_CPU_GEMM_AVX2: sgemm_dot_avx2(M, N, K, A, lda, B, boff, C, ldc); return;
#endif
    default: sgemm_dot_generic(M, N, K, A, lda, B, boff, C, ldc); return;
  }
}

void cl_cpu_row_sums(cl_cpu_gemm_kind kind, int M, int K, const float *A, size_t lda, double *s) {
  if (M <= 0) return;
  switch (cl_cpu_gemm_internal_of(kind)) {
#if CL_CPU_X86
    case CL_CPU_GEMM_AVX512: row_sums_avx512(M, K, A, lda, s); return;
    case CL_CPU_GEMM_AVX2: row_sums_avx2(M, K, A, lda, s); return;
#endif
    default: row_sums_generic(M, K, A, lda, s); return;
  }
}

void cl_cpu_rows_plus(cl_cpu_gemm_kind kind, int R, int n, float *d, size_t ldd, const float *s,
                      size_t lds, float b, int acc) {
  switch (cl_cpu_gemm_internal_of(kind)) {
#if CL_CPU_X86
    case CL_CPU_GEMM_AVX512: rows_plus_avx512(R, n, d, ldd, s, lds, b, acc); return;
    case CL_CPU_GEMM_AVX2: rows_plus_avx2(R, n, d, ldd, s, lds, b, acc); return;
#endif
    default: rows_plus_generic(R, n, d, ldd, s, lds, b, acc); return;
  }
}

/* ---- BLAS ----------------------------------------------------------------- */

#ifdef CL_HAVE_BLAS
/* Fortran sgemm_. gfortran appends one hidden length argument per character
 * argument (size_t since gcc 8); passing them avoids the stack mismatch that
 * R's FCONE macro exists for. R's headers declare no single-precision BLAS. */
extern void sgemm_(const char *transa, const char *transb, const int *m, const int *n, const int *k,
                   const float *alpha, const float *a, const int *lda, const float *b,
                   const int *ldb, const float *beta, float *c, const int *ldc, size_t transa_len,
                   size_t transb_len);

/* Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
 * operands and keep the transpose flags. */
static void gemm_blas(int transA, int transB, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  const char ta = transA ? 'T' : 'N', tb = transB ? 'T' : 'N';
  sgemm_(&tb, &ta, &N, &M, &K, &alpha, B, &ldb, A, &lda, &beta, C, &ldc, 1, 1);
}
#endif

/* ---- choosing the register tile per shape, by timing ----------------------
 *
 * oneDNN and cuDNN pick a kernel per shape by measuring; so does this. The
 * first calls of each shape class (M, N, K, transposes, im2col view) in a
 * process alternate between the kind's tiles, TUNE_ROUNDS calls each, and
 * the tile of the shortest call then runs every later call of the class.
 * The timed calls are the real ones (no extra work), clocked in the calling
 * thread's CPU seconds so that a neighbour holding the core is not charged.
 * The choice cannot change a result: every tile sums each element of C in
 * one order (see the micro-kernels), and the scratch is sized for the
 * largest tile. CONVLSTM_GEMM_TILE=<name> (cl_cpu_gemm_tile_name) forces a
 * tile. Products under TUNE_MIN_FLOP, too short to time, take the tile that
 * pads C least (tile_least_padding); classes past the table's size run the
 * first tile. */

enum { TUNE_ROUNDS = 3, TUNE_SLOTS = 256 };
#define TUNE_MIN_FLOP 2e6

enum { TUNE_MAX_TILES = 4 };

typedef struct tune_slot {
  int used, M, N, K, flags; /* flags: transA | transB << 1 | view << 2 | in place << 3 */
  int calls, choice;        /* choice: -1 until the timing rounds are done */
  double best[TUNE_MAX_TILES];
} tune_slot;

static tune_slot tune_table[TUNE_SLOTS]; /* only inside the critical section */

static int shape_flags(int transA, int transB, int view, int inplace) {
  return (transA != 0) | (transB != 0) << 1 | (view != 0) << 2 | (inplace != 0) << 3;
}

static int tiles_of(cl_cpu_gemm_kind kind, const gemm_arch **tiles) {
#if CL_CPU_X86
  if (kind == CL_CPU_GEMM_AVX512) {
    *tiles = ARCH_AVX512;
    return (int)(sizeof ARCH_AVX512 / sizeof ARCH_AVX512[0]);
  }
#endif
  *tiles = arch_of(kind);
  return 1;
}

int cl_cpu_gemm_tiles(cl_cpu_gemm_kind kind) {
  const gemm_arch *t;
  return kind == CL_CPU_GEMM_BLAS ? 0 : tiles_of(kind, &t);
}

const char *cl_cpu_gemm_tile_name(cl_cpu_gemm_kind kind, int tile) {
  const gemm_arch *t;
  int n = tiles_of(kind, &t);
  return tile >= 0 && tile < n ? t[tile].name : "?";
}

/* How many of the n tiles may run a product: the view tiles (last) only
 * when they can read its B in place. */
static int eligible_of(const gemm_arch *tiles, int n, int inplace) {
  while (n > 1 && tiles[n - 1].vukr && !inplace) n--;
  return n;
}

static int tiles_for(const gemm_arch *tiles, int n, const gemm_bsrc *b) {
  return eligible_of(tiles, n, view_inplace(&tiles[n - 1], b));
}

/* The tile CONVLSTM_GEMM_TILE names among n, or -1. */
static int tile_forced(const gemm_arch *tiles, int n) {
  const char *e = getenv("CONVLSTM_GEMM_TILE");
  for (int i = 0; e && i < n; i++)
    if (strcmp(e, tiles[i].name) == 0) return i;
  return -1;
}

/* The class's slot (open addressing), or NULL when the table is full. */
static tune_slot *tune_find(int M, int N, int K, int flags) {
  unsigned h = ((unsigned)M * 2654435761u) ^ ((unsigned)N * 40503u) ^ ((unsigned)K * 97u) ^
               (unsigned)flags;
  for (int probe = 0; probe < TUNE_SLOTS; probe++) {
    tune_slot *t = &tune_table[(h + (unsigned)probe) % TUNE_SLOTS];
    if (!t->used) {
      *t = (tune_slot){1, M, N, K, flags, 0, -1, {1e30, 1e30, 1e30, 1e30}};
      return t;
    }
    if (t->M == M && t->N == N && t->K == K && t->flags == flags) return t;
  }
  return NULL;
}

/* The elements of C that a tile's tiles cover M x N with, weighed by its
 * area_pct: what tile_least_padding and tile_panel compare. */
static double weighed_area(const gemm_arch *t, int M, int N) {
  return (double)round_up(M, t->mr) * round_up(N, t->nr) * t->area_pct;
}

/* Of the first `eligible` tiles, the one whose tiles of C cover M x N with
 * the fewest elements, each tile's weighed by its area_pct (the earliest
 * of equals): a product too short to time runs its padding at the full
 * cost of the kernel, and the Winograd GEMMs of a 16x16 map's 64 tiles
 * waste a third of an 8 x 48 tile's columns where 12 x 32 wastes none. */
static int tile_least_padding(const gemm_arch *tiles, int eligible, int M, int N) {
  int best = 0;
  double least = 0;
  for (int i = 0; i < eligible; i++) {
    const double area = weighed_area(&tiles[i], M, N);
    if (i == 0 || area < least) best = i, least = area;
  }
  return best;
}

/* The tile a product takes without timing, or -1 when it is timed: both
 * the calls (tile_pick) and the question (cl_cpu_gemm_tile_chosen) ask
 * here. */
static int tile_untimed(const gemm_arch *tiles, int eligible, int M, int N, int K) {
  if (eligible == 1) return 0;
  if (2.0 * M * N * K < TUNE_MIN_FLOP) return tile_least_padding(tiles, eligible, M, N);
  return -1;
}

/* Which tile runs this call, of the first `eligible` of n; *timed: whether
 * its time is to be recorded. A forced tile runs whether eligible or not. */
static int tile_pick(int n, int eligible, const gemm_arch *tiles, int M, int N, int K, int flags,
                     tune_slot **timed) {
  *timed = NULL;
  if (n == 1) return 0;
  int forced = tile_forced(tiles, n);
  if (forced >= 0) return forced;
  int pick = tile_untimed(tiles, eligible, M, N, K);
  if (pick >= 0) return pick;
  pick = 0;
#ifdef _OPENMP
#pragma omp critical(cl_gemm_tune)
#endif
  {
    tune_slot *t = tune_find(M, N, K, flags);
    if (t && t->choice >= 0) {
      pick = t->choice;
    } else if (t) {
      pick = t->calls++ % eligible; /* in turn: a slow spell of the machine hits each */
      *timed = t;
    }
  }
  return pick;
}

static void tile_record(tune_slot *t, int eligible, int tile, double seconds) {
#ifdef _OPENMP
#pragma omp critical(cl_gemm_tune)
#endif
  {
    if (seconds < t->best[tile]) t->best[tile] = seconds;
    int done = t->choice < 0 && t->calls >= eligible * TUNE_ROUNDS, fastest = 0;
    for (int i = 0; done && i < eligible; i++) {
      done = t->best[i] < 1e30;
      if (t->best[i] < t->best[fastest]) fastest = i;
    }
    if (done) t->choice = fastest;
  }
}

int cl_cpu_gemm_tile_chosen(cl_cpu_gemm_kind kind, int transA, int transB, int view, int M, int N,
                            int K) {
  const gemm_arch *tiles;
  int n = kind == CL_CPU_GEMM_BLAS ? 1 : tiles_of(kind, &tiles);
  if (n == 1) return 0;
  int choice = tile_untimed(tiles, eligible_of(tiles, n, view == 2), M, N, K);
  if (choice >= 0) return choice;
  int flags = shape_flags(transA, transB, view, view == 2);
#ifdef _OPENMP
#pragma omp critical(cl_gemm_tune)
#endif
  {
    tune_slot *t = tune_find(M, N, K, flags);
    if (t) choice = t->choice;
  }
  return choice;
}

/* gemm_internal (or its in-place twin) with the tile tile_pick chooses,
 * timed while tuning. ap: NULL, or A kept packed across calls (repacked
 * when A or the tile differ from what it holds; the time counts). */
static void gemm_tuned(cl_cpu_gemm_kind kind, int transA, const gemm_bsrc *B, int M, int N, int K,
                       float alpha, const float *A, int lda, float beta, float *C, int ldc,
                       float *scratch, cl_cpu_apack *ap) {
  const gemm_arch *tiles;
  int n = tiles_of(kind, &tiles), eligible = tiles_for(tiles, n, B);
  tune_slot *timed;
  int flags = shape_flags(transA, B->trans, B->view != NULL, tiles[n - 1].vukr && eligible == n);
  int tile = tile_pick(n, eligible, tiles, M, N, K, flags, &timed);
  const gemm_arch *ar = &tiles[tile];
  double t0 = timed ? cl_cpu_thread_seconds() : 0.0;
  gemm_asrc a = {transA, lda, A, NULL};
  if (ap) {
    if (ap->of != A || ap->tile != tile) {
      pack_a_whole(ar, &a, M, K, ap->buf);
      ap->of = A, ap->tile = tile;
    }
    a.packed = ap->buf;
  }
  if (view_inplace(ar, B) && !transA)
    gemm_view_inplace(ar, &a, B->view, M, N, K, alpha, beta, C, ldc, scratch);
  else
    gemm_internal(ar, &a, B, M, N, K, alpha, beta, C, ldc, scratch);
  if (timed) tile_record(timed, eligible, tile, cl_cpu_thread_seconds() - t0);
}

int cl_cpu_sgemm_inplace_of(cl_cpu_gemm_kind kind, int M, int W) {
  const gemm_arch *tiles;
  int n = tiles_of(cl_cpu_gemm_internal_of(kind), &tiles);
  cl_cpu_im2col_view v = {NULL, NULL, W, W};
  gemm_bsrc b = {0, NULL, 0, &v};
  /* the rows fill 4/5 or more of their whole tiles (16 rows fill 2/3 of 24) */
  return view_inplace(&tiles[n - 1], &b) && 5 * M >= 4 * round_up(M, tiles[n - 1].mr);
}

size_t cl_cpu_sgemm_apack_bytes(cl_cpu_gemm_kind kind, int M, int K) {
  kind = cl_cpu_gemm_internal_of(kind);
  if (M <= 0 || K <= 0) return 0;
  const gemm_arch *tiles;
  size_t most = 0;
  for (int i = 0, n = tiles_of(kind, &tiles); i < n; i++) {
    size_t b = sizeof(float) * (size_t)round_up(M, tiles[i].mr) * (size_t)K;
    if (b > most) most = b;
  }
  return most;
}

size_t cl_cpu_sgemm_scratch_bytes(cl_cpu_gemm_kind kind, int M, int N, int K) {
  if (kind == CL_CPU_GEMM_BLAS || M <= 0 || N <= 0 || K <= 0) return 0;
  const gemm_arch *tiles;
  size_t most = 0;
  for (int i = 0, n = tiles_of(kind, &tiles); i < n; i++) {
    gemm_blocks bl = blocks_of(&tiles[i], M, N, K);
    size_t b = sizeof(float) * (bl.a_floats + bl.b_floats);
    if (b > most) most = b;
  }
  return most;
}

int cl_cpu_sgemm(cl_cpu_gemm_kind kind, int transA, int transB, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                 void *scratch) {
  if (M <= 0 || N <= 0) return 0;
  if (K <= 0 || alpha == 0.0f) {
    scale_c(M, N, beta, C, ldc);
    return 0;
  }
#ifdef CL_HAVE_BLAS
  if (kind == CL_CPU_GEMM_BLAS) {
    gemm_blas(transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return 0;
  }
#endif
  void *owned = NULL;
  if (!scratch) {
    /* malloc plus manual alignment: portable where posix_memalign is not. */
    owned = malloc(cl_cpu_sgemm_scratch_bytes(kind, M, N, K) + 63);
    if (!owned) return -1;
    scratch = (void *)(((uintptr_t)owned + 63) & ~(uintptr_t)63);
  }
  gemm_bsrc b = {transB, B, ldb, NULL};
  gemm_tuned(kind, transA, &b, M, N, K, alpha, A, lda, beta, C, ldc, (float *)scratch, NULL);
  free(owned);
  return 0;
}

/* The most bytes of B sliver tile_panel lets a tile read per product: two
 * thirds of a 48 KiB L1 (12 x 32's at the deepest K a sliver holds, 256). */
#define PANEL_B_BYTES ((size_t)32 << 10)

/* The first tile, of those a matrix B may run on, whose rows are P; -1
 * when none. */
static int panel_tile(const gemm_arch *tiles, int n, int P) {
  for (int i = 0, e = eligible_of(tiles, n, 0); i < e; i++)
    if (tiles[i].mr == P) return i;
  return -1;
}

/* The tile whose slivers hold an A kept for many products (one layout
 * forgoes the timing of long products, so a rule stands in for it): of
 * the tiles whose B sliver, nr floats a k step, fills at most two thirds
 * of a 48 KiB L1 (it stays there across the row tiles, beside the A
 * sliver), the one whose tiles of C cover M x N with the fewest elements,
 * each weighed by its area_pct as tile_least_padding weighs them (of
 * equals, the narrower). Measured on an Intel Xeon, one thread, against A
 * transposed and the tile timed (doc/speed.md): 1.02-1.18x as fast on the
 * tutorial's and the plain stack's long Winograd products; the plain
 * stack's first input half backward data (16 x 160 x 192), whose 8 x 48
 * sliver (36 KiB) padding alone chose, 1.35-1.5x as fast on 16 x 16; at
 * 32 and 64 x 256, where 8 x 48 and 12 x 32 pad alike, 12 x 32 1.1-1.2x as
 * fast; over a grid of 48 long products, 0.90-1.00 of the best sliver's
 * rate (mean 0.986). */
static int tile_panel(const gemm_arch *tiles, int eligible, int M, int N, int K) {
  int best = 0;
  double least = -1;
  for (int i = 0; i < eligible; i++) {
    if ((size_t)tiles[i].nr * K * sizeof(float) > PANEL_B_BYTES) continue;
    const double area = weighed_area(&tiles[i], M, N);
    if (least < 0 || area < least || (area == least && tiles[i].nr < tiles[best].nr))
      best = i, least = area;
  }
  return best;
}

int cl_cpu_sgemm_panel_rows(cl_cpu_gemm_kind kind, int M, int N, int K) {
  if (kind == CL_CPU_GEMM_BLAS || M <= 0 || N <= 0 || K <= 0 || K > GEMM_KC) return 0;
  const gemm_arch *tiles;
  const int n = tiles_of(kind, &tiles), eligible = eligible_of(tiles, n, 0);
  return tiles[tile_panel(tiles, eligible, M, N, K)].mr;
}

int cl_cpu_sgemm_panels(cl_cpu_gemm_kind kind, int P, int M, int N, int K, float alpha,
                        const float *A, const float *B, int ldb, float beta, float *C, int ldc,
                        void *scratch) {
  const gemm_arch *tiles;
  const int tile = kind == CL_CPU_GEMM_BLAS ? -1 : panel_tile(tiles, tiles_of(kind, &tiles), P);
  if (tile < 0 || K > GEMM_KC || !scratch) return -1;
  if (M <= 0 || N <= 0) return 0;
  if (K <= 0 || alpha == 0.0f) {
    scale_c(M, N, beta, C, ldc);
    return 0;
  }
  /* a_block's layout of a whole packed A, for one K slice: its slivers */
  const gemm_asrc a = {1, 0, A, A};
  const gemm_bsrc b = {0, B, ldb, NULL};
  gemm_internal(&tiles[tile], &a, &b, M, N, K, alpha, beta, C, ldc, (float *)scratch);
  return 0;
}

int cl_cpu_sgemm_im2col(cl_cpu_gemm_kind kind, int transB, int M, int N, int K, float alpha,
                        const float *A, int lda, const cl_cpu_im2col_view *B, float beta, float *C,
                        int ldc, void *scratch, cl_cpu_apack *ap) {
  if (M <= 0 || N <= 0) return 0;
  if (K <= 0 || alpha == 0.0f) {
    scale_c(M, N, beta, C, ldc);
    return 0;
  }
  kind = cl_cpu_gemm_internal_of(kind);
  void *owned = NULL;
  if (!scratch) {
    owned = malloc(cl_cpu_sgemm_scratch_bytes(kind, M, N, K) + 63);
    if (!owned) return -1;
    scratch = (void *)(((uintptr_t)owned + 63) & ~(uintptr_t)63);
  }
  gemm_bsrc b = {transB, NULL, 0, B};
  gemm_tuned(kind, 0, &b, M, N, K, alpha, A, lda, beta, C, ldc, (float *)scratch, ap);
  free(owned);
  return 0;
}

/* ---- threaded entry point ------------------------------------------------ */

/* How n_threads threads share one product: `parts` slices of `len` rows
 * (split_m) or columns of C, each a whole number of micro-tiles. */
typedef struct gemm_split {
  int split_m, len, parts;
} gemm_split;

static gemm_split split_of(cl_cpu_gemm_kind kind, int n_threads, int M, int N) {
  const gemm_arch *ar = arch_of(kind);
  gemm_split s;
  if (n_threads < 1) n_threads = 1;
  /* Split the dimension with more micro-tiles: less rounding waste. */
  s.split_m = M / ar->mr > N / ar->nr;
  int dim = s.split_m ? M : N, align = s.split_m ? ar->mr : ar->nr;
  s.len = round_up((dim + n_threads - 1) / n_threads, align);
  if (s.len < 1) s.len = 1;
  s.parts = (dim + s.len - 1) / s.len;
  return s;
}

size_t cl_cpu_sgemm_threaded_scratch_bytes(cl_cpu_gemm_kind kind, int n_threads, int M, int N,
                                           int K) {
  if (M <= 0 || N <= 0) return 0;
  gemm_split s = split_of(kind, n_threads, M, N);
  size_t one = s.split_m ? cl_cpu_sgemm_scratch_bytes(kind, imin(s.len, M), N, K)
                         : cl_cpu_sgemm_scratch_bytes(kind, M, imin(s.len, N), K);
  return one * (size_t)s.parts;
}

static void sgemm_part(cl_cpu_gemm_kind kind, const gemm_split *s, int part, int transA, int transB,
                       int M, int N, int K, float alpha, const float *A, int lda, const float *B,
                       int ldb, float beta, float *C, int ldc, void *scratch) {
  int o = part * s->len;
  if (s->split_m) {
    const float *Ap = transA ? A + o : A + (size_t)o * lda;
    cl_cpu_sgemm(kind, transA, transB, imin(s->len, M - o), N, K, alpha, Ap, lda, B, ldb, beta,
                 C + (size_t)o * ldc, ldc, scratch);
  } else {
    const float *Bp = transB ? B + (size_t)o * ldb : B + o;
    cl_cpu_sgemm(kind, transA, transB, M, imin(s->len, N - o), K, alpha, A, lda, Bp, ldb, beta,
                 C + o, ldc, scratch);
  }
}

int cl_cpu_sgemm_threaded(cl_cpu_gemm_kind kind, int n_threads, int transA, int transB, int M,
                          int N, int K, float alpha, const float *A, int lda, const float *B,
                          int ldb, float beta, float *C, int ldc, void *scratch) {
  if (M <= 0 || N <= 0) return 0;
  void *owned = NULL;
  size_t total = cl_cpu_sgemm_threaded_scratch_bytes(kind, n_threads, M, N, K);
  if (!scratch && total > 0) {
    owned = malloc(total + 63);
    if (!owned) return -1;
    scratch = (void *)(((uintptr_t)owned + 63) & ~(uintptr_t)63);
  }
  gemm_split s = split_of(kind, n_threads, M, N);
  size_t one = total / (size_t)s.parts;
  /* The split (and the scratch laid out for it) stays; in a forked child one
   * thread runs every slice. */
  const int team = cl_cpu_threads(s.parts);
  (void)team;
#ifdef _OPENMP
  /* Nested inside another parallel region the slices run on this thread. */
#pragma omp parallel for num_threads(team) schedule(static, 1) if (team > 1 && !omp_in_parallel())
#endif
  for (int part = 0; part < s.parts; part++)
    sgemm_part(kind, &s, part, transA, transB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc,
               scratch ? (char *)scratch + one * (size_t)part : NULL);
  free(owned);
  return 0;
}

/* ---- choosing an implementation ------------------------------------------ */

/* CONVLSTM_GEMM=internal|blas forces the choice; =generic|avx2|avx512 force
 * one internal kernel (tests, benchmarks), when the CPU supports it. */
static int kind_from_env(cl_cpu_gemm_kind *out) {
  const char *e = getenv("CONVLSTM_GEMM");
  if (!e) return 0;
  static const struct {
    const char *name;
    cl_cpu_gemm_kind kind;
  } names[] = {{"blas", CL_CPU_GEMM_BLAS},
               {"generic", CL_CPU_GEMM_GENERIC},
               {"avx2", CL_CPU_GEMM_AVX2},
               {"avx512", CL_CPU_GEMM_AVX512}};
  if (strcmp(e, "internal") == 0) {
    *out = cl_cpu_gemm_best_internal();
    return 1;
  }
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(e, names[i].name) == 0 && cl_cpu_gemm_available(names[i].kind)) {
      *out = names[i].kind;
      return 1;
    }
  return 0;
}

/* A fixed rule, not a race: the best internal kernel the CPU supports
 * (a function of the machine alone), BLAS only when forced. A timed choice
 * could differ between two runs of one script (other floats, other
 * workspace); and a threaded OpenBLAS, called from the convolutions'
 * OpenMP threads, mallocs 512 KiB buffers inside every step that no plan
 * sees (doc/memory.md has the measurements behind the rule). */
cl_cpu_gemm_kind cl_cpu_gemm_choose(int n_threads) {
  cl_cpu_gemm_kind kind = cl_cpu_gemm_best_internal();
  (void)n_threads; /* the rule does not depend on it */
  kind_from_env(&kind);
  return kind;
}
