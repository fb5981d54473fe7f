/*
 * tests/c/test_core_data.c -- data sets on the device (core/data.c) through
 * the public header on the CPU backend: a training step on rows of a data
 * set equals, bit for bit, cl_model_train_step on the same rows as host
 * arrays (plain, checkpoint, tbptt, accumulation, float16 and bfloat16, both
 * targets, both host layouts, shuffled and repeated rows), over several
 * steps of Adam, and so for an encoder-forecaster's (patched frames); bad rows, shapes, models and dtypes are refused; a data set
 * over memory_limit is an OOM that leaves the model usable; freeing in
 * either order returns every byte. Also the CPU backend's gather_rows slot
 * against a plain loop. Exits nonzero on any failure.
 */
#include "convlstm.h"
#include "core/backend.h" /* the gather_rows slot, cl_backend_cpu_create */
#include "ctest.h"        /* CHECK, uniform01, ctest_model, ctest_flat */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 7, T = 5, C = 2, H = 5, W = 4, L = 2 };

static cl_config config(void) {
  return ctest_config(C, 3, 2, 3, 1, 1, 2); /* L = 2 layers */
}

#define CY 2 /* the last layer's hidden */

/* The whole set in torch layout (float, row-major [N, T, C, H, W]) and the
 * same values in R's (double, column-major), so both packers are covered. */
static float xs[N * T * C * H * W], ys_seq[N * T * CY * H * W], ys_last[N * CY * H * W];
static double xr[N * T * C * H * W], yr_seq[N * T * CY * H * W], yr_last[N * CY * H * W];

static void fill_set(void) {
  int dx[5] = {N, T, C, H, W}, dys[5] = {N, T, CY, H, W}, dyl[4] = {N, CY, H, W};
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) {
    xs[i] = (float)(2 * uniform01(NULL) - 1);
    xr[ctest_r_index(i, dx, 5)] = xs[i];
  }
  for (size_t i = 0; i < sizeof ys_seq / sizeof ys_seq[0]; i++) {
    ys_seq[i] = (float)uniform01(NULL);
    yr_seq[ctest_r_index(i, dys, 5)] = ys_seq[i];
  }
  for (size_t i = 0; i < sizeof ys_last / sizeof ys_last[0]; i++) {
    ys_last[i] = (float)uniform01(NULL);
    yr_last[ctest_r_index(i, dyl, 4)] = ys_last[i];
  }
}

static cl_host_array whole_x(int r_layout) {
  cl_host_array a = {r_layout ? (void *)xr : (void *)xs, r_layout ? CL_HOST_R_F64 : CL_HOST_TORCH_F32,
                     5, {N, T, C, H, W}};
  return a;
}

static cl_host_array whole_y(cl_target tg, int r_layout) {
  cl_host_array a;
  a.format = r_layout ? CL_HOST_R_F64 : CL_HOST_TORCH_F32;
  if (tg == CL_TARGET_SEQUENCE) {
    a.data = r_layout ? (void *)yr_seq : (void *)ys_seq;
    a.ndim = 5;
    int d[5] = {N, T, CY, H, W};
    memcpy(a.dims, d, sizeof d);
  } else {
    a.data = r_layout ? (void *)yr_last : (void *)ys_last;
    a.ndim = 4;
    int d[5] = {N, CY, H, W, 0};
    memcpy(a.dims, d, sizeof d);
  }
  return a;
}

/* Rows idx of the torch-layout set as new host arrays (what a caller
 * without data sets slices out per batch). */
static void slice(const int *idx, int n, cl_target tg, float **bx, float **by,
                  cl_host_array *ax, cl_host_array *ay) {
  size_t rx = (size_t)T * C * H * W;
  size_t ry = tg == CL_TARGET_SEQUENCE ? (size_t)T * CY * H * W : (size_t)CY * H * W;
  const float *ysrc = tg == CL_TARGET_SEQUENCE ? ys_seq : ys_last;
  *bx = malloc((size_t)n * rx * sizeof(float));
  *by = malloc((size_t)n * ry * sizeof(float));
  for (int j = 0; j < n; j++) {
    memcpy(*bx + j * rx, xs + (size_t)idx[j] * rx, rx * sizeof(float));
    memcpy(*by + j * ry, ysrc + (size_t)idx[j] * ry, ry * sizeof(float));
  }
  *ax = (cl_host_array){*bx, CL_HOST_TORCH_F32, 5, {n, T, C, H, W}};
  if (tg == CL_TARGET_SEQUENCE)
    *ay = (cl_host_array){*by, CL_HOST_TORCH_F32, 5, {n, T, CY, H, W}};
  else
    *ay = (cl_host_array){*by, CL_HOST_TORCH_F32, 4, {n, CY, H, W, 0}};
}

static cl_model *new_model(cl_dtype dt, size_t limit) {
  cl_config c = config();
  c.dtype = dt;
  c.memory_limit = limit;
  ctest_rng = 12345; /* the same parameters in every model of this file */
  return ctest_model(&c);
}

static float pa[1 << 12], pb[1 << 12];

/* Three Adam steps on the rows of each of `batches`, host arrays against the
 * data set: losses, gradients and parameters must be identical. */
static void compare_paths(const char *what, cl_dtype dt, cl_target tg, const cl_step_options *o,
                          int r_layout, const int *const *batches, const int *sizes, int nbatch) {
  cl_model *ma = new_model(dt, 0), *mb = new_model(dt, 0);
  cl_host_array x = whole_x(r_layout), y = whole_y(tg, r_layout);
  cl_data *d = NULL;
  size_t planned = cl_data_bytes_for(mb, x.dims[0], x.dims[1], x.dims[3], x.dims[4], tg);
  cl_mem_stats before, after;
  cl_model_memory_stats(mb, &before);
  cl_status s = cl_data_create(mb, &x, &y, tg, &d);
  CHECK(s == CL_OK && d != NULL, "%s: cl_data_create: %s", what, cl_model_error(mb));
  cl_model_memory_stats(mb, &after);
  size_t taken = after.current[CL_MEM_DATA] - before.current[CL_MEM_DATA];
  CHECK(planned == taken && taken > cl_data_bytes(d),
        "%s: cl_data_bytes_for said %zu, the data set and its index buffer took %zu", what, planned,
        taken);
  CHECK(cl_data_bytes_for(mb, x.dims[0], x.dims[1], x.dims[3], x.dims[4], tg) ==
            cl_data_bytes(d),
        "%s: a second data set of this size would not grow the index buffer", what);
  cl_optim adam = {CL_OPTIM_ADAM, 0.01, 0.9, 0.999, 1e-8, 0, 0.001, 0, 0, 0};
  int same = 1;
  for (int step = 0; step < 3 && d; step++) {
    for (int k = 0; k < nbatch; k++) {
      float *bx, *by;
      cl_host_array ax, ay;
      slice(batches[k], sizes[k], tg, &bx, &by, &ax, &ay);
      double la = NAN, lb = NAN;
      cl_status sa = cl_model_train_step(ma, &ax, &ay, tg, &adam, o, &la);
      cl_status sb = cl_model_train_step_data(mb, d, batches[k], sizes[k], &adam, o, &lb);
      free(bx);
      free(by);
      CHECK(sa == CL_OK, "%s: train_step: %s", what, cl_model_error(ma));
      CHECK(sb == CL_OK, "%s: train_step_data: %s", what, cl_model_error(mb));
      CHECK(la == lb, "%s: step %d batch %d: loss %.17g (host) vs %.17g (data)", what, step, k, la,
            lb);
      size_t n = ctest_flat(ma, 1, pa, sizeof pa / sizeof *pa);
      ctest_flat(mb, 1, pb, sizeof pb / sizeof *pb);
      if (memcmp(pa, pb, n * sizeof(float)) != 0) same = 0;
      ctest_flat(ma, 0, pa, sizeof pa / sizeof *pa);
      ctest_flat(mb, 0, pb, sizeof pb / sizeof *pb);
      if (memcmp(pa, pb, n * sizeof(float)) != 0) same = 0;
    }
  }
  CHECK(same, "%s: gradients or parameters differ between host arrays and the data set", what);
  cl_loss_scale sa, sb;
  cl_model_get_loss_scale(ma, &sa);
  cl_model_get_loss_scale(mb, &sb);
  CHECK(sa.scale == sb.scale && sa.skipped_steps == sb.skipped_steps, "%s: loss scales differ",
        what);
  printf("%-44s identical over %d steps\n", what, 3 * nbatch);
  cl_model_free(ma);
  cl_model_free(mb); /* frees d too */
}

static void test_identical(void) {
  static const int all[N] = {0, 1, 2, 3, 4, 5, 6}, shuffled[4] = {3, 0, 6, 2},
                   repeated[9] = {1, 1, 5, 1, 0, 6, 6, 2, 3}, one[1] = {4};
  const int *batches[4] = {shuffled, repeated, all, one};
  int sizes[4] = {4, 9, N, 1};
  char what[96];
  for (int tg = 0; tg < 2; tg++)
    for (int opt = 0; opt < CTEST_STEP_CASES; opt++) {
      cl_step_options o;
      cl_dtype dt;
      const char *name = ctest_step_case(opt, &o, &dt);
      /* accumulation needs a sequence per micro-batch: leave out the batch of one */
      int nb = o.accumulation_steps > 1 ? 3 : 4;
      snprintf(what, sizeof what, "%s, %s", name, tg ? "sequence" : "last_state");
      compare_paths(what, dt, (cl_target)tg, &o, 0, batches, sizes, nb);
    }
  /* R's layout goes through the other packer; the data set must hold the same values */
  compare_paths("plain, last_state, R layout", CL_F32, CL_TARGET_LAST_STATE, NULL, 1, batches,
                sizes, 4);
  compare_paths("tbptt 3, sequence, R layout", CL_F32, CL_TARGET_SEQUENCE,
                &(cl_step_options){.tbptt = 3}, 1, batches, sizes, 4);
}

static size_t data_bytes(cl_model *m) {
  cl_mem_stats s;
  cl_model_memory_stats(m, &s);
  return s.current[CL_MEM_DATA];
}

static void test_refused(void) {
  cl_model *m = new_model(CL_F32, 0), *other = new_model(CL_F32, 0);
  cl_host_array x = whole_x(0), y = whole_y(CL_TARGET_LAST_STATE, 0);
  cl_data *d = NULL;
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0, 0, 0, 0};
  double loss;

  cl_host_array bad = x;
  bad.dims[2] = C + 1;
  CHECK(cl_data_create(m, &bad, &y, CL_TARGET_LAST_STATE, &d) == CL_E_INVALID && !d,
        "x with the wrong channels is refused");
  CHECK(strstr(cl_model_error(m), "channels") != NULL, "message: %s", cl_model_error(m));
  CHECK(cl_data_create(m, &x, &y, CL_TARGET_SEQUENCE, &d) == CL_E_INVALID && !d,
        "y of the last state for target sequence is refused");
  bad = y;
  bad.dims[0] = N - 1;
  CHECK(cl_data_create(m, &x, &bad, CL_TARGET_LAST_STATE, &d) == CL_E_INVALID && !d,
        "y with other rows than x is refused");
  CHECK(data_bytes(m) == 0 && cl_data_alive() == 0, "refused data sets hold nothing");

  CHECK(cl_data_create(m, &x, &y, CL_TARGET_LAST_STATE, &d) == CL_OK, "create: %s",
        cl_model_error(m));
  size_t want = (size_t)N * T * C * H * W * 4 + (size_t)N * CY * H * W * 4;
  CHECK(cl_data_bytes(d) == want, "data bytes %zu, want %zu", cl_data_bytes(d), want);
  CHECK(data_bytes(m) == want + N * sizeof(int), "memory_stats data %zu, want %zu", data_bytes(m),
        want + N * sizeof(int));
  int ok_rows[2] = {0, 6}, neg[2] = {0, -1}, high[2] = {N, 0};
  CHECK(cl_model_train_step_data(m, d, neg, 2, &sgd, NULL, &loss) == CL_E_INVALID,
        "row -1 is refused");
  CHECK(strstr(cl_model_error(m), "outside") != NULL, "message: %s", cl_model_error(m));
  CHECK(cl_model_train_step_data(m, d, high, 2, &sgd, NULL, &loss) == CL_E_INVALID,
        "row N is refused");
  CHECK(cl_model_train_step_data(m, d, ok_rows, 0, &sgd, NULL, &loss) == CL_E_INVALID,
        "no rows is refused");
  CHECK(cl_model_train_step_data(other, d, ok_rows, 2, &sgd, NULL, &loss) == CL_E_INVALID,
        "another model's data set is refused");
  CHECK(strstr(cl_model_error(other), "another model") != NULL, "message: %s",
        cl_model_error(other));
  cl_step_options o = {0};
  o.accumulation_steps = 3;
  CHECK(cl_model_train_step_data(m, d, ok_rows, 2, &sgd, &o, &loss) == CL_E_INVALID,
        "more micro-batches than rows is refused");
  CHECK(cl_model_train_step_data(m, d, ok_rows, 2, &sgd, NULL, &loss) == CL_OK,
        "a good step after refused ones: %s", cl_model_error(m));
  CHECK(cl_model_set_dtype(m, CL_F16) == CL_OK, "set_dtype");
  CHECK(cl_model_train_step_data(m, d, ok_rows, 2, &sgd, NULL, &loss) == CL_E_STATE,
        "a data set of another dtype is refused");
  CHECK(strstr(cl_model_error(m), "float32") != NULL, "message: %s", cl_model_error(m));
  cl_model_set_dtype(m, CL_F32);
  CHECK(cl_model_train_step_data(m, d, ok_rows, 2, &sgd, NULL, &loss) == CL_OK,
        "the dtype back: %s", cl_model_error(m));
  /* empty_cache gives back the step, not the data set */
  cl_model_empty_cache(m);
  CHECK(data_bytes(m) == want + N * sizeof(int), "empty_cache leaves the data set");
  cl_data_free(d);
  CHECK(data_bytes(m) == 0 && cl_data_alive() == 0, "cl_data_free returns every byte (%zu left)",
        data_bytes(m));
  cl_data_free(NULL);
  cl_model_free(m);
  cl_model_free(other);
}

static void test_oom(void) {
  /* room for the parameters and a little: the data set cannot fit */
  cl_model *m = new_model(CL_F32, 0);
  cl_host_array x = whole_x(0), y = whole_y(CL_TARGET_SEQUENCE, 0);
  cl_data *d = NULL;
  cl_mem_stats before, after;
  cl_model_memory_stats(m, &before);
  cl_model_set_memory_limit(m, before.reserved + 1024);
  cl_status s = cl_data_create(m, &x, &y, CL_TARGET_SEQUENCE, &d);
  CHECK(s == CL_E_OOM && d == NULL, "data set over memory_limit: %s", cl_status_name(s));
  CHECK(strstr(cl_model_error(m), "tried to allocate") != NULL, "message: %s", cl_model_error(m));
  printf("over memory_limit: %s\n", cl_model_error(m));
  cl_model_memory_stats(m, &after);
  CHECK(after.allocated == before.allocated && after.current[CL_MEM_DATA] == 0,
        "a failed data set holds nothing");
  CHECK(cl_data_alive() == 0, "no data set alive");
  /* the model still trains on host arrays of a small batch */
  cl_model_set_memory_limit(m, 0);
  float *bx, *by;
  cl_host_array ax, ay;
  int rows[2] = {1, 2};
  slice(rows, 2, CL_TARGET_SEQUENCE, &bx, &by, &ax, &ay);
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0, 0, 0, 0};
  double loss = NAN;
  CHECK(cl_model_train_step(m, &ax, &ay, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_OK &&
            isfinite(loss),
        "train_step after the OOM: %s", cl_model_error(m));
  free(bx);
  free(by);
  /* a limit that admits the data set but not the step: the step is the OOM */
  cl_model_empty_cache(m);
  cl_model_memory_stats(m, &before);
  size_t need = (size_t)N * T * (C + CY) * H * W * 4 + N * sizeof(int);
  cl_model_set_memory_limit(m, before.reserved + need + 64);
  CHECK(cl_data_create(m, &x, &y, CL_TARGET_SEQUENCE, &d) == CL_OK, "a data set that fits: %s",
        cl_model_error(m));
  int all[N] = {0, 1, 2, 3, 4, 5, 6};
  s = cl_model_train_step_data(m, d, all, N, &sgd, NULL, &loss);
  CHECK(s == CL_E_OOM, "a step beyond the limit: %s", cl_status_name(s));
  cl_model_set_memory_limit(m, 0);
  CHECK(cl_model_train_step_data(m, d, all, N, &sgd, NULL, &loss) == CL_OK,
        "the same step without the limit: %s", cl_model_error(m));
  cl_model_free(m);
  CHECK(cl_data_alive() == 0, "cl_model_free freed the data set");
}

static void test_free_order(void) {
  cl_host_array x = whole_x(1), y = whole_y(CL_TARGET_LAST_STATE, 1);
  int alive = cl_models_alive();
  for (int order = 0; order < 2; order++) {
    cl_model *m = new_model(CL_F32, 0);
    cl_data *d1 = NULL, *d2 = NULL, *d3 = NULL;
    CHECK(cl_data_create(m, &x, &y, CL_TARGET_LAST_STATE, &d1) == CL_OK, "d1");
    CHECK(cl_data_create(m, &x, &y, CL_TARGET_LAST_STATE, &d2) == CL_OK, "d2");
    CHECK(cl_data_create(m, &x, &y, CL_TARGET_LAST_STATE, &d3) == CL_OK, "d3");
    CHECK(cl_data_alive() == 3, "three data sets alive");
    int rep[12] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 6};
    cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0, 0, 0, 0};
    double loss;
    CHECK(cl_model_train_step_data(m, d2, rep, 12, &sgd, NULL, &loss) == CL_OK,
          "12 rows of 7 (the index grows): %s", cl_model_error(m));
    cl_data_free(d2); /* the middle of the list */
    if (order == 0) {
      cl_data_free(d1);
      cl_data_free(d3);
      cl_model_empty_cache(m); /* the step's own x is data too */
      CHECK(data_bytes(m) == 0, "data first: every byte back (%zu left)", data_bytes(m));
    }
    cl_model_free(m); /* order 1: frees d1 and d3 */
    CHECK(cl_data_alive() == 0, "order %d: no data set alive", order);
  }
  CHECK(cl_models_alive() == alive, "no model alive");
}

/* The CPU slot against a plain loop: odd row sizes, repeated rows, a window
 * of steps, and a size large enough for the threaded path. */
static void test_gather_slot(void) {
  cl_backend *be = NULL;
  CHECK(cl_backend_cpu_create(2, &be) == CL_OK, "cpu backend");
  if (!be) return;
  CHECK(be->iface->gather_rows != NULL, "the CPU backend has gather_rows");
  const size_t rbs[3] = {1, 6, 32768 + 4}; /* the last over the threaded size */
  for (int c = 0; c < 3; c++) {
    int Nn = 9, Tt = 7, t0 = 2, nt = 4, nb = 11;
    size_t rb = rbs[c];
    int idx[11] = {8, 0, 3, 3, 7, 1, 8, 2, 5, 5, 4};
    unsigned char *src = malloc((size_t)Tt * Nn * rb), *got = malloc((size_t)nt * nb * rb),
                  *want = malloc((size_t)nt * nb * rb);
    for (size_t i = 0; i < (size_t)Tt * Nn * rb; i++) src[i] = (unsigned char)(uniform01(NULL) * 256);
    for (int t = 0; t < nt; t++)
      for (int j = 0; j < nb; j++)
        memcpy(want + ((size_t)t * nb + j) * rb, src + ((size_t)(t0 + t) * Nn + idx[j]) * rb, rb);
    memset(got, 0xAB, (size_t)nt * nb * rb);
    CHECK(be->iface->gather_rows(be, got, src, idx, nb, Nn, t0, nt, rb) == CL_OK, "gather");
    CHECK(memcmp(got, want, (size_t)nt * nb * rb) == 0, "gather of %zu-byte rows", rb);
    free(src);
    free(got);
    free(want);
  }
  be->iface->destroy(be);
}

/* An encoder-forecaster's data set (issue 34): x [NF, TF, 2, 4, 6] and its KF
 * frames to forecast, stored patched (2 x 2); a step on its rows equals the
 * step on the same rows as host arrays, bit for bit, in float32 and float16,
 * with accumulation; a data set of last states is refused. */
enum { NF = 5, TF = 3, KF = 4, CF = 2, HF = 4, WF = 6 };
static float fxs[NF * TF * CF * HF * WF], fys[NF * KF * CF * HF * WF];

static cl_model *new_forecaster(cl_dtype dt) {
  cl_config c = ctest_forecaster_config(CF, dt);
  ctest_rng = 777;
  return ctest_model(&c);
}

/* Rows idx of a torch-layout [n, steps, CF, HF, WF] array, into out. */
static void rows_of(const float *a, int steps, const int *idx, int n, float *out) {
  size_t row = (size_t)steps * CF * HF * WF;
  for (int i = 0; i < n; i++) memcpy(out + i * row, a + idx[i] * row, row * sizeof(float));
}

static void test_forecaster(void) {
  for (size_t i = 0; i < sizeof fxs / sizeof *fxs; i++) fxs[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < sizeof fys / sizeof *fys; i++) fys[i] = (float)uniform01(NULL);
  static const int a[3] = {4, 0, 2}, b[5] = {1, 1, 3, 0, 4};
  const int *batches[2] = {a, b}, sizes[2] = {3, 5};
  static float bx[5 * TF * CF * HF * WF], by[5 * KF * CF * HF * WF];
  for (int half = 0; half < 2; half++) {
    cl_dtype dt = half ? CL_F16 : CL_F32;
    cl_model *ma = new_forecaster(dt), *mb = new_forecaster(dt);
    cl_host_array x = {fxs, CL_HOST_TORCH_F32, 5, {NF, TF, CF, HF, WF}};
    cl_host_array y = {fys, CL_HOST_TORCH_F32, 5, {NF, KF, CF, HF, WF}};
    cl_data *d = NULL;
    CHECK(cl_data_create(mb, &x, &y, CL_TARGET_LAST_STATE, &d) == CL_E_UNSUPPORTED && !d,
          "forecaster: a data set of last states is not refused");
    size_t planned = cl_data_bytes_for_steps(mb, NF, TF, KF, HF, WF, CL_TARGET_SEQUENCE);
    CHECK(cl_data_create(mb, &x, &y, CL_TARGET_SEQUENCE, &d) == CL_OK && d,
          "forecaster: cl_data_create: %s", cl_model_error(mb));
    /* x in the storage dtype, y's K frames in float32, the index buffer */
    size_t want = (size_t)NF * CF * HF * WF * (TF * (half ? 2 : 4) + KF * 4) + NF * sizeof(int);
    CHECK(planned == want && cl_data_bytes(d) + NF * sizeof(int) == want,
          "forecaster: cl_data_bytes_for_steps %zu, the data set %zu, want %zu", planned,
          cl_data_bytes(d), want);
    cl_optim adam = {CL_OPTIM_ADAM, 0.01, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
    cl_step_options o = {0};
    o.accumulation_steps = 2;
    int same = 1;
    for (int step = 0; step < 2 && d; step++)
      for (int k = 0; k < 2; k++) {
        rows_of(fxs, TF, batches[k], sizes[k], bx);
        rows_of(fys, KF, batches[k], sizes[k], by);
        cl_host_array ax = {bx, CL_HOST_TORCH_F32, 5, {sizes[k], TF, CF, HF, WF}};
        cl_host_array ay = {by, CL_HOST_TORCH_F32, 5, {sizes[k], KF, CF, HF, WF}};
        double la = NAN, lb = NAN;
        CHECK(cl_model_train_step(ma, &ax, &ay, CL_TARGET_SEQUENCE, &adam, &o, &la) == CL_OK,
              "forecaster: train_step: %s", cl_model_error(ma));
        CHECK(cl_model_train_step_data(mb, d, batches[k], sizes[k], &adam, &o, &lb) == CL_OK,
              "forecaster: train_step_data: %s", cl_model_error(mb));
        CHECK(la == lb && isfinite(la), "forecaster %d: loss %.17g (host) vs %.17g (data)",
              half, la, lb);
        size_t n = ctest_flat(ma, 0, pa, sizeof pa / sizeof *pa);
        ctest_flat(mb, 0, pb, sizeof pb / sizeof *pb);
        if (memcmp(pa, pb, n * sizeof(float)) != 0) same = 0;
      }
    CHECK(same, "forecaster %s: parameters differ between host arrays and the data set",
          half ? "float16" : "float32");
    printf("%-44s identical over 4 steps\n", half ? "forecaster, float16" : "forecaster, float32");
    cl_model_free(ma);
    cl_model_free(mb);
  }
}

int main(void) {
  fill_set();
  test_forecaster();
  test_gather_slot();
  test_identical();
  test_refused();
  test_oom();
  test_free_order();
  return ctest_done("test_core_data");
}
