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
 * Checkpointing (g.S < a stack's steps) runs each stack in segments of S
 * steps, keeping only the states at segment ends (ckpt_h, ckpt_c) and the
 * head's output of every step, and recomputes a segment from its
 * checkpoint before its backward, as train.c's run_segments does a single
 * stack; recompute_gates is the per-layer pieces' own (g.rc). The loss
 * still reads every target step at once.
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
/* Stack si's checkpoint segments (S steps, the last what remains). */
static int segs_of(const cl_model *m, int si) {
  int n = steps_of(m, si), S = m->step.g.S;
  return n / S + (n % S != 0);
}
static int seg_len(const cl_model *m, int si, int s) {
  int left = steps_of(m, si) - s * m->step.g.S;
  return left < m->step.g.S ? left : m->step.g.S;
}
static size_t step_elems(const cl_model *m, int l, int b) {
  return (size_t)b * m->layer[l].hidden * m->step.g.H * m->step.g.W;
}
static int reads_head(const cl_arch *a, int l) {
  return cl_arch_has_head(a) && l >= a->head_lo && l < a->head_hi;
}

/* The states before segment s of stack si, per layer: checkpoint s - 1,
 * or for s = 0 what the stack starts from (h0, c0). Returns 0 for zeros. */
static int seg_state(const cl_model *m, int si, int b, int s, void *const *h0, void *const *c0,
                     void **h, void **c) {
  const cl_step *st = &m->step;
  const cl_stack *k = &m->arch.stack[si];
  for (int l = k->lo; l < k->hi; l++) {
    size_t at = s > 0 ? (size_t)(s - 1) * step_elems(m, l, b) : 0;
    h[l] = s > 0 ? cl_at(st->ckpt_h[l], at, st->g.dtype) : h0[l];
    c[l] = s > 0 ? cl_at(st->ckpt_c[l], at, st->g.dtype) : c0[l];
  }
  return s > 0 || k->state_from >= 0;
}

/* The last h and c of stack `from`'s layers (its last segment's last
 * step) as the states before stack `to`'s: h[to.lo + i], c[to.lo + i]. */
static void last_states(cl_model *m, int from, const cl_stack *to, int b, void **h, void **c) {
  const cl_step *st = &m->step;
  const cl_stack *s = &m->arch.stack[from];
  int n = seg_len(m, from, segs_of(m, from) - 1);
  for (int i = 0; i < s->hi - s->lo; i++) {
    int l = s->lo + i;
    size_t bh = step_elems(m, l, b);
    h[to->lo + i] = cl_at(st->hid[l], (size_t)(n - 1) * bh, st->g.dtype);
    c[to->lo + i] = cl_at(st->cell[l], (size_t)(n - 1) * bh, st->g.dtype);
  }
}

/* Segment s's input frames, when stack si reads them. */
static const void *seg_input(const cl_model *m, int si, int b, int s) {
  const cl_step *st = &m->step;
  if (m->arch.stack[si].input != CL_STACK_READS_FRAMES) return NULL;
  size_t xstep = (size_t)b * m->arch.frame_dim * st->g.H * st->g.W;
  return cl_at(st->x, (size_t)s * st->g.S * xstep, st->g.dtype);
}

/* Stack si forward, segment by segment, each segment's head output to its
 * steps of head_out, the segments' ends kept as checkpoints. */
static cl_status forward_stack(cl_model *m, int si, int b, void *const *h0, void *const *c0) {
  cl_step *st = &m->step;
  const cl_stack *k = &m->arch.stack[si];
  int nseg = segs_of(m, si), heads = reads_head(&m->arch, k->hi - 1);
  size_t frame = (size_t)b * m->arch.frame_dim * st->g.H * st->g.W;
  void *ph[CL_MAX_LAYERS], *pc[CL_MAX_LAYERS], *eh[CL_MAX_LAYERS], *ec[CL_MAX_LAYERS];
  for (int s = 0; s < nseg; s++) {
    int len = seg_len(m, si, s), has = seg_state(m, si, b, s, h0, c0, ph, pc);
    CL_TRY(cl_forward_layers(m, k->lo, k->hi, b, len, seg_input(m, si, b, s), has ? ph : NULL,
                             has ? pc : NULL));
    if (heads)
      CL_TRY(cl_head_forward(m, len * b, st->hid,
                             cl_at(st->head_out, (size_t)s * st->g.S * frame, st->g.dtype)));
    if (s == nseg - 1) break;
    seg_state(m, si, b, s + 1, h0, c0, eh, ec); /* checkpoint s */
    CL_TRY(cl_save_layers_end(m, k->lo, k->hi, b, len, eh, ec));
  }
  return CL_OK;
}

/* Sequences b0.. of x through every stack and the head; h, c: the states
 * each stack starts from, per layer. */
static cl_status forward(cl_model *m, const cl_source *x, int b0, int b, void **h, void **c) {
  cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_arch *a = &m->arch;
  cl_block all = {b0, b, 0, g->T};
  CL_TRY(cl_put_frames_source(m, st->x, g->dtype, x, all));
  for (int si = 0; si < a->n_stacks; si++) {
    const cl_stack *s = &a->stack[si];
    for (int l = s->lo; l < s->hi; l++) h[l] = c[l] = NULL;
    if (s->state_from >= 0) last_states(m, s->state_from, s, b, h, c);
    CL_TRY(forward_stack(m, si, b, h, c));
  }
  return CL_OK;
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

/* Layer l's last step (at len - 1 of its stack's last segment) receives
 * the gradient of the state it handed on: h's through the receiving
 * layer's hidden half, from that layer's step 0 dz (kept in dz_carry when
 * recomputed chunks share the gates), c's from d_cell_handover. */
static cl_status receive_handed(cl_model *m, int l, int to, int b, int len) {
  const cl_step *st = &m->step;
  size_t bh = step_elems(m, l, b);
  const void *dz0 = st->g.rc ? st->dz_carry[to] : st->gates[to];
  CL_TRY(cl_dropout_hidden_grad(m, to, b, dz0, st->dh[l] + (size_t)(len - 1) * bh, 1));
  CL_KERNEL(m, m->be->iface->copy(m->be, st->dc[l], st->hand_c[l], bh * sizeof(float)));
  return CL_OK;
}

/* Layer l of stack si over segment s (len steps, states ph, pc before
 * it): the head's part, the handed state's gradient, the layer. A layer
 * starting from a stack's state keeps its initial c's gradient for that
 * stack (d_cell serves the next layer). */
static cl_status back_layer(cl_model *m, const cl_call *call, int si, int l, int b, int s,
                            int len, void *const *ph, void *const *pc) {
  const cl_step *st = &m->step;
  const cl_arch *a = &m->arch;
  const cl_stack *k = &a->stack[si];
  int last = s == segs_of(m, si) - 1, top = l == k->hi - 1, from = k->state_from >= 0, to = -1;
  int handed = cl_arch_hands_on(a, l, &to) >= 0;
  size_t bh = step_elems(m, l, b);
  if (reads_head(a, l)) /* onto the layer above's */
    CL_TRY(cl_head_backward(m, l, s * st->g.S * b, len * b, !top));
  else if (top) /* nothing from above: the handed state's and the later segment's only */
    CL_TRY(cl_zero(m, st->dh[l], (size_t)len * bh * sizeof(float)));
  /* the head's gradient is complete with its lowest layer's part (data
   * parallel: its bucket, the pseudo-layer n_layers, goes then) */
  if (l == a->head_lo && reads_head(a, l))
    CL_TRY(cl_dist_bucket_ready(m, call, m->cfg.n_layers));
  if (handed && last) CL_TRY(receive_handed(m, l, to, b, len));
  const void *in = l > k->lo ? st->hid[l - 1] : seg_input(m, si, b, s);
  int save = s > 0 || (from && st->g.rc); /* for the earlier segment, or the stack before */
  CL_TRY(cl_backward_layer(m, call, l, b, len, in, ph ? ph[l] : NULL, pc ? pc[l] : NULL,
                           last && !handed, !last, save));
  if (!from || s > 0) return CL_OK;
  int back = a->stack[k->state_from].lo + (l - k->lo);
  CL_KERNEL(m, m->be->iface->copy(m->be, st->hand_c[back], st->dc[l], bh * sizeof(float)));
  return CL_OK;
}

/* Stack si backward, segment by segment from the last (each earlier one
 * recomputed from its checkpoint first), each from its top layer down. */
static cl_status back_stack(cl_model *m, const cl_call *call, int si, int b, void *const *h0,
                            void *const *c0) {
  const cl_stack *k = &m->arch.stack[si];
  void *ph[CL_MAX_LAYERS], *pc[CL_MAX_LAYERS];
  for (int s = segs_of(m, si) - 1; s >= 0; s--) {
    int len = seg_len(m, si, s), has = seg_state(m, si, b, s, h0, c0, ph, pc);
    /* a layer's gradients are complete after its first segment, the last
     * one backward: only then may its bucket go (dist.c) */
    cl_call seg = *call;
    seg.last_pass = call->last_pass && s == 0;
    if (s < segs_of(m, si) - 1) /* recompute what the later segments overwrote */
      CL_TRY(cl_forward_layers(m, k->lo, k->hi, b, len, seg_input(m, si, b, s), has ? ph : NULL,
                               has ? pc : NULL));
    for (int l = k->hi - 1; l >= k->lo; l--)
      CL_TRY(back_layer(m, &seg, si, l, b, s, len, has ? ph : NULL, has ? pc : NULL));
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
