/*
 * core/conv_calls.h -- the step's convolution calls, enumerated: every
 * distinct (layer, half, direction, shape) the executor (train.c, forward.c,
 * backward.c, dropout.c) launches for a call's geometry, with how many
 * times. The one place the schedule is written down as data: the plan's
 * workspace pass (plan.c) and the advisor's time model (R, through
 * cl_model_conv_calls) read it, and tests/c/test_conv_calls.c compares it
 * with the calls a real step makes.
 */
#ifndef CONVLSTM_CORE_CONV_CALLS_H
#define CONVLSTM_CORE_CONV_CALLS_H

#include "internal.h" /* cl_model, cl_schedule, cl_conv_shape */

typedef struct cl_conv_call {
  cl_conv_dir dir;
  int layer, half; /* the layer's input half (0), hidden half (1) or part of the
                   * head (2) */
  cl_conv_shape s;  /* its N is 0 where the images overflow an int */
  int64_t images;   /* N: steps times sequences */
  int64_t count;
} cl_conv_call;

typedef struct cl_conv_list {
  cl_conv_call *v; /* malloc'ed; free with cl_conv_list_free */
  int n, cap;
  int oom; /* an append failed: the list is incomplete */
} cl_conv_list;

/* The calls of one call of geometry g: a training step (g->training) with
 * its target (tbptt with a last-state target runs only the last window
 * backward) and scheduled sampling's flags (truth: NULL, or horizon - 1
 * flags as cl_step_options.truth), or an inference forward (target and
 * truth unused). Appends to *out (zeroed by the caller). CL_E_OOM when the
 * list could not grow. */
cl_status cl_conv_calls(const cl_model *m, const cl_schedule *g, cl_target target, const int *truth,
                        cl_conv_list *out);
void cl_conv_list_free(cl_conv_list *l);

#endif
