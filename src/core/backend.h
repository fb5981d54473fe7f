/*
 * core/backend.h -- the one interface both backends implement (CPU in
 * src/cpu/, CUDA in src/cuda/), a table of function pointers in the manner of
 * ggml's backend interface.
 *
 * It is not public: only the core calls it. Pointers passed to kernels are
 * device pointers obtained from alloc(); "host" pointers appear only in
 * upload/download. All kernels run in order on the backend's compute stream;
 * download() and synchronize() wait for them. Kernels return a cl_status and
 * leave a message in be->err; they never abort.
 *
 * Storage dtype: tensors typed void* (activations, convolution inputs and
 * outputs, gates and their gradients dz) are stored in shape->dtype (float16
 * and bfloat16 as uint16_t bits, converted exactly by host/half.h; compute is
 * float32 always). Everything typed float* is float32 whatever the dtype:
 * parameters, their gradients, optimizer state, and the activation
 * gradients d_hidden and d_cell, so gradients accumulate in float32.
 * A backend returns CL_E_UNSUPPORTED for a dtype it lacks.
 *
 * Tensor layouts are row-major NCHW, or NHWC (channels last) where a shape
 * says so (cl_layout below). A "sequence" of T steps of B images is simply
 * N = T*B images: time-major storage makes every step contiguous, in either
 * layout (an image is contiguous in both).
 */
#ifndef CONVLSTM_CORE_BACKEND_H
#define CONVLSTM_CORE_BACKEND_H

#include "convlstm.h"

typedef struct cl_backend cl_backend;

static inline size_t cl_dtype_size(cl_dtype t) { return t == CL_F32 ? 4 : 2; }

#ifdef __CUDACC__
#define CL_LAYOUT_FN static __host__ __device__ inline
#else
#define CL_LAYOUT_FN static inline
#endif

/* Where the channels of an activation lie: CL_NCHW, element (n, c, p) of an
 * image of C channels and P = H*W pixels at (n C + c) P + p (torch's
 * default), or CL_NHWC, channels last, at (n P + p) C + c (torch's
 * channels_last memory format), which tensor-core convolutions read
 * without the transposes cuDNN otherwise runs around each call. Only
 * activations have a layout: convolution weights, their gradients, biases
 * and peephole weights are the same float32 arrays in both. The core picks
 * one per model (be->channels_last) and converts at its boundary alone
 * (core/pack.c: frames, targets, states and outputs); element-wise slots
 * (losses, store_f32, copies, gather_rows of whole images) need not know. */
typedef enum { CL_NCHW = 0, CL_NHWC = 1 } cl_layout;

/* Element (n, c, p) of [N, C, P] activations in layout l: the one place the
 * two layouts' index is written down (both backends, core/pack.c and the
 * tests ask here). */
CL_LAYOUT_FN size_t cl_act_at(cl_layout l, size_t C, size_t P, size_t n, size_t c, size_t p) {
  return l == CL_NHWC ? (n * P + p) * C + c : (n * C + c) * P + p;
}

/* A stride-1, "same"-padded 2-d convolution over N images:
 * x [N, C, H, W] -> y [N, K, H, W], weight [K, C / G, kh, kw], dilation
 * dh, dw, padding cl_conv_pad_h / cl_conv_pad_w, in G groups (0 or 1: one):
 * outputs g K/G .. (g+1) K/G - 1 see only inputs g C/G .. (g+1) C/G - 1,
 * through weight rows of their own (per-gate dropout: each gate convolves
 * its own masked copy of the input, dropout.c). */
typedef struct cl_conv_shape {
  int N, C, H, W;
  int K;      /* output channels */
  int kh, kw; /* kernel height and width, odd */
  int dh, dw; /* dilation, >= 1 */
  cl_dtype dtype;
  int groups; /* 0 or 1: none; else dividing C and K */
  cl_layout layout; /* of x, y, dx, dy; NHWC only with groups 0 or 1 */
  /* 1: w holds the values it held at the previous call of this slot with
   * this shape, w and workspace, and no call used the workspace since (the
   * core's time loops over one layer): what the backend derived from w in
   * the workspace then may be used again. 0 (the default): no such promise. */
  int same_w;
} cl_conv_shape;

/* "Same" padding: half the dilated kernel's extent, so the output keeps the
 * input's size (odd kernels). The one place the padding is written down. */
static inline int cl_conv_pad_h(const cl_conv_shape *s) { return s->dh * (s->kh - 1) / 2; }
static inline int cl_conv_pad_w(const cl_conv_shape *s) { return s->dw * (s->kw - 1) / 2; }
/* Taps of the kernel: kh * kw. */
static inline int cl_conv_taps(const cl_conv_shape *s) { return s->kh * s->kw; }
/* Groups of a shape: 1 where the field says none. */
static inline int cl_conv_groups(const cl_conv_shape *s) { return s->groups > 1 ? s->groups : 1; }
/* A shape the backends accept: positive sizes, odd kernels, dilation >= 1,
 * groups dividing C and K. */
static inline int cl_conv_shape_ok(const cl_conv_shape *s) {
  return s->N >= 0 && s->C > 0 && s->K > 0 && s->H > 0 && s->W > 0 && s->kh > 0 && s->kw > 0 &&
         s->kh % 2 == 1 && s->kw % 2 == 1 && s->dh > 0 && s->dw > 0 && s->groups >= 0 &&
         s->C % cl_conv_groups(s) == 0 && s->K % cl_conv_groups(s) == 0 &&
         (s->layout == CL_NCHW || (s->layout == CL_NHWC && cl_conv_groups(s) == 1));
}

/* mask_mul over reps steps of n elements each: J = n / row images of `row`
 * elements (C H W), the mask [J, G, row] (G = groups; 1: row may be n).
 *   G == 1:  out[r n + i] (+)= in[r n + i] mask[i]
 *   spread:  out[r, j, g, i] (+)= in[r, j, i] mask[j, g, i]      (out: G times in)
 *   gather:  out[r, j, i] (+)= sum_g in[r, j, g, i] mask[j, g, i] (in: G times out)
 * Spread makes the G masked copies a grouped convolution reads side by side
 * (per-gate dropout); gather sends the gradient of those copies back into
 * the one tensor they came from. in and out in dtype. */
typedef struct cl_mask_shape {
  size_t n, row, reps;
  int groups; /* >= 1 */
  int gather; /* groups > 1: gather instead of spread */
  cl_dtype dtype;
  int accumulate;
} cl_mask_shape;

/* mask_draw: n elements of one dropout stream (dropout_rng.h) into a mask
 * buffer, mask[e] = cl_rng_mask_value(cl_rng_key(*seed, layer, kind),
 * first + e, cut, keep). The seed is read from the device word the core
 * wrote before the step's draws (the planned dropout_seed buffer), not
 * passed by value: a recorded step (cuda_graph.cu, which hashes the struct
 * whole: pad stays 0) then replays with each call's own seed. */
typedef struct cl_mask_draw {
  const uint64_t *seed; /* device memory (host memory on the CPU) */
  int32_t layer, kind;  /* kind 0: the layer's input, 1: its h */
  uint64_t first; /* the stream's element at mask[0] */
  uint64_t n;
  uint64_t cut;   /* cl_rng_cut(p) */
  float keep;     /* 1 / (1 - p) */
  uint32_t pad;
} cl_mask_draw;

/* The fused ConvLSTM cell over N images of `hidden` channels and P = H*W
 * pixels. Gates are [N, 4*hidden, P] in torch's order i, f, o, g (NCHW:
 * the 4 hidden channels of the convolution's output; NHWC [N, P, 4
 * hidden]), c, h, dh, dc [N, hidden, P] in the same layout (cl_gate_at,
 * cl_cell_at). peep: the peephole weights' kind (convlstm.h); with one,
 * the cell slots take wp, float [3, hidden, pp] (w_ci, w_cf, w_co; pp = 1
 * per channel, P per position), and peephole_filter computes their
 * gradient. NHWC takes peepholes per channel only (CL_E_UNSUPPORTED). */
typedef struct cl_gates_shape {
  int N, hidden, P;
  cl_dtype dtype;
  cl_peephole peep;
  cl_layout layout;
} cl_gates_shape;
/* Gate q (0 i, 1 f, 2 o, 3 g) of state element (n, ch, p). */
CL_LAYOUT_FN size_t cl_gate_at(const cl_gates_shape *s, size_t n, int q, size_t ch, size_t p) {
  return cl_act_at(s->layout, 4 * (size_t)s->hidden, (size_t)s->P, n,
                   (size_t)q * (size_t)s->hidden + ch, p);
}
/* State element (n, ch, p) of c, h, dh, dc. */
CL_LAYOUT_FN size_t cl_cell_at(const cl_gates_shape *s, size_t n, size_t ch, size_t p) {
  return cl_act_at(s->layout, (size_t)s->hidden, (size_t)s->P, n, ch, p);
}
/* pp of the shape's peephole weights: elements per channel of one weight. */
static inline int cl_gates_peep_pixels(const cl_gates_shape *s) {
  return s->peep == CL_PEEP_POSITION ? s->P : 1;
}

typedef struct cl_adam_hp {
  float lr, beta1, beta2, eps, weight_decay;
  int64_t step;  /* 1 at the first update (bias correction) */
  int decoupled; /* AdamW: p *= 1 - lr * weight_decay first, the gradient as it is */
  int amsgrad;   /* the denominator from vmax = max(vmax, v) (max_exp_avg_sq) */
} cl_adam_hp;

typedef struct cl_sgd_hp {
  float lr, momentum, weight_decay;
  int first; /* 1 at the first update: the momentum buffer starts as the gradient */
} cl_sgd_hp;

/* torch.optim.RMSprop: square_avg (v), momentum_buffer (m, momentum > 0)
 * and grad_avg (centered), all starting at zeros. */
typedef struct cl_rmsprop_hp {
  float lr, alpha, eps, weight_decay, momentum;
  int centered; /* the denominator sqrt(v - grad_avg^2) */
} cl_rmsprop_hp;

/* What an update's guard (adam_check, sgd_check, rmsprop_check) found, as one number so that
 * a parallel minimum picks the first fault: element i of the flat buffer,
 * the array that would not be finite there (checked in this order) and
 * whether it would be NaN (else +-Inf):
 *   key = i * 8 + part * 2 + is_nan;  CL_FAULT_NONE when all stay finite. */
enum { CL_PART_GRAD = 0, CL_PART_M, CL_PART_V, CL_PART_PARAM };
#define CL_FAULT_NONE UINT64_MAX

/* ---- the sync-free training step (core/train.c) ---------------------------
 * What a step's decisions read, kept on the device so that the step is a
 * pure stream of launches: the core zeroes it (memset0) when the step
 * begins, the slots below write it, and the core reads it once (download)
 * after the update. */
typedef struct cl_step_vals {
  double loss;         /* sum over the step's segments of share * mean loss */
  double sumsq;        /* clipping: the squared L2 norm of the gradients (after unscaling) */
  uint64_t fault;      /* the update's guard: the first fault (key above), or CL_FAULT_NONE */
  int32_t found_inf;   /* float16: a gradient was inf or NaN before or after unscaling */
  int32_t skipped;     /* the update was not applied (found_inf, a fault, a non-finite loss) */
} cl_step_vals;

/* The end of a training step, for update_step: in this order, as
 * GradScaler.unscale_, clip_grad_norm_ and the guarded update of optim.c:
 *  1. unscale (float16): g *= inv_scale, vals->found_inf set as
 *     grad_unscale's flag;
 *  2. max_norm > 0 and, with check_loss, a finite vals->loss: vals->sumsq =
 *     sum_squares(g); when sqrt of it is finite and
 *     coef = (float)(max_norm / (sqrt(sumsq) + 1e-6)) < 1, g *= coef;
 *  3. unless found_inf: the guard (adam_check / sgd_check / rmsprop_check)
 *     into vals->fault;
 *  4. skipped = found_inf || fault != NONE || (check_loss && !isfinite(loss));
 *     unless skipped, the update (adam_update / sgd_update / rmsprop_update).
 * m, v, vmax, buf: the optimizer state, which exists (the core makes it
 * first). The hyper-parameters change every step (the step count, a
 * schedule's lr): a backend that records steps must read them from memory it
 * writes at each call, not bake them into what it records. */
typedef struct cl_update_args {
  float *p, *g, *m, *v, *vmax; /* RMSprop: m momentum_buffer, v square_avg, vmax grad_avg */
  size_t n;
  int adam;    /* 1: adam (ahp); else rmsprop or sgd */
  int rmsprop; /* 1: rmsprop (rhp), 0 with adam 0: sgd (shp) */
  cl_adam_hp ahp;
  cl_sgd_hp shp;
  cl_rmsprop_hp rhp;
  int unscale; /* float16's loss scaling: step 1 with inv_scale */
  float inv_scale;
  double max_norm;
  int check_loss;
} cl_update_args;

/* graph_begin's request. CL_GRAPH_OFF_COMM: plain, and graphs off from
 * then on, the reason recorded (graph_info): the step reduces over a
 * communicator of several ranks, work a graph cannot hold (dist.c). */
typedef enum { CL_GRAPH_AUTO = 0, CL_GRAPH_PLAIN = 1, CL_GRAPH_OFF_COMM = 2 } cl_graph_mode;


/* ---- the slots ----------------------------------------------------------
 * One list, grouped by concern, from which everything that names the slots
 * comes: struct cl_backend_i below, each backend's prototypes and table
 * (cpu_kernels.h / cpu_backend.c, cuda_common.h / cuda_backend.cu), the
 * recording table of cuda_graph.cu and the coverage check of
 * tests/c/test_backend_ops.c. Adding a slot is one row here; a backend
 * then fails to compile until it fills it (or, optional, says it leaves it
 * to the default), and the test fails until it has a row for it.
 *
 * A row: X(step, opt, return type, name, (parameters), (arguments)).
 *   step  what the slot is to a training step, which runs as a pure stream
 *         of launches (core/train.c) and which a backend may record as one
 *         graph (cuda_graph.cu):
 *           STEP  queues device work and returns: a step is made of these;
 *           SYNC  waits for the device (it hands a result to the host) or
 *                 allocates: never inside a step;
 *           NONE  not called inside a step (set-up, queries, the host's own
 *                 optimizer calls, the graphs themselves).
 *   opt   REQ: every backend fills it; OPT: "(optional)", NULL means the
 *         default of the wrapper in backend.c (or "absent", as said).
 *   arguments: the parameters' names, for wrappers that pass a call on.
 */

/* ---- memory: every call of alloc and free is made by core/alloc.c ----
 * destroy: frees the backend (and what it owns: its staging buffer).
 * alloc/free: device memory; memset0, upload (host -> device), download
 * (device -> host, waits), copy (device -> device).
 * (optional) synchronize: wait for queued work; default: nothing to wait for.
 * (optional, with the data field scratch_bytes) set_scratch: device memory
 * the backend needs for its own reductions (loss partial sums, found-inf
 * flags): scratch_bytes of it, allocated by the core through the accounting
 * allocator (category workspace, plan entry "backend_scratch") when a model
 * is created, and handed over here before any kernel runs; the backend
 * never frees it. So every device byte is counted, and none is allocated
 * inside a step.
 * (optional) host_stage: a host buffer of at least `bytes` that upload()
 * reads and download() writes at full speed (page-locked memory on CUDA),
 * for the core to stage host arrays through. The backend owns it: regions
 * of one buffer handed out in turn, each left untouched until the backend
 * next synchronises (download, synchronize), so that an upload from it need
 * not be waited for; when the buffer is full the backend waits for its
 * stream and starts again from its beginning, or replaces it by a larger
 * one (earlier pointers are then invalid). Freed by destroy. It is host
 * memory, outside the device accounting and the plan. A failure is not an
 * error: the core stages through malloc instead (and waits for that
 * upload), as it does when the slot is NULL. (Inside a recorded step
 * cuda_graph.cu refuses it when the buffer would have to wait.)
 * (optional) host_alloc/host_free: host memory owned by the caller (a
 * staged batch, core/staged.c) that upload() reads at full speed
 * (page-locked memory on CUDA, at most the stage's cap), so that an upload
 * from it need not be waited for. The only slots that may be called from
 * another thread while a step runs: they touch neither the stream, nor
 * be->err, nor the backend's buffers. A failure is not an error: the core
 * takes malloc's memory instead, as when the slots are NULL. host_free
 * takes be NULL (a staged batch may outlive its model) and may wait for the
 * device (CUDA's cudaFreeHost does).
 * (optional) ahead_upload: bytes of host memory (host_alloc's, or the
 * CPU's own) into dst, one of the core's two device buffers of batches sent
 * ahead (core/ahead.c), numbered slot (0 or 1), queued on a copy stream of
 * the backend's own so that it runs while the stream's kernels do: after
 * whatever the stream queued before slot's last ahead_release, and ahead of
 * slot's next ahead_acquire and ahead_sync. Like host_alloc, callable from
 * another thread while a step runs: it touches only the copy stream and
 * slot's two events (no be->err: a failure clears the runtime's error and
 * is a status). NULL: no batch is sent ahead; each uploads at its step.
 * The CPU's copies at once (its stream is the caller).
 * (optional) ahead_acquire: the stream's next work waits for slot's last
 * ahead_upload. ahead_release: the stream's work queued so far is the last
 * to read slot's buffer until the next acquire. Both are called outside
 * the recorded part of a step (before and after it: staged.c); both SYNC,
 * so that one called inside would turn a recorded step (cuda_graph.cu)
 * off rather than replay one batch's wait. Default: nothing to wait for
 * (uploads done at once).
 * (optional) ahead_sync: the calling thread waits for slot's last
 * ahead_upload (before its host memory is refilled or freed, or its
 * buffer freed); callable beside a step, as ahead_upload. Default: none.
 * (optional) gather_rows: whole rows of a time-major tensor src [T, N, row]
 * into dst [nt, nb, row]: for t in [t0, t0 + nt) and j in [0, nb),
 * dst[(t - t0) * nb + j] = src[t * N + idx[j]], each row row_bytes long.
 * idx is a device int array (nb entries, each in [0, N)). A training step
 * on a data set reads its batch so; default: one copy() per row.
 * store_f32: dst (n elements of dtype) = src (float), rounded to nearest
 * even as host/half.h: a float gradient (a head's d_head) into the storage
 * dtype the convolutions read.
 * (optional) bind_thread: makes the calling thread's calls reach this
 * backend's device; called by a thread before its first call of the other
 * slots (a training step on a thread of its own, src/r_train.c). One
 * thread at a time calls a backend. Default: nothing to bind (CPU). CUDA:
 * the device is each thread's own setting, device 0 on a new thread,
 * whatever device the backend was made on. */
#define CL_SLOTS_MEMORY(X)                                                                          \
  X(NONE, REQ, void, destroy, (cl_backend * be), (be))                                            \
  X(NONE, OPT, cl_status, bind_thread, (cl_backend * be), (be))                                    \
  X(SYNC, REQ, cl_status, alloc, (cl_backend * be, size_t bytes, void **out), (be, bytes, out))    \
  X(SYNC, REQ, void, free, (cl_backend * be, void *p), (be, p))                                    \
  X(STEP, REQ, cl_status, memset0, (cl_backend * be, void *p, size_t bytes), (be, p, bytes))       \
  X(STEP, REQ, cl_status, upload, (cl_backend * be, void *dst, const void *host_src, size_t bytes), \
    (be, dst, host_src, bytes))                                                                    \
  X(SYNC, REQ, cl_status, download,                                                               \
    (cl_backend * be, void *host_dst, const void *src, size_t bytes), (be, host_dst, src, bytes))  \
  X(STEP, REQ, cl_status, copy, (cl_backend * be, void *dst, const void *src, size_t bytes),       \
    (be, dst, src, bytes))                                                                         \
  X(STEP, REQ, cl_status, store_f32,                                                              \
    (cl_backend * be, void *dst, const float *src, size_t n, cl_dtype dtype),                     \
    (be, dst, src, n, dtype))                                                                      \
  X(SYNC, OPT, cl_status, synchronize, (cl_backend * be), (be))                                    \
  X(NONE, OPT, void, set_scratch, (cl_backend * be, void *p), (be, p))                             \
  X(NONE, OPT, cl_status, host_stage, (cl_backend * be, size_t bytes, void **host),               \
    (be, bytes, host))                                                                             \
  X(NONE, OPT, cl_status, host_alloc, (cl_backend * be, size_t bytes, void **host),               \
    (be, bytes, host))                                                                             \
  X(NONE, OPT, void, host_free, (cl_backend * be, void *host), (be, host))                         \
  X(NONE, OPT, cl_status, ahead_upload,                                                           \
    (cl_backend * be, int slot, void *dst, const void *host_src, size_t bytes),                   \
    (be, slot, dst, host_src, bytes))                                                              \
  X(SYNC, OPT, cl_status, ahead_acquire, (cl_backend * be, int slot), (be, slot))                  \
  X(SYNC, OPT, cl_status, ahead_release, (cl_backend * be, int slot), (be, slot))                  \
  X(NONE, OPT, cl_status, ahead_sync, (cl_backend * be, int slot), (be, slot))                     \
  X(STEP, OPT, cl_status, gather_rows,                                                            \
    (cl_backend * be, void *dst, const void *src, const int *idx, int nb, int N, int t0, int nt,  \
     size_t row_bytes),                                                                            \
    (be, dst, src, idx, nb, N, t0, nt, row_bytes))

/* ---- convolution ----
 * (optional) conv_workspace: *bytes of workspace that the call of
 * direction dir below (cl_conv_dir: conv_forward, conv_backward_data,
 * conv_backward_filter) uses for this shape; default 0. The core allocates
 * the maximum over the calls of a step once, in the plan, so an inference
 * forward reserves no backward's share. A failure (no
 * algorithm for the shape, say) is a status with the reason in be->err, and
 * fails the plan: a guess would be a plan too small for the calls.
 * conv_forward: y = conv(x, w) + bias (bias may be NULL); accumulate: y +=.
 * conv_backward_data: dx (+)= conv_transpose(dy, w); dy in dtype, dx
 * float32 (an activation gradient).
 * conv_backward_filter: dw += correlate(dy, x); dbias += sum of dy over N,
 * H, W (dbias may be NULL). Always accumulates, as parameter gradients do in
 * torch. */
#define CL_SLOTS_CONV(X)                                                                            \
  X(NONE, OPT, cl_status, conv_workspace,                                                         \
    (cl_backend * be, const cl_conv_shape *s, cl_conv_dir dir, size_t *bytes), (be, s, dir, bytes)) \
  X(STEP, REQ, cl_status, conv_forward,                                                           \
    (cl_backend * be, const cl_conv_shape *s, const void *x, const float *w, const float *bias,    \
     void *y, int accumulate, void *ws),                                                           \
    (be, s, x, w, bias, y, accumulate, ws))                                                        \
  X(STEP, REQ, cl_status, conv_backward_data,                                                     \
    (cl_backend * be, const cl_conv_shape *s, const void *dy, const float *w, float *dx,          \
     int accumulate, void *ws),                                                                    \
    (be, s, dy, w, dx, accumulate, ws))                                                            \
  X(STEP, REQ, cl_status, conv_backward_filter,                                                   \
    (cl_backend * be, const cl_conv_shape *s, const void *dy, const void *x, float *dw,           \
     float *dbias, void *ws),                                                                      \
    (be, s, dy, x, dw, dbias, ws))

/* ---- the fused cell ----
 * gates_forward: z holds pre-activations on entry, activations (sig i,
 * sig f, sig o, tanh g) on return. c = f*c_prev + i*g; h = o*tanh(c).
 * c_prev NULL means zeros. bias (float [4 hidden], may be NULL): the
 * layer's bias, added in float to z's stored pre-activations (gate q,
 * channel ch: bias[q hidden + ch]) before anything else, when the core
 * passes it here instead of to conv_forward (be->fused_bias). With peepholes (s->peep, weights wp; else wp is
 * ignored): i = sig(z_i + w_ci c_prev), f = sig(z_f + w_cf c_prev),
 * o = sig(z_o + w_co c), c computed before o.
 * gates_backward: gates: activations on entry, d loss / d pre-activations
 * on return. dh: total gradient of h_t. dc: on entry the gradient of c_t
 * arriving from step t+1 (zeros at the last step); on return the gradient
 * of c_{t-1}. c_prev NULL means zeros. With peepholes, dc of c_t also takes
 * dz_o w_co, and that of c_{t-1} dz_i w_ci + dz_f w_cf. dbias (float
 * [4 hidden], may be NULL) += the sum over the N images and P pixels of
 * the dz it writes, as stored (rounded to dtype): conv_backward_filter's
 * bias gradient, taken in the pass that writes dz (be->fused_bias); the
 * order of the sums is fixed (no atomics), as the peepholes' is.
 * (optional: needed with peepholes) peephole_filter: dwp [3, hidden, pp] +=
 * the peephole weights' gradient from gates_backward's dz: dw_ci += dz_i
 * c_prev, dw_cf += dz_f c_prev, dw_co += dz_o c, summed over the N images
 * (and the P pixels per channel). c_prev NULL: zeros. Accumulates, as
 * parameter gradients do; the order of the sums does not depend on threads
 * (nor, on a GPU, on run or launch). */
#define CL_SLOTS_CELL(X)                                                                            \
  X(STEP, REQ, cl_status, gates_forward,                                                          \
    (cl_backend * be, const cl_gates_shape *s, void *z, const void *c_prev, const float *wp,       \
     const float *bias, void *c, void *h),                                                         \
    (be, s, z, c_prev, wp, bias, c, h))                                                            \
  X(STEP, REQ, cl_status, gates_backward,                                                         \
    (cl_backend * be, const cl_gates_shape *s, void *gates, const void *c, const void *c_prev,    \
     const float *wp, const float *dh, float *dc, float *dbias),                                   \
    (be, s, gates, c, c_prev, wp, dh, dc, dbias))                                                  \
  X(STEP, OPT, cl_status, peephole_filter,                                                        \
    (cl_backend * be, const cl_gates_shape *s, const void *dz, const void *c, const void *c_prev, \
     float *dwp),                                                                                  \
    (be, s, dz, c, c_prev, dwp))

/* ---- losses ----
 * loss: *loss = mean over n of f's loss of pred (dtype) against target
 * (float); f NULL is MSE. grad (may be NULL, may alias target: each element
 * is read before it is written) = scale * its gradient, as torch's backward
 * of the mean-reduced loss (the 1/n included; MSE: (2/n) (pred - target)
 * times scale). weight (float [n], may be NULL): each element's loss times
 * it before the mean, as torch's (w * l).mean(); a weight of one gives the
 * unweighted bits. *loss is a host double: the call synchronizes.
 * loss_acc: *acc += share * (the mean loss of loss above), accumulated on
 * the device (acc in the step's cl_step_vals): no synchronisation. */
#define CL_SLOTS_LOSS(X)                                                                            \
  X(SYNC, REQ, cl_status, loss,                                                                   \
    (cl_backend * be, const cl_loss_fn *f, const void *pred, const float *target,                 \
     const float *weight, size_t n, cl_dtype dtype, float scale, float *grad, double *loss),       \
    (be, f, pred, target, weight, n, dtype, scale, grad, loss))                                    \
  X(STEP, REQ, cl_status, loss_acc,                                                               \
    (cl_backend * be, const cl_loss_fn *f, const void *pred, const float *target,                 \
     const float *weight, size_t n, cl_dtype dtype, float scale, float *grad, double share,       \
     double *acc),                                                                                 \
    (be, f, pred, target, weight, n, dtype, scale, grad, share, acc))

/* ---- optimizers, the loss scaler and clipping ----
 * grad_unscale: g *= inv_scale over n, and *found_nonfinite = 1 if any
 * element is inf or NaN (before or after scaling), else 0; synchronizes.
 * The float16 loss scaler's check before an update, as GradScaler.unscale_.
 * adam_update: vmax is amsgrad's max_exp_avg_sq (hp->amsgrad), else
 * ignored (may be NULL). sgd_update: buf the momentum buffer.
 * rmsprop_update: v square_avg, buf momentum_buffer (hp->momentum != 0,
 * else ignored), gavg grad_avg (hp->centered, else ignored).
 * adam_check, sgd_check, rmsprop_check: the updates' guards: with the arguments the update
 * will get, compute what it would write and write nothing; *fault is the
 * first element whose gradient or new value is not finite (the key above),
 * else CL_FAULT_NONE. m, v, vmax (buf) NULL: optimizer state about to be
 * created, zeros. amsgrad's vmax is finite where v is (their maximum), so
 * v's check covers it, and p's the denominator it gives. Synchronize. The
 * per-element arithmetic is the update's own, so a pass of the guard means
 * the update writes only finite numbers.
 * sum_squares: *sum = the sum of g[i]^2 over n, accumulated in double (inf
 * or NaN when an element is); synchronizes. The norm for clip_grad_norm_;
 * the scaling that follows is grad_unscale's.
 * (optional) grad_add: dst += src over n float32 gradients (a step split
 * by batch sums its threads' gradients with it, core/split.c; host
 * backends only). Absent: no split step.
 * (A training step runs none of these itself: its end is update_step.) */
#define CL_SLOTS_OPTIM(X)                                                                           \
  X(SYNC, REQ, cl_status, grad_unscale,                                                           \
    (cl_backend * be, float *g, size_t n, float inv_scale, int *found_nonfinite),                  \
    (be, g, n, inv_scale, found_nonfinite))                                                        \
  X(NONE, REQ, cl_status, adam_update,                                                            \
    (cl_backend * be, float *p, const float *g, float *m, float *v, float *vmax, size_t n,        \
     const cl_adam_hp *hp),                                                                        \
    (be, p, g, m, v, vmax, n, hp))                                                                 \
  X(NONE, REQ, cl_status, sgd_update,                                                             \
    (cl_backend * be, float *p, const float *g, float *buf, size_t n, const cl_sgd_hp *hp),       \
    (be, p, g, buf, n, hp))                                                                        \
  X(SYNC, REQ, cl_status, adam_check,                                                             \
    (cl_backend * be, const float *p, const float *g, const float *m, const float *v,             \
     const float *vmax, size_t n, const cl_adam_hp *hp, uint64_t *fault),                          \
    (be, p, g, m, v, vmax, n, hp, fault))                                                          \
  X(SYNC, REQ, cl_status, sgd_check,                                                              \
    (cl_backend * be, const float *p, const float *g, const float *buf, size_t n,                 \
     const cl_sgd_hp *hp, uint64_t *fault),                                                        \
    (be, p, g, buf, n, hp, fault))                                                                 \
  X(NONE, REQ, cl_status, rmsprop_update,                                                         \
    (cl_backend * be, float *p, const float *g, float *v, float *buf, float *gavg, size_t n,      \
     const cl_rmsprop_hp *hp),                                                                     \
    (be, p, g, v, buf, gavg, n, hp))                                                               \
  X(SYNC, REQ, cl_status, rmsprop_check,                                                          \
    (cl_backend * be, const float *p, const float *g, const float *v, const float *buf,           \
     const float *gavg, size_t n, const cl_rmsprop_hp *hp, uint64_t *fault),                       \
    (be, p, g, v, buf, gavg, n, hp, fault))                                                        \
  X(SYNC, REQ, cl_status, sum_squares, (cl_backend * be, const float *g, size_t n, double *sum),  \
    (be, g, n, sum))                                                                               \
  X(STEP, OPT, cl_status, grad_add, (cl_backend * be, float *dst, const float *src, size_t n),     \
    (be, dst, src, n))

/* ---- the step's end (core/train.c) ----
 * (optional) step_vals: the backend's cl_step_vals block in device memory
 * (in its scratch); default: the core's block in host memory, which is
 * where a host_accessible backend's results are.
 * update_step: the step's end (cl_update_args) into vals, with no
 * synchronisation (the CPU's composes the synchronising slots above, which
 * cost it nothing: cpu_step.c; CUDA decides on the device: cuda_step.cu). */
#define CL_SLOTS_STEP(X)                                                                            \
  X(NONE, OPT, cl_step_vals *, step_vals, (cl_backend * be), (be))                                 \
  X(STEP, REQ, cl_status, update_step,                                                            \
    (cl_backend * be, const cl_update_args *u, cl_step_vals *vals), (be, u, vals))

/* ---- graphs (all optional; absent: every step runs as launches) ----
 * One training step's launches as one graph (CUDA graphs): every call
 * between graph_begin and graph_end is the step's device work, with no
 * synchronisation and no allocation. graph_begin chooses how to run it
 * (CL_GRAPH_PLAIN: launches, as without graphs); graph_end ends it: with
 * *redo = 1 nothing of the step ran on the device (a capture that failed, a
 * recorded graph that did not match the calls) and the core calls them
 * again, after graph_begin(CL_GRAPH_PLAIN). failed: the step's status (a
 * capture is ended either way). graph_info: what the graphs did; absent:
 * none were made. */
#define CL_SLOTS_GRAPHS(X)                                                                          \
  X(NONE, OPT, cl_status, graph_begin, (cl_backend * be, cl_graph_mode mode), (be, mode))          \
  X(NONE, OPT, cl_status, graph_end, (cl_backend * be, cl_status failed, int *redo),              \
    (be, failed, redo))                                                                            \
  X(NONE, OPT, void, graph_info, (cl_backend * be, cl_graph_info *out), (be, out))

/* ---- dropout ----
 * mask_mul: a mask (float, each element 0 or 1 / (1 - p)) over the s->reps
 * steps of what it masks, as every step of a sequence shares its mask
 * (cl_mask_shape); out may be in itself with one group and without
 * accumulate. Products and sums in float, rounded once.
 * mask_draw: a mask drawn on the device, into the planned buffer (the
 * numbers of dropout_rng.h, the same on every backend; cl_mask_draw). */
#define CL_SLOTS_DROPOUT(X)                                                                         \
  X(STEP, REQ, cl_status, mask_mul,                                                               \
    (cl_backend * be, const cl_mask_shape *s, const void *in, const float *mask, void *out),      \
    (be, s, in, mask, out))                                                                        \
  X(STEP, REQ, cl_status, mask_draw, (cl_backend * be, const cl_mask_draw *d, float *mask),       \
    (be, d, mask))

/* ---- reports (all optional) ----
 * mem_info: free and total device bytes; default: physical memory.
 * runtime_bytes: device bytes the process holds for this backend that no
 * model owns (CUDA: context, cuDNN handle, stream), measured once per
 * process at first use; reported as the `runtime` line. Default 0: the CPU
 * backend's own costs (its OpenMP threads' stacks) are the process's host
 * memory, measured by VmHWM.
 * conv_algo: the algorithm conv_forward, conv_backward_data and
 * conv_backward_filter run for s in direction dir (0 forward, 1 backward
 * data, 2 backward filter), for reports and the conformance test's
 * tolerances: the library's own names, " tf32" appended where float32 runs
 * on TF32 tensor cores, several joined by "/" where chunks of s differ; ""
 * when not known yet (ask after the calls). The string stays valid until
 * the next call of this slot. */
#define CL_SLOTS_REPORT(X)                                                                          \
  X(NONE, OPT, cl_status, mem_info, (cl_backend * be, size_t *free_bytes, size_t *total_bytes),   \
    (be, free_bytes, total_bytes))                                                                 \
  X(NONE, OPT, cl_status, runtime_bytes, (cl_backend * be, size_t *bytes), (be, bytes))            \
  X(NONE, OPT, const char *, conv_algo, (cl_backend * be, const cl_conv_shape *s, int dir),       \
    (be, s, dir))

#define CL_BACKEND_SLOTS(X)                                                                         \
  CL_SLOTS_MEMORY(X)                                                                                \
  CL_SLOTS_CONV(X)                                                                                  \
  CL_SLOTS_CELL(X)                                                                                  \
  CL_SLOTS_LOSS(X)                                                                                  \
  CL_SLOTS_OPTIM(X)                                                                                 \
  CL_SLOTS_STEP(X)                                                                                  \
  CL_SLOTS_GRAPHS(X)                                                                                \
  CL_SLOTS_DROPOUT(X)                                                                               \
  CL_SLOTS_REPORT(X)

/* Each slot's number (CL_SLOT_conv_forward, ...), in the list's order. */
#define CL_SLOT_ENUM_(step, opt, ret, name, params, args) CL_SLOT_##name,
enum { CL_BACKEND_SLOTS(CL_SLOT_ENUM_) CL_N_SLOTS };
#undef CL_SLOT_ENUM_

/* A backend's table entry: a required slot is the backend's function
 * (fn); an optional one what the backend's own macro for it says (has: its
 * function, or NULL for the default), so that a backend decides on every
 * optional slot by name. */
#define CL_SLOT_PICK_REQ(fn, has) fn
#define CL_SLOT_PICK_OPT(fn, has) has

struct cl_backend_i {
  const char *name;
  /* Nonzero when device pointers are host pointers (CPU): the core then packs
   * host arrays straight into device buffers instead of staging them. */
  int host_accessible;
  /* Bytes of scratch the backend asks for (set_scratch); 0: none. */
  size_t scratch_bytes;
#define CL_SLOT_FIELD_(step, opt, ret, name, params, args) ret(*name) params;
  CL_BACKEND_SLOTS(CL_SLOT_FIELD_)
#undef CL_SLOT_FIELD_
};

struct cl_backend {
  const struct cl_backend_i *iface;
  void *context;
  int n_threads;
  /* the arithmetic of float32 convolutions, for reports: "tf32" (tensor
   * cores, inputs rounded to 10 mantissa bits) or "float32"; NULL where the
   * backend has no such choice (the CPU's is always float32) */
  const char *conv_math;
  /* Nonzero: the core passes a layer's bias to the cell slots
   * (gates_forward's bias, gates_backward's dbias) instead of the
   * convolution slots, saving the convolutions' separate bias passes over
   * the gates. Set by the backend when it is created (CUDA:
   * CONVLSTM_CUDA_FUSED_BIAS=1); 0 keeps the bias with the convolutions. */
  int fused_bias;
  /* Nonzero: the backend would have activations channels last (CL_NHWC)
   * wherever a model allows it, as the core decides when the model is
   * created (layout_of in model.c: not with dropout, whose masks are drawn
   * in NCHW order, nor with per-position peepholes); every shape the core
   * then hands down says CL_NHWC. Set by the backend when it is created
   * (CUDA: CONVLSTM_CUDA_CHANNELS_LAST=1); 0 keeps NCHW. The CPU backend
   * leaves it 0 but runs NHWC shapes too (the reference the tests hold
   * the CUDA backend and the core's conversions to). */
  int channels_last;
  char err[CL_ERRMSG_LEN];
};

/* Constructors; a build without CUDA returns CL_E_UNSUPPORTED for CUDA.
 * The core calls none of them: the registry above it and the backends
 * (src/backend_reg.c, as ggml's ggml-backend-reg) picks one by cfg->device
 * and hands it to the core's model constructors as a cl_backend_ctor. */
cl_status cl_backend_cpu_create(int n_threads, cl_backend **out);
cl_status cl_backend_cuda_create(cl_backend **out, char *err, size_t errlen);
int cl_backend_cuda_available(void);
/* A backend for cfg (its device, its n_threads), or a status with the
 * reason in err. */
typedef cl_status (*cl_backend_ctor)(const cl_config *cfg, cl_backend **out, char *err,
                                     size_t errlen);
/* The CUDA backend's description of device `device` (-1: the current one),
 * asked of the driver afresh; CL_E_UNSUPPORTED with the reason in err when
 * none is usable. The core's cl_gpu_info_get passes it on. */
cl_status cl_backend_cuda_device_info(int device, cl_gpu_info *out, char *err, size_t errlen);

/* Wrappers that supply defaults for the optional slots (backend.c). */
cl_status cl_backend_mem_info(cl_backend *be, size_t *free_bytes, size_t *total_bytes);
cl_status cl_backend_synchronize(cl_backend *be);
cl_status cl_backend_bind_thread(cl_backend *be);
/* The workspace of s's call in direction dir (conv_workspace), and the
 * largest of its three directions' (conv_workspace_any). */
cl_status cl_backend_conv_workspace(cl_backend *be, const cl_conv_shape *s, cl_conv_dir dir,
                                    size_t *bytes);
cl_status cl_backend_conv_workspace_any(cl_backend *be, const cl_conv_shape *s, size_t *bytes);
size_t cl_backend_runtime_bytes(cl_backend *be);
/* The step's block: step_vals, or host_vals (the core's, in host memory). */
cl_step_vals *cl_backend_step_vals(cl_backend *be, cl_step_vals *host_vals);
/* loss_acc and update_step under the names the core calls them by. */
cl_status cl_backend_loss_acc(cl_backend *be, const cl_loss_fn *f, const void *pred,
                              const float *target, const float *weight, size_t n, cl_dtype dtype,
                              float scale, float *grad, double share, double *acc);
cl_status cl_backend_update_step(cl_backend *be, const cl_update_args *u, cl_step_vals *vals);
cl_status cl_backend_graph_begin(cl_backend *be, cl_graph_mode mode);
cl_status cl_backend_graph_end(cl_backend *be, cl_status failed, int *redo);
void cl_backend_graph_info(cl_backend *be, cl_graph_info *out);
void cl_backend_destroy(cl_backend *be);

#endif
