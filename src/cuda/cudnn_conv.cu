/*
 * cuda/cudnn_conv.cu -- the convolution slots of the CUDA backend on cuDNN 9's
 * legacy convolution API (twin of src/cpu/cpu_conv.c): forward, backward
 * data, backward filter (with the bias gradient) and the workspace each needs.
 *
 * The convolution is torch's Conv2d: cross-correlation, stride 1, "same"
 * padding (cl_conv_pad_h / _w), kh x kw kernels, dilation, NCHW or channels
 * last (NHWC, below). float32 may run on TF32 tensor cores, PyTorch's
 * default (CONVLSTM_CUDA_TF32=0: FMA); float16 and bfloat16 run on tensor
 * cores with float accumulation, the float32 weights being cast into the
 * workspace first (as autocast does).
 * cuDNN wants x, y and w of one type, but dx (an activation gradient) and
 * dw are float32 for every storage type: with half storage cuDNN writes them
 * in the storage type into the workspace, and a small kernel adds them into
 * the float32 arrays -- the rounding autocast applies when a half gradient
 * flows back into float32.
 *
 * Algorithms are chosen once per shape and direction, under ctx->ws_limit,
 * by cuDNN's heuristics (no device memory, no timing), and kept with their
 * descriptors in a cache for the backend's lifetime: conv_workspace() and
 * the three calls therefore agree on the algorithm, so the workspace the
 * core allocates from conv_workspace() is exactly what they use. With
 * CONVLSTM_CUDNN_BENCHMARK=1 the first call of each shape and direction
 * then times the candidates (cudnnFind*AlgorithmEx) on that call's own
 * buffers and the planned workspace, and keeps the fastest that fits it:
 * planning stays allocation-free, so it cannot fail at the sizes
 * max_batch_size() probes, and the plan stays what the calls use.
 *
 * Grouped shapes (per-gate dropout: each gate's rows on its own masked
 * copy) set the group count on every convolution descriptor before an
 * algorithm is chosen, so the workspace sizes asked for are the grouped
 * convolution's; the filter is [K, C / G, kh, kw].
 *
 * Channels last (backend.h, cl_layout; shapes without groups): x, y, dx and
 * dy are NHWC tensors, which cuDNN's tensor-core kernels read and write as
 * they are, where with NCHW tensors it runs NCHW <-> NHWC transposes around
 * each such kernel. Its filter is then KRSC, [K, kh, kw, C]: the float32
 * [K, C, kh, kw] weights are transposed (and cast) into the workspace for
 * every storage type, float32 too, and the weight gradient comes back the
 * same way, written by cuDNN into the workspace in KRSC and added,
 * transposed, into the float32 dw. The bias and its gradient are our own
 * kernels in both layouts; the gradient sums in the same order in both, so
 * it has the same bits.
 *
 * This file does not allocate device memory: all scratch is in `ws`.
 */
#include <limits.h> /* INT_MAX */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, realloc, free */
#include <string.h> /* strcmp, strlen */

#include "cuda_common.h" /* context, check macros, cl_ld/cl_st, cl_block_sum */
#include "cudnn_algo_cache.h" /* the choices stored per machine (CONVLSTM_CUDNN_ALGO_CACHE) */

/* ---- the cache of algorithm choices ------------------------------------ */

typedef struct conv_entry {
  int N, C, H, W, K; /* N is the images of one cuDNN call (see chunk_images) */
  cl_conv_shape s;    /* the geometry: kernel, dilation, layout (its own N unused) */
  cl_dtype dtype;
  cudnnTensorDescriptor_t x, y; /* [N, C, H, W], [N, K, H, W] in s.layout */
  cudnnFilterDescriptor_t w;    /* [K, C / groups, kh, kw]; NHWC: [K, kh, kw, C] (KRSC) */
  /* one convolution descriptor per direction: each carries the math type
   * that its chosen algorithm was reported with */
  cudnnConvolutionDescriptor_t conv_fwd, conv_data, conv_filter;
  cudnnConvolutionFwdAlgo_t algo_fwd;
  cudnnConvolutionBwdDataAlgo_t algo_data;
  cudnnConvolutionBwdFilterAlgo_t algo_filter;
  size_t ws_fwd, ws_data, ws_filter; /* bytes of cuDNN workspace for each */
  unsigned chosen;                   /* DIR_* bits: the directions chosen so far */
  unsigned top;                      /* DIR_* bits: chose cuDNN's first-ranked algorithm */
  unsigned tuned;                    /* DIR_* bits: timed (CONVLSTM_CUDNN_BENCHMARK) */
} conv_entry;

/* Directions are chosen on first use: a chunk size one direction never
 * runs at (backward data slices half types finer) costs no search. */
enum { DIR_FWD = 1, DIR_DATA = 2, DIR_FILTER = 4 };

struct cl_cudnn_cache {
  conv_entry **e; /* pointers, so an entry stays put when the array grows */
  int n, cap;
  char algo[160]; /* cl_cuda_conv_algo's answer */
  /* CONVLSTM_CUDNN_ALGO_CACHE: the stored choices, read at the first timing
   * (file.note: why none were read, or a save failed), and the machine's
   * part of their keys */
  cl_algo_file file;
  int file_read;
  char device[256];
  int cc, driver, cudnn;
};

static void entry_free(conv_entry *e) {
  if (!e) return;
  if (e->x) cudnnDestroyTensorDescriptor(e->x);
  if (e->y) cudnnDestroyTensorDescriptor(e->y);
  if (e->w) cudnnDestroyFilterDescriptor(e->w);
  if (e->conv_fwd) cudnnDestroyConvolutionDescriptor(e->conv_fwd);
  if (e->conv_data) cudnnDestroyConvolutionDescriptor(e->conv_data);
  if (e->conv_filter) cudnnDestroyConvolutionDescriptor(e->conv_filter);
  free(e);
}

void cl_cudnn_cache_free(struct cl_cudnn_cache *c) {
  if (!c) return;
  for (int i = 0; i < c->n; i++) entry_free(c->e[i]);
  free(c->e);
  cl_algo_file_free(&c->file);
  free(c);
}

static cudnnDataType_t cudnn_type(cl_dtype t) {
  return t == CL_F16 ? CUDNN_DATA_HALF : t == CL_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* ---- choosing an algorithm, the same way for the three directions ------ */

struct fwd_op {
  typedef cudnnConvolutionFwdAlgoPerf_t perf_t;
  typedef cudnnConvolutionFwdAlgo_t algo_t;
  static const char *name() { return "forward"; }
  static bool transform(algo_t a) {
    return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
  }
  static cudnnStatus_t max_count(cudnnHandle_t h, int *n) {
    return cudnnGetConvolutionForwardAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const conv_entry *e,
                                  cudnnConvolutionDescriptor_t cd, int req, int *got,
                                  perf_t *p) {
    return cudnnGetConvolutionForwardAlgorithm_v7(h, e->x, e->w, cd, e->y, req, got, p);
  }
  /* a: x, b: w (storage type), out: y */
  static cudnnStatus_t find_ex(cudnnHandle_t h, const conv_entry *e,
                               cudnnConvolutionDescriptor_t cd, const void *a, const void *b,
                               void *out, int req, int *got, perf_t *p, void *ws, size_t wsb) {
    return cudnnFindConvolutionForwardAlgorithmEx(h, e->x, a, e->w, b, cd, e->y, out, req, got, p,
                                                  ws, wsb);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const conv_entry *e,
                                 cudnnConvolutionDescriptor_t cd, algo_t a, size_t *bytes) {
    return cudnnGetConvolutionForwardWorkspaceSize(h, e->x, e->w, cd, e->y, a, bytes);
  }
};

struct data_op {
  typedef cudnnConvolutionBwdDataAlgoPerf_t perf_t;
  typedef cudnnConvolutionBwdDataAlgo_t algo_t;
  static const char *name() { return "backward data"; }
  static bool transform(algo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
  }
  static cudnnStatus_t max_count(cudnnHandle_t h, int *n) {
    return cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const conv_entry *e,
                                  cudnnConvolutionDescriptor_t cd, int req, int *got,
                                  perf_t *p) {
    return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, e->w, e->y, cd, e->x, req, got, p);
  }
  /* a: w (storage type), b: dy, out: dx (storage type) */
  static cudnnStatus_t find_ex(cudnnHandle_t h, const conv_entry *e,
                               cudnnConvolutionDescriptor_t cd, const void *a, const void *b,
                               void *out, int req, int *got, perf_t *p, void *ws, size_t wsb) {
    return cudnnFindConvolutionBackwardDataAlgorithmEx(h, e->w, a, e->y, b, cd, e->x, out, req,
                                                       got, p, ws, wsb);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const conv_entry *e,
                                 cudnnConvolutionDescriptor_t cd, algo_t a, size_t *bytes) {
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, e->w, e->y, cd, e->x, a, bytes);
  }
};

struct filter_op {
  typedef cudnnConvolutionBwdFilterAlgoPerf_t perf_t;
  typedef cudnnConvolutionBwdFilterAlgo_t algo_t;
  static const char *name() { return "backward filter"; }
  static bool transform(algo_t a) {
    return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
           a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
  }
  static cudnnStatus_t max_count(cudnnHandle_t h, int *n) {
    return cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, n);
  }
  static cudnnStatus_t heuristics(cudnnHandle_t h, const conv_entry *e,
                                  cudnnConvolutionDescriptor_t cd, int req, int *got,
                                  perf_t *p) {
    return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, e->x, e->y, cd, e->w, req, got, p);
  }
  /* a: x, b: dy, out: dw (storage type) */
  static cudnnStatus_t find_ex(cudnnHandle_t h, const conv_entry *e,
                               cudnnConvolutionDescriptor_t cd, const void *a, const void *b,
                               void *out, int req, int *got, perf_t *p, void *ws, size_t wsb) {
    return cudnnFindConvolutionBackwardFilterAlgorithmEx(h, e->x, a, e->y, b, cd, e->w, out, req,
                                                         got, p, ws, wsb);
  }
  static cudnnStatus_t workspace(cudnnHandle_t h, const conv_entry *e,
                                 cudnnConvolutionDescriptor_t cd, algo_t a, size_t *bytes) {
    return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, e->x, e->y, cd, e->w, a, bytes);
  }
};

#define MAX_ALGOS 16

/* Take the candidates in cuDNN's heuristic order (fastest first) and keep
 * the first whose workspace fits under ws_limit; if none fits, the one
 * needing the least. The math type goes onto cd: cuDNN decides
 * tensor-core use from algorithm and math type together. float32 without
 * TF32 is pinned to FMA whatever a candidate says, so that it never rounds
 * its inputs to TF32. With no_transforms (CONVLSTM_CUDNN_NO_FFT=1) the
 * FFT and non-fused Winograd algorithms are passed over while another
 * takes the call. */
template <class Op>
static cl_status choose(cl_backend *be, const conv_entry *e, cudnnConvolutionDescriptor_t cd,
                        typename Op::algo_t *algo, size_t *ws_bytes, int *top) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  cudnnHandle_t h = ctx->cudnn;
  typename Op::perf_t perf[MAX_ALGOS];
  int req = 0, got = 0;
  CL_CUDNN_CHECK(be, Op::max_count(h, &req));
  if (req > MAX_ALGOS) req = MAX_ALGOS;
  if (req < 1) req = 1;
  CL_CUDNN_CHECK(be, Op::heuristics(h, e, cd, req, &got, perf));
  const int pin_fma = e->dtype == CL_F32 && !ctx->allow_tf32;
  int best = -1, first = -1;
  size_t best_ws = 0;
  /* skip 1 (no_transforms) first; 0, every algorithm, where that found none */
  for (int skip = ctx->no_transforms; skip >= 0 && best < 0; skip--) {
    for (int pass = 0; pass < 2 && best < 0; pass++) {
      for (int i = 0; i < got; i++) {
        if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
        if (ctx->deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
        if (skip && Op::transform(perf[i].algo)) continue;
        cudnnMathType_t mt = pin_fma ? CUDNN_FMA_MATH : perf[i].mathType;
        size_t bytes = 0;
        if (cudnnSetConvolutionMathType(cd, mt) != CUDNN_STATUS_SUCCESS ||
            Op::workspace(h, e, cd, perf[i].algo, &bytes) != CUDNN_STATUS_SUCCESS)
          continue;
        if (first < 0) first = i;
        if (bytes < perf[i].memory) bytes = perf[i].memory;
        if (pass == 0 && bytes <= ctx->ws_limit) {
          best = i, best_ws = bytes;
          break;
        }
        if (pass == 1 && (best < 0 || bytes < best_ws)) best = i, best_ws = bytes;
      }
    }
  }
  (void)cudaGetLastError(); /* a failed probe above may leave an error behind */
  if (best < 0) {
    snprintf(be->err, sizeof be->err,
             "cuDNN has no %s algorithm for a %dx%d convolution (dilation %dx%d) of [%d, %d, "
             "%d, %d] -> %d channels (storage type %d%s)",
             Op::name(), e->s.kh, e->s.kw, e->s.dh, e->s.dw, e->N, e->s.C, e->s.H, e->s.W, e->s.K,
             (int)e->s.dtype, e->s.layout == CL_NHWC ? ", channels last" : "");
    return CL_E_UNSUPPORTED;
  }
  CL_CUDNN_CHECK(be, cudnnSetConvolutionMathType(cd, pin_fma ? CUDNN_FMA_MATH : perf[best].mathType));
  *algo = perf[best].algo;
  *ws_bytes = best_ws;
  *top = best == first;
  return CL_OK;
}

/* What the candidates are asked for (choose() then keeps each one's own):
 * tensor cores for the half types; for float32 DEFAULT_MATH, which lets
 * cuDNN 9 use TF32 tensor cores (PyTorch's allow_tf32), or FMA_MATH, which
 * forbids every tensor-core path (strict float32). */
static cudnnMathType_t request_math(cl_backend *be, cl_dtype t) {
  return t != CL_F32                       ? CUDNN_TENSOR_OP_MATH
         : cl_cuda_ctx_of(be)->allow_tf32 ? CUDNN_DEFAULT_MATH
                                          : CUDNN_FMA_MATH;
}

static cl_status entry_init(cl_backend *be, conv_entry *e) {
  const cudnnDataType_t dt = cudnn_type(e->dtype);
  const int ph = cl_conv_pad_h(&e->s), pw = cl_conv_pad_w(&e->s);
  const cudnnMathType_t math = request_math(be, e->dtype);
  /* the dimensions are given as N, C, H, W (K, C, kh, kw) in both formats:
   * NHWC says how they lie in memory, for the filter KRSC */
  const cudnnTensorFormat_t fmt =
      e->s.layout == CL_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  CL_CUDNN_CHECK(be, cudnnCreateTensorDescriptor(&e->x));
  CL_CUDNN_CHECK(be, cudnnCreateTensorDescriptor(&e->y));
  CL_CUDNN_CHECK(be, cudnnCreateFilterDescriptor(&e->w));
  CL_CUDNN_CHECK(be, cudnnSetTensor4dDescriptor(e->x, fmt, dt, e->N, e->C, e->H, e->W));
  CL_CUDNN_CHECK(be, cudnnSetTensor4dDescriptor(e->y, fmt, dt, e->N, e->K, e->H, e->W));
  const int G = cl_conv_groups(&e->s);
  CL_CUDNN_CHECK(be, cudnnSetFilter4dDescriptor(e->w, dt, fmt, e->K, e->C / G, e->s.kh,
                                                e->s.kw));
  cudnnConvolutionDescriptor_t *cds[3] = {&e->conv_fwd, &e->conv_data, &e->conv_filter};
  for (int i = 0; i < 3; i++) {
    CL_CUDNN_CHECK(be, cudnnCreateConvolutionDescriptor(cds[i]));
    /* float accumulation for every storage type (PSEUDO_HALF / BFLOAT16 configs) */
    CL_CUDNN_CHECK(be, cudnnSetConvolution2dDescriptor(*cds[i], ph, pw, 1, 1, e->s.dh, e->s.dw,
                                                       CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CL_CUDNN_CHECK(be, cudnnSetConvolutionGroupCount(*cds[i], G));
    CL_CUDNN_CHECK(be, cudnnSetConvolutionMathType(*cds[i], math));
  }
  return CL_OK;
}

static cl_status entry_choose(cl_backend *be, conv_entry *e, unsigned dir) {
  cl_status st = CL_OK;
  int top = 0;
  if (e->chosen & dir) return CL_OK;
  if (dir == DIR_FWD)
    st = choose<fwd_op>(be, e, e->conv_fwd, &e->algo_fwd, &e->ws_fwd, &top);
  else if (dir == DIR_DATA)
    st = choose<data_op>(be, e, e->conv_data, &e->algo_data, &e->ws_data, &top);
  else
    st = choose<filter_op>(be, e, e->conv_filter, &e->algo_filter, &e->ws_filter, &top);
  if (st == CL_OK) e->chosen |= dir;
  if (st == CL_OK && top) e->top |= dir;
  return st;
}

/* The entry for s with n images per call, made on first use, with direction
 * dir (one DIR_* bit) chosen. */
static cl_status lookup(cl_backend *be, const cl_conv_shape *s, int n, unsigned dir,
                        conv_entry **out) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  *out = NULL;
  if (!ctx->conv) {
    ctx->conv = (struct cl_cudnn_cache *)calloc(1, sizeof *ctx->conv);
    if (!ctx->conv) goto oom;
  }
  {
    struct cl_cudnn_cache *c = ctx->conv;
    for (int i = 0; i < c->n; i++) {
      conv_entry *e = c->e[i];
      if (e->N == n && e->C == s->C && e->H == s->H && e->W == s->W && e->K == s->K &&
          e->s.kh == s->kh && e->s.kw == s->kw && e->s.dh == s->dh && e->s.dw == s->dw &&
          cl_conv_groups(&e->s) == cl_conv_groups(s) && e->dtype == s->dtype &&
          e->s.layout == s->layout) {
        cl_status st = entry_choose(be, e, dir);
        if (st == CL_OK) *out = e;
        return st;
      }
    }
    if (c->n == c->cap) {
      int cap = c->cap ? 2 * c->cap : 16;
      conv_entry **grown = (conv_entry **)realloc(c->e, (size_t)cap * sizeof *grown);
      if (!grown) goto oom;
      c->e = grown;
      c->cap = cap;
    }
    conv_entry *e = (conv_entry *)calloc(1, sizeof *e);
    if (!e) goto oom;
    e->N = n, e->C = s->C, e->H = s->H, e->W = s->W, e->K = s->K;
    e->s = *s; /* the geometry; s.N is the caller's, e->N the entry's */
    e->dtype = s->dtype;
    cl_status st = entry_init(be, e);
    if (st != CL_OK) {
      entry_free(e);
      return st;
    }
    c->e[c->n++] = e;
    /* a failed choice leaves the entry, its descriptors reusable, cached */
    if ((st = entry_choose(be, e, dir)) != CL_OK) return st;
    *out = e;
    return CL_OK;
  }
oom:
  snprintf(be->err, sizeof be->err, "cuda convolution cache: out of host memory");
  return CL_E_OOM;
}

/* ---- shapes, chunks and the workspace layout --------------------------- */

static cl_status check_shape(cl_backend *be, const cl_conv_shape *s) {
  if (!cl_conv_shape_ok(s)) {
    snprintf(be->err, sizeof be->err,
             "cuda convolution: bad shape N=%d C=%d H=%d W=%d K=%d kernel %dx%d dilation %dx%d "
             "groups %d layout %d (odd kernels, dilation >= 1, groups dividing C and K, "
             "channels last without groups)",
             s->N, s->C, s->H, s->W, s->K, s->kh, s->kw, s->dh, s->dw, s->groups,
             (int)s->layout);
    return CL_E_INVALID;
  }
  if (s->dtype != CL_F32 && s->dtype != CL_F16 && s->dtype != CL_BF16)
    return cl_cuda_bad_dtype(be, s->dtype, "cuda convolution");
  const size_t per_image = (size_t)(s->C > s->K ? s->C : s->K) * s->H * s->W;
  if (per_image > (size_t)INT_MAX) {
    snprintf(be->err, sizeof be->err,
             "cuda convolution: one image of %d x %d x %d is more than cuDNN's 2^31 elements",
             s->C > s->K ? s->C : s->K, s->H, s->W);
    return CL_E_UNSUPPORTED;
  }
  return CL_OK;
}

/* cuDNN's legacy descriptors index with int, so a tensor of more than 2^31
 * elements is convolved in chunks of images (as PyTorch splits its batch).
 * Every chunk but the last has this many images. */
static int chunk_images(const cl_conv_shape *s) {
  const size_t per_image = (size_t)(s->C > s->K ? s->C : s->K) * s->H * s->W;
  const size_t fit = (size_t)INT_MAX / per_image;
  return (size_t)s->N < fit ? s->N : (int)fit;
}

/* Backward data with half storage goes through a scratch dx in the storage
 * type, at most ctx->dx_scratch_limit bytes (but one image at least): its
 * chunks are no larger than this. */
static int data_chunk_images(cl_backend *be, const cl_conv_shape *s) {
  const int n0 = chunk_images(s);
  if (s->dtype == CL_F32) return n0;
  const size_t img = (size_t)s->C * s->H * s->W * cl_dtype_size(s->dtype);
  size_t fit = cl_cuda_ctx_of(be)->dx_scratch_limit / img;
  if (fit < 1) fit = 1;
  return fit < (size_t)n0 ? (int)fit : n0;
}

/* Images per cuDNN call in direction dir: the first of n0, n0/2, n0/4, ...
 * (n0: the bounds above) at which cuDNN's first-ranked algorithm fits under
 * the workspace limit, else n0. Why: a batched call over all B*T frames of
 * the input half asks its fast algorithms for workspace that grows with the
 * images; over the limit, choose() fell back to cuDNN's legacy kernels, and
 * on an H100 those made the 2-layer 64x64 step 1.4x (float32) to 3.8x
 * (float16) slower than PyTorch's per-frame calls. Smaller calls keep the
 * fast kernels within the same workspace. Deterministic, so that the plan
 * (cl_cuda_conv_workspace) and the calls agree. */
static cl_status dir_chunk(cl_backend *be, const cl_conv_shape *s, unsigned dir, int *out) {
  const int n0 = dir == DIR_DATA ? data_chunk_images(be, s) : chunk_images(s);
  *out = n0;
  for (int n = n0;; n = (n + 1) / 2) {
    conv_entry *e;
    cl_status st = lookup(be, s, n, dir, &e);
    if (st != CL_OK) return st;
    if (e->top & dir) {
      *out = n;
      return CL_OK;
    }
    if (n == 1) return CL_OK;
  }
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

/* Layout of ws, 256-byte aligned parts:
 *   [weight copy]  half types or channels last: the weights as cuDNN takes
 *                  them (cast to the storage type; NHWC: in KRSC order,
 *                  float32 too), or in backward filter the weight gradient
 *                  of one chunk as cuDNN writes it (storage type, KRSC for
 *                  NHWC), before it is added into the float32 dw
 *   [dx scratch]   backward data with half types only: dx of one chunk
 *   [cuDNN's own]  */
/* Elements of the weight, [K, C / groups, kh, kw]. */
static size_t weight_elems(const cl_conv_shape *s) {
  return (size_t)s->K * (s->C / cl_conv_groups(s)) * cl_conv_taps(s);
}

/* Whether cuDNN's filter (weights, weight gradient) is a copy in ws: not
 * only for float32 NCHW, which is the float32 [K, C, kh, kw] itself. */
static int filter_in_ws(const cl_conv_shape *s) {
  return s->dtype != CL_F32 || s->layout == CL_NHWC;
}

static size_t weight_copy_bytes(const cl_conv_shape *s) {
  if (!filter_in_ws(s)) return 0;
  return align256(weight_elems(s) * cl_dtype_size(s->dtype));
}

static size_t dx_scratch_bytes(const cl_conv_shape *s, int images) {
  if (s->dtype == CL_F32) return 0;
  return align256((size_t)images * s->C * s->H * s->W * cl_dtype_size(s->dtype));
}

/* The most cuDNN workspace direction dir asks for over the chunks of `step`
 * images that cover s->N (all of them `step` but the last). */
static cl_status cudnn_ws(cl_backend *be, const cl_conv_shape *s, int step, unsigned dir,
                          size_t *need) {
  const int sizes[2] = {step, s->N % step};
  *need = 0;
  for (int i = 0; i < 2; i++) {
    if (sizes[i] == 0) continue;
    conv_entry *e;
    cl_status st = lookup(be, s, sizes[i], dir, &e);
    if (st != CL_OK) return st;
    const size_t b = dir == DIR_FWD ? e->ws_fwd : dir == DIR_DATA ? e->ws_data : e->ws_filter;
    if (b > *need) *need = b;
  }
  return CL_OK;
}

/* The workspace of s's calls in direction dir (DIR_*), over its own
 * chunks: the weight copy, for backward data with half types the dx
 * scratch, and cuDNN's part. A failed choice of algorithm is returned with
 * cuDNN's reason in be->err, and fails the plan. */
static cl_status dir_workspace(cl_backend *be, const cl_conv_shape *s, unsigned dir,
                               size_t *bytes) {
  int n;
  size_t need;
  cl_status st;
  if ((st = dir_chunk(be, s, dir, &n)) != CL_OK || (st = cudnn_ws(be, s, n, dir, &need)) != CL_OK)
    return st;
  if (dir == DIR_DATA) need += dx_scratch_bytes(s, n);
  *bytes = weight_copy_bytes(s) + need;
  return CL_OK;
}

cl_status cl_cuda_conv_workspace(cl_backend *be, const cl_conv_shape *s, cl_conv_dir dir,
                                 size_t *bytes) {
  *bytes = 0;
  cl_status st = check_shape(be, s);
  if (st != CL_OK || s->N == 0) return st;
  return dir_workspace(be, s,
                       dir == CL_CONV_FORWARD         ? DIR_FWD
                       : dir == CL_CONV_BACKWARD_DATA ? DIR_DATA
                                                      : DIR_FILTER,
                       bytes);
}

/* ---- CONVLSTM_CUDNN_BENCHMARK: timing at the first call ---------------- */

/* The bytes of cuDNN's own workspace the plan holds for s in direction dir:
 * the direction's conv_workspace less what comes before cuDNN's part (the
 * weight copy; for backward data the dx scratch too). The core's workspace
 * is at least conv_workspace(s, dir) for every call a step runs. */
static cl_status cudnn_room(cl_backend *be, const cl_conv_shape *s, unsigned dir, size_t *room) {
  size_t all = 0, before = weight_copy_bytes(s);
  cl_status st = dir_workspace(be, s, dir, &all);
  if (st != CL_OK) return st;
  if (dir == DIR_DATA) {
    int nd;
    if ((st = dir_chunk(be, s, DIR_DATA, &nd)) != CL_OK) return st;
    before += dx_scratch_bytes(s, nd);
  }
  *room = all > before ? all - before : 0;
  return CL_OK;
}

/* ---- CONVLSTM_CUDNN_ALGO_CACHE: choices stored per machine ------------- */

/* The stored choices, read once (a file missing, foreign or corrupt gives
 * none, the reason in file.note: the shapes are then timed as without it). */
static cl_algo_file *stored_file(cl_backend *be) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  struct cl_cudnn_cache *c = ctx->conv;
  if (!c->file_read) {
    c->file_read = 1;
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, ctx->device) == cudaSuccess) {
      snprintf(c->device, sizeof c->device, "%s", prop.name);
      c->cc = prop.major * 10 + prop.minor;
    } else {
      snprintf(c->device, sizeof c->device, "device%d", ctx->device);
    }
    if (cudaDriverGetVersion(&c->driver) != cudaSuccess) c->driver = 0;
    (void)cudaGetLastError();
    c->cudnn = (int)cudnnGetVersion();
    cl_algo_file_load(&c->file, ctx->algo_cache);
  }
  return &c->file;
}

/* The key of e's calls in direction dir (cudnn_algo_cache.h): this
 * machine, the storage type and layout ("f16", "f16.nhwc": the two run
 * different kernels), TF32 and determinism, the call's shape. */
static void entry_key(cl_backend *be, const conv_entry *e, unsigned dir, char *key) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  (void)stored_file(be); /* the machine's part, read with the file */
  const struct cl_cudnn_cache *c = ctx->conv;
  const int shape[10] = {e->N,    e->C,    e->H,    e->W,    e->K,
                         e->s.kh, e->s.kw, e->s.dh, e->s.dw, cl_conv_groups(&e->s)};
  char dt[16];
  snprintf(dt, sizeof dt, "%s%s",
           e->dtype == CL_F16 ? "f16" : e->dtype == CL_BF16 ? "bf16" : "f32",
           e->s.layout == CL_NHWC ? ".nhwc" : "");
  cl_algo_key(key, CL_ALGO_KEY_LEN, c->device, c->cc, c->driver, c->cudnn, dt,
              dir == DIR_FWD ? 0 : dir == DIR_DATA ? 1 : 2, ctx->allow_tf32,
              ctx->deterministic + 2 * ctx->no_transforms, shape);
}

/* The stored choice for key, where this cuDNN still takes it (its
 * workspace query succeeds with the stored math type) within `room`, the
 * plan's bytes: then 1, the choice on cd and in *algo, *ws_bytes. Else 0
 * and cd as it was: the caller times the candidates. */
template <class Op>
static int use_stored(cl_backend *be, const conv_entry *e, cudnnConvolutionDescriptor_t cd,
                      const char *key, size_t room, typename Op::algo_t *algo,
                      size_t *ws_bytes) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const cl_algo_rec *r = cl_algo_file_find(stored_file(be), key);
  if (!r) return 0;
  cudnnMathType_t kept;
  if (cudnnGetConvolutionMathType(cd, &kept) != CUDNN_STATUS_SUCCESS) return 0;
  const int pin_fma = e->dtype == CL_F32 && !ctx->allow_tf32;
  const cudnnMathType_t mt = pin_fma ? CUDNN_FMA_MATH : (cudnnMathType_t)r->math;
  const typename Op::algo_t a = (typename Op::algo_t)r->algo;
  size_t need = 0;
  if (cudnnSetConvolutionMathType(cd, mt) == CUDNN_STATUS_SUCCESS &&
      Op::workspace(ctx->cudnn, e, cd, a, &need) == CUDNN_STATUS_SUCCESS &&
      (need = need > r->workspace ? need : (size_t)r->workspace) <= room) {
    /* (the timing's own figure where it was larger: perf.memory) */
    *algo = a;
    *ws_bytes = need;
    return 1;
  }
  (void)cudaGetLastError();
  (void)cudnnSetConvolutionMathType(cd, kept);
  return 0;
}

/* A timed choice into the stored file (a failed save leaves its reason in
 * file.note and costs nothing else: the next process times again). */
static void store_choice(cl_backend *be, const char *key, int algo, cudnnConvolutionDescriptor_t cd,
                         size_t ws_bytes, float ms) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  cl_algo_file *f = stored_file(be);
  cudnnMathType_t mt = CUDNN_DEFAULT_MATH;
  if (f->foreign || cudnnGetConvolutionMathType(cd, &mt) != CUDNN_STATUS_SUCCESS) return;
  if (cl_algo_file_put(f, key, algo, (int)mt, (unsigned long long)ws_bytes, ms >= 0 ? ms : 0))
    (void)cl_algo_file_save(f, ctx->algo_cache);
}

/* Time e's candidates for one direction on the call's own buffers (a, b:
 * its inputs in Op's order) within `room` bytes at cws, and keep the fastest
 * that fits; once per entry and direction. cuDNN overwrites the output it
 * times into: that is the call's output where the call overwrites it anyway
 * (clobber_ok), else out_bytes at the front of cws, the rest being the
 * timing's workspace. Where that does not fit, or the timing fails, the
 * heuristic choice stays: it fits the plan by construction. */
template <class Op>
static cl_status tune(cl_backend *be, conv_entry *e, cudnnConvolutionDescriptor_t cd,
                      unsigned dir, const void *a, const void *b, void *out, size_t out_bytes,
                      int clobber_ok, char *cws, size_t room, typename Op::algo_t *algo,
                      size_t *ws_bytes) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  e->tuned |= dir;
  char key[CL_ALGO_KEY_LEN] = "";
  if (ctx->algo_cache) { /* stored by an earlier process: no timing */
    entry_key(be, e, dir, key);
    if (use_stored<Op>(be, e, cd, key, room, algo, ws_bytes)) return CL_OK;
  }
  if (!clobber_ok) {
    const size_t o = align256(out_bytes);
    if (!cws || o > room) return CL_OK;
    out = cws, cws += o, room -= o;
  }
  cudnnMathType_t kept;
  CL_CUDNN_CHECK(be, cudnnGetConvolutionMathType(cd, &kept));
  typename Op::perf_t perf[MAX_ALGOS];
  int req = 0, got = 0, best = -1;
  CL_CUDNN_CHECK(be, Op::max_count(ctx->cudnn, &req));
  if (req > MAX_ALGOS) req = MAX_ALGOS;
  if (req < 1) req = 1;
  CL_CUDNN_CHECK(be, cudnnSetConvolutionMathType(cd, request_math(be, e->dtype)));
  const int pin_fma = e->dtype == CL_F32 && !ctx->allow_tf32;
  size_t need = 0;
  if (Op::find_ex(ctx->cudnn, e, cd, a, b, out, req, &got, perf, room ? cws : NULL, room) ==
      CUDNN_STATUS_SUCCESS) {
    for (int i = 0; i < got && best < 0; i++) { /* fastest first */
      if (perf[i].status != CUDNN_STATUS_SUCCESS || perf[i].memory > room) continue;
      if (ctx->deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
      if (ctx->no_transforms && Op::transform(perf[i].algo)) continue;
      if (cudnnSetConvolutionMathType(cd, pin_fma ? CUDNN_FMA_MATH : perf[i].mathType) !=
              CUDNN_STATUS_SUCCESS ||
          Op::workspace(ctx->cudnn, e, cd, perf[i].algo, &need) != CUDNN_STATUS_SUCCESS)
        continue;
      if (need < perf[i].memory) need = perf[i].memory;
      if (need <= room) best = i;
    }
  }
  (void)cudaGetLastError(); /* a candidate that failed may leave an error behind */
  if (best < 0) {
    CL_CUDNN_CHECK(be, cudnnSetConvolutionMathType(cd, kept));
    return CL_OK;
  }
  *algo = perf[best].algo;
  *ws_bytes = need;
  if (ctx->algo_cache) store_choice(be, key, (int)perf[best].algo, cd, need, perf[best].time);
  return CL_OK;
}

/* Whether the first call of an entry and direction times (or reads the
 * stored choice): CONVLSTM_CUDNN_BENCHMARK=1 or CONVLSTM_CUDNN_ALGO_CACHE. */
static int measures(cl_backend *be) {
  const cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  return ctx->benchmark || ctx->algo_cache != NULL;
}

/* ---- which algorithm runs (the conv_algo slot) -------------------------- */

static const char *algo_name(const conv_entry *e, unsigned dir) {
  static const char *fwd[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT",
                              "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static const char *data[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD",
                               "WINOGRAD_NONFUSED"};
  static const char *filter[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
                                 "WINOGRAD_NONFUSED", "FFT_TILING"};
  const int a = dir == DIR_FWD ? (int)e->algo_fwd : dir == DIR_DATA ? (int)e->algo_data
                                                                    : (int)e->algo_filter;
  const char **names = dir == DIR_FWD ? fwd : dir == DIR_DATA ? data : filter;
  const int n = dir == DIR_FWD ? 8 : dir == DIR_DATA ? 6 : 7;
  return a >= 0 && a < n ? names[a] : "unknown";
}

/* "FFT_TILING", "IMPLICIT_GEMM tf32", "ALGO_1/ALGO_0": the algorithm of
 * each chunk size of s in direction dir (0, 1, 2), as cached; float32 on a
 * math type other than FMA may use TF32 tensor cores. */
const char *cl_cuda_conv_algo(cl_backend *be, const cl_conv_shape *s, int dir) {
  static const unsigned dirs[3] = {DIR_FWD, DIR_DATA, DIR_FILTER};
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  int n0;
  if (dir < 0 || dir > 2 || check_shape(be, s) != CL_OK || s->N == 0 ||
      dir_chunk(be, s, dirs[dir], &n0) != CL_OK)
    return "";
  char *out = ctx->conv->algo;
  out[0] = '\0';
  const int sizes[2] = {n0, s->N % n0};
  for (int i = 0; i < 2; i++) {
    conv_entry *e;
    if (sizes[i] == 0 || lookup(be, s, sizes[i], dirs[dir], &e) != CL_OK) continue;
    cudnnConvolutionDescriptor_t cd =
        dir == 0 ? e->conv_fwd : dir == 1 ? e->conv_data : e->conv_filter;
    cudnnMathType_t mt = CUDNN_FMA_MATH;
    (void)cudnnGetConvolutionMathType(cd, &mt);
    char one[64];
    snprintf(one, sizeof one, "%s%s", algo_name(e, dirs[dir]),
             s->dtype == CL_F32 && ctx->allow_tf32 && mt != CUDNN_FMA_MATH ? " tf32" : "");
    if (out[0] && strcmp(out, one) == 0) break; /* the last chunk runs the same */
    const size_t used = strlen(out);
    snprintf(out + used, sizeof ctx->conv->algo - used, "%s%s", used ? "/" : "", one);
  }
  return out;
}

static cl_status missing_ws(cl_backend *be, const char *what, size_t bytes) {
  snprintf(be->err, sizeof be->err,
           "cuda convolution %s: needs %zu bytes of workspace but none was given "
           "(conv_workspace was not planned for this shape)",
           what, bytes);
  return CL_E_INTERNAL;
}

/* ---- small kernels: the bias, widening, the filter's layout ------------- */

/* cuDNN's bias calls want bias and y of one type; with half storage the
 * bias stays float and is added (and reduced) here, in float.
 *
 * y[plane, p] += bias[plane % K] over the N*K planes of P pixels: block
 * rows walk the planes, each block's threads the pixels, so a plane's
 * channel is one division per plane, not one per element. */
template <typename T>
__global__ void add_bias_kernel(T *y, const float *bias, size_t planes, int K, size_t P) {
  for (size_t plane = blockIdx.y; plane < planes; plane += gridDim.y) {
    const float b = bias[plane % (size_t)K];
    T *row = y + plane * P;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < P;
         p += (size_t)gridDim.x * blockDim.x)
      row[p] = cl_st<T>(cl_ld(row[p]) + b);
  }
}

/* Channels last: y[i] += bias[i % K] over the N*P*K elements. Each thread
 * takes the modulo once and then steps its channel along with i: a 64-bit
 * modulo per element would cost more than the element's memory traffic. */
template <typename T>
__global__ void add_bias_nhwc_kernel(T *y, const float *bias, size_t n, size_t K) {
  const size_t stride = (size_t)gridDim.x * blockDim.x, kstep = stride % K;
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x, k = i % K;
  for (; i < n; i += stride) {
    y[i] = cl_st<T>(cl_ld(y[i]) + bias[k]);
    k += kstep; /* both below K */
    if (k >= K) k -= K;
  }
}

/* dbias[k] += sum over n, p of dy[n, k, p], the same bits run after run (no
 * atomics): block (k, j) sums images [j*per_block, (j+1)*per_block), each
 * thread the pixels t, t + blockDim.x, ... of each image in turn, then
 * cl_block_sum's fixed tree. With one block per channel it adds into dbias
 * itself; else it leaves its sum in part[j K + k] and bias_grad_finish adds
 * a channel's partials in the order of j. Channels last, dy[n, p, k]: the
 * pixels of a channel lie K apart, summed in the same order (the same bits
 * as NCHW). */
template <typename T>
__global__ void bias_grad_kernel(const T *dy, float *dbias, double *part, int N, int K, size_t P,
                                 int per_block, cl_layout layout) {
  const int k = blockIdx.x;
  const int n0 = blockIdx.y * per_block;
  const int n1 = n0 + per_block < N ? n0 + per_block : N;
  const size_t step = layout == CL_NHWC ? (size_t)K : 1; /* from a pixel to the next */
  float sum = 0.0f;
  for (int n = n0; n < n1; n++) {
    const T *row = dy + cl_act_at(layout, (size_t)K, P, (size_t)n, (size_t)k, 0);
    for (size_t p = threadIdx.x; p < P; p += blockDim.x) sum += cl_ld(row[p * step]);
  }
  sum = cl_block_sum(sum);
  if (threadIdx.x != 0) return;
  if (gridDim.y == 1)
    dbias[k] += sum;
  else
    part[(size_t)blockIdx.y * K + k] = sum;
}

__global__ void bias_grad_finish_kernel(const double *part, float *dbias, int K, int ny) {
  CL_CUDA_FOR(k, (size_t)K) {
    double s = 0.0;
    for (int j = 0; j < ny; j++) s += part[(size_t)j * K + k];
    dbias[k] += (float)s;
  }
}

/* Channels last, cuDNN's filter is KRSC: the float32 [K, C, kh, kw] weights
 * w into out [K, kh, kw, C] in the storage type, t = r kw + s of the taps:
 * out[(k taps + t) C + c] = w[(k C + c) taps + t]. */
template <typename T>
__global__ void krsc_from_kcrs_kernel(const float *w, T *out, size_t C, size_t taps, size_t n) {
  CL_CUDA_FOR(i, n) {
    const size_t kt = i / C, c = i - kt * C, k = kt / taps, t = kt - k * taps;
    out[i] = cl_st<T>(w[(k * C + c) * taps + t]);
  }
}

/* And back: dw [K, C, kh, kw] += g [K, kh, kw, C] (cuDNN's KRSC weight
 * gradient) widened to float. */
template <typename T>
__global__ void kcrs_add_krsc_kernel(float *dw, const T *g, size_t C, size_t taps, size_t n) {
  CL_CUDA_FOR(i, n) {
    const size_t kc = i / taps, t = i - kc * taps, k = kc / C, c = kc - k * C;
    dw[i] += cl_ld(g[(k * taps + t) * C + c]);
  }
}

/* dst (+)= src widened to float; accumulate 0 does not read dst. */
template <typename T>
__global__ void widen_kernel(float *dst, const T *src, size_t n, int accumulate) {
  if (accumulate) {
    CL_CUDA_FOR(i, n) dst[i] += cl_ld(src[i]);
  } else {
    CL_CUDA_FOR(i, n) dst[i] = cl_ld(src[i]);
  }
}

template <typename T>
static cl_status add_bias(cl_backend *be, const cl_conv_shape *s, void *y, const float *bias) {
  const size_t P = (size_t)s->H * s->W, planes = (size_t)s->N * s->K;
  if (planes == 0) return CL_OK;
  cudaStream_t stream = cl_cuda_ctx_of(be)->stream;
  if (s->layout == CL_NHWC) {
    const size_t n = planes * P;
    add_bias_nhwc_kernel<T><<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, stream>>>((T *)y, bias, n,
                                                                               (size_t)s->K);
    CL_CUDA_LAUNCH_CHECK(be);
    return CL_OK;
  }
  const size_t bx = (P + CL_CUDA_THREADS - 1) / CL_CUDA_THREADS;
  dim3 grid((unsigned)(bx < 64 ? bx : 64), (unsigned)(planes < 65535 ? planes : 65535));
  add_bias_kernel<T><<<grid, CL_CUDA_THREADS, 0, stream>>>((T *)y, bias, planes, s->K, P);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* Images split over up to 64 block rows (enough blocks to fill the GPU when
 * K is small), as many as the scratch's partials hold (d_partials: the
 * stream runs its users one after another, and none keeps them across a
 * call); one row, no partials, when K alone fills them. */
template <typename T>
static cl_status bias_grad(cl_backend *be, const cl_conv_shape *s, const void *dy, float *dbias) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const size_t P = (size_t)s->H * s->W;
  int ny = s->N < 64 ? s->N : 64;
  const int fit = ctx->d_partials ? CL_CUDA_MAX_PARTIALS / s->K : 1;
  if (ny > fit) ny = fit;
  if (ny < 1) ny = 1;
  const int per_block = (s->N + ny - 1) / ny;
  ny = (s->N + per_block - 1) / per_block;
  dim3 grid((unsigned)s->K, (unsigned)ny);
  bias_grad_kernel<T><<<grid, CL_CUDA_THREADS, 0, ctx->stream>>>(
      (const T *)dy, dbias, ctx->d_partials, s->N, s->K, P, per_block, s->layout);
  CL_CUDA_LAUNCH_CHECK(be);
  if (ny > 1) {
    bias_grad_finish_kernel<<<cl_cuda_blocks((size_t)s->K), CL_CUDA_THREADS, 0, ctx->stream>>>(
        ctx->d_partials, dbias, s->K, ny);
    CL_CUDA_LAUNCH_CHECK(be);
  }
  return CL_OK;
}

/* dst (+)= src, src n elements of the (half) storage type t. */
static cl_status widen(cl_backend *be, cl_dtype t, float *dst, const void *src, size_t n,
                       int accumulate) {
  if (n == 0) return CL_OK;
  cudaStream_t st = cl_cuda_ctx_of(be)->stream;
  if (t == CL_F16)
    widen_kernel<__half><<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, st>>>(
        dst, (const __half *)src, n, accumulate);
  else if (t == CL_BF16)
    widen_kernel<__nv_bfloat16><<<cl_cuda_blocks(n), CL_CUDA_THREADS, 0, st>>>(
        dst, (const __nv_bfloat16 *)src, n, accumulate);
  else
    return cl_cuda_bad_dtype(be, t, "cuda convolution (widen)");
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* The float32 weights w into out as cuDNN's KRSC filter in s's storage type. */
static cl_status weights_krsc(cl_backend *be, const cl_conv_shape *s, const float *w, void *out) {
  const size_t n = weight_elems(s), C = (size_t)(s->C / cl_conv_groups(s));
  const size_t taps = (size_t)cl_conv_taps(s);
  const unsigned b = cl_cuda_blocks(n);
  cudaStream_t st = cl_cuda_ctx_of(be)->stream;
  if (s->dtype == CL_F32)
    krsc_from_kcrs_kernel<float><<<b, CL_CUDA_THREADS, 0, st>>>(w, (float *)out, C, taps, n);
  else if (s->dtype == CL_F16)
    krsc_from_kcrs_kernel<__half><<<b, CL_CUDA_THREADS, 0, st>>>(w, (__half *)out, C, taps, n);
  else
    krsc_from_kcrs_kernel<__nv_bfloat16><<<b, CL_CUDA_THREADS, 0, st>>>(
        w, (__nv_bfloat16 *)out, C, taps, n);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* dw += the weight gradient cuDNN left in the weight copy of ws (storage
 * type; channels last in KRSC order). */
static cl_status dw_from_ws(cl_backend *be, const cl_conv_shape *s, float *dw, const void *ws) {
  const size_t n = weight_elems(s);
  if (s->layout != CL_NHWC) return widen(be, s->dtype, dw, ws, n, 1);
  const size_t C = (size_t)(s->C / cl_conv_groups(s)), taps = (size_t)cl_conv_taps(s);
  const unsigned b = cl_cuda_blocks(n);
  cudaStream_t st = cl_cuda_ctx_of(be)->stream;
  if (s->dtype == CL_F32)
    kcrs_add_krsc_kernel<float><<<b, CL_CUDA_THREADS, 0, st>>>(dw, (const float *)ws, C, taps, n);
  else if (s->dtype == CL_F16)
    kcrs_add_krsc_kernel<__half><<<b, CL_CUDA_THREADS, 0, st>>>(dw, (const __half *)ws, C, taps,
                                                                 n);
  else
    kcrs_add_krsc_kernel<__nv_bfloat16><<<b, CL_CUDA_THREADS, 0, st>>>(
        dw, (const __nv_bfloat16 *)ws, C, taps, n);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* Weights as cuDNN takes them: w itself for float32 NCHW, else a copy into
 * ws, cast to the storage type (channels last: transposed to KRSC). */
static cl_status weights_for(cl_backend *be, const cl_conv_shape *s, const float *w, void *ws,
                             const void **wk) {
  *wk = w;
  if (!filter_in_ws(s)) return CL_OK;
  if (!ws) return missing_ws(be, "weights", weight_copy_bytes(s));
  *wk = ws;
  if (s->layout == CL_NHWC) return weights_krsc(be, s, w, ws);
  return cl_cuda_cast_from_f32(be, w, ws, weight_elems(s), s->dtype);
}

/* ---- the slots --------------------------------------------------------- */

cl_status cl_cuda_conv_forward(cl_backend *be, const cl_conv_shape *s, const void *x,
                               const float *w, const float *bias, void *y, int accumulate,
                               void *ws) {
  cl_status st = check_shape(be, s);
  if (st != CL_OK || s->N == 0) return st;
  cudnnHandle_t h = cl_cuda_ctx_of(be)->cudnn;
  const size_t es = cl_dtype_size(s->dtype);
  const size_t x_img = (size_t)s->C * s->H * s->W * es, y_img = (size_t)s->K * s->H * s->W * es;
  const void *wk;
  if ((st = weights_for(be, s, w, ws, &wk)) != CL_OK) return st;
  char *cws = ws ? (char *)ws + weight_copy_bytes(s) : NULL;
  const float one = 1.0f, beta = accumulate ? 1.0f : 0.0f; /* beta 0: y is not read */
  int n0;
  if ((st = dir_chunk(be, s, DIR_FWD, &n0)) != CL_OK) return st;
  for (int n = 0; n < s->N; n += n0) {
    const int nb = s->N - n < n0 ? s->N - n : n0;
    const char *xp = (const char *)x + (size_t)n * x_img;
    char *yp = (char *)y + (size_t)n * y_img;
    conv_entry *e;
    if ((st = lookup(be, s, nb, DIR_FWD, &e)) != CL_OK) return st;
    if (measures(be) && !(e->tuned & DIR_FWD)) {
      size_t room;
      if ((st = cudnn_room(be, s, DIR_FWD, &room)) != CL_OK ||
          (st = tune<fwd_op>(be, e, e->conv_fwd, DIR_FWD, xp, wk, yp, nb * y_img, !accumulate,
                             cws, room, &e->algo_fwd, &e->ws_fwd)) != CL_OK)
        return st;
    }
    if (e->ws_fwd > 0 && !cws) return missing_ws(be, "forward", e->ws_fwd);
    CL_CUDNN_CHECK(be, cudnnConvolutionForward(h, &one, e->x, xp, e->w, wk, e->conv_fwd,
                                               e->algo_fwd, cws, e->ws_fwd, &beta, e->y, yp));
  }
  /* our own kernel, not cudnnAddTensor: y may be a slice aligned to one
   * element (see cl_cuda_conv_backward_filter) */
  if (bias && s->dtype == CL_F32) return add_bias<float>(be, s, y, bias);
  if (bias && s->dtype == CL_F16) return add_bias<__half>(be, s, y, bias);
  if (bias && s->dtype == CL_BF16) return add_bias<__nv_bfloat16>(be, s, y, bias);
  return CL_OK;
}

/* dx is float32 for every storage type. float32: cuDNN writes or adds into
 * dx itself (beta). Half types: each chunk of images goes into the dx
 * scratch in the storage type (cuDNN has no mixed-type configuration, and
 * converting dy to float32 instead would lose the tensor cores and need
 * twice the scratch), then is widened into dx. */
cl_status cl_cuda_conv_backward_data(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                     const float *w, float *dx, int accumulate, void *ws) {
  cl_status st = check_shape(be, s);
  if (st != CL_OK || s->N == 0) return st;
  cudnnHandle_t h = cl_cuda_ctx_of(be)->cudnn;
  const int narrow = s->dtype != CL_F32;
  const size_t es = cl_dtype_size(s->dtype);
  const size_t x_elems = (size_t)s->C * s->H * s->W, y_img = (size_t)s->K * s->H * s->W * es;
  int nd;
  if ((st = dir_chunk(be, s, DIR_DATA, &nd)) != CL_OK) return st;
  const void *wk;
  if ((st = weights_for(be, s, w, ws, &wk)) != CL_OK) return st;
  char *scratch = narrow ? (char *)ws + weight_copy_bytes(s) : NULL;
  char *cws = ws ? (char *)ws + weight_copy_bytes(s) + dx_scratch_bytes(s, nd) : NULL;
  const float one = 1.0f, zero = 0.0f, beta = accumulate ? 1.0f : 0.0f;
  for (int n = 0; n < s->N; n += nd) {
    const int nb = s->N - n < nd ? s->N - n : nd;
    const char *dyp = (const char *)dy + (size_t)n * y_img;
    float *dxp = dx + (size_t)n * x_elems;
    void *out = narrow ? (void *)scratch : (void *)dxp;
    conv_entry *e;
    if ((st = lookup(be, s, nb, DIR_DATA, &e)) != CL_OK) return st;
    if (measures(be) && !(e->tuned & DIR_DATA)) {
      size_t room;
      if ((st = cudnn_room(be, s, DIR_DATA, &room)) != CL_OK ||
          (st = tune<data_op>(be, e, e->conv_data, DIR_DATA, wk, dyp, out,
                              (size_t)nb * x_elems * sizeof(float), narrow || !accumulate, cws,
                              room, &e->algo_data, &e->ws_data)) != CL_OK)
        return st;
    }
    if (e->ws_data > 0 && !cws) return missing_ws(be, "backward data", e->ws_data);
    CL_CUDNN_CHECK(be, cudnnConvolutionBackwardData(h, &one, e->w, wk, e->y, dyp, e->conv_data,
                                                    e->algo_data, cws, e->ws_data,
                                                    narrow ? &zero : &beta, e->x, out));
    if (narrow) {
      st = widen(be, s->dtype, dxp, scratch, (size_t)nb * x_elems, accumulate);
      if (st != CL_OK) return st;
    }
  }
  return CL_OK;
}

/* float32 NCHW: cuDNN accumulates into dw itself (beta 1). Half types: cuDNN
 * writes each chunk's weight gradient in the storage type into ws (it has no
 * mixed-type configuration), and it is added to the float dw here; so is
 * channels last's for every storage type, it being KRSC (dw_from_ws adds it
 * transposed back). The bias gradient is always our own reduction in float:
 * cudnnConvolutionBackwardBias reads dy in 8-byte words and faults
 * (cudaErrorMisalignedAddress, found on an H100) on the core's per-step
 * slices, which are aligned to one element. */
cl_status cl_cuda_conv_backward_filter(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                       const void *x, float *dw, float *dbias, void *ws) {
  cl_status st = check_shape(be, s);
  if (st != CL_OK || s->N == 0) return st;
  cudnnHandle_t h = cl_cuda_ctx_of(be)->cudnn;
  const size_t es = cl_dtype_size(s->dtype);
  const size_t x_img = (size_t)s->C * s->H * s->W * es, y_img = (size_t)s->K * s->H * s->W * es;
  const size_t nw = weight_elems(s);
  const int staged = filter_in_ws(s); /* cuDNN's dw into ws, then into dw by us */
  if (staged && !ws) return missing_ws(be, "weight gradient", weight_copy_bytes(s));
  void *dwk = staged ? ws : (void *)dw;
  char *cws = ws ? (char *)ws + weight_copy_bytes(s) : NULL;
  const float one = 1.0f, zero = 0.0f;
  int n0;
  if ((st = dir_chunk(be, s, DIR_FILTER, &n0)) != CL_OK) return st;
  for (int n = 0; n < s->N; n += n0) {
    const int nb = s->N - n < n0 ? s->N - n : n0;
    const char *xp = (const char *)x + (size_t)n * x_img;
    const char *dyp = (const char *)dy + (size_t)n * y_img;
    conv_entry *e;
    if ((st = lookup(be, s, nb, DIR_FILTER, &e)) != CL_OK) return st;
    if (measures(be) && !(e->tuned & DIR_FILTER)) {
      size_t room; /* float32 NCHW accumulates into dw: it is timed into the workspace */
      if ((st = cudnn_room(be, s, DIR_FILTER, &room)) != CL_OK ||
          (st = tune<filter_op>(be, e, e->conv_filter, DIR_FILTER, xp, dyp, dwk, nw * es, staged,
                                cws, room, &e->algo_filter, &e->ws_filter)) != CL_OK)
        return st;
    }
    if (e->ws_filter > 0 && !cws) return missing_ws(be, "backward filter", e->ws_filter);
    CL_CUDNN_CHECK(be, cudnnConvolutionBackwardFilter(h, &one, e->x, xp, e->y, dyp,
                                                      e->conv_filter, e->algo_filter, cws,
                                                      e->ws_filter, staged ? &zero : &one, e->w,
                                                      dwk));
    if (staged && (st = dw_from_ws(be, s, dw, ws)) != CL_OK) return st;
  }
  if (dbias && s->dtype == CL_F32) return bias_grad<float>(be, s, dy, dbias);
  if (dbias && s->dtype == CL_F16) return bias_grad<__half>(be, s, dy, dbias);
  if (dbias && s->dtype == CL_BF16) return bias_grad<__nv_bfloat16>(be, s, dy, dbias);
  return CL_OK;
}
