/*
 * cuda/cuda_cell.cu -- the fused ConvLSTM cell of the CUDA backend (twin of
 * src/cpu/cpu_cell.c): one kernel for the gate nonlinearities and the cell
 * update forward, one for their gradient backward.
 *
 * Each thread owns one (image, channel, pixel) of the state and reads the four
 * gates of it, so a kernel touches every element once. Either layout
 * (backend.h, cl_layout; NHWC: peepholes per channel only) is walked in
 * memory order (elem_of), so that neighbouring threads load neighbouring
 * elements. Gates, c and h are stored as float, __half or __nv_bfloat16,
 * the gradients dh and dc as float always; the arithmetic is float
 * throughout, with accurate expf/tanhf (no fast-math) so that float32
 * agrees with the CPU backend to rounding. With peepholes (PEEP, a template
 * flag, so the kernels without them are the code they were) the weights
 * are float32 [3, hidden, pp]. It is not the convolution (cudnn_conv.cu)
 * nor the peephole weights' gradient (cuda_peephole.cu).
 */
#include <stdio.h> /* snprintf */

#include "cuda_common.h" /* context, check macros, cl_ld/cl_st, CL_CUDA_FOR */

static __device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }

/* The geometry of a call: hid channels of P pixels, hp = hid * P, in
 * layout nhwc (0: NCHW). Passed by value to the kernels. */
struct cell_geom {
  size_t hid, P, hp;
  int nhwc;
};

/* State element e of c, h, dh, dc (cl_cell_at), its gates at z + gate,
 * gate + stride, gate + 2 stride, gate + 3 stride (cl_gate_at: stride hp
 * in NCHW, hid in NHWC), its channel and pixel. */
struct elem_at {
  size_t e, gate, stride, ch, p;
};

/* Element e counted in memory order, so that neighbouring threads touch
 * neighbouring state (and, in both layouts, gate) elements. */
static __device__ __forceinline__ elem_at elem_of(const cell_geom &g, size_t e) {
  elem_at a;
  a.e = e;
  if (g.nhwc) { /* e = m hid + ch, m = n P + p */
    const size_t m = e / g.hid;
    a.ch = e - m * g.hid;
    a.p = m % g.P;
    a.gate = m * 4 * g.hid + a.ch;
    a.stride = g.hid;
  } else { /* e = n hp + r, r = ch P + p */
    const size_t n = e / g.hp, r = e - n * g.hp;
    a.ch = r / g.P;
    a.p = r - a.ch * g.P;
    a.gate = n * 4 * g.hp + r;
    a.stride = g.hp;
  }
  return a;
}

/* Element (n, ch, p), without divisions (the fused bias gradient). */
static __device__ __forceinline__ elem_at elem_at_pixel(const cell_geom &g, size_t n, size_t ch,
                                                        size_t p) {
  const cl_layout l = g.nhwc ? CL_NHWC : CL_NCHW;
  elem_at a;
  a.e = cl_act_at(l, g.hid, g.P, n, ch, p);
  a.gate = cl_act_at(l, 4 * g.hid, g.P, n, ch, p); /* gate 0 (i) of channel ch */
  a.stride = g.nhwc ? g.hid : g.hp;
  a.ch = ch;
  a.p = p;
  return a;
}

/* The peephole weights in wp [3, hid, pp]: w_ci at wp[k], w_cf at
 * wp[k + per], w_co at wp[k + 2 per] for the element's k (peep_index). */
struct peep_at {
  const float *wp;
  size_t pp, per; /* per = hid * pp */
};
static __device__ __forceinline__ size_t peep_index(const peep_at &w, const elem_at &a) {
  return w.pp == 1 ? a.ch : a.ch * w.pp + a.p;
}

/* z [N, 4*hid, P] (pre-activations in, activations out), c_prev/c/h [N, hid, P],
 * or channels last [N, P, 4 hid] and [N, P, hid] (geom.nhwc). BIAS (the
 * fused bias, CONVLSTM_CUDA_FUSED_BIAS): bias[q hid + ch] added in float
 * to gate q's stored pre-activation; the kernel without it is the code it
 * was before (a template flag, as PEEP). */
template <typename T, bool PEEP, bool BIAS>
__global__ void gates_forward_kernel(T *z, const T *c_prev, peep_at w, const float *bias, T *c,
                                     T *h, size_t total, cell_geom geom) {
  CL_CUDA_FOR(e, total) {
    const elem_at a = elem_of(geom, e);
    const size_t hp = a.stride; /* from one gate of e to the next */
    T *zi = z + a.gate; /* the gates of e: zi[0], zi[hp], zi[2hp], zi[3hp] */
    float zi_ = cl_ld(zi[0]), zf_ = cl_ld(zi[hp]);
    /* (each load where it was before BIAS existed: without it, the same code) */
    const size_t ch = BIAS ? a.ch : 0, hid = BIAS ? geom.hid : 0;
    if (BIAS) zi_ += bias[ch], zf_ += bias[hid + ch];
    const size_t k = PEEP ? peep_index(w, a) : 0;
    if (PEEP && c_prev) {
      const float cp = cl_ld(c_prev[e]);
      zi_ += w.wp[k] * cp;
      zf_ += w.wp[k + w.per] * cp;
    }
    const float i = sigmoidf_(zi_);
    const float f = sigmoidf_(zf_);
    const float g = tanhf(BIAS ? cl_ld(zi[3 * hp]) + bias[3 * hid + ch] : cl_ld(zi[3 * hp]));
    /* no c_prev: c = i*g exactly as the CPU computes it (f*0 would turn a
     * NaN f into a NaN c) */
    const float cn = c_prev ? f * cl_ld(c_prev[e]) + i * g : i * g;
    const float zo_ = BIAS ? cl_ld(zi[2 * hp]) + bias[2 * hid + ch] : cl_ld(zi[2 * hp]);
    const float o = sigmoidf_(PEEP ? zo_ + w.wp[k + 2 * w.per] * cn : zo_);
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
template <typename T, bool PEEP>
static __device__ __forceinline__ void cell_grad_at(T *gates, const T *c, const T *c_prev,
                                                    const peep_at &w, const float *dh, float *dc,
                                                    const elem_at &a) {
  {
    const size_t e = a.e, hp = a.stride;
    T *gi = gates + a.gate;
    const float i = cl_ld(gi[0]), f = cl_ld(gi[hp]), o = cl_ld(gi[2 * hp]), g = cl_ld(gi[3 * hp]);
    const float tc = tanhf(cl_ld(c[e]));
    const float dhv = dh[e];
    const float d_o = dhv * tc;
    const float dzo = d_o * o * (1.0f - o);
    const size_t k = PEEP ? peep_index(w, a) : 0;
    /* with peepholes o saw c_t through w_co */
    float dct = dc[e] + dhv * o * (1.0f - tc * tc);
    if (PEEP) dct += dzo * w.wp[k + 2 * w.per];
    /* no c_prev: df is 0, as on the CPU, even where dct is inf or NaN */
    const float di = dct * g, dg = dct * i, df = c_prev ? dct * cl_ld(c_prev[e]) : 0.0f;
    const float dzi = di * i * (1.0f - i), dzf = df * f * (1.0f - f);
    /* and i, f saw c_{t-1} through w_ci, w_cf */
    dc[e] = PEEP ? dct * f + dzi * w.wp[k] + dzf * w.wp[k + w.per] : dct * f;
    gi[0] = cl_st<T>(dzi);
    gi[hp] = cl_st<T>(dzf);
    gi[2 * hp] = cl_st<T>(dzo);
    gi[3 * hp] = cl_st<T>(dg * (1.0f - g * g));
  }
}

template <typename T, bool PEEP>
__global__ void gates_backward_kernel(T *gates, const T *c, const T *c_prev, peep_at w,
                                      const float *dh, float *dc, size_t total, cell_geom geom) {
  CL_CUDA_FOR(e, total) cell_grad_at<T, PEEP>(gates, c, c_prev, w, dh, dc, elem_of(geom, e));
}

/* ---- the fused bias gradient (CONVLSTM_CUDA_FUSED_BIAS) ------------------
 * The same per-element gradient, with the blocks laid out by channel so
 * that each sums what it wrote: block (ch, j) runs channel ch's elements
 * j*per .. (j+1)*per - 1 of its N*P (image-major), each thread a fixed
 * stride of them, and adds up the four dz it stored (as stored: rounded to
 * T) per gate; a fixed tree over the block, then, with one block row, into
 * dbias, else into part[j 4hid + q hid + ch], which bias_part_finish adds
 * in the order of j. No atomics: the same bits run after run. Channels
 * last, a block's elements lie hid apart, but the sums run in the same
 * order, so dbias has the same bits in both layouts. */
enum { BIAS_THREADS = 512 };

/* Four sums over the block, valid in thread 0 (blockDim.x = BIAS_THREADS). */
static __device__ __forceinline__ void block_sum4(float v[4]) {
  __shared__ float warp_sums[4][BIAS_THREADS / 32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int q = 0; q < 4; q++) {
    for (int o = 16; o > 0; o >>= 1) v[q] += __shfl_down_sync(0xffffffffu, v[q], o);
    if (lane == 0) warp_sums[q][warp] = v[q];
  }
  __syncthreads();
  if (warp == 0) {
    const int n_warps = (blockDim.x + 31) >> 5;
    for (int q = 0; q < 4; q++) {
      v[q] = lane < n_warps ? warp_sums[q][lane] : 0.0f;
      for (int o = 16; o > 0; o >>= 1) v[q] += __shfl_down_sync(0xffffffffu, v[q], o);
    }
  }
}

template <typename T, bool PEEP>
__global__ void __launch_bounds__(BIAS_THREADS)
    gates_backward_bias_kernel(T *gates, const T *c, const T *c_prev, peep_at w, const float *dh,
                               float *dc, float *dbias, double *part, int N, cell_geom geom,
                               size_t per) {
  const int ch = blockIdx.x, hid = (int)geom.hid;
  const size_t P = geom.P, all = (size_t)N * P;
  const size_t q0 = (size_t)blockIdx.y * per, q1 = q0 + per < all ? q0 + per : all;
  float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (size_t q = q0 + threadIdx.x; q < q1; q += blockDim.x) {
    const size_t n = q / P;
    const elem_at a = elem_at_pixel(geom, n, (size_t)ch, q - n * P);
    cell_grad_at<T, PEEP>(gates, c, c_prev, w, dh, dc, a);
    const T *gi = gates + a.gate;
    for (int g = 0; g < 4; g++) sum[g] += cl_ld(gi[(size_t)g * a.stride]);
  }
  block_sum4(sum);
  if (threadIdx.x != 0) return;
  for (int g = 0; g < 4; g++) {
    const size_t k = (size_t)g * hid + ch;
    if (gridDim.y == 1)
      dbias[k] += sum[g];
    else
      part[(size_t)blockIdx.y * 4 * hid + k] = sum[g];
  }
}

__global__ void bias_part_finish_kernel(const double *part, float *dbias, int K, int ny) {
  CL_CUDA_FOR(k, (size_t)K) {
    double s = 0.0;
    for (int j = 0; j < ny; j++) s += part[(size_t)j * K + k];
    dbias[k] += (float)s;
  }
}

static cl_status check_gates(cl_backend *be, const cl_gates_shape *s, const float *wp,
                             const char *what) {
  if (s->N < 0 || s->hidden < 0 || s->P < 0 || s->peep < CL_PEEP_NONE ||
      s->peep > CL_PEEP_POSITION || (s->peep != CL_PEEP_NONE && !wp) ||
      (s->layout != CL_NCHW && s->layout != CL_NHWC)) {
    snprintf(be->err, sizeof be->err, "cuda %s: bad shape N=%d hidden=%d P=%d peep=%d layout=%d%s",
             what, s->N, s->hidden, s->P, (int)s->peep, (int)s->layout,
             s->peep != CL_PEEP_NONE && !wp ? " without weights" : "");
    return CL_E_INVALID;
  }
  if (s->layout == CL_NHWC && s->peep == CL_PEEP_POSITION) {
    snprintf(be->err, sizeof be->err,
             "cuda %s: channels-last cells take peepholes per channel only", what);
    return CL_E_UNSUPPORTED;
  }
  return CL_OK;
}

static peep_at peep_of(const cl_gates_shape *s, const float *wp) {
  const size_t pp = (size_t)cl_gates_peep_pixels(s);
  peep_at w = {wp, pp, (size_t)s->hidden * pp};
  return w;
}

static cell_geom geom_of(const cl_gates_shape *s) {
  cell_geom g = {(size_t)s->hidden, (size_t)s->P, (size_t)s->hidden * s->P,
                 s->layout == CL_NHWC};
  return g;
}

template <typename T, bool PEEP>
static void forward_launch(T *z, const T *c_prev, peep_at w, const float *bias, T *c, T *h,
                           size_t total, cell_geom geom, cudaStream_t stream) {
  const unsigned blocks = cl_cuda_blocks(total);
  if (bias)
    gates_forward_kernel<T, PEEP, true><<<blocks, CL_CUDA_THREADS, 0, stream>>>(
        z, c_prev, w, bias, c, h, total, geom);
  else
    gates_forward_kernel<T, PEEP, false><<<blocks, CL_CUDA_THREADS, 0, stream>>>(
        z, c_prev, w, NULL, c, h, total, geom);
}

template <typename T>
static cl_status forward_t(cl_backend *be, const cl_gates_shape *s, void *z, const void *c_prev,
                           const float *wp, const float *bias, void *c, void *h) {
  const size_t hp = (size_t)s->hidden * s->P, total = (size_t)s->N * hp;
  if (total == 0) return CL_OK;
  cudaStream_t stream = cl_cuda_ctx_of(be)->stream;
  if (s->peep == CL_PEEP_NONE)
    forward_launch<T, false>((T *)z, (const T *)c_prev, peep_of(s, NULL), bias, (T *)c, (T *)h,
                             total, geom_of(s), stream);
  else
    forward_launch<T, true>((T *)z, (const T *)c_prev, peep_of(s, wp), bias, (T *)c, (T *)h,
                            total, geom_of(s), stream);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

/* The fused bias gradient's grid: hidden block columns, and rows enough to
 * give the GPU some 256 blocks, as many as the scratch's partials hold
 * (d_partials: the stream runs its users one after another, and none
 * keeps them across a call); one row, no partials, when they hold too few
 * (4 hidden > CL_CUDA_MAX_PARTIALS) or there is no scratch. */
template <typename T>
static cl_status backward_bias_t(cl_backend *be, const cl_gates_shape *s, T *gates, const T *c,
                                 const T *c_prev, peep_at w, const float *dh, float *dc,
                                 float *dbias) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const int K = 4 * s->hidden;
  const size_t all = (size_t)s->N * s->P;
  size_t ny = (256 + (size_t)s->hidden - 1) / (size_t)s->hidden;
  const size_t fit = ctx->d_partials ? CL_CUDA_MAX_PARTIALS / (size_t)K : 1;
  const size_t most = (all + BIAS_THREADS - 1) / BIAS_THREADS; /* a thread's worth each, at least */
  if (ny > fit) ny = fit;
  if (ny > most) ny = most;
  if (ny < 1) ny = 1;
  const size_t per = (all + ny - 1) / ny;
  ny = (all + per - 1) / per;
  dim3 grid((unsigned)s->hidden, (unsigned)ny);
  if (s->peep == CL_PEEP_NONE)
    gates_backward_bias_kernel<T, false><<<grid, BIAS_THREADS, 0, ctx->stream>>>(
        gates, c, c_prev, w, dh, dc, dbias, ctx->d_partials, s->N, geom_of(s), per);
  else
    gates_backward_bias_kernel<T, true><<<grid, BIAS_THREADS, 0, ctx->stream>>>(
        gates, c, c_prev, w, dh, dc, dbias, ctx->d_partials, s->N, geom_of(s), per);
  CL_CUDA_LAUNCH_CHECK(be);
  if (ny > 1) {
    bias_part_finish_kernel<<<cl_cuda_blocks((size_t)K), CL_CUDA_THREADS, 0, ctx->stream>>>(
        ctx->d_partials, dbias, K, (int)ny);
    CL_CUDA_LAUNCH_CHECK(be);
  }
  return CL_OK;
}

template <typename T>
static cl_status backward_t(cl_backend *be, const cl_gates_shape *s, void *gates, const void *c,
                            const void *c_prev, const float *wp, const float *dh, float *dc,
                            float *dbias) {
  const size_t hp = (size_t)s->hidden * s->P, total = (size_t)s->N * hp;
  if (total == 0) return CL_OK;
  if (dbias)
    return backward_bias_t<T>(be, s, (T *)gates, (const T *)c, (const T *)c_prev,
                              peep_of(s, s->peep == CL_PEEP_NONE ? NULL : wp), dh, dc, dbias);
  const unsigned blocks = cl_cuda_blocks(total);
  cudaStream_t stream = cl_cuda_ctx_of(be)->stream;
  if (s->peep == CL_PEEP_NONE)
    gates_backward_kernel<T, false><<<blocks, CL_CUDA_THREADS, 0, stream>>>(
        (T *)gates, (const T *)c, (const T *)c_prev, peep_of(s, NULL), dh, dc, total,
        geom_of(s));
  else
    gates_backward_kernel<T, true><<<blocks, CL_CUDA_THREADS, 0, stream>>>(
        (T *)gates, (const T *)c, (const T *)c_prev, peep_of(s, wp), dh, dc, total, geom_of(s));
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

cl_status cl_cuda_gates_forward(cl_backend *be, const cl_gates_shape *s, void *z,
                                const void *c_prev, const float *wp, const float *bias, void *c,
                                void *h) {
  cl_status st = check_gates(be, s, wp, "gates_forward");
  if (st != CL_OK) return st;
  switch (s->dtype) {
  case CL_F32:
    return forward_t<float>(be, s, z, c_prev, wp, bias, c, h);
  case CL_F16:
    return forward_t<__half>(be, s, z, c_prev, wp, bias, c, h);
  case CL_BF16:
    return forward_t<__nv_bfloat16>(be, s, z, c_prev, wp, bias, c, h);
  }
  return cl_cuda_bad_dtype(be, s->dtype, "gates_forward");
}

cl_status cl_cuda_gates_backward(cl_backend *be, const cl_gates_shape *s, void *gates,
                                 const void *c, const void *c_prev, const float *wp,
                                 const float *dh, float *dc, float *dbias) {
  cl_status st = check_gates(be, s, wp, "gates_backward");
  if (st != CL_OK) return st;
  switch (s->dtype) {
  case CL_F32:
    return backward_t<float>(be, s, gates, c, c_prev, wp, dh, dc, dbias);
  case CL_F16:
    return backward_t<__half>(be, s, gates, c, c_prev, wp, dh, dc, dbias);
  case CL_BF16:
    return backward_t<__nv_bfloat16>(be, s, gates, c, c_prev, wp, dh, dc, dbias);
  }
  return cl_cuda_bad_dtype(be, s->dtype, "gates_backward");
}
