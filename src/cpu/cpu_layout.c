/*
 * cpu/cpu_layout.c -- activations moved between the two layouts of
 * backend.h (cl_layout): NCHW and channels last (NHWC). The CPU's
 * convolutions are written for NCHW; a channels-last shape runs them
 * between these moves, in its planned workspace (cpu_conv.c), so that the
 * CPU backend computes every channels-last slot as the reference the tests
 * hold the CUDA backend and the core's boundary conversions to. A move
 * copies stored bits: no rounding, the same values in the other order.
 */
#include "cpu_kernels.h"

#include <string.h>

/* dst (layout `to`) = src (the other layout), N images of C channels and P
 * pixels, elements of es bytes (2 or 4). Walks the NHWC side in order. */
void cl_cpu_relayout(void *dst, cl_layout to, const void *src, size_t N, size_t C, size_t P,
                     size_t es) {
  const cl_layout from = to == CL_NHWC ? CL_NCHW : CL_NHWC;
  for (size_t n = 0; n < N; n++)
    for (size_t p = 0; p < P; p++)
      for (size_t c = 0; c < C; c++) {
        const size_t d = cl_act_at(to, C, P, n, c, p), s = cl_act_at(from, C, P, n, c, p);
        if (es == 4)
          ((uint32_t *)dst)[d] = ((const uint32_t *)src)[s];
        else
          ((uint16_t *)dst)[d] = ((const uint16_t *)src)[s];
      }
}
