/*
 * core/tensors.c -- the one table of a configuration's named tensors: which
 * tensors a layer has, in state-dict order, their torch names and shapes.
 * model.c lays the flat parameter buffer out by it, params.c names and
 * converts by it, model_file_read.c reads and writes files by it, so a name or
 * a shape is written down here only.
 *
 * Not here: where a tensor lives in the flat buffer (model.c) or how it is
 * converted (params.c).
 */
#include "internal.h"

#include <stdio.h>

static const char *const ROLE_NAME[] = {"conv.weight", "conv.bias",     "w_ci",         "w_cf",
                                        "w_co",        "conv_x.weight", "conv_h.weight"};

/* Tensors of layer l: the weight (two with different kernels), the bias,
 * three peepholes. */
static int per_layer(const cl_config *c, int l) {
  return 1 + cl_cfg_split(c, l) + (c->bias != 0) + (c->peephole != CL_PEEP_NONE ? 3 : 0);
}

/* With a head (arch.h), the last two: head.weight, head.bias. */
int cl_cfg_n_tensors(const cl_config *c) {
  int n = 0;
  cl_arch a = cl_arch_of(c);
  for (int l = 0; l < c->n_layers; l++) n += per_layer(c, l);
  return n + (cl_arch_has_head(&a) ? 2 : 0);
}

/* The head's tensors (layer: the pseudo-layer after the last): weight
 * [C p p, sum of the hidden sizes of the layers it reads, 1, 1], bias
 * [C p p]. */
static cl_tensor_spec head_tensor(const cl_config *c, int k) {
  cl_tensor_spec t = {c->n_layers, k ? CL_TR_HEAD_B : CL_TR_HEAD_W, 0, k ? 1 : 4, {0, 0, 0, 0}};
  int64_t sum = 0;
  cl_arch a = cl_arch_of(c);
  for (int l = a.head_lo; l < a.head_hi; l++) sum += c->hidden_dims[l];
  t.dims[0] = a.frame_dim;
  if (!k) {
    t.dims[1] = sum;
    t.dims[2] = t.dims[3] = 1;
  }
  return t;
}

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

/* Role of tensor k of layer l: the weight (or the input half), the bias
 * when there is one, the hidden half when the kernels differ (torch's
 * order for a cell of two convolutions, conv_x with the bias, then
 * conv_h), then the peepholes. */
static cl_tensor_role role_of(const cl_config *c, int l, int k) {
  int split = cl_cfg_split(c, l);
  if (k == 0) return split ? CL_TR_WEIGHT_X : CL_TR_WEIGHT;
  int next = 1; /* the place of the next tensor a layer may have */
  if (c->bias && k == next++) return CL_TR_BIAS;
  if (split && k == next++) return CL_TR_WEIGHT_H;
  return (cl_tensor_role)(CL_TR_WCI + k - next);
}

cl_tensor_spec cl_cfg_tensor(const cl_config *c, int i) {
  int l = 0, k = i;
  while (l < c->n_layers - 1 && k >= per_layer(c, l)) k -= per_layer(c, l++);
  if (k >= per_layer(c, l)) return head_tensor(c, k - per_layer(c, l)); /* past the layers */
  cl_tensor_spec t = {l, role_of(c, l, k), cl_cfg_split(c, l), 0, {0, 0, 0, 0}};
  int64_t h = c->hidden_dims[l], in = cl_cfg_layer_in(c, l);
  switch (t.role) {
  case CL_TR_WEIGHT:
  case CL_TR_WEIGHT_X:
    t.ndim = 4;
    t.dims[0] = 4 * h;
    t.dims[1] = t.role == CL_TR_WEIGHT ? in + h : in;
    t.dims[2] = in ? c->kernel_sizes[l] : cl_cfg_rkernel_h(c, l);
    t.dims[3] = in ? cl_cfg_kernel_w(c, l) : cl_cfg_rkernel_w(c, l);
    break;
  case CL_TR_WEIGHT_H:
    t.ndim = 4;
    t.dims[0] = 4 * h;
    t.dims[1] = h;
    t.dims[2] = cl_cfg_rkernel_h(c, l);
    t.dims[3] = cl_cfg_rkernel_w(c, l);
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

/* A layer's name is its stack's prefix (arch.h: none for a plain stack;
 * "encoder.", "forecaster.") and its place in the stack (cell_list.l,
 * from 0 in each stack). The head's pseudo-layer (head.weight, head.bias)
 * lies after every layer. */
void cl_tensor_name(char *buf, size_t len, const char *prefix, const cl_tensor_spec *t,
                    const cl_config *c) {
  if (t->role == CL_TR_HEAD_W || t->role == CL_TR_HEAD_B) {
    snprintf(buf, len, "%shead.%s", prefix, t->role == CL_TR_HEAD_W ? "weight" : "bias");
    return;
  }
  const char *role = t->role == CL_TR_BIAS && t->split ? "conv_x.bias" : ROLE_NAME[t->role];
  cl_arch a = cl_arch_of(c);
  const cl_stack *s = &a.stack[cl_arch_stack_of(&a, t->layer)];
  snprintf(buf, len, "%s%scell_list.%d.%s", prefix, s->prefix, t->layer - s->lo, role);
}
