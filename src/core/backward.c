/*
 * core/backward.c -- the MSE loss and backpropagation through layers and
 * time, a segment at a time, from the last layer down.
 *
 * Within a layer, time runs backwards: the fused cell turns the saved gate
 * activations into pre-activation gradients dz_t in place, and dz_t flows to
 * h_{t-1} through the hidden half of the convolution, accumulated straight
 * into d_hidden[t-1], which already holds what the layer above (or the loss)
 * sent there. The weight gradients need no time loop: each is one large
 * convolution over the segment's steps once every dz_t is known, the mirror
 * of the forward fast path. With recompute_gates (backward_layer_chunks)
 * the time loop runs a chunk of steps at a time, from the last, each
 * chunk's gates recomputed first and its share of the weight gradients
 * taken after it. Across checkpoint segments, d_cell carries on in
 * place and the first step's dz waits in dz_carry for the earlier segment.
 * Free-running training (cl_backward_free_run) first runs its fed-back
 * steps one at a time through every layer, since a step's input gradient
 * is the last layer's output gradient of the step before.
 */
#include "internal.h"

#include <string.h>

cl_status cl_zero(cl_model *m, void *p, size_t bytes) {
  CL_KERNEL(m, m->be->iface->memset0(m->be, p, bytes));
  return CL_OK;
}

/* Layer l's bias gradient where its backward pass takes it: with the
 * convolutions' filter gradient (conv_db), or, where the backend fuses the
 * bias into the cell (be->fused_bias, forward.c), in gates_backward
 * (cell_db); the other one is NULL. */
static float *conv_db(const cl_model *m, const cl_layer *L) {
  return m->cfg.bias && !m->be->fused_bias ? m->grads + L->off_b : NULL;
}
static float *cell_db(const cl_model *m, const cl_layer *L) {
  return m->cfg.bias && m->be->fused_bias ? m->grads + L->off_b : NULL;
}

/* Elements of one step of the last layer for b sequences. */
static size_t top_step(const cl_model *m, int b) {
  const cl_schedule *g = &m->step.g;
  return (size_t)b * m->layer[m->cfg.n_layers - 1].hidden * g->H * g->W;
}
/* One step of the model's output (the head's, or the top layer's h). */
static size_t out_step(const cl_model *m, int b) {
  const cl_schedule *g = &m->step.g;
  return (size_t)b * cl_output_channels(m) * g->H * g->W;
}

/* Layer l's d loss / d h of step s: with dh_one (plan.c) every step's in
 * the one step the buffer holds. */
static float *dh_at(const cl_model *m, int l, int s, size_t bh) {
  return m->step.dh[l] + (m->step.g.dh_one ? 0 : (size_t)s * bh);
}

/* dz of step s > 0 onto d loss / d h_{s-1}, added to what the layer above
 * or the loss put there; with dh_one nothing is there but step s's own,
 * read already: zeros first, so that the sum is the same as in S steps. */
static cl_status back_to_h(cl_model *m, int l, int b, const void *dz_s, int s, size_t bh,
                           int same_w) {
  if (m->step.g.dh_one) CL_TRY(cl_zero(m, m->step.dh[l], bh * sizeof(float)));
  return cl_dropout_hidden_grad(m, l, b, dz_s, dh_at(m, l, s - 1, bh), 1, same_w);
}

/* Put the segment's part of an array shaped like the target into the last
 * layer's d_hidden (with a head, the head's d_head): zeros where the target
 * says nothing. Returns through
 * *at / *n the part that holds values (n = 0: none in this segment) and
 * through *k (may be NULL) the block of the array it came from. */
static cl_status place_target(cl_model *m, const cl_source *a, cl_target target, int b0,
                              int b, int t0, int len, float **at, size_t *n, cl_block *k) {
  /* with a head the target is its output's, in its own buffer */
  int head = cl_arch_has_head(&m->arch);
  float *dh = head ? m->step.head_grad : m->step.dh[m->cfg.n_layers - 1];
  size_t bh = out_step(m, b);
  *at = dh;
  *n = 0;
  if (target == CL_TARGET_SEQUENCE) {
    /* with a horizon K the target covers only the last K steps: zeros before */
    const cl_schedule *g = &m->step.g;
    int first = g->horizon ? g->T - g->horizon : 0, from = t0 > first ? t0 : first;
    if (from >= t0 + len) return cl_zero(m, dh, (size_t)len * bh * sizeof(float));
    if (from > t0) CL_TRY(cl_zero(m, dh, (size_t)(from - t0) * bh * sizeof(float)));
    cl_block blk = {b0, b, from - first, t0 + len - from};
    *at = dh + (size_t)(from - t0) * bh;
    *n = (size_t)(t0 + len - from) * bh;
    if (k) *k = blk;
    return cl_put_source(m, *at, CL_F32, a, blk);
  }
  int has_last = t0 + len == m->step.g.T;
  size_t zeros = has_last ? (size_t)(len - 1) * bh : (size_t)len * bh;
  if (m->step.g.dh_one) zeros = has_last ? 0 : bh; /* the one step */
  if (zeros) CL_TRY(cl_zero(m, dh, zeros * sizeof(float)));
  if (!has_last) return CL_OK;
  cl_block blk = {b0, b, 0, 1};
  *at = dh + zeros;
  *n = bh;
  if (k) *k = blk;
  return cl_put_source(m, *at, CL_F32, a, blk);
}

cl_status cl_head_grad_store(cl_model *m, int n) {
  const cl_step *st = &m->step;
  if (st->g.dtype == CL_F32) return CL_OK;
  size_t e = (size_t)n * m->arch.frame_dim * st->g.H * st->g.W;
  CL_KERNEL(m, m->be->iface->store_f32(m->be, st->head_out, st->head_grad, e, st->g.dtype));
  return CL_OK;
}

cl_status cl_head_backward(cl_model *m, int l, int n0, int n, int accumulate) {
  const cl_step *st = &m->step;
  const struct cl_backend_i *be = m->be->iface;
  cl_conv_shape s = cl_conv_head(m, l, &st->g, n);
  float *gb = l == m->arch.head_lo ? m->grads + cl_head(m)->off_b : NULL;
  /* images n0.. of d_head: the layer's own buffers hold only these */
  size_t frame = (size_t)m->arch.frame_dim * st->g.H * st->g.W;
  const void *dy = st->g.dtype == CL_F32 ? (const void *)(st->head_grad + (size_t)n0 * frame)
                                         : cl_at(st->head_out, (size_t)n0 * frame, st->g.dtype);
  CL_KERNEL(m, be->conv_backward_data(m->be, &s, dy, m->params + cl_head_offset(m, l), st->dh[l],
                                      accumulate, st->ws));
  CL_KERNEL(m, be->conv_backward_filter(m->be, &s, dy, st->hid[l],
                                        m->grads + cl_head_offset(m, l), gb, st->ws));
  return CL_OK;
}

/* With a head (a single stack's, over its top layer) the loss reads the
 * head's output over the segment's len steps, and (want_grad) d_head,
 * whose steps without a target hold zeros, goes back into the top layer's
 * d_hidden and the head's gradients. */
cl_status cl_loss_segment(cl_model *m, const cl_call *c, const cl_source *y, cl_target target,
                          int b0, int b, int t0, int len, double share, float loss_scale,
                          int want_grad, double *acc) {
  float *at, *w = NULL;
  size_t n;
  cl_block k;
  int head = cl_arch_has_head(&m->arch), top = m->cfg.n_layers - 1;
  CL_TRY(place_target(m, y, target, b0, b, t0, len, &at, &n, &k));
  const cl_step *st = &m->step;
  if (head) CL_TRY(cl_head_forward(m, len * b, st->hid, st->head_out));
  if (n > 0) {
    float *dh = head ? st->head_grad : st->dh[top];
    /* with dh_one the last state's gradient is the buffer's one step */
    size_t off = st->g.dh_one ? (size_t)(len - 1) * top_step(m, b) : (size_t)(at - dh);
    const void *pred = cl_at(head ? st->head_out : st->hid[top], off, st->g.dtype);
    if (c->weight.host) { /* the same block as the target's, from the buffer's start */
      w = st->weight;
      CL_TRY(cl_put_source(m, w, CL_F32, &c->weight, k));
    }
    share = cl_loss_share(&c->loss, share, n, st->g.B); /* mean: as it is */
    CL_TRY(cl_loss_run(m, &c->loss, pred, at, w, n, (float)(share * loss_scale),
                       want_grad ? at : NULL, share, acc));
  }
  if (!head || !want_grad) return CL_OK;
  CL_TRY(cl_head_grad_store(m, len * b));
  return cl_head_backward(m, top, 0, len * b, 0);
}

cl_status cl_loss_frames(cl_model *m, const cl_call *c, const cl_source *y, int b0, int b,
                         float ls, double *acc) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  size_t n = (size_t)g->horizon * b * m->arch.frame_dim * g->H * g->W;
  cl_block k = {b0, b, 0, g->horizon};
  CL_TRY(cl_put_frames_source(m, st->head_grad, CL_F32, y, k));
  float *w = c->weight.host ? st->weight : NULL;
  if (w) CL_TRY(cl_put_frames(m, w, CL_F32, c->weight.host, k));
  double share = cl_loss_share(&c->loss, (double)b / g->B, n, g->B);
  CL_TRY(cl_loss_run(m, &c->loss, st->head_out, st->head_grad, w, n, (float)(share * ls),
                     st->head_grad, share, acc));
  return cl_head_grad_store(m, g->horizon * b);
}

/* done: the last `done` steps of the segment already ran backward through
 * the cell (free-running's fed-back steps, cl_backward_free_run): the time
 * loop and the input half's data gradient cover the steps before them, the
 * first of them reaches back to the h before it, and the weight gradients
 * take every step's dz. */
static cl_status backward_layer(cl_model *m, int l, int b, int len, int done, const void *in,
                                const void *prev_h, const void *prev_c, int fresh_dc,
                                int carry_in, int save_carry) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_layer *L = &m->layer[l];
  const struct cl_backend_i *be = m->be->iface;
  cl_dtype t = g->dtype;
  size_t P = (size_t)g->H * g->W, bh = (size_t)b * L->hidden * P, bg = 4 * bh;
  void *dz = st->gates[l], *cell = st->cell[l], *hid = st->hid[l];
  float *dc = st->dc[l], *gw = m->grads;
  int run = len - done; /* steps whose cell gradient runs here */
  cl_conv_shape sx = cl_conv_input_half(L, g, len * b), sh = cl_conv_hidden_half(L, g, b);
  cl_gates_shape gs = cl_cell_shape(m, L, g, b);
  const float *wp = cl_peep_of(L, m->params);

  if (fresh_dc) CL_TRY(cl_zero(m, dc, bh * sizeof(float)));
  if (carry_in) /* the later segment's first step reaches back to our last h */
    CL_TRY(cl_dropout_hidden_grad(m, l, b, st->dz_carry[l], dh_at(m, l, len - 1, bh), 1, 0));
  if (done) /* so does the first step that ran before */
    CL_TRY(cl_dropout_hidden_grad(m, l, b, cl_at(dz, run * bg, t), dh_at(m, l, run - 1, bh), 1, 0));
  for (int s = run - 1, kept = 0; s >= 0; s--) { /* kept: a call back to h ran (same_w) */
    void *dz_s = cl_at(dz, s * bg, t);
    const void *c_prev = s > 0 ? cl_at(cell, (s - 1) * bh, t) : prev_c;
    CL_KERNEL(m, be->gates_backward(m->be, &gs, dz_s, cl_at(cell, s * bh, t), c_prev, wp,
                                    dh_at(m, l, s, bh), dc, cell_db(m, L)));
    if (wp)
      CL_KERNEL(m, be->peephole_filter(m->be, &gs, dz_s, cl_at(cell, s * bh, t), c_prev,
                                       cl_peep_of(L, gw)));
    if (s > 0) CL_TRY(back_to_h(m, l, b, dz_s, s, bh, kept++ > 0));
  }
  if (save_carry)
    CL_KERNEL(m, be->copy(m->be, st->dz_carry[l], dz, bg * cl_dtype_size(t)));
  /* with dropout, each filter gradient reads the masked copy its forward
   * convolved (dropout.c makes it again); a layer without input has its
   * bias in the hidden half (forward.c) */
  float *db = conv_db(m, L), *db_h = L->in ? NULL : db;
  if (len > 1) { /* steps 1.. against h of steps 0.. */
    cl_conv_shape sf = sh;
    sf.N = (len - 1) * b;
    const void *h = hid;
    CL_TRY(cl_dropout_hidden(m, l, b, len - 1, hid, &h));
    CL_KERNEL(m, be->conv_backward_filter(m->be, &sf, cl_at(dz, bg, t), h, gw + L->off_wh, db_h,
                                          st->ws));
  }
  if (prev_h) { /* step 0 against the state before the segment */
    CL_TRY(cl_dropout_hidden(m, l, b, 1, prev_h, &prev_h));
    CL_KERNEL(m, be->conv_backward_filter(m->be, &sh, dz, prev_h, gw + L->off_wh, db_h, st->ws));
  }
  if (!L->in) return CL_OK;
  CL_TRY(cl_dropout_input(m, l, b, len, in, &in));
  CL_KERNEL(m, be->conv_backward_filter(m->be, &sx, dz, in, gw + L->off_wx, db, st->ws));
  if (l > 0) CL_TRY(cl_dropout_input_grad(m, l, b, run, dz, st->dh[l - 1]));
  return CL_OK;
}


/* recompute_gates: one chunk's share of layer l's weight gradients, steps
 * s0..s0+k-1 whose dz are in the chunk buffer, and of the gradient of the
 * layer's input (overwritten there: the layer above's steps before s0 stay
 * clear: d_hidden's places, cl_program_place). */
static cl_status chunk_grads(cl_model *m, int l, int b, int s0, int k, const void *in,
                             const void *prev_h) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_layer *L = &m->layer[l];
  const struct cl_backend_i *be = m->be->iface;
  cl_dtype t = g->dtype;
  size_t P = (size_t)g->H * g->W, bh = (size_t)b * L->hidden * P, bin = (size_t)b * L->in * P;
  void *dz = st->gates[l];
  float *gw = m->grads;
  /* a layer without input (a forecaster's first) has its bias in the
   * hidden half (forward.c), as in backward_layer */
  float *db_h = L->in ? NULL : conv_db(m, L);
  int first = s0 == 0; /* step 0 reads the state before the segment */
  if (k > first) { /* steps against h of the steps before them */
    const void *h = cl_at(st->hid[l], (first ? s0 : s0 - 1) * bh, t);
    cl_conv_shape sf = cl_conv_hidden_half(L, g, (k - first) * b);
    CL_TRY(cl_dropout_hidden(m, l, b, k - first, h, &h));
    CL_KERNEL(m, be->conv_backward_filter(m->be, &sf, cl_at(dz, first * 4 * bh, t), h,
                                          gw + L->off_wh, db_h, st->ws));
  }
  if (first && prev_h) {
    cl_conv_shape sh = cl_conv_hidden_half(L, g, b);
    CL_TRY(cl_dropout_hidden(m, l, b, 1, prev_h, &prev_h));
    CL_KERNEL(m, be->conv_backward_filter(m->be, &sh, dz, prev_h, gw + L->off_wh, db_h, st->ws));
  }
  if (!L->in) return CL_OK;
  cl_conv_shape sx = cl_conv_input_half(L, g, k * b);
  const void *xin = cl_at((void *)in, s0 * bin, t);
  CL_TRY(cl_dropout_input(m, l, b, k, xin, &xin));
  CL_KERNEL(m, be->conv_backward_filter(m->be, &sx, dz, xin, gw + L->off_wx, conv_db(m, L),
                                        st->ws));
  if (l == 0) return CL_OK;
  return cl_dropout_input_grad(m, l, b, k, dz, st->dh[l - 1] + s0 * bin);
}

/* backward_layer with recompute_gates: chunks of rc steps from the last,
 * each one's gates recomputed from the kept h and c (forward.c) just
 * before the cell's gradient runs through them. */
static cl_status backward_layer_chunks(cl_model *m, int l, int b, int len, const void *in,
                                       const void *prev_h, const void *prev_c, int fresh_dc,
                                       int carry_in, int save_carry) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_layer *L = &m->layer[l];
  const struct cl_backend_i *be = m->be->iface;
  cl_dtype t = g->dtype;
  size_t P = (size_t)g->H * g->W, bh = (size_t)b * L->hidden * P, bg = 4 * bh;
  void *dz = st->gates[l], *cell = st->cell[l];
  float *dc = st->dc[l];
  cl_gates_shape gs = cl_cell_shape(m, L, g, b);
  const float *wp = cl_peep_of(L, m->params);

  if (fresh_dc) CL_TRY(cl_zero(m, dc, bh * sizeof(float)));
  if (carry_in)
    CL_TRY(cl_dropout_hidden_grad(m, l, b, st->dz_carry[l], dh_at(m, l, len - 1, bh), 1, 0));
  for (int s0 = (len - 1) / g->rc * g->rc; s0 >= 0; s0 -= g->rc) {
    int k = len - s0 < g->rc ? len - s0 : g->rc;
    CL_TRY(cl_forward_steps(m, l, b, s0, k, in, prev_h, prev_c, dz));
    for (int s = s0 + k - 1, kept = 0; s >= s0; s--) {
      void *dz_s = cl_at(dz, (size_t)(s - s0) * bg, t);
      const void *c_prev = s > 0 ? cl_at(cell, (s - 1) * bh, t) : prev_c;
      CL_KERNEL(m, be->gates_backward(m->be, &gs, dz_s, cl_at(cell, s * bh, t), c_prev, wp,
                                      dh_at(m, l, s, bh), dc, cell_db(m, L)));
      if (wp)
        CL_KERNEL(m, be->peephole_filter(m->be, &gs, dz_s, cl_at(cell, s * bh, t), c_prev,
                                         cl_peep_of(L, m->grads)));
      if (s > 0) CL_TRY(back_to_h(m, l, b, dz_s, s, bh, kept++ > 0));
    }
    if (s0 == 0 && save_carry)
      CL_KERNEL(m, be->copy(m->be, st->dz_carry[l], dz, bg * cl_dtype_size(t)));
    CL_TRY(chunk_grads(m, l, b, s0, k, in, prev_h));
  }
  return CL_OK;
}

/* Layer l over a segment, the one per-layer piece every schedule runs:
 * whole, or with recompute_gates chunk by chunk; then its gradient bucket
 * is complete on the step's last pass (data parallel: off while the layers
 * below run). */
static cl_status backward_piece(cl_model *m, const cl_call *c, int l, int b, int len,
                                const void *in, const void *prev_h, const void *prev_c,
                                int fresh_dc, int carry_in, int save_carry) {
  if (m->step.g.rc)
    CL_TRY(backward_layer_chunks(m, l, b, len, in, prev_h, prev_c, fresh_dc, carry_in,
                                 save_carry));
  else
    CL_TRY(backward_layer(m, l, b, len, 0, in, prev_h, prev_c, fresh_dc, carry_in, save_carry));
  return cl_dist_bucket_ready(m, c, l);
}

cl_status cl_backward_layer(cl_model *m, const cl_call *c, int l, int b, int len, const void *in,
                            const void *prev_h, const void *prev_c, int fresh_dc, int carry_in,
                            int save_carry) {
  return backward_piece(m, c, l, b, len, in, prev_h, prev_c, fresh_dc, carry_in, save_carry);
}

cl_status cl_backward_segment(cl_model *m, const cl_call *c, int b, int len, const void *x,
                              void *const *prev_h, void *const *prev_c, int fresh_dc,
                              int carry_in, int save_carry) {
  const cl_step *st = &m->step;
  for (int l = m->cfg.n_layers - 1; l >= 0; l--) {
    const void *in = l == 0 ? x : st->hid[l - 1];
    const void *ph = prev_h ? prev_h[l] : NULL, *pc = prev_c ? prev_c[l] : NULL;
    CL_TRY(backward_piece(m, c, l, b, len, in, ph, pc, fresh_dc, carry_in, save_carry));
  }
  return CL_OK;
}

/* Layer l's d loss / d h of fed-back step s in the ring (plan.c: one slot
 * when a single step is fed back, else two). */
static float *ring_at(const cl_model *m, int l, int b, int s, int tin) {
  const cl_schedule *g = &m->step.g;
  size_t bh = (size_t)b * m->layer[l].hidden * g->H * g->W;
  return m->step.dh_roll[l] + (g->horizon > 2 ? (size_t)((s - tin) % 2) * bh : 0);
}

/* One fed-back step s of layer l (free-running): the cell's gradient into
 * dz, then dz to the layer's h of step s - 1 (not from the first fed-back
 * step: backward_layer reaches back from it) and to the step's input -- the
 * layer below's h, or for layer 0 the fed-back frame, which is the last
 * layer's h of step s - 1: the path teacher forcing does not have (nor a
 * step that read the true frame, cl_reads_truth).
 * d loss / d h of step s: the last layer's in d_hidden (the loss's part
 * placed there), the others' in a ring of two steps (d_hidden_rollout;
 * one when one step is fed back), which the first contribution to a step
 * overwrites. */
static cl_status roll_back_step(cl_model *m, const cl_call *c, int l, int b, int s, int tin) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_layer *L = &m->layer[l];
  const struct cl_backend_i *be = m->be->iface;
  cl_dtype t = g->dtype;
  int top = m->cfg.n_layers - 1;
  size_t P = (size_t)g->H * g->W, bh = (size_t)b * L->hidden * P, bg = 4 * bh;
  cl_gates_shape gs = cl_cell_shape(m, L, g, b);
  const float *wp = cl_peep_of(L, m->params);
  void *dz = cl_at(st->gates[l], s * bg, t);
  const void *c_s = cl_at(st->cell[l], s * bh, t), *c_prev = cl_at(st->cell[l], (s - 1) * bh, t);
  float *dh_s = l == top ? st->dh[top] + s * bh : ring_at(m, l, b, s, tin);
  CL_KERNEL(m, be->gates_backward(m->be, &gs, dz, c_s, c_prev, wp, dh_s, st->dc[l], cell_db(m, L)));
  if (wp)
    CL_KERNEL(m, be->peephole_filter(m->be, &gs, dz, c_s, c_prev, cl_peep_of(L, m->grads)));
  /* with dropout each through its mask, the same as the input steps' */
  if (s > tin) {
    float *dh_prev = l == top ? st->dh[top] + (s - 1) * bh : ring_at(m, l, b, s - 1, tin);
    CL_TRY(cl_dropout_hidden_grad(m, l, b, dz, dh_prev, l == top, 0));
  }
  if (l > 0) /* the layer below's h of step s: its own step s + 1 wrote it first */
    return cl_dropout_input_step_grad(m, l, b, dz, ring_at(m, l - 1, b, s, tin), s < g->T - 1);
  /* a true frame (scheduled sampling) is a constant: nothing flows into
   * the prediction it replaced */
  if (cl_reads_truth(c, g, s)) return CL_OK;
  /* the fed-back frame (layer 0's input mask too): onto the last layer's h
   * of step s - 1 */
  size_t bt = (size_t)b * m->layer[top].hidden * P;
  return cl_dropout_input_step_grad(m, l, b, dz, st->dh[top] + (s - 1) * bt, 1);
}

cl_status cl_backward_free_run(cl_model *m, const cl_call *c, int b, const void *x,
                               void *const *prev_h, void *const *prev_c) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  int top = m->cfg.n_layers - 1, tin = g->T - g->horizon + 1;
  size_t P = (size_t)g->H * g->W;
  for (int l = 0; l <= top; l++) /* one d_cell per layer (plan.c) */
    CL_TRY(cl_zero(m, st->dc[l], (size_t)b * m->layer[l].hidden * P * sizeof(float)));
  for (int s = g->T - 1; s >= tin; s--)
    for (int l = top; l >= 0; l--) CL_TRY(roll_back_step(m, c, l, b, s, tin));
  for (int l = top; l >= 0; l--) { /* the weights' gradients: layer l's are complete */
    CL_TRY(backward_layer(m, l, b, g->T, g->T - tin, l == 0 ? x : st->hid[l - 1],
                          prev_h ? prev_h[l] : NULL, prev_c ? prev_c[l] : NULL, 0, 0, 0));
    CL_TRY(cl_dist_bucket_ready(m, c, l));
  }
  return CL_OK;
}

/* CL_OK when a training forward's activations are kept for `what` (the
 * loss, backward) and still belong to the current parameters. */
static cl_status need_kept_forward(cl_model *m, const char *what) {
  if (m->phase == CL_PHASE_TRAINING || m->phase == CL_PHASE_LOSS) return CL_OK;
  if (m->phase == CL_PHASE_STALE)
    return cl_fail(m, CL_E_STATE,
                   "the parameters were replaced after the forward pass (a state dict or file "
                   "was loaded), so its activations belong to the old ones; run a new training "
                   "forward before %s",
                   what);
  return cl_fail(m, CL_E_STATE, "%s needs a forward pass with training = TRUE first", what);
}

cl_status cl_model_mse(cl_model *m, const cl_host_array *y, cl_target target, double *loss) {
  m->err[0] = '\0';
  CL_TRY(need_kept_forward(m, "the loss"));
  const cl_schedule *g = &m->step.g;
  CL_TRY(cl_check_target(m, y, target, "y", g->B, g->T, g->H, g->W));
  cl_source ys = cl_source_host(y);
  cl_call plain = cl_call_plain();
  cl_step_vals v;
  CL_TRY(cl_vals_zero(m));
  CL_TRY(cl_loss_segment(m, &plain, &ys, target, 0, g->B, 0, g->T, 1.0, 1.0f, 1,
                         &cl_vals(m)->loss));
  CL_TRY(cl_vals_read(m, &v));
  *loss = v.loss;
  m->phase = CL_PHASE_LOSS;
  m->loss_target = target;
  return CL_OK;
}

cl_status cl_model_backward(cl_model *m, cl_target target, const cl_host_array *grad) {
  m->err[0] = '\0';
  if (m->phase == CL_PHASE_CONSUMED)
    return cl_fail(m, CL_E_STATE,
                   "backward already ran for this forward pass; run a new training forward");
  CL_TRY(need_kept_forward(m, "backward"));
  const cl_schedule *g = &m->step.g;
  if (grad) {
    float *at;
    size_t n;
    CL_TRY(cl_check_target(m, grad, target, "grad_output", g->B, g->T, g->H, g->W));
    cl_source gs = cl_source_host(grad);
    CL_TRY(place_target(m, &gs, target, 0, g->B, 0, g->T, &at, &n, NULL));
  } else if (m->phase != CL_PHASE_LOSS || m->loss_target != target) {
    return cl_fail(m, CL_E_STATE, "no loss for this target: compute the MSE or pass a gradient");
  }
  CL_TRY(cl_grads_ensure(m));
  m->phase = CL_PHASE_CONSUMED; /* gates are overwritten from here on */
  void *ih[CL_MAX_LAYERS], *ic[CL_MAX_LAYERS];
  int from = cl_state_initial(m, 0, ih, ic);
  cl_call plain = cl_call_plain();
  CL_TRY(cl_backward_segment(m, &plain, g->B, g->T, m->step.x, from ? ih : NULL,
                             from ? ic : NULL, 1, 0, 0));
  return cl_guard_check(m);
}
