/*
 * bench/omp_regions.c -- counts the OpenMP parallel regions a process
 * starts, from outside it: an LD_PRELOAD library that stands in front of
 * libgomp's entry points (GOMP_parallel and the combined parallel-loop
 * forms GCC emits), counts each call and the teams of more than one
 * thread, passes the call on unchanged, and prints the counts to stderr
 * at exit. It reads nothing of the code it counts, so it counts PyTorch's
 * regions (libgomp too, in Debian's build) as it counts ours.
 *
 *   cc -O2 -shared -fPIC bench/omp_regions.c -o build/omp_regions.so -ldl
 *   LD_PRELOAD=build/omp_regions.so Rscript bench/bench_convlstm.R ...
 *   -> "omp_regions: 1234 regions, 1200 of them with a team of 2 or more"
 *
 * A region's team is its num_threads clause when it has one (0: the
 * default, OMP_NUM_THREADS); an if clause that is false passes 1. Used by
 * bench/cpu_threads.sh (doc/speed.md, "Two threads").
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*body_fn)(void *);
static atomic_long regions, teams;

static void count(unsigned num_threads) {
  atomic_fetch_add(&regions, 1);
  if (num_threads != 1) atomic_fetch_add(&teams, 1);
}

static void *next(const char *name) {
  void *f = dlsym(RTLD_NEXT, name);
  if (!f) {
    fprintf(stderr, "omp_regions: %s not found after this library\n", name);
    abort();
  }
  return f;
}

__attribute__((destructor)) static void report(void) {
  fprintf(stderr, "omp_regions: %ld regions, %ld of them with a team of 2 or more\n",
          atomic_load(&regions), atomic_load(&teams));
}

void GOMP_parallel(body_fn fn, void *data, unsigned num_threads, unsigned flags) {
  static void (*real)(body_fn, void *, unsigned, unsigned);
  if (!real) real = (void (*)(body_fn, void *, unsigned, unsigned))next("GOMP_parallel");
  count(num_threads);
  real(fn, data, num_threads, flags);
}

#define LOOP_(name)                                                                              \
  void name(body_fn fn, void *data, unsigned num_threads, long start, long end, long incr,       \
            long chunk, unsigned flags) {                                                        \
    static void (*real)(body_fn, void *, unsigned, long, long, long, long, unsigned);            \
    if (!real)                                                                                   \
      real = (void (*)(body_fn, void *, unsigned, long, long, long, long, unsigned))next(#name); \
    count(num_threads);                                                                          \
    real(fn, data, num_threads, start, end, incr, chunk, flags);                                 \
  }
LOOP_(GOMP_parallel_loop_static)
LOOP_(GOMP_parallel_loop_dynamic)
LOOP_(GOMP_parallel_loop_guided)
LOOP_(GOMP_parallel_loop_nonmonotonic_dynamic)
LOOP_(GOMP_parallel_loop_nonmonotonic_guided)
#undef LOOP_

void GOMP_parallel_loop_runtime(body_fn fn, void *data, unsigned num_threads, long start,
                                long end, long incr, unsigned flags) {
  static void (*real)(body_fn, void *, unsigned, long, long, long, unsigned);
  if (!real)
    real = (void (*)(body_fn, void *, unsigned, long, long, long, unsigned))next(
        "GOMP_parallel_loop_runtime");
  count(num_threads);
  real(fn, data, num_threads, start, end, incr, flags);
}
