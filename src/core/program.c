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
   * parallel: its bucket, the pseudo-layer after the last, goes then,
   * unless it rides in the top layer's) */
  if (l == a->head_lo && cl_arch_head_reads(a, l) && !cl_arch_head_in_top_bucket(a))
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

void cl_program_free(cl_program *p) {
  if (!p) return;
  free(p->v);
  p->v = NULL;
  p->n = p->cap = p->oom = 0;
}
