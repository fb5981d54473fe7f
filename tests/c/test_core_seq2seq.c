/*
 * tests/c/test_core_seq2seq.c -- Shi et al. (2015)'s encoder-forecaster
 * (cl_config.forecaster) against a reference written here apart from the
 * core: double precision, naive loops, the contract's names and layouts
 * (pixel_unshuffle patches, forecaster layer 0 one convolution over h,
 * the head over every forecaster h, layer 0 first), and every gradient by
 * central finite differences of the reference's loss. For each case the
 * engine's prediction (cl_model_forward + cl_model_read_frames), its loss
 * and every parameter's gradient after one train_step (SGD, lr 0: the
 * gradients stay readable and the parameters unchanged) must match.
 * Also: what the model does not support is refused with a status, and a
 * patch that does not divide the frame is refused.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include "ctest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the reference ---------------------------------------------------- */

typedef struct rcase {
  const char *what;
  int L, C, p, H, W, B, T, K;
  int hid[3], k, rk, peep, bce_sum;
} rcase;

/* One tensor: its torch name, shape's element count, values. */
typedef struct rtensor {
  char name[64];
  size_t n;
  double *v;
} rtensor;

typedef struct rmodel {
  const rcase *c;
  int nt;
  rtensor t[64];
} rmodel;

static int frame_ch(const rcase *c) { return c->C * c->p * c->p; }

static rtensor *add_tensor(rmodel *r, const char *name, size_t n) {
  rtensor *t = &r->t[r->nt++];
  snprintf(t->name, sizeof t->name, "%s", name);
  t->n = n;
  t->v = calloc(n, sizeof(double));
  return t;
}

/* The contract's tensors, in state-dict order. */
static void ref_tensors(rmodel *r, const rcase *c) {
  char nm[64];
  r->c = c;
  r->nt = 0;
  for (int s = 0; s < 2; s++) { /* encoder, forecaster */
    const char *stack = s ? "forecaster" : "encoder";
    for (int l = 0; l < c->L; l++) {
      size_t h = (size_t)c->hid[l];
      size_t in = l ? (size_t)c->hid[l - 1] : s ? 0 : (size_t)frame_ch(c);
      int split = in && c->k != c->rk;
      size_t kk = (size_t)c->k * c->k, rkk = (size_t)c->rk * c->rk;
      if (!in) {
        snprintf(nm, sizeof nm, "%s.cell_list.%d.conv.weight", stack, l);
        add_tensor(r, nm, 4 * h * h * rkk);
      } else if (!split) {
        snprintf(nm, sizeof nm, "%s.cell_list.%d.conv.weight", stack, l);
        add_tensor(r, nm, 4 * h * (in + h) * kk);
      } else {
        snprintf(nm, sizeof nm, "%s.cell_list.%d.conv_x.weight", stack, l);
        add_tensor(r, nm, 4 * h * in * kk);
      }
      snprintf(nm, sizeof nm, "%s.cell_list.%d.%s", stack, l, split ? "conv_x.bias" : "conv.bias");
      add_tensor(r, nm, 4 * h);
      if (split) {
        snprintf(nm, sizeof nm, "%s.cell_list.%d.conv_h.weight", stack, l);
        add_tensor(r, nm, 4 * h * h * rkk);
      }
      if (c->peep) {
        const char *pn[3] = {"w_ci", "w_cf", "w_co"};
        for (int j = 0; j < 3; j++) {
          snprintf(nm, sizeof nm, "%s.cell_list.%d.%s", stack, l, pn[j]);
          add_tensor(r, nm, h);
        }
      }
    }
  }
  size_t sum = 0;
  for (int l = 0; l < c->L; l++) sum += (size_t)c->hid[l];
  add_tensor(r, "head.weight", (size_t)frame_ch(c) * sum);
  add_tensor(r, "head.bias", (size_t)frame_ch(c));
}

static double *tensor(rmodel *r, const char *fmt, const char *stack, int l, const char *role) {
  char nm[64];
  snprintf(nm, sizeof nm, fmt, stack, l, role);
  for (int i = 0; i < r->nt; i++)
    if (strcmp(r->t[i].name, nm) == 0) return r->t[i].v;
  return NULL;
}

/* out[o][y][x] += sum over ci, i, j of w(o, ci, i, j) in[ci][y + i - k/2][x + j - k/2],
 * zero padded; w's row o has stride ws per output and starts at channel c0
 * (torch's [4h, in + h, k, k] weight's input or hidden part). */
static void conv(double *out, int nout, const double *in, int nin, int H, int W, const double *w,
                 int k, int wstride, int c0) {
  int pad = k / 2;
  for (int o = 0; o < nout; o++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) {
        double s = 0;
        for (int ci = 0; ci < nin; ci++)
          for (int i = 0; i < k; i++)
            for (int j = 0; j < k; j++) {
              int yy = y + i - pad, xx = x + j - pad;
              if (yy < 0 || yy >= H || xx < 0 || xx >= W) continue;
              s += w[(size_t)o * wstride + ((size_t)(c0 + ci) * k + i) * k + j] *
                   in[((size_t)ci * H + yy) * W + xx];
            }
        out[((size_t)o * H + y) * W + x] += s;
      }
}

static double sig(double v) { return 1 / (1 + exp(-v)); }

/* One cell step of layer l of stack s over one sequence: x (nin channels,
 * NULL without input), h, c updated in place. */
static void cell(rmodel *r, int s, int l, const double *x, double *h, double *c) {
  const rcase *k = r->c;
  const char *stack = s ? "forecaster" : "encoder";
  int hh = k->hid[l], Hp = k->H / k->p, Wp = k->W / k->p, P = Hp * Wp;
  int in = l ? k->hid[l - 1] : s ? 0 : frame_ch(k), split = in && k->k != k->rk;
  double *z = calloc((size_t)4 * hh * P, sizeof(double));
  double *b = tensor(r, "%s.cell_list.%d.%s", stack, l, split ? "conv_x.bias" : "conv.bias");
  for (int o = 0; o < 4 * hh; o++)
    for (int q = 0; q < P; q++) z[(size_t)o * P + q] = b[o];
  if (!in) {
    conv(z, 4 * hh, h, hh, Hp, Wp, tensor(r, "%s.cell_list.%d.%s", stack, l, "conv.weight"),
         k->rk, hh * k->rk * k->rk, 0);
  } else if (!split) {
    double *w = tensor(r, "%s.cell_list.%d.%s", stack, l, "conv.weight");
    int st = (in + hh) * k->k * k->k;
    conv(z, 4 * hh, x, in, Hp, Wp, w, k->k, st, 0);
    conv(z, 4 * hh, h, hh, Hp, Wp, w, k->k, st, in);
  } else {
    conv(z, 4 * hh, x, in, Hp, Wp, tensor(r, "%s.cell_list.%d.%s", stack, l, "conv_x.weight"),
         k->k, in * k->k * k->k, 0);
    conv(z, 4 * hh, h, hh, Hp, Wp, tensor(r, "%s.cell_list.%d.%s", stack, l, "conv_h.weight"),
         k->rk, hh * k->rk * k->rk, 0);
  }
  double *wci = k->peep ? tensor(r, "%s.cell_list.%d.%s", stack, l, "w_ci") : NULL;
  double *wcf = k->peep ? tensor(r, "%s.cell_list.%d.%s", stack, l, "w_cf") : NULL;
  double *wco = k->peep ? tensor(r, "%s.cell_list.%d.%s", stack, l, "w_co") : NULL;
  for (int ch = 0; ch < hh; ch++)
    for (int q = 0; q < P; q++) {
      size_t a = (size_t)ch * P + q;
      double cp = c[a];
      double zi = z[a], zf = z[(size_t)hh * P + a], zo = z[(size_t)2 * hh * P + a];
      double zg = z[(size_t)3 * hh * P + a];
      double i = sig(zi + (wci ? wci[ch] * cp : 0)), f = sig(zf + (wcf ? wcf[ch] * cp : 0));
      double g = tanh(zg), cn = f * cp + i * g;
      double o = sig(zo + (wco ? wco[ch] * cn : 0));
      c[a] = cn;
      h[a] = o * tanh(cn);
    }
  free(z);
}

/* pixel_unshuffle of frame (b, t) of a torch-layout [B, T, C, H, W] array. */
static void unshuffle(const rcase *k, const float *a, int T, int b, int t, double *out) {
  int p = k->p, Hp = k->H / p, Wp = k->W / p;
  for (int c = 0; c < k->C; c++)
    for (int y = 0; y < k->H; y++)
      for (int x = 0; x < k->W; x++)
        out[(((size_t)c * p * p + (y % p) * p + x % p) * Hp + y / p) * Wp + x / p] =
            a[((((size_t)b * T + t) * k->C + c) * k->H + y) * k->W + x];
}

/* Forward over the batch: the frames predicted (torch layout [B, K, C, H,
 * W], after pixel_shuffle) into pred (may be NULL); returns the loss
 * against y (MSE mean, or BCE with logits summed). */
static double ref_forward(rmodel *r, const float *x, const float *y, double *pred) {
  const rcase *k = r->c;
  int p = k->p, Hp = k->H / p, Wp = k->W / p, P = Hp * Wp, Cp = frame_ch(k);
  double *h[3], *c[3], *f = calloc((size_t)Cp * P, sizeof(double));
  double *out = calloc((size_t)Cp * P, sizeof(double)), *yp = calloc((size_t)Cp * P, sizeof(double));
  double loss = 0;
  for (int l = 0; l < k->L; l++) {
    h[l] = calloc((size_t)k->hid[l] * P, sizeof(double));
    c[l] = calloc((size_t)k->hid[l] * P, sizeof(double));
  }
  double *hw = NULL, *hb = NULL;
  for (int i = 0; i < r->nt; i++) {
    if (!strcmp(r->t[i].name, "head.weight")) hw = r->t[i].v;
    if (!strcmp(r->t[i].name, "head.bias")) hb = r->t[i].v;
  }
  int S = 0;
  for (int l = 0; l < k->L; l++) S += k->hid[l];
  for (int b = 0; b < k->B; b++) {
    for (int l = 0; l < k->L; l++) {
      memset(h[l], 0, (size_t)k->hid[l] * P * sizeof(double));
      memset(c[l], 0, (size_t)k->hid[l] * P * sizeof(double));
    }
    for (int t = 0; t < k->T; t++) {
      unshuffle(k, x, k->T, b, t, f);
      for (int l = 0; l < k->L; l++) cell(r, 0, l, l ? h[l - 1] : f, h[l], c[l]);
    }
    for (int t = 0; t < k->K; t++) {
      for (int l = 0; l < k->L; l++) cell(r, 1, l, l ? h[l - 1] : NULL, h[l], c[l]);
      for (int o = 0; o < Cp; o++)
        for (int q = 0; q < P; q++) {
          double s = hb[o];
          int j0 = 0;
          for (int l = 0; l < k->L; l++) {
            for (int j = 0; j < k->hid[l]; j++)
              s += hw[(size_t)o * S + j0 + j] * h[l][(size_t)j * P + q];
            j0 += k->hid[l];
          }
          out[(size_t)o * P + q] = s;
        }
      unshuffle(k, y, k->K, b, t, yp);
      for (int i = 0; i < Cp * P; i++) {
        double v = out[i], tg = yp[i];
        loss += k->bce_sum ? (v > 0 ? v : 0) - v * tg + log1p(exp(-fabs(v))) : (v - tg) * (v - tg);
      }
      if (pred) /* pixel_shuffle back */
        for (int ch = 0; ch < k->C; ch++)
          for (int yy = 0; yy < k->H; yy++)
            for (int xx = 0; xx < k->W; xx++)
              pred[((((size_t)b * k->K + t) * k->C + ch) * k->H + yy) * k->W + xx] =
                  out[(((size_t)ch * p * p + (yy % p) * p + xx % p) * Hp + yy / p) * Wp + xx / p];
    }
  }
  for (int l = 0; l < k->L; l++) {
    free(h[l]);
    free(c[l]);
  }
  free(f);
  free(out);
  free(yp);
  size_t n = (size_t)k->B * k->K * k->C * k->H * k->W;
  return k->bce_sum ? loss : loss / (double)n;
}

/* ---- the engine ------------------------------------------------------- */

static cl_config forecaster_config(const rcase *k) {
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = k->C;
  c.n_layers = 2 * k->L;
  for (int l = 0; l < 2 * k->L; l++) {
    c.hidden_dims[l] = k->hid[l % k->L];
    c.kernel_sizes[l] = k->k;
    c.recurrent_kernel_sizes[l] = k->rk;
  }
  c.bias = 1;
  c.device = CL_DEVICE_CPU;
  c.n_threads = 2;
  c.peephole = k->peep ? CL_PEEP_CHANNEL : CL_PEEP_NONE;
  c.forecaster = 1;
  c.patch = k->p;
  return c;
}

static void run_case(const rcase *k) {
  rmodel r;
  ref_tensors(&r, k);
  cl_config cfg = forecaster_config(k);
  cl_model *m = NULL;
  char err[512];
  cl_status s = cl_model_create(&cfg, &m, err, sizeof err);
  CHECK(s == CL_OK, "%s: create: %s", k->what, err);
  if (s != CL_OK) return;
  CHECK(cl_model_n_tensors(m) == r.nt, "%s: %d tensors, the contract has %d", k->what,
        cl_model_n_tensors(m), r.nt);
  size_t total = 0;
  for (int i = 0; i < r.nt; i++) total += r.t[i].n;
  CHECK(cl_model_n_params(m) == total, "%s: %zu parameters, the contract has %zu", k->what,
        cl_model_n_params(m), total);
  /* every tensor by its contract name, drawn in [-0.5, 0.5) (peepholes too) */
  for (int i = 0; i < r.nt; i++) {
    float *v = malloc(r.t[i].n * sizeof(float));
    for (size_t j = 0; j < r.t[i].n; j++) {
      v[j] = (float)(uniform01(NULL) - 0.5);
      r.t[i].v[j] = v[j];
    }
    s = cl_model_set_param(m, r.t[i].name, v, r.t[i].n);
    CHECK(s == CL_OK, "%s: set %s: %s", k->what, r.t[i].name, cl_model_error(m));
    free(v);
  }
  size_t nx = (size_t)k->B * k->T * k->C * k->H * k->W, ny = (size_t)k->B * k->K * k->C * k->H * k->W;
  float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float));
  float *got = malloc(ny * sizeof(float));
  double *want = malloc(ny * sizeof(double));
  for (size_t i = 0; i < nx; i++) x[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < ny; i++) y[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {k->B, k->T, k->C, k->H, k->W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {k->B, k->K, k->C, k->H, k->W}};
  cl_host_array ga = {got, CL_HOST_TORCH_F32, 5, {k->B, k->K, k->C, k->H, k->W}};

  /* prediction */
  double ref_loss = ref_forward(&r, x, y, want);
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.horizon = k->K;
  s = cl_model_forward(m, &xa, 0, &o);
  CHECK(s == CL_OK, "%s: forward: %s", k->what, cl_model_error(m));
  s = cl_model_read_frames(m, &ga);
  CHECK(s == CL_OK, "%s: read_frames: %s", k->what, cl_model_error(m));
  double worst = 0;
  for (size_t i = 0; i < ny; i++) {
    double d = fabs(got[i] - want[i]) / (1e-3 + fabs(want[i]));
    if (d > worst) worst = d;
  }
  CHECK(worst < 1e-4, "%s: prediction differs from the reference by %g (relative)", k->what, worst);

  /* one training step: the loss and every gradient */
  memset(&o, 0, sizeof o);
  if (k->bce_sum) {
    o.loss.kind = CL_LOSS_BCE_LOGITS;
    o.loss.reduction = CL_REDUCE_SUM;
    o.loss.pos_weight = 1;
  }
  cl_optim opt;
  memset(&opt, 0, sizeof opt);
  opt.kind = CL_OPTIM_SGD;
  double loss = NAN;
  s = cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &opt, &o, &loss);
  CHECK(s == CL_OK, "%s: train_step: %s", k->what, cl_model_error(m));
  CHECK(fabs(loss - ref_loss) <= 1e-5 * fabs(ref_loss) + 1e-6, "%s: loss %.9g, reference %.9g",
        k->what, loss, ref_loss);
  double gworst = 0, gscale = 0;
  const char *gname = "";
  for (int i = 0; i < r.nt; i++) {
    float *g = malloc(r.t[i].n * sizeof(float));
    s = cl_model_get_grad(m, r.t[i].name, g, r.t[i].n);
    CHECK(s == CL_OK, "%s: grad %s: %s", k->what, r.t[i].name, cl_model_error(m));
    for (size_t j = 0; j < r.t[i].n; j++) {
      double keep = r.t[i].v[j], eps = 1e-5;
      r.t[i].v[j] = keep + eps;
      double lp = ref_forward(&r, x, y, NULL);
      r.t[i].v[j] = keep - eps;
      double lm = ref_forward(&r, x, y, NULL);
      r.t[i].v[j] = keep;
      double fd = (lp - lm) / (2 * eps), d = fabs(g[j] - fd);
      if (fabs(fd) > gscale) gscale = fabs(fd);
      if (d > gworst) {
        gworst = d;
        gname = r.t[i].name;
      }
    }
    free(g);
  }
  CHECK(gworst <= 1e-4 * gscale + 1e-6,
        "%s: a gradient differs from finite differences by %g (largest %g), worst in %s", k->what,
        gworst, gscale, gname);
  printf("  %-44s prediction %.1e, loss %.1e, gradients %.1e of %.2g\n", k->what, worst,
         fabs(loss - ref_loss), gworst, gscale);
  for (int i = 0; i < r.nt; i++) free(r.t[i].v);
  free(x);
  free(y);
  free(got);
  free(want);
  cl_model_free(m);
}

/* ---- refusals ---------------------------------------------------------- */

static void refusals(void) {
  rcase k = {"refusals", 1, 1, 2, 4, 4, 1, 2, 2, {2, 0, 0}, 3, 3, 1, 0};
  cl_config cfg = forecaster_config(&k);
  cl_model *m = NULL;
  char err[512];
  CHECK(cl_model_create(&cfg, &m, err, sizeof err) == CL_OK, "refusals: create: %s", err);
  if (!m) return;
  float x[2 * 6 * 6] = {0}, y[2 * 6 * 6] = {0};
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {1, 2, 1, 6, 6}}; /* 6 % 4: fine for p = 2 */
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {1, 2, 1, 6, 6}};
  cl_optim opt;
  memset(&opt, 0, sizeof opt);
  opt.kind = CL_OPTIM_SGD;
  cl_step_options o;
  memset(&o, 0, sizeof o);
  double loss;
  o.tbptt = 1;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &opt, &o, &loss) == CL_E_UNSUPPORTED,
        "tbptt is not refused");
  memset(&o, 0, sizeof o);
  o.state_mode = CL_STATE_CARRY;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &opt, &o, &loss) == CL_E_UNSUPPORTED,
        "a carried state is not refused");
  memset(&o, 0, sizeof o);
  CHECK(cl_model_forward(m, &xa, 1, &o) == CL_E_UNSUPPORTED, "a training forward is not refused");
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &opt, &o, &loss) == CL_OK,
        "a plain step fails: %s", cl_model_error(m));
  cl_data *d = NULL; /* data sets: supported (issue 34); a last-state one is not */
  CHECK(cl_data_create(m, &xa, &ya, CL_TARGET_LAST_STATE, &d) == CL_E_UNSUPPORTED && !d,
        "a last-state data set is not refused");
  CHECK(cl_data_create(m, &xa, &ya, CL_TARGET_SEQUENCE, &d) == CL_OK && d,
        "a data set of frames is refused: %s", cl_model_error(m));
  cl_data_free(d);
  cl_host_array odd = {x, CL_HOST_TORCH_F32, 5, {1, 2, 1, 5, 7}};
  CHECK(cl_model_train_step(m, &odd, &odd, CL_TARGET_SEQUENCE, &opt, &o, &loss) == CL_E_INVALID &&
            strstr(cl_model_error(m), "patch"),
        "a patch that does not divide the frame is not refused: %s", cl_model_error(m));
  cl_model_free(m);
  cfg.dropout[0] = 0.5; /* supported (issue 34), but not on the forecaster's first layer's input */
  CHECK(cl_model_create(&cfg, &m, err, sizeof err) == CL_OK, "dropout is refused: %s", err);
  cl_model_free(m);
  m = NULL;
  cfg.dropout[0] = 0, cfg.dropout[cfg.n_layers / 2] = 0.5;
  CHECK(cl_model_create(&cfg, &m, err, sizeof err) == CL_E_INVALID,
        "dropout of the forecaster's first layer, which reads no input, is not refused");
  cfg.dropout[cfg.n_layers / 2] = 0;
  cfg.hidden_dims[1] = 3;
  CHECK(cl_model_create(&cfg, &m, err, sizeof err) == CL_E_INVALID,
        "a forecaster unlike its encoder is not refused");
  cfg.hidden_dims[1] = 2;
  cfg.n_layers = 3;
  CHECK(cl_model_create(&cfg, &m, err, sizeof err) == CL_E_INVALID,
        "an odd number of layers is not refused");
}

/* Shi et al.'s Table 1: 5x5 kernels, 128-64-64, 4x4 patches of one channel. */
static void table1(void) {
  cl_config c;
  memset(&c, 0, sizeof c);
  int h[3] = {128, 64, 64};
  c.input_dim = 1;
  c.n_layers = 6;
  for (int l = 0; l < 6; l++) {
    c.hidden_dims[l] = h[l % 3];
    c.kernel_sizes[l] = 5;
  }
  c.bias = 1;
  c.peephole = CL_PEEP_CHANNEL;
  c.forecaster = 1;
  c.patch = 4;
  c.device = CL_DEVICE_CPU;
  cl_model *m = NULL;
  char err[512];
  CHECK(cl_model_create(&c, &m, err, sizeof err) == CL_OK, "table 1: %s", err);
  if (!m) return;
  CHECK(cl_model_n_params(m) == 7585296, "table 1: %zu parameters, not 7,585,296",
        cl_model_n_params(m));
  cl_model_free(m);
}

/* A file round trip with RMSprop's state: the reloaded model is an
 * encoder-forecaster of the same patch, every parameter bit-identical, and
 * the next step of both gives the same loss bit for bit; a plain stack's
 * file is refused when loaded into it. */
static void round_trip(void) {
  rcase k = {"file", 2, 1, 2, 4, 4, 2, 3, 2, {3, 2, 0}, 3, 1, 1, 0};
  cl_config cfg = forecaster_config(&k);
  cl_model *m = NULL, *back = NULL;
  char err[512];
  CHECK(cl_model_create(&cfg, &m, err, sizeof err) == CL_OK, "file: create: %s", err);
  if (!m) return;
  cl_model_init_params(m, uniform01, NULL);
  float x[2 * 3 * 16], y[2 * 2 * 16];
  for (int i = 0; i < 96; i++) x[i] = (float)uniform01(NULL);
  for (int i = 0; i < 64; i++) y[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {2, 3, 1, 4, 4}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {2, 2, 1, 4, 4}};
  cl_optim opt;
  memset(&opt, 0, sizeof opt);
  opt.kind = CL_OPTIM_RMSPROP;
  opt.lr = 1e-3;
  opt.alpha = 0.9;
  opt.eps = 1e-6;
  opt.momentum = 0.5;
  double l1, l2;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &opt, NULL, &l1) == CL_OK,
        "file: step: %s", cl_model_error(m));
  char dir[] = "/tmp/convlstm-seq2seq-XXXXXX", path[64];
  CHECK(mkdtemp(dir) != NULL, "file: no temporary folder");
  snprintf(path, sizeof path, "%s/model.safetensors", dir);
  CHECK(cl_model_save(m, path, &opt, 0, NULL, NULL) == CL_OK, "file: save: %s", cl_model_error(m));
  CHECK(cl_model_load(path, NULL, 1, &back, err, sizeof err) == CL_OK, "file: load: %s", err);
  if (back) {
    const cl_config *c = cl_model_config(back);
    CHECK(c->forecaster == 1 && c->patch == 2 && c->n_layers == 4, "file: the config came back "
          "as forecaster %d, patch %d, %d layers", c->forecaster, c->patch, c->n_layers);
    size_t n = cl_model_n_params(m);
    CHECK(n == cl_model_n_params(back), "file: parameter counts differ");
    for (int i = 0; i < cl_model_n_tensors(m); i++) {
      const char *name;
      int nd, dims[4];
      cl_model_tensor_info(m, i, &name, &nd, dims);
      size_t e = 1;
      for (int d = 0; d < nd; d++) e *= (size_t)dims[d];
      float *a = malloc(e * sizeof(float)), *b = malloc(e * sizeof(float));
      cl_model_get_param(m, name, a, e);
      CHECK(cl_model_get_param(back, name, b, e) == CL_OK && !memcmp(a, b, e * sizeof(float)),
            "file: %s differs after the round trip", name);
      free(a);
      free(b);
    }
    CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &opt, NULL, &l1) == CL_OK &&
              cl_model_train_step(back, &xa, &ya, CL_TARGET_SEQUENCE, &opt, NULL, &l2) == CL_OK &&
              l1 == l2,
          "file: the next step's loss differs: %.17g vs %.17g", l1, l2);
    cl_model_free(back);
  }
  /* a plain stack's file into the encoder-forecaster */
  cl_config pc = ctest_config(1, 3, 2, 3, 3, 1, 2);
  cl_model *plain = ctest_model(&pc);
  cl_saved *sv = NULL;
  if (plain && cl_model_save(plain, path, NULL, 0, NULL, NULL) == CL_OK &&
      cl_saved_read(path, &sv, err, sizeof err) == CL_OK) {
    CHECK(cl_saved_load_into(sv, m, 0) == CL_E_INVALID &&
              strstr(cl_model_error(m), "plain ConvLSTM stack"),
          "file: a plain stack's file loads into an encoder-forecaster: %s", cl_model_error(m));
  } else {
    CHECK(0, "file: the plain stack's file could not be written or read");
  }
  cl_saved_free(sv);
  cl_model_free(plain);
  remove(path);
  remove(dir);
  cl_model_free(m);
}

int main(void) {
  static const rcase cases[] = {
      /* what                                 L  C  p  H  W  B  T  K  hidden    k  rk peep bce */
      {"L1, patch 1, 3x3, no peepholes", 1, 1, 1, 4, 5, 2, 3, 2, {3, 0, 0}, 3, 3, 0, 0},
      {"L1, patch 2, 3x3 / 1x1, channel peepholes", 1, 1, 2, 4, 6, 2, 3, 2, {3, 0, 0}, 3, 1, 1, 0},
      {"L2, patch 2, 3x3, channel peepholes", 2, 1, 2, 4, 4, 2, 2, 3, {3, 2, 0}, 3, 3, 1, 0},
      {"L2, patch 1, 5x5 / 3x3, no peepholes, 2 ch", 2, 2, 1, 3, 4, 1, 2, 2, {2, 3, 0}, 5, 3, 0, 0},
      {"L2, patch 2, 3x3, channel, bce sum", 2, 2, 2, 4, 4, 2, 2, 2, {2, 2, 0}, 3, 3, 1, 1},
      {"L3, patch 2, 3x3 / 1x1, channel", 3, 1, 2, 4, 4, 1, 2, 2, {2, 3, 2}, 3, 1, 1, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
  refusals();
  table1();
  round_trip();
  return ctest_done("test_core_seq2seq");
}
