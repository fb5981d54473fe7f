/*
 * cpu/cpu_cell.c -- the fused ConvLSTM cell on the CPU (backend.h:
 * gates_forward, gates_backward): gate nonlinearities, cell update and
 * tanh(c) in one pass over memory forward and one backward.
 *
 * Gates are [N, 4 hidden, P] in torch's order i, f, o, g, so one image's
 * four gates of a channel are four rows hidden * P floats apart; c, h, dh and
 * dc are [N, hidden, P]. Threads split the N * hidden rows; within a row the
 * AVX-512 or AVX2 version runs 16 or 8 pixels at a time (channels last,
 * NHWC: the rows are the N * P pixels, each along its hidden channels) with
 * the vector exp/tanh of cpu_vmath.h, and the scalar version (other CPUs, row tails)
 * calls expf/tanhf: one source, cpu_cell_tmpl.h, for all of them, with and
 * without peepholes, so they evaluate the same expressions in the same
 * order. With float16 / bfloat16 storage (z, c, h; dh and dc are float32
 * always) a row goes through the same code in float chunks, converted on
 * the way in and rounded once on the way out. With peepholes a row runs its
 * own compiled version (the template's PEEP flag), so the cell without them
 * runs exactly the code it ran before they existed.
 *
 * Not here: the convolutions that produce the pre-activations (cpu_conv.c),
 * the peephole weights' gradient (cpu_peephole.c).
 */
#include "cpu_kernels.h"
#include "cpu_vmath.h" /* cl_vm_sigmoid512, cl_vm_tanh512, ... */

#include <math.h>
#include <stdint.h>

/* One (image, channel) row: its four gate rows and its state rows. */
typedef struct cell_row {
  float *i, *f, *o, *g;
  const float *cp; /* c_{t-1}, NULL for zeros */
  const float *c, *dh;
  float *cn, *h, *dc; /* forward: c, h out; backward: dc in/out */
  int P;
  /* peepholes of the row's channel (NULL: none): w_ci, w_cf, w_co at pixel p
   * are wi[p * ws], ...; ws = 1 per position, 0 per channel */
  const float *wi, *wf, *wo;
  int ws;
} cell_row;

/* The rows of a call run along contiguous memory: in NCHW an (image,
 * channel) row along its P pixels, in NHWC an (image, pixel) row along its
 * hidden channels. Either way a row's four gates are `gate` elements apart
 * and its state elements follow each other, so the same row code serves
 * both layouts. */
typedef struct row_geom {
  int64_t rows;
  int len;     /* elements of a row */
  size_t gate; /* from one gate of an element to the next */
} row_geom;

static row_geom geom_of(const cl_gates_shape *s) {
  const int nhwc = s->layout == CL_NHWC;
  row_geom g = {(int64_t)s->N * (nhwc ? s->P : s->hidden), nhwc ? s->hidden : s->P,
                cl_gate_at(s, 0, 1, 0, 0)};
  return g;
}

/* Element offsets of row r's first gate (i) and first state element. */
static size_t gate_offset(const cl_gates_shape *s, int64_t r) {
  const int64_t per = s->layout == CL_NHWC ? s->P : s->hidden, n = r / per, k = r % per;
  return s->layout == CL_NHWC ? cl_gate_at(s, (size_t)n, 0, 0, (size_t)k)
                              : cl_gate_at(s, (size_t)n, 0, (size_t)k, 0);
}
static size_t state_offset(const cl_gates_shape *s, int64_t r) {
  return (size_t)r * (size_t)(s->layout == CL_NHWC ? s->hidden : s->P);
}

static cell_row row_of(const cl_gates_shape *s, float *z, int64_t r) {
  const row_geom g = geom_of(s);
  cell_row cr = {0};
  cr.i = z + gate_offset(s, r);
  cr.f = cr.i + g.gate;
  cr.o = cr.f + g.gate;
  cr.g = cr.o + g.gate;
  cr.P = g.len;
  return cr;
}

/* Row r's peephole weights from wp [3, hidden, pp], from element p0 on: an
 * NCHW row's channel's weights (its own per pixel per position), an NHWC
 * row's per-channel weights, one per element of the row. */
static void row_peep(cell_row *cr, const cl_gates_shape *s, const float *wp, int64_t r, int p0) {
  const size_t pp = (size_t)cl_gates_peep_pixels(s), per = (size_t)s->hidden * pp;
  if (s->layout == CL_NHWC) { /* per channel only (check) */
    cr->ws = 1;
    cr->wi = wp + p0;
  } else {
    cr->ws = s->peep == CL_PEEP_POSITION;
    cr->wi = wp + (size_t)(r % s->hidden) * pp + (size_t)p0 * cr->ws;
  }
  cr->wf = cr->wi + per;
  cr->wo = cr->wf + per;
}

static cl_status check(cl_backend *be, const cl_gates_shape *s, const float *wp) {
  if (s->dtype != CL_F32 && s->dtype != CL_F16 && s->dtype != CL_BF16)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: unknown storage dtype %d",
                       (int)s->dtype);
  if (s->N < 0 || s->hidden < 0 || s->P < 0)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: bad gates shape N=%d hidden=%d P=%d", s->N,
                       s->hidden, s->P);
  if (s->peep < CL_PEEP_NONE || s->peep > CL_PEEP_POSITION)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: unknown peephole kind %d", (int)s->peep);
  if (s->peep != CL_PEEP_NONE && !wp)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: a cell with peepholes needs their weights");
  if (s->layout != CL_NCHW && s->layout != CL_NHWC)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: unknown layout %d", (int)s->layout);
  if (s->layout == CL_NHWC && s->peep == CL_PEEP_POSITION)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED,
                       "cpu backend: channels-last cells take peepholes per channel only");
  return CL_OK;
}

/* ---- the rows: cpu_cell_tmpl.h once per instruction set ---------------- */

/* A row from pixel p on, and the four of one instruction set:
 * row[FORWARD or BACKWARD][peep]. */
typedef void (*cell_fn)(const cell_row *r, int p);
enum { FORWARD, BACKWARD };

/* The template's bodies take the peephole flag as a constant: inlined
 * always, so each version is compiled with the other's code removed. */
#ifdef __GNUC__
#define CL_CELL_BODY static inline __attribute__((always_inline))
#else
#define CL_CELL_BODY static inline
#endif

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

#define CL_SIMD 1
#include "cpu_simd.h"
#define VSIGMOID(v) sigmoidf(v)
#define VTANH(v) tanhf(v)
#include "cpu_cell_tmpl.h" /* forward_generic, ..., cell_fns_generic */

#if CL_CPU_X86
#define CL_SIMD 512
#include "cpu_simd.h"
#define VSIGMOID(v) cl_vm_sigmoid512(v)
#define VTANH(v) cl_vm_tanh512(v)
#include "cpu_cell_tmpl.h" /* forward_avx512, ..., cell_fns_avx512 */

#define CL_SIMD 256
#include "cpu_simd.h"
#define VSIGMOID(v) cl_vm_sigmoid256(v)
#define VTANH(v) cl_vm_tanh256(v)
#include "cpu_cell_tmpl.h" /* forward_avx2, ..., cell_fns_avx2 */
#endif

static cell_fn const (*fns_of(cl_cpu_gemm_kind isa))[2] {
#if CL_CPU_X86
  if (isa == CL_CPU_GEMM_AVX512) return cell_fns_avx512;
  if (isa == CL_CPU_GEMM_AVX2) return cell_fns_avx2;
#endif
  (void)isa;
  return cell_fns_generic;
}

/* Row r, from pixel p0 (of its peephole weights when wp is not NULL): the
 * choice with or without peepholes is made per call, so rows without them
 * run the code they ran before peepholes existed. */
static void run_row(cl_cpu_gemm_kind isa, int dir, cell_row *cr, const cl_gates_shape *s,
                    const float *wp, int64_t r, int p0) {
  if (wp) row_peep(cr, s, wp, r, p0);
  fns_of(isa)[dir][wp != NULL](cr, 0);
}

/* The state of one call: forward reads z (pre-activations) and c_prev and
 * writes z (activations), c, h; backward reads z (activations), c, c_prev,
 * dh and dc and writes z (pre-activation gradients) and dc. z, c_prev, c,
 * h are stored in the shape's dtype, dh and dc are float32 always. */
typedef struct cell_io {
  void *z;
  const void *c_prev;
  void *c, *h;
  const float *dh;
  float *dc;
  const float *bias; /* forward: the layer's bias (fused), NULL: none */
} cell_io;

/* Row r's four gate rows (float, n elements from element p0, `gate` apart)
 * plus the bias of each element's channel in each gate, in float, before
 * the row runs: the pre-activation conv_forward would have made with the
 * bias, without its rounding to the storage type in between. An NCHW row
 * has one channel, an NHWC row one per element. */
static void add_row_bias(const cl_gates_shape *s, const float *bias, int64_t r, float *i,
                         size_t gate, size_t n, int p0) {
  const int nhwc = s->layout == CL_NHWC, ch = nhwc ? p0 : (int)(r % s->hidden);
  for (int q = 0; q < 4; q++) {
    const float *b = bias + (size_t)q * s->hidden + ch;
    float *row = i + q * gate;
    for (size_t p = 0; p < n; p++) row[p] += b[nhwc ? p : 0];
  }
}

/* ---- half storage: float chunks through the same row code ----------------- */

enum { HALF_CHUNK = 128 };

/* Row r with z, c_prev, c, h stored in s->dtype: each chunk is converted to
 * float, computed as float32 rows are, and rounded back once. */
static void row_half(cl_cpu_gemm_kind isa, int dir, const cl_gates_shape *s, const cell_io *io,
                     int64_t r, const float *wp) {
  const cl_dtype t = s->dtype;
  const row_geom g = geom_of(s);
  const size_t zo = gate_offset(s, r), gate = g.gate, so = state_offset(s, r);
  float b[7][HALF_CHUNK]; /* i, f, o, g, c_prev, c, h */
  for (int p0 = 0; p0 < g.len; p0 += HALF_CHUNK) {
    size_t n = (size_t)(g.len - p0 < HALF_CHUNK ? g.len - p0 : HALF_CHUNK);
    for (int q = 0; q < 4; q++) cl_cpu_load(t, io->z, zo + q * gate + p0, b[q], n);
    if (io->bias) add_row_bias(s, io->bias, r, b[0], HALF_CHUNK, n, p0);
    if (io->c_prev) cl_cpu_load(t, io->c_prev, so + p0, b[4], n);
    if (dir == BACKWARD) cl_cpu_load(t, io->c, so + p0, b[5], n);
    cell_row cr = {.i = b[0],
                   .f = b[1],
                   .o = b[2],
                   .g = b[3],
                   .cp = io->c_prev ? b[4] : NULL,
                   .c = b[5],
                   .cn = b[5],
                   .h = b[6],
                   .dh = io->dh ? io->dh + so + p0 : NULL,
                   .dc = io->dc ? io->dc + so + p0 : NULL,
                   .P = (int)n};
    run_row(isa, dir, &cr, s, wp, r, p0);
    for (int q = 0; q < 4; q++) cl_cpu_store(t, b[q], io->z, zo + q * gate + p0, n, 0);
    if (dir == BACKWARD) continue;
    cl_cpu_store(t, b[5], io->c, so + p0, n, 0);
    cl_cpu_store(t, b[6], io->h, so + p0, n, 0);
  }
}

/* Every (image, channel) row of one call, split among the threads. */
static cl_status run_rows(cl_backend *be, int dir, const cl_gates_shape *s, const cell_io *io,
                          const float *wp) {
  cl_status st = check(be, s, wp);
  if (st != CL_OK) return st;
  const cl_cpu_gemm_kind isa = cl_cpu_isa_of(be);
  const row_geom g = geom_of(s);
  const int64_t rows = g.rows;
  if (s->peep == CL_PEEP_NONE) wp = NULL;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (rows * g.len > 16384)
#endif
  for (int64_t r = 0; r < rows; r++) {
    if (s->dtype != CL_F32) {
      row_half(isa, dir, s, io, r, wp);
      continue;
    }
    cell_row cr = row_of(s, (float *)io->z, r);
    if (io->bias) add_row_bias(s, io->bias, r, cr.i, g.gate, (size_t)g.len, 0);
    size_t off = state_offset(s, r);
    cr.cp = io->c_prev ? (const float *)io->c_prev + off : NULL;
    cr.c = cr.cn = (float *)io->c + off;
    cr.h = io->h ? (float *)io->h + off : NULL;
    cr.dh = io->dh ? io->dh + off : NULL;
    cr.dc = io->dc ? io->dc + off : NULL;
    run_row(isa, dir, &cr, s, wp, r, 0);
  }
  return CL_OK;
}

/* dbias[k] += the sum of the stored dz of gate row k (k = q hidden + ch)
 * over the images and pixels, in double, images in order: one thread per
 * row k, so the result does not depend on the thread count. A second pass
 * over dz here (the CUDA twin sums in the pass that writes it). */
static void bias_grad_rows(cl_backend *be, const cl_gates_shape *s, const void *dz, float *dbias) {
  const int64_t K = 4 * (int64_t)s->hidden;
  const size_t P = (size_t)s->P;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if ((int64_t)s->N * K * s->P > 16384)
#else
  (void)be;
#endif
  for (int64_t k = 0; k < K; k++) {
    double total = 0;
    float a[HALF_CHUNK];
    for (int img = 0; img < s->N; img++)
      for (size_t p0 = 0; p0 < P; p0 += HALF_CHUNK) {
        const size_t n = P - p0 < HALF_CHUNK ? P - p0 : HALF_CHUNK;
        /* the same sums in the same order in both layouts, a stride apart in NHWC */
        cl_cpu_load_stride(s->dtype, dz, cl_act_at(s->layout, (size_t)K, P, img, k, p0),
                           s->layout == CL_NHWC ? (size_t)K : 1, a, n);
        for (size_t p = 0; p < n; p++) total += a[p];
      }
    dbias[k] += (float)total;
  }
}

/* ---- the slots -------------------------------------------------------------- */

/* forward: activations, c = f c_prev + i g, h = o tanh(c) */
cl_status cl_cpu_gates_forward(cl_backend *be, const cl_gates_shape *s, void *z, const void *c_prev,
                               const float *wp, const float *bias, void *c, void *h) {
  const cell_io io = {z, c_prev, c, h, NULL, NULL, bias};
  return run_rows(be, FORWARD, s, &io, wp);
}

/* backward: see backend.h; activations in, pre-activation grads out */
cl_status cl_cpu_gates_backward(cl_backend *be, const cl_gates_shape *s, void *gates, const void *c,
                                const void *c_prev, const float *wp, const float *dh, float *dc,
                                float *dbias) {
  /* c only read: row_half and run_row write it forward only */
  const cell_io io = {gates, c_prev, (void *)c, NULL, dh, dc, NULL};
  cl_status st = run_rows(be, BACKWARD, s, &io, wp);
  if (st == CL_OK && dbias) bias_grad_rows(be, s, gates, dbias);
  return st;
}
