/*
 * tests/c/test_core_join.c -- a layer whose input has few channels beside
 * its hidden ones joins them in training (cl_layer_joins, forward.c): one
 * convolution a step over [h_{t-1}, x_t] with the two kernels side by side,
 * instead of the input half once over every step's images and the hidden
 * half added onto it. The same model with CONVLSTM_JOIN=0 at its creation
 * runs the halves apart; one training step of each must give the same loss
 * and gradients (the same sums in another order), on every path that runs
 * forward.c's steps: the step cases of ctest.h (plain, checkpoint, tbptt,
 * accumulation, float16, bfloat16), dropout on the input and on h (the two
 * masked copies share one buffer), peepholes, recompute_gates (backward
 * runs the joined forward again) and free-running training (the fed-back
 * frames are the joined input). Two models: the first layer joining (1
 * channel into 16), and the second (the first layer's one channel into
 * 16), whose input gradient flows on into the layer below. The step's
 * list of convolution calls must hold the joined call (C = h + in) where
 * a layer joins and none where CONVLSTM_JOIN=0, so a predicate that never
 * joins fails here too; and the rule's edge on both sides (1 channel
 * beside 16 hidden joins, beside 15 not).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv */
#endif
#include "convlstm.h"
#include "ctest.h" /* CHECK, ctest_config, ctest_model, ctest_flat, ctest_step_case */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, T = 4, H = 5, W = 4, MAXP = 16384 };

typedef struct jmodel {
  const char *what;
  int h0, h1, joins; /* hidden dims; the layer that joins */
} jmodel;

static const jmodel models[] = {
    {"layer 1 joins (1 -> 16)", 16, 1, 0},
    {"layer 2 joins (1 -> 16)", 1, 16, 1},
};

/* case k: ctest_step_case's 0 .. CTEST_STEP_CASES - 1, then dropout,
 * peepholes, recompute_gates with checkpoints, free running */
enum { EXTRA = 4 };

static const char *case_of(int k, const jmodel *jm, cl_config *c, cl_step_options *o) {
  cl_dtype dt;
  const char *name = ctest_step_case(k < CTEST_STEP_CASES ? k : 0, o, &dt);
  c->dtype = dt;
  switch (k - CTEST_STEP_CASES) {
  case 0:
    c->dropout[jm->joins] = 0.25, c->recurrent_dropout[jm->joins] = 0.3;
    o->draw_masks = 1, o->dropout_seed = 11;
    return "dropout on x and h";
  case 1: c->peephole = CL_PEEP_CHANNEL; return "peepholes";
  case 2: o->recompute_gates = 2, o->checkpoint = 2; return "recompute_gates 2, checkpoint 2";
  case 3: o->horizon = 2, o->free_run = 1; return "free running, horizon 2";
  default: return name;
  }
}

/* The joined calls in m's list for a step of these options: forward calls
 * of layer l's hidden half whose input holds h + in channels. */
static int joined_calls(cl_model *m, const cl_step_options *o, int l, int h, int in) {
  cl_conv_call_info *v = NULL;
  int n = 0, found = 0;
  if (cl_model_conv_calls(m, B, T, H, W, 1, o, CL_TARGET_SEQUENCE, &v, &n) != CL_OK) return -1;
  for (int i = 0; i < n; i++)
    found += v[i].dir == CL_CONV_FORWARD && v[i].layer == l && v[i].half == 1 && v[i].C == h + in;
  free(v);
  return found;
}

/* One SGD step at lr 0 of case k of model jm, joined or apart: its loss
 * and every gradient, flat; 0 when it failed. */
static int step(const jmodel *jm, int k, int joined, double *loss, float *g, size_t *n) {
  cl_config c = ctest_config(1, jm->h0, jm->h1, 3, 3, 1, 1);
  cl_step_options o;
  const char *what = case_of(k, jm, &c, &o);
  setenv("CONVLSTM_JOIN", joined ? "1" : "0", 1);
  ctest_rng = 88172645463325252ull; /* the same parameters in both models */
  cl_model *m = ctest_model(&c);
  unsetenv("CONVLSTM_JOIN");
  if (!m) return 0;
  const int h = jm->joins ? jm->h1 : jm->h0, out = jm->h1;
  const int calls = joined_calls(m, &o, jm->joins, h, 1);
  CHECK(joined ? calls > 0 : calls == 0, "%s, %s: %d joined forward calls in the list, joined %d",
        jm->what, what, calls, joined);
  float x[B * T * H * W], y[B * T * 16 * H * W];
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)sin(0.37 * i);
  for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = (float)(0.5 * cos(0.21 * i));
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 1, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {B, o.free_run ? o.horizon : T, out, H, W}};
  cl_optim sgd = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_status st = cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd, &o, loss);
  CHECK(st == CL_OK, "%s, %s (joined %d): train_step: %s", jm->what, what, joined,
        cl_model_error(m));
  *n = st == CL_OK ? ctest_flat(m, 1, g, MAXP) : 0;
  cl_model_free(m);
  return st == CL_OK;
}

static float g0[MAXP], g1[MAXP];

static void compare(const jmodel *jm, int k) {
  cl_config c = ctest_config(1, jm->h0, jm->h1, 3, 3, 1, 1);
  cl_step_options o;
  const char *what = case_of(k, jm, &c, &o);
  /* float32: the same sums in another order; the half types: the halves
   * apart round z to the storage type once more (2^-11, 2^-8 relative) */
  const double tol = c.dtype == CL_F32 ? 2e-5 : 5e-3;
  double l0 = NAN, l1 = NAN;
  size_t n0 = 0, n1 = 0;
  if (!step(jm, k, 0, &l0, g0, &n0) || !step(jm, k, 1, &l1, g1, &n1)) return;
  char name[128]; /* joined (second) against apart */
  snprintf(name, sizeof name, "%-26s %-32s joined:", jm->what, what);
  ctest_steps_agree(name, l0, g0, n0, l1, g1, n1, tol);
}

/* The rule's edge (CL_JOIN_RATIO 16): 1 input channel beside 16 hidden
 * joins, beside 15 it does not. */
static void edge(int hidden, int joins) {
  cl_config c = ctest_config(1, hidden, 1, 3, 3, 1, 1);
  cl_step_options o;
  memset(&o, 0, sizeof o);
  cl_model *m = ctest_model(&c);
  if (!m) return;
  const int calls = joined_calls(m, &o, 0, hidden, 1);
  CHECK(joins ? calls > 0 : calls == 0, "1 channel beside %d hidden: %d joined calls, expected %s",
        hidden, calls, joins ? "some" : "none");
  cl_model_free(m);
}

int main(void) {
  edge(16, 1);
  edge(15, 0);
  for (size_t j = 0; j < sizeof models / sizeof *models; j++)
    for (int k = 0; k < CTEST_STEP_CASES + EXTRA; k++) {
      if (models[j].h1 != 1 && k == CTEST_STEP_CASES + 3) continue; /* fed back: 1 channel out */
      compare(&models[j], k);
    }
  return ctest_done("test_core_join");
}
