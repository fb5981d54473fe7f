/*
 * core/arch.c -- which stacks and head a configuration asks for (arch.h):
 * the one place that reads the kind of model (cl_config.forecaster), and
 * the constraints that kind puts on the layers.
 */
#include "arch.h"

#include <stdio.h>
#include <string.h>

static cl_stack stack_of(int lo, int hi, cl_stack_input in, cl_stack_steps steps, int from,
                         const char *prefix) {
  cl_stack s = {lo, hi, in, steps, from, prefix};
  return s;
}

cl_arch cl_arch_of(const cl_config *c) {
  cl_arch a;
  memset(&a, 0, sizeof a);
  a.patch = c->forecaster && c->patch > 1 ? c->patch : 1;
  a.frame_dim = c->input_dim * a.patch * a.patch;
  if (!c->forecaster) {
    a.n_stacks = 1;
    a.stack[0] = stack_of(0, c->n_layers, CL_STACK_READS_FRAMES, CL_STEPS_INPUT, -1, "");
    a.head_lo = c->head ? c->n_layers - 1 : c->n_layers;
    a.head_hi = c->n_layers;
    return a;
  }
  int L = c->n_layers / 2;
  a.n_stacks = 2;
  a.stack[0] = stack_of(0, L, CL_STACK_READS_FRAMES, CL_STEPS_INPUT, -1, "encoder.");
  a.stack[1] = stack_of(L, c->n_layers, CL_STACK_READS_NOTHING, CL_STEPS_TARGET, 0, "forecaster.");
  a.head_lo = L;
  a.head_hi = c->n_layers;
  return a;
}

/* Layer f of a stack that starts from layer l's last state has l's hidden
 * size, kernels and dilation (a layer reading nothing has no input kernel
 * to match). */
static int mirrors(const cl_config *c, int f, int l, int input) {
  int same = c->hidden_dims[f] == c->hidden_dims[l] &&
             cl_cfg_rkernel_h(c, f) == cl_cfg_rkernel_h(c, l) &&
             cl_cfg_rkernel_w(c, f) == cl_cfg_rkernel_w(c, l) &&
             cl_cfg_dilation_h(c, f) == cl_cfg_dilation_h(c, l) &&
             cl_cfg_dilation_w(c, f) == cl_cfg_dilation_w(c, l);
  if (input)
    same = same && c->kernel_sizes[f] == c->kernel_sizes[l] &&
           cl_cfg_kernel_w(c, f) == cl_cfg_kernel_w(c, l);
  return same;
}

static cl_status fail(char *err, size_t errlen, cl_status s, const char *msg) {
  snprintf(err, errlen, "%s", msg);
  return s;
}

cl_status cl_arch_check(const cl_config *c, char *err, size_t errlen) {
  if (c->head != 0 && c->head != 1) {
    snprintf(err, errlen, "head must be 0 (none) or 1 (over the top layer), not %d", c->head);
    return CL_E_INVALID;
  }
  if (!c->forecaster) return CL_OK;
  if (c->head)
    return fail(err, errlen, CL_E_INVALID,
                "an encoder-forecaster has its head already (head is for a plain stack)");
  if (c->forecaster != 1 || c->n_layers % 2 || c->n_layers > CL_MAX_LAYERS - 2) {
    snprintf(err, errlen,
             "an encoder-forecaster has forecaster = 1 and an even n_layers (encoder, then "
             "forecaster) of at most %d, not forecaster = %d with %d layers",
             CL_MAX_LAYERS - 2, c->forecaster, c->n_layers);
    return CL_E_INVALID;
  }
  if (c->patch < 0) {
    snprintf(err, errlen, "patch must be a positive integer, not %d", c->patch);
    return CL_E_INVALID;
  }
  cl_arch a = cl_arch_of(c);
  const cl_stack *to = &a.stack[1], *from = &a.stack[to->state_from];
  for (int i = 0; i < to->hi - to->lo; i++)
    if (!mirrors(c, to->lo + i, from->lo + i, i > 0)) {
      snprintf(err, errlen,
               "forecaster layer %d must have encoder layer %d's hidden size, kernels and "
               "dilation", i + 1, i + 1);
      return CL_E_INVALID;
    }
  if (c->dropout[to->lo] > 0) { /* a layer reading nothing has no input to drop */
    snprintf(err, errlen, "forecaster layer 1 reads no input: its dropout must be 0, not %g",
             c->dropout[to->lo]);
    return CL_E_INVALID;
  }
  return CL_OK; /* what the kind does not run: the capability table */
}
