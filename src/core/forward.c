/*
 * core/forward.c -- the forward pass over layers and time, and reading its
 * results. Two schedules of the same math:
 *  - training (the fast path): the input half of each layer's convolution
 *    runs once over all T*B images into the gates buffer, then per step only
 *    the hidden half is added and the fused cell applied; gates and c_t stay
 *    for backward.
 *  - inference: per step, both halves into one small gates buffer shared by
 *    all layers, and c kept for two steps only.
 */
#include "internal.h"

#include <string.h>

static cl_conv_shape conv_shape(const cl_model *m, int N, int C, int K, int k) {
  cl_conv_shape s = {N, C, m->step.H, m->step.W, K, k, m->cfg.dtype};
  return s;
}

static const float *bias_of(const cl_model *m, const cl_layer *L) {
  return m->cfg.bias ? m->params + L->off_b : NULL;
}

static cl_status forward_layer_train(cl_model *m, int l) {
  const cl_step *st = &m->step;
  const cl_layer *L = &m->layer[l];
  const struct cl_backend_i *be = m->be->iface;
  size_t P = (size_t)st->H * st->W, bh = (size_t)st->B * L->hidden * P;
  const float *in = l == 0 ? st->x : st->hid[l - 1];
  float *gates = st->gates[l], *cell = st->cell[l], *hid = st->hid[l];
  cl_conv_shape sx = conv_shape(m, st->T * st->B, L->in, 4 * L->hidden, L->k);
  cl_conv_shape sh = conv_shape(m, st->B, L->hidden, 4 * L->hidden, L->k);
  cl_gates_shape gs = {st->B, L->hidden, (int)P, m->cfg.dtype};

  CL_KERNEL(m, be->conv_forward(m->be, &sx, in, m->params + L->off_wx, bias_of(m, L), gates, 0,
                                st->ws));
  for (int t = 0; t < st->T; t++) {
    float *z = gates + (size_t)t * 4 * bh;
    if (t > 0)
      CL_KERNEL(m, be->conv_forward(m->be, &sh, hid + (t - 1) * bh, m->params + L->off_wh, NULL,
                                    z, 1, st->ws));
    CL_KERNEL(m, be->gates_forward(m->be, &gs, z, t > 0 ? cell + (t - 1) * bh : NULL,
                                   cell + t * bh, hid + t * bh));
  }
  return CL_OK;
}

static cl_status forward_layer_infer(cl_model *m, int l) {
  const cl_step *st = &m->step;
  const cl_layer *L = &m->layer[l];
  const struct cl_backend_i *be = m->be->iface;
  size_t P = (size_t)st->H * st->W, bh = (size_t)st->B * L->hidden * P;
  size_t bin = (size_t)st->B * L->in * P;
  const float *in = l == 0 ? st->x : st->hid[l - 1];
  float *z = st->gates[l], *cell = st->cell[l], *hid = st->hid[l];
  cl_conv_shape sx = conv_shape(m, st->B, L->in, 4 * L->hidden, L->k);
  cl_conv_shape sh = conv_shape(m, st->B, L->hidden, 4 * L->hidden, L->k);
  cl_gates_shape gs = {st->B, L->hidden, (int)P, m->cfg.dtype};

  for (int t = 0; t < st->T; t++) {
    CL_KERNEL(m, be->conv_forward(m->be, &sx, in + t * bin, m->params + L->off_wx, bias_of(m, L),
                                  z, 0, st->ws));
    if (t > 0)
      CL_KERNEL(m, be->conv_forward(m->be, &sh, hid + (t - 1) * bh, m->params + L->off_wh, NULL,
                                    z, 1, st->ws));
    CL_KERNEL(m, be->gates_forward(m->be, &gs, z, t > 0 ? cell + ((t - 1) % 2) * bh : NULL,
                                   cell + (t % 2) * bh, hid + t * bh));
  }
  return CL_OK;
}

static cl_status check_sequence(cl_model *m, const cl_host_array *x, const char *what,
                                int channels) {
  if (x->ndim != 5)
    return cl_fail(m, CL_E_INVALID, "%s must have 5 dimensions [batch, time, channels, height, width]",
                   what);
  for (int i = 0; i < 5; i++)
    if (x->dims[i] < 1) return cl_fail(m, CL_E_INVALID, "%s has an empty dimension %d", what, i + 1);
  if (x->dims[2] != channels)
    return cl_fail(m, CL_E_INVALID, "%s has %d channels (dimension 3), the model expects %d", what,
                   x->dims[2], channels);
  return CL_OK;
}

cl_status cl_model_forward(cl_model *m, const cl_host_array *x, int training,
                           const cl_step_options *opts) {
  m->err[0] = '\0';
  CL_TRY(cl_check_options(m, opts));
  CL_TRY(check_sequence(m, x, "x", m->cfg.input_dim));
  int B = x->dims[0], T = x->dims[1], H = x->dims[3], W = x->dims[4];
  m->phase = CL_PHASE_NONE;
  CL_TRY(cl_step_prepare(m, B, T, H, W, training));
  cl_step *st = &m->step;
  size_t n = (size_t)T * B * m->cfg.input_dim * H * W;
  CL_TRY(cl_put_host(m, st->x, x, n));
  for (int l = 0; l < m->cfg.n_layers; l++)
    CL_TRY(st->training ? forward_layer_train(m, l) : forward_layer_infer(m, l));
  m->phase = training ? CL_PHASE_TRAINING : CL_PHASE_INFERENCE;
  return CL_OK;
}

cl_status cl_model_last_shape(const cl_model *m, int *B, int *T, int *H, int *W) {
  int ok = m->phase != CL_PHASE_NONE;
  *B = ok ? m->step.B : 0;
  *T = ok ? m->step.T : 0;
  *H = ok ? m->step.H : 0;
  *W = ok ? m->step.W : 0;
  return CL_OK;
}

static cl_status check_read(cl_model *m, int layer, const cl_host_array *out, int ndim) {
  if (m->phase == CL_PHASE_NONE) return cl_fail(m, CL_E_STATE, "no forward pass has run");
  if (layer < 0 || layer >= m->cfg.n_layers)
    return cl_fail(m, CL_E_INVALID, "layer %d does not exist (1..%d)", layer + 1, m->cfg.n_layers);
  const cl_step *st = &m->step;
  int want[5] = {st->B, st->T, m->layer[layer].hidden, st->H, st->W};
  if (ndim == 4) { /* drop T */
    want[1] = want[2]; want[2] = want[3]; want[3] = want[4];
  }
  if (out->ndim != ndim) return cl_fail(m, CL_E_INVALID, "output array must have %d dimensions", ndim);
  for (int i = 0; i < ndim; i++)
    if (out->dims[i] != want[i])
      return cl_fail(m, CL_E_INVALID, "output array dimension %d is %d, expected %d", i + 1,
                     out->dims[i], want[i]);
  return CL_OK;
}

cl_status cl_model_read_output(cl_model *m, int layer, cl_host_array *out) {
  CL_TRY(check_read(m, layer, out, 5));
  const cl_step *st = &m->step;
  size_t n = (size_t)st->T * st->B * m->layer[layer].hidden * st->H * st->W;
  return cl_get_host(m, out, st->hid[layer], n);
}

cl_status cl_model_read_state(cl_model *m, int layer, int which, cl_host_array *out) {
  CL_TRY(check_read(m, layer, out, 4));
  const cl_step *st = &m->step;
  size_t bh = (size_t)st->B * m->layer[layer].hidden * st->H * st->W;
  size_t last = (size_t)(st->T - 1);
  const float *src;
  if (which == 0)
    src = st->hid[layer] + last * bh;
  else /* training keeps every c_t; inference two, alternating */
    src = st->cell[layer] + (st->training ? last : last % 2) * bh;
  return cl_get_host(m, out, src, bh);
}
