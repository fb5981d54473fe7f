/*
 * core/alloc.c -- the accounting allocator (see alloc.h). Every device
 * allocation goes to the backend's alloc/free through here, and every byte
 * given to a tensor is counted here, so the statistics are complete by
 * construction: there is no other path to device memory.
 */
#include "alloc.h"

#include <stdio.h>

void cl_format_bytes(char *buf, size_t len, size_t bytes) {
  static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)bytes;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, len, "%zu bytes", bytes);
  else
    snprintf(buf, len, "%.2f %s", v, unit[u]);
}

void cl_mem_capacity(cl_allocator *a, size_t *total, size_t *free_bytes) {
  size_t dev_free = 0, dev_total = 0;
  if (cl_backend_mem_info(a->be, &dev_free, &dev_total) != CL_OK) dev_free = dev_total = 0;
  if (a->limit > 0) {
    *total = a->limit;
    size_t left = a->limit > a->reserved ? a->limit - a->reserved : 0;
    /* a limit above what the device has free cannot be reached */
    *free_bytes = (dev_total > 0 && dev_free < left) ? dev_free : left;
  } else {
    *total = dev_total;
    *free_bytes = dev_free;
  }
}

static void oom_message(cl_allocator *a, size_t bytes, char *err, size_t errlen) {
  char want[32], cap[32], used[32], fr[32], res[32];
  size_t total, free_bytes;
  cl_mem_capacity(a, &total, &free_bytes);
  cl_format_bytes(want, sizeof want, bytes);
  cl_format_bytes(cap, sizeof cap, total);
  cl_format_bytes(used, sizeof used, a->allocated);
  cl_format_bytes(fr, sizeof fr, free_bytes);
  cl_format_bytes(res, sizeof res, a->reserved);
  snprintf(err, errlen,
           "out of memory: tried to allocate %s (device %s; %s total capacity; "
           "%s already allocated; %s free; %s reserved)",
           want, a->be->iface->name, cap, used, fr, res);
}

/* The chain a counts in: a, the allocator it charges, and so on. */
#define EACH_CHARGED(x, a) for (cl_allocator *x = (a); x; x = x->charge)

/* The first allocator of a's chain whose limit bytes more would pass. */
static cl_allocator *over_limit(cl_allocator *a, size_t bytes) {
  EACH_CHARGED(x, a)
  if (x->limit > 0 && (bytes > x->limit || x->reserved > x->limit - bytes)) return x;
  return NULL;
}

cl_status cl_mem_reserve(cl_allocator *a, size_t bytes, void **out, char *err, size_t errlen) {
  *out = NULL;
  if (bytes == 0) return CL_OK;
  cl_allocator *full = over_limit(a, bytes);
  if (full) {
    oom_message(full, bytes, err, errlen);
    return CL_E_OOM;
  }
  cl_status s = a->be->iface->alloc(a->be, bytes, out);
  if (s != CL_OK) {
    *out = NULL;
    if (s == CL_E_OOM)
      oom_message(a, bytes, err, errlen);
    else
      snprintf(err, errlen, "%s", a->be->err);
    return s;
  }
  EACH_CHARGED(x, a) {
    x->reserved += bytes;
    if (x->reserved > x->peak_reserved) x->peak_reserved = x->reserved;
  }
  return CL_OK;
}

void cl_mem_unreserve(cl_allocator *a, void *p, size_t bytes) {
  if (p == NULL) return;
  a->be->iface->free(a->be, p);
  EACH_CHARGED(x, a) x->reserved -= bytes;
}

static void take_one(cl_allocator *a, cl_mem_category cat, size_t bytes) {
  a->current[cat] += bytes;
  if (a->current[cat] > a->peak[cat]) a->peak[cat] = a->current[cat];
  a->n_alloc[cat]++;
  a->allocated += bytes;
  if (a->allocated > a->peak_allocated) a->peak_allocated = a->allocated;
}

void cl_mem_take(cl_allocator *a, cl_mem_category cat, size_t bytes) {
  if (bytes == 0) return;
  EACH_CHARGED(x, a) take_one(x, cat, bytes);
}

void cl_mem_give(cl_allocator *a, cl_mem_category cat, size_t bytes) {
  if (bytes == 0) return;
  EACH_CHARGED(x, a) {
    x->current[cat] -= bytes;
    x->n_free[cat]++;
    x->allocated -= bytes;
  }
}

void cl_mem_charge(cl_allocator *a, cl_allocator *parent) {
  EACH_CHARGED(x, parent) {
    for (int c = 0; c < CL_MEM_NCAT; c++)
      if (a->current[c]) take_one(x, (cl_mem_category)c, a->current[c]);
    x->reserved += a->reserved;
    if (x->reserved > x->peak_reserved) x->peak_reserved = x->reserved;
  }
  a->charge = parent;
}

cl_status cl_mem_alloc(cl_allocator *a, cl_mem_category cat, size_t bytes, void **out,
                       char *err, size_t errlen) {
  cl_status s = cl_mem_reserve(a, bytes, out, err, errlen);
  if (s != CL_OK) return s;
  cl_mem_take(a, cat, bytes);
  return CL_OK;
}

void cl_mem_free(cl_allocator *a, cl_mem_category cat, void *p, size_t bytes) {
  if (p == NULL) return;
  cl_mem_give(a, cat, bytes);
  cl_mem_unreserve(a, p, bytes);
}

void cl_mem_reset_peak(cl_allocator *a) {
  for (int c = 0; c < CL_MEM_NCAT; c++) a->peak[c] = a->current[c];
  a->peak_allocated = a->allocated;
  a->peak_reserved = a->reserved;
}

const char *cl_mem_category_name(cl_mem_category c) {
  static const char *names[CL_MEM_NCAT] = {"parameters",  "gradients", "optimizer", "activations",
                                           "states", "workspace", "data"};
  return (c >= 0 && c < CL_MEM_NCAT) ? names[c] : "unknown";
}
