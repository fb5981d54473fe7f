/*
 * cuda/cuda_backend.cu -- the CUDA backend's constructor, its table of slots
 * (core/backend.h), memory and copies, error reporting, and gpu_info().
 *
 * The kernels live beside it, each file named after its CPU twin in src/cpu/
 * (cuda_common.h lists them): cudnn_conv.cu is the only file that calls
 * cuDNN's convolution API.
 *
 * This file holds no model state and does no accounting: every alloc/free
 * comes from core/alloc.c, which counts the bytes. Nothing here exits or
 * prints; failures return a cl_status with the message in be->err.
 */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, free, getenv, strtod */
#include <string.h> /* strrchr, strchr, memset */

#include "cuda_common.h" /* context, check macros, slot prototypes */

/* ---- errors ------------------------------------------------------------ */

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

/* The name of the called function: "cudaMalloc(out, bytes)" -> "cudaMalloc". */
static int call_name_len(const char *what) {
  const char *p = strchr(what, '(');
  return p ? (int)(p - what) : (int)strlen(what);
}

cl_status cl_cuda_fail(cl_backend *be, cudaError_t e, const char *what, const char *file,
                       int line) {
  (void)cudaGetLastError(); /* a non-sticky error must not resurface at the next check */
  if (be)
    snprintf(be->err, sizeof be->err, "%s:%d: %.*s failed: %s (%s)", base_name(file), line,
             call_name_len(what), what, cudaGetErrorString(e), cudaGetErrorName(e));
  switch (e) {
  case cudaErrorMemoryAllocation:
    return CL_E_OOM;
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver:
  case cudaErrorNoKernelImageForDevice:
    return CL_E_UNSUPPORTED;
  default:
    return CL_E_BACKEND;
  }
}

cl_status cl_cudnn_fail(cl_backend *be, cudnnStatus_t s, const char *what, const char *file,
                        int line) {
  char detail[256];
  detail[0] = '\0';
  cudnnGetLastErrorString(detail, sizeof detail);
  (void)cudaGetLastError();
  if (be)
    snprintf(be->err, sizeof be->err, "%s:%d: %.*s failed: %s%s%s", base_name(file), line,
             call_name_len(what), what, cudnnGetErrorString(s), detail[0] ? ": " : "", detail);
  if (s == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED ||
      s == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED)
    return CL_E_OOM;
  if (CUDNN_STATUS_CATEGORY(s) == CUDNN_STATUS_NOT_SUPPORTED) return CL_E_UNSUPPORTED;
  return CL_E_BACKEND;
}

cl_status cl_cuda_bad_dtype(cl_backend *be, cl_dtype t, const char *where) {
  snprintf(be->err, sizeof be->err, "%s: storage type %d is not supported by the cuda backend",
           where, (int)t);
  return CL_E_UNSUPPORTED;
}

/* ---- casts ------------------------------------------------------------- */

template <typename T> __global__ void cast_from_f32_kernel(const float *src, T *dst, size_t n) {
  CL_CUDA_FOR(i, n) dst[i] = cl_st<T>(src[i]);
}

cl_status cl_cuda_cast_from_f32(cl_backend *be, const float *src, void *dst, size_t n,
                                cl_dtype t) {
  if (n == 0) return CL_OK;
  cudaStream_t st = cl_cuda_ctx_of(be)->stream;
  switch (t) {
  case CL_F32:
    CL_CUDA_CHECK(be, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, st));
    return CL_OK;
  case CL_F16:
    cast_from_f32_kernel<__half><<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, st>>>(src, (__half *)dst, n);
    break;
  case CL_BF16:
    cast_from_f32_kernel<__nv_bfloat16>
        <<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, st>>>(src, (__nv_bfloat16 *)dst, n);
    break;
  default:
    return cl_cuda_bad_dtype(be, t, "cast");
  }
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* ---- memory and copies ------------------------------------------------- */

cl_status cl_cuda_alloc(cl_backend *be, size_t bytes, void **out) {
  *out = NULL;
  if (bytes == 0) return CL_OK;
  cudaError_t e = cudaMalloc(out, bytes);
  if (e != cudaSuccess) {
    *out = NULL;
    return cl_cuda_fail(be, e, "cudaMalloc", __FILE__, __LINE__);
  }
  return CL_OK;
}

void cl_cuda_free(cl_backend *be, void *p) {
  if (!p) return;
  /* Kernels queued on the stream may still read p; cudaFree's own implicit
   * synchronization is not promised for a non-blocking stream. */
  (void)cudaStreamSynchronize(cl_cuda_ctx_of(be)->stream);
  if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
}

cl_status cl_cuda_memset0(cl_backend *be, void *p, size_t bytes) {
  if (bytes == 0) return CL_OK;
  CL_CUDA_CHECK(be, cudaMemsetAsync(p, 0, bytes, cl_cuda_ctx_of(be)->stream));
  return CL_OK;
}

/* From pageable host memory cudaMemcpyAsync returns once the source has
 * been staged, so the caller may reuse host_src at once. From pinned memory
 * (host_stage's buffer, what the core passes when it got one) the copy is
 * truly asynchronous and host_src must stay unchanged until the next
 * synchronize, which the core does after every upload. */
cl_status cl_cuda_upload(cl_backend *be, void *dst, const void *host_src, size_t bytes) {
  if (bytes == 0) return CL_OK;
  CL_CUDA_CHECK(be, cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice,
                                    cl_cuda_ctx_of(be)->stream));
  return CL_OK;
}

cl_status cl_cuda_download(cl_backend *be, void *host_dst, const void *src, size_t bytes) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  if (bytes > 0)
    CL_CUDA_CHECK(be, cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, ctx->stream));
  /* also surfaces a fault of any kernel queued before the copy */
  CL_CUDA_CHECK(be, cudaStreamSynchronize(ctx->stream));
  cl_cuda_stage_settle(be);
  return CL_OK;
}

/* The twin of cl_cpu_store_f32: the cast above (round to nearest even). */
cl_status cl_cuda_store_f32(cl_backend *be, void *dst, const float *src, size_t n,
                            cl_dtype dtype) {
  return cl_cuda_cast_from_f32(be, src, dst, n, dtype);
}

cl_status cl_cuda_copy(cl_backend *be, void *dst, const void *src, size_t bytes) {
  if (bytes == 0 || dst == src) return CL_OK;
  CL_CUDA_CHECK(be, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                                    cl_cuda_ctx_of(be)->stream));
  return CL_OK;
}

cl_status cl_cuda_mem_info(cl_backend *be, size_t *free_bytes, size_t *total_bytes) {
  *free_bytes = *total_bytes = 0;
  CL_CUDA_CHECK(be, cudaMemGetInfo(free_bytes, total_bytes));
  return CL_OK;
}

/* A new pinned stage of `bytes` (the old one freed: the caller has waited
 * for the stream); on failure none, and the core stages through malloc. */
static cl_status stage_alloc(cl_backend *be, cl_cuda_ctx *ctx, size_t bytes) {
  if (ctx->h_stage) (void)cudaFreeHost(ctx->h_stage);
  ctx->h_stage = NULL;
  ctx->h_stage_bytes = 0;
  void *p = NULL;
  cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) return cl_cuda_fail(be, e, "cudaHostAlloc", __FILE__, __LINE__);
  ctx->h_stage = p;
  ctx->h_stage_bytes = bytes;
  return CL_OK;
}

/* Whole MiB, so that batches of slightly different sizes reuse the stage,
 * and never above the cap. */
static size_t stage_size(const cl_cuda_ctx *ctx, size_t bytes) {
  const size_t mib = (size_t)1 << 20;
  const size_t want = (bytes + mib - 1) / mib * mib;
  return want > ctx->stage_limit ? ctx->stage_limit : want;
}

/* The stream has been waited for: no queued copy reads the stage and its
 * regions start over. A stage that ran short since the last wait is to
 * hold all that was staged meanwhile (a whole training step, so that the
 * next one stages without waiting): it grows at the next host_stage, not
 * here, where the caller may still be reading a region it downloaded into. */
void cl_cuda_stage_settle(cl_backend *be) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  if (ctx->h_stage_short) {
    const size_t want = stage_size(ctx, ctx->h_stage_total);
    if (want > ctx->h_stage_grow) ctx->h_stage_grow = want;
  }
  ctx->h_stage_used = 0;
  ctx->h_stage_total = 0;
  ctx->h_stage_short = 0;
}

void cl_cuda_stage_prepare(cl_backend *be) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  /* nothing staged since the last wait: nothing reads the stage */
  if (ctx->h_stage_used != 0 || ctx->h_stage_grow <= ctx->h_stage_bytes) return;
  const size_t grow = ctx->h_stage_grow;
  ctx->h_stage_grow = 0;
  if (stage_alloc(be, ctx, grow) != CL_OK) be->err[0] = '\0'; /* host_stage makes a smaller one */
}

/* The device is a per-thread setting of the runtime: a thread the backend
 * was not made on starts on device 0. Setting the current one again costs
 * nothing. */
cl_status cl_cuda_bind_thread(cl_backend *be) {
  CL_CUDA_CHECK(be, cudaSetDevice(cl_cuda_ctx_of(be)->device));
  return CL_OK;
}

cl_status cl_cuda_synchronize(cl_backend *be) {
  CL_CUDA_CHECK(be, cudaStreamSynchronize(cl_cuda_ctx_of(be)->stream));
  cl_cuda_stage_settle(be);
  return CL_OK;
}

/* Copies from pageable memory go through the driver's own small pinned
 * bounce buffer in pieces; from page-locked memory they are one DMA at the
 * link's speed. One buffer serves every transfer: regions of it in turn
 * (each 256-byte aligned), so that a training step stages x and y without
 * waiting for the copies of the ones before (backend.h); when it is full,
 * the stream is waited for and it starts over (a larger one when this
 * request needs it), and at the next wait it grows to all that was staged
 * since the last (cl_cuda_stage_settle). Page-locked memory is taken from
 * the machine's RAM, so it is capped (CONVLSTM_CUDA_PINNED_MB) and a
 * transfer above the cap is refused here and staged by the core through
 * malloc. */
/* Page-locked memory for the caller to keep (a staged batch), under the
 * stage's cap; portable, so that it serves the model's device whichever
 * thread asked. Called beside a running step (backend.h): it writes no
 * be->err, and clears the runtime's error state of this thread. */
cl_status cl_cuda_host_alloc(cl_backend *be, size_t bytes, void **host) {
  *host = NULL;
  if (bytes == 0 || bytes > cl_cuda_ctx_of(be)->stage_limit) return CL_E_UNSUPPORTED;
  if (cudaHostAlloc(host, bytes, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    *host = NULL;
    return CL_E_OOM;
  }
  return CL_OK;
}

void cl_cuda_host_free(cl_backend *be, void *host) {
  (void)be;
  if (host && cudaFreeHost(host) != cudaSuccess) (void)cudaGetLastError();
}

cl_status cl_cuda_host_stage(cl_backend *be, size_t bytes, void **host) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  *host = NULL;
  if (bytes == 0 || bytes > ctx->stage_limit) {
    snprintf(be->err, sizeof be->err, "host_stage: %zu bytes exceed the pinned limit of %zu",
             bytes, ctx->stage_limit);
    return CL_E_UNSUPPORTED;
  }
  const size_t align = 256, need = (bytes + align - 1) / align * align;
  cl_cuda_stage_prepare(be);
  if (!ctx->h_stage || ctx->h_stage_used + bytes > ctx->h_stage_bytes) {
    /* a queued copy may still read the buffer */
    CL_CUDA_CHECK(be, cudaStreamSynchronize(ctx->stream));
    ctx->h_stage_used = 0;
    ctx->h_stage_short = 1;
    if (bytes > ctx->h_stage_bytes) {
      const size_t want = stage_size(ctx, ctx->h_stage_total + need);
      const cl_status st = stage_alloc(be, ctx, want > bytes ? want : bytes);
      if (st != CL_OK) return st;
    }
  }
  *host = (char *)ctx->h_stage + ctx->h_stage_used;
  ctx->h_stage_used += need;
  ctx->h_stage_total += need;
  return CL_OK;
}

/* ---- batches sent ahead (core/ahead.c) --------------------------------- */

/* Beside a running step (backend.h): no be->err; the runtime's error state
 * of this thread is cleared and the failure returned. */
static cl_status ahead_fail(cudaError_t e) {
  if (e == cudaSuccess) return CL_OK;
  (void)cudaGetLastError();
  return CL_E_BACKEND;
}

/* The calling thread (R's, beside a step) may have another device current:
 * the copy stream's is made current for the calls and the caller's put back. */
cl_status cl_cuda_ahead_upload(cl_backend *be, int slot, void *dst, const void *host_src,
                                      size_t bytes) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  int was = -1;
  cudaError_t e = cudaGetDevice(&was);
  if (e == cudaSuccess && was != ctx->device) e = cudaSetDevice(ctx->device);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(ctx->copy, ctx->freed[slot], 0);
  if (e == cudaSuccess && bytes)
    e = cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, ctx->copy);
  if (e == cudaSuccess) e = cudaEventRecord(ctx->ready[slot], ctx->copy);
  if (was >= 0 && was != ctx->device) (void)cudaSetDevice(was);
  return ahead_fail(e);
}

cl_status cl_cuda_ahead_acquire(cl_backend *be, int slot) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  CL_CUDA_CHECK(be, cudaStreamWaitEvent(ctx->stream, ctx->ready[slot], 0));
  return CL_OK;
}

cl_status cl_cuda_ahead_release(cl_backend *be, int slot) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  CL_CUDA_CHECK(be, cudaEventRecord(ctx->freed[slot], ctx->stream));
  return CL_OK;
}

cl_status cl_cuda_ahead_sync(cl_backend *be, int slot) {
  return ahead_fail(cudaEventSynchronize(cl_cuda_ctx_of(be)->ready[slot]));
}

/* ---- lifetime ---------------------------------------------------------- */

/* Also the cleanup of a half-made backend in create: every member may be unset. */
void cl_cuda_destroy(cl_backend *be) {
  if (!be) return;
  cl_cuda_ctx *ctx = (cl_cuda_ctx *)be->context;
  if (ctx) {
    if (ctx->stream) (void)cudaStreamSynchronize(ctx->stream);
    cl_cuda_graphs_free(be);
    cl_cudnn_cache_free(ctx->conv);
    free(ctx->algo_cache);
    if (ctx->cudnn) (void)cudnnDestroy(ctx->cudnn);
    if (ctx->h_partials) (void)cudaFreeHost(ctx->h_partials);
    if (ctx->h_flag) (void)cudaFreeHost(ctx->h_flag);
    if (ctx->h_consts) (void)cudaFreeHost(ctx->h_consts);
    if (ctx->h_stage) (void)cudaFreeHost(ctx->h_stage);
    if (ctx->stream) (void)cudaStreamDestroy(ctx->stream);
    if (ctx->copy) (void)cudaStreamSynchronize(ctx->copy);
    for (int k = 0; k < 2; k++) {
      if (ctx->ready[k]) (void)cudaEventDestroy(ctx->ready[k]);
      if (ctx->freed[k]) (void)cudaEventDestroy(ctx->freed[k]);
    }
    if (ctx->copy) (void)cudaStreamDestroy(ctx->copy);
    (void)cudaGetLastError();
    free(ctx);
  }
  free(be);
}

/* d_partials, d_flag and the step's block live in device scratch the core
 * allocates through its accounting allocator (backend.h, scratch_bytes):
 * partial sums first, then the flag and the clipping coefficient, the
 * step's results (cl_step_vals) and the update's constants. */
#define CL_CUDA_SCRATCH_FLAG_AT (CL_CUDA_MAX_PARTIALS * sizeof(double))
#define CL_CUDA_SCRATCH_COEF_AT (CL_CUDA_SCRATCH_FLAG_AT + 16)
#define CL_CUDA_SCRATCH_VALS_AT (CL_CUDA_SCRATCH_FLAG_AT + 64)
#define CL_CUDA_SCRATCH_CONSTS_AT (CL_CUDA_SCRATCH_VALS_AT + 64)
#define CL_CUDA_SCRATCH_BYTES (CL_CUDA_SCRATCH_CONSTS_AT + CL_CUDA_CONSTS_BYTES)
static_assert(sizeof(cl_step_vals) <= 64, "cl_step_vals outgrew its scratch");

void cl_cuda_set_scratch(cl_backend *be, void *p) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  char *b = (char *)p;
  ctx->d_partials = (double *)p;
  ctx->d_flag = p ? (int *)(b + CL_CUDA_SCRATCH_FLAG_AT) : NULL;
  ctx->d_coef = p ? (float *)(b + CL_CUDA_SCRATCH_COEF_AT) : NULL;
  ctx->d_vals = p ? (cl_step_vals *)(b + CL_CUDA_SCRATCH_VALS_AT) : NULL;
  ctx->d_consts = p ? (void *)(b + CL_CUDA_SCRATCH_CONSTS_AT) : NULL;
}

cl_status cl_cuda_sum_partials(cl_backend *be, unsigned blocks, double *sum) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  CL_CUDA_LAUNCH_CHECK(be);
  CL_CUDA_CHECK(be, cudaMemcpyAsync(ctx->h_partials, ctx->d_partials, blocks * sizeof(double),
                                    cudaMemcpyDeviceToHost, ctx->stream));
  CL_CUDA_CHECK(be, cudaStreamSynchronize(ctx->stream));
  double s = 0.0;
  for (unsigned b = 0; b < blocks; b++) s += ctx->h_partials[b];
  *sum = s;
  return CL_OK;
}

/* The optional slots, each decided by name: this backend's function, or
 * NULL for the core's default (backend.c). */
#define CUDA_HAS_bind_thread cl_cuda_bind_thread
#define CUDA_HAS_synchronize cl_cuda_synchronize
#define CUDA_HAS_set_scratch cl_cuda_set_scratch
#define CUDA_HAS_host_stage cl_cuda_host_stage
#define CUDA_HAS_host_alloc cl_cuda_host_alloc
#define CUDA_HAS_host_free cl_cuda_host_free
#define CUDA_HAS_ahead_upload cl_cuda_ahead_upload
#define CUDA_HAS_ahead_acquire cl_cuda_ahead_acquire
#define CUDA_HAS_ahead_release cl_cuda_ahead_release
#define CUDA_HAS_ahead_sync cl_cuda_ahead_sync
#define CUDA_HAS_gather_rows cl_cuda_gather_rows
#define CUDA_HAS_conv_workspace cl_cuda_conv_workspace
#define CUDA_HAS_peephole_filter cl_cuda_peephole_filter
#define CUDA_HAS_step_vals cl_cuda_step_vals
#define CUDA_HAS_graph_begin NULL /* cuda_graph.cu's table in front of this one, when on */
#define CUDA_HAS_graph_end NULL
#define CUDA_HAS_graph_info NULL
#define CUDA_HAS_mem_info cl_cuda_mem_info
#define CUDA_HAS_runtime_bytes cl_cuda_runtime_bytes
#define CUDA_HAS_conv_algo cl_cuda_conv_algo
#define CUDA_HAS_grad_add NULL /* a split step is the CPU's (core/split.c) */

#define CUDA_SLOT_(step, opt, ret, name, params, args)                                             \
  .name = CL_SLOT_PICK_##opt(cl_cuda_##name, CUDA_HAS_##name),
static const struct cl_backend_i cl_cuda_iface = {
    .name = "cuda",
    .host_accessible = 0,
    .scratch_bytes = CL_CUDA_SCRATCH_BYTES,
    CL_BACKEND_SLOTS(CUDA_SLOT_)
};
#undef CUDA_SLOT_

/* Asking for its attributes fails when the build holds no code this device
 * can run (e.g. built for sm_80+ and run on a Turing card), which a device
 * count alone would not reveal until the first launch. */
__global__ void cl_cuda_probe_kernel(int *p) {
  if (p) *p = 1;
}

static double env_double(const char *name, double dflt) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end = NULL;
  double v = strtod(s, &end);
  return (end && end != s && v >= 0) ? v : dflt;
}

static cl_status cuda_init(cl_backend *be, cl_cuda_ctx *ctx) {
  int n = 0;
  CL_CUDA_CHECK(be, cudaGetDeviceCount(&n));
  if (n <= 0) {
    snprintf(be->err, sizeof be->err, "no CUDA device is visible to this process");
    return CL_E_UNSUPPORTED;
  }
  int dev = 0;
  CL_CUDA_CHECK(be, cudaGetDevice(&dev));
  cl_cuda_runtime_before_context(dev);
  CL_CUDA_CHECK(be, cudaSetDevice(dev)); /* creates the primary context now, not mid-step */
  cl_cuda_runtime_after_context();
  ctx->device = dev;
  cudaFuncAttributes fa;
  cudaError_t e = cudaFuncGetAttributes(&fa, cl_cuda_probe_kernel);
  /* only these two mean a missing architecture; anything else (a sticky
   * error left by an earlier fault in this process) is said as it is */
  if (e != cudaSuccess && e != cudaErrorInvalidDeviceFunction && e != cudaErrorNoKernelImageForDevice)
    return cl_cuda_fail(be, e, "cudaFuncGetAttributes", __FILE__, __LINE__);
  if (e != cudaSuccess) {
    int major = 0, minor = 0;
    (void)cudaGetLastError();
    (void)cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    (void)cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    (void)cudaGetLastError();
    snprintf(be->err, sizeof be->err,
             "this build of convlstm has no GPU code for device %d (compute capability %d.%d): "
             "%s; reinstall with its architecture",
             dev, major, minor, cudaGetErrorString(e));
    return CL_E_UNSUPPORTED;
  }
  CL_CUDA_CHECK(be, cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking));
  CL_CUDA_CHECK(be, cudaStreamCreateWithFlags(&ctx->copy, cudaStreamNonBlocking));
  for (int k = 0; k < 2; k++) {
    CL_CUDA_CHECK(be, cudaEventCreateWithFlags(&ctx->ready[k], cudaEventDisableTiming));
    CL_CUDA_CHECK(be, cudaEventCreateWithFlags(&ctx->freed[k], cudaEventDisableTiming));
  }
  CL_CUDNN_CHECK(be, cudnnCreate(&ctx->cudnn));
  CL_CUDNN_CHECK(be, cudnnSetStream(ctx->cudnn, ctx->stream));
  cl_cuda_runtime_after_setup(dev);
  CL_CUDA_CHECK(be, cudaMallocHost((void **)&ctx->h_partials, CL_CUDA_MAX_PARTIALS * sizeof(double)));
  CL_CUDA_CHECK(be, cudaMallocHost((void **)&ctx->h_flag, sizeof(int)));
  CL_CUDA_CHECK(be, cudaMallocHost(&ctx->h_consts, CL_CUDA_CONSTS_BYTES));

  /* Knobs with no place in cl_config yet. The workspace cap bounds what one
   * convolution may add to the plan; calls over many frames are cut into
   * chunks whose fast algorithm fits it (dir_chunk in cudnn_conv.cu), so on
   * an H100 256 MiB ran cuDNN's tensor-core and implicit-GEMM kernels at
   * every benchmark shape. */
  ctx->ws_limit = (size_t)(env_double("CONVLSTM_CUDA_WORKSPACE_MB", 256.0) * 1024.0 * 1024.0);
  ctx->benchmark = env_double("CONVLSTM_CUDNN_BENCHMARK", 0.0) != 0.0;
  /* Choices timed once per machine and stored in this file for later
   * processes (cudnn_conv.cu, cudnn_algo_cache.h); unset or empty: none. */
  const char *algo_cache = getenv("CONVLSTM_CUDNN_ALGO_CACHE");
  if (algo_cache && *algo_cache) {
    ctx->algo_cache = strdup(algo_cache);
    if (!ctx->algo_cache) {
      snprintf(be->err, sizeof be->err, "cuda backend: out of host memory");
      return CL_E_OOM;
    }
  }
  /* As torch.backends.cudnn.deterministic: a step gives the same bits run
   * after run (test_cuda_graphs compares graphs with launches so). */
  ctx->deterministic = env_double("CONVLSTM_CUDNN_DETERMINISTIC", 0.0) != 0.0;
  ctx->no_transforms = env_double("CONVLSTM_CUDNN_NO_FFT", 0.0) != 0.0;
  /* On by default, as PyTorch's torch.backends.cudnn.allow_tf32: float32
   * convolutions may run on TF32 tensor cores (cuDNN's DEFAULT_MATH), all
   * else stays float32. CONVLSTM_CUDA_TF32=0 pins them to FMA_MATH, strict
   * float32 that matches the CPU backend to float32 rounding. */
  ctx->allow_tf32 = env_double("CONVLSTM_CUDA_TF32", 1.0) != 0.0;
  be->conv_math = ctx->allow_tf32 ? "tf32" : "float32";
  /* The layers' bias added in the cell's kernel and its gradient summed in
   * the cell's backward kernel (cuda_cell.cu) instead of cudnn_conv.cu's
   * add_bias and bias_grad passes over the gates (15 % of a float16 step
   * on the H200). Off until a GPU has timed it (bench_gpu.py --ab). */
  be->fused_bias = env_double("CONVLSTM_CUDA_FUSED_BIAS", 0.0) != 0.0;
  /* Activations channels last (NHWC) where the model allows it (backend.h):
   * cuDNN's tensor-core kernels then read them as they are, without the
   * NCHW <-> NHWC transposes it runs around each call otherwise. Off until
   * a GPU has timed it (bench_gpu.py --ab). */
  be->channels_last = env_double("CONVLSTM_CUDA_CHANNELS_LAST", 0.0) != 0.0;
  /* Half-type backward data converts its result into float32 through this
   * much scratch at most, working in slices of images beyond it: 64 MiB holds
   * 32M elements, a call large enough to keep the GPU busy, without the
   * scratch growing with the sequence length. At least one image always. */
  ctx->dx_scratch_limit =
      (size_t)(env_double("CONVLSTM_CUDA_DX_SCRATCH_MB", 64.0) * 1024.0 * 1024.0);
  /* Pinned staging of host arrays (host_stage); 0 turns it off, which the
   * benchmark uses to measure what it saves. */
  ctx->stage_limit = (size_t)(env_double("CONVLSTM_CUDA_PINNED_MB", 256.0) * 1024.0 * 1024.0);
  return CL_OK;
}

extern "C" cl_status cl_backend_cuda_create(cl_backend **out, char *err, size_t errlen) {
  *out = NULL;
  cl_backend *be = (cl_backend *)calloc(1, sizeof *be);
  cl_cuda_ctx *ctx = (cl_cuda_ctx *)calloc(1, sizeof *ctx);
  if (!be || !ctx) {
    free(be);
    free(ctx);
    if (err) snprintf(err, errlen, "cuda backend: out of host memory");
    return CL_E_OOM;
  }
  be->iface = &cl_cuda_iface;
  be->context = ctx;
  be->n_threads = 1;
  ctx->device = -1;
  cl_status st = cuda_init(be, ctx);
  /* One training step as one CUDA graph: off by default until a GPU run
   * has shown the replayed step equal to the launched one, bit for bit
   * (doc/gpu.md). */
  if (st == CL_OK && env_double("CONVLSTM_CUDA_GRAPHS", 0.0) != 0.0) st = cl_cuda_graphs_attach(be);
  if (st != CL_OK) {
    if (err) snprintf(err, errlen, "cuda backend: %s", be->err);
    cl_cuda_destroy(be);
    return st;
  }
  *out = be;
  return CL_OK;
}

extern "C" int cl_backend_cuda_available(void) {
  int n = 0, dev = 0;
  cudaFuncAttributes fa;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0 || cudaGetDevice(&dev) != cudaSuccess ||
      cudaSetDevice(dev) != cudaSuccess ||
      cudaFuncGetAttributes(&fa, cl_cuda_probe_kernel) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return 1;
}

/* ---- gpu_info() -------------------------------------------------------- */

extern "C" cl_status cl_backend_cuda_device_info(int device, cl_gpu_info *out, char *err,
                                                 size_t errlen) {
  memset(out, 0, sizeof *out);
  out->device = -1;
  /* Versions first: they explain a missing device better than anything. */
  (void)cudaDriverGetVersion(&out->driver_version);
  (void)cudaRuntimeGetVersion(&out->runtime_version);
  out->cudnn_version = cudnnGetVersion();
  out->cudnn_build_version = CUDNN_VERSION;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();
    if (err)
      snprintf(err, errlen, "no usable CUDA device: %s",
               e != cudaSuccess ? cudaGetErrorString(e) : "none is visible to this process");
    return CL_E_UNSUPPORTED;
  }
  out->n_devices = n;
  int cur = 0;
  if ((e = cudaGetDevice(&cur)) != cudaSuccess) goto fail;
  if (device < 0) device = cur;
  if (device >= n) {
    if (err) snprintf(err, errlen, "device %d does not exist (%d visible)", device, n);
    return CL_E_INVALID;
  }
  cudaDeviceProp prop;
  if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess) goto fail;
  out->device = device;
  snprintf(out->name, sizeof out->name, "%s", prop.name);
  out->cc_major = prop.major;
  out->cc_minor = prop.minor;
  out->multiprocessors = prop.multiProcessorCount;
  /* cudaMemGetInfo answers for the current device only */
  if (device != cur && (e = cudaSetDevice(device)) != cudaSuccess) goto fail;
  e = cudaMemGetInfo(&out->mem_free, &out->mem_total);
  if (device != cur) (void)cudaSetDevice(cur);
  if (e != cudaSuccess) goto fail;
  return CL_OK;
fail:
  (void)cudaGetLastError();
  if (err) snprintf(err, errlen, "cuda device info: %s", cudaGetErrorString(e));
  return CL_E_BACKEND;
}
