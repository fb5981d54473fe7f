/*
 * core/step.c -- the executor's memory side: allocate exactly the step
 * buffers of a plan, keep them while the shape stays, give them back when the
 * shape changes or the cache is emptied. On failure nothing of the new step
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
  if (m->phase != CL_PHASE_NONE) m->phase = CL_PHASE_NONE;
}

static void bind_view(cl_step *st, const cl_plan_entry *e, void *p) {
  int l = e->layer;
  switch ((cl_buf_kind)e->kind) {
  case CL_BUF_X: st->x = p; break;
  case CL_BUF_GATES:
    if (l < 0) { /* inference: one step's gates shared by all layers */
      for (int j = 0; j < CL_MAX_LAYERS; j++) st->gates[j] = p;
    } else {
      st->gates[l] = p;
    }
    break;
  case CL_BUF_CELL: st->cell[l] = p; break;
  case CL_BUF_HID: st->hid[l] = p; break;
  case CL_BUF_DH: st->dh[l] = p; break;
  case CL_BUF_DC: st->dc = p; break;
  case CL_BUF_WS: st->ws = p; break;
  default: break;
  }
}

static int step_fits(const cl_step *st, int B, int T, int H, int W, int training) {
  if (!st->valid || st->B != B || st->T != T || st->H != H || st->W != W) return 0;
  return st->training || !training; /* inference can run in a training step's buffers */
}

cl_status cl_step_prepare(cl_model *m, int B, int T, int H, int W, int training) {
  if (training) CL_TRY(cl_grads_ensure(m));
  if (step_fits(&m->step, B, T, H, W, training)) return CL_OK;
  cl_step_release(m);
  cl_step *st = &m->step;
  CL_TRY(cl_model_plan(m, B, T, H, W, training, NULL, NULL, &st->plan));
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
  st->B = B; st->T = T; st->H = H; st->W = W;
  st->training = training;
  return CL_OK;
}
