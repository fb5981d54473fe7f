/*
 * tests/c/test_core_model.c -- the core through its public header only, on
 * the CPU backend: gradients against central finite differences (also with
 * dropout masks), the plan against what a real step allocates (per category,
 * to the byte), call-order
 * errors, out-of-memory recovery under a limit, layout round trips, and that
 * freeing returns every byte. Exits nonzero on any failure.
 */
#include "convlstm.h"
#include "core/internal.h" /* m->be, to replace one slot of its table */
#include "ctest.h"          /* CHECK, uniform01, ctest_model */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>


static void fill(float *p, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) p[i] = (float)((2 * uniform01(NULL) - 1) * scale);
}

static cl_host_array seq(float *d, int B, int T, int C, int H, int W) {
  cl_host_array a = {d, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  return a;
}
static cl_host_array state(float *d, int B, int C, int H, int W) {
  cl_host_array a = {d, CL_HOST_TORCH_F32, 4, {B, C, H, W, 0}};
  return a;
}

static cl_model *make_model(int bias, size_t limit) {
  cl_config c = ctest_config(2, 3, 2, 3, 1, bias, 2);
  c.memory_limit = limit;
  return ctest_model(&c);
}

enum { B = 2, T = 3, C = 2, H = 5, W = 4, CL = 2 };

/* The loss of a forward pass with options o (dropout masks; NULL: none). */
static double loss_of(cl_model *m, const float *x, const float *y, cl_target tg,
                      const cl_step_options *o) {
  float *xx = (float *)x, *yy = (float *)y;
  cl_host_array xa = seq(xx, B, T, C, H, W);
  cl_host_array ya = tg == CL_TARGET_SEQUENCE ? seq(yy, B, T, CL, H, W) : state(yy, B, CL, H, W);
  double loss = NAN;
  CHECK(cl_model_forward(m, &xa, 1, o) == CL_OK, "forward: %s", cl_model_error(m));
  CHECK(cl_model_mse(m, &ya, tg, &loss) == CL_OK, "mse: %s", cl_model_error(m));
  return loss;
}

/* d loss / d theta of every tensor (after one forward and backward with
 * o) against central differences in float32 forward passes, at one entry
 * in `every` of each; returns the worst relative difference. */
static double check_gradients(cl_model *m, const float *x, const float *y, cl_target tg,
                              const cl_step_options *o, size_t every, const char *what) {
  loss_of(m, x, y, tg, o);
  CHECK(cl_model_zero_grad(m) == CL_OK, "zero_grad");
  CHECK(cl_model_backward(m, tg, NULL) == CL_OK, "backward: %s", cl_model_error(m));
  double worst = 0;
  for (int i = 0; i < cl_model_n_tensors(m); i++) {
    const char *name;
    int nd, d[4];
    cl_model_tensor_info(m, i, &name, &nd, d);
    size_t n = ctest_numel(nd, d);
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
    cl_model_get_param(m, name, p, n);
    cl_model_get_grad(m, name, g, n);
    for (size_t j = 0; j < n; j += 1 + n / every) {
      float keep = p[j], h = 1e-2f;
      p[j] = keep + h;
      cl_model_set_param(m, name, p, n);
      double lp = loss_of(m, x, y, tg, o);
      p[j] = keep - h;
      cl_model_set_param(m, name, p, n);
      double lm = loss_of(m, x, y, tg, o);
      p[j] = keep;
      cl_model_set_param(m, name, p, n);
      double fd = (lp - lm) / (2 * h), err = fabs(fd - g[j]) / (fabs(fd) + 1e-3);
      if (err > worst) worst = err;
      CHECK(err < 2e-2, "%s%s[%zu]: analytic %g, finite difference %g", what, name, j, g[j], fd);
    }
    free(p);
    free(g);
  }
  return worst;
}

/* The gradients of every tensor against central differences. */
static void test_gradients(cl_target tg) {
  cl_model *m = make_model(1, 0);
  float x[B * T * C * H * W], y[B * T * CL * H * W];
  fill(x, sizeof x / sizeof *x, 1);
  fill(y, sizeof y / sizeof *y, 0.5f);
  const double worst = check_gradients(m, x, y, tg, NULL, 7, "");
  printf("gradients (%s target): worst relative difference to finite differences %.2e\n",
         tg == CL_TARGET_SEQUENCE ? "sequence" : "last-state", worst);
  cl_model_free(m);
}

/* Dropout: with fixed masks on both layers' inputs and hidden states, the
 * gradients of every tensor against central differences of the masked
 * forward (so backward applies the masks where forward did); a training call
 * without the masks its rates need is refused, inference needs none. */
static void test_dropout_gradients(void) {
  cl_config c = ctest_config(C, 3, CL, 3, 3, 1, 2);
  c.dropout[0] = 0.3, c.dropout[1] = 0.5;
  c.recurrent_dropout[0] = 0.4, c.recurrent_dropout[1] = 0.2;
  cl_model *m = ctest_model(&c);
  if (!m) return;
  float x[B * T * C * H * W], y[B * T * CL * H * W];
  fill(x, sizeof x / sizeof *x, 1);
  fill(y, sizeof y / sizeof *y, 0.5f);
  static float mx0[B * C * H * W], mh0[B * 3 * H * W], mx1[B * 3 * H * W], mh1[B * CL * H * W];
  float *mk[4] = {mx0, mh0, mx1, mh1};
  const size_t mn[4] = {B * C * H * W, B * 3 * H * W, B * 3 * H * W, B * CL * H * W};
  const double rate[4] = {0.3, 0.4, 0.5, 0.2};
  int zeros = 0;
  for (int k = 0; k < 4; k++)
    for (size_t i = 0; i < mn[k]; i++) {
      mk[k][i] = uniform01(NULL) >= rate[k] ? (float)(1 / (1 - rate[k])) : 0.0f;
      zeros += mk[k][i] == 0;
    }
  CHECK(zeros > 0, "some elements dropped");
  cl_host_array xa = seq(x, B, T, C, H, W);
  cl_step_options o;
  memset(&o, 0, sizeof o);
  CHECK(cl_model_forward(m, &xa, 1, &o) == CL_E_INVALID &&
            strstr(cl_model_error(m), "no input mask"),
        "a training forward without masks is refused: %s", cl_model_error(m));
  CHECK(cl_model_forward(m, &xa, 0, NULL) == CL_OK, "inference needs no masks: %s",
        cl_model_error(m));
  o.mask_x[0] = mx0, o.mask_h[0] = mh0, o.mask_x[1] = mx1, o.mask_h[1] = mh1;
  const double worst = check_gradients(m, x, y, CL_TARGET_SEQUENCE, &o, 9, "dropout ");
  printf("gradients with dropout masks: worst relative difference to finite differences %.2e\n",
         worst);
  cl_model_free(m);
}

/* Every category after a training step equals the plan, to the byte. */
static void test_plan_matches(void) {
  cl_model *m = make_model(1, 0);
  cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  cl_plan p;
  CHECK(cl_model_plan(m, B, T, H, W, 1, &adam, NULL, &p) == CL_OK, "plan");
  float x[B * T * C * H * W], y[B * CL * H * W];
  fill(x, sizeof x / sizeof *x, 1);
  fill(y, sizeof y / sizeof *y, 1);
  cl_host_array xa = seq(x, B, T, C, H, W), ya = state(y, B, CL, H, W);
  double loss;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, NULL, &loss) == CL_OK,
        "train_step: %s", cl_model_error(m));
  cl_mem_stats s;
  cl_model_memory_stats(m, &s);
  for (int c = 0; c < CL_MEM_NCAT; c++)
    CHECK(s.peak[c] == p.by_category[c], "%s: plan %zu, measured peak %zu",
          cl_mem_category_name((cl_mem_category)c), p.by_category[c], s.peak[c]);
  CHECK(s.peak_allocated == p.total, "total: plan %zu, measured %zu", p.total, s.peak_allocated);
  printf("plan of a training step: %zu bytes in %d buffers, measured peak %zu\n", p.total, p.n,
         s.peak_allocated);
  cl_plan_free(&p);
  cl_model_free(m);
}

static void test_call_order(void) {
  cl_model *m = make_model(0, 0);
  float g[B * CL * H * W] = {0};
  cl_host_array ga = state(g, B, CL, H, W);
  CHECK(cl_model_backward(m, CL_TARGET_LAST_STATE, &ga) == CL_E_STATE, "backward before forward");
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0.9, 0, 0, 0, 0};
  CHECK(cl_model_optimizer_step(m, &sgd) == CL_E_STATE, "step before backward");
  float x[B * T * C * H * W];
  fill(x, sizeof x / sizeof *x, 1);
  cl_host_array xa = seq(x, B, T, C, H, W);
  CHECK(cl_model_forward(m, &xa, 1, NULL) == CL_OK, "forward");
  CHECK(cl_model_backward(m, CL_TARGET_LAST_STATE, &ga) == CL_OK, "backward: %s", cl_model_error(m));
  CHECK(cl_model_backward(m, CL_TARGET_LAST_STATE, &ga) == CL_E_STATE, "second backward");
  xa.dims[2] = 3;
  CHECK(cl_model_forward(m, &xa, 0, NULL) == CL_E_INVALID, "wrong channel count");
  CHECK(strstr(cl_model_error(m), "channels") != NULL, "message names channels: %s",
        cl_model_error(m));
  cl_model_free(m);
}

/* Over the limit: a classed OOM in torch's words, then a smaller batch runs. */
static void test_oom_recovery(void) {
  cl_model *m = make_model(1, 40000);
  enum { BB = 16 };
  static float x[BB * T * C * H * W], y[BB * CL * H * W];
  fill(x, sizeof x / sizeof *x, 1);
  fill(y, sizeof y / sizeof *y, 1);
  cl_host_array xa = seq(x, BB, T, C, H, W), ya = state(y, BB, CL, H, W);
  cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  double loss;
  float before[4 * 3 * 5 * 9], after[4 * 3 * 5 * 9];
  cl_model_get_param(m, "cell_list.0.conv.weight", before, sizeof before / sizeof *before);
  cl_status s = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, NULL, &loss);
  CHECK(s == CL_E_OOM, "expected OOM, got %s", cl_status_name(s));
  CHECK(strncmp(cl_model_error(m), "out of memory: tried to allocate", 32) == 0, "message: %s",
        cl_model_error(m));
  printf("OOM message: %s\n", cl_model_error(m));
  cl_model_get_param(m, "cell_list.0.conv.weight", after, sizeof after / sizeof *after);
  CHECK(memcmp(before, after, sizeof before) == 0, "parameters changed by a failed step");
  xa.dims[0] = ya.dims[0] = 1;
  s = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, NULL, &loss);
  CHECK(s == CL_OK, "batch 1 under the limit: %s", cl_model_error(m));
  cl_mem_stats st;
  cl_model_memory_stats(m, &st);
  CHECK(st.peak_reserved <= 40000, "peak %zu over the limit", st.peak_reserved);
  cl_model_free(m);
}

/* R's column-major doubles and torch's row-major floats describe the same
 * tensor: the model must see the same input and give the same output. */
static void test_layouts(void) {
  cl_model *m = make_model(1, 0);
  enum { N = B * T * C * H * W, NO = B * T * CL * H * W };
  float xt[N], ot[NO];
  double xr[N], orr[NO];
  fill(xt, N, 1);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < C; c++)
        for (int h = 0; h < H; h++)
          for (int w = 0; w < W; w++)
            xr[b + B * (t + T * (c + C * (h + H * w)))] =
              xt[(((b * T + t) * C + c) * H + h) * W + w];
  cl_host_array a = seq(xt, B, T, C, H, W), o = seq(ot, B, T, CL, H, W);
  cl_model_forward(m, &a, 0, NULL);
  cl_model_read_output(m, 1, &o);
  a.data = xr;
  a.format = CL_HOST_R_F64;
  o.data = orr;
  o.format = CL_HOST_R_F64;
  cl_model_forward(m, &a, 0, NULL);
  cl_model_read_output(m, 1, &o);
  double worst = 0;
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++)
      for (int c = 0; c < CL; c++)
        for (int h = 0; h < H; h++)
          for (int w = 0; w < W; w++) {
            double d = fabs(orr[b + B * (t + T * (c + CL * (h + H * w)))] -
                            ot[(((b * T + t) * CL + c) * H + h) * W + w]);
            if (d > worst) worst = d;
          }
  CHECK(worst == 0, "R and torch layouts differ by %g", worst);
  cl_model_free(m);
}

/* Training and inference schedules compute the same outputs and states. */
static void test_schedules_agree(void) {
  cl_model *m = make_model(1, 0);
  enum { NO = B * T * CL * H * W, NS = B * CL * H * W };
  float x[B * T * C * H * W], o1[NO], o2[NO], c1[NS], c2[NS];
  fill(x, sizeof x / sizeof *x, 1);
  cl_host_array a = seq(x, B, T, C, H, W);
  cl_host_array oa = seq(o1, B, T, CL, H, W), ca = state(c1, B, CL, H, W);
  cl_model_forward(m, &a, 1, NULL);
  cl_model_read_output(m, 1, &oa);
  cl_model_read_state(m, 1, 1, &ca);
  cl_model_empty_cache(m);
  cl_model_forward(m, &a, 0, NULL);
  oa.data = o2;
  ca.data = c2;
  cl_model_read_output(m, 1, &oa);
  cl_model_read_state(m, 1, 1, &ca);
  double worst = 0;
  for (int i = 0; i < NO; i++) worst = fmax(worst, fabs(o1[i] - o2[i]));
  for (int i = 0; i < NS; i++) worst = fmax(worst, fabs(c1[i] - c2[i]));
  CHECK(worst < 1e-6, "training and inference schedules differ by %g", worst);
  cl_model_free(m);
}

/* An Inf in x saturates the gates: the loss stays finite, the weight
 * gradients (0 * Inf) do not; the update must not happen. */
static void test_nonfinite_gradients(void) {
  cl_model *m = make_model(1, 0);
  float x[B * T * C * H * W], y[B * CL * H * W];
  fill(x, sizeof x / sizeof *x, 1);
  fill(y, sizeof y / sizeof *y, 1);
  x[7] = INFINITY;
  cl_host_array xa = seq(x, B, T, C, H, W), ya = state(y, B, CL, H, W);
  cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  float before[4 * 3 * 5 * 9], after[4 * 3 * 5 * 9];
  size_t n = sizeof before / sizeof *before;
  cl_model_get_param(m, "cell_list.0.conv.weight", before, n);
  double loss;
  cl_status s = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, NULL, &loss);
  CHECK(s == CL_E_INVALID, "expected a refused update, got %s (loss %g)", cl_status_name(s), loss);
  printf("x with an Inf: %s\n", cl_model_error(m));
  cl_model_get_param(m, "cell_list.0.conv.weight", after, n);
  CHECK(memcmp(before, after, sizeof before) == 0, "non-finite gradients reached the weights");
  cl_model_free(m);
}

static void test_lifetime(void) {
  int before = cl_models_alive();
  cl_model *m = make_model(1, 0);
  CHECK(cl_models_alive() == before + 1, "alive count");
  cl_model_free(m);
  CHECK(cl_models_alive() == before, "alive count after free");
  cl_config bad;
  memset(&bad, 0, sizeof bad);
  bad.input_dim = 1;
  bad.n_layers = 1;
  bad.hidden_dims[0] = 4;
  bad.kernel_sizes[0] = 2;
  char err[CL_ERRMSG_LEN];
  cl_model *m2 = NULL;
  CHECK(cl_model_create(&bad, &m2, err, sizeof err) == CL_E_INVALID && m2 == NULL, "even kernel");
  CHECK(strstr(err, "kernel_sizes") != NULL, "message: %s", err);
  CHECK(cl_models_alive() == before, "failed create leaks a model");
}

/* A backend that cannot say a convolution's workspace (cuDNN with no
 * algorithm for a shape, on a GPU): the CPU backend's table with that one
 * slot replaced. The plan and the step must fail with its reason, not plan
 * a workspace too small for the calls; with the slot restored both work. */
static cl_status refuse_workspace(cl_backend *be, const cl_conv_shape *s, cl_conv_dir dir,
                                  size_t *bytes) {
  (void)s;
  (void)dir;
  *bytes = 0;
  snprintf(be->err, sizeof be->err, "test backend: no algorithm for this shape");
  return CL_E_UNSUPPORTED;
}

static void test_workspace_query_fails(void) {
  cl_model *m = make_model(1, 0);
  const struct cl_backend_i *real = m->be->iface;
  struct cl_backend_i refusing = *real;
  refusing.conv_workspace = refuse_workspace;
  m->be->iface = &refusing;
  cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  cl_plan p;
  cl_status st = cl_model_plan(m, B, T, H, W, 1, &adam, NULL, &p);
  CHECK(st == CL_E_UNSUPPORTED && strstr(cl_model_error(m), "no algorithm for this shape"),
        "plan with a failing workspace query: %s (%s)", cl_status_name(st), cl_model_error(m));
  float x[B * T * C * H * W], y[B * CL * H * W];
  fill(x, sizeof x / sizeof *x, 1);
  fill(y, sizeof y / sizeof *y, 1);
  cl_host_array xa = seq(x, B, T, C, H, W), ya = state(y, B, CL, H, W);
  double loss;
  st = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, NULL, &loss);
  CHECK(st == CL_E_UNSUPPORTED && strstr(cl_model_error(m), "no algorithm for this shape"),
        "train_step with a failing workspace query: %s (%s)", cl_status_name(st),
        cl_model_error(m));
  m->be->iface = real;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, NULL, &loss) == CL_OK,
        "train_step after the slot is restored: %s", cl_model_error(m));
  cl_model_free(m);
}

int main(void) {
  test_gradients(CL_TARGET_LAST_STATE);
  test_gradients(CL_TARGET_SEQUENCE);
  test_dropout_gradients();
  test_plan_matches();
  test_workspace_query_fails();
  test_call_order();
  test_oom_recovery();
  test_layouts();
  test_schedules_agree();
  test_nonfinite_gradients();
  test_lifetime();
  return ctest_done("test_core_model");
}
