/*
 * tests/c/test_core_lifetimes.c -- the lifetimes the planner shares memory
 * by, read off a step's list of operations (core/program.c), are all the
 * step needs: with CONVLSTM_POISON=1 every step buffer is NaN before the
 * first operation that uses it and after the last, and each configuration
 * below (a plain stack in checkpoint segments, recomputed chunks, tbptt
 * windows with either target, accumulation with a carried state, free
 * running; an encoder-forecaster plain, in segments with accumulation, and
 * in recomputed chunks) trains to the same bits as without.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "ctest.h"              /* CHECK, uniform01, ctest_model, ctest_flat */

#include <stdlib.h>
#include <string.h>

enum { MAXP = 4096, B = 4, T = 6, H = 6, W = 8, K = 3 };
static float X[B * T * 2 * H * W], Y[B * T * 2 * H * W];

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
  return ctest_done("test_core_lifetimes");
}
