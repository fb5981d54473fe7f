/*
 * cuda/cuda_common.h -- what every file of the CUDA backend shares: the
 * backend's context, the error-check macros, launch sizing, storage-type
 * conversions for kernels, and the prototypes of the slots that
 * cuda_backend.cu puts into the table.
 *
 * It is C++ (nvcc) and internal to src/cuda/; the core never includes it. The
 * core reaches this backend only through core/backend.h: the table
 * struct cl_backend_i and the entry points cl_backend_cuda_create,
 * cl_backend_cuda_available and cl_backend_cuda_device_info.
 */
#ifndef CONVLSTM_CUDA_COMMON_H
#define CONVLSTM_CUDA_COMMON_H

#include <stddef.h>

#include <cuda_runtime.h> /* cudaError_t, cudaStream_t, cudaMalloc... */
#include <cuda_fp16.h>    /* __half and its conversions */
#include <cuda_bf16.h>    /* __nv_bfloat16 and its conversions */
#include <cudnn.h>        /* cudnnHandle_t, cudnnStatus_t */

/* backend.h is C without extern "C" guards of its own; its declarations of
 * cl_backend_cuda_create and friends must keep C linkage. */
extern "C" {
#include "../core/backend.h"
}

/* The backend's context (cl_backend.context). */
struct cl_cudnn_cache; /* cudnn_conv.cu: algorithm choices per shape */

typedef struct cl_cuda_ctx {
  int device;                  /* the device current when the backend was created */
  cudaStream_t stream;         /* every kernel and copy of this backend runs here */
  cudnnHandle_t cudnn;         /* bound to stream */
  /* Batches sent ahead (backend.h's ahead_* slots): uploaded on copy while
   * stream computes; ready[k] marks slot k's last upload, freed[k] the last
   * of stream's work that reads slot k's buffer. */
  cudaStream_t copy;
  cudaEvent_t ready[2], freed[2];
  struct cl_cudnn_cache *conv; /* owned by cudnn_conv.cu, freed by destroy */
  size_t ws_limit;             /* most convolution workspace an algorithm may ask for */
  int benchmark;               /* 1: time algorithms (cudnnFind*); 0: cuDNN's heuristics */
  /* CONVLSTM_CUDNN_ALGO_CACHE: the file of timed choices stored per machine
   * (cudnn_algo_cache.h): a stored one is used without timing, one not
   * stored is timed (as with benchmark) and stored; NULL: none */
  char *algo_cache;
  int deterministic;           /* 1: only algorithms cuDNN calls deterministic (no atomics) */
  /* CONVLSTM_CUDNN_NO_FFT=1: the FFT and non-fused Winograd algorithms only
   * where no other takes a call (their float32 sums round further from the
   * exact ones than implicit GEMM's: a diagnostic of the GPU harness) */
  int no_transforms;
  int allow_tf32;              /* 1: float32 convolutions may use TF32 tensor cores */
  /* Most bytes of half-type scratch that backward data may hold for its
   * result before converting it into the float32 dx (cudnn_conv.cu). */
  size_t dx_scratch_limit;
  /* Per-block partial sums of the MSE: a fixed buffer in the scratch the core
   * hands over at model creation (set_scratch), so that mse() never
   * allocates inside a training step and the bytes are counted. */
  double *d_partials;
  double *h_partials; /* pinned, so the copy back is a plain DMA */
  /* grad_unscale's found-inf flag, on the device and its pinned mirror */
  int *d_flag;
  int *h_flag;
  /* The sync-free step (backend.h): its results, the clipping coefficient
   * and the update's constants, all in the scratch; the constants are
   * written by the host into h_consts (pinned) at each update_step and
   * copied by the stream, so that a recorded graph reads the current ones. */
  cl_step_vals *d_vals;
  float *d_coef;
  void *d_consts;
  void *h_consts;
  /* The host_stage slot's pinned buffer (host memory, not counted by the
   * core's device accounting), grown on demand up to stage_limit bytes;
   * regions handed out from h_stage_used on, which goes back to 0 whenever
   * the stream has been waited for. */
  void *h_stage;
  size_t h_stage_bytes;
  size_t h_stage_used;
  size_t h_stage_total; /* staged since the stream was last waited for */
  int h_stage_short;    /* ... and the stage ran out meanwhile */
  size_t h_stage_grow;  /* the size it is to grow to before its next use */
  size_t stage_limit;   /* 0: no pinned staging */
  struct cl_cuda_graphs *graphs; /* cuda_graph.cu; NULL with CONVLSTM_CUDA_GRAPHS=0 */
} cl_cuda_ctx;

/* Bytes of scratch for the step's update constants (cuda_optim.cu). */
#define CL_CUDA_CONSTS_BYTES 128

#define CL_CUDA_MAX_PARTIALS 1024
#define CL_CUDA_THREADS 256

static inline cl_cuda_ctx *cl_cuda_ctx_of(cl_backend *be) { return (cl_cuda_ctx *)be->context; }

/* ---- errors ------------------------------------------------------------ */

/* Write "file:line: what: message" into be->err and return the status to
 * hand up: CL_E_OOM for an allocation failure, CL_E_UNSUPPORTED for what
 * cuDNN does not support, CL_E_BACKEND otherwise. Both clear CUDA's
 * last-error so that a later launch check does not report this one again. */
cl_status cl_cuda_fail(cl_backend *be, cudaError_t e, const char *what, const char *file,
                       int line);
cl_status cl_cudnn_fail(cl_backend *be, cudnnStatus_t s, const char *what, const char *file,
                        int line);

/* They return from the calling function: use them only where nothing needs
 * cleaning up on the way out. */
#define CL_CUDA_CHECK(be, call)                                                 \
  do {                                                                          \
    cudaError_t cl_e_ = (call);                                                 \
    if (cl_e_ != cudaSuccess) return cl_cuda_fail((be), cl_e_, #call, __FILE__, __LINE__); \
  } while (0)

#define CL_CUDNN_CHECK(be, call)                                                \
  do {                                                                          \
    cudnnStatus_t cl_s_ = (call);                                               \
    if (cl_s_ != CUDNN_STATUS_SUCCESS)                                          \
      return cl_cudnn_fail((be), cl_s_, #call, __FILE__, __LINE__);             \
  } while (0)

/* After every <<<...>>>: a bad launch configuration is reported here, a
 * fault inside the kernel by the next synchronizing call. */
#define CL_CUDA_LAUNCH_CHECK(be) CL_CUDA_CHECK(be, cudaGetLastError())

/* ---- launches ---------------------------------------------------------- */

/* Blocks for a grid-stride loop over n elements (n > 0). Capped so that huge
 * tensors loop instead of asking for an absurd grid. */
static inline unsigned cl_cuda_blocks(size_t n) {
  size_t b = (n + CL_CUDA_THREADS - 1) / CL_CUDA_THREADS;
  const size_t cap = (size_t)1 << 20;
  return (unsigned)(b < 1 ? 1 : b > cap ? cap : b);
}

/* A reduction's grid: one partial sum per block into d_partials, so never
 * more blocks than it holds. */
static inline unsigned cl_cuda_partial_blocks(size_t n) {
  const unsigned b = cl_cuda_blocks(n);
  return b > CL_CUDA_MAX_PARTIALS ? CL_CUDA_MAX_PARTIALS : b;
}

/* After a reduction kernel of `blocks` blocks wrote d_partials: checks the
 * launch, brings the partials to the host and sums them in a fixed order
 * (the same result run to run). cuda_backend.cu. */
cl_status cl_cuda_sum_partials(cl_backend *be, unsigned blocks, double *sum);

#define CL_CUDA_FOR(i, n)                                                        \
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);       \
       i += (size_t)gridDim.x * blockDim.x)

/* ---- storage types: kernels load and store T, compute in float ---------- */

static __device__ __forceinline__ float cl_ld(float v) { return v; }
static __device__ __forceinline__ float cl_ld(__half v) { return __half2float(v); }
static __device__ __forceinline__ float cl_ld(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> static __device__ __forceinline__ T cl_st(float v);
template <> __device__ __forceinline__ float cl_st<float>(float v) { return v; }
template <> __device__ __forceinline__ __half cl_st<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 cl_st<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/* Sum of v over the block, valid in thread 0. blockDim.x must be a multiple
 * of 32; call once per kernel (the shared scratch is not re-synchronized). */
template <typename T> static __device__ __forceinline__ T cl_block_sum(T v) {
  __shared__ T warp_sums[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    const int n_warps = (blockDim.x + 31) >> 5;
    v = lane < n_warps ? warp_sums[lane] : (T)0;
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  }
  return v;
}

cl_status cl_cuda_bad_dtype(cl_backend *be, cl_dtype t, const char *where);

/* Cast n floats to the storage type (convolution weights for half types). */
cl_status cl_cuda_cast_from_f32(cl_backend *be, const float *src, void *dst, size_t n,
                                cl_dtype t);

/* ---- the slots: cl_cuda_<slot> each, from core/backend.h's one list ------
 * Each file is named after its CPU twin in src/cpu/: memory, reports and
 * the table in cuda_backend.cu (runtime_bytes: cuda_runtime_mem.cu,
 * gather_rows: cuda_gather.cu), convolutions cudnn_conv.cu, the cell
 * cuda_cell.cu (peepholes cuda_peephole.cu), losses cuda_loss.cu,
 * optimizers cuda_optim.cu (sum_squares cuda_clip.cu), the step's end
 * cuda_step.cu, dropout cuda_dropout.cu. The graph slots are cuda_graph.cu's
 * recording table, put in front of this one (cl_cuda_graphs_attach); the
 * prototypes of slots this backend leaves empty are declared, never
 * defined. */
#define CL_CUDA_SLOT_PROTO_(step, opt, ret, name, params, args) ret cl_cuda_##name params;
CL_BACKEND_SLOTS(CL_CUDA_SLOT_PROTO_)
#undef CL_CUDA_SLOT_PROTO_

/* ---- what the slots' files share beyond the slots ---------------------- */

/* cudnn_conv.cu: the algorithm cache, freed by destroy */
void cl_cudnn_cache_free(struct cl_cudnn_cache *c);

/* cuda_loss.cu: the loss kernel alone, its partial sums left in d_partials
 * (*blocks of them), for loss (summed on the host) and loss_acc (on the
 * device). */
cl_status cl_cuda_loss_launch(cl_backend *be, const cl_loss_fn *f, const void *pred,
                              const float *target, const float *weight, size_t n, cl_dtype dtype,
                              float scale, float *grad, unsigned *blocks);

/* cuda_optim.cu: the training step's update decided on the device
 * (backend.h, cl_update_args): update_stage writes the host's part (the
 * constants into h_consts), update_launch enqueues the rest. */
cl_status cl_cuda_update_stage(cl_backend *be, const cl_update_args *u);
cl_status cl_cuda_update_launch(cl_backend *be, const cl_update_args *u, cl_step_vals *vals);

/* cuda_clip.cu: step 2 of cl_update_args on the device */
cl_status cl_cuda_clip_launch(cl_backend *be, const cl_update_args *u, cl_step_vals *vals);

/* cuda_backend.cu: after every wait for the stream (cuda_host_stage);
 * prepare: the stage's pending growth made now, where nothing is staged
 * (before a step's capture: no allocation inside it) */
void cl_cuda_stage_settle(cl_backend *be);
void cl_cuda_stage_prepare(cl_backend *be);

/* cuda_graph.cu: CONVLSTM_CUDA_GRAPHS=1 puts the recording table in front of
 * the backend's (be->iface), which captures a training step as a CUDA graph
 * and replays it; graphs_free at destroy. */
cl_status cl_cuda_graphs_attach(cl_backend *be);
void cl_cuda_graphs_free(cl_backend *be);
/* cuda_runtime_mem.cu: the process's runtime overhead on the GPU (context,
 * cuDNN handle, stream), measured once around the first backend's set-up:
 * before_context before cudaSetDevice, after_context right after it,
 * after_setup once the handle and stream exist. */
void cl_cuda_runtime_before_context(int dev);
void cl_cuda_runtime_after_context(void);
void cl_cuda_runtime_after_setup(int dev);

#endif
