/*
 * tests/c/ctest.h -- what every C test of the core shares: a CHECK that
 * counts failures and says where, a small deterministic RNG (xorshift64)
 * whose uniform01 also serves as cl_model_init_params' callback, a small
 * two-layer config, a model created and initialised from it, a model's
 * parameters or gradients flattened, two models' parameters compared as
 * bits, and the relative difference the reference tests compare with.
 */
#ifndef CONVLSTM_TESTS_CTEST_H
#define CONVLSTM_TESTS_CTEST_H

#include "convlstm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ctest_failures = 0, ctest_checks = 0;

#define CHECK(cond, ...)                          \
  do {                                            \
    ctest_checks++;                               \
    if (!(cond)) {                                \
      ctest_failures++;                           \
      printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      printf(__VA_ARGS__);                        \
      printf("\n");                               \
    }                                             \
  } while (0)

/* Under valgrind (make valgrind), whose preload (vgpreload_*.so) is in
 * LD_PRELOAD: the tests that take minutes there run less, or skip. */
static inline int ctest_under_valgrind(void) {
  const char *preload = getenv("LD_PRELOAD");
  return preload && strstr(preload, "vgpreload") != NULL;
}

static unsigned long long ctest_rng = 88172645463325252ULL;

static double uniform01(void *ctx) {
  (void)ctx;
  ctest_rng ^= ctest_rng << 13;
  ctest_rng ^= ctest_rng >> 7;
  ctest_rng ^= ctest_rng << 17;
  return (double)(ctest_rng >> 11) / 9007199254740992.0;
}

/* A two-layer config on the CPU, the rest zero (float32, no peepholes, no
 * dropout): input channels, hidden h0 then h1, square kernels k0 and k1,
 * bias, threads. */
static inline cl_config ctest_config(int input_dim, int h0, int h1, int k0, int k1, int bias,
                                     int n_threads) {
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = input_dim;
  c.n_layers = 2;
  c.hidden_dims[0] = h0;
  c.hidden_dims[1] = h1;
  c.kernel_sizes[0] = k0;
  c.kernel_sizes[1] = k1;
  c.bias = bias;
  c.device = CL_DEVICE_CPU;
  c.n_threads = n_threads;
  return c;
}

/* The step options a training path is compared under, case k of
 * CTEST_STEP_CASES: plain, checkpoint, tbptt, accumulation (micro-batches),
 * float16 with accumulation, bfloat16 with checkpoint. Sets *o and *dt;
 * returns the case's name. */
enum { CTEST_STEP_CASES = 6 };
static inline const char *ctest_step_case(int k, cl_step_options *o, cl_dtype *dt) {
  memset(o, 0, sizeof *o);
  *dt = CL_F32;
  switch (k) {
  case 1: o->checkpoint = 2; return "checkpoint 2";
  case 2: o->tbptt = 2; return "tbptt 2";
  case 3: o->accumulation_steps = 3; return "accumulation 3";
  case 4: *dt = CL_F16; o->accumulation_steps = 2; return "float16, accumulation 2";
  case 5: *dt = CL_BF16; o->checkpoint = 3; return "bfloat16, checkpoint 3";
  default: return "plain";
  }
}

/* A small encoder-forecaster on the CPU (input_dim channels, hidden 3-2 in
 * both stacks, 3x3, 2 x 2 patches, per-channel peepholes, one thread) in
 * storage dtype dt. */
static inline cl_config ctest_forecaster_config(int input_dim, cl_dtype dt) {
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = input_dim;
  c.n_layers = 4;
  c.hidden_dims[0] = c.hidden_dims[2] = 3;
  c.hidden_dims[1] = c.hidden_dims[3] = 2;
  for (int l = 0; l < 4; l++) c.kernel_sizes[l] = 3;
  c.bias = 1;
  c.device = CL_DEVICE_CPU;
  c.n_threads = 1;
  c.forecaster = 1;
  c.patch = 2;
  c.peephole = CL_PEEP_CHANNEL;
  c.dtype = dt;
  return c;
}

/* A model of config c with parameters drawn from uniform01; NULL (and a
 * failed check) when it cannot be created. */
static inline cl_model *ctest_model(const cl_config *c) {
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN];
  CHECK(cl_model_create(c, &m, err, sizeof err) == CL_OK, "create: %s", err);
  if (m) cl_model_init_params(m, uniform01, NULL);
  return m;
}

/* Elements of a tensor of cl_model_tensor_info's ndim and dims. */
static inline size_t ctest_numel(int nd, const int *d) {
  size_t n = 1;
  for (int j = 0; j < nd; j++) n *= (size_t)d[j];
  return n;
}

/* Every parameter (grad = 0) or gradient (grad = 1) of m, flattened in
 * tensor order into out (room for max floats); their number, and a failed
 * check when they do not fit. */
/* The index in R's layout (column-major) of element i of a row-major
 * (torch) array of dims d, nd of them: the tests fill both host layouts
 * with the same values. */
static inline size_t ctest_r_index(size_t i, const int *d, int nd) {
  size_t idx[5], r = 0, s = 1;
  for (int k = nd - 1; k >= 0; k--) {
    idx[k] = i % (size_t)d[k];
    i /= (size_t)d[k];
  }
  for (int k = 0; k < nd; k++) {
    r += idx[k] * s;
    s *= (size_t)d[k];
  }
  return r;
}

static inline size_t ctest_flat(cl_model *m, int grad, float *out, size_t max) {
  size_t at = 0;
  for (int i = 0; i < cl_model_n_tensors(m); i++) {
    const char *name;
    int nd, d[4];
    cl_model_tensor_info(m, i, &name, &nd, d);
    size_t n = ctest_numel(nd, d);
    CHECK(at + n <= max, "%zu values do not fit in %zu", at + n, max);
    if (at + n > max) break;
    if (grad)
      cl_model_get_grad(m, name, out + at, n);
    else
      cl_model_get_param(m, name, out + at, n);
    at += n;
  }
  return at;
}

/* 1 when every parameter of a and b is bitwise equal. */
static inline int ctest_same_params(cl_model *a, cl_model *b) {
  int n = cl_model_n_tensors(a);
  if (n != cl_model_n_tensors(b)) return 0;
  for (int i = 0; i < n; i++) {
    const char *name;
    int nd, d[4];
    cl_model_tensor_info(a, i, &name, &nd, d);
    size_t len = ctest_numel(nd, d);
    float *pa = malloc(len * sizeof(float)), *pb = malloc(len * sizeof(float));
    int ok = pa && pb && cl_model_get_param(a, name, pa, len) == CL_OK &&
             cl_model_get_param(b, name, pb, len) == CL_OK &&
             memcmp(pa, pb, len * sizeof(float)) == 0;
    free(pa);
    free(pb);
    if (!ok) return 0;
  }
  return 1;
}

/* max |a - b| / max |b| (max |a - b| when b is all zero): the measure the
 * R tests use too */
static inline double rel_diff(const float *a, const float *b, size_t n) {
  double d = 0, s = 0;
  for (size_t i = 0; i < n; i++) {
    d = fmax(d, fabs((double)a[i] - b[i]));
    s = fmax(s, fabs((double)b[i]));
  }
  return s > 0 ? d / s : d;
}

/* Two training steps that must agree, named what: the second's loss l1
 * within tol of the first's l0 (relative), its n1 gradients within tol of
 * the first's n0 (rel_diff), and those not all zero (a comparison of
 * nothing). Prints the two gaps after what. */
static inline void ctest_steps_agree(const char *what, double l0, const float *g0, size_t n0,
                                     double l1, const float *g1, size_t n1, double tol) {
  double scale = 0;
  for (size_t i = 0; i < n0; i++) scale = fmax(scale, fabs(g0[i]));
  const double dg = n0 == n1 ? rel_diff(g1, g0, n0) : INFINITY;
  const double dl = fabs(l1 - l0) / fmax(fabs(l0), 1e-30);
  CHECK(n0 == n1 && n0 > 0 && scale > 0, "%s: %zu and %zu gradients, the largest %g", what, n0,
        n1, scale);
  CHECK(isfinite(l1) && dl <= tol, "%s: loss %.9g against %.9g (rel %.2e, tol %.0e)", what, l1, l0,
        dl, tol);
  CHECK(dg <= tol, "%s: gradients: max diff / max |g| %.2e (tol %.0e)", what, dg, tol);
  printf("%s loss rel %.1e, gradients %.1e (tol %.0e)\n", what, dl, dg, tol);
}

/* Exit status of a test program: prints the verdict. */
static int ctest_done(const char *name) {
  if (ctest_failures) {
    printf("%s: %d of %d checks failed\n", name, ctest_failures, ctest_checks);
    return 1;
  }
  printf("%s: all %d checks passed\n", name, ctest_checks);
  return 0;
}

#endif
