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
  double s = 0.0;
  const long long nn = (long long)n;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    reduction(+ : s) if (nn > CL_CPU_CLIP_PAR_MIN)
#endif
  for (long long i = 0; i < nn; i++) s += (double)g[i] * (double)g[i];
  *sum = s;
  return CL_OK;
}
