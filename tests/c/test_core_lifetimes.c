/*
 * tests/c/test_core_lifetimes.c -- the lifetimes the planner shares memory
 * by, read off a step's list of operations (core/program.c), are all the
 * step needs: with CONVLSTM_POISON=1 every step buffer is NaN before the
 * first operation that uses it and after the last, and each configuration
 * below (a plain stack in checkpoint segments, recomputed chunks, tbptt
 * windows with either target, accumulation with a carried state, free
 * running; an encoder-forecaster plain, in segments with accumulation, and
 * in recomputed chunks) trains to the same bits as without.
 *
 * And d_hidden's places, which the planner derives from the same list
 * (cl_program_place): the layers share one region, at offset 0 where one
 * layer's value is dead before the next begins; with recomputed chunks, where
 * a layer's input-half gradient streams into the layer below's while its
 * own earlier steps are still to be read, each layer below lies clear of
 * those steps -- checked step by step here, against the rule the planner
 * followed before it derived it, and by training with chunks to the
 * parameters without them; views live at once (a list made by hand) take
 * disjoint places.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "core/plan.h"          /* cl_schedule_make, cl_plan_build_step */
#include "core/lifetimes.h"     /* cl_program_place, a list made by hand */
#include "ctest.h"              /* CHECK, uniform01, ctest_model, ctest_flat */

#include <math.h>

#include <stdlib.h>
#include <string.h>

enum { MAXP = 4096, B = 4, T = 6, H = 6, W = 8, K = 3 };
static float X[B * T * 2 * H * W], Y[B * T * 3 * H * W]; /* y: up to 3 channels */

typedef struct lcase {
  const char *name;
  int forecaster;
  cl_target target;
  int ck, rc, tb, acc, horizon, free_run;
  cl_state_mode state;
} lcase;

static cl_model *make(const lcase *k, int poison) {
  setenv("CONVLSTM_POISON", poison ? "1" : "0", 1); /* read at creation */
  cl_config c = ctest_config(2, 3, 2, 3, 3, 1, 1);
  if (k->forecaster) {
    c.n_layers = 4;
    c.hidden_dims[2] = 3, c.hidden_dims[3] = 2;
    c.kernel_sizes[2] = c.kernel_sizes[3] = 3;
    c.forecaster = 1;
    c.patch = 2;
  }
  ctest_rng = 88172645463325252ULL; /* the same parameters for both runs */
  return ctest_model(&c);
}

/* Two Adam steps; the losses and the parameters after them. */
static int run(const lcase *k, int poison, double *loss, float *params, size_t *n) {
  cl_model *m = make(k, poison);
  if (!m) return 0;
  int steps = k->forecaster ? K : k->horizon ? k->horizon : T, out_c = 2;
  cl_host_array xa = {X, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array ys = {Y, CL_HOST_TORCH_F32, 5, {B, steps, out_c, H, W}};
  cl_host_array yl = {Y, CL_HOST_TORCH_F32, 4, {B, out_c, H, W, 0}};
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.checkpoint = k->ck, o.recompute_gates = k->rc, o.tbptt = k->tb;
  o.accumulation_steps = k->acc, o.free_run = k->free_run;
  o.horizon = k->forecaster ? 0 : k->horizon; /* a forecaster's: its target's steps */
  o.state_mode = k->state;
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  int ok = 1;
  for (int s = 0; s < 2 && ok; s++) {
    const cl_host_array *y = k->target == CL_TARGET_SEQUENCE ? &ys : &yl;
    cl_status st = cl_model_train_step(m, &xa, y, k->target, &adam, &o, &loss[s]);
    CHECK(st == CL_OK, "%s (poison %d): step %d: %s", k->name, poison, s + 1, cl_model_error(m));
    ok = st == CL_OK;
  }
  *n = ctest_flat(m, 0, params, MAXP);
  cl_model_free(m);
  return ok;
}

static void same_bits(const lcase *k) {
  static float p0[MAXP], p1[MAXP];
  double l0[2] = {0}, l1[2] = {0};
  size_t n0 = 0, n1 = 0;
  if (!run(k, 0, l0, p0, &n0) || !run(k, 1, l1, p1, &n1)) return;
  CHECK(memcmp(l0, l1, sizeof l0) == 0, "%s: losses %.17g %.17g, poisoned %.17g %.17g", k->name,
        l0[0], l0[1], l1[0], l1[1]);
  CHECK(n0 == n1 && memcmp(p0, p1, n0 * sizeof(float)) == 0,
        "%s: parameters differ once buffers are poisoned outside their lifetimes", k->name);
}

/* The rule d_hidden's places followed before the planner derived them:
 * from the top layer down, a layer lies wholly under the one above when it
 * fits there, else as far above that one's start as that one is larger. */
static int rule_places(const int *h, int L, int *at) {
  int u = 0, need = h[L - 1];
  at[L - 1] = 0;
  for (int l = L - 2; l >= 0; l--) {
    u = h[l] <= u ? 0 : u + (h[l + 1] > h[l] ? h[l + 1] - h[l] : 0);
    at[l] = u;
    if (u + h[l] > need) need = u + h[l];
  }
  return need;
}

static cl_model *stack_of(int L, const int *h, int threads) {
  cl_config c = ctest_config(2, h[0], h[1], 3, 3, 1, threads);
  c.n_layers = L;
  for (int l = 0; l < L; l++) c.hidden_dims[l] = h[l], c.kernel_sizes[l] = 3;
  return ctest_model(&c);
}

/* One random stack: its places against the rule and step by step, and
 * the plan's d_hidden row their extent's size. */
static void places_of(int L, const int *h, int rc, int ck) {
  cl_model *m = stack_of(L, h, 1);
  if (!m) return;
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.recompute_gates = rc, o.checkpoint = ck;
  cl_schedule g;
  int at[CL_MAX_LAYERS], want[CL_MAX_LAYERS];
  CHECK(cl_schedule_make(m, B, T, H, W, 1, &o, &g) == CL_OK, "schedule: %s", cl_model_error(m));
  cl_schedule_target(m, CL_TARGET_SEQUENCE, &g);
  cl_plan built;
  char err[CL_ERRMSG_LEN];
  CHECK(cl_plan_build_step(m, &g, NULL, &built, at, err, sizeof err) == CL_OK, "places: %s", err);
  cl_plan_free(&built);
  int need = rule_places(h, L, want), extent = 0, same = 1;
  if (!rc) /* without chunks the input half runs after the time loop: all at 0 */
    for (int l = need = 0; l < L; l++) want[l] = 0, need = need > h[l] ? need : h[l];
  for (int l = 0; l < L; l++) {
    same &= at[l] == want[l];
    if (at[l] + h[l] > extent) extent = at[l] + h[l];
  }
  CHECK(same, "L %d h %d-%d-%d-%d rc %d ck %d: layer 0 at %d, want %d; 1 at %d, want %d", L, h[0],
        h[1], h[2], h[3], rc, ck, at[0], want[0], at[1], want[1]);
  /* layer l's step s (written once the layer above's steps s, s + 1, ...
   * are read) clear of that one's steps 0 .. s - 1, in rows of Bm x H x W */
  for (int l = 0; rc && l + 1 < L; l++)
    for (int s = 0; s < g.S; s++) {
      long w0 = (long)at[l] * g.S + (long)s * h[l], r0 = (long)at[l + 1] * g.S;
      CHECK(w0 + h[l] <= r0 || w0 >= r0 + (long)s * h[l + 1],
            "L %d rc %d: layer %d's step %d lands on layer %d's steps before it", L, rc, l, s,
            l + 1);
    }
  cl_plan plan;
  o.plan_target = 1 + CL_TARGET_SEQUENCE;
  if (cl_model_plan(m, B, T, H, W, 1, NULL, &o, &plan) == CL_OK) {
    size_t rows = 0;
    for (int i = 0; i < plan.n; i++)
      if (strcmp(plan.entries[i].name, "d_hidden") == 0) rows = plan.entries[i].bytes;
    size_t want_bytes = sizeof(float) * (size_t)g.S * g.Bm * H * W * (size_t)extent;
    CHECK(rows == want_bytes && extent == need, "L %d rc %d: d_hidden %zu bytes, want %zu", L, rc,
          rows, want_bytes);
    cl_plan_free(&plan);
  }
  cl_model_free(m);
}

/* Two Adam steps of a stack whose layers above are larger, with and
 * without recomputed chunks: the chunks' places change nothing. fc: an
 * encoder-forecaster of 2-5 layers a stack (patch 2), whose stacks' values
 * of d_hidden never live at once, so each stack's are placed afresh. */
static void chunks_train_alike(int fc) {
  const int h[3] = {2, 5, 3};
  float p[2][MAXP];
  size_t n[2] = {0, 0};
  for (int rc = 0; rc < 2; rc++) {
    ctest_rng = 88172645463325252ULL;
    cl_model *m;
    if (fc) {
      cl_config c = ctest_config(2, 2, 5, 3, 3, 1, 1);
      c.n_layers = 4, c.forecaster = 1, c.patch = 2;
      c.hidden_dims[2] = 2, c.hidden_dims[3] = 5, c.kernel_sizes[2] = c.kernel_sizes[3] = 3;
      m = ctest_model(&c);
    } else {
      m = stack_of(3, h, 1);
    }
    if (!m) return;
    cl_host_array xa = {X, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
    cl_host_array ys = {Y, CL_HOST_TORCH_F32, 5, {B, fc ? K : T, fc ? 2 : 3, H, W}};
    cl_step_options o;
    memset(&o, 0, sizeof o);
    o.recompute_gates = rc;
    cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
    double loss;
    for (int s = 0; s < 2; s++)
      CHECK(cl_model_train_step(m, &xa, &ys, CL_TARGET_SEQUENCE, &adam, &o, &loss) == CL_OK,
            "rc %d: %s", rc, cl_model_error(m));
    n[rc] = ctest_flat(m, 0, p[rc], MAXP);
    cl_model_free(m);
  }
  double worst = 0;
  for (size_t i = 0; i < n[0] && n[0] == n[1]; i++) {
    double d = fabs((double)p[0][i] - p[1][i]);
    if (d > worst) worst = d;
  }
  CHECK(n[0] == n[1] && worst <= 1e-6, "%s: recomputed chunks move a parameter by %g",
        fc ? "encoder-forecaster 2-5" : "hidden 2-5-3", worst);
}

/* The step keeps its list of ops between steps of one geometry: a step
 * with the other target, right after one with the first, trains as it does
 * on a model whose list was dropped in between (by an inference call). In
 * checkpoint segments the two targets' lists differ (each segment's share
 * of the loss). */
static void kept_ops_follow_target(void) {
  const int h[2] = {3, 2};
  double loss[2];
  float p[2][MAXP];
  size_t n[2];
  cl_host_array xa = {X, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array ys = {Y, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array yl = {Y, CL_HOST_TORCH_F32, 4, {B, 2, H, W, 0}};
  cl_optim sgd = {CL_OPTIM_SGD, 1e-1, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.checkpoint = 2;
  for (int dropped = 0; dropped < 2; dropped++) {
    ctest_rng = 88172645463325252ULL;
    cl_model *m = stack_of(2, h, 1);
    if (!m) return;
    double l0;
    CHECK(cl_model_train_step(m, &xa, &ys, CL_TARGET_SEQUENCE, &sgd, &o, &l0) == CL_OK,
          "sequence step: %s", cl_model_error(m));
    if (dropped) CHECK(cl_model_forward(m, &xa, 0, NULL) == CL_OK, "%s", cl_model_error(m));
    CHECK(cl_model_train_step(m, &xa, &yl, CL_TARGET_LAST_STATE, &sgd, &o, &loss[dropped]) ==
              CL_OK,
          "last-state step: %s", cl_model_error(m));
    n[dropped] = ctest_flat(m, 0, p[dropped], MAXP);
    cl_model_free(m);
  }
  CHECK(loss[0] == loss[1] && n[0] == n[1] && memcmp(p[0], p[1], n[0] * sizeof(float)) == 0,
        "a last-state step after a sequence step: loss %.17g, after the list was dropped %.17g",
        loss[0], loss[1]);
}

/* Views of d_hidden live at once take disjoint places; one after the
 * other, the same one. */
static void places_by_hand(void) {
  const int h[2] = {3, 2};
  cl_model *m = stack_of(2, h, 1);
  if (!m) return;
  cl_schedule g;
  CHECK(cl_schedule_make(m, B, T, H, W, 1, NULL, &g) == CL_OK, "schedule: %s", cl_model_error(m));
  for (int apart = 0; apart < 2; apart++) {
    cl_op v[4];
    memset(v, 0, sizeof v);
    /* each layer's d_hidden zeroed, then read by the head's backward */
    const int order[2][4] = {{0, 2, 1, 3}, {0, 1, 2, 3}};
    for (int i = 0; i < 4; i++) {
      int j = order[apart][i], l = j % 2;
      v[i].kind = j < 2 ? CL_OP_ZERO_DH : CL_OP_HEAD_BACKWARD;
      v[i].lo = l, v[i].hi = l + 1, v[i].len = 1, v[i].accumulate = 1, v[i].times = 1;
    }
    cl_program p = {v, 4, 4, 0};
    int at[2] = {-1, -1};
    int extent = cl_program_place(&p, &m->arch, &g, 2, CL_BUF_DH, h, at);
    if (apart)
      CHECK(at[0] == 0 && at[1] == 3 && extent == 5, "live at once: at %d, %d, extent %d", at[0],
            at[1], extent);
    else
      CHECK(at[0] == 0 && at[1] == 0 && extent == 3, "in turn: at %d, %d, extent %d", at[0], at[1],
            extent);
  }
  cl_model_free(m);
}

int main(void) {
  for (size_t i = 0; i < sizeof X / sizeof X[0]; i++) X[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < sizeof Y / sizeof Y[0]; i++) Y[i] = (float)uniform01(NULL);
  const cl_target S = CL_TARGET_SEQUENCE, L = CL_TARGET_LAST_STATE;
  const lcase cases[] = {
      {"plain, last state", 0, L, 0, 0, 0, 0, 0, 0, CL_STATE_ZERO},
      {"checkpoint segments", 0, S, 2, 0, 0, 0, 0, 0, CL_STATE_ZERO},
      {"recompute_gates, checkpoint", 0, L, 4, 2, 0, 0, 0, 0, CL_STATE_ZERO},
      {"tbptt, last state", 0, L, 0, 0, 4, 0, 0, 0, CL_STATE_ZERO},
      {"tbptt, sequence", 0, S, 0, 0, 4, 0, 0, 0, CL_STATE_ZERO},
      {"accumulation, carried state, checkpoint", 0, L, 3, 0, 0, 3, 0, 0, CL_STATE_CARRY},
      {"free running", 0, S, 0, 0, 0, 0, 3, 1, CL_STATE_ZERO},
      {"encoder-forecaster", 1, S, 0, 0, 0, 0, K, 0, CL_STATE_ZERO},
      {"encoder-forecaster, checkpoint, accumulation", 1, S, 2, 0, 0, 2, K, 0, CL_STATE_ZERO},
      {"encoder-forecaster, recompute_gates", 1, S, 0, 2, 0, 0, K, 0, CL_STATE_ZERO},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) same_bits(&cases[i]);
  for (int trial = 0; trial < 48; trial++) {
    int L = 2 + trial % 3, h[CL_MAX_LAYERS] = {0};
    for (int l = 0; l < L; l++) h[l] = 1 + (int)(uniform01(NULL) * 8);
    places_of(L, h, trial % 4 == 0 ? 0 : 1 + trial % 3, trial % 5 == 1 ? 2 : 0);
  }
  chunks_train_alike(0);
  chunks_train_alike(1);
  places_by_hand();
  kept_ops_follow_target();
  return ctest_done("test_core_lifetimes");
}
