/*
 * cuda/cuda_peephole.cu -- the gradient of the peephole weights on the GPU
 * (twin of src/cpu/cpu_peephole.c; backend.h: peephole_filter), from the
 * dz that gates_backward left in the gates buffer: dw_ci += dz_i c_prev,
 * dw_cf += dz_f c_prev, dw_co += dz_o c, summed over the images (and the
 * pixels of a channel, per channel).
 *
 * Per position, one thread owns one weight and sums the images in order;
 * per channel, one block owns one weight and sums its images' pixels in
 * double with a fixed tree (cl_block_sum), so the result is the same run to
 * run. Per channel reads either layout (cl_gate_at, cl_cell_at) in the same
 * order, so the sums have the same bits in both; per position is NCHW only
 * (backend.h). Not the cell (cuda_cell.cu), which uses the weights.
 */
#include <stdio.h> /* snprintf */

#include "cuda_common.h" /* context, check macros, cl_ld, cl_block_sum, CL_CUDA_FOR */

/* Weight e of [3, hid, P]: k = e / (hid P) picks gate k's dz and its source
 * (c_prev for i and f, c for o). */
template <typename T>
__global__ void peephole_position_kernel(const T *dz, const T *c, const T *c_prev, float *dw,
                                         int N, size_t hp, size_t total) {
  CL_CUDA_FOR(e, total) {
    const size_t k = e / hp, r = e - k * hp;
    const T *src = k == 2 ? c : c_prev;
    if (!src) continue;
    float sum = 0.0f;
    for (int n = 0; n < N; n++)
      sum += cl_ld(dz[((size_t)n * 4 + k) * hp + r]) * cl_ld(src[(size_t)n * hp + r]);
    dw[e] += sum;
  }
}

/* Block b owns weight b of [3, hid]: channel ch of gate k. */
template <typename T>
__global__ void peephole_channel_kernel(const T *dz, const T *c, const T *c_prev, float *dw,
                                        cl_gates_shape s) {
  const int hid = s.hidden, k = blockIdx.x / hid, ch = blockIdx.x - k * hid;
  const T *src = k == 2 ? c : c_prev;
  if (!src) return; /* the whole block alike: no thread waits in cl_block_sum */
  const size_t P = (size_t)s.P, count = (size_t)s.N * P;
  double sum = 0.0;
  for (size_t j = threadIdx.x; j < count; j += blockDim.x) {
    const size_t n = j / P, p = j - n * P;
    sum += (double)cl_ld(dz[cl_gate_at(&s, n, k, (size_t)ch, p)]) *
           cl_ld(src[cl_cell_at(&s, n, (size_t)ch, p)]);
  }
  sum = cl_block_sum(sum);
  if (threadIdx.x == 0) dw[blockIdx.x] += (float)sum;
}

template <typename T>
static cl_status filter_t(cl_backend *be, const cl_gates_shape *s, const void *dz, const void *c,
                          const void *c_prev, float *dwp) {
  const size_t hp = (size_t)s->hidden * s->P;
  if (hp == 0 || s->N == 0) return CL_OK;
  cudaStream_t stream = cl_cuda_ctx_of(be)->stream;
  if (s->peep == CL_PEEP_POSITION) {
    const size_t total = 3 * hp;
    peephole_position_kernel<T><<<cl_cuda_blocks(total), CL_CUDA_THREADS, 0, stream>>>(
        (const T *)dz, (const T *)c, (const T *)c_prev, dwp, s->N, hp, total);
  } else {
    peephole_channel_kernel<T><<<3 * (unsigned)s->hidden, CL_CUDA_THREADS, 0, stream>>>(
        (const T *)dz, (const T *)c, (const T *)c_prev, dwp, *s);
  }
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

cl_status cl_cuda_peephole_filter(cl_backend *be, const cl_gates_shape *s, const void *dz,
                                  const void *c, const void *c_prev, float *dwp) {
  if (s->N < 0 || s->hidden < 0 || s->P < 0 || s->peep == CL_PEEP_NONE ||
      s->peep > CL_PEEP_POSITION) {
    snprintf(be->err, sizeof be->err,
             "cuda peephole_filter: needs a shape with peepholes (N=%d hidden=%d P=%d peep=%d)",
             s->N, s->hidden, s->P, (int)s->peep);
    return CL_E_INVALID;
  }
  if (s->layout != CL_NCHW && (s->layout != CL_NHWC || s->peep == CL_PEEP_POSITION)) {
    snprintf(be->err, sizeof be->err,
             "cuda peephole_filter: channels last takes peepholes per channel only (layout %d, "
             "peep %d)",
             (int)s->layout, (int)s->peep);
    return CL_E_UNSUPPORTED;
  }
  switch (s->dtype) {
  case CL_F32:
    return filter_t<float>(be, s, dz, c, c_prev, dwp);
  case CL_F16:
    return filter_t<__half>(be, s, dz, c, c_prev, dwp);
  case CL_BF16:
    return filter_t<__nv_bfloat16>(be, s, dz, c, c_prev, dwp);
  }
  return cl_cuda_bad_dtype(be, s->dtype, "peephole_filter");
}
