/*
 * core/program.c -- the scheduler (program.h): a training step's
 * micro-batch as a list of ops, from the architecture's stacks and the
 * call's schedule. Three rules, the one place they are written:
 *  - a single stack in checkpoint segments (one without checkpointing):
 *    forward segment by segment keeping only the states at segment ends,
 *    then from the last segment back, each earlier one recomputed from its
 *    checkpoint first, its loss and its backward -- the same gradients as
 *    without; free running is one segment whose fed-back steps interleave
 *    the layers;
 *  - a single stack in truncation windows: each window forward, its loss
 *    and backward (a last-state target: only the last window's), the
 *    state handed on detached;
 *  - stacks handing their last states on (more than one stack): each stack
 *    forward in segments from zeros or from the stack it follows, the head
 *    over each segment; the loss of the target's frames at once; backward
 *    stack by stack from the last, each layer receiving the gradient of
 *    the state it handed on.
 * A carrying call keeps the state its micro-batch ended in.
 */
#include "program.h"

#include <stdlib.h>
#include <string.h>

typedef struct builder {
  const cl_arch *a;
  int L;
  const cl_schedule *g;
  cl_target tg;
  int b, final;
  cl_program *out;
  int summary;   /* the middle segments once (cl_program_summary) */
  int64_t times; /* what the ops emitted now stand for */
} builder;

static cl_op *emit(builder *k, cl_op_kind kind, int lo, int hi, int t0, int len) {
  static cl_op dummy;
  cl_program *p = k->out;
  cl_op *v = cl_grow(p->v, &p->cap, p->n, sizeof *v);
  if (!v) {
    p->oom = 1;
    return &dummy; /* written to and dropped: the list is reported incomplete */
  }
  p->v = v;
  cl_op *o = &p->v[p->n++];
  cl_op z = {0};
  *o = z;
  o->kind = kind;
  o->lo = lo;
  o->hi = hi;
  o->t0 = t0;
  o->len = len;
  o->x_at = CL_X_NONE;
  o->times = k->times;
  return o;
}

static cl_state_ref at(cl_state_at where, int slot) {
  cl_state_ref r = {where, slot, 0};
  return r;
}

/* Segment s of n steps in pieces of S: its length. */
static int piece_len(int n, int S, int s) { return n - s * S < S ? n - s * S : S; }
static int pieces(int n, int S) { return n / S + (n % S != 0); }

/* The segments of n a program walks, forward (next) and back (prev), and
 * what each stands for: every one; in a summary of many, the middle ones
 * 1 .. n - 2 as n - 2 (equal in length: S), sets k->times. */
static int folded(const builder *k, int n) { return k->summary && n > CL_SUMMARY_SEGMENTS; }
static int next_seg(builder *k, int n, int s) {
  int t = folded(k, n) && s == 0 ? n - 2 : s + 1;
  k->times = folded(k, n) && t == n - 2 ? n - 2 : 1;
  return t;
}
static int prev_seg(builder *k, int n, int s) {
  int t = folded(k, n) && s == n - 2 ? 0 : s - 1;
  k->times = folded(k, n) && t == n - 2 ? n - 2 : 1;
  return t;
}
static int first_seg(builder *k) {
  k->times = 1;
  return 0;
}
static int last_seg(builder *k, int n) { return prev_seg(k, n, n); }

/* Share of the whole batch's loss elements held by the micro-batch's
 * sequences over steps t0 .. t0 + len - 1 (with a horizon, only its last
 * steps have a target). */
static double share_of(const builder *k, int t0, int len) {
  const cl_schedule *g = k->g;
  if (k->tg != CL_TARGET_SEQUENCE) return (double)k->b / g->B;
  int first = g->horizon ? g->T - g->horizon : 0, from = t0 > first ? t0 : first;
  int steps = t0 + len > from ? t0 + len - from : 0;
  return ((double)k->b * steps) / ((double)g->B * (g->T - first));
}

/* Every layer from the top down over a segment: the per-layer pieces. */
static void backward_layers(builder *k, int len, int x_at, cl_state_ref before, int last,
                            int save_carry, int last_pass) {
  for (int l = k->L - 1; l >= 0; l--) {
    cl_op *o = emit(k, CL_OP_BACKWARD, l, l + 1, 0, len);
    o->x_at = l == 0 ? x_at : CL_X_BELOW;
    o->before = before;
    o->fresh_dc = last;
    o->carry_in = !last;
    o->save_carry = save_carry;
    o->last_pass = last_pass;
  }
}

static cl_op *forward(builder *k, int lo, int hi, int len, int x_at, cl_state_ref before) {
  cl_op *o = emit(k, CL_OP_FORWARD, lo, hi, 0, len);
  o->x_at = x_at;
  o->before = before;
  return o;
}

static void save(builder *k, int lo, int hi, int len, cl_state_ref to) {
  emit(k, CL_OP_SAVE_END, lo, hi, 0, len)->to = to;
}

/* A single stack in checkpoint segments. */
static void segments(builder *k) {
  const cl_schedule *g = k->g;
  int L = k->L, n = g->nseg, S = g->S;
  cl_state_ref call = at(k->g->state != CL_STATE_ZERO ? CL_AT_CALL : CL_AT_ZERO, 0);
  /* free running: x holds the input steps only; the forward fills the rest */
  emit(k, CL_OP_PUT_X, 0, L, 0, g->T - (g->free_run ? g->horizon - 1 : 0));
  if (g->free_run) emit(k, CL_OP_PUT_TRUTH, 0, L, 0, g->T);
  for (int s = first_seg(k); s < n; s = next_seg(k, n, s)) {
    int len = piece_len(g->T, S, s);
    cl_state_ref before = s > 0 ? at(CL_AT_CKPT, s - 1) : call;
    if (g->free_run) { /* one segment (plan.c) */
      cl_op *o = emit(k, CL_OP_FORWARD_FREE, 0, L, 0, g->T);
      o->x_at = 0;
      o->before = before;
      continue;
    }
    forward(k, 0, L, len, s * S, before);
    if (s < n - 1)
      save(k, 0, L, len, at(CL_AT_CKPT, s));
    else if (n > 1 && g->state == CL_STATE_CARRY) /* planned for this */
      save(k, 0, L, len, at(CL_AT_CARRY, 0));
  }
  for (int s = last_seg(k, n); s >= 0; s = prev_seg(k, n, s)) {
    int len = piece_len(g->T, S, s), last = s == n - 1, lp = k->final && s == 0;
    cl_state_ref before = s > 0 ? at(CL_AT_CKPT, s - 1) : call;
    if (!last) forward(k, 0, L, len, s * S, before); /* what the later segments overwrote */
    emit(k, CL_OP_LOSS_SEGMENT, 0, L, s * S, len)->share = share_of(k, s * S, len);
    if (!g->free_run) {
      backward_layers(k, len, s * S, before, last, s > 0, lp);
      continue;
    }
    cl_op *o = emit(k, CL_OP_BACKWARD_FREE, 0, L, 0, g->T);
    o->x_at = 0;
    o->before = before;
    o->last_pass = lp;
  }
  /* the state the micro-batch started from is read no more: hand on its
   * last one (still in the buffers when there is a single segment) */
  k->times = 1;
  if (g->state != CL_STATE_CARRY) return;
  if (n > 1)
    emit(k, CL_OP_KEEP_STATE, 0, L, 0, 0);
  else
    save(k, 0, L, g->T, at(CL_AT_CALL, 0)); /* the carried state itself */
}

/* A single stack in truncation windows of S steps. */
static void windows(builder *k) {
  const cl_schedule *g = k->g;
  int L = k->L, n = pieces(g->T, g->S);
  cl_state_ref call = at(g->state != CL_STATE_ZERO ? CL_AT_CALL : CL_AT_ZERO, 0);
  for (int w = first_seg(k); w < n; w = next_seg(k, n, w)) {
    int t0 = w * g->S, len = piece_len(g->T, g->S, w);
    cl_state_ref before = w > 0 ? at(CL_AT_CARRY, 0) : call;
    emit(k, CL_OP_PUT_X, 0, L, t0, len);
    forward(k, 0, L, len, 0, before);
    if (k->tg == CL_TARGET_SEQUENCE || w == n - 1) {
      emit(k, CL_OP_LOSS_SEGMENT, 0, L, t0, len)->share = share_of(k, t0, len);
      backward_layers(k, len, 0, before, 1, 0, k->final && w == n - 1);
    }
    /* after backward, which still reads the incoming state; the last
     * window's end is the state a carrying step hands on */
    if (w < n - 1)
      save(k, 0, L, len, at(CL_AT_CARRY, 0));
    else if (g->state == CL_STATE_CARRY)
      save(k, 0, L, len, at(CL_AT_CALL, 0));
  }
}

/* Steps stack si runs, and its segments. */
static int stack_steps(const builder *k, int si) {
  return cl_arch_steps(k->a, si, k->g->T, k->g->horizon);
}
/* The states before segment s of stack si, and where its input starts. */
static cl_state_ref stack_before(const builder *k, int si, int s) {
  const cl_stack *st = &k->a->stack[si];
  if (s > 0) return at(CL_AT_CKPT, s - 1);
  if (st->state_from < 0) return at(CL_AT_ZERO, 0);
  int from = st->state_from, n = stack_steps(k, from), S = k->g->S;
  cl_state_ref r = {CL_AT_STACK_END, piece_len(n, S, pieces(n, S) - 1) - 1, from};
  return r;
}
static int stack_x(const builder *k, int si, int s) {
  return k->a->stack[si].input == CL_STACK_READS_FRAMES ? s * k->g->S : CL_X_NONE;
}

static void forward_stack(builder *k, int si) {
  const cl_stack *st = &k->a->stack[si];
  int n = stack_steps(k, si), S = k->g->S, nseg = pieces(n, S);
  for (int s = first_seg(k); s < nseg; s = next_seg(k, nseg, s)) {
    int len = piece_len(n, S, s);
    forward(k, st->lo, st->hi, len, stack_x(k, si, s), stack_before(k, si, s));
    if (cl_arch_head_reads(k->a, st->hi - 1)) emit(k, CL_OP_HEAD_FORWARD, 0, 0, s * S, len);
    if (s < nseg - 1) save(k, st->lo, st->hi, len, at(CL_AT_CKPT, s));
  }
}

/* Layer l of stack si over its segment s (len steps): the head's part,
 * the handed state's gradient, the layer; a layer starting from another
 * stack's state hands its initial c's gradient back. */
static void backward_stack_layer(builder *k, int si, int l, int s, int len) {
  const cl_arch *a = k->a;
  const cl_stack *st = &a->stack[si];
  int last = s == pieces(stack_steps(k, si), k->g->S) - 1, top = l == st->hi - 1, to = -1;
  int from = st->state_from >= 0, handed = cl_arch_hands_on(a, l, &to) >= 0;
  int lp = k->final && s == 0;
  if (cl_arch_head_reads(a, l)) { /* onto the layer above's */
    cl_op *o = emit(k, CL_OP_HEAD_BACKWARD, l, l + 1, s * k->g->S, len);
    o->accumulate = !top;
  } else if (top) { /* nothing from above: the handed state's and the later segment's only */
    emit(k, CL_OP_ZERO_DH, l, l + 1, 0, len);
  }
  /* the head's gradient is complete with its lowest layer's part (data
   * parallel: its bucket, the pseudo-layer after the last, goes then) */
  if (l == a->head_lo && cl_arch_head_reads(a, l))
    emit(k, CL_OP_BUCKET, k->L, k->L + 1, 0, 0)->last_pass = lp;
  if (handed && last) emit(k, CL_OP_RECEIVE, l, to, 0, len);
  cl_op *o = emit(k, CL_OP_BACKWARD, l, l + 1, 0, len);
  o->x_at = l > st->lo ? CL_X_BELOW : stack_x(k, si, s);
  o->before = stack_before(k, si, s);
  o->fresh_dc = last && !handed;
  o->carry_in = !last; /* the later segment's first dz reaches back */
  o->save_carry = s > 0 || (from && k->g->rc); /* for the earlier segment, or the stack before */
  o->last_pass = lp;
  if (from && s == 0) emit(k, CL_OP_HAND_C, l, a->stack[st->state_from].lo + (l - st->lo), 0, len);
}

static void stacks(builder *k) {
  const cl_arch *a = k->a;
  emit(k, CL_OP_PUT_X, 0, k->L, 0, k->g->T);
  for (int si = 0; si < a->n_stacks; si++) forward_stack(k, si);
  k->times = 1;
  emit(k, CL_OP_LOSS_FRAMES, a->head_lo, a->head_hi, 0, k->g->horizon);
  for (int si = a->n_stacks - 1; si >= 0; si--) {
    const cl_stack *st = &a->stack[si];
    int n = stack_steps(k, si), S = k->g->S;
    for (int s = last_seg(k, pieces(n, S)); s >= 0; s = prev_seg(k, pieces(n, S), s)) {
      int len = piece_len(n, S, s);
      if (s < pieces(n, S) - 1) /* recompute what the later segments overwrote */
        forward(k, st->lo, st->hi, len, stack_x(k, si, s), stack_before(k, si, s));
      for (int l = st->hi - 1; l >= st->lo; l--) backward_stack_layer(k, si, l, s, len);
    }
  }
}

static cl_status build(const cl_arch *a, int n_layers, const cl_schedule *g, cl_target tg, int b,
                       int final, int summary, cl_program *out) {
  builder k = {a, n_layers, g, tg, b, final, out, summary, 1};
  if (cl_arch_is_wired(a))
    stacks(&k);
  else if (g->tbptt)
    windows(&k);
  else
    segments(&k);
  return out->oom ? CL_E_OOM : CL_OK;
}

cl_status cl_program_build(const cl_arch *a, int n_layers, const cl_schedule *g, cl_target tg,
                           int b, int final, cl_program *out) {
  return build(a, n_layers, g, tg, b, final, 0, out);
}

cl_status cl_program_summary(const cl_arch *a, int n_layers, const cl_schedule *g, cl_target tg,
                             int b, int final, cl_program *out) {
  return build(a, n_layers, g, tg, b, final, 1, out);
}

cl_status cl_step_ops(const cl_schedule *g, cl_program *out) {
  builder k = {NULL, 0, g, CL_TARGET_SEQUENCE, 0, 0, out, 0, 1};
  emit(&k, CL_OP_ZERO_GRAD, 0, 0, 0, 0);
  for (int b0 = 0; b0 < g->B; b0 += g->Bm) {
    int b = g->B - b0 < g->Bm ? g->B - b0 : g->Bm;
    emit(&k, CL_OP_MICRO_BATCH, 0, b0 + b >= g->B, b0, b);
  }
  emit(&k, CL_OP_REDUCE, 0, 0, 0, 0);
  emit(&k, CL_OP_UPDATE, 0, 0, 0, 0);
  return out->oom ? CL_E_OOM : CL_OK;
}

/* ---- which buffers each op uses ---------------------------------------- */

typedef struct user {
  cl_use_fn use;
  void *ctx;
} user;

static void per_layer(const user *u, int kind, int lo, int hi) {
  for (int l = lo; l < hi; l++) u->use(u->ctx, kind, l, 0);
}

/* The states of r for layers lo .. hi - 1, where they are step buffers. */
static void state_uses(const user *u, const cl_arch *a, cl_state_ref r, int lo, int hi) {
  for (int l = lo; l < hi; l++) {
    if (r.at == CL_AT_CKPT) {
      u->use(u->ctx, CL_BUF_CKPT_H, l, 0);
      u->use(u->ctx, CL_BUF_CKPT_C, l, 0);
    } else if (r.at == CL_AT_CARRY) {
      u->use(u->ctx, CL_BUF_CARRY_H, l, 0);
      u->use(u->ctx, CL_BUF_CARRY_C, l, 0);
    } else if (r.at == CL_AT_STACK_END) { /* the stack's layer in the same place */
      int f = a->stack[r.stack].lo + (l - a->stack[cl_arch_stack_of(a, l)].lo);
      u->use(u->ctx, CL_BUF_HID, f, 0);
      u->use(u->ctx, CL_BUF_CELL, f, 0);
    }
  }
}

/* A layer's own buffers over its steps, forward or backward. */
static void layer_uses(const user *u, int l, int backward, int dc_how) {
  u->use(u->ctx, CL_BUF_GATES, l, 0);
  u->use(u->ctx, CL_BUF_CELL, l, 0);
  u->use(u->ctx, CL_BUF_HID, l, 0);
  u->use(u->ctx, CL_BUF_DROPPED, -1, 0);
  if (!backward) return;
  u->use(u->ctx, CL_BUF_DH, l, 0);
  u->use(u->ctx, CL_BUF_DC, l, dc_how);
  u->use(u->ctx, CL_BUF_DZ_CARRY, l, 0);
}

/* Layer lo's input: x, or the layer below's h (and its d_hidden, which
 * the input half's data gradient writes anew: after the time loop has
 * read layer lo's, or with recomputed gates chunk by chunk beside it). */
static void input_uses(const user *u, const cl_op *o, const cl_schedule *g, int backward) {
  if (o->x_at >= 0) u->use(u->ctx, CL_BUF_X, -1, 0);
  if (o->x_at != CL_X_BELOW) return;
  u->use(u->ctx, CL_BUF_HID, o->lo - 1, 0);
  if (backward) u->use(u->ctx, CL_BUF_DH, o->lo - 1, g->rc ? CL_USE_DEF_STREAM : CL_USE_DEF_AFTER);
}

static void head_uses(const user *u, int lo, int hi) {
  u->use(u->ctx, CL_BUF_HEAD_OUT, -1, 0);
  u->use(u->ctx, CL_BUF_HEAD_GRAD, -1, 0);
  per_layer(u, CL_BUF_HID, lo, hi);
}

void cl_op_uses(const cl_op *o, const cl_arch *a, const cl_schedule *g, int n_layers,
                cl_use_fn use, void *ctx) {
  const user u = {use, ctx};
  int top = n_layers - 1;
  switch (o->kind) {
  case CL_OP_PUT_X:
  case CL_OP_PUT_TRUTH: use(ctx, CL_BUF_X, -1, 0); return;
  case CL_OP_FORWARD:
    input_uses(&u, o, g, 0);
    for (int l = o->lo; l < o->hi; l++) layer_uses(&u, l, 0, 0);
    state_uses(&u, a, o->before, o->lo, o->hi);
    return;
  case CL_OP_FORWARD_FREE:
  case CL_OP_BACKWARD_FREE: /* every layer, step by step, through x */
    use(ctx, CL_BUF_X, -1, 0);
    for (int l = 0; l < n_layers; l++) layer_uses(&u, l, o->kind == CL_OP_BACKWARD_FREE, 0);
    if (o->kind == CL_OP_BACKWARD_FREE) per_layer(&u, CL_BUF_DH_ROLL, 0, top);
    state_uses(&u, a, o->before, 0, n_layers);
    return;
  case CL_OP_HEAD_FORWARD:
    use(ctx, CL_BUF_HEAD_OUT, -1, 0);
    per_layer(&u, CL_BUF_HID, a->head_lo, a->head_hi);
    return;
  case CL_OP_SAVE_END:
    per_layer(&u, CL_BUF_HID, o->lo, o->hi);
    per_layer(&u, CL_BUF_CELL, o->lo, o->hi);
    state_uses(&u, a, o->to, o->lo, o->hi);
    return;
  case CL_OP_LOSS_SEGMENT: /* the target's gradient in the top layer's d_hidden, or
                             through the head's into it */
    use(ctx, CL_BUF_HID, top, 0);
    use(ctx, CL_BUF_DH, top, CL_USE_DEF);
    if (g->weight_steps) use(ctx, CL_BUF_WEIGHT, -1, 0);
    if (cl_arch_has_head(a)) head_uses(&u, a->head_lo, a->head_hi);
    return;
  case CL_OP_LOSS_FRAMES:
    use(ctx, CL_BUF_HEAD_OUT, -1, 0);
    use(ctx, CL_BUF_HEAD_GRAD, -1, 0);
    if (g->weight_steps) use(ctx, CL_BUF_WEIGHT, -1, 0);
    return;
  case CL_OP_HEAD_BACKWARD:
    head_uses(&u, o->lo, o->hi);
    use(ctx, CL_BUF_DH, o->lo, o->accumulate ? CL_USE_READ : CL_USE_DEF);
    return;
  case CL_OP_ZERO_DH: use(ctx, CL_BUF_DH, o->lo, CL_USE_DEF); return;
  case CL_OP_RECEIVE: /* the receiving layer's step 0 dz: kept, or still in its gates */
    use(ctx, g->rc ? CL_BUF_DZ_CARRY : CL_BUF_GATES, o->hi, 0);
    use(ctx, CL_BUF_DROPPED, -1, 0);
    use(ctx, CL_BUF_DH, o->lo, 0);
    use(ctx, CL_BUF_DC, o->lo, CL_USE_DEF); /* d_cell from the handed state's */
    use(ctx, CL_BUF_HAND_C, o->lo, 0);
    return;
  case CL_OP_BACKWARD:
    input_uses(&u, o, g, 1);
    layer_uses(&u, o->lo, 1, o->fresh_dc ? CL_USE_DEF : CL_USE_READ); /* d_cell from zeros */
    state_uses(&u, a, o->before, o->lo, o->hi);
    return;
  case CL_OP_HAND_C:
    use(ctx, CL_BUF_DC, o->lo, 0);
    use(ctx, CL_BUF_HAND_C, o->hi, 0);
    return;
  case CL_OP_KEEP_STATE:
    per_layer(&u, CL_BUF_CARRY_H, 0, n_layers);
    per_layer(&u, CL_BUF_CARRY_C, 0, n_layers);
    return;
  default: return; /* no step buffer: a bucket, the step's own ops */
  }
}

typedef struct span_ctx {
  cl_lifetimes *t;
  int i;
} span_ctx;

static void span(void *ctx, int kind, int layer, int how) {
  span_ctx *k = ctx;
  (void)how; /* a view's span runs from its first use to its last, whatever it holds */
  int j = layer + 1;
  if (kind < 0 || kind >= CL_BUF_NKIND || j < 0 || j > CL_MAX_LAYERS) return;
  if (k->t->first[kind][j] < 0) k->t->first[kind][j] = k->i;
  k->t->last[kind][j] = k->i;
}

void cl_program_lifetimes(const cl_program *p, const cl_arch *a, const cl_schedule *g,
                          int n_layers, cl_lifetimes *out) {
  for (int k = 0; k < CL_BUF_NKIND; k++)
    for (int j = 0; j <= CL_MAX_LAYERS; j++) out->first[k][j] = out->last[k][j] = -1;
  span_ctx c = {out, 0};
  for (c.i = 0; c.i < p->n; c.i++) cl_op_uses(&p->v[c.i], a, g, n_layers, span, &c);
}

/* Live ranges of one kind's per-layer views: a range starts where a view
 * is defined and runs to its last use before the next definition. An op i
 * is two points: 2i, its uses, and 2i + 1, what it defines after them. */
typedef struct range {
  int layer, start, end;
  int streamed; /* defined by streaming over the layer above's view */
} range;

typedef struct ranges_ctx {
  int kind, i, n, cap, oom;
  int open[CL_MAX_LAYERS]; /* the layer's current range in r, or -1 */
  range *r;
} ranges_ctx;

static void range_use(void *ctx, int kind, int layer, int how) {
  ranges_ctx *k = ctx;
  if (kind != k->kind || layer < 0 || layer >= CL_MAX_LAYERS) return;
  int at = 2 * k->i + (how == CL_USE_DEF_AFTER || how == CL_USE_DEF_STREAM), j = k->open[layer];
  if (j >= 0 && how == CL_USE_READ) {
    k->r[j].end = at;
    return;
  }
  range *r = cl_grow(k->r, &k->cap, k->n, sizeof *r);
  if (!r) {
    k->oom = 1;
    return;
  }
  k->r = r;
  range z = {layer, at, at, how == CL_USE_DEF_STREAM};
  k->r[k->n] = z;
  k->open[layer] = k->n++;
}

/* What the ranges ask of two layers' places: live[a][b], that they hold
 * values at once (disjoint then); streamed[a], that a value of layer a is
 * streamed over layer a + 1's. */
typedef struct clash {
  unsigned char live[CL_MAX_LAYERS][CL_MAX_LAYERS], streamed[CL_MAX_LAYERS];
} clash;

static void clash_of(const ranges_ctx *k, clash *c) {
  memset(c, 0, sizeof *c);
  for (int x = 0; x < k->n; x++) {
    const range *p = &k->r[x];
    c->streamed[p->layer] |= (unsigned char)p->streamed;
    for (int y = x + 1; y < k->n; y++) {
      const range *q = &k->r[y];
      if (p->layer != q->layer && p->start <= q->end && q->start <= p->end)
        c->live[p->layer][q->layer] = c->live[q->layer][p->layer] = 1;
    }
  }
}

/* Whether layer l of size[l] fits at offset o beside the layers placed. A
 * value streamed over the layer above's writes its step s after that one's
 * steps s, s + 1, ... are read: clear of the ones still to be read when it
 * lies wholly below, or at least as far above as the one above is larger. */
static int fits(const clash *c, const int *size, const int *at, const int *placed, int L, int l,
                int o) {
  for (int j = 0; j < L; j++) {
    if (!placed[j] || j == l) continue;
    int below = o + size[l] <= at[j], above = o >= at[j] + size[j];
    if (c->live[l][j] && !below && !above) return 0;
    int lag = size[j] > size[l] ? size[j] - size[l] : 0;
    if (j == l + 1 && c->streamed[l] && !below && o < at[j] + lag) return 0;
  }
  return 1;
}

/* Layer l at the lowest offset that fits: 0, or against a layer placed. */
static void place_one(const clash *c, const int *size, int *at, int *placed, int L, int l) {
  int best = -1;
  for (int j = -1; j < L; j++) {
    if (j >= 0 && !placed[j]) continue;
    int lag = j >= 0 && size[j] > size[l] ? size[j] - size[l] : 0;
    int cand[2] = {j < 0 ? 0 : at[j] + size[j], j < 0 ? 0 : at[j] + lag};
    for (int q = 0; q < 2; q++)
      if ((best < 0 || cand[q] < best) && fits(c, size, at, placed, L, l, cand[q])) best = cand[q];
  }
  at[l] = best;
  placed[l] = 1;
}

int cl_program_place(const cl_program *p, const cl_arch *a, const cl_schedule *g, int n_layers,
                     int kind, const int *size, int *at) {
  ranges_ctx k = {kind, 0, 0, 0, 0, {0}, NULL};
  for (int l = 0; l < CL_MAX_LAYERS; l++) k.open[l] = -1;
  for (k.i = 0; k.i < p->n; k.i++) cl_op_uses(&p->v[k.i], a, g, n_layers, range_use, &k);
  clash *c = k.oom ? NULL : malloc(sizeof *c);
  if (!c) {
    free(k.r);
    return -1;
  }
  clash_of(&k, c);
  /* in the order the layers' values first begin, then the layers never used */
  int placed[CL_MAX_LAYERS] = {0}, extent = 0;
  for (int x = 0; x < k.n; x++)
    if (!placed[k.r[x].layer]) place_one(c, size, at, placed, n_layers, k.r[x].layer);
  for (int l = 0; l < n_layers; l++) {
    if (!placed[l]) place_one(c, size, at, placed, n_layers, l);
    if (at[l] + size[l] > extent) extent = at[l] + size[l];
  }
  free(c);
  free(k.r);
  return extent;
}

void cl_program_free(cl_program *p) {
  if (!p) return;
  free(p->v);
  p->v = NULL;
  p->n = p->cap = p->oom = 0;
}
