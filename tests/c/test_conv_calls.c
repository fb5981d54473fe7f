/*
 * tests/c/test_conv_calls.c -- the planner's list of a step's convolution
 * calls (cl_model_conv_calls, core/conv_calls.c) against the calls the
 * executor really makes. The CPU backend's three convolution slots are
 * wrapped by recording functions (generated, as cuda_graph.cu's recording
 * table is, from backend.h's one slot list), real training steps and
 * inference forwards run through them, and the multiset of recorded
 * (direction, shape) calls must equal the list exactly: every shape, every
 * count. Configurations: plain, uneven micro-batches, checkpoint segments,
 * tbptt with both targets, recompute_gates with an uneven last chunk (alone
 * and with checkpoint), free-running with and without scheduled sampling,
 * a given initial state, per-gate and shared dropout, peepholes,
 * non-square kernels, dilation, float16, a layer whose input joins its
 * hidden half (cl_layer_joins), and inference with and without a
 * horizon. Also: where the target is a sequence (the plan's assumption),
 * the plan's workspace row is the largest workspace any recorded call asks
 * for. And cl_model_conv_algo's names (algo_names). Exits nonzero on any
 * failure.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "convlstm.h"
#include "core/internal.h" /* m->be, to put the recording table in front of its slots */
#include "cpu/cpu_kernels.h" /* cl_cpu_ctx: Winograd forced on a model's backend */
#include "ctest.h"         /* CHECK, uniform01, ctest_model */

#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- the recording table ---------------------------------------------- */

#define MAX_CALLS 256
static cl_conv_call_info rec[MAX_CALLS];
static int n_rec, rec_overflow;
static const struct cl_backend_i *real;

static void record(cl_conv_dir d, const cl_conv_shape *s) {
  cl_conv_call_info r = {d,     0,     0,     s->N,  s->C,  s->H, s->W,
                         s->K,  s->kh, s->kw, s->dh, s->dw, cl_conv_groups(s), 1};
  for (int i = 0; i < n_rec; i++) {
    cl_conv_call_info *e = &rec[i];
    if (e->dir == d && e->N == r.N && e->C == r.C && e->H == r.H && e->W == r.W &&
        e->K == r.K && e->kh == r.kh && e->kw == r.kw && e->dh == r.dh && e->dw == r.dw &&
        e->groups == r.groups) {
      e->count++;
      return;
    }
  }
  if (n_rec == MAX_CALLS) {
    rec_overflow = 1;
    return;
  }
  rec[n_rec++] = r;
}

/* A wrapper for every slot of the convolution group that runs in a step:
 * record the call's direction and shape, then make it. */
#define DIR_conv_forward CL_CONV_FORWARD
#define DIR_conv_backward_data CL_CONV_BACKWARD_DATA
#define DIR_conv_backward_filter CL_CONV_BACKWARD_FILTER
#define WRAP_NONE(ret, name, params, args)
#define WRAP_STEP(ret, name, params, args) \
  static ret rec_##name params {           \
    record(DIR_##name, s);                 \
    return real->name args;                \
  }
#define WRAP(kind, req, ret, name, params, args) WRAP_##kind(ret, name, params, args)
CL_SLOTS_CONV(WRAP)
#define SET_NONE(name)
#define SET_STEP(name) t->name = rec_##name;
#define SET(kind, req, ret, name, params, args) SET_##kind(name)

static void install(cl_model *m, struct cl_backend_i *t) {
  real = m->be->iface;
  *t = *real;
  CL_SLOTS_CONV(SET)
  m->be->iface = t;
}

/* ---- one configuration -------------------------------------------------- */

typedef struct config {
  const char *name;
  int B, T, H, W, layers, h0, h1, kh, kw, dil;
  int training;
  cl_target target;
  int checkpoint, tbptt, accumulation, recompute, horizon, free_run, truth, given_state;
  int peephole;   /* cl_peephole */
  int dropout;    /* 0 none, 1 shared masks, 2 per gate */
  cl_dtype dtype;
  int head;       /* a 1x1 head over the top layer (cl_config.head) */
} config;

static void fill(float *p, size_t n, float v) {
  for (size_t i = 0; i < n; i++) p[i] = v * (float)(2 * uniform01(NULL) - 1);
}

static cl_model *make(const config *c) {
  cl_config cfg = ctest_config(2, c->h0, c->h1, c->kh, c->kh, 1, 2);
  cfg.n_layers = c->layers;
  /* frames fed back: the top layer's h, unless a head makes them */
  if (c->horizon && !c->head) cfg.hidden_dims[c->layers - 1] = cfg.input_dim;
  for (int l = 0; l < c->layers; l++) {
    cfg.kernel_widths[l] = c->kw;
    cfg.dilation_h[l] = c->dil;
    cfg.dilation_w[l] = l == 0 ? 1 : c->dil;
    cfg.dropout[l] = c->dropout ? 0.25 : 0;
    cfg.recurrent_dropout[l] = c->dropout ? 0.5 : 0;
  }
  cfg.dropout_masks = c->dropout == 2 ? CL_MASKS_PER_GATE : 0;
  cfg.peephole = c->peephole;
  cfg.peephole_h = c->peephole == CL_PEEP_POSITION ? c->H : 0;
  cfg.peephole_w = c->peephole == CL_PEEP_POSITION ? c->W : 0;
  cfg.dtype = c->dtype;
  cfg.head = c->head;
  return ctest_model(&cfg);
}

/* The same direction and shape (whichever layer and half ran it). */
static int same_call(const cl_conv_call_info *a, const cl_conv_call_info *b) {
  return a->dir == b->dir && a->N == b->N && a->C == b->C && a->H == b->H && a->W == b->W &&
         a->K == b->K && a->kh == b->kh && a->kw == b->kw && a->dh == b->dh && a->dw == b->dw &&
         a->groups == b->groups;
}

/* The recorded calls equal the list: every recorded (direction, shape) as
 * many times as the list's rows of it say, and no row of a call that did
 * not run. */
static void compare(const config *c, const cl_conv_call_info *list, int n) {
  CHECK(!rec_overflow, "%s: more than %d distinct calls recorded", c->name, MAX_CALLS);
  for (int i = 0; i < n_rec; i++) {
    const cl_conv_call_info *r = &rec[i];
    int64_t listed = 0;
    for (int j = 0; j < n; j++)
      if (same_call(&list[j], r)) listed += list[j].count;
    CHECK(listed == r->count,
          "%s: dir %d N=%lld C=%d K=%d %dx%d dil %dx%d groups %d: ran %lld times, listed %lld",
          c->name, (int)r->dir, (long long)r->N, r->C, r->K, r->kh, r->kw, r->dh, r->dw, r->groups,
          (long long)r->count, (long long)listed);
  }
  for (int j = 0; j < n; j++) {
    int ran = 0;
    for (int i = 0; i < n_rec; i++) ran |= same_call(&list[j], &rec[i]);
    CHECK(ran && list[j].count > 0,
          "%s: listed layer %d half %d dir %d N=%lld C=%d K=%d, %lld times: never ran", c->name,
          list[j].layer, list[j].half, (int)list[j].dir, (long long)list[j].N, list[j].C, list[j].K,
          (long long)list[j].count);
  }
}

/* The plan's conv_workspace row, and the largest workspace a recorded call
 * asks for in its own direction (an inference forward: forward calls only). */
static void check_workspace(cl_model *m, const config *c, const cl_step_options *o) {
  cl_plan p;
  CHECK(cl_model_plan(m, c->B, c->T, c->H, c->W, c->training, NULL, o, &p) == CL_OK, "%s: plan: %s",
        c->name, cl_model_error(m));
  size_t planned = 0, most = 0;
  for (int i = 0; i < p.n; i++)
    if (!strcmp(p.entries[i].name, "conv_workspace")) planned = p.entries[i].bytes;
  cl_plan_free(&p);
  for (int i = 0; i < n_rec; i++) {
    const cl_conv_call_info *r = &rec[i];
    cl_conv_shape s = {(int)r->N, r->C,  r->H,  r->W,     r->K,      r->kh,
                       r->kw,     r->dh, r->dw, c->dtype, r->groups, CL_NCHW, 0};
    size_t w = 0;
    CHECK(cl_backend_conv_workspace(m->be, &s, r->dir, &w) == CL_OK, "%s: workspace query",
          c->name);
    if (w > most) most = w;
  }
  CHECK(planned == most, "%s: planned workspace %zu bytes, the calls ask for at most %zu",
        c->name, planned, most);
}

static void run(const config *c) {
  cl_model *m = make(c);
  if (!m) return;
  struct cl_backend_i table;
  install(m, &table);
  const int C = 2, B = c->B, T = c->T, H = c->H, W = c->W, P = H * W;
  const int top = c->horizon || c->head ? C : c->layers == 1 ? c->h0 : c->h1;
  const int K = c->horizon, tx = c->free_run ? T - K + 1 : T;
  float *x = malloc(sizeof(float) * (size_t)B * T * C * P);
  float *y = malloc(sizeof(float) * (size_t)B * T * top * P);
  const int hm = c->h0 > 8 || c->h1 > 8 ? (c->h0 > c->h1 ? c->h0 : c->h1) : 8; /* widest layer */
  float *init = malloc(sizeof(float) * (size_t)B * hm * P * 2 * c->layers);
  float *masks = malloc(sizeof(float) * (size_t)B * 4 * hm * P * 2 * c->layers);
  fill(x, (size_t)B * T * C * P, 1);
  fill(y, (size_t)B * T * top * P, 0.5f);
  fill(init, (size_t)B * hm * P * 2 * c->layers, 0.5f);
  cl_step_options o = {.checkpoint = c->checkpoint, .tbptt = c->tbptt,
                       .accumulation_steps = c->accumulation, .recompute_gates = c->recompute,
                       .horizon = K, .free_run = c->free_run};
  int truth[8] = {1, 0, 1, 0, 1, 0, 1, 0};
  if (c->truth) o.truth = truth;
  cl_host_array st[2 * CL_MAX_LAYERS];
  if (c->given_state) {
    o.state_mode = CL_STATE_GIVEN;
    int hid[2] = {c->h0, c->horizon && !c->head ? C : c->h1};
    float *at = init;
    for (int l = 0; l < c->layers; l++)
      for (int k = 0; k < 2; k++) {
        cl_host_array a = {at, CL_HOST_TORCH_F32, 4, {B, hid[l], H, W, 0}};
        st[2 * l + k] = a;
        at += (size_t)B * hid[l] * P;
      }
    o.state = st;
  }
  if (c->dropout) {
    int ins[2] = {C, c->h0}, hid[2] = {c->h0, c->horizon && !c->head ? C : c->h1}, G = c->dropout == 2 ? 4 : 1;
    float *at = masks;
    for (int l = 0; l < c->layers; l++) {
      size_t nx = (size_t)B * G * ins[l] * P, nh = (size_t)B * G * hid[l] * P;
      for (size_t i = 0; i < nx; i++) at[i] = (i % 3) ? 1 / 0.75f : 0;
      o.mask_x[l] = at;
      at += nx;
      for (size_t i = 0; i < nh; i++) at[i] = (i % 2) ? 2.0f : 0;
      o.mask_h[l] = at;
      at += nh;
    }
  }
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, tx, C, H, W}};
  int yT = c->horizon ? K : T;
  cl_host_array ya = c->target == CL_TARGET_SEQUENCE
                         ? (cl_host_array){y, CL_HOST_TORCH_F32, 5, {B, yT, top, H, W}}
                         : (cl_host_array){y, CL_HOST_TORCH_F32, 4, {B, top, H, W, 0}};
  cl_optim sgd = {.kind = CL_OPTIM_SGD, .lr = 1e-3};
  n_rec = rec_overflow = 0;
  double loss;
  cl_status s = c->training ? cl_model_train_step(m, &xa, &ya, c->target, &sgd, &o, &loss)
                            : cl_model_forward(m, &xa, 0, &o);
  CHECK(s == CL_OK, "%s: %s", c->name, cl_model_error(m));
  cl_conv_call_info *list = NULL;
  int n = 0;
  CHECK(cl_model_conv_calls(m, B, T, H, W, c->training, &o, c->target, &list, &n) == CL_OK,
        "%s: conv_calls: %s", c->name, cl_model_error(m));
  compare(c, list, n);
  int64_t total = 0;
  for (int i = 0; i < n_rec; i++) total += rec[i].count;
  printf("%-34s %3d distinct calls, %5lld in all\n", c->name, n_rec, (long long)total);
  if (!c->training || c->target == CL_TARGET_SEQUENCE || !c->tbptt) {
    m->be->iface = real; /* the plan asks the backend itself */
    check_workspace(m, c, &o);
  }
  m->be->iface = real;
  free(list);
  free(x);
  free(y);
  free(init);
  free(masks);
  cl_model_free(m);
}

/* Shi et al.'s encoder-forecaster (program.c): two layers of 3 and 2,
 * 2 channels in 2x2 patches of 4x6 frames, T input and K forecast steps,
 * a training step (in micro-batches of accumulation steps: three sequences
 * then, the last micro-batch smaller; in storage dtype dt; in checkpoint
 * segments of ck steps, gates recomputed in chunks of rc) or a
 * prediction. */
static void run_forecaster_opts(const char *name, int training, int k, int rk, int T, int K,
                                int accumulation, cl_dtype dt, int ck, int rc) {
  const int B = accumulation > 1 ? 3 : 2, C = 2, H = 4, W = 6;
  cl_config cfg = ctest_config(C, 3, 2, k, k, 1, 2);
  cfg.n_layers = 4;
  for (int l = 0; l < 4; l++) {
    cfg.hidden_dims[l] = l % 2 ? 2 : 3;
    cfg.kernel_sizes[l] = k;
    cfg.recurrent_kernel_sizes[l] = rk;
  }
  cfg.peephole = CL_PEEP_CHANNEL;
  cfg.forecaster = 1;
  cfg.patch = 2;
  cfg.dtype = dt;
  cl_model *m = ctest_model(&cfg);
  if (!m) return;
  struct cl_backend_i table;
  install(m, &table);
  float *x = malloc(sizeof(float) * (size_t)B * T * C * H * W);
  float *y = malloc(sizeof(float) * (size_t)B * K * C * H * W);
  fill(x, (size_t)B * T * C * H * W, 1);
  fill(y, (size_t)B * K * C * H * W, 0.5f);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {B, K, C, H, W}};
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.accumulation_steps = accumulation;
  o.checkpoint = ck;
  o.recompute_gates = rc;
  cl_optim sgd = {.kind = CL_OPTIM_SGD, .lr = 1e-3};
  n_rec = rec_overflow = 0;
  double loss;
  cl_status s = CL_OK;
  if (training) {
    s = cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd, &o, &loss);
  } else {
    o.horizon = K;
    s = cl_model_forward(m, &xa, 0, &o);
  }
  CHECK(s == CL_OK, "%s: %s", name, cl_model_error(m));
  o.horizon = K; /* the plan's: the forecaster's steps */
  cl_conv_call_info *list = NULL;
  int n = 0;
  CHECK(cl_model_conv_calls(m, B, T, H, W, training, &o, CL_TARGET_SEQUENCE, &list, &n) == CL_OK,
        "%s: conv_calls: %s", name, cl_model_error(m));
  config c = {0};
  c.name = name;
  c.B = B;
  c.T = T;
  c.H = H;
  c.W = W;
  c.training = training;
  c.dtype = dt; /* the workspace queries are of the calls in the model's storage */
  compare(&c, list, n);
  printf("%-34s %3d distinct calls\n", name, n_rec);
  m->be->iface = real;
  check_workspace(m, &c, &o);
  free(list);
  free(x);
  free(y);
  cl_model_free(m);
}

static void run_forecaster(const char *name, int training, int k, int rk, int T, int K,
                           int accumulation, cl_dtype dt) {
  run_forecaster_opts(name, training, k, rk, T, K, accumulation, dt, 0, 0);
}

/* cl_model_conv_algo names the algorithm that ran each call: with
 * CONVLSTM_CONV_ALGO=gemm (read at the backend's creation) every call says
 * "gemm"; with Winograd forced on the backend (as test_backend_ops forces
 * it: on every shape, however small) the 3x3 calls forward and backward
 * data say F(2x2,3x3). A call it cannot hold, no buffer or none of length
 * are refused; a short buffer gets the name cut. */
static void algo_names(void) {
  static const char *forced[] = {"gemm", "winograd"};
  enum { B = 2, T = 3, H = 6, W = 6 };
  for (int f = 0; f < 2; f++) {
    setenv("CONVLSTM_CONV_ALGO", "gemm", 1);
    cl_config cfg = ctest_config(1, 8, 4, 3, 3, 1, 1);
    cl_model *m = ctest_model(&cfg);
    unsetenv("CONVLSTM_CONV_ALGO");
    if (!m) continue;
    if (f == 1) ((cl_cpu_ctx *)m->be->context)->conv_algo = 2; /* cpu_winograd.c: "winograd" */
    float x[B * T * H * W], y[B * T * 4 * H * W];
    for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)uniform01(NULL);
    for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = (float)uniform01(NULL);
    cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 1, H, W}};
    cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {B, T, 4, H, W}};
    cl_optim sgd = {.kind = CL_OPTIM_SGD, .lr = 1e-3};
    double loss;
    CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_OK,
          "algo %s: step: %s", forced[f], cl_model_error(m));
    cl_conv_call_info *list = NULL;
    int n = 0;
    CHECK(cl_model_conv_calls(m, B, T, H, W, 1, NULL, CL_TARGET_SEQUENCE, &list, &n) == CL_OK &&
              n > 0,
          "algo %s: conv_calls: %s", forced[f], cl_model_error(m));
    int wino = 0;
    for (int i = 0; i < n; i++) {
      char name[64];
      CHECK(cl_model_conv_algo(m, &list[i], name, sizeof name) == CL_OK, "algo %s: call %d: %s",
            forced[f], i, cl_model_error(m));
      if (f == 0) {
        CHECK(strcmp(name, "gemm") == 0, "algo gemm: call %d (dir %d) says '%s'", i,
              (int)list[i].dir, name);
      } else if (list[i].dir != CL_CONV_BACKWARD_FILTER) {
        CHECK(strcmp(name, "winograd F(2x2,3x3)") == 0,
              "algo winograd: call %d (layer %d half %d dir %d) says '%s'", i, list[i].layer,
              list[i].half, (int)list[i].dir, name);
        wino++;
      }
    }
    if (f == 1) CHECK(wino > 0, "algo winograd: no forward or backward data call");
    if (n > 0) {
      char name[8] = "x";
      cl_conv_call_info bad = list[0];
      bad.dir = (cl_conv_dir)3;
      CHECK(cl_model_conv_algo(m, &bad, name, sizeof name) == CL_E_INVALID && name[0] == 0,
            "algo: direction 3 accepted");
      bad = list[0];
      bad.N = 0;
      CHECK(cl_model_conv_algo(m, &bad, name, sizeof name) == CL_E_INVALID, "algo: N 0 accepted");
      /* a list may hold a call of more images than an int (a step too
       * large to run): refused by its count, not read as the count an int
       * keeps of it (2^32 + N would be N) */
      bad.N = ((int64_t)1 << 32) + list[0].N;
      CHECK(cl_model_conv_algo(m, &bad, name, sizeof name) == CL_E_INVALID && name[0] == 0,
            "algo: N 2^32 + %lld accepted as %lld", (long long)list[0].N, (long long)list[0].N);
      bad.N = (int64_t)INT_MAX + 1;
      CHECK(cl_model_conv_algo(m, &bad, name, sizeof name) == CL_E_INVALID && name[0] == 0,
            "algo: N 2^31 accepted");
      bad.N = INT_MAX;
      CHECK(cl_model_conv_algo(m, &bad, name, sizeof name) == CL_OK,
            "algo: N 2^31 - 1 refused: %s", cl_model_error(m));
      bad = list[0];
      bad.kh = 2;
      CHECK(cl_model_conv_algo(m, &bad, name, sizeof name) == CL_E_INVALID &&
                strstr(cl_model_error(m), ", 2x3,") != NULL,
            "algo: an even kernel accepted (%s)", cl_model_error(m));
      CHECK(cl_model_conv_algo(m, &list[0], NULL, 8) == CL_E_INVALID &&
                cl_model_conv_algo(m, &list[0], name, 0) == CL_E_INVALID &&
                cl_model_conv_algo(m, NULL, name, sizeof name) == CL_E_INVALID,
            "algo: no buffer or no call accepted");
      char cut[4];
      CHECK(cl_model_conv_algo(m, &list[0], cut, sizeof cut) == CL_OK && strlen(cut) == 3,
            "algo: a 4-byte buffer holds '%s'", cut);
    }
    free(list);
    cl_model_free(m);
  }
}

int main(void) {
  const cl_target LAST = CL_TARGET_LAST_STATE, SEQ = CL_TARGET_SEQUENCE;
  /* name, B T H W, layers h0 h1, kh kw dil, training target, checkpoint tbptt
   * accumulation recompute horizon free_run truth given, peephole dropout dtype */
  const config cs[] = {
      {"plain", 3, 5, 5, 4, 2, 3, 4, 3, 3, 1, 1, LAST, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"plain, sequence target", 2, 4, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"uneven micro-batches", 5, 4, 4, 3, 2, 3, 2, 3, 3, 1, 1, LAST, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"checkpoint 2 of 7", 2, 7, 4, 4, 2, 2, 3, 3, 3, 1, 1, SEQ, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"checkpoint, micro-batches, state", 3, 6, 4, 4, 2, 2, 3, 3, 3, 1, 1, LAST, 4, 0, 2, 0, 0, 0, 0, 1, 0, 0, CL_F32, 0},
      {"tbptt 3 of 8, last state", 2, 8, 4, 4, 2, 3, 2, 3, 3, 1, 1, LAST, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"tbptt 3 of 8, sequence", 2, 8, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"tbptt 2 of 6, state, micro", 3, 6, 4, 4, 2, 2, 2, 3, 3, 1, 1, LAST, 0, 2, 3, 0, 0, 0, 0, 1, 0, 0, CL_F32, 0},
      {"recompute_gates 3 of 7", 2, 7, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"recompute_gates 2, checkpoint 5 of 9", 2, 9, 4, 4, 2, 2, 3, 3, 3, 1, 1, LAST, 5, 0, 0, 2, 0, 0, 0, 1, 0, 0, CL_F32, 0},
      {"recompute_gates 4, tbptt 3 of 7", 2, 7, 4, 4, 2, 2, 2, 3, 3, 1, 1, SEQ, 0, 3, 0, 4, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"free-running horizon 4", 2, 7, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 4, 1, 0, 0, 0, 0, CL_F32, 0},
      {"free-running, scheduled sampling", 3, 8, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 0, 2, 0, 5, 1, 1, 1, 0, 0, CL_F32, 0},
      {"teacher-forced horizon 3", 2, 6, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, CL_F32, 0},
      {"per-gate dropout", 2, 5, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, CL_F32, 0},
      {"per-gate dropout, checkpoint, rc", 2, 7, 4, 4, 2, 3, 2, 3, 3, 1, 1, LAST, 3, 0, 0, 2, 0, 0, 0, 0, 0, 2, CL_F32, 0},
      {"per-gate dropout, free-running", 2, 6, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 3, 1, 0, 0, 0, 2, CL_F32, 0},
      {"shared dropout, tbptt", 2, 6, 4, 4, 2, 3, 2, 3, 3, 1, 1, LAST, 0, 4, 0, 0, 0, 0, 0, 0, 0, 1, CL_F32, 0},
      {"peepholes per channel", 2, 4, 4, 4, 2, 3, 2, 3, 3, 1, 1, LAST, 0, 0, 0, 0, 0, 0, 0, 0, CL_PEEP_CHANNEL, 0, CL_F32, 0},
      {"peepholes per position", 2, 4, 5, 3, 2, 3, 2, 3, 3, 1, 1, SEQ, 2, 0, 0, 0, 0, 0, 0, 0, CL_PEEP_POSITION, 0, CL_F32, 0},
      {"non-square kernels", 2, 4, 6, 5, 2, 3, 2, 3, 5, 1, 1, LAST, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"dilation 2, one layer", 2, 5, 6, 6, 1, 3, 0, 3, 1, 2, 1, SEQ, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"float16, checkpoint", 2, 5, 4, 4, 2, 3, 2, 3, 3, 1, 1, LAST, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F16, 0},
      /* more segments or windows than a summary lists one by one
       * (CL_SUMMARY_SEGMENTS): the middle ones counted, not walked */
      {"checkpoint 1 of 7, state", 2, 7, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, CL_F32, 0},
      {"checkpoint 2 of 11, rc, micro", 3, 11, 4, 4, 2, 2, 3, 3, 3, 1, 1, LAST, 2, 0, 2, 1, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"tbptt 1 of 7, last state", 2, 7, 4, 4, 2, 3, 2, 3, 3, 1, 1, LAST, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"tbptt 2 of 11, sequence, head", 2, 11, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 1},
      /* at the summary's edge: 4 segments listed one by one, 5 the fewest folded */
      {"checkpoint 1 of 4, edge", 2, 4, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"checkpoint 1 of 5, edge", 2, 5, 4, 4, 2, 3, 2, 3, 3, 1, 1, LAST, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"tbptt 1 of 5, sequence, edge", 2, 5, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"inference", 3, 5, 4, 4, 2, 3, 2, 3, 3, 1, 0, LAST, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"inference, state, horizon 3", 2, 4, 4, 4, 2, 3, 2, 5, 3, 2, 0, LAST, 0, 0, 0, 0, 3, 0, 0, 1, 0, 0, CL_F32, 0},
      {"inference, per-gate dropout model", 2, 3, 4, 4, 2, 3, 2, 3, 3, 1, 0, LAST, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, CL_F32, 0},
      {"head", 2, 4, 4, 4, 2, 3, 4, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 1},
      {"head, checkpoint 2 of 7, micro", 3, 7, 4, 4, 2, 2, 3, 3, 3, 1, 1, SEQ, 2, 0, 2, 0, 0, 0, 0, 1, 0, 0, CL_F32, 1},
      {"head, tbptt 3 of 8", 2, 8, 4, 4, 2, 3, 2, 3, 3, 1, 1, SEQ, 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 1},
      {"head, recompute 2, float16, dropout", 2, 5, 4, 4, 2, 3, 5, 3, 3, 1, 1, SEQ, 0, 0, 0, 2, 0, 0, 0, 0, 0, 2, CL_F16, 1},
      {"head, float16 inference", 2, 4, 4, 4, 2, 3, 4, 3, 3, 1, 0, LAST, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F16, 1},
      {"head, teacher-forced horizon 3", 2, 6, 4, 4, 1, 5, 0, 3, 3, 1, 1, SEQ, 3, 0, 0, 0, 3, 0, 0, 0, 0, 0, CL_F32, 1},
      {"head, inference", 2, 4, 4, 4, 2, 3, 4, 3, 3, 1, 0, LAST, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 1},
      {"head, inference, horizon 3", 2, 4, 4, 4, 2, 3, 4, 3, 3, 1, 0, LAST, 0, 0, 0, 0, 3, 0, 0, 1, 0, 0, CL_F32, 1},
      /* layer 1's 2 input channels join its 32 hidden (cl_layer_joins): one
       * call a step over [h, x], the input's step alone without a state */
      {"joined input", 2, 5, 4, 4, 2, 32, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"joined input, state, micro-batches", 3, 5, 4, 4, 2, 32, 2, 3, 3, 1, 1, LAST, 0, 0, 2, 0, 0, 0, 0, 1, 0, 0, CL_F32, 0},
      {"joined input, checkpoint 3, rc 2", 2, 7, 4, 4, 2, 32, 2, 3, 3, 1, 1, LAST, 3, 0, 0, 2, 0, 0, 0, 0, 0, 0, CL_F32, 0},
      {"joined input, tbptt 3 of 8, dropout", 2, 8, 4, 4, 2, 32, 2, 3, 3, 1, 1, SEQ, 0, 3, 0, 0, 0, 0, 0, 0, 0, 1, CL_F32, 0},
      {"joined input, free-running, float16", 2, 6, 4, 4, 2, 32, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 3, 1, 0, 0, 0, 0, CL_F16, 0},
      {"joined input kept apart: per-gate dropout", 2, 5, 4, 4, 2, 32, 2, 3, 3, 1, 1, SEQ, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, CL_F32, 0},
  };
  for (size_t i = 0; i < sizeof cs / sizeof *cs; i++) run(&cs[i]);
  run_forecaster("encoder-forecaster, training", 1, 3, 3, 3, 2, 0, CL_F32);
  run_forecaster("encoder-forecaster, 5x5 / 3x3", 1, 5, 3, 2, 3, 0, CL_F32);
  run_forecaster("encoder-forecaster, accumulation 2 of 3", 1, 3, 3, 3, 2, 2, CL_F32);
  run_forecaster("encoder-forecaster, float16, accumulation", 1, 3, 1, 2, 3, 3, CL_F16);
  run_forecaster("encoder-forecaster, bfloat16", 1, 3, 3, 3, 2, 0, CL_BF16);
  run_forecaster("encoder-forecaster, prediction", 0, 3, 1, 3, 4, 0, CL_F32);
  run_forecaster_opts("encoder-forecaster, checkpoint 2, T 5, K 3", 1, 3, 3, 5, 3, 0, CL_F32, 2, 0);
  run_forecaster_opts("encoder-forecaster, checkpoint 1, T 2, K 4", 1, 3, 1, 2, 4, 0, CL_F32, 1, 0);
  run_forecaster_opts("encoder-forecaster, recompute 2, T 5, K 4", 1, 3, 3, 5, 4, 0, CL_F32, 0, 2);
  run_forecaster_opts("encoder-forecaster, ck 3, rc 2, accumulation", 1, 5, 3, 7, 4, 2, CL_F16, 3,
                      2);
  run_forecaster_opts("encoder-forecaster, checkpoint 1, T 7, K 6", 1, 3, 3, 7, 6, 0, CL_F32, 1, 0);
  run_forecaster_opts("encoder-forecaster, ck 1, rc 1, T 6, K 5", 1, 3, 3, 6, 5, 2, CL_F32, 1, 1);
  algo_names();
  return ctest_done("test_conv_calls");
}
