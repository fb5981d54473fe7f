/*
 * tests/c/test_gemm_rule.c -- the CPU backend's GEMM is a rule, not a race:
 * the same in every process whatever BLAS is loaded and however fast it is.
 *
 * The instrument is this program's own sgemm_: the executable defines it,
 * so the dynamic linker binds libconvlstm.so's BLAS calls here, before the
 * BLAS it was linked with. It counts calls and does no work: a BLAS faster
 * than any, which a timed choice would pick every time. A training step of
 * a model created without CONVLSTM_GEMM must call it 0 times (so neither
 * its floats nor its allocations depend on the BLAS R is linked to); with
 * CONVLSTM_GEMM=blas the same step must call it (the instrument is live).
 * Built without BLAS (no CL_HAVE_BLAS), only the first half can run.
 */
#define _POSIX_C_SOURCE 200112L
#include "ctest.h" /* CHECK, uniform01, ctest_config, ctest_model */

#include <stdlib.h>

static long spy_calls;

/* gfortran's sgemm_ signature with its two hidden character lengths. */
void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc, size_t la, size_t lb);
void sgemm_(const char *ta, const char *tb, const int *m, const int *n, const int *k,
            const float *alpha, const float *a, const int *lda, const float *b, const int *ldb,
            const float *beta, float *c, const int *ldc, size_t la, size_t lb) {
  (void)ta, (void)tb, (void)m, (void)n, (void)k, (void)alpha, (void)a, (void)lda, (void)b;
  (void)ldb, (void)beta, (void)c, (void)ldc, (void)la, (void)lb;
  spy_calls++;
}

/* BLAS calls of two training steps of a fresh model (layer 0 has 16 maps:
 * 64 output channels, wide enough for the GEMM path, not the direct one). */
static long blas_calls_of_steps(int threads) {
  cl_config c = ctest_config(2, 16, 1, 3, 3, 1, threads);
  cl_model *m = ctest_model(&c);
  if (!m) return -1;
  enum { B = 4, T = 4, H = 12, W = 12 };
  static float x[B * T * 2 * H * W], y[B * H * W];
  for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < sizeof y / sizeof y[0]; i++) y[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {B, 1, H, W, 0}};
  cl_optim opt = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  cl_step_options opts;
  memset(&opts, 0, sizeof opts);
  double loss = 0;
  long before = spy_calls;
  for (int s = 0; s < 2; s++) {
    cl_status st = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &opt, &opts, &loss);
    CHECK(st == CL_OK, "train step %d: %s", s + 1, cl_model_error(m));
  }
  cl_model_free(m);
  return spy_calls - before;
}

int main(void) {
  unsetenv("CONVLSTM_GEMM");
  for (int threads = 1; threads <= 2; threads++) {
    long n = blas_calls_of_steps(threads);
    printf("  default GEMM, %d thread(s): %ld sgemm_ call(s)\n", threads, n);
    CHECK(n == 0, "%d thread(s): the default GEMM called BLAS %ld times (a timed choice?)",
          threads, n);
  }
#ifdef CL_HAVE_BLAS
  setenv("CONVLSTM_GEMM", "blas", 1);
  long forced = blas_calls_of_steps(1);
  printf("  CONVLSTM_GEMM=blas: %ld sgemm_ call(s)\n", forced);
  CHECK(forced > 0, "CONVLSTM_GEMM=blas: the spy saw no call, so it cannot see the default's");
  unsetenv("CONVLSTM_GEMM");
#else
  printf("  built without BLAS: the forced case cannot run\n");
#endif
  return ctest_done("test_gemm_rule");
}
