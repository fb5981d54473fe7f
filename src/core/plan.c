/*
 * core/plan.c -- builds the memory plan of one step (see plan.h). Pure: it
 * reads the model's configuration and asks the backend for workspace sizes,
 * and allocates nothing on the device. The sizes written here are the sizes
 * step.c allocates, so estimate and measurement agree to the byte.
 */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct plan_builder {
  cl_plan *p;
  int cap;
  int overflow;
} plan_builder;

static void add(plan_builder *b, int kind, int layer, cl_mem_category cat, size_t bytes,
               const char *name) {
  if (b->p->n == b->cap) {
    int cap = b->cap ? 2 * b->cap : 32;
    cl_plan_entry *e = realloc(b->p->entries, (size_t)cap * sizeof *e);
    if (!e) {
      b->overflow = 1; /* reported as a failed plan either way */
      return;
    }
    b->p->entries = e;
    b->cap = cap;
  }
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

/* Product of dims times element size, remembering overflow. */
static size_t nbytes(plan_builder *b, size_t elt, size_t d0, size_t d1, size_t d2, size_t d3) {
  size_t n = cl_mul_size(cl_mul_size(cl_mul_size(cl_mul_size(elt, d0), d1), d2), d3);
  if (n == 0 && elt && d0 && d1 && d2 && d3) b->overflow = 1;
  return n;
}

static size_t ws_max(const struct cl_model *m, size_t cur, int N, int C, int K, int k, int H,
                     int W) {
  if (N <= 0) return cur;
  cl_conv_shape s = {N, C, H, W, K, k, m->cfg.dtype};
  size_t w = cl_backend_conv_workspace(m->be, &s);
  return w > cur ? w : cur;
}

/* Workspace: the largest any convolution of the step asks for. */
static size_t plan_workspace(const struct cl_model *m, int B, int T, int H, int W,
                             int training) {
  size_t ws = 0;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    const cl_layer *L = &m->layer[l];
    int K = 4 * L->hidden;
    if (training) {
      ws = ws_max(m, ws, T * B, L->in, K, L->k, H, W);       /* input half, all steps */
      ws = ws_max(m, ws, B, L->hidden, K, L->k, H, W);       /* hidden half, per step */
      ws = ws_max(m, ws, (T - 1) * B, L->hidden, K, L->k, H, W); /* hidden filter grad */
    } else {
      ws = ws_max(m, ws, B, L->in, K, L->k, H, W);
      ws = ws_max(m, ws, B, L->hidden, K, L->k, H, W);
    }
  }
  return ws;
}

static void plan_model_buffers(plan_builder *b, const struct cl_model *m, int training,
                               const cl_optim *opt) {
  size_t pb = nbytes(b, sizeof(float), m->n_params, 1, 1, 1);
  add(b, CL_BUF_PARAMS, -1, CL_MEM_PARAMETERS, pb, "parameters");
  if (training || m->grads) add(b, CL_BUF_GRADS, -1, CL_MEM_GRADIENTS, pb, "gradients");
  cl_optim_kind kind = opt ? opt->kind : m->opt_kind;
  int has_m = opt ? (opt->kind == CL_OPTIM_ADAM || opt->momentum != 0) : m->opt_m != NULL;
  if (has_m)
    add(b, CL_BUF_OPT_M, -1, CL_MEM_OPTIMIZER, pb,
        kind == CL_OPTIM_ADAM ? "adam.exp_avg" : "sgd.momentum_buffer");
  if (kind == CL_OPTIM_ADAM && (opt || m->opt_v))
    add(b, CL_BUF_OPT_V, -1, CL_MEM_OPTIMIZER, pb, "adam.exp_avg_sq");
}

static void plan_step_buffers(plan_builder *b, const struct cl_model *m, int B, int T, int H,
                              int W, int training) {
  size_t e = cl_dtype_size(m->cfg.dtype), f = sizeof(float);
  size_t P = (size_t)H * (size_t)W, TB = (size_t)T * (size_t)B;
  int nl = m->cfg.n_layers, maxh = 0;
  for (int l = 0; l < nl; l++)
    if (m->layer[l].hidden > maxh) maxh = m->layer[l].hidden;

  add(b, CL_BUF_X, -1, CL_MEM_DATA, nbytes(b, e, TB, (size_t)m->cfg.input_dim, P, 1), "x");
  if (!training) {
    add(b, CL_BUF_GATES, -1, CL_MEM_WORKSPACE, nbytes(b, e, (size_t)B, 4 * (size_t)maxh, P, 1),
        "gates");
  }
  for (int l = 0; l < nl; l++) {
    size_t h = (size_t)m->layer[l].hidden;
    if (training) {
      add(b, CL_BUF_GATES, l, CL_MEM_ACTIVATIONS, nbytes(b, e, TB, 4 * h, P, 1), "gates");
      add(b, CL_BUF_CELL, l, CL_MEM_ACTIVATIONS, nbytes(b, e, TB, h, P, 1), "cell");
    } else {
      add(b, CL_BUF_CELL, l, CL_MEM_STATES, nbytes(b, e, 2, (size_t)B, h, P), "cell");
    }
    add(b, CL_BUF_HID, l, CL_MEM_ACTIVATIONS, nbytes(b, e, TB, h, P, 1), "hidden");
    if (training) add(b, CL_BUF_DH, l, CL_MEM_WORKSPACE, nbytes(b, f, TB, h, P, 1), "d_hidden");
  }
  if (training)
    add(b, CL_BUF_DC, -1, CL_MEM_WORKSPACE, nbytes(b, f, (size_t)B, (size_t)maxh, P, 1), "d_cell");
  add(b, CL_BUF_WS, -1, CL_MEM_WORKSPACE, plan_workspace(m, B, T, H, W, training),
      "conv_workspace");
}

cl_status cl_plan_build(const struct cl_model *m, int B, int T, int H, int W, int training,
                        const cl_optim *opt, cl_plan *out) {
  memset(out, 0, sizeof *out);
  if (B < 1 || T < 1 || H < 1 || W < 1) return CL_E_INVALID;
  plan_builder b = {out, 0, 0};
  plan_model_buffers(&b, m, training, opt);
  plan_step_buffers(&b, m, B, T, H, W, training);
  if (b.overflow) {
    cl_plan_free(out);
    return CL_E_INVALID;
  }
  return CL_OK;
}

void cl_plan_free(cl_plan *p) {
  if (!p) return;
  free(p->entries);
  memset(p, 0, sizeof *p);
}
