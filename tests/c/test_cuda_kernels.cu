/*
 * tests/c/test_cuda_kernels.cu -- every slot of the CUDA backend against plain
 * CPU loops written here, on shapes chosen to catch indexing mistakes
 * (kernel 1, 3, 5; H != W; odd sizes; accumulate on and off; bias or none;
 * float32, float16, bfloat16; backward data in slices of few images;
 * activations at odd element offsets; algorithms timed by cudnnFind). The
 * storage types follow core/backend.h: tensors typed void* in the storage
 * type, converted on the host by core/half.h (which the device's rounding
 * must match bit for bit), everything typed float* in float32. Each
 * convolution gets exactly conv_workspace() bytes, followed by a guard band
 * that must come back untouched. Prints the max abs and rel error of each
 * check and exits 1 if any fails.
 *
 * Without a usable GPU it checks that creating the backend fails cleanly,
 * prints "no GPU: skipped" and exits 77 (skipped, for tests/c/run.sh). It
 * is not a test of the core or of the CPU backend (tests/c/test_cpu_*.c,
 * test_core_*.c), and the references
 * here are deliberately naive (double accumulation, direct loops).
 *
 * Build: nvcc -std=c++17 -Isrc tests/c/test_cuda_kernels.cu src/cuda/cu*.cu -lcudnn -lcudart
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "core/backend.h" /* the table under test */
}
#include "core/half.h"      /* the core's storage conversions, the reference */

static int n_checks = 0, n_failed = 0;

static const char *status_str(cl_status s) {
  switch (s) {
  case CL_OK: return "CL_OK";
  case CL_E_INVALID: return "CL_E_INVALID";
  case CL_E_OOM: return "CL_E_OOM";
  case CL_E_UNSUPPORTED: return "CL_E_UNSUPPORTED";
  case CL_E_BACKEND: return "CL_E_BACKEND";
  case CL_E_STATE: return "CL_E_STATE";
  case CL_E_INTERNAL: return "CL_E_INTERNAL";
  }
  return "?";
}

static const char *dtype_str(cl_dtype t) {
  return t == CL_F32 ? "f32" : t == CL_F16 ? "f16" : t == CL_BF16 ? "bf16" : "?";
}

/* A failed call ends the current case (return false) after reporting it. */
#define CALL(be, call)                                                                    \
  do {                                                                                    \
    cl_status s_ = (call);                                                                \
    if (s_ != CL_OK) {                                                                    \
      printf("FAIL  %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #call, status_str(s_),    \
             (be)->err);                                                                  \
      n_checks++;                                                                         \
      n_failed++;                                                                         \
      return false;                                                                       \
    }                                                                                     \
  } while (0)

/* ---- host helpers ------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rand_u64(void) { /* splitmix64 */
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static float urand(float lo, float hi) { /* [lo, hi) */
  return lo + (hi - lo) * (float)((double)(rand_u64() >> 11) / 9007199254740992.0);
}

static void fill(float *a, size_t n, float lo, float hi) {
  for (size_t i = 0; i < n; i++) a[i] = urand(lo, hi);
}

/* Storage-type bytes of host floats, and back, as the core converts them.
 * Values are first rounded with round_to so that the reference sees exactly
 * what the GPU reads. */
static void to_storage(cl_dtype t, const float *src, void *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t == CL_F32) ((float *)dst)[i] = src[i];
    else if (t == CL_F16) ((uint16_t *)dst)[i] = cl_f32_to_f16(src[i]);
    else ((uint16_t *)dst)[i] = cl_f32_to_bf16(src[i]);
  }
}

static void from_storage(cl_dtype t, const void *src, float *dst, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t == CL_F32) dst[i] = ((const float *)src)[i];
    else if (t == CL_F16) dst[i] = cl_f16_to_f32(((const uint16_t *)src)[i]);
    else dst[i] = cl_bf16_to_f32(((const uint16_t *)src)[i]);
  }
}

static void round_to(cl_dtype t, float *a, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (t == CL_F16) a[i] = cl_f16_to_f32(cl_f32_to_f16(a[i]));
    else if (t == CL_BF16) a[i] = cl_bf16_to_f32(cl_f32_to_bf16(a[i]));
  }
}

/* |got - ref| <= tol * (|ref| + scale) elementwise, scale = max(floor,
 * max|ref|) so that sums whose terms cancel are judged against the size of
 * the terms; floor 0 judges small arrays by their own size. */
static bool compare(const char *what, const float *got, const double *ref, size_t n, double tol,
                    double floor = 1.0) {
  double scale = floor, max_abs = 0.0, max_rel = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  size_t bad = 0, first_bad = 0;
  for (size_t i = 0; i < n; i++) {
    const double d = fabs((double)got[i] - ref[i]);
    if (!(d <= tol * (fabs(ref[i]) + scale))) { /* NaN fails too */
      if (bad++ == 0) first_bad = i;
    }
    if (isnan(d)) {
      max_abs = max_rel = NAN;
      continue;
    }
    if (d > max_abs) max_abs = d; /* stays NaN once NaN */
    const double r = d / fmax(fabs(ref[i]), 1e-30);
    if (fabs(ref[i]) > 1e-3 * scale && r > max_rel) max_rel = r;
  }
  n_checks++;
  if (bad) n_failed++;
  printf("%s  %-58s n=%-8zu max_abs=%.3e max_rel=%.3e tol=%.1e", bad ? "FAIL" : "ok  ", what, n,
         max_abs, max_rel, tol);
  if (bad)
    printf("  (%zu bad, first [%zu]: got %.9g want %.9g)", bad, first_bad, got[first_bad],
           ref[first_bad]);
  printf("\n");
  return bad == 0;
}

static bool expect(bool ok, const char *what) {
  n_checks++;
  if (!ok) n_failed++;
  printf("%s  %s\n", ok ? "ok  " : "FAIL", what);
  return ok;
}

static double tol_for(cl_dtype t) { return t == CL_F32 ? 2e-5 : t == CL_F16 ? 4e-3 : 2.5e-2; }

/* A convolution's workspace: exactly `bytes` (NULL when 0), followed by a
 * guard band of a known pattern that no call may touch. */
static const size_t GUARD = 4096;

static bool guard_intact(cl_backend *be, const void *ws, size_t bytes, const char *label) {
  if (!ws) return true;
  unsigned char g[GUARD];
  if (be->iface->download(be, g, (const char *)ws + bytes, GUARD) != CL_OK) return false;
  size_t bad = 0;
  for (size_t i = 0; i < GUARD; i++) bad += g[i] != (unsigned char)(0xA5 ^ i);
  char what[256];
  snprintf(what, sizeof what, "%s: nothing written past conv_workspace() bytes", label);
  return expect(bad == 0, what);
}

/* Device buffers freed at scope exit, so a failing case leaks nothing. */
struct dbuf {
  cl_backend *be;
  void *p;
  size_t bytes;
  dbuf(cl_backend *b) : be(b), p(NULL), bytes(0) {}
  ~dbuf() { be->iface->free(be, p); }
  cl_status alloc(size_t n) {
    bytes = n;
    return be->iface->alloc(be, n, &p);
  }
};

/* ---- memory slots ------------------------------------------------------ */

static bool test_memory(cl_backend *be) {
  const cl_backend_i *f = be->iface;
  size_t fr = 0, tot = 0;
  CALL(be, f->mem_info(be, &fr, &tot));
  printf("      device memory: %.1f MiB free of %.1f MiB\n", fr / 1048576.0, tot / 1048576.0);
  expect(tot > 0 && fr <= tot, "mem_info reports free <= total, total > 0");

  /* an allocation that cannot succeed is CL_E_OOM, and the backend lives on */
  void *huge = NULL;
  cl_status s = f->alloc(be, (size_t)1 << 50, &huge);
  expect(s == CL_E_OOM && huge == NULL, "alloc(1 PiB) -> CL_E_OOM, out NULL");
  printf("      message: %s\n", be->err);

  const size_t n = 100003;
  float *h = (float *)malloc(n * 4), *back = (float *)malloc(n * 4);
  double *ref = (double *)malloc(n * 8);
  fill(h, n, -1, 1);
  dbuf a(be), b(be);
  bool ok = false;
  if (a.alloc(n * 4) == CL_OK && b.alloc(n * 4) == CL_OK && f->upload(be, a.p, h, n * 4) == CL_OK &&
      f->copy(be, b.p, a.p, n * 4) == CL_OK && f->download(be, back, b.p, n * 4) == CL_OK) {
    for (size_t i = 0; i < n; i++) ref[i] = h[i];
    compare("upload, copy, download round trip", back, ref, n, 0.0);
    if (f->memset0(be, (char *)b.p + 4, (n - 2) * 4) == CL_OK &&
        f->download(be, back, b.p, n * 4) == CL_OK && f->synchronize(be) == CL_OK) {
      for (size_t i = 1; i + 1 < n; i++) ref[i] = 0.0;
      compare("memset0 of the inner part only", back, ref, n, 0.0);
      ok = true;
    }
  }
  if (!ok) expect(false, "memory slots");
  free(h);
  free(back);
  free(ref);
  return ok;
}

/* The pinned staging buffer: reused while large enough, replaced by a larger
 * one, refused (so the core falls back to malloc) above its cap, and a
 * working source and destination of upload and download. */
static bool test_host_stage(cl_backend *be) {
  const cl_backend_i *f = be->iface;
  if (!expect(f->host_stage != NULL, "host_stage slot is set")) return false;
  void *p1 = NULL, *p2 = NULL, *p3 = NULL;
  CALL(be, f->host_stage(be, 1000, &p1));
  CALL(be, f->host_stage(be, 10, &p2));
  expect(p1 != NULL && p1 == p2, "host_stage: a smaller request reuses the buffer");
  const size_t n = (size_t)3 << 20; /* 12 MiB of floats: more than the first buffer */
  CALL(be, f->host_stage(be, n * 4, &p3));
  expect(p3 != NULL, "host_stage: a larger request gets a buffer");
  cudaPointerAttributes attr;
  bool pinned =
      cudaPointerGetAttributes(&attr, p3) == cudaSuccess && attr.type == cudaMemoryTypeHost;
  (void)cudaGetLastError();
  expect(pinned, "host_stage: the buffer is page-locked host memory");
  float *h = (float *)p3;
  double *ref = (double *)malloc(n * 8);
  float *back = (float *)malloc(n * 4);
  fill(h, n, -1, 1);
  for (size_t i = 0; i < n; i++) ref[i] = h[i];
  bool ok = false;
  {
    dbuf a(be);
    CALL(be, a.alloc(n * 4));
    CALL(be, f->upload(be, a.p, h, n * 4));
    CALL(be, f->synchronize(be));
    memset(h, 0, n * 4);
    CALL(be, f->download(be, h, a.p, n * 4));
    memcpy(back, h, n * 4);
    ok = compare("upload from and download into the staging buffer", back, ref, n, 0.0);
  }
  void *huge = NULL;
  cl_status s = f->host_stage(be, (size_t)1 << 44, &huge);
  expect(s != CL_OK && huge == NULL, "host_stage(16 TiB) is refused, out NULL");
  void *p4 = NULL;
  CALL(be, f->host_stage(be, 100, &p4));
  expect(p4 == p3, "host_stage: the buffer survives a refused request");
  free(ref);
  free(back);
  return ok;
}

/* ---- convolution ------------------------------------------------------- */

/* y = conv(x, w) + b; dx = conv_transpose(dy, w); dw = correlate(dy, x);
 * db = sum dy -- by scattering over the forward's index set. */
static void conv_ref(const cl_conv_shape *s, const float *x, const float *w, const float *b,
                     const float *dy, double *y, double *dx, double *dw, double *db) {
  const int N = s->N, C = s->C, H = s->H, W = s->W, K = s->K, k = s->k, p = k / 2;
  memset(y, 0, sizeof(double) * N * K * H * W);
  memset(dx, 0, sizeof(double) * N * C * H * W);
  memset(dw, 0, sizeof(double) * K * C * k * k);
  memset(db, 0, sizeof(double) * K);
  for (int n = 0; n < N; n++)
    for (int o = 0; o < K; o++)
      for (int ho = 0; ho < H; ho++)
        for (int wo = 0; wo < W; wo++) {
          const size_t yi = (((size_t)n * K + o) * H + ho) * W + wo;
          y[yi] = b ? b[o] : 0.0;
          db[o] += dy[yi];
          for (int c = 0; c < C; c++)
            for (int i = 0; i < k; i++)
              for (int j = 0; j < k; j++) {
                const int hi = ho + i - p, wi = wo + j - p;
                if (hi < 0 || hi >= H || wi < 0 || wi >= W) continue;
                const size_t xi = (((size_t)n * C + c) * H + hi) * W + wi;
                const size_t wk = (((size_t)o * C + c) * k + i) * k + j;
                y[yi] += (double)x[xi] * w[wk];
                dx[xi] += (double)dy[yi] * w[wk];
                dw[wk] += (double)dy[yi] * x[xi];
              }
        }
}

/* tag names the backend when it is not the default one. offset > 0 puts x,
 * dy, y and dx that many elements past the start of their allocations, as
 * the core's per-step slices are (only the weights and the workspace are
 * whole allocations there): the backend must cope with pointers aligned to
 * one element only (cuDNN's convolutions do; its bias kernels fault on an
 * H100, so cudnn_conv.cu has its own). */
static bool test_conv(cl_backend *be, cl_conv_shape s, int accumulate, int with_bias,
                      const char *tag = "", int offset = 0) {
  const cl_backend_i *f = be->iface;
  const cl_dtype t = s.dtype;
  const size_t es = cl_dtype_size(t);
  const size_t nx = (size_t)s.N * s.C * s.H * s.W, ny = (size_t)s.N * s.K * s.H * s.W;
  const size_t nw = (size_t)s.K * s.C * s.k * s.k, nb = (size_t)s.K;
  char label[160];
  snprintf(label, sizeof label, "conv %s N%d C%d %dx%d K%d k%d acc%d bias%d%s%s", dtype_str(t),
           s.N, s.C, s.H, s.W, s.K, s.k, accumulate, with_bias, offset ? " off+1" : "", tag);

  float *x = (float *)malloc(nx * 4), *dy = (float *)malloc(ny * 4), *w = (float *)malloc(nw * 4);
  float *b = (float *)malloc(nb * 4), *y0 = (float *)malloc(ny * 4), *dx0 = (float *)malloc(nx * 4);
  float *dw0 = (float *)malloc(nw * 4), *db0 = (float *)malloc(nb * 4);
  float *got = (float *)malloc((nx > ny ? nx : ny) * 4 + nw * 4);
  double *ry = (double *)malloc(ny * 8), *rdx = (double *)malloc(nx * 8);
  double *rdw = (double *)malloc(nw * 8), *rdb = (double *)malloc(nb * 8);
  void *stage = malloc((nx > ny ? nx : ny) * 4 + 16);
  fill(x, nx, -1, 1);
  fill(dy, ny, -1, 1);
  fill(w, nw, -0.5f, 0.5f);
  fill(b, nb, -0.5f, 0.5f);
  fill(y0, ny, -1, 1);
  fill(dx0, nx, -1, 1);
  fill(dw0, nw, -1, 1);
  fill(db0, nb, -1, 1);
  /* what the GPU sees: storage-rounded activations and (cast) weights; dx
   * (an activation gradient), the weight and bias gradients and the bias
   * stay float */
  round_to(t, x, nx);
  round_to(t, dy, ny);
  round_to(t, y0, ny);
  float *wr = (float *)malloc(nw * 4);
  memcpy(wr, w, nw * 4);
  round_to(t, wr, nw);
  conv_ref(&s, x, wr, with_bias ? b : NULL, dy, ry, rdx, rdw, rdb);
  for (size_t i = 0; i < ny && accumulate; i++) ry[i] += y0[i];
  for (size_t i = 0; i < nx && accumulate; i++) rdx[i] += dx0[i];
  for (size_t i = 0; i < nw; i++) rdw[i] += dw0[i];
  for (size_t i = 0; i < nb; i++) rdb[i] += db0[i];

  bool ok = true;
  {
    dbuf dX(be), dDY(be), dW(be), dB(be), dY(be), dDX(be), dDW(be), dDB(be), dWS(be);
    size_t ws = 0;
    CALL(be, f->conv_workspace(be, &s, &ws));
    printf("      %s: workspace %zu bytes\n", label, ws);
    const size_t off = (size_t)offset;
    CALL(be, dX.alloc((nx + off) * es));
    CALL(be, dDY.alloc((ny + off) * es));
    CALL(be, dW.alloc(nw * 4));
    CALL(be, dB.alloc(nb * 4));
    CALL(be, dY.alloc((ny + off) * es));
    CALL(be, dDX.alloc((nx + off) * 4));
    void *X = (char *)dX.p + off * es, *DY = (char *)dDY.p + off * es;
    void *Y = (char *)dY.p + off * es, *DX = (char *)dDX.p + off * 4;
    CALL(be, dDW.alloc(nw * 4));
    CALL(be, dDB.alloc(nb * 4));
    /* exactly what conv_workspace asked for, then the guard band */
    void *wsp = NULL;
    if (ws > 0) {
      unsigned char g[GUARD];
      for (size_t i = 0; i < GUARD; i++) g[i] = (unsigned char)(0xA5 ^ i);
      CALL(be, dWS.alloc(ws + GUARD));
      CALL(be, f->upload(be, (char *)dWS.p + ws, g, GUARD));
      wsp = dWS.p;
    }
    to_storage(t, x, stage, nx);
    CALL(be, f->upload(be, X, stage, nx * es));
    to_storage(t, dy, stage, ny);
    CALL(be, f->upload(be, DY, stage, ny * es));
    CALL(be, f->upload(be, dW.p, w, nw * 4));
    CALL(be, f->upload(be, dB.p, b, nb * 4));
    CALL(be, f->upload(be, dDW.p, dw0, nw * 4));
    CALL(be, f->upload(be, dDB.p, db0, nb * 4));
    if (accumulate) {
      to_storage(t, y0, stage, ny);
      CALL(be, f->upload(be, Y, stage, ny * es));
      CALL(be, f->upload(be, DX, dx0, nx * 4));
    } else {
      /* all-ones bytes are NaN in every storage type: an output that is
       * overwritten must not be read */
      memset(stage, 0xFF, (nx > ny ? nx : ny) * 4);
      CALL(be, f->upload(be, Y, stage, ny * es));
      CALL(be, f->upload(be, DX, stage, nx * 4));
    }
    CALL(be, f->conv_forward(be, &s, X, (const float *)dW.p, with_bias ? (const float *)dB.p : NULL,
                             Y, accumulate, wsp));
    CALL(be, f->conv_backward_data(be, &s, DY, (const float *)dW.p, (float *)DX, accumulate,
                                   wsp));
    CALL(be, f->conv_backward_filter(be, &s, DY, X, (float *)dDW.p,
                                     with_bias ? (float *)dDB.p : NULL, wsp));
    ok &= guard_intact(be, wsp, ws, label);
    char what[200];
    CALL(be, f->download(be, stage, Y, ny * es));
    from_storage(t, stage, got, ny);
    snprintf(what, sizeof what, "%s: forward", label);
    ok &= compare(what, got, ry, ny, tol_for(t));
    CALL(be, f->download(be, got, DX, nx * 4));
    snprintf(what, sizeof what, "%s: backward data (float32 dx)", label);
    ok &= compare(what, got, rdx, nx, tol_for(t));
    CALL(be, f->download(be, got, dDW.p, nw * 4));
    snprintf(what, sizeof what, "%s: backward filter", label);
    ok &= compare(what, got, rdw, nw, tol_for(t));
    if (with_bias) {
      CALL(be, f->download(be, got, dDB.p, nb * 4));
      snprintf(what, sizeof what, "%s: bias gradient", label);
      ok &= compare(what, got, rdb, nb, tol_for(t));
    }
  }
  free(x), free(dy), free(w), free(wr), free(b), free(y0), free(dx0), free(dw0), free(db0);
  free(got), free(ry), free(rdx), free(rdw), free(rdb), free(stage);
  return ok;
}

/* ---- the fused cell ---------------------------------------------------- */

static double sig(double v) { return 1.0 / (1.0 + exp(-v)); }

static bool test_gates(cl_backend *be, cl_gates_shape s, int with_cprev) {
  const cl_backend_i *f = be->iface;
  const cl_dtype t = s.dtype;
  const size_t es = cl_dtype_size(t);
  const size_t hp = (size_t)s.hidden * s.P, ns = (size_t)s.N * hp, nz = 4 * ns;
  char label[120], what[200];
  snprintf(label, sizeof label, "gates %s N%d hidden%d P%d c_prev%s", dtype_str(t), s.N, s.hidden,
           s.P, with_cprev ? "" : "=NULL");
  float *z = (float *)malloc(nz * 4), *cp = (float *)malloc(ns * 4), *got = (float *)malloc(nz * 4);
  float *act = (float *)malloc(nz * 4), *c = (float *)malloc(ns * 4), *dh = (float *)malloc(ns * 4);
  float *dc = (float *)malloc(ns * 4);
  double *rz = (double *)malloc(nz * 8), *rc = (double *)malloc(ns * 8), *rh = (double *)malloc(ns * 8);
  double *rdz = (double *)malloc(nz * 8), *rdc = (double *)malloc(ns * 8);
  void *stage = malloc(nz * 4);
  fill(z, nz, -4, 4);
  fill(cp, ns, -2, 2);
  round_to(t, z, nz);
  round_to(t, cp, ns);
  /* backward inputs: plausible activations, independent of the forward */
  for (size_t n = 0; n < (size_t)s.N; n++)
    for (int g = 0; g < 4; g++)
      for (size_t r = 0; r < hp; r++)
        act[(n * 4 + g) * hp + r] = g < 3 ? urand(0.01f, 0.99f) : urand(-0.99f, 0.99f);
  fill(c, ns, -2, 2);
  fill(dh, ns, -1, 1);
  fill(dc, ns, -1, 1);
  /* dh and dc are float32 gradients for every storage type: not rounded */
  round_to(t, act, nz);
  round_to(t, c, ns);

  for (size_t n = 0; n < (size_t)s.N; n++)
    for (size_t r = 0; r < hp; r++) {
      const size_t e = n * hp + r, b = n * 4 * hp + r;
      /* forward */
      const double i = sig(z[b]), fg = sig(z[b + hp]), o = sig(z[b + 2 * hp]), g = tanh(z[b + 3 * hp]);
      const double cprev = with_cprev ? cp[e] : 0.0;
      rz[b] = i, rz[b + hp] = fg, rz[b + 2 * hp] = o, rz[b + 3 * hp] = g;
      rc[e] = fg * cprev + i * g;
      rh[e] = o * tanh(rc[e]);
      /* backward, the formulas of core/backend.h */
      const double ai = act[b], af = act[b + hp], ao = act[b + 2 * hp], ag = act[b + 3 * hp];
      const double tc = tanh((double)c[e]);
      const double d_o = dh[e] * tc;
      const double dct = dc[e] + dh[e] * ao * (1 - tc * tc);
      const double di = dct * ag, dg = dct * ai, df = dct * cprev;
      rdc[e] = dct * af;
      rdz[b] = di * ai * (1 - ai);
      rdz[b + hp] = df * af * (1 - af);
      rdz[b + 2 * hp] = d_o * ao * (1 - ao);
      rdz[b + 3 * hp] = dg * (1 - ag * ag);
    }

  bool ok = true;
  {
    dbuf dZ(be), dCP(be), dC(be), dH(be), dA(be), dCC(be), dDH(be), dDC(be);
    CALL(be, dZ.alloc(nz * es));
    CALL(be, dCP.alloc(ns * es));
    CALL(be, dC.alloc(ns * es));
    CALL(be, dH.alloc(ns * es));
    CALL(be, dA.alloc(nz * es));
    CALL(be, dCC.alloc(ns * es));
    CALL(be, dDH.alloc(ns * 4));
    CALL(be, dDC.alloc(ns * 4));
    to_storage(t, z, stage, nz);
    CALL(be, f->upload(be, dZ.p, stage, nz * es));
    to_storage(t, cp, stage, ns);
    CALL(be, f->upload(be, dCP.p, stage, ns * es));
    to_storage(t, act, stage, nz);
    CALL(be, f->upload(be, dA.p, stage, nz * es));
    to_storage(t, c, stage, ns);
    CALL(be, f->upload(be, dCC.p, stage, ns * es));
    CALL(be, f->upload(be, dDH.p, dh, ns * 4));
    CALL(be, f->upload(be, dDC.p, dc, ns * 4));

    CALL(be, f->gates_forward(be, &s, dZ.p, with_cprev ? dCP.p : NULL, dC.p, dH.p));
    CALL(be, f->gates_backward(be, &s, dA.p, dCC.p, with_cprev ? dCP.p : NULL,
                               (const float *)dDH.p, (float *)dDC.p));
    CALL(be, f->download(be, stage, dZ.p, nz * es));
    from_storage(t, stage, got, nz);
    snprintf(what, sizeof what, "%s: forward activations", label);
    ok &= compare(what, got, rz, nz, tol_for(t));
    CALL(be, f->download(be, stage, dC.p, ns * es));
    from_storage(t, stage, got, ns);
    snprintf(what, sizeof what, "%s: forward c", label);
    ok &= compare(what, got, rc, ns, tol_for(t));
    CALL(be, f->download(be, stage, dH.p, ns * es));
    from_storage(t, stage, got, ns);
    snprintf(what, sizeof what, "%s: forward h", label);
    ok &= compare(what, got, rh, ns, tol_for(t));
    CALL(be, f->download(be, stage, dA.p, nz * es));
    from_storage(t, stage, got, nz);
    snprintf(what, sizeof what, "%s: backward d pre-activations", label);
    ok &= compare(what, got, rdz, nz, tol_for(t));
    CALL(be, f->download(be, got, dDC.p, ns * 4));
    snprintf(what, sizeof what, "%s: backward dc_prev", label);
    ok &= compare(what, got, rdc, ns, tol_for(t));
  }
  free(z), free(cp), free(got), free(act), free(c), free(dh), free(dc);
  free(rz), free(rc), free(rh), free(rdz), free(rdc), free(stage);
  return ok;
}

/* ---- loss and optimizers ----------------------------------------------- */

/* grad_mode 0: no gradient; 1: its own buffer; 2: overwrite the target.
 * The prediction is in the storage type, target and gradient float32. */
static bool test_mse(cl_backend *be, cl_dtype t, size_t n, float scale, int grad_mode) {
  const cl_backend_i *f = be->iface;
  const size_t es = cl_dtype_size(t);
  char label[120], what[200];
  snprintf(label, sizeof label, "mse %s n=%zu scale=%g grad=%s", dtype_str(t), n, (double)scale,
           grad_mode == 0 ? "none" : grad_mode == 1 ? "own" : "in target");
  float *p = (float *)malloc(n * 4), *y = (float *)malloc(n * 4), *got = (float *)malloc(n * 4);
  double *rg = (double *)malloc(n * 8);
  void *stage = malloc(n * 4);
  fill(p, n, -2, 2);
  fill(y, n, -2, 2);
  round_to(t, p, n);
  double sum = 0.0;
  for (size_t i = 0; i < n; i++) {
    const float d = p[i] - y[i]; /* in float, as both backends compute it */
    sum += (double)d * (double)d;
    rg[i] = (double)scale * 2.0 * (double)d / (double)n;
  }
  const double rloss = sum / (double)n;
  bool ok = true;
  {
    dbuf dP(be), dY(be), dG(be);
    CALL(be, dP.alloc(n * es));
    CALL(be, dY.alloc(n * 4));
    CALL(be, dG.alloc(n * 4));
    to_storage(t, p, stage, n);
    CALL(be, f->upload(be, dP.p, stage, n * es));
    CALL(be, f->upload(be, dY.p, y, n * 4));
    float *g = (float *)(grad_mode == 0 ? NULL : grad_mode == 1 ? dG.p : dY.p);
    double loss = -1.0;
    CALL(be, f->mse(be, dP.p, (const float *)dY.p, n, t, scale, g, &loss));
    double lr = fabs(loss - rloss) / rloss;
    n_checks++;
    if (!(lr <= 1e-10)) n_failed++, ok = false;
    printf("%s  %-58s loss=%.17g want %.17g rel=%.2e\n", lr <= 1e-10 ? "ok  " : "FAIL", label,
           loss, rloss, lr);
    if (g) {
      CALL(be, f->download(be, got, g, n * 4));
      snprintf(what, sizeof what, "%s: gradient (float32)", label);
      /* roundings of scale*2/n, of the difference and of the product: a few
       * float32 ulps of every element, however small the gradient */
      ok &= compare(what, got, rg, n, 1e-6, 0.0);
    }
  }
  free(p), free(y), free(got), free(rg), free(stage);
  return ok;
}

/* g *= inv_scale with the non-finite flag. bad: -1 none, else the index
 * that gets the value `poison` (inf, NaN, or a finite value that
 * overflows once scaled). */
static bool test_grad_unscale(cl_backend *be, size_t n, float inv_scale, long bad, float poison) {
  const cl_backend_i *f = be->iface;
  char label[160];
  snprintf(label, sizeof label, "grad_unscale n=%zu inv_scale=%g poison[%ld]=%g", n,
           (double)inv_scale, bad, (double)poison);
  float *g = (float *)malloc(n * 4 + 4), *got = (float *)malloc(n * 4 + 4);
  double *ref = (double *)malloc(n * 8 + 8);
  fill(g, n, -1000, 1000);
  if (bad >= 0) g[bad] = poison;
  for (size_t i = 0; i < n; i++) ref[i] = (double)(g[i] * inv_scale); /* one float rounding */
  bool ok = true;
  {
    dbuf dG(be);
    CALL(be, dG.alloc(n * 4));
    CALL(be, f->upload(be, dG.p, g, n * 4));
    int found = -1;
    CALL(be, f->grad_unscale(be, (float *)dG.p, n, inv_scale, &found));
    char what[200];
    snprintf(what, sizeof what, "%s: found_nonfinite %d, want %d", label, found, bad >= 0);
    ok &= expect(found == (bad >= 0), what);
    if (n > 0) {
      CALL(be, f->download(be, got, dG.p, n * 4));
      if (bad >= 0) got[bad] = 0.0f, ref[bad] = 0.0; /* inf or NaN there: checked above */
      snprintf(what, sizeof what, "%s: values", label);
      ok &= compare(what, got, ref, n, 0.0);
    }
  }
  free(g), free(got), free(ref);
  return ok;
}

/* The device's float32 -> storage rounding against core/half.h, bit for
 * bit, on special values (ties, subnormals, overflow, inf, NaN) and random
 * bit patterns: y = 0 + bias rounds bias[k] into channel k of a 1x1
 * convolution of zeros. NaN must stay NaN (its payload may differ). */
static bool test_conversions(cl_backend *be, cl_dtype t) {
  const cl_backend_i *f = be->iface;
  static const float special[] = {
      0.0f, 1.0f, -1.0f, 0.1f, 1.0f / 3.0f, 65504.0f, 65519.0f, 65520.0f, 65536.0f, 1e5f,
      -1e5f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
      0x1p-14f, 0x1p-15f + 0x1p-25f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, 0x1.8p-25f, 0x1p-26f,
      6e-8f, 1e-8f, 3.0e38f, 3.389e38f, 3.4028235e38f, -3.4028235e38f, 1e-39f, 1e-45f,
      INFINITY, -INFINITY, NAN};
  const size_t n_special = sizeof special / sizeof special[0], n = n_special + 4096;
  float *b = (float *)malloc(n * 4);
  memcpy(b, special, sizeof special);
  for (size_t i = n_special; i < n; i++) {
    uint32_t u = (uint32_t)(rand_u64() >> 32);
    if (u == 0x80000000u) u = 0; /* 0 + -0 is +0: the sum would not carry -0 through */
    memcpy(&b[i], &u, 4);
  }
  cl_conv_shape s = {1, 1, 1, 1, (int)n, 1, t};
  char label[120];
  snprintf(label, sizeof label, "float32 -> %s rounding on the device, %zu values", dtype_str(t),
           n);
  uint16_t *got = (uint16_t *)malloc(n * 2);
  bool ok = true;
  {
    dbuf dX(be), dW(be), dB(be), dY(be), dWS(be);
    size_t ws = 0;
    CALL(be, f->conv_workspace(be, &s, &ws));
    const uint16_t zero16 = 0;
    CALL(be, dX.alloc(2));
    CALL(be, dW.alloc(n * 4));
    CALL(be, dB.alloc(n * 4));
    CALL(be, dY.alloc(n * 2));
    CALL(be, dWS.alloc(ws));
    CALL(be, f->upload(be, dX.p, &zero16, 2));
    CALL(be, f->memset0(be, dW.p, n * 4));
    CALL(be, f->upload(be, dB.p, b, n * 4));
    CALL(be, f->conv_forward(be, &s, dX.p, (const float *)dW.p, (const float *)dB.p, dY.p, 0,
                             dWS.p));
    CALL(be, f->download(be, got, dY.p, n * 2));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) {
      const uint16_t want = t == CL_F16 ? cl_f32_to_f16(b[i]) : cl_f32_to_bf16(b[i]);
      const float wv = t == CL_F16 ? cl_f16_to_f32(want) : cl_bf16_to_f32(want);
      const float gv = t == CL_F16 ? cl_f16_to_f32(got[i]) : cl_bf16_to_f32(got[i]);
      const bool same = isnan(wv) ? isnan(gv) : got[i] == want;
      if (!same && bad++ == 0) first = i;
    }
    n_checks++;
    if (bad) n_failed++, ok = false;
    printf("%s  %s", bad ? "FAIL" : "ok  ", label);
    if (bad) {
      const uint16_t want = t == CL_F16 ? cl_f32_to_f16(b[first]) : cl_f32_to_bf16(b[first]);
      printf("  (%zu differ, first %.9g: got 0x%04x want 0x%04x)", bad, (double)b[first],
             got[first], want);
    }
    printf("\n");
  }
  free(b), free(got);
  return ok;
}

static bool test_adam(cl_backend *be, size_t n, float wd) {
  const cl_backend_i *f = be->iface;
  char label[120], what[200];
  snprintf(label, sizeof label, "adam n=%zu weight_decay=%g", n, (double)wd);
  float *p = (float *)malloc(n * 4), *m = (float *)calloc(n, 4), *v = (float *)calloc(n, 4);
  float *g = (float *)malloc(n * 4), *got = (float *)malloc(n * 4);
  double *rp = (double *)malloc(n * 8), *rm = (double *)malloc(n * 8), *rv = (double *)malloc(n * 8);
  fill(p, n, -1, 1);
  cl_adam_hp hp = {1e-3f, 0.9f, 0.999f, 1e-8f, wd, 0, 0, 0};
  bool ok = true;
  {
    dbuf dP(be), dG(be), dM(be), dV(be);
    CALL(be, dP.alloc(n * 4));
    CALL(be, dG.alloc(n * 4));
    CALL(be, dM.alloc(n * 4));
    CALL(be, dV.alloc(n * 4));
    CALL(be, f->upload(be, dP.p, p, n * 4));
    CALL(be, f->memset0(be, dM.p, n * 4));
    CALL(be, f->memset0(be, dV.p, n * 4));
    for (int step = 1; step <= 3; step++) {
      fill(g, n, -1, 1);
      if (step == 2) g[0] = 0.0f; /* a zero gradient after a nonzero one */
      CALL(be, f->upload(be, dG.p, g, n * 4));
      hp.step = step;
      CALL(be, f->adam_update(be, (float *)dP.p, (const float *)dG.p, (float *)dM.p,
                              (float *)dV.p, NULL, n, &hp));
      /* reference in float, torch's order of operations */
      const double bc1 = 1.0 - pow((double)hp.beta1, step), bc2 = 1.0 - pow((double)hp.beta2, step);
      const float step_size = (float)((double)hp.lr / bc1), bc2s = (float)sqrt(bc2);
      for (size_t i = 0; i < n; i++) {
        float gi = g[i];
        if (wd != 0.0f) gi = gi + wd * p[i];
        m[i] = m[i] * hp.beta1 + (float)(1.0 - (double)hp.beta1) * gi;
        v[i] = v[i] * hp.beta2 + (float)(1.0 - (double)hp.beta2) * gi * gi;
        const float denom = sqrtf(v[i]) / bc2s + hp.eps;
        p[i] = p[i] - step_size * (m[i] / denom);
      }
    }
    for (size_t i = 0; i < n; i++) rp[i] = p[i], rm[i] = m[i], rv[i] = v[i];
    CALL(be, f->download(be, got, dP.p, n * 4));
    snprintf(what, sizeof what, "%s: parameters after 3 steps", label);
    ok &= compare(what, got, rp, n, 1e-6);
    CALL(be, f->download(be, got, dM.p, n * 4));
    snprintf(what, sizeof what, "%s: first moment", label);
    ok &= compare(what, got, rm, n, 1e-6);
    CALL(be, f->download(be, got, dV.p, n * 4));
    snprintf(what, sizeof what, "%s: second moment", label);
    ok &= compare(what, got, rv, n, 1e-6);
  }
  free(p), free(m), free(v), free(g), free(got), free(rp), free(rm), free(rv);
  return ok;
}

static bool test_sgd(cl_backend *be, size_t n, float momentum, float wd) {
  const cl_backend_i *f = be->iface;
  char label[120], what[200];
  snprintf(label, sizeof label, "sgd n=%zu momentum=%g weight_decay=%g", n, (double)momentum,
           (double)wd);
  float *p = (float *)malloc(n * 4), *buf = (float *)calloc(n, 4), *g = (float *)malloc(n * 4);
  float *got = (float *)malloc(n * 4);
  double *rp = (double *)malloc(n * 8), *rb = (double *)malloc(n * 8);
  fill(p, n, -1, 1);
  /* garbage in the buffer: the first step must not read it */
  fill(buf, n, -100, 100);
  cl_sgd_hp hp = {0.05f, momentum, wd, 1};
  bool ok = true;
  {
    dbuf dP(be), dG(be), dB(be);
    CALL(be, dP.alloc(n * 4));
    CALL(be, dG.alloc(n * 4));
    CALL(be, dB.alloc(n * 4));
    CALL(be, f->upload(be, dP.p, p, n * 4));
    CALL(be, f->upload(be, dB.p, buf, n * 4));
    for (int step = 1; step <= 3; step++) {
      fill(g, n, -1, 1);
      CALL(be, f->upload(be, dG.p, g, n * 4));
      hp.first = step == 1;
      CALL(be, f->sgd_update(be, (float *)dP.p, (const float *)dG.p,
                             momentum != 0.0f ? (float *)dB.p : NULL, n, &hp));
      for (size_t i = 0; i < n; i++) {
        float d = g[i];
        if (wd != 0.0f) d = d + wd * p[i];
        if (momentum != 0.0f) {
          buf[i] = hp.first ? d : buf[i] * momentum + d;
          d = buf[i];
        }
        p[i] = p[i] - hp.lr * d;
      }
    }
    for (size_t i = 0; i < n; i++) rp[i] = p[i], rb[i] = buf[i];
    CALL(be, f->download(be, got, dP.p, n * 4));
    snprintf(what, sizeof what, "%s: parameters after 3 steps", label);
    ok &= compare(what, got, rp, n, 1e-6);
    if (momentum != 0.0f) {
      CALL(be, f->download(be, got, dB.p, n * 4));
      snprintf(what, sizeof what, "%s: momentum buffer", label);
      ok &= compare(what, got, rb, n, 1e-6);
    }
  }
  free(p), free(buf), free(g), free(got), free(rp), free(rb);
  return ok;
}

/* ---- data sets: gather_rows ------------------------------------------- */

/* Rows of a time-major [T, N, row] tensor by index, against the CPU
 * backend's slot on the same bytes (and a plain loop): rows whose length
 * and pointers allow 16-byte words, only 4-byte ones (an offset of 4), and
 * neither (odd lengths, an offset of 1); repeated and unordered rows; a
 * window of steps; more rows than one grid holds. */
static bool test_gather(cl_backend *be, size_t row_bytes, size_t offset, int N, int T, int t0,
                        int nt, int nb) {
  char what[160];
  snprintf(what, sizeof what, "gather_rows: %zu-byte rows at offset %zu, N %d, steps %d..%d of %d, "
           "%d rows", row_bytes, offset, N, t0, t0 + nt - 1, T, nb);
  const cl_backend_i *f = be->iface;
  if (!expect(f->gather_rows != NULL, "gather_rows slot is set")) return false;
  cl_backend *cpu = NULL;
  if (!expect(cl_backend_cpu_create(1, &cpu) == CL_OK, "cpu backend for the reference")) return false;
  const size_t src_bytes = (size_t)T * N * row_bytes, dst_bytes = (size_t)nt * nb * row_bytes;
  unsigned char *src = (unsigned char *)malloc(src_bytes), *got = (unsigned char *)malloc(dst_bytes);
  unsigned char *want = (unsigned char *)malloc(dst_bytes), *loop = (unsigned char *)malloc(dst_bytes);
  int *idx = (int *)malloc((size_t)nb * sizeof(int));
  for (size_t i = 0; i < src_bytes; i++) src[i] = (unsigned char)(rand_u64() & 0xFF);
  for (int j = 0; j < nb; j++) idx[j] = (int)(rand_u64() % (uint64_t)N);
  if (nb > 1) idx[nb - 1] = idx[0]; /* a repeat */
  for (int t = 0; t < nt; t++)
    for (int j = 0; j < nb; j++)
      memcpy(loop + ((size_t)t * nb + j) * row_bytes,
             src + ((size_t)(t0 + t) * N + idx[j]) * row_bytes, row_bytes);
  bool ok = false;
  {
    dbuf d_src(be), d_dst(be), d_idx(be);
    CALL(be, d_src.alloc(src_bytes + offset));
    CALL(be, d_dst.alloc(dst_bytes + offset));
    CALL(be, d_idx.alloc((size_t)nb * sizeof(int)));
    unsigned char *ds = (unsigned char *)d_src.p + offset, *dd = (unsigned char *)d_dst.p + offset;
    CALL(be, f->upload(be, ds, src, src_bytes));
    CALL(be, f->upload(be, d_idx.p, idx, (size_t)nb * sizeof(int)));
    CALL(be, f->memset0(be, dd, dst_bytes));
    CALL(be, f->gather_rows(be, dd, ds, (const int *)d_idx.p, nb, N, t0, nt, row_bytes));
    CALL(be, f->download(be, got, dd, dst_bytes));
    CALL(cpu, cpu->iface->gather_rows(cpu, want, src, idx, nb, N, t0, nt, row_bytes));
    ok = memcmp(got, want, dst_bytes) == 0 && memcmp(want, loop, dst_bytes) == 0;
  }
  expect(ok, what);
  cpu->iface->destroy(cpu);
  free(src);
  free(got);
  free(want);
  free(loop);
  free(idx);
  return ok;
}

/* ---- main -------------------------------------------------------------- */

/* The updates' guards (adam_check, sgd_check), the CPU twin's table of
 * planted faults on a grid of many blocks: the first fault's key, nothing
 * written, and CL_FAULT_NONE where all stays finite. */
struct guard_case {
  const char *what;
  bool adam;
  float lr, wd, mom;
  int first;
  size_t at;
  float p, g, m, v;
  int part, is_nan; /* part -1: no fault */
};

static bool test_guard(cl_backend *be, const guard_case &r) {
  const cl_backend_i *f = be->iface;
  const size_t n = 300001;
  float *h[4], *back = (float *)malloc(n * 4);
  for (int a = 0; a < 4; a++) h[a] = (float *)malloc(n * 4), fill(h[a], n, a == 3 ? 0 : -1, 1);
  const float planted[4] = {r.p, r.g, r.m, r.v};
  for (int a = 0; a < 4; a++) h[a][r.at] = planted[a];
  cl_adam_hp ah = {r.lr, 0.9f, 0.999f, 1e-8f, r.wd, 3, 0, 0};
  cl_sgd_hp sh = {r.lr, r.mom, r.wd, r.first};
  uint64_t fault = 0;
  bool same = true;
  {
    dbuf d[4] = {dbuf(be), dbuf(be), dbuf(be), dbuf(be)};
    for (int a = 0; a < 4; a++) {
      CALL(be, d[a].alloc(n * 4));
      CALL(be, f->upload(be, d[a].p, h[a], n * 4));
    }
    const float *P = (const float *)d[0].p, *G = (const float *)d[1].p;
    const float *M = (const float *)d[2].p, *V = (const float *)d[3].p;
    CALL(be, r.adam ? f->adam_check(be, P, G, M, V, NULL, n, &ah, &fault)
                    : f->sgd_check(be, P, G, M, n, &sh, &fault));
    for (int a = 0; a < 4; a++) {
      CALL(be, f->download(be, back, d[a].p, n * 4));
      same &= memcmp(back, h[a], n * 4) == 0;
    }
  }
  const uint64_t want =
      r.part < 0 ? CL_FAULT_NONE : (uint64_t)r.at * 8 + (uint64_t)r.part * 2 + (uint64_t)r.is_nan;
  char what[200];
  snprintf(what, sizeof what, "guard, %s: key %llu, want %llu; nothing written", r.what,
           (unsigned long long)fault, (unsigned long long)want);
  for (int a = 0; a < 4; a++) free(h[a]);
  free(back);
  return expect(fault == want && same, what);
}

int main(void) {
  cl_gpu_info info;
  char err[CL_ERRMSG_LEN];
  err[0] = '\0';
  cl_status is = cl_backend_cuda_device_info(-1, &info, err, sizeof err);
  printf("CUDA driver %d, runtime %d, cuDNN %zu (built with %zu)\n", info.driver_version,
         info.runtime_version, info.cudnn_version, info.cudnn_build_version);

  if (!cl_backend_cuda_available()) {
    /* creating the backend must fail cleanly, not crash */
    printf("device info: %s (%s)\n", status_str(is), err[0] ? err : "-");
    cl_backend *be = (cl_backend *)&info; /* any non-NULL value: create must reset it */
    err[0] = '\0';
    cl_status s = cl_backend_cuda_create(&be, err, sizeof err);
    printf("create: %s, out %s: %s\n", status_str(s), be ? "not NULL" : "NULL", err);
    if (s == CL_OK || be != NULL) {
      printf("FAIL  create succeeded without a usable GPU\n");
      return 1;
    }
    /* where a GPU is known to be present (gpu_session.sh sets this), not
     * reaching it is a failure, not a skip */
    const char *req = getenv("CONVLSTM_REQUIRE_GPU");
    if (req && strcmp(req, "1") == 0) {
      printf("FAIL  CONVLSTM_REQUIRE_GPU=1 but the CUDA backend cannot start\n");
      return 1;
    }
    printf("no GPU: skipped\n");
    return 77; /* tests/c/run.sh: skipped, not passed */
  }
  if (is == CL_OK)
    printf("device %d of %d: %s, compute capability %d.%d, %d SMs, %.0f MiB\n", info.device,
           info.n_devices, info.name, info.cc_major, info.cc_minor, info.multiprocessors,
           info.mem_total / 1048576.0);

  cl_backend *be = NULL;
  cl_status s = cl_backend_cuda_create(&be, err, sizeof err);
  if (s != CL_OK) {
    printf("FAIL  cl_backend_cuda_create: %s: %s\n", status_str(s), err);
    return 1;
  }

  test_memory(be);
  test_host_stage(be);

  const cl_dtype types[3] = {CL_F32, CL_F16, CL_BF16};
  /* N, C, H, W, K, k */
  const int shapes[][6] = {
      {2, 3, 5, 7, 4, 1}, {3, 5, 6, 9, 8, 3}, {2, 4, 7, 5, 6, 5}, {4, 17, 12, 10, 32, 3}};
  for (int ti = 0; ti < 3; ti++)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
      for (int acc = 0; acc < 2; acc++)
        for (int bias = 0; bias < 2; bias++) {
          cl_conv_shape cs = {shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3],
                              shapes[si][4], shapes[si][5], types[ti]};
          test_conv(be, cs, acc, bias);
        }

  /* the core's per-step slices: activations one element past an aligned
   * start (forward and backward data accumulate into such slices) */
  for (int ti = 0; ti < 3; ti++) {
    cl_conv_shape c1 = {3, 5, 6, 9, 8, 3, types[ti]}, c2 = {4, 17, 12, 10, 32, 3, types[ti]};
    test_conv(be, c1, 1, 1, "", 1);
    test_conv(be, c2, 0, 0, "", 1);
  }

  for (int ti = 0; ti < 3; ti++)
    for (int cp = 0; cp < 2; cp++) {
      cl_gates_shape g1 = {3, 4, 35, types[ti]};   /* odd pixel count */
      cl_gates_shape g2 = {2, 16, 7 * 9, types[ti]};
      test_gates(be, g1, cp);
      test_gates(be, g2, cp);
    }

  /* backward data of half types in slices of images: a scratch limit of 734
   * bytes gives the first shape slices of 2, 2 and 1 images (324 bytes
   * each), the second slices of one (4080 bytes, over the limit) */
  setenv("CONVLSTM_CUDA_DX_SCRATCH_MB", "0.0007", 1);
  cl_backend *sliced = NULL;
  s = cl_backend_cuda_create(&sliced, err, sizeof err);
  unsetenv("CONVLSTM_CUDA_DX_SCRATCH_MB");
  if (s != CL_OK) {
    expect(false, "cl_backend_cuda_create with CONVLSTM_CUDA_DX_SCRATCH_MB=0.0007");
    printf("      %s\n", err);
  } else {
    for (int ti = 1; ti < 3; ti++)
      for (int acc = 0; acc < 2; acc++) {
        cl_conv_shape c1 = {5, 3, 6, 9, 8, 3, types[ti]}, c2 = {4, 17, 12, 10, 32, 3, types[ti]};
        test_conv(sliced, c1, acc, 1, " [dx slices]");
        test_conv(sliced, c2, acc, 0, " [dx slices]");
      }
    sliced->iface->destroy(sliced);
  }

  /* algorithms timed by cudnnFind* (CONVLSTM_CUDNN_BENCHMARK): their
   * workspace must still be what conv_workspace() reported */
  setenv("CONVLSTM_CUDNN_BENCHMARK", "1", 1);
  cl_backend *timed = NULL;
  s = cl_backend_cuda_create(&timed, err, sizeof err);
  unsetenv("CONVLSTM_CUDNN_BENCHMARK");
  if (s != CL_OK) {
    expect(false, "cl_backend_cuda_create with CONVLSTM_CUDNN_BENCHMARK=1");
    printf("      %s\n", err);
  } else {
    for (int ti = 0; ti < 3; ti++) {
      cl_conv_shape c1 = {3, 5, 6, 9, 8, 3, types[ti]}, c2 = {2, 4, 7, 5, 6, 5, types[ti]};
      test_conv(timed, c1, 1, 1, " [cudnnFind]");
      test_conv(timed, c2, 0, 1, " [cudnnFind]");
    }
    timed->iface->destroy(timed);
  }

  test_conversions(be, CL_F16);
  test_conversions(be, CL_BF16);

  for (int ti = 0; ti < 3; ti++) {
    test_mse(be, types[ti], 1, 1.0f, 1);
    test_mse(be, types[ti], 1000, 1.0f, 0);
    test_mse(be, types[ti], ((size_t)1 << 20) + 3, 1024.0f, 1); /* more blocks than partials */
    test_mse(be, types[ti], 4099, 1.0f, 2);
  }

  test_grad_unscale(be, 0, 0.5f, -1, 0.0f);
  test_grad_unscale(be, 1000003, 1.0f / 1024.0f, -1, 0.0f);
  test_grad_unscale(be, 1000003, 1.0f / 1024.0f, 777777, INFINITY);
  test_grad_unscale(be, 4099, 1.0f / 65536.0f, 4098, NAN);
  test_grad_unscale(be, 4099, 1.0f / 65536.0f, 0, -INFINITY);
  test_grad_unscale(be, 4099, 4.0f, 17, 3e38f); /* finite, but not once scaled */
  test_grad_unscale(be, 4099, 1.0f / 3.0f, -1, 0.0f); /* the flag from before was reset */

  /* row_bytes, offset, N, T, t0, nt, nb */
  test_gather(be, 24 * 24 * 4, 0, 100, 5, 0, 5, 10);       /* float32 images: 16-byte words */
  test_gather(be, 8 * 10 * 2, 0, 7, 3, 1, 2, 9);           /* float16, 160 bytes */
  test_gather(be, 6 * 4, 4, 9, 4, 2, 2, 5);                /* 4-byte words only */
  test_gather(be, 5 * 3 * 2, 0, 11, 3, 0, 3, 4);           /* 30 bytes: single bytes */
  test_gather(be, 4096, 1, 13, 2, 0, 2, 6);                /* misaligned pointers */
  test_gather(be, 16, 0, 70000, 2, 0, 2, 70000);           /* more rows than blocks */

  test_adam(be, 1000 + 7, 0.0f);
  test_adam(be, 300001, 0.01f);
  test_sgd(be, 1000 + 7, 0.0f, 0.0f);
  test_sgd(be, 1000 + 7, 0.9f, 0.0f);
  test_sgd(be, 300001, 0.9f, 0.01f);
  {
    const float inf = INFINITY, nan = NAN;
    /* what, adam, lr, wd, mom, first, at, p, g, m, v, part, nan */
    const guard_case rows[] = {
        {"adam, all finite", true, 1e-3f, 0, 0, 0, 7, 0.5f, 0.5f, 0.1f, 0.1f, -1, 0},
        {"adam, an Inf gradient", true, 1e-3f, 0, 0, 0, 777, 0, inf, 0, 0, CL_PART_GRAD, 0},
        {"adam, a NaN gradient, last element", true, 1e-3f, 0, 0, 0, 300000, 0, nan, 0, 0,
         CL_PART_GRAD, 1},
        {"adam, g*g overflows exp_avg_sq", true, 1e-3f, 0, 0, 0, 250000, 0, 1e21f, 0, 0,
         CL_PART_V, 0},
        {"adam, exp_avg already Inf", true, 1e-3f, 0, 0, 0, 20000, 0, 0, inf, 0, CL_PART_M, 0},
        {"adam, lr / (1 - beta1^t) overflows: every parameter", true, 3e38f, 0, 0, 0, 0, 0.5f,
         0.5f, 0.5f, 0.5f, CL_PART_PARAM, 0},
        {"sgd, all finite", false, 0.1f, 0, 0.9f, 0, 7, 0.5f, 0.5f, 0.5f, 0, -1, 0},
        {"sgd, first step ignores a NaN buffer", false, 0.1f, 0, 0.9f, 1, 7, 0.5f, 0.5f, nan, 0,
         -1, 0},
        {"sgd, momentum overflows the buffer", false, 0.1f, 0, 1e10f, 0, 123, 0, 0, 1e30f, 0,
         CL_PART_M, 0},
        {"sgd, weight decay * p overflows", false, 0.1f, 1e38f, 0, 0, 9, 10, 0, 0, 0,
         CL_PART_PARAM, 0},
    };
    for (const guard_case &r : rows) test_guard(be, r);
  }

  /* a bad shape is refused with a message, and the backend stays usable */
  cl_conv_shape bad = {1, 1, 4, 4, 1, 2, CL_F32};
  expect(be->iface->conv_forward(be, &bad, NULL, NULL, NULL, NULL, 0, NULL) == CL_E_INVALID,
         "even kernel size -> CL_E_INVALID");
  /* half types need the workspace for their cast weights: refused without it */
  cl_conv_shape hs = {1, 2, 4, 4, 4, 3, CL_F16};
  expect(be->iface->conv_forward(be, &hs, NULL, NULL, NULL, NULL, 0, NULL) == CL_E_INTERNAL,
         "float16 forward without a workspace -> CL_E_INTERNAL");
  expect(be->iface->conv_backward_data(be, &hs, NULL, NULL, NULL, 0, NULL) == CL_E_INTERNAL,
         "float16 backward data without a workspace -> CL_E_INTERNAL");
  expect(be->iface->conv_backward_filter(be, &hs, NULL, NULL, NULL, NULL, NULL) == CL_E_INTERNAL,
         "float16 backward filter without a workspace -> CL_E_INTERNAL");
  expect(be->iface->synchronize(be) == CL_OK, "synchronize after all of the above");

  be->iface->destroy(be);
  printf("%d checks, %d failed\n", n_checks, n_failed);
  return n_failed ? 1 : 0;
}
