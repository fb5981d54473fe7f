/*
 * tests/c/test_cpu_loss.c -- the CPU backend's loss and sum_squares slots
 * against formulas written out here in double: the mean of MAE, Huber and
 * BCE with logits (pos_weight) and their gradients as torch 1.13's backwards
 * give them, with the gradient written over the target (as the core does)
 * and on 1 and 2 threads; the squared norm for gradient clipping, and its
 * inf. The R tests hold the same against PyTorch's own numbers.
 */
#include "ctest.h"
#include "cpu/cpu_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { N = 50001 };

/* d loss / d x and the loss of one element, in double. */
static double ref_elem(const cl_loss_fn *f, double x, double y, double *g) {
  double d = x - y, z = fabs(d);
  switch (f->kind) {
  case CL_LOSS_MAE:
    *g = (d > 0) - (d < 0);
    return z;
  case CL_LOSS_HUBER:
    *g = d < -f->delta ? -f->delta : d > f->delta ? f->delta : d;
    return z < f->delta ? 0.5 * z * z : f->delta * (z - 0.5 * f->delta);
  default: {
    double s = 1.0 / (1.0 + exp(-x)), p = f->pos_weight;
    *g = (p * y + 1 - y) * s - p * y;
    /* -(p y log s + (1 - y) log(1 - s)) */
    return -(p * y * log(s) + (1 - y) * log1p(-s));
  }
  }
}

static void test_loss(const cl_loss_fn *f, const char *name, int threads) {
  cl_backend *be = NULL;
  CHECK(cl_backend_cpu_create(threads, &be) == CL_OK, "cpu backend");
  float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
  float *g = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) {
    x[i] = (float)(6 * uniform01(NULL) - 3);
    y[i] = f->kind == CL_LOSS_BCE_LOGITS ? (float)(uniform01(NULL) < 0.4)
                                         : (float)(6 * uniform01(NULL) - 3);
  }
  const float scale = 0.75f;
  double loss = 0, alias_loss = 0, ref = 0, worst = 0;
  CHECK(be->iface->loss(be, f, x, y, N, CL_F32, scale, g, &loss) == CL_OK, "%s: runs", name);
  for (int i = 0; i < N; i++) {
    double gi;
    ref += ref_elem(f, x[i], y[i], &gi);
    double e = fabs(g[i] - scale * gi / N) / (scale / N);
    if (e > worst) worst = e;
  }
  ref /= N;
  CHECK(fabs(loss - ref) <= 1e-5 * fabs(ref), "%s t%d: loss %.9g, expected %.9g", name, threads,
        loss, ref);
  CHECK(worst <= 1e-5, "%s t%d: gradient off by %.3g of its unit", name, threads, worst);
  /* the gradient written over the target, as backward.c asks */
  float *t = malloc(N * sizeof(float));
  memcpy(t, y, N * sizeof(float));
  CHECK(be->iface->loss(be, f, x, t, N, CL_F32, scale, t, &alias_loss) == CL_OK &&
            alias_loss == loss && memcmp(t, g, N * sizeof(float)) == 0,
        "%s t%d: the same over the target", name, threads);
  free(x), free(y), free(g), free(t);
  be->iface->destroy(be);
}

static void test_sum_squares(int threads) {
  cl_backend *be = NULL;
  CHECK(cl_backend_cpu_create(threads, &be) == CL_OK, "cpu backend");
  enum { M = 100003 };
  float *g = malloc(M * sizeof(float));
  double ref = 0, sum = -1;
  for (int i = 0; i < M; i++) {
    g[i] = (float)(2 * uniform01(NULL) - 1);
    ref += (double)g[i] * g[i];
  }
  CHECK(be->iface->sum_squares(be, g, M, &sum) == CL_OK && fabs(sum - ref) <= 1e-12 * ref,
        "t%d: sum of squares %.15g, expected %.15g", threads, sum, ref);
  g[7] = 3e38f; /* its square overflows float, not the double sum */
  CHECK(be->iface->sum_squares(be, g, M, &sum) == CL_OK && isfinite(sum) && sum > 8e76,
        "t%d: squares of floats near their limit summed in double (%g)", threads, sum);
  g[7] = INFINITY;
  CHECK(be->iface->sum_squares(be, g, M, &sum) == CL_OK && isinf(sum), "t%d: an inf gives inf",
        threads);
  CHECK(be->iface->sum_squares(be, g, 0, &sum) == CL_OK && sum == 0, "t%d: none gives 0",
        threads);
  free(g);
  be->iface->destroy(be);
}

int main(void) {
  const cl_loss_fn fns[] = {{CL_LOSS_MAE, 1, 1}, {CL_LOSS_HUBER, 0.7, 1},
                            {CL_LOSS_BCE_LOGITS, 1, 2.5}, {CL_LOSS_BCE_LOGITS, 1, 1}};
  const char *names[] = {"mae", "huber 0.7", "bce_logits pos_weight 2.5", "bce_logits"};
  for (int threads = 1; threads <= 2; threads++) {
    for (int k = 0; k < 4; k++) test_loss(&fns[k], names[k], threads);
    test_sum_squares(threads);
  }
  cl_backend *be = NULL;
  cl_backend_cpu_create(1, &be);
  float a = 1, b = 2, g = 0;
  double l = 0;
  const cl_loss_fn mse = {CL_LOSS_MSE, 1, 1};
  CHECK(be && be->iface->loss(be, &mse, &a, &b, 1, CL_F32, 1, &g, &l) == CL_E_INVALID,
        "MSE is the mse slot's, refused here");
  if (be) be->iface->destroy(be);
  return ctest_done("test_cpu_loss");
}
