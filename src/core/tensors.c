/*
 * core/tensors.c -- the one table of a configuration's named tensors: which
 * tensors a layer has, in state-dict order, their torch names and shapes.
 * model.c lays the flat parameter buffer out by it, params.c names and
 * converts by it, checkpoint.c reads and writes files by it, so a name or
 * a shape is written down here only.
 *
 * Not here: where a tensor lives in the flat buffer (model.c) or how it is
 * converted (params.c).
 */
#include "internal.h"

#include <stdio.h>

static const char *const ROLE_NAME[] = {"conv.weight", "conv.bias", "w_ci", "w_cf", "w_co"};

/* Tensors of one layer: the weight, the bias, three peepholes. */
static int per_layer(const cl_config *c) {
  return 1 + (c->bias != 0) + (c->peephole != CL_PEEP_NONE ? 3 : 0);
}

int cl_cfg_n_tensors(const cl_config *c) { return per_layer(c) * c->n_layers; }

int64_t cl_cfg_peephole_pixels(const cl_config *c) {
  if (c->peephole == CL_PEEP_POSITION) return (int64_t)c->peephole_h * c->peephole_w;
  return c->peephole == CL_PEEP_CHANNEL ? 1 : 0;
}

const char *cl_dropout_masks_name(int kind) {
  return kind == CL_MASKS_PER_GATE ? "per_gate" : "shared";
}

const char *cl_peephole_name(int kind) {
  return kind == CL_PEEP_CHANNEL ? "channel" : kind == CL_PEEP_POSITION ? "position" : "none";
}

cl_tensor_spec cl_cfg_tensor(const cl_config *c, int i) {
  int per = per_layer(c), l = i / per, k = i % per;
  cl_tensor_spec t = {l, CL_TR_WEIGHT, 0, {0, 0, 0, 0}};
  /* k: 0 weight, then the bias when there is one, then the peepholes */
  t.role = k == 0 ? CL_TR_WEIGHT
           : c->bias ? (k == 1 ? CL_TR_BIAS : (cl_tensor_role)(CL_TR_WCI + k - 2))
                     : (cl_tensor_role)(CL_TR_WCI + k - 1);
  int64_t h = c->hidden_dims[l], in = l == 0 ? c->input_dim : c->hidden_dims[l - 1];
  switch (t.role) {
  case CL_TR_WEIGHT:
    t.ndim = 4;
    t.dims[0] = 4 * h;
    t.dims[1] = in + h;
    t.dims[2] = c->kernel_sizes[l];
    t.dims[3] = cl_cfg_kernel_w(c, l);
    break;
  case CL_TR_BIAS:
    t.ndim = 1;
    t.dims[0] = 4 * h;
    break;
  default: /* [h, 1, 1] broadcasts over the pixels as torch's w * c does */
    t.ndim = 3;
    t.dims[0] = h;
    t.dims[1] = c->peephole == CL_PEEP_POSITION ? c->peephole_h : 1;
    t.dims[2] = c->peephole == CL_PEEP_POSITION ? c->peephole_w : 1;
    break;
  }
  return t;
}

void cl_tensor_name(char *buf, size_t len, const char *prefix, const cl_tensor_spec *t) {
  snprintf(buf, len, "%scell_list.%d.%s", prefix, t->layer, ROLE_NAME[t->role]);
}
