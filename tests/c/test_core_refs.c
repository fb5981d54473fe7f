/*
 * tests/c/test_core_refs.c -- references behind training paths that
 * a test comparing the package with itself in the same mode cannot judge,
 * through the public header on the CPU backend:
 *  - float16 and bfloat16 training against float32 under plain SGD (no
 *    momentum: the update is lr times the gradient, so a gradient off by the
 *    loss scale moves the parameters 65536 times too far, where Adam's
 *    normalised step would hardly show it): the gradients and the parameter
 *    change of one step, and that nothing was skipped;
 *  - gradient accumulation with an uneven last micro-batch (B = 5 in
 *    micro-batches of 3 + 2, 2 + 2 + 1, ...): the gradients and loss of the
 *    same batch without accumulation, for both targets and a horizon;
 *  - clipping by the global norm (torch's clip_grad_norm_, from its
 *    definition and the plain step's gradients);
 *  - a model with non-square kernels saved to a file: the file's own header,
 *    read here without the package's reader, gives each weight the shape
 *    [out, in, kh, kw] (torch's) and the values in torch's order, and a load
 *    gives back the same parameters and outputs;
 *  - cells of two kernels (an input kernel and a different state kernel:
 *    9x9 with 1x1 and peepholes, 3x5 with 5x3 dilated) against PyTorch's
 *    fixtures (tools/make_fixtures_kernels.py): the loss, every gradient
 *    (conv_x.weight, conv_x.bias, conv_h.weight by name) and the fixture's
 *    optimizer steps.
 * Exits nonzero on any failure.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "convlstm.h"
#include "ctest.h" /* CHECK, uniform01, ctest_flat */
#include "fixture.h" /* fx_open, fx_model, fx_tensor */

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAXG (1 << 15)

static float *rand_array(size_t n, double lo, double hi) {
  float *v = malloc(n * sizeof *v);
  for (size_t i = 0; i < n; i++) v[i] = (float)(lo + (hi - lo) * uniform01(NULL));
  return v;
}

static cl_model *model_seeded(const cl_config *c, unsigned long long seed) {
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN];
  CHECK(cl_model_create(c, &m, err, sizeof err) == CL_OK, "create: %s", err);
  ctest_rng = seed;
  if (m) cl_model_init_params(m, uniform01, NULL);
  return m;
}

/* ---- float16 / bfloat16 against float32 under plain SGD ------------- */

static float p0[MAXG], p1[MAXG], g32[MAXG], gh[MAXG], d32[MAXG], dh[MAXG];

/* One SGD step of a fresh model in dtype dt: loss, gradients (unscaled, as
 * the update used them) and the parameter change divided by lr. */
static double sgd_step(cl_dtype dt, const cl_host_array *x, const cl_host_array *y, float *g,
                       float *delta, size_t *n) {
  cl_config c = ctest_config(2, 4, 3, 3, 3, 1, 2);
  c.dtype = dt;
  cl_model *m = model_seeded(&c, 42);
  const double lr = 0.5;
  cl_optim sgd = {.kind = CL_OPTIM_SGD, .lr = lr};
  *n = ctest_flat(m, 0, p0, MAXG);
  double loss = NAN;
  CHECK(cl_model_train_step(m, x, y, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_OK,
        "%s step: %s", cl_dtype_name(dt), cl_model_error(m));
  ctest_flat(m, 1, g, MAXG);
  ctest_flat(m, 0, p1, MAXG);
  for (size_t i = 0; i < *n; i++) delta[i] = (float)(((double)p0[i] - p1[i]) / lr);
  cl_loss_scale ls;
  cl_model_get_loss_scale(m, &ls);
  CHECK(ls.skipped_steps == 0, "%s: the step was skipped (loss scale %g)", cl_dtype_name(dt),
        ls.scale);
  CHECK(cl_model_optimizer_steps(m) == 1, "%s: %lld updates", cl_dtype_name(dt),
        (long long)cl_model_optimizer_steps(m));
  cl_model_free(m);
  return loss;
}

static void test_half_sgd(void) {
  enum { B = 3, T = 4, H = 6, W = 5 };
  ctest_rng = 7;
  float *x = rand_array((size_t)B * T * 2 * H * W, 0, 1);
  float *y = rand_array((size_t)B * T * 3 * H * W, 0, 1);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {B, T, 3, H, W}};
  size_t n;
  double l32 = sgd_step(CL_F32, &xa, &ya, g32, d32, &n);
  CHECK(rel_diff(d32, g32, n) <= 1e-5, "float32: SGD moved by %.2e other than lr * gradient",
        rel_diff(d32, g32, n));
  /* float16 keeps 11 bits, bfloat16 8: activations stored in them put the
   * gradients 3e-5 and 2e-4 from float32's here (tolerances 2e-3, 1e-2); a
   * loss scale not divided out puts them 65536 times too large */
  cl_dtype dts[] = {CL_F16, CL_BF16};
  double tol[] = {2e-3, 1e-2};
  for (int i = 0; i < 2; i++) {
    double lh = sgd_step(dts[i], &xa, &ya, gh, dh, &n);
    double rg = rel_diff(gh, g32, n), rd = rel_diff(dh, g32, n);
    CHECK(fabs(lh - l32) <= 1e-2 * l32, "%s: loss %.7g, float32 %.7g", cl_dtype_name(dts[i]), lh,
          l32);
    CHECK(rg <= tol[i], "%s: gradients %.2e from float32's (tolerance %.0e)",
          cl_dtype_name(dts[i]), rg, tol[i]);
    CHECK(rd <= tol[i], "%s: SGD's parameter change / lr %.2e from float32's gradient",
          cl_dtype_name(dts[i]), rd);
    printf("%s vs float32 under SGD: loss %.6f vs %.6f, gradients %.1e, update %.1e apart\n",
           cl_dtype_name(dts[i]), lh, l32, rg, rd);
  }
  free(x);
  free(y);
}

/* ---- an uneven last micro-batch ------------------------------------- */

static float ga[MAXG], gb[MAXG];

static double accum_step(const cl_config *c, const cl_host_array *x, const cl_host_array *y,
                         cl_target tg, const cl_step_options *o, float *g, size_t *n) {
  cl_model *m = model_seeded(c, 5);
  cl_optim sgd0 = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  double loss = NAN;
  CHECK(cl_model_train_step(m, x, y, tg, &sgd0, o, &loss) == CL_OK, "step: %s",
        cl_model_error(m));
  *n = ctest_flat(m, 1, g, MAXG);
  cl_model_free(m);
  return loss;
}

static void test_uneven_accumulation(void) {
  enum { B = 5, T = 4, H = 5, W = 4, K = 3 };
  cl_config c = ctest_config(2, 3, 2, 3, 1, 1, 2);
  ctest_rng = 11;
  float *x = rand_array((size_t)B * T * 2 * H * W, -1, 1);
  float *yseq = rand_array((size_t)B * T * 2 * H * W, 0, 1);
  float *ylast = rand_array((size_t)B * 2 * H * W, 0, 1);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array ys = {yseq, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array yl = {ylast, CL_HOST_TORCH_F32, 4, {B, 2, H, W, 0}};
  /* a horizon: the loss on the last K steps only, the first ones' share 0;
   * input frames of 2 channels, the last layer's 2 (its forecasts) */
  cl_host_array yk = {yseq, CL_HOST_TORCH_F32, 5, {B, K, 2, H, W}};
  struct {
    const char *what;
    cl_target tg;
    const cl_host_array *y;
    int horizon, free_run;
  } cases[] = {{"last_state", CL_TARGET_LAST_STATE, &yl, 0, 0},
               {"sequence", CL_TARGET_SEQUENCE, &ys, 0, 0},
               {"horizon (teacher forcing)", CL_TARGET_SEQUENCE, &yk, K, 0},
               {"horizon (free running)", CL_TARGET_SEQUENCE, &yk, K, 1}};
  cl_host_array xin = {x, CL_HOST_TORCH_F32, 5, {B, T - K + 1, 2, H, W}};
  for (int i = 0; i < 4; i++) {
    size_t n0, n1;
    cl_step_options o = {0};
    o.horizon = cases[i].horizon;
    o.free_run = cases[i].free_run;
    const cl_host_array *xi = cases[i].free_run ? &xin : &xa;
    double l0 = accum_step(&c, xi, cases[i].y, cases[i].tg, &o, ga, &n0), worst = 0;
    /* micro-batches of 3 + 2, 2 + 2 + 1 and 2 + 2 + 1: each but the even
     * split leaves a last one smaller than the others */
    int ms[] = {2, 3, 4};
    for (int k = 0; k < 3; k++) {
      o.accumulation_steps = ms[k];
      double l1 = accum_step(&c, xi, cases[i].y, cases[i].tg, &o, gb, &n1);
      double r = rel_diff(gb, ga, n0);
      CHECK(n1 == n0 && r <= 1e-5, "%s, B %d in %d micro-batches: gradients %.2e from the whole "
            "batch's", cases[i].what, B, ms[k], r);
      CHECK(fabs(l1 - l0) <= 1e-6 * fabs(l0), "%s, %d micro-batches: loss %.9g, whole batch %.9g",
            cases[i].what, ms[k], l1, l0);
      worst = fmax(worst, r);
    }
    printf("uneven accumulation, %s: gradients within %.1e of the whole batch\n", cases[i].what,
           worst);
  }
  free(x);
  free(yseq);
  free(ylast);
}

/* ---- clipping by the global norm --------------------------------------- */

static float gc0[MAXG], gc1[MAXG], pc0[MAXG], pc1[MAXG];

/* torch's clip_grad_norm_ from its definition: the plain step's gradients
 * g (lr 0) give norm = sqrt(sum g^2), measured here in double; a step with
 * max_grad_norm = norm / 3 and SGD at lr 1 must move the parameters by
 * g * max / (norm + 1e-6), and report the norm; max_grad_norm above the
 * norm leaves the step plain. */
static void test_clipping(void) {
  enum { B = 3, T = 3, H = 5, W = 4 };
  cl_config c = ctest_config(2, 3, 2, 3, 1, 1, 2);
  ctest_rng = 13;
  float *x = rand_array((size_t)B * T * 2 * H * W, -1, 1);
  float *y = rand_array((size_t)B * 2 * H * W, 0, 1);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {B, 2, H, W, 0}};
  size_t n;
  accum_step(&c, &xa, &ya, CL_TARGET_LAST_STATE, NULL, gc0, &n);
  double sum = 0;
  for (size_t i = 0; i < n; i++) sum += (double)gc0[i] * gc0[i];
  const double norm = sqrt(sum);
  for (int k = 0; k < 2; k++) {
    const double max = k == 0 ? norm / 3 : norm * 2;
    cl_model *m = model_seeded(&c, 5); /* accum_step's weights */
    ctest_flat(m, 0, pc0, MAXG);
    cl_optim sgd = {.kind = CL_OPTIM_SGD, .lr = 1.0};
    cl_step_options o = {0};
    o.max_grad_norm = max;
    double loss;
    CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &sgd, &o, &loss) == CL_OK,
          "clipped step: %s", cl_model_error(m));
    ctest_flat(m, 0, pc1, MAXG);
    const double coef = k == 0 ? max / (norm + 1e-6) : 1.0;
    for (size_t i = 0; i < n; i++) gc1[i] = (float)(coef * gc0[i]);
    for (size_t i = 0; i < n; i++) pc1[i] = pc0[i] - pc1[i]; /* lr 1: the step taken */
    double r = rel_diff(pc1, gc1, n), gn = cl_model_grad_norm(m);
    CHECK(r <= 1e-5, "max_grad_norm %s the norm: the step %.2e from g * %.4f", k ? "above" : "below",
          r, coef);
    CHECK(fabs(gn - norm) <= 1e-6 * norm, "grad_norm %.9g, measured here %.9g", gn, norm);
    if (k == 0) printf("clipping to a third of the norm %.5f: the step within %.1e of g * %.4f\n",
                       norm, r, coef);
    cl_model_free(m);
  }
  free(x);
  free(y);
}

/* ---- non-square kernels in a file ------------------------------------ */

/* The file's header, read here: the JSON after the 8-byte length. */
static char *read_header(const char *path, size_t *data_at, FILE **fp) {
  FILE *f = fopen(path, "rb");
  unsigned char len8[8];
  if (!f || fread(len8, 1, 8, f) != 8) {
    if (f) fclose(f);
    return NULL;
  }
  uint64_t len = 0;
  for (int i = 7; i >= 0; i--) len = len << 8 | len8[i];
  char *h = calloc(len + 1, 1);
  if (fread(h, 1, len, f) != len) {
    free(h);
    fclose(f);
    return NULL;
  }
  *data_at = 8 + len;
  *fp = f;
  return h;
}

/* Integers of the JSON array after `"key":` inside the entry of `name`. */
static int json_ints(const char *h, const char *name, const char *key, long long *out, int max) {
  char q[160];
  snprintf(q, sizeof q, "\"%s\"", name);
  const char *s = strstr(h, q);
  if (!s) return -1;
  snprintf(q, sizeof q, "\"%s\"", key);
  s = strstr(s, q);
  if (!s || !(s = strchr(s, '['))) return -1;
  int n = 0;
  s++;
  while (n < max) {
    while (*s == ' ' || *s == ',') s++;
    if (*s == ']') break;
    char *end;
    out[n++] = strtoll(s, &end, 10);
    if (end == s) return -1;
    s = end;
  }
  return n;
}

static void test_nonsquare_file(void) {
  char dir[] = "/tmp/cl_refs_XXXXXX";
  CHECK(mkdtemp(dir) != NULL, "mkdtemp");
  char path[64];
  snprintf(path, sizeof path, "%s/k3x5.safetensors", dir);
  cl_config c = ctest_config(2, 3, 2, 3, 5, 1, 2);
  c.kernel_widths[0] = 5; /* 3 x 5 */
  c.kernel_widths[1] = 1; /* 5 x 1 */
  cl_model *m = model_seeded(&c, 9);
  CHECK(cl_model_save(m, path, NULL, 0, NULL, NULL) == CL_OK, "save: %s", cl_model_error(m));
  size_t data_at = 0;
  FILE *f = NULL;
  char *h = read_header(path, &data_at, &f);
  CHECK(h != NULL, "%s: no header", path);
  const long long want[2][4] = {{12, 5, 3, 5}, {8, 5, 5, 1}};
  for (int l = 0; h && l < 2; l++) {
    char name[64];
    snprintf(name, sizeof name, "cell_list.%d.conv.weight", l);
    long long shape[8], off[2];
    int nd = json_ints(h, name, "shape", shape, 8);
    CHECK(nd == 4 && memcmp(shape, want[l], sizeof want[l]) == 0,
          "%s: the file's shape is [%lld, %lld, %lld, %lld], torch's [%lld, %lld, %lld, %lld]",
          name, shape[0], shape[1], shape[2], shape[3], want[l][0], want[l][1], want[l][2],
          want[l][3]);
    CHECK(json_ints(h, name, "data_offsets", off, 2) == 2, "%s: data_offsets", name);
    size_t n = (size_t)(want[l][0] * want[l][1] * want[l][2] * want[l][3]);
    CHECK((size_t)(off[1] - off[0]) == 4 * n, "%s: %lld bytes for %zu values", name,
          off[1] - off[0], n);
    float *inmodel = malloc(n * sizeof *inmodel), *infile = malloc(n * sizeof *infile);
    cl_model_get_param(m, name, inmodel, n);
    int ok = fseek(f, (long)(data_at + off[0]), SEEK_SET) == 0;
    for (size_t i = 0; ok && i < n; i++) { /* little-endian float32 */
      unsigned char b[4];
      ok = fread(b, 1, 4, f) == 4;
      uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
      memcpy(&infile[i], &u, 4);
    }
    CHECK(ok && memcmp(inmodel, infile, n * sizeof *infile) == 0,
          "%s: the file's values are not the parameters in torch's order", name);
    free(inmodel);
    free(infile);
  }
  if (f) fclose(f);
  free(h);

  /* the package's reader and a loaded model */
  char err[CL_ERRMSG_LEN];
  cl_saved *s = NULL;
  CHECK(cl_saved_read(path, &s, err, sizeof err) == CL_OK, "read: %s", err);
  for (int i = 0; s && i < cl_saved_n_tensors(s); i++) {
    const char *name, *dt;
    int nd;
    int64_t d[8];
    cl_saved_tensor_info(s, i, &name, &dt, &nd, d);
    int l = strcmp(name, "cell_list.1.conv.weight") == 0 ? 1 : 0;
    if (strstr(name, "weight"))
      CHECK(nd == 4 && d[2] == want[l][2] && d[3] == want[l][3], "%s read as kh %lld kw %lld",
            name, (long long)d[2], (long long)d[3]);
  }
  const cl_config *sc = s ? cl_saved_config(s) : NULL;
  CHECK(sc && sc->kernel_sizes[0] == 3 && sc->kernel_widths[0] == 5 && sc->kernel_sizes[1] == 5 &&
            (sc->kernel_widths[1] == 1), "the saved config's kernels");
  cl_saved_free(s);
  cl_model *g = NULL;
  CHECK(cl_model_load(path, NULL, 0, &g, err, sizeof err) == CL_OK, "load: %s", err);
  if (g) {
    size_t n = ctest_flat(m, 0, p0, MAXG);
    CHECK(ctest_flat(g, 0, p1, MAXG) == n && memcmp(p0, p1, n * sizeof *p0) == 0,
          "the loaded parameters differ");
    enum { B = 2, T = 3, H = 6, W = 7 };
    ctest_rng = 3;
    float *x = rand_array((size_t)B * T * 2 * H * W, 0, 1);
    float oa[B * T * 2 * H * W], ob[B * T * 2 * H * W];
    cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
    cl_host_array out = {oa, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
    CHECK(cl_model_forward(m, &xa, 0, NULL) == CL_OK && cl_model_read_output(m, 1, &out) == CL_OK,
          "forward: %s", cl_model_error(m));
    out.data = ob;
    CHECK(cl_model_forward(g, &xa, 0, NULL) == CL_OK && cl_model_read_output(g, 1, &out) == CL_OK,
          "forward of the loaded model: %s", cl_model_error(g));
    CHECK(memcmp(oa, ob, sizeof oa) == 0, "the loaded model's outputs differ");
    free(x);
  }
  cl_model_free(g);
  cl_model_free(m);
  remove(path);
  rmdir(dir);
}

/* ---- two kernels against PyTorch ------------------------------------ */

static void test_two_kernels(const char *dir) {
  fixture f;
  CHECK(fx_open(&f, dir), "%s: no fixture (tools/make_fixtures_kernels.py)", dir);
  cl_model *m = fx_model(&f, 2);
  size_t nx = 0, ny = 0, nl = 0, ns = 0;
  float *x = fx_tensor(&f, "x", &nx), *y = fx_tensor(&f, "y", &ny);
  float *loss_fx = fx_tensor(&f, "loss", &nl);
  int sgd = fx_record(&f, "config", "sgd_lr") != NULL;
  float *steps_fx = fx_tensor(&f, sgd ? "sgd_losses" : "adam_losses", &ns);
  CHECK(m && x && y && loss_fx && steps_fx, "%s: fixture incomplete", dir);
  if (m && x && y && loss_fx && steps_fx) {
    int hid[CL_MAX_LAYERS], L = fx_ints(&f, "hidden_dims", hid, CL_MAX_LAYERS);
    int B = fx_int(&f, "B"), T = fx_int(&f, "T"), H = fx_int(&f, "H"), W = fx_int(&f, "W");
    int seq = fx_is(&f, "target", "sequence");
    cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, fx_int(&f, "input_dim"), H, W}};
    cl_host_array ya = seq ? (cl_host_array){y, CL_HOST_TORCH_F32, 5, {B, T, hid[L - 1], H, W}}
                           : (cl_host_array){y, CL_HOST_TORCH_F32, 4, {B, hid[L - 1], H, W, 0}};
    cl_target tg = seq ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
    cl_optim sgd0 = {.kind = CL_OPTIM_SGD}; /* lr 0: the parameters stay */
    cl_step_options o = {0};
    double loss = NAN;
    CHECK(cl_model_train_step(m, &xa, &ya, tg, &sgd0, &o, &loss) == CL_OK, "%s: %s", dir,
          cl_model_error(m));
    double gap = fx_gap(&f, m, "grad", 1);
    const double loss0 = loss;
    CHECK(fabs(loss - loss_fx[0]) <= 1e-5 * fabs(loss_fx[0]), "%s: loss %.9g, PyTorch %.9g", dir,
          loss, loss_fx[0]);
    CHECK(gap <= 1e-5, "%s: gradients %.2e from PyTorch's", dir, gap);
    const char *lr = fx_record(&f, "config", sgd ? "sgd_lr" : "adam_lr");
    const char *mo = fx_record(&f, "config", "sgd_momentum");
    const char *wd = fx_record(&f, "config", "adam_weight_decay");
    cl_optim opt = {.kind = sgd ? CL_OPTIM_SGD : CL_OPTIM_ADAM, .lr = atof(lr), .beta1 = 0.9,
                    .beta2 = 0.999, .eps = 1e-8, .momentum = sgd ? atof(mo) : 0,
                    .weight_decay = sgd ? 0 : atof(wd)};
    double worst = 0;
    for (size_t i = 0; i < ns; i++) {
      CHECK(cl_model_train_step(m, &xa, &ya, tg, &opt, &o, &loss) == CL_OK, "%s: step %zu: %s",
            dir, i + 1, cl_model_error(m));
      worst = fmax(worst, fabs(loss - steps_fx[i]) / fabs(steps_fx[i]));
    }
    double pgap = fx_gap(&f, m, sgd ? "sgd_params" : "adam_params", 0);
    CHECK(worst <= 1e-5, "%s: optimizer steps' losses %.2e from PyTorch's", dir, worst);
    CHECK(pgap <= 1e-5, "%s: parameters after the steps %.2e from PyTorch's", dir, pgap);
    printf("%s: loss %.7f (PyTorch %.7f), gradients %.1e, %s steps' losses %.1e and parameters "
           "%.1e from PyTorch\n", dir, loss0, loss_fx[0], gap, sgd ? "SGD" : "Adam", worst,
           pgap);
  }
  cl_model_free(m);
  free(x), free(y), free(loss_fx), free(steps_fx);
}

int main(void) {
  test_half_sgd();
  test_uneven_accumulation();
  test_clipping();
  test_nonsquare_file();
  test_two_kernels("tests/testthat/fixtures/kernels/k9_h1");
  test_two_kernels("tests/testthat/fixtures/kernels/k3x5_h5x3");
  return ctest_done("test_core_refs");
}
