/*
 * core/plan.c -- the geometry of a call (how many steps and sequences are
 * held at once, given checkpointing, truncation and accumulation) and the
 * memory plan it implies (see plan.h). Pure: it reads the model's
 * configuration and asks the backend for workspace sizes, and allocates
 * nothing on the device. The sizes and arena offsets written here are what
 * step.c takes, so estimate and measurement agree to the byte.
 */
#include "plan.h"

#include "conv_calls.h" /* cl_conv_calls */
#include "lifetimes.h"  /* the step's ops, their buffers' lifetimes and places */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a, b > 0; (a + b - 1) / b would overflow for a batch near INT_MAX split
 * into as many micro-batches, and divide by the zero it wraps to */
static int ceil_div(int a, int b) { return a / b + (a % b != 0); }

/* The call's shape and options, before any schedule is made of them. */
static cl_status schedule_check(cl_model *m, int B, int T, int H, int W, int training,
                                const cl_step_options *o) {
  if (B < 1 || T < 1 || H < 1 || W < 1)
    return cl_fail(m, CL_E_INVALID, "batch, steps, height and width must be positive");
  if (m->cfg.peephole == CL_PEEP_POSITION && (H != m->cfg.peephole_h || W != m->cfg.peephole_w))
    return cl_fail(m, CL_E_INVALID,
                   "frames of %d x %d pixels: the model's per-position peepholes fix the frame "
                   "size to %d x %d",
                   H, W, m->cfg.peephole_h, m->cfg.peephole_w);
  if (o->checkpoint < 0 || o->tbptt < 0 || o->accumulation_steps < 0 || o->recompute_gates < 0)
    return cl_fail(m, CL_E_INVALID,
                   "checkpoint, tbptt, accumulation_steps and recompute_gates must be >= 0");
  if (o->outputs != CL_OUTPUTS_ALL && o->outputs != CL_OUTPUTS_LAST)
    return cl_fail(m, CL_E_INVALID, "unknown outputs mode %d", (int)o->outputs);
  if (o->plan_dtype < 0 || o->plan_dtype > 1 + CL_BF16)
    return cl_fail(m, CL_E_INVALID, "unknown dtype %d", o->plan_dtype - 1);
  if (o->state_mode < CL_STATE_ZERO || o->state_mode > CL_STATE_CARRY)
    return cl_fail(m, CL_E_INVALID, "unknown state mode %d", (int)o->state_mode);
  if (o->state_mode == CL_STATE_CARRY && !training)
    return cl_fail(m, CL_E_INVALID, "state = \"carry\" applies to train_step only");
  if (o->horizon < 0 || (training && o->horizon > T && !cl_arch_runs_target(&m->arch)))
    return cl_fail(m, CL_E_INVALID, "horizon must be >= 0 and, in training, at most the %d steps",
                   T);
  if (o->horizon > 0 && !cl_arch_runs_target(&m->arch) && !cl_arch_has_head(&m->arch) &&
      m->layer[m->cfg.n_layers - 1].hidden != m->cfg.input_dim)
    return cl_fail(m, CL_E_INVALID,
                   "horizon: the last layer's hidden size (%d) must equal the input channels "
                   "(%d), since each predicted frame is fed back as the next input",
                   m->layer[m->cfg.n_layers - 1].hidden, m->cfg.input_dim);
  if (o->horizon > 0 && T > INT32_MAX - o->horizon)
    return cl_fail(m, CL_E_INVALID, "horizon: %d + %d steps overflow", T, o->horizon);
  if (o->weight && o->weight->ndim != 4 && o->weight->ndim != 5)
    return cl_fail(m, CL_E_INVALID, "weight must have 4 or 5 dimensions, as the target");
  return CL_OK;
}

/* A training call's schedule: free running, micro-batches, checkpoint
 * segments or tbptt windows, recomputed chunks, the loss weight's steps. */
static cl_status schedule_training(cl_model *m, const cl_step_options *o, cl_schedule *g) {
  const int B = g->B;
  /* stacks handing states on (program.c) hold S steps of each: segments of
   * a stack's own steps (the input's or the target's), S the longest */
  const int T = cl_arch_runs_target(&m->arch) && g->horizon > g->T ? g->horizon : g->T;
  int ck = o->checkpoint > 0 && o->checkpoint < T, tb = o->tbptt > 0 && o->tbptt < T;
  g->S = T;
  if (ck && tb)
    return cl_fail(m, CL_E_INVALID, "checkpoint and tbptt cannot be combined: use one of them");
  /* free-running: the fed-back steps interleave the layers, which neither
   * checkpoint segments nor truncation windows schedule */
  if (o->free_run && o->horizon > 0 && (ck || tb))
    return cl_fail(m, CL_E_INVALID,
                   "training without teacher forcing cannot be combined with checkpoint or tbptt");
  g->free_run = o->free_run && o->horizon > 1;
  /* the fed-back steps' backward reads their gates step by step across the
   * layers (backward.c roll_back_step): no chunk of one layer covers them */
  if (g->free_run && o->recompute_gates)
    return cl_fail(m, CL_E_INVALID,
                   "training without teacher forcing cannot be combined with recompute_gates");
  if (o->accumulation_steps > B)
    return cl_fail(m, CL_E_INVALID, "accumulation_steps (%d) exceeds the batch size (%d)",
                   o->accumulation_steps, B);
  if (o->accumulation_steps > 1) g->Bm = ceil_div(B, o->accumulation_steps);
  if (ck) {
    g->S = o->checkpoint;
    g->nseg = ceil_div(T, g->S); /* a wired step: the longest stack's */
  } else if (tb) {
    g->S = o->tbptt;
    g->tbptt = 1;
  }
  if (o->recompute_gates) g->rc = o->recompute_gates < g->S ? o->recompute_gates : g->S;
  /* a sequence's weight, as its target, covers at most a segment's steps,
   * with a horizon only its last `horizon` (place_target in backward.c):
   * the most any segment (or window) holds of them -- the last one's, or
   * where the horizon reaches past it, the one before's */
  if (o->weight && cl_arch_runs_target(&m->arch)) { /* the K target frames at once */
    g->weight_steps = g->horizon;
  } else if (o->weight) {
    int K = g->horizon ? g->horizon : g->T, last = g->T - (ceil_div(g->T, g->S) - 1) * g->S;
    int before = K - last < g->S ? K - last : g->S;
    g->weight_steps = o->weight->ndim != 5 ? 1 : K <= last ? K : last > before ? last : before;
  }
  return CL_OK;
}

cl_status cl_schedule_make(cl_model *m, int B, int T, int H, int W, int training,
                           const cl_step_options *o, cl_schedule *g) {
  static const cl_step_options none;
  if (!o) o = &none;
  memset(g, 0, sizeof *g);
  CL_TRY(schedule_check(m, B, T, H, W, training, o));
  g->B = B; g->T = T; g->H = H; g->W = W;
  g->training = training ? 1 : 0;
  g->dtype = o->plan_dtype ? (cl_dtype)(o->plan_dtype - 1) : m->cfg.dtype;
  g->layout = m->layout;
  g->Bm = B;
  g->S = T;
  g->nseg = 1;
  g->state = o->state_mode;
  g->state_B = B;
  g->horizon = o->horizon; /* training: the target is the last `horizon` steps */
  if (training) return schedule_training(m, o, g);
  g->outputs = o->horizon ? CL_OUTPUTS_LAST : o->outputs; /* the frames are the output */
  return CL_OK;
}

void cl_schedule_target(const cl_model *m, cl_target target, cl_schedule *g) {
  /* a layer below would read the whole sequence of its d_hidden, and a
   * horizon (sequence targets only) fills every step of it */
  g->dh_one = g->training && target == CL_TARGET_LAST_STATE && m->cfg.n_layers == 1 &&
              !g->free_run;
}

size_t cl_state_bytes(const cl_model *m, int B, int H, int W, cl_dtype t) {
  size_t n = 0, P = cl_mul_size((size_t)H, (size_t)W);
  for (int l = 0; l < m->cfg.n_layers; l++) {
    size_t e = cl_mul_size(cl_mul_size(2 * cl_dtype_size(t), (size_t)B),
                           cl_mul_size((size_t)m->layer[l].hidden, P));
    if (e == 0 || n + e < n) return 0;
    n += e;
  }
  return n;
}

typedef struct plan_builder {
  cl_plan *p;
  int cap;
  int overflow;
  cl_status backend; /* a failed workspace query: its status (the reason in be->err) */
  int dc_apart; /* layers' d_cell values live at once: one each, else one for all */
} plan_builder;

#define NAME_MODEL_(kind, name, other) [CL_BUF_##kind] = {name, other, #kind},
#define NAME_STEP_(kind, field, name, other, per, dt) [CL_BUF_##kind] = {name, other, #kind},
static const char *const BUF_NAME[CL_BUF_NKIND][3] = {CL_MODEL_BUFFERS(NAME_MODEL_)
                                                         CL_STEP_BUFFERS(NAME_STEP_)};
#undef NAME_MODEL_
#undef NAME_STEP_

const char *cl_buffer_name(int kind, cl_bufname which) {
  if (kind < 0 || kind >= CL_BUF_NKIND || which < CL_BUFNAME_ROW || which > CL_BUFNAME_KIND)
    return NULL;
  return BUF_NAME[kind][which];
}

/* A row of the plan, named by the table (other: its other name). */
static void add_row(plan_builder *b, int kind, int layer, cl_mem_category cat, size_t bytes,
                    int other) {
  const char *name = BUF_NAME[kind][other];
  cl_plan_entry *grown = cl_grow(b->p->entries, &b->cap, b->p->n, sizeof *grown);
  if (!grown) {
    b->overflow = 1; /* reported as a failed plan either way */
    return;
  }
  b->p->entries = grown;
  cl_plan_entry *e = &b->p->entries[b->p->n++];
  memset(e, 0, sizeof *e);
  if (layer >= 0)
    snprintf(e->name, sizeof e->name, "%s[%d]", name, layer);
  else
    snprintf(e->name, sizeof e->name, "%s", name);
  e->category = cat;
  e->bytes = bytes;
  e->kind = kind;
  e->layer = layer;
  b->p->by_category[cat] += bytes;
  b->p->total += bytes;
}

static void add(plan_builder *b, int kind, int layer, cl_mem_category cat, size_t bytes) {
  add_row(b, kind, layer, cat, bytes, 0);
}

/* Product of dims times element size, remembering overflow. */
static size_t nbytes(plan_builder *b, size_t elt, size_t d0, size_t d1, size_t d2, size_t d3) {
  size_t n = cl_mul_size(cl_mul_size(cl_mul_size(cl_mul_size(elt, d0), d1), d2), d3);
  if (n == 0 && elt && d0 && d1 && d2 && d3) b->overflow = 1;
  return n;
}

static size_t ws_of(plan_builder *b, const cl_model *m, size_t cur, cl_conv_shape s,
                    cl_conv_dir dir) {
  if (s.N <= 0 || b->backend != CL_OK) return cur;
  size_t w = 0;
  b->backend = cl_backend_conv_workspace(m->be, &s, dir, &w);
  return w > cur ? w : cur;
}

/* Workspace: the largest any convolution of the call asks for in its own
 * direction, over the calls the executor makes (conv_calls.c): an
 * inference forward's, forward calls only. The plan does not know the
 * target: a sequence target's calls include a last-state target's (tbptt
 * runs every window backward, not only the last), and without scheduled
 * sampling's flags every fed-back frame is the model's own. */
static size_t plan_workspace(plan_builder *b, const cl_model *m, const cl_schedule *g) {
  size_t ws = 0;
  cl_conv_list calls = {0};
  if (cl_conv_calls(m, g, CL_TARGET_SEQUENCE, NULL, &calls) != CL_OK) b->overflow = 1;
  for (int i = 0; i < calls.n; i++) {
    if (calls.v[i].images > INT32_MAX) b->overflow = 1; /* N is an int */
    ws = ws_of(b, m, ws, calls.v[i].s, calls.v[i].dir);
  }
  cl_conv_list_free(&calls);
  return ws;
}

static void plan_model_buffers(plan_builder *b, const struct cl_model *m, const cl_schedule *g,
                               const cl_optim *opt) {
  int training = g->training;
  size_t pb = nbytes(b, sizeof(float), m->n_params, 1, 1, 1);
  add(b, CL_BUF_PARAMS, -1, CL_MEM_PARAMETERS, pb);
  if (m->be->iface->scratch_bytes)
    add(b, CL_BUF_BACKEND, -1, CL_MEM_WORKSPACE, m->be->iface->scratch_bytes);
  if (training || m->grads) add(b, CL_BUF_GRADS, -1, CL_MEM_GRADIENTS, pb);
  cl_optim_kind kind = opt ? opt->kind : m->opt_kind;
  int adam = cl_optim_is_adam(kind), rms = kind == CL_OPTIM_RMSPROP;
  int has_m = opt ? cl_optim_keeps(opt, CL_OPT_STATE_M) : m->opt_m != NULL;
  if (has_m && rms)
    add(b, CL_BUF_RMS_MOM, -1, CL_MEM_OPTIMIZER, pb);
  else if (has_m)
    add_row(b, CL_BUF_OPT_M, -1, CL_MEM_OPTIMIZER, pb, !adam);
  if ((adam || rms) && (opt || m->opt_v))
    add(b, rms ? CL_BUF_RMS_SQ : CL_BUF_OPT_V, -1, CL_MEM_OPTIMIZER, pb);
  if (opt ? cl_optim_keeps(opt, CL_OPT_STATE_VMAX) : m->opt_vmax != NULL)
    add(b, rms ? CL_BUF_RMS_GAVG : CL_BUF_OPT_VMAX, -1, CL_MEM_OPTIMIZER, pb);
  /* the state a carrying step holds, or will hold (as state.c sizes it) */
  if (m->held || g->state == CL_STATE_CARRY) {
    size_t sb = m->held ? m->held_bytes : cl_state_bytes(m, g->B, g->H, g->W, g->dtype);
    if (sb == 0) b->overflow = 1;
    add(b, CL_BUF_HELD, -1, CL_MEM_STATES, sb);
  }
}

/* A given initial state: h and c of every layer for the batch, or for a
 * split step's thread's share of it. */
static void plan_given_state(plan_builder *b, const struct cl_model *m, const cl_schedule *g) {
  if (g->state != CL_STATE_GIVEN) return;
  size_t e = cl_dtype_size(g->dtype), P = (size_t)g->H * g->W;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    size_t n = nbytes(b, e, (size_t)g->state_B, (size_t)m->layer[l].hidden, P, 1);
    add(b, CL_BUF_INIT_H, l, CL_MEM_STATES, n);
    add(b, CL_BUF_INIT_C, l, CL_MEM_STATES, n);
  }
}

static int max_hidden(const struct cl_model *m) {
  int h = 0;
  for (int l = 0; l < m->cfg.n_layers; l++)
    if (m->layer[l].hidden > h) h = m->layer[l].hidden;
  return h;
}

/* A head's output over S steps of Bm sequences, in training also its
 * target-then-gradient (float). */
static void plan_head(plan_builder *b, const struct cl_model *m, const cl_schedule *g, size_t S,
                      size_t Bm) {
  size_t C = (size_t)m->arch.frame_dim, P = (size_t)g->H * g->W;
  add(b, CL_BUF_HEAD_OUT, -1, CL_MEM_ACTIVATIONS, nbytes(b, cl_dtype_size(g->dtype), S, Bm, C, P));
  if (g->training)
    add(b, CL_BUF_HEAD_GRAD, -1, CL_MEM_WORKSPACE, nbytes(b, sizeof(float), S, Bm, C, P));
}

static void plan_inference(plan_builder *b, const struct cl_model *m, const cl_schedule *g) {
  size_t e = cl_dtype_size(g->dtype), P = (size_t)g->H * g->W, B = (size_t)g->B;
  add(b, CL_BUF_X, -1, CL_MEM_DATA, nbytes(b, e, B, (size_t)cl_cfg_frame_dim(&m->cfg), P, 1));
  add(b, CL_BUF_GATES, -1, CL_MEM_WORKSPACE, nbytes(b, e, B, 4 * (size_t)max_hidden(m), P, 1));
  int all = g->outputs == CL_OUTPUTS_ALL;
  if (g->horizon > 0) /* inference only: in training the target fills d_hidden */
    add(b, CL_BUF_FRAMES, -1, CL_MEM_ACTIVATIONS,
        nbytes(b, e, (size_t)g->horizon, B, (size_t)cl_cfg_frame_dim(&m->cfg), P));
  for (int l = 0; l < m->cfg.n_layers; l++) {
    size_t h = (size_t)m->layer[l].hidden;
    add(b, CL_BUF_CELL, l, CL_MEM_STATES, nbytes(b, e, 2, B, h, P));
    if (all)
      add(b, CL_BUF_HID, l, CL_MEM_ACTIVATIONS, nbytes(b, e, (size_t)g->T, B, h, P));
    else
      add(b, CL_BUF_HID, l, CL_MEM_STATES, nbytes(b, e, 2, B, h, P));
  }
  /* a head over a stack of the input's steps gives every step's output (over
   * one of the target's steps, the frames are the horizon's, above) */
  if (all && cl_arch_has_head(&m->arch) && !cl_arch_runs_target(&m->arch))
    plan_head(b, m, g, (size_t)g->T, B);
}

/* Dropout (dropout.c): each layer's masks ([Bm, G, C, H, W], G = 4 per
 * gate, else 1), and one buffer for the masked copy of whichever layer
 * runs, each G times: its input over S steps; its h over S - 1 steps
 * (backward's filter gradient reads steps 0 .. S - 2 against dz of
 * 1 .. S - 1), or one step (h before a step, or before a segment); or a
 * float gradient before its masks: of one step's h wherever a gradient
 * crosses steps (S > 1, checkpoint segments, free-running: of its input
 * too), and with per-gate masks of a layer's input over S steps (the G
 * copies' gradients before they are gathered; layer 0's input has none).
 * Measured against what the step touches in
 * tests/testthat/test-memory-measured.R. */
static void plan_dropout(plan_builder *b, const struct cl_model *m, const cl_schedule *g) {
  size_t e = cl_dtype_size(g->dtype), f = sizeof(float), P = (size_t)g->H * g->W;
  size_t Bm = (size_t)g->Bm, S = (size_t)g->S, most = 0;
  size_t h_steps = S > 1 ? S - 1 : 1;
  int h_grad = S > 1 || g->nseg > 1 || g->free_run;
  /* recomputing the gates, forward and backward mask a chunk at a time:
   * its rc inputs, the rc h before them (one chunk: S - 1) */
  if (g->rc) {
    size_t rc = (size_t)g->rc;
    if (h_steps > rc) h_steps = rc;
    if (S > rc) S = rc;
  }
  /* the per-gate input gradients run batched over the steps before the
   * fed-back ones (free-running: those after step by step) */
  size_t gin_steps = g->free_run ? (size_t)(g->T - g->horizon + 1) : S;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    const cl_layer *L = &m->layer[l];
    size_t in = (size_t)L->groups_x * L->in, h = (size_t)L->groups_h * L->hidden, n;
    if (cl_layer_drops_input(m, l)) {
      add(b, CL_BUF_MASK_X, l, CL_MEM_ACTIVATIONS, nbytes(b, f, Bm, in, P, 1));
      if ((n = nbytes(b, e, S, Bm, in, P)) > most) most = n;
      if (g->free_run && (n = nbytes(b, f, Bm, in, P, 1)) > most) most = n;
      if (L->groups_x > 1 && l > 0 && (n = nbytes(b, f, gin_steps, Bm, in, P)) > most) most = n;
    }
    if (cl_layer_drops_hidden(m, l)) {
      add(b, CL_BUF_MASK_H, l, CL_MEM_ACTIVATIONS, nbytes(b, f, Bm, h, P, 1));
      if ((n = nbytes(b, e, h_steps, Bm, h, P)) > most) most = n;
      if (h_grad && (n = nbytes(b, f, Bm, h, P, 1)) > most) most = n;
    }
  }
  if (most) add(b, CL_BUF_DROPPED, -1, CL_MEM_WORKSPACE, most);
  if (most) add(b, CL_BUF_SEED, -1, CL_MEM_DATA, sizeof(uint64_t));
}

/* How much of each buffer a training step's program holds at once, read
 * off its ops: each layer's steps (the longest segment, window or stack
 * it runs), checkpoint slots, whether it carries dz across segments or
 * hands a state's gradient on; x's steps, the head's output's steps, a
 * carried window state, free running's fed-back steps. */
typedef struct extents {
  int steps[CL_MAX_LAYERS], ckpt[CL_MAX_LAYERS], dz_carry[CL_MAX_LAYERS], hand_c[CL_MAX_LAYERS];
  int x_steps, head_steps, most, carry, roll;
  int dh_rows; /* d_hidden's channels per step: its layers as the program places them */
} extents;

static int imax(int a, int b) { return a > b ? a : b; }

static void extents_of_op(extents *x, const cl_op *o, const cl_arch *a, int n_layers) {
  int lo = o->lo, hi = o->hi;
  if (o->kind == CL_OP_FORWARD_FREE) lo = 0, hi = n_layers;
  if (o->kind == CL_OP_FORWARD || o->kind == CL_OP_FORWARD_FREE) {
    for (int l = lo; l < hi; l++) x->steps[l] = imax(x->steps[l], o->len);
    x->most = imax(x->most, o->len);
    if (o->x_at >= 0) x->x_steps = imax(x->x_steps, o->x_at + o->len);
  }
  x->carry |= o->before.at == CL_AT_CARRY || o->to.at == CL_AT_CARRY;
  switch (o->kind) {
  case CL_OP_PUT_X: x->x_steps = imax(x->x_steps, o->len); break;
  case CL_OP_SAVE_END:
    for (int l = lo; o->to.at == CL_AT_CKPT && l < hi; l++)
      x->ckpt[l] = imax(x->ckpt[l], o->to.slot + 1);
    break;
  case CL_OP_BACKWARD: x->dz_carry[lo] |= o->carry_in || o->save_carry; break;
  case CL_OP_BACKWARD_FREE: x->roll = 1; break;
  case CL_OP_HAND_C: x->hand_c[hi] = 1; break;
  case CL_OP_HEAD_FORWARD: x->head_steps = imax(x->head_steps, o->t0 + o->len); break;
  case CL_OP_LOSS_SEGMENT: /* a single stack's head over the segment */
    if (cl_arch_has_head(a)) x->head_steps = imax(x->head_steps, o->len);
    break;
  default: break;
  }
}

/* A training step, sized from its program's extents: the input frames;
 * each layer's gates (with recompute_gates one chunk for all), c and h
 * over its steps, its checkpoints, its dz_carry, its d_cell when the
 * layers' live at once, free running's ring below the last, a window's
 * carried state; the d_cell each layer hands back to the stack it started
 * from; one d_hidden for the layers in turn; dropout's masks and masked
 * copies; a head's output and its target-then-gradient; the loss weight. */
static void plan_training(plan_builder *b, const struct cl_model *m, const cl_schedule *g,
                          const extents *x) {
  size_t e = cl_dtype_size(g->dtype), f = sizeof(float), P = (size_t)g->H * g->W;
  size_t Bm = (size_t)g->Bm, hmax = (size_t)max_hidden(m), most = (size_t)x->most;
  int top = m->cfg.n_layers - 1;
  add(b, CL_BUF_X, -1, CL_MEM_DATA,
      nbytes(b, e, (size_t)x->x_steps, Bm, (size_t)m->arch.frame_dim, P));
  if (g->rc) /* one chunk of steps, any layer's (forward.c, backward.c) */
    add_row(b, CL_BUF_GATES, -1, CL_MEM_ACTIVATIONS,
            nbytes(b, e, (size_t)g->rc, Bm, 4 * hmax, P), 1);
  for (int l = 0; l <= top; l++) {
    size_t h = (size_t)m->layer[l].hidden, S = (size_t)x->steps[l], n = (size_t)x->ckpt[l];
    if (!g->rc) add(b, CL_BUF_GATES, l, CL_MEM_ACTIVATIONS, nbytes(b, e, S, Bm, 4 * h, P));
    add(b, CL_BUF_CELL, l, CL_MEM_ACTIVATIONS, nbytes(b, e, S, Bm, h, P));
    add(b, CL_BUF_HID, l, CL_MEM_ACTIVATIONS, nbytes(b, e, S, Bm, h, P));
    if (n) {
      add(b, CL_BUF_CKPT_H, l, CL_MEM_ACTIVATIONS, nbytes(b, e, n, Bm, h, P));
      add(b, CL_BUF_CKPT_C, l, CL_MEM_ACTIVATIONS, nbytes(b, e, n, Bm, h, P));
    }
    if (x->dz_carry[l]) add(b, CL_BUF_DZ_CARRY, l, CL_MEM_WORKSPACE, nbytes(b, e, Bm, 4 * h, P, 1));
    if (b->dc_apart) add(b, CL_BUF_DC, l, CL_MEM_WORKSPACE, nbytes(b, f, Bm, h, P, 1));
    if (x->roll && l < top) /* the fed-back steps interleave the layers */
      add(b, CL_BUF_DH_ROLL, l, CL_MEM_WORKSPACE, nbytes(b, f, g->horizon > 2 ? 2 : 1, Bm, h, P));
    if (x->carry) {
      add(b, CL_BUF_CARRY_H, l, CL_MEM_STATES, nbytes(b, e, Bm, h, P, 1));
      add(b, CL_BUF_CARRY_C, l, CL_MEM_STATES, nbytes(b, e, Bm, h, P, 1));
    }
  }
  /* a joined layer's step input and weights (forward.c), the largest layer's */
  size_t join = 0, join_w = 0;
  for (int l = 0; l <= top; l++) {
    const cl_layer *L = &m->layer[l];
    if (!cl_layer_joins(m, l, g)) continue;
    size_t c = (size_t)L->hidden + L->in, n;
    if ((n = nbytes(b, e, Bm, c, P, 1)) > join) join = n;
    if ((n = nbytes(b, f, 4 * (size_t)L->hidden, c, (size_t)L->kh * L->kw, 1)) > join_w) join_w = n;
  }
  if (join) add(b, CL_BUF_JOIN, -1, CL_MEM_WORKSPACE, join);
  if (join_w) add(b, CL_BUF_JOIN_W, -1, CL_MEM_WORKSPACE, join_w);
  for (int l = 0; l <= top; l++)
    if (x->hand_c[l])
      add(b, CL_BUF_HAND_C, l, CL_MEM_WORKSPACE,
          nbytes(b, f, Bm, (size_t)m->layer[l].hidden, P, 1));
  /* one buffer serves every layer's d_hidden, each where the program
   * places it (rows of steps x channels, < 2^62: both factors are ints) */
  size_t dh_rows = (g->dh_one ? 1 : most) * (size_t)x->dh_rows;
  if (x->roll) { /* layers below the last keep their fed-back steps in the ring */
    size_t tin = (size_t)(g->T - g->horizon + 1), up = most * (size_t)m->layer[top].hidden;
    dh_rows = up > tin * hmax ? up : tin * hmax;
  }
  add(b, CL_BUF_DH, -1, CL_MEM_WORKSPACE, nbytes(b, f, dh_rows, Bm, P, 1));
  if (!b->dc_apart) add(b, CL_BUF_DC, -1, CL_MEM_WORKSPACE, nbytes(b, f, Bm, hmax, P, 1));
  /* dropout's masks and masked copies over the longest run of steps */
  cl_schedule longest = *g;
  longest.S = x->most;
  plan_dropout(b, m, &longest);
  if (x->head_steps) plan_head(b, m, g, (size_t)x->head_steps, Bm);
  if (g->weight_steps) {
    size_t c = (size_t)cl_output_channels(m);
    add(b, CL_BUF_WEIGHT, -1, CL_MEM_DATA, nbytes(b, f, (size_t)g->weight_steps, Bm, c, P));
  }
}

/* Step buffers one after the other in the arena, each aligned, each followed
 * by `guard` bytes of guard band (CONVLSTM_GUARD=1; counted in the arena and
 * so in `reserved`, in no category). */
static void place_in_arena(plan_builder *b, size_t guard) {
  cl_plan *p = b->p;
  size_t at = 0;
  for (int i = 0; i < p->n; i++) {
    cl_plan_entry *e = &p->entries[i];
    if (!cl_buf_is_step(e->kind)) {
      p->reserved += e->bytes;
      continue;
    }
    e->in_arena = 1;
    e->offset = at;
    size_t padded = e->bytes + (CL_ARENA_ALIGN - 1);
    if (padded < e->bytes) b->overflow = 1;
    at += padded / CL_ARENA_ALIGN * CL_ARENA_ALIGN + guard;
    if (at < e->offset) b->overflow = 1;
  }
  p->arena = at;
  p->reserved += at;
  if (p->reserved < at) b->overflow = 1;
}

/* Each row's first and last op: its view's, or for a row that serves every
 * layer (layer -1) the union of theirs. */
void cl_plan_row_lifetime(const cl_plan_entry *e, const cl_lifetimes *t, int n_layers,
                          int *first, int *last) {
  *first = *last = -1;
  if (!t || !cl_buf_is_step(e->kind)) return;
  int lo = e->layer + 1, hi = e->layer >= 0 ? e->layer + 1 : n_layers;
  for (int j = lo; j <= hi; j++) {
    int f = t->first[e->kind][j], l = t->last[e->kind][j];
    if (f < 0) continue;
    if (*first < 0 || f < *first) *first = f;
    if (l > *last) *last = l;
  }
}

static void set_lifetimes(cl_plan *p, const cl_lifetimes *t, int n_layers) {
  for (int i = 0; i < p->n; i++) {
    cl_plan_entry *e = &p->entries[i];
    cl_plan_row_lifetime(e, t, n_layers, &e->first_op, &e->last_op);
  }
}

/* Each layer's view of a kind placed in one region from program p
 * (cl_program_place; units: the layer's hidden channels): its extent, -1
 * out of memory. */
static int place_views(const cl_model *m, const cl_schedule *g, const cl_program *p, int kind,
                       int *at) {
  int size[CL_MAX_LAYERS];
  for (int l = 0; l < m->cfg.n_layers; l++) size[l] = m->layer[l].hidden;
  return cl_program_place(p, &m->arch, g, m->cfg.n_layers, kind, size, at);
}

static cl_status summary_of(const cl_model *m, const cl_schedule *g, cl_program *p) {
  return cl_program_summary(&m->arch, m->cfg.n_layers, g, CL_TARGET_SEQUENCE, g->Bm, 1, p);
}

/* A training step's program in summary (its micro-batch of Bm): the extents
 * of its buffers, their lifetimes, d_hidden's places, and whether the
 * layers' d_cell values live at once (checkpoint segments and free running
 * carry each layer's across the others'): each layer keeps its own then,
 * else they take one in turn. */
static cl_status read_program(const cl_model *m, const cl_schedule *g, cl_lifetimes *t,
                              extents *x, int *dc_apart, int *dh) {
  cl_program prog = {0};
  cl_status s = summary_of(m, g, &prog);
  int dc[CL_MAX_LAYERS];
  if (s == CL_OK) {
    memset(x, 0, sizeof *x);
    for (int i = 0; i < prog.n; i++) extents_of_op(x, &prog.v[i], &m->arch, m->cfg.n_layers);
    cl_program_lifetimes(&prog, &m->arch, g, m->cfg.n_layers, t);
    x->dh_rows = place_views(m, g, &prog, CL_BUF_DH, dh);
    if (place_views(m, g, &prog, CL_BUF_DC, dc) < 0 || x->dh_rows < 0) s = CL_E_OOM;
    *dc_apart = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) *dc_apart |= dc[l] != 0;
  }
  cl_program_free(&prog);
  return s;
}

cl_status cl_plan_build(const cl_model *m, const cl_schedule *g, const cl_optim *opt, cl_plan *out,
                        char *err, size_t errlen) {
  return cl_plan_build_step(m, g, opt, out, NULL, err, errlen);
}

cl_status cl_plan_build_step(const cl_model *m, const cl_schedule *g, const cl_optim *opt,
                             cl_plan *out, int *dh_at, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  plan_builder b = {out, 0, 0, CL_OK, 0};
  extents x;
  int dh[CL_MAX_LAYERS] = {0};
  cl_lifetimes *life = g->training ? malloc(sizeof *life) : NULL;
  if (g->training && (!life || read_program(m, g, life, &x, &b.dc_apart, dh) != CL_OK)) {
    free(life);
    snprintf(err, errlen, "out of host memory planning a step");
    return CL_E_OOM;
  }
  /* free running: every layer's d_hidden starts at the buffer's start, the
   * fed-back steps of those below the last in their ring (plan_training) */
  for (int l = 0; dh_at && l < m->cfg.n_layers; l++) dh_at[l] = g->training && !x.roll ? dh[l] : 0;
  plan_model_buffers(&b, m, g, opt);
  if (g->training)
    plan_training(&b, m, g, &x);
  else
    plan_inference(&b, m, g);
  plan_given_state(&b, m, g);
  add(&b, CL_BUF_WS, -1, CL_MEM_WORKSPACE, plan_workspace(&b, m, g));
  place_in_arena(&b, m->guard ? CL_GUARD_BYTES : 0);
  set_lifetimes(out, life, m->cfg.n_layers);
  free(life);
  out->runtime = cl_backend_runtime_bytes(m->be);
  if (b.backend != CL_OK) {
    cl_plan_free(out);
    snprintf(err, errlen, "planning a step of batch %d, %d steps, %dx%d pixels: %s", g->B, g->T,
             g->H, g->W, m->be->err[0] ? m->be->err : "the convolution workspace query failed");
    return b.backend;
  }
  if (b.overflow) {
    cl_plan_free(out);
    snprintf(err, errlen, "a step of batch %d, %d steps, %dx%d pixels: sizes overflow", g->B,
             g->T, g->H, g->W);
    return CL_E_INVALID;
  }
  return CL_OK;
}

void cl_plan_free(cl_plan *p) {
  if (!p) return;
  free(p->entries);
  memset(p, 0, sizeof *p);
}

/* Row e of another plan, named for thread k (0: the model's own), at
 * offset `at` of the arena (step rows). */
static void copy_row(plan_builder *b, const cl_plan_entry *e, int k, size_t at) {
  cl_plan_entry *grown = cl_grow(b->p->entries, &b->cap, b->p->n, sizeof *grown);
  if (!grown) {
    b->overflow = 1;
    return;
  }
  b->p->entries = grown;
  cl_plan_entry *r = &b->p->entries[b->p->n++];
  *r = *e;
  if (k > 0) snprintf(r->name, sizeof r->name, "thread %d: %.36s", k % 100, e->name);
  r->offset = e->in_arena ? at : 0;
  b->p->by_category[r->category] += r->bytes;
  b->p->total += r->bytes;
  if (!e->in_arena) b->p->reserved += r->bytes;
}

static void copy_split(plan_builder *b, const cl_plan *own, const cl_plan *one, int n) {
  for (int i = 0; i < own->n; i++)
    if (!own->entries[i].in_arena) copy_row(b, &own->entries[i], 0, 0);
  for (int k = 1; k <= n; k++)
    for (int i = 0; i < one->n; i++) {
      const cl_plan_entry *e = &one->entries[i];
      const int theirs = e->kind == CL_BUF_GRADS ? k > 1 : e->kind == CL_BUF_BACKEND;
      if (e->in_arena || theirs)
        copy_row(b, e, k, (size_t)(k - 1) * one->arena + e->offset);
    }
  b->p->arena = cl_mul_size(one->arena, (size_t)n);
  b->p->reserved += b->p->arena;
  if (b->p->arena == 0 && one->arena) b->overflow = 1;
}

cl_status cl_plan_build_split(const cl_model *m, const cl_model *twin, const cl_schedule *gm,
                              int n, const cl_optim *opt, cl_plan *out, char *err,
                              size_t errlen) {
  memset(out, 0, sizeof *out);
  cl_plan own, one;
  cl_status s = cl_plan_build_step(m, gm, opt, &own, NULL, err, errlen);
  if (s != CL_OK) return s;
  s = cl_plan_build_step(twin, gm, NULL, &one, NULL, err, errlen);
  if (s != CL_OK) {
    cl_plan_free(&own);
    return s;
  }
  plan_builder b = {out, 0, 0, CL_OK, 0};
  copy_split(&b, &own, &one, n);
  out->runtime = own.runtime;
  cl_plan_free(&own);
  cl_plan_free(&one);
  if (b.overflow) {
    cl_plan_free(out);
    snprintf(err, errlen, "a step of batch %d split on %d threads: sizes overflow", gm->B, n);
    return CL_E_INVALID;
  }
  return CL_OK;
}
