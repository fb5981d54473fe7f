/*
 * host/threads.c -- the fork guard behind cl_cpu_threads (threads.h): a
 * child forked from a process that has run OpenMP gets teams of one thread.
 * Here, under both the core and the CPU backend, because the host's work
 * outside any backend (core/pack.c's conversion of a batch) runs OpenMP
 * teams too.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif
#include "threads.h"

#ifdef _OPENMP
#include <pthread.h> /* pthread_atfork, pthread_once */
#endif

#ifdef _OPENMP
/* Set only by the atfork child handler, which runs in the child before it
 * can start any thread of its own; every thread that later reads it was
 * created after the write. */
int cl_cpu_in_forked_child = 0;

static pthread_once_t fork_guard_once = PTHREAD_ONCE_INIT;

static void mark_forked_child(void) { cl_cpu_in_forked_child = 1; }

static void register_fork_guard(void) { (void)pthread_atfork(NULL, NULL, mark_forked_child); }
#endif

void cl_cpu_fork_guard(void) {
#ifdef _OPENMP
  pthread_once(&fork_guard_once, register_fork_guard);
#endif
}

#if defined(_OPENMP) && defined(__GNUC__)
/* At library load, not only at the first backend: the pool a child inherits
 * may be another library's (any OpenMP code run in the parent), and a model
 * first created in the child must still see that it is one. */
__attribute__((constructor)) static void fork_guard_at_load(void) { cl_cpu_fork_guard(); }
#endif
