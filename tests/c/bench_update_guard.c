/*
 * tests/c/bench_update_guard.c -- what the update's guard costs: times the
 * CPU backend's passes over a model's flat parameter buffer, each alone,
 * many times: the guard (adam_check), the Adam update it precedes, and the
 * gradient check it replaced in a float32 step (grad_unscale by 1). The
 * whole step is bench_train_step's; divide to get the guard's share.
 *
 *   bench_update_guard [reps threads hidden1,hidden2,... input_dim kernel]
 *   defaults: 500 reps, 2 threads, the R torch tutorial model (64,1; 1; 3)
 */
#define _POSIX_C_SOURCE 199309L
#include "bench_common.h" /* bench_now, bench_cmp, bench_hidden */
#include "cpu/cpu_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The number of parameters, from the model itself (not a hard-coded count). */
static size_t n_params_of(const char *hid, int input_dim, int k) {
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = input_dim;
  bench_hidden(&c, hid, k);
  c.bias = 1;
  c.device = CL_DEVICE_CPU;
  cl_model *m = bench_model(&c, "bench_update_guard");
  size_t n = cl_model_n_params(m);
  cl_model_free(m);
  return n;
}

enum { PASS_GUARD, PASS_UPDATE, PASS_GRAD_CHECK, N_PASSES };
static const char *pass_name[N_PASSES] = {"guard (adam_check)", "adam_update",
                                          "gradient check (grad_unscale by 1)"};

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 500, threads = argc > 2 ? atoi(argv[2]) : 2;
  size_t n = n_params_of(argc > 3 ? argv[3] : "64,1", argc > 4 ? atoi(argv[4]) : 1,
                         argc > 5 ? atoi(argv[5]) : 3);
  cl_backend *be;
  if (cl_backend_cpu_create(threads, &be) != CL_OK || reps < 1) return 1;
  float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
  float *m = calloc(n, sizeof *m), *v = calloc(n, sizeof *v);
  for (size_t i = 0; i < n; i++) p[i] = (float)(i % 97) * 1e-3f, g[i] = (float)(i % 89) * 1e-4f;
  double *sec = malloc((size_t)reps * sizeof *sec);
  int bad = 0;
  uint64_t fault = 0;
  printf("%zu parameters, %d threads, %d reps of each pass\n", n, be->n_threads, reps);
  for (int pass = 0; pass < N_PASSES; pass++) {
    for (int r = -5; r < reps; r++) { /* five warm-up passes */
      /* a tiny lr: the weights stay where they are over thousands of updates */
      cl_adam_hp hp = {1e-9f, 0.9f, 0.999f, 1e-8f, 0.0f, 1 + (r < 0 ? 0 : r), 0, 0};
      double t0 = bench_now();
      if (pass == PASS_GUARD) be->iface->adam_check(be, p, g, m, v, NULL, n, &hp, &fault);
      else if (pass == PASS_UPDATE) be->iface->adam_update(be, p, g, m, v, NULL, n, &hp);
      else be->iface->grad_unscale(be, g, n, 1.0f, &bad);
      if (r >= 0) sec[r] = bench_now() - t0;
    }
    qsort(sec, (size_t)reps, sizeof *sec, bench_cmp);
    printf("  %-36s median %8.1f us  min %8.1f us\n", pass_name[pass], 1e6 * sec[reps / 2],
           1e6 * sec[0]);
  }
  printf("guard found %s\n", fault == CL_FAULT_NONE ? "no fault" : "a fault (unexpected)");
  free(sec), free(p), free(g), free(m), free(v);
  be->iface->destroy(be);
  return fault == CL_FAULT_NONE && !bad ? 0 : 1;
}
