/*
 * core/pack.c -- conversion at the boundary, in one pass, between the user's
 * batch-first arrays (R's column-major doubles or torch's row-major floats)
 * and the core's row-major, time-major tensors [T, B, C, H, W] in the
 * storage dtype. A block (sequences b0.., steps t0..) is what micro-batches,
 * truncation windows and step-by-step inference upload. States
 * ([B, C, H, W], ndim 4) are the same with T = 1.
 */
#include "internal.h"

#include "half.h" /* exact float <-> float16/bfloat16 */

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

cl_block cl_block_all(const cl_host_array *a) {
  dims5 d = dims_of(a);
  cl_block b = {0, (int)d.B, 0, (int)d.T};
  return b;
}

static size_t block_elems(const cl_host_array *a, cl_block k) {
  dims5 d = dims_of(a);
  return (size_t)k.nb * (size_t)k.nt * d.C * d.H * d.W;
}

static inline void store(void *dst, size_t i, float v, cl_dtype t) {
  if (t == CL_F32)
    ((float *)dst)[i] = v;
  else if (t == CL_F16)
    ((uint16_t *)dst)[i] = cl_f32_to_f16(v);
  else
    ((uint16_t *)dst)[i] = cl_f32_to_bf16(v);
}

static inline float load(const void *src, size_t i, cl_dtype t) {
  if (t == CL_F32) return ((const float *)src)[i];
  if (t == CL_F16) return cl_f16_to_f32(((const uint16_t *)src)[i]);
  return cl_bf16_to_f32(((const uint16_t *)src)[i]);
}

/* Index of element (b, t, c, h, w) of the host array. R's is
 * b + B (t + T (c + C (h + H w))); torch's ((b T + t) C + c) H W + h W + w. */
static inline size_t host_index(const dims5 *d, int r_layout, size_t b, size_t t, size_t c,
                                size_t h, size_t w) {
  if (r_layout) return b + d->B * (t + d->T * (c + d->C * (h + d->H * w)));
  return (((b * d->T + t) * d->C + c) * d->H + h) * d->W + w;
}

/* Walk the core layout of the block in order (i), with the host index (r). */
#define FOR_BLOCK(a, k, body)                                                       \
  do {                                                                              \
    dims5 d_ = dims_of(a);                                                          \
    int r_ = (a)->format == CL_HOST_R_F64;                                          \
    size_t i = 0;                                                                   \
    for (size_t t = (size_t)(k).t0; t < (size_t)((k).t0 + (k).nt); t++)             \
      for (size_t b = (size_t)(k).b0; b < (size_t)((k).b0 + (k).nb); b++)           \
        for (size_t c = 0; c < d_.C; c++)                                           \
          for (size_t h = 0; h < d_.H; h++)                                         \
            for (size_t w = 0; w < d_.W; w++, i++) {                                \
              size_t r = host_index(&d_, r_, b, t, c, h, w);                        \
              body;                                                                 \
            }                                                                       \
  } while (0)

static void pack(void *dst, cl_dtype dt, const cl_host_array *src, cl_block k) {
  if (src->format == CL_HOST_R_F64) {
    const double *s = src->data;
    FOR_BLOCK(src, k, store(dst, i, (float)s[r], dt));
  } else {
    const float *s = src->data;
    FOR_BLOCK(src, k, store(dst, i, s[r], dt));
  }
}

static void unpack(cl_host_array *dst, const void *src, cl_dtype dt) {
  cl_block k = cl_block_all(dst);
  if (dst->format == CL_HOST_R_F64) {
    double *o = dst->data;
    FOR_BLOCK(dst, k, o[r] = (double)load(src, i, dt));
  } else {
    float *o = dst->data;
    FOR_BLOCK(dst, k, o[r] = load(src, i, dt));
  }
}

void cl_pack_host(float *dst, const cl_host_array *src) { pack(dst, CL_F32, src, cl_block_all(src)); }
void cl_unpack_host(cl_host_array *dst, const float *src) { unpack(dst, src, CL_F32); }

cl_status cl_put_host(cl_model *m, void *dev, cl_dtype t, const cl_host_array *src, cl_block k) {
  if (m->be->iface->host_accessible) {
    pack(dev, t, src, k);
    return CL_OK;
  }
  size_t bytes = block_elems(src, k) * cl_dtype_size(t);
  void *tmp = malloc(bytes);
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory staging an input");
  pack(tmp, t, src, k);
  cl_status s = m->be->iface->upload(m->be, dev, tmp, bytes);
  if (s == CL_OK) s = cl_backend_synchronize(m->be); /* tmp must outlive the copy */
  free(tmp);
  if (s != CL_OK) return cl_fail_backend(m, s, "upload");
  return CL_OK;
}

cl_status cl_get_host(cl_model *m, cl_host_array *dst, const void *dev, cl_dtype t) {
  if (m->be->iface->host_accessible) {
    unpack(dst, dev, t);
    return CL_OK;
  }
  size_t bytes = block_elems(dst, cl_block_all(dst)) * cl_dtype_size(t);
  void *tmp = malloc(bytes);
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory reading an output");
  cl_status s = m->be->iface->download(m->be, tmp, dev, bytes);
  if (s == CL_OK) unpack(dst, tmp, t);
  free(tmp);
  if (s != CL_OK) return cl_fail_backend(m, s, "download");
  return CL_OK;
}
