/*
 * core/staged.c -- a batch converted ahead: x and y of one training step
 * packed into host memory as a data set stores them (data.c: time-major
 * [T, N, row], x in the storage dtype, y in float32, frames patched), so
 * that the step only uploads them (pack.c's put_staged). On a GPU the
 * conversion then runs while the step before computes, on another thread
 * (src/r_train.c): cl_staged_fill reads the model's configuration and
 * layout, and writes nothing of the model.
 *
 * The memory is the backend's page-locked host memory where it has some
 * (host_alloc), so that the uploads need not be waited for; it is the
 * caller's, outside the model's accounting, and reused from batch to
 * batch. A step reads it until cl_model_train_staged returns; a step that
 * fails waits for its queued uploads before returning, so the caller may
 * refill or free the batch at once either way.
 *
 * Sent ahead (cl_staged_send, ahead.c), its bytes are also uploaded into
 * one of the model's device buffers on the backend's copy stream while the
 * step before computes; its step then waits for that upload and copies the
 * batch on the device. A refill first waits for the upload and gives the
 * buffer back.
 */
#include "internal.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cl_staged {
  const cl_model *m; /* compared, never followed: the model may be gone */
  const struct cl_backend_i *iface; /* host_free's table (static), or NULL: malloc's */
  cl_host_array x, y; /* the arrays it was filled from (data pointers compared only) */
  cl_dtype dtype;
  int p; /* the patch the frames were packed in */
  size_t row_x, row_y, y_off; /* bytes of a row of x and of y; where y starts */
  void *mem;
  size_t cap, need; /* bytes of mem, and of them the batch's */
  unsigned serial;  /* of this filling, nonzero: what a buffer sent ahead is claimed by */
  int slot;         /* the model's buffer it was sent to (ahead.c), or -1 */
};

static int staged_alive = 0;
static atomic_uint serials;

/* Never 0, which claims nothing; wraps after 2^32 fillings, long after the
 * batch holding an older serial was refilled. */
static unsigned next_serial(void) {
  unsigned s;
  while (!(s = atomic_fetch_add(&serials, 1u) + 1u)) {
  }
  return s;
}

int cl_staged_alive(void) { return staged_alive; }

static void release_mem(cl_staged *b) {
  if (!b->mem) return;
  if (b->iface)
    b->iface->host_free(NULL, b->mem);
  else
    free(b->mem);
  b->mem = NULL;
  b->cap = 0;
  b->iface = NULL;
}

void cl_staged_free(cl_staged *b) {
  if (!b) return;
  release_mem(b);
  free(b);
  staged_alive--;
}

size_t cl_staged_bytes(const cl_staged *b) { return b ? b->cap : 0; }

static cl_status fail(char *err, size_t errlen, const char *msg, const char *arg) {
  if (err && errlen) snprintf(err, errlen, msg, arg);
  return CL_E_INVALID;
}

static cl_status check_array(const cl_host_array *a, const char *arg, int p, char *err,
                             size_t errlen) {
  if (!a || !a->data || (a->format != CL_HOST_R_F64 && a->format != CL_HOST_TORCH_F32))
    return fail(err, errlen, "`%s` is not a host array of R doubles or torch floats", arg);
  if (a->ndim != 4 && a->ndim != 5) return fail(err, errlen, "`%s` must have 4 or 5 dimensions", arg);
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] < 1) return fail(err, errlen, "`%s` has a dimension below 1", arg);
  const int h = a->dims[a->ndim - 2], w = a->dims[a->ndim - 1];
  if (h % p || w % p) return fail(err, errlen, "the patch does not divide the frames of `%s`", arg);
  return CL_OK;
}

static cl_status ensure_mem(const cl_model *m, cl_staged *b, size_t need) {
  if (b->mem && b->cap >= need) return CL_OK;
  release_mem(b);
  const struct cl_backend_i *be = m->be->iface;
  if (!be->host_accessible && be->host_alloc && be->host_free &&
      be->host_alloc(m->be, need, &b->mem) == CL_OK && b->mem)
    b->iface = be;
  else if (!(b->mem = malloc(need)))
    return CL_E_OOM;
  b->cap = need;
  return CL_OK;
}

/* Where x and y of a batch staged in dtype t go: bytes of a row of each,
 * y's offset (x's bytes up to a multiple of 256) and the whole. From the
 * shapes alone: the plan asks for it before any batch exists
 * (cl_staged_layout_bytes), and the host memory and the device buffers a
 * batch is sent into share it. */
typedef struct {
  size_t row_x, row_y, y_off, need;
} staged_layout;

static int layout_shape(cl_dtype t, const cl_host_array *x, const cl_host_array *y,
                        staged_layout *l) {
  if (x->ndim != 5 || (y->ndim != 4 && y->ndim != 5)) return 0;
  l->row_x = cl_mul_size(cl_host_row_elems(x), cl_dtype_size(t));
  l->row_y = cl_mul_size(cl_host_row_elems(y), sizeof(float));
  const size_t x_bytes =
      cl_mul_size(cl_mul_size(l->row_x, (size_t)x->dims[0]), (size_t)cl_host_steps(x));
  const size_t y_bytes =
      cl_mul_size(cl_mul_size(l->row_y, (size_t)y->dims[0]), (size_t)cl_host_steps(y));
  l->y_off = (x_bytes + 255) / 256 * 256;
  l->need = l->y_off + y_bytes;
  return x_bytes && y_bytes && l->y_off >= x_bytes && l->need >= l->y_off;
}

size_t cl_staged_layout_bytes(cl_dtype dtype, const cl_host_array *x, const cl_host_array *y) {
  staged_layout l;
  if (!x || !y || (unsigned)dtype >= CL_N_DTYPES) return 0;
  for (int i = 0; i < x->ndim && i < 5; i++)
    if (x->dims[i] < 1) return 0;
  for (int i = 0; i < y->ndim && i < 5; i++)
    if (y->dims[i] < 1) return 0;
  return layout_shape(dtype, x, y, &l) ? l.need : 0;
}

static cl_status layout_of(const cl_model *m, const cl_host_array *x, const cl_host_array *y,
                           staged_layout *l, char *err, size_t errlen) {
  const int p = cl_host_patch(m);
  CL_TRY(check_array(x, "x", p, err, errlen));
  CL_TRY(check_array(y, "y", p, err, errlen));
  if (x->ndim != 5) return fail(err, errlen, "`%s` must have 5 dimensions", "x");
  if (!layout_shape(m->cfg.dtype, x, y, l))
    return fail(err, errlen, "the batch's sizes overflow (%s)", "x, y");
  return CL_OK;
}

static cl_status fill(const cl_model *m, cl_staged *b, const cl_host_array *x,
                      const cl_host_array *y, char *err, size_t errlen) {
  const int p = cl_host_patch(m);
  const cl_dtype t = m->cfg.dtype;
  staged_layout l;
  CL_TRY(layout_of(m, x, y, &l, err, errlen));
  const size_t row_x = l.row_x, row_y = l.row_y, y_off = l.y_off, need = l.need;
  if (ensure_mem(m, b, need) != CL_OK) {
    if (err && errlen) snprintf(err, errlen, "out of host memory for a staged batch of %zu bytes", need);
    return CL_E_OOM;
  }
  cl_pack_block(m, b->mem, t, x, cl_block_all(x), p);
  cl_pack_block(m, (char *)b->mem + y_off, CL_F32, y, cl_block_all(y), p);
  b->m = m;
  b->x = *x;
  b->y = *y;
  b->dtype = t;
  b->p = p;
  b->row_x = row_x;
  b->row_y = row_y;
  b->y_off = y_off;
  b->need = need;
  b->serial = next_serial();
  b->slot = -1;
  return CL_OK;
}

/* Before b's memory is refilled: its upload ahead waited for and m's
 * buffer given back. Sent to another model (which may be gone), its memory
 * is let go instead: host_free waits for the device. */
static void unsend(const cl_model *m, cl_staged *b) {
  if (b->slot < 0) return;
  if (b->m == m) {
    const struct cl_backend_i *be = m->be->iface;
    if (be->ahead_sync) (void)be->ahead_sync(m->be, b->slot);
    cl_ahead_unclaim(m, b->slot, b->serial);
  } else {
    release_mem(b);
  }
  b->slot = -1;
}

cl_status cl_staged_fill(const cl_model *m, cl_staged **b, const cl_host_array *x,
                         const cl_host_array *y, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (!m || !b) return fail(err, errlen, "%s: no model or no place for the batch", "cl_staged_fill");
  cl_staged *s = *b;
  if (!s) {
    if (!(s = calloc(1, sizeof *s))) {
      if (err && errlen) snprintf(err, errlen, "out of host memory for a staged batch");
      return CL_E_OOM;
    }
    s->slot = -1;
    staged_alive++;
  }
  unsend(m, s);
  s->m = NULL; /* matches nothing until filled */
  cl_status st = fill(m, s, x, y, err, errlen);
  if (st != CL_OK) {
    cl_staged_free(s);
    *b = NULL;
    return st;
  }
  *b = s;
  return CL_OK;
}

cl_status cl_staged_send(const cl_model *m, cl_staged *b, int *sent, char *err, size_t errlen) {
  if (err && errlen) err[0] = '\0';
  if (sent) *sent = 0;
  if (!m || !b || !sent || b->m != m)
    return fail(err, errlen, "%s: the batch was not filled for this model", "cl_staged_send");
  if (cl_ahead_holds(m, b->slot, b->serial)) {
    *sent = 1;
    return CL_OK;
  }
  const struct cl_backend_i *be = m->be->iface;
  const int k = be->ahead_upload ? cl_ahead_claim(m, b->serial, b->need) : -1;
  if (k < 0) return CL_OK; /* no buffer free or large enough: it uploads at its step */
  cl_status st = be->ahead_upload(m->be, k, cl_ahead_buffer(m, k), b->mem, b->need);
  if (st != CL_OK) {
    cl_ahead_unclaim(m, k, b->serial);
    if (err && errlen)
      snprintf(err, errlen, "sending a batch of %zu bytes ahead failed on the %s backend", b->need,
               be->name);
    return st;
  }
  b->slot = k;
  *sent = 1;
  return CL_OK;
}

cl_status cl_staged_reserve(cl_model *m, const cl_host_array *x, const cl_host_array *y) {
  m->err[0] = '\0';
  staged_layout l;
  cl_status st = layout_of(m, x, y, &l, m->err, sizeof m->err);
  return st != CL_OK ? st : cl_ahead_reserve(m, l.need);
}

void cl_staged_unreserve(cl_model *m) { cl_ahead_free(m); }

int cl_staged_sent(const cl_model *m, const cl_staged *b) {
  return m && b && b->m == m && cl_ahead_holds(m, b->slot, b->serial);
}

static int same_array(const cl_host_array *a, const cl_host_array *b) {
  if (a->data != b->data || a->format != b->format || a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

cl_status cl_model_train_staged(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                                const cl_staged *b, cl_target target, const cl_optim *opt,
                                const cl_step_options *opts, double *loss) {
  m->err[0] = '\0';
  *loss = 0;
  if (!b || !x || !y || b->m != m || !same_array(&b->x, x) || !same_array(&b->y, y))
    return cl_fail(m, CL_E_INVALID, "the staged batch was not filled from these arrays for this model");
  const int p = cl_host_patch(m);
  if (b->dtype != m->cfg.dtype || b->p != p)
    return cl_fail(m, CL_E_STATE,
                   "the batch was staged as %s but the model now stores %s: stage it again",
                   cl_dtype_name(b->dtype), cl_dtype_name(m->cfg.dtype));
  cl_source xs = cl_source_host(x), ys = cl_source_host(y);
  xs.staged = b->mem;
  xs.N = x->dims[0];
  xs.row_bytes = b->row_x;
  xs.dtype = b->dtype;
  ys.staged = (const char *)b->mem + b->y_off;
  ys.N = y->dims[0];
  ys.row_bytes = b->row_y;
  ys.dtype = CL_F32;
  const struct cl_backend_i *be = m->be->iface;
  const int k = cl_ahead_holds(m, b->slot, b->serial) ? b->slot : -1;
  cl_status s = CL_OK;
  if (k >= 0) { /* sent ahead: read from its buffer once its upload is done */
    xs.staged_dev = cl_ahead_buffer(m, k);
    ys.staged_dev = (const char *)xs.staged_dev + b->y_off;
    if (be->ahead_acquire) s = be->ahead_acquire(m->be, k);
    if (s != CL_OK) s = cl_fail_backend(m, s, "ahead_acquire");
  }
  if (s == CL_OK) s = cl_train_arrays(m, x, y, &xs, &ys, target, opt, opts, loss);
  if (k >= 0) { /* the next batch sent to this buffer waits for the reads queued */
    if (!be->ahead_release || be->ahead_release(m->be, k) != CL_OK)
      (void)cl_backend_synchronize(m->be);
    cl_ahead_unclaim(m, k, b->serial);
  }
  /* uploads queued before the failure may still read b */
  if (s != CL_OK && !be->host_accessible) (void)cl_backend_synchronize(m->be);
  return s;
}
