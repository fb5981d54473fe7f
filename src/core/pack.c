/*
 * core/pack.c -- conversion at the boundary, in one pass, between the user's
 * batch-first arrays (R's column-major doubles or torch's row-major floats)
 * and the core's row-major, time-major floats [T, B, C, H, W]. States
 * ([B, C, H, W], ndim 4) are the same with T = 1.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct dims5 {
  size_t B, T, C, H, W;
} dims5;

static dims5 dims_of(const cl_host_array *a) {
  dims5 d;
  if (a->ndim == 5) {
    d.B = a->dims[0]; d.T = a->dims[1]; d.C = a->dims[2]; d.H = a->dims[3]; d.W = a->dims[4];
  } else {
    d.B = a->dims[0]; d.T = 1; d.C = a->dims[1]; d.H = a->dims[2]; d.W = a->dims[3];
  }
  return d;
}

/* Walk the core layout in order; `r` is the R (column-major) index. R's index
 * of (b, t, c, h, w) is b + B (t + T (c + C (h + H w))). */
#define FOR_CORE_ORDER(d, body)                                               \
  do {                                                                        \
    size_t i_ = 0, sB_ = 1, sT_ = d.B, sC_ = sT_ * d.T, sH_ = sC_ * d.C,      \
           sW_ = sH_ * d.H;                                                   \
    for (size_t t = 0; t < d.T; t++)                                          \
      for (size_t b = 0; b < d.B; b++)                                        \
        for (size_t c = 0; c < d.C; c++)                                      \
          for (size_t h = 0; h < d.H; h++) {                                  \
            size_t r0_ = b * sB_ + t * sT_ + c * sC_ + h * sH_;               \
            for (size_t w = 0; w < d.W; w++, i_++) {                          \
              size_t r = r0_ + w * sW_, i = i_;                               \
              body;                                                           \
            }                                                                 \
          }                                                                   \
  } while (0)

void cl_pack_host(float *dst, const cl_host_array *src) {
  dims5 d = dims_of(src);
  if (src->format == CL_HOST_R_F64) {
    const double *s = src->data;
    FOR_CORE_ORDER(d, dst[i] = (float)s[r]);
    return;
  }
  /* torch: [B, T, CHW] row-major -> [T, B, CHW] */
  const float *s = src->data;
  size_t chw = d.C * d.H * d.W;
  for (size_t t = 0; t < d.T; t++)
    for (size_t b = 0; b < d.B; b++)
      memcpy(dst + (t * d.B + b) * chw, s + (b * d.T + t) * chw, chw * sizeof(float));
}

void cl_unpack_host(cl_host_array *dst, const float *src) {
  dims5 d = dims_of(dst);
  if (dst->format == CL_HOST_R_F64) {
    double *o = dst->data;
    FOR_CORE_ORDER(d, o[r] = (double)src[i]);
    return;
  }
  float *o = dst->data;
  size_t chw = d.C * d.H * d.W;
  for (size_t t = 0; t < d.T; t++)
    for (size_t b = 0; b < d.B; b++)
      memcpy(o + (b * d.T + t) * chw, src + (t * d.B + b) * chw, chw * sizeof(float));
}

/* Host array -> device buffer of n floats; staged through host memory when
 * the device is not host memory. */
cl_status cl_put_host(cl_model *m, float *dev, const cl_host_array *src, size_t n) {
  if (m->be->iface->host_accessible) {
    cl_pack_host(dev, src);
    return CL_OK;
  }
  float *tmp = malloc(n * sizeof(float));
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory staging an input");
  cl_pack_host(tmp, src);
  cl_status s = m->be->iface->upload(m->be, dev, tmp, n * sizeof(float));
  if (s == CL_OK) s = cl_backend_synchronize(m->be); /* tmp must outlive the copy */
  free(tmp);
  if (s != CL_OK) return cl_fail_backend(m, s, "upload");
  return CL_OK;
}

cl_status cl_get_host(cl_model *m, cl_host_array *dst, const float *dev, size_t n) {
  if (m->be->iface->host_accessible) {
    cl_unpack_host(dst, dev);
    return CL_OK;
  }
  float *tmp = malloc(n * sizeof(float));
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory reading an output");
  cl_status s = m->be->iface->download(m->be, tmp, dev, n * sizeof(float));
  if (s == CL_OK) cl_unpack_host(dst, tmp);
  free(tmp);
  if (s != CL_OK) return cl_fail_backend(m, s, "download");
  return CL_OK;
}
