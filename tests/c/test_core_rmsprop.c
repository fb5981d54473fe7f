/*
 * tests/c/test_core_rmsprop.c -- the paper's training set-up in the C suite,
 * against PyTorch: the training fixtures of tools/make_training_fixtures.py
 * (tests/testthat/fixtures/training/) for torch.optim.RMSprop (plain,
 * momentum, centered, weight decay, all of them with clipping) and for the
 * losses' reductions "sum" and "batchmean" (BCE with logits summed per
 * sequence, as Shi et al. report it). Each fixture's steps run through
 * cl_model_train_step; every step's loss and the parameters after the last
 * must be PyTorch's within float32 rounding (1e-5 relative, as the R tests).
 */
#include "ctest.h"   /* CHECK, rel_diff */
#include "fixture.h" /* fx_open_in, fx_model, fx_tensor, fx_gap, fx_num, fx_optim, fx_loss */

#include <math.h>
#include <stdlib.h>
#include <string.h>

static void check(const char *name) {
  fixture f;
  if (!fx_open_in(&f, "training", name)) return;
  const char *dir = f.dir;
  const int B = fx_int(&f, "B"), T = fx_int(&f, "T"), H = fx_int(&f, "H"), W = fx_int(&f, "W");
  const int C = fx_int(&f, "input_dim"), steps = fx_int(&f, "steps");
  int hidden[CL_MAX_LAYERS];
  const int L = fx_ints(&f, "hidden_dims", hidden, CL_MAX_LAYERS);
  size_t nx, ny, nl, nw = 0;
  float *x = fx_tensor(&f, "x", &nx), *y = fx_tensor(&f, "y", &ny);
  float *losses = fx_tensor(&f, "losses", &nl), *w = fx_tensor(&f, "weight", &nw);
  cl_model *m = fx_model(&f, 1);
  CHECK(x && y && losses && m && nl == (size_t)steps, "%s: fixture incomplete", dir);
  if (!(x && y && losses && m && nl == (size_t)steps)) return;
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {B, hidden[L - 1], H, W, 0}};
  cl_host_array wa = {w, CL_HOST_TORCH_F32, 4, {B, hidden[L - 1], H, W, 0}};
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.loss = fx_loss(&f);
  o.max_grad_norm = fx_num(&f, "max_grad_norm", 0);
  o.weight = w ? &wa : NULL;
  const cl_optim opt = fx_optim(&f);
  double worst = 0;
  for (int s = 0; s < steps; s++) {
    double loss = NAN;
    CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &opt, &o, &loss) == CL_OK,
          "%s step %d: %s", dir, s + 1, cl_model_error(m));
    const double d = fabs(loss - losses[s]) / fabs(losses[s]);
    CHECK(d <= 1e-5, "%s step %d: loss %.9g, PyTorch %.9g", dir, s + 1, loss, losses[s]);
    worst = fmax(worst, d);
  }
  const double pworst = fx_gap(&f, m, "params", 0);
  CHECK(pworst <= 1e-5, "%s: parameters %.2e from PyTorch's after %d steps", dir, pworst, steps);
  printf("%-22s %d steps: losses within %.1e, parameters within %.1e of PyTorch's\n", name,
         steps, worst, pworst);
  cl_model_free(m);
  free(x), free(y), free(losses), free(w);
}

int main(void) {
  const char *names[] = {"rmsprop",       "rmsprop_momentum", "rmsprop_centered",
                         "rmsprop_weight_decay", "rmsprop_all", "bce_batchmean",
                         "bce_sum",       "mse_sum_weighted"};
  for (size_t i = 0; i < sizeof names / sizeof *names; i++) check(names[i]);
  return ctest_done("test_core_rmsprop");
}
