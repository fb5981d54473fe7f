/*
 * cpu/cpu_sum.c -- a sum in double over chunks on an OpenMP team, the same
 * bits at every run: each thread sums its static block of chunks in order,
 * then the threads' partial sums are added in thread order. An OpenMP
 * reduction(+) adds them as the threads arrive instead, which with three or
 * more threads moves the last bits from run to run (the loss, the clipping
 * norm and the sync-free step's "bit for bit" rows need them fixed).
 */
#include "cpu_kernels.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* Partial sums on the stack: a team larger than this sums on fewer threads. */
#define CL_CPU_SUM_MAX_TEAM 256

double cl_cpu_sum_chunks(int n_threads, long long chunks, int parallel, cl_cpu_chunk_fn f,
                         void *ctx) {
  double part[CL_CPU_SUM_MAX_TEAM];
  int team = 1;
  int nt = parallel ? cl_cpu_threads(n_threads) : 1;
  if (nt > CL_CPU_SUM_MAX_TEAM) nt = CL_CPU_SUM_MAX_TEAM;
#ifdef _OPENMP
#pragma omp parallel num_threads(nt) if (nt > 1)
#endif
  {
    int t = 0, T = 1;
#ifdef _OPENMP
    t = omp_get_thread_num();
    T = omp_get_num_threads();
#endif
    double s = 0.0;
    for (long long ch = chunks * t / T; ch < chunks * (t + 1) / T; ch++) s += f(ch, ctx);
    part[t] = s;
    if (t == 0) team = T;
  }
  double sum = 0.0;
  for (int t = 0; t < team; t++) sum += part[t];
  return sum;
}
