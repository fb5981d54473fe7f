/*
 * core/conv_calls.c -- the step's convolution calls, enumerated (see
 * conv_calls.h). A training step's are read off its programs (program.h):
 * each op's calls, with the same shape helpers the executor calls
 * (cl_conv_input_half, cl_conv_hidden_half, cl_conv_joined, cl_conv_head), so a shape is
 * one fact; the steps of a layer's segment and its recomputed chunks of
 * equal length are counted, not walked, and a step's equal micro-batches
 * are one program counted as often. Inference runs step by step
 * (forward.c): its calls are counted per layer from the stacks it runs.
 */
#include "conv_calls.h"

#include "program.h" /* the training step as ops */

#include <stdint.h> /* INT32_MAX */
#include <stdlib.h>

typedef struct walk {
  const cl_model *m;
  const cl_schedule *g;
  cl_conv_list *out;
} walk;

static int same_shape(const cl_conv_shape *a, const cl_conv_shape *b) {
  return a->N == b->N && a->C == b->C && a->H == b->H && a->W == b->W && a->K == b->K &&
         a->kh == b->kh && a->kw == b->kw && a->dh == b->dh && a->dw == b->dw &&
         a->dtype == b->dtype && cl_conv_groups(a) == cl_conv_groups(b);
}

/* count calls of s in direction d (none when count or N is 0) */
static void add(walk *w, cl_conv_dir d, int layer, int half, cl_conv_shape s, int64_t images,
                int64_t count) {
  cl_conv_list *o = w->out;
  if (count <= 0 || images <= 0) return;
  for (int i = 0; i < o->n; i++)
    if (o->v[i].dir == d && o->v[i].layer == layer && o->v[i].half == half &&
        o->v[i].images == images && same_shape(&o->v[i].s, &s)) {
      o->v[i].count += count;
      return;
    }
  cl_conv_call *v = cl_grow(o->v, &o->cap, o->n, sizeof *v);
  if (!v) {
    o->oom = 1;
    return;
  }
  o->v = v;
  cl_conv_call c = {d, layer, half, s, images, count};
  o->v[o->n++] = c;
}

/* layer l's input half (0) or hidden half (1) over n images (the shape's
 * N is 0 where n overflows an int) */
static int images_of(int64_t n) { return n > INT32_MAX ? 0 : (int)n; }
static void add_x(walk *w, cl_conv_dir d, int l, int64_t n, int64_t count) {
  if (!w->m->layer[l].in) return; /* a layer reading nothing has no input half */
  add(w, d, l, 0, cl_conv_input_half(&w->m->layer[l], w->g, images_of(n)), n, count);
}
static void add_h(walk *w, cl_conv_dir d, int l, int64_t n, int64_t count) {
  add(w, d, l, 1, cl_conv_hidden_half(&w->m->layer[l], w->g, images_of(n)), n, count);
}

/* cl_forward_steps: k steps of layer l from a step s0 (first: s0 == 0,
 * where the hidden half runs only with a state before the segment). A
 * joined layer (cl_layer_joins) runs one convolution a step over [h, x],
 * counted as its hidden half, and its input's step alone without a state. */
static void fwd_steps(walk *w, int l, int b, int k, int first, int prev, int64_t x) {
  const int alone = first && !prev;
  if (cl_layer_joins(w->m, l, w->g)) {
    add_x(w, CL_CONV_FORWARD, l, b, x * alone);
    add(w, CL_CONV_FORWARD, l, 1, cl_conv_joined(&w->m->layer[l], w->g, b), b, x * (k - alone));
    return;
  }
  add_x(w, CL_CONV_FORWARD, l, (int64_t)k * b, x);
  add_h(w, CL_CONV_FORWARD, l, b, x * (k - alone));
}

/* recompute_gates: len steps in chunks of rc from step 0; the first
 * chunk k1 (the one with step 0), then `full` more of rc, then one of rem. */
static void chunks_of(const cl_schedule *g, int len, int *k1, int *full, int *rem) {
  *k1 = len < g->rc ? len : g->rc;
  *full = (len - *k1) / g->rc;
  *rem = (len - *k1) % g->rc;
}

/* forward_layer over a segment of len steps from step 0 */
static void fwd_layer(walk *w, int l, int b, int len, int prev, int64_t x) {
  if (!w->g->rc) {
    fwd_steps(w, l, b, len, 1, prev, x);
    return;
  }
  int k1, full, rem;
  chunks_of(w->g, len, &k1, &full, &rem);
  fwd_steps(w, l, b, k1, 1, prev, x);
  fwd_steps(w, l, b, w->g->rc, 0, prev, x * full);
  fwd_steps(w, l, b, rem, 0, prev, x);
}

static void fwd_segment(walk *w, int b, int len, int prev, int64_t x) {
  for (int l = 0; l < w->m->cfg.n_layers; l++) fwd_layer(w, l, b, len, prev, x);
}

/* backward_layer: len steps, the last `done` of which already ran through
 * the cell (free-running); carry: a later segment's dz reaches back */
static void bwd_layer(walk *w, int l, int b, int len, int done, int prev, int carry, int64_t x) {
  int run = len - done;
  add_h(w, CL_CONV_BACKWARD_DATA, l, b, x * (carry + (done > 0) + (run > 1 ? run - 1 : 0)));
  add_h(w, CL_CONV_BACKWARD_FILTER, l, (int64_t)(len - 1) * b, x);
  add_h(w, CL_CONV_BACKWARD_FILTER, l, b, x * prev);
  add_x(w, CL_CONV_BACKWARD_FILTER, l, (int64_t)len * b, x);
  if (l > 0) add_x(w, CL_CONV_BACKWARD_DATA, l, (int64_t)run * b, x);
}

/* backward_layer_chunks' chunk of k steps: its gates again (forward), the
 * cell's gradient back through its steps, then chunk_grads */
static void bwd_chunk(walk *w, int l, int b, int k, int first, int prev, int64_t x) {
  if (k < 1) return;
  fwd_steps(w, l, b, k, first, prev, x);
  add_h(w, CL_CONV_BACKWARD_DATA, l, b, x * (k - first));
  add_h(w, CL_CONV_BACKWARD_FILTER, l, (int64_t)(k - first) * b, x);
  add_h(w, CL_CONV_BACKWARD_FILTER, l, b, x * (first && prev));
  add_x(w, CL_CONV_BACKWARD_FILTER, l, (int64_t)k * b, x);
  if (l > 0) add_x(w, CL_CONV_BACKWARD_DATA, l, (int64_t)k * b, x);
}

/* backward.c's backward_piece: layer l whole, or in recomputed chunks */
static void bwd_piece(walk *w, int l, int b, int len, int prev, int carry, int64_t x) {
  if (!w->g->rc) {
    bwd_layer(w, l, b, len, 0, prev, carry, x);
    return;
  }
  int k1, full, rem;
  chunks_of(w->g, len, &k1, &full, &rem);
  add_h(w, CL_CONV_BACKWARD_DATA, l, b, x * carry);
  bwd_chunk(w, l, b, k1, 1, prev, x);
  bwd_chunk(w, l, b, w->g->rc, 0, prev, x * full);
  bwd_chunk(w, l, b, rem, 0, prev, x);
}

/* The fed-back steps of free running (forward.c cl_forward_free_run,
 * backward.c cl_backward_free_run): each through every layer, one step per
 * call; a fed-back step that reads the true frame sends no gradient into
 * the frame it replaced (layer 0's input). */
static void free_forward(walk *w, int b, int prev, int64_t x) {
  const cl_schedule *g = w->g;
  int tin = g->T - g->horizon + 1, fed = g->horizon - 1;
  fwd_segment(w, b, tin, prev, x);
  for (int l = 0; l < w->m->cfg.n_layers; l++) fwd_steps(w, l, b, 1, 0, prev, x * fed);
}
static void free_backward(walk *w, int b, int prev, const int *truth, int64_t x) {
  const cl_schedule *g = w->g;
  int fed = g->horizon - 1, own = fed;
  for (int k = 0; truth && k < fed; k++) own -= truth[k] != 0;
  for (int l = 0; l < w->m->cfg.n_layers; l++) {
    add_h(w, CL_CONV_BACKWARD_DATA, l, b, x * (fed - 1));
    add_x(w, CL_CONV_BACKWARD_DATA, l, b, x * (l > 0 ? fed : own));
    bwd_layer(w, l, b, g->T, fed, prev, 0, x);
  }
}

/* Layer l's part of the head (half 2) over n images. */
static void head(walk *w, cl_conv_dir d, int l, int64_t n, int64_t count) {
  add(w, d, l, 2, cl_conv_head(w->m, l, w->g, images_of(n)), n, count);
}

/* The calls of op o of a micro-batch of b sequences, x of them. */
static void op_calls(walk *w, const cl_op *o, int b, const int *truth, int64_t x) {
  const cl_arch *a = &w->m->arch;
  int prev = o->before.at != CL_AT_ZERO;
  int64_t n = (int64_t)o->len * b;
  switch (o->kind) {
  case CL_OP_FORWARD:
    for (int l = o->lo; l < o->hi; l++) fwd_layer(w, l, b, o->len, prev, x);
    return;
  case CL_OP_FORWARD_FREE: free_forward(w, b, prev, x); return;
  case CL_OP_HEAD_FORWARD:
    for (int l = a->head_lo; l < a->head_hi; l++) head(w, CL_CONV_FORWARD, l, n, x);
    return;
  case CL_OP_LOSS_SEGMENT: /* a single stack's head: forward, backward into its layer */
    if (!cl_arch_has_head(a)) return;
    head(w, CL_CONV_FORWARD, a->head_lo, n, x);
    head(w, CL_CONV_BACKWARD_DATA, a->head_lo, n, x);
    head(w, CL_CONV_BACKWARD_FILTER, a->head_lo, n, x);
    return;
  case CL_OP_HEAD_BACKWARD:
    head(w, CL_CONV_BACKWARD_DATA, o->lo, n, x);
    head(w, CL_CONV_BACKWARD_FILTER, o->lo, n, x);
    return;
  case CL_OP_RECEIVE: add_h(w, CL_CONV_BACKWARD_DATA, o->hi, b, x); return;
  case CL_OP_BACKWARD: bwd_piece(w, o->lo, b, o->len, prev, o->carry_in, x); return;
  case CL_OP_BACKWARD_FREE: free_backward(w, b, prev, truth, x); return;
  default: return; /* no convolution */
  }
}

/* A micro-batch's program (program.h, in summary: its ops count the equal
 * segments they stand for), x of them. */
static void micro_batch(walk *w, int b, int final, cl_target target, const int *truth,
                        int64_t x) {
  cl_program p = {0};
  if (x <= 0) return;
  if (cl_program_summary(&w->m->arch, w->m->cfg.n_layers, w->g, target, b, final, &p) != CL_OK)
    w->out->oom = 1;
  for (int i = 0; i < p.n; i++) op_calls(w, &p.v[i], b, truth, x * p.v[i].times);
  cl_program_free(&p);
}

/* inference (forward.c): step by step, each layer both halves over the
 * batch: a stack over its steps (the input's T, the target's horizon), a
 * stack rolling forward past its input (no stack runs the target) over
 * the horizon's fed-back frames too; the hidden half from the first step
 * only with a state before it (the call's, or the stack's it follows); the
 * head over each kept output and each predicted frame. */
static void inference(walk *w) {
  const cl_schedule *g = w->g;
  const cl_arch *a = &w->m->arch;
  int fed = cl_arch_runs_target(a) || g->horizon < 2 ? 0 : g->horizon - 1;
  for (int l = 0; l < w->m->cfg.n_layers; l++) {
    int si = cl_arch_stack_of(a, l);
    const cl_stack *st = &a->stack[si];
    int from = st->state_from >= 0 || g->state != CL_STATE_ZERO;
    int64_t steps = cl_arch_steps(a, si, g->T, g->horizon) + (st->steps == CL_STEPS_INPUT ? fed : 0);
    add_x(w, CL_CONV_FORWARD, l, g->B, steps);
    add_h(w, CL_CONV_FORWARD, l, g->B, steps - !from);
  }
  int64_t outs = (g->outputs == CL_OUTPUTS_ALL ? g->T : 0) + g->horizon;
  for (int l = a->head_lo; l < a->head_hi; l++) head(w, CL_CONV_FORWARD, l, g->B, outs);
}

cl_status cl_conv_calls(const cl_model *m, const cl_schedule *g, cl_target target, const int *truth,
                        cl_conv_list *out) {
  walk w = {m, g, out};
  int last, nb = cl_micro_batches(g, &last);
  if (!g->training) {
    inference(&w);
  } else { /* micro-batches of Bm, the last (the final one) of `last` */
    micro_batch(&w, g->Bm, 0, target, truth, nb - 1);
    micro_batch(&w, last, 1, target, truth, 1);
  }
  return out->oom ? CL_E_OOM : CL_OK;
}

void cl_conv_list_free(cl_conv_list *l) {
  if (!l) return;
  free(l->v);
  l->v = NULL;
  l->n = l->cap = l->oom = 0;
}
