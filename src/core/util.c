/*
 * core/util.c -- the ground floor of the core: a model's error message
 * (cl_fail, cl_fail_backend), size arithmetic that reports overflow instead
 * of wrapping (cl_mul_size), a growing list's room (cl_grow), a monotonic
 * clock (cl_seconds: a step's probe, a rank's wait), and the names
 * of statuses, devices and storage
 * types (cl_status_name, cl_device_name, cl_dtype_name: the one table of
 * each). Every other core
 * file may use these; they use nothing of the core but internal.h's types.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "internal.h"

#include <stdlib.h>
#include <time.h>

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

cl_status cl_fail(cl_model *m, cl_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m->err, sizeof m->err, fmt, ap);
  va_end(ap);
  return s;
}

cl_status cl_fail_backend(cl_model *m, cl_status s, const char *what) {
  if (s == CL_E_OOM && m->err[0]) return s; /* the allocator already said it */
  if (m->be && m->be->err[0])
    snprintf(m->err, sizeof m->err, "%s", m->be->err);
  else
    snprintf(m->err, sizeof m->err, "%s failed (%s)", what, cl_status_name(s));
  return s;
}

size_t cl_mul_size(size_t a, size_t b) {
  if (a != 0 && b > SIZE_MAX / a) return 0;
  return a * b;
}

const char *cl_status_name(cl_status s) {
  switch (s) {
  case CL_OK: return "ok";
  case CL_E_INVALID: return "invalid";
  case CL_E_OOM: return "oom";
  case CL_E_UNSUPPORTED: return "unsupported";
  case CL_E_BACKEND: return "backend";
  case CL_E_STATE: return "state";
  case CL_E_INTERNAL: return "internal";
  }
  return "internal";
}

const char *cl_device_name(cl_device d) {
  return d == CL_DEVICE_CPU ? "cpu" : d == CL_DEVICE_CUDA ? "cuda" : "unknown";
}

const char *cl_dtype_name(cl_dtype t) {
  static const char *names[CL_N_DTYPES] = {"float32", "float16", "bfloat16"};
  return (int)t >= 0 && (int)t < CL_N_DTYPES ? names[t] : "unknown";
}

void *cl_grow(void *v, int *cap, int n, size_t elt) {
  if (n < *cap) return v;
  int c = *cap ? 2 * *cap : 16;
  void *p = c > *cap ? realloc(v, (size_t)c * elt) : NULL;
  if (p) *cap = c;
  return p;
}

double cl_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
