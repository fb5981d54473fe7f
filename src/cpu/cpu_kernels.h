/*
 * cpu/cpu_kernels.h -- what the CPU backend's kernel files share: the
 * backend's private context, the prototypes of its slots (generated from
 * core/backend.h's list) and the helpers the kernels share.
 *
 * Not part of the backend interface (core/backend.h is); nothing outside
 * src/cpu/ and its unit tests includes this header.
 */
#ifndef CONVLSTM_CPU_KERNELS_H
#define CONVLSTM_CPU_KERNELS_H

#include "../core/backend.h" /* cl_backend, shapes, hyperparameters */
#include "cpu_bf16.h"        /* bfloat16 products */
#include "cpu_gemm.h"        /* cl_cpu_gemm_kind */
#include "../host/threads.h" /* cl_cpu_threads: the size of every OpenMP team */

/* What a Winograd call left at the start of its workspace: the filter
 * transform of w for (dir, form, K, C), in slivers of P output channels,
 * at ws; ws NULL: nothing known. */
typedef struct cl_cpu_wino_u {
  const void *ws, *form;
  const float *w;
  int dir, K, C, P;
} cl_cpu_wino_u;

/* be->context of a CPU backend. */
typedef struct cl_cpu_ctx {
  cl_cpu_gemm_kind gemm; /* chosen once in cl_backend_cpu_create */
  int conv_path;         /* tests and benchmarks: 0 auto, 1 im2col + GEMM, 2 direct */
  int conv_algo;         /* tests: 0 conv_algo_env, else as it (1 gemm, 2 winograd, ...) */
  int conv_algo_env;     /* CONVLSTM_CONV_ALGO when created: 4 the rule (unset: the
                            default), 1 gemm, 0 auto (timed per shape), 2 winograd,
                            3 winograd4, 5 winograd6 */
  int wino_generic;      /* tests: Winograd's transforms on wino_2d's loop, not the
                            unrolled kernels of the default forms */
  /* What the last convolution left at the start of its workspace (set by
   * cpu_winograd.c; every convolution takes and clears it first with
   * cl_cpu_wino_claim), so that a call with same_w reuses a filter
   * transform only when no other convolution ran between. */
  cl_cpu_wino_u wino_u;
} cl_cpu_ctx;

static inline cl_cpu_gemm_kind cl_cpu_gemm_of(const cl_backend *be) {
  return ((const cl_cpu_ctx *)be->context)->gemm;
}

/* The instruction set the vector kernels of a backend use: its GEMM kind,
 * or the best internal one when the GEMM is BLAS. */
static inline cl_cpu_gemm_kind cl_cpu_isa_of(const cl_backend *be) {
  return cl_cpu_gemm_internal_of(cl_cpu_gemm_of(be));
}

/* Writes a message into be->err and returns st. */
cl_status cl_cpu_fail(cl_backend *be, cl_status st, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* cpu_half.c: dtype storage <-> float32. load: dst[i] = src[off + i];
 * store: dst[off + i] = src[i] (+ dst[off + i] when accumulating), rounded
 * to nearest even once. */
void cl_cpu_load(cl_dtype t, const void *src, size_t off, float *dst, size_t n);
/* The same, src's elements `stride` apart: dst[i] = src[off + i stride]
 * (a channel of channels-last activations). */
void cl_cpu_load_stride(cl_dtype t, const void *src, size_t off, size_t stride, float *dst,
                        size_t n);
/* rows runs of n: dst[r ds + i] = src[off + r ss + i] (an image's rows into
 * a padded buffer, or one row of several channels), the dtype asked once. */
void cl_cpu_load_rows(cl_dtype t, const void *src, size_t off, size_t ss, float *dst, size_t ds,
                      size_t n, size_t rows);
void cl_cpu_store(cl_dtype t, const float *src, void *dst, size_t off, size_t n, int accumulate);

/* cpu_layout.c: dst (layout `to`) = src (the other layout), N images of C
 * channels and P pixels of es bytes each (backend.h: cl_layout). */
void cl_cpu_relayout(void *dst, cl_layout to, const void *src, size_t N, size_t C, size_t P,
                     size_t es);

/* The slots, cl_cpu_<slot> each, from core/backend.h's one list: where
 * they live, by the list's groups -- memory in cpu_backend.c (gather_rows in
 * cpu_gather.c), convolution cpu_conv.c, the cell cpu_cell.c (peepholes
 * cpu_peephole.c), losses cpu_loss.c, optimizers cpu_optim.c (sum_squares
 * cpu_clip.c), the step's end cpu_step.c, dropout cpu_dropout.c, reports
 * cpu_backend.c. The optional slots the CPU leaves to the core's defaults
 * (cpu_backend.c's table says which) are declared and never defined. */
#define CL_CPU_SLOT_PROTO_(step, opt, ret, name, params, args) ret cl_cpu_##name params;
CL_BACKEND_SLOTS(CL_CPU_SLOT_PROTO_)
#undef CL_CPU_SLOT_PROTO_

/* cpu_sum.c: thread tid of a team of at most n_threads (cl_cpu_threads)
 * runs fn(arg, lo, hi, tid) on its block [n tid / team, n (tid+1) / team).
 * Returns the team size: smaller than asked inside an enclosing parallel
 * region or in a forked child (a caller whose workspace was planned for
 * n_threads slices uses the first `team` of them). */
typedef void (*cl_cpu_block_fn)(void *arg, long long lo, long long hi, int tid);
int cl_cpu_blocks(int n_threads, long long n, cl_cpu_block_fn fn, void *arg);

/* cpu_sum.c: cl_cpu_blocks' blocks, each taken from its front in pieces of
 * at most `piece` indices (fn called once a piece); a thread whose block is
 * done takes pieces from the back of the others', so that a core running
 * slower for a while does not hold the team at the region's end. For fn
 * whose results do not depend on which thread runs an index (tid only
 * chooses scratch). Returns the team size, as cl_cpu_blocks. */
int cl_cpu_pieces(int n_threads, long long n, long long piece, cl_cpu_block_fn fn, void *arg);

/* cpu_sum.c: f(0) + ... + f(chunks - 1) in double, on n_threads when
 * parallel, in one order on any team and at every run (fixed groups of
 * chunks, added in their order) */
typedef double (*cl_cpu_chunk_fn)(long long chunk, void *ctx);
double cl_cpu_sum_chunks(int n_threads, long long chunks, int parallel, cl_cpu_chunk_fn f,
                         void *ctx);

/* cpu_winograd.c: Winograd convolutions (3 x 3 and 5 x 5, float32, no
 * groups, dilation 1), forward (dir 0) and backward data (dir 1). pick:
 * 1 when this call runs cl_cpu_wino_conv (CONVLSTM_CONV_ALGO, or the
 * choice timed per shape), 0 for cpu_conv.c's own paths; the call between
 * pick and done is timed while the shape is being measured. workspace:
 * the bytes Winograd needs (0 when it cannot run). */
typedef struct cl_cpu_wino_ticket {
  void *slot;
  int use;
  double t0;
} cl_cpu_wino_ticket;
size_t cl_cpu_wino_workspace(const cl_backend *be, const cl_conv_shape *s, int dir);
/* CONVLSTM_CONV_ALGO, read once when a backend is created (its plans and
 * calls then agree on the workspace): cl_cpu_ctx's conv_algo_env. */
int cl_cpu_conv_algo_env(void);
int cl_cpu_wino_pick(const cl_backend *be, const cl_conv_shape *s, int dir, const void *ws, cl_cpu_wino_ticket *tk);
void cl_cpu_wino_done(const cl_cpu_wino_ticket *tk);
/* How a call of s in direction dir (2: backward filter) on F(m x m, r),
 * m 2 or 4, is cut into chunks (tests read the bounds by their values):
 * images a chunk, tiles an image, output channels a block of M, threads,
 * whether one chunk split by channels (small), and U[e]'s slivers: P rows
 * (cl_cpu_sgemm_panels), 0 where U[e] is stored transposed (BLAS, or
 * more than one packing block of channels). 0: no such
 * form for s. */
typedef struct cl_cpu_wino_chunks {
  int n, images, tiles, kb, threads, small, P; /* n: a tile's side, m + r - 1 */
} cl_cpu_wino_chunks;
int cl_cpu_wino_chunks_of(const cl_backend *be, const cl_conv_shape *s, int dir, int m,
                          cl_cpu_wino_chunks *out);
/* The transform the last convolution left (cl_cpu_ctx's wino_u), cleared
 * there; nothing (ws NULL) unless s->same_w. Every convolution calls it
 * first. */
cl_cpu_wino_u cl_cpu_wino_claim(cl_backend *be, const cl_conv_shape *s);
/* held: cl_cpu_wino_claim's; U is not computed again where it matches. */
void cl_cpu_wino_conv(cl_backend *be, const cl_conv_shape *s, int dir, const void *x,
                      const float *w, const float *bias, void *y, int accumulate, void *ws,
                      const cl_cpu_wino_u *held);
/* dw += correlate(dy, x), dbias (may be NULL) += the sum of dy over N, H, W:
 * conv_backward_filter through Winograd (dir 2 of cl_cpu_wino_pick). */
void cl_cpu_wino_filter(cl_backend *be, const cl_conv_shape *s, const void *dy, const void *x,
                        float *dw, float *dbias, void *ws);
/* 1 when later calls of s in dir run Winograd, 0 GEMM paths, -1 still timing. */
int cl_cpu_wino_chosen(const cl_backend *be, const cl_conv_shape *s, int dir);
const char *cl_cpu_wino_name(const cl_backend *be, const cl_conv_shape *s, int dir);

#endif
