/*
 * cpu/cpu_bf16.h -- bfloat16 products for the CPU backend's convolutions
 * of bfloat16 storage (cpu_bf16.c); the float32 ones are cpu_gemm.h's.
 */
#ifndef CONVLSTM_CPU_BF16_H
#define CONVLSTM_CPU_BF16_H

#include "cpu_gemm.h" /* cl_cpu_gemm_kind, CL_CPU_ROWS_PAD */

/* bfloat16 dot products (AVX512_BF16's vdpbf16ps) with float32 sums, for
 * the convolutions of bfloat16 storage: the same two shapes as rows and dot
 * above, each operand rounded to bfloat16 (nearest even) as it is packed
 * into scratch, every product exact in float32, sums in float32.
 * cl_cpu_bf16_dot_of: nonzero when a backend of this kind runs them: its
 * vector ISA is AVX-512, the CPU has AVX512_BF16, AVX512BW and VL, and
 * they pay (cl_cpu_bf16_dot_pays on this core's cl_cpu_bf16_rates, measured
 * once per process); CONVLSTM_BF16_DOT=0 forces the float32 kernels, =1
 * the bfloat16 ones wherever the CPU has them. Call the two only then.
 * rows: C[i][q] = sum_r A[i lda + r] B[boff[r] + q] (C written, not added)
 *       for r = c taps + t over `channels` planes of a padded image, plane
 *       floats apart (B holds b_len floats), boff[t] the tap offsets (as in
 *       cl_cpu_sgemm_rows, boff[c taps + t] = c plane + boff[t]); N a multiple
 *       of CL_CPU_ROWS_PAD. Pairs of channels are interleaved into scratch,
 *       so the shifted views need no im2col copy;
 * dot:  C[i][j] += sum_p A[i lda + p] B[boff[j] + p], K a multiple of
 *       CL_CPU_BF16_DOT_PAD; B holds b_len readable floats, A M rows of lda. */
enum { CL_CPU_BF16_DOT_PAD = 32 };
int cl_cpu_bf16_dot_of(cl_cpu_gemm_kind kind);
/* The rule: bfloat16 dot products pay where vdpbf16ps does at least as many
 * flops a second as the float32 FMA (a core running it at half rate makes
 * the bfloat16 step 2.8x slower than on the float32 kernels). */
int cl_cpu_bf16_dot_pays(double dot_gflops, double fma_gflops);
/* This core's rates, GFLOP/s, from register-only loops timed once per
 * process (thread CPU time, best of five): 1, or 0 (both 0) where the CPU
 * has no AVX512_BF16. */
int cl_cpu_bf16_rates(double *dot_gflops, double *fma_gflops);
size_t cl_cpu_bf16_rows_scratch_bytes(int M, int channels, int taps, size_t b_len);
size_t cl_cpu_bf16_dot_scratch_bytes(int M, int lda, size_t b_len);
void cl_cpu_bf16_rows(int M, int N, int channels, int taps, const float *A, int lda,
                      const float *B, size_t plane, size_t b_len, const ptrdiff_t *boff, float *C,
                      int ldc, void *scratch);
void cl_cpu_bf16_dot(int M, int N, int K, const float *A, int lda, const float *B, size_t b_len,
                     const ptrdiff_t *boff, float *C, int ldc, void *scratch);

#endif
