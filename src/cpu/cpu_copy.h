/*
 * cpu/cpu_copy.h -- copies of a few dozen floats, inlined.
 *
 * A GEMM's packing copies a tile's row at a time, and a convolution an
 * image's row of 16 or 24 pixels: there a memcpy call costs more than the
 * copy. The fixed-size pieces below are inlined as moves; a plain element
 * loop would be turned back into a memcpy call by the compiler.
 */
#ifndef CONVLSTM_CPU_COPY_H
#define CONVLSTM_CPU_COPY_H

#include <string.h>

/* dst[0:n] = src[0:n], the two not overlapping; for n up to a few dozen. */
static inline void cl_cpu_copy_short(float *restrict dst, const float *restrict src, int n) {
  int t = 0;
  for (; t + 8 <= n; t += 8) memcpy(dst + t, src + t, 8 * sizeof(float));
  if (n - t >= 4) memcpy(dst + t, src + t, 4 * sizeof(float)), t += 4;
  if (n - t >= 2) memcpy(dst + t, src + t, 2 * sizeof(float)), t += 2;
  if (n - t >= 1) dst[t] = src[t];
}

#endif
