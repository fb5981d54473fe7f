/*
 * tests/c/test_cpu_bf16.c -- the CPU backend's bfloat16 convolutions with
 * bfloat16 dot products (AVX512_BF16's vdpbf16ps, float32 sums; cpu_conv.c,
 * cl_cpu_bf16_rows / _dot in cpu_bf16.c), against a double reference of
 * the same bfloat16 inputs: x and dy as stored, the float32 weights rounded
 * to bfloat16 (nearest even, host/half.h) as the kernels round them.
 *
 * Why the bound is tight: a product of two bfloat16 (8-bit significands) is
 * exact in float32, so the only error is the float32 summation's. A float32
 * sum of n terms in any order is within gamma_n = n u / (1 - n u) (u = 2^-24)
 * of sum |term| (Higham, Accuracy and Stability, 4.2); each output is checked
 * against that bound per element, plus for y, stored in bfloat16, one
 * rounding to nearest: half an ulp, at most 2^-8 of the value (8-bit
 * significand), of a sum already off by the float32 bound (counted twice).
 * Weights left in float32 would put each product off by up to 2^-9 of
 * itself: on the small shapes (a few dozen terms) some 100 times the bound
 * on dx, so the test tells the two apart there; the large shapes check the
 * packing and the pairs (an error there is of the size of the result).
 *
 * Where the CPU lacks AVX512_BF16 (or CONVLSTM_BF16_DOT=0) the backend runs
 * float32 products of the unrounded weights instead: then the checks
 * against the rounded reference are skipped and the program says so.
 * A standalone program: one line per check, exit 1 on any failure.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */
/* backend_ref.h is every slot's reference; this test uses the three convolutions' */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "backend_ref.h" /* ref_conv_*: double loops written from backend.h */
#pragma GCC diagnostic pop
#include "host/half.h"       /* cl_f32_to_bf16, cl_bf16_to_f32 */
#include "cpu/cpu_kernels.h" /* cl_cpu_ctx, cl_cpu_bf16_dot_of */
#include "ctest.h"           /* CHECK, uniform01, ctest_done */
#include "fixture.h"         /* fx_open_in, fx_model, fx_tensor, fx_gap */

#include <math.h>
#include <stdlib.h>

static float *xcalloc(size_t n) {
  float *p = calloc(n ? n : 1, sizeof(float));
  if (!p) {
    fprintf(stderr, "test_cpu_bf16: out of memory\n");
    exit(2);
  }
  return p;
}

/* n values in [-1, 1) rounded to bfloat16 (bits[i] their storage), or left
 * in float32 when bits is NULL. */
static float *rand_vals(size_t n, uint16_t *bits) {
  float *p = xcalloc(n);
  for (size_t i = 0; i < n; i++) {
    p[i] = (float)(2.0 * uniform01(NULL) - 1.0);
    if (bits) bits[i] = cl_f32_to_bf16(p[i]), p[i] = cl_bf16_to_f32(bits[i]);
  }
  return p;
}

static float *rounded(const float *v, size_t n) {
  float *p = xcalloc(n);
  for (size_t i = 0; i < n; i++) p[i] = cl_bf16_to_f32(cl_f32_to_bf16(v[i]));
  return p;
}

static float *absv(const float *v, size_t n) {
  float *p = xcalloc(n);
  for (size_t i = 0; i < n; i++) p[i] = fabsf(v[i]);
  return p;
}

/* The worst |got - ref| / bound over n elements (> 1: out of bounds);
 * bound_i = rel |ref_i| + gamma(terms) mag_i. */
static double worst(const float *got, const double *ref, const double *mag, size_t n, int terms,
                    double rel) {
  const double u = ldexp(1.0, -24), gamma = terms * u / (1.0 - terms * u);
  double w = 0.0;
  for (size_t i = 0; i < n; i++) {
    double bound = rel * fabs(ref[i]) + gamma * mag[i] + 1e-30;
    double e = isfinite(got[i]) ? fabs((double)got[i] - ref[i]) / bound : INFINITY;
    if (e > w) w = e;
  }
  return w;
}

typedef struct conv_run {
  float *y, *dx, *dw, *db;
} conv_run;

/* The three calls at shape s (bfloat16 storage) on backend be; dx
 * accumulates into dx0, dw into dw0, as the step does. */
static conv_run run(cl_backend *be, const cl_conv_shape *s, const uint16_t *xb,
                    const uint16_t *dyb, const float *w, const float *b, const float *dx0,
                    const float *dw0, size_t nx, size_t ny, size_t nw) {
  conv_run r = {xcalloc(ny), xcalloc(nx), xcalloc(nw), xcalloc(s->K)};
  uint16_t *yb = calloc(ny ? ny : 1, sizeof(uint16_t));
  size_t ws_bytes = 0;
  void *ws = NULL;
  memcpy(r.dx, dx0, sizeof(float) * nx);
  memcpy(r.dw, dw0, sizeof(float) * nw);
  CHECK(cl_backend_conv_workspace_any(be, s, &ws_bytes) == CL_OK && yb, "workspace size");
  ws = malloc(ws_bytes + 1);
  const struct cl_backend_i *f = be->iface;
  CHECK(f->conv_forward(be, s, xb, w, b, yb, 0, ws) == CL_OK, "forward: %s", be->err);
  CHECK(f->conv_backward_data(be, s, dyb, w, r.dx, 1, ws) == CL_OK, "backward data: %s", be->err);
  CHECK(f->conv_backward_filter(be, s, dyb, xb, r.dw, r.db, ws) == CL_OK, "backward filter: %s",
        be->err);
  for (size_t i = 0; i < ny; i++) r.y[i] = cl_bf16_to_f32(yb[i]);
  free(yb), free(ws);
  return r;
}

static void run_free(conv_run *r) { free(r->y), free(r->dx), free(r->dw), free(r->db); }

static double max_diff(const float *a, const float *b, size_t n) {
  double m = 0.0;
  for (size_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
  return m;
}

/* One shape on a backend of `threads` threads: the bfloat16 path against the
 * rounded reference, and against the float32 path (CONVLSTM_BF16_DOT=0). */
static void check_shape(cl_conv_shape s, int threads) {
  s.dtype = CL_BF16;
  const int G = cl_conv_groups(&s);
  const size_t kk = (size_t)s.kh * s.kw, P = (size_t)s.H * s.W;
  const size_t nx = (size_t)s.N * s.C * P, ny = (size_t)s.N * s.K * P,
               nw = (size_t)s.K * (s.C / G) * kk;
  uint16_t *xb = malloc(sizeof(uint16_t) * nx), *dyb = malloc(sizeof(uint16_t) * ny);
  float *x = rand_vals(nx, xb), *dy = rand_vals(ny, dyb), *w = rand_vals(nw, NULL);
  float *b = rand_vals(s.K, NULL), *dx0 = rand_vals(nx, NULL), *dw0 = rand_vals(nw, NULL);
  float *wr = rounded(w, nw), *zb = xcalloc(s.K), *zdx = xcalloc(nx), *zdw = xcalloc(nw);
  double *ry = malloc(sizeof(double) * ny), *rdx = malloc(sizeof(double) * nx);
  double *rdw = malloc(sizeof(double) * nw), *rdb = malloc(sizeof(double) * s.K);
  double *my = malloc(sizeof(double) * ny), *mdx = malloc(sizeof(double) * nx);
  double *mdw = malloc(sizeof(double) * nw), *mdb = malloc(sizeof(double) * s.K);
  /* the reference and, from absolute values, each output's sum |term| */
  ref_conv_forward(&s, x, wr, b, NULL, ry);
  ref_conv_backward_data(&s, dy, wr, dx0, rdx);
  ref_conv_backward_filter(&s, dy, x, dw0, zb, rdw, rdb);
  float *ax = absv(x, nx), *ady = absv(dy, ny), *aw = absv(wr, nw), *ab = absv(b, s.K);
  float *adx0 = absv(dx0, nx), *adw0 = absv(dw0, nw);
  ref_conv_forward(&s, ax, aw, ab, NULL, my);
  ref_conv_backward_data(&s, ady, aw, adx0, mdx);
  ref_conv_backward_filter(&s, ady, ax, adw0, zb, mdw, mdb);

  cl_backend *be = NULL;
  CHECK(cl_backend_cpu_create(threads, &be) == CL_OK, "cpu backend");
  /* the kernels under test: Winograd (cpu_winograd.c, float32 transforms of
   * any storage) would take the 48 -> 192 shape under the default rule */
  ((cl_cpu_ctx *)be->context)->conv_algo = 1;
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_of(be);
  const int dot = cl_cpu_bf16_dot_of(kind);
  conv_run got = run(be, &s, xb, dyb, w, b, dx0, dw0, nx, ny, nw);
  setenv("CONVLSTM_BF16_DOT", "0", 1);
  conv_run f32 = run(be, &s, xb, dyb, w, b, dx0, dw0, nx, ny, nw);
  setenv("CONVLSTM_BF16_DOT", "1", 1);
  char what[160];
  snprintf(what, sizeof what, "N%d C%d K%d %dx%d k%dx%d d%dx%d G%d t%d", s.N, s.C, s.K, s.H, s.W,
           s.kh, s.kw, s.dh, s.dw, G, threads);
  /* terms per output: C/G kk products and the bias or dx0 / dw0 addend;
   * dw sums N H W products per image's partial, then across threads */
  const int ty = 2 * ((int)(s.C / G * kk) + 2), tdx = (int)(s.K / G * kk) + 2,
            tdw = (int)(s.N * P) + threads + 2;
  if (dot) {
    double ey = worst(got.y, ry, my, ny, ty, ldexp(1.0, -8));
    double edx = worst(got.dx, rdx, mdx, nx, tdx, 0.0);
    double edw = worst(got.dw, rdw, mdw, nw, tdw, 0.0);
    double edb = worst(got.db, rdb, mdb, s.K, tdw, 0.0);
    CHECK(ey <= 1.0, "%s forward: %.3g of the bound (float32 sum, one bfloat16 rounding)", what, ey);
    CHECK(edx <= 1.0, "%s backward data: %.3g of the float32 sum's bound", what, edx);
    CHECK(edw <= 1.0, "%s backward filter: %.3g of the float32 sum's bound", what, edw);
    CHECK(edb <= 1.0, "%s bias gradient: %.3g of the float32 sum's bound", what, edb);
    printf("ok   %s: y %.2f, dx %.2f, dw %.2f, db %.2f of the bound\n", what, ey, edx, edw, edb);
    /* the bfloat16 path ran: its dx (from rounded weights) is not the
     * float32 path's (from the float32 weights) */
    CHECK(max_diff(got.dx, f32.dx, nx) > 0.0, "%s: CONVLSTM_BF16_DOT=0 changes dx", what);
  } else {
    printf("skip %s: no AVX512_BF16 here (or CONVLSTM_BF16_DOT=0): float32 path only\n", what);
    CHECK(max_diff(got.dx, f32.dx, nx) == 0.0, "%s: one float32 path either way", what);
  }
  run_free(&got), run_free(&f32);
  be->iface->destroy(be);
  free(xb), free(dyb), free(x), free(dy), free(w), free(b), free(dx0), free(dw0), free(wr);
  free(zb), free(zdx), free(zdw), free(ry), free(rdx), free(rdw), free(rdb), free(my), free(mdx);
  free(mdw), free(mdb), free(ax), free(ady), free(aw), free(ab), free(adx0), free(adw0);
}

/* One bfloat16 training step against PyTorch's bfloat16 autocast
 * (tools/make_fixtures_bf16.py; tests/testthat/fixtures/bf16/): the model
 * in bfloat16 storage, SGD with lr 0 (the gradients are the step's result,
 * the parameters stay), loss and gradients against autocast's, and against
 * PyTorch's float32 step of the same weights and data.
 * Tolerance: the two runs round to bfloat16 (8-bit significands: 2^-9
 * relative a rounding) in different places (autocast rounds each conv's
 * output and each elementwise op's; convlstm rounds the stored gates, c, h
 * and computes the cell in float32), so neither is the other's reference:
 * each is bfloat16's distance from float32, which the fixture measures
 * (autocast's gradients against float32, `gap`). Two such errors, apart,
 * are within 2 gap, and 3 gap leaves room for their not being independent
 * of the data; a float32 weight in a product where bfloat16 is meant, or a
 * lost pair, is far smaller or far larger. The loss (a mean of squares,
 * which averages the rounding out) within 1e-3. */
static void check_fixture_step(int threads, int dot_off) {
  if (dot_off) setenv("CONVLSTM_BF16_DOT", "0", 1);
  fixture f;
  if (!fx_open_in(&f, "bf16", "stack_k5_k3")) {
    CHECK(0, "fixture bf16/stack_k5_k3 not found (run from the repository root)");
    return;
  }
  const int B = fx_int(&f, "B"), T = fx_int(&f, "T"), H = fx_int(&f, "H"), W = fx_int(&f, "W");
  const int C = fx_int(&f, "input_dim");
  int hidden[CL_MAX_LAYERS];
  const int L = fx_ints(&f, "hidden_dims", hidden, CL_MAX_LAYERS);
  size_t nx, ny, nl, nl32;
  float *x = fx_tensor(&f, "x", &nx), *y = fx_tensor(&f, "y", &ny);
  float *loss_fx = fx_tensor(&f, "loss", &nl), *loss32 = fx_tensor(&f, "loss32", &nl32);
  cl_model *m = fx_model(&f, threads);
  const int ok = x && y && loss_fx && loss32 && m;
  CHECK(ok, "%s: fixture incomplete", f.dir);
  if (!ok) return;
  CHECK(cl_model_set_dtype(m, CL_BF16) == CL_OK, "bfloat16 storage: %s", cl_model_error(m));
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {B, hidden[L - 1], H, W, 0}};
  cl_optim sgd0 = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* lr 0: the parameters stay */
  cl_step_options o;
  memset(&o, 0, sizeof o);
  double loss = NAN;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &sgd0, &o, &loss) == CL_OK,
        "bfloat16 step: %s", cl_model_error(m));
  const double to_fx = fx_gap(&f, m, "grad", 1), to_32 = fx_gap(&f, m, "grad32", 1);
  /* autocast's own distance from float32, from the fixture's two runs */
  double gap = 0;
  for (int i = 0; i < cl_model_n_tensors(m); i++) {
    const char *name;
    int nd, d[4];
    cl_model_tensor_info(m, i, &name, &nd, d);
    char k1[128], k2[128];
    snprintf(k1, sizeof k1, "grad/%s", name), snprintf(k2, sizeof k2, "grad32/%s", name);
    size_t n1 = 0, n2 = 0;
    float *g1 = fx_tensor(&f, k1, &n1), *g2 = fx_tensor(&f, k2, &n2);
    if (g1 && g2 && n1 == n2) gap = fmax(gap, rel_diff(g1, g2, n1));
    free(g1), free(g2);
  }
  const double dl = fabs(loss - loss_fx[0]) / fabs(loss_fx[0]);
  printf("bf16 step t%d%s: gradients %.2e from autocast's, %.2e from float32's (autocast from "
         "float32: %.2e); loss %.3e from autocast's\n",
         threads, dot_off ? " (CONVLSTM_BF16_DOT=0)" : "", to_fx, to_32, gap, dl);
  CHECK(gap > 1e-4 && gap < 5e-2, "the fixture's bfloat16 and float32 runs differ as bfloat16 "
        "does (%.2e)", gap);
  CHECK(to_fx <= 3 * gap, "t%d: gradients %.2e from autocast's, over 3 x %.2e", threads, to_fx,
        gap);
  CHECK(dl <= 1e-3, "t%d: loss %.9g, autocast %.9g", threads, loss, loss_fx[0]);
  cl_model_free(m);
  free(x), free(y), free(loss_fx), free(loss32);
  setenv("CONVLSTM_BF16_DOT", "1", 1);
}

/* Whether bfloat16 storage runs the dot products by default: where the
 * CPU has them and vdpbf16ps does at least the float32 FMA's flops a second
 * (on a core that runs it at half rate the bfloat16 step took 2.8x the
 * float32 kernels' time); CONVLSTM_BF16_DOT=0 and =1 force either way. */
static void check_dot_rule(void) {
  CHECK(!cl_cpu_bf16_dot_pays(78.0, 163.0), "a half-rate vdpbf16ps (78 against 163 GFLOP/s) does not pay");
  CHECK(cl_cpu_bf16_dot_pays(300.0, 160.0) && cl_cpu_bf16_dot_pays(160.0, 160.0),
        "a full-rate vdpbf16ps pays");
  CHECK(!cl_cpu_bf16_dot_pays(159.9, 160.0), "just below the FMA's rate does not pay");
  CHECK(!cl_cpu_bf16_dot_pays(0.0, 0.0), "no rates, no dot products");
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_best_internal();
  double dot, fma, dot2, fma2;
  const int has = cl_cpu_bf16_rates(&dot, &fma);
  cl_cpu_bf16_rates(&dot2, &fma2);
  CHECK(dot == dot2 && fma == fma2, "the rates are measured once per process");
  CHECK(has ? dot > 1.0 && fma > 1.0 : dot == 0.0 && fma == 0.0,
        "rates: %.1f GFLOP/s vdpbf16ps, %.1f FMA (AVX512_BF16: %s)", dot, fma, has ? "yes" : "no");
  unsetenv("CONVLSTM_BF16_DOT");
  const int by_default = cl_cpu_bf16_dot_of(kind);
  CHECK(by_default == (has && cl_cpu_bf16_dot_pays(dot, fma)),
        "by default the dot products run where they pay: %s", by_default ? "yes" : "no");
  setenv("CONVLSTM_BF16_DOT", "0", 1);
  CHECK(!cl_cpu_bf16_dot_of(kind), "CONVLSTM_BF16_DOT=0 forces the float32 kernels");
  setenv("CONVLSTM_BF16_DOT", "1", 1);
  CHECK(cl_cpu_bf16_dot_of(kind) == has, "CONVLSTM_BF16_DOT=1 forces the dot products where the CPU "
        "has them");
  CHECK(!cl_cpu_bf16_dot_of(CL_CPU_GEMM_AVX2) && !cl_cpu_bf16_dot_of(CL_CPU_GEMM_GENERIC),
        "never on an AVX2 or portable backend");
  unsetenv("CONVLSTM_BF16_DOT");
}

int main(void) {
  /* N C H W K kh kw dh dw dtype groups: odd sizes (odd C kk: a lone last
   * pair), the step's 5x5 shapes at 16x16 (as issue #39's benchmarks),
   * dilation, groups (per-gate dropout) */
  static const cl_conv_shape shapes[] = {
      {2, 3, 5, 7, 4, 3, 3, 1, 1, CL_BF16, 0, CL_NCHW, 0},
      {3, 17, 11, 13, 9, 1, 1, 1, 1, CL_BF16, 0, CL_NCHW, 0},
      {2, 16, 16, 16, 192, 5, 5, 1, 1, CL_BF16, 0, CL_NCHW, 0},
      {1, 48, 16, 16, 192, 5, 5, 1, 1, CL_BF16, 0, CL_NCHW, 0},
      {2, 20, 9, 8, 24, 5, 3, 1, 3, CL_BF16, 0, CL_NCHW, 0},
      {3, 8, 5, 7, 12, 3, 3, 1, 1, CL_BF16, 4, CL_NCHW, 0},
      {4, 1, 24, 24, 64, 3, 3, 1, 1, CL_BF16, 0, CL_NCHW, 0},
  };
  check_dot_rule();
  /* the kernels are checked wherever the CPU has them, paying or not */
  setenv("CONVLSTM_BF16_DOT", "1", 1);
  printf("bfloat16 dot products (AVX512_BF16) on this CPU: %s\n",
         cl_cpu_bf16_dot_of(cl_cpu_gemm_best_internal()) ? "yes" : "no");
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
    for (int t = 1; t <= 2; t++) check_shape(shapes[i], t);
  for (int t = 1; t <= 2; t++) check_fixture_step(t, 0);
  check_fixture_step(1, 1); /* the float32 kernels' bfloat16 step: the fallback's */
  return ctest_done("test_cpu_bf16");
}
