/*
 * core/pack.c -- conversion at the boundary, in one pass, between the user's
 * batch-first arrays (R's column-major doubles or torch's row-major floats)
 * and the core's row-major, time-major tensors [T, B, C, H, W] in the
 * storage dtype. A block (sequences b0.., steps t0..) is what micro-batches,
 * truncation windows and step-by-step inference upload. States
 * ([B, C, H, W], ndim 4) are the same with T = 1.
 */
#include "internal.h"

#include "../host/half.h"    /* exact float <-> float16/bfloat16 */
#include "../host/threads.h" /* cl_cpu_threads: teams of one in a forked child */

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* The walks below split their two outer loops over nth_ threads: every
 * element is written once, by one thread, so the result is the same bits
 * for any team. */
#ifdef _OPENMP
#define PACK_PARALLEL_FOR2 \
  _Pragma("omp parallel for collapse(2) num_threads(nth_) schedule(static)")
#else
#define PACK_PARALLEL_FOR2 (void)nth_;
#endif

/* Below this many elements a batch converts on the calling thread: starting
 * a team costs more than it saves. */
#define PACK_MIN_ELEMS ((size_t)1 << 15)
/* The conversion is bound by memory bandwidth, which a few cores fill. */
#define PACK_MAX_THREADS 8

int cl_pack_threads(const cl_model *m, size_t n) {
  if (n < PACK_MIN_ELEMS) return 1;
  int t = m->be->iface->host_accessible ? m->be->n_threads : m->cfg.n_threads;
#ifdef _OPENMP
  if (t < 1) t = omp_get_max_threads();
#endif
  return cl_cpu_threads(t > PACK_MAX_THREADS ? PACK_MAX_THREADS : t);
}

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

size_t cl_host_row_elems(const cl_host_array *a) {
  dims5 d = dims_of(a);
  return cl_mul_size(cl_mul_size(d.C, d.H), d.W);
}

int cl_host_steps(const cl_host_array *a) { return (int)dims_of(a).T; }

cl_block cl_block_all(const cl_host_array *a) {
  dims5 d = dims_of(a);
  cl_block b = {0, (int)d.B, 0, (int)d.T};
  return b;
}

static size_t block_elems(const cl_host_array *a, cl_block k) {
  dims5 d = dims_of(a);
  return (size_t)k.nb * (size_t)k.nt * d.C * d.H * d.W;
}

/* n floats stored in t from element i of dst on: float32 copied, halves
 * through the host's vectorized conversion (half.c), which rounds as the
 * scalar reference does. */
static inline void store_run(void *dst, size_t i, const float *v, size_t n, cl_dtype t) {
  if (t == CL_F32)
    memcpy((float *)dst + i, v, n * sizeof(float));
  else
    cl_half_store(t, v, (uint16_t *)dst + i, n);
}

static inline void load_run(const void *src, size_t i, float *v, size_t n, cl_dtype t) {
  if (t == CL_F32)
    memcpy(v, (const float *)src + i, n * sizeof(float));
  else
    cl_half_load(t, (const uint16_t *)src + i, v, n);
}

/* Index of element (b, t, c, h, w) of the host array. R's is
 * b + B (t + T (c + C (h + H w))); torch's ((b T + t) C + c) H W + h W + w. */
static inline size_t host_index(const dims5 *d, int r_layout, size_t b, size_t t, size_t c,
                                size_t h, size_t w) {
  if (r_layout) return b + d->B * (t + d->T * (c + d->C * (h + d->H * w)));
  return (((b * d->T + t) * d->C + c) * d->H + h) * d->W + w;
}

/* Walks over a block, core index i and host index r. Torch's images
 * [C, H, W] are contiguous on both sides: one run per (t, b). R's array is
 * the transpose, w its slowest index and the core's fastest; walked element
 * by element in the core's order it would be read at a stride of a whole
 * [T, C, H] slab each time (about 2-3x slower at the benchmark's shapes). It
 * goes in tiles of R_TILE_W pixels of a row instead: for each (t, b) the
 * core's side gets a whole cache line of w, while the host's side walks
 * R_TILE_W runs along (t, b) in step. */
#define FOR_TORCH_RUNS(a, k, nth, body)                                             \
  do {                                                                              \
    dims5 d_ = dims_of(a);                                                          \
    size_t img = d_.C * d_.H * d_.W, nb_ = (size_t)(k).nb;                          \
    int nth_ = (nth);                                                               \
    PACK_PARALLEL_FOR2                                                              \
    for (size_t tt = 0; tt < (size_t)(k).nt; tt++)                                  \
      for (size_t j = 0; j < nb_; j++) {                                            \
        size_t i = (tt * nb_ + j) * img;                                            \
        size_t r = (((size_t)(k).b0 + j) * d_.T + (size_t)(k).t0 + tt) * img;       \
        body;                                                                       \
      }                                                                             \
  } while (0)

#define R_TILE_W 16

/* body sees i (core index of pixel w0 of (t0 + tt, b0 + j, c, h)), r (host
 * index of the same), wn pixels and the host's stride sw between them. */
#define FOR_R_TILES(a, k, nth, body)                                                \
  do {                                                                              \
    dims5 d_ = dims_of(a);                                                          \
    size_t img = d_.C * d_.H * d_.W, sw = d_.B * d_.T * d_.C * d_.H;                \
    size_t nb = (size_t)(k).nb, nt = (size_t)(k).nt;                                \
    int nth_ = (nth);                                                               \
    PACK_PARALLEL_FOR2                                                              \
    for (size_t c = 0; c < d_.C; c++)                                               \
      for (size_t h = 0; h < d_.H; h++)                                             \
        for (size_t w0 = 0; w0 < d_.W; w0 += R_TILE_W) {                            \
          size_t wn = d_.W - w0 < R_TILE_W ? d_.W - w0 : R_TILE_W;                  \
          for (size_t tt = 0; tt < nt; tt++)                                        \
            for (size_t j = 0; j < nb; j++) {                                       \
              size_t i = (tt * nb + j) * img + (c * d_.H + h) * d_.W + w0;          \
              size_t r = host_index(&d_, 1, (size_t)(k).b0 + j, (size_t)(k).t0 + tt, c,  \
                                    h, w0);                                         \
              body;                                                                 \
            }                                                                       \
        }                                                                           \
  } while (0)

static void pack(void *dst, cl_dtype dt, const cl_host_array *src, cl_block k, int nth) {
  if (src->format == CL_HOST_R_F64) {
    const double *s = src->data;
    if (dt == CL_F32)
      FOR_R_TILES(src, k, nth, {
        float *f = (float *)dst + i;
        for (size_t v = 0; v < wn; v++) f[v] = (float)s[r + v * sw];
      });
    else
      FOR_R_TILES(src, k, nth, {
        float v_[R_TILE_W];
        for (size_t v = 0; v < wn; v++) v_[v] = (float)s[r + v * sw];
        store_run(dst, i, v_, wn, dt);
      });
  } else {
    const float *s = src->data;
    FOR_TORCH_RUNS(src, k, nth, store_run(dst, i, s + r, img, dt));
  }
}

static void unpack(cl_host_array *dst, const void *src, cl_dtype dt, int nth) {
  cl_block k = cl_block_all(dst);
  if (dst->format == CL_HOST_R_F64) {
    double *o = dst->data;
    if (dt == CL_F32)
      FOR_R_TILES(dst, k, nth, {
        const float *f = (const float *)src + i;
        for (size_t v = 0; v < wn; v++) o[r + v * sw] = (double)f[v];
      });
    else
      FOR_R_TILES(dst, k, nth, {
        float v_[R_TILE_W];
        load_run(src, i, v_, wn, dt);
        for (size_t v = 0; v < wn; v++) o[r + v * sw] = (double)v_[v];
      });
  } else {
    float *o = dst->data;
    FOR_TORCH_RUNS(dst, k, nth, load_run(src, i, o + r, img, dt));
  }
}

/* The general map, element by element: with p x p patches
 * (pixel_unshuffle; the encoder-forecaster's frames), host pixel (c, y, x)
 * of an image is the core's channel c p p + (y % p) p + x % p at (y / p,
 * x / p), and with layout l (the model's: channels last on a backend that
 * asks for it) that element of image n lies at cl_act_at. p = 1 and NCHW
 * take the tiled walks above instead. */
static size_t mapped_index(const dims5 *d, int p, cl_layout l, size_t n, size_t c, size_t y,
                           size_t x) {
  size_t hp = d->H / (size_t)p, wp = d->W / (size_t)p;
  size_t ch = (c * (size_t)p + y % (size_t)p) * (size_t)p + x % (size_t)p;
  return cl_act_at(l, d->C * (size_t)p * (size_t)p, hp * wp, n, ch,
                   (y / (size_t)p) * wp + x / (size_t)p);
}

/* The element walk above, a row at a time: pixel x of row y of channel c
 * of image n lies at the row's mapped_index (x = 0) plus (x % p) a + (x / p)
 * b, as both layouts separate (NCHW: a = hp wp, b = 1; NHWC: a = 1,
 * b = C p p), and at the host's row start plus x rs. A row goes in chunks
 * of ROW_CHUNK: gathered, converted as one run (store_run), scattered. */
#define ROW_CHUNK 64

typedef struct row_walk {
  size_t W, p, a, b, rs;
} row_walk;

static row_walk row_walk_of(const dims5 *d, int p, cl_layout l, int r_layout) {
  row_walk w = {d->W, (size_t)p, 0, 0, r_layout ? d->B * d->T * d->C * d->H : 1};
  w.a = p > 1 ? mapped_index(d, p, l, 0, 0, 0, 1) : 0;
  w.b = mapped_index(d, p, l, 0, 0, 0, (size_t)p);
  return w;
}

/* Offsets of pixels x0 .. x0 + n - 1 from the row's start. */
static void chunk_offsets(const row_walk *w, size_t x0, size_t n, size_t *off) {
  size_t xr = x0 % w->p, o = xr * w->a + (x0 / w->p) * w->b;
  for (size_t k = 0; k < n; k++) {
    off[k] = o;
    if (++xr == w->p) {
      xr = 0;
      o += w->b - (w->p - 1) * w->a;
    } else {
      o += w->a;
    }
  }
}

static void pack_row(void *dst, cl_dtype dt, size_t base, const cl_host_array *src, size_t r0,
                     const row_walk *w) {
  float v[ROW_CHUNK];
  uint16_t h[ROW_CHUNK];
  size_t off[ROW_CHUNK];
  for (size_t x0 = 0; x0 < w->W; x0 += ROW_CHUNK) {
    size_t n = w->W - x0 < ROW_CHUNK ? w->W - x0 : ROW_CHUNK, r = r0 + x0 * w->rs;
    chunk_offsets(w, x0, n, off);
    if (src->format == CL_HOST_R_F64)
      for (size_t k = 0; k < n; k++) v[k] = (float)((const double *)src->data)[r + k * w->rs];
    else
      for (size_t k = 0; k < n; k++) v[k] = ((const float *)src->data)[r + k * w->rs];
    if (dt == CL_F32) {
      for (size_t k = 0; k < n; k++) ((float *)dst)[base + off[k]] = v[k];
    } else {
      cl_half_store(dt, v, h, n);
      for (size_t k = 0; k < n; k++) ((uint16_t *)dst)[base + off[k]] = h[k];
    }
  }
}

static void unpack_row(cl_host_array *dst, size_t r0, const void *src, cl_dtype dt, size_t base,
                       const row_walk *w) {
  float v[ROW_CHUNK];
  uint16_t h[ROW_CHUNK];
  size_t off[ROW_CHUNK];
  for (size_t x0 = 0; x0 < w->W; x0 += ROW_CHUNK) {
    size_t n = w->W - x0 < ROW_CHUNK ? w->W - x0 : ROW_CHUNK, r = r0 + x0 * w->rs;
    chunk_offsets(w, x0, n, off);
    if (dt == CL_F32) {
      for (size_t k = 0; k < n; k++) v[k] = ((const float *)src)[base + off[k]];
    } else {
      for (size_t k = 0; k < n; k++) h[k] = ((const uint16_t *)src)[base + off[k]];
      cl_half_load(dt, h, v, n);
    }
    if (dst->format == CL_HOST_R_F64)
      for (size_t k = 0; k < n; k++) ((double *)dst->data)[r + k * w->rs] = (double)v[k];
    else
      for (size_t k = 0; k < n; k++) ((float *)dst->data)[r + k * w->rs] = v[k];
  }
}

/* body sees base (the core's index of the row's pixel 0), r0 (the host's)
 * and w_, for each row of the block. */
#define FOR_MAPPED_ROWS(a, k, p, l, nth, body)                                     \
  do {                                                                             \
    dims5 d_ = dims_of(a);                                                         \
    int r_ = (a)->format == CL_HOST_R_F64;                                         \
    row_walk w_ = row_walk_of(&d_, p, l, r_);                                      \
    int nth_ = (nth);                                                              \
    PACK_PARALLEL_FOR2                                                             \
    for (size_t tt = 0; tt < (size_t)(k).nt; tt++)                                 \
      for (size_t j = 0; j < (size_t)(k).nb; j++)                                  \
        for (size_t c = 0; c < d_.C; c++)                                          \
          for (size_t y = 0; y < d_.H; y++) {                                      \
            size_t base = mapped_index(&d_, p, l, tt * (size_t)(k).nb + j, c, y, 0); \
            size_t r0 = host_index(&d_, r_, (size_t)(k).b0 + j, (size_t)(k).t0 + tt, c, \
                                   y, 0);                                          \
            body;                                                                  \
          }                                                                        \
  } while (0)

static void pack_mapped(void *dst, cl_dtype dt, const cl_host_array *src, cl_block k, int p,
                        cl_layout l, int nth) {
  if (p <= 1 && l == CL_NCHW)
    pack(dst, dt, src, k, nth);
  else
    FOR_MAPPED_ROWS(src, k, p, l, nth, pack_row(dst, dt, base, src, r0, &w_));
}

static void unpack_mapped(cl_host_array *dst, const void *src, cl_dtype dt, int p, cl_layout l,
                          int nth) {
  cl_block k = cl_block_all(dst);
  if (p <= 1 && l == CL_NCHW)
    unpack(dst, src, dt, nth);
  else
    FOR_MAPPED_ROWS(dst, k, p, l, nth, unpack_row(dst, r0, src, dt, base, &w_));
}

void cl_pack_host(float *dst, const cl_host_array *src) {
  pack(dst, CL_F32, src, cl_block_all(src), 1);
}
void cl_unpack_host(cl_host_array *dst, const float *src) { unpack(dst, src, CL_F32, 1); }

/* Host memory to stage a transfer through: the backend's reusable pinned
 * buffer (host_stage) when it offers one, else malloc; *owned says whether
 * the caller frees it. The backend's buffer is not counted by the device
 * accounting: it is host memory. */
static void *stage_buffer(cl_model *m, size_t bytes, int *owned) {
  void *p = NULL;
  *owned = 0;
  if (m->be->iface->host_stage && m->be->iface->host_stage(m->be, bytes, &p) == CL_OK && p)
    return p;
  *owned = 1;
  return malloc(bytes);
}

void cl_pack_block(const cl_model *m, void *dst, cl_dtype t, const cl_host_array *src,
                   cl_block k, int p) {
  pack_mapped(dst, t, src, k, p, m->layout, cl_pack_threads(m, block_elems(src, k)));
}

static cl_status put_patched(cl_model *m, void *dev, cl_dtype t, const cl_host_array *src,
                             cl_block k, int p) {
  if (m->be->iface->host_accessible) {
    cl_pack_block(m, dev, t, src, k, p);
    return CL_OK;
  }
  size_t bytes = block_elems(src, k) * cl_dtype_size(t);
  int owned;
  void *tmp = stage_buffer(m, bytes, &owned);
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory staging an input");
  cl_pack_block(m, tmp, t, src, k, p);
  cl_status s = m->be->iface->upload(m->be, dev, tmp, bytes);
  /* tmp must outlive the copy: a region of the backend's stage stays
   * untouched until the backend next synchronises (so a training step's
   * uploads wait for nothing); a malloc'd one is freed here, so waits */
  if (s == CL_OK && owned) s = cl_backend_synchronize(m->be);
  if (owned) free(tmp);
  if (s != CL_OK) return cl_fail_backend(m, s, "upload");
  return CL_OK;
}

cl_status cl_put_host(cl_model *m, void *dev, cl_dtype t, const cl_host_array *src, cl_block k) {
  return put_patched(m, dev, t, src, k, 1);
}

cl_status cl_put_frames(cl_model *m, void *dev, cl_dtype t, const cl_host_array *src,
                        cl_block k) {
  return put_patched(m, dev, t, src, k, cl_cfg_patch(&m->cfg));
}

cl_status cl_put_bytes(cl_model *m, void *dev, const void *host, size_t bytes) {
  if (m->be->iface->host_accessible) {
    memcpy(dev, host, bytes);
    return CL_OK;
  }
  int owned;
  void *tmp = stage_buffer(m, bytes, &owned);
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory staging an input");
  memcpy(tmp, host, bytes);
  cl_status s = m->be->iface->upload(m->be, dev, tmp, bytes);
  if (s == CL_OK && owned) s = cl_backend_synchronize(m->be); /* as cl_put_host */
  if (owned) free(tmp);
  if (s != CL_OK) return cl_fail_backend(m, s, "upload");
  return CL_OK;
}

static cl_status get_patched(cl_model *m, cl_host_array *dst, const void *dev, cl_dtype t,
                             int p) {
  const int nth = cl_pack_threads(m, block_elems(dst, cl_block_all(dst)));
  if (m->be->iface->host_accessible) {
    unpack_mapped(dst, dev, t, p, m->layout, nth);
    return CL_OK;
  }
  size_t bytes = block_elems(dst, cl_block_all(dst)) * cl_dtype_size(t);
  int owned;
  void *tmp = stage_buffer(m, bytes, &owned);
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory reading an output");
  cl_status s = m->be->iface->download(m->be, tmp, dev, bytes);
  if (s == CL_OK) unpack_mapped(dst, tmp, t, p, m->layout, nth);
  if (owned) free(tmp);
  if (s != CL_OK) return cl_fail_backend(m, s, "download");
  return CL_OK;
}

cl_status cl_get_host(cl_model *m, cl_host_array *dst, const void *dev, cl_dtype t) {
  return get_patched(m, dst, dev, t, 1);
}

cl_status cl_get_frames(cl_model *m, cl_host_array *dst, const void *dev, cl_dtype t) {
  return get_patched(m, dst, dev, t, cl_cfg_patch(&m->cfg));
}

/* Sequences b0.. of a block are rows idx[b0..] of the data set. */
static cl_status gather(cl_model *m, void *dst, const cl_source *s, cl_block k) {
  const struct cl_backend_i *be = m->be->iface;
  if (be->gather_rows) {
    CL_KERNEL(m, be->gather_rows(m->be, dst, s->dev, s->d_idx + k.b0, k.nb, s->N, k.t0, k.nt,
                                 s->row_bytes));
    return CL_OK;
  }
  for (int t = 0; t < k.nt; t++)
    for (int j = 0; j < k.nb; j++) {
      size_t from = ((size_t)(k.t0 + t) * s->N + (size_t)s->idx[k.b0 + j]) * s->row_bytes;
      size_t to = ((size_t)t * k.nb + j) * s->row_bytes;
      CL_KERNEL(m, be->copy(m->be, (char *)dst + to, (const char *)s->dev + from, s->row_bytes));
    }
  return CL_OK;
}

/* Block k of a staged source, uploaded as it is: one run when the block
 * has every row, else one run of its rows per step. The staged memory
 * outlives the step (staged.c), so nothing waits here. */
static cl_status put_staged(cl_model *m, void *dev, const cl_source *s, cl_block k) {
  const struct cl_backend_i *be = m->be->iface;
  const int sent = s->staged_dev != NULL; /* ahead, into a device buffer */
  const char *from = (const char *)(sent ? s->staged_dev : s->staged);
  const size_t run = (size_t)k.nb * s->row_bytes, step = (size_t)s->N * s->row_bytes;
  const int whole = k.nb == s->N;
  for (int t = 0; t < (whole ? 1 : k.nt); t++) {
    const char *at = from + (size_t)(k.t0 + t) * step + (size_t)k.b0 * s->row_bytes;
    char *to = (char *)dev + (size_t)t * run;
    const size_t bytes = whole ? (size_t)k.nt * step : run;
    if (sent)
      CL_KERNEL(m, be->copy(m->be, to, at, bytes));
    else if (be->host_accessible)
      memcpy(to, at, bytes);
    else
      CL_KERNEL(m, be->upload(m->be, to, at, bytes));
  }
  return CL_OK;
}

cl_status cl_put_source(cl_model *m, void *dev, cl_dtype t, const cl_source *s, cl_block k) {
  if (s->staged && s->dtype == t) return put_staged(m, dev, s, k);
  if (s->host) return cl_put_host(m, dev, t, s->host, k);
  if (t != s->dtype)
    return cl_fail(m, CL_E_INTERNAL, "a data set stored in dtype %d was read as dtype %d",
                   (int)s->dtype, (int)t);
  return gather(m, dev, s, k);
}

cl_status cl_put_frames_source(cl_model *m, void *dev, cl_dtype t, const cl_source *s,
                               cl_block k) {
  /* stored patched; every frames put asks the dtype staged today (x's, y's
   * float32), the check keeps a future one from reading other bytes */
  if (s->staged && t == s->dtype) return put_staged(m, dev, s, k);
  return s->host ? cl_put_frames(m, dev, t, s->host, k) : cl_put_source(m, dev, t, s, k);
}
