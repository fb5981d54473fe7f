/*
 * cpu/cpu_clip.c -- the CPU backend's passes over the whole flat gradient
 * buffer (backend.h): sum_squares, the squared L2 norm that gradient
 * clipping needs (core/grad_norm.c), summed in double, chunk by chunk in a
 * fixed order per thread count (cpu_sum.c), so a norm is the same from run
 * to run; and grad_add, which sums a split step's threads' gradients
 * (core/split.c).
 */
#include "cpu_kernels.h"

/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_CLIP_PAR_MIN 32768

enum { SQ_CHUNK = 4096 };

typedef struct sq_ctx {
  const float *g;
  size_t n;
} sq_ctx;

static double sq_chunk(long long ch, void *ctx) {
  const sq_ctx *c = (const sq_ctx *)ctx;
  size_t i0 = (size_t)ch * SQ_CHUNK, m = c->n - i0 < SQ_CHUNK ? c->n - i0 : SQ_CHUNK;
  double s = 0.0;
  for (size_t i = i0; i < i0 + m; i++) s += (double)c->g[i] * (double)c->g[i];
  return s;
}

cl_status cl_cpu_sum_squares(cl_backend *be, const float *g, size_t n, double *sum) {
  sq_ctx c = {g, n};
  *sum = cl_cpu_sum_chunks(be->n_threads, (long long)((n + SQ_CHUNK - 1) / SQ_CHUNK),
                           n > CL_CPU_CLIP_PAR_MIN, sq_chunk, &c);
  return CL_OK;
}

typedef struct add_ctx {
  float *dst;
  const float *src;
} add_ctx;

static void add_block(void *arg, long long lo, long long hi, int tid) {
  const add_ctx *c = (const add_ctx *)arg;
  (void)tid;
  for (long long i = lo; i < hi; i++) c->dst[i] += c->src[i];
}

cl_status cl_cpu_grad_add(cl_backend *be, float *dst, const float *src, size_t n) {
  add_ctx c = {dst, src};
  cl_cpu_blocks(n > CL_CPU_CLIP_PAR_MIN ? be->n_threads : 1, (long long)n, add_block, &c);
  return CL_OK;
}
