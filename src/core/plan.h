/*
 * core/plan.h -- the memory plan: every buffer a step needs, with its
 * category and exact size, computed from the configuration and the shape
 * without allocating anything (as llm.c sizes its activations up front and
 * ggml's allocator reserves a graph before running it). memory estimates read
 * it; the executor (step.c) places exactly its step buffers in the arena.
 */
#ifndef CONVLSTM_CORE_PLAN_H
#define CONVLSTM_CORE_PLAN_H

#include "internal.h" /* cl_model, cl_schedule */

/* The geometry of a call from its shape and options (checked). */
cl_status cl_schedule_make(cl_model *m, int B, int T, int H, int W, int training,
                       const cl_step_options *o, cl_schedule *g);
/* A training step's target, where the plan depends on it (cl_schedule.dh_one):
 * train_step's, or the one cl_model_plan is asked for. */
void cl_schedule_target(const cl_model *m, cl_target target, cl_schedule *g);
/* Fills *out (entries malloc'ed; free with cl_plan_free). opt may be NULL:
 * then the optimizer state the model holds, if any, is planned. Fails, with
 * the reason in err, with CL_E_INVALID when sizes overflow, or with the
 * backend's status when it cannot say a convolution's workspace. */
/* The carried state (state.c): per layer h then c, each [B, hidden, H, W]
 * in dtype t; its bytes, 0 on overflow. */
size_t cl_state_bytes(const cl_model *m, int B, int H, int W, cl_dtype t);
cl_status cl_plan_build(const cl_model *m, const cl_schedule *g, const cl_optim *opt, cl_plan *out,
                        char *err, size_t errlen);
/* cl_plan_build for the step that binds the plan (step.c), which also
 * needs where each layer's d_hidden starts in the step's one d_hidden
 * buffer: dh_at[l], in units of S * Bm * H * W floats, as the plan placed
 * it from the step's program (cl_program_place); 0 for every layer of an
 * inference step or a free-running one. The program is listed once, here. */
cl_status cl_plan_build_step(const cl_model *m, const cl_schedule *g, const cl_optim *opt,
                             cl_plan *out, int *dh_at, char *err, size_t errlen);
/* The plan of a training step split by batch on n threads (split.c), gm
 * its micro-batch schedule: the model's own buffers (m's, for opt), and for
 * each thread the step buffers of gm as twin (a one-thread model, whose
 * convolution workspace is the thread's) places them, each thread's arena
 * after the one before, with its gradients (the first thread's are the
 * model's) and its backend's scratch. The model holds no arena of its own
 * then. Step rows are named "thread k: ..." */
cl_status cl_plan_build_split(const cl_model *m, const cl_model *twin, const cl_schedule *gm,
                              int n, const cl_optim *opt, cl_plan *out, char *err,
                              size_t errlen);

#endif
