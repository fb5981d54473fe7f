/*
 * cpu/cpu_clock.h -- the CPU time the backend's run-time choices are timed
 * in (the GEMM tile tuner, the bfloat16 rate loops, Winograd against GEMM).
 * CPU time, not wall time, so that a neighbour process taking the core
 * while a choice is timed does not decide it.
 */
#ifndef CONVLSTM_CPU_CLOCK_H
#define CONVLSTM_CPU_CLOCK_H

#include <time.h>

static inline double cl_cpu_seconds_of(const struct timespec *ts) {
  return (double)ts->tv_sec + 1e-9 * (double)ts->tv_nsec;
}

/* The calling thread's CPU seconds: for work that runs on one thread. */
static inline double cl_cpu_thread_seconds(void) {
  struct timespec ts;
#ifdef CLOCK_THREAD_CPUTIME_ID
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
#else
  timespec_get(&ts, TIME_UTC);
#endif
  return cl_cpu_seconds_of(&ts);
}

/* The process's CPU seconds, every thread's: for a call whose OpenMP team
 * shares the work. */
static inline double cl_cpu_process_seconds(void) {
  struct timespec ts;
#ifdef CLOCK_PROCESS_CPUTIME_ID
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
#else
  timespec_get(&ts, TIME_UTC);
#endif
  return cl_cpu_seconds_of(&ts);
}

#endif
