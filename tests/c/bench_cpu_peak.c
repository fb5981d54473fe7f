/*
 * tests/c/bench_cpu_peak.c -- how far the CPU backend's convolutions are from
 * this machine's limit (issue #39, item 1).
 *
 * It measures the FMA peak with a loop that touches no memory (independent
 * accumulators in registers, one fused multiply-add per vector lane per
 * instruction), on one thread and on every thread asked for, then times the
 * backend's forward, backward-data and backward-filter convolution at each
 * shape of bench/cpu_shapes.tsv and prints GFLOP/s (2 N K C k^2 H W per call,
 * the formula of bench/cpu_peak.py) and the share of the peak. Seconds are
 * CPU seconds on one thread, wall seconds on more (see now_seconds()).
 *
 * Not a test: it checks nothing. `make bench-peak` builds it and pairs it with
 * PyTorch's convolutions of the same shapes.
 * Usage: bench_cpu_peak THREADS SHAPES.tsv [quick|tiles|bf16|algo|wgemm]   (quick: one
 * call per figure, for CI to see it run; tiles: each GEMM register tile
 * forced and the per-shape timed choice, their calls interleaved; bf16:
 * float32 storage, bfloat16 storage on float32 kernels (CONVLSTM_BF16_DOT=0)
 * and on bfloat16 dot products (CONVLSTM_BF16_DOT=1, where they pay or
 * not), interleaved; algo: forward, backward
 * data and backward filter on im2col/direct + GEMM, Winograd and the timed choice, interleaved;
 * wgemm: the GEMMs inside an F(4x4, r) Winograd call (and F(6x6,3x3)) alone, beside the call)
 * Output: tab-separated rows "peak ISA THREADS GFLOP/s" and
 * "conv CONFIG PART N C K H W k OP MS GFLOP/s SHARE" (tiles: "tile CONFIG
 * PART N C K H W k OP TILE MS GFLOP/s SHARE", TILE a name or "auto"; bf16:
 * "bf16 CONFIG PART N C K H W k OP PATH MS GFLOP/s SHARE", PATH f32,
 * bf16-f32 or bf16-dot, SHARE of the float32 FMA peak; algo: "algo CONFIG
 * PART N C K H W k OP ALGO MS GFLOP/s SHARE", ALGO gemm, winograd,
 * winograd4 or "auto (<the algorithm it chose>)"; wgemm: "wgemm CONFIG PART N C K H
 * W k OP RULE FORM M N K CALL_MS GEMM_MS GEMM_GFLOP/s GEMM_SHARE GEMM_PART", RULE the
 * algorithm the default rule runs for the shape, FORM the one timed (F(4x4, r),
 * and for 3 x 3 F(6x6,3x3) too), M N K one GEMM's, GEMM_PART
 * the GEMMs' time over the call's).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, setenv */
#include "bench_conv.h" /* buffers, one call, best time */
#include "host/half.h"   /* cl_f32_to_bf16 */

#include <immintrin.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One thread: the process's CPU seconds, so that on a shared machine the
 * time another process holds the core is not charged (wall time would).
 * More threads: wall seconds, since a thread waiting at a barrier may sleep
 * and then charges nothing. bench/cpu_peak.py clocks PyTorch the same way. */
static int g_threads = 1;
static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(g_threads == 1 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 12 accumulators: more than the FMA latency times the pipes of any x86 core
 * today, so the loop is bound by FMA throughput, not by a dependency. */
#define ACCS 12

/* The accumulators are named, not an array, so that -O2 keeps them in
 * registers (an array's loop loads and stores each one). */
#define FMA12(fma, m, c)                                                                     \
  a0 = fma(a0, m, c), a1 = fma(a1, m, c), a2 = fma(a2, m, c), a3 = fma(a3, m, c),             \
  a4 = fma(a4, m, c), a5 = fma(a5, m, c), a6 = fma(a6, m, c), a7 = fma(a7, m, c),             \
  a8 = fma(a8, m, c), a9 = fma(a9, m, c), a10 = fma(a10, m, c), a11 = fma(a11, m, c)

__attribute__((target("avx512f"))) static float fma_loop_avx512(long iters) {
  __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  /* distinct starts: equal ones would let the compiler merge the chains */
  __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2), a3 = _mm512_set1_ps(3),
         a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5), a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7),
         a8 = _mm512_set1_ps(8), a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
  for (long it = 0; it < iters; it++) FMA12(_mm512_fmadd_ps, m, c);
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static float fma_loop_avx2(long iters) {
  __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  /* distinct starts: equal ones would let the compiler merge the chains */
  __m256 a0 = _mm256_set1_ps(0), a1 = _mm256_set1_ps(1), a2 = _mm256_set1_ps(2), a3 = _mm256_set1_ps(3),
         a4 = _mm256_set1_ps(4), a5 = _mm256_set1_ps(5), a6 = _mm256_set1_ps(6), a7 = _mm256_set1_ps(7),
         a8 = _mm256_set1_ps(8), a9 = _mm256_set1_ps(9), a10 = _mm256_set1_ps(10), a11 = _mm256_set1_ps(11);
  for (long it = 0; it < iters; it++) FMA12(_mm256_fmadd_ps, m, c);
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  float out[8], r = 0;
  _mm256_storeu_ps(out, s);
  for (int i = 0; i < 8; i++) r += out[i];
  return r;
}

/* GFLOP/s of the FMA loop of `lanes`-wide vectors on `threads` threads, each
 * running it whole (best of 3, after a warm-up that lets the clock settle). */
static double fma_peak(int lanes, int threads, long iters) {
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 4; rep++) {
    double t0 = now_seconds();
#pragma omp parallel num_threads(threads)
    {
      float s = lanes == 16 ? fma_loop_avx512(iters) : fma_loop_avx2(iters);
#pragma omp atomic
      sink += s;
    }
    double t = now_seconds() - t0;
    double gf = 2.0 * lanes * ACCS * (double)iters * threads / t / 1e9;
    if (rep > 0 && gf > best) best = gf;
  }
  (void)sink;
  return best;
}

static void bench_shape(cl_backend *be, const char *config, const char *part, cl_conv_shape s,
                        double peak, int quick) {
  size_t P = (size_t)s.H * s.W, kk = (size_t)s.kh * s.kw;
  bench_bufs B = bench_bufs_make(be, &s);
  double flop = 2.0 * s.N * s.K * s.C * kk * P;
  int reps = quick ? 0 : (int)(1e10 / flop) + 5;
  static const char *names[] = {"fwd", "bwd-data", "bwd-filter"};
  for (int op = 0; op < 3; op++) {
    double t = bench_conv_best(be, &s, &B, op, reps, now_seconds);
    printf("conv\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%.4f\t%.2f\t%.3f\n", config, part, s.N, s.C,
           s.K, s.H, s.W, s.kh, names[op], t * 1e3, flop / t / 1e9, flop / t / 1e9 / peak);
  }
  bench_bufs_free(be, &B);
}

/* The tiles mode: each op's calls with every register tile forced
 * (CONVLSTM_GEMM_TILE) and with none (the per-shape timed choice, "auto",
 * after warm-up calls that finish its timing) in turn, so that a slow spell
 * of the shared machine hits all of them; best call of each. */
static void bench_shape_tiles(cl_backend *be, const char *config, const char *part,
                              cl_conv_shape s, double peak) {
  enum { MAXT = 4 };
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_of(be);
  const int nt = cl_cpu_gemm_tiles(kind) < MAXT ? cl_cpu_gemm_tiles(kind) : MAXT - 1;
  size_t P = (size_t)s.H * s.W, kk = (size_t)s.kh * s.kw;
  bench_bufs B = bench_bufs_make(be, &s);
  double flop = 2.0 * s.N * s.K * s.C * kk * P;
  int reps = (int)(2e10 / flop) + 8;
  static const char *names[] = {"fwd", "bwd-data", "bwd-filter"};
  for (int op = 0; op < 3; op++) {
    double best[MAXT];
    for (int t = 0; t <= nt; t++) best[t] = 1e30;
    for (int w = 0; w < 3; w++) bench_conv_op(be, &s, &B, op); /* auto's timing rounds */
    for (int r = 0; r < reps; r++)
      for (int t = 0; t <= nt; t++) {
        if (t < nt) setenv("CONVLSTM_GEMM_TILE", cl_cpu_gemm_tile_name(kind, t), 1);
        double t0 = now_seconds();
        if (bench_conv_op(be, &s, &B, op) != CL_OK) {
          fprintf(stderr, "conv failed: %s\n", be->err);
          exit(1);
        }
        double dt = now_seconds() - t0;
        unsetenv("CONVLSTM_GEMM_TILE");
        if (dt < best[t]) best[t] = dt;
      }
    for (int t = 0; t <= nt; t++)
      printf("tile\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.4f\t%.2f\t%.3f\n", config, part,
             s.N, s.C, s.K, s.H, s.W, s.kh, names[op],
             t < nt ? cl_cpu_gemm_tile_name(kind, t) : "auto", best[t] * 1e3, flop / best[t] / 1e9,
             flop / best[t] / 1e9 / peak);
  }
  bench_bufs_free(be, &B);
}

/* The algo mode: forward, backward data and backward filter with the
 * backend's conv_algo
 * forcing im2col/direct + GEMM ("gemm"), Winograd (F(2x2,3x3) or
 * F(2x2,5x5)), F(4x4,3x3) or F(4x4,5x5) ("winograd4"), and "auto" (the per-shape
 * timed choice, CONVLSTM_CONV_ALGO=auto, after warm-up calls that finish its
 * timing), calls interleaved;
 * best call of each. */
static void bench_shape_algo(cl_backend *be, const char *config, const char *part,
                             cl_conv_shape s, double peak) {
  static const char *algos[] = {"gemm", "winograd", "winograd4", "auto"};
  cl_cpu_ctx *ctx = (cl_cpu_ctx *)be->context;
  size_t P = (size_t)s.H * s.W, kk = (size_t)s.kh * s.kw;
  ctx->conv_algo_env = 0; /* auto: the workspace covers every algorithm */
  /* sized with Winograd forced, as the loop below forces it: under 1e8
   * flops the timed choice plans no Winograd workspace, and a forced call
   * on that smaller one wrote past it (glibc: double free at the free) */
  ctx->conv_algo = 2;
  bench_bufs B = bench_bufs_make(be, &s);
  ctx->conv_algo = 0;
  double flop = 2.0 * s.N * s.K * s.C * kk * P;
  int reps = (int)(1e10 / flop) + 4;
  static const char *names[] = {"fwd", "bwd-data", "bwd-filter"};
  for (int op = 0; op < 3; op++) {
    double best[4] = {1e30, 1e30, 1e30, 1e30};
    for (int w = 0; w < 6; w++) bench_conv_op(be, &s, &B, op); /* auto's timing rounds */
    for (int r = 0; r < reps; r++)
      for (int a = 0; a < 4; a++) {
        if (a == 2 && s.kh != 3 && s.kh != 5) continue;
        ctx->conv_algo = a < 3 ? a + 1 : 0; /* 1 gemm, 2 winograd, 3 winograd4; 0 the timed choice */
        double t0 = now_seconds();
        if (bench_conv_op(be, &s, &B, op) != CL_OK) {
          fprintf(stderr, "conv failed: %s\n", be->err);
          exit(1);
        }
        double dt = now_seconds() - t0;
        ctx->conv_algo = 0;
        if (dt < best[a]) best[a] = dt;
      }
    for (int a = 0; a < 4; a++) {
      if (best[a] >= 1e30) continue;
      const char *name = a == 3 ? be->iface->conv_algo(be, &s, op) : algos[a];
      printf("algo\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s%s%s\t%.4f\t%.2f\t%.3f\n", config,
             part, s.N, s.C, s.K, s.H, s.W, s.kh, names[op], a == 3 ? "auto (" : "", name,
             a == 3 ? ")" : "", best[a] * 1e3, flop / best[a] / 1e9, flop / best[a] / 1e9 / peak);
    }
  }
  bench_bufs_free(be, &B);
  ctx->conv_algo_env = cl_cpu_conv_algo_env();
}

static uint16_t *bf16_copy(const float *v, size_t n) {
  uint16_t *p = malloc(sizeof(uint16_t) * (n ? n : 1));
  if (!p) exit(1);
  for (size_t i = 0; i < n; i++) p[i] = cl_f32_to_bf16(v[i]);
  return p;
}

/* The bf16 mode: one op at float32 storage, at bfloat16 storage on the
 * float32 kernels and on the bfloat16 dot products, calls interleaved. */
static void bench_shape_bf16(cl_backend *be, const char *config, const char *part,
                             cl_conv_shape s, double peak) {
  size_t P = (size_t)s.H * s.W, kk = (size_t)s.kh * s.kw;
  bench_bufs F = bench_bufs_make(be, &s);
  cl_conv_shape h = s;
  h.dtype = CL_BF16;
  size_t off_bytes = 0;
  /* the dot path forced on (CONVLSTM_BF16_DOT=1), wherever it pays or not */
  setenv("CONVLSTM_BF16_DOT", "0", 1);
  cl_backend_conv_workspace_any(be, &h, &off_bytes);
  setenv("CONVLSTM_BF16_DOT", "1", 1);
  bench_bufs H = bench_bufs_make(be, &h); /* its workspace sized for the dot path */
  if (off_bytes > H.ws_bytes) {
    fprintf(stderr, "the float32 kernels' workspace is larger than the dot path's\n");
    exit(1);
  }
  size_t nx = (size_t)s.N * s.C * P, ny = (size_t)s.N * s.K * P;
  uint16_t *xb = bf16_copy(H.x, nx), *dyb = bf16_copy(H.dy, ny), *yb = bf16_copy(H.y, ny);
  float *keep[3] = {H.x, H.dy, H.y};
  H.x = (float *)xb, H.dy = (float *)dyb, H.y = (float *)yb; /* storage, passed as void * */
  double flop = 2.0 * s.N * s.K * s.C * kk * P;
  int reps = (int)(2e10 / flop) + 8;
  static const char *names[] = {"fwd", "bwd-data", "bwd-filter"}, *paths[] = {"f32", "bf16-f32", "bf16-dot"};
  for (int op = 0; op < 3; op++) {
    double best[3] = {1e30, 1e30, 1e30};
    for (int r = -1; r < reps; r++) /* r = -1: a warm-up round */
      for (int k = 0; k < 3; k++) {
        if (k == 1) setenv("CONVLSTM_BF16_DOT", "0", 1);
        double t0 = now_seconds();
        if (bench_conv_op(be, k ? &h : &s, k ? &H : &F, op) != CL_OK) {
          fprintf(stderr, "conv failed: %s\n", be->err);
          exit(1);
        }
        double dt = now_seconds() - t0;
        setenv("CONVLSTM_BF16_DOT", "1", 1);
        if (r >= 0 && dt < best[k]) best[k] = dt;
      }
    for (int k = 0; k < 3; k++)
      printf("bf16\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.4f\t%.2f\t%.3f\n", config, part,
             s.N, s.C, s.K, s.H, s.W, s.kh, names[op], paths[k], best[k] * 1e3,
             flop / best[k] / 1e9, flop / best[k] / 1e9 / peak);
  }
  H.x = keep[0], H.dy = keep[1], H.y = keep[2];
  free(xb), free(dyb), free(yb);
  bench_bufs_free(be, &F);
  bench_bufs_free(be, &H);
}

/* The wgemm mode: the GEMMs inside a Winograd call (F(m x m, r): m 4, and
 * 6 for 3 x 3, the default rule's forms), timed alone at the shapes and counts the call runs them
 * (cl_cpu_wino_chunks_of: images a chunk, tiles an image, output channels
 * a block), beside the whole call forced to that form, interleaved. The
 * planes lie 16 floats apart here, not an odd number of cache lines as in
 * the call (cpu_winograd.c's plane_floats). Forward and backward data: n^2 products [kb x C] x [C x T]
 * a block of a chunk (backward data with C and K swapped), U[e] in
 * slivers where the call keeps it so (cl_cpu_sgemm_panels); backward
 * filter: n^2 products [K x T] x [T x C] a chunk, summed over the chunks.
 * One thread only: the call's GEMMs are single-threaded pieces. */
static double wino_gemms(cl_cpu_gemm_kind kind, const cl_cpu_wino_chunks *w, int dir, int N,
                         int C, int K, float *U, float *V, float *M, void *scratch) {
  const int nn = w->n * w->n, T = w->images * w->tiles;
  const size_t vs = (size_t)C * T + 16, ms = (size_t)(dir == 2 ? K : w->kb) * T + 16;
  double flop = 0;
  for (int n0 = 0; n0 < N; n0 += w->images) {
    const int len = (N - n0 < w->images ? N - n0 : w->images) * w->tiles;
    if (dir == 2) {
      for (int e = 0; e < nn; e++)
        cl_cpu_sgemm(kind, 1, 0, K, C, len, 1.0f, M + e * ms, K, V + e * vs, C, n0 ? 1.0f : 0.0f,
                     U + (size_t)e * K * C, C, scratch);
      flop += 2.0 * nn * K * C * len;
      continue;
    }
    /* U[e] as the call lays it out: in slivers of P rows where the
     * kernels read them, else transposed (the plan's, w->P) */
    const int P = w->P, Kp = P ? (K + P - 1) / P * P : K;
    for (int k0 = 0; k0 < K; k0 += w->kb) {
      const int kn = K - k0 < w->kb ? K - k0 : w->kb;
      for (int e = 0; e < nn; e++) {
        const float *Ue = U + (size_t)e * Kp * C;
        if (P)
          cl_cpu_sgemm_panels(kind, P, kn, len, C, 1.0f, Ue + (size_t)k0 * C, V + e * vs, T, 0.0f,
                              M + e * ms, T, scratch);
        else
          cl_cpu_sgemm(kind, 1, 0, kn, len, C, 1.0f, Ue + k0, K, V + e * vs, T, 0.0f, M + e * ms,
                       T, scratch);
      }
      flop += 2.0 * nn * kn * C * len;
    }
  }
  return flop;
}

static void bench_shape_wino_gemm(cl_backend *be, const char *config, const char *part,
                                  cl_conv_shape s, double peak, int m) {
  static const char *names[] = {"fwd", "bwd-data", "bwd-filter"};
  cl_cpu_ctx *ctx = (cl_cpu_ctx *)be->context;
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_of(be);
  const double conv_flop = 2.0 * s.N * s.K * s.C * s.kh * s.kw * s.H * s.W;
  char rule[3][64]; /* the default's (conv_algo's string is reused at each call) */
  ctx->conv_algo = 0;
  for (int op = 0; op < 3; op++)
    snprintf(rule[op], sizeof rule[op], "%s", be->iface->conv_algo(be, &s, op));
  ctx->conv_algo = m == 6 ? 5 : 3; /* F(m x m, r) forced: the workspace sized for it */
  bench_bufs B = bench_bufs_make(be, &s);
  for (int op = 0; op < 3; op++) {
    cl_cpu_wino_chunks w;
    if (!cl_cpu_wino_chunks_of(be, &s, op, m, &w)) break;
    const int C = op == 1 ? s.K : s.C, K = op == 1 ? s.C : s.K; /* the call's own roles */
    const size_t nn = (size_t)w.n * w.n, T = (size_t)w.images * w.tiles;
    const size_t rows = op == 2 ? (size_t)K : (size_t)w.kb;
    const size_t Kp = w.P ? ((size_t)K + w.P - 1) / w.P * w.P : (size_t)K; /* U[e]'s slivers */
    float *U = calloc(nn * Kp * C, sizeof(float)), *V = calloc(nn * (C * T + 16), sizeof(float));
    float *M = calloc(nn * (rows * T + 16), sizeof(float));
    void *scratch = malloc(cl_cpu_sgemm_scratch_bytes(kind, K, op == 2 ? C : (int)T,
                                                      op == 2 ? (int)T : C) + 64);
    if (!U || !V || !M || !scratch) {
      fprintf(stderr, "out of memory for the Winograd GEMMs of %s\n", part);
      exit(1);
    }
    for (size_t i = 0; i < nn * Kp * C; i++) U[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < nn * (C * T + 16); i++) V[i] = (float)(i % 5) * 0.1f;
    for (size_t i = 0; i < nn * (rows * T + 16); i++) M[i] = (float)(i % 3) * 0.1f;
    double best_call = 1e30, best_gemm = 1e30, flop = 0;
    const int reps = (int)(5e9 / conv_flop) + 4;
    for (int r = 0; r < reps + 2; r++) {
      double t0 = now_seconds();
      if (bench_conv_op(be, &s, &B, op) != CL_OK) {
        fprintf(stderr, "conv failed: %s\n", be->err);
        exit(1);
      }
      double t1 = now_seconds();
      flop = wino_gemms(kind, &w, op, s.N, C, K, U, V, M, scratch);
      double t2 = now_seconds();
      if (r < 2) continue; /* warm-up */
      if (t1 - t0 < best_call) best_call = t1 - t0;
      if (t2 - t1 < best_gemm) best_gemm = t2 - t1;
    }
    printf("wgemm\t%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\tF(%dx%d,%dx%d)\t%d\t%d\t%d\t%.4f\t"
           "%.4f\t%.2f\t%.3f\t%.3f\n",
           config, part, s.N, s.C, s.K, s.H, s.W, s.kh, names[op], rule[op], m, m, s.kh, s.kh,
           op == 2 ? K : w.kb,
           op == 2 ? C : (int)T, op == 2 ? (int)T : C, best_call * 1e3, best_gemm * 1e3,
           flop / best_gemm / 1e9, flop / best_gemm / 1e9 / peak, best_gemm / best_call);
    free(U), free(V), free(M), free(scratch);
  }
  bench_bufs_free(be, &B);
  ctx->conv_algo = 0;
}

/* One shape per non-comment row of the table: config, part, N, C, K, H, W, k. */
static void bench_table(cl_backend *be, const char *path, double peak, int quick, int mode) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  char line[512], config[64], part[128];
  while (fgets(line, sizeof line, f)) {
    if (line[0] == '#' || line[0] == '\n') continue;
    cl_conv_shape s = {0};
    if (sscanf(line, "%63[^\t]\t%127[^\t]\t%d\t%d\t%d\t%d\t%d\t%d", config, part, &s.N, &s.C,
               &s.K, &s.H, &s.W, &s.kh) != 8) {
      fprintf(stderr, "%s: cannot read the row: %s", path, line);
      exit(1);
    }
    s.kw = s.kh, s.dh = s.dw = 1, s.dtype = CL_F32;
    if (mode == 1)
      bench_shape_tiles(be, config, part, s, peak);
    else if (mode == 2)
      bench_shape_bf16(be, config, part, s, peak);
    else if (mode == 3)
      bench_shape_algo(be, config, part, s, peak);
    else if (mode == 4)
      for (int m = 4; m <= (s.kh == 3 ? 6 : 4); m += 2) /* and F(6x6,3x3) */
        bench_shape_wino_gemm(be, config, part, s, peak, m);
    else
      bench_shape(be, config, part, s, peak, quick);
  }
  fclose(f);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_cpu_peak THREADS SHAPES.tsv [quick|tiles|bf16|algo|wgemm]\n");
    return 2;
  }
  int threads = atoi(argv[1]), quick = argc > 3 && strcmp(argv[3], "quick") == 0;
  int mode = argc > 3 && strcmp(argv[3], "tiles") == 0 ? 1
             : argc > 3 && strcmp(argv[3], "bf16") == 0  ? 2
             : argc > 3 && strcmp(argv[3], "algo") == 0  ? 3
             : argc > 3 && strcmp(argv[3], "wgemm") == 0 ? 4
                                                         : 0;
  g_threads = threads > 0 ? threads : 1;
  cl_backend *be;
  if (threads < 1 || cl_backend_cpu_create(threads, &be) != CL_OK) return 1;
  long iters = quick ? 1000 : 200000000L / ACCS;
  double peak = 0;
  if (__builtin_cpu_supports("avx512f")) {
    double p = fma_peak(16, threads, iters);
    printf("peak\tavx512\t%d\t%.2f\n", threads, p);
    peak = p;
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    double p = fma_peak(8, threads, iters);
    printf("peak\tavx2\t%d\t%.2f\n", threads, p);
    if (p > peak) peak = p;
  }
  if (peak <= 0) {
    fprintf(stderr, "no AVX2/FMA or AVX-512 here: no FMA peak to compare with\n");
    return 1;
  }
  printf("gemm\t%s\t%d\n", cl_cpu_gemm_name(cl_cpu_gemm_of(be)), be->n_threads);
  bench_table(be, argv[2], peak, quick, mode);
  be->iface->destroy(be);
  return 0;
}
