/*
 * tests/c/test_core_tbptt.c -- truncated BPTT (train_step's tbptt = k)
 * against two references, through the public header on the CPU backend:
 *  - PyTorch (tests/testthat/fixtures/tbptt/, tools/make_fixtures_tbptt.py):
 *    the windows run with .detach() between them, each window's share of
 *    the loss backpropagated at once; the loss and every gradient of a step
 *    from zeros, and of a second step that carries the first one's last
 *    state (state = carry), and the state it carries;
 *  - a plain C reference: the same step run window by window by hand with
 *    cl_model_forward / cl_model_backward, each window started from the
 *    state the window before read back (a constant: detached), the output
 *    gradient of the mean squared error computed here.
 * train_step's schedule (windows in program.c) is in neither reference,
 * so a later window whose backward starts from zeros, a share of the loss
 * taken from the wrong window or a carried state that is not the last
 * window's end fails here. Exits nonzero on any failure.
 */
#include "convlstm.h"
#include "ctest.h"   /* CHECK, ctest_flat */
#include "fixture.h" /* fx_open, fx_model, fx_tensor, fx_flat */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXG (1 << 14)

typedef struct shape {
  int B, T, C, H, W, top, L, k, seq;
  int hidden[CL_MAX_LAYERS];
} shape;

/* state[2l], state[2l + 1]: layer l's h and c, [B, hidden_l, H, W] */
typedef struct states {
  float *v[2 * CL_MAX_LAYERS];
  cl_host_array a[2 * CL_MAX_LAYERS];
} states;

static void states_alloc(states *s, const shape *sh) {
  for (int l = 0; l < sh->L; l++)
    for (int w = 0; w < 2; w++) {
      size_t n = (size_t)sh->B * sh->hidden[l] * sh->H * sh->W;
      s->v[2 * l + w] = calloc(n, sizeof(float));
      s->a[2 * l + w] = (cl_host_array){s->v[2 * l + w], CL_HOST_TORCH_F32, 4,
                                        {sh->B, sh->hidden[l], sh->H, sh->W, 0}};
    }
}

static void states_free(states *s, const shape *sh) {
  for (int i = 0; i < 2 * sh->L; i++) free(s->v[i]);
}

/* The plain reference: zero_grad, then the windows of k steps of x, each
 * from `from` (NULL: zeros) or the state the window before left, read back
 * into host arrays (so no gradient can flow into it); a window with a loss
 * gets d loss / d output = 2 (out - y) / N over the whole target's N
 * elements. Returns the loss; the last window's end in `to`. */
static double reference_step(cl_model *m, const shape *sh, const float *x, const float *y,
                             const states *from, states *to) {
  int B = sh->B, T = sh->T, C = sh->C, H = sh->H, W = sh->W, top = sh->top;
  size_t frame_x = (size_t)C * H * W, frame_y = (size_t)top * H * W;
  size_t ny = sh->seq ? (size_t)B * T * frame_y : (size_t)B * frame_y;
  float *xw = malloc((size_t)B * sh->k * frame_x * sizeof *xw);
  float *out = malloc((size_t)B * sh->k * frame_y * sizeof *out);
  states cur;
  states_alloc(&cur, sh);
  if (from)
    for (int i = 0; i < 2 * sh->L; i++)
      memcpy(cur.v[i], from->v[i], (size_t)B * sh->hidden[i / 2] * H * W * sizeof(float));
  double loss = 0;
  CHECK(cl_model_zero_grad(m) == CL_OK, "zero_grad");
  for (int t0 = 0; t0 < T; t0 += sh->k) {
    int len = T - t0 < sh->k ? T - t0 : sh->k, last = t0 + len >= T;
    for (int b = 0; b < B; b++) /* x[b, t0 .. t0 + len - 1] */
      memcpy(xw + (size_t)b * len * frame_x, x + ((size_t)b * T + t0) * frame_x,
             (size_t)len * frame_x * sizeof *xw);
    cl_host_array xa = {xw, CL_HOST_TORCH_F32, 5, {B, len, C, H, W}};
    cl_step_options o = {0};
    o.state_mode = from || t0 > 0 ? CL_STATE_GIVEN : CL_STATE_ZERO;
    o.state = cur.a;
    int grad = sh->seq || last;
    CHECK(cl_model_forward(m, &xa, grad, &o) == CL_OK, "forward window %d: %s", t0,
          cl_model_error(m));
    cl_host_array oa = sh->seq ? (cl_host_array){out, CL_HOST_TORCH_F32, 5, {B, len, top, H, W}}
                               : (cl_host_array){out, CL_HOST_TORCH_F32, 4, {B, top, H, W, 0}};
    if (grad) {
      cl_status s = sh->seq ? cl_model_read_output(m, sh->L - 1, &oa)
                            : cl_model_read_state(m, sh->L - 1, 0, &oa);
      CHECK(s == CL_OK, "read output: %s", cl_model_error(m));
      size_t n = sh->seq ? (size_t)B * len * frame_y : ny;
      for (size_t i = 0; i < n; i++) {
        size_t b = i / ((size_t)len * frame_y), r = i % ((size_t)len * frame_y);
        float target = sh->seq ? y[((size_t)b * T + t0) * frame_y + r] : y[i];
        double e = (double)out[i] - target;
        loss += e * e / (double)ny;
        out[i] = (float)(2 * e / (double)ny);
      }
    }
    /* the window's end, read before backward (which may reuse buffers) */
    for (int l = 0; l < sh->L; l++)
      for (int w = 0; w < 2; w++)
        CHECK(cl_model_read_state(m, l, w, &cur.a[2 * l + w]) == CL_OK, "read state: %s",
              cl_model_error(m));
    if (grad)
      CHECK(cl_model_backward(m, sh->seq ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE, &oa) ==
                CL_OK, "backward window %d: %s", t0, cl_model_error(m));
  }
  for (int i = 0; i < 2 * sh->L; i++)
    memcpy(to->v[i], cur.v[i], (size_t)B * sh->hidden[i / 2] * H * W * sizeof(float));
  states_free(&cur, sh);
  free(xw);
  free(out);
  return loss;
}

static float g_step[MAXG], g_ref[MAXG], g_fx[MAXG];

static void check_fixture(const char *dir) {
  fixture f;
  CHECK(fx_open(&f, dir), "%s: no fixture (tools/make_fixtures_tbptt.py)", dir);
  if (!f.n) return;
  shape sh;
  memset(&sh, 0, sizeof sh);
  sh.B = fx_int(&f, "B");
  sh.T = fx_int(&f, "T");
  sh.C = fx_int(&f, "input_dim");
  sh.H = fx_int(&f, "H");
  sh.W = fx_int(&f, "W");
  sh.k = fx_int(&f, "tbptt");
  sh.L = fx_ints(&f, "hidden_dims", sh.hidden, CL_MAX_LAYERS);
  sh.top = sh.hidden[sh.L - 1];
  sh.seq = fx_is(&f, "target", "sequence");
  cl_target tg = sh.seq ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
  size_t nx, ny, nx2, ny2, n1;
  float *x = fx_tensor(&f, "x", &nx), *y = fx_tensor(&f, "y", &ny);
  float *x2 = fx_tensor(&f, "x2", &nx2), *y2 = fx_tensor(&f, "y2", &ny2);
  float *loss_fx = fx_tensor(&f, "loss", &n1), *loss2_fx = fx_tensor(&f, "loss2", &n1);
  cl_model *m = fx_model(&f, 2), *ref = fx_model(&f, 2);
  CHECK(x && y && x2 && y2 && loss_fx && loss2_fx && m && ref, "%s: fixture incomplete", dir);
  if (!(x && y && x2 && y2 && loss_fx && loss2_fx && m && ref)) return;

  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {sh.B, sh.T, sh.C, sh.H, sh.W}};
  cl_host_array x2a = xa;
  x2a.data = x2;
  cl_host_array ya = sh.seq ? (cl_host_array){y, CL_HOST_TORCH_F32, 5, {sh.B, sh.T, sh.top, sh.H, sh.W}}
                            : (cl_host_array){y, CL_HOST_TORCH_F32, 4, {sh.B, sh.top, sh.H, sh.W, 0}};
  cl_host_array y2a = ya;
  y2a.data = y2;
  cl_optim sgd0 = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0}; /* lr 0: the parameters stay */
  cl_step_options o = {0};
  o.tbptt = sh.k;
  o.state_mode = CL_STATE_CARRY;

  /* step 1, from zeros */
  double loss = NAN;
  CHECK(cl_model_train_step(m, &xa, &ya, tg, &sgd0, &o, &loss) == CL_OK, "%s: step 1: %s", dir,
        cl_model_error(m));
  size_t n = ctest_flat(m, 1, g_step, MAXG);
  CHECK(fx_flat(&f, m, "grad", g_fx, MAXG) == n, "%s: gradient count", dir);
  states s1, s2;
  states_alloc(&s1, &sh);
  states_alloc(&s2, &sh);
  double loss_ref = reference_step(ref, &sh, x, y, NULL, &s1);
  ctest_flat(ref, 1, g_ref, MAXG);
  double r_fx = rel_diff(g_step, g_fx, n), r_ref = rel_diff(g_step, g_ref, n),
         r_ref_fx = rel_diff(g_ref, g_fx, n);
  CHECK(fabs(loss - loss_fx[0]) <= 1e-5 * fabs(loss_fx[0]), "%s: loss %.9g, PyTorch %.9g", dir,
        loss, loss_fx[0]);
  CHECK(fabs(loss - loss_ref) <= 1e-6 * fabs(loss_ref), "%s: loss %.9g, reference %.9g", dir,
        loss, loss_ref);
  CHECK(r_fx <= 1e-4, "%s: tbptt gradients %.2e from PyTorch's", dir, r_fx);
  CHECK(r_ref <= 1e-5, "%s: tbptt gradients %.2e from the window-by-window reference", dir, r_ref);
  CHECK(r_ref_fx <= 1e-4, "%s: the reference's gradients %.2e from PyTorch's", dir, r_ref_fx);
  /* the reference's carried state is PyTorch's */
  double r_state = 0;
  for (int l = 0; l < sh.L; l++)
    for (int w = 0; w < 2; w++) {
      char key[32];
      snprintf(key, sizeof key, "carry_%c/%d", w ? 'c' : 'h', l);
      size_t ns;
      float *v = fx_tensor(&f, key, &ns);
      CHECK(v != NULL, "%s: %s missing", dir, key);
      if (v) r_state = fmax(r_state, rel_diff(s1.v[2 * l + w], v, ns));
      free(v);
    }
  CHECK(r_state <= 1e-5, "%s: the last window's end %.2e from PyTorch's", dir, r_state);
  printf("%s step 1: loss %.7f (PyTorch %.7f); gradients %.1e from PyTorch, %.1e from the "
         "reference\n", dir, loss, loss_fx[0], r_fx, r_ref);

  /* step 2 carries step 1's last state, detached */
  CHECK(cl_model_train_step(m, &x2a, &y2a, tg, &sgd0, &o, &loss) == CL_OK, "%s: step 2: %s", dir,
        cl_model_error(m));
  ctest_flat(m, 1, g_step, MAXG);
  CHECK(fx_flat(&f, m, "grad2", g_fx, MAXG) == n, "%s: step 2's gradient count", dir);
  loss_ref = reference_step(ref, &sh, x2, y2, &s1, &s2);
  ctest_flat(ref, 1, g_ref, MAXG);
  r_fx = rel_diff(g_step, g_fx, n);
  r_ref = rel_diff(g_step, g_ref, n);
  CHECK(fabs(loss - loss2_fx[0]) <= 1e-5 * fabs(loss2_fx[0]), "%s: carried loss %.9g, PyTorch "
        "%.9g", dir, loss, loss2_fx[0]);
  CHECK(fabs(loss - loss_ref) <= 1e-6 * fabs(loss_ref), "%s: carried loss %.9g, reference %.9g",
        dir, loss, loss_ref);
  CHECK(r_fx <= 1e-4, "%s: carried step's gradients %.2e from PyTorch's", dir, r_fx);
  CHECK(r_ref <= 1e-5, "%s: carried step's gradients %.2e from the reference", dir, r_ref);
  printf("%s step 2 (carried): loss %.7f (PyTorch %.7f); gradients %.1e from PyTorch, %.1e from "
         "the reference\n", dir, loss, loss2_fx[0], r_fx, r_ref);

  /* the same step 2 from the state given instead of carried */
  cl_step_options og = {0};
  og.tbptt = sh.k;
  og.state_mode = CL_STATE_GIVEN;
  og.state = s1.a;
  double loss_g = NAN;
  CHECK(cl_model_train_step(ref, &x2a, &y2a, tg, &sgd0, &og, &loss_g) == CL_OK,
        "%s: given state: %s", dir, cl_model_error(ref));
  ctest_flat(ref, 1, g_step, MAXG);
  double r_g = rel_diff(g_step, g_fx, n);
  CHECK(fabs(loss_g - loss2_fx[0]) <= 1e-5 * fabs(loss2_fx[0]) && r_g <= 1e-4,
        "%s: from the given state: loss %.9g (PyTorch %.9g), gradients %.2e", dir, loss_g,
        loss2_fx[0], r_g);

  states_free(&s1, &sh);
  states_free(&s2, &sh);
  cl_model_free(m);
  cl_model_free(ref);
  free(x), free(y), free(x2), free(y2), free(loss_fx), free(loss2_fx);
}

int main(void) {
  check_fixture("tests/testthat/fixtures/tbptt/sequence_k2");
  check_fixture("tests/testthat/fixtures/tbptt/last_state_k3");
  return ctest_done("test_core_tbptt");
}
