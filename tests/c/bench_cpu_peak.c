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
 * Usage: bench_cpu_peak THREADS SHAPES.tsv [quick]   (quick: one call per
 * figure, for CI to see it run)
 * Output: tab-separated rows "peak ISA THREADS GFLOP/s" and
 * "conv CONFIG PART N C K H W k OP MS GFLOP/s SHARE".
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "bench_conv.h" /* buffers, one call, best time */

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

/* One shape per non-comment row of the table: config, part, N, C, K, H, W, k. */
static void bench_table(cl_backend *be, const char *path, double peak, int quick) {
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
    bench_shape(be, config, part, s, peak, quick);
  }
  fclose(f);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_cpu_peak THREADS SHAPES.tsv [quick]\n");
    return 2;
  }
  int threads = atoi(argv[1]), quick = argc > 3 && strcmp(argv[3], "quick") == 0;
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
  bench_table(be, argv[2], peak, quick);
  be->iface->destroy(be);
  return 0;
}
