/*
 * core/forecast.c -- one micro-batch of an encoder-forecaster's training
 * step (Shi et al. 2015, section 3.3): the encoder over the T input frames
 * from zero states, the forecaster over the K target steps from the
 * encoder's last states, the head over every forecaster layer's h at each
 * step, the loss against the K target frames; then backward: the loss's
 * gradient through the head into every forecaster layer's h at every step,
 * the forecaster through time from the top layer down, the gradient of its
 * initial states handed to the encoder's last step, the encoder.
 *
 * Each layer runs on the executor's own per-layer pieces (forward.c's
 * cl_forward_layers, backward.c's cl_backward_layer); only the wiring
 * between the two stacks and the head is here. Frames are patched at the
 * boundary (pack.c, cl_put_frames), so everything here is at H/p x W/p.
 */
#include "internal.h"

/* The encoder's last h and c (step T - 1) of each layer l, as the state
 * before forecaster layer L + l: h[L + l], c[L + l]. */
static void encoder_last(cl_model *m, int b, void **h, void **c) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  int L = cl_cfg_encoder_layers(&m->cfg);
  for (int l = 0; l < L; l++) {
    size_t bh = (size_t)b * m->layer[l].hidden * g->H * g->W;
    h[L + l] = cl_at(st->hid[l], (size_t)(g->T - 1) * bh, g->dtype);
    c[L + l] = cl_at(st->cell[l], (size_t)(g->T - 1) * bh, g->dtype);
  }
}

/* Sequences b0.. of x through both stacks and the head. */
static cl_status forward(cl_model *m, const cl_source *x, int b0, int b, void **h, void **c) {
  cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  int L = cl_cfg_encoder_layers(&m->cfg);
  cl_block all = {b0, b, 0, g->T};
  CL_TRY(cl_put_frames(m, st->x, g->dtype, x->host, all));
  CL_TRY(cl_forward_layers(m, 0, L, b, g->T, st->x, NULL, NULL));
  encoder_last(m, b, h, c);
  CL_TRY(cl_forward_layers(m, L, m->cfg.n_layers, b, g->horizon, NULL, h, c));
  return cl_head_forward(m, g->horizon * b, st->hid, st->head_out);
}

/* The loss of the K frames against y's, its gradient (times the loss
 * scale) left in d_head where the target was placed. */
static cl_status loss(cl_model *m, const cl_call *c, const cl_source *y, int b0, int b, float ls,
                      double *acc) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  size_t n = (size_t)g->horizon * b * cl_cfg_frame_dim(&m->cfg) * g->H * g->W;
  cl_block k = {b0, b, 0, g->horizon};
  CL_TRY(cl_put_frames(m, st->head_grad, CL_F32, y->host, k));
  double share = cl_loss_share(&c->loss, (double)b / g->B, n, g->B);
  return cl_loss_run(m, &c->loss, st->head_out, st->head_grad, NULL, n, (float)(share * ls),
                     st->head_grad, share, acc);
}

/* Forecaster layer l: the head's gradient into its h at every step (on top
 * of what the layer above sent to its input), the head's filter gradient,
 * the layer through time from the encoder's state; its initial c's
 * gradient kept for the encoder (d_cell serves the next layer). */
static cl_status back_forecaster(cl_model *m, int l, int b, void **h, void **c) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const struct cl_backend_i *be = m->be->iface;
  int L = cl_cfg_encoder_layers(&m->cfg), top = l == m->cfg.n_layers - 1;
  cl_conv_shape s = cl_conv_head(m, l, g, g->horizon * b);
  float *gh = m->grads + cl_head_offset(m, l);
  CL_KERNEL(m, be->conv_backward_data(m->be, &s, st->head_grad, m->params + cl_head_offset(m, l),
                                      st->dh[l], !top, st->ws));
  CL_KERNEL(m, be->conv_backward_filter(m->be, &s, st->head_grad, st->hid[l], gh,
                                        l == L ? m->grads + cl_head(m)->off_b : NULL, st->ws));
  CL_TRY(cl_backward_layer(m, l, b, g->horizon, l == L ? NULL : st->hid[l - 1], h[l], c[l], 1));
  size_t bh = (size_t)b * m->layer[l].hidden * g->H * g->W;
  CL_KERNEL(m, be->copy(m->be, st->hand_c[l - L], st->dc[l], bh * sizeof(float)));
  return CL_OK;
}

/* Encoder layer e: its last step receives the gradient of forecaster layer
 * L + e's initial h (through that layer's hidden half, from its step 0's
 * dz) and of its initial c; the top encoder layer has no other. */
static cl_status back_encoder(cl_model *m, int e, int b) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  int L = cl_cfg_encoder_layers(&m->cfg);
  size_t bh = (size_t)b * m->layer[e].hidden * g->H * g->W;
  float *dh_last = st->dh[e] + (size_t)(g->T - 1) * bh;
  if (e == L - 1) CL_TRY(cl_zero(m, st->dh[e], (size_t)g->T * bh * sizeof(float)));
  CL_TRY(cl_dropout_hidden_grad(m, L + e, b, st->gates[L + e], dh_last, 1));
  CL_KERNEL(m, m->be->iface->copy(m->be, st->dc[e], st->hand_c[e], bh * sizeof(float)));
  return cl_backward_layer(m, e, b, g->T, e == 0 ? st->x : st->hid[e - 1], NULL, NULL, 0);
}

cl_status cl_forecast_run(cl_model *m, const cl_call *c, const cl_source *x, const cl_source *y,
                          int b0, int b, float ls, double *acc) {
  void *h[CL_MAX_LAYERS], *cs[CL_MAX_LAYERS];
  int L = cl_cfg_encoder_layers(&m->cfg);
  CL_TRY(forward(m, x, b0, b, h, cs));
  CL_TRY(loss(m, c, y, b0, b, ls, acc));
  for (int l = m->cfg.n_layers - 1; l >= L; l--) CL_TRY(back_forecaster(m, l, b, h, cs));
  for (int e = L - 1; e >= 0; e--) CL_TRY(back_encoder(m, e, b));
  return CL_OK;
}
