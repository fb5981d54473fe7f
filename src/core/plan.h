/*
 * core/plan.h -- the memory plan: every buffer a step needs, with its
 * category and exact size, computed from the configuration and the shape
 * without allocating anything (as llm.c sizes its activations up front and
 * ggml's allocator reserves a graph before running it). memory estimates read
 * it; the executor (step.c) places exactly its step buffers in the arena.
 */
#ifndef CONVLSTM_CORE_PLAN_H
#define CONVLSTM_CORE_PLAN_H

#include "../convlstm.h"

typedef enum cl_buf_kind {
  /* held by the model across steps */
  CL_BUF_PARAMS = 0, /* flat float [n_params]                          */
  CL_BUF_GRADS,      /* flat float [n_params]                          */
  CL_BUF_OPT_M,      /* Adam first moment or SGD momentum [n_params]   */
  CL_BUF_OPT_V,      /* Adam second moment [n_params]                  */
  /* step buffers, allocated by the executor from the plan; S steps held at
   * once (T, a checkpoint segment or a tbptt window), Bm sequences */
  CL_BUF_X,        /* data: input [S or T, Bm, C_in, H, W]; inference [1, B, C_in, H, W] */
  CL_BUF_GATES,    /* training: [S, Bm, 4h, H, W] per layer (pre-activations,
                      then activations, then their gradients dz);
                      inference: [B, 4 max h, H, W] shared by all layers  */
  CL_BUF_CELL,     /* training: c_t [S, Bm, h, H, W]; inference [2, B, h, H, W] */
  CL_BUF_HID,      /* h_t [S, Bm, h, H, W]; inference [T or 2, B, h, H, W]  */
  CL_BUF_CKPT_H,   /* checkpoint: h at the end of segments [nseg - 1, Bm, h, H, W] */
  CL_BUF_CKPT_C,   /* checkpoint: c likewise                                */
  CL_BUF_DZ_CARRY, /* checkpoint: dz of a segment's first step [Bm, 4h, H, W] */
  CL_BUF_CARRY_H,  /* tbptt: h carried between windows [Bm, h, H, W]        */
  CL_BUF_CARRY_C,  /* tbptt: c likewise                                    */
  CL_BUF_DH,       /* float: d loss / d layer output [S, Bm, max h, H, W],
                      one buffer for every layer in turn (backward.c); the
                      last layer's also receives the target, which the MSE
                      kernel turns into its gradient in place               */
  CL_BUF_DC,       /* float: d loss / d c, one step [Bm, h, H, W]; one buffer
                      of the largest h unless checkpoint segments interleave
                      layers, then one per layer                           */
  CL_BUF_WS,       /* convolution workspace, the largest any call needs    */
  CL_BUF_NKIND
} cl_buf_kind;

static inline int cl_buf_is_step(int kind) { return kind >= CL_BUF_X; }

struct cl_model;
struct cl_geom;

/* Fills *out (entries malloc'ed; free with cl_plan_free). opt may be NULL:
 * then the optimizer state the model holds, if any, is planned. */
cl_status cl_plan_build(const struct cl_model *m, const struct cl_geom *g, const cl_optim *opt,
                        cl_plan *out);

#endif
