/*
 * cpu/cpu_wino_tmpl.h -- the loops of cpu_winograd.c's transforms, written
 * once in cpu_simd.h's vocabulary and included once per instruction set:
 *   wino_2d(d, ds, s, rs, ss, M, len):  d[i R + j] = sum over a, b < C of
 *     M[j][b] M[i][a] s[a][b] for the R x C matrix M (wino_side, its
 *     nonzero coefficients only; d[e] the plane d + e ds, s[a][b] the
 *     plane s + a rs + b ss): every transform (B^T d B, A^T m A, A dy
 *     A^T, G g G^T, G^T du G) over planes that hold one element of many
 *     tiles (or filter pairs) side by side, VW at a time along them. A
 *     vector's whole transform runs in registers and a 4 KiB table: one call
 *     a chunk, where a loop of one call per plane and stage cost a fifth of
 *     the transforms' time on the short planes of F(4x4, r) (T = 64).
 *   wino_gather(g, gs, s, ss, rr, rev, n):  a filter's pairs (rr taps each,
 *     ss floats apart) into rr planes of pairs side by side (G g G^T's
 *     input).
 *   wino_tiles(D, ds, P, Wp, n, m, th, tw):  D[(l n + j) ds + ty tw + tx]
 *     = P[(ty m + l) Wp + tx m + j]: the n x n input tiles of a padded image
 *     P, element by element into planes; P readable 32 floats past each
 *     row's tiles (the caller's slack). AVX-512 picks a row's tw elements of
 *     stride m with one permute where they lie within 32 floats.
 *   wino_chlast(d, pix, s, rs, g, W, sum):  up to 8 channels' rows of an
 *     image, channels last (backward filter's operands), with their sums.
 *
 * No include guard: included once per instruction set, between cpu_simd.h
 * and cpu_simd_end.h (which this includes).
 */
/* sum over l < M->nz[i] of M->c[i][l] x[M->at[i][l]]: row i of M times
 * the column x, the first product and then FMAs in column order */
TGT static inline V FN(wino_row)(const wino_side *M, int i, const V *x) {
  if (!M->nz[i]) return VZERO();
  V a = VMUL(VSET1(M->c[i][0]), x[M->at[i][0]]);
  for (int l = 1; l < M->nz[i]; l++) a = VFMA(VSET1(M->c[i][l]), x[M->at[i][l]], a);
  return a;
}

TGT static void FN(wino_2d)(float *d, size_t ds, const float *s, size_t rs, size_t ss,
                            const wino_side *M, size_t len) {
  const int R = M->rows, C = M->cols;
  size_t q = 0;
  for (; q + VW <= len; q += VW) {
    V t[WMAX][WMAX], x[WMAX]; /* t[i][b]: row i of M times column b of s */
    for (int b = 0; b < C; b++) {
      for (int a = 0; a < C; a++) x[a] = VLOADU(s + a * rs + b * ss + q);
      for (int i = 0; i < R; i++) t[i][b] = FN(wino_row)(M, i, x);
    }
    for (int i = 0; i < R; i++)
      for (int j = 0; j < R; j++) VSTOREU(d + (size_t)(i * R + j) * ds + q, FN(wino_row)(M, j, t[i]));
  }
  /* the last len - q < VW tiles through lane masks: the same operations
   * as a whole vector's, so a tile's bits do not depend on where the
   * chunk's end falls (thread count, chunk size); one tile at a time in
   * scalars had cost more than the vectors before it on the tutorial's 36
   * tiles an image */
  if (q < len) {
    const int n = (int)(len - q);
    V t[WMAX][WMAX], x[WMAX];
    for (int b = 0; b < C; b++) {
      for (int a = 0; a < C; a++) x[a] = VLOADN(s + a * rs + b * ss + q, n);
      for (int i = 0; i < R; i++) t[i][b] = FN(wino_row)(M, i, x);
    }
    for (int i = 0; i < R; i++)
      for (int j = 0; j < R; j++)
        VSTOREN(d + (size_t)(i * R + j) * ds + q, FN(wino_row)(M, j, t[i]), n);
  }
}

/* wino_row for a matrix known when compiling (a form's, at constant
 * indices once unrolled): its coefficients become constants and its zeros
 * vanish, the same operations in the same order, so the same bits
 * (tests/c/test_cpu_wino_fixed.c). */
TGT static inline __attribute__((always_inline)) V FN(wino_row_fixed)(const float *M, int si,
                                                                      int sj, int i, int C,
                                                                      const V *x) {
  V a = VZERO();
  int first = 1;
#pragma GCC unroll 8
  for (int l = 0; l < C; l++) {
    const float c = M[i * si + l * sj];
    if (c != 0.0f) a = first ? VMUL(VSET1(c), x[l]) : VFMA(VSET1(c), x[l], a), first = 0;
  }
  return a;
}

/* wino_2d for one form's matrix (M[i][j] = MAT[i STI + j STJ], R x C),
 * unrolled; the tail of len past the last whole vector goes to wino_2d. */
#define WINO_2D_FIXED(NAME, MAT, STI, STJ, R, C)                                                  \
  TGT static void FN(NAME)(float *d, size_t ds, const float *s, size_t rs, size_t ss,            \
                           const wino_side *S, size_t len) {                                      \
    size_t q = 0;                                                                                 \
    for (; q + VW <= len; q += VW) {                                                              \
      V t[R][C], x[C];                                                                            \
      _Pragma("GCC unroll 8") for (int b = 0; b < C; b++) {                                       \
        _Pragma("GCC unroll 8") for (int a = 0; a < C; a++) x[a] =                                \
            VLOADU(s + a * rs + b * ss + q);                                                      \
        _Pragma("GCC unroll 8") for (int i = 0; i < R; i++) t[i][b] =                             \
            FN(wino_row_fixed)(MAT, STI, STJ, i, C, x);                                           \
      }                                                                                           \
      _Pragma("GCC unroll 8") for (int i = 0; i < R; i++)                                         \
          _Pragma("GCC unroll 8") for (int j = 0; j < R; j++)                                     \
              VSTOREU(d + (size_t)(i * R + j) * ds + q,                                           \
                      FN(wino_row_fixed)(MAT, STI, STJ, j, C, t[i]));                             \
    }                                                                                             \
    if (q < len) FN(wino_2d)(d + q, ds, s + q, rs, ss, S, len - q);                               \
  }

/* The default rule's forms, F(4x4,3x3), F(4x4,5x5) and F(6x6,3x3), each
 * matrix as a transform uses it (wino_side's roles: B^T, A^T, A, G, G^T;
 * F(6x6,3x3)'s B^T is F(4x4,5x5)'s, the same points). */
WINO_2D_FIXED(wino_2d_43_bt, &FORMS[1].BT[0][0], WMAX, 1, 6, 6)
WINO_2D_FIXED(wino_2d_43_at, &FORMS[1].AT[0][0], WMAX, 1, 4, 6)
WINO_2D_FIXED(wino_2d_43_a, &FORMS[1].AT[0][0], 1, WMAX, 6, 4)
WINO_2D_FIXED(wino_2d_43_g, &FORMS[1].G[0][0], 5, 1, 6, 3)
WINO_2D_FIXED(wino_2d_43_gt, &FORMS[1].G[0][0], 1, 5, 3, 6)
WINO_2D_FIXED(wino_2d_45_bt, &FORMS[3].BT[0][0], WMAX, 1, 8, 8)
WINO_2D_FIXED(wino_2d_45_at, &FORMS[3].AT[0][0], WMAX, 1, 4, 8)
WINO_2D_FIXED(wino_2d_45_a, &FORMS[3].AT[0][0], 1, WMAX, 8, 4)
WINO_2D_FIXED(wino_2d_45_g, &FORMS[3].G[0][0], 5, 1, 8, 5)
WINO_2D_FIXED(wino_2d_45_gt, &FORMS[3].G[0][0], 1, 5, 5, 8)
WINO_2D_FIXED(wino_2d_63_at, &FORMS[4].AT[0][0], WMAX, 1, 6, 8)
WINO_2D_FIXED(wino_2d_63_a, &FORMS[4].AT[0][0], 1, WMAX, 8, 6)
WINO_2D_FIXED(wino_2d_63_g, &FORMS[4].G[0][0], 5, 1, 8, 3)
WINO_2D_FIXED(wino_2d_63_gt, &FORMS[4].G[0][0], 1, 5, 3, 8)
#undef WINO_2D_FIXED

/* g[e gs + i] = s[i ss + e] (rev: s[i ss + rr - 1 - e]) for i < n, e < rr:
 * n filter pairs of rr taps each, ss floats apart, into rr planes of
 * pairs side by side. VW pairs a gather each; the scalar loop that did it
 * tap by tap took as long as the transform it feeds. */
TGT static void FN(wino_gather)(float *g, size_t gs, const float *s, size_t ss, int rr, int rev,
                                size_t n) {
  size_t i = 0;
#if VW > 1
  /* lane offsets as 32-bit ints: a stride past that is gathered by the loop below */
  const int fits = ss <= INT_MAX / VW;
  const VI at = VSTRIDES((int)(fits ? ss : 0));
  for (; fits && i + VW <= n; i += VW)
    for (int e = 0; e < rr; e++)
      VSTOREU(g + e * gs + i, VGATHER(s + i * ss + (rev ? rr - 1 - e : e), at));
  /* a run shorter than a vector (U's slivers of 12 output channels, 16
   * lanes): masked, where the scalar loop took 2.2x the gather's time */
  if (fits && i < n) {
    const int left = (int)(n - i);
    for (int e = 0; e < rr; e++)
      VSTOREN(g + e * gs + i, VGATHERN(s + i * ss + (rev ? rr - 1 - e : e), at, left), left);
    i = n;
  }
#endif
  for (; i < n; i++)
    for (int e = 0; e < rr; e++) g[e * gs + i] = s[i * ss + (rev ? rr - 1 - e : e)];
}

#if CL_SIMD == 512
/* wino_tiles for maps four tiles of four wide (16 pixels with m = 4) and n
 * <= 8: a vector holds four tile rows' tiles, so each of the n^2 planes'
 * 16 values is built in registers and stored whole (with 4-lane stores,
 * these tiles cost 6 % of the plain stack's step). Lane 4 k + tx of plane
 * (l, j) is P[((ty0 + k) m + l) Wp + 4 tx + j]: the four rows' columns j,
 * j + 4, j + 8, j + 12, read from the row's first 16 floats (j < 4) or
 * from the 16 after its fourth (j >= 4). */
TGT static void FN(wino_tiles_4x4)(float *D, size_t ds, const float *P, int Wp, int n, int th) {
  /* lanes 0-3 from the first row of a pair (columns 0, 4, 8, 12 of its
   * vector), 4-7 from the second (16 + the same); 8-15 are not used */
  const __m512i lane = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 28, 24, 20, 16, 12, 8, 4, 0);
  for (int ty0 = 0; ty0 < th; ty0 += 4) {
    const int rows = th - ty0 < 4 ? th - ty0 : 4;
    const __mmask16 keep = (__mmask16)((1u << (4 * rows)) - 1u);
    for (int l = 0; l < n; l++) {
      __m512 lo[4], hi[4];
      for (int k = 0; k < 4; k++) {
        const float *row = P + (size_t)((ty0 + (k < rows ? k : 0)) * 4 + l) * Wp;
        lo[k] = _mm512_loadu_ps(row), hi[k] = _mm512_loadu_ps(row + 4);
      }
      for (int j = 0; j < n; j++) {
        const __m512i idx = _mm512_add_epi32(lane, _mm512_set1_epi32(j & 3));
        const __m512 *src = j < 4 ? lo : hi;
        const __m512 p01 = _mm512_permutex2var_ps(src[0], idx, src[1]);
        const __m512 p23 = _mm512_permutex2var_ps(src[2], idx, src[3]);
        _mm512_mask_storeu_ps(D + (size_t)(l * n + j) * ds + (size_t)ty0 * 4, keep,
                              _mm512_shuffle_f32x4(p01, p23, 0x44));
      }
    }
  }
}
#endif

TGT static void FN(wino_tiles)(float *D, size_t ds, const float *P, int Wp, int n, int m, int th,
                               int tw) {
#if CL_SIMD == 512
  if (m == 4 && tw == 4 && n <= 8) {
    FN(wino_tiles_4x4)(D, ds, P, Wp, n, th);
    return;
  }
  if (tw <= 16 && (tw - 1) * m + n <= 32) {
    const __mmask16 keep = (__mmask16)((1u << tw) - 1u);
    for (int ty = 0; ty < th; ty++)
      for (int l = 0; l < n; l++) {
        const float *row = P + (size_t)(ty * m + l) * Wp;
        const __m512 lo = _mm512_loadu_ps(row), hi = _mm512_loadu_ps(row + 16);
        for (int j = 0; j < n; j++) {
          const __m512i idx = _mm512_add_epi32(
              _mm512_mullo_epi32(
                  _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                  _mm512_set1_epi32(m)),
              _mm512_set1_epi32(j));
          _mm512_mask_storeu_ps(D + (l * n + j) * ds + (size_t)ty * tw, keep,
                                _mm512_permutex2var_ps(lo, idx, hi));
        }
      }
    return;
  }
#endif
  for (int l = 0; l < n; l++)
    for (int j = 0; j < n; j++)
      for (int ty = 0; ty < th; ty++) {
        const float *src = P + (size_t)(ty * m + l) * Wp + j;
        float *d = D + (l * n + j) * ds + (size_t)ty * tw;
        for (int tx = 0; tx < tw; tx++) d[tx] = src[tx * m];
      }
}

#if CL_SIMD == 512
/* An output row's pixels 16 at a time: the tiles of 16 / m columns. m = 2
 * and 4: their m planes interleaved (pairs, then pairs of pairs); m = 6:
 * lane L is tile L / 6's column L % 6, each plane's values put in their
 * lanes by one masked permute. Inlined with m a constant at each call, so
 * that m = 6's lane tables are constants and its loop over the planes
 * unrolled: with m a variable, built per call (each channel of each
 * image) and read back from the stack at each vector, the untile took
 * 22 % of the tutorial's forward call on F(6x6,3x3) (doc/speed.md). */
TGT static inline __attribute__((always_inline)) void FN(untile_rows)(
    float *img, int H, int W, const float *Y, size_t ys, const int m, int th, int tw, float bk,
    int acc) {
  const int per = 16 / m; /* tiles a vector */
  const __m512i pair = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512i quad = _mm512_set_epi32(23, 22, 7, 6, 21, 20, 5, 4, 19, 18, 3, 2, 17, 16, 1, 0);
  const __m512i tile = _mm512_set_epi32(2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0);
  const __m512 b = _mm512_set1_ps(bk);
  for (int ty = 0; ty < th; ty++)
    for (int i = 0; i < m && ty * m + i < H; i++) {
      const float *yr = Y + (size_t)(i * m) * ys + (size_t)ty * tw;
      float *orow = img + (size_t)(ty * m + i) * W;
      for (int t0 = 0; t0 < tw; t0 += per) {
        const int nt = tw - t0 < per ? tw - t0 : per;
        const int w = W - t0 * m < nt * m ? W - t0 * m : nt * m;
        const __mmask16 in = (__mmask16)((1u << nt) - 1u), keep = (__mmask16)((1u << w) - 1u);
        const float *y0 = yr + t0;
        __m512 v = _mm512_setzero_ps();
        if (m == 2 || m == 4) {
          v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(in, y0), pair,
                                     _mm512_maskz_loadu_ps(in, y0 + ys));
          if (m == 4)
            v = _mm512_permutex2var_ps(
                v, quad,
                _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(in, y0 + 2 * ys), pair,
                                       _mm512_maskz_loadu_ps(in, y0 + 3 * ys)));
        } else {
          /* plane j's lanes: columns j of the two tiles, L = j and j + 6 */
          _Pragma("GCC unroll 6") for (int j = 0; j < 6; j++) v = _mm512_mask_permutexvar_ps(
              v, (__mmask16)(1u << j | 1u << (j + 6)), tile,
              _mm512_maskz_loadu_ps(in, y0 + (size_t)j * ys));
        }
        float *o = orow + t0 * m;
        if (acc) v = _mm512_add_ps(_mm512_maskz_loadu_ps(keep, o), v);
        _mm512_mask_storeu_ps(o, keep, _mm512_add_ps(v, b));
      }
    }
}
#endif

TGT static void FN(wino_untile)(float *img, int H, int W, const float *Y, size_t ys, int m, int th,
                                int tw, float bk, int acc) {
#if CL_SIMD == 512
  if (m == 2 || m == 4 || m == 6) {
    if (m == 6)
      FN(untile_rows)(img, H, W, Y, ys, 6, th, tw, bk, acc);
    else if (m == 4)
      FN(untile_rows)(img, H, W, Y, ys, 4, th, tw, bk, acc);
    else
      FN(untile_rows)(img, H, W, Y, ys, 2, th, tw, bk, acc);
    return;
  }
#endif
  for (int e = 0; e < m * m; e++) {
    const int i = e / m, j = e % m;
    const float *v = Y + e * ys;
    for (int ty = 0; ty < th && ty * m + i < H; ty++)
      for (int tx = 0; tx < tw && tx * m + j < W; tx++) {
        float *o = img + (ty * m + i) * W + tx * m + j;
        const float a = v[ty * tw + tx];
        *o = acc ? *o + a + bk : a + bk;
      }
  }
}

/* d[x pix + k] = s[k rs + x] for the g <= 8 rows of W floats at s (an
 * image row's channels), x < W: the row turned channels last
 * (cl_transform), eight pixels at a time through an 8 x 8 transpose in
 * registers, where one scalar store per float, pix floats apart, took two
 * thirds of cl_transform's time. sum (may be NULL): sum[k][j] += s[k rs +
 * x] in double over x = j mod 4 in x's order (x past the last four:
 * chain 0), the caller's four chains, the same additions in the same
 * order in every instruction set. */
TGT static void FN(wino_chlast)(float *d, size_t pix, const float *s, size_t rs, int g, int W,
                                double (*sum)[4]) {
  int x = 0;
#if VW > 1
  const __m256i lanes = _mm256_cmpgt_epi32(_mm256_set1_epi32(g),
                                           _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  for (; g <= 8 && x + 8 <= W; x += 8) {
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; k++)
      r[k] = k < g ? _mm256_loadu_ps(s + (size_t)k * rs + x) : _mm256_setzero_ps();
    for (int k = 0; k < 8; k += 2)
      t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]), t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    for (int h = 0; h < 8; h += 4) { /* rows h .. h + 3: pixels (0, 4), (1, 5), (2, 6), (3, 7) */
      u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
      u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xEE);
      u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
      u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
    }
    for (int j = 0; j < 4; j++) {
      const __m256 lo = _mm256_permute2f128_ps(u[j], u[j + 4], 0x20);
      const __m256 hi = _mm256_permute2f128_ps(u[j], u[j + 4], 0x31);
      float *d0 = d + (size_t)(x + j) * pix, *d4 = d + (size_t)(x + j + 4) * pix;
      if (g == 8) {
        _mm256_storeu_ps(d0, lo), _mm256_storeu_ps(d4, hi);
      } else {
        _mm256_maskstore_ps(d0, lanes, lo), _mm256_maskstore_ps(d4, lanes, hi);
      }
    }
  }
#endif
  for (; x < W; x++)
    for (int k = 0; k < g; k++) d[(size_t)x * pix + k] = s[(size_t)k * rs + x];
  for (int k = 0; sum && k < g; k++) {
    const float *row = s + (size_t)k * rs;
    int i = 0;
#if VW > 1
    __m256d c = _mm256_loadu_pd(sum[k]);
    for (; i + 4 <= W; i += 4) c = _mm256_add_pd(c, _mm256_cvtps_pd(_mm_loadu_ps(row + i)));
    _mm256_storeu_pd(sum[k], c);
#else
    for (; i + 4 <= W; i += 4)
      sum[k][0] += row[i], sum[k][1] += row[i + 1], sum[k][2] += row[i + 2],
      sum[k][3] += row[i + 3];
#endif
    for (; i < W; i++) sum[k][0] += row[i];
  }
}

#include "cpu_simd_end.h"
