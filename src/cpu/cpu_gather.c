/*
 * cpu/cpu_gather.c -- the gather_rows slot: a training step on a data set
 * copies its batch's rows out of the time-major data set, [T, N, row] ->
 * [nt, nb, row]. On the CPU a "device" row is host memory, so each row is
 * one memcpy; rows are split over threads only when there is enough to copy
 * for that to pay.
 *
 * Not here: the index checks (core/data.c refuses rows outside [0, N)
 * before a step starts).
 */
#include "cpu_kernels.h"

#include <string.h>

/* Below this many bytes a team of threads costs more than the copy. */
#define CL_CPU_GATHER_PAR_BYTES ((size_t)1 << 20)

cl_status cl_cpu_gather_rows(cl_backend *be, void *dst, const void *src, const int *idx, int nb,
                             int N, int t0, int nt, size_t row_bytes) {
  if (nb < 0 || nt < 0 || N < 1 || t0 < 0)
    return cl_cpu_fail(be, CL_E_INVALID, "gather_rows: bad shape nb %d, N %d, t0 %d, nt %d", nb,
                       N, t0, nt);
  long rows = (long)nb * nt;
  char *d = dst;
  const char *s = src;
  int par = (size_t)rows * row_bytes >= CL_CPU_GATHER_PAR_BYTES && rows > 1;
  (void)par;
#ifdef _OPENMP
#pragma omp parallel for schedule(static) num_threads(cl_cpu_threads(be->n_threads)) if (par)
#endif
  for (long r = 0; r < rows; r++) {
    long t = r / nb, j = r % nb;
    size_t from = ((size_t)(t0 + t) * (size_t)N + (size_t)idx[j]) * row_bytes;
    memcpy(d + (size_t)r * row_bytes, s + from, row_bytes);
  }
  return CL_OK;
}
