/*
 * core/ahead.c -- the model's two device buffers of batches sent ahead: a
 * staged batch's bytes (staged.c) uploaded on the backend's copy stream
 * while a step computes (backend.h's ahead_* slots), so that its own step
 * copies it on the device instead of waiting for the bus.
 *
 * Two, since the batch being sent and the batch of the running step must
 * not share one. Each buffer is claimed by the batch it holds, by serial,
 * from its send until its step has queued its last read (or its host
 * memory is refilled): the claim is atomic because a send runs on R's
 * thread while the step that gives the other buffer back runs on its own.
 * The buffers are device memory of the model (category data, plan entries
 * staged_device and staged_device_next), reserved and freed only while no
 * step runs; sends only read their addresses.
 */
#include "internal.h"

#include <stdatomic.h>
#include <stdlib.h>

struct cl_ahead {
  void *dev[2];
  size_t cap;             /* bytes of each */
  atomic_uint owner[2];   /* the serial of the batch a buffer holds; 0: none */
};

/* Waits for any upload into the buffers, frees them and drops every claim
 * (a batch that held one uploads at its step). */
static void drop_buffers(cl_model *m, cl_ahead *a) {
  const struct cl_backend_i *be = m->be->iface;
  for (int k = 0; k < 2; k++) {
    if (a->dev[k] && be->ahead_sync) (void)be->ahead_sync(m->be, k);
    cl_mem_free(&m->mem, CL_MEM_DATA, a->dev[k], a->cap);
    a->dev[k] = NULL;
    atomic_store(&a->owner[k], 0u);
  }
  a->cap = 0;
}

cl_status cl_ahead_reserve(cl_model *m, size_t bytes) {
  if (!m->be->iface->ahead_upload) return CL_OK; /* nothing to send with */
  cl_ahead *a = m->ahead;
  if (a && a->cap >= bytes) return CL_OK;
  if (!a) {
    if (!(a = calloc(1, sizeof *a)))
      return cl_fail(m, CL_E_OOM, "out of host memory for the buffers of batches sent ahead");
    atomic_init(&a->owner[0], 0u);
    atomic_init(&a->owner[1], 0u);
    m->ahead = a;
  }
  drop_buffers(m, a);
  for (int k = 0; k < 2; k++) {
    cl_status st = cl_model_alloc(m, CL_MEM_DATA, bytes, &a->dev[k]);
    if (st != CL_OK) {
      a->cap = bytes; /* what dev[0] holds, for its free */
      drop_buffers(m, a);
      return st;
    }
  }
  a->cap = bytes;
  return CL_OK;
}

void cl_ahead_free(cl_model *m) {
  if (!m->ahead) return;
  drop_buffers(m, m->ahead);
  free(m->ahead);
  m->ahead = NULL;
}

int cl_ahead_claim(const cl_model *m, unsigned serial, size_t bytes) {
  cl_ahead *a = m->ahead;
  if (!a || !serial || a->cap < bytes) return -1;
  for (int k = 0; k < 2; k++) {
    unsigned none = 0;
    if (atomic_compare_exchange_strong(&a->owner[k], &none, serial)) return k;
  }
  return -1;
}

int cl_ahead_holds(const cl_model *m, int slot, unsigned serial) {
  const cl_ahead *a = m->ahead;
  return a && slot >= 0 && slot < 2 && serial && atomic_load(&a->owner[slot]) == serial;
}

void cl_ahead_unclaim(const cl_model *m, int slot, unsigned serial) {
  cl_ahead *a = m->ahead;
  if (!a || slot < 0 || slot > 1) return;
  unsigned mine = serial;
  (void)atomic_compare_exchange_strong(&a->owner[slot], &mine, 0u);
}

void *cl_ahead_buffer(const cl_model *m, int slot) {
  return m->ahead && slot >= 0 && slot < 2 ? m->ahead->dev[slot] : NULL;
}
