/*
 * cpu/cpu_clip.c -- the CPU backend's sum_squares (backend.h): the squared
 * L2 norm of the flat gradient buffer that gradient clipping needs
 * (core/clip.c). Summed in double, chunk by chunk in a fixed order per
 * thread count, so a norm is the same from run to run.
 */
#include "cpu_kernels.h"

/* Below this many elements a parallel region costs more than it saves. */
#define CL_CPU_CLIP_PAR_MIN 32768

cl_status cl_cpu_sum_squares(cl_backend *be, const float *g, size_t n, double *sum) {
  (void)be; /* read only by the OpenMP pragma */
  double part[CL_CPU_SUM_TEAM]; /* in thread order (cpu_threads.h) */
  int used = 1;
  const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel num_threads(cl_cpu_sum_team(be->n_threads, nn > CL_CPU_CLIP_PAR_MIN))
#endif
  {
    int t, nt;
    long long lo, hi;
    cl_cpu_team_place(&t, &nt);
    if (t == 0) used = nt;
    cl_cpu_block(nn, t, nt, &lo, &hi);
    double s = 0.0;
    for (long long i = lo; i < hi; i++) s += (double)g[i] * (double)g[i];
    part[t] = s;
  }
  *sum = cl_cpu_sum_parts(part, used);
  return CL_OK;
}
