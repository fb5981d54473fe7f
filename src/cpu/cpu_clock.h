/*
 * cpu/cpu_clock.h -- the CPU time the backend's run-time choices are timed
 * in (the GEMM tile tuner, the bfloat16 rate loops, Winograd against GEMM).
 * CPU time, not wall time, so that a neighbour process taking the core
 * while a choice is timed does not decide it. Wall time where the system
 * has no CPU-time clocks.
 */
#ifndef CONVLSTM_CPU_CLOCK_H
#define CONVLSTM_CPU_CLOCK_H

#include <time.h>

/* thread 1: the calling thread's CPU seconds; 0: the process's, every
 * thread's. */
static inline double cl_cpu_clock_seconds(int thread) {
  struct timespec ts;
#if defined(CLOCK_THREAD_CPUTIME_ID) && defined(CLOCK_PROCESS_CPUTIME_ID)
  clock_gettime(thread ? CLOCK_THREAD_CPUTIME_ID : CLOCK_PROCESS_CPUTIME_ID, &ts);
#else
  (void)thread;
  timespec_get(&ts, TIME_UTC);
#endif
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* For work that runs on one thread. */
static inline double cl_cpu_thread_seconds(void) { return cl_cpu_clock_seconds(1); }

/* For a call whose OpenMP team shares the work. */
static inline double cl_cpu_process_seconds(void) { return cl_cpu_clock_seconds(0); }

#endif
