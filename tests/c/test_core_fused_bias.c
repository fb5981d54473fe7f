/*
 * tests/c/test_core_fused_bias.c -- the fused bias through the core: a
 * backend that says be->fused_bias gets each layer's bias in its cell
 * slots (gates_forward's bias, gates_backward's dbias) instead of its
 * convolution slots (forward.c, backward.c). Here the CPU backend, told so
 * by hand, must train one step to the loss and gradients of the same model
 * unfused, on every path that places a bias: a plain stack, no bias at all
 * (bias = 0), peepholes, per-gate dropout (grouped convolutions over four
 * masked copies), recompute_gates with checkpoints, free-running training
 * with a horizon (fed-back steps' gradients), the encoder-forecaster (a
 * layer with no input half: its bias with the hidden half), float16 and
 * bfloat16. Where a GPU is usable the CUDA backend does the same with
 * CONVLSTM_CUDA_FUSED_BIAS=1 against itself unfused (strict float32:
 * CONVLSTM_CUDA_TF32=0), which is what a GPU session runs; without one
 * that part says "skip cuda". There the fused step runs twice and must give
 * the same bits (CONVLSTM_CUDNN_DETERMINISTIC=1: the convolutions' own
 * algorithms deterministic too).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv */
#endif
#include "convlstm.h"
#include "core/internal.h" /* m->be: the fused_bias flag, told by hand */
#include "ctest.h"         /* CHECK, ctest_model, ctest_flat, ctest_rng */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 2, T = 4, K = 2, C = 2, H = 5, W = 4, MAXP = 4096 };

typedef struct fcase {
  const char *what;
  int forecaster, bias, peep, per_gate, recompute, free_run;
  cl_dtype dtype;
} fcase;

static const fcase cases[] = {
    {"plain", 0, 1, 0, 0, 0, 0, CL_F32},
    {"bias = 0", 0, 0, 0, 0, 0, 0, CL_F32},
    {"peepholes", 0, 1, 1, 0, 0, 0, CL_F32},
    {"per-gate dropout", 0, 1, 0, 1, 0, 0, CL_F32},
    {"recompute_gates, checkpoint", 0, 1, 0, 0, 1, 0, CL_F32},
    {"free-running horizon", 0, 1, 0, 0, 0, 1, CL_F32},
    {"encoder-forecaster", 1, 1, 0, 0, 0, 0, CL_F32},
    {"encoder-forecaster, peepholes, per-gate dropout", 1, 1, 1, 1, 0, 0, CL_F32},
    {"float16", 0, 1, 0, 0, 0, 0, CL_F16},
    {"bfloat16, recompute_gates", 0, 1, 0, 1, 1, 0, CL_BF16},
    {"float16 encoder-forecaster", 1, 1, 0, 0, 0, 0, CL_F16},
};

static cl_config config_of(const fcase *f, cl_device dev) {
  cl_config c = ctest_config(C, 3, f->forecaster ? 3 : C, 3, 3, f->bias, 1);
  c.device = dev;
  c.dtype = f->dtype;
  c.forecaster = f->forecaster;
  c.peephole = f->peep ? CL_PEEP_CHANNEL : CL_PEEP_NONE;
  if (f->per_gate) {
    c.dropout_masks = CL_MASKS_PER_GATE;
    c.dropout[0] = 0.25, c.recurrent_dropout[1] = 0.3;
  }
  return c;
}

/* One SGD step at lr 0 (the gradients stay readable, the parameters as
 * drawn): the loss and every gradient, flat. Returns 0 when it failed. */
static int step(const fcase *f, cl_device dev, int fused, double *loss, float *g, size_t *n) {
  cl_config c = config_of(f, dev);
  ctest_rng = 88172645463325252ull; /* the same parameters in every model */
  cl_model *m = ctest_model(&c);
  if (!m) return 0;
  m->be->fused_bias = fused;
  float x[B * T * C * H * W], y[B * T * C * H * W];
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)sin(0.37 * i);
  for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = (float)(0.5 * cos(0.21 * i));
  const int horizon = f->forecaster || f->free_run;
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {B, horizon ? K : T, C, H, W}};
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.horizon = f->free_run ? K : 0; /* a forecaster's horizon is y's steps */
  o.free_run = f->free_run;
  o.recompute_gates = f->recompute ? 2 : 0;
  o.checkpoint = f->recompute ? 2 : 0;
  o.draw_masks = f->per_gate, o.dropout_seed = 7;
  cl_optim sgd = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_status st = cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd, &o, loss);
  CHECK(st == CL_OK, "%s (%s, fused %d): train_step: %s", f->what, dev ? "cuda" : "cpu", fused,
        cl_model_error(m));
  *n = st == CL_OK ? ctest_flat(m, 1, g, MAXP) : 0;
  cl_model_free(m);
  return st == CL_OK;
}

static float g0[MAXP], g1[MAXP];

/* The fused step of f on dev against the unfused one on the same backend. */
static void compare(const fcase *f, cl_device dev, double tol) {
  double l0 = NAN, l1 = NAN;
  size_t n0 = 0, n1 = 0;
  if (!step(f, dev, 0, &l0, g0, &n0) || !step(f, dev, 1, &l1, g1, &n1)) return;
  char what[128]; /* the fused step (second) against the unfused */
  snprintf(what, sizeof what, "%-48s %-4s fused:", f->what, dev ? "cuda" : "cpu");
  ctest_steps_agree(what, l0, g0, n0, l1, g1, n1, tol);
  if (dev != CL_DEVICE_CUDA) return;
  /* the fused sums in a fixed order: the same bits run after run */
  double l2 = NAN;
  size_t n2 = 0;
  if (!step(f, dev, 1, &l2, g0, &n2)) return;
  CHECK(l2 == l1 && n2 == n1 && memcmp(g0, g1, n1 * sizeof *g0) == 0,
        "%s (cuda): the fused step again gives the same loss and gradients bit for bit", f->what);
}

int main(void) {
  /* float32: the same sums in another order (the bias added in the cell,
   * its gradient summed per step); half types: the unfused path rounds
   * z + bias to the storage type once more (2^-11, 2^-8 relative); a
   * GPU's float32 partial sums and cuDNN's own orders add to both */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    compare(&cases[i], CL_DEVICE_CPU, cases[i].dtype == CL_F32 ? 1e-5 : 5e-3);
  if (cl_backend_cuda_available()) {
    setenv("CONVLSTM_CUDA_TF32", "0", 1);
    setenv("CONVLSTM_CUDNN_DETERMINISTIC", "1", 1);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
      compare(&cases[i], CL_DEVICE_CUDA, cases[i].dtype == CL_F32 ? 1e-4 : 1e-2);
  } else {
    printf("skip cuda: no usable GPU\n");
  }
  return ctest_done("test_core_fused_bias");
}
