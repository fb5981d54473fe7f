/*
 * tests/c/test_cpu_kernels.c -- unit tests of the CPU backend (src/cpu/):
 * every kernel against a naive double-precision reference, the gate
 * gradients against finite differences, the optimizers against reference
 * loops, and every convolution's workspace use against conv_workspace().
 *
 * A standalone program: prints the max abs / rel error of each check and
 * exits nonzero on any failure. It is not a benchmark (bench_cpu_conv.c).
 * Build from the package root (CL_HAVE_BLAS with -lblas adds the BLAS path):
 *   gcc -std=c11 -O2 -Wall -Wextra -fopenmp -Isrc src/cpu/[all .c files] \
 *       tests/c/test_cpu_kernels.c -lm -o /tmp/test_cpu_kernels
 */
#include "cpu/cpu_kernels.h"
#include "core/half.h" /* the reference float16 / bfloat16 conversions */

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* A dtype no backend knows, for the error paths. */
#define BAD_DTYPE ((cl_dtype)7)

/* ---- bookkeeping ---------------------------------------------------------- */

static int n_checks, n_failed;
static int verbose = 1;
/* Under valgrind (50x slower) the largest products and the repeated
 * convolution suites are left out; every code path still runs. */
static int under_valgrind;

/* Compares got against ref (n values). The error is normalised by the
 * largest |ref| so that sums with cancellation are judged by their scale;
 * the largest per-element relative error is printed too. */
static int check_close(const char *what, const float *got, const double *ref, size_t n,
                       double tol) {
  double scale = 0.0, max_abs = 0.0, max_rel = 0.0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  int finite = 1;
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) finite = 0;
    double d = fabs((double)got[i] - ref[i]);
    max_abs = fmax(max_abs, d);
    if (fabs(ref[i]) > 1e-3 * scale) max_rel = fmax(max_rel, d / fabs(ref[i]));
  }
  double err = max_abs / (scale > 0 ? scale : 1.0);
  int ok = finite && err <= tol;
#ifdef _OPENMP
#pragma omp critical(test_report) /* test_conv_nested checks from two threads */
#endif
  {
    n_checks++;
    if (!ok) n_failed++;
    if (verbose || !ok)
      printf("%s %-58s max abs %.2e  rel %.2e  (scaled %.2e, tol %.0e)\n", ok ? "ok  " : "FAIL",
             what, max_abs, max_rel, err, tol);
  }
  return ok;
}

static const char *status_str(cl_status st) {
  static const char *names[] = {"CL_OK",        "CL_E_INVALID", "CL_E_OOM",     "CL_E_UNSUPPORTED",
                                "CL_E_BACKEND", "CL_E_STATE",   "CL_E_INTERNAL"};
  return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "?";
}

static void check_true(int cond, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
#ifdef _OPENMP
#pragma omp critical(test_report)
#endif
  {
    n_checks++;
    if (!cond) n_failed++;
    if (verbose || !cond) printf("%s %s\n", cond ? "ok  " : "FAIL", msg);
  }
}

/* ---- data ----------------------------------------------------------------- */

static _Thread_local uint64_t rng_state =
    0x9E3779B97F4A7C15ull; /* per thread: see test_conv_nested */

static double uniform(void) { /* xorshift64*, in [-1, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return (double)((rng_state * 2685821657736338717ull) >> 11) / 4503599627370496.0 - 1.0;
}

static int rand_int(int lo, int hi) { /* in [lo, hi] */
  return lo + (int)((uniform() + 1.0) * 0.5 * (hi - lo + 1)) % (hi - lo + 1);
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test: out of memory\n");
    exit(2);
  }
  return p;
}

static float *rand_floats(size_t n) {
  float *p = xmalloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) p[i] = (float)uniform();
  return p;
}

static double *to_double(const float *p, size_t n) {
  double *d = xmalloc(sizeof(double) * n);
  for (size_t i = 0; i < n; i++) d[i] = p[i];
  return d;
}

static float *copy_floats(const float *p, size_t n) {
  float *q = xmalloc(sizeof(float) * n);
  memcpy(q, p, sizeof(float) * n);
  return q;
}

static cl_backend *make_backend(int n_threads, cl_cpu_gemm_kind kind) {
  cl_backend *be;
  if (cl_backend_cpu_create(n_threads, &be) != CL_OK) {
    fprintf(stderr, "test: cannot create the cpu backend\n");
    exit(2);
  }
  ((cl_cpu_ctx *)be->context)->gemm = kind;
  return be;
}

/* ---- GEMM ----------------------------------------------------------------- */

static void ref_gemm(int tA, int tB, int M, int N, int K, double alpha, const float *A, int lda,
                     const float *B, int ldb, double beta, const float *C0, int ldc, double *out) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int p = 0; p < K; p++)
        s += (double)(tA ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]) *
             (double)(tB ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j]);
      out[(size_t)i * N + j] = alpha * s + (beta != 0.0 ? beta * C0[(size_t)i * ldc + j] : 0.0);
    }
}

enum { CANARY = 256 };

static void fill_canary(unsigned char *p) { memset(p, 0xA5, CANARY); }

static int canary_intact(const unsigned char *p) {
  for (int i = 0; i < CANARY; i++)
    if (p[i] != 0xA5) return 0;
  return 1;
}

/* One product: scratch sized exactly with a canary behind it, C padded by
 * ldc and, for beta == 0, filled with NaN to prove it is not read. */
static void gemm_case(cl_cpu_gemm_kind kind, int threads, int tA, int tB, int M, int N, int K,
                      float alpha, float beta, int pad, int quiet) {
  int lda = (tA ? M : K) + pad, ldb = (tB ? K : N) + pad, ldc = N + pad;
  float *A = rand_floats((size_t)(tA ? K : M) * lda), *B = rand_floats((size_t)(tB ? N : K) * ldb);
  float *C = rand_floats((size_t)M * ldc);
  if (beta == 0.0f)
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = NAN;
  double *ref = xmalloc(sizeof(double) * M * N);
  ref_gemm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ref);
  size_t sb = threads > 1 ? cl_cpu_sgemm_threaded_scratch_bytes(kind, threads, M, N, K)
                          : cl_cpu_sgemm_scratch_bytes(kind, M, N, K);
  unsigned char *scratch = xmalloc(sb + CANARY);
  fill_canary(scratch + sb);
  int rc = threads > 1
               ? cl_cpu_sgemm_threaded(kind, threads, tA, tB, M, N, K, alpha, A, lda, B, ldb, beta,
                                       C, ldc, scratch)
               : cl_cpu_sgemm(kind, tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch);
  float *got = xmalloc(sizeof(float) * M * N);
  for (int i = 0; i < M; i++) memcpy(got + (size_t)i * N, C + (size_t)i * ldc, sizeof(float) * N);
  char what[160];
  snprintf(what, sizeof what, "sgemm %s t%d %c%c M=%d N=%d K=%d a=%g b=%g", cl_cpu_gemm_name(kind),
           threads, tA ? 'T' : 'N', tB ? 'T' : 'N', M, N, K, alpha, beta);
  int v = verbose;
  verbose = v && !quiet;
  check_close(what, got, ref, (size_t)M * N, 1e-5);
  check_true(rc == 0 && canary_intact(scratch + sb), "%s: scratch within %zu bytes", what, sb);
  verbose = v;
  free(A), free(B), free(C), free(ref), free(got), free(scratch);
}

static void test_gemm_kind(cl_cpu_gemm_kind kind) {
  printf("-- sgemm, %s\n", cl_cpu_gemm_name(kind));
  /* Small and odd sizes in all four transpose combinations, printed as one
   * summary line per combination unless one fails. */
  for (int t = 0; t < 4; t++) {
    int before = n_failed;
    for (int rep = 0; rep < 40; rep++) {
      int M = rand_int(1, 70), N = rand_int(1, 70), K = rand_int(1, 70);
      float beta = (rep % 3 == 0) ? 0.0f : (rep % 3 == 1 ? 1.0f : -0.5f);
      gemm_case(kind, 1, t & 1, t >> 1, M, N, K, rep % 4 == 0 ? 2.0f : 1.0f, beta, rep % 5, 1);
    }
    check_true(n_failed == before, "sgemm %s %c%c: 40 random sizes in 1..70",
               cl_cpu_gemm_name(kind), (t & 1) ? 'T' : 'N', (t >> 1) ? 'T' : 'N');
  }
  gemm_case(kind, 1, 0, 0, 1, 1, 1, 1.0f, 0.0f, 0, 0);
  gemm_case(kind, 1, 0, 0, 5, 7, 0, 1.0f, 0.5f, 0, 0); /* K == 0: C = beta C */
  if (!under_valgrind) {
    gemm_case(kind, 1, 0, 0, 256, 576, 576, 1.0f, 0.0f, 0, 0);
    gemm_case(kind, 1, 1, 0, 576, 576, 256, 1.0f, 1.0f, 0, 0);
    gemm_case(kind, 1, 0, 1, 256, 576, 576, 1.0f, 1.0f, 0, 0);
  }
  gemm_case(kind, 1, 1, 1, 300, 1000, 600, 0.5f, 0.25f, 3, 0); /* several blocks each way */
  gemm_case(kind, 2, 0, 0, 256, 576, 300, 1.0f, 0.0f, 0, 0);
  gemm_case(kind, 3, 0, 1, 37, 500, 77, 1.0f, 1.0f, 1, 0);
  gemm_case(kind, 2, 1, 0, 700, 20, 33, 1.0f, 0.0f, 0, 0);
}

/* Threads calling the single-threaded GEMM at once, and the threaded one
 * from inside a parallel region, must agree with the serial result. */
static void test_gemm_reentrant(cl_cpu_gemm_kind kind) {
  enum { M = 70, N = 90, K = 110, T = 4 };
  float *A = rand_floats(M * K), *B = rand_floats(K * N), *C = xmalloc(sizeof(float) * T * M * N);
  double *ref = xmalloc(sizeof(double) * M * N);
  ref_gemm(0, 0, M, N, K, 1.0, A, K, B, N, 0.0, NULL, N, ref);
  int rc = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(T) reduction(| : rc)
#endif
  for (int t = 0; t < T; t++)
    rc |= t % 2 ? cl_cpu_sgemm(kind, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C + t * M * N, N, NULL)
                : cl_cpu_sgemm_threaded(kind, 2, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f,
                                        C + t * M * N, N, NULL);
  int before = n_failed;
  for (int t = 0; t < T; t++) check_close("(thread)", C + t * M * N, ref, M * N, 1e-5);
  check_true(rc == 0 && n_failed == before, "sgemm %s from %d threads at once",
             cl_cpu_gemm_name(kind), T);
  free(A), free(B), free(C), free(ref);
}

/* ---- convolutions --------------------------------------------------------- */

static double at_img(const float *x, int C, int H, int W, int n, int c, int y, int xx) {
  if (y < 0 || y >= H || xx < 0 || xx >= W) return 0.0;
  return x[(((size_t)n * C + c) * H + y) * W + xx];
}

static void ref_conv_forward(const cl_conv_shape *s, const float *x, const float *w,
                             const float *bias, const float *y0, int acc, double *out) {
  int pad = s->k / 2;
  for (int n = 0; n < s->N; n++)
    for (int o = 0; o < s->K; o++)
      for (int y = 0; y < s->H; y++)
        for (int xx = 0; xx < s->W; xx++) {
          double sum = bias ? bias[o] : 0.0;
          for (int c = 0; c < s->C; c++)
            for (int i = 0; i < s->k; i++)
              for (int j = 0; j < s->k; j++)
                sum += w[(((size_t)o * s->C + c) * s->k + i) * s->k + j] *
                       at_img(x, s->C, s->H, s->W, n, c, y + i - pad, xx + j - pad);
          size_t idx = (((size_t)n * s->K + o) * s->H + y) * s->W + xx;
          out[idx] = sum + (acc ? y0[idx] : 0.0);
        }
}

/* dx[n,c,y,x] = sum over o, i, j of dy[n,o,y-i+pad,x-j+pad] w[o,c,i,j]. */
static void ref_conv_backward_data(const cl_conv_shape *s, const float *dy, const float *w,
                                   const float *dx0, int acc, double *out) {
  int pad = s->k / 2;
  for (int n = 0; n < s->N; n++)
    for (int c = 0; c < s->C; c++)
      for (int y = 0; y < s->H; y++)
        for (int xx = 0; xx < s->W; xx++) {
          double sum = 0.0;
          for (int o = 0; o < s->K; o++)
            for (int i = 0; i < s->k; i++)
              for (int j = 0; j < s->k; j++)
                sum += w[(((size_t)o * s->C + c) * s->k + i) * s->k + j] *
                       at_img(dy, s->K, s->H, s->W, n, o, y - i + pad, xx - j + pad);
          size_t idx = (((size_t)n * s->C + c) * s->H + y) * s->W + xx;
          out[idx] = sum + (acc ? dx0[idx] : 0.0);
        }
}

static void ref_conv_backward_filter(const cl_conv_shape *s, const float *dy, const float *x,
                                     const float *dw0, const float *db0, double *dw, double *db) {
  int pad = s->k / 2;
  size_t P = (size_t)s->H * s->W;
  for (int o = 0; o < s->K; o++) {
    for (int c = 0; c < s->C; c++)
      for (int i = 0; i < s->k; i++)
        for (int j = 0; j < s->k; j++) {
          double sum = 0.0;
          for (int n = 0; n < s->N; n++)
            for (int y = 0; y < s->H; y++)
              for (int xx = 0; xx < s->W; xx++)
                sum += dy[((size_t)n * s->K + o) * P + (size_t)y * s->W + xx] *
                       at_img(x, s->C, s->H, s->W, n, c, y + i - pad, xx + j - pad);
          size_t idx = (((size_t)o * s->C + c) * s->k + i) * s->k + j;
          dw[idx] = dw0[idx] + sum;
        }
    double sum = 0.0;
    for (int n = 0; n < s->N; n++)
      for (size_t p = 0; p < P; p++) sum += dy[((size_t)n * s->K + o) * P + p];
    db[o] = db0[o] + sum;
  }
}

/* A workspace of exactly conv_workspace() bytes, starting `skew` bytes past
 * an aligned address, with a canary behind it. */
typedef struct test_ws {
  unsigned char *raw, *ws;
  size_t bytes;
} test_ws;

static test_ws ws_make(cl_backend *be, const cl_conv_shape *s, int skew) {
  test_ws t;
  t.bytes = 0;
  if (be->iface->conv_workspace(be, s, &t.bytes) != CL_OK) t.bytes = 0;
  t.raw = xmalloc(t.bytes + CANARY + 64);
  t.ws = t.raw + skew;
  memset(t.ws, 0x5A, t.bytes);
  fill_canary(t.ws + t.bytes);
  return t;
}

static void shape_name(char *buf, size_t len, const char *op, const cl_conv_shape *s,
                       const cl_backend *be, const char *extra) {
  snprintf(buf, len, "%s N%d C%d K%d %dx%d k%d t%d %s %s", op, s->N, s->C, s->K, s->H, s->W, s->k,
           be->n_threads, cl_cpu_gemm_name(cl_cpu_gemm_of(be)), extra);
}

static void conv_case_forward(cl_backend *be, const cl_conv_shape *s, int acc, int use_bias) {
  size_t nx = (size_t)s->N * s->C * s->H * s->W, ny = (size_t)s->N * s->K * s->H * s->W;
  float *x = rand_floats(nx), *w = rand_floats((size_t)s->K * s->C * s->k * s->k);
  float *b = rand_floats(s->K), *y = rand_floats(ny), *y0 = copy_floats(y, ny);
  double *ref = xmalloc(sizeof(double) * (ny ? ny : 1));
  ref_conv_forward(s, x, w, use_bias ? b : NULL, y0, acc, ref);
  test_ws t = ws_make(be, s, 4);
  cl_status st = be->iface->conv_forward(be, s, x, w, use_bias ? b : NULL, y, acc, t.ws);
  char what[200];
  shape_name(what, sizeof what, "conv fwd", s, be,
             acc ? (use_bias ? "acc bias" : "acc") : (use_bias ? "bias" : ""));
  check_close(what, y, ref, ny, 2e-5);
  check_true(st == CL_OK && canary_intact(t.ws + t.bytes),
             "  status ok, workspace within %zu bytes", t.bytes);
  free(x), free(w), free(b), free(y), free(y0), free(ref), free(t.raw);
}

static void conv_case_backward_data(cl_backend *be, const cl_conv_shape *s, int acc) {
  size_t nx = (size_t)s->N * s->C * s->H * s->W, ny = (size_t)s->N * s->K * s->H * s->W;
  float *dy = rand_floats(ny), *w = rand_floats((size_t)s->K * s->C * s->k * s->k);
  float *dx = rand_floats(nx), *dx0 = copy_floats(dx, nx);
  double *ref = xmalloc(sizeof(double) * (nx ? nx : 1));
  ref_conv_backward_data(s, dy, w, dx0, acc, ref);
  test_ws t = ws_make(be, s, 12);
  cl_status st = be->iface->conv_backward_data(be, s, dy, w, dx, acc, t.ws);
  char what[200];
  shape_name(what, sizeof what, "conv bwd-data", s, be, acc ? "acc" : "");
  check_close(what, dx, ref, nx, 2e-5);
  check_true(st == CL_OK && canary_intact(t.ws + t.bytes),
             "  status ok, workspace within %zu bytes", t.bytes);
  free(dy), free(w), free(dx), free(dx0), free(ref), free(t.raw);
}

static void conv_case_backward_filter(cl_backend *be, const cl_conv_shape *s, int use_db) {
  size_t nx = (size_t)s->N * s->C * s->H * s->W, ny = (size_t)s->N * s->K * s->H * s->W;
  size_t nw = (size_t)s->K * s->C * s->k * s->k;
  float *dy = rand_floats(ny), *x = rand_floats(nx);
  float *dw = rand_floats(nw), *db = rand_floats(s->K);
  float *dw0 = copy_floats(dw, nw), *db0 = copy_floats(db, s->K);
  double *rdw = xmalloc(sizeof(double) * nw), *rdb = xmalloc(sizeof(double) * s->K);
  ref_conv_backward_filter(s, dy, x, dw0, db0, rdw, rdb);
  test_ws t = ws_make(be, s, 0);
  cl_status st = be->iface->conv_backward_filter(be, s, dy, x, dw, use_db ? db : NULL, t.ws);
  char what[200];
  shape_name(what, sizeof what, "conv bwd-filter", s, be, "dw");
  check_close(what, dw, rdw, nw, 2e-5);
  if (use_db) {
    shape_name(what, sizeof what, "conv bwd-filter", s, be, "dbias");
    check_close(what, db, rdb, s->K, 2e-5);
  } else {
    check_true(memcmp(db, db0, sizeof(float) * s->K) == 0, "  dbias NULL leaves it alone");
  }
  check_true(st == CL_OK && canary_intact(t.ws + t.bytes),
             "  status ok, workspace within %zu bytes", t.bytes);
  free(dy), free(x), free(dw), free(db), free(dw0), free(db0), free(rdw), free(rdb), free(t.raw);
}

static void conv_case(cl_backend *be, cl_conv_shape s) {
  conv_case_forward(be, &s, 0, 1);
  conv_case_forward(be, &s, 1, 0);
  conv_case_forward(be, &s, 1, 1);
  conv_case_backward_data(be, &s, 0);
  conv_case_backward_data(be, &s, 1);
  conv_case_backward_filter(be, &s, 1);
  conv_case_backward_filter(be, &s, 0);
}

static void test_conv(void) {
  /* {N, C, H, W, K, k}: k = 1, 3, 5; H != W; C = 1; K > C (col2im) and
   * K <= C (flipped kernel) for backward data; forward and backward filter
   * both through im2col + GEMM (K > 16, C k k > 32) and through the direct
   * kernels (few channels); N = 1 and N = 3, which do not share out evenly
   * over 2 threads; images smaller than the kernel; tutorial-sized images. */
  static const cl_conv_shape shapes[] = {
      {3, 2, 5, 7, 4, 3, CL_F32},    {2, 1, 6, 6, 8, 3, CL_F32},     {4, 3, 7, 5, 2, 5, CL_F32},
      {3, 5, 4, 9, 6, 1, CL_F32},    {4, 6, 8, 8, 20, 3, CL_F32},    {4, 20, 6, 5, 4, 3, CL_F32},
      {1, 3, 5, 5, 4, 3, CL_F32},    {5, 1, 9, 4, 3, 5, CL_F32},     {2, 9, 24, 24, 12, 3, CL_F32},
      {2, 4, 3, 3, 5, 5, CL_F32},    {4, 2, 1, 6, 3, 3, CL_F32},     {3, 17, 11, 13, 9, 1, CL_F32},
      {3, 8, 7, 9, 24, 3, CL_F32},   {2, 40, 5, 6, 20, 1, CL_F32},   {2, 3, 6, 7, 18, 5, CL_F32},
      {1, 10, 9, 8, 40, 3, CL_F32},  {1, 16, 24, 24, 64, 3, CL_F32}, {3, 1, 24, 24, 64, 3, CL_F32},
      {2, 16, 24, 24, 4, 3, CL_F32}, {1, 16, 61, 60, 16, 3, CL_F32},
  };
  static const char *path_names[] = {"auto", "im2col+GEMM", "direct"};
  /* Automatic choice for every kind and thread count; each path forced for
   * the vector kinds and the portable one. */
  for (int path = 0; path <= 2; path++)
    for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_BLAS; kind++) {
      if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
      if (path > 0 && kind == CL_CPU_GEMM_BLAS) continue;
      for (int t = path == 0 ? 1 : 2; t <= (path == 0 && !under_valgrind ? 3 : 2); t++) {
        printf("-- convolutions, %s, %d threads, %s\n", cl_cpu_gemm_name((cl_cpu_gemm_kind)kind), t,
               path_names[path]);
        cl_backend *be = make_backend(t, (cl_cpu_gemm_kind)kind);
        ((cl_cpu_ctx *)be->context)->conv_path = path;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
          const cl_conv_shape *sh = &shapes[i];
          if (under_valgrind && (long)sh->H * sh->W * sh->C * sh->K > 100000) continue;
          conv_case(be, *sh);
        }
        be->iface->destroy(be);
      }
    }
}

/* Convolutions called from inside a parallel region run on one thread each
 * (nested regions are inactive) and must still be right. */
static void test_conv_nested(void) {
  printf("-- convolutions inside a parallel region\n");
  cl_backend *be = make_backend(2, cl_cpu_gemm_best_internal());
  static const cl_conv_shape shapes[] = {{4, 6, 8, 8, 20, 3, CL_F32}, {4, 20, 6, 5, 4, 3, CL_F32}};
  int before = n_failed, v = verbose;
  verbose = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(2) schedule(static, 1)
#endif
  for (int t = 0; t < 4; t++) {
    cl_conv_shape s = shapes[t % 2];
    if (t < 2)
      conv_case_forward(be, &s, 1, 1);
    else
      conv_case_backward_filter(be, &s, 1);
  }
  verbose = v;
  check_true(n_failed == before, "forward and backward filter, 2 outer threads");
  be->iface->destroy(be);
}

static void test_conv_errors(void) {
  printf("-- convolution errors\n");
  cl_backend *be = make_backend(2, cl_cpu_gemm_best_internal());
  cl_conv_shape s = {2, 3, 4, 4, 5, 3, BAD_DTYPE};
  float dummy[1] = {0};
  be->err[0] = '\0';
  cl_status st = be->iface->conv_forward(be, &s, dummy, dummy, NULL, dummy, 0, dummy);
  check_true(st == CL_E_UNSUPPORTED && be->err[0] != '\0', "unknown dtype conv: %s (%s)",
             status_str(st), be->err);
  s.dtype = CL_F32;
  s.k = 2;
  st = be->iface->conv_forward(be, &s, dummy, dummy, NULL, dummy, 0, dummy);
  check_true(st == CL_E_INVALID, "even kernel rejected (%s)", be->err);
  s.k = 3;
  s.N = 0;
  st = be->iface->conv_backward_filter(be, &s, dummy, dummy, dummy, dummy, dummy);
  check_true(st == CL_OK, "N = 0 is a no-op");
  be->iface->destroy(be);
}

/* ---- the fused cell ------------------------------------------------------- */

static double dsig(double x) { return 1.0 / (1.0 + exp(-x)); }

/* Forward in double from pre-activations z of one element's four gates. */
static void ref_cell(const double z[4], double cp, double *c, double *h) {
  double i = dsig(z[0]), f = dsig(z[1]), o = dsig(z[2]), g = tanh(z[3]);
  *c = f * cp + i * g;
  *h = o * tanh(*c);
}

typedef struct cell_data {
  cl_gates_shape s;
  size_t ng, ns; /* gate and state element counts */
  float *z, *cp; /* pre-activations, c_prev */
  float *a, *b;  /* loss weights: L = sum a h + sum b c */
} cell_data;

static cell_data cell_make(int N, int hidden, int P) {
  cell_data d;
  d.s.N = N, d.s.hidden = hidden, d.s.P = P, d.s.dtype = CL_F32;
  d.ns = (size_t)N * hidden * P;
  d.ng = 4 * d.ns;
  d.z = rand_floats(d.ng);
  for (size_t i = 0; i < d.ng; i++) d.z[i] *= 3.0f; /* reach the saturated ends too */
  d.cp = rand_floats(d.ns), d.a = rand_floats(d.ns), d.b = rand_floats(d.ns);
  return d;
}

static void cell_free(cell_data *d) { free(d->z), free(d->cp), free(d->a), free(d->b); }

/* Index of gate q of state element e in [N, 4 hidden, P]. */
static size_t gate_index(const cl_gates_shape *s, size_t e, int q) {
  size_t P = (size_t)s->P, n = e / ((size_t)s->hidden * P), rest = e % ((size_t)s->hidden * P);
  return (n * 4 + (size_t)q) * s->hidden * P + rest;
}

static void gather_z(const cell_data *d, const float *z, size_t e, double out[4]) {
  for (int q = 0; q < 4; q++) out[q] = z[gate_index(&d->s, e, q)];
}

static void test_gates_forward(cl_backend *be, cell_data *d, int with_cp) {
  float *z = copy_floats(d->z, d->ng), *c = rand_floats(d->ns), *h = rand_floats(d->ns);
  double *rc = xmalloc(sizeof(double) * d->ns), *rh = xmalloc(sizeof(double) * d->ns);
  double *ract = xmalloc(sizeof(double) * d->ng);
  for (size_t e = 0; e < d->ns; e++) {
    double zz[4];
    gather_z(d, d->z, e, zz);
    ref_cell(zz, with_cp ? d->cp[e] : 0.0, &rc[e], &rh[e]);
    ract[gate_index(&d->s, e, 0)] = dsig(zz[0]);
    ract[gate_index(&d->s, e, 1)] = dsig(zz[1]);
    ract[gate_index(&d->s, e, 2)] = dsig(zz[2]);
    ract[gate_index(&d->s, e, 3)] = tanh(zz[3]);
  }
  cl_status st = be->iface->gates_forward(be, &d->s, z, with_cp ? d->cp : NULL, c, h);
  char what[120];
  snprintf(what, sizeof what, "gates fwd N%d h%d P%d t%d%s: c", d->s.N, d->s.hidden, d->s.P,
           be->n_threads, with_cp ? "" : " c_prev=NULL");
  check_close(what, c, rc, d->ns, 1e-6);
  check_close("  h", h, rh, d->ns, 1e-6);
  check_close("  activations", z, ract, d->ng, 1e-6);
  check_true(st == CL_OK, "  status %s", status_str(st));
  free(z), free(c), free(h), free(rc), free(rh), free(ract);
}

/* L(z, c_prev) = sum a h + sum b c in double, for finite differences. */
static double cell_loss(const cell_data *d, const double *z, const double *cp) {
  double L = 0.0;
  for (size_t e = 0; e < d->ns; e++) {
    double zz[4], c, h;
    for (int q = 0; q < 4; q++) zz[q] = z[gate_index(&d->s, e, q)];
    ref_cell(zz, cp ? cp[e] : 0.0, &c, &h);
    L += d->a[e] * h + d->b[e] * c;
  }
  return L;
}

/* Central differences of cell_loss: dz and dc_prev, step 1e-6 in double. */
static void cell_fd(const cell_data *d, int with_cp, double *dz, double *dcp) {
  double *z = to_double(d->z, d->ng), *cp = to_double(d->cp, d->ns);
  const double eps = 1e-6;
  for (size_t i = 0; i < d->ng; i++) {
    double z0 = z[i];
    z[i] = z0 + eps;
    double lp = cell_loss(d, z, with_cp ? cp : NULL);
    z[i] = z0 - eps;
    double lm = cell_loss(d, z, with_cp ? cp : NULL);
    z[i] = z0;
    dz[i] = (lp - lm) / (2 * eps);
  }
  for (size_t e = 0; e < d->ns; e++) {
    double c0 = cp[e];
    cp[e] = c0 + eps;
    double lp = cell_loss(d, z, cp);
    cp[e] = c0 - eps;
    double lm = cell_loss(d, z, cp);
    cp[e] = c0;
    dcp[e] = with_cp ? (lp - lm) / (2 * eps) : 0.0;
  }
  free(z), free(cp);
}

/* Backward with dh = a and incoming dc = b is the gradient of L above; the
 * returned dc is dL/dc_prev (with c_prev NULL, f * dc_total all the same). */
static void test_gates_backward(cl_backend *be, cell_data *d, int with_cp) {
  float *gates = copy_floats(d->z, d->ng), *c = xmalloc(sizeof(float) * d->ns);
  float *h = xmalloc(sizeof(float) * d->ns), *dc = copy_floats(d->b, d->ns);
  be->iface->gates_forward(be, &d->s, gates, with_cp ? d->cp : NULL, c, h);
  cl_status st = be->iface->gates_backward(be, &d->s, gates, c, with_cp ? d->cp : NULL, d->a, dc);
  double *dz = xmalloc(sizeof(double) * d->ng), *dcp = xmalloc(sizeof(double) * d->ns);
  cell_fd(d, with_cp, dz, dcp);
  char what[120];
  snprintf(what, sizeof what, "gates bwd N%d h%d P%d t%d%s vs finite diff: dz", d->s.N, d->s.hidden,
           d->s.P, be->n_threads, with_cp ? "" : " c_prev=NULL");
  check_close(what, gates, dz, d->ng, 1e-5);
  if (with_cp) {
    check_close("  dc_prev", dc, dcp, d->ns, 1e-5);
  } else {
    /* Nothing depends on c_prev; the kernel still returns f * dc_total. */
    int finite = 1;
    for (size_t e = 0; e < d->ns; e++) finite &= isfinite(dc[e]) != 0;
    check_true(finite, "  dc_prev finite");
  }
  check_true(st == CL_OK, "  status %s", status_str(st));
  free(gates), free(c), free(h), free(dc), free(dz), free(dcp);
}

/* Per-element relative accuracy of the activations over a sweep of
 * pre-activations, including tiny ones where tanh(x) ~ x must stay relative
 * and huge ones where sigmoid saturates: the vector exp/tanh must stay
 * within a few ulp of the double-precision functions. */
static void test_activation_accuracy(cl_backend *be) {
  enum { P = 4096 };
  cl_gates_shape s = {1, 1, P, CL_F32};
  float *z = xmalloc(sizeof(float) * 4 * P), *c = xmalloc(sizeof(float) * P);
  float *h = xmalloc(sizeof(float) * P), *z0 = xmalloc(sizeof(float) * P);
  for (int p = 0; p < P; p++) {
    double t = (double)p / (P - 1); /* magnitudes 1e-7 .. 1e2, both signs */
    z0[p] = (float)((p % 2 ? -1 : 1) * pow(10.0, -7.0 + 9.0 * t));
  }
  for (int q = 0; q < 4; q++) memcpy(z + q * P, z0, sizeof(float) * P);
  be->iface->gates_forward(be, &s, z, NULL, c, h);
  double max_sig = 0.0, max_tanh = 0.0;
  for (int p = 0; p < P; p++) {
    double sg = dsig(z0[p]), th = tanh((double)z0[p]);
    if (sg > 1e-37) max_sig = fmax(max_sig, fabs(z[p] - sg) / sg);
    max_tanh = fmax(max_tanh, fabs(z[3 * P + p] - th) / fabs(th));
  }
  check_true(max_sig < 6e-7 && max_tanh < 6e-7,
             "activation accuracy %s: sigmoid rel %.2e, tanh rel %.2e (float eps 1.19e-07)",
             cl_cpu_gemm_name(cl_cpu_gemm_of(be)), max_sig, max_tanh);
  free(z), free(c), free(h), free(z0);
}

static void test_gates(void) {
  printf("-- fused cell\n");
  for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_AVX512; kind++) {
    if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
    for (int t = 1; t <= 2; t++) {
      cl_backend *be = make_backend(t, (cl_cpu_gemm_kind)kind);
      /* P = 37: vector body plus scalar tail. */
      cell_data small = cell_make(2, 3, 37), big = cell_make(4, 16, 576);
      printf("   (%s, %d threads)\n", cl_cpu_gemm_name((cl_cpu_gemm_kind)kind), t);
      for (int cp = 0; cp <= 1; cp++) {
        test_gates_forward(be, &small, cp);
        test_gates_forward(be, &big, cp);
        test_gates_backward(be, &small, cp);
      }
      cell_free(&small), cell_free(&big);
      if (t == 1) test_activation_accuracy(be);
      cl_gates_shape bad = {1, 1, 1, BAD_DTYPE};
      float dummy[4] = {0};
      cl_status st = be->iface->gates_forward(be, &bad, dummy, NULL, dummy, dummy);
      check_true(st == CL_E_UNSUPPORTED, "unknown dtype gates: %s (%s)", status_str(st), be->err);
      be->iface->destroy(be);
    }
  }
}

/* ---- loss and optimizers -------------------------------------------------- */

static void test_mse(cl_backend *be) {
  enum { N = 100003 };
  float *p = rand_floats(N), *t = rand_floats(N), *g = xmalloc(sizeof(float) * N);
  double *rg = xmalloc(sizeof(double) * N), sum = 0.0, loss = -1.0;
  const float scale = 0.75f;
  for (size_t i = 0; i < N; i++) {
    double d = (double)p[i] - t[i];
    sum += d * d;
    rg[i] = scale * 2.0 * d / N;
  }
  cl_status st = be->iface->mse(be, p, t, N, CL_F32, scale, g, &loss);
  float lf = (float)loss;
  double rl = sum / N;
  check_close("mse loss", &lf, &rl, 1, 1e-6);
  check_close("mse grad", g, rg, N, 1e-6);
  loss = -1.0;
  st |= be->iface->mse(be, p, t, N, CL_F32, 1.0f, NULL, &loss);
  check_true(st == CL_OK && fabs(loss - rl) <= 1e-6 * rl, "mse with grad NULL: %.17g", loss);
  check_true(be->iface->mse(be, p, t, N, BAD_DTYPE, 1.0f, NULL, &loss) == CL_E_UNSUPPORTED,
             "mse of an unknown dtype (%s)", be->err);
  free(p), free(t), free(g), free(rg);
}

/* torch.optim.Adam, in double, for `steps` steps with the same gradients. */
static void ref_adam(double *p, const float *g, size_t n, const cl_adam_hp *hp, int steps) {
  double *m = calloc(n, sizeof(double)), *v = calloc(n, sizeof(double));
  for (int s = 1; s <= steps; s++) {
    double bc1 = 1 - pow(hp->beta1, s), bc2 = 1 - pow(hp->beta2, s);
    for (size_t i = 0; i < n; i++) {
      double gi = g[i] + (double)hp->weight_decay * p[i];
      m[i] = hp->beta1 * m[i] + (1 - (double)hp->beta1) * gi;
      v[i] = hp->beta2 * v[i] + (1 - (double)hp->beta2) * gi * gi;
      p[i] -= hp->lr / bc1 * m[i] / (sqrt(v[i]) / sqrt(bc2) + hp->eps);
    }
  }
  free(m), free(v);
}

static void test_adam(cl_backend *be, float wd) {
  enum { N = 50001, STEPS = 5 };
  float *p = rand_floats(N), *g = rand_floats(N);
  float *m = calloc(N, sizeof(float)), *v = calloc(N, sizeof(float));
  double *rp = to_double(p, N);
  cl_adam_hp hp = {1e-2f, 0.9f, 0.999f, 1e-8f, wd, 0, 0, 0};
  ref_adam(rp, g, N, &hp, STEPS);
  cl_status st = CL_OK;
  for (int s = 1; s <= STEPS; s++) {
    hp.step = s;
    st |= be->iface->adam_update(be, p, g, m, v, NULL, N, &hp);
  }
  char what[80];
  snprintf(what, sizeof what, "adam %d steps, weight_decay %g, t%d", STEPS, wd, be->n_threads);
  check_close(what, p, rp, N, 1e-6);
  hp.step = 0;
  check_true(st == CL_OK && be->iface->adam_update(be, p, g, m, v, NULL, N, &hp) == CL_E_INVALID,
             "  adam rejects step 0");
  free(p), free(g), free(m), free(v), free(rp);
}

/* torch.optim.SGD (dampening 0, no Nesterov), in double. */
static void ref_sgd(double *p, const float *g, size_t n, const cl_sgd_hp *hp, int steps) {
  double *buf = calloc(n, sizeof(double));
  for (int s = 1; s <= steps; s++)
    for (size_t i = 0; i < n; i++) {
      double d = g[i] + (double)hp->weight_decay * p[i];
      if (hp->momentum != 0.0f) {
        buf[i] = s == 1 ? d : hp->momentum * buf[i] + d;
        d = buf[i];
      }
      p[i] -= hp->lr * d;
    }
  free(buf);
}

static void test_sgd(cl_backend *be, float momentum, float wd) {
  enum { N = 40009, STEPS = 4 };
  float *p = rand_floats(N), *g = rand_floats(N), *buf = rand_floats(N); /* garbage at first */
  double *rp = to_double(p, N);
  cl_sgd_hp hp = {0.05f, momentum, wd, 0};
  ref_sgd(rp, g, N, &hp, STEPS);
  cl_status st = CL_OK;
  for (int s = 1; s <= STEPS; s++) {
    hp.first = s == 1;
    st |= be->iface->sgd_update(be, p, g, momentum != 0.0f ? buf : NULL, N, &hp);
  }
  char what[80];
  snprintf(what, sizeof what, "sgd %d steps, momentum %g, weight_decay %g", STEPS, momentum, wd);
  check_close(what, p, rp, N, 1e-6);
  check_true(st == CL_OK, "  status %s", status_str(st));
  free(p), free(g), free(buf), free(rp);
}

/* The updates' guards, a table of planted faults: each row sets one
 * element's inputs (NAN / INFINITY / a huge finite value) and says which
 * array the guard must name there. The guard writes nothing; where it finds
 * no fault, the update then writes only finite numbers. */
typedef struct guard_row {
  const char *what;
  int adam;         /* else sgd */
  float lr, wd, mom; /* mom: sgd's momentum */
  int first;        /* sgd: buffer not yet started (garbage ignored) */
  size_t at;        /* element planted */
  float p, g, m, v; /* planted values; NAN in m/v/p with first etc. */
  int part, is_nan; /* expected; part -1: no fault */
  size_t want_at;   /* expected element */
} guard_row;

static void test_guard_row(cl_backend *be, const guard_row *r) {
  enum { N = 40009 };
  float *p = rand_floats(N), *g = rand_floats(N), *m = rand_floats(N), *v = rand_floats(N);
  for (size_t i = 0; i < N; i++) v[i] = fabsf(v[i]);
  p[r->at] = r->p, g[r->at] = r->g, m[r->at] = r->m, v[r->at] = r->v;
  float *p0 = copy_floats(p, N), *m0 = copy_floats(m, N), *v0 = copy_floats(v, N);
  cl_adam_hp ah = {r->lr, 0.9f, 0.999f, 1e-8f, r->wd, 3, 0, 0};
  cl_sgd_hp sh = {r->lr, r->mom, r->wd, r->first};
  uint64_t f = 0;
  cl_status st = r->adam ? be->iface->adam_check(be, p, g, m, v, NULL, N, &ah, &f)
                         : be->iface->sgd_check(be, p, g, m, N, &sh, &f);
  uint64_t want = r->part < 0 ? CL_FAULT_NONE
                              : (uint64_t)r->want_at * 8 + (uint64_t)r->part * 2 + r->is_nan;
  check_true(st == CL_OK && f == want, "guard t%d, %s: key %llu (element %llu, part %d, nan %d)",
             be->n_threads, r->what, (unsigned long long)f, (unsigned long long)(f / 8),
             (int)(f / 2 % 4), (int)(f % 2));
  check_true(!memcmp(p, p0, N * sizeof(float)) && !memcmp(m, m0, N * sizeof(float)) &&
                 !memcmp(v, v0, N * sizeof(float)),
             "  the guard wrote nothing");
  if (r->part < 0) {
    st = r->adam ? be->iface->adam_update(be, p, g, m, v, NULL, N, &ah)
                 : be->iface->sgd_update(be, p, g, m, N, &sh);
    size_t bad = 0;
    for (size_t i = 0; i < N; i++)
      bad += !isfinite(p[i]) || (r->mom != 0 || r->adam ? !isfinite(m[i]) : 0) ||
             (r->adam && !isfinite(v[i]));
    check_true(st == CL_OK && bad == 0, "  then the update writes %zu non-finite values", bad);
  }
  free(p), free(g), free(m), free(v), free(p0), free(m0), free(v0);
}

static void test_guards(cl_backend *be) {
  const float inf = INFINITY, nan = NAN;
  /* what, adam, lr, wd, mom, first, at, p, g, m, v, part, nan, want_at */
  const guard_row rows[] = {
      {"adam, all finite", 1, 1e-3f, 0, 0, 0, 7, 0.5f, 0.5f, 0.1f, 0.1f, -1, 0, 0},
      {"adam, an Inf gradient", 1, 1e-3f, 0, 0, 0, 777, 0, inf, 0, 0, CL_PART_GRAD, 0, 777},
      {"adam, a NaN gradient", 1, 1e-3f, 0, 0, 0, 40008, 0, nan, 0, 0, CL_PART_GRAD, 1, 40008},
      /* (1 - beta2) * g * g passes 3.4e38 from |g| = 5.8e20 */
      {"adam, g*g overflows exp_avg_sq", 1, 1e-3f, 0, 0, 0, 5, 0, 1e21f, 0, 0, CL_PART_V, 0, 5},
      {"adam, exp_avg already Inf", 1, 1e-3f, 0, 0, 0, 20000, 0, 0, inf, 0, CL_PART_M, 0, 20000},
      {"adam, a NaN exp_avg_sq", 1, 1e-3f, 0, 0, 0, 3, 0, 0, 0, nan, CL_PART_V, 1, 3},
      {"adam, lr / (1 - beta1^t) overflows: every parameter", 1, 3e38f, 0, 0, 0, 0, 0.5f, 0.5f,
       0.5f, 0.5f, CL_PART_PARAM, 0, 0},
      {"sgd, all finite", 0, 0.1f, 0, 0.9f, 0, 7, 0.5f, 0.5f, 0.5f, 0, -1, 0, 0},
      {"sgd, first step ignores a NaN buffer", 0, 0.1f, 0, 0.9f, 1, 7, 0.5f, 0.5f, nan, 0, -1,
       0, 0},
      {"sgd, momentum overflows the buffer", 0, 0.1f, 0, 1e10f, 0, 123, 0, 0, 1e30f, 0,
       CL_PART_M, 0, 123},
      {"sgd, lr * g overflows the parameter", 0, 10, 0, 0, 0, 31, 3e38f, -1e38f, 0, 0,
       CL_PART_PARAM, 0, 31},
      {"sgd, weight decay * p overflows", 0, 0.1f, 1e38f, 0, 0, 9, 10, 0, 0, 0, CL_PART_PARAM, 0,
       9},
      {"sgd, a NaN parameter", 0, 0.1f, 0, 0, 0, 40000, nan, 0, 0, 0, CL_PART_PARAM, 1, 40000},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) test_guard_row(be, &rows[i]);
  /* state about to be created: NULL moments are zeros */
  enum { N = 1000 };
  float *p = rand_floats(N), *g = rand_floats(N);
  cl_adam_hp ah = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, 1, 0, 0};
  uint64_t f = 0;
  cl_status st = be->iface->adam_check(be, p, g, NULL, NULL, NULL, N, &ah, &f);
  check_true(st == CL_OK && f == CL_FAULT_NONE, "guard t%d: adam with no state yet", be->n_threads);
  g[400] = 1e21f;
  st = be->iface->adam_check(be, p, g, NULL, NULL, NULL, N, &ah, &f);
  check_true(st == CL_OK && f == 400 * 8 + CL_PART_V * 2, "guard t%d: adam with no state, g*g overflows",
             be->n_threads);
  free(p), free(g);
}

static void test_optim(void) {
  printf("-- loss and optimizers\n");
  for (int t = 1; t <= 2; t++) {
    cl_backend *be = make_backend(t, CL_CPU_GEMM_GENERIC);
    test_mse(be);
    test_adam(be, 0.0f);
    test_adam(be, 0.01f);
    test_sgd(be, 0.0f, 0.0f);
    test_sgd(be, 0.9f, 0.0f);
    test_sgd(be, 0.9f, 1e-3f);
    test_guards(be);
    be->iface->destroy(be);
  }
}

/* ---- memory functions ----------------------------------------------------- */

static void test_memory(void) {
  printf("-- memory functions\n");
  cl_backend *be;
  cl_status st = cl_backend_cpu_create(0, &be);
  check_true(st == CL_OK && be->n_threads >= 1 && be->iface->host_accessible &&
                 strcmp(be->iface->name, "cpu") == 0,
             "create: %d threads, gemm %s", be->n_threads, cl_cpu_gemm_name(cl_cpu_gemm_of(be)));
  void *p = NULL, *q = NULL, *z = (void *)1;
  st = be->iface->alloc(be, 1000, &p);
  st |= be->iface->alloc(be, 1000, &q);
  st |= be->iface->alloc(be, 0, &z);
  check_true(st == CL_OK && p && q && z == NULL && (uintptr_t)p % 64 == 0 && (uintptr_t)q % 64 == 0,
             "alloc: 64-byte aligned, size 0 gives NULL");
  unsigned char host[1000], back[1000];
  for (int i = 0; i < 1000; i++) host[i] = (unsigned char)(i * 7);
  st = be->iface->upload(be, p, host, 1000);
  st |= be->iface->copy(be, q, p, 1000);
  st |= be->iface->download(be, back, q, 1000);
  check_true(st == CL_OK && memcmp(host, back, 1000) == 0, "upload, copy, download round trip");
  st = be->iface->memset0(be, q, 1000);
  st |= be->iface->download(be, back, q, 1000);
  int zero = 1;
  for (int i = 0; i < 1000; i++) zero &= back[i] == 0;
  check_true(st == CL_OK && zero, "memset0");
  size_t fr = 0, tot = 0;
  st = be->iface->mem_info(be, &fr, &tot);
  check_true(st == CL_OK && tot > 0 && fr <= tot, "mem_info: %.1f GiB free of %.1f GiB",
             fr / 1073741824.0, tot / 1073741824.0);
#ifndef __SANITIZE_ADDRESS__ /* ASan aborts on a refused allocation by default */
  void *huge = NULL;
  st = be->iface->alloc(be, SIZE_MAX / 2, &huge);
  check_true(st == CL_E_OOM && huge == NULL && be->err[0], "absurd alloc: %s (%s)", status_str(st),
             be->err);
#endif
  check_true(be->iface->synchronize == NULL, "synchronize is the default (NULL)");
  be->iface->free(be, p);
  be->iface->free(be, q);
  be->iface->free(be, NULL);
  be->iface->destroy(be);
}

/* ---- float16 / bfloat16 storage ------------------------------------------- */

/* The bits of x in dtype t; x itself is rounded in place to the stored
 * values, so references computed from x see what the kernels see. */
static void *to_dtype(cl_dtype t, float *x, size_t n) {
  if (t == CL_F32) return copy_floats(x, n);
  uint16_t *h = xmalloc(sizeof(uint16_t) * n);
  for (size_t i = 0; i < n; i++) {
    h[i] = t == CL_F16 ? cl_f32_to_f16(x[i]) : cl_f32_to_bf16(x[i]);
    x[i] = t == CL_F16 ? cl_f16_to_f32(h[i]) : cl_bf16_to_f32(h[i]);
  }
  return h;
}

static float *from_dtype(cl_dtype t, const void *p, size_t n) {
  float *x = xmalloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++)
    x[i] = t == CL_F32   ? ((const float *)p)[i]
           : t == CL_F16 ? cl_f16_to_f32(((const uint16_t *)p)[i])
                         : cl_bf16_to_f32(((const uint16_t *)p)[i]);
  return x;
}

static const char *dtype_name(cl_dtype t) {
  return t == CL_F16 ? "float16" : t == CL_BF16 ? "bfloat16" : "float32";
}

/* Error allowed on results stored in t: a few roundings of 2^-11 (float16)
 * or 2^-8 (bfloat16) relative to the largest value. */
static double stored_tol(cl_dtype t) { return t == CL_F16 ? 1e-3 : t == CL_BF16 ? 8e-3 : 2e-5; }

/* Conversions of the kernels against core/half.h on awkward values:
 * subnormals, overflow, ties, NaN, through the vector and the scalar path. */
static void test_half_conversions(void) {
  static const float special[] = {
      0.0f,     -0.0f, 1.0f,    65504.0f, 65520.0f,       1e-7f,          6.1e-5f,  5.96e-8f,
      2.98e-8f, 1e30f, -1e-40f, 3.14159f, 1.00048828125f, 1.00146484375f, INFINITY, -INFINITY};
  enum { N = 1000 };
  float x[N];
  for (int i = 0; i < N; i++)
    x[i] = i < 16 ? special[i] : (float)(uniform() * pow(2.0, rand_int(-30, 17)));
  for (int t = CL_F16; t <= CL_BF16; t++) {
    uint16_t bits[N];
    float back[N], want[N];
    cl_cpu_store((cl_dtype)t, x, bits, 0, N, 0);
    int same = 1;
    for (int i = 0; i < N; i++)
      same &= bits[i] == (t == CL_F16 ? cl_f32_to_f16(x[i]) : cl_f32_to_bf16(x[i]));
    cl_cpu_load((cl_dtype)t, bits, 0, back, N);
    for (int i = 0; i < N; i++)
      want[i] = t == CL_F16 ? cl_f16_to_f32(bits[i]) : cl_bf16_to_f32(bits[i]);
    same &= memcmp(back, want, sizeof back) == 0;
    check_true(same, "%s store and load bit-identical to core/half.h", dtype_name((cl_dtype)t));
  }
}

static void half_conv_forward(cl_backend *be, cl_conv_shape s, int acc) {
  size_t nx = (size_t)s.N * s.C * s.H * s.W, ny = (size_t)s.N * s.K * s.H * s.W;
  float *x = rand_floats(nx), *w = rand_floats((size_t)s.K * s.C * s.k * s.k);
  float *b = rand_floats(s.K), *y0 = rand_floats(ny);
  void *xs = to_dtype(s.dtype, x, nx), *ys = to_dtype(s.dtype, y0, ny);
  double *ref = xmalloc(sizeof(double) * ny);
  ref_conv_forward(&s, x, w, b, y0, acc, ref);
  test_ws t = ws_make(be, &s, 4);
  cl_status st = be->iface->conv_forward(be, &s, xs, w, b, ys, acc, t.ws);
  float *got = from_dtype(s.dtype, ys, ny);
  char what[200];
  shape_name(what, sizeof what, "conv fwd", &s, be, dtype_name(s.dtype));
  check_close(what, got, ref, ny, stored_tol(s.dtype));
  check_true(st == CL_OK && canary_intact(t.ws + t.bytes), "  %s, workspace within %zu bytes",
             acc ? "accumulating" : "bias", t.bytes);
  free(x), free(w), free(b), free(y0), free(xs), free(ys), free(ref), free(got), free(t.raw);
}

/* dy (and x) in dtype; dx, dw, dbias float32 as backend.h says. */
static void half_conv_backward(cl_backend *be, cl_conv_shape s) {
  size_t nx = (size_t)s.N * s.C * s.H * s.W, ny = (size_t)s.N * s.K * s.H * s.W;
  size_t nw = (size_t)s.K * s.C * s.k * s.k;
  float *x = rand_floats(nx), *dy = rand_floats(ny), *w = rand_floats(nw);
  float *dx = rand_floats(nx), *dw = rand_floats(nw), *db = rand_floats(s.K);
  float *dx0 = copy_floats(dx, nx), *dw0 = copy_floats(dw, nw), *db0 = copy_floats(db, s.K);
  void *xs = to_dtype(s.dtype, x, nx), *dys = to_dtype(s.dtype, dy, ny);
  double *rdx = xmalloc(sizeof(double) * nx), *rdw = xmalloc(sizeof(double) * nw);
  double *rdb = xmalloc(sizeof(double) * s.K);
  ref_conv_backward_data(&s, dy, w, dx0, 1, rdx);
  ref_conv_backward_filter(&s, dy, x, dw0, db0, rdw, rdb);
  test_ws t = ws_make(be, &s, 8);
  cl_status st = be->iface->conv_backward_data(be, &s, dys, w, dx, 1, t.ws);
  st |= be->iface->conv_backward_filter(be, &s, dys, xs, dw, db, t.ws);
  char what[200];
  shape_name(what, sizeof what, "conv bwd", &s, be, dtype_name(s.dtype));
  check_close(what, dx, rdx, nx, 2e-5);
  check_close("  dw", dw, rdw, nw, 2e-5);
  check_close("  dbias", db, rdb, s.K, 2e-5);
  check_true(st == CL_OK && canary_intact(t.ws + t.bytes),
             "  status ok, workspace within %zu bytes", t.bytes);
  free(x), free(dy), free(w), free(dx), free(dw), free(db), free(dx0), free(dw0), free(db0);
  free(xs), free(dys), free(rdx), free(rdw), free(rdb), free(t.raw);
}

/* The analytic backward of backend.h in double, from stored values. */
static void ref_cell_backward(const double a[4], double c, double cp, double dh, double *dc,
                              double dz[4]) {
  double i = a[0], f = a[1], o = a[2], g = a[3], tc = tanh(c);
  double dct = *dc + dh * o * (1 - tc * tc);
  dz[0] = dct * g * i * (1 - i);
  dz[1] = dct * cp * f * (1 - f);
  dz[2] = dh * tc * o * (1 - o);
  dz[3] = dct * i * (1 - g * g);
  *dc = dct * f;
}

static void half_gates_backward(cl_backend *be, cell_data *d, void *zs, void *cs, void *cps) {
  cl_dtype t = d->s.dtype;
  float *act = from_dtype(t, zs, d->ng), *c = from_dtype(t, cs, d->ns);
  float *cp = from_dtype(t, cps, d->ns), *dc = copy_floats(d->b, d->ns);
  double *rdz = xmalloc(sizeof(double) * d->ng), *rdc = xmalloc(sizeof(double) * d->ns);
  for (size_t e = 0; e < d->ns; e++) {
    double a[4], dz[4];
    gather_z(d, act, e, a);
    rdc[e] = d->b[e];
    ref_cell_backward(a, c[e], cp[e], d->a[e], &rdc[e], dz);
    for (int q = 0; q < 4; q++) rdz[gate_index(&d->s, e, q)] = dz[q];
  }
  cl_status st = be->iface->gates_backward(be, &d->s, zs, cs, cps, d->a, dc);
  float *dz = from_dtype(t, zs, d->ng);
  check_close("  backward dz (stored)", dz, rdz, d->ng, stored_tol(t));
  check_close("  backward dc_prev (float32)", dc, rdc, d->ns, 1e-5);
  check_true(st == CL_OK, "  status %s", status_str(st));
  free(act), free(c), free(cp), free(dc), free(rdz), free(rdc), free(dz);
}

static void half_gates(cl_backend *be, cl_dtype t) {
  cell_data d = cell_make(3, 5, 150); /* 150: a full 128 chunk, a vector body and a tail */
  d.s.dtype = t;
  void *zs = to_dtype(t, d.z, d.ng), *cps = to_dtype(t, d.cp, d.ns);
  size_t es = t == CL_F32 ? 4 : 2;
  void *cs = xmalloc(es * d.ns), *hs = xmalloc(es * d.ns);
  double *rc = xmalloc(sizeof(double) * d.ns), *rh = xmalloc(sizeof(double) * d.ns);
  double *ract = xmalloc(sizeof(double) * d.ng);
  for (size_t e = 0; e < d.ns; e++) {
    double zz[4];
    gather_z(&d, d.z, e, zz);
    ref_cell(zz, d.cp[e], &rc[e], &rh[e]);
    for (int q = 0; q < 4; q++) ract[gate_index(&d.s, e, q)] = q < 3 ? dsig(zz[q]) : tanh(zz[q]);
  }
  cl_status st = be->iface->gates_forward(be, &d.s, zs, cps, cs, hs);
  float *c = from_dtype(t, cs, d.ns), *h = from_dtype(t, hs, d.ns), *a = from_dtype(t, zs, d.ng);
  char what[120];
  snprintf(what, sizeof what, "gates %s %s t%d: forward c", dtype_name(t),
           cl_cpu_gemm_name(cl_cpu_gemm_of(be)), be->n_threads);
  check_close(what, c, rc, d.ns, stored_tol(t));
  check_close("  forward h", h, rh, d.ns, stored_tol(t));
  check_close("  forward activations", a, ract, d.ng, stored_tol(t));
  check_true(st == CL_OK, "  status %s", status_str(st));
  half_gates_backward(be, &d, zs, cs, cps);
  free(zs), free(cps), free(cs), free(hs), free(rc), free(rh), free(ract), free(c), free(h),
      free(a);
  cell_free(&d);
}

static void half_mse(cl_backend *be, cl_dtype t) {
  enum { N = 70001 };
  float *p = rand_floats(N), *tg = rand_floats(N), *g = xmalloc(sizeof(float) * N);
  void *ps = to_dtype(t, p, N);
  double *rg = xmalloc(sizeof(double) * N), sum = 0.0, loss = -1.0;
  for (size_t i = 0; i < N; i++) {
    double dd = (double)p[i] - tg[i];
    sum += dd * dd;
    rg[i] = 2.0 * dd / N;
  }
  cl_status st = be->iface->mse(be, ps, tg, N, t, 1.0f, g, &loss);
  check_true(st == CL_OK && fabs(loss - sum / N) <= 1e-6 * (sum / N), "mse %s: loss %.9g",
             dtype_name(t), loss);
  check_close("  grad (float32)", g, rg, N, 1e-6);
  free(p), free(tg), free(g), free(ps), free(rg);
}

static void test_half(void) {
  printf("-- float16 / bfloat16 storage\n");
  test_half_conversions();
  static const cl_conv_shape shapes[] = {{3, 2, 5, 7, 4, 3, CL_F16},
                                         {2, 9, 12, 10, 24, 3, CL_F16},
                                         {3, 17, 11, 13, 9, 1, CL_F16},
                                         {2, 3, 6, 7, 18, 5, CL_F16}};
  for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_AVX512; kind++) {
    if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
    cl_backend *be = make_backend(2, (cl_cpu_gemm_kind)kind);
    for (int t = CL_F16; t <= CL_BF16; t++) {
      for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        cl_conv_shape s = shapes[i];
        s.dtype = (cl_dtype)t;
        half_conv_forward(be, s, 0);
        half_conv_forward(be, s, 1);
        half_conv_backward(be, s);
      }
      half_gates(be, (cl_dtype)t);
      half_mse(be, (cl_dtype)t);
    }
    be->iface->destroy(be);
  }
}

static void test_grad_unscale(void) {
  printf("-- gradient unscaling\n");
  enum { N = 100003 };
  for (int t = 1; t <= 2; t++) {
    cl_backend *be = make_backend(t, CL_CPU_GEMM_GENERIC);
    float *g = rand_floats(N), *g0 = copy_floats(g, N);
    int bad = -1;
    cl_status st = be->iface->grad_unscale(be, g, N, 1.0f / 1024, &bad);
    int exact = 1;
    for (size_t i = 0; i < N; i++) exact &= g[i] == g0[i] / 1024;
    check_true(st == CL_OK && bad == 0 && exact, "t%d: finite gradients scaled by 1/1024", t);
    g[N - 5] = INFINITY;
    be->iface->grad_unscale(be, g, N, 0.5f, &bad);
    check_true(bad == 1, "t%d: an inf is found", t);
    g[N - 5] = NAN;
    be->iface->grad_unscale(be, g, N, 0.5f, &bad);
    check_true(bad == 1, "t%d: a NaN is found", t);
    g[N - 5] = 3e38f;
    be->iface->grad_unscale(be, g, N, 4.0f, &bad);
    check_true(bad == 1, "t%d: an overflow while scaling is found", t);
    free(g), free(g0);
    be->iface->destroy(be);
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-q") == 0) verbose = 0;
  const char *preload = getenv("LD_PRELOAD"); /* valgrind preloads its vgpreload_*.so */
  under_valgrind = preload && strstr(preload, "vgpreload") != NULL;
  if (under_valgrind) printf("(under valgrind: a reduced set of sizes)\n");
  test_memory();
  for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_BLAS; kind++)
    if (cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) {
      test_gemm_kind((cl_cpu_gemm_kind)kind);
      test_gemm_reentrant((cl_cpu_gemm_kind)kind);
    }
  test_conv();
  test_conv_nested();
  test_conv_errors();
  test_gates();
  test_half();
  test_optim();
  test_grad_unscale();
  printf("%d checks, %d failed\n", n_checks, n_failed);
  return n_failed != 0;
}
