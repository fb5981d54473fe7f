/*
 * tests/c/test_core_scaler.c -- float16's dynamic loss scale against the
 * rule of torch.cuda.amp.GradScaler (its documentation): a step whose
 * scaled gradients overflow is skipped (parameters and optimizer untouched)
 * and multiplies the scale by backoff_factor; growth_interval steps in a
 * row without an overflow multiply it by growth_factor, counted again from
 * zero after a growth or a skip. The expected scales are written here from
 * that rule, step by step; test_core_refs.c checks what the scale does to
 * the gradients.
 */
#include "convlstm.h"
#include "ctest.h" /* CHECK, uniform01, ctest_config, ctest_model, ctest_flat */

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 3, C = 2, H = 5, W = 4, MAXP = 1 << 14 };
static float xs[B * T * C * H * W], ys[B * 3 * H * W], before[MAXP], after[MAXP];

static cl_model *half_model(void) {
  cl_config c = ctest_config(C, 4, 3, 3, 3, 1, 1);
  c.dtype = CL_F16;
  ctest_rng = 9;
  return ctest_model(&c);
}

/* One SGD step; 1 when the parameters moved. */
static int step(cl_model *m, int k) {
  cl_host_array xa = {xs, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  cl_host_array ya = {ys, CL_HOST_TORCH_F32, 4, {B, 3, H, W, 0}};
  cl_optim sgd = {.kind = CL_OPTIM_SGD, .lr = 0.01};
  size_t n = ctest_flat(m, 0, before, MAXP);
  double loss;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &sgd, NULL, &loss) == CL_OK,
        "step %d: %s", k, cl_model_error(m));
  ctest_flat(m, 0, after, MAXP);
  return memcmp(before, after, n * sizeof *before) != 0;
}

/* growth_interval 3: the scale doubles after steps 3, 6, 9, not before */
static void test_growth(void) {
  cl_model *m = half_model();
  CHECK(cl_model_set_loss_scale(m, 1024, 2, 0.5, 3) == CL_OK, "set: %s", cl_model_error(m));
  for (int k = 1; k <= 9; k++) {
    CHECK(step(m, k), "step %d was skipped", k);
    cl_loss_scale ls;
    cl_model_get_loss_scale(m, &ls);
    double want = 1024 * pow(2, k / 3);
    CHECK(ls.scale == want && ls.clean_steps == k % 3 && ls.skipped_steps == 0,
          "after step %d: scale %g (GradScaler: %g), %d clean steps (%d)", k, ls.scale, want,
          ls.clean_steps, k % 3);
  }
  CHECK(cl_model_optimizer_steps(m) == 9, "%lld updates of 9",
        (long long)cl_model_optimizer_steps(m));
  printf("growth: 1024 -> 8192 after 9 clean steps, doubling every 3rd\n");
  cl_model_free(m);
}

/* A scale of 2^40 overflows float16: each step is skipped and halves it,
 * until one fits; that one updates and starts counting clean steps. */
static void test_backoff(void) {
  cl_model *m = half_model();
  CHECK(cl_model_set_loss_scale(m, ldexp(1, 40), 2, 0.5, 2000) == CL_OK, "set: %s",
        cl_model_error(m));
  int k = 1, skipped = 0;
  for (; k <= 40; k++) {
    int moved = step(m, k);
    cl_loss_scale ls;
    cl_model_get_loss_scale(m, &ls);
    if (moved) {
      CHECK(ls.scale == ldexp(1, 40 - skipped) && ls.clean_steps == 1 && ls.skipped_in_a_row == 0,
            "the first update (step %d): scale %g, %d clean, %d skipped in a row", k, ls.scale,
            ls.clean_steps, ls.skipped_in_a_row);
      break;
    }
    skipped++;
    CHECK(ls.scale == ldexp(1, 40 - skipped) && ls.skipped_steps == skipped &&
              ls.skipped_in_a_row == skipped && ls.clean_steps == 0,
          "skipped step %d: scale %g (GradScaler: %g), %lld skipped", k, ls.scale,
          ldexp(1, 40 - skipped), (long long)ls.skipped_steps);
    CHECK(cl_model_optimizer_steps(m) == 0, "a skipped step updated");
    if (ls.scale != ldexp(1, 40 - skipped)) break;
  }
  CHECK(skipped >= 10 && k <= 40, "%d steps skipped, the first update at step %d", skipped, k);
  printf("backoff: %d steps skipped from 2^40, each halving the scale; step %d updated at 2^%d\n",
         skipped, k, 40 - skipped);
  cl_model_free(m);
}

int main(void) {
  ctest_rng = 5;
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) xs[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < sizeof ys / sizeof *ys; i++) ys[i] = (float)uniform01(NULL);
  test_growth();
  test_backoff();
  return ctest_done("test_core_scaler");
}
