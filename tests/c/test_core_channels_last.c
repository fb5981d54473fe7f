/*
 * tests/c/test_core_channels_last.c -- channels-last activations through
 * the core: a backend that says be->channels_last gets every activation in
 * NHWC (backend.h: cl_layout), and the core converts at its boundary alone
 * (core/pack.c: frames, targets, loss weights, states in, outputs, frames
 * and states out). Here the CPU backend, told so by hand through the
 * constructor the core takes, must train one step to the loss and
 * gradients of the same model in NCHW, and give the same outputs, last
 * states and rolled-forward frames, on every path that moves an activation
 * across the boundary: a plain stack, no bias, peepholes per channel,
 * recompute_gates with checkpoints, free-running training with a horizon, a
 * loss weight, states handed in, the encoder-forecaster (patched frames:
 * pixel_unshuffle and channels last at once), the fused bias, float16 and
 * bfloat16. Models that keep NCHW (dropout: its masks are drawn in NCHW
 * order; per-position peepholes) must say so and still train. Where a GPU is
 * usable the CUDA backend does the same with CONVLSTM_CUDA_CHANNELS_LAST=1
 * against itself without it (strict float32: CONVLSTM_CUDA_TF32=0); without
 * one that part says "skip cuda".
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv */
#endif
#include "convlstm.h"
#include "core/internal.h" /* m->layout, m->be, cl_model_create_with */
#include "ctest.h"         /* CHECK, ctest_config, ctest_flat, ctest_rng */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* MAXC: the most channels of a frame, target or state */
enum { B = 2, T = 4, K = 2, C = 2, H = 8, W = 4, MAXC = 5, MAXP = 8192, MAXO = 4096 };

typedef struct lcase {
  const char *what;
  int forecaster, bias, peep, recompute, free_run, weight, state, fused, dropout;
  cl_dtype dtype;
  cl_layout want; /* the layout the model must choose */
} lcase;

static const lcase cases[] = {
    {"plain", 0, 1, 0, 0, 0, 0, 0, 0, 0, CL_F32, CL_NHWC},
    {"bias = 0", 0, 0, 0, 0, 0, 0, 0, 0, 0, CL_F32, CL_NHWC},
    {"peepholes per channel", 0, 1, CL_PEEP_CHANNEL, 0, 0, 0, 0, 0, 0, CL_F32, CL_NHWC},
    {"recompute_gates, checkpoint", 0, 1, 0, 1, 0, 0, 0, 0, 0, CL_F32, CL_NHWC},
    {"free-running horizon", 0, 1, 0, 0, 1, 0, 0, 0, 0, CL_F32, CL_NHWC},
    {"loss weight", 0, 1, 0, 0, 0, 1, 0, 0, 0, CL_F32, CL_NHWC},
    {"states handed in", 0, 1, 0, 0, 0, 0, 1, 0, 0, CL_F32, CL_NHWC},
    {"fused bias", 0, 1, CL_PEEP_CHANNEL, 0, 0, 0, 0, 1, 0, CL_F32, CL_NHWC},
    {"encoder-forecaster (2x2 patches)", 1, 1, 0, 0, 0, 0, 0, 0, 0, CL_F32, CL_NHWC},
    {"encoder-forecaster, fused bias, weight", 1, 1, 0, 0, 0, 1, 0, 1, 0, CL_F32, CL_NHWC},
    {"float16", 0, 1, 0, 0, 0, 0, 0, 0, 0, CL_F16, CL_NHWC},
    {"bfloat16, recompute_gates", 0, 1, 0, 1, 0, 0, 0, 0, 0, CL_BF16, CL_NHWC},
    {"float16 encoder-forecaster", 1, 1, 0, 0, 0, 0, 0, 0, 0, CL_F16, CL_NHWC},
    {"dropout keeps NCHW", 0, 1, 0, 0, 0, 0, 0, 0, 1, CL_F32, CL_NCHW},
    {"per-position peepholes keep NCHW", 0, 1, CL_PEEP_POSITION, 0, 0, 0, 0, 0, 0, CL_F32,
     CL_NCHW},
};

/* The CPU backend asking for channels last (and, with fused, the bias in
 * its cell slots), as a GPU backend would: the constructor the core takes. */
static int want_fused;
static cl_status cpu_channels_last(const cl_config *cfg, cl_backend **out, char *err,
                                   size_t errlen) {
  cl_status s = cl_backend_cpu_create(cfg->n_threads, out);
  if (s != CL_OK) {
    snprintf(err, errlen, "could not create the CPU backend");
    return s;
  }
  (*out)->channels_last = 1;
  (*out)->fused_bias = want_fused;
  return CL_OK;
}

/* The top layer's hidden size: a forecaster's, one that feeds its
 * predictions back (it must equal the input's channels), or a plain one. */
static int top_of(const lcase *f) { return f->forecaster ? 3 : f->free_run ? C : MAXC; }

static cl_config config_of(const lcase *f, cl_device dev) {
  cl_config c = ctest_config(C, 3, top_of(f), 3, 3, f->bias, 1);
  c.device = dev;
  c.dtype = f->dtype;
  c.forecaster = f->forecaster;
  if (f->forecaster) c.patch = 2;
  c.peephole = f->peep;
  if (f->peep == CL_PEEP_POSITION) c.peephole_h = H, c.peephole_w = W;
  if (f->dropout) c.dropout[0] = 0.25, c.recurrent_dropout[1] = 0.3;
  return c;
}

/* What one model gives: the step's loss and gradients, then an inference
 * forward's outputs and last states (a plain stack; with a horizon its
 * rolled frames). */
typedef struct result {
  double loss;
  size_t n;
  float g[MAXP];
  float out[MAXO]; /* the forward's values, flat, in a fixed order */
  size_t n_out;
  cl_layout layout;
} result;

static float x[B * T * C * H * W], y[B * T * MAXC * H * W], wt[B * T * MAXC * H * W];
static float s0[2][2][B * MAXC * H * W]; /* states handed in: [layer][h, c] */

/* The model of f (NCHW, or channels last where cl asks) on dev. */
static cl_model *model_of(const lcase *f, cl_device dev, int cl) {
  cl_config c = config_of(f, dev);
  ctest_rng = 88172645463325252ull; /* the same parameters in every model */
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN] = "";
  cl_status st;
  if (dev == CL_DEVICE_CUDA) {
    setenv("CONVLSTM_CUDA_CHANNELS_LAST", cl ? "1" : "0", 1);
    setenv("CONVLSTM_CUDA_FUSED_BIAS", f->fused ? "1" : "0", 1);
    st = cl_model_create(&c, &m, err, sizeof err);
  } else if (cl) {
    want_fused = f->fused;
    st = cl_model_create_with(&c, cpu_channels_last, &m, err, sizeof err);
  } else {
    st = cl_model_create(&c, &m, err, sizeof err);
    if (st == CL_OK) m->be->fused_bias = f->fused;
  }
  CHECK(st == CL_OK, "%s: create: %s", f->what, err);
  if (st != CL_OK) return NULL;
  cl_model_init_params(m, uniform01, NULL);
  return m;
}

static void options_of(const lcase *f, cl_step_options *o, cl_host_array *wa,
                       cl_host_array st[4]) {
  memset(o, 0, sizeof *o);
  o->horizon = f->free_run ? K : 0; /* a forecaster's horizon is y's steps */
  o->free_run = f->free_run;
  o->recompute_gates = f->recompute ? 2 : 0;
  o->checkpoint = f->recompute ? 2 : 0;
  o->draw_masks = f->dropout, o->dropout_seed = 7;
  if (f->weight) o->weight = wa;
  if (f->state) {
    for (int l = 0; l < 2; l++)
      for (int k = 0; k < 2; k++) {
        cl_host_array a = {s0[l][k], CL_HOST_TORCH_F32, 4, {B, l ? top_of(f) : 3, H, W}};
        st[2 * l + k] = a;
      }
    o->state = st;
    o->state_mode = CL_STATE_GIVEN;
  }
}

/* An inference forward's results, flat into r->out: a plain stack's top
 * layer's outputs at every step and last states; with a horizon (free-run,
 * the forecaster) the frames rolled forward instead of the outputs. */
static cl_status infer(const lcase *f, cl_model *m, const cl_host_array *xa, cl_host_array *wa,
                       cl_host_array st[4], result *r) {
  const int top = top_of(f), horizon = f->free_run || f->forecaster;
  cl_step_options io;
  options_of(f, &io, wa, st);
  io.weight = NULL, io.free_run = 0, io.recompute_gates = 0, io.checkpoint = 0;
  io.horizon = horizon ? K : 0;
  io.outputs = CL_OUTPUTS_ALL;
  cl_status s = cl_model_forward(m, xa, 0, &io);
  CHECK(s == CL_OK, "%s: forward: %s", f->what, cl_model_error(m));
  const size_t nseq = (size_t)B * T * top * H * W, nst = (size_t)B * top * H * W;
  float *at = r->out;
  if (horizon) {
    cl_host_array fr = {at, CL_HOST_TORCH_F32, 5, {B, K, C, H, W}};
    if (s == CL_OK) s = cl_model_read_frames(m, &fr);
    at += (size_t)B * K * C * H * W;
  } else {
    cl_host_array out = {at, CL_HOST_TORCH_F32, 5, {B, T, top, H, W}};
    if (s == CL_OK) s = cl_model_read_output(m, 1, &out);
    at += nseq;
  }
  for (int k = 0; k < 2 && !f->forecaster; k++, at += nst) {
    cl_host_array sa = {at, CL_HOST_TORCH_F32, 4, {B, top, H, W}};
    if (s == CL_OK) s = cl_model_read_state(m, 1, k, &sa);
  }
  CHECK(s == CL_OK, "%s: outputs, states, frames: %s", f->what, cl_model_error(m));
  r->n_out = s == CL_OK ? (size_t)(at - r->out) : 0;
  return s;
}

static int run(const lcase *f, cl_device dev, int cl, result *r) {
  cl_model *m = model_of(f, dev, cl);
  if (!m) return 0;
  r->layout = m->layout;
  const int horizon = f->forecaster || f->free_run;
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  const int top = top_of(f), ny = f->forecaster ? C : top;
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {B, horizon ? K : T, ny, H, W}};
  cl_host_array wa = ya;
  wa.data = wt;
  cl_host_array st[4];
  cl_step_options o;
  options_of(f, &o, &wa, st);
  cl_optim sgd = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_status s = cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd, &o, &r->loss);
  CHECK(s == CL_OK, "%s (%s, layout %d): train_step: %s", f->what, dev ? "cuda" : "cpu", cl,
        cl_model_error(m));
  r->n = s == CL_OK ? ctest_flat(m, 1, r->g, MAXP) : 0;
  r->n_out = 0;
  if (s == CL_OK) s = infer(f, m, &xa, &wa, st, r);
  cl_model_free(m);
  return s == CL_OK;
}

static result r0, r1;

/* f channels last against NCHW on the same backend. */
static void compare(const lcase *f, cl_device dev, double tol) {
  const char *on = dev ? "cuda" : "cpu";
  if (!run(f, dev, 0, &r0) || !run(f, dev, 1, &r1)) return;
  CHECK(r0.layout == CL_NCHW, "%s (%s): a backend not asking for channels last keeps NCHW",
        f->what, on);
  CHECK(r1.layout == f->want, "%s (%s): the model chose layout %d, expected %d", f->what, on,
        (int)r1.layout, (int)f->want);
  const double dl = fabs(r1.loss - r0.loss) / fmax(fabs(r0.loss), 1e-30);
  CHECK(r0.n == r1.n && r0.n > 0, "%s: %zu and %zu gradients", f->what, r0.n, r1.n);
  const double dg = r0.n == r1.n ? rel_diff(r1.g, r0.g, r0.n) : INFINITY;
  const double dout = r0.n_out == r1.n_out ? rel_diff(r1.out, r0.out, r0.n_out) : INFINITY;
  CHECK(isfinite(r1.loss) && dl <= tol, "%s (%s): loss NHWC %.9g, NCHW %.9g (rel %.2e, tol %.0e)",
        f->what, on, r1.loss, r0.loss, dl, tol);
  CHECK(dg <= tol, "%s (%s): gradients NHWC vs NCHW: max diff / max |g| %.2e (tol %.0e)",
        f->what, on, dg, tol);
  CHECK(dout <= tol, "%s (%s): outputs and last states NHWC vs NCHW: %.2e (tol %.0e)", f->what,
        on, dout, tol);
  printf("%-42s %-4s layout %s: loss rel %.1e, gradients %.1e, outputs %.1e (tol %.0e)\n",
         f->what, on, r1.layout == CL_NHWC ? "NHWC" : "NCHW", dl, dg, dout, tol);
}

int main(void) {
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)sin(0.37 * i);
  for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = (float)(0.5 * cos(0.21 * i));
  for (size_t i = 0; i < sizeof wt / sizeof *wt; i++) wt[i] = (float)(0.5 + 0.5 * sin(0.13 * i));
  float *sf = &s0[0][0][0];
  for (size_t i = 0; i < sizeof s0 / sizeof *sf; i++) sf[i] = (float)(0.3 * cos(0.7 * i));
  /* float32: the convolutions run the same NCHW kernels between moves,
   * bit for bit; the cell's rows run along the channels instead of the
   * pixels, so vector and scalar exp/tanh meet other elements (a few ulp);
   * half types: such an ulp may flip a rounding to the storage type */
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
    compare(&cases[i], CL_DEVICE_CPU, cases[i].dtype == CL_F32 ? 1e-5 : 2e-2);
  if (cl_backend_cuda_available()) {
    setenv("CONVLSTM_CUDA_TF32", "0", 1);
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
      compare(&cases[i], CL_DEVICE_CUDA, cases[i].dtype == CL_F32 ? 1e-4 : 2e-2);
  } else {
    printf("skip cuda: no usable GPU\n");
  }
  return ctest_done("test_core_channels_last");
}
