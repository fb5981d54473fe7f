/*
 * tests/c/backend_ref.h -- the plain-C reference of every computing slot of
 * core/backend.h, for tests/c/test_backend_ops.c: direct loops in double,
 * written from backend.h's comments and nothing else (no blocking, no
 * vectors, no threads), so that a backend and its reference share no code.
 *
 * Inputs are float arrays holding what the backend reads: values stored in
 * float16 / bfloat16 are passed already rounded (host/half.h), so the
 * references compute from exactly the stored values. Outputs are double;
 * the guards' references return backend.h's fault key, found in float32
 * arithmetic (whether a value overflows is a float32 question).
 * It is not a test by itself and checks nothing.
 */
#ifndef CONVLSTM_TESTS_BACKEND_REF_H
#define CONVLSTM_TESTS_BACKEND_REF_H

#include "core/backend.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* x[n, c, y, xx] of [N, C, H, W], zero outside the image ("same" padding). */
static double ref_at(const float *x, const cl_conv_shape *s, int C, int n, int c, int y, int xx) {
  if (y < 0 || y >= s->H || xx < 0 || xx >= s->W) return 0.0;
  return x[(((size_t)n * C + c) * s->H + y) * s->W + xx];
}

/* Groups (backend.h): output o belongs to group o / (K/G) and sees input
 * channels g C/G .. (g+1) C/G - 1 only; the weight is [K, C/G, kh, kw]. */
static int ref_cg(const cl_conv_shape *s) { return s->C / cl_conv_groups(s); }
static int ref_kg(const cl_conv_shape *s) { return s->K / cl_conv_groups(s); }

/* w[o, c, i, j] of [K, C/G, kh, kw] (c within o's group). Tap (i, j) of
 * output pixel (y, x) reads input pixel (y + i dh - pad_h, x + j dw - pad_w). */
static size_t ref_widx(const cl_conv_shape *s, int o, int c, int i, int j) {
  return (((size_t)o * ref_cg(s) + c) * s->kh + i) * s->kw + j;
}

/* conv_forward: y = conv(x, w) + bias (+ y0 when accumulating). */
static void ref_conv_forward(const cl_conv_shape *s, const float *x, const float *w,
                             const float *bias, const float *y0, double *y) {
  const int ph = cl_conv_pad_h(s), pw = cl_conv_pad_w(s);
  for (int n = 0; n < s->N; n++)
    for (int o = 0; o < s->K; o++)
      for (int yy = 0; yy < s->H; yy++)
        for (int xx = 0; xx < s->W; xx++) {
          double sum = bias ? bias[o] : 0.0;
          const int c0 = o / ref_kg(s) * ref_cg(s);
          for (int c = 0; c < ref_cg(s); c++)
            for (int i = 0; i < s->kh; i++)
              for (int j = 0; j < s->kw; j++)
                sum += w[ref_widx(s, o, c, i, j)] *
                       ref_at(x, s, s->C, n, c0 + c, yy + i * s->dh - ph, xx + j * s->dw - pw);
          const size_t at = (((size_t)n * s->K + o) * s->H + yy) * s->W + xx;
          y[at] = sum + (y0 ? y0[at] : 0.0);
        }
}

/* conv_backward_data: dx[n,c,y,x] = sum over o, i, j of
 * dy[n, o, y - i dh + pad_h, x - j dw + pad_w] w[o,c,i,j] (+ dx0 when
 * accumulating). */
static void ref_conv_backward_data(const cl_conv_shape *s, const float *dy, const float *w,
                                   const float *dx0, double *dx) {
  const int ph = cl_conv_pad_h(s), pw = cl_conv_pad_w(s);
  for (int n = 0; n < s->N; n++)
    for (int c = 0; c < s->C; c++)
      for (int yy = 0; yy < s->H; yy++)
        for (int xx = 0; xx < s->W; xx++) {
          double sum = 0.0;
          const int g = c / ref_cg(s), o0 = g * ref_kg(s);
          for (int o = o0; o < o0 + ref_kg(s); o++)
            for (int i = 0; i < s->kh; i++)
              for (int j = 0; j < s->kw; j++)
                sum += w[ref_widx(s, o, c - g * ref_cg(s), i, j)] *
                       ref_at(dy, s, s->K, n, o, yy - i * s->dh + ph, xx - j * s->dw + pw);
          const size_t at = (((size_t)n * s->C + c) * s->H + yy) * s->W + xx;
          dx[at] = sum + (dx0 ? dx0[at] : 0.0);
        }
}

/* conv_backward_filter: dw = dw0 + correlate(dy, x); db = db0 + sum of dy
 * over N, H, W (db NULL: not computed). */
static void ref_conv_backward_filter(const cl_conv_shape *s, const float *dy, const float *x,
                                     const float *dw0, const float *db0, double *dw, double *db) {
  const int ph = cl_conv_pad_h(s), pw = cl_conv_pad_w(s);
  const size_t P = (size_t)s->H * s->W;
  for (int o = 0; o < s->K; o++) {
    const int c0 = o / ref_kg(s) * ref_cg(s);
    for (int c = 0; c < ref_cg(s); c++)
      for (int i = 0; i < s->kh; i++)
        for (int j = 0; j < s->kw; j++) {
          double sum = 0.0;
          for (int n = 0; n < s->N; n++)
            for (int yy = 0; yy < s->H; yy++)
              for (int xx = 0; xx < s->W; xx++)
                sum += dy[((size_t)n * s->K + o) * P + (size_t)yy * s->W + xx] *
                       ref_at(x, s, s->C, n, c0 + c, yy + i * s->dh - ph, xx + j * s->dw - pw);
          dw[ref_widx(s, o, c, i, j)] = dw0[ref_widx(s, o, c, i, j)] + sum;
        }
    if (!db) continue;
    double sum = 0.0;
    for (int n = 0; n < s->N; n++)
      for (size_t p = 0; p < P; p++) sum += dy[((size_t)n * s->K + o) * P + p];
    db[o] = db0[o] + sum;
  }
}

/* ---- the fused cell ------------------------------------------------------ */

static double ref_sigmoid(double v) { return 1.0 / (1.0 + exp(-v)); }

/* Index of gate q (0 i, 1 f, 2 o, 3 g) of state element e in [N, 4 hidden, P]. */
static size_t ref_gate_at(const cl_gates_shape *s, size_t e, int q) {
  const size_t hp = (size_t)s->hidden * s->P;
  return (e / hp * 4 + (size_t)q) * hp + e % hp;
}

/* Peephole weight k (0 w_ci, 1 w_cf, 2 w_co) of state element e in
 * wp [3, hidden, pp], as a flat index; pp = 1 per channel, P per position. */
static size_t ref_peep_at(const cl_gates_shape *s, size_t e, int k) {
  const size_t P = (size_t)s->P, pp = s->peep == CL_PEEP_POSITION ? P : 1;
  const size_t ch = e / P % (size_t)s->hidden, p = e % P;
  return ((size_t)k * s->hidden + ch) * pp + (pp == 1 ? 0 : p);
}

/* Elements of a shape's peephole weights (0 without). */
static size_t ref_peep_numel(const cl_gates_shape *s) {
  if (s->peep == CL_PEEP_NONE) return 0;
  return 3 * (size_t)s->hidden * (s->peep == CL_PEEP_POSITION ? (size_t)s->P : 1);
}

/* The cell in double for one element: pre-activations zi, zf, zo, zg,
 * c_prev cp, peephole weights w[3] (NULL: none); activations out in act[4],
 * c and h returned through *c, *h. Paper's peepholes: i, f see c_prev, o
 * sees c. */
static void ref_cell(const double z[4], double cp, const double *w, double act[4], double *c,
                     double *h) {
  const double i = ref_sigmoid(z[0] + (w ? w[0] * cp : 0.0));
  const double f = ref_sigmoid(z[1] + (w ? w[1] * cp : 0.0));
  const double g = tanh(z[3]);
  *c = f * cp + i * g;
  const double o = ref_sigmoid(z[2] + (w ? w[2] * *c : 0.0));
  *h = o * tanh(*c);
  act[0] = i, act[1] = f, act[2] = o, act[3] = g;
}

/* gates_forward: activations a (sig i, sig f, sig o, tanh g) of the
 * pre-activations z; c = f c_prev + i g; h = o tanh(c). c_prev NULL: zeros.
 * wp: peephole weights when s->peep says so (else unused). */
static void ref_gates_forward(const cl_gates_shape *s, const float *z, const float *c_prev,
                              const float *wp, double *a, double *c, double *h) {
  const size_t ns = (size_t)s->N * s->hidden * s->P;
  for (size_t e = 0; e < ns; e++) {
    double zz[4], act[4], w[3];
    for (int q = 0; q < 4; q++) zz[q] = z[ref_gate_at(s, e, q)];
    for (int k = 0; k < 3 && s->peep; k++) w[k] = wp[ref_peep_at(s, e, k)];
    ref_cell(zz, c_prev ? c_prev[e] : 0.0, s->peep ? w : NULL, act, &c[e], &h[e]);
    for (int q = 0; q < 4; q++) a[ref_gate_at(s, e, q)] = act[q];
  }
}

/* gates_backward from the stored activations act, c and c_prev: dz of the
 * pre-activations, and dc_prev (dc holds the gradient of c_t from step t+1
 * on entry), with the formulas of backend.h (peepholes: wp). */
static void ref_gates_backward(const cl_gates_shape *s, const float *act, const float *c,
                               const float *c_prev, const float *wp, const float *dh,
                               const float *dc, double *dz, double *dc_prev) {
  const size_t ns = (size_t)s->N * s->hidden * s->P;
  for (size_t e = 0; e < ns; e++) {
    const double i = act[ref_gate_at(s, e, 0)], f = act[ref_gate_at(s, e, 1)];
    const double o = act[ref_gate_at(s, e, 2)], g = act[ref_gate_at(s, e, 3)];
    const double tc = tanh((double)c[e]), cp = c_prev ? c_prev[e] : 0.0;
    const double wi = s->peep ? wp[ref_peep_at(s, e, 0)] : 0.0;
    const double wf = s->peep ? wp[ref_peep_at(s, e, 1)] : 0.0;
    const double wo = s->peep ? wp[ref_peep_at(s, e, 2)] : 0.0;
    const double dzo = dh[e] * tc * o * (1 - o);
    const double dct = dc[e] + dh[e] * o * (1 - tc * tc) + dzo * wo;
    const double dzi = dct * g * i * (1 - i), dzf = dct * cp * f * (1 - f);
    dz[ref_gate_at(s, e, 0)] = dzi;
    dz[ref_gate_at(s, e, 1)] = dzf;
    dz[ref_gate_at(s, e, 2)] = dzo;
    dz[ref_gate_at(s, e, 3)] = dct * i * (1 - g * g);
    dc_prev[e] = dct * f + dzi * wi + dzf * wf;
  }
}

/* peephole_filter: dw = dw0 + sum over images (and a channel's pixels) of
 * dz_i c_prev, dz_f c_prev, dz_o c. c_prev NULL: zeros. */
static void ref_peephole_filter(const cl_gates_shape *s, const float *dz, const float *c,
                                const float *c_prev, const float *dw0, double *dw) {
  const size_t ns = (size_t)s->N * s->hidden * s->P, nw = ref_peep_numel(s);
  for (size_t k = 0; k < nw; k++) dw[k] = dw0[k];
  for (size_t e = 0; e < ns; e++)
    for (int k = 0; k < 3; k++) {
      const double src = k == 2 ? c[e] : c_prev ? c_prev[e] : 0.0;
      dw[ref_peep_at(s, e, k)] += (double)dz[ref_gate_at(s, e, k)] * src;
    }
}

/* L(z, c_prev, w) = sum a h + sum b c of the cell in double: what
 * gates_backward (and peephole_filter for w) differentiates when dh = a and
 * the incoming dc = b. */
static double ref_cell_loss(const cl_gates_shape *s, const double *z, const double *c_prev,
                            const double *wp, const float *a, const float *b) {
  const size_t ns = (size_t)s->N * s->hidden * s->P;
  double L = 0.0;
  for (size_t e = 0; e < ns; e++) {
    double zz[4], act[4], w[3], c, h;
    for (int q = 0; q < 4; q++) zz[q] = z[ref_gate_at(s, e, q)];
    for (int k = 0; k < 3 && s->peep; k++) w[k] = wp[ref_peep_at(s, e, k)];
    ref_cell(zz, c_prev ? c_prev[e] : 0.0, s->peep ? w : NULL, act, &c, &h);
    L += a[e] * h + b[e] * c;
  }
  return L;
}

/* ---- loss and optimizers ------------------------------------------------- */

/* One step of torch.optim.Adam (weight decay added to the gradient) or,
 * with hp->decoupled, torch.optim.AdamW (p *= 1 - lr weight_decay first);
 * with hp->amsgrad, vmax = max(vmax, v) is the denominator's
 * (max_exp_avg_sq). */
static void ref_adam_step(double *p, const float *g, double *m, double *v, double *vmax, size_t n,
                          const cl_adam_hp *hp) {
  const double b1 = hp->beta1, b2 = hp->beta2, wd = hp->weight_decay;
  const double bc1 = 1 - pow(b1, (double)hp->step), bc2 = 1 - pow(b2, (double)hp->step);
  for (size_t i = 0; i < n; i++) {
    double gi = g[i];
    if (hp->decoupled) p[i] *= 1 - (double)hp->lr * wd;
    else gi += wd * p[i];
    m[i] = b1 * m[i] + (1 - b1) * gi;
    v[i] = b2 * v[i] + (1 - b2) * gi * gi;
    double den_v = v[i];
    if (hp->amsgrad) den_v = vmax[i] = vmax[i] > v[i] ? vmax[i] : v[i];
    p[i] -= hp->lr / bc1 * m[i] / (sqrt(den_v) / sqrt(bc2) + hp->eps);
  }
}

/* One step of torch.optim.SGD (dampening 0, no Nesterov); buf is not read
 * at the first step. */
static void ref_sgd_step(double *p, const float *g, double *buf, size_t n, const cl_sgd_hp *hp) {
  for (size_t i = 0; i < n; i++) {
    double d = g[i] + (double)hp->weight_decay * p[i];
    if (hp->momentum != 0.0f) {
      buf[i] = hp->first ? d : hp->momentum * buf[i] + d;
      d = buf[i];
    }
    p[i] -= hp->lr * d;
  }
}

/* One step of torch.optim.RMSprop: v the square_avg, buf the
 * momentum_buffer (hp->momentum != 0), ga the grad_avg (hp->centered), all
 * starting at zeros. */
static void ref_rmsprop_step(double *p, const float *g, double *v, double *buf, double *ga,
                             size_t n, const cl_rmsprop_hp *hp) {
  const double a = hp->alpha;
  for (size_t i = 0; i < n; i++) {
    const double gi = g[i] + (double)hp->weight_decay * p[i];
    v[i] = a * v[i] + (1 - a) * gi * gi;
    double avg = v[i];
    if (hp->centered) {
      ga[i] = a * ga[i] + (1 - a) * gi;
      avg -= ga[i] * ga[i];
    }
    avg = sqrt(avg) + hp->eps;
    if (hp->momentum != 0.0f) {
      buf[i] = hp->momentum * buf[i] + gi / avg;
      p[i] -= hp->lr * buf[i];
    } else {
      p[i] -= hp->lr * gi / avg;
    }
  }
}

/* The loss slot: the mean over n of torch 1.13's MSE, L1,
 * Huber(delta) or BCE-with-logits(pos_weight) loss of pred against target,
 * each element's times weight[i] (weight NULL: one), in double from the
 * float inputs (MSE's difference a float32, as in torch's mse_loss on
 * float32 tensors); grad (may be NULL) = scale times the mean's gradient:
 * 2 d, sign(d) (0 at 0), d clamped to +-delta or (p y + 1 - y) sigmoid(x)
 * - p y, each times w over n. */
static double ref_loss_w(const cl_loss_fn *f, const float *pred, const float *target,
                         const float *weight, size_t n, double scale, double *grad) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    const double x = pred[i], y = target[i], d = x - y, z = fabs(d);
    const double w = weight ? weight[i] : 1.0;
    double l, gi;
    if (f->kind == CL_LOSS_MSE) {
      const float df = pred[i] - target[i]; /* a float32 difference, as torch's */
      l = (double)df * df, gi = 2.0 * df;
    } else if (f->kind == CL_LOSS_MAE) {
      l = z, gi = (d > 0) - (d < 0);
    } else if (f->kind == CL_LOSS_HUBER) {
      l = z < f->delta ? 0.5 * z * z : f->delta * (z - 0.5 * f->delta);
      gi = d < -f->delta ? -f->delta : d > f->delta ? f->delta : d;
    } else { /* (1 - y) x + (1 + (p - 1) y) softplus(-x) */
      const double pw = f->pos_weight, s = 1.0 / (1.0 + exp(-x));
      l = (1 - y) * x + (1 + (pw - 1) * y) * (log1p(exp(-fabs(x))) + (x < 0 ? -x : 0.0));
      gi = (pw * y + 1 - y) * s - pw * y;
    }
    sum += w * l;
    if (grad) grad[i] = scale * w * gi / (double)n;
  }
  return sum / (double)n;
}

static double ref_loss(const cl_loss_fn *f, const float *pred, const float *target, size_t n,
                       double scale, double *grad) {
  return ref_loss_w(f, pred, target, NULL, n, scale, grad);
}

/* sum_squares: the sum of g^2 in double (inf or NaN when an element is). */
static double ref_sum_squares(const float *g, size_t n) {
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) sum += (double)g[i] * g[i];
  return sum;
}

/* mask_mul (backend.h, cl_mask_shape): reps steps of J = n / row images,
 * mask [J, G, row]; spread: out[r, j, g, i] = in[r, j, i] mask[j, g, i];
 * gather: out[r, j, i] = sum_g in[r, j, g, i] mask[j, g, i]; plus out0 (the
 * out's elements) when accumulating (out0 may be NULL otherwise). G == 1 is
 * one mask over reps blocks of n. */
static void ref_mask_mul(const cl_mask_shape *s, const float *in, const float *mask,
                         const float *out0, double *out) {
  const size_t G = (size_t)s->groups, row = G > 1 ? s->row : s->n;
  if (row == 0) return; /* an empty call: nothing to write */
  const size_t J = s->n / row;
  for (size_t q = 0; q < s->reps * J; q++)
    for (size_t i = 0; i < row; i++) {
      const float *mk = mask + (q % J) * G * row + i;
      if (G > 1 && s->gather) {
        double v = 0.0;
        for (size_t g = 0; g < G; g++) v += (double)in[(q * G + g) * row + i] * mk[g * row];
        out[q * row + i] = v + (out0 ? (double)out0[q * row + i] : 0.0);
        continue;
      }
      for (size_t g = 0; g < G; g++) {
        const size_t e = (q * G + g) * row + i;
        out[e] = (double)in[q * row + i] * mk[g * row] + (out0 ? (double)out0[e] : 0.0);
      }
    }
}

/* grad_unscale: g inv_scale rounded to float once, and whether any element
 * is inf or NaN before or after scaling. */
static int ref_grad_unscale(const float *g, size_t n, float inv_scale, double *out) {
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    const float v = g[i] * inv_scale;
    out[i] = v;
    bad |= !isfinite(g[i]) || !isfinite(v);
  }
  return bad;
}

/* ---- the updates' guards ------------------------------------------------- */

/* The fault key of backend.h: element i, array part, NaN or +-Inf. */
static uint64_t ref_fault_key(size_t i, int part, float x) {
  return (uint64_t)i * 8u + (uint64_t)part * 2u + (isnan(x) ? 1u : 0u);
}

/* The first non-finite value among g and the new m, v, p of element i, in
 * backend.h's order; CL_FAULT_NONE when all are finite. */
static uint64_t ref_first_fault(size_t i, float g, float m, float v, float p) {
  const float x[4] = {g, m, v, p};
  for (int part = 0; part < 4; part++)
    if (!isfinite(x[part])) return ref_fault_key(i, part, x[part]);
  return CL_FAULT_NONE;
}

/* adam_check: the first element at which torch's float32 Adam (AdamW with
 * hp->decoupled, amsgrad with hp->amsgrad) would hold a non-finite value.
 * Whether a value overflows is a float32 question, so this reference
 * computes in float32 as torch does on float32 tensors: the bias
 * corrections and AdamW's 1 - lr weight_decay in double, the step size
 * lr / (1 - beta1^t) and sqrt(1 - beta2^t) passed as float32 scalars
 * (torch's Python floats), the rest one float operation at a time. m, v,
 * vmax NULL: zeros (no state yet). vmax is finite where v and its old value
 * are, so it has no part of its own in the key. */
static uint64_t ref_adam_fault(const float *p, const float *g, const float *m, const float *v,
                               const float *vmax, size_t n, const cl_adam_hp *hp) {
  const float b1 = hp->beta1, b2 = hp->beta2;
  const float step = (float)(hp->lr / (1.0 - pow(hp->beta1, (double)hp->step)));
  const float bc2_sqrt = (float)sqrt(1.0 - pow(hp->beta2, (double)hp->step));
  const float decay = (float)(1.0 - (double)hp->lr * (double)hp->weight_decay);
  for (size_t i = 0; i < n; i++) {
    float gi = g[i], pi = p[i];
    if (hp->decoupled) {
      if (decay != 1.0f) pi = pi * decay;
    } else if (hp->weight_decay != 0.0f) {
      gi = gi + hp->weight_decay * p[i];
    }
    const float mi = (m ? m[i] : 0.0f) * b1 + (1.0f - b1) * gi;
    const float vi = (v ? v[i] : 0.0f) * b2 + (1.0f - b2) * gi * gi;
    float den_v = vi;
    if (hp->amsgrad) {
      const float xi = vmax ? vmax[i] : 0.0f;
      den_v = xi > vi ? xi : vi;
    }
    const float denom = sqrtf(den_v) / bc2_sqrt + hp->eps;
    pi = pi - step * mi / denom;
    const uint64_t f = ref_first_fault(i, g[i], mi, vi, pi);
    if (f != CL_FAULT_NONE) return f;
  }
  return CL_FAULT_NONE;
}

/* sgd_check: the same for torch's float32 SGD (dampening 0, no Nesterov).
 * The buffer is read only with momentum and after the first update, and is
 * the "m" part of the key; there is no "v". */
static uint64_t ref_sgd_fault(const float *p, const float *g, const float *buf, size_t n,
                              const cl_sgd_hp *hp) {
  for (size_t i = 0; i < n; i++) {
    float d = g[i], b = 0.0f;
    if (hp->weight_decay != 0.0f) d = d + hp->weight_decay * p[i];
    if (hp->momentum != 0.0f) {
      b = hp->first || !buf ? d : buf[i] * hp->momentum + d;
      d = b;
    }
    const float pi = p[i] - hp->lr * d;
    const uint64_t f = ref_first_fault(i, g[i], b, 0.0f, pi);
    if (f != CL_FAULT_NONE) return f;
  }
  return CL_FAULT_NONE;
}

/* rmsprop_check: the same for torch's float32 RMSprop; the buffer is the
 * "m" part of the key, square_avg the "v" part; v, buf, ga NULL: zeros. */
static uint64_t ref_rmsprop_fault(const float *p, const float *g, const float *v,
                                  const float *buf, const float *ga, size_t n,
                                  const cl_rmsprop_hp *hp) {
  const float a = hp->alpha, one_m_a = (float)(1.0 - (double)hp->alpha);
  for (size_t i = 0; i < n; i++) {
    float gi = g[i], b = 0.0f;
    if (hp->weight_decay != 0.0f) gi = gi + hp->weight_decay * p[i];
    const float vi = (v ? v[i] : 0.0f) * a + one_m_a * gi * gi;
    float avg = vi;
    if (hp->centered) {
      const float gai = (ga ? ga[i] : 0.0f) * a + one_m_a * gi;
      avg = vi - gai * gai;
    }
    avg = sqrtf(avg) + hp->eps;
    float pi;
    if (hp->momentum != 0.0f) {
      b = (buf ? buf[i] : 0.0f) * hp->momentum + gi / avg;
      pi = p[i] + -hp->lr * b;
    } else {
      pi = p[i] + -hp->lr * gi / avg;
    }
    const uint64_t f = ref_first_fault(i, g[i], b, vi, pi);
    if (f != CL_FAULT_NONE) return f;
  }
  return CL_FAULT_NONE;
}

/* gather_rows: dst[(t - t0) nb + j] = src[t N + idx[j]]. */
static void ref_gather_rows(unsigned char *dst, const unsigned char *src, const int *idx, int nb,
                            int N, int t0, int nt, size_t row_bytes) {
  for (int t = 0; t < nt; t++)
    for (int j = 0; j < nb; j++)
      memcpy(dst + ((size_t)t * nb + j) * row_bytes,
             src + ((size_t)(t0 + t) * N + idx[j]) * row_bytes, row_bytes);
}

#endif
