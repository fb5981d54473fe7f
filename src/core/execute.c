/*
 * core/execute.c -- the executor: runs a micro-batch's program (program.h)
 * op by op on the engine's per-layer pieces (forward.c, backward.c), its
 * states resolved to the step's buffers. It knows ops, layers and buffers,
 * not kinds of model: which ops run, in what order, program.c decides.
 */
#include "lifetimes.h" /* the step's ops and their buffers' spans */

#include <stdlib.h>
#include <string.h>

/* The micro-batch an op runs in: its sequences, sources and results. */
typedef struct run_ctx {
  cl_model *m;
  cl_call *c;
  const cl_source *x, *y;
  cl_target tg;
  int b0, b;
  float ls;
  double *acc;
  int from;                                /* the call's state exists */
  void *ih[CL_MAX_LAYERS], *ic[CL_MAX_LAYERS]; /* and is here */
} run_ctx;

static size_t step_elems(const cl_model *m, int l, int b) {
  return (size_t)b * m->layer[l].hidden * m->step.g.H * m->step.g.W;
}
static size_t frame_elems(const cl_model *m, int b) {
  return (size_t)b * m->arch.frame_dim * m->step.g.H * m->step.g.W;
}

/* Layer l's h (which 0) or c (1) of state r; NULL for zeros. */
static void *state_of(const run_ctx *k, cl_state_ref r, int l, int which) {
  cl_model *m = k->m;
  const cl_step *st = &m->step;
  cl_dtype t = st->g.dtype;
  switch (r.at) {
  case CL_AT_ZERO: return NULL;
  case CL_AT_CALL: return k->from ? (which ? k->ic[l] : k->ih[l]) : NULL;
  case CL_AT_CKPT:
    return cl_at(which ? st->ckpt_c[l] : st->ckpt_h[l], (size_t)r.slot * step_elems(m, l, k->b), t);
  case CL_AT_CARRY: return which ? st->carry_c[l] : st->carry_h[l];
  case CL_AT_STACK_END: { /* layer by layer: the stack's lo + i before the receiving lo + i */
    const cl_arch *a = &m->arch;
    int f = a->stack[r.stack].lo + (l - a->stack[cl_arch_stack_of(a, l)].lo);
    return cl_at(which ? st->cell[f] : st->hid[f], (size_t)r.slot * step_elems(m, f, k->b), t);
  }
  }
  return NULL;
}

/* Every layer's h and c of state r (layers lo .. hi - 1); 0 for zeros. */
static int states(const run_ctx *k, cl_state_ref r, int lo, int hi, void **h, void **c) {
  for (int l = 0; l < k->m->cfg.n_layers; l++) h[l] = c[l] = NULL;
  if (r.at == CL_AT_ZERO || (r.at == CL_AT_CALL && !k->from)) return 0;
  for (int l = lo; l < hi; l++) {
    h[l] = state_of(k, r, l, 0);
    c[l] = state_of(k, r, l, 1);
  }
  return 1;
}

/* Layer lo's input in a FORWARD or BACKWARD op. */
static const void *input_of(const run_ctx *k, const cl_op *o) {
  const cl_step *st = &k->m->step;
  if (o->x_at == CL_X_BELOW) return st->hid[o->lo - 1];
  if (o->x_at == CL_X_NONE) return NULL;
  return cl_at(st->x, (size_t)o->x_at * frame_elems(k->m, k->b), st->g.dtype);
}

/* Scheduled sampling: y's frame j of the micro-batch into x's slot of
 * fed-back step tin + j, for each step that reads the truth; the forward
 * copies the model's own frame into the others' slots. */
static cl_status put_truth(const run_ctx *k) {
  cl_model *m = k->m;
  cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  int tin = g->T - g->horizon + 1;
  for (int s = tin; s < g->T; s++) {
    if (!cl_reads_truth(k->c, g, s)) continue;
    cl_block blk = {k->b0, k->b, s - tin, 1};
    CL_TRY(cl_put_source(m, cl_at(st->x, (size_t)s * frame_elems(m, k->b), g->dtype), g->dtype,
                         k->y, blk));
  }
  return CL_OK;
}

/* Layer l's last step (len - 1) receives the gradient of the state it
 * handed to layer `to`: h's through `to`'s hidden half, from its step 0
 * dz (kept in dz_carry when recomputed chunks share the gates), c's from
 * hand_c. */
static cl_status receive_handed(const run_ctx *k, int l, int to, int len) {
  cl_model *m = k->m;
  const cl_step *st = &m->step;
  size_t bh = step_elems(m, l, k->b);
  const void *dz0 = st->g.rc ? st->dz_carry[to] : st->gates[to];
  CL_TRY(cl_dropout_hidden_grad(m, to, k->b, dz0, st->dh[l] + (size_t)(len - 1) * bh, 1, 0));
  CL_KERNEL(m, m->be->iface->copy(m->be, st->dc[l], st->hand_c[l], bh * sizeof(float)));
  return CL_OK;
}

static cl_status backward(const run_ctx *k, const cl_op *o) {
  void *h[CL_MAX_LAYERS], *c[CL_MAX_LAYERS];
  states(k, o->before, o->lo, o->hi, h, c);
  k->c->last_pass = o->last_pass;
  if (o->kind == CL_OP_BACKWARD_FREE)
    return cl_backward_free_run(k->m, k->c, k->b, input_of(k, o), h, c);
  return cl_backward_layer(k->m, k->c, o->lo, k->b, o->len, input_of(k, o), h[o->lo], c[o->lo],
                           o->fresh_dc, o->carry_in, o->save_carry);
}

static cl_status forward(const run_ctx *k, const cl_op *o) {
  void *h[CL_MAX_LAYERS], *c[CL_MAX_LAYERS];
  int has = states(k, o->before, o->lo, o->hi, h, c);
  void *const *ph = has ? h : NULL, *const *pc = has ? c : NULL;
  if (o->kind == CL_OP_FORWARD_FREE)
    return cl_forward_free_run(k->m, k->c, k->b, k->m->step.x, ph, pc);
  return cl_forward_layers(k->m, o->lo, o->hi, k->b, o->len, input_of(k, o), ph, pc);
}

static cl_status save_end(const run_ctx *k, const cl_op *o) {
  void *h[CL_MAX_LAYERS], *c[CL_MAX_LAYERS];
  states(k, o->to, o->lo, o->hi, h, c);
  return cl_save_layers_end(k->m, o->lo, o->hi, k->b, o->len, h, c);
}

static cl_status run_op(const run_ctx *k, const cl_op *o) {
  cl_model *m = k->m;
  cl_step *st = &m->step;
  cl_dtype t = st->g.dtype;
  size_t bh = o->lo < m->cfg.n_layers ? step_elems(m, o->lo, k->b) : 0;
  switch (o->kind) {
  case CL_OP_PUT_X: {
    cl_block blk = {k->b0, k->b, o->t0, o->len};
    return cl_put_frames_source(m, st->x, t, k->x, blk);
  }
  case CL_OP_PUT_TRUTH: return put_truth(k);
  case CL_OP_FORWARD:
  case CL_OP_FORWARD_FREE: return forward(k, o);
  case CL_OP_HEAD_FORWARD:
    return cl_head_forward(m, o->len * k->b, st->hid,
                           cl_at(st->head_out, (size_t)o->t0 * frame_elems(m, k->b), t));
  case CL_OP_SAVE_END: return save_end(k, o);
  case CL_OP_LOSS_SEGMENT:
    return cl_loss_segment(m, k->c, k->y, k->tg, k->b0, k->b, o->t0, o->len, o->share, k->ls, 1,
                           k->acc);
  case CL_OP_LOSS_FRAMES: return cl_loss_frames(m, k->c, k->y, k->b0, k->b, k->ls, k->acc);
  case CL_OP_HEAD_BACKWARD:
    return cl_head_backward(m, o->lo, o->t0 * k->b, o->len * k->b, o->accumulate);
  case CL_OP_ZERO_DH: return cl_zero(m, st->dh[o->lo], (size_t)o->len * bh * sizeof(float));
  case CL_OP_BUCKET:
    k->c->last_pass = o->last_pass;
    return cl_dist_bucket_ready(m, k->c, o->lo);
  case CL_OP_RECEIVE: return receive_handed(k, o->lo, o->hi, o->len);
  case CL_OP_BACKWARD:
  case CL_OP_BACKWARD_FREE: return backward(k, o);
  case CL_OP_HAND_C:
    CL_KERNEL(m, m->be->iface->copy(m->be, st->hand_c[o->hi], st->dc[o->lo], bh * sizeof(float)));
    return CL_OK;
  case CL_OP_KEEP_STATE: return cl_state_keep(m, k->b0, k->b, st->carry_h, st->carry_c);
  default: break; /* the step's own ops: cl_step_run */
  }
  return cl_fail(m, CL_E_INTERNAL, "unknown op %d", (int)o->kind);
}

/* CONVLSTM_POISON=1: each step buffer filled with NaN bytes before the
 * first op of the program that uses it and after the last (cl_op_uses),
 * so that an op reading a buffer outside the lifetime the program gives it
 * changes the step's numbers: every step that runs checks the lifetimes
 * the planner reads. span[2 j], span[2 j + 1]: plan row j's. */
static void poison(cl_model *m, const int *span, int i, int after) {
  const cl_plan *p = &m->step.plan;
  for (int j = 0; span && j < p->n; j++) {
    const cl_plan_entry *e = &p->entries[j];
    if (e->in_arena && span[2 * j + after] == i)
      memset((char *)m->arena + e->offset, 0xFF, e->bytes);
  }
}

static int *poison_spans(cl_model *m, const cl_program *prog) {
  const cl_plan *p = &m->step.plan;
  if (!m->poison || !m->be->iface->host_accessible) return NULL;
  cl_lifetimes *t = malloc(sizeof *t);
  int *span = malloc(2 * (size_t)(p->n + 1) * sizeof *span);
  if (t && span) {
    cl_program_lifetimes(prog, &m->arch, &m->step.g, m->cfg.n_layers, t);
    for (int j = 0; j < p->n; j++)
      cl_plan_row_lifetime(&p->entries[j], t, m->cfg.n_layers, &span[2 * j], &span[2 * j + 1]);
  }
  free(t);
  return span;
}

cl_status cl_program_run(cl_model *m, cl_call *c, const cl_program *p, const cl_source *x,
                         const cl_source *y, cl_target tg, int b0, int b, float ls, double *acc) {
  run_ctx k = {m, c, x, y, tg, b0, b, ls, acc, 0, {0}, {0}};
  k.from = cl_state_initial(m, b0, k.ih, k.ic);
  int *span = poison_spans(m, p);
  cl_status s = CL_OK;
  for (int i = 0; i < p->n && s == CL_OK; i++) {
    poison(m, span, i, 0);
    s = run_op(&k, &p->v[i]);
    poison(m, span, i, 1);
  }
  free(span);
  return s;
}

cl_status cl_step_run(cl_model *m, cl_call *c, const cl_program *step, const cl_program *prog,
                      const cl_source *x, const cl_source *y, cl_target tg, float ls,
                      const cl_update_args *u, const cl_step_options *opts) {
  cl_step_vals *v = cl_vals(m);
  for (int i = 0; i < step->n; i++) {
    const cl_op *o = &step->v[i];
    switch (o->kind) {
    case CL_OP_ZERO_GRAD:
      CL_TRY(cl_model_zero_grad(m));
      CL_TRY(cl_vals_zero(m));
      break;
    case CL_OP_MICRO_BATCH: /* these sequences' masks, staged as x, then their ops */
      CL_TRY(cl_dropout_upload(m, opts, o->t0, o->len, o->t0 == 0));
      CL_TRY(cl_program_run(m, c, &prog[o->hi], x, y, tg, o->t0, o->len, ls, &v->loss));
      break;
    case CL_OP_REDUCE: /* before unscaling, clipping and the guard: every rank decides alike */
      CL_TRY(cl_dist_finish(m, c, &v->loss));
      break;
    case CL_OP_UPDATE: CL_KERNEL(m, cl_backend_update_step(m->be, u, v)); break;
    default: return cl_fail(m, CL_E_INTERNAL, "op %d is not a step's", (int)o->kind);
    }
  }
  return CL_OK;
}
