/*
 * tests/c/test_core_horizon.c -- training with a horizon against PyTorch's
 * gradients, in the C suite: the forecast fixtures of
 * tools/make_fixtures_forecast.py (tests/testthat/fixtures/forecast/) that
 * test-parity-forecast.R reads too, here through the public header on the
 * CPU backend, so that a bug in the core's horizon, free-running or
 * scheduled-sampling paths fails `make ctest` and not only the R suite.
 *  - teacher: x followed by the first K - 1 true frames, the loss on the
 *    last K outputs;
 *  - free_run*: the model's own frames fed back, gradients through them
 *    (free_peep_ch with peepholes, free_drop / free_gate with the fixture's
 *    dropout masks, shared and per gate);
 *  - sampled*: scheduled sampling, the first step's truth flags (choices_0).
 * Each: the first step's loss (adam_losses[0], taken before the update) and
 * every gradient (grad/) with SGD at lr 0, and the same step in two
 * micro-batches (accumulation_steps 2). Exits nonzero on any failure.
 */
#include "convlstm.h"
#include "ctest.h"   /* CHECK, ctest_flat */
#include "fixture.h" /* fx_open_in, fx_config, fx_set_weights, fx_tensor, fx_flat */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXG (1 << 15)

static float g_step[MAXG], g_fx[MAXG];

/* fx_model plus what the forecast fixtures add: peepholes and dropout. */
static cl_model *forecast_model(const fixture *f) {
  cl_config c = fx_config(f, 2);
  if (fx_is(f, "peephole", "channel")) c.peephole = CL_PEEP_CHANNEL;
  if (fx_is(f, "peephole", "position")) {
    int hw[2] = {0, 0};
    fx_ints(f, "frame_size", hw, 2);
    c.peephole = CL_PEEP_POSITION;
    c.peephole_h = hw[0];
    c.peephole_w = hw[1];
  }
  const char *d = fx_record(f, "config", "dropout"), *r = fx_record(f, "config", "recurrent_dropout");
  for (int l = 0; l < c.n_layers; l++) {
    char *end;
    if (d) c.dropout[l] = strtod(d, &end), d = end;
    if (r) c.recurrent_dropout[l] = strtod(r, &end), r = end;
  }
  c.dropout_masks = fx_is(f, "dropout_masks", "per_gate") ? CL_MASKS_PER_GATE : CL_MASKS_SHARED;
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN];
  CHECK(cl_model_create(&c, &m, err, sizeof err) == CL_OK, "%s: create: %s", f->dir, err);
  if (m) CHECK(fx_set_weights(f, m), "%s: weights", f->dir);
  return m;
}

static void check(const char *name) {
  fixture f;
  if (!fx_open_in(&f, "forecast", name)) return;
  const char *dir = f.dir;
  int B = fx_int(&f, "B"), T = fx_int(&f, "T"), H = fx_int(&f, "H"), W = fx_int(&f, "W");
  int K = fx_int(&f, "horizon"), C = fx_int(&f, "input_dim");
  int teacher = strcmp(name, "teacher") == 0, sampled = strncmp(name, "sampled", 7) == 0;
  size_t nx, ny, nl;
  float *x = fx_tensor(&f, "x", &nx), *y = fx_tensor(&f, "y_frames", &ny);
  float *losses = fx_tensor(&f, "adam_losses", &nl);
  cl_model *m0 = forecast_model(&f);
  CHECK(x && y && losses && m0, "%s: fixture incomplete", dir);
  if (!(x && y && losses && m0)) return;
  cl_model_free(m0);
  size_t frame = (size_t)C * H * W;
  /* teacher forcing: x, then the first K - 1 true frames, per sequence */
  int Tx = teacher ? T + K - 1 : T;
  float *xin = malloc((size_t)B * Tx * frame * sizeof *xin);
  for (int b = 0; b < B; b++) {
    memcpy(xin + (size_t)b * Tx * frame, x + (size_t)b * T * frame, T * frame * sizeof *x);
    if (teacher)
      memcpy(xin + ((size_t)b * Tx + T) * frame, y + (size_t)b * K * frame,
             (K - 1) * frame * sizeof *y);
  }
  int truth[16] = {0};
  if (sampled) fx_ints(&f, "choices_0", truth, 16);
  cl_host_array xa = {xin, CL_HOST_TORCH_F32, 5, {B, Tx, C, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {B, K, C, H, W}};
  float *mx[CL_MAX_LAYERS] = {0}, *mh[CL_MAX_LAYERS] = {0};
  for (int acc = 1; acc <= 2; acc++) {
    cl_model *m = forecast_model(&f);
    if (!m) break;
    cl_step_options o = {0};
    o.horizon = K;
    o.free_run = !teacher;
    o.truth = sampled ? truth : NULL;
    o.accumulation_steps = acc;
    for (int l = 0; l < cl_model_config(m)->n_layers; l++) {
      char key[32];
      size_t n;
      snprintf(key, sizeof key, "mask_x/%d", l);
      if (!mx[l]) mx[l] = fx_tensor(&f, key, &n);
      snprintf(key, sizeof key, "mask_h/%d", l);
      if (!mh[l]) mh[l] = fx_tensor(&f, key, &n);
      o.mask_x[l] = mx[l];
      o.mask_h[l] = mh[l];
    }
    cl_optim sgd0 = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    double loss = NAN;
    CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd0, &o, &loss) == CL_OK,
          "%s: step: %s", dir, cl_model_error(m));
    size_t at = fx_flat(&f, m, "grad", g_fx, MAXG);
    CHECK(at > 0 && ctest_flat(m, 1, g_step, MAXG) == at, "%s: grad/", dir);
    double r = rel_diff(g_step, g_fx, at);
    CHECK(fabs(loss - losses[0]) <= 1e-5 * fabs(losses[0]), "%s (%d micro-batches): loss %.9g, "
          "PyTorch %.9g", dir, acc, loss, losses[0]);
    CHECK(r <= 1e-4, "%s (%d micro-batches): gradients %.2e from PyTorch's", dir, acc, r);
    if (acc == 1)
      printf("forecast %-14s loss %.7f (PyTorch %.7f), gradients within %.1e\n", name, loss,
             losses[0], r);
    cl_model_free(m);
  }
  for (int l = 0; l < CL_MAX_LAYERS; l++) free(mx[l]), free(mh[l]);
  free(xin);
  free(x);
  free(y);
  free(losses);
}

int main(void) {
  const char *names[] = {"teacher",      "free_run",     "free_run_deep", "free_run_k2",
                         "free_run_one", "free_peep_ch", "free_peep_pos", "free_drop",
                         "free_gate",    "sampled",      "sampled_deep",  "sampled_drop"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) check(names[i]);
  return ctest_done("test_core_horizon");
}
