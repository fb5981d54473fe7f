/*
 * core/program.h -- the training step as data: one scheduler turns an
 * architecture (arch.h) and a call's schedule (cl_schedule: segments,
 * windows, free running, micro-batches) into the list of operations one
 * micro-batch runs. The executor (execute.c) runs the list; the list of
 * convolution calls (conv_calls.c) and so the plan's workspace and the
 * advisor's time model read it. Only program.c reads how the stacks are
 * wired; the ops name layers, steps and where states come from, never a
 * kind of model.
 *
 * A program is one micro-batch of b sequences: the executor runs it once
 * per micro-batch (its first sequence b0 given then), the list of calls
 * counts it as often. A step's micro-batches of Bm sequences run one
 * program, the last (perhaps smaller, and the one whose backward pass
 * completes each gradient: `final`) another.
 */
#ifndef CONVLSTM_CORE_PROGRAM_H
#define CONVLSTM_CORE_PROGRAM_H

#include "internal.h" /* cl_schedule, cl_arch, cl_target */

/* What an op does; the fields it reads are named beside it. */
typedef enum cl_op_kind {
  CL_OP_PUT_X = 0,     /* frames t0 .. t0 + len - 1 of the micro-batch into x from its start */
  CL_OP_PUT_TRUTH,     /* free running: the true frames of the fed-back steps that read them */
  CL_OP_FORWARD,       /* layers lo .. hi - 1 over len steps from `before`; layer lo reads x */
  CL_OP_FORWARD_FREE,  /* free running: the input steps, then each fed-back step (forward.c) */
  CL_OP_HEAD_FORWARD,  /* the head over len steps into its output's steps t0 .. */
  CL_OP_SAVE_END,      /* layers lo .. hi - 1's h and c at step len - 1 to `to` */
  CL_OP_LOSS_SEGMENT,  /* the loss of steps t0 .., len (`share` of the batch's), through a
                          head over layer hi - 1 when there is one, and its gradient */
  CL_OP_LOSS_FRAMES,   /* the loss of the head's output over the target's steps, at once */
  CL_OP_HEAD_BACKWARD, /* layer lo's part of the head over len steps from t0 (accumulate:
                          onto what the layer above put in d_hidden) */
  CL_OP_ZERO_DH,       /* layer lo's d_hidden over len steps: nothing comes from above */
  CL_OP_BUCKET,        /* data parallel: the gradient bucket of (pseudo-)layer lo complete */
  CL_OP_RECEIVE,       /* layer lo's step len - 1 receives the gradient of the state it
                          handed to layer hi (h through hi's hidden half, c from hand_c) */
  CL_OP_BACKWARD,      /* layer lo over len steps from `before` (backward.c's piece) */
  CL_OP_BACKWARD_FREE, /* free running: the fed-back steps, then the input steps */
  CL_OP_HAND_C,        /* layer lo's initial c's gradient into hand_c of layer hi */
  CL_OP_KEEP_STATE,    /* the carried state, from carry_h / carry_c */
  /* the step's own list (cl_step_ops): */
  CL_OP_ZERO_GRAD,     /* the gradients and the step's results zeroed */
  CL_OP_MICRO_BATCH,   /* sequences t0 .. t0 + len - 1: their dropout masks, then the
                          micro-batch's program (hi: 1 for the step's last, else 0) */
  CL_OP_REDUCE,        /* data parallel: the gradients and the loss summed over the ranks */
  CL_OP_UPDATE,        /* unscale, clip, guard and the optimizer's update */
  CL_OP_NKIND
} cl_op_kind;

/* Where states come from (before a segment) or go (SAVE_END). */
typedef enum cl_state_at {
  CL_AT_ZERO = 0,  /* zeros: no state */
  CL_AT_CALL,      /* the call's: given, or carried between steps (state.c) */
  CL_AT_CKPT,      /* checkpoint `slot` */
  CL_AT_CARRY,     /* carry_h / carry_c: a window's end, or a segmented step's last state */
  CL_AT_STACK_END  /* the last step (`slot`) of stack `stack`'s layers, layer by layer */
} cl_state_at;

typedef struct cl_state_ref {
  cl_state_at at;
  int slot, stack;
} cl_state_ref;

/* Layer lo's input in FORWARD and BACKWARD: x from this step, or: */
#define CL_X_NONE (-1)  /* nothing (a layer that reads no input) */
#define CL_X_BELOW (-2) /* the h of the layer below */

typedef struct cl_op {
  cl_op_kind kind;
  int lo, hi;          /* layers (RECEIVE, HAND_C: the other layer in hi) */
  int t0, len;         /* steps */
  int x_at;            /* FORWARD, BACKWARD(_FREE): layer lo's input (above) */
  cl_state_ref before; /* FORWARD, BACKWARD(_FREE): the states before step 0 */
  cl_state_ref to;     /* SAVE_END */
  unsigned fresh_dc : 1, carry_in : 1, save_carry : 1; /* BACKWARD (backward.c) */
  unsigned last_pass : 1; /* BACKWARD(_FREE), BUCKET: each gradient is complete after it */
  unsigned accumulate : 1; /* HEAD_BACKWARD */
  double share;            /* LOSS_SEGMENT */
  int64_t times;           /* a summary's op stands for this many (1 in a program that runs) */
} cl_op;

typedef struct cl_program {
  cl_op *v; /* malloc'ed; free with cl_program_free */
  int n, cap;
  int oom; /* an append failed: the list is incomplete */
} cl_program;

/* The ops of one micro-batch of b sequences of a training step of
 * schedule g with target tg over the n_layers layers of architecture a;
 * final: the step's last micro-batch. Appends to *out (zeroed by the
 * caller); CL_E_OOM when it could not grow. */
cl_status cl_program_build(const cl_arch *a, int n_layers, const cl_schedule *g, cl_target tg,
                           int b, int final, cl_program *out);
/* The same ops in summary, for what counts them and sizes their buffers
 * (the convolution-call list, the planner): where a stack runs more than
 * CL_SUMMARY_SEGMENTS segments or windows, the middle ones (all but the
 * first and the last) appear once, as the last of them, with `times` their
 * number -- so a summary's length does not grow with the steps. */
#define CL_SUMMARY_SEGMENTS 4
cl_status cl_program_summary(const cl_arch *a, int n_layers, const cl_schedule *g, cl_target tg,
                             int b, int final, cl_program *out);
void cl_program_free(cl_program *p);
/* step.c: the step's programs for the geometry m holds (prog[0] the
 * micro-batches' before the last, [1] the last's, [2] the step's list),
 * listed at the first call and kept with the step's buffers. */
cl_status cl_step_programs(cl_model *m, cl_target target, const cl_program **out);
/* execute.c: a step's list (cl_step_ops) with its micro-batches'
 * programs prog[0] (those before the last) and prog[1] (the last); opts
 * for the dropout masks, u for the update. */
cl_status cl_step_run(cl_model *m, cl_call *c, const cl_program *step, const cl_program *prog,
                      const cl_source *x, const cl_source *y, cl_target tg, float ls,
                      const cl_update_args *u, const cl_step_options *opts);
/* execute.c: program p over sequences b0 .. b0 + b - 1 of the step (x, y
 * its sources, tg its target; the loss times its share of the batch added
 * to *acc, its gradient times ls). */
cl_status cl_program_run(cl_model *m, cl_call *c, const cl_program *p, const cl_source *x,
                         const cl_source *y, cl_target tg, int b0, int b, float ls, double *acc);
/* A training step of schedule g as a list: the gradients zeroed, each
 * micro-batch of Bm sequences (the last perhaps fewer), the data-parallel
 * reduction, the update. Appends to *out; CL_E_OOM when it cannot grow. */
cl_status cl_step_ops(const cl_schedule *g, cl_program *out);
/* The micro-batches of a step: how many (*n) and the last one's size. */
static inline int cl_micro_batches(const cl_schedule *g, int *last) {
  int n = g->B / g->Bm + (g->B % g->Bm != 0);
  if (last) *last = g->B - (n - 1) * g->Bm;
  return n;
}

#endif
