/*
 * core/stacks.c -- one micro-batch of a wired architecture's training step
 * (arch.h): stacks handing their last states on, and a head. Forward: each
 * stack in turn over its steps (one reading frames over the T input
 * frames, one reading nothing over the K target steps), from zeros or from
 * the last states of the stack it follows; the head over its layers' h at
 * each target step; the loss against the K target frames. Backward, stack
 * by stack from the last: the loss's gradient through the head into every
 * layer it reads, at every step; each layer through time from the top
 * down; the gradient of a stack's initial states handed to the last step
 * of the stack it started from (h through the receiving layer's hidden
 * half, c through d_cell_handover).
 *
 * Shi et al.'s encoder-forecaster (2015, section 3.3) is this with two
 * stacks and a head over the second. Each layer runs on the executor's own
 * per-layer pieces (forward.c's cl_forward_layers, backward.c's
 * cl_backward_layer); only the wiring is here. Frames are patched at the
 * boundary (pack.c, cl_put_frames), so everything here is at H/p x W/p.
 */
#include "internal.h"

static int steps_of(const cl_model *m, int si) {
  const cl_schedule *g = &m->step.g;
  return cl_arch_steps(&m->arch, si, g->T, g->horizon);
}

/* The last h and c of stack `from`'s layers as the states before stack
 * `to`'s: h[to.lo + i], c[to.lo + i]. */
static void last_states(cl_model *m, int from, const cl_stack *to, int b, void **h, void **c) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_stack *s = &m->arch.stack[from];
  int n = steps_of(m, from);
  for (int i = 0; i < s->hi - s->lo; i++) {
    int l = s->lo + i;
    size_t bh = (size_t)b * m->layer[l].hidden * g->H * g->W;
    h[to->lo + i] = cl_at(st->hid[l], (size_t)(n - 1) * bh, g->dtype);
    c[to->lo + i] = cl_at(st->cell[l], (size_t)(n - 1) * bh, g->dtype);
  }
}

/* Sequences b0.. of x through every stack and the head. */
static cl_status forward(cl_model *m, const cl_source *x, int b0, int b, void **h, void **c) {
  cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_arch *a = &m->arch;
  cl_block all = {b0, b, 0, g->T};
  CL_TRY(cl_put_frames_source(m, st->x, g->dtype, x, all));
  for (int si = 0; si < a->n_stacks; si++) {
    const cl_stack *s = &a->stack[si];
    int from = s->state_from >= 0, reads = s->input == CL_STACK_READS_FRAMES;
    if (from) last_states(m, s->state_from, s, b, h, c);
    CL_TRY(cl_forward_layers(m, s->lo, s->hi, b, steps_of(m, si), reads ? st->x : NULL,
                             from ? h : NULL, from ? c : NULL));
  }
  return cl_head_forward(m, g->horizon * b, st->hid, st->head_out);
}

/* The loss of the K frames against y's (each element's times the call's
 * weight, patched as y), its gradient (times the loss scale) left in
 * d_head where the target was placed. */
static cl_status loss(cl_model *m, const cl_call *c, const cl_source *y, int b0, int b, float ls,
                      double *acc) {
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

/* Layer l's last step receives the gradient of the state it handed on:
 * h's through the receiving layer's hidden half (from that layer's step 0
 * dz), c's from d_cell_handover. Its stack's top has no other gradient. */
static cl_status receive_handed(cl_model *m, int l, int to, int b, int n, int top) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  size_t bh = (size_t)b * m->layer[l].hidden * g->H * g->W;
  if (top) CL_TRY(cl_zero(m, st->dh[l], (size_t)n * bh * sizeof(float)));
  CL_TRY(cl_dropout_hidden_grad(m, to, b, st->gates[to], st->dh[l] + (size_t)(n - 1) * bh, 1));
  CL_KERNEL(m, m->be->iface->copy(m->be, st->dc[l], st->hand_c[l], bh * sizeof(float)));
  return CL_OK;
}

/* Stack si backward, from its top layer down. A layer starting from a
 * stack's state keeps its initial c's gradient for that stack (d_cell
 * serves the next layer). */
static cl_status back_stack(cl_model *m, const cl_call *call, int si, int b, void **h,
                            void **c) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_arch *a = &m->arch;
  const cl_stack *s = &a->stack[si];
  int n = steps_of(m, si), from = s->state_from >= 0;
  for (int l = s->hi - 1, to; l >= s->lo; l--) {
    int top = l == s->hi - 1, head = l >= a->head_lo && l < a->head_hi, handed;
    if (head) CL_TRY(cl_head_backward(m, l, g->horizon * b, !top)); /* onto the layer above's */
    /* the head's gradient is complete with its lowest layer's part (data
     * parallel: its bucket, the pseudo-layer n_layers, goes now) */
    if (head && l == a->head_lo) CL_TRY(cl_dist_bucket_ready(m, call, m->cfg.n_layers));
    handed = cl_arch_hands_on(a, l, &to) >= 0;
    if (handed) CL_TRY(receive_handed(m, l, to, b, n, top && !head));
    const void *in = l > s->lo ? st->hid[l - 1]
                     : s->input == CL_STACK_READS_FRAMES ? st->x : NULL;
    CL_TRY(cl_backward_layer(m, call, l, b, n, in, from ? h[l] : NULL, from ? c[l] : NULL,
                             !handed));
    if (!from) continue;
    size_t bh = (size_t)b * m->layer[l].hidden * g->H * g->W;
    int back = a->stack[s->state_from].lo + (l - s->lo);
    CL_KERNEL(m, m->be->iface->copy(m->be, st->hand_c[back], st->dc[l], bh * sizeof(float)));
  }
  return CL_OK;
}

cl_status cl_stacks_run(cl_model *m, const cl_call *c, const cl_source *x, const cl_source *y,
                        int b0, int b, float ls, double *acc) {
  void *h[CL_MAX_LAYERS], *cs[CL_MAX_LAYERS];
  CL_TRY(forward(m, x, b0, b, h, cs));
  CL_TRY(loss(m, c, y, b0, b, ls, acc));
  for (int si = m->arch.n_stacks - 1; si >= 0; si--) CL_TRY(back_stack(m, c, si, b, h, cs));
  return CL_OK;
}
