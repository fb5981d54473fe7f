/*
 * core/step.c -- the executor's memory side: one step arena, reserved from
 * the device once and grown only when a step needs more than it holds, and
 * the plan's step buffers as views at their offsets in it. Changing the
 * geometry re-plans on the host and re-binds the views; a step that fits in
 * the arena makes no device call (training and validation alternating, a
 * smaller last batch), and none is ever made inside a step. On failure
 * nothing of the new step stays reserved and the model remains usable with a
 * smaller shape. The step's programs (program.c's lists of ops for the
 * geometry it holds) are kept with its buffers, listed at their first use.
 */
#include "plan.h" /* cl_schedule_make, cl_plan_build; internal.h */
#include "program.h" /* the step's ops it keeps */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SANITIZE_ADDRESS__)
#define CL_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CL_ASAN 1
#endif
#endif
#ifdef CL_ASAN
#include <sanitizer/asan_interface.h>
#endif

/* ---- guard bands (CONVLSTM_GUARD=1) --------------------------------------
 * After each arena buffer, from its last byte to the next buffer's offset
 * (its alignment padding and CL_GUARD_BYTES more), a canary: a pattern that
 * changes with the position, so that neither zeros nor any repeated value a
 * kernel might write past its slot passes for it. On a host backend built
 * with AddressSanitizer the band is also poisoned, so the write itself is
 * reported where it happens. */
#define GUARD_MAX (CL_ARENA_ALIGN + CL_GUARD_BYTES)

static unsigned char canary_at(size_t i) { return (unsigned char)(0xA5u + 37u * (unsigned)i); }

/* The guard band of in-arena entry i: [*start, *end) in the arena. */
static void guard_band(const cl_plan *p, int i, size_t *start, size_t *end) {
  const cl_plan_entry *e = &p->entries[i];
  *start = e->offset + e->bytes;
  *end = p->arena;
  for (int j = i + 1; j < p->n; j++)
    if (p->entries[j].in_arena) {
      *end = p->entries[j].offset;
      break;
    }
}

static void guard_poison(cl_model *m, size_t start, size_t end, int on) {
#ifdef CL_ASAN
  if (!m->be->iface->host_accessible || end <= start) return;
  char *p = (char *)m->arena + start;
  if (on)
    ASAN_POISON_MEMORY_REGION(p, end - start);
  else
    ASAN_UNPOISON_MEMORY_REGION(p, end - start);
#else
  (void)m, (void)start, (void)end, (void)on;
#endif
}

static cl_status guard_fill(cl_model *m) {
  const cl_plan *p = &m->step.plan;
  unsigned char pattern[GUARD_MAX];
  for (size_t k = 0; k < sizeof pattern; k++) pattern[k] = canary_at(k);
  for (int i = 0; i < p->n; i++) {
    if (!p->entries[i].in_arena) continue;
    size_t a, b;
    guard_band(p, i, &a, &b);
    if (b <= a || b - a > GUARD_MAX) continue;
    guard_poison(m, a, b, 0); /* a refill after a report finds it poisoned */
    CL_KERNEL(m, m->be->iface->upload(m->be, (char *)m->arena + a, pattern, b - a));
    guard_poison(m, a, b, 1);
  }
  return CL_OK;
}

cl_status cl_guard_check(cl_model *m) {
  if (!m->guard || !m->step.valid) return CL_OK;
  const cl_plan *p = &m->step.plan;
  unsigned char got[GUARD_MAX];
  for (int i = 0; i < p->n; i++) {
    if (!p->entries[i].in_arena) continue;
    size_t a, b;
    guard_band(p, i, &a, &b);
    if (b <= a || b - a > GUARD_MAX) continue;
    guard_poison(m, a, b, 0);
    CL_KERNEL(m, m->be->iface->download(m->be, got, (char *)m->arena + a, b - a));
    guard_poison(m, a, b, 1);
    for (size_t k = 0; k < b - a; k++) {
      if (got[k] == canary_at(k)) continue;
      const cl_plan_entry *e = &p->entries[i];
      /* the canary goes back, so the report is made once per overrun */
      (void)guard_fill(m);
      return cl_fail(m, CL_E_INTERNAL,
                     "guard band overwritten: a kernel wrote past buffer '%s' (%zu bytes at "
                     "arena offset %zu): byte %zu after its end changed",
                     e->name, e->bytes, e->offset, k);
    }
  }
  return CL_OK;
}

cl_status cl_model_test_overrun(cl_model *m, const char *buffer) {
  if (!m->guard || !m->step.valid)
    return cl_fail(m, CL_E_STATE, "no guard bands: create the model with CONVLSTM_GUARD=1 and run a step");
  const cl_plan *p = &m->step.plan;
  for (int i = 0; i < p->n; i++) {
    if (!p->entries[i].in_arena || strcmp(p->entries[i].name, buffer) != 0) continue;
    size_t a, b;
    guard_band(p, i, &a, &b);
    unsigned char junk = (unsigned char)~canary_at(0);
    guard_poison(m, a, a + 1, 0);
    CL_KERNEL(m, m->be->iface->upload(m->be, (char *)m->arena + a, &junk, 1));
    return CL_OK;
  }
  return cl_fail(m, CL_E_INVALID, "no step buffer named '%s'", buffer);
}

cl_status cl_model_test_arena(cl_model *m, size_t *base, size_t *bytes) {
  if (!m->be->iface->host_accessible)
    return cl_fail(m, CL_E_STATE, "the step arena is not in host memory on this backend");
  *base = (size_t)(uintptr_t)m->arena;
  *bytes = m->arena ? m->arena_bytes : 0;
  return CL_OK;
}

/* Give back the plan's buffers; the arena stays reserved. */
static void unbind(cl_model *m) {
  cl_step *st = &m->step;
#ifdef CL_ASAN
  if (m->guard && m->arena && m->be->iface->host_accessible)
    ASAN_UNPOISON_MEMORY_REGION(m->arena, m->arena_bytes);
#endif
  for (int i = 0; i < st->plan.n; i++) {
    const cl_plan_entry *e = &st->plan.entries[i];
    if (e->in_arena) cl_mem_give(&m->mem, e->category, e->bytes);
  }
  cl_plan_free(&st->plan);
  for (int i = 0; st->prog && i < 3; i++) cl_program_free(&st->prog[i]);
  free(st->prog);
  memset(st, 0, sizeof *st);
  m->phase = CL_PHASE_NONE;
}

void cl_step_release(cl_model *m) {
  unbind(m);
  cl_mem_unreserve(&m->mem, m->arena, m->arena_bytes);
  m->arena = NULL;
  m->arena_bytes = 0;
}

/* A split step's twins (split.c) give their arenas back where the model
 * makes its own, as its own went where theirs were made (cl_split_step):
 * the two never stand together, as the plans of each call assume. */
static void release_twins(cl_model *m) {
  for (int i = 0; i < m->twins.n; i++) cl_step_release(m->twins.m[i]);
}

/* A buffer of layer -1 serves every layer. */
static void bind(void **slot, int layer, void *p) {
  if (layer >= 0) {
    slot[layer] = p;
    return;
  }
  for (int j = 0; j < CL_MAX_LAYERS; j++) slot[j] = p;
}

#define BIND_ONE_(field, l, p) st->field = p
#define BIND_LAYER_(field, l, p) bind((void **)st->field, l, p)
#define BIND_CASE_(kind, field, name, other, per, dt) \
  case CL_BUF_##kind: BIND_##per##_(field, l, p); break;
static void bind_view(cl_step *st, const cl_plan_entry *e, void *p) {
  int l = e->layer;
  switch ((cl_buf_kind)e->kind) {
  CL_STEP_BUFFERS(BIND_CASE_)
  default: break;
  }
}
#undef BIND_CASE_
#undef BIND_ONE_
#undef BIND_LAYER_

/* A training step's d_hidden: each layer's at its place in the one buffer,
 * as the plan placed it (an inference step has no buffer). */
static void place_dh(cl_model *m, const cl_schedule *g, const int *at) {
  cl_step *st = &m->step;
  float *base = st->dh[0];
  if (!base) return;
  size_t unit = (size_t)g->S * g->Bm * g->H * g->W;
  for (int l = 0; l < m->cfg.n_layers; l++) st->dh[l] = base + at[l] * unit;
}

/* An arena of at least `bytes`: grown (old one given back first, so that a
 * limit need not hold both) only when the current one is smaller. */
static cl_status ensure_arena(cl_model *m, size_t bytes) {
  if (bytes <= m->arena_bytes) return CL_OK;
  cl_mem_unreserve(&m->mem, m->arena, m->arena_bytes);
  m->arena = NULL;
  m->arena_bytes = 0;
  CL_TRY(cl_mem_reserve(&m->mem, bytes, &m->arena, m->err, sizeof m->err));
  m->arena_bytes = bytes;
  return CL_OK;
}

cl_status cl_step_prepare(cl_model *m, const cl_schedule *g) {
  if (g->training) CL_TRY(cl_grads_ensure(m));
  cl_step *st = &m->step;
  if (st->valid && memcmp(&st->g, g, sizeof *g) == 0) return CL_OK;
  unbind(m);
  cl_plan plan;
  char err[CL_ERRMSG_LEN];
  int dh_at[CL_MAX_LAYERS];
  cl_status built = cl_plan_build_step(m, g, NULL, &plan, dh_at, err, sizeof err);
  if (built != CL_OK) {
    cl_step_release(m);
    return cl_fail(m, built, "%s", err);
  }
  release_twins(m); /* theirs go before this arena comes */
  cl_status s = ensure_arena(m, plan.arena);
  if (s != CL_OK) {
    cl_plan_free(&plan);
    cl_step_release(m);
    return s;
  }
  st->plan = plan;
  for (int i = 0; i < plan.n; i++) {
    const cl_plan_entry *e = &plan.entries[i];
    if (!e->in_arena) continue;
    cl_mem_take(&m->mem, e->category, e->bytes);
    bind_view(st, e, e->bytes ? (char *)m->arena + e->offset : NULL);
  }
  place_dh(m, g, dh_at);
  st->valid = 1;
  st->g = *g;
  if (m->guard) CL_TRY(guard_fill(m));
  return CL_OK;
}

/* The step as ops (program.h): [0] the program of the micro-batches of Bm
 * sequences before the last, [1] the last one's, [2] the step's own list;
 * listed once for the geometry the step holds (step.c drops them with it). */
cl_status cl_step_programs(cl_model *m, cl_target target, const cl_program **out) {
  cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  if (st->prog && st->prog_target == target) {
    *out = st->prog;
    return CL_OK;
  }
  cl_program *prog = st->prog ? st->prog : calloc(3, sizeof *prog);
  if (!prog) return cl_fail(m, CL_E_OOM, "out of host memory listing the step's operations");
  for (int i = 0; i < 3; i++) cl_program_free(&prog[i]);
  st->prog = prog;
  int last, n = cl_micro_batches(g, &last);
  cl_status s = CL_OK;
  if (n > 1) s = cl_program_build(&m->arch, m->cfg.n_layers, g, target, g->Bm, 0, &prog[0]);
  if (s == CL_OK) s = cl_program_build(&m->arch, m->cfg.n_layers, g, target, last, 1, &prog[1]);
  if (s == CL_OK) s = cl_step_ops(g, &prog[2]);
  if (s != CL_OK) {
    for (int i = 0; i < 3; i++) cl_program_free(&prog[i]);
    free(prog);
    st->prog = NULL;
    return cl_fail(m, s, "out of host memory listing the step's operations");
  }
  st->prog_target = target;
  *out = prog;
  return CL_OK;
}

cl_status cl_model_alloc(cl_model *m, cl_mem_category cat, size_t bytes, void **out) {
  cl_status s = cl_mem_alloc(&m->mem, cat, bytes, out, m->err, sizeof m->err);
  int pending = m->phase == CL_PHASE_TRAINING || m->phase == CL_PHASE_LOSS;
  if (s != CL_E_OOM || !(m->arena || m->twins.n) || pending) return s;
  /* as PyTorch frees its cached blocks and retries before reporting an OOM */
  cl_step_release(m);
  release_twins(m);
  m->err[0] = '\0';
  return cl_mem_alloc(&m->mem, cat, bytes, out, m->err, sizeof m->err);
}

/* The gradient buffer, made on first use and zeroed then. */
cl_status cl_grads_ensure(cl_model *m) {
  if (m->grads) return CL_OK;
  size_t pb = m->n_params * sizeof(float);
  CL_TRY(cl_model_alloc(m, CL_MEM_GRADIENTS, pb, (void **)&m->grads));
  CL_KERNEL(m, m->be->iface->memset0(m->be, m->grads, pb));
  return CL_OK;
}

cl_status cl_model_zero_grad(cl_model *m) {
  if (!m->grads) return CL_OK;
  CL_KERNEL(m, m->be->iface->memset0(m->be, m->grads, m->n_params * sizeof(float)));
  return CL_OK;
}

cl_step_vals *cl_vals(cl_model *m) { return cl_backend_step_vals(m->be, &m->host_vals); }

cl_status cl_vals_zero(cl_model *m) {
  CL_KERNEL(m, m->be->iface->memset0(m->be, cl_vals(m), sizeof(cl_step_vals)));
  return CL_OK;
}

cl_status cl_vals_read(cl_model *m, cl_step_vals *out) {
  CL_KERNEL(m, m->be->iface->download(m->be, out, cl_vals(m), sizeof *out));
  return CL_OK;
}
