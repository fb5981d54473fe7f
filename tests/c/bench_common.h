/*
 * tests/c/bench_common.h -- what the C benches that time whole passes
 * share: a monotonic clock, the median of a run's times, the generator
 * their weights and data are drawn from (a 64-bit LCG, seeded by setting
 * bench_rng; bench_train_step's sequence since its first version), a
 * stack's hidden sizes read from "h1,h2,...", and a model made or the
 * bench ended with its reason. Needs _POSIX_C_SOURCE
 * 199309L or later for clock_gettime.
 */
#ifndef CONVLSTM_TESTS_BENCH_COMMON_H
#define CONVLSTM_TESTS_BENCH_COMMON_H

#include "convlstm.h" /* cl_config */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double bench_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static inline int bench_cmp(const void *a, const void *b) {
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* sec sorted in place; its middle (the upper one of an even count) */
static inline double bench_median(double *sec, int n) {
  qsort(sec, (size_t)n, sizeof *sec, bench_cmp);
  return sec[n / 2];
}

static unsigned long long bench_rng = 42;

/* uniform in [0, 1): cl_model_init_params's draw, or the data's */
static inline double bench_uniform01(void *ctx) {
  (void)ctx;
  bench_rng = bench_rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (double)(bench_rng >> 11) / 9007199254740992.0;
}

/* c's layers from "h1,h2,..." (at most CL_MAX_LAYERS), each of kernel k */
static inline void bench_hidden(cl_config *c, const char *list, int k) {
  for (const char *p = list; *p && c->n_layers < CL_MAX_LAYERS;) {
    c->kernel_sizes[c->n_layers] = k;
    c->hidden_dims[c->n_layers++] = atoi(p);
    p = strchr(p, ',');
    if (!p) break;
    p++;
  }
}

/* A model of config c, or the bench (who) ends with exit status 2. */
static inline cl_model *bench_model(const cl_config *c, const char *who) {
  char err[CL_ERRMSG_LEN];
  cl_model *m = NULL;
  if (cl_model_create(c, &m, err, sizeof err) != CL_OK) {
    fprintf(stderr, "%s: create: %s\n", who, err);
    exit(2);
  }
  return m;
}

#endif
