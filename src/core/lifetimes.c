/*
 * core/lifetimes.c -- what a program's ops do with the step's buffers
 * (lifetimes.h): which views each op uses and how, the first and last op
 * of each (the plan's lifetimes, the poison check's spans), and the places
 * of a kind's per-layer values in one region from their live ranges -- the
 * planner's sharing, derived as ggml's allocator derives a graph's from
 * its tensors' uses, not written by hand.
 */
#include "lifetimes.h"

#include <stdlib.h>
#include <string.h>

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
  u->use(u->ctx, CL_BUF_JOIN, -1, 0); /* forward's, and backward's recomputed gates */
  u->use(u->ctx, CL_BUF_JOIN_W, -1, 0);
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

