/*
 * tests/c/bench_conv.h -- what the convolution benchmarks (bench_cpu_conv.c,
 * bench_cpu_peak.c) and the tests that compare algorithms' bits
 * (test_cpu_wino_rule.c, test_cpu_wino_fixed.c) share: one shape's buffers
 * of random values and its workspace, one call of forward, backward-data
 * or backward-filter, its result, and the best time of a few calls by the
 * caller's clock. On any failure it prints why and exits.
 */
#ifndef CONVLSTM_BENCH_CONV_H
#define CONVLSTM_BENCH_CONV_H

#include "cpu/cpu_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline float *bench_random_floats(size_t n) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  return p;
}

typedef struct bench_bufs {
  float *x, *w, *b, *y, *dy, *dx, *dw, *db;
  void *ws;
  size_t ws_bytes;
} bench_bufs;

/* Every array a call of shape s reads or writes, and its workspace. */
static inline bench_bufs bench_bufs_make(cl_backend *be, const cl_conv_shape *s) {
  size_t P = (size_t)s->H * s->W, kk = (size_t)s->kh * s->kw;
  size_t in = (size_t)s->N * s->C * P, out = (size_t)s->N * s->K * P, w = (size_t)s->K * s->C * kk;
  bench_bufs B = {bench_random_floats(in),  bench_random_floats(w),   bench_random_floats(s->K),
                  bench_random_floats(out), bench_random_floats(out), bench_random_floats(in),
                  bench_random_floats(w),   bench_random_floats(s->K), NULL, 0};
  if (cl_backend_conv_workspace_any(be, s, &B.ws_bytes) != CL_OK ||
      be->iface->alloc(be, B.ws_bytes, &B.ws) != CL_OK) {
    fprintf(stderr, "conv workspace: %s\n", be->err);
    exit(1);
  }
  return B;
}

static inline void bench_bufs_free(cl_backend *be, bench_bufs *B) {
  be->iface->free(be, B->ws);
  free(B->x), free(B->w), free(B->b), free(B->y);
  free(B->dy), free(B->dx), free(B->dw), free(B->db);
}

/* op 0: forward, 1: backward data, 2: backward filter. */
static inline cl_status bench_conv_op(cl_backend *be, const cl_conv_shape *s, bench_bufs *B,
                                      int op) {
  const struct cl_backend_i *f = be->iface;
  if (op == 0) return f->conv_forward(be, s, B->x, B->w, B->b, B->y, 0, B->ws);
  if (op == 1) return f->conv_backward_data(be, s, B->dy, B->w, B->dx, 0, B->ws);
  return f->conv_backward_filter(be, s, B->dy, B->x, B->dw, B->db, B->ws);
}

/* A copy of what op writes (y, dx, or dw summed from zeros) for inputs
 * drawn after srand(seed): malloc'd, *n floats. The tests that compare
 * backends' bits call it on each with the same seed. db (may be NULL):
 * for backward filter, a malloc'd copy of the bias gradient (K floats,
 * summed from zeros) of the same call. */
static inline float *bench_conv_result(cl_backend *be, const cl_conv_shape *s, int op,
                                       unsigned seed, size_t *n, float **db) {
  srand(seed);
  bench_bufs B = bench_bufs_make(be, s);
  const size_t sizes[3] = {(size_t)s->N * s->K * s->H * s->W, (size_t)s->N * s->C * s->H * s->W,
                           (size_t)s->K * s->C * s->kh * s->kw};
  float *dst[3] = {B.y, B.dx, B.dw};
  if (op == 2) memset(B.dw, 0, sizeof(float) * sizes[2]), memset(B.db, 0, sizeof(float) * s->K);
  if (bench_conv_op(be, s, &B, op) != CL_OK) {
    fprintf(stderr, "conv op %d failed: %s\n", op, be->err);
    exit(1);
  }
  *n = sizes[op];
  float *out = bench_random_floats(*n);
  memcpy(out, dst[op], sizeof(float) * *n);
  if (db && op == 2) {
    *db = bench_random_floats((size_t)s->K);
    memcpy(*db, B.db, sizeof(float) * s->K);
  }
  bench_bufs_free(be, &B);
  return out;
}

/* Best time of reps calls after one warm-up (reps 0: the one call's time),
 * as the torch scripts time theirs; now: the caller's clock in seconds. */
static inline double bench_conv_best(cl_backend *be, const cl_conv_shape *s, bench_bufs *B,
                                     int op, int reps, double (*now)(void)) {
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    double t0 = now();
    if (bench_conv_op(be, s, B, op) != CL_OK) {
      fprintf(stderr, "conv failed: %s\n", be->err);
      exit(1);
    }
    double t = now() - t0;
    if ((r > 0 || reps == 0) && t < best) best = t;
  }
  return best;
}

#endif
