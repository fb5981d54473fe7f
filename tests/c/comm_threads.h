/*
 * tests/c/comm_threads.h -- a communicator of threads in one process (the
 * slots of core/comm.h over shared memory and a barrier, filled as
 * src/comm/comm_mpi.c fills them), for the C tests and benches that run
 * data-parallel ranks as threads: test_core_dist.c (their values against
 * one model on the whole batch) and bench_batch_split.c (their time).
 * Each rank sums the ranks' buffers in rank order, so every rank holds the
 * same floats. Up to COMM_THREADS_MAX ranks.
 */
#ifndef CONVLSTM_TESTS_COMM_THREADS_H
#define CONVLSTM_TESTS_COMM_THREADS_H

#include "core/comm.h" /* struct cl_comm_i: the slots filled below */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COMM_THREADS_MAX = 8, COMM_THREADS_PENDING = 8 };

typedef struct comm_threads_shared {
  pthread_barrier_t bar;
  int size;
  void *ptr[COMM_THREADS_MAX]; /* each rank's buffer of the collective under way */
  size_t n[COMM_THREADS_MAX];
  float scale[COMM_THREADS_MAX];
} comm_threads_shared;

typedef struct comm_threads_pending {
  float *buf;
  size_t n;
  float scale;
} comm_threads_pending;

typedef struct comm_threads_rank {
  comm_threads_shared *sh;
  comm_threads_pending q[COMM_THREADS_PENDING]; /* started reductions, summed by wait_all */
  int nq;
} comm_threads_rank;

static comm_threads_shared *comm_threads_sh(cl_comm *c) {
  return ((comm_threads_rank *)c->ctx)->sh;
}
static void comm_threads_wait(cl_comm *c) { pthread_barrier_wait(&comm_threads_sh(c)->bar); }

/* Every rank's buffer published, then each sums them in rank order (the
 * same floats everywhere), then all have read before anyone writes. */
static cl_status comm_threads_sum(cl_comm *c, float *buf, size_t n, float scale) {
  comm_threads_shared *s = comm_threads_sh(c);
  s->ptr[c->rank] = buf, s->n[c->rank] = n, s->scale[c->rank] = scale;
  comm_threads_wait(c);
  float *sum = malloc(n * sizeof *sum);
  int same = 1;
  for (int r = 0; r < s->size; r++) same = same && s->n[r] == n;
  for (size_t i = 0; sum && same && i < n; i++) {
    double acc = 0;
    for (int r = 0; r < s->size; r++) acc += (double)s->scale[r] * ((const float *)s->ptr[r])[i];
    sum[i] = (float)acc;
  }
  comm_threads_wait(c);
  if (sum && same) memcpy(buf, sum, n * sizeof *sum);
  free(sum);
  if (!same) return cl_comm_fail(c, CL_E_INVALID, "ranks reduce buckets of different sizes");
  return sum ? CL_OK : cl_comm_fail(c, CL_E_OOM, "out of memory");
}

static cl_status comm_threads_allreduce(cl_comm *c, cl_backend *be, float *buf, size_t n,
                                        float scale) {
  (void)be; /* the CPU backend's work on buf is done when it returns */
  comm_threads_rank *x = c->ctx;
  if (x->nq == COMM_THREADS_PENDING) return cl_comm_fail(c, CL_E_INVALID, "too many buckets");
  x->q[x->nq++] = (comm_threads_pending){buf, n, scale};
  return CL_OK;
}

static cl_status comm_threads_wait_all(cl_comm *c) {
  comm_threads_rank *x = c->ctx;
  cl_status s = CL_OK;
  for (int k = 0; k < x->nq && s == CL_OK; k++)
    s = comm_threads_sum(c, x->q[k].buf, x->q[k].n, x->q[k].scale);
  x->nq = 0;
  return s;
}

static cl_status comm_threads_broadcast(cl_comm *c, void *buf, size_t bytes, int root,
                                        int on_device) {
  (void)on_device;
  comm_threads_shared *s = comm_threads_sh(c);
  s->ptr[c->rank] = buf;
  comm_threads_wait(c);
  if (c->rank != root) memcpy(buf, s->ptr[root], bytes);
  comm_threads_wait(c);
  return CL_OK;
}

static cl_status comm_threads_sum_host(cl_comm *c, double *v, int n) {
  comm_threads_shared *s = comm_threads_sh(c);
  double sum[4];
  if (n > 4) return cl_comm_fail(c, CL_E_INVALID, "sum_host of %d values", n);
  s->ptr[c->rank] = v;
  comm_threads_wait(c);
  for (int i = 0; i < n; i++) {
    sum[i] = 0;
    for (int r = 0; r < s->size; r++) sum[i] += ((const double *)s->ptr[r])[i];
  }
  comm_threads_wait(c);
  memcpy(v, sum, (size_t)n * sizeof *v);
  return CL_OK;
}

static cl_status comm_threads_barrier(cl_comm *c) {
  comm_threads_wait(c);
  return CL_OK;
}

static void comm_threads_abort(cl_comm *c, int code) {
  printf("rank %d aborts (%d)\n", c->rank, code);
  abort();
}

static void comm_threads_destroy(cl_comm *c) {
  free(c->ctx);
  free(c);
}

static const struct cl_comm_i comm_threads_iface = {
    /* .name = */ "threads",
    /* .device_buffers = */ 0,
    /* .allreduce_start = */ comm_threads_allreduce,
    /* .progress = */ NULL,
    /* .wait_all = */ comm_threads_wait_all,
    /* .broadcast = */ comm_threads_broadcast,
    /* .sum_host = */ comm_threads_sum_host,
    /* .barrier = */ comm_threads_barrier,
    /* .abort = */ comm_threads_abort,
    /* .destroy = */ comm_threads_destroy,
};

/* sh: its barrier initialised for sh->size ranks by the caller. */
static cl_comm *comm_threads_create(comm_threads_shared *sh, int rank) {
  cl_comm *c = calloc(1, sizeof *c);
  comm_threads_rank *x = calloc(1, sizeof *x);
  if (!c || !x || sh->size > COMM_THREADS_MAX) abort();
  x->sh = sh;
  c->iface = &comm_threads_iface;
  c->ctx = x;
  c->rank = rank;
  c->size = sh->size;
  return c;
}

#endif
