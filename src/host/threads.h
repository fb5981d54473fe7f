/*
 * host/threads.h -- how many threads an OpenMP region on the host runs on
 * (cl_cpu_threads), and the fork guard behind it (threads.c). Its own
 * header so that every file of src/cpu/ can ask it, the GEMM included,
 * without standing on the kernels' header, and so can the core's
 * conversion of a batch (pack.c).
 */
#ifndef CONVLSTM_HOST_THREADS_H
#define CONVLSTM_HOST_THREADS_H

/* Fork safety: the size of every OpenMP team in src/cpu/ and src/core/.
 * Each parallel region takes num_threads() from here, never from be->n_threads directly.
 *
 * A child forked from a process that has run an OpenMP region (ours or any
 * other library's: libgomp keeps one pool per thread, shared by every
 * library) inherits libgomp's bookkeeping for a thread pool whose worker
 * threads were not copied into the child; its first region with more than
 * one thread then waits forever for them. R forks all the time
 * (parallel::mclapply, future's multicore), so threads.c registers a
 * pthread_atfork child handler that sets cl_cpu_in_forked_child, and in a
 * forked child every team has one thread (what data.table does). libgomp
 * runs a region of num_threads(1) on the calling thread without touching
 * the pool, so the child runs correctly, single-threaded.
 *
 * The rule is applied when a region starts, not when a backend is created:
 * a backend created in the parent keeps its n_threads (and the workspace
 * layout planned from it: the kernels run a planned split of any size on a
 * smaller team), and is overridden here once it is used in a child. The
 * parent is untouched: it keeps every thread it asked for. */
#ifdef _OPENMP
extern int cl_cpu_in_forked_child;
#endif

static inline int cl_cpu_threads(int wanted) {
#ifdef _OPENMP
  if (cl_cpu_in_forked_child) return 1;
#endif
  return wanted < 1 ? 1 : wanted;
}

/* Registers the child handler above, once per process (pthread_once). Runs
 * when the library is loaded (GCC/clang constructor) and again, as a no-op,
 * whenever a CPU backend is created. */
void cl_cpu_fork_guard(void);

#endif
