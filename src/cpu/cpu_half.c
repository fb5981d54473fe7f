/*
 * cpu/cpu_half.c -- moving float16 / bfloat16 storage in and out of the
 * float32 the CPU kernels compute in (backend.h: activations may be stored
 * in shape->dtype; compute is float32 always).
 *
 * The kernels convert at their edges: the convolutions when they copy an
 * image into their padded buffer and when they write a result row, the cell
 * and the loss a chunk at a time. The conversions themselves are the host's
 * one vectorized path (host/half.c), rounding to nearest even exactly as
 * host/half.h's scalar reference and as torch does; here are the kernels'
 * offsets, strides and the float32 case.
 *
 * Not here: any arithmetic in half precision.
 */
#include "cpu_kernels.h"
#include "../host/half.h" /* cl_half_load(_rows), cl_half_store, cl_half_acc */
#include "cpu_copy.h"      /* cl_cpu_copy_short */

#include <string.h>

void cl_cpu_load(cl_dtype t, const void *src, size_t off, float *dst, size_t n) {
  if (t == CL_F32)
    memcpy(dst, (const float *)src + off, sizeof(float) * n);
  else
    cl_half_load(t, (const uint16_t *)src + off, dst, n);
}

void cl_cpu_load_rows(cl_dtype t, const void *src, size_t off, size_t ss, float *dst, size_t ds,
                      size_t n, size_t rows) {
  if (t != CL_F32) {
    cl_half_load_rows(t, (const uint16_t *)src + off, ss, dst, ds, n, rows);
    return;
  }
  /* an image's rows of 16 or 24 pixels: a memcpy call each cost more than the copy */
  for (size_t r = 0; r < rows; r++) {
    const float *s = (const float *)src + off + r * ss;
    if (n <= 64)
      cl_cpu_copy_short(dst + r * ds, s, (int)n);
    else
      memcpy(dst + r * ds, s, sizeof(float) * n);
  }
}

void cl_cpu_load_stride(cl_dtype t, const void *src, size_t off, size_t stride, float *dst,
                        size_t n) {
  if (stride == 1) {
    cl_cpu_load(t, src, off, dst, n);
    return;
  }
  for (size_t i = 0; i < n; i++) cl_cpu_load(t, src, off + i * stride, dst + i, 1);
}

/* dst[off + i] = src[i] + (accumulate ? dst[off + i] : 0), rounded once. */
void cl_cpu_store(cl_dtype t, const float *src, void *dst, size_t off, size_t n, int accumulate) {
  if (t == CL_F32) {
    float *d = (float *)dst + off;
    if (accumulate)
      for (size_t i = 0; i < n; i++) d[i] += src[i];
    else
      memcpy(d, src, sizeof(float) * n);
  } else if (accumulate) {
    cl_half_acc(t, src, (uint16_t *)dst + off, n);
  } else {
    cl_half_store(t, src, (uint16_t *)dst + off, n);
  }
}
