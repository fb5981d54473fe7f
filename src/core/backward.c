/*
 * core/backward.c -- the MSE loss and backpropagation through layers and
 * time, from the last layer down.
 *
 * Within a layer, time runs backwards: the fused cell turns the saved gate
 * activations into pre-activation gradients dz_t in place, and dz_t flows to
 * h_{t-1} through the hidden half of the convolution, accumulated straight
 * into d_hidden[t-1], which already holds what the layer above (or the loss)
 * sent there. The weight gradients need no time loop: each is one large
 * convolution over all steps once every dz_t is known, the mirror of the
 * forward fast path.
 */
#include "internal.h"

#include <string.h>

static cl_status zero(cl_model *m, float *p, size_t n) {
  CL_KERNEL(m, m->be->iface->memset0(m->be, p, n * sizeof(float)));
  return CL_OK;
}

/* Elements of the chosen output, and where it starts in the last layer's
 * hidden sequence. */
static void target_extent(const cl_model *m, cl_target target, size_t *offset, size_t *n) {
  const cl_step *st = &m->step;
  size_t bh = (size_t)st->B * m->layer[m->cfg.n_layers - 1].hidden * st->H * st->W;
  *offset = target == CL_TARGET_SEQUENCE ? 0 : (size_t)(st->T - 1) * bh;
  *n = target == CL_TARGET_SEQUENCE ? (size_t)st->T * bh : bh;
}

static cl_status check_target_array(cl_model *m, const cl_host_array *a, cl_target target,
                                    const char *what) {
  const cl_step *st = &m->step;
  int C = m->layer[m->cfg.n_layers - 1].hidden;
  int seq[5] = {st->B, st->T, C, st->H, st->W}, last[4] = {st->B, C, st->H, st->W};
  const int *want = target == CL_TARGET_SEQUENCE ? seq : last;
  int nd = target == CL_TARGET_SEQUENCE ? 5 : 4;
  const char *tn = target == CL_TARGET_SEQUENCE ? "sequence" : "last_state";
  if (a->ndim != nd)
    return cl_fail(m, CL_E_INVALID, "%s must have %d dimensions for target '%s'", what, nd, tn);
  for (int i = 0; i < nd; i++)
    if (a->dims[i] != want[i])
      return cl_fail(m, CL_E_INVALID,
                     "%s has dimension %d of size %d; target '%s' of this batch needs %d", what,
                     i + 1, a->dims[i], tn, want[i]);
  return CL_OK;
}

/* Put an array of the target's shape into the last layer's d_hidden (zeros
 * at the other steps for a last-state target). */
static cl_status place_target(cl_model *m, const cl_host_array *a, cl_target target) {
  const cl_step *st = &m->step;
  int top = m->cfg.n_layers - 1;
  size_t off, n;
  target_extent(m, target, &off, &n);
  if (off > 0) CL_TRY(zero(m, st->dh[top], off));
  return cl_put_host(m, st->dh[top] + off, a, n);
}

cl_status cl_model_mse(cl_model *m, const cl_host_array *y, cl_target target, double *loss) {
  m->err[0] = '\0';
  if (m->phase != CL_PHASE_TRAINING && m->phase != CL_PHASE_LOSS)
    return cl_fail(m, CL_E_STATE, "the loss needs a training forward pass first");
  CL_TRY(check_target_array(m, y, target, "y"));
  CL_TRY(place_target(m, y, target));
  const cl_step *st = &m->step;
  int top = m->cfg.n_layers - 1;
  size_t off, n;
  target_extent(m, target, &off, &n);
  float *g = st->dh[top] + off;
  CL_KERNEL(m, m->be->iface->mse(m->be, st->hid[top] + off, g, n, m->cfg.dtype, 1.0f, g, loss));
  m->phase = CL_PHASE_LOSS;
  m->loss_target = target;
  return CL_OK;
}

static cl_status backward_layer(cl_model *m, int l) {
  const cl_step *st = &m->step;
  const cl_layer *L = &m->layer[l];
  const struct cl_backend_i *be = m->be->iface;
  size_t P = (size_t)st->H * st->W, bh = (size_t)st->B * L->hidden * P, bg = 4 * bh;
  int T = st->T, B = st->B, K = 4 * L->hidden;
  const float *in = l == 0 ? st->x : st->hid[l - 1];
  float *dz = st->gates[l], *cell = st->cell[l], *hid = st->hid[l], *dh = st->dh[l];
  float *gw = m->grads;
  cl_conv_shape sx = {T * B, L->in, st->H, st->W, K, L->k, m->cfg.dtype};
  cl_conv_shape sh = {B, L->hidden, st->H, st->W, K, L->k, m->cfg.dtype};
  cl_gates_shape gs = {B, L->hidden, (int)P, m->cfg.dtype};

  CL_TRY(zero(m, st->dc, bh));
  for (int t = T - 1; t >= 0; t--) {
    float *dz_t = dz + (size_t)t * bg;
    CL_KERNEL(m, be->gates_backward(m->be, &gs, dz_t, cell + t * bh,
                                    t > 0 ? cell + (t - 1) * bh : NULL, dh + t * bh, st->dc));
    if (t > 0)
      CL_KERNEL(m, be->conv_backward_data(m->be, &sh, dz_t, m->params + L->off_wh,
                                          dh + (t - 1) * bh, 1, st->ws));
  }
  if (T > 1) { /* h_{-1} is zero: steps 1..T-1 against h_0..h_{T-2} */
    cl_conv_shape sf = sh;
    sf.N = (T - 1) * B;
    CL_KERNEL(m, be->conv_backward_filter(m->be, &sf, dz + bg, hid, gw + L->off_wh, NULL, st->ws));
  }
  CL_KERNEL(m, be->conv_backward_filter(m->be, &sx, dz, in, gw + L->off_wx,
                                        m->cfg.bias ? gw + L->off_b : NULL, st->ws));
  if (l > 0)
    CL_KERNEL(m, be->conv_backward_data(m->be, &sx, dz, m->params + L->off_wx, st->dh[l - 1], 0,
                                        st->ws));
  return CL_OK;
}

cl_status cl_model_backward(cl_model *m, cl_target target, const cl_host_array *grad) {
  m->err[0] = '\0';
  if (m->phase == CL_PHASE_CONSUMED)
    return cl_fail(m, CL_E_STATE,
                   "backward already ran for this forward pass; run a new training forward");
  if (m->phase != CL_PHASE_TRAINING && m->phase != CL_PHASE_LOSS)
    return cl_fail(m, CL_E_STATE, "backward needs a forward pass with training = TRUE first");
  if (grad) {
    CL_TRY(check_target_array(m, grad, target, "grad_output"));
    CL_TRY(place_target(m, grad, target));
  } else if (m->phase != CL_PHASE_LOSS || m->loss_target != target) {
    return cl_fail(m, CL_E_STATE, "no loss for this target: compute the MSE or pass a gradient");
  }
  CL_TRY(cl_grads_ensure(m));
  m->phase = CL_PHASE_CONSUMED; /* gates are overwritten from here on */
  for (int l = m->cfg.n_layers - 1; l >= 0; l--) CL_TRY(backward_layer(m, l));
  return CL_OK;
}
