/*
 * cpu/cpu_cell.c -- the fused ConvLSTM cell on the CPU (backend.h:
 * gates_forward, gates_backward): gate nonlinearities, cell update and
 * tanh(c) in one pass over memory forward and one backward.
 *
 * Gates are [N, 4 hidden, P] in torch's order i, f, o, g, so one image's
 * four gates of a channel are four rows hidden * P floats apart; c, h, dh and
 * dc are [N, hidden, P]. Threads split the N * hidden rows; within a row the
 * AVX-512 or AVX2 version runs 16 or 8 pixels at a time with the vector
 * exp/tanh of cpu_vmath.h, and the scalar version (other CPUs, row tails)
 * calls expf/tanhf. Both evaluate the same expressions in the same order.
 * With float16 / bfloat16 storage (z, c, h; dh and dc are float32 always)
 * a row goes through the same code in float chunks, converted on the way in
 * and rounded once on the way out. With peepholes a row runs its own
 * version (forward_peep_*, backward_peep_*), so the cell without them runs
 * exactly the code it ran before they existed.
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

/* Element offset of row r's first gate (i) in [N, 4 hidden, P]. */
static size_t gate_offset(const cl_gates_shape *s, int64_t r) {
  int64_t n = r / s->hidden, ch = r % s->hidden;
  return ((size_t)n * 4 * s->hidden + (size_t)ch) * s->P;
}

static cell_row row_of(const cl_gates_shape *s, float *z, int64_t r) {
  size_t gate = (size_t)s->hidden * s->P;
  cell_row cr = {0};
  cr.i = z + gate_offset(s, r);
  cr.f = cr.i + gate;
  cr.o = cr.f + gate;
  cr.g = cr.o + gate;
  cr.P = s->P;
  return cr;
}

/* Row r's peephole weights from wp [3, hidden, pp], from pixel p0 on. */
static void row_peep(cell_row *cr, const cl_gates_shape *s, const float *wp, int64_t r, int p0) {
  const size_t pp = (size_t)cl_gates_peep_pixels(s), per = (size_t)s->hidden * pp;
  cr->ws = s->peep == CL_PEEP_POSITION;
  cr->wi = wp + (size_t)(r % s->hidden) * pp + (size_t)p0 * cr->ws;
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
  return CL_OK;
}

/* ---- forward: activations, c = f c_prev + i g, h = o tanh(c) ------------- */

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

static void forward_scalar(const cell_row *r, int p) {
  for (; p < r->P; p++) {
    float i = sigmoidf(r->i[p]), f = sigmoidf(r->f[p]), o = sigmoidf(r->o[p]);
    float g = tanhf(r->g[p]);
    float c = i * g;
    if (r->cp) c = f * r->cp[p] + c;
    r->i[p] = i, r->f[p] = f, r->o[p] = o, r->g[p] = g;
    r->cn[p] = c;
    r->h[p] = o * tanhf(c);
  }
}

/* With peepholes: i and f see c_prev, o sees the new c. */
static void forward_peep_scalar(const cell_row *r, int p) {
  for (; p < r->P; p++) {
    const size_t q = (size_t)p * r->ws;
    float zi = r->i[p], zf = r->f[p];
    if (r->cp) zi += r->wi[q] * r->cp[p], zf += r->wf[q] * r->cp[p];
    float i = sigmoidf(zi), f = sigmoidf(zf), g = tanhf(r->g[p]);
    float c = i * g;
    if (r->cp) c = f * r->cp[p] + c;
    float o = sigmoidf(r->o[p] + r->wo[q] * c);
    r->i[p] = i, r->f[p] = f, r->o[p] = o, r->g[p] = g;
    r->cn[p] = c;
    r->h[p] = o * tanhf(c);
  }
}

/* The scalar backward row (also the vector rows' tails); the formulas are
 * backend.h's: activations in, pre-activation gradients out. */
static void backward_scalar(const cell_row *r, int p) {
  for (; p < r->P; p++) {
    float i = r->i[p], f = r->f[p], o = r->o[p], g = r->g[p];
    float tc = tanhf(r->c[p]), dh = r->dh[p];
    float d_o = dh * tc;
    float dct = r->dc[p] + dh * o * (1.0f - tc * tc);
    float di = dct * g, dg = dct * i, df = r->cp ? dct * r->cp[p] : 0.0f;
    r->dc[p] = dct * f;
    r->i[p] = di * i * (1.0f - i);
    r->f[p] = df * f * (1.0f - f);
    r->o[p] = d_o * o * (1.0f - o);
    r->g[p] = dg * (1.0f - g * g);
  }
}

/* With peepholes: o's gradient reaches c_t through w_co, i's and f's reach
 * c_{t-1} through w_ci and w_cf. */
static void backward_peep_scalar(const cell_row *r, int p) {
  for (; p < r->P; p++) {
    const size_t q = (size_t)p * r->ws;
    float i = r->i[p], f = r->f[p], o = r->o[p], g = r->g[p];
    float tc = tanhf(r->c[p]), dh = r->dh[p];
    float dzo = dh * tc * o * (1.0f - o);
    float dct = r->dc[p] + dh * o * (1.0f - tc * tc) + dzo * r->wo[q];
    float di = dct * g, dg = dct * i, df = r->cp ? dct * r->cp[p] : 0.0f;
    float dzi = di * i * (1.0f - i), dzf = df * f * (1.0f - f);
    r->dc[p] = dct * f + dzi * r->wi[q] + dzf * r->wf[q];
    r->i[p] = dzi;
    r->f[p] = dzf;
    r->o[p] = dzo;
    r->g[p] = dg * (1.0f - g * g);
  }
}

/* ---- the vector rows: cpu_cell_tmpl.h once per instruction set ---------- */

#if CL_VMATH_X86
#define CL_SIMD 512
#include "cpu_simd.h"
#define VSIGMOID(v) cl_vm_sigmoid512(v)
#define VTANH(v) cl_vm_tanh512(v)
#include "cpu_cell_tmpl.h" /* forward_avx512, backward_avx512, ..._peep_avx512 */

#define CL_SIMD 256
#include "cpu_simd.h"
#define VSIGMOID(v) cl_vm_sigmoid256(v)
#define VTANH(v) cl_vm_tanh256(v)
#include "cpu_cell_tmpl.h" /* forward_avx2, backward_avx2, ..._peep_avx2 */
#endif

static void forward_row(cl_cpu_gemm_kind isa, const cell_row *r) {
#if CL_VMATH_X86
  if (isa == CL_CPU_GEMM_AVX512) {
    forward_avx512(r);
    return;
  }
  if (isa == CL_CPU_GEMM_AVX2) {
    forward_avx2(r);
    return;
  }
#endif
  (void)isa;
  forward_scalar(r, 0);
}

static void forward_peep_row(cl_cpu_gemm_kind isa, const cell_row *r) {
#if CL_VMATH_X86
  if (isa == CL_CPU_GEMM_AVX512) {
    forward_peep_avx512(r);
    return;
  }
  if (isa == CL_CPU_GEMM_AVX2) {
    forward_peep_avx2(r);
    return;
  }
#endif
  (void)isa;
  forward_peep_scalar(r, 0);
}

/* A row with or without peepholes: the choice is made per call (peep), so
 * rows without them run the code they ran before peepholes existed. */
static void forward_any(cl_cpu_gemm_kind isa, int peep, cell_row *cr, const cl_gates_shape *s,
                        const float *wp, int64_t r, int p0) {
  if (!peep) {
    forward_row(isa, cr);
    return;
  }
  row_peep(cr, s, wp, r, p0);
  forward_peep_row(isa, cr);
}

/* ---- half storage: float chunks through the same row code ----------------- */

enum { HALF_CHUNK = 128 };

/* Row r with z, c_prev, c, h stored in s->dtype: each chunk is converted to
 * float, computed as float32 rows are, and rounded back once. */
static void forward_row_half(cl_cpu_gemm_kind isa, const cl_gates_shape *s, void *z, int64_t r,
                             const void *c_prev, const float *wp, void *c, void *h) {
  const cl_dtype t = s->dtype;
  const size_t zo = gate_offset(s, r), gate = (size_t)s->hidden * s->P, so = (size_t)r * s->P;
  float b[7][HALF_CHUNK]; /* i, f, o, g, c_prev, c, h */
  for (int p0 = 0; p0 < s->P; p0 += HALF_CHUNK) {
    size_t n = (size_t)(s->P - p0 < HALF_CHUNK ? s->P - p0 : HALF_CHUNK);
    for (int q = 0; q < 4; q++) cl_cpu_load(t, z, zo + q * gate + p0, b[q], n);
    if (c_prev) cl_cpu_load(t, c_prev, so + p0, b[4], n);
    cell_row cr = {.i = b[0],
                   .f = b[1],
                   .o = b[2],
                   .g = b[3],
                   .cp = c_prev ? b[4] : NULL,
                   .cn = b[5],
                   .h = b[6],
                   .P = (int)n};
    forward_any(isa, wp != NULL, &cr, s, wp, r, p0);
    for (int q = 0; q < 4; q++) cl_cpu_store(t, b[q], z, zo + q * gate + p0, n, 0);
    cl_cpu_store(t, b[5], c, so + p0, n, 0);
    cl_cpu_store(t, b[6], h, so + p0, n, 0);
  }
}

cl_status cl_cpu_gates_forward(cl_backend *be, const cl_gates_shape *s, void *z, const void *c_prev,
                               const float *wp, void *c, void *h) {
  cl_status st = check(be, s, wp);
  if (st != CL_OK) return st;
  const cl_cpu_gemm_kind isa = cl_cpu_isa_of(be);
  const int64_t rows = (int64_t)s->N * s->hidden;
  const int peep = s->peep != CL_PEEP_NONE;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (rows * s->P > 16384)
#endif
  for (int64_t r = 0; r < rows; r++) {
    if (s->dtype != CL_F32) {
      forward_row_half(isa, s, z, r, c_prev, peep ? wp : NULL, c, h);
      continue;
    }
    cell_row cr = row_of(s, (float *)z, r);
    size_t off = (size_t)r * s->P;
    cr.cp = c_prev ? (const float *)c_prev + off : NULL;
    cr.cn = (float *)c + off;
    cr.h = (float *)h + off;
    forward_any(isa, peep, &cr, s, wp, r, 0);
  }
  return CL_OK;
}

/* ---- backward: see backend.h; activations in, pre-activation grads out --- */

static void backward_row(cl_cpu_gemm_kind isa, const cell_row *r) {
#if CL_VMATH_X86
  if (isa == CL_CPU_GEMM_AVX512) {
    backward_avx512(r);
    return;
  }
  if (isa == CL_CPU_GEMM_AVX2) {
    backward_avx2(r);
    return;
  }
#endif
  (void)isa;
  backward_scalar(r, 0);
}

static void backward_peep_row(cl_cpu_gemm_kind isa, const cell_row *r) {
#if CL_VMATH_X86
  if (isa == CL_CPU_GEMM_AVX512) {
    backward_peep_avx512(r);
    return;
  }
  if (isa == CL_CPU_GEMM_AVX2) {
    backward_peep_avx2(r);
    return;
  }
#endif
  (void)isa;
  backward_peep_scalar(r, 0);
}

static void backward_any(cl_cpu_gemm_kind isa, int peep, cell_row *cr, const cl_gates_shape *s,
                         const float *wp, int64_t r, int p0) {
  if (!peep) {
    backward_row(isa, cr);
    return;
  }
  row_peep(cr, s, wp, r, p0);
  backward_peep_row(isa, cr);
}

/* Row r with gates, c and c_prev in s->dtype; dh and dc are float32. */
static void backward_row_half(cl_cpu_gemm_kind isa, const cl_gates_shape *s, void *gates, int64_t r,
                              const void *c, const void *c_prev, const float *wp, const float *dh,
                              float *dc) {
  const cl_dtype t = s->dtype;
  const size_t zo = gate_offset(s, r), gate = (size_t)s->hidden * s->P, so = (size_t)r * s->P;
  float b[6][HALF_CHUNK]; /* i, f, o, g, c, c_prev */
  for (int p0 = 0; p0 < s->P; p0 += HALF_CHUNK) {
    size_t n = (size_t)(s->P - p0 < HALF_CHUNK ? s->P - p0 : HALF_CHUNK);
    for (int q = 0; q < 4; q++) cl_cpu_load(t, gates, zo + q * gate + p0, b[q], n);
    cl_cpu_load(t, c, so + p0, b[4], n);
    if (c_prev) cl_cpu_load(t, c_prev, so + p0, b[5], n);
    cell_row cr = {.i = b[0],
                   .f = b[1],
                   .o = b[2],
                   .g = b[3],
                   .cp = c_prev ? b[5] : NULL,
                   .c = b[4],
                   .dh = dh + so + p0,
                   .dc = dc + so + p0,
                   .P = (int)n};
    backward_any(isa, wp != NULL, &cr, s, wp, r, p0);
    for (int q = 0; q < 4; q++) cl_cpu_store(t, b[q], gates, zo + q * gate + p0, n, 0);
  }
}

cl_status cl_cpu_gates_backward(cl_backend *be, const cl_gates_shape *s, void *gates, const void *c,
                                const void *c_prev, const float *wp, const float *dh, float *dc) {
  cl_status st = check(be, s, wp);
  if (st != CL_OK) return st;
  const cl_cpu_gemm_kind isa = cl_cpu_isa_of(be);
  const int64_t rows = (int64_t)s->N * s->hidden;
  const int peep = s->peep != CL_PEEP_NONE;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (rows * s->P > 16384)
#endif
  for (int64_t r = 0; r < rows; r++) {
    if (s->dtype != CL_F32) {
      backward_row_half(isa, s, gates, r, c, c_prev, peep ? wp : NULL, dh, dc);
      continue;
    }
    cell_row cr = row_of(s, (float *)gates, r);
    size_t off = (size_t)r * s->P;
    cr.cp = c_prev ? (const float *)c_prev + off : NULL;
    cr.c = (const float *)c + off;
    cr.dh = (const float *)dh + off;
    cr.dc = dc + off;
    backward_any(isa, peep, &cr, s, wp, r, 0);
  }
  return CL_OK;
}
