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
#include "bench_common.h" /* bench_now */

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROUNDS = 200, STREAM_ROUNDS = 150, PASSES = 4, LINE_FLOATS = 16 };

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

/* A measurement's rounds on two threads: each round, prepare (may be NULL)
 * on every thread, a barrier, timed on every thread, a barrier. */
typedef struct pair_job {
  void (*prepare)(struct pair_job *j, int r, int tid);
  void (*timed)(struct pair_job *j, int r, int tid);
  float *b[2]; /* cross: b[0] only */
  size_t n;
  int op_write;
  double sec[2][2];
  float sink[2][16]; /* a thread's sums, a line each */
} pair_job;

/* The team's size (under 2: nothing was measured). */
static int run_rounds(pair_job *j, int rounds) {
  int team = 0;
#pragma omp parallel num_threads(2)
  {
    const int tid = omp_get_thread_num();
#pragma omp single
    team = omp_get_num_threads();
    for (int r = 0; team == 2 && r < rounds; r++) {
      if (j->prepare) j->prepare(j, r, tid);
#pragma omp barrier
      j->timed(j, r, tid);
#pragma omp barrier
    }
  }
  return team;
}

/* cross: round r's writer writes; then the writer (who 0) or the other
 * thread (who 1) times one pass, sec[0][who]. */
static void cross_prepare(pair_job *j, int r, int tid) {
  if (tid == ((r >> 1) & 1)) write_all(j->b[0], j->n, r);
}

static void cross_timed(pair_job *j, int r, int tid) {
  const int writer = (r >> 1) & 1, who = r & 1;
  if (tid != (writer ^ who)) return;
  const double t0 = bench_now();
  if (j->op_write) write_all(j->b[0], j->n, r);
  else j->sink[tid][0] += read_lines(j->b[0], j->n);
  j->sec[0][who] += bench_now() - t0;
}

/* stream: thread 0 alone, thread 1 alone, both, in turn; sec[together][tid]. */
static void stream_timed(pair_job *j, int r, int tid) {
  const int mode = r % 3;
  if (mode != 2 && mode != tid) return;
  const double t0 = bench_now();
  for (int k = 0; k < PASSES; k++) {
    if (j->op_write) write_all(j->b[tid], j->n, k);
    else j->sink[tid][0] += read_all(j->b[tid], j->n);
  }
  j->sec[mode == 2][tid] += bench_now() - t0;
}

/* cross: mean seconds of the writer's pass ([0]) and the other's ([1]);
 * stream: GB/s a core alone ([0]) and both at once ([1]), the two cores'
 * mean. Returns the team's size. */
static int measure(pair_job *j, int cross, double out[2]) {
  memset(j->sec, 0, sizeof j->sec);
  j->prepare = cross ? cross_prepare : NULL;
  j->timed = cross ? cross_timed : stream_timed;
  const int team = run_rounds(j, cross ? ROUNDS : STREAM_ROUNDS);
  if (cross) {
    out[0] = j->sec[0][0] / (ROUNDS / 2), out[1] = j->sec[0][1] / (ROUNDS / 2);
    return team;
  }
  const double gb = 1e-9 * sizeof(float) * (double)j->n * PASSES * (STREAM_ROUNDS / 3);
  for (int m = 0; m < 2; m++) out[m] = 0.5 * (gb / j->sec[m][0] + gb / j->sec[m][1]);
  return team;
}

/* One size's four rows; 0, or 2 with a message when it cannot run. */
static int run_size(int kib) {
  const size_t n = (size_t)kib * 1024 / sizeof(float);
  pair_job j = {NULL, NULL, {NULL, NULL}, n, 0, {{0.0}}, {{0.0f}}};
  float **b = j.b;
  b[0] = aligned_alloc(64, n * sizeof(float)), b[1] = aligned_alloc(64, n * sizeof(float));
  int rc = 0;
  if (!b[0] || !b[1]) {
    fprintf(stderr, "bench_core_pair: cannot allocate 2 x %d KiB\n", kib);
    rc = 2;
  }
  for (int i = 0; !rc && i < 2; i++) memset(b[i], 0, n * sizeof(float));
  for (int k = 0; !rc && k < 4; k++) {
    const int op = k % 2, cross = k < 2;
    double t[2];
    j.op_write = op;
    if (measure(&j, cross, t) < 2) {
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
