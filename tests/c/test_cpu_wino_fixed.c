/*
 * tests/c/test_cpu_wino_fixed.c -- cpu_winograd.c's unrolled transforms
 * (WINO_2D_FIXED: F(4x4,3x3) and F(4x4,5x5), each matrix in each role, one
 * per instruction set) do the same operations in the same order as the
 * generic loop wino_2d they replace, and the vector gather of the filter
 * pairs (wino_gather) moves the same values as the scalar loop, so a
 * convolution gives the same bits
 * whichever runs: a model's results must not depend on whether its form
 * happened to be unrolled. test_backend_ops holds both to the convolution
 * within a tolerance; this holds them to each other exactly.
 *
 * The instrument is the results' bits: each call on a backend with the
 * unrolled kernels against the same call on one with cl_cpu_ctx's
 * wino_generic set, for every internal GEMM kind this machine runs (each
 * has its own transform loops), both F(4x4, r) forms, the three directions,
 * one and two threads (two split a batch of one chunk by channels and tile
 * elements), on shapes whose tiles and filter pairs leave a tail past the
 * last whole vector.
 */
#define _POSIX_C_SOURCE 200112L
#include "bench_conv.h"      /* bench_conv_result: one call's output */
#include "cpu/cpu_kernels.h" /* cl_cpu_ctx */
#include "ctest.h"           /* CHECK, ctest_done */

#include <stdlib.h>
#include <string.h>

static cl_backend *backend(int threads, cl_cpu_gemm_kind kind, int generic) {
  cl_backend *be = NULL;
  if (cl_backend_cpu_create(threads, &be) != CL_OK) {
    fprintf(stderr, "test_cpu_wino_fixed: cannot create the cpu backend\n");
    exit(2);
  }
  cl_cpu_ctx *ctx = be->context;
  ctx->gemm = kind;
  ctx->conv_algo = 3; /* Winograd F(4x4, r) on every shape it handles */
  ctx->wino_generic = generic;
  return be;
}

int main(void) {
  /* N C H W K kh kw: 18 tiles of F(4x4, r) and 30 filter pairs (tails on
   * 8- and 16-float vectors); a hidden half of the steps' 5x5 models cut
   * to 24 channels; a 3x3 one with more images than a chunk holds; 40
   * output channels of 7 inputs: the gather's runs of 40 (and of 7) pairs,
   * whole vectors and a tail, a block of 256 pairs ending within a run */
  const cl_conv_shape shapes[] = {
      {3, 5, 7, 9, 6, 3, 3, 1, 1, CL_F32, 0, CL_NCHW},
      {3, 5, 7, 9, 6, 5, 5, 1, 1, CL_F32, 0, CL_NCHW},
      {4, 24, 16, 16, 96, 5, 5, 1, 1, CL_F32, 0, CL_NCHW},
      {20, 8, 13, 11, 12, 3, 3, 1, 1, CL_F32, 0, CL_NCHW},
      {2, 7, 8, 8, 40, 5, 5, 1, 1, CL_F32, 0, CL_NCHW},
  };
  const char *ops[] = {"forward", "backward data", "backward filter"};
  int compared = 0;
  for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_AVX512; kind++) {
    if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
    for (int threads = 1; threads <= 2; threads++) {
      cl_backend *fixed = backend(threads, (cl_cpu_gemm_kind)kind, 0);
      cl_backend *loop = backend(threads, (cl_cpu_gemm_kind)kind, 1);
      for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const cl_conv_shape *s = &shapes[i];
        for (int op = 0; op < 3; op++) {
          size_t n = 0, m = 0;
          float *a = bench_conv_result(fixed, s, op, 11, &n);
          float *b = bench_conv_result(loop, s, op, 11, &m);
          size_t differ = 0;
          for (size_t q = 0; q < n; q++) differ += memcmp(&a[q], &b[q], sizeof(float)) != 0;
          CHECK(n == m && differ == 0,
                "%s, %d thread(s), N%d C%d %dx%d K%d k%d, %s (%s): %zu of %zu values differ "
                "between the unrolled transforms and wino_2d",
                cl_cpu_gemm_name((cl_cpu_gemm_kind)kind), threads, s->N, s->C, s->H, s->W, s->K,
                s->kh, ops[op], cl_cpu_conv_algo(fixed, s, op), differ, n);
          compared++;
          free(a), free(b);
        }
      }
      cl_backend_destroy(fixed), cl_backend_destroy(loop);
    }
  }
  printf("  %d calls compared bit for bit\n", compared);
  return ctest_done("test_cpu_wino_fixed");
}
