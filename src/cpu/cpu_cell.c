/*
 * cpu/cpu_cell.c -- the fused ConvLSTM cell on the CPU (backend.h:
 * gates_forward, gates_backward): gate nonlinearities, cell update and
 * tanh(c) in one pass over memory forward and one backward.
 *
 * Gates are [N, 4 hidden, P] in torch's order i, f, o, g, so one image's
 * four gates of a channel are four rows hidden * P floats apart; c, h, dh and
 * dc are [N, hidden, P]. Threads split the N * hidden rows.
 *
 * Not here: the convolutions that produce the pre-activations (cpu_conv.c).
 * Math uses expf/tanhf, not approximations, because the parity tests against
 * PyTorch allow 1e-5 relative error.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <stdint.h>

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* Pointers to the rows of one (image, channel): gate rows and state rows. */
typedef struct cell_row {
  float *i, *f, *o, *g;
  size_t state; /* offset of the row in [N, hidden, P] tensors */
} cell_row;

static cell_row row_of(const cl_gates_shape *s, float *z, int64_t r) {
  int64_t n = r / s->hidden, ch = r % s->hidden;
  size_t gate = (size_t)s->hidden * s->P;
  cell_row cr;
  cr.i = z + ((size_t)n * 4 * s->hidden + ch) * s->P;
  cr.f = cr.i + gate;
  cr.o = cr.f + gate;
  cr.g = cr.o + gate;
  cr.state = (size_t)r * s->P;
  return cr;
}

static cl_status check(cl_backend *be, const cl_gates_shape *s) {
  if (s->dtype != CL_F32)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: gates support float32 only (dtype %d)",
                       (int)s->dtype);
  if (s->N < 0 || s->hidden < 0 || s->P < 0)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: bad gates shape N=%d hidden=%d P=%d",
                       s->N, s->hidden, s->P);
  return CL_OK;
}

static void forward_row(const cl_gates_shape *s, float *z, int64_t r, const float *c_prev,
                        float *c, float *h) {
  cell_row g = row_of(s, z, r);
  const float *cp = c_prev ? c_prev + g.state : NULL;
  float *cr = c + g.state, *hr = h + g.state;
  for (int p = 0; p < s->P; p++) {
    float i = sigmoidf(g.i[p]), f = sigmoidf(g.f[p]), o = sigmoidf(g.o[p]), gg = tanhf(g.g[p]);
    float cn = i * gg;
    if (cp) cn += f * cp[p];
    g.i[p] = i, g.f[p] = f, g.o[p] = o, g.g[p] = gg;
    cr[p] = cn;
    hr[p] = o * tanhf(cn);
  }
}

cl_status cl_cpu_gates_forward(cl_backend *be, const cl_gates_shape *s, void *z,
                               const void *c_prev, void *c, void *h) {
  cl_status st = check(be, s);
  if (st != CL_OK) return st;
  int64_t rows = (int64_t)s->N * s->hidden;
#ifdef _OPENMP
#pragma omp parallel for num_threads(be->n_threads) schedule(static) if (rows * s->P > 16384)
#endif
  for (int64_t r = 0; r < rows; r++) forward_row(s, (float *)z, r, c_prev, c, h);
  return CL_OK;
}

/* See backend.h: activations in, gradients of the pre-activations out. */
static void backward_row(const cl_gates_shape *s, float *z, int64_t r, const float *c,
                         const float *c_prev, const float *dh, float *dc) {
  cell_row g = row_of(s, z, r);
  const float *cr = c + g.state, *dhr = dh + g.state;
  const float *cp = c_prev ? c_prev + g.state : NULL;
  float *dcr = dc + g.state;
  for (int p = 0; p < s->P; p++) {
    float i = g.i[p], f = g.f[p], o = g.o[p], gg = g.g[p];
    float tc = tanhf(cr[p]);
    float d_o = dhr[p] * tc;
    float dct = dcr[p] + dhr[p] * o * (1.0f - tc * tc);
    float di = dct * gg, dg = dct * i, df = cp ? dct * cp[p] : 0.0f;
    dcr[p] = dct * f;
    g.i[p] = di * i * (1.0f - i);
    g.f[p] = df * f * (1.0f - f);
    g.o[p] = d_o * o * (1.0f - o);
    g.g[p] = dg * (1.0f - gg * gg);
  }
}

cl_status cl_cpu_gates_backward(cl_backend *be, const cl_gates_shape *s, void *gates,
                                const void *c, const void *c_prev, const void *dh, float *dc) {
  cl_status st = check(be, s);
  if (st != CL_OK) return st;
  int64_t rows = (int64_t)s->N * s->hidden;
#ifdef _OPENMP
#pragma omp parallel for num_threads(be->n_threads) schedule(static) if (rows * s->P > 16384)
#endif
  for (int64_t r = 0; r < rows; r++) backward_row(s, (float *)gates, r, c, c_prev, dh, dc);
  return CL_OK;
}
