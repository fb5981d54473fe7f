/*
 * convlstm.h -- the public C interface of the convlstm core.
 *
 * Plain C11, no R headers: the R glue (src/r_*.c), the standalone library
 * (libconvlstm.so), its C tests and benchmark driver and a Python/ctypes
 * harness all call the core through this header and nothing else. It lives
 * in inst/include so that the R package installs it: other packages'
 * C code reaches these functions through convlstm_api.h beside it.
 *
 * It is not the backend interface (src/core/backend.h): callers never see
 * kernels, device pointers or streams, only a model handle, host arrays and
 * status codes. Every function that can fail returns a cl_status and writes a
 * message that cl_model_error() returns; nothing here exits, aborts or jumps.
 *
 * Layout at this boundary is the user's: arrays are batch first,
 * [batch, time, channels, height, width], either as R stores them (double,
 * column-major) or as torch stores them (float, row-major); see
 * cl_host_format. Inside, the core keeps row-major, time-major float tensors
 * [T, B, C, H, W] and converts in one pass.
 */
#ifndef CONVLSTM_H
#define CONVLSTM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CL_MAX_LAYERS 32
#define CL_MAX_THREADS 1024
#define CL_ERRMSG_LEN 512

typedef enum cl_status {
  CL_OK = 0,
  CL_E_INVALID,     /* bad argument: shape, range, name, size overflow */
  CL_E_OOM,         /* an allocation was refused: device memory or memory_limit */
  CL_E_UNSUPPORTED, /* this build or backend lacks the feature */
  CL_E_BACKEND,     /* a device call failed (CUDA, cuDNN) */
  CL_E_STATE,       /* wrong call order, e.g. backward without a training forward */
  CL_E_INTERNAL     /* a bug: please report */
} cl_status;

typedef enum cl_device { CL_DEVICE_CPU = 0, CL_DEVICE_CUDA = 1 } cl_device;

/* Peephole connections (Shi et al. 2015): the i and f gates see
 * w_ci * c_{t-1} and w_cf * c_{t-1}, the o gate w_co * c_t (Hadamard).
 * CHANNEL: one weight per hidden channel, torch shape [hidden, 1, 1];
 * POSITION: the paper's, one per channel and pixel, [hidden, H, W], which
 * fixes the frame size to cl_config's peephole_h x peephole_w. */
typedef enum cl_peephole {
  CL_PEEP_NONE = 0,
  CL_PEEP_CHANNEL = 1,
  CL_PEEP_POSITION = 2
} cl_peephole;

/* Storage type of activations and convolution inputs. Parameters, gradients
 * and optimizer state are always float32. */
typedef enum cl_dtype { CL_F32 = 0, CL_F16 = 1, CL_BF16 = 2 } cl_dtype;
#define CL_N_DTYPES 3

/* Which output a loss or an output gradient refers to. */
typedef enum cl_target {
  CL_TARGET_LAST_STATE = 0, /* h of the last layer at the last step: [B, C, H, W] */
  CL_TARGET_SEQUENCE = 1    /* the last layer's whole output: [B, T, C, H, W] */
} cl_target;

/* Every byte the core holds on the compute device has one of these. */
typedef enum cl_mem_category {
  CL_MEM_PARAMETERS = 0,
  CL_MEM_GRADIENTS,
  CL_MEM_OPTIMIZER,
  CL_MEM_ACTIVATIONS, /* saved by a training forward for backward */
  CL_MEM_STATES,      /* running h and c when activations are not kept */
  CL_MEM_WORKSPACE,   /* convolution workspace, activation gradients, temporaries */
  CL_MEM_DATA,        /* the batch's inputs and targets on the device */
  CL_MEM_NCAT
} cl_mem_category;

/* Host array formats at the boundary. dims are always the logical,
 * batch-first ones: [B, T, C, H, W] for sequences, [B, C, H, W] for states. */
typedef enum cl_host_format {
  CL_HOST_R_F64 = 0,    /* double, column-major (an R array) */
  CL_HOST_TORCH_F32 = 1 /* float, row-major (a contiguous torch tensor) */
} cl_host_format;

/* Dropout masks of a layer's input and h_{t-1} (cl_config.dropout_masks). */
typedef enum cl_dropout_masks {
  CL_MASKS_SHARED = 0,  /* one mask, the four gates' convolutions share it */
  CL_MASKS_PER_GATE = 1 /* one per gate, in the gates' order i, f, o, g (Keras) */
} cl_dropout_masks;
/* Its name, as R and a model file's metadata say it: "shared", "per_gate". */
const char *cl_dropout_masks_name(int kind);

typedef struct cl_host_array {
  void *data;
  cl_host_format format;
  int ndim;    /* 4 or 5 */
  int dims[5]; /* batch first */
} cl_host_array;

typedef struct cl_config {
  int input_dim;
  int n_layers;
  int hidden_dims[CL_MAX_LAYERS];
  int kernel_sizes[CL_MAX_LAYERS];  /* odd kernel heights (and widths, by default) */
  int kernel_widths[CL_MAX_LAYERS]; /* odd; 0: kernel_sizes (square) */
  int dilation_h[CL_MAX_LAYERS];    /* dilation of the convolution; 0: 1 */
  int dilation_w[CL_MAX_LAYERS];
  /* the state-to-state (h_{t-1}) kernel, Shi et al.'s "ConvLSTM(9x9)-1x1":
   * odd height and width; 0: the input kernel's (kernel_sizes x kernel_widths),
   * and a width of 0 with a height set: square. Dilation applies to both. */
  int recurrent_kernel_sizes[CL_MAX_LAYERS];
  int recurrent_kernel_widths[CL_MAX_LAYERS];
  int bias;                        /* 0 or 1 */
  cl_device device;
  cl_dtype dtype;
  int n_threads;       /* CPU threads; 0: the backend's default */
  size_t memory_limit; /* bytes the allocator may hold; 0: device capacity */
  int peephole;                /* cl_peephole; 0: none (the tutorial's cell) */
  int peephole_h, peephole_w;  /* CL_PEEP_POSITION: the frame size; else 0 */
  /* Dropout of layer l in training, Keras's ConvLSTM2D semantics (Gal and
   * Ghahramani): the fraction in [0, 1) of the layer's input x_t
   * (dropout) and of its h_{t-1} (recurrent_dropout) zeroed by masks drawn
   * once per sequence and scaled by 1 / (1 - p); 0: none. The masks are
   * given by the caller or drawn by the core from the caller's seed
   * (cl_step_options: mask_x / mask_h, draw_masks / dropout_seed). */
  double dropout[CL_MAX_LAYERS];
  double recurrent_dropout[CL_MAX_LAYERS];
  /* cl_dropout_masks: one mask per gate (Keras's ConvLSTM2D) or one shared
   * by the four gates (0, the tied variant; what a zeroed config and a file
   * without the field get). A mask is [B, C, H, W] shared, [B, 4, C, H, W]
   * per gate (cl_step_options). */
  int dropout_masks;
  /* Shi et al. (2015)'s encoder-forecaster (1; 0: a plain stack): layers
   * 0 .. n_layers/2 - 1 are the encoder, the rest the forecaster of the
   * same hidden sizes and kernels, started from the encoder's last states;
   * forecaster layer 0 takes no input (one convolution over h, with the
   * recurrent kernel), and a 1x1 convolution with bias (the head) over all
   * forecaster hidden states, layer 0 first, gives each frame. n_layers is
   * even. Frames enter as patch x patch patches (pixel_unshuffle: channel
   * c p p + i p + j holds pixel (c, y p + i, x p + j)) and leave through
   * pixel_shuffle; 0 or 1: no patches. A plain stack ignores patch (0). */
  int forecaster;
  int patch;
  /* A plain stack's head (1; 0: none): a 1x1 convolution with bias over the
   * top layer's h giving each step's output frame of input_dim channels, so
   * outputs are not bounded by tanh (head.weight [input_dim, h, 1, 1],
   * head.bias). The model's outputs, its training target and the frames a
   * horizon feeds back are then the head's. An encoder-forecaster has its
   * head always and leaves this 0. */
  int head;
} cl_config;

typedef struct cl_model cl_model;

/* ---- lifetime -------------------------------------------------------- */

/* Checks cfg, creates the backend and allocates the parameters (zeros).
 * On failure *out is NULL and err (if not NULL) holds the message. */
cl_status cl_model_create(const cl_config *cfg, cl_model **out, char *err, size_t errlen);
/* Releases every byte the model holds. NULL-safe. */
void cl_model_free(cl_model *m);
/* Number of models alive in this process (leak tests). */
int cl_models_alive(void);
/* The message of the model's last failure ("" when none). */
const char *cl_model_error(const cl_model *m);
const cl_config *cl_model_config(const cl_model *m);
/* Name of the backend in use ("cpu", "cuda"). */
const char *cl_model_backend_name(const cl_model *m);
/* The arithmetic of the model's float32 convolutions: "tf32" (CUDA's
 * default, as PyTorch's; CONVLSTM_CUDA_TF32=0 when the model is created
 * turns it off) or "float32"; "" where the backend has no choice (CPU). */
const char *cl_model_conv_math(const cl_model *m);
/* How the model's CPU training steps share its threads: "batch" when it was
 * created with CONVLSTM_SPLIT=batch (each thread a part of the batch
 * through the whole step, their gradients summed: core/split.c, where a
 * step allows it), else "call" (each call's work split across them). */
const char *cl_model_thread_split(const cl_model *m);
/* 1 when a model can be created on this device in this build and machine. */
int cl_device_available(cl_device d);
/* 1 when this build has the CUDA backend, whether or not a GPU is present. */
int cl_build_has_cuda(void);

typedef struct cl_gpu_info {
  int device;             /* index as CUDA numbers it (after CUDA_VISIBLE_DEVICES) */
  int n_devices;          /* devices visible to this process */
  char name[256];         /* e.g. "NVIDIA H100 80GB HBM3" */
  int cc_major, cc_minor; /* compute capability */
  int multiprocessors;
  size_t mem_free; /* bytes, as cudaMemGetInfo reports them now */
  size_t mem_total;
  int driver_version;         /* CUDA driver API version, e.g. 13000 for 13.0 */
  int runtime_version;        /* CUDA runtime this package was built with and runs */
  size_t cudnn_version;       /* cuDNN loaded at run time, e.g. 91900 for 9.19.0 */
  size_t cudnn_build_version; /* CUDNN_VERSION of the headers it was built with */
} cl_gpu_info;

/* Describe GPU `device` (-1: the current one), asking the driver afresh.
 * CL_E_UNSUPPORTED when none is usable or the build has no CUDA backend,
 * with the reason in err; the version fields are filled whenever the driver
 * answered (an old driver is the usual reason). */
cl_status cl_gpu_info_get(int device, cl_gpu_info *out, char *err, size_t errlen);

/* ---- parameters (torch layout and names) ----------------------------- */

/* Named tensors, per layer: cell_list.<l>.conv.weight [4h, in+h, kh, kw],
 * with bias cell_list.<l>.conv.bias [4h], with peepholes cell_list.<l>.w_ci,
 * .w_cf, .w_co ([h, 1, 1] per channel, [h, H, W] per position). */
int cl_model_n_tensors(const cl_model *m);
cl_status cl_model_tensor_info(const cl_model *m, int i, const char **name, int *ndim,
                               int dims[4]);
/* Total number of scalar parameters. */
size_t cl_model_n_params(const cl_model *m);
/* Copy a named parameter (or its gradient) to/from float host memory, torch
 * layout, n = number of elements expected. */
cl_status cl_model_get_param(cl_model *m, const char *name, float *out, size_t n);
cl_status cl_model_set_param(cl_model *m, const char *name, const float *in, size_t n);
cl_status cl_model_get_grad(cl_model *m, const char *name, float *out, size_t n);
/* torch's Conv2d default: weight and bias ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
 * fan_in = (in+h) k k, drawn in state-dict order from uniform01(ctx) in [0,1);
 * peephole weights zeros (nothing drawn for them, so a seed gives the
 * convolution the same weights with and without peepholes). */
cl_status cl_model_init_params(cl_model *m, double (*uniform01)(void *), void *ctx);

/* ---- step options ---------------------------------------------------- */

/* What to keep of an inference forward. */
typedef enum cl_outputs {
  CL_OUTPUTS_ALL = 0, /* every layer's whole output sequence (model(x)) */
  CL_OUTPUTS_LAST = 1 /* only the last states: memory independent of T */
} cl_outputs;

/* Where a forward or a training step starts from. */
typedef enum cl_state_mode {
  CL_STATE_ZERO = 0,  /* zeros (the tutorial's module) */
  CL_STATE_GIVEN = 1, /* the step option `state`: each layer's h and c */
  CL_STATE_CARRY = 2  /* train_step: the state the model holds from its last
                         carrying step (zeros at first, and after
                         cl_model_reset_state), replaced by this step's last
                         state, detached (Keras's stateful = TRUE) */
} cl_state_mode;

/* The loss a training step minimises, mean-reduced over the target's
 * elements, as torch's nn.MSELoss, nn.L1Loss, nn.HuberLoss(delta) and
 * nn.BCEWithLogitsLoss(pos_weight) (the last with the output as logits and
 * targets in [0, 1]). Zeros: MSE. */
typedef enum cl_loss_kind {
  CL_LOSS_MSE = 0,
  CL_LOSS_MAE,
  CL_LOSS_HUBER,
  CL_LOSS_BCE_LOGITS,
  CL_N_LOSSES
} cl_loss_kind;
/* How a training step reduces the elements' losses (torch's `reduction`):
 * their mean (torch's default), their sum, or their sum over the batch size
 * (torch's KLDivLoss calls it "batchmean": the loss per sequence, summed
 * over its frames and pixels, averaged over the sequences). The kernels
 * always give a segment's mean; the core weighs it (loss.c). */
typedef enum cl_loss_reduction {
  CL_REDUCE_MEAN = 0,
  CL_REDUCE_SUM,
  CL_REDUCE_BATCHMEAN,
  CL_N_REDUCTIONS
} cl_loss_reduction;
typedef struct cl_loss_fn {
  cl_loss_kind kind;
  double delta;      /* huber: > 0 */
  double pos_weight; /* bce_logits: > 0 (1: unweighted) */
  cl_loss_reduction reduction; /* train_step: 0, the mean */
} cl_loss_fn;
/* CL_OK, or CL_E_INVALID with the reason in err (delta, pos_weight as the
 * 32-bit floats the kernels use). */
cl_status cl_loss_check(const cl_loss_fn *f, char *err, size_t errlen);
/* "mse", "mae", "huber", "bce_logits"; NULL for an unknown kind. */
const char *cl_loss_name(cl_loss_kind k);
/* "mean", "sum", "batchmean"; NULL for an unknown reduction. */
const char *cl_loss_reduction_name(cl_loss_reduction r);

/* Knobs that change a step's schedule and memory plan; all zeros (or a NULL
 * pointer) is the plain step. */
typedef struct cl_step_options {
  int checkpoint;         /* training: keep h, c every k steps, recompute the rest */
  int recompute_gates;    /* train_step: 0, or keep only h and c of every step
                             (no gate activations) and recompute each step's
                             gates in backward, this many steps at a time;
                             composes with checkpoint (segments whose steps
                             keep h and c). Not with free_run. */
  int tbptt;              /* train_step: backprop through windows of k steps,
                             state carried forward detached */
  int accumulation_steps; /* train_step: micro-batches whose gradients sum
                             before one update; 0 or 1: none */
  cl_outputs outputs;     /* inference forward */
  int plan_dtype;         /* cl_model_plan only: 0 plans the model's own
                             storage dtype, 1 + a cl_dtype plans that one */
  int plan_target;        /* cl_model_plan only, training: 0 plans for either
                             target (what a separate forward and backward
                             hold), 1 + a cl_target plans train_step's with
                             that target (a last state on one layer keeps
                             one step of d_hidden); train_step plans its own */
  int horizon;            /* inference: 0, or roll the model forward this many
                             frames after x, each prediction (the last
                             layer's h) fed back as the next input; needs the
                             last layer's hidden size == input_dim. Keeps
                             only the last states and the frames
                             (cl_model_read_frames).
                             train_step, teacher forcing: x holds the input
                             frames followed by the first K - 1 true frames
                             and the target (CL_TARGET_SEQUENCE) y
                             [B, K, C, H, W] is the last K steps' output. */
  int free_run;           /* train_step with a horizon K: 1 trains without
                             teacher forcing: x holds only the input frames
                             and each of the K - 1 later steps reads the
                             last layer's h of the step before (its own
                             forecast), backpropagating through it. Not with
                             checkpoint or tbptt. */
  const int *truth;       /* train_step with free_run and a horizon K:
                             NULL, or K - 1 flags, one per fed-back step in
                             order (scheduled sampling, drawn by the
                             caller): nonzero feeds that step the true frame
                             before it, y[, k] for the k-th fed-back step,
                             instead of the model's own, and no gradient
                             flows into the prediction it replaces; zero,
                             the model's own. Memory is free_run's plan
                             whatever the flags. Only with free_run. */
  cl_state_mode state_mode;
  /* CL_STATE_GIVEN: 2 * n_layers arrays, h then c of layer 0, then of layer
   * 1, ..., each [B, hidden_l, H, W]; a constant (no gradient flows into
   * it). cl_model_plan needs only state_mode. */
  const cl_host_array *state;
  double max_grad_norm;   /* train_step: > 0 clips the gradients' global L2
                             norm to it before the update, as torch's
                             clip_grad_norm_ (INFINITY: measure only); 0 or
                             below: neither (cl_model_grad_norm is NaN) */
  cl_loss_fn loss;        /* train_step: the loss (zeros: MSE) */
  /* train_step on arrays: each element's loss times this weight before the
   * mean over all elements, as torch's (w * l).mean(); the target's shape,
   * finite and >= 0 (0 masks an element); NULL: none. cl_model_plan reads
   * only its ndim (5: a sequence target), for the planned weight buffer. */
  const cl_host_array *weight;
  /* A training forward or train_step of a model with dropout: per layer l
   * with cfg.dropout[l] > 0 the input mask mask_x[l], float, row-major
   * [B, in_l, H, W] (in_l: input_dim, or hidden_dims[l - 1]), and with
   * cfg.recurrent_dropout[l] > 0 the mask of h_{t-1} mask_h[l]
   * [B, hidden_l, H, W]; each element 0 or 1 / (1 - p). With
   * cfg.dropout_masks CL_MASKS_PER_GATE each is [B, 4, C, H, W] instead:
   * sequence b's masks of gates i, f, o, g one after the other. One mask per
   * sequence (and gate), shared by every step and by a checkpoint's
   * recomputation; read during the call only. Ignored in inference. */
  const float *mask_x[CL_MAX_LAYERS];
  const float *mask_h[CL_MAX_LAYERS];
  /* Masks drawn instead of given: with draw_masks nonzero, every mask above
   * that is NULL is drawn by the core into its planned buffer from
   * dropout_seed (a counter-based generator, the same numbers on every
   * backend; cl_model_dropout_mask gives the host copy), so a step's masks
   * take no memory outside the plan. Sequence b's masks depend on the seed
   * and b only, not on accumulation_steps. */
  int draw_masks;
  uint64_t dropout_seed;
  /* train_step, data parallel: NULL (one process), or the communicator the
   * gradients are summed over before the update (cl_comm_*, below). Each
   * rank's gradients are first multiplied by comm_share, its samples' share
   * of all ranks' samples in this step, so that the sum is the gradient of
   * the mean loss over the whole global batch; the loss returned is that
   * mean too. Every rank must make the same calls in the same order. */
  struct cl_comm *comm;
  double comm_share;
} cl_step_options;

/* The mask a training call with draw_masks and this dropout_seed draws for
 * layer `layer`'s input (kind 0) or h_{t-1} (kind 1) at batch B and frames
 * H x W, into out ([B, C, H, W], per gate [B, 4, C, H, W], row-major, as
 * mask_x / mask_h); CL_E_INVALID where that layer has no such rate. */
cl_status cl_model_dropout_mask(cl_model *m, uint64_t seed, int layer, int kind, int B, int H,
                                int W, float *out);

/* Forgets the state a carrying train step (CL_STATE_CARRY) left, giving its
 * memory back: the next carrying step starts from zeros. */
cl_status cl_model_reset_state(cl_model *m);
/* 1 when the model holds a carried state, with its batch and frame size. */
int cl_model_carried_state(const cl_model *m, int *B, int *H, int *W);

/* ---- forward, loss, backward ----------------------------------------- */

/* x: [B, T, input_dim, H, W]. training != 0 keeps what backward needs (or,
 * with opts->checkpoint, the states to recompute it from). opts may be NULL. */
cl_status cl_model_forward(cl_model *m, const cl_host_array *x, int training,
                           const cl_step_options *opts);
/* Shape of the last forward (0s before any). */
cl_status cl_model_last_shape(const cl_model *m, int *B, int *T, int *H, int *W);
/* Copy results of the last forward to host: layer output [B, T, C_l, H, W]
 * (layer n_layers: a plain stack's head, [B, T, input_dim, H, W]); last
 * state h or c [B, C_l, H, W] (which: 0 = h, 1 = c). out->dims must match. */
cl_status cl_model_read_output(cl_model *m, int layer, cl_host_array *out);
cl_status cl_model_read_state(cl_model *m, int layer, int which, cl_host_array *out);
/* The frames of the last forward with a horizon K: [B, K, input_dim, H, W];
 * frame 1 is the output after x's last step (a head's, or the last layer's
 * h), each next one the output after reading the one before (after the rollout, the
 * last states are those of its last step). */
cl_status cl_model_read_frames(cl_model *m, cl_host_array *out);
/* Mean squared error of the chosen output of the last training forward
 * against y; stores d loss / d output for cl_model_backward(m, target, NULL). */
cl_status cl_model_mse(cl_model *m, const cl_host_array *y, cl_target target, double *loss);
/* Backpropagate grad (shape of the target's output), or, when grad is NULL,
 * the gradient stored by the last cl_model_mse. Gradients accumulate as in
 * torch until cl_model_zero_grad. */
cl_status cl_model_backward(cl_model *m, cl_target target, const cl_host_array *grad);
cl_status cl_model_zero_grad(cl_model *m);

/* ---- optimizers ------------------------------------------------------ */

typedef enum cl_optim_kind {
  CL_OPTIM_ADAM = 1,
  CL_OPTIM_SGD = 2,
  CL_OPTIM_ADAMW = 3,
  CL_OPTIM_RMSPROP = 4
} cl_optim_kind;
#define CL_N_OPTIM_KINDS 4

/* Hyperparameters; torch.optim.Adam (L2 weight decay added to the gradient),
 * torch.optim.AdamW (decoupled: p *= 1 - lr * weight_decay),
 * torch.optim.SGD (momentum buffer starts as the first gradient) and
 * torch.optim.RMSprop (square_avg, and momentum_buffer / grad_avg when
 * momentum > 0 / centered, all starting at zeros). */
typedef struct cl_optim {
  cl_optim_kind kind;
  double lr;
  double beta1, beta2, eps; /* Adam; eps RMSprop's too */
  double momentum;          /* SGD, RMSprop */
  double weight_decay;      /* Adam, SGD, RMSprop: L2 added to the gradient; AdamW: decoupled */
  int amsgrad;              /* Adam, AdamW: keep max_exp_avg_sq (torch's amsgrad) */
  double alpha;             /* RMSprop: the smoothing constant of square_avg, in [0, 1) */
  int centered;             /* RMSprop: divide by the variance's root (keeps grad_avg) */
} cl_optim;
/* The optimizer's name in files and in R: "adam", "sgd", "adamw", "rmsprop"; NULL for
 * an unknown kind. cl_optim_kind_of: the kind of a name, 0 if none. */
const char *cl_optim_kind_name(cl_optim_kind k);
cl_optim_kind cl_optim_kind_of(const char *name);

/* CL_OK, or CL_E_INVALID with the reason in err: the hyperparameters are
 * checked as the 32-bit floats the update uses (a double beyond float's
 * range, a beta that rounds to 1, an eps that rounds to 0 are refused),
 * wherever they come from (R, a file, another program). */
cl_status cl_optim_check(const cl_optim *o, char *err, size_t errlen);

/* One update of all parameters from their gradients. The state (Adam's
 * moments, SGD's momentum, RMSprop's averages) lives in the model; it is created at the first
 * step and reset when the kind of optimizer changes. */
cl_status cl_model_optimizer_step(cl_model *m, const cl_optim *opt);
/* Number of optimizer steps taken with the current state. */
int64_t cl_model_optimizer_steps(const cl_model *m);
/* The global L2 norm of the gradients before clipping, measured by the last
 * training step that had max_grad_norm > 0 (after float16 unscaling); NaN
 * after a step without it, or before any. Inf or NaN gradients give a norm
 * that is not finite, and no clipping (the update's guard then refuses). */
double cl_model_grad_norm(const cl_model *m);
cl_status cl_model_optimizer_reset(cl_model *m);

/* zero_grad, training forward, MSE, backward, update: one call. With
 * accumulation_steps = m the batch runs as m micro-batches whose gradients
 * sum (each loss weighted by its share of the batch) before one update; with
 * tbptt = k, forward and backward run window by window. *loss is the MSE
 * over the whole batch. opts may be NULL. */
cl_status cl_model_train_step(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                              cl_target target, const cl_optim *opt,
                              const cl_step_options *opts, double *loss);
/* Makes m's device the one the calling thread's calls reach: a thread
 * other than the one that made m (a training step on a thread of its own)
 * calls it before any other call on m. One thread at a time calls m. */
cl_status cl_model_bind_thread(cl_model *m);

/* ---- precision ------------------------------------------------------- */

/* Convert the model's activation storage (float32 <-> float16 / bfloat16);
 * parameters stay float32 (master weights). Empties the step cache. */
cl_status cl_model_set_dtype(cl_model *m, cl_dtype dtype);
/* float16 dynamic loss scaling, as torch.cuda.amp.GradScaler: the loss is
 * multiplied by scale; a step whose gradients hold inf/NaN is skipped and the
 * scale is multiplied by backoff_factor; after growth_interval clean steps it
 * is multiplied by growth_factor. */
typedef struct cl_loss_scale {
  double scale;
  int growth_interval;
  int clean_steps;      /* since the last growth or skip */
  int64_t skipped_steps;
  int skipped_in_a_row; /* skipped steps since the last update: none when it is 0 */
  double init_scale;    /* where the scale starts, and starts again on a change of dtype */
  double growth_factor, backoff_factor;
} cl_loss_scale;
cl_status cl_model_get_loss_scale(const cl_model *m, cl_loss_scale *out);
/* GradScaler's settings (its defaults: 65536, 2, 0.5, 2000), checked as the
 * float the scale is used as: init_scale > 0 and finite as a float,
 * growth_factor > 1, backoff_factor in (0, 1), growth_interval >= 1. The
 * scale starts again at init_scale, its counts at zero. */
cl_status cl_model_set_loss_scale(cl_model *m, double init_scale, double growth_factor,
                                  double backoff_factor, int growth_interval);

/* ---- memory ---------------------------------------------------------- */

typedef struct cl_mem_stats {
  size_t current[CL_MEM_NCAT];
  size_t peak[CL_MEM_NCAT];
  uint64_t n_alloc[CL_MEM_NCAT];
  uint64_t n_free[CL_MEM_NCAT];
  size_t allocated;      /* sum of current */
  size_t peak_allocated; /* peak of the sum */
  size_t reserved;       /* what the allocator holds from the device */
  size_t peak_reserved;
  size_t limit;        /* memory_limit, 0 when none */
  size_t device_free;  /* as the device reports it */
  size_t device_total; /* capacity: memory_limit if set, else the device's */
} cl_mem_stats;

cl_status cl_model_memory_stats(cl_model *m, cl_mem_stats *s);

/* What is measured outside the allocator, by the operating system and the
 * driver (the allocator's numbers above are the plan's, counted). */
typedef struct cl_measured_mem {
  int have_process;     /* 1: process_rss / process_peak were read */
  size_t process_rss;   /* resident bytes of the whole process (VmRSS) */
  size_t process_peak;  /* its high-water mark (VmHWM) */
  int have_device;      /* 1: a device with memory of its own (a GPU) */
  size_t device_used;   /* the device's used bytes now: total - free, all processes */
  size_t device_used_at_create; /* the same, when the model was created */
  size_t runtime;       /* the backend's runtime bytes (cl_plan.runtime) */
  char why[160];        /* why a measure is missing, "" when none is */
} cl_measured_mem;

cl_status cl_model_measured_memory(cl_model *m, cl_measured_mem *out);

/* One training step as one CUDA graph (CONVLSTM_CUDA_GRAPHS=1 when the
 * model was created; off by default): what the model's backend did. All
 * zero for a backend without graphs (the CPU, or graphs off). */
typedef struct cl_graph_info {
  int asked;         /* graphs were asked for */
  int on;            /* ... and are not turned off */
  int held;          /* graphs held now (one per step shape, a few at most) */
  long long captured, replayed, plain; /* steps run each way since creation */
  size_t bytes;      /* device memory their instantiation took, as the driver's free memory
                      * fell (cudaMemGetInfo before and after): outside the allocator */
  char off[200];     /* why graphs were turned off (a step that could not be captured, a
                      * data-parallel step on several ranks), or "" */
} cl_graph_info;

cl_status cl_model_graph_info(cl_model *m, cl_graph_info *out);
/* Test-only, for models created with CONVLSTM_GUARD=1 (guard bands after
 * every step buffer, checked after every step): writes one byte just past
 * the current step's buffer named `buffer` (a plan entry's name, such as
 * "gates[0]"), as a kernel overrunning its slot would, so that a test can
 * see the next check name it. */
cl_status cl_model_test_overrun(cl_model *m, const char *buffer);
/* Test-only: where the step arena lies in the process's address space
 * (*base, *bytes; 0 and 0 with no arena), on a backend whose memory is the
 * host's, so that a test can ask the operating system (/proc/PID/pagemap)
 * which pages of each planned step buffer the step touched. */
cl_status cl_model_test_arena(cl_model *m, size_t *base, size_t *bytes);
void cl_model_reset_peak(cl_model *m);
/* Gives back the buffers of the last step plan (activations, workspace,
 * data); parameters, gradients and optimizer state stay. */
cl_status cl_model_empty_cache(cl_model *m);
cl_status cl_model_set_memory_limit(cl_model *m, size_t bytes);

const char *cl_mem_category_name(cl_mem_category c);

/* ---- several processes: communicators (core/comm.h) -------------------
 * A communicator joins the processes that train one model together. One
 * process on its own: cl_comm_local_create (size 1, always there). Started
 * by mpirun: cl_comm_mpi_create (MPI_Init_thread; host buffers, so CPU
 * models); for GPU models cl_comm_nccl_create on top of it (its unique id
 * broadcast over MPI). A build without MPI or NCCL returns
 * CL_E_UNSUPPORTED from those, with the reason in err. */
typedef struct cl_comm cl_comm;
cl_status cl_comm_local_create(cl_comm **out, char *err, size_t errlen);
cl_status cl_comm_mpi_create(cl_comm **out, char *err, size_t errlen);
/* device: the CUDA device this rank trains on (cudaSetDevice) */
cl_status cl_comm_nccl_create(cl_comm *mpi, int device, cl_comm **out, char *err,
                              size_t errlen);
int cl_comm_rank(const cl_comm *c);
int cl_comm_size(const cl_comm *c);
const char *cl_comm_name(const cl_comm *c);
/* 1 when this build has the engine: "mpi", "nccl" */
int cl_comm_available(const char *engine);
/* The last failure of a communicator call. */
const char *cl_comm_error(const cl_comm *c);
cl_status cl_comm_barrier(cl_comm *c);
/* bytes of host memory from root's buf into every rank's */
cl_status cl_comm_broadcast_host(cl_comm *c, void *buf, size_t bytes, int root);
/* Ends all ranks (MPI_Abort); a failing rank calls it so no rank hangs. */
void cl_comm_abort(cl_comm *c, int code);
/* What the training steps did with a communicator since it was made (or
 * since reset != 0): steps that reduced, bytes of gradients all-reduced, and
 * the seconds the steps waited for the reduction after their own backward was
 * done (what the overlap did not hide, and waiting for slower ranks). */
typedef struct cl_comm_stats {
  long steps;
  double bytes;
  double wait_seconds;
} cl_comm_stats;
void cl_comm_get_stats(cl_comm *c, cl_comm_stats *out, int reset);
/* Frees the communicator (MPI_Finalize for the MPI one). NCCL's before MPI's. */
void cl_comm_free(cl_comm *c);
/* Rank root's parameters into every rank's model (same configuration
 * checked by parameter count), and the float16 loss scale with them. */
cl_status cl_model_broadcast_params(cl_model *m, cl_comm *c, int root);
/* The gradient buckets a data-parallel step sums over the ranks, in the
 * order it starts them (the last layer first): layer[k] and bytes[k] (float32
 * gradients), CL_MAX_LAYERS at most; returns their number (a head
 * that reads more than the top layer, an encoder-forecaster's of two or
 * more layers a stack, is a bucket of its own, layer n_layers). Views of
 * the gradient buffer: no memory of their own. */
int cl_model_grad_buckets(const cl_model *m, int *layer, size_t *bytes);

/* A plan: every buffer one step needs, computed without allocating. The
 * executor allocates exactly these, so estimate and measurement agree.
 * Parameters, gradients and optimizer state are device allocations of their
 * own; the step's buffers are views at fixed offsets into one step arena,
 * reserved once and grown only by a step that needs more (a smaller step
 * reuses it as it is). */
#define CL_ARENA_ALIGN 256 /* bytes; as cudaMalloc aligns, and a multiple of any vector width */

typedef struct cl_plan_entry {
  char name[48];
  cl_mem_category category;
  size_t bytes;
  size_t offset; /* step buffers: offset in the step arena; model buffers: 0 */
  int in_arena;  /* 1 for step buffers */
  int kind;      /* internal: which buffer (core/plan.h) */
  int layer;     /* layer index, -1 for model-wide buffers */
  /* a training step's buffers: the first and last op of a micro-batch's
   * program (core/program.h) that use it; -1: it lives the whole call */
  int first_op, last_op;
} cl_plan_entry;

typedef struct cl_plan {
  int n;
  cl_plan_entry *entries;
  size_t by_category[CL_MEM_NCAT];
  size_t total;    /* allocated: the sum of every buffer */
  size_t arena;    /* the step arena: step buffers, each at an aligned offset */
  size_t reserved; /* reserved from the device by a model that ran only this
                      step: model buffers plus the arena */
  size_t runtime;  /* the process's runtime on the device, outside every model
                      (CUDA context, cuDNN handle), measured once; 0 on the CPU */
} cl_plan;

/* Plan for a step of shape B, T, H, W (the whole batch: with
 * accumulation_steps the plan holds one micro-batch); training != 0 includes
 * gradients, optimizer state (for opt; NULL: the state the model holds) and
 * what backward keeps. opts may be NULL. */
cl_status cl_model_plan(cl_model *m, int B, int T, int H, int W, int training,
                        const cl_optim *opt, const cl_step_options *opts, cl_plan *out);
void cl_plan_free(cl_plan *p);

/* The convolution calls of a step (cl_model_conv_calls): for each layer
 * (from 0) and half of its convolution (0: input to gates, 1: h_{t-1} to
 * gates -- in training, where a layer's input joins it, [h_{t-1}, x_t] to
 * gates, C = h + in --, 2: an encoder-forecaster's head), each distinct
 * direction and shape -- x [N, C, H, W] ->
 * y [N, K, H, W], kernel kh x kw, dilation dh, dw, groups (1: none) -- and
 * how many times the step runs it. */
typedef enum cl_conv_dir {
  CL_CONV_FORWARD = 0,
  CL_CONV_BACKWARD_DATA = 1,
  CL_CONV_BACKWARD_FILTER = 2
} cl_conv_dir;
typedef struct cl_conv_call_info {
  cl_conv_dir dir;
  int layer, half;
  int64_t N; /* may exceed an int: a step too large to run has its list too */
  int C, H, W, K, kh, kw, dh, dw, groups;
  int64_t count;
} cl_conv_call_info;
/* The convolution calls of a train step (training != 0, with its target)
 * or an inference forward of shape B, T, H, W with opts (may be NULL), as
 * the executor makes them, from the same schedule the plan's workspace
 * reads. *out: *n rows, malloc'ed (free with free()); *out is NULL when *n
 * is 0. */
cl_status cl_model_conv_calls(cl_model *m, int B, int T, int H, int W, int training,
                              const cl_step_options *opts, cl_target target,
                              cl_conv_call_info **out, int *n);
/* The algorithm a convolution call of that list runs on the model's
 * backend, into buf (len bytes, NUL-terminated, cut to fit): the CPU's
 * "gemm" or Winograd's form ("winograd F(4x4,5x5)", "gemm/..." while the
 * shape is still being timed); cuDNN's ("FFT_TILING", "IMPLICIT_GEMM tf32"
 * where float32 runs on TF32 tensor cores, several joined by "/" where the
 * call's chunks of frames differ); "" where the backend does not say or
 * has not chosen yet: ask after a step. CL_E_INVALID for a call the list
 * cannot hold (direction, sizes) or no buffer. */
cl_status cl_model_conv_algo(cl_model *m, const cl_conv_call_info *call, char *buf, size_t len);
/* The names of a plan entry's kind, from the core's one table of buffers:
 * CL_BUFNAME_ROW as its rows spell it (a per-layer buffer's row adds
 * "[layer]"); CL_BUFNAME_OTHER its other name (Adam's first moment is SGD's
 * momentum buffer, the gates of recompute_gates one chunk), NULL where it has
 * none; CL_BUFNAME_KIND the kind itself ("OPT_V"). NULL past the last kind,
 * so a caller lists them all by counting up from 0. */
typedef enum cl_bufname { CL_BUFNAME_ROW = 0, CL_BUFNAME_OTHER, CL_BUFNAME_KIND } cl_bufname;
const char *cl_buffer_name(int kind, cl_bufname which);

/* ---- helpers --------------------------------------------------------- */

const char *cl_status_name(cl_status s);
/* "float32", "float16", "bfloat16" (the names R and the files use), or
 * "unknown": the one table of dtype names. */
const char *cl_dtype_name(cl_dtype t);
/* "cpu" or "cuda" (as R and the files name devices), or "unknown". */
const char *cl_device_name(cl_device d);
/* Convert between a host array and row-major, time-major float [T, B, C, H, W]
 * (or [B, C, H, W] when ndim = 4), in one pass. */
void cl_pack_host(float *dst, const cl_host_array *src);
void cl_unpack_host(cl_host_array *dst, const float *src);

/* ---- saving and loading: safetensors files (core/model_file_read.c) ------- */

/* A model's file is safetensors (8-byte little-endian header length N, N
 * bytes of JSON, then the data), readable by PyTorch's safetensors and R
 * torch. Tensors, all F32, little-endian, torch layout:
 *   cell_list.<l>.conv.weight, cell_list.<l>.conv.bias   (the state dict)
 *   (a layer whose two kernels differ: cell_list.<l>.conv_x.weight
 *   [4h, in, kh, kw], conv_x.bias and conv_h.weight [4h, h, rkh, rkw])
 *   optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name> (Adam's moments)
 *   optimizer.max_exp_avg_sq.<name>                       (amsgrad's maximum)
 *   optimizer.momentum_buffer.<name>                      (SGD's momentum)
 * and __metadata__ (strings, as the format requires): "format": "pt",
 * "convlstm.format_version": "1", convlstm.input_dim, convlstm.hidden_dims
 * and convlstm.kernel_sizes ("[8, 1]"), convlstm.bias ("true"/"false"),
 * (an encoder-forecaster: convlstm.model "encoder_forecaster" and
 * convlstm.patch, with format version "2" and the per-layer lists one
 * stack's, as convlstm_forecaster() was given them; version 1 files of one,
 * which list both stacks' layers, still load),
 * convlstm.dtype, convlstm.device (informative); with an optimizer
 * convlstm.optimizer ("adam"/"adamw"/"sgd"; convlstm.optimizer.amsgrad
 * "true" when on, absent otherwise), convlstm.optimizer.{lr, weight_decay,
 * beta1, beta2, eps | momentum} (exact decimal), convlstm.optimizer.steps,
 * and for float16 models convlstm.loss_scale.{scale, growth_interval,
 * clean_steps, skipped_steps}; then the caller's own entries. */

/* Writes m's parameters and, when opt is not NULL, opt's hyperparameters and
 * the optimizer state m holds (none before its first step; an error when m's
 * state belongs to the other kind of optimizer), plus n_meta caller entries
 * (UTF-8; names "format" and "convlstm.*" are reserved). The file is written
 * beside path and renamed over it when complete and flushed: a crash leaves
 * the old file or the new one, never half of one. When path is a symbolic
 * link (or a chain of them, or one whose file does not exist yet) the file
 * it leads to is written, beside it, and the link stays a link; a path
 * leading to anything but a regular file (a directory, device, FIFO,
 * socket) is refused, before anything is written and again just before the
 * rename, as cl_save_target_check() says. Message in cl_model_error(m). */
cl_status cl_model_save(cl_model *m, const char *path, const cl_optim *opt, int n_meta,
                        const char *const *meta_keys, const char *const *meta_values);
/* CL_OK when cl_model_save may write to path: it leads (through its
 * symbolic links, if any) to a regular file or to nothing yet; else
 * CL_E_INVALID and a message saying what is there. cl_model_save checks for
 * itself: this lets a caller ask first. */
cl_status cl_save_target_check(const char *path, char *err, size_t errlen);

/* A file read and checked: every header field, offset, size, name and shape,
 * and that the values are finite. Files without convlstm metadata (a state
 * dict saved by PyTorch) get their architecture from the weights' shapes;
 * F64, F16 and BF16 parameters convert to float32. */
typedef struct cl_saved cl_saved;

cl_status cl_saved_read(const char *path, cl_saved **out, char *err, size_t errlen);
/* The same from bytes in memory (copied). */
cl_status cl_saved_parse(const void *bytes, size_t len, cl_saved **out, char *err,
                         size_t errlen);
void cl_saved_free(cl_saved *s); /* NULL-safe */
/* The saved architecture; device CPU, n_threads and memory_limit 0. */
const cl_config *cl_saved_config(const cl_saved *s);
/* 1 (filling what is not NULL) when the file holds an optimizer, else 0. */
int cl_saved_optimizer(const cl_saved *s, cl_optim *opt, int64_t *steps);
int cl_saved_loss_scale(const cl_saved *s, cl_loss_scale *out);
/* All metadata entries, convlstm's included, sorted by name. */
int cl_saved_n_metadata(const cl_saved *s);
cl_status cl_saved_metadata(const cl_saved *s, int i, const char **key, const char **value);
/* Tensors sorted by name; dtype is the file's ("F32", ...). */
int cl_saved_n_tensors(const cl_saved *s);
cl_status cl_saved_tensor_info(const cl_saved *s, int i, const char **name, const char **dtype,
                               int *ndim, int64_t dims[8]);
/* A new model with the saved architecture and parameters; device, dtype,
 * n_threads and memory_limit come from runtime (NULL: the saved config).
 * with_optimizer restores the optimizer state and step count (and the loss
 * scale of a float16 model), so the next train step continues the saved run
 * exactly; give the optimizer the saved hyperparameters. */
cl_status cl_saved_create_model(const cl_saved *s, const cl_config *runtime, int with_optimizer,
                                cl_model **out, char *err, size_t errlen);
/* The same into an existing model of the same architecture (input_dim,
 * layers, hidden_dims, kernel_sizes, bias; message in cl_model_error(m)).
 * The optimizer state is allocated before anything changes, so a failure
 * (out of memory) leaves m as it was. */
cl_status cl_saved_load_into(const cl_saved *s, cl_model *m, int with_optimizer);
/* cl_saved_read + cl_saved_create_model. */
cl_status cl_model_load(const char *path, const cl_config *runtime, int with_optimizer,
                        cl_model **out, char *err, size_t errlen);

/* ---- data sets on the device (core/data.c) -------------------------- */

/* A whole training set uploaded once, so that each step gathers its rows on
 * the device instead of converting and uploading them from the host: x
 * [N, T, input_dim, H, W] in the model's storage dtype and y (float32,
 * shaped for target) in the core's time-major layout. Its bytes count under
 * CL_MEM_DATA. The model owns it: cl_model_free frees it too, and
 * cl_model_empty_cache leaves it. */
typedef struct cl_data cl_data;

/* Checks x and y as cl_model_train_step does and uploads them. Out of
 * memory (memory_limit or the device) is CL_E_OOM with nothing allocated
 * and the model usable. On failure *out is NULL; message in
 * cl_model_error(m). */
cl_status cl_data_create(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                         cl_target target, cl_data **out);
/* Returns every byte of d to its model. NULL-safe. Never call it after
 * cl_model_free of d's model, which has freed d already. */
void cl_data_free(cl_data *d);
/* Rows N, steps T, height H, width W; and its target, storage dtype and
 * device bytes (x and y; the index buffer is the model's, shared by its
 * data sets). */
void cl_data_shape(const cl_data *d, int *N, int *T, int *H, int *W);
cl_target cl_data_target(const cl_data *d);
cl_dtype cl_data_dtype(const cl_data *d);
size_t cl_data_bytes(const cl_data *d);
/* Device bytes cl_data_create would take now for N sequences of T steps of
 * HxW with this target: x, y, and the index buffer when it would grow; 0 on
 * a bad shape or size overflow. Allocates nothing. */
size_t cl_data_bytes_for(const cl_model *m, int N, int T, int H, int W, cl_target target);
/* The same for y of K steps: an encoder-forecaster's frames to forecast
 * (cl_data_bytes_for: K = T). */
size_t cl_data_bytes_for_steps(const cl_model *m, int N, int T, int K, int H, int W,
                               cl_target target);
/* Data sets alive in this process (leak tests). */
int cl_data_alive(void);

/* cl_model_train_step on rows idx[0..n-1] of d (0-based, any order,
 * repeats allowed), with d's target: the same loss and gradients, bit for
 * bit, as cl_model_train_step with those rows as host arrays. CL_E_STATE
 * when the model's storage dtype changed since d was uploaded. */
cl_status cl_model_train_step_data(cl_model *m, const cl_data *d, const int *idx, int n,
                                   const cl_optim *opt, const cl_step_options *opts,
                                   double *loss);

/* ---- a batch converted ahead (core/staged.c) ------------------------- */

/* x and y of one training step (host arrays as cl_model_train_step takes
 * them) converted into the core's time-major layout and the model's storage
 * dtype (y float32), in host memory that the backend uploads at full speed
 * (page-locked on a GPU). Made while the step before runs on another thread,
 * it takes the conversion off the step's path: the step then only uploads.
 * Host memory, not counted by the model's accounting; the caller owns it. */
typedef struct cl_staged cl_staged;

/* Converts x and y for m into *b: a new batch when *b is NULL, else *b
 * refilled (its memory reused when large enough). Reads m's configuration
 * and layout only, writing nothing of m: it may run on one thread while a
 * step of m runs on another (the step must not be reading *b). Checks only
 * what the conversion needs (ranks, a patch that divides the frames);
 * cl_model_train_staged checks the rest as a step does. Errors in err (not
 * cl_model_error); on failure *b is left as it was, unless it was
 * refilled: then it is freed and NULL. */
cl_status cl_staged_fill(const cl_model *m, cl_staged **b, const cl_host_array *x,
                         const cl_host_array *y, char *err, size_t errlen);
/* NULL-safe. Not while a step reads b. */
void cl_staged_free(cl_staged *b);
/* Host bytes b holds (its capacity). */
size_t cl_staged_bytes(const cl_staged *b);
/* The bytes a batch of x and y (only their ndim and dims are read: x of 5
 * dimensions, y of 4 or 5, batch first) takes staged in dtype: its host
 * memory, and each of the model's two device buffers it is sent into (the
 * same layout: x in dtype, then y in float32 from a multiple of 256
 * bytes). 0 for shapes no batch has, or too large for a size_t. The plan
 * of a fit's staged batches asks for it (R/source.R), so the layout is
 * written once. */
size_t cl_staged_layout_bytes(cl_dtype dtype, const cl_host_array *x, const cl_host_array *y);
/* Batches alive in this process (leak tests). */
int cl_staged_alive(void);

/* cl_model_train_step on x and y, reading them from b, which was filled
 * from these very arrays for m: the same loss and gradients, bit for bit.
 * A put that asks another dtype (a fed-back truth frame in half storage)
 * packs x or y as cl_model_train_step does. CL_E_INVALID when b was filled
 * from other arrays or for another model; CL_E_STATE when m's storage
 * dtype changed since. b's memory is read until the call returns. */
cl_status cl_model_train_staged(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                                const cl_staged *b, cl_target target, const cl_optim *opt,
                                const cl_step_options *opts, double *loss);

/* Sending a staged batch ahead (core/ahead.c): its bytes uploaded into one
 * of m's two device buffers on the backend's copy stream, while a step of
 * m computes on the stream, so that its own step waits for nothing but
 * that upload and copies the batch on the device.
 * cl_staged_reserve: m's two buffers made large enough for a batch staged
 * from arrays of the shapes of x and y (device memory of the model,
 * category data: plan entries staged_device and staged_device_next);
 * nothing on a backend that cannot send ahead. Not while a step of m runs
 * (a fit reserves at the start of each step on a thread, for the next
 * batch, which has the step's shape but for a smaller last one). A
 * failure (CL_E_OOM) leaves m without them: batches then upload at their
 * steps.
 * cl_staged_send: b (filled for m) uploaded into a buffer that no step
 * reads; may run while a step of m runs on another thread, as
 * cl_staged_fill. *sent = 1 when sent (or already), 0 when m has no free
 * buffer large enough (a failure is a status, with err).
 * cl_staged_unreserve: the buffers freed (after a fit). Not while a step
 * of m runs.
 * cl_staged_sent: whether b sits in one of m's buffers, for its step. */
cl_status cl_staged_reserve(cl_model *m, const cl_host_array *x, const cl_host_array *y);
cl_status cl_staged_send(const cl_model *m, cl_staged *b, int *sent, char *err, size_t errlen);
void cl_staged_unreserve(cl_model *m);
int cl_staged_sent(const cl_model *m, const cl_staged *b);

/* ---- the version of this interface ----------------------------------- */

/* ---- capabilities ---------------------------------------------------- */

/* The kinds of model: a plain stack, Shi et al.'s encoder-forecaster
 * (cl_config.forecaster), a plain stack with a head (cl_config.head). */
typedef enum cl_model_kind {
  CL_KIND_STACK = 0,
  CL_KIND_FORECASTER = 1,
  CL_KIND_HEAD = 2
} cl_model_kind;
#define CL_N_MODEL_KINDS 3

/* One row of the capability table: an option (as R users write it: "checkpoint",
 * "state = carry", "data parallel", ...) for one kind of model, whether that kind
 * supports it, and if not the status (CL_E_UNSUPPORTED) and the reason, which is
 * the whole message every entry point refuses it with. Strings are static. */
typedef struct cl_capability {
  const char *option;
  const char *model; /* "convlstm", "encoder_forecaster" or "convlstm_head" */
  cl_model_kind kind;
  int supported;
  cl_status status;   /* CL_OK when supported */
  const char *reason; /* "" when supported */
} cl_capability;

/* The table's rows: cl_capability_row(i) for i in 0 .. count - 1
 * (CL_E_INVALID outside). */
int cl_capability_count(void);
cl_status cl_capability_row(int i, cl_capability *out);
/* CL_OK when m's kind supports the option named as a row names it; else the
 * row's status, with its reason as the model's error (CL_E_INVALID for an
 * unknown name). */
cl_status cl_model_capability(cl_model *m, const char *option);

/* Other programs compile against this header and run against whatever
 * library is installed later: an R package with LinkingTo: convlstm
 * (through convlstm_api.h, which checks both at run time) or a ctypes
 * harness. CL_API_VERSION goes up whenever a declaration here changes in a
 * way that a caller compiled before would misread: a signature, a struct's
 * fields, an enum's values, a constant. The sizes of the structs that cross
 * the interface are compared as well (CL_API_STRUCTS), so a change that
 * forgot the version is still caught when it moves a size. */
#define CL_API_VERSION 7 /* 2: cl_config.dropout_masks, cl_step_options.truth and
                           * .recompute_gates; 3: cl_step_options.draw_masks and
                           * .dropout_seed, cl_model_dropout_mask; 4:
                           * cl_config.recurrent_kernel_sizes and
                           * .recurrent_kernel_widths, cl_optim.alpha and .centered
                           * (RMSprop), cl_loss_fn.reduction; 5:
                           * cl_config.forecaster and .patch; 6:
                           * cl_step_options.plan_target; 7: cl_staged_fill,
                           * cl_model_train_staged */
#define CL_API_STRUCTS(X)                                                                  \
  X(cl_config) X(cl_host_array) X(cl_gpu_info) X(cl_step_options) X(cl_optim)             \
  X(cl_loss_scale) X(cl_mem_stats) X(cl_plan_entry) X(cl_plan) X(cl_loss_fn)

#ifdef __cplusplus
}
#endif
#endif
