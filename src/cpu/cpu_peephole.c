/*
 * cpu/cpu_peephole.c -- the gradient of the peephole weights on the CPU
 * (backend.h: peephole_filter), from the pre-activation gradients dz that
 * gates_backward left in the gates buffer: dw_ci += dz_i c_prev,
 * dw_cf += dz_f c_prev, dw_co += dz_o c, summed over the images (and the
 * pixels of a channel, per channel).
 *
 * Threads split the 3 * hidden (weight, channel) rows; each row sums its
 * images in order, so the result does not depend on the thread count. It is
 * not the cell (cpu_cell.c), which uses the weights.
 */
#include "cpu_kernels.h"

#include <stdint.h>

enum { CHUNK = 256 };

/* n elements from (img, ch, p0) of gate k's dz and of src into a and b:
 * one run in NCHW, a stride apart channels last. */
static void load_pixels(const cl_gates_shape *s, int k, int ch, int img, size_t p0, size_t n,
                        const void *dz, const void *src, float *a, float *b) {
  const int nhwc = s->layout == CL_NHWC; /* a pixel's next: 4 hidden (gates), hidden apart */
  cl_cpu_load_stride(s->dtype, dz, cl_gate_at(s, img, k, ch, p0),
                     nhwc ? 4 * (size_t)s->hidden : 1, a, n);
  cl_cpu_load_stride(s->dtype, src, cl_cell_at(s, img, ch, p0), nhwc ? (size_t)s->hidden : 1, b,
                     n);
}

/* Weight k's row of channel ch: dw[0..pp) += sum over n of dz * src. */
static void filter_row(const cl_gates_shape *s, int k, int ch, const void *dz, const void *src,
                       float *dw) {
  const size_t P = (size_t)s->P;
  const int per_pos = s->peep == CL_PEEP_POSITION;
  double total = 0; /* per channel: all pixels of all images */
  float a[CHUNK], b[CHUNK];
  for (size_t p0 = 0; p0 < P; p0 += CHUNK) {
    size_t n = P - p0 < CHUNK ? P - p0 : CHUNK;
    for (int img = 0; img < s->N; img++) {
      load_pixels(s, k, ch, img, p0, n, dz, src, a, b);
      if (per_pos)
        for (size_t p = 0; p < n; p++) dw[p0 + p] += a[p] * b[p];
      else
        for (size_t p = 0; p < n; p++) total += (double)a[p] * b[p];
    }
  }
  if (!per_pos) dw[0] += (float)total;
}

cl_status cl_cpu_peephole_filter(cl_backend *be, const cl_gates_shape *s, const void *dz,
                                 const void *c, const void *c_prev, float *dwp) {
  if (s->dtype != CL_F32 && s->dtype != CL_F16 && s->dtype != CL_BF16)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: unknown storage dtype %d",
                       (int)s->dtype);
  if (s->N < 0 || s->hidden < 0 || s->P < 0 || s->peep == CL_PEEP_NONE ||
      s->peep > CL_PEEP_POSITION)
    return cl_cpu_fail(be, CL_E_INVALID,
                       "cpu backend: peephole_filter needs a shape with peepholes (N=%d hidden=%d "
                       "P=%d peep=%d)",
                       s->N, s->hidden, s->P, (int)s->peep);
  if (s->layout != CL_NCHW && (s->layout != CL_NHWC || s->peep == CL_PEEP_POSITION))
    return cl_cpu_fail(be, CL_E_UNSUPPORTED,
                       "cpu backend: peephole_filter channels last takes peepholes per channel "
                       "only (layout %d, peep %d)",
                       (int)s->layout, (int)s->peep);
  const size_t pp = (size_t)cl_gates_peep_pixels(s);
  const int64_t rows = 3 * (int64_t)s->hidden;
#ifdef _OPENMP
#pragma omp parallel for num_threads(cl_cpu_threads(be->n_threads)) schedule(static) \
    if (rows * s->N * s->P > 16384)
#endif
  for (int64_t r = 0; r < rows; r++) {
    int k = (int)(r / s->hidden), ch = (int)(r % s->hidden);
    const void *src = k == 2 ? c : c_prev; /* i, f: c_{t-1}; o: c_t */
    if (src) filter_row(s, k, ch, dz, src, dwp + (size_t)r * pp);
  }
  return CL_OK;
}
