/*
 * cuda/cuda_cell.cu -- the fused ConvLSTM cell of the CUDA backend (twin of
 * src/cpu/cpu_cell.c): one kernel for the gate nonlinearities and the cell
 * update forward, one for their gradient backward.
 *
 * Each thread owns one (image, channel, pixel) of the state and reads the four
 * gates of it, so a kernel touches every element once. Gates, c and h are
 * stored as float, __half or __nv_bfloat16, the gradients dh and dc as float
 * always; the arithmetic is float throughout, with accurate expf/tanhf (no
 * fast-math) so that float32 agrees with the CPU backend to rounding. It is
 * not the convolution (cudnn_conv.cu).
 */
#include <stdio.h> /* snprintf */

#include "cuda_common.h" /* context, check macros, cl_ld/cl_st, CL_CUDA_FOR */

static __device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* z [N, 4*hid, P] (pre-activations in, activations out), c_prev/c/h [N, hid, P].
 * hp = hid*P: the distance between two gates of one element. */
template <typename T>
__global__ void gates_forward_kernel(T *z, const T *c_prev, T *c, T *h, size_t total,
                                     size_t hp) {
  CL_CUDA_FOR(e, total) {
    const size_t n = e / hp, r = e - n * hp;
    T *zi = z + n * 4 * hp + r; /* the gates of e: zi[0], zi[hp], zi[2hp], zi[3hp] */
    const float i = sigmoidf_(cl_ld(zi[0]));
    const float f = sigmoidf_(cl_ld(zi[hp]));
    const float o = sigmoidf_(cl_ld(zi[2 * hp]));
    const float g = tanhf(cl_ld(zi[3 * hp]));
    /* no c_prev: c = i*g exactly as the CPU computes it (f*0 would turn a
     * NaN f into a NaN c) */
    const float cn = c_prev ? f * cl_ld(c_prev[e]) + i * g : i * g;
    zi[0] = cl_st<T>(i);
    zi[hp] = cl_st<T>(f);
    zi[2 * hp] = cl_st<T>(o);
    zi[3 * hp] = cl_st<T>(g);
    c[e] = cl_st<T>(cn);
    h[e] = cl_st<T>(o * tanhf(cn));
  }
}

/* gates: activations in, d loss / d pre-activations out. dh and dc are
 * float32 for every storage type (the core's gradients accumulate in
 * float32); dc: gradient of c_t in, of c_{t-1} out. tanh(c) is recomputed
 * from the stored c, which is what the forward's h was computed from up to
 * storage rounding. */
template <typename T>
__global__ void gates_backward_kernel(T *gates, const T *c, const T *c_prev, const float *dh,
                                      float *dc, size_t total, size_t hp) {
  CL_CUDA_FOR(e, total) {
    const size_t n = e / hp, r = e - n * hp;
    T *gi = gates + n * 4 * hp + r;
    const float i = cl_ld(gi[0]), f = cl_ld(gi[hp]), o = cl_ld(gi[2 * hp]), g = cl_ld(gi[3 * hp]);
    const float tc = tanhf(cl_ld(c[e]));
    const float dhv = dh[e];
    const float d_o = dhv * tc;
    const float dct = dc[e] + dhv * o * (1.0f - tc * tc);
    /* no c_prev: df is 0, as on the CPU, even where dct is inf or NaN */
    const float di = dct * g, dg = dct * i, df = c_prev ? dct * cl_ld(c_prev[e]) : 0.0f;
    dc[e] = dct * f;
    gi[0] = cl_st<T>(di * i * (1.0f - i));
    gi[hp] = cl_st<T>(df * f * (1.0f - f));
    gi[2 * hp] = cl_st<T>(d_o * o * (1.0f - o));
    gi[3 * hp] = cl_st<T>(dg * (1.0f - g * g));
  }
}

static cl_status check_gates(cl_backend *be, const cl_gates_shape *s, const char *what) {
  if (s->N < 0 || s->hidden < 0 || s->P < 0) {
    snprintf(be->err, sizeof be->err, "cuda %s: bad shape N=%d hidden=%d P=%d", what, s->N,
             s->hidden, s->P);
    return CL_E_INVALID;
  }
  return CL_OK;
}

template <typename T>
static cl_status forward_t(cl_backend *be, const cl_gates_shape *s, void *z, const void *c_prev,
                           void *c, void *h) {
  const size_t hp = (size_t)s->hidden * s->P, total = (size_t)s->N * hp;
  if (total == 0) return CL_OK;
  gates_forward_kernel<T><<<cl_cuda_blocks(total), CL_CUDA_THREADS, 0, cl_cuda_ctx_of(be)->stream>>>(
      (T *)z, (const T *)c_prev, (T *)c, (T *)h, total, hp);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

template <typename T>
static cl_status backward_t(cl_backend *be, const cl_gates_shape *s, void *gates, const void *c,
                            const void *c_prev, const float *dh, float *dc) {
  const size_t hp = (size_t)s->hidden * s->P, total = (size_t)s->N * hp;
  if (total == 0) return CL_OK;
  gates_backward_kernel<T><<<cl_cuda_blocks(total), CL_CUDA_THREADS, 0, cl_cuda_ctx_of(be)->stream>>>(
      (T *)gates, (const T *)c, (const T *)c_prev, dh, dc, total, hp);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

cl_status cl_cuda_gates_forward(cl_backend *be, const cl_gates_shape *s, void *z,
                                const void *c_prev, void *c, void *h) {
  cl_status st = check_gates(be, s, "gates_forward");
  if (st != CL_OK) return st;
  switch (s->dtype) {
  case CL_F32:
    return forward_t<float>(be, s, z, c_prev, c, h);
  case CL_F16:
    return forward_t<__half>(be, s, z, c_prev, c, h);
  case CL_BF16:
    return forward_t<__nv_bfloat16>(be, s, z, c_prev, c, h);
  }
  return cl_cuda_bad_dtype(be, s->dtype, "gates_forward");
}

cl_status cl_cuda_gates_backward(cl_backend *be, const cl_gates_shape *s, void *gates,
                                 const void *c, const void *c_prev, const float *dh, float *dc) {
  cl_status st = check_gates(be, s, "gates_backward");
  if (st != CL_OK) return st;
  switch (s->dtype) {
  case CL_F32:
    return backward_t<float>(be, s, gates, c, c_prev, dh, dc);
  case CL_F16:
    return backward_t<__half>(be, s, gates, c, c_prev, dh, dc);
  case CL_BF16:
    return backward_t<__nv_bfloat16>(be, s, gates, c, c_prev, dh, dc);
  }
  return cl_cuda_bad_dtype(be, s->dtype, "gates_backward");
}
