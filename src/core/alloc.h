/*
 * core/alloc.h -- the accounting allocator: every byte the core holds on the
 * compute device is allocated and freed here, under a category, against an
 * optional capacity (memory_limit). It keeps the statistics users read with
 * memory_stats() and formats out-of-memory errors as PyTorch users know them.
 * It does not decide what to allocate; the plan (plan.h) does.
 */
#ifndef CONVLSTM_CORE_ALLOC_H
#define CONVLSTM_CORE_ALLOC_H

#include "convlstm.h"
#include "backend.h"

typedef struct cl_allocator {
  cl_backend *be;
  size_t limit; /* 0: none */
  size_t current[CL_MEM_NCAT], peak[CL_MEM_NCAT];
  uint64_t n_alloc[CL_MEM_NCAT], n_free[CL_MEM_NCAT];
  size_t allocated, peak_allocated;
  size_t reserved, peak_reserved;
  /* Another allocator that counts every byte of this one too, and whose
   * limit this one's reservations are checked against (a split step's
   * per-thread models, split.c, charge the model users see); NULL: none. */
  struct cl_allocator *charge;
} cl_allocator;

/* Two levels, as in PyTorch's caching allocator: memory is *reserved* from
 * the device (a device allocation, checked against the limit), and bytes of
 * it are *allocated* to a tensor of a category. A model buffer is both at
 * once (cl_mem_alloc); the step arena is reserved once and its buffers are
 * taken and given back inside it (cl_mem_take / cl_mem_give) without any
 * device call. */

/* Reserve and take in one: a buffer that is its own device allocation.
 * bytes == 0 gives *out = NULL and counts nothing. On failure writes an
 * "out of memory: tried to allocate ..." message into err. */
cl_status cl_mem_alloc(cl_allocator *a, cl_mem_category cat, size_t bytes, void **out,
                       char *err, size_t errlen);
/* NULL-safe; bytes must be what was allocated. */
void cl_mem_free(cl_allocator *a, cl_mem_category cat, void *p, size_t bytes);
/* A device allocation that holds no tensor yet (the step arena). */
cl_status cl_mem_reserve(cl_allocator *a, size_t bytes, void **out, char *err, size_t errlen);
void cl_mem_unreserve(cl_allocator *a, void *p, size_t bytes);
/* Count bytes of reserved memory as allocated to a category, and back. */
void cl_mem_take(cl_allocator *a, cl_mem_category cat, size_t bytes);
void cl_mem_give(cl_allocator *a, cl_mem_category cat, size_t bytes);
void cl_mem_reset_peak(cl_allocator *a);
/* From now on, a's bytes count in parent's statistics and limit too; those
 * a holds already are added to parent's (a twin's backend scratch, its
 * parameters given back first; its step's buffers come later: split.c). */
void cl_mem_charge(cl_allocator *a, cl_allocator *parent);
/* Capacity and free bytes as the user should see them: the limit when one is
 * set, the device's numbers otherwise. */
void cl_mem_capacity(cl_allocator *a, size_t *total, size_t *free_bytes);
/* "8.74 GiB" style, as torch prints sizes. */
void cl_format_bytes(char *buf, size_t len, size_t bytes);

#endif
