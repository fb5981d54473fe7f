/*
 * cpu/cpu_gemm.h -- row-major single-precision GEMM for the CPU backend:
 * C = alpha * op(A) op(B) + beta * C with op(X) = X or X^T.
 *
 * Two implementations sit behind one call: an internal cache-blocked kernel
 * (packing plus a register-blocked micro-kernel, built for AVX-512F,
 * AVX2+FMA and portable C, picked at run time because R compiles with plain
 * -O2 and no -march), and, when CL_HAVE_BLAS is defined, R's Fortran
 * sgemm_ (only when CONVLSTM_GEMM=blas forces it). cl_cpu_gemm_choose()
 * picks one per backend.
 *
 * It is not a general BLAS: no complex types, no argument checking beyond
 * what the convolutions need. cl_cpu_sgemm() takes its packing scratch from
 * the caller and guards its one table (the tile timed per shape) with a
 * critical section, so threads may call it concurrently from inside an
 * OpenMP parallel region.
 */
#ifndef CONVLSTM_CPU_GEMM_H
#define CONVLSTM_CPU_GEMM_H

#include <stddef.h>

typedef enum cl_cpu_gemm_kind {
  CL_CPU_GEMM_GENERIC = 0, /* internal kernel, portable C */
  CL_CPU_GEMM_AVX2 = 1,    /* internal kernel, AVX2 + FMA */
  CL_CPU_GEMM_AVX512 = 2,  /* internal kernel, AVX-512F */
  CL_CPU_GEMM_BLAS = 3     /* sgemm_ of the BLAS R links (CL_HAVE_BLAS) */
} cl_cpu_gemm_kind;

/* The internal kind whose kernels a backend of `kind` runs where BLAS has
 * none (the im2col views, the unpacked and bfloat16 kernels): `kind`
 * itself, or for BLAS the best internal one. */
cl_cpu_gemm_kind cl_cpu_gemm_internal_of(cl_cpu_gemm_kind kind);

/* Nonzero when this build and the running CPU can use `kind`. */
int cl_cpu_gemm_available(cl_cpu_gemm_kind kind);
/* The fastest internal kind the running CPU supports. */
cl_cpu_gemm_kind cl_cpu_gemm_best_internal(void);
const char *cl_cpu_gemm_name(cl_cpu_gemm_kind kind);

/* The kind a backend uses: CONVLSTM_GEMM=internal, =blas, =generic, =avx2
 * or =avx512 forces one; otherwise the best internal kind of the running
 * CPU, the same in every process on one machine (n_threads is not used). */
cl_cpu_gemm_kind cl_cpu_gemm_choose(int n_threads);

/* The register tiles of an internal kind (0 for BLAS): AVX-512 has four
 * (8x48, 12x32, 16x16, and 12x32-inplace, which reads an im2col view of an
 * image a multiple of 16 pixels wide in place instead of packing it; other
 * products run it as 12x32), the others one. cl_cpu_sgemm times the tiles
 * a product can use on the first calls of each shape in a process and keeps
 * the fastest; a product too short to time (under 2 MFLOP) takes the tile
 * whose tiles pad C least. Every tile gives the same result bit for bit.
 * CONVLSTM_GEMM_TILE=<tile name> forces one. */
int cl_cpu_gemm_tiles(cl_cpu_gemm_kind kind);
const char *cl_cpu_gemm_tile_name(cl_cpu_gemm_kind kind, int tile);
/* The tile chosen for a shape class, -1 while it is still being timed or
 * was never called; 0 for kinds with one tile; for a product too short to
 * time, the tile it takes. view: 0 B a matrix, 1 an
 * im2col view, 2 a view of an image a multiple of 16 pixels wide. */
int cl_cpu_gemm_tile_chosen(cl_cpu_gemm_kind kind, int transA, int transB, int view, int M, int N,
                            int K);

/* Bytes of scratch one cl_cpu_sgemm call of this size needs (0 for BLAS).
 * The result is exact: the call touches no byte beyond it. */
size_t cl_cpu_sgemm_scratch_bytes(cl_cpu_gemm_kind kind, int M, int N, int K);

/* C[M,N] = alpha op(A)[M,K] op(B)[K,N] + beta C, single-threaded. With
 * beta == 0, C is not read (it may hold NaN). scratch: at least
 * cl_cpu_sgemm_scratch_bytes() bytes (64-byte aligned is fastest), or NULL
 * to allocate it here. Returns 0, or -1 when scratch was NULL and allocation
 * failed. */
int cl_cpu_sgemm(cl_cpu_gemm_kind kind, int transA, int transB, int M, int N, int K, float alpha,
                 const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc,
                 void *scratch);

/* An op(A) made once and read by many products (the Winograd filters'
 * transform, cpu_winograd.c) can be kept in the layout the kernels read:
 * slivers of P rows, element (i, p) at A[(i / P) P K + p P + i % P], the
 * rows of a last sliver past M zero. The kernels then stream each sliver
 * in order; read as a transposed matrix in place, one row of a few floats
 * per k step, the Winograd GEMMs of the plain stack's hidden half ran at
 * 0.75 of this Intel Xeon's peak against 0.95 with A in cache
 * (doc/speed.md). cl_cpu_sgemm_panel_rows: the P to lay out such an A in
 * for products of about M x N x K, short or long: one layout forgoes the
 * timing cl_cpu_sgemm does for long products, so a fixed rule chooses
 * (cpu_gemm.c's tile_panel: the tile that pads C least, weighed as for
 * short products, among those whose B sliver fits two thirds of L1; in
 * these slivers the tutorial's long Winograd products ran 1.02-1.18x as
 * fast as transposed and timed); 0 where there is none: BLAS, or K past
 * one packing block.
 * cl_cpu_sgemm_panels: C = alpha op(A) B + beta C with A so laid out, B
 * row-major, on that tile (the same sums in the same order as any tile,
 * bit for bit); scratch as for cl_cpu_sgemm, never NULL. Returns -1 where
 * no tile has P rows or K is too long, else 0. */
int cl_cpu_sgemm_panel_rows(cl_cpu_gemm_kind kind, int M, int N, int K);
int cl_cpu_sgemm_panels(cl_cpu_gemm_kind kind, int P, int M, int N, int K, float alpha,
                        const float *A, const float *B, int ldb, float beta, float *C, int ldc,
                        void *scratch);

/* The same over n_threads OpenMP threads, which split the larger of M and N.
 * Inside an active parallel region it runs on the calling thread alone. */
size_t cl_cpu_sgemm_threaded_scratch_bytes(cl_cpu_gemm_kind kind, int n_threads, int M, int N,
                                           int K);
int cl_cpu_sgemm_threaded(cl_cpu_gemm_kind kind, int n_threads, int transA, int transB, int M,
                          int N, int K, float alpha, const float *A, int lda, const float *B,
                          int ldb, float beta, float *C, int ldc, void *scratch);

/* The im2col matrix of a zero-bordered image, read in place: row r starts at
 * xp + boff[r] (the image shifted by one kernel tap), and column q is pixel
 * (q / W, q % W), found at row offset (q / W) Wp + q % W. */
typedef struct cl_cpu_im2col_view {
  const float *xp;
  const ptrdiff_t *boff;
  int W, Wp;
} cl_cpu_im2col_view;

/* A packed once for many products that share it (a convolution's weights
 * over its images). `of` is the A last packed into buf, for `tile`; NULL
 * until then. The caller sets of = NULL whenever A's values may have
 * changed, and buf holds cl_cpu_sgemm_apack_bytes(). */
typedef struct cl_cpu_apack {
  float *buf;
  const float *of;
  int tile;
} cl_cpu_apack;
size_t cl_cpu_sgemm_apack_bytes(cl_cpu_gemm_kind kind, int M, int K);
/* Nonzero when a tile of this kind reads im2col views of images W pixels
 * wide in place (cl_cpu_sgemm_im2col packs no B for them) and M rows fill
 * its whole row tiles well enough (4/5 or more) to be worth choosing a
 * product of M rows for it. */
int cl_cpu_sgemm_inplace_of(cl_cpu_gemm_kind kind, int M, int W);

/* C = alpha A[M,K] op(B) + beta C with B an im2col view: [K, N] (the
 * view's rows are op(B)'s rows), or with transB its transpose ([N, K]: a
 * convolution's weight gradient, the sum over pixels). The packing step
 * gathers B's slivers straight from the image (or the in-place tile reads
 * them there), so no im2col buffer is written and read back. Internal
 * kernels only (BLAS kinds use the best internal one); scratch as for
 * cl_cpu_sgemm with that kind. ap: NULL, or where A stays packed between
 * calls with the same A (then A's own packing is skipped). */
int cl_cpu_sgemm_im2col(cl_cpu_gemm_kind kind, int transB, int M, int N, int K, float alpha,
                        const float *A, int lda, const cl_cpu_im2col_view *B, float beta, float *C,
                        int ldc, void *scratch, cl_cpu_apack *ap);

/* Two unpacked kernels for convolutions with few channels, where packing
 * and im2col would cost more than the arithmetic. Row r of B starts at
 * B + boff[r] (rows may overlap: shifted views of one padded image serve as
 * an implicit im2col). Both are single-threaded and need no scratch.
 *
 * rows: C[i][q] = sum_r A[i lda + r] B[boff[r] + q], i < M, q < N, r < K;
 *       N must be a multiple of CL_CPU_ROWS_PAD. Fast for small M.
 * dot:  C[i][j] += sum_p A[i lda + p] B[boff[j] + p], i < M, j < N, p < K;
 *       K must be a multiple of CL_CPU_DOT_PAD. Fast when K is long. */
enum { CL_CPU_ROWS_PAD = 96, CL_CPU_DOT_PAD = 16 };
void cl_cpu_sgemm_rows(cl_cpu_gemm_kind kind, int M, int N, int K, const float *A, int lda,
                       const float *B, const ptrdiff_t *boff, float *C, int ldc);
void cl_cpu_sgemm_dot(cl_cpu_gemm_kind kind, int M, int N, int K, const float *A, int lda,
                      const float *B, const ptrdiff_t *boff, float *C, int ldc);
/* s[i] += the sum of row i of A (K floats, rows lda apart), i < M, in
 * double: a convolution's bias gradient, its bits the same on every
 * instruction set. */
void cl_cpu_row_sums(cl_cpu_gemm_kind kind, int M, int K, const float *A, size_t lda, double *s);
/* R rows of n floats, d's ldd apart: d = s + b, or d += s + b when acc
 * (s's rows lds apart); s NULL: d = b, or d += b. */
void cl_cpu_rows_plus(cl_cpu_gemm_kind kind, int R, int n, float *d, size_t ldd, const float *s,
                      size_t lds, float b, int acc);

#endif
