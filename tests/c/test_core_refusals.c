/*
 * tests/c/test_core_refusals.c -- every refusal of the public C API
 * (convlstm.h) for bad input or a combination the engine does not run, each
 * checked for its status (not only that the call failed) and, for a call on
 * a model, for the model staying usable: its parameters unchanged bit for
 * bit, a prediction on fixed inputs the same bit for bit as before the
 * refusal, and at the end of each group one training step equal, loss and
 * every parameter, to the same step of a twin model that saw no refusal.
 * Each limit is tested on both sides: the value at the edge accepted, one
 * step beyond refused.
 *  - cl_model_create: every check of the configuration, plain and
 *    encoder-forecaster; in particular a forecaster whose kernels, state
 *    kernels or dilation differ from its encoder's (each field apart);
 *  - a plain model: forward, reads, train_step (optimizer, loss, weight,
 *    schedule, accumulation, carried state, communicator), data sets,
 *    parameters, dtype, loss scale, dropout masks, plans;
 *  - an encoder-forecaster: a given initial state for its prediction (it
 *    starts from zeros: refused, never silently ignored), a horizon < 1, the
 *    train_step options its schedule does not run, its target's shape, its
 *    plans;
 *  - RMSprop's update guard, centered: cases where the centered
 *    denominator sqrt(square_avg - grad_avg^2) + eps is what makes the
 *    update non-finite (Inf at once with alpha 0; NaN after steps of
 *    constant gradients with alpha 0.9), at the step a reference written
 *    here predicts, so that a guard predicting the plain denominator
 *    sqrt(square_avg) + eps lets the update write non-finite parameters and
 *    fails here (test_backend_ops.c has the same two kinds of case for each
 *    backend's rmsprop_check, against its reference).
 * Not here: the refusals of files (cl_saved_*, cl_model_save, their
 * malformed headers and metadata: test_core_safetensors.c,
 * test_core_save_targets.c), of communicators (test_core_comm.c,
 * test_core_dist.c), of the JSON reader (test_core_json.c), of a GPU
 * (test_cuda_*.c), and the backend slots' own (test_backend_ops.c).
 */
#include "ctest.h" /* CHECK, uniform01, ctest_model, ctest_flat */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MAXP 8192

static const unsigned long long SEED = 0x2545F4914F6CDD1DULL;

/* A model with parameters drawn from a fixed seed: two calls, two twins. */
static cl_model *seeded(const cl_config *c) {
  ctest_rng = SEED;
  return ctest_model(c);
}

static void fill(float *a, size_t n, unsigned seed) {
  unsigned long long s = 0x9E3779B97F4A7C15ULL * (seed + 1);
  for (size_t i = 0; i < n; i++) {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    a[i] = (float)((double)(s >> 40) / 16777216.0) - 0.5f;
  }
}

/* ---- usable after a refusal -------------------------------------------- */

/* A model's fingerprint: its parameters, and a prediction on fixed inputs
 * (a plain model: the last layer's last h; an encoder-forecaster: its
 * frames over horizon 2). */
typedef struct snap {
  float p[MAXP], out[MAXP];
  size_t np, no;
} snap;

static float probe_x[4 * 3 * 3 * 8 * 8];

static size_t predict(cl_model *m, float *out) {
  const cl_config *c = cl_model_config(m);
  enum { B = 2, T = 3, H = 4, W = 4 };
  cl_host_array xa = {probe_x, CL_HOST_TORCH_F32, 5, {B, T, c->input_dim, H, W}};
  cl_step_options o = {0};
  if (c->forecaster) {
    o.horizon = 2;
    if (cl_model_forward(m, &xa, 0, &o) != CL_OK) return 0;
    cl_host_array fa = {out, CL_HOST_TORCH_F32, 5, {B, 2, c->input_dim, H, W}};
    if (cl_model_read_frames(m, &fa) != CL_OK) return 0;
    return (size_t)B * 2 * c->input_dim * H * W;
  }
  o.outputs = CL_OUTPUTS_LAST;
  if (cl_model_forward(m, &xa, 0, &o) != CL_OK) return 0;
  int top = c->n_layers - 1, h = c->hidden_dims[top];
  cl_host_array ha = {out, CL_HOST_TORCH_F32, 4, {B, h, H, W, 0}};
  if (cl_model_read_state(m, top, 0, &ha) != CL_OK) return 0;
  return (size_t)B * h * H * W;
}

static void take(cl_model *m, snap *s) {
  s->np = ctest_flat(m, 0, s->p, MAXP);
  s->no = predict(m, s->out);
  CHECK(s->no > 0, "a prediction fails: %s", cl_model_error(m));
}

static snap now_; /* scratch of usable() */

/* The model after a refusal: the same parameters, the same prediction. */
static void usable(cl_model *m, const snap *s, const char *what) {
  size_t np = ctest_flat(m, 0, now_.p, MAXP);
  CHECK(np == s->np && memcmp(now_.p, s->p, np * sizeof(float)) == 0,
        "%s: the refusal changed the parameters", what);
  size_t no = predict(m, now_.out);
  CHECK(no == s->no && memcmp(now_.out, s->out, no * sizeof(float)) == 0,
        "%s: after the refusal the prediction fails or differs (%s)", what, cl_model_error(m));
}

/* A refused call: its status, a message, and the model as it was. */
#define REFUSED(m, s, call, want, what)                                                   \
  do {                                                                                    \
    cl_status got_ = (call);                                                              \
    CHECK(got_ == (want), "%s: status %s, want %s (%s)", what, cl_status_name(got_),       \
          cl_status_name(want), cl_model_error(m));                                       \
    CHECK(cl_model_error(m)[0] != '\0', "%s: refused without a message", what);           \
    usable(m, s, what);                                                                   \
  } while (0)

#define ACCEPTED(m, call, what) \
  CHECK((call) == CL_OK, "%s: refused at the edge: %s", what, cl_model_error(m))

/* One train step on m and on its twin: the same loss, the same parameters. */
static void same_step(cl_model *m, cl_model *twin, const cl_host_array *x, const cl_host_array *y,
                      cl_target t, const char *what) {
  static float a[MAXP], b[MAXP];
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  double l1 = NAN, l2 = NAN;
  cl_status s1 = cl_model_train_step(m, x, y, t, &adam, NULL, &l1);
  cl_status s2 = cl_model_train_step(twin, x, y, t, &adam, NULL, &l2);
  CHECK(s1 == CL_OK && s2 == CL_OK, "%s: a step after the refusals: %s / %s", what,
        cl_model_error(m), cl_model_error(twin));
  size_t n1 = ctest_flat(m, 0, a, MAXP), n2 = ctest_flat(twin, 0, b, MAXP);
  CHECK(l1 == l2 && isfinite(l1), "%s: the step's loss %.17g, the twin's %.17g", what, l1, l2);
  CHECK(n1 == n2 && memcmp(a, b, n1 * sizeof(float)) == 0,
        "%s: after the step the parameters differ from the twin's", what);
}

/* ---- cl_model_create ----------------------------------------------------- */

static void refuse_create(const cl_config *c, cl_status want, const char *what) {
  cl_model *m = (cl_model *)&m; /* not NULL: the call must clear it */
  char err[CL_ERRMSG_LEN] = "";
  int alive = cl_models_alive();
  cl_status s = cl_model_create(c, &m, err, sizeof err);
  CHECK(s == want && m == NULL && err[0] && cl_models_alive() == alive,
        "create, %s: status %s (want %s), model %s, '%s'", what, cl_status_name(s),
        cl_status_name(want), m ? "not NULL" : "NULL", err);
  if (s == CL_OK && m && m != (cl_model *)&m) cl_model_free(m);
}

static void accept_create(const cl_config *c, const char *what) {
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN] = "";
  CHECK(cl_model_create(c, &m, err, sizeof err) == CL_OK && m, "create, %s: refused: %s", what,
        err);
  cl_model_free(m);
}

static cl_config plain_config(void) { return ctest_config(3, 3, 2, 3, 1, 1, 1); }

static void create_plain(void) {
  cl_config c0 = plain_config(), c;
  c = c0, c.input_dim = 0, refuse_create(&c, CL_E_INVALID, "input_dim 0");
  c = c0, c.input_dim = 1, accept_create(&c, "input_dim 1");
  c = c0, c.n_layers = 0, refuse_create(&c, CL_E_INVALID, "0 layers");
  c = c0, c.n_layers = CL_MAX_LAYERS + 1, refuse_create(&c, CL_E_INVALID, "33 layers");
  c = c0, c.n_layers = CL_MAX_LAYERS;
  for (int l = 0; l < CL_MAX_LAYERS; l++) c.hidden_dims[l] = 1, c.kernel_sizes[l] = 1;
  accept_create(&c, "32 layers");
  c = c0, c.hidden_dims[1] = 0, refuse_create(&c, CL_E_INVALID, "hidden 0");
  c = c0, c.kernel_sizes[0] = 0, refuse_create(&c, CL_E_INVALID, "kernel 0");
  c = c0, c.kernel_sizes[1] = 4, refuse_create(&c, CL_E_INVALID, "kernel 4");
  c = c0, c.kernel_sizes[1] = -1, refuse_create(&c, CL_E_INVALID, "kernel -1");
  c = c0, c.kernel_widths[0] = 2, refuse_create(&c, CL_E_INVALID, "kernel width 2");
  c = c0, c.kernel_widths[0] = -1, refuse_create(&c, CL_E_INVALID, "kernel width -1");
  c = c0, c.kernel_widths[0] = 5, accept_create(&c, "kernel 3 x 5");
  c = c0, c.recurrent_kernel_sizes[0] = 2, refuse_create(&c, CL_E_INVALID, "state kernel 2");
  c = c0, c.recurrent_kernel_sizes[0] = -1, refuse_create(&c, CL_E_INVALID, "state kernel -1");
  c = c0, c.recurrent_kernel_sizes[0] = 3, c.recurrent_kernel_widths[0] = 4;
  refuse_create(&c, CL_E_INVALID, "state kernel width 4");
  c = c0, c.recurrent_kernel_widths[0] = 3;
  refuse_create(&c, CL_E_INVALID, "a state kernel width without its height");
  c = c0, c.recurrent_kernel_sizes[0] = 1, c.recurrent_kernel_widths[0] = 5;
  accept_create(&c, "state kernel 1 x 5");
  c = c0, c.dilation_h[0] = -1, refuse_create(&c, CL_E_INVALID, "dilation height -1");
  c = c0, c.dilation_w[1] = -1, refuse_create(&c, CL_E_INVALID, "dilation width -1");
  c = c0, c.dilation_h[0] = 0, c.dilation_w[0] = 2, accept_create(&c, "dilation 0 x 2");
  c = c0, c.dropout[0] = 1, refuse_create(&c, CL_E_INVALID, "dropout 1");
  c = c0, c.dropout[0] = -0.01, refuse_create(&c, CL_E_INVALID, "dropout -0.01");
  c = c0, c.dropout[1] = NAN, refuse_create(&c, CL_E_INVALID, "dropout NaN");
  c = c0, c.recurrent_dropout[1] = 1, refuse_create(&c, CL_E_INVALID, "recurrent_dropout 1");
  c = c0, c.recurrent_dropout[1] = NAN, refuse_create(&c, CL_E_INVALID, "recurrent_dropout NaN");
  c = c0, c.dropout[0] = nextafter(1, 0), c.recurrent_dropout[1] = nextafter(1, 0);
  accept_create(&c, "dropout just below 1");
  c = c0, c.dropout_masks = 2, refuse_create(&c, CL_E_INVALID, "dropout_masks 2");
  c = c0, c.dropout_masks = -1, refuse_create(&c, CL_E_INVALID, "dropout_masks -1");
  c = c0, c.dropout_masks = CL_MASKS_PER_GATE, accept_create(&c, "dropout_masks per gate");
  c = c0, c.peephole = 3, refuse_create(&c, CL_E_INVALID, "peephole 3");
  c = c0, c.peephole = -1, refuse_create(&c, CL_E_INVALID, "peephole -1");
  c = c0, c.peephole = CL_PEEP_POSITION, c.peephole_h = 4;
  refuse_create(&c, CL_E_INVALID, "per-position peepholes without a frame width");
  c.peephole_w = 5, accept_create(&c, "per-position peepholes 4 x 5");
  c = c0, c.peephole = CL_PEEP_CHANNEL, c.peephole_w = 5;
  refuse_create(&c, CL_E_INVALID, "a frame size with per-channel peepholes");
  c = c0, c.n_threads = -1, refuse_create(&c, CL_E_INVALID, "threads -1");
  c = c0, c.n_threads = CL_MAX_THREADS + 1, refuse_create(&c, CL_E_INVALID, "threads 1025");
  c = c0, c.n_threads = CL_MAX_THREADS, accept_create(&c, "threads 1024");
  c = c0, c.dtype = (cl_dtype)3, refuse_create(&c, CL_E_INVALID, "dtype 3");
  c = c0, c.dtype = CL_BF16, accept_create(&c, "bfloat16");
}

/* An encoder-forecaster of two layers per stack: kernels 3 and 5, frames in
 * patches of 2. */
static cl_config fc_config(void) {
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = 1;
  c.n_layers = 4;
  c.hidden_dims[0] = c.hidden_dims[2] = 3;
  c.hidden_dims[1] = c.hidden_dims[3] = 2;
  c.kernel_sizes[0] = c.kernel_sizes[2] = 3;
  c.kernel_sizes[1] = c.kernel_sizes[3] = 5;
  c.bias = 1;
  c.device = CL_DEVICE_CPU;
  c.n_threads = 1;
  c.forecaster = 1;
  c.patch = 2;
  return c;
}

static void create_forecaster(void) {
  cl_config c0 = fc_config(), c;
  accept_create(&c0, "the encoder-forecaster");
  c = c0, c.forecaster = 2, refuse_create(&c, CL_E_INVALID, "forecaster = 2");
  c = c0, c.n_layers = 3, refuse_create(&c, CL_E_INVALID, "a forecaster of 3 layers");
  c = c0, c.n_layers = CL_MAX_LAYERS;
  for (int l = 0; l < CL_MAX_LAYERS; l++) c.hidden_dims[l] = 1, c.kernel_sizes[l] = 1;
  refuse_create(&c, CL_E_INVALID, "a forecaster of 32 layers (no room for the head)");
  c.n_layers = CL_MAX_LAYERS - 2, accept_create(&c, "a forecaster of 30 layers");
  c = c0, c.patch = -1, refuse_create(&c, CL_E_INVALID, "patch -1");
  c = c0, c.patch = 0, accept_create(&c, "patch 0 (none)");
  /* the stacks must mirror each other: each field apart */
  c = c0, c.hidden_dims[3] = 3, refuse_create(&c, CL_E_INVALID, "forecaster hidden 3 vs 2");
  c = c0, c.recurrent_kernel_sizes[2] = 5;
  refuse_create(&c, CL_E_INVALID, "forecaster layer 1's state kernel 5 vs the encoder's 3");
  c = c0, c.recurrent_kernel_sizes[2] = 5, c.recurrent_kernel_widths[2] = 3;
  refuse_create(&c, CL_E_INVALID, "forecaster layer 1's state kernel 5 x 3 vs 3 x 3");
  c = c0, c.recurrent_kernel_sizes[0] = c.recurrent_kernel_sizes[2] = 3;
  c.recurrent_kernel_widths[2] = 1;
  refuse_create(&c, CL_E_INVALID, "forecaster layer 1's state kernel 3 x 1 vs 3 x 3");
  c = c0, c.recurrent_kernel_sizes[1] = c.recurrent_kernel_sizes[3] = 5, c.kernel_sizes[3] = 3;
  refuse_create(&c, CL_E_INVALID, "forecaster layer 2's input kernel 3 vs the encoder's 5");
  c.kernel_widths[3] = 5;
  refuse_create(&c, CL_E_INVALID, "forecaster layer 2's input kernel 3 x 5 vs 5 x 5");
  c = c0, c.recurrent_kernel_sizes[1] = c.recurrent_kernel_sizes[3] = 5;
  c.kernel_widths[3] = 3;
  refuse_create(&c, CL_E_INVALID, "forecaster layer 2's input kernel 5 x 3 vs 5 x 5");
  c = c0, c.dilation_h[2] = 2, refuse_create(&c, CL_E_INVALID, "forecaster dilation height 2");
  c = c0, c.dilation_w[3] = 2, refuse_create(&c, CL_E_INVALID, "forecaster dilation width 2");
  c = c0, c.dilation_w[1] = c.dilation_w[3] = 2, accept_create(&c, "both stacks' dilation 2");
  c = c0, c.dilation_h[0] = 1, accept_create(&c, "dilation 1 and its default 0");
  /* forecaster layer 0 has no input: only its state kernel must match */
  c = c0, c.kernel_sizes[2] = 7, c.recurrent_kernel_sizes[2] = 3;
  accept_create(&c, "forecaster layer 1 without input, its state kernel the encoder's");
  /* dropout (a table row turned to supported, issue 34), but not on the
   * input of forecaster layer 1, which reads none */
  c = c0, c.recurrent_dropout[2] = 0.5, accept_create(&c, "recurrent dropout");
  c = c0, c.dropout[1] = c.dropout[3] = 0.5, accept_create(&c, "dropout");
  c = c0, c.dropout[2] = 0.5, refuse_create(&c, CL_E_INVALID, "dropout of forecaster layer 1");
  c = c0, c.peephole = CL_PEEP_POSITION, c.peephole_h = c.peephole_w = 2;
  refuse_create(&c, CL_E_UNSUPPORTED, "per-position peepholes");
  c = c0, c.peephole = CL_PEEP_CHANNEL, accept_create(&c, "per-channel peepholes");
}

/* ---- a plain model's calls ---------------------------------------------- */

enum { PB = 2, PT = 3, PC = 3, PH = 4, PW = 4, PTOP = 2 };
static float px[PB * PT * PC * PH * PW], py[PB * PT * PTOP * PH * PW], pw[PB * PT * PTOP * PH * PW];

static void plain_calls(void) {
  cl_config cfg = plain_config();
  cl_model *m = seeded(&cfg), *twin = seeded(&cfg);
  if (!m || !twin) return;
  static snap s;
  take(m, &s);
  fill(px, sizeof px / sizeof *px, 1);
  fill(py, sizeof py / sizeof *py, 2);
  cl_host_array x = {px, CL_HOST_TORCH_F32, 5, {PB, PT, PC, PH, PW}};
  cl_host_array yl = {py, CL_HOST_TORCH_F32, 4, {PB, PTOP, PH, PW, 0}};
  cl_host_array ys = {py, CL_HOST_TORCH_F32, 5, {PB, PT, PTOP, PH, PW}};
  cl_optim sgd0 = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* lr 0: edges that train */
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  cl_step_options o;
  double loss;
  cl_host_array a;

  /* forward */
  a = x, a.ndim = 4;
  REFUSED(m, &s, cl_model_forward(m, &a, 0, NULL), CL_E_INVALID, "forward: x of 4 dimensions");
  a = x, a.dims[1] = 0;
  REFUSED(m, &s, cl_model_forward(m, &a, 0, NULL), CL_E_INVALID, "forward: x of 0 steps");
  a = x, a.dims[2] = 2;
  REFUSED(m, &s, cl_model_forward(m, &a, 0, NULL), CL_E_INVALID, "forward: 2 channels, not 3");
  memset(&o, 0, sizeof o), o.tbptt = 2;
  REFUSED(m, &s, cl_model_forward(m, &x, 1, &o), CL_E_INVALID, "training forward: tbptt");
  memset(&o, 0, sizeof o), o.recompute_gates = 1;
  REFUSED(m, &s, cl_model_forward(m, &x, 1, &o), CL_E_INVALID,
          "training forward: recompute_gates");
  memset(&o, 0, sizeof o), o.horizon = 1;
  REFUSED(m, &s, cl_model_forward(m, &x, 1, &o), CL_E_INVALID, "training forward: a horizon");
  memset(&o, 0, sizeof o), o.state_mode = CL_STATE_CARRY;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "inference: a carried state");
  REFUSED(m, &s, cl_model_forward(m, &x, 1, &o), CL_E_INVALID, "training forward: carried");
  memset(&o, 0, sizeof o), o.state_mode = (cl_state_mode)3;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "forward: state mode 3");
  memset(&o, 0, sizeof o), o.outputs = (cl_outputs)2;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "forward: outputs 2");
  memset(&o, 0, sizeof o), o.horizon = -1;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "forward: horizon -1");
  memset(&o, 0, sizeof o), o.horizon = 1;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID,
          "forward: a horizon with 2 hidden channels fed back into 3 input channels");
  /* a given state: present, shaped [B, h, H, W] per layer, finite */
  float st[2 * 2 * PB * 3 * PH * PW] = {0};
  cl_host_array sa[4];
  for (int l = 0; l < 2; l++)
    for (int w = 0; w < 2; w++) {
      cl_host_array e = {st + (2 * l + w) * PB * 3 * PH * PW, CL_HOST_TORCH_F32, 4,
                         {PB, cfg.hidden_dims[l], PH, PW, 0}};
      sa[2 * l + w] = e;
    }
  memset(&o, 0, sizeof o), o.state_mode = CL_STATE_GIVEN;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "forward: no state arrays");
  o.state = sa;
  sa[3].dims[1] = 3;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "forward: layer 2's c of 3");
  sa[3].dims[1] = 2, sa[2].ndim = 5;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "forward: an h of 5 dims");
  sa[2].ndim = 4, st[5] = NAN;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "forward: a NaN in a state");
  st[5] = 0;
  ACCEPTED(m, cl_model_forward(m, &x, 0, &o), "forward: a given state of zeros");

  /* reads */
  cl_model *fresh = seeded(&cfg);
  float buf[PB * PT * 3 * PH * PW];
  cl_host_array ra = {buf, CL_HOST_TORCH_F32, 5, {PB, PT, 3, PH, PW}};
  if (fresh) {
    CHECK(cl_model_read_output(fresh, 0, &ra) == CL_E_STATE, "read before any forward");
    cl_host_array fr = {buf, CL_HOST_TORCH_F32, 5, {PB, 1, PC, PH, PW}};
    CHECK(cl_model_read_frames(fresh, &fr) == CL_E_STATE, "frames before any forward");
    cl_model_free(fresh);
  }
  /* (usable() predicts keeping the last states only: each read after a
   * forward that keeps every output) */
  ACCEPTED(m, cl_model_forward(m, &x, 0, NULL), "forward");
  REFUSED(m, &s, cl_model_read_output(m, 2, &ra), CL_E_INVALID, "read: layer 3 of 2");
  ACCEPTED(m, cl_model_forward(m, &x, 0, NULL), "forward");
  REFUSED(m, &s, cl_model_read_output(m, -1, &ra), CL_E_INVALID, "read: layer 0");
  ACCEPTED(m, cl_model_forward(m, &x, 0, NULL), "forward");
  ra.dims[2] = 2;
  REFUSED(m, &s, cl_model_read_output(m, 0, &ra), CL_E_INVALID, "read: 2 channels, not 3");
  ACCEPTED(m, cl_model_forward(m, &x, 0, NULL), "forward");
  ra.dims[2] = 3, ra.ndim = 4;
  REFUSED(m, &s, cl_model_read_output(m, 0, &ra), CL_E_INVALID, "read: 4 dims, not 5");
  ACCEPTED(m, cl_model_forward(m, &x, 0, NULL), "forward");
  ra.ndim = 5;
  CHECK(cl_model_read_output(m, 0, &ra) == CL_OK, "read: layer 1's outputs: %s",
        cl_model_error(m));
  cl_host_array sta = {buf, CL_HOST_TORCH_F32, 4, {PB, 2, PH, PW, 0}};
  REFUSED(m, &s, cl_model_read_state(m, 0, 0, &sta), CL_E_INVALID, "read_state: 2 of 3 channels");
  cl_host_array fr = {buf, CL_HOST_TORCH_F32, 5, {PB, 1, PC, PH, PW}};
  REFUSED(m, &s, cl_model_read_frames(m, &fr), CL_E_STATE, "frames without a horizon");

  /* train_step: the optimizer, checked as the floats the update uses */
  cl_optim bad[] = {
      {(cl_optim_kind)0, 1e-2, 0, 0, 0, 0, 0, 0, 0, 0},
      {(cl_optim_kind)5, 1e-2, 0, 0, 0, 0, 0, 0, 0, 0},
      {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 1},   /* centered: RMSprop's */
      {CL_OPTIM_SGD, 1e-2, 0, 0, 0, 0, 0, 1, 0, 0},             /* amsgrad: Adam's */
      {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 2, 0, 0},   /* amsgrad 2 */
      {CL_OPTIM_RMSPROP, 1e-2, 0, 0, 1e-8, 0, 0, 0, 0.99, 2},   /* centered 2 */
      {CL_OPTIM_SGD, -1e-3, 0, 0, 0, 0, 0, 0, 0, 0},            /* lr < 0 */
      {CL_OPTIM_SGD, 1e39, 0, 0, 0, 0, 0, 0, 0, 0},             /* lr beyond float */
      {CL_OPTIM_SGD, NAN, 0, 0, 0, 0, 0, 0, 0, 0},              /* lr NaN */
      {CL_OPTIM_SGD, 1e-2, 0, 0, 0, 0, -1e-4, 0, 0, 0},         /* weight_decay < 0 */
      {CL_OPTIM_ADAM, 1e-2, 1, 0.999, 1e-8, 0, 0, 0, 0, 0},     /* beta1 1 */
      {CL_OPTIM_ADAM, 1e-2, 0.9, 1 - 1e-9, 1e-8, 0, 0, 0, 0, 0}, /* beta2 rounds to 1 */
      {CL_OPTIM_ADAM, 1e-2, -0.1, 0.999, 1e-8, 0, 0, 0, 0, 0},  /* beta1 < 0 */
      {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 0, 0, 0, 0, 0, 0},      /* eps 0 */
      {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-46, 0, 0, 0, 0, 0},  /* eps rounds to 0 */
      {CL_OPTIM_RMSPROP, 1e-2, 0, 0, 1e-8, 0, 0, 0, 1, 0},      /* alpha 1 */
      {CL_OPTIM_RMSPROP, 1e-2, 0, 0, 1e-8, 0, 0, 0, -0.5, 0},   /* alpha < 0 */
      {CL_OPTIM_RMSPROP, 1e-2, 0, 0, 1e39, 0, 0, 0, 0.9, 0},    /* eps beyond float */
      {CL_OPTIM_SGD, 1e-2, 0, 0, 0, -0.9, 0, 0, 0, 0},          /* momentum < 0 */
      {CL_OPTIM_RMSPROP, 1e-2, 0, 0, 1e-8, -0.9, 0, 0, 0.9, 0}, /* momentum < 0 */
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    char what[64];
    snprintf(what, sizeof what, "train_step: bad optimizer %zu", i + 1);
    REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &bad[i], NULL, &loss),
            CL_E_INVALID, what);
    char err[CL_ERRMSG_LEN];
    CHECK(cl_optim_check(&bad[i], err, sizeof err) == CL_E_INVALID && err[0],
          "cl_optim_check: bad optimizer %zu passes", i + 1);
  }
  cl_optim edge[] = {
      {CL_OPTIM_ADAM, 0, 0, 0, 1e-45, 0, 0, 1, 0, 0},         /* betas 0, eps float's least */
      {CL_OPTIM_RMSPROP, 0, 0, 0, 1e-8, 0, 0, 0, 0, 1},       /* alpha 0, centered */
      {CL_OPTIM_ADAMW, 0, 0.9, 0.99999997, 1e-8, 0, 0, 0, 0, 0}, /* beta2 below 1 as a float */
  };
  for (size_t i = 0; i < sizeof edge / sizeof *edge; i++) {
    char err[CL_ERRMSG_LEN];
    CHECK(cl_optim_check(&edge[i], err, sizeof err) == CL_OK, "edge optimizer %zu: %s", i + 1,
          err);
  }
  /* targets, horizons, truth flags */
  a = yl, a.dims[1] = 3;
  REFUSED(m, &s, cl_model_train_step(m, &x, &a, CL_TARGET_LAST_STATE, &adam, NULL, &loss),
          CL_E_INVALID, "train_step: y of 3 channels");
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_SEQUENCE, &adam, NULL, &loss),
          CL_E_INVALID, "train_step: a last-state y for a sequence target");
  REFUSED(m, &s, cl_model_train_step(m, &x, &ys, CL_TARGET_LAST_STATE, &adam, NULL, &loss),
          CL_E_INVALID, "train_step: a sequence y for a last-state target");
  memset(&o, 0, sizeof o), o.horizon = 1;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: a horizon with a last-state target");
  int truth[2] = {1, 0};
  memset(&o, 0, sizeof o), o.truth = truth;
  REFUSED(m, &s, cl_model_train_step(m, &x, &ys, CL_TARGET_SEQUENCE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: truth flags without free running");
  /* the loss */
  cl_loss_fn lf[] = {{(cl_loss_kind)4, 0, 0, 0},
                     {(cl_loss_kind)-1, 0, 0, 0},
                     {CL_LOSS_MSE, 0, 0, (cl_loss_reduction)3},
                     {CL_LOSS_HUBER, 0, 0, 0},
                     {CL_LOSS_HUBER, 1e-46, 0, 0},
                     {CL_LOSS_HUBER, INFINITY, 0, 0},
                     {CL_LOSS_BCE_LOGITS, 0, 0, 0},
                     {CL_LOSS_BCE_LOGITS, 0, -1, 0},
                     {CL_LOSS_BCE_LOGITS, 0, 1e39, 0}};
  for (size_t i = 0; i < sizeof lf / sizeof *lf; i++) {
    char what[64];
    snprintf(what, sizeof what, "train_step: bad loss %zu", i + 1);
    memset(&o, 0, sizeof o), o.loss = lf[i];
    REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
            CL_E_INVALID, what);
  }
  memset(&o, 0, sizeof o), o.loss.kind = CL_LOSS_HUBER, o.loss.delta = 1e-45;
  ACCEPTED(m, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &sgd0, &o, &loss),
           "train_step: huber delta 1e-45 (float's least)");
  /* the loss weight: the target's shape, finite and >= 0 as a float */
  fill(pw, sizeof pw / sizeof *pw, 3);
  for (size_t i = 0; i < sizeof pw / sizeof *pw; i++) pw[i] = fabsf(pw[i]);
  cl_host_array wa = {pw, CL_HOST_TORCH_F32, 4, {PB, PTOP, PH, PW, 0}};
  memset(&o, 0, sizeof o), o.weight = &wa;
  wa.dims[3] = 3;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: a weight of the wrong shape");
  wa.dims[3] = PW, pw[7] = -1e-30f;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: a negative weight");
  pw[7] = NAN;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: a NaN weight");
  pw[7] = INFINITY;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: an infinite weight");
  double wd[PB * PTOP * PH * PW];
  for (size_t i = 0; i < sizeof wd / sizeof *wd; i++) wd[i] = pw[i];
  wd[7] = 1e39; /* a double beyond float's range */
  cl_host_array wda = {wd, CL_HOST_R_F64, 4, {PB, PTOP, PH, PW, 0}};
  o.weight = &wda;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: a weight of 1e39 (inf as a float)");
  wd[7] = 0, o.weight = &wa, pw[7] = 0;
  ACCEPTED(m, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &sgd0, &o, &loss),
           "train_step: a weight of 0");
  /* the schedule */
  memset(&o, 0, sizeof o), o.checkpoint = 2, o.tbptt = 2;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: checkpoint and tbptt");
  memset(&o, 0, sizeof o), o.checkpoint = -1;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: checkpoint -1");
  memset(&o, 0, sizeof o), o.accumulation_steps = PB + 1;
  REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
          CL_E_INVALID, "train_step: 3 micro-batches of a batch of 2");
  o.accumulation_steps = PB;
  ACCEPTED(m, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &sgd0, &o, &loss),
           "train_step: 2 micro-batches of a batch of 2");
  memset(&o, 0, sizeof o), o.horizon = PT + 1;
  cl_config sq = ctest_config(2, 3, 2, 3, 1, 1, 1); /* h == input: a horizon is possible */
  cl_model *hm = seeded(&sq);
  if (hm) {
    static snap hs;
    take(hm, &hs);
    float hx[PB * PT * 2 * PH * PW] = {0}, hy[PB * (PT + 1) * 2 * PH * PW] = {0};
    cl_host_array hxa = {hx, CL_HOST_TORCH_F32, 5, {PB, PT, 2, PH, PW}};
    cl_host_array hya = {hy, CL_HOST_TORCH_F32, 5, {PB, PT + 1, 2, PH, PW}};
    REFUSED(hm, &hs, cl_model_train_step(hm, &hxa, &hya, CL_TARGET_SEQUENCE, &adam, &o, &loss),
            CL_E_INVALID, "train_step: a horizon of 4 of 3 steps");
    o.horizon = 2, o.free_run = 1, o.checkpoint = 1;
    hya.dims[1] = 2;
    REFUSED(hm, &hs, cl_model_train_step(hm, &hxa, &hya, CL_TARGET_SEQUENCE, &adam, &o, &loss),
            CL_E_INVALID, "train_step: free running with checkpoint");
    o.checkpoint = 0, o.recompute_gates = 1;
    REFUSED(hm, &hs, cl_model_train_step(hm, &hxa, &hya, CL_TARGET_SEQUENCE, &adam, &o, &loss),
            CL_E_INVALID, "train_step: free running with recompute_gates");
    memset(&o, 0, sizeof o), o.horizon = PT;
    hya.dims[1] = PT;
    ACCEPTED(hm, cl_model_train_step(hm, &hxa, &hya, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
             "train_step: a horizon of all 3 steps");
    cl_model_free(hm);
  }
  /* a carried state is for one batch and frame size */
  memset(&o, 0, sizeof o), o.state_mode = CL_STATE_CARRY;
  ACCEPTED(m, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &sgd0, &o, &loss),
           "train_step: a carrying step");
  a = x, a.dims[0] = 1;
  cl_host_array y1 = yl;
  y1.dims[0] = 1;
  REFUSED(m, &s, cl_model_train_step(m, &a, &y1, CL_TARGET_LAST_STATE, &sgd0, &o, &loss),
          CL_E_INVALID, "train_step: a carried state of batch 2 for a batch of 1");
  CHECK(cl_model_reset_state(m) == CL_OK, "reset_state");
  ACCEPTED(m, cl_model_train_step(m, &a, &y1, CL_TARGET_LAST_STATE, &sgd0, &o, &loss),
           "train_step: a batch of 1 after reset_state");
  cl_model_reset_state(m);
  /* a communicator's share */
  cl_comm *comm = NULL;
  char cerr[CL_ERRMSG_LEN];
  if (cl_comm_local_create(&comm, cerr, sizeof cerr) == CL_OK) {
    memset(&o, 0, sizeof o), o.comm = comm, o.comm_share = 0;
    REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
            CL_E_INVALID, "train_step: comm_share 0");
    o.comm_share = nextafter(1, 2);
    REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
            CL_E_INVALID, "train_step: comm_share above 1");
    o.comm_share = NAN;
    REFUSED(m, &s, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &adam, &o, &loss),
            CL_E_INVALID, "train_step: comm_share NaN");
    o.comm_share = 1;
    ACCEPTED(m, cl_model_train_step(m, &x, &yl, CL_TARGET_LAST_STATE, &sgd0, &o, &loss),
             "train_step: comm_share 1");
    REFUSED(m, &s, cl_model_broadcast_params(m, comm, 1), CL_E_INVALID,
            "broadcast from rank 1 of 1");
    cl_comm_free(comm);
  } else {
    CHECK(0, "cl_comm_local_create: %s", cerr);
  }

  /* the optimizer step alone, parameters, dtype, loss scale, masks */
  REFUSED(m, &s, cl_model_optimizer_step(m, &bad[6]), CL_E_INVALID, "optimizer_step: lr < 0");
  float pbuf[MAXP];
  REFUSED(m, &s, cl_model_get_param(m, "cell_list.9.conv.weight", pbuf, 1), CL_E_INVALID,
          "get_param: no such name");
  const char *n0;
  int nd, d[4];
  CHECK(cl_model_tensor_info(m, 0, &n0, &nd, d) == CL_OK, "tensor_info 0");
  size_t ne = ctest_numel(nd, d);
  REFUSED(m, &s, cl_model_get_param(m, n0, pbuf, ne - 1), CL_E_INVALID, "get_param: n - 1");
  for (size_t i = 0; i <= ne; i++) pbuf[i] = 7.0f;
  REFUSED(m, &s, cl_model_set_param(m, n0, pbuf, ne + 1), CL_E_INVALID, "set_param: n + 1");
  REFUSED(m, &s, cl_model_set_param(m, "nope", pbuf, ne), CL_E_INVALID, "set_param: no name");
  REFUSED(m, &s, cl_model_get_grad(m, n0, pbuf, ne + 1), CL_E_INVALID, "get_grad: n + 1");
  CHECK(cl_model_get_param(m, n0, pbuf, ne) == CL_OK, "get_param: %s", cl_model_error(m));
  pbuf[ne - 1] = INFINITY;
  REFUSED(m, &s, cl_model_set_param(m, n0, pbuf, ne), CL_E_INVALID, "set_param: an Inf weight");
  pbuf[ne - 1] = NAN;
  REFUSED(m, &s, cl_model_set_param(m, n0, pbuf, ne), CL_E_INVALID, "set_param: a NaN weight");
  /* the separate forward, loss and backward: in their order, of one target */
  float gbuf[PB * PT * PTOP * PH * PW] = {0};
  cl_host_array ga = {gbuf, CL_HOST_TORCH_F32, 4, {PB, PTOP, PH, PW, 0}};
  ACCEPTED(m, cl_model_forward(m, &x, 0, NULL), "inference forward");
  REFUSED(m, &s, cl_model_mse(m, &yl, CL_TARGET_LAST_STATE, &loss), CL_E_STATE,
          "mse after an inference forward");
  /* (usable() has just run an inference forward) */
  REFUSED(m, &s, cl_model_backward(m, CL_TARGET_LAST_STATE, &ga), CL_E_STATE,
          "backward after an inference forward");
  ACCEPTED(m, cl_model_forward(m, &x, 1, NULL), "training forward");
  REFUSED(m, &s, cl_model_mse(m, &ys, CL_TARGET_LAST_STATE, &loss), CL_E_INVALID,
          "mse: a sequence y for the last state");
  ACCEPTED(m, cl_model_forward(m, &x, 1, NULL), "training forward");
  ACCEPTED(m, cl_model_mse(m, &yl, CL_TARGET_LAST_STATE, &loss), "mse");
  REFUSED(m, &s, cl_model_backward(m, CL_TARGET_SEQUENCE, NULL), CL_E_STATE,
          "backward of the sequence after the last state's loss");
  ACCEPTED(m, cl_model_forward(m, &x, 1, NULL), "training forward");
  ga.dims[1] = 3;
  REFUSED(m, &s, cl_model_backward(m, CL_TARGET_LAST_STATE, &ga), CL_E_INVALID,
          "backward: a gradient of 3 channels");
  ga.dims[1] = PTOP;
  ACCEPTED(m, cl_model_forward(m, &x, 1, NULL), "training forward");
  CHECK(cl_model_get_param(m, n0, pbuf, ne) == CL_OK, "get_param: %s", cl_model_error(m));
  ACCEPTED(m, cl_model_set_param(m, n0, pbuf, ne), "set_param: the same values");
  REFUSED(m, &s, cl_model_mse(m, &yl, CL_TARGET_LAST_STATE, &loss), CL_E_STATE,
          "mse after the parameters were replaced");
  ACCEPTED(m, cl_model_forward(m, &x, 1, NULL), "training forward");
  ACCEPTED(m, cl_model_backward(m, CL_TARGET_LAST_STATE, &ga), "backward of a given gradient");
  CHECK(cl_model_tensor_info(m, -1, &n0, &nd, d) == CL_E_INVALID &&
            cl_model_tensor_info(m, cl_model_n_tensors(m), &n0, &nd, d) == CL_E_INVALID,
        "tensor_info outside 0..n-1 is not refused");
  REFUSED(m, &s, cl_model_set_dtype(m, (cl_dtype)3), CL_E_INVALID, "set_dtype 3");
  REFUSED(m, &s, cl_model_set_loss_scale(m, 0, 2, 0.5, 2000), CL_E_INVALID, "init_scale 0");
  REFUSED(m, &s, cl_model_set_loss_scale(m, 1e39, 2, 0.5, 2000), CL_E_INVALID, "init_scale 1e39");
  REFUSED(m, &s, cl_model_set_loss_scale(m, 1024, 1, 0.5, 2000), CL_E_INVALID, "growth 1");
  REFUSED(m, &s, cl_model_set_loss_scale(m, 1024, 2, 1, 2000), CL_E_INVALID, "backoff 1");
  REFUSED(m, &s, cl_model_set_loss_scale(m, 1024, 2, 0, 2000), CL_E_INVALID, "backoff 0");
  REFUSED(m, &s, cl_model_set_loss_scale(m, 1024, 2, 0.5, 0), CL_E_INVALID, "interval 0");
  ACCEPTED(m, cl_model_set_loss_scale(m, 1e-45, nextafter(1, 2), nextafter(1, 0), 1),
           "loss scale at its edges");
  cl_model_set_loss_scale(m, 65536, 2, 0.5, 2000);
  float mask[PB * PC * PH * PW];
  REFUSED(m, &s, cl_model_dropout_mask(m, 1, 0, 0, PB, PH, PW, mask), CL_E_INVALID,
          "dropout_mask: a layer without dropout");
  REFUSED(m, &s, cl_model_dropout_mask(m, 1, 2, 0, PB, PH, PW, mask), CL_E_INVALID,
          "dropout_mask: layer 3 of 2");
  REFUSED(m, &s, cl_model_dropout_mask(m, 1, 0, 2, PB, PH, PW, mask), CL_E_INVALID,
          "dropout_mask: kind 2");
  REFUSED(m, &s, cl_model_test_overrun(m, "gates[0]"), CL_E_STATE, "overrun without guards");

  /* plans */
  cl_plan plan;
  REFUSED(m, &s, cl_model_plan(m, 0, PT, PH, PW, 1, &adam, NULL, &plan), CL_E_INVALID,
          "plan: batch 0");
  REFUSED(m, &s, cl_model_plan(m, PB, PT, PH, 0, 0, NULL, NULL, &plan), CL_E_INVALID,
          "plan: width 0");
  memset(&o, 0, sizeof o), o.plan_dtype = 2 + CL_BF16;
  REFUSED(m, &s, cl_model_plan(m, PB, PT, PH, PW, 0, NULL, &o, &plan), CL_E_INVALID,
          "plan: dtype 3");
  o.plan_dtype = 1 + CL_BF16;
  ACCEPTED(m, cl_model_plan(m, PB, PT, PH, PW, 0, NULL, &o, &plan), "plan: bfloat16");
  cl_plan_free(&plan);
  memset(&o, 0, sizeof o), o.state_mode = CL_STATE_CARRY;
  REFUSED(m, &s, cl_model_plan(m, PB, PT, PH, PW, 0, NULL, &o, &plan), CL_E_INVALID,
          "plan: inference carrying a state");

  /* data sets */
  cl_data *ds = NULL;
  REFUSED(m, &s, cl_data_create(m, &x, &yl, (cl_target)2, &ds), CL_E_INVALID,
          "data_create: target 2");
  CHECK(ds == NULL, "a refused data set is not NULL");
  ACCEPTED(m, cl_data_create(m, &x, &yl, CL_TARGET_LAST_STATE, &ds), "data_create");
  int idx[2] = {0, PB - 1};
  REFUSED(m, &s, cl_model_train_step_data(m, NULL, idx, 2, &adam, NULL, &loss), CL_E_INVALID,
          "train_step_data: no data set");
  REFUSED(m, &s, cl_model_train_step_data(m, ds, idx, 0, &adam, NULL, &loss), CL_E_INVALID,
          "train_step_data: no rows");
  REFUSED(m, &s, cl_model_train_step_data(m, ds, NULL, 2, &adam, NULL, &loss), CL_E_INVALID,
          "train_step_data: no index");
  idx[1] = PB;
  REFUSED(m, &s, cl_model_train_step_data(m, ds, idx, 2, &adam, NULL, &loss), CL_E_INVALID,
          "train_step_data: row 2 of 0..1");
  idx[1] = -1;
  REFUSED(m, &s, cl_model_train_step_data(m, ds, idx, 2, &adam, NULL, &loss), CL_E_INVALID,
          "train_step_data: row -1");
  idx[1] = PB - 1;
  REFUSED(m, &s, cl_model_train_step_data(m, ds, idx, 2, &bad[0], NULL, &loss), CL_E_INVALID,
          "train_step_data: a bad optimizer");
  ACCEPTED(m, cl_model_train_step_data(m, ds, idx, 2, &sgd0, NULL, &loss),
           "train_step_data: rows 0 and 1");
  cl_data *other = NULL;
  if (cl_data_create(twin, &x, &yl, CL_TARGET_LAST_STATE, &other) == CL_OK) {
    REFUSED(m, &s, cl_model_train_step_data(m, other, idx, 2, &adam, NULL, &loss), CL_E_INVALID,
            "train_step_data: the twin's data set");
    cl_data_free(other);
  }
  CHECK(cl_model_set_dtype(m, CL_F16) == CL_OK, "set_dtype float16");
  cl_status dst = cl_model_train_step_data(m, ds, idx, 2, &adam, NULL, &loss);
  CHECK(dst == CL_E_STATE, "train_step_data: a float32 data set for a float16 model: %s",
        cl_status_name(dst));
  CHECK(cl_model_set_dtype(m, CL_F32) == CL_OK, "set_dtype float32");
  usable(m, &s, "train_step_data: float32 data, float16 model");
  cl_data_free(ds);

  same_step(m, twin, &x, &yl, CL_TARGET_LAST_STATE, "plain model");
  cl_model_free(m);
  cl_model_free(twin);
}

/* ---- an encoder-forecaster's calls -------------------------------------- */

enum { FB = 2, FT = 3, FK = 2, FH = 4, FW = 4 };
static float fx[FB * FT * FH * FW], fy[FB * FK * FH * FW];

static void forecaster_calls(void) {
  cl_config cfg = fc_config();
  cl_model *m = seeded(&cfg), *twin = seeded(&cfg);
  if (!m || !twin) return;
  static snap s;
  take(m, &s);
  fill(fx, sizeof fx / sizeof *fx, 4);
  fill(fy, sizeof fy / sizeof *fy, 5);
  cl_host_array x = {fx, CL_HOST_TORCH_F32, 5, {FB, FT, 1, FH, FW}};
  cl_host_array y = {fy, CL_HOST_TORCH_F32, 5, {FB, FK, 1, FH, FW}};
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  cl_optim sgd0 = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_step_options o;
  double loss;
  cl_host_array a;

  /* prediction: from zeros only -- a given state is refused, not ignored.
   * The state is well formed (each layer's h and c at the patched frame
   * size), so that nothing but the model kind refuses it. */
  static float st[4 * 2 * FB * 3 * 2 * 2];
  cl_host_array sa[8];
  for (int l = 0; l < 4; l++)
    for (int w = 0; w < 2; w++) {
      cl_host_array e = {st + (2 * l + w) * FB * 3 * 2 * 2, CL_HOST_TORCH_F32, 4,
                         {FB, cfg.hidden_dims[l], FH / 2, FW / 2, 0}};
      sa[2 * l + w] = e;
    }
  for (size_t i = 0; i < sizeof st / sizeof *st; i++) st[i] = 0.25f;
  memset(&o, 0, sizeof o), o.horizon = 2, o.state_mode = CL_STATE_GIVEN, o.state = sa;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_UNSUPPORTED,
          "prediction from a given state");
  for (int l = 0; l < 8; l++) sa[l].dims[2] = FH, sa[l].dims[3] = FW; /* the caller's frames */
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_UNSUPPORTED,
          "prediction from a given state at the unpatched size");
  o.state_mode = CL_STATE_CARRY, o.state = NULL;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_UNSUPPORTED,
          "prediction from a carried state");
  REFUSED(m, &s, cl_model_forward(m, &x, 0, NULL), CL_E_INVALID, "prediction without options");
  memset(&o, 0, sizeof o);
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "prediction of horizon 0");
  o.horizon = -1;
  REFUSED(m, &s, cl_model_forward(m, &x, 0, &o), CL_E_INVALID, "prediction of horizon -1");
  o.horizon = 2;
  REFUSED(m, &s, cl_model_forward(m, &x, 1, &o), CL_E_UNSUPPORTED, "a training forward");
  a = x, a.dims[3] = 5;
  REFUSED(m, &s, cl_model_forward(m, &a, 0, &o), CL_E_INVALID, "prediction: 5 rows, patch 2");
  a = x, a.dims[2] = 2;
  REFUSED(m, &s, cl_model_forward(m, &a, 0, &o), CL_E_INVALID, "prediction: 2 channels");
  a = x, a.ndim = 4;
  REFUSED(m, &s, cl_model_forward(m, &a, 0, &o), CL_E_INVALID, "prediction: x of 4 dims");
  o.horizon = 1;
  ACCEPTED(m, cl_model_forward(m, &x, 0, &o), "prediction of horizon 1");
  float fr[FB * 2 * FH * FW];
  cl_host_array fra = {fr, CL_HOST_TORCH_F32, 5, {FB, 2, 1, FH, FW}};
  REFUSED(m, &s, cl_model_read_frames(m, &fra), CL_E_INVALID, "frames: 2 of a horizon of 1");

  /* train_step: what its schedule does not run */
  struct {
    const char *what;
    cl_step_options o;
  } un[12];
  int nu = 0;
#define UNSUP(w, field, value)                  \
  do {                                          \
    memset(&un[nu].o, 0, sizeof un[nu].o);      \
    un[nu].what = "train_step: " w;             \
    un[nu].o.field = value;                     \
    nu++;                                       \
  } while (0)
  int truth[1] = {1};
  UNSUP("a horizon option", horizon, 2);
  UNSUP("free running", free_run, 1);
  UNSUP("truth flags", truth, truth);
  UNSUP("a given state", state_mode, CL_STATE_GIVEN);
  UNSUP("tbptt", tbptt, 1);
#undef UNSUP
  for (int i = 0; i < nu; i++)
    REFUSED(m, &s, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &adam, &un[i].o, &loss),
            CL_E_UNSUPPORTED, un[i].what);
  cl_comm *comm = NULL;
  char cerr[CL_ERRMSG_LEN];
  if (cl_comm_local_create(&comm, cerr, sizeof cerr) == CL_OK) {
    memset(&o, 0, sizeof o), o.comm = comm, o.comm_share = 1;
    ACCEPTED(m, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
             "train_step: data parallel (a table row turned to supported, issue 34)");
    cl_comm_free(comm);
  }
  memset(&o, 0, sizeof o), o.accumulation_steps = 1;
  ACCEPTED(m, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
           "train_step: accumulation_steps 1");
  o.accumulation_steps = 2; /* a table row turned to supported (issue 34) */
  ACCEPTED(m, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
           "train_step: accumulation_steps 2");
  memset(&o, 0, sizeof o), o.checkpoint = 1; /* rows turned to supported (issue 34) */
  ACCEPTED(m, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
           "train_step: checkpoint 1");
  memset(&o, 0, sizeof o), o.recompute_gates = 1;
  ACCEPTED(m, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
           "train_step: recompute_gates 1");
  /* its target: the sequence of frames (a last state: the capability
   * table's refusal, unsupported), x's batch and frame size */
  REFUSED(m, &s, cl_model_train_step(m, &x, &y, CL_TARGET_LAST_STATE, &adam, NULL, &loss),
          CL_E_UNSUPPORTED, "train_step: a last-state target");
  cl_optim neg = {CL_OPTIM_SGD, -1e-3, 0, 0, 0, 0, 0, 0, 0, 0};
  REFUSED(m, &s, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &neg, NULL, &loss),
          CL_E_INVALID, "train_step: lr < 0");
  a = y, a.dims[0] = 1;
  REFUSED(m, &s, cl_model_train_step(m, &x, &a, CL_TARGET_SEQUENCE, &adam, NULL, &loss),
          CL_E_INVALID, "train_step: y of batch 1, x of 2");
  a = y, a.dims[4] = 2;
  REFUSED(m, &s, cl_model_train_step(m, &x, &a, CL_TARGET_SEQUENCE, &adam, NULL, &loss),
          CL_E_INVALID, "train_step: y of 4 x 2 pixels, x of 4 x 4");
  a = y, a.dims[2] = 2;
  REFUSED(m, &s, cl_model_train_step(m, &x, &a, CL_TARGET_SEQUENCE, &adam, NULL, &loss),
          CL_E_INVALID, "train_step: y of 2 channels");
  a = y, a.ndim = 4;
  REFUSED(m, &s, cl_model_train_step(m, &x, &a, CL_TARGET_SEQUENCE, &adam, NULL, &loss),
          CL_E_INVALID, "train_step: y of 4 dims");

  /* plans and convolution lists: a horizon >= 1, patches that divide the
   * frame, nothing the schedule does not run */
  cl_plan plan;
  cl_conv_call_info *calls = NULL;
  int ncalls = 0;
  REFUSED(m, &s, cl_model_plan(m, FB, FT, FH, FW, 1, &adam, NULL, &plan), CL_E_INVALID,
          "plan without a horizon");
  memset(&o, 0, sizeof o);
  REFUSED(m, &s, cl_model_plan(m, FB, FT, FH, FW, 0, NULL, &o, &plan), CL_E_INVALID,
          "plan of horizon 0");
  REFUSED(m, &s, cl_model_conv_calls(m, FB, FT, FH, FW, 1, &o, CL_TARGET_SEQUENCE, &calls,
                                     &ncalls),
          CL_E_INVALID, "convolution calls of horizon 0");
  CHECK(calls == NULL && ncalls == 0, "a refused list of calls is not empty");
  o.horizon = 1;
  REFUSED(m, &s, cl_model_plan(m, FB, FT, 6, 5, 1, &adam, &o, &plan), CL_E_INVALID,
          "plan: 6 x 5 pixels, patch 2");
  REFUSED(m, &s, cl_model_plan(m, FB, FT, 0, FW, 0, NULL, &o, &plan), CL_E_INVALID,
          "plan: height 0");
  ACCEPTED(m, cl_model_plan(m, FB, FT, 6, 2, 1, &adam, &o, &plan), "plan: 6 x 2 pixels");
  cl_plan_free(&plan);
  cl_host_array wa = y;
  struct {
    const char *what;
    int field;
  } pu[] = {{"plan: tbptt", 1},          {"plan: free running", 4},
            {"plan: a given state", 5},   {"plan: a carried state", 6}};
  /* accumulation, checkpoint, recompute_gates, a loss weight: supported
   * (issue 34) */
  memset(&o, 0, sizeof o), o.horizon = FK, o.checkpoint = 1, o.recompute_gates = 1;
  ACCEPTED(m, cl_model_plan(m, FB, FT, FH, FW, 1, &adam, &o, &plan),
           "plan: checkpoint and recompute_gates");
  cl_plan_free(&plan);
  for (size_t i = 0; i < sizeof pu / sizeof *pu; i++) {
    memset(&o, 0, sizeof o), o.horizon = FK;
    switch (pu[i].field) {
    case 1: o.tbptt = 1; break;
    case 4: o.free_run = 1; break;
    case 5: o.state_mode = CL_STATE_GIVEN; break;
    case 6: o.state_mode = CL_STATE_CARRY; break;
    }
    REFUSED(m, &s, cl_model_plan(m, FB, FT, FH, FW, 1, &adam, &o, &plan), CL_E_UNSUPPORTED,
            pu[i].what);
  }
  memset(&o, 0, sizeof o), o.horizon = FK, o.weight = &wa;
  ACCEPTED(m, cl_model_plan(m, FB, FT, FH, FW, 1, &adam, &o, &plan), "plan: a loss weight");
  cl_plan_free(&plan);
  /* the loss weight (a table row turned to supported, issue 34): y's shape,
   * finite and >= 0 */
  float wneg[sizeof fy / sizeof *fy];
  for (size_t i = 0; i < sizeof wneg / sizeof *wneg; i++) wneg[i] = 1;
  wa.data = wneg;
  memset(&o, 0, sizeof o), o.weight = &wa;
  ACCEPTED(m, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
           "train_step: a loss weight of y's shape");
  /* shapes refused for their shape: every value a valid weight of 1 */
  static float wbig[FB * (FK + 1) * FH * FW];
  for (size_t i = 0; i < sizeof wbig / sizeof *wbig; i++) wbig[i] = 1;
  wa.data = wbig, wa.dims[1] = FK + 1;
  REFUSED(m, &s, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
          CL_E_INVALID, "train_step: a loss weight of one frame more than y");
  wa = y, wa.data = wbig, wa.ndim = 4;
  REFUSED(m, &s, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
          CL_E_INVALID, "train_step: a loss weight of 4 dims");
  wneg[3] = -1;
  wa = y, wa.data = wneg;
  REFUSED(m, &s, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &sgd0, &o, &loss),
          CL_E_INVALID, "train_step: a negative loss weight");
  /* data sets (issue 34): frames the patch divides, y with x's sequences */
  cl_data *ds = NULL;
  a = x, a.dims[3] = 5;
  REFUSED(m, &s, cl_data_create(m, &a, &y, CL_TARGET_SEQUENCE, &ds), CL_E_INVALID,
          "data_create: 5 rows, patch 2");
  a = y, a.dims[0] = 1;
  REFUSED(m, &s, cl_data_create(m, &x, &a, CL_TARGET_SEQUENCE, &ds), CL_E_INVALID,
          "data_create: y of batch 1, x of 2");
  CHECK(ds == NULL, "a refused data set is not NULL");
  ACCEPTED(m, cl_data_create(m, &x, &y, CL_TARGET_SEQUENCE, &ds), "data_create");
  int rows[2] = {1, 0};
  ACCEPTED(m, cl_model_train_step_data(m, ds, rows, 2, &sgd0, NULL, &loss), "train_step_data");
  rows[1] = FB;
  REFUSED(m, &s, cl_model_train_step_data(m, ds, rows, 2, &sgd0, NULL, &loss), CL_E_INVALID,
          "train_step_data: a row outside the data set");
  cl_data_free(ds);
  same_step(m, twin, &x, &y, CL_TARGET_SEQUENCE, "encoder-forecaster");
  cl_model_free(m);
  cl_model_free(twin);

  /* a float16 model trains (a table row turned to supported, issue 34),
   * and after set_dtype in float32 */
  cfg.dtype = CL_F16;
  m = seeded(&cfg);
  if (!m) return;
  ACCEPTED(m, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &adam, NULL, &loss),
           "train_step of a float16 encoder-forecaster");
  CHECK(cl_model_set_dtype(m, CL_F32) == CL_OK, "set_dtype float32");
  ACCEPTED(m, cl_model_train_step(m, &x, &y, CL_TARGET_SEQUENCE, &adam, NULL, &loss),
           "train_step after set_dtype float32");
  cl_model_free(m);
}

/* ---- RMSprop's update guard, centered ------------------------------------ */

/* Gradients of a plain model on fixed data: forward, MSE, backward. */
static int gradients(cl_model *m) {
  cl_host_array x = {px, CL_HOST_TORCH_F32, 5, {PB, PT, PC, PH, PW}};
  cl_host_array y = {py, CL_HOST_TORCH_F32, 4, {PB, PTOP, PH, PW, 0}};
  double loss;
  return cl_model_zero_grad(m) == CL_OK && cl_model_forward(m, &x, 1, NULL) == CL_OK &&
         cl_model_mse(m, &y, CL_TARGET_LAST_STATE, &loss) == CL_OK &&
         cl_model_backward(m, CL_TARGET_LAST_STATE, NULL) == CL_OK;
}

/* torch's RMSprop on one element, in float and in its order (the update
 * the guard must predict): v = v a + (1 - a) g g; centered ga = ga a +
 * (1 - a) g, avg = sqrt(v - ga ga) + eps, else sqrt(v) + eps; p + (-lr g) / avg. */
static float rms_ref(float p, float g, float *v, float *ga, float a, float lr, float eps,
                     int centered) {
  const float oma = (float)(1.0 - (double)a);
  *v = *v * a + oma * g * g;
  float avg;
  if (centered) {
    *ga = *ga * a + oma * g;
    avg = sqrtf(*v - *ga * *ga);
  } else {
    avg = sqrtf(*v);
  }
  avg = avg + eps;
  return p + -lr * g / avg;
}

/* The name of the tensor holding flat element i (tensor order). */
static const char *tensor_of(cl_model *m, size_t i) {
  size_t at = 0;
  for (int k = 0; k < cl_model_n_tensors(m); k++) {
    const char *name;
    int nd, d[4];
    cl_model_tensor_info(m, k, &name, &nd, d);
    at += ctest_numel(nd, d);
    if (i < at) return name;
  }
  return "?";
}

/* alpha 0, eps 1e-45 (float's least), lr 1, the first step from zeros:
 * v = g^2 and grad_avg = g, so the centered denominator is eps alone and
 * (-g) / eps overflows for |g| > 4.8e-7, where the plain one, |g| + eps,
 * moves each parameter by 1. */
static void rms_centered_inf(void) {
  cl_config cfg = plain_config();
  cl_model *m = seeded(&cfg);
  if (!m || !gradients(m)) {
    CHECK(0, "rmsprop centered, alpha 0: no gradients");
    cl_model_free(m);
    return;
  }
  static float p[MAXP], g[MAXP], after[MAXP];
  size_t n = ctest_flat(m, 0, p, MAXP);
  ctest_flat(m, 1, g, MAXP);
  const float lr = 1, eps = (float)1e-45, a = 0;
  size_t first = n, plain_bad = 0, cen_bad = 0;
  for (size_t i = 0; i < n; i++) {
    float v = 0, ga = 0, v2 = 0, ga2 = 0;
    float pc = rms_ref(p[i], g[i], &v, &ga, a, lr, eps, 1);
    float pp = rms_ref(p[i], g[i], &v2, &ga2, a, lr, eps, 0);
    plain_bad += !isfinite(pp);
    if (!isfinite(pc) && cen_bad++ == 0) first = i;
  }
  CHECK(cen_bad > 0 && plain_bad == 0,
        "rmsprop centered, alpha 0: the case is not one (centered %zu non-finite, plain %zu)",
        cen_bad, plain_bad);
  cl_optim rms = {CL_OPTIM_RMSPROP, lr, 0, 0, 1e-45, 0, 0, 0, a, 1};
  cl_status st = cl_model_optimizer_step(m, &rms);
  CHECK(st == CL_E_INVALID && strstr(cl_model_error(m), "the parameter") &&
            strstr(cl_model_error(m), "Inf") && first < n &&
            strstr(cl_model_error(m), tensor_of(m, first)),
        "rmsprop centered, alpha 0: %zu of %zu updates overflow (the first in %s), but the step "
        "gave %s: '%s'",
        cen_bad, n, first < n ? tensor_of(m, first) : "-", cl_status_name(st), cl_model_error(m));
  ctest_flat(m, 0, after, MAXP);
  CHECK(memcmp(after, p, n * sizeof(float)) == 0,
        "rmsprop centered, alpha 0: the refused step changed the parameters");
  CHECK(cl_model_optimizer_steps(m) == 0, "rmsprop centered, alpha 0: a refused step counted");
  /* the plain variant of the same step moves each parameter by lr */
  rms.centered = 0;
  CHECK(cl_model_optimizer_step(m, &rms) == CL_OK, "rmsprop plain, alpha 0: %s",
        cl_model_error(m));
  ctest_flat(m, 0, after, MAXP);
  size_t off = 0;
  for (size_t i = 0; i < n; i++) {
    float v = 0, ga = 0;
    off += after[i] != rms_ref(p[i], g[i], &v, &ga, a, lr, eps, 0);
  }
  CHECK(off == 0, "rmsprop plain, alpha 0: %zu parameters differ from the reference", off);
  cl_model_free(m);
}

/* alpha 0.9, lr 0, the same gradients step after step: square_avg tends to
 * g^2 and grad_avg to g, and square_avg - grad_avg^2, exactly
 * (1 - 0.9^t) 0.9^t g^2, is rounded in float; the first step where it is
 * negative for some element makes the centered denominator NaN, and the
 * update (-0 g) / NaN a NaN parameter. The reference finds that step; the
 * guard must pass every step before it and refuse that one, parameters and
 * state unchanged (so the next step is refused the same). */
static void rms_centered_nan(void) {
  cl_config cfg = plain_config();
  cl_model *m = seeded(&cfg);
  if (!m || !gradients(m)) {
    CHECK(0, "rmsprop centered, alpha 0.9: no gradients");
    cl_model_free(m);
    return;
  }
  static float p[MAXP], g[MAXP], v[MAXP], ga[MAXP], after[MAXP];
  size_t n = ctest_flat(m, 0, p, MAXP);
  ctest_flat(m, 1, g, MAXP);
  const float a = 0.9f, eps = 1e-8f;
  int bad_step = 0;
  size_t first = n;
  enum { MAX_STEPS = 400 };
  memset(v, 0, sizeof v), memset(ga, 0, sizeof ga);
  for (int t = 1; t <= MAX_STEPS && !bad_step; t++)
    for (size_t i = 0; i < n; i++) {
      float pi = rms_ref(p[i], g[i], &v[i], &ga[i], a, 0, eps, 1);
      if (!isfinite(pi) && !bad_step) bad_step = t, first = i;
    }
  CHECK(bad_step > 0, "rmsprop centered, alpha 0.9: no NaN within %d steps: not a case",
        MAX_STEPS);
  cl_optim rms = {CL_OPTIM_RMSPROP, 0, 0, 0, eps, 0, 0, 0, a, 1};
  int t = 1;
  for (; t < bad_step; t++)
    if (cl_model_optimizer_step(m, &rms) != CL_OK) break;
  CHECK(t == bad_step, "rmsprop centered, alpha 0.9: step %d refused, the reference refuses "
        "step %d first: %s", t, bad_step, cl_model_error(m));
  for (int again = 0; again < 2 && t == bad_step; again++) {
    cl_status st = cl_model_optimizer_step(m, &rms);
    CHECK(st == CL_E_INVALID && strstr(cl_model_error(m), "the parameter") &&
              strstr(cl_model_error(m), "NaN") && strstr(cl_model_error(m), tensor_of(m, first)),
          "rmsprop centered, alpha 0.9: step %d (%s time) makes %s NaN, but gave %s: '%s'",
          bad_step, again ? "second" : "first", tensor_of(m, first), cl_status_name(st),
          cl_model_error(m));
  }
  size_t nonfinite = 0;
  ctest_flat(m, 0, after, MAXP);
  for (size_t i = 0; i < n; i++) nonfinite += !isfinite(after[i]);
  CHECK(nonfinite == 0 && memcmp(after, p, n * sizeof(float)) == 0,
        "rmsprop centered, alpha 0.9: %zu parameters non-finite, or changed, after lr 0 steps",
        nonfinite);
  CHECK(cl_model_optimizer_steps(m) == bad_step - 1,
        "rmsprop centered, alpha 0.9: %lld steps counted, want %d",
        (long long)cl_model_optimizer_steps(m), bad_step - 1);
  printf("rmsprop centered: alpha 0 overflows at step 1; alpha 0.9 makes %s NaN at step %d\n",
         tensor_of(m, first), bad_step);
  cl_model_free(m);
}

int main(void) {
  fill(probe_x, sizeof probe_x / sizeof *probe_x, 0);
  create_plain();
  create_forecaster();
  plain_calls();
  forecaster_calls();
  rms_centered_inf();
  rms_centered_nan();
  CHECK(cl_models_alive() == 0, "%d models left alive", cl_models_alive());
  return ctest_done("test_core_refusals");
}
