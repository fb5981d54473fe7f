/*
 * core/dropout.c -- dropout as Keras's ConvLSTM2D does it (Gal and
 * Ghahramani's variational dropout): a layer's input x_t and its h_{t-1}
 * are multiplied by masks drawn once per sequence, [B, C, H, W] like one
 * step of what they mask, each element 0 or 1 / (1 - p), the same at every
 * step. Keras draws one mask per gate; here the four gates share one (the
 * tied variant of the paper), so the input half of a layer's convolution
 * stays one call over all steps of a segment.
 *
 * The masks come from the caller (cl_step_options: R's generator, so that
 * set.seed() reproduces a run), are uploaded per micro-batch into the
 * planned mask buffers and stay there for the call, so a checkpoint's
 * recomputation and backward see the masks of the first forward. The masked
 * copies go into one shared buffer, refilled where backward needs them again
 * (the product is cheap beside the convolution it feeds). Backward sends
 * the same masks into the gradients of x and h_{t-1}.
 *
 * Not here: drawing the masks (src/r_dropout.c), or inference (no dropout).
 */
#include "internal.h"

cl_status cl_dropout_check(cl_model *m, const cl_step_options *o) {
  for (int l = 0; l < m->cfg.n_layers; l++) {
    if (cl_layer_drops_input(m, l) && !(o && o->mask_x[l]))
      return cl_fail(m, CL_E_INVALID,
                     "layer %d has dropout %g but the call brought no input mask for it", l + 1,
                     m->cfg.dropout[l]);
    if (cl_layer_drops_hidden(m, l) && !(o && o->mask_h[l]))
      return cl_fail(m, CL_E_INVALID,
                     "layer %d has recurrent_dropout %g but the call brought no mask of h for it",
                     l + 1, m->cfg.recurrent_dropout[l]);
  }
  return CL_OK;
}

/* Rows b0.. of a host mask [B, C, H, W] into a device one [b, C, H, W]. */
static cl_status put_rows(cl_model *m, float *dev, const float *host, int C, int b0, int b) {
  const cl_geom *g = &m->step.g;
  size_t row = (size_t)C * g->H * g->W;
  /* through the backend's pinned stage, as x and y: a step recorded as a
   * CUDA graph replays the upload from there */
  return cl_put_bytes(m, dev, host + (size_t)b0 * row, (size_t)b * row * sizeof(float));
}

cl_status cl_dropout_upload(cl_model *m, const cl_step_options *o, int b0, int b) {
  const cl_step *st = &m->step;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    const cl_layer *L = &m->layer[l];
    if (cl_layer_drops_input(m, l)) CL_TRY(put_rows(m, st->mask_x[l], o->mask_x[l], L->in, b0, b));
    if (cl_layer_drops_hidden(m, l))
      CL_TRY(put_rows(m, st->mask_h[l], o->mask_h[l], L->hidden, b0, b));
  }
  return CL_OK;
}

/* *out = a masked into the shared buffer (len steps of b images of C
 * channels), or a itself without a mask. */
static cl_status masked(cl_model *m, const float *mask, int C, int b, int len, const void *a,
                        const void **out) {
  *out = a;
  if (!mask || len < 1) return CL_OK;
  const cl_step *st = &m->step;
  size_t n = (size_t)b * C * st->g.H * st->g.W;
  CL_KERNEL(m, m->be->iface->mask_mul(m->be, a, mask, st->dropped, n, (size_t)len, st->g.dtype, 0));
  *out = st->dropped;
  return CL_OK;
}

cl_status cl_dropout_input(cl_model *m, int l, int b, int len, const void *x, const void **out) {
  const float *mask = cl_layer_drops_input(m, l) ? m->step.mask_x[l] : NULL;
  return masked(m, mask, m->layer[l].in, b, len, x, out);
}

cl_status cl_dropout_hidden(cl_model *m, int l, int b, int len, const void *h, const void **out) {
  const float *mask = cl_layer_drops_hidden(m, l) ? m->step.mask_h[l] : NULL;
  return masked(m, mask, m->layer[l].hidden, b, len, h, out);
}

cl_status cl_dropout_input_grad(cl_model *m, int l, int b, int len, float *dx) {
  if (!cl_layer_drops_input(m, l)) return CL_OK;
  const cl_step *st = &m->step;
  size_t n = (size_t)b * m->layer[l].in * st->g.H * st->g.W;
  CL_KERNEL(m, m->be->iface->mask_mul(m->be, dx, st->mask_x[l], dx, n, (size_t)len, CL_F32, 0));
  return CL_OK;
}

/* d (+)= mask * conv_transpose(dz) with weights w for one step of b
 * sequences (n elements of d); without a mask, the convolution alone. With
 * accumulate, the product waits in the shared buffer (float) before its mask
 * sends it onto what d holds. */
static cl_status grad_through(cl_model *m, const float *mask, const cl_conv_shape *sh,
                              const void *dz, const float *w, float *d, size_t n, int accumulate) {
  const cl_step *st = &m->step;
  const struct cl_backend_i *be = m->be->iface;
  if (!mask) {
    CL_KERNEL(m, be->conv_backward_data(m->be, sh, dz, w, d, accumulate, st->ws));
    return CL_OK;
  }
  float *tmp = accumulate ? (float *)st->dropped : d;
  CL_KERNEL(m, be->conv_backward_data(m->be, sh, dz, w, tmp, 0, st->ws));
  CL_KERNEL(m, be->mask_mul(m->be, tmp, mask, d, n, 1, CL_F32, accumulate));
  return CL_OK;
}

cl_status cl_dropout_hidden_grad(cl_model *m, int l, int b, const void *dz, float *dh,
                                 int accumulate) {
  const cl_step *st = &m->step;
  const cl_layer *L = &m->layer[l];
  cl_conv_shape sh = cl_conv_hidden_half(L, &st->g, b);
  const float *mask = cl_layer_drops_hidden(m, l) ? st->mask_h[l] : NULL;
  size_t n = (size_t)b * L->hidden * st->g.H * st->g.W;
  return grad_through(m, mask, &sh, dz, m->params + L->off_wh, dh, n, accumulate);
}

cl_status cl_dropout_input_step_grad(cl_model *m, int l, int b, const void *dz, float *dx,
                                     int accumulate) {
  const cl_step *st = &m->step;
  const cl_layer *L = &m->layer[l];
  cl_conv_shape sx = cl_conv_input_half(L, &st->g, b);
  const float *mask = cl_layer_drops_input(m, l) ? st->mask_x[l] : NULL;
  size_t n = (size_t)b * L->in * st->g.H * st->g.W;
  return grad_through(m, mask, &sx, dz, m->params + L->off_wx, dx, n, accumulate);
}
