/*
 * tests/c/test_core_staged.c -- batches converted ahead (core/staged.c)
 * through the public header on the CPU backend: a training step from a
 * staged batch equals, bit for bit, cl_model_train_step on the same host
 * arrays (plain, checkpoint, tbptt, accumulation -- micro-batches read
 * rows of the staged block --, float16 and bfloat16, both targets, both
 * host layouts), over several steps of Adam; so does scheduled sampling in
 * float16 (a fed-back truth frame asks y in float16: packed from the host
 * array, not the staged float32), and an encoder-forecaster's step
 * (frames staged patched). A batch refilled for the next arrays reuses its
 * memory, grows it for more rows and keeps it for fewer; a batch filled from other arrays, for another model or before a
 * dtype change is refused, and bad arrays are refused by the fill with a
 * message and nothing left alive. Sent ahead into the model's two device
 * buffers (core/ahead.c; the CPU's copy is at once), every case above trains
 * the same bits, each step gives its buffer back, and the buffers are
 * claimed, given back and grown as ahead.c says. Exits nonzero on any
 * failure.
 */
#include "convlstm.h"
#include "ctest.h" /* CHECK, uniform01, ctest_model, ctest_flat, ctest_config */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N = 6, T = 5, C = 2, H = 5, W = 4, CY = 2 };

static float pa[1 << 12], pb[1 << 12];

/* A batch in torch's layout (floats, row-major) and the same values in R's
 * (doubles, column-major), so both packers are staged. */
typedef struct {
  float x[N * T * C * H * W], y[N * T * CY * H * W];
  double xr[N * T * C * H * W], yr[N * T * CY * H * W];
} batch;

static void fill_batch(batch *b, cl_target tg) {
  int dx[5] = {N, T, C, H, W}, dy[5] = {N, T, CY, H, W}, dl[4] = {N, CY, H, W};
  for (size_t i = 0; i < sizeof b->x / sizeof *b->x; i++) {
    b->x[i] = (float)(2 * uniform01(NULL) - 1);
    b->xr[ctest_r_index(i, dx, 5)] = b->x[i];
  }
  size_t ny = tg == CL_TARGET_SEQUENCE ? sizeof b->y / sizeof *b->y : (size_t)N * CY * H * W;
  for (size_t i = 0; i < ny; i++) {
    b->y[i] = (float)uniform01(NULL);
    b->yr[tg == CL_TARGET_SEQUENCE ? ctest_r_index(i, dy, 5) : ctest_r_index(i, dl, 4)] = b->y[i];
  }
}

static cl_host_array x_of(batch *b, int r) {
  cl_host_array a = {r ? (void *)b->xr : (void *)b->x, r ? CL_HOST_R_F64 : CL_HOST_TORCH_F32, 5,
                     {N, T, C, H, W}};
  return a;
}

static cl_host_array y_of(batch *b, int r, cl_target tg, int steps) {
  cl_host_array a = {r ? (void *)b->yr : (void *)b->y, r ? CL_HOST_R_F64 : CL_HOST_TORCH_F32, 5,
                     {N, steps, CY, H, W}};
  if (tg == CL_TARGET_LAST_STATE) {
    a.ndim = 4;
    int d[5] = {N, CY, H, W, 0};
    memcpy(a.dims, d, sizeof d);
  }
  return a;
}

static cl_model *new_model(cl_dtype dt) {
  cl_config c = ctest_config(C, 3, CY, 3, 1, 1, 2);
  c.dtype = dt;
  ctest_rng = 4242; /* the same parameters in every model of this file */
  return ctest_model(&c);
}

/* Parameters and gradients of ma and mb, bit for bit. */
static int same_model(cl_model *ma, cl_model *mb) {
  int same = 1;
  for (int grads = 0; grads <= 1; grads++) {
    size_t n = ctest_flat(ma, grads, pa, sizeof pa / sizeof *pa);
    ctest_flat(mb, grads, pb, sizeof pb / sizeof *pb);
    same &= memcmp(pa, pb, n * sizeof(float)) == 0;
  }
  return same;
}

/* mb's device memory in category data (the buffers of batches sent ahead). */
static size_t data_bytes(cl_model *m) {
  cl_mem_stats st;
  cl_model_memory_stats(m, &st);
  return st.current[CL_MEM_DATA];
}

/* Batch s sent ahead into mb's buffers (reserved for it first): sent, and
 * the buffers two of its bytes. */
static void send(const char *what, cl_model *mb, cl_staged *s, const cl_host_array *x,
                 const cl_host_array *y) {
  char err[256];
  int sent = 0;
  cl_staged_unreserve(mb);
  const size_t before = data_bytes(mb); /* the step's own x and y, say */
  CHECK(cl_staged_reserve(mb, x, y) == CL_OK, "%s: reserve: %s", what, cl_model_error(mb));
  CHECK(cl_staged_send(mb, s, &sent, err, sizeof err) == CL_OK && sent, "%s: send: %s", what, err);
  CHECK(cl_staged_sent(mb, s), "%s: the batch sits in a buffer for its step", what);
  CHECK(data_bytes(mb) - before == 2 * cl_staged_layout_bytes(cl_model_config(mb)->dtype, x, y),
        "%s: two buffers of the batch's bytes (%zu of data, batch %zu)", what, data_bytes(mb),
        cl_staged_bytes(s));
}

/* Three batches, each a step from host arrays on ma and from the batch
 * staged (one cl_staged refilled each time) on mb; sent ahead too when
 * ahead (its step then reads the model's device buffer, and gives it back). */
static void compare(const char *what, cl_dtype dt, cl_target tg, const cl_step_options *o, int r,
                    int y_steps, int ahead) {
  cl_model *ma = new_model(dt), *mb = new_model(dt);
  cl_optim adam = {CL_OPTIM_ADAM, 0.01, 0.9, 0.999, 1e-8, 0, 0.001, 0, 0, 0};
  static batch b;
  cl_staged *s = NULL;
  char err[256];
  int same = 1;
  size_t cap = 0, data_at_send = 0;
  for (int k = 0; k < 3; k++) {
    fill_batch(&b, tg);
    cl_host_array x = x_of(&b, r), y = y_of(&b, r, tg, y_steps);
    CHECK(cl_staged_fill(mb, &s, &x, &y, err, sizeof err) == CL_OK && s, "%s: fill: %s", what, err);
    if (!s) break;
    if (k == 0) cap = cl_staged_bytes(s);
    CHECK(cl_staged_bytes(s) == cap, "%s: a refill of the same shape reallocated", what);
    if (ahead) {
      send(what, mb, s, &x, &y);
      data_at_send = data_bytes(mb);
    }
    double la = NAN, lb = NAN;
    CHECK(cl_model_train_step(ma, &x, &y, tg, &adam, o, &la) == CL_OK, "%s: train_step: %s", what,
          cl_model_error(ma));
    CHECK(cl_model_train_staged(mb, &x, &y, s, tg, &adam, o, &lb) == CL_OK,
          "%s: train_staged: %s", what, cl_model_error(mb));
    CHECK(!cl_staged_sent(mb, s), "%s: the step gave its buffer back", what);
    CHECK(la == lb && isfinite(la), "%s: batch %d: loss %.17g (host) vs %.17g (staged)", what, k,
          la, lb);
    same &= same_model(ma, mb);
  }
  CHECK(same, "%s: gradients or parameters differ between host arrays and staged", what);
  printf("%-48s identical over 3 steps\n", what);
  cl_staged_unreserve(mb);
  if (ahead)
    CHECK(data_bytes(mb) + 2 * cl_staged_bytes(s) == data_at_send,
          "%s: unreserve freed the buffers (%zu bytes of data left, %zu at the last send)", what,
          data_bytes(mb), data_at_send);
  cl_staged_free(s);
  cl_model_free(ma);
  cl_model_free(mb);
}

static void test_identical(void) {
  char what[96];
  for (int tg = 0; tg < 2; tg++)
    for (int opt = 0; opt < CTEST_STEP_CASES; opt++) {
      cl_step_options o;
      cl_dtype dt;
      const char *name = ctest_step_case(opt, &o, &dt);
      for (int r = 0; r <= 1; r++) {
        snprintf(what, sizeof what, "%s, %s, %s layout", name, tg ? "sequence" : "last_state",
                 r ? "R" : "torch");
        compare(what, dt, (cl_target)tg, &o, r, T, 0);
      }
      snprintf(what, sizeof what, "%s, %s, sent ahead", name, tg ? "sequence" : "last_state");
      compare(what, dt, (cl_target)tg, &o, 0, T, 1);
    }
}

/* Scheduled sampling over a horizon: y's true frames are fed back into
 * x's slots, which in half storage asks y in float16 -- not what the batch
 * staged (float32) -- so those puts pack the host array. */
static void test_truth(void) {
  enum { K = 3 };
  static const int truth[K - 1] = {1, 0};
  for (int half = 0; half <= 1; half++) {
    cl_step_options o = {0};
    o.horizon = K;
    o.free_run = 1;
    o.truth = truth;
    /* a horizon feeds the last layer's h back: hidden == input_dim (C) */
    cl_config c = ctest_config(C, 3, C, 3, 1, 1, 1);
    c.dtype = half ? CL_F16 : CL_F32;
    ctest_rng = 99;
    cl_model *ma = ctest_model(&c);
    ctest_rng = 99;
    cl_model *mb = ctest_model(&c);
    static float x[N * T * C * H * W], y[N * K * C * H * W];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)uniform01(NULL);
    for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = (float)uniform01(NULL);
    cl_host_array ax = {x, CL_HOST_TORCH_F32, 5, {N, T - K + 1, C, H, W}};
    cl_host_array ay = {y, CL_HOST_TORCH_F32, 5, {N, K, C, H, W}};
    cl_staged *s = NULL;
    char err[256];
    cl_optim sgd = {CL_OPTIM_SGD, 0.05, 0, 0, 0, 0, 0, 0, 0, 0};
    double la = NAN, lb = NAN;
    CHECK(cl_staged_fill(mb, &s, &ax, &ay, err, sizeof err) == CL_OK, "truth: fill: %s", err);
    CHECK(cl_model_train_step(ma, &ax, &ay, CL_TARGET_SEQUENCE, &sgd, &o, &la) == CL_OK,
          "truth %d: train_step: %s", half, cl_model_error(ma));
    CHECK(cl_model_train_staged(mb, &ax, &ay, s, CL_TARGET_SEQUENCE, &sgd, &o, &lb) == CL_OK,
          "truth %d: train_staged: %s", half, cl_model_error(mb));
    CHECK(la == lb && isfinite(la) && same_model(ma, mb),
          "truth, %s: loss %.17g (host) vs %.17g (staged), or the models differ",
          half ? "float16" : "float32", la, lb);
    printf("%-48s identical\n", half ? "scheduled sampling, float16" : "scheduled sampling, float32");
    cl_staged_free(s);
    cl_model_free(ma);
    cl_model_free(mb);
  }
}

/* An encoder-forecaster: frames staged in 2 x 2 patches, y its K frames. */
enum { NF = 4, TF = 3, KF = 4, CF = 2, HF = 4, WF = 6 };

static cl_model *new_forecaster(cl_dtype dt) {
  cl_config c = ctest_forecaster_config(CF, dt);
  ctest_rng = 777;
  return ctest_model(&c);
}

static void test_forecaster(void) {
  static double fx[NF * TF * CF * HF * WF], fy[NF * KF * CF * HF * WF];
  for (int half = 0; half <= 1; half++) {
    cl_model *ma = new_forecaster(half ? CL_F16 : CL_F32), *mb = new_forecaster(half ? CL_F16 : CL_F32);
    cl_optim adam = {CL_OPTIM_ADAM, 0.01, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
    cl_step_options o = {0};
    o.accumulation_steps = 2;
    cl_staged *s = NULL;
    char err[256];
    int same = 1;
    for (int k = 0; k < 2; k++) {
      for (size_t i = 0; i < sizeof fx / sizeof *fx; i++) fx[i] = uniform01(NULL);
      for (size_t i = 0; i < sizeof fy / sizeof *fy; i++) fy[i] = uniform01(NULL);
      cl_host_array x = {fx, CL_HOST_R_F64, 5, {NF, TF, CF, HF, WF}};
      cl_host_array y = {fy, CL_HOST_R_F64, 5, {NF, KF, CF, HF, WF}};
      CHECK(cl_staged_fill(mb, &s, &x, &y, err, sizeof err) == CL_OK, "forecaster: fill: %s", err);
      double la = NAN, lb = NAN;
      CHECK(cl_model_train_step(ma, &x, &y, CL_TARGET_SEQUENCE, &adam, &o, &la) == CL_OK,
            "forecaster: train_step: %s", cl_model_error(ma));
      CHECK(cl_model_train_staged(mb, &x, &y, s, CL_TARGET_SEQUENCE, &adam, &o, &lb) == CL_OK,
            "forecaster: train_staged: %s", cl_model_error(mb));
      CHECK(la == lb && isfinite(la), "forecaster %d: loss %.17g vs %.17g", half, la, lb);
      same &= same_model(ma, mb);
    }
    CHECK(same, "forecaster %s: the models differ", half ? "float16" : "float32");
    printf("%-48s identical over 2 steps\n", half ? "forecaster, float16" : "forecaster, float32");
    cl_staged_free(s);
    cl_model_free(ma);
    cl_model_free(mb);
  }
}

/* A refill with more sequences than the batch holds grows its memory; one
 * with fewer keeps it; every step still equals the host arrays' step. The
 * first n sequences of a torch-layout batch are its first rows. */
static void test_grow(void) {
  cl_model *ma = new_model(CL_F32), *mb = new_model(CL_F32);
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0, 0, 0, 0};
  static batch b;
  cl_staged *s = NULL;
  char err[256];
  const int rows[3] = {N / 2, N, N / 2};
  size_t cap[3] = {0, 0, 0};
  int same = 1;
  for (int k = 0; k < 3; k++) {
    fill_batch(&b, CL_TARGET_SEQUENCE);
    cl_host_array x = x_of(&b, 0), y = y_of(&b, 0, CL_TARGET_SEQUENCE, T);
    x.dims[0] = y.dims[0] = rows[k];
    CHECK(cl_staged_fill(mb, &s, &x, &y, err, sizeof err) == CL_OK && s, "grow: fill %d: %s", k, err);
    if (!s) break;
    cap[k] = cl_staged_bytes(s);
    double la = NAN, lb = NAN;
    CHECK(cl_model_train_step(ma, &x, &y, CL_TARGET_SEQUENCE, &sgd, NULL, &la) == CL_OK,
          "grow: train_step: %s", cl_model_error(ma));
    CHECK(cl_model_train_staged(mb, &x, &y, s, CL_TARGET_SEQUENCE, &sgd, NULL, &lb) == CL_OK,
          "grow: train_staged: %s", cl_model_error(mb));
    CHECK(la == lb && isfinite(la), "grow: batch %d of %d rows: loss %.17g vs %.17g", k, rows[k],
          la, lb);
    same &= same_model(ma, mb);
  }
  size_t half = (size_t)(N / 2) * T * (C + CY) * H * W * sizeof(float);
  CHECK(cap[0] >= half && cap[0] < half + 256, "%d rows staged in %zu bytes", N / 2, cap[0]);
  CHECK(cap[1] >= 2 * half, "a refill of %d rows grew the batch (%zu -> %zu bytes)", N, cap[0],
        cap[1]);
  CHECK(cap[2] == cap[1], "a refill of fewer rows kept the memory (%zu -> %zu)", cap[1], cap[2]);
  CHECK(same, "grow: gradients or parameters differ between host arrays and staged");
  printf("%-48s identical over 3 steps\n", "refills of 3, 6 and 3 rows");
  cl_staged_free(s);
  cl_model_free(ma);
  cl_model_free(mb);
}

/* Two buffers: a third batch is not sent while two hold theirs, and is once
 * a step gave one back; a refill gives its batch's back; buffers grown for
 * a larger batch drop every claim (those batches upload at their steps,
 * and still train as from the host). */
static void test_claims(void) {
  cl_model *ma = new_model(CL_F32), *mb = new_model(CL_F32);
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0, 0, 0, 0};
  static batch b[3];
  cl_host_array x[3], y[3];
  cl_staged *s[3] = {NULL, NULL, NULL};
  char err[256];
  int sent = -1;
  for (int k = 0; k < 3; k++) {
    fill_batch(&b[k], CL_TARGET_SEQUENCE);
    x[k] = x_of(&b[k], 0);
    y[k] = y_of(&b[k], 0, CL_TARGET_SEQUENCE, T);
    if (k < 2) x[k].dims[0] = y[k].dims[0] = N / 2;
    CHECK(cl_staged_fill(mb, &s[k], &x[k], &y[k], err, sizeof err) == CL_OK, "claims: fill: %s", err);
  }
  CHECK(cl_staged_send(mb, s[0], &sent, err, sizeof err) == CL_OK && sent == 0,
        "claims: nothing sent before the buffers are reserved");
  send("claims, first", mb, s[0], &x[0], &y[0]);
  CHECK(cl_staged_send(mb, s[1], &sent, err, sizeof err) == CL_OK && sent == 1,
        "claims: the second batch takes the other buffer");
  CHECK(cl_staged_send(mb, s[2], &sent, err, sizeof err) == CL_OK && sent == 0,
        "claims: a third batch is not sent while both buffers are held");
  double la = NAN, lb = NAN;
  CHECK(cl_model_train_step(ma, &x[0], &y[0], CL_TARGET_SEQUENCE, &sgd, NULL, &la) == CL_OK &&
            cl_model_train_staged(mb, &x[0], &y[0], s[0], CL_TARGET_SEQUENCE, &sgd, NULL, &lb) ==
                CL_OK && la == lb,
        "claims: first step %.17g vs %.17g", la, lb);
  CHECK(!cl_staged_sent(mb, s[0]) && cl_staged_sent(mb, s[1]), "claims: the step gave back its own");
  CHECK(cl_staged_send(mb, s[2], &sent, err, sizeof err) == CL_OK && sent == 0 &&
            !cl_staged_sent(mb, s[2]),
        "claims: a batch larger than the free buffer is not sent");
  CHECK(cl_staged_fill(mb, &s[1], &x[1], &y[1], err, sizeof err) == CL_OK && !cl_staged_sent(mb, s[1]),
        "claims: a refill gives its buffer back");
  CHECK(cl_staged_send(mb, s[0], &sent, err, sizeof err) == CL_OK && sent == 1 &&
            cl_staged_send(mb, s[1], &sent, err, sizeof err) == CL_OK && sent == 1,
        "claims: both buffers free again, both sent");
  CHECK(cl_staged_reserve(mb, &x[2], &y[2]) == CL_OK && !cl_staged_sent(mb, s[0]) &&
            !cl_staged_sent(mb, s[1]),
        "claims: buffers grown for a larger batch drop the claims");
  for (int k = 1; k < 3; k++) {
    if (k == 2) send("claims, grown", mb, s[2], &x[2], &y[2]);
    CHECK(cl_model_train_step(ma, &x[k], &y[k], CL_TARGET_SEQUENCE, &sgd, NULL, &la) == CL_OK &&
              cl_model_train_staged(mb, &x[k], &y[k], s[k], CL_TARGET_SEQUENCE, &sgd, NULL, &lb) ==
                  CL_OK && la == lb,
          "claims: step %d %.17g vs %.17g", k, la, lb);
  }
  CHECK(same_model(ma, mb), "claims: the same parameters as from host arrays");
  printf("%-48s identical over 3 steps\n", "two buffers claimed, given back, grown");
  for (int k = 0; k < 3; k++) cl_staged_free(s[k]);
  cl_model_free(ma);
  cl_model_free(mb); /* frees its buffers */
}

static void test_refused(void) {
  cl_model *m = new_model(CL_F32), *other = new_model(CL_F32);
  static batch b, b2;
  fill_batch(&b, CL_TARGET_SEQUENCE);
  fill_batch(&b2, CL_TARGET_SEQUENCE);
  cl_host_array x = x_of(&b, 0), y = y_of(&b, 0, CL_TARGET_SEQUENCE, T);
  cl_host_array x2 = x_of(&b2, 0), y2 = y_of(&b2, 0, CL_TARGET_SEQUENCE, T);
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_staged *s = NULL;
  char err[256];
  double loss;
  int alive = cl_staged_alive();

  cl_host_array bad = x;
  bad.ndim = 3;
  CHECK(cl_staged_fill(m, &s, &bad, &y, err, sizeof err) == CL_E_INVALID && !s,
        "x of 3 dimensions is refused");
  CHECK(strstr(err, "`x`") != NULL, "message: %s", err);
  bad = y;
  bad.data = NULL;
  CHECK(cl_staged_fill(m, &s, &x, &bad, err, sizeof err) == CL_E_INVALID && !s,
        "y without data is refused");
  CHECK(cl_staged_alive() == alive, "refused fills leave nothing alive");

  CHECK(cl_staged_reserve(m, &x, &bad) == CL_E_INVALID && strstr(cl_model_error(m), "`y`"),
        "reserve for bad arrays is refused, naming them: %s", cl_model_error(m));
  CHECK(cl_staged_fill(m, &s, &x, &y, err, sizeof err) == CL_OK, "fill: %s", err);
  size_t want = (size_t)N * T * (C + CY) * H * W * sizeof(float);
  CHECK(cl_staged_bytes(s) >= want && cl_staged_bytes(s) < want + 256, "bytes %zu, want %zu",
        cl_staged_bytes(s), want);
  CHECK(cl_model_train_staged(m, &x2, &y2, s, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_E_INVALID,
        "a batch staged from other arrays is refused");
  CHECK(strstr(cl_model_error(m), "not filled from these arrays") != NULL, "message: %s",
        cl_model_error(m));
  CHECK(cl_model_train_staged(other, &x, &y, s, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) ==
            CL_E_INVALID,
        "a batch staged for another model is refused");
  CHECK(cl_model_train_staged(m, &x, &y, s, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_OK,
        "a good step after refused ones: %s", cl_model_error(m));
  CHECK(cl_model_set_dtype(m, CL_BF16) == CL_OK, "set_dtype");
  CHECK(cl_model_train_staged(m, &x, &y, s, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_E_STATE,
        "a batch staged before a dtype change is refused");
  CHECK(strstr(cl_model_error(m), "float32") != NULL, "message: %s", cl_model_error(m));
  CHECK(cl_staged_fill(m, &s, &x, &y, err, sizeof err) == CL_OK, "refill in bfloat16: %s", err);
  CHECK(cl_model_train_staged(m, &x, &y, s, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_OK,
        "the batch staged again: %s", cl_model_error(m));
  /* a refill that fails frees the batch it was given */
  bad = x;
  bad.dims[3] = 0;
  CHECK(cl_staged_fill(m, &s, &bad, &y, err, sizeof err) == CL_E_INVALID && s == NULL,
        "a failed refill frees the batch");
  CHECK(cl_staged_alive() == alive, "every batch freed (%d alive)", cl_staged_alive());
  cl_staged_free(NULL);
  cl_model_free(m);
  cl_model_free(other);
}

/* The layout the plan asks for, by hand: x in the dtype, y in float32 from
 * x's bytes rounded up to 256. */
static void test_layout_bytes(void) {
  cl_host_array x = {NULL, CL_HOST_R_F64, 5, {3, 3, 1, 4, 4}};
  cl_host_array y = {NULL, CL_HOST_R_F64, 5, {3, 3, 1, 4, 4}};
  /* 3 x 3 x 16 floats: 576 bytes, y from 768 */
  CHECK(cl_staged_layout_bytes(CL_F32, &x, &y) == 768 + 576, "float32: %zu",
        cl_staged_layout_bytes(CL_F32, &x, &y));
  /* 288 bytes of bfloat16, y from 512 */
  CHECK(cl_staged_layout_bytes(CL_BF16, &x, &y) == 512 + 576, "bfloat16: %zu",
        cl_staged_layout_bytes(CL_BF16, &x, &y));
  /* x of 4 x 2 x 2 x 4 x 4 float16 (512 bytes: no padding), a last-state y
   * of 4 x 3 x 4 x 4 floats */
  cl_host_array x2 = {NULL, CL_HOST_R_F64, 5, {4, 2, 2, 4, 4}};
  cl_host_array y2 = {NULL, CL_HOST_R_F64, 4, {4, 3, 4, 4}};
  CHECK(cl_staged_layout_bytes(CL_F16, &x2, &y2) == 512 + 768, "float16, 4-d y: %zu",
        cl_staged_layout_bytes(CL_F16, &x2, &y2));
  cl_host_array bad = x;
  bad.ndim = 4;
  CHECK(cl_staged_layout_bytes(CL_F32, &bad, &y) == 0, "x of 4 dimensions: 0");
  bad = y;
  bad.dims[2] = 0;
  CHECK(cl_staged_layout_bytes(CL_F32, &x, &bad) == 0, "a dimension of 0: 0");
  bad = x;
  for (int i = 0; i < 5; i++) bad.dims[i] = 1 << 30;
  CHECK(cl_staged_layout_bytes(CL_F32, &bad, &y) == 0, "bytes past a size_t: 0");
  CHECK(cl_staged_layout_bytes((cl_dtype)CL_N_DTYPES, &x, &y) == 0, "no such dtype: 0");
  printf("%-48s by hand\n", "the staged layout's bytes");
}

int main(void) {
  test_layout_bytes();
  test_identical();
  test_truth();
  test_forecaster();
  test_grow();
  test_claims();
  test_refused();
  return ctest_done("test_core_staged");
}
