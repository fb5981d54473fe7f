/*
 * cpu/cpu_clip.c -- the CPU backend's sum_squares (backend.h): the squared
 * L2 norm of the flat gradient buffer that gradient clipping needs
 * (core/grad_norm.c). Summed in double, chunk by chunk in a fixed order per
 * thread count (cpu_sum.c), so a norm is the same from run to run.
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
