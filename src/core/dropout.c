/*
 * core/dropout.c -- dropout as Keras's ConvLSTM2D does it (Gal and
 * Ghahramani's variational dropout): a layer's input x_t and its h_{t-1}
 * are multiplied by masks drawn once per sequence, each element 0 or
 * 1 / (1 - p), the same at every step. cfg.dropout_masks says how many:
 *  - per gate (Keras's default, dropout_mask_count = 4): each gate i, f, o,
 *    g convolves its own masked copy of x_t (and of h_{t-1}). The four
 *    copies lie side by side as 4 C channels, [x m_i, x m_f, x m_o, x m_g],
 *    and one convolution in 4 groups with the unchanged weight [4h, C, k, k]
 *    gives every gate's rows their own copy (internal.h: the layer's
 *    groups_x / groups_h; the same arithmetic as four convolutions, and
 *    the input half still one call over all steps of a segment). Backward
 *    data yields the gradient of the four copies; dx = sum_g m_g dx_g
 *    (mask_mul's gather).
 *  - shared (the tied variant): one mask for the four gates, the
 *    convolutions ungrouped.
 * A mask is [B, G, C, H, W] (G = 4 or 1) like one step of what it masks.
 *
 * The masks are drawn per micro-batch straight into the planned mask
 * buffers by the backend (mask_draw) from the call's seed (cl_step_options
 * draw_masks, dropout_seed: R's generator gives the seed, so set.seed()
 * reproduces a run; the numbers: dropout_rng.h), so they take no memory
 * outside the plan; or, given by the caller (tests, references), uploaded
 * there. They stay there for the call, so a checkpoint's
 * recomputation and backward see the masks of the first forward. The masked
 * copies go into one shared buffer (plan.c: plan_dropout sizes it for the
 * largest use), refilled where backward needs them again (the product is
 * cheap beside the convolution it feeds). Backward sends the same masks
 * into the gradients of x and h_{t-1}.
 *
 * Not here: the seed (src/r_dropout.c), or inference (no dropout).
 */
#include "dropout_rng.h"
#include "internal.h"

cl_status cl_dropout_check(cl_model *m, const cl_step_options *o) {
  for (int l = 0; l < m->cfg.n_layers; l++) {
    if (o && o->draw_masks) continue; /* the core draws what is not given */
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

/* Rows b0.. of a host mask [B, G, C, H, W] into a device one [b, G, C, H, W]. */
static cl_status put_rows(cl_model *m, float *dev, const float *host, int GC, int b0, int b) {
  const cl_schedule *g = &m->step.g;
  size_t row = (size_t)GC * g->H * g->W;
  /* through the backend's pinned stage, as x and y: a step recorded as a
   * CUDA graph replays the upload from there */
  return cl_put_bytes(m, dev, host + (size_t)b0 * row, (size_t)b * row * sizeof(float));
}

/* The stream of layer l's masks of kind k (0: input, 1: h) at rate p for
 * sequences b0.. of b, each of GC channels: what mask_draw takes. */
static cl_mask_draw draw_of(const uint64_t *seed, int l, int k, double p, size_t GC, size_t HW,
                            int b0, int b) {
  const size_t row = GC * HW;
  cl_mask_draw d = {seed, l, k, (uint64_t)b0 * row, (uint64_t)b * row, cl_rng_cut(p),
                    (float)(1.0 / (1.0 - p)), 0};
  return d;
}

/* Rows b0.. of one mask into its buffer: the caller's, else drawn. */
static cl_status fill_rows(cl_model *m, int l, int k, float *dev, const float *given, int GC,
                           int b0, int b) {
  if (given) return put_rows(m, dev, given, GC, b0, b);
  const double p = k ? m->cfg.recurrent_dropout[l] : m->cfg.dropout[l];
  const cl_schedule *g = &m->step.g;
  cl_mask_draw d = draw_of(m->step.seed, l, k, p, (size_t)GC, (size_t)g->H * g->W, b0, b);
  CL_KERNEL(m, m->be->iface->mask_draw(m->be, &d, dev));
  return CL_OK;
}

cl_status cl_dropout_upload(cl_model *m, const cl_step_options *o, int b0, int b, int first) {
  const cl_step *st = &m->step;
  /* the seed the draws read, staged as x is: a recorded step's upload
   * copies each call's own (cuda_graph.cu) */
  if (first && st->seed && o && o->draw_masks)
    CL_TRY(cl_put_bytes(m, st->seed, &o->dropout_seed, sizeof o->dropout_seed));
  for (int l = 0; l < m->cfg.n_layers; l++) {
    const cl_layer *L = &m->layer[l];
    if (cl_layer_drops_input(m, l))
      CL_TRY(fill_rows(m, l, 0, st->mask_x[l], o->mask_x[l], L->groups_x * L->in, b0, b));
    if (cl_layer_drops_hidden(m, l))
      CL_TRY(fill_rows(m, l, 1, st->mask_h[l], o->mask_h[l], L->groups_h * L->hidden, b0, b));
  }
  return CL_OK;
}

cl_status cl_model_dropout_mask(cl_model *m, uint64_t seed, int layer, int kind, int B, int H,
                                int W, float *out) {
  m->err[0] = '\0';
  if (layer < 0 || layer >= m->cfg.n_layers || kind < 0 || kind > 1 || B < 0 || H < 1 || W < 1 ||
      !out)
    return cl_fail(m, CL_E_INVALID, "cl_model_dropout_mask: no layer %d, kind %d, or a bad "
                   "shape [%d, %d, %d]", layer + 1, kind, B, H, W);
  const double p = kind ? m->cfg.recurrent_dropout[layer] : m->cfg.dropout[layer];
  if (!(p > 0))
    return cl_fail(m, CL_E_INVALID, "layer %d has no %s", layer + 1,
                   kind ? "recurrent_dropout" : "dropout");
  const int G = m->cfg.dropout_masks == CL_MASKS_PER_GATE ? 4 : 1;
  const int C = kind ? m->cfg.hidden_dims[layer]
                     : layer == 0 ? m->cfg.input_dim : m->cfg.hidden_dims[layer - 1];
  cl_mask_draw d = draw_of(&seed, layer, kind, p, (size_t)G * C, (size_t)H * W, 0, B);
  const uint64_t key = cl_rng_key(seed, layer, kind);
  for (uint64_t e = 0; e < d.n; e++) out[e] = cl_rng_mask_value(key, e, d.cut, d.keep);
  return CL_OK;
}

/* The mask_mul of `len` steps of b images of C channels under G masks each. */
static cl_mask_shape mask_shape(const cl_model *m, int C, int G, int b, int len, cl_dtype t,
                                int gather, int accumulate) {
  size_t row = (size_t)C * m->step.g.H * m->step.g.W;
  cl_mask_shape s = {(size_t)b * row, row, (size_t)len, G, gather, t, accumulate};
  return s;
}

/* *out = a masked into the shared buffer (len steps of b images of C
 * channels; G copies of each under per-gate masks), or a itself without a
 * mask. */
static cl_status masked(cl_model *m, const float *mask, int C, int G, int b, int len,
                        const void *a, const void **out) {
  *out = a;
  if (!mask || len < 1) return CL_OK;
  const cl_step *st = &m->step;
  cl_mask_shape s = mask_shape(m, C, G, b, len, st->g.dtype, 0, 0);
  CL_KERNEL(m, m->be->iface->mask_mul(m->be, &s, a, mask, st->dropped));
  *out = st->dropped;
  return CL_OK;
}

cl_status cl_dropout_input(cl_model *m, int l, int b, int len, const void *x, const void **out) {
  const cl_layer *L = &m->layer[l];
  const float *mask = cl_layer_drops_input(m, l) ? m->step.mask_x[l] : NULL;
  return masked(m, mask, L->in, L->groups_x, b, len, x, out);
}

cl_status cl_dropout_hidden(cl_model *m, int l, int b, int len, const void *h, const void **out) {
  const cl_layer *L = &m->layer[l];
  const float *mask = cl_layer_drops_hidden(m, l) ? m->step.mask_h[l] : NULL;
  return masked(m, mask, L->hidden, L->groups_h, b, len, h, out);
}

/* d (+)= the masks times conv_transpose(dz) with weights w, for len steps
 * of b sequences of C channels (sh: their convolution, G groups under
 * per-gate masks); without a mask, the convolution alone. The product waits
 * in the shared buffer (float) before the masks send it onto d: with
 * accumulate, and always with per-gate masks (its G copies' gradients,
 * gathered into one). */
static cl_status grad_through(cl_model *m, const float *mask, const cl_conv_shape *sh, int C,
                              int b, int len, const void *dz, const float *w, float *d,
                              int accumulate) {
  const cl_step *st = &m->step;
  const struct cl_backend_i *be = m->be->iface;
  if (!mask) {
    CL_KERNEL(m, be->conv_backward_data(m->be, sh, dz, w, d, accumulate, st->ws));
    return CL_OK;
  }
  const int G = cl_conv_groups(sh);
  float *tmp = accumulate || G > 1 ? (float *)st->dropped : d;
  CL_KERNEL(m, be->conv_backward_data(m->be, sh, dz, w, tmp, 0, st->ws));
  cl_mask_shape s = mask_shape(m, C, G, b, len, CL_F32, 1, accumulate);
  CL_KERNEL(m, be->mask_mul(m->be, &s, tmp, mask, d));
  return CL_OK;
}

/* The input half's gradient over len steps of b samples (both public forms). */
static cl_status input_grad(cl_model *m, int l, int b, int len, const void *dz, float *dx,
                            int accumulate) {
  const cl_layer *L = &m->layer[l];
  cl_conv_shape sx = cl_conv_input_half(L, &m->step.g, len * b);
  const float *mask = cl_layer_drops_input(m, l) ? m->step.mask_x[l] : NULL;
  return grad_through(m, mask, &sx, L->in, b, len, dz, m->params + L->off_wx, dx, accumulate);
}

cl_status cl_dropout_input_grad(cl_model *m, int l, int b, int len, const void *dz, float *dx) {
  return input_grad(m, l, b, len, dz, dx, 0);
}

cl_status cl_dropout_hidden_grad(cl_model *m, int l, int b, const void *dz, float *dh,
                                 int accumulate, int same_w) {
  const cl_layer *L = &m->layer[l];
  cl_conv_shape sh = cl_conv_hidden_half(L, &m->step.g, b);
  sh.same_w = same_w;
  const float *mask = cl_layer_drops_hidden(m, l) ? m->step.mask_h[l] : NULL;
  return grad_through(m, mask, &sh, L->hidden, b, 1, dz, m->params + L->off_wh, dh, accumulate);
}

cl_status cl_dropout_input_step_grad(cl_model *m, int l, int b, const void *dz, float *dx,
                                     int accumulate) {
  return input_grad(m, l, b, 1, dz, dx, accumulate);
}
