/*
 * cpu/cpu_sum.c -- work split over an OpenMP team in contiguous blocks
 * (cl_cpu_blocks: the convolutions' images, the sums' chunks), and a sum in
 * double over chunks on such a team, the same bits at every run: each
 * thread sums its static block of chunks in order, then the threads'
 * partial sums are added in thread order. An OpenMP reduction(+) adds them
 * as the threads arrive instead, which with three or more threads moves the
 * last bits from run to run (the loss, the clipping norm and the sync-free
 * step's "bit for bit" rows need them fixed).
 */
#include "cpu_kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Partial sums on the stack: a team larger than this sums on fewer threads. */
#define CL_CPU_SUM_MAX_TEAM 256

int cl_cpu_blocks(int n_threads, long long n, cl_cpu_block_fn fn, void *arg) {
  int used = 1;
  const int threads = cl_cpu_threads(n_threads);
  (void)threads;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
  {
    int tid = 0, team = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    team = omp_get_num_threads();
#endif
    if (tid == 0) used = team;
    fn(arg, n * tid / team, n * (tid + 1) / team, tid);
  }
  return used;
}

typedef struct sum_job {
  cl_cpu_chunk_fn f;
  void *ctx;
  double *part;
} sum_job;

static void sum_block(void *arg, long long lo, long long hi, int tid) {
  const sum_job *j = arg;
  double s = 0.0;
  for (long long ch = lo; ch < hi; ch++) s += j->f(ch, j->ctx);
  j->part[tid] = s;
}

double cl_cpu_sum_chunks(int n_threads, long long chunks, int parallel, cl_cpu_chunk_fn f,
                         void *ctx) {
  double part[CL_CPU_SUM_MAX_TEAM];
  int nt = parallel ? n_threads : 1;
  if (nt > CL_CPU_SUM_MAX_TEAM) nt = CL_CPU_SUM_MAX_TEAM;
  sum_job j = {f, ctx, part};
  const int team = cl_cpu_blocks(nt, chunks, sum_block, &j);
  double sum = 0.0;
  for (int t = 0; t < team; t++) sum += part[t];
  return sum;
}
