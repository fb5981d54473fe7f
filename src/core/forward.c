/*
 * core/forward.c -- the forward pass over layers and time, and reading its
 * results. Two schedules of the same math:
 *  - training, a segment at a time (the whole sequence unless checkpointing
 *    or truncating): the input half of each layer's convolution runs once
 *    over all steps' images of the segment (the fast path), then per step
 *    only the hidden half is added and the fused cell applied; gates, c_t and
 *    h_t stay for backward. An input of few channels beside the hidden ones
 *    joins the hidden half instead: one convolution a step over [h, x]
 *    (cl_layer_joins). With recompute_gates the same a chunk of steps
 *    at a time into one chunk of gates, of which only c_t and h_t stay
 *    (backward runs each chunk again). Free-running (cl_forward_free_run): so for the
 *    input steps, then step by step with every layer in turn.
 *  - inference, stack by stack, each step-major: x arrives step by step
 *    (and a stack rolling forward reads its own frames), both halves go into
 *    one small gates buffer shared by all layers, c is kept for two steps,
 *    and h for two steps too when only the last states are wanted, so memory
 *    does not grow with the sequence; the top stack's steps give the
 *    outputs and the horizon's frames.
 */
#include "capability.h" /* cl_cap_require, cl_cap_check */
#include "plan.h"       /* cl_schedule_make, cl_plan_build; internal.h */

#include <string.h>

/* A layer's bias where it is added: with the convolution (bias_of), or,
 * where the backend fuses it (be->fused_bias), in the cell (cell_bias_of);
 * the other one is NULL. */
static const float *bias_of(const cl_model *m, const cl_layer *L) {
  return m->cfg.bias && !m->be->fused_bias ? m->params + L->off_b : NULL;
}
static const float *cell_bias_of(const cl_model *m, const cl_layer *L) {
  return m->cfg.bias && m->be->fused_bias ? m->params + L->off_b : NULL;
}

/* A joined layer's weights, [4h, h + in, kh, kw]: each output channel's
 * hidden kernels, then its input's. */
static void join_weights(const cl_model *m, const cl_layer *L, float *wj) {
  const size_t kk = (size_t)L->kh * L->kw, rh = (size_t)L->hidden * kk, rx = (size_t)L->in * kk;
  for (size_t k = 0; k < 4 * (size_t)L->hidden; k++) {
    memcpy(wj + k * (rh + rx), m->params + L->off_wh + k * rh, sizeof(float) * rh);
    memcpy(wj + k * (rh + rx) + rh, m->params + L->off_wx + k * rx, sizeof(float) * rx);
  }
}

/* One part of a step's joined input, whose b images are `row` bytes each:
 * image n's `part` bytes of src (its h planes, or its x planes) at `at`. */
static void join_part(void *out, size_t row, size_t at, const void *src, size_t part, int b) {
  for (int n = 0; n < b; n++)
    memcpy((char *)out + (size_t)n * row + at, (const char *)src + (size_t)n * part, part);
}

/* Layer l over steps s0..s0+len-1 of the segment buffers, b sequences,
 * from the state (prev_h, prev_c) before the segment (NULL: zeros), read
 * only when s0 is 0; in: the layer's input from the segment's step 0; the
 * steps' gates go to z on (their place in the layer's gates, or the chunk
 * of recompute_gates). A free-running step (s0 > 0, len 1) runs each layer
 * in turn. Backward recomputes a chunk's gates with this same call, so they
 * come out as forward's, and c, h are written again as they were. */
cl_status cl_forward_steps(cl_model *m, int l, int b, int s0, int len, const void *in,
                           const void *prev_h, const void *prev_c, void *z) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_layer *L = &m->layer[l];
  const struct cl_backend_i *be = m->be->iface;
  cl_dtype t = g->dtype;
  size_t P = (size_t)g->H * g->W, bh = (size_t)b * L->hidden * P, bin = (size_t)b * L->in * P;
  cl_conv_shape sx = cl_conv_input_half(L, g, len * b), sh = cl_conv_hidden_half(L, g, b);
  cl_gates_shape gs = cl_cell_shape(m, L, g, b);
  const float *wp = cl_peep_of(L, m->params);
  void *cell = st->cell[l], *hid = st->hid[l];
  const int join = cl_layer_joins(m, l, g);
  const void *xin = NULL;

  /* training: x_t times its mask (one per sequence, the fed-back frames' too);
   * a layer without input (the forecaster's first) has its bias in the
   * hidden half, and always a state before it */
  if (L->in && !join) {
    xin = cl_at((void *)in, s0 * bin, t);
    CL_TRY(cl_dropout_input(m, l, b, len, xin, &xin));
  }
  if (join) {
    join_weights(m, L, st->join_w);
    sh = cl_conv_joined(L, g, b);
  } else if (L->in) {
    CL_KERNEL(m, be->conv_forward(m->be, &sx, xin, m->params + L->off_wx, bias_of(m, L), z, 0,
                                  st->ws));
  } else if (s0 == 0 && !prev_h) {
    return cl_fail(m, CL_E_INTERNAL, "layer %d has no input and no state before it", l + 1);
  }
  for (int s = s0; s < s0 + len; s++) {
    void *z_s = cl_at(z, (size_t)(s - s0) * 4 * bh, t);
    const void *h_prev = s > 0 ? cl_at(hid, (s - 1) * bh, t) : prev_h;
    const void *c_prev = s > 0 ? cl_at(cell, (s - 1) * bh, t) : prev_c;
    if (h_prev) CL_TRY(cl_dropout_hidden(m, l, b, 1, h_prev, &h_prev));
    if (join) {
      /* h is copied before x_t is masked: both masked copies are made in
       * the one dropout buffer */
      const size_t e = cl_dtype_size(t), ph = (size_t)L->hidden * P * e, px = (size_t)L->in * P * e;
      const void *x_s = cl_at((void *)in, (size_t)s * bin, t);
      if (h_prev) join_part(st->join, ph + px, 0, h_prev, ph, b);
      CL_TRY(cl_dropout_input(m, l, b, 1, x_s, &x_s));
      if (h_prev) { /* one convolution; the weights stay between the steps (same_w) */
        join_part(st->join, ph + px, ph, x_s, px, b);
        CL_KERNEL(m, be->conv_forward(m->be, &sh, st->join, st->join_w, bias_of(m, L), z_s, 0,
                                      st->ws));
        sh.same_w = 1;
      } else { /* no state yet: the input's step alone */
        cl_conv_shape s1 = cl_conv_input_half(L, g, b);
        CL_KERNEL(m, be->conv_forward(m->be, &s1, x_s, m->params + L->off_wx, bias_of(m, L), z_s,
                                      0, st->ws));
      }
    } else if (h_prev) { /* the weights stay; only the cell runs between (same_w) */
      CL_KERNEL(m, be->conv_forward(m->be, &sh, h_prev, m->params + L->off_wh,
                                    L->in ? NULL : bias_of(m, L), z_s, L->in != 0, st->ws));
      sh.same_w = 1;
    }
    CL_KERNEL(m, be->gates_forward(m->be, &gs, z_s, c_prev, wp, cell_bias_of(m, L),
                                   cl_at(cell, s * bh, t), cl_at(hid, s * bh, t)));
  }
  return CL_OK;
}

/* Layer l's steps s0..s0+len-1: all at once into its gates, or with
 * recompute_gates a chunk of rc steps at a time into the one chunk. */
static cl_status forward_layer(cl_model *m, int l, int b, int s0, int len, const void *in,
                               const void *prev_h, const void *prev_c) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  if (!g->rc) {
    size_t bg = (size_t)b * 4 * m->layer[l].hidden * g->H * g->W;
    return cl_forward_steps(m, l, b, s0, len, in, prev_h, prev_c,
                            cl_at(st->gates[l], s0 * bg, g->dtype));
  }
  for (int c = s0; c < s0 + len; c += g->rc)
    CL_TRY(cl_forward_steps(m, l, b, c, s0 + len - c < g->rc ? s0 + len - c : g->rc, in, prev_h,
                            prev_c, st->gates[l]));
  return CL_OK;
}

cl_status cl_forward_layers(cl_model *m, int lo, int hi, int b, int len, const void *x,
                            void *const *prev_h, void *const *prev_c) {
  const cl_step *st = &m->step;
  for (int l = lo; l < hi; l++)
    CL_TRY(forward_layer(m, l, b, 0, len, l == lo ? x : st->hid[l - 1],
                         prev_h ? prev_h[l] : NULL, prev_c ? prev_c[l] : NULL));
  return CL_OK;
}

cl_status cl_forward_segment(cl_model *m, int b, int len, const void *x, void *const *prev_h,
                             void *const *prev_c) {
  return cl_forward_layers(m, 0, m->cfg.n_layers, b, len, x, prev_h, prev_c);
}

cl_status cl_head_forward(cl_model *m, int n, void *const *h, void *out) {
  const cl_schedule *g = &m->step.g;
  const cl_layer *H = cl_head(m);
  int f0 = m->arch.head_lo;
  for (int l = f0; l < m->arch.head_hi; l++) {
    cl_conv_shape s = cl_conv_head(m, l, g, n);
    CL_KERNEL(m, m->be->iface->conv_forward(m->be, &s, h[l], m->params + cl_head_offset(m, l),
                                            l == f0 ? m->params + H->off_b : NULL, out, l > f0,
                                            m->step.ws));
  }
  return CL_OK;
}

/* Free-running: x's input steps layer by layer (the fast path), then each
 * fed-back step with every layer in turn, since its input is the last
 * layer's h of the step before. That h is copied into x's slot of the
 * step, so backward reads the input of every step from x alike; a step
 * that reads the true frame (scheduled sampling) finds it there already. */
cl_status cl_forward_free_run(cl_model *m, const cl_call *c, int b, void *x,
                              void *const *prev_h, void *const *prev_c) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  int top = m->cfg.n_layers - 1, tin = g->T - g->horizon + 1;
  size_t frame = (size_t)b * m->cfg.input_dim * g->H * g->W; /* == the last layer's h */
  CL_TRY(cl_forward_segment(m, b, tin, x, prev_h, prev_c));
  for (int s = tin; s < g->T; s++) {
    if (!cl_reads_truth(c, g, s))
      CL_KERNEL(m, m->be->iface->copy(m->be, cl_at(x, s * frame, g->dtype),
                                      cl_at(st->hid[top], (s - 1) * frame, g->dtype),
                                      frame * cl_dtype_size(g->dtype)));
    for (int l = 0; l <= top; l++)
      CL_TRY(forward_layer(m, l, b, s, 1, l == 0 ? x : st->hid[l - 1], NULL, NULL));
  }
  return CL_OK;
}

/* Copy the last step's h and c of layers lo..hi-1 to dst_h[l], dst_c[l]
 * (checkpoints, or the state a truncation window hands to the next). */
cl_status cl_save_layers_end(cl_model *m, int lo, int hi, int b, int len, void *const *dst_h,
                             void *const *dst_c) {
  const cl_step *st = &m->step;
  cl_dtype t = st->g.dtype;
  size_t P = (size_t)st->g.H * st->g.W;
  for (int l = lo; l < hi; l++) {
    size_t bh = (size_t)b * m->layer[l].hidden * P, bytes = bh * cl_dtype_size(t);
    CL_KERNEL(m, m->be->iface->copy(m->be, dst_h[l], cl_at(st->hid[l], (len - 1) * bh, t), bytes));
    CL_KERNEL(m, m->be->iface->copy(m->be, dst_c[l], cl_at(st->cell[l], (len - 1) * bh, t), bytes));
  }
  return CL_OK;
}

/* Inference, step-major; h slot of step s in layer l's buffer. */
static size_t hid_slot(const cl_schedule *g, int s) {
  return g->outputs == CL_OUTPUTS_ALL ? (size_t)s : (size_t)(s % 2);
}

/* Step s of layers lo..hi-1, layer lo's input x_s; ih, ic: the state
 * before step 0 per layer (NULL: zeros). */
static cl_status infer_layers(cl_model *m, int lo, int hi, int s, const void *x_s,
                              void *const *ih, void *const *ic) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const struct cl_backend_i *be = m->be->iface;
  cl_dtype t = g->dtype;
  size_t P = (size_t)g->H * g->W;
  for (int l = lo; l < hi; l++) {
    const cl_layer *L = &m->layer[l];
    size_t bh = (size_t)g->B * L->hidden * P;
    size_t bin = (size_t)g->B * L->in * P;
    const void *in = l == lo ? x_s : cl_at(st->hid[l - 1], hid_slot(g, s) * bin, t);
    cl_conv_shape sx = cl_conv_input_half(L, g, g->B), sh = cl_conv_hidden_half(L, g, g->B);
    cl_gates_shape gs = cl_cell_shape(m, L, g, g->B);
    void *z = st->gates[l];
    if (L->in)
      CL_KERNEL(m, be->conv_forward(m->be, &sx, in, m->params + L->off_wx, bias_of(m, L), z, 0,
                                    st->ws));
    const void *h_prev = s > 0 ? cl_at(st->hid[l], hid_slot(g, s - 1) * bh, t) : ih ? ih[l] : NULL;
    const void *c_prev = s > 0 ? cl_at(st->cell[l], ((s - 1) % 2) * bh, t) : ic ? ic[l] : NULL;
    if (!L->in && !h_prev)
      return cl_fail(m, CL_E_INTERNAL, "layer %d has no input and no state before it", l + 1);
    if (h_prev) /* a layer without input: its bias with this half (cl_forward_steps) */
      CL_KERNEL(m, be->conv_forward(m->be, &sh, h_prev, m->params + L->off_wh,
                                    L->in ? NULL : bias_of(m, L), z, L->in != 0, st->ws));
    CL_KERNEL(m, be->gates_forward(m->be, &gs, z, c_prev, cl_peep_of(L, m->params),
                                   cell_bias_of(m, L), cl_at(st->cell[l], (s % 2) * bh, t),
                                   cl_at(st->hid[l], hid_slot(g, s) * bh, t)));
  }
  return CL_OK;
}

/* The last h and c of stack `from`'s layers (its step n - 1) as the states
 * before stack `to`'s, layer by layer. */
static void last_states(cl_model *m, const cl_stack *from, const cl_stack *to, int n, void **ih,
                        void **ic) {
  const cl_schedule *g = &m->step.g;
  size_t P = (size_t)g->H * g->W;
  for (int i = 0; i < from->hi - from->lo; i++) {
    int l = from->lo + i;
    size_t bh = (size_t)g->B * m->layer[l].hidden * P;
    ih[to->lo + i] = cl_at(m->step.hid[l], hid_slot(g, n - 1) * bh, g->dtype);
    ic[to->lo + i] = cl_at(m->step.cell[l], (size_t)((n - 1) % 2) * bh, g->dtype);
  }
}

/* Step k's output into dst: the head over its layers' h at step k, or
 * without a head the top layer's h. */
static cl_status step_output(cl_model *m, int k, void *dst) {
  const cl_schedule *g = &m->step.g;
  const cl_arch *a = &m->arch;
  size_t P = (size_t)g->H * g->W;
  void *h[CL_MAX_LAYERS];
  for (int l = 0; l < m->cfg.n_layers; l++)
    h[l] = cl_at(m->step.hid[l], hid_slot(g, k) * (size_t)g->B * m->layer[l].hidden * P, g->dtype);
  if (cl_arch_has_head(a)) return cl_head_forward(m, g->B, h, dst);
  int top = m->cfg.n_layers - 1;
  size_t hb = (size_t)g->B * m->layer[top].hidden * P * cl_dtype_size(g->dtype);
  CL_KERNEL(m, m->be->iface->copy(m->be, dst, h[top], hb));
  return CL_OK;
}

/* Step k of the top stack gives: over the target's steps, frame k; over
 * the input's, with a head and every output kept, output k, and from the
 * last input step on the horizon's frames, each the next step's input. */
static cl_status stack_outputs(cl_model *m, const cl_stack *s, int k) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  size_t frame = (size_t)g->B * m->arch.frame_dim * g->H * g->W; /* == one output step */
  if (s->steps == CL_STEPS_TARGET) return step_output(m, k, cl_at(st->frames, k * frame, g->dtype));
  if (cl_arch_has_head(&m->arch) && g->outputs == CL_OUTPUTS_ALL && k < g->T)
    CL_TRY(step_output(m, k, cl_at(st->head_out, k * frame, g->dtype)));
  if (g->horizon > 0 && k >= g->T - 1)
    CL_TRY(step_output(m, k, cl_at(st->frames, (size_t)(k - g->T + 1) * frame, g->dtype)));
  return CL_OK;
}

/* Inference, stack by stack (arch.h), each step-major over its steps: a
 * stack reading frames over x's T steps and, when no stack runs the
 * target, over the horizon's fed-back frames (step T + j reads frame j);
 * one reading nothing over the target's steps; each from the call's state
 * or the last states of the stack it follows. The top stack's steps give
 * the outputs and frames (patched: cl_model_read_frames shuffles them
 * back). */
static cl_status infer(cl_model *m, const cl_host_array *x, int from, void **ih, void **ic) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  const cl_arch *a = &m->arch;
  int fed = cl_arch_runs_target(a) || g->horizon < 2 ? 0 : g->horizon - 1, ran[CL_MAX_STACKS];
  size_t frame = (size_t)g->B * a->frame_dim * g->H * g->W;
  for (int si = 0; si < a->n_stacks; si++) {
    const cl_stack *s = &a->stack[si];
    int n = ran[si] = cl_arch_steps(a, si, g->T, g->horizon) + (s->steps == CL_STEPS_INPUT ? fed : 0);
    int has = s->state_from >= 0 || from;
    if (s->state_from >= 0) last_states(m, &a->stack[s->state_from], s, ran[s->state_from], ih, ic);
    for (int k = 0; k < n; k++) {
      const void *in = NULL;
      if (s->input == CL_STACK_READS_FRAMES && k < g->T) {
        cl_block blk = {0, g->B, k, 1};
        CL_TRY(cl_put_frames(m, st->x, g->dtype, x, blk));
        in = st->x;
      } else if (s->input == CL_STACK_READS_FRAMES) {
        in = cl_at(st->frames, (size_t)(k - g->T) * frame, g->dtype);
      }
      CL_TRY(infer_layers(m, s->lo, s->hi, k, in, has ? ih : NULL, has ? ic : NULL));
      if (s->hi == m->cfg.n_layers) CL_TRY(stack_outputs(m, s, k));
    }
  }
  return CL_OK;
}

/* Stacks that run the target's steps predict a horizon (what they refuse:
 * the capability table). */
static cl_status check_target_forward(cl_model *m, const cl_host_array *x,
                                     const cl_step_options *o) {
  if (!o || o->horizon < 1)
    return cl_fail(m, CL_E_INVALID, "an encoder-forecaster predicts a horizon of >= 1 frames");
  return cl_check_frames(m, x, "x");
}

cl_status cl_model_forward(cl_model *m, const cl_host_array *x, int training,
                           const cl_step_options *opts) {
  m->err[0] = '\0';
  if (training) CL_TRY(cl_cap_require(m, CL_CAP_SEPARATE));
  CL_TRY(cl_cap_check(m, opts, 0, CL_TARGET_SEQUENCE, m->cfg.dtype));
  if (cl_arch_runs_target(&m->arch))
    CL_TRY(check_target_forward(m, x, opts));
  else
    CL_TRY(cl_check_sequence(m, x, "x", m->cfg.input_dim));
  if (training && opts &&
      (opts->checkpoint || opts->tbptt || opts->accumulation_steps > 1 || opts->horizon ||
       opts->recompute_gates))
    return cl_fail(m, CL_E_INVALID,
                   "checkpoint, tbptt, accumulation_steps, recompute_gates and a training "
                   "horizon apply to train_step, not to a forward pass followed by a separate "
                   "backward");
  if (opts && opts->state_mode == CL_STATE_CARRY)
    return cl_fail(m, CL_E_INVALID, "state = \"carry\" applies to train_step only");
  int B = x->dims[0], T = x->dims[1], p = m->arch.patch;
  cl_schedule g;
  CL_TRY(cl_schedule_make(m, B, T, x->dims[3] / p, x->dims[4] / p, training, opts, &g));
  CL_TRY(cl_state_check(m, opts, B, x->dims[3], x->dims[4]));
  m->phase = CL_PHASE_NONE;
  CL_TRY(cl_step_prepare(m, &g));
  cl_step *st = &m->step;
  st->outputs_kept = 0;
  CL_TRY(cl_state_upload(m, opts, 0));
  void *ih[CL_MAX_LAYERS], *ic[CL_MAX_LAYERS];
  int from = cl_state_initial(m, 0, ih, ic);
  if (training) {
    CL_TRY(cl_dropout_check(m, opts));
    CL_TRY(cl_dropout_upload(m, opts, 0, B, 1));
    CL_TRY(cl_put_host(m, st->x, g.dtype, x, cl_block_all(x)));
    CL_TRY(cl_forward_segment(m, B, T, st->x, from ? ih : NULL, from ? ic : NULL));
  } else {
    CL_TRY(infer(m, x, from, ih, ic));
  }
  st->outputs_kept = 1;
  m->phase = training ? CL_PHASE_TRAINING : CL_PHASE_INFERENCE;
  return cl_guard_check(m);
}

cl_status cl_model_last_shape(const cl_model *m, int *B, int *T, int *H, int *W) {
  int ok = m->phase != CL_PHASE_NONE, p = cl_cfg_patch(&m->cfg); /* the caller's frames */
  *B = ok ? m->step.g.B : 0;
  *T = ok ? m->step.g.T : 0;
  *H = ok ? m->step.g.H * p : 0;
  *W = ok ? m->step.g.W * p : 0;
  return CL_OK;
}

static cl_status check_read(cl_model *m, int layer, const cl_host_array *out, int ndim) {
  const cl_step *st = &m->step;
  if (m->phase == CL_PHASE_NONE) return cl_fail(m, CL_E_STATE, "no forward pass has run");
  if (!st->outputs_kept)
    return cl_fail(m, CL_E_STATE,
                   "the last step ran in pieces (checkpoint, tbptt, accumulation or split by "
                   "batch across threads) and kept no outputs: run a forward pass to read them");
  /* a head over the input's steps: the pseudo-layer after the last (its outputs) */
  int head = layer == m->cfg.n_layers && cl_arch_has_head(&m->arch) && !cl_arch_runs_target(&m->arch);
  if (layer < 0 || (layer >= m->cfg.n_layers && !head))
    return cl_fail(m, CL_E_INVALID, "layer %d does not exist (1..%d)", layer + 1, m->cfg.n_layers);
  if (head && ndim != 5)
    return cl_fail(m, CL_E_INVALID, "the head keeps outputs, not states");
  /* training runs the head inside the loss, leaving its gradient there */
  if (head && m->phase != CL_PHASE_INFERENCE)
    return cl_fail(m, CL_E_STATE, "the head's outputs are kept by inference (predict) only");
  if (ndim == 5 && !st->g.training && st->g.outputs != CL_OUTPUTS_ALL)
    return cl_fail(m, CL_E_STATE, "this forward pass kept only the last states");
  const cl_schedule *g = &st->g;
  int want[5] = {g->B, g->T, head ? m->arch.frame_dim : m->layer[layer].hidden, g->H, g->W};
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
  void *buf = layer == m->cfg.n_layers ? m->step.head_out : m->step.hid[layer];
  return cl_get_host(m, out, buf, m->step.g.dtype);
}

cl_status cl_model_read_state(cl_model *m, int layer, int which, cl_host_array *out) {
  CL_TRY(check_read(m, layer, out, 4));
  const cl_schedule *g = &m->step.g;
  size_t bh = (size_t)g->B * m->layer[layer].hidden * g->H * g->W;
  /* an inference rollout ran horizon - 1 steps after x (a training horizon
   * is inside T already) */
  int last = g->T - 1 + (!g->training && g->horizon > 0 ? g->horizon - 1 : 0);
  size_t slot;
  if (g->training) /* a whole-sequence training forward keeps every step */
    slot = (size_t)last;
  else
    slot = which == 0 ? hid_slot(g, last) : (size_t)(last % 2);
  void *buf = which == 0 ? m->step.hid[layer] : m->step.cell[layer];
  return cl_get_host(m, out, cl_at(buf, slot * bh, g->dtype), g->dtype);
}

cl_status cl_model_read_frames(cl_model *m, cl_host_array *out) {
  const cl_schedule *g = &m->step.g;
  if (m->phase != CL_PHASE_INFERENCE || g->horizon < 1)
    return cl_fail(m, CL_E_STATE, "no forward with a horizon has run");
  int p = cl_cfg_patch(&m->cfg);
  int want[5] = {g->B, g->horizon, m->cfg.input_dim, g->H * p, g->W * p};
  if (out->ndim != 5) return cl_fail(m, CL_E_INVALID, "frames array must have 5 dimensions");
  for (int i = 0; i < 5; i++)
    if (out->dims[i] != want[i])
      return cl_fail(m, CL_E_INVALID, "frames array dimension %d is %d, expected %d", i + 1,
                     out->dims[i], want[i]);
  return cl_get_frames(m, out, m->step.frames, g->dtype);
}
