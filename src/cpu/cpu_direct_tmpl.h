/*
 * cpu/cpu_direct_tmpl.h -- the two unpacked GEMM kernels of cpu_gemm.c that
 * convolutions with few channels use (see cl_cpu_sgemm_rows and
 * cl_cpu_sgemm_dot in cpu_gemm.h), and the row sums and biased row stores
 * every convolution path sums and stores its bias with (cl_cpu_row_sums,
 * cl_cpu_rows_plus), written once over a small vector vocabulary and
 * included once per instruction set: gcc at -O2, R's flags, leaves loops
 * of unknown length scalar.
 *
 * Not a header to include anywhere else: cpu_gemm.c includes cpu_simd.h
 * (the vector vocabulary) and defines VSUM(v) (sum of the lanes) and the
 * tile sizes ROWS_MR x ROWS_NV vectors and DOT_MR x DOT_NR before each
 * inclusion; it undefines them all at its end.
 * Every loop over a tile is fully unrolled so the tile stays in registers.
 */

/* C[i][q] = sum_r A[i lda + r] B[boff[r] + q] for i < M, q < N; N is a
 * multiple of ROWS_NV * VW. Row blocks past M repeat the last row of A and
 * are not stored. */
TGT static void FN(sgemm_rows)(int M, int N, int K, const float *A, int lda, const float *B,
                               const ptrdiff_t *boff, float *C, int ldc) {
  for (int i0 = 0; i0 < M; i0 += ROWS_MR) {
    const float *a[ROWS_MR];
#pragma GCC unroll 8
    for (int i = 0; i < ROWS_MR; i++) a[i] = A + (size_t)(i0 + i < M ? i0 + i : M - 1) * lda;
    for (int q0 = 0; q0 < N; q0 += ROWS_NV * VW) {
      V acc[ROWS_MR][ROWS_NV];
#pragma GCC unroll 8
      for (int i = 0; i < ROWS_MR; i++)
#pragma GCC unroll 8
        for (int v = 0; v < ROWS_NV; v++) acc[i][v] = VZERO();
      for (int r = 0; r < K; r++) {
        const float *b = B + boff[r] + q0;
        V bv[ROWS_NV];
#pragma GCC unroll 8
        for (int v = 0; v < ROWS_NV; v++) bv[v] = VLOADU(b + v * VW);
#pragma GCC unroll 8
        for (int i = 0; i < ROWS_MR; i++) {
          V ai = VSET1(a[i][r]);
#pragma GCC unroll 8
          for (int v = 0; v < ROWS_NV; v++) acc[i][v] = VFMA(ai, bv[v], acc[i][v]);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < ROWS_MR; i++)
        if (i0 + i < M)
#pragma GCC unroll 8
          for (int v = 0; v < ROWS_NV; v++)
            VSTOREU(C + (size_t)(i0 + i) * ldc + q0 + v * VW, acc[i][v]);
    }
  }
}

/* C[i][j] += sum_p A[i lda + p] B[boff[j] + p] for i < M, j < N; K is a
 * multiple of VW. Tiles past the edges repeat the last row and are not
 * stored. */
TGT static void FN(sgemm_dot)(int M, int N, int K, const float *A, int lda, const float *B,
                              const ptrdiff_t *boff, float *C, int ldc) {
  for (int i0 = 0; i0 < M; i0 += DOT_MR)
    for (int j0 = 0; j0 < N; j0 += DOT_NR) {
      const float *a[DOT_MR], *b[DOT_NR];
#pragma GCC unroll 8
      for (int i = 0; i < DOT_MR; i++) a[i] = A + (size_t)(i0 + i < M ? i0 + i : M - 1) * lda;
#pragma GCC unroll 8
      for (int j = 0; j < DOT_NR; j++) b[j] = B + boff[j0 + j < N ? j0 + j : N - 1];
      V acc[DOT_MR][DOT_NR];
#pragma GCC unroll 8
      for (int i = 0; i < DOT_MR; i++)
#pragma GCC unroll 8
        for (int j = 0; j < DOT_NR; j++) acc[i][j] = VZERO();
      for (int p = 0; p < K; p += VW) {
        V av[DOT_MR];
#pragma GCC unroll 8
        for (int i = 0; i < DOT_MR; i++) av[i] = VLOADU(a[i] + p);
#pragma GCC unroll 8
        for (int j = 0; j < DOT_NR; j++) {
          V bv = VLOADU(b[j] + p);
#pragma GCC unroll 8
          for (int i = 0; i < DOT_MR; i++) acc[i][j] = VFMA(av[i], bv, acc[i][j]);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < DOT_MR; i++)
#pragma GCC unroll 8
        for (int j = 0; j < DOT_NR; j++)
          if (i0 + i < M && j0 + j < N) C[(size_t)(i0 + i) * ldc + j0 + j] += VSUM(acc[i][j]);
    }
}

/* s[i] += the sum of row i of A (K floats, rows lda apart), i < M: in
 * sixteen float lanes (lane t sums the elements at t mod 16, in order),
 * then in double across the lanes and over the tail, so every instruction
 * set gives the same bits. Four rows at a time: their chains of adds
 * overlap (one row's sums as a float array kept in memory ran 1.8 floats
 * a cycle, a third of the tutorial's 1 -> 256 backward filter). Rows past
 * M repeat the last row and are not stored. */
TGT static void FN(row_sums)(int M, int K, const float *A, size_t lda, double *s) {
  enum { RS_NV = 16 / VW, RS_ROWS = 4 };
  const int K16 = K / 16 * 16;
  for (int i0 = 0; i0 < M; i0 += RS_ROWS) {
    const float *r[RS_ROWS];
    V acc[RS_ROWS][RS_NV];
#pragma GCC unroll 8
    for (int i = 0; i < RS_ROWS; i++) {
      r[i] = A + (size_t)(i0 + i < M ? i0 + i : M - 1) * lda;
#pragma GCC unroll 16
      for (int v = 0; v < RS_NV; v++) acc[i][v] = VZERO();
    }
    for (int p = 0; p < K16; p += 16)
#pragma GCC unroll 8
      for (int i = 0; i < RS_ROWS; i++)
#pragma GCC unroll 16
        for (int v = 0; v < RS_NV; v++) acc[i][v] = VADD(acc[i][v], VLOADU(r[i] + p + v * VW));
    for (int i = 0; i < RS_ROWS && i0 + i < M; i++) {
      float lane[16];
#pragma GCC unroll 16
      for (int v = 0; v < RS_NV; v++) VSTOREU(lane + v * VW, acc[i][v]);
      double t = 0.0;
      for (int l = 0; l < 16; l++) t += lane[l];
      for (int p = K16; p < K; p++) t += r[i][p];
      s[i0 + i] += t;
    }
  }
}

/* R rows of n floats, d's ldd apart: d = s + b, or d += s + b (acc), s's
 * rows lds apart; without s, d = b or d += b. A convolution's outputs as
 * they are stored: the bias a forward's GEMM then adds onto, or the direct
 * path's rows with the bias (one scalar store a float had made the
 * tutorial's 1 -> 256 forward 1.6x slower). */
TGT static void FN(rows_plus)(int R, int n, float *d, size_t ldd, const float *s, size_t lds,
                              float b, int acc) {
  const V bv = VSET1(b);
  for (int r = 0; r < R; r++) {
    float *dr = d + (size_t)r * ldd;
    const float *sr = s ? s + (size_t)r * lds : NULL;
    int p = 0;
    if (sr && acc) {
      for (; p + VW <= n; p += VW) VSTOREU(dr + p, VADD(VLOADU(dr + p), VADD(VLOADU(sr + p), bv)));
      for (; p < n; p++) dr[p] += sr[p] + b;
    } else if (sr) {
      for (; p + VW <= n; p += VW) VSTOREU(dr + p, VADD(VLOADU(sr + p), bv));
      for (; p < n; p++) dr[p] = sr[p] + b;
    } else if (acc) {
      for (; p + VW <= n; p += VW) VSTOREU(dr + p, VADD(VLOADU(dr + p), bv));
      for (; p < n; p++) dr[p] += b;
    } else {
      for (; p + VW <= n; p += VW) VSTOREU(dr + p, bv);
      for (; p < n; p++) dr[p] = b;
    }
  }
}

#undef VSUM
#undef ROWS_MR
#undef ROWS_NV
#undef DOT_MR
#undef DOT_NR
#include "cpu_simd_end.h"
