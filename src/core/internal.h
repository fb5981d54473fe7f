/*
 * core/internal.h -- what the core's files share and nobody else sees: the
 * model struct, its layers and step buffers, the accounting allocator and the
 * error helpers. Callers outside src/core use convlstm.h only.
 */
#ifndef CONVLSTM_CORE_INTERNAL_H
#define CONVLSTM_CORE_INTERNAL_H

#include "convlstm.h"
#include "backend.h"   /* cl_backend, kernel shapes */
#include "alloc.h"     /* cl_allocator */
#include "arch.h"      /* cl_arch: the stacks and the head */

/* One ConvLSTM layer. Its torch weight [4h, in+h, kh, kw] is kept as two packed
 * halves, wx [4h, in, kh, kw] and wh [4h, h, rkh, rkw], because the input half runs
 * once over all steps (the fast path) and the hidden half once per step, and
 * cuDNN filters cannot be strided views. With two different kernels (rkh x rkw
 * is not kh x kw) the halves are torch's two tensors conv_x.weight and
 * conv_h.weight (tensors.c). Offsets count floats in the flat
 * parameter (and gradient) buffer, so one optimizer launch updates all. */
typedef struct cl_layer {
  int in, hidden;
  int kh, kw, dh, dw; /* kernel and dilation; "same" padding (backend.h) */
  int rkh, rkw;       /* the hidden half's kernel (dilated by dh, dw too) */
  size_t off_wx, off_wh, off_b; /* off_b unused without bias */
  size_t n_wx, n_wh, n_b;
  /* peepholes: w_ci, w_cf, w_co one after the other, each [hidden, pp]
   * (pp = 1 per channel, H * W per position); n_pc = 0 without */
  size_t off_pc, n_pc;
  /* groups of the training convolutions (cl_conv_input_half / _hidden_half):
   * 4 where per-gate dropout masks the input / h_{t-1} (each gate its own
   * masked copy, dropout.c), else 1 */
  int groups_x, groups_h;
} cl_layer;

/* ---- tensors.c: the one table of a configuration's named tensors ------
 * State-dict order, per layer: conv.weight, conv.bias (with bias), then
 * w_ci, w_cf, w_co (with peepholes); a layer with two different kernels has
 * conv_x.weight, conv_x.bias (with bias), conv_h.weight in place of the
 * first two. Names, torch shapes and the flat layout (model.c) all follow
 * it; model_file_read.c reads files by it. */
typedef enum cl_tensor_role {
  CL_TR_WEIGHT = 0, /* both halves in one torch tensor (equal kernels) */
  CL_TR_BIAS,
  CL_TR_WCI, /* the peepholes, in the order of their places in the flat buffer */
  CL_TR_WCF,
  CL_TR_WCO,
  CL_TR_WEIGHT_X, /* the halves as two tensors (different kernels) */
  CL_TR_WEIGHT_H,
  /* the head (arch.h; its pseudo-layer, cl_head): weight, bias */
  CL_TR_HEAD_W,
  CL_TR_HEAD_B
} cl_tensor_role;
#define CL_TENSORS_PER_LAYER 6
#define CL_MAX_TENSORS (CL_TENSORS_PER_LAYER * CL_MAX_LAYERS + 2)
typedef struct cl_tensor_spec {
  int layer;
  cl_tensor_role role;
  int split; /* the layer's kernels differ: conv_x / conv_h names */
  int ndim;
  int64_t dims[4]; /* torch's shape */
} cl_tensor_spec;
/* Where a bias or peephole tensor of L starts in the flat buffer, and its
 * elements (a weight is two halves: off_wx, off_wh). */
static inline size_t cl_whole_offset(const cl_layer *L, cl_tensor_role r) {
  if (r == CL_TR_WEIGHT_X || r == CL_TR_HEAD_W) return L->off_wx;
  if (r == CL_TR_HEAD_B) return L->off_b;
  if (r == CL_TR_WEIGHT_H) return L->off_wh;
  return r == CL_TR_BIAS ? L->off_b : L->off_pc + (size_t)(r - CL_TR_WCI) * (L->n_pc / 3);
}
static inline size_t cl_whole_numel(const cl_layer *L, cl_tensor_role r) {
  if (r == CL_TR_WEIGHT_X || r == CL_TR_HEAD_W) return L->n_wx;
  if (r == CL_TR_HEAD_B) return L->n_b;
  if (r == CL_TR_WEIGHT_H) return L->n_wh;
  return r == CL_TR_BIAS ? L->n_b : L->n_pc / 3;
}
static inline int cl_role_is_peephole(cl_tensor_role r) {
  return r >= CL_TR_WCI && r <= CL_TR_WCO;
}
/* Tensors of a configuration. */
int cl_cfg_n_tensors(const cl_config *c);
/* Tensor i (0 <= i < cl_cfg_n_tensors) of c. */
cl_tensor_spec cl_cfg_tensor(const cl_config *c, int i);
/* Its name after prefix ("" for the parameter itself). */
void cl_tensor_name(char *buf, size_t len, const char *prefix, const cl_tensor_spec *t,
                    const cl_config *c);
/* Pixels per channel of a peephole weight (1 per channel, H * W per
 * position), 0 without peepholes. */
int64_t cl_cfg_peephole_pixels(const cl_config *c);
/* "none", "channel", "position". */
const char *cl_peephole_name(int kind);

/* The configuration's architecture (arch.h) asked for one fact: its patch
 * size (1 without patches), the channels of a frame as the layers see it
 * (patched), and layer l's input channels (0 for a layer reading nothing:
 * one convolution over h with its recurrent kernel, and the bias). */
static inline int cl_cfg_patch(const cl_config *c) { return cl_arch_of(c).patch; }
static inline int cl_cfg_frame_dim(const cl_config *c) { return cl_arch_of(c).frame_dim; }
static inline int cl_cfg_layer_in(const cl_config *c, int l) {
  cl_arch a = cl_arch_of(c);
  return cl_arch_layer_in(&a, c, l);
}
/* Whether layer l's two kernels differ (its weight is then two tensors);
 * a layer without input has one. */
static inline int cl_cfg_split(const cl_config *c, int l) {
  if (cl_cfg_layer_in(c, l) == 0) return 0;
  return cl_cfg_rkernel_h(c, l) != c->kernel_sizes[l] ||
         cl_cfg_rkernel_w(c, l) != cl_cfg_kernel_w(c, l);
}

/* The schedule of one call, derived from its shape and options; it decides
 * the plan, and two calls with equal geometry share step buffers.
 *  - checkpoint: time runs in segments of S steps; only h and c at segment
 *    ends are kept, and backward recomputes a segment before using it.
 *  - recompute_gates: only h and c of every step are kept; forward and
 *    backward run the gates rc steps at a time, backward recomputing them
 *    from the kept h_{t-1}, c_{t-1} and input (the same calls as forward's).
 *  - tbptt: windows of S steps, forward then backward each, state carried
 *    forward detached; x is uploaded window by window.
 *  - accumulation: micro-batches of Bm sequences (the last may be smaller).
 *  - inference: step-major, x uploaded step by step, c kept for two steps,
 *    h for two steps too when only last states are asked for. */
typedef struct cl_schedule {
  int B, T, H, W;
  int training;
  int Bm;    /* sequences held at once: the micro-batch */
  int S;     /* steps held at once: segment or window (T when neither) */
  int nseg;  /* checkpoint segments, 1 without checkpointing */
  int tbptt; /* nonzero: S is a truncation window */
  cl_dtype dtype;
  cl_layout layout;   /* of every activation: the model's (cl_model.layout) */
  cl_outputs outputs; /* inference */
  cl_state_mode state; /* where the call starts from (state.c) */
  int state_B;         /* a given state's sequences the step's buffers hold: B,
                          or a split step's thread's share (split.c) */
  int horizon;         /* inference: frames rolled forward after the T steps of x;
                          training: the target is the last `horizon` steps;
                          an encoder-forecaster: the forecaster's steps (T:
                          the encoder's; H, W: the patched frame's) */
  int free_run;        /* training with a horizon, no teacher forcing: steps
                          T - horizon + 1 .. T - 1 read the last layer's h of
                          the step before (forward.c, backward.c) */
  int rc;              /* training with recompute_gates: steps per chunk whose
                          gates are held at once (<= S); 0: every step's gates
                          are kept from forward to backward */
  int weight_steps;    /* training with a loss weight: steps of it held at once
                          (S for a sequence target, 1 for the last state); 0: none */
  int dh_one;          /* training: d_hidden holds one step, not S -- a last-state
                          target on one layer, where only the last step receives
                          the loss's gradient and nothing comes from above, so
                          each step's flows back through one buffer (backward.c
                          dh_at; cl_schedule_target) */
} cl_schedule;

/* Layer L's two convolutions over n images at g's frame size and storage
 * type: the input half (in -> 4h channels, kernel kh x kw) and the hidden
 * half (h -> 4h, kernel rkh x rkw).
 * In training with per-gate dropout masks, a half is 4 groups over the 4
 * masked copies side by side (4 in or 4 h channels), each gate's weight rows
 * on its own copy. The one place a layer's convolution geometry is written
 * down. */
static inline cl_conv_shape cl_conv_input_half(const cl_layer *L, const cl_schedule *g, int n) {
  int G = g->training ? L->groups_x : 1;
  cl_conv_shape s = {n,     G * L->in, g->H,     g->W, 4 * L->hidden, L->kh, L->kw, L->dh,
                     L->dw, g->dtype,  G,         g->layout, 0};
  return s;
}
static inline cl_conv_shape cl_conv_hidden_half(const cl_layer *L, const cl_schedule *g, int n) {
  int G = g->training ? L->groups_h : 1;
  cl_conv_shape s = {n,     G * L->hidden, g->H,     g->W, 4 * L->hidden, L->rkh, L->rkw, L->dh,
                     L->dw, g->dtype,      G,             g->layout, 0};
  return s;
}
/* A joined layer's one convolution of a training step (cl_layer_joins):
 * [h_{t-1}, x_t] -> 4h over n images, each image's h channels then its
 * input's. */
static inline cl_conv_shape cl_conv_joined(const cl_layer *L, const cl_schedule *g, int n) {
  cl_conv_shape s = cl_conv_hidden_half(L, g, n);
  s.C = L->hidden + L->in;
  return s;
}

/* The buffers of a model and of a step: one row each, from which come the
 * enum cl_buf_kind (CL_BUF_<KIND>), the step's fields (cl_step), their
 * binding to the arena (step.c) and the names of the plan's rows (plan.c;
 * a per-layer buffer's row is "name[l]"). plan.c sizes them; the R package
 * lists them with cl_buffer_name (convlstm.h).
 *
 * Held by the model across steps: ROW(KIND, name, other name or NULL). */
#define CL_MODEL_BUFFERS(ROW)                                                              \
  ROW(PARAMS, "parameters", NULL)            /* flat float [n_params] */                   \
  ROW(GRADS, "gradients", NULL)              /* flat float [n_params] */                   \
  /* Adam's first moment, or SGD's momentum (the other name) [n_params] */                 \
  ROW(OPT_M, "adam.exp_avg", "sgd.momentum_buffer")                                        \
  ROW(OPT_V, "adam.exp_avg_sq", NULL)        /* Adam's second moment */                    \
  ROW(OPT_VMAX, "adam.max_exp_avg_sq", NULL) /* amsgrad's running maximum */               \
  /* RMSprop's state, held in the buffers above (optim.c): square_avg in                   \
   * opt_v, momentum_buffer in opt_m, grad_avg (centered) in opt_vmax */                   \
  ROW(RMS_SQ, "rmsprop.square_avg", NULL)                                                  \
  ROW(RMS_MOM, "rmsprop.momentum_buffer", NULL)                                            \
  ROW(RMS_GAVG, "rmsprop.grad_avg", NULL)                                                  \
  ROW(BACKEND, "backend_scratch", NULL)      /* the backend's own scratch */               \
  /* carried state (CL_STATE_CARRY): per layer h then c, each [B, h, H, W],                \
   * in the storage dtype */                                                               \
  ROW(HELD, "carried_state", NULL)

/* Step buffers, allocated by the executor from the plan; S steps held at
 * once (T, a checkpoint segment or a tbptt window), Bm sequences.
 * ROW(KIND, cl_step field, name, other name or NULL, LAYER: one per layer
 * (a row of layer -1 serves every layer) or ONE, STORE: the storage dtype
 * or F32: float). */
#define CL_STEP_BUFFERS(ROW)                                                               \
  /* data: input [S or T, Bm, C_in, H, W]; inference [1, B, C_in, H, W] */                 \
  ROW(X, x, "x", NULL, ONE, STORE)                                                         \
  /* training: [S, Bm, 4h, H, W] per layer (pre-activations, then activations,             \
   * then their gradients dz); with recompute_gates (the other name)                       \
   * [rc, Bm, 4 max h, H, W] shared by all layers, a chunk of steps at a time;             \
   * inference: [B, 4 max h, H, W] shared by all layers */                                 \
  ROW(GATES, gates, "gates", "gates_recompute", LAYER, STORE)                              \
  /* training: c_t [S, Bm, h, H, W]; inference [2, B, h, H, W] */                          \
  ROW(CELL, cell, "cell", NULL, LAYER, STORE)                                              \
  /* h_t [S, Bm, h, H, W]; inference [T or 2, B, h, H, W] */                               \
  ROW(HID, hid, "hidden", NULL, LAYER, STORE)                                              \
  /* checkpoint: h and c at the end of segments [nseg - 1, Bm, h, H, W] */                 \
  ROW(CKPT_H, ckpt_h, "checkpoint_h", NULL, LAYER, STORE)                                  \
  ROW(CKPT_C, ckpt_c, "checkpoint_c", NULL, LAYER, STORE)                                  \
  /* checkpoint: dz of a segment's first step [Bm, 4h, H, W] */                            \
  ROW(DZ_CARRY, dz_carry, "dz_carry", NULL, LAYER, STORE)                                  \
  /* tbptt: h and c carried between windows [Bm, h, H, W] */                               \
  ROW(CARRY_H, carry_h, "carry_h", NULL, LAYER, STORE)                                     \
  ROW(CARRY_C, carry_c, "carry_c", NULL, LAYER, STORE)                                     \
  /* d loss / d layer output [S, Bm, max h, H, W], one buffer for every layer              \
   * in turn (backward.c); the last layer's also receives the target, which                \
   * the loss kernel turns into its gradient in place; [1, Bm, h, H, W] with               \
   * cl_schedule.dh_one */                                                                     \
  ROW(DH, dh, "d_hidden", NULL, LAYER, F32)                                                \
  /* d loss / d c, one step [Bm, h, H, W]; one buffer of the largest h unless              \
   * checkpoint segments interleave layers, then one per layer */                          \
  ROW(DC, dc, "d_cell", NULL, LAYER, F32)                                                  \
  /* convolution workspace, the largest any call needs */                                  \
  ROW(WS, ws, "conv_workspace", NULL, ONE, STORE)                                          \
  /* CL_STATE_GIVEN: the initial h and c [B, h, H, W] */                                   \
  ROW(INIT_H, init_h, "initial_h", NULL, LAYER, STORE)                                     \
  ROW(INIT_C, init_c, "initial_c", NULL, LAYER, STORE)                                     \
  /* inference with a horizon: the predicted frames [K, B, C_in, H, W], each               \
   * the next step's input */                                                              \
  ROW(FRAMES, frames, "frames", NULL, ONE, STORE)                                          \
  /* training with a loss weight: placed as the target in d_hidden                         \
   * [weight_steps, Bm, C_out, H, W] (the segment's under way) */                          \
  ROW(WEIGHT, weight, "weight", NULL, ONE, F32)                                            \
  /* training with dropout: layer l's input mask [Bm, in, H, W] and, with                  \
   * recurrent dropout, its h_{t-1} mask [Bm, h, H, W] (dropout.c); NULL: none */          \
  ROW(MASK_X, mask_x, "dropout_mask_x", NULL, LAYER, F32)                                  \
  ROW(MASK_H, mask_h, "dropout_mask_h", NULL, LAYER, F32)                                  \
  /* training with dropout: a masked input [S, Bm, in, H, W] or masked h                   \
   * [S, Bm, h, H, W] of one layer at a time, in the storage dtype, or a float             \
   * [Bm, h, H, W] gradient before its mask; shared by every layer (dropout.c) */          \
  ROW(DROPPED, dropped, "dropout_masked", NULL, ONE, STORE)                                \
  /* free-running training: d loss / d h of layer l below the last, two steps              \
   * [2, Bm, h, H, W] (one when a single step is fed back), while the fed-back             \
   * steps run backward step by step (backward.c) */                                       \
  ROW(DH_ROLL, dh_roll, "d_hidden_rollout", NULL, LAYER, F32)                              \
  /* a wired step (program.c, arch.h): the head's output, each predicted                    \
   * frame patched [T_out, Bm, C p p, H/p, W/p] (inference: frames); the                   \
   * target placed there in float, then the loss's gradient; and d loss / d c              \
   * of the initial state that layer l handed on [Bm, h, H/p, W/p], for its                \
   * last step */                                                                          \
  ROW(HEAD_OUT, head_out, "head_output", NULL, ONE, STORE)                                 \
  ROW(HEAD_GRAD, head_grad, "d_head", NULL, ONE, F32)                                      \
  ROW(HAND_C, hand_c, "d_cell_handover", NULL, LAYER, F32)                                 \
  /* training, a joined layer's step (cl_layer_joins): its input [Bm, h + in,              \
   * H, W] and its weights [4h, h + in, kh, kw], the largest layer's */                    \
  ROW(JOIN, join, "joined_input", NULL, ONE, STORE)                                        \
  ROW(JOIN_W, join_w, "joined_weights", NULL, ONE, F32)                                    \
  /* training with dropout: the call's seed (cl_step_options.dropout_seed),                \
   * written before the masks are drawn and read by mask_draw, so that a                   \
   * recorded step replays with a new seed (dropout.c) */                                  \
  ROW(SEED, seed, "dropout_seed", NULL, ONE, U64)

#define CL_BUF_ENUM_MODEL_(kind, name, other) CL_BUF_##kind,
#define CL_BUF_ENUM_STEP_(kind, field, name, other, per, dt) CL_BUF_##kind,
typedef enum cl_buf_kind {
  CL_MODEL_BUFFERS(CL_BUF_ENUM_MODEL_)
  CL_STEP_BUFFERS(CL_BUF_ENUM_STEP_)
  CL_BUF_NKIND
} cl_buf_kind;
#undef CL_BUF_ENUM_MODEL_
#undef CL_BUF_ENUM_STEP_

static inline int cl_buf_is_step(int kind) { return kind >= CL_BUF_X; }

/* Buffers of one planned step, views into the model's step arena at the
 * plan's offsets (step.c binds them by the table above).
 * Activations are in the storage dtype (void *), gradients float. */
#define CL_BUF_CTYPE_STORE void
#define CL_BUF_CTYPE_F32 float
#define CL_BUF_CTYPE_U64 uint64_t
#define CL_BUF_DIM_ONE
#define CL_BUF_DIM_LAYER [CL_MAX_LAYERS]
#define CL_BUF_FIELD_(kind, field, name, other, per, dt) CL_BUF_CTYPE_##dt *field CL_BUF_DIM_##per;
struct cl_program; /* program.h */
typedef struct cl_step {
  int valid;
  cl_schedule g;
  cl_plan plan;
  CL_STEP_BUFFERS(CL_BUF_FIELD_)
  int outputs_kept; /* the buffers hold the whole call's outputs and states */
  int state_b0;     /* the first sequence of a given state in init_h, init_c */
  /* a training step's ops (train.c) for target prog_target, kept while g
   * holds: [0] its micro-batches' before the last, [1] the last's, [2] its
   * own list; NULL: none yet */
  struct cl_program *prog;
  cl_target prog_target;
} cl_step;
#undef CL_BUF_FIELD_

/* Pointer to element i of a buffer stored in dtype t. */
static inline void *cl_at(void *base, size_t i, cl_dtype t) {
  return base ? (char *)base + i * cl_dtype_size(t) : NULL;
}

/* Where the model is between calls; backward consumes a training forward
 * because it overwrites the saved gate activations with their gradients. */
typedef enum cl_phase {
  CL_PHASE_NONE = 0,
  CL_PHASE_INFERENCE,
  CL_PHASE_TRAINING,  /* forward kept activations, backward possible */
  CL_PHASE_LOSS,      /* and cl_model_mse stored d loss / d output */
  CL_PHASE_CONSUMED,  /* backward ran: a new forward is needed */
  CL_PHASE_STALE      /* the parameters changed after the forward: likewise */
} cl_phase;

/* How a CPU model's training steps share its threads (split.c): each call
 * split across them, each thread a part of the batch, or whichever of the
 * two measured faster (CONVLSTM_SPLIT=call, batch, auto). */
typedef enum cl_split_mode {
  CL_SPLIT_CALL = 0,
  CL_SPLIT_BATCH = 1,
  CL_SPLIT_AUTO = 2
} cl_split_mode;
/* CL_SPLIT_AUTO's probe: rounds of four steps (each way, a warm-up step and
 * a timed one), then the steps its choice holds before the next probe. */
#define CL_SPLIT_PROBE_ROUNDS 3
#define CL_SPLIT_REPROBE_STEPS 500
/* A split step's one-thread models, one a thread (split.c makes and frees
 * them); step.c gives their arenas back when the model makes its own. */
#define CL_SPLIT_MAX 64
typedef struct cl_twins {
  int n;
  cl_model *m[CL_SPLIT_MAX];
} cl_twins;

struct cl_model {
  cl_arch arch; /* the stacks and the head, from cfg (arch.h) */
  cl_config cfg;
  cl_backend *be;
  cl_allocator mem;
  cl_layer layer[CL_MAX_LAYERS];
  int n_tensors;
  char tensor_name[CL_MAX_TENSORS][48];
  size_t n_params;
  float *params, *grads;
  /* optimizer state, created at the first step */
  cl_optim_kind opt_kind;
  float *opt_m, *opt_v;
  float *opt_vmax;  /* amsgrad's max_exp_avg_sq */
  int opt_amsgrad;  /* the state was made for amsgrad (opt_vmax follows it) */
  int opt_m_fresh; /* the momentum buffer awaits its first update (SGD seeds it then) */
  /* the carried state (state.c): one buffer, per layer h then c, each
   * [held_B, h, held_H, held_W] in held_dtype; NULL when none */
  void *held;
  size_t held_bytes;
  int held_B, held_H, held_W;
  cl_dtype held_dtype;
  int64_t opt_steps;
  double grad_norm; /* before clipping, of the last step that measured it (grad_norm.c); else NaN */
  cl_step step;
  void *be_scratch; /* the backend's scratch_bytes, workspace, held for the model's life */
  void *arena; /* reserved for step buffers; outlives any one step's plan */
  size_t arena_bytes;
  cl_phase phase;
  cl_target loss_target;
  cl_loss_scale scaler; /* float16 only */
  /* the step's decisions (backend.h) where the backend keeps none on its
   * device: a host backend's block, read through cl_vals() */
  cl_step_vals host_vals;
  struct cl_ahead *ahead; /* buffers of batches sent ahead (ahead.c), or NULL */
  struct cl_data *data; /* data sets on the device (data.c), freed with the model */
  int *data_idx;        /* a step's rows on the device, shared by the data sets */
  int data_idx_cap;
  size_t device_used_at_create; /* device total - free before the parameters (GPU) */
  cl_layout layout; /* of its activations, fixed at creation (model.c: layout_of) */
  int guard; /* CONVLSTM_GUARD=1 at creation: guard bands after arena buffers (step.c) */
  int poison; /* CONVLSTM_POISON=1 at creation: step buffers filled with NaN outside
                 their lifetimes, host backends (execute.c) */
  int have_device_used;
  cl_backend_ctor make_backend; /* its backend's constructor: a split step's twins' too */
  cl_split_mode split_mode; /* CONVLSTM_SPLIT at creation: how training steps share threads */
  int join_off; /* CONVLSTM_JOIN=0 at creation: no layer's input joins its hidden half
                   (cl_layer_joins), for the tests that compare the two */
  struct cl_split *split; /* that step's probe and the configuration of its twins */
  cl_twins twins;         /* its per-thread models, made at its first step */
  char err[CL_ERRMSG_LEN];
};

/* The head (arch.h): a pseudo-layer after the last (its weight at off_wx,
 * n_wx; its bias at off_b, n_b). In the flat buffer its weight is one 1x1
 * filter [C p p, h_j] per layer j it reads, one after the other (torch's
 * [C p p, sum h, 1, 1] is their columns side by side, params.c), so that
 * each layer's part is a convolution of its own. */
static inline const cl_layer *cl_head(const cl_model *m) { return &m->layer[m->cfg.n_layers]; }
/* Layer l's part of the head over n images: h_l -> C p p, 1x1. */
static inline cl_conv_shape cl_conv_head(const cl_model *m, int l, const cl_schedule *g, int n) {
  cl_conv_shape s = {n, m->layer[l].hidden, g->H, g->W, m->arch.frame_dim, 1, 1, 1, 1,
                     g->dtype, 1, g->layout, 0};
  return s;
}
/* Where layer l's part of the head's weight starts. */
static inline size_t cl_head_offset(const cl_model *m, int l) {
  size_t at = cl_head(m)->off_wx;
  for (int j = m->arch.head_lo; j < l; j++)
    at += (size_t)m->layer[j].hidden * (size_t)m->arch.frame_dim;
  return at;
}

/* Channels of the model's output at each step: its head's frame, or the
 * top layer's h. */
static inline int cl_output_channels(const cl_model *m) {
  return cl_arch_has_head(&m->arch) ? m->arch.frame_dim : m->layer[m->cfg.n_layers - 1].hidden;
}

/* Layer L's fused cell over n images at g's frame size: the one place its
 * shape (and which peepholes it has) is written down. */
static inline cl_gates_shape cl_cell_shape(const cl_model *m, const cl_layer *L,
                                           const cl_schedule *g, int n) {
  cl_gates_shape s = {n, L->hidden, g->H * g->W, g->dtype, (cl_peephole)m->cfg.peephole,
                      g->layout};
  return s;
}
/* Its peephole weights (w_ci, w_cf, w_co) in a flat buffer of parameters
 * or gradients; NULL without. */
static inline float *cl_peep_of(const cl_layer *L, float *flat) {
  return L->n_pc ? flat + L->off_pc : NULL;
}
/* Whether layer l drops its input / its h_{t-1} in a training call. */
static inline int cl_layer_drops_input(const cl_model *m, int l) {
  return m->cfg.dropout[l] > 0;
}
static inline int cl_layer_drops_hidden(const cl_model *m, int l) {
  return m->cfg.recurrent_dropout[l] > 0;
}

/* ---- What each file offers the files above it ---------------------------
 * Grouped by file. Which file stands on which floor, and the order in which
 * a training step runs through them, is written once, in src/core/README.md. */

/* util.c. Errors: write into the model's buffer and return the status. */
cl_status cl_fail(cl_model *m, cl_status s, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;
/* Pass a backend failure on with its message. */
cl_status cl_fail_backend(cl_model *m, cl_status s, const char *what);
#define CL_TRY(expr)                     \
  do {                                   \
    cl_status cl_try_s_ = (expr);        \
    if (cl_try_s_ != CL_OK) return cl_try_s_; \
  } while (0)
/* A kernel call: on failure copy the backend's message into the model's. */
#define CL_KERNEL(m, expr)                                          \
  do {                                                              \
    cl_status cl_k_s_ = (expr);                                     \
    if (cl_k_s_ != CL_OK) return cl_fail_backend((m), cl_k_s_, #expr); \
  } while (0)
/* Sizes with overflow checks: 0 on overflow. */
size_t cl_mul_size(size_t a, size_t b);
/* A monotonic clock's seconds (util.c). */
double cl_seconds(void);
/* A list of n elements (elt bytes) at v with room for one more: v, or
 * moved with its capacity *cap doubled (from 16) when it was full; NULL
 * (v still the list, as it was) when it cannot grow. */
void *cl_grow(void *v, int *cap, int n, size_t elt);

/* osmem.c. The process's resident bytes now and at their high-water mark;
 * 1 when read, 0 with the reason in why where the platform cannot say. */
int cl_os_process_memory(size_t *rss, size_t *hwm, char *why, size_t whylen);

/* step.c */
/* Bytes of canary after every arena buffer of a model made with
 * CONVLSTM_GUARD=1, beyond the buffer's alignment padding (which is guarded
 * too); 0 otherwise. plan.c places them, step.c fills and checks them. */
#define CL_GUARD_BYTES 256
cl_status cl_step_prepare(cl_model *m, const cl_schedule *g);
/* Every guard band still holds its canary; else CL_E_INTERNAL naming the
 * buffer written past. Nothing to check without guards. */
cl_status cl_guard_check(cl_model *m);
void cl_step_release(cl_model *m);
/* A model buffer (gradients, optimizer state, data sets). When the device refuses it,
 * the step arena is given back and the allocation tried once more -- unless
 * it holds a training forward that backward still needs. */
cl_status cl_model_alloc(cl_model *m, cl_mem_category cat, size_t bytes, void **out);
/* The gradient buffer, allocated and zeroed on first use. */
cl_status cl_grads_ensure(cl_model *m);

/* pack.c. A block of a host array: sequences [b0, b0 + nb) and steps
 * [t0, t0 + nt) (nt = 1, t0 = 0 for 4-d arrays). */
typedef struct cl_block {
  int b0, nb, t0, nt;
} cl_block;
cl_block cl_block_all(const cl_host_array *a);
/* host <-> device, converting layout and dtype in one pass, staged through
 * host memory when the device is not host memory. */
cl_status cl_put_host(cl_model *m, void *dev, cl_dtype t, const cl_host_array *src, cl_block blk);
cl_status cl_get_host(cl_model *m, cl_host_array *dst, const void *dev, cl_dtype t);
/* The same for frames of the model (x, y, predictions): an
 * encoder-forecaster's in p x p patches (pixel_unshuffle on the way in,
 * pixel_shuffle on the way out; the block's H, W are the host's). */
cl_status cl_put_frames(cl_model *m, void *dev, cl_dtype t, const cl_host_array *src, cl_block k);
cl_status cl_get_frames(cl_model *m, cl_host_array *dst, const void *dev, cl_dtype t);
/* Threads to convert n elements of a batch with: one below PACK_MIN_ELEMS,
 * else a CPU model's (its step's team), the `threads` of a model on another
 * backend, or OpenMP's default, at most PACK_MAX_THREADS; one in a forked
 * child. */
int cl_pack_threads(const cl_model *m, size_t n);
/* bytes of host memory to the device as they are, staged as cl_put_host. */
cl_status cl_put_bytes(cl_model *m, void *dev, const void *host, size_t bytes);
/* Where a training step reads x and y (or backward a gradient): a host
 * array, or rows of a data set already on the device (data.c) -- then a
 * block's sequences b0.. are rows idx[b0..] gathered on the device, so the
 * engine is the same for both. */
typedef struct cl_source {
  const cl_host_array *host; /* a host array, or NULL for a data set's tensor: */
  const void *dev;           /* time-major [T, N, row] in dtype */
  int N;
  size_t row_bytes;
  cl_dtype dtype;
  const int *idx, *d_idx; /* the step's rows, on the host and on the device */
  /* A host array converted ahead (staged.c): host memory laid out as dev
   * is ([T, N, row] in dtype, rows in order), uploaded as it is when a
   * put asks for dtype; any other put packs host. */
  const void *staged;
  /* The same bytes sent ahead into a device buffer (ahead.c), or NULL:
   * then a put copies them on the device. */
  const void *staged_dev;
} cl_source;
static inline cl_source cl_source_host(const cl_host_array *a) {
  cl_source s = {a, NULL, 0, 0, CL_F32, NULL, NULL, NULL, NULL};
  return s;
}
/* Block k of src into host memory dst as a put of it leaves the device
 * ([nt, nb, row] in t; frames in p x p patches, p 1 for none), on
 * cl_pack_threads' team. Reads m's layout only: safe beside a step of m on
 * another thread. */
void cl_pack_block(const cl_model *m, void *dst, cl_dtype t, const cl_host_array *src,
                   cl_block k, int p);
/* Elements of one row of a host array (one sequence at one step: C * H *
 * W of [N, T, C, H, W], or of [N, C, H, W] as one step) and its steps. */
size_t cl_host_row_elems(const cl_host_array *a);
int cl_host_steps(const cl_host_array *a);
/* The patch a step packs the caller's x and y in: an encoder-forecaster's
 * (its frames in and out), 1 for a stack, whose y are hidden states. */
static inline int cl_host_patch(const cl_model *m) {
  return cl_arch_runs_target(&m->arch) ? cl_cfg_patch(&m->cfg) : 1;
}
/* ahead.c: the model's two device buffers of batches sent ahead. A buffer
 * is claimed by a batch's serial (nonzero) from its send until its step
 * has queued its last read. reserve: each at least bytes (none on a
 * backend that cannot send ahead), every claim dropped when they grow;
 * free: gone. Neither while a step runs. claim: a free buffer's slot of at
 * least bytes for serial, or -1; claim, holds, unclaim and buffer may run
 * beside a step. */
typedef struct cl_ahead cl_ahead;
cl_status cl_ahead_reserve(cl_model *m, size_t bytes);
void cl_ahead_free(cl_model *m);
int cl_ahead_claim(const cl_model *m, unsigned serial, size_t bytes);
int cl_ahead_holds(const cl_model *m, int slot, unsigned serial);
void cl_ahead_unclaim(const cl_model *m, int slot, unsigned serial);
void *cl_ahead_buffer(const cl_model *m, int slot);
/* cl_model_train_step's checks and step on x and y read through xs and ys
 * (train.c; staged.c gives sources with x and y converted ahead). */
cl_status cl_train_arrays(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                          const cl_source *xs, const cl_source *ys, cl_target target,
                          const cl_optim *opt, const cl_step_options *opts, double *loss);
/* cl_put_host for either kind of source. */
cl_status cl_put_source(cl_model *m, void *dev, cl_dtype t, const cl_source *src, cl_block blk);
/* cl_put_frames for either kind of source (a data set of frames is stored
 * patched already: its rows are gathered as they are). */
cl_status cl_put_frames_source(cl_model *m, void *dev, cl_dtype t, const cl_source *src,
                               cl_block blk);

/* What one training call asks beyond its arrays, built once from its
 * cl_step_options (call.c, cl_call_make) and handed down as an argument
 * through forward, backward, the loss and data parallel: nothing of it is
 * parked on the model between calls. cl_call_plain() is the call of a
 * separate forward / loss / backward: MSE, no weight, one process. */
typedef struct cl_call {
  cl_loss_fn loss;   /* the loss minimised (zeros: MSE) */
  cl_source weight;  /* its per-element weight; weight.host NULL: none */
  /* scheduled sampling: per fed-back step of a free-running step, nonzero
   * where it reads the true frame (cl_step_options.truth); NULL: every step
   * its own (cl_reads_truth) */
  const int *truth;
  /* data parallel (dist.c): the communicator or NULL, the weight of this
   * rank's gradients and loss (its share of the global batch's sequences;
   * 1 for a summed loss: cl_loss_rank_share), and whether the backward running is the step's last
   * pass over each layer (its gradients then complete; train.c sets it) */
  struct cl_comm *comm;
  double comm_share;
  int last_pass;
} cl_call;
static inline cl_call cl_call_plain(void) {
  cl_call c = {{CL_LOSS_MSE, 0, 0, CL_REDUCE_MEAN}, {NULL, NULL, 0, 0, CL_F32, NULL, NULL, NULL, NULL},
               NULL, NULL, 1.0, 0};
  return c;
}
/* Whether fed-back step s (T - horizon + 1 <= s < T of g) of a
 * free-running step reads the true frame, which train.c put in x's slot
 * (scheduled sampling), instead of the last layer's h of the step before. */
static inline int cl_reads_truth(const cl_call *c, const cl_schedule *g, int s) {
  return c->truth && c->truth[s - (g->T - g->horizon + 1)];
}

/* dist.c. With a call's comm set and its last_pass, backward hands layer
 * l's gradients (weights and bias, one contiguous bucket) to the
 * communicator; cl_dist_finish waits for every bucket and makes *loss (the
 * step's results, cl_vals: device memory on a GPU) the global mean.
 * cl_dist_active: a communicator of more than one rank is in use (no CUDA
 * graph then). */
cl_status cl_dist_check(cl_model *m, struct cl_comm *c);
int cl_dist_active(const cl_call *c);
cl_status cl_dist_bucket_ready(cl_model *m, const cl_call *c, int l);
cl_status cl_dist_finish(cl_model *m, cl_call *c, double *loss);
/* Every bucket at once, then cl_dist_finish: a step whose backward ran
 * without the communicator (a split step's threads, split.c). */
cl_status cl_dist_reduce_all(cl_model *m, cl_call *c, double *loss);

/* dropout.c: the masks of a call (cl_step_options) applied on the device.
 * Layer l drops its input when cfg.dropout[l] > 0 and its h_{t-1} when
 * cfg.recurrent_dropout[l] > 0, in training only.
 * cl_dropout_check: a training call has (or draws) the masks its layers need.
 * cl_dropout_upload: sequences b0..b0+b-1 of them into the step's mask
 * buffers (each micro-batch its own rows): drawn there (draw_masks) or,
 * given, uploaded; first: the call's first micro-batch on m, which stages
 * the seed (a split step's threads start at other rows).
 * cl_dropout_input / cl_dropout_hidden: *out = the masked input of layer l
 * over len steps of b sequences (or len steps of h), in the shared buffer
 * (per-gate masks: the 4 copies its grouped convolution reads), or x itself
 * when the layer drops nothing there.
 * cl_dropout_input_grad: dx (float, len steps) = mask * conv_transpose(dz),
 * the gradient reaching the layer's input through the input half.
 * cl_dropout_hidden_grad: dh (+)= mask * conv_transpose(dz), the gradient
 * reaching h_{t-1} through the hidden half of one step; same_w: the call
 * before on the workspace was this one's of the step after (cl_conv_shape's
 * same_w).
 * cl_dropout_input_step_grad: dx (+)= mask * conv_transpose(dz) through the
 * input half of one step (free-running's fed-back steps). */
cl_status cl_dropout_check(cl_model *m, const cl_step_options *o);
cl_status cl_dropout_upload(cl_model *m, const cl_step_options *o, int b0, int b, int first);
cl_status cl_dropout_input(cl_model *m, int l, int b, int len, const void *x, const void **out);
cl_status cl_dropout_hidden(cl_model *m, int l, int b, int len, const void *h, const void **out);
cl_status cl_dropout_input_grad(cl_model *m, int l, int b, int len, const void *dz, float *dx);
cl_status cl_dropout_hidden_grad(cl_model *m, int l, int b, const void *dz, float *dh,
                                 int accumulate, int same_w);
cl_status cl_dropout_input_step_grad(cl_model *m, int l, int b, const void *dz, float *dx,
                                     int accumulate);

/* forward.c / backward.c: the engine's pieces, run by execute.c. A segment
 * is len steps of b sequences in the step buffers; prev_h/prev_c give each
 * layer's state before it (NULL: zeros); x is its input. */
cl_status cl_forward_segment(cl_model *m, int b, int len, const void *x, void *const *prev_h,
                             void *const *prev_c);
/* The same for layers lo..hi-1 only, layer lo reading x (NULL for a layer
 * without input); prev_h, prev_c indexed by layer. */
cl_status cl_forward_layers(cl_model *m, int lo, int hi, int b, int len, const void *x,
                            void *const *prev_h, void *const *prev_c);
/* The head (arch.h) over n images: out (C p p channels, the step's dtype)
 * = bias + the sum over the layers l it reads of their 1x1 filters over
 * h[l] (n images each). */
cl_status cl_head_forward(cl_model *m, int n, void *const *h, void *out);
/* The head's backward for layer l's part over images n0..n0+n-1 of d_head
 * (in the storage dtype: cl_head_grad_store first), against the n images
 * of h that layer l's buffer holds from its start: into d_hidden[l]
 * (accumulate: onto what it holds) and the head's gradients (its bias with
 * the first part). */
cl_status cl_head_backward(cl_model *m, int l, int n0, int n, int accumulate);
/* After the loss: d_head (float, n images) where the head's backward
 * reads it, in the step's storage dtype (nothing to do in float32). */
cl_status cl_head_grad_store(cl_model *m, int n);
/* Whether layer l's input joins its hidden half in a training step of
 * geometry g: one convolution over [h_{t-1}, x_t] each step (forward.c)
 * instead of the input half once over every step's images, where the
 * input has CL_JOIN_RATIO times fewer channels than the hidden state or
 * fewer (forward only: backward's calls stay the halves'). The tutorial's
 * layer 1 (1 channel beside 64): its input half, once over every step's
 * images, wrote 295 MB of gates that each step's hidden half read back,
 * for a 9-tap product; joined, the input is the 65th channel of the
 * hidden half's products, whose forward at 65 channels measured as at 64,
 * and the step took 0.93-0.96x the time on one thread, 0.88-0.95x on two
 * (doc/speed.md). The copy into one input is a memcpy: host memory only;
 * one kernel for both halves; no per-gate dropout groups; channels first,
 * so an image's h and x planes lie one after the other. Read by the
 * executor, the calls list and the plan alike. */
#define CL_JOIN_RATIO 16
static inline int cl_layer_joins(const cl_model *m, int l, const cl_schedule *g) {
  const cl_layer *L = &m->layer[l];
  return g->training && !m->join_off && m->be->iface->host_accessible && L->in > 0 &&
         (long long)L->in * CL_JOIN_RATIO <= L->hidden && L->groups_x == 1 && L->groups_h == 1 &&
         L->kh == L->rkh && L->kw == L->rkw && g->layout == CL_NCHW;
}
/* Layer l's steps s0..s0+len-1 (in: its input from the segment's step 0),
 * their gates into z on, c and h into the layer's buffers; prev_h, prev_c
 * are read when s0 is 0. Forward, and backward's recompute_gates. */
cl_status cl_forward_steps(cl_model *m, int l, int b, int s0, int len, const void *in,
                           const void *prev_h, const void *prev_c, void *z);
/* Layers lo..hi-1's h and c at step len - 1 to dst_h[l], dst_c[l]: a
 * segment's end (checkpoints, a window's state handed on). */
cl_status cl_save_layers_end(cl_model *m, int lo, int hi, int b, int len, void *const *dst_h,
                             void *const *dst_c);
/* fresh_dc: d_cell starts at zero (else it carries the later segment's);
 * carry_in: add the recurrent gradient that the later segment left in
 * dz_carry; save_carry: leave this segment's for the earlier one. */
cl_status cl_backward_segment(cl_model *m, const cl_call *c, int b, int len, const void *x,
                              void *const *prev_h, void *const *prev_c, int fresh_dc,
                              int carry_in, int save_carry);
/* Layer l alone over len steps from step 0, as cl_backward_segment does
 * each layer (d_hidden[l] holds its output's gradient; fresh_dc, carry_in,
 * save_carry as there; save_carry also keeps step 0's dz in dz_carry for a
 * stack that handed this layer its state): the per-layer piece that owns
 * recompute_gates' chunks and the data-parallel bucket hook, whichever
 * schedule calls it. */
cl_status cl_backward_layer(cl_model *m, const cl_call *c, int l, int b, int len, const void *in,
                            const void *prev_h, const void *prev_c, int fresh_dc, int carry_in,
                            int save_carry);
/* Free-running training (g.free_run): the whole step of g.T steps, whose
 * last horizon - 1 read the last layer's h of the step before, copied into
 * x's slot. Backward: through those steps one at a time, every layer in
 * turn (the gradient of a fed-back frame reaches the last layer's h of the
 * step before), then the input steps as cl_backward_segment. */
cl_status cl_forward_free_run(cl_model *m, const cl_call *c, int b, void *x,
                              void *const *prev_h, void *const *prev_c);
cl_status cl_backward_free_run(cl_model *m, const cl_call *c, int b, const void *x,
                               void *const *prev_h, void *const *prev_c);
/* The loss of the segment's part of the target (sequences b0.., steps
 * t0..t0+len-1 of the call), times share, added to *acc: a double in
 * device memory (cl_vals), so that nothing waits for it; with want_grad the
 * last layer's d_hidden receives share * loss_scale times its gradient
 * (zeros at steps without a target). */
cl_status cl_loss_segment(cl_model *m, const cl_call *c, const cl_source *y, cl_target target,
                          int b0, int b, int t0, int len, double share, float loss_scale,
                          int want_grad, double *acc);
/* The loss of the head's output over the target's g.horizon steps of
 * sequences b0.. against y's frames (patched as y; each element's times
 * the call's weight), at once: its gradient (times ls) left in d_head,
 * in the storage dtype, for each layer's part of the head's backward. */
cl_status cl_loss_frames(cl_model *m, const cl_call *c, const cl_source *y, int b0, int b,
                         float ls, double *acc);
cl_status cl_zero(cl_model *m, void *p, size_t bytes);

/* Adam and AdamW share moments, update and state names. */
static inline int cl_optim_is_adam(cl_optim_kind k) {
  return k == CL_OPTIM_ADAM || k == CL_OPTIM_ADAMW;
}

/* optim.c: "Adam", "AdamW", "SGD" for messages ("none" for 0). */
const char *cl_optim_kind_title(cl_optim_kind k);

/* state.c: where a call starts from and what a carrying step keeps.
 * cl_state_check: the mode and the given arrays against B, H, W (before
 * anything is allocated); cl_state_prepare: the carried state allocated
 * (zeros) before the step arena; cl_state_upload: the given state's
 * sequences b0 .. b0 + g.state_B - 1 into the step buffers once they exist;
 * cl_state_borrow: t reads and keeps m's carried state (a split step's
 * thread, which never frees it). */
cl_status cl_state_check(cl_model *m, const cl_step_options *o, int B, int H, int W);
cl_status cl_state_prepare(cl_model *m, const cl_schedule *g);
cl_status cl_state_upload(cl_model *m, const cl_step_options *o, int b0);
void cl_state_borrow(cl_model *t, const cl_model *m);
/* The state before step 0 of sequences b0.. of the current step: 1 with
 * per-layer pointers in h, c, or 0 for zeros. */
int cl_state_initial(cl_model *m, int b0, void **h, void **c);
/* CL_STATE_CARRY: the per-layer [b, hidden, H, W] buffers h, c become the
 * carried state of sequences b0..b0+b-1. */
cl_status cl_state_keep(cl_model *m, int b0, int b, void *const *h, void *const *c);
void cl_state_free(cl_model *m);

/* optim.c: cl_optim_check (convlstm.h) with the reason in the model. */
cl_status cl_check_optim(cl_model *m, const cl_optim *o);
/* o's state, created on first use and reset when the kind changes;
 * *created (may be NULL; set on success): whether this call allocated any. */
cl_status cl_optim_ensure(cl_model *m, const cl_optim *o, int *created);
/* Whether o keeps state buffer `which` (opt_m, opt_v, opt_vmax: their roles
 * by optimizer in optim.c): what optim.c allocates and the planner counts.
 * Here, not in optim.c, so that the planner (below optim.c, which allocates
 * through step.c) need not call up. */
enum { CL_OPT_STATE_M = 0, CL_OPT_STATE_V, CL_OPT_STATE_VMAX };
static inline int cl_optim_keeps(const cl_optim *o, int which) {
  const int adam = cl_optim_is_adam(o->kind), rms = o->kind == CL_OPTIM_RMSPROP;
  switch (which) {
  case CL_OPT_STATE_M: return adam || o->momentum != 0;
  case CL_OPT_STATE_V: return adam || rms;
  default: return adam ? o->amsgrad != 0 : rms && o->centered;
  }
}
/* Frees the optimizer state; the next step starts it afresh. */
void cl_optim_free(cl_model *m);

/* loss.c: CL_OK when every element of a loss weight is finite and >= 0. */
cl_status cl_loss_weight_check(cl_model *m, const cl_host_array *w);

/* loss.c: the weight of a segment's mean loss under f's reduction, for a
 * segment of n elements holding `share` of the batch's (the mean's
 * weight), in a batch of B sequences: share, n (sum) or n / B (batchmean).
 * cl_loss_rank_share: a data-parallel rank's weight, from its share of the
 * global batch's sequences: that share, or 1 for the sum. */
double cl_loss_share(const cl_loss_fn *f, double share, size_t n, int B);
double cl_loss_rank_share(const cl_loss_fn *f, double comm_share);

/* loss.c: the loss f over n elements of pred (the step's
 * dtype) against target (float), each times weight (float [n]; NULL: none):
 * *acc (device memory) += share * its mean; grad (may alias target, or be
 * NULL) = scale times d mean / d pred. Unweighted MSE is the backend's mse
 * kernel, the rest its loss kernel (backend.h, loss_acc). */
cl_status cl_loss_run(cl_model *m, const cl_loss_fn *f, const void *pred, const float *target,
                      const float *weight, size_t n, float scale, float *grad, double share,
                      double *acc);

/* step.c: the step's decision block (backend.h, cl_step_vals): on the
 * device, or m->host_vals for a backend that keeps none. cl_vals_read is a
 * synchronisation: the one of a training step, after its update. */
cl_step_vals *cl_vals(cl_model *m);
cl_status cl_vals_zero(cl_model *m);
cl_status cl_vals_read(cl_model *m, cl_step_vals *out);

/* optim.c: the update's arguments for o from the model's state (made
 * first with cl_optim_ensure): pointers and hyper-parameters, the step
 * count as the next update's. keep = 0: as if the state were about to be
 * created (step 1, fresh momentum). */
void cl_optim_args(const cl_model *m, const cl_optim *o, int keep, cl_update_args *u);
/* An update's guard found `fault` (backend.h's key): the refusal, naming
 * the tensor and why. */
cl_status cl_optim_refuse(cl_model *m, cl_optim_kind kind, uint64_t fault);
/* An update was applied: the step count and the momentum's first use. */
void cl_optim_applied(cl_model *m);

/* call.c: a training call's arguments, checked once.
 * cl_check_sequence: x is [batch, time, channels, height, width] with
 * `channels` channels; cl_check_target: y or an output gradient shaped as
 * the target needs for [B, T, ., H, W].
 * cl_call_check_arrays: the optimizer, and x, y and the options' weight of
 * a step on host arrays; shape gets B, T (with a free-running horizon's
 * fed-back steps), H, W.
 * cl_call_make: the options against the model and the step's shape (the
 * geometry into *g, the state, the dropout masks, the loss, data parallel)
 * and the call's context into *c. Allocates nothing. */
cl_status cl_check_sequence(cl_model *m, const cl_host_array *x, const char *what, int channels);
/* cl_check_frames: x is a sequence of the model's frames, whose height and
 * width an encoder-forecaster's patch divides. */
cl_status cl_check_frames(cl_model *m, const cl_host_array *x, const char *what);
cl_status cl_check_target(cl_model *m, const cl_host_array *a, cl_target target, const char *what,
                          int B, int T, int H, int W);
cl_status cl_call_check_arrays(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                               cl_target target, const cl_optim *opt,
                               const cl_step_options *opts, int *shape);
cl_status cl_call_make(cl_model *m, const cl_source *x, int B, int T, int H, int W,
                       const cl_step_options *opts, cl_schedule *g, cl_call *c);

/* call.c: an encoder-forecaster's train_step arguments: x [B, T, C, H, W],
 * y [B, K, C, H, W] (the sequence target; K the forecaster's steps), what
 * its schedule does not run refused; shape gets B, T, H / p, W / p, K. */
cl_status cl_call_check_forecast(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                                 cl_target target, const cl_optim *opt,
                                 const cl_step_options *opts, int *shape);

/* train.c: the step of cl_model_train_step once its arguments are checked:
 * B sequences of T steps of H x W pixels read from x and y. */
cl_status cl_train_sources(cl_model *m, const cl_source *x, const cl_source *y, cl_target target,
                           int B, int T, int H, int W, const cl_optim *opt,
                           const cl_step_options *opts, double *loss);
/* GradScaler's defaults, then cl_scaler_reset. */
void cl_scaler_defaults(cl_loss_scale *s);
/* The settings (init_scale, factors, growth_interval) in range; the reason,
 * naming the setting, in err. */
cl_status cl_scaler_check(const cl_loss_scale *s, char *err, size_t errlen);
/* The scale back at init_scale and the counts at zero; the settings stay. */
void cl_scaler_reset(cl_loss_scale *s);

/* data.c: frees every data set of m (cl_model_free). */
void cl_data_free_all(cl_model *m);

/* model_make.c: a model of cfg on make_backend's backend, its parameters
 * zeros (no loss scaler: model.c's constructor sets it), and the whole of
 * one given back (not data sets nor a split step's twins: cl_model_free). */
cl_status cl_model_make(const cl_config *cfg, cl_backend_ctor make_backend, cl_model **out,
                        char *err, size_t errlen);
void cl_model_unmake(cl_model *m);
/* A device with memory of its own: its used bytes (total - free, every
 * process's) in *used, 1; 0 on the host or where the backend cannot say. */
int cl_model_device_used(cl_model *m, size_t *used);

/* model.c, model_file_read.c: convlstm.h's model constructors
 * (cl_model_create, cl_saved_create_model, cl_model_load) with the backend's
 * constructor given; src/backend_reg.c gives it. */
cl_status cl_model_create_with(const cl_config *cfg, cl_backend_ctor make_backend, cl_model **out,
                               char *err, size_t errlen);
cl_status cl_saved_create_model_with(const cl_saved *s, const cl_config *runtime,
                                     int with_optimizer, cl_backend_ctor make_backend,
                                     cl_model **out, char *err, size_t errlen);
cl_status cl_model_load_with(const char *path, const cl_config *runtime, int with_optimizer,
                             cl_backend_ctor make_backend, cl_model **out, char *err,
                             size_t errlen);

/* params.c: tensor i (state-dict order) between the flat buffer, where a
 * weight is two packed halves, and torch's layout (to_torch: flat -> t). */
void cl_convert_tensor(const cl_model *m, int i, float *flat, float *t, int to_torch);
/* Elements of tensor i. */
size_t cl_tensor_numel(const cl_model *m, int i);

/* split.c: a training step split by batch across a CPU model's threads.
 * cl_split_schedule: the threads the step of g could run on,
 * and its micro-batch schedule gm; 0 for the usual step. cl_split_use:
 * whether this step of n such threads runs split (CL_SPLIT_AUTO: as its
 * probe or its choice says; 0 lets the twins go); cl_split_timed: the step's seconds, for the
 * probe. cl_split_twins: the n one-thread models that run it, made (or
 * kept) now; cl_split_twin: the first, NULL before. cl_split_step: the step
 * on n threads, with the update args u, loss scale ls and the call's
 * options (dropout's seed or masks), in place of train.c's launch_step.
 * cl_split_ran: the threads the model's last training step ran on, 0 when
 * it was not split (for tests). */
int cl_split_schedule(const cl_model *m, const cl_schedule *g, cl_schedule *gm);
int cl_split_use(cl_model *m, int n);
void cl_split_timed(cl_model *m, double seconds);
cl_status cl_split_twins(cl_model *m, int n);
const cl_model *cl_split_twin(const cl_model *m);
cl_status cl_split_step(cl_model *m, cl_call *c, const cl_source *x, const cl_source *y,
                        cl_target tg, float ls, const cl_update_args *u,
                        const cl_step_options *opts, const cl_schedule *g, const cl_schedule *gm,
                        int n);
int cl_split_ran(const cl_model *m);
/* The twins given back (empty_cache), the probe's books kept; all (free). */
void cl_split_release(cl_model *m);
void cl_split_free(cl_model *m);

#endif
