/*
 * tests/c/bench_core_pair.c -- what two cores of this machine cost each
 * other (issue #39, item 5: why one process's two threads gain less than
 * two one-thread processes that share nothing). Two measurements, each on
 * two OpenMP threads:
 *
 * cross: one buffer. Each round one thread (the writer) writes all of it,
 *   both meet at a barrier, and then one thread times a pass over it: the
 *   writer itself (its own cache holds the lines) or the other thread (they
 *   are in the other core's cache, modified). The rounds cycle through the
 *   four pairs of writer and reader, so a core that runs slower than the
 *   other for a while (a busy neighbour on the host) weighs on both columns
 *   alike, and so does a machine whose speed drifts.
 *     read:  a read of one float per line;
 *     write: a store to every float (the other core must give each line up).
 * stream: a buffer per thread, four passes over it (reading every float, or
 *   writing every float), timed with thread 0 alone, thread 1 alone and both
 *   at once, in turn: whether two cores that stream at the same moment
 *   share a bandwidth that one alone has to itself.
 * The clock is CLOCK_MONOTONIC around the timed passes alone.
 *
 * Not a test: it checks nothing. Usage: bench_core_pair [KiB ...] (default
 * 256 768 2048 8192 32768). Output: tab-separated rows "cross SIZE_KIB OP
 * OWN_US OTHER_US RATIO" (mean microseconds a pass) and "stream SIZE_KIB
 * OP ALONE_GBS TOGETHER_GBS RATIO" (GB/s a core, the two cores' mean).
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROUNDS = 200, STREAM_ROUNDS = 150, PASSES = 4, LINE_FLOATS = 16 };

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One float a line: the pass is bound by moving lines, not by adds. */
static float read_lines(const float *a, size_t n) {
  float s = 0.0f;
  for (size_t i = 0; i < n; i += LINE_FLOATS) s += a[i];
  return s;
}

/* libc's memset: the widest stores this CPU has (a float loop at -O2 and
 * no -march was bound by its stores, not by the memory). */
static void write_all(float *a, size_t n, int v) {
  memset(a, v & 0x3f, n * sizeof(float));
}

/* Every float, four vectors of four a step in four chains (scalar adds
 * were bound by their latency at 27 GB/s, not by the memory). */
typedef float v4f __attribute__((vector_size(16)));
static float read_all(const float *a, size_t n) {
  v4f s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
  const v4f *v = (const v4f *)a; /* 64-byte aligned (aligned_alloc) */
  for (size_t i = 0; i + 16 <= n; i += 16, v += 4) s0 += v[0], s1 += v[1], s2 += v[2], s3 += v[3];
  const v4f s = (s0 + s1) + (s2 + s3);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

/* Mean seconds of the timed pass by its own core ([0]) and the other ([1]);
 * returns the team's size (under 2: nothing was measured). */
static int measure(float *a, size_t n, int op_write, double out[2]) {
  double sum[2] = {0.0, 0.0};
  volatile float sink = 0.0f;
  int team = 0;
#pragma omp parallel num_threads(2)
  {
    const int tid = omp_get_thread_num();
#pragma omp single
    team = omp_get_num_threads();
    for (int r = 0; team == 2 && r < ROUNDS; r++) {
      const int writer = (r >> 1) & 1, who = r & 1; /* who 0: the writer, 1: the other */
      if (tid == writer) write_all(a, n, r);
#pragma omp barrier
      if (tid == (writer ^ who)) {
        const double t0 = now_seconds();
        if (op_write) write_all(a, n, r);
        else sink += read_lines(a, n);
        sum[who] += now_seconds() - t0;
      }
#pragma omp barrier
    }
  }
  (void)sink;
  out[0] = sum[0] / (ROUNDS / 2), out[1] = sum[1] / (ROUNDS / 2);
  return team;
}

/* GB/s a core streaming its own buffer of n floats alone ([0]) and while
 * the other streams its own ([1]), the two cores' mean; returns the team's
 * size as measure does. */
static int stream(float *const b[2], size_t n, int op_write, double out[2]) {
  double sec[2][2] = {{0.0, 0.0}, {0.0, 0.0}}; /* [alone, together][thread] */
  volatile float sink = 0.0f;
  int team = 0;
#pragma omp parallel num_threads(2)
  {
    const int tid = omp_get_thread_num();
#pragma omp single
    team = omp_get_num_threads();
    for (int r = 0; team == 2 && r < STREAM_ROUNDS; r++) {
      const int mode = r % 3; /* 0, 1: that thread alone; 2: both */
#pragma omp barrier
      if (mode == 2 || mode == tid) {
        const double t0 = now_seconds();
        for (int k = 0; k < PASSES; k++) {
          if (op_write) write_all(b[tid], n, k);
          else sink += read_all(b[tid], n);
        }
        sec[mode == 2][tid] += now_seconds() - t0;
      }
#pragma omp barrier
    }
  }
  (void)sink;
  const double gb = 1e-9 * sizeof(float) * (double)n * PASSES * (STREAM_ROUNDS / 3);
  for (int m = 0; m < 2; m++) out[m] = 0.5 * (gb / sec[m][0] + gb / sec[m][1]);
  return team;
}

/* One size's four rows; 0, or 2 with a message when it cannot run. */
static int run_size(int kib) {
  const size_t n = (size_t)kib * 1024 / sizeof(float);
  float *b[2] = {aligned_alloc(64, n * sizeof(float)), aligned_alloc(64, n * sizeof(float))};
  int rc = 0;
  if (!b[0] || !b[1]) {
    fprintf(stderr, "bench_core_pair: cannot allocate 2 x %d KiB\n", kib);
    rc = 2;
  }
  for (int i = 0; !rc && i < 2; i++) memset(b[i], 0, n * sizeof(float));
  for (int k = 0; !rc && k < 4; k++) {
    const int op = k % 2, cross = k < 2;
    double t[2];
    if ((cross ? measure(b[0], n, op, t) : stream(b, n, op, t)) < 2) {
      fprintf(stderr, "bench_core_pair: OpenMP gave one thread; it needs two\n");
      rc = 2;
    } else if (cross) {
      printf("cross\t%d\t%s\t%.2f\t%.2f\t%.2f\n", kib, op ? "write" : "read", 1e6 * t[0],
             1e6 * t[1], t[1] / t[0]);
    } else {
      printf("stream\t%d\t%s\t%.1f\t%.1f\t%.2f\n", kib, op ? "write" : "read", t[0], t[1],
             t[1] / t[0]);
    }
  }
  free(b[0]), free(b[1]);
  return rc;
}

int main(int argc, char **argv) {
  static const int dflt[] = {256, 768, 2048, 8192, 32768};
  const int nsizes = argc > 1 ? argc - 1 : 5;
  for (int i = 0; i < nsizes; i++) {
    const int kib = argc > 1 ? atoi(argv[i + 1]) : dflt[i];
    if (kib < 4 || kib > (1 << 22)) {
      fprintf(stderr, "bench_core_pair: sizes are KiB, 4 to 4194304 (got '%s')\n", argv[i + 1]);
      return 2;
    }
    if (run_size(kib)) return 2;
  }
  return 0;
}
