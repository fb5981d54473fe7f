/*
 * core/arch.h -- a model's architecture as a value, computed from its
 * configuration alone (no live model, no backend): the stacks of layers it
 * runs, what each stack reads, how many steps it runs, where its state
 * starts, and the head over chosen layers' h. The parameter layout, the
 * tensors' names, the planner, the list of convolution calls and the
 * executor read it; only arch.c reads which kind of model a configuration
 * asks for. Here too: a layer's kernel and dilation with the
 * configuration's defaults resolved (they are facts of the configuration
 * alone).
 *
 * A plain stack is one stack that reads the frames for the input's T steps
 * from the call's state, with or without a head over its top layer. Shi et al.'s encoder-forecaster is two: the
 * encoder (frames, T steps, the call's state) and the forecaster (no
 * input, the target's K steps, from the encoder's last state layer by
 * layer), and a head: a 1x1 convolution with bias over the forecaster's
 * layers' h, channels side by side, giving each frame.
 */
#ifndef CONVLSTM_CORE_ARCH_H
#define CONVLSTM_CORE_ARCH_H

#include "convlstm.h" /* cl_config */

#include <stddef.h>

#define CL_MAX_STACKS 2

/* A configuration's kernel width and dilation of layer l, defaults (0)
 * resolved: what cl_model_create stores, and what a file's config means. */
static inline int cl_cfg_kernel_w(const cl_config *c, int l) {
  return c->kernel_widths[l] ? c->kernel_widths[l] : c->kernel_sizes[l];
}
static inline int cl_cfg_dilation_h(const cl_config *c, int l) {
  return c->dilation_h[l] ? c->dilation_h[l] : 1;
}
static inline int cl_cfg_dilation_w(const cl_config *c, int l) {
  return c->dilation_w[l] ? c->dilation_w[l] : 1;
}
/* The state-to-state kernel of layer l: the input kernel when unset, square
 * when only its height is set. */
static inline int cl_cfg_rkernel_h(const cl_config *c, int l) {
  return c->recurrent_kernel_sizes[l] ? c->recurrent_kernel_sizes[l] : c->kernel_sizes[l];
}
static inline int cl_cfg_rkernel_w(const cl_config *c, int l) {
  if (!c->recurrent_kernel_sizes[l]) return cl_cfg_kernel_w(c, l);
  return c->recurrent_kernel_widths[l] ? c->recurrent_kernel_widths[l]
                                       : c->recurrent_kernel_sizes[l];
}

/* What the first layer of a stack reads at each step. */
typedef enum cl_stack_input {
  CL_STACK_READS_FRAMES = 0, /* the input frames (patched) */
  CL_STACK_READS_NOTHING     /* nothing: one convolution over h (its kernel the recurrent one) */
} cl_stack_input;

/* How many steps a stack runs: the input's or the target's. */
typedef enum cl_stack_steps { CL_STEPS_INPUT = 0, CL_STEPS_TARGET } cl_stack_steps;

typedef struct cl_stack {
  int lo, hi;           /* layers lo .. hi - 1, bottom first */
  cl_stack_input input; /* what layer lo reads */
  cl_stack_steps steps;
  int state_from; /* -1: the call's state (zero, given, carried); s: the last state of stack s,
                     layer by layer (its layer lo + i before this one's lo + i) */
  const char *prefix; /* its layers' state-dict prefix: "" or "encoder." / "forecaster." */
} cl_stack;

typedef struct cl_arch {
  int n_stacks;
  cl_stack stack[CL_MAX_STACKS];
  int head_lo, head_hi; /* the head reads h of layers head_lo .. head_hi - 1; equal: no head */
  int patch;            /* frames enter as patch x patch patches (1: none) */
  int frame_dim;        /* channels of a frame as the layers see it: input_dim * patch^2 */
} cl_arch;

/* The architecture of a configuration (checked by cl_arch_check). */
cl_arch cl_arch_of(const cl_config *c);
/* The constraints the kind of model puts on the configuration (a second
 * stack mirroring the first; what it cannot hold), the reason in err. */
cl_status cl_arch_check(const cl_config *c, char *err, size_t errlen);

static inline int cl_arch_has_head(const cl_arch *a) { return a->head_hi > a->head_lo; }
/* Whether the head reads layer l's h. */
static inline int cl_arch_head_reads(const cl_arch *a, int l) {
  return cl_arch_has_head(a) && l >= a->head_lo && l < a->head_hi;
}
/* The stack that holds layer l. */
static inline int cl_arch_stack_of(const cl_arch *a, int l) {
  int s = 0;
  while (s < a->n_stacks - 1 && l >= a->stack[s].hi) s++;
  return s;
}
/* Whether stacks hand states on (program.c schedules the step); a single
 * stack runs through the executor's segments and windows, its head (if
 * any) in the loss (backward.c). */
static inline int cl_arch_is_wired(const cl_arch *a) { return a->n_stacks > 1; }
/* Whether the head's gradient rides in the top layer's bucket (dist.c):
 * when the head reads that layer alone it is laid out right after it
 * (model.c) and complete before that layer's backward is; else it is a
 * bucket of its own, sent once its lowest layer's part is done (program.c). */
static inline int cl_arch_head_in_top_bucket(const cl_arch *a) {
  return cl_arch_has_head(a) && a->head_lo == a->stack[a->n_stacks - 1].hi - 1;
}
/* Whether a stack runs the target's steps: a call then needs its horizon. */
static inline int cl_arch_runs_target(const cl_arch *a) {
  for (int s = 0; s < a->n_stacks; s++)
    if (a->stack[s].steps == CL_STEPS_TARGET) return 1;
  return 0;
}
/* The stack whose last state another stack starts from (-1: none) for
 * layer l, and that layer there. */
static inline int cl_arch_hands_on(const cl_arch *a, int l, int *to_layer) {
  int s = cl_arch_stack_of(a, l);
  for (int t = 0; t < a->n_stacks; t++)
    if (a->stack[t].state_from == s) {
      if (to_layer) *to_layer = a->stack[t].lo + (l - a->stack[s].lo);
      return t;
    }
  return -1;
}
/* Layer l's input channels: the frame's for a stack reading frames, none
 * for one reading nothing, else the layer below's h. */
static inline int cl_arch_layer_in(const cl_arch *a, const cl_config *c, int l) {
  const cl_stack *s = &a->stack[cl_arch_stack_of(a, l)];
  if (l > s->lo) return c->hidden_dims[l - 1];
  return s->input == CL_STACK_READS_FRAMES ? a->frame_dim : 0;
}
/* Steps stack s runs in a call of T input steps and K target steps. */
static inline int cl_arch_steps(const cl_arch *a, int s, int T, int K) {
  return a->stack[s].steps == CL_STEPS_TARGET ? K : T;
}

#endif
