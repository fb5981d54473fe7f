/*
 * core/state.c -- where a forward or a training step starts from: zeros, a
 * state the caller gives (each layer's h and c, uploaded into step buffers
 * the plan holds), or the state the model carries from its last carrying
 * train step (Keras's stateful = TRUE: long sequences cut into chunks, the
 * state handed on detached). The carried state is a model buffer, like the
 * gradients: allocated through the accounting allocator under `states`,
 * planned as "carried_state", freed by cl_model_reset_state or with the
 * model, and not saved in model files (Keras does not save it either).
 *
 * It is not the engine: forward.c, backward.c and train.c ask it for the
 * state before step 0 and hand it the last one.
 */
#include "plan.h" /* cl_state_bytes; internal.h */

#include <math.h>
#include <string.h>

static size_t frame_elems(const cl_model *m, int l, int B, int H, int W) {
  return cl_mul_size(cl_mul_size((size_t)B, (size_t)m->layer[l].hidden),
                     cl_mul_size((size_t)H, (size_t)W));
}

void cl_state_free(cl_model *m) {
  if (!m->held) return;
  cl_mem_free(&m->mem, CL_MEM_STATES, m->held, m->held_bytes);
  m->held = NULL;
  m->held_bytes = 0;
  m->held_B = m->held_H = m->held_W = 0;
}

cl_status cl_model_reset_state(cl_model *m) {
  m->err[0] = '\0';
  cl_state_free(m);
  return CL_OK;
}

int cl_model_carried_state(const cl_model *m, int *B, int *H, int *W) {
  *B = m->held ? m->held_B : 0;
  *H = m->held ? m->held_H : 0;
  *W = m->held ? m->held_W : 0;
  return m->held != NULL;
}

/* A given state array is finite: a NaN start would poison every output
 * without a word. Host arrays only, so the check costs one pass. */
static int host_finite(const cl_host_array *a) {
  size_t n = 1;
  for (int i = 0; i < a->ndim; i++) n *= (size_t)a->dims[i];
  for (size_t i = 0; i < n; i++) {
    double v = a->format == CL_HOST_R_F64 ? ((const double *)a->data)[i]
                                          : (double)((const float *)a->data)[i];
    if (!isfinite(v)) return 0;
  }
  return 1;
}

static cl_status check_given(cl_model *m, const cl_host_array *s, int B, int H, int W) {
  if (!s) return cl_fail(m, CL_E_INVALID, "state: the initial state's arrays are missing");
  for (int l = 0; l < m->cfg.n_layers; l++)
    for (int w = 0; w < 2; w++) {
      const cl_host_array *a = &s[2 * l + w];
      int want[4] = {B, m->layer[l].hidden, H, W};
      const char *name = w ? "c" : "h";
      if (a->ndim != 4)
        return cl_fail(m, CL_E_INVALID,
                       "state: layer %d's %s must have 4 dimensions [batch, hidden, height, "
                       "width], not %d",
                       l + 1, name, a->ndim);
      for (int i = 0; i < 4; i++)
        if (a->dims[i] != want[i])
          return cl_fail(m, CL_E_INVALID,
                         "state: layer %d's %s has dimension %d of size %d, expected %d "
                         "([%d, %d, %d, %d])",
                         l + 1, name, i + 1, a->dims[i], want[i], want[0], want[1], want[2],
                         want[3]);
      if (!host_finite(a))
        return cl_fail(m, CL_E_INVALID, "state: layer %d's %s holds values that are not finite",
                       l + 1, name);
    }
  return CL_OK;
}

cl_status cl_state_check(cl_model *m, const cl_step_options *o, int B, int H, int W) {
  cl_state_mode mode = o ? o->state_mode : CL_STATE_ZERO;
  if (mode == CL_STATE_ZERO) return CL_OK;
  if (mode == CL_STATE_GIVEN) return check_given(m, o->state, B, H, W);
  if (mode != CL_STATE_CARRY) return cl_fail(m, CL_E_INVALID, "unknown state mode %d", (int)mode);
  if (m->held && (m->held_B != B || m->held_H != H || m->held_W != W))
    return cl_fail(m, CL_E_INVALID,
                   "state = \"carry\": the carried state is for a batch of %d at %dx%d pixels, "
                   "this step has %d at %dx%d; call convlstm_reset_state() to start afresh",
                   m->held_B, m->held_H, m->held_W, B, H, W);
  return CL_OK;
}

cl_status cl_state_prepare(cl_model *m, const cl_schedule *g) {
  if (g->state != CL_STATE_CARRY) return CL_OK;
  if (m->held && m->held_dtype == g->dtype) return CL_OK;
  cl_state_free(m); /* another storage type: set_dtype gives it back already */
  size_t bytes = cl_state_bytes(m, g->B, g->H, g->W, g->dtype);
  if (bytes == 0) return cl_fail(m, CL_E_INVALID, "state = \"carry\": the state's size overflows");
  void *p;
  CL_TRY(cl_model_alloc(m, CL_MEM_STATES, bytes, &p));
  cl_status s = m->be->iface->memset0(m->be, p, bytes);
  if (s != CL_OK) {
    cl_mem_free(&m->mem, CL_MEM_STATES, p, bytes);
    return cl_fail_backend(m, s, "memset0 of the carried state");
  }
  m->held = p;
  m->held_bytes = bytes;
  m->held_B = g->B;
  m->held_H = g->H;
  m->held_W = g->W;
  m->held_dtype = g->dtype;
  return CL_OK;
}

cl_status cl_state_upload(cl_model *m, const cl_step_options *o, int b0) {
  cl_step *st = &m->step;
  if (st->g.state != CL_STATE_GIVEN) return CL_OK;
  const int nb = st->g.B - b0 < st->g.state_B ? st->g.B - b0 : st->g.state_B;
  st->state_b0 = b0;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    cl_block rows = {b0, nb, 0, 1};
    CL_TRY(cl_put_host(m, st->init_h[l], st->g.dtype, &o->state[2 * l], rows));
    CL_TRY(cl_put_host(m, st->init_c[l], st->g.dtype, &o->state[2 * l + 1], rows));
  }
  return CL_OK;
}

void cl_state_borrow(cl_model *t, const cl_model *m) {
  t->held = m->held;
  t->held_bytes = m->held_bytes;
  t->held_B = m->held_B, t->held_H = m->held_H, t->held_W = m->held_W;
  t->held_dtype = m->held_dtype;
}

/* Layer l's h (w = 0) or c (w = 1) of sequence b0 in the carried state. */
static void *held_at(cl_model *m, int l, int w, int b0) {
  size_t off = 0;
  for (int j = 0; j < l; j++) off += 2 * frame_elems(m, j, m->held_B, m->held_H, m->held_W);
  size_t per = frame_elems(m, l, 1, m->held_H, m->held_W);
  off += (size_t)w * m->held_B * per + (size_t)b0 * per;
  return cl_at(m->held, off, m->held_dtype);
}

int cl_state_initial(cl_model *m, int b0, void **h, void **c) {
  const cl_step *st = &m->step;
  const cl_schedule *g = &st->g;
  if (g->state == CL_STATE_ZERO) return 0;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    if (g->state == CL_STATE_CARRY) {
      h[l] = held_at(m, l, 0, b0);
      c[l] = held_at(m, l, 1, b0);
    } else {
      size_t per = frame_elems(m, l, 1, g->H, g->W);
      h[l] = cl_at(st->init_h[l], (size_t)(b0 - st->state_b0) * per, g->dtype);
      c[l] = cl_at(st->init_c[l], (size_t)(b0 - st->state_b0) * per, g->dtype);
    }
  }
  return 1;
}

cl_status cl_state_keep(cl_model *m, int b0, int b, void *const *h, void *const *c) {
  if (m->step.g.state != CL_STATE_CARRY) return CL_OK;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    size_t bytes = frame_elems(m, l, b, m->held_H, m->held_W) * cl_dtype_size(m->held_dtype);
    CL_KERNEL(m, m->be->iface->copy(m->be, held_at(m, l, 0, b0), h[l], bytes));
    CL_KERNEL(m, m->be->iface->copy(m->be, held_at(m, l, 1, b0), c[l], bytes));
  }
  return CL_OK;
}
