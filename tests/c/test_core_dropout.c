/*
 * tests/c/test_core_dropout.c -- the dropout masks the core draws
 * (core/dropout.c, core/dropout_rng.h), checked from outside the generator:
 * every element is 0 or 1 / (1 - p) exactly (the inverted-dropout scale,
 * computed here), the share kept is 1 - p within five standard deviations
 * of a binomial's, the input and h_{t-1} masks of a layer and two seeds
 * differ, and a training step with drawn masks is the step given those
 * masks (the loss and the gradients bit for bit), shared and per gate.
 * test_backend_ops checks mask_draw against splitmix64 bit for bit; this
 * test checks what the numbers mean, which a wrong threshold or scale
 * would change on both sides of that comparison.
 */
#include "convlstm.h"
#include "ctest.h" /* CHECK, ctest_config, ctest_model, ctest_flat */

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 6, T = 3, H = 9, W = 7, CIN = 2, H0 = 5, H1 = 3 };
#define MAXG (1 << 14)

static cl_config dropout_config(double p_x, double p_h, int per_gate) {
  cl_config c = ctest_config(CIN, H0, H1, 3, 3, 1, 1);
  c.dropout[0] = p_x;
  c.recurrent_dropout[0] = p_h;
  c.dropout[1] = p_x;
  c.dropout_masks = per_gate ? CL_MASKS_PER_GATE : CL_MASKS_SHARED;
  return c;
}

/* Layer l's mask of kind k (0: x, 1: h) for `seed`: every value 0 or
 * 1 / (1 - p), and the share kept within 5 sd of 1 - p. Its element count
 * in *n; the caller frees it. */
static float *check_mask(cl_model *m, uint64_t seed, int l, int k, int C, int G, double p,
                         size_t *n) {
  *n = (size_t)B * G * C * H * W;
  float *v = malloc(*n * sizeof *v);
  CHECK(cl_model_dropout_mask(m, seed, l, k, B, H, W, v) == CL_OK, "mask %d/%d: %s", l, k,
        cl_model_error(m));
  const float keep = (float)(1.0 / (1.0 - p));
  size_t kept = 0, odd = 0;
  for (size_t i = 0; i < *n; i++) {
    kept += v[i] == keep;
    odd += v[i] != keep && v[i] != 0.0f;
  }
  CHECK(odd == 0, "layer %d kind %d p %.2f: %zu values neither 0 nor %.7g", l, k, p, odd, keep);
  const double share = (double)kept / *n, sd = sqrt(p * (1 - p) / *n);
  CHECK(fabs(share - (1 - p)) <= 5 * sd, "layer %d kind %d p %.2f: kept %.4f, not %.4f +- %.4f",
        l, k, p, share, 1 - p, 5 * sd);
  return v;
}

static void check_rates(double p_x, double p_h, int per_gate) {
  cl_config c = dropout_config(p_x, p_h, per_gate);
  cl_model *m = ctest_model(&c);
  if (!m) return;
  const int G = per_gate ? 4 : 1;
  size_t nx, nh, n2;
  float *mx = check_mask(m, 11, 0, 0, CIN, G, p_x, &nx);
  float *mh = check_mask(m, 11, 0, 1, H0, G, p_h, &nh);
  float *mx2 = check_mask(m, 12, 0, 0, CIN, G, p_x, &n2);
  free(check_mask(m, 11, 1, 0, H0, G, p_x, &n2));
  CHECK(memcmp(mx, mx2, nx * sizeof *mx) != 0, "seeds 11 and 12 drew the same input mask");
  CHECK(memcmp(mx, mh, (nx < nh ? nx : nh) * sizeof *mx) != 0, "x and h masks alike");
  float out[1];
  CHECK(cl_model_dropout_mask(m, 11, 1, 1, B, H, W, out) == CL_E_INVALID,
        "layer 2 has no recurrent_dropout, yet a mask came");
  free(mx), free(mh), free(mx2);
  cl_model_free(m);
}

/* One SGD step (lr 0: the parameters stay) of m on x, y: its loss and
 * gradients into g (their count in *ng), masks drawn from seed 77 or given. */
static double step(cl_model *m, const float *x, const float *y, int draw,
                   const float *const *given, float *g, size_t *ng) {
  cl_host_array xa = {(void *)x, CL_HOST_TORCH_F32, 5, {B, T, CIN, H, W}};
  cl_host_array ya = {(void *)y, CL_HOST_TORCH_F32, 4, {B, H1, H, W, 0}};
  cl_optim sgd = {.kind = CL_OPTIM_SGD};
  cl_step_options o = {0};
  o.draw_masks = draw;
  o.dropout_seed = 77;
  if (!draw) {
    o.mask_x[0] = given[0];
    o.mask_h[0] = given[1];
    o.mask_x[1] = given[2];
  }
  double loss = NAN;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &sgd, &o, &loss) == CL_OK,
        "step: %s", cl_model_error(m));
  *ng = ctest_flat(m, 1, g, MAXG);
  return loss;
}

static float g_drawn[MAXG], g_given[MAXG];

static void check_drawn_is_given(int per_gate) {
  cl_config c = dropout_config(0.4, 0.25, per_gate);
  const size_t nx = (size_t)B * T * CIN * H * W, ny = (size_t)B * H1 * H * W;
  float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
  for (size_t i = 0; i < nx; i++) x[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < ny; i++) y[i] = (float)uniform01(NULL);
  cl_model *m = ctest_model(&c);
  const int G = per_gate ? 4 : 1, chans[3] = {CIN, H0, H0};
  float *mask[3];
  for (int i = 0; i < 3; i++) {
    mask[i] = malloc((size_t)B * G * chans[i] * H * W * sizeof(float));
    CHECK(m && cl_model_dropout_mask(m, 77, i == 2, i == 1, B, H, W, mask[i]) == CL_OK,
          "mask %d", i);
  }
  size_t n1 = 0, n2 = 0;
  const float *given[3] = {mask[0], mask[1], mask[2]};
  const double l1 = m ? step(m, x, y, 1, NULL, g_drawn, &n1) : NAN;
  const double l2 = m ? step(m, x, y, 0, given, g_given, &n2) : NAN;
  cl_model_free(m);
  CHECK(l1 == l2 && n1 == n2 && n1 > 0 && memcmp(g_drawn, g_given, n1 * sizeof *g_drawn) == 0,
        "%s: drawn masks' step (loss %.9g) is not the given masks' (%.9g)",
        per_gate ? "per gate" : "shared", l1, l2);
  for (int i = 0; i < 3; i++) free(mask[i]);
  free(x), free(y);
}

int main(void) {
  const double rates[][2] = {{0.05, 0.5}, {0.5, 0.1}, {0.8, 0.3}};
  for (int per_gate = 0; per_gate < 2; per_gate++) {
    for (size_t i = 0; i < sizeof rates / sizeof *rates; i++)
      check_rates(rates[i][0], rates[i][1], per_gate);
    check_drawn_is_given(per_gate);
  }
  return ctest_done("test_core_dropout");
}
