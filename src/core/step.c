/*
 * core/step.c -- the executor's memory side: allocate exactly the step
 * buffers of a plan, keep them while the geometry stays, give them back when
 * it changes or the cache is emptied. On failure nothing of the new step
 * stays allocated and the model remains usable with a smaller shape.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

void cl_step_release(cl_model *m) {
  cl_step *st = &m->step;
  if (st->ptr) {
    for (int i = 0; i < st->plan.n; i++) {
      const cl_plan_entry *e = &st->plan.entries[i];
      if (cl_buf_is_step(e->kind)) cl_mem_free(&m->mem, e->category, st->ptr[i], e->bytes);
    }
  }
  free(st->ptr);
  cl_plan_free(&st->plan);
  memset(st, 0, sizeof *st);
  m->phase = CL_PHASE_NONE;
}

/* A buffer of layer -1 serves every layer. */
static void bind(void **slot, int layer, void *p) {
  if (layer >= 0) {
    slot[layer] = p;
    return;
  }
  for (int j = 0; j < CL_MAX_LAYERS; j++) slot[j] = p;
}

static void bind_view(cl_step *st, const cl_plan_entry *e, void *p) {
  int l = e->layer;
  switch ((cl_buf_kind)e->kind) {
  case CL_BUF_X: st->x = p; break;
  case CL_BUF_GATES: bind(st->gates, l, p); break;
  case CL_BUF_CELL: bind(st->cell, l, p); break;
  case CL_BUF_HID: bind(st->hid, l, p); break;
  case CL_BUF_CKPT_H: bind(st->ckpt_h, l, p); break;
  case CL_BUF_CKPT_C: bind(st->ckpt_c, l, p); break;
  case CL_BUF_DZ_CARRY: bind(st->dz_carry, l, p); break;
  case CL_BUF_CARRY_H: bind(st->carry_h, l, p); break;
  case CL_BUF_CARRY_C: bind(st->carry_c, l, p); break;
  case CL_BUF_DH: bind((void **)st->dh, l, p); break;
  case CL_BUF_DC: bind((void **)st->dc, l, p); break;
  case CL_BUF_WS: st->ws = p; break;
  default: break;
  }
}

cl_status cl_step_prepare(cl_model *m, const cl_geom *g) {
  if (g->training) CL_TRY(cl_grads_ensure(m));
  cl_step *st = &m->step;
  if (st->valid && memcmp(&st->g, g, sizeof *g) == 0) return CL_OK;
  cl_step_release(m);
  if (cl_plan_build(m, g, NULL, &st->plan) != CL_OK) {
    cl_step_release(m);
    return cl_fail(m, CL_E_INVALID, "a step of batch %d, %d steps, %dx%d pixels: sizes overflow",
                   g->B, g->T, g->H, g->W);
  }
  st->ptr = calloc((size_t)st->plan.n, sizeof(void *));
  if (!st->ptr) {
    cl_step_release(m);
    return cl_fail(m, CL_E_OOM, "out of host memory planning a step");
  }
  for (int i = 0; i < st->plan.n; i++) {
    const cl_plan_entry *e = &st->plan.entries[i];
    if (!cl_buf_is_step(e->kind)) continue;
    cl_status s = cl_mem_alloc(&m->mem, e->category, e->bytes, &st->ptr[i], m->err, sizeof m->err);
    if (s != CL_OK) {
      cl_step_release(m);
      return s;
    }
    bind_view(st, e, st->ptr[i]);
  }
  st->valid = 1;
  st->g = *g;
  return CL_OK;
}
