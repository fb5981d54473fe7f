/*
 * core/data.c -- data sets on the device: a whole training set converted and
 * uploaded once (cl_data_create), and training steps that gather their rows
 * there instead of converting and uploading each batch from the host
 * (cl_model_train_step_data). The engine (train.c, backward.c) does not know
 * the difference: it reads x and y through a cl_source, which either packs a
 * block of a host array (pack.c) or gathers the block's rows on the device.
 *
 * A data set is stored exactly as a step's upload would leave it, x in the
 * storage dtype and y in float32, time-major [T, N, row], so a gathered
 * batch is bit for bit what packing the same rows from the host gives, and
 * so are the loss and the gradients.
 *
 * Not here: deciding whether a data set fits (the R layer asks the plan and
 * memory_stats), or keeping a host copy (there is none; a data set whose
 * dtype no longer matches the model's is refused, not converted).
 */
#include "capability.h" /* cl_cap_require, cl_cap_check; internal.h */

#include <stdlib.h>
#include <string.h>

struct cl_data {
  cl_model *m;
  cl_data *prev, *next; /* the model's list */
  int N, T, C, H, W;
  int Cy; /* channels of y: the model's output (cl_output_channels; a forecaster's: the frame's) */
  int K;  /* steps of y: T, or a forecaster's target frames */
  int frames; /* an encoder-forecaster's: x and y stored patched, as a step packs them */
  cl_target target;
  cl_dtype dtype; /* x's storage: the model's when uploaded */
  void *x;        /* [T, N, C, H, W] */
  float *y;       /* [K, N, Cy, H, W], or [N, Cy, H, W] for the last state */
  size_t row_x, row_y; /* bytes of one row (one sequence at one step) */
  size_t x_bytes, y_bytes;
};

static int data_alive = 0;

int cl_data_alive(void) { return data_alive; }

/* The index buffer belongs to the model, not to a data set, so that a step
 * (which takes its data set const) can fill it; it lives while the model
 * has data sets. */
static void free_index(cl_model *m) {
  cl_mem_free(&m->mem, CL_MEM_DATA, m->data_idx, (size_t)m->data_idx_cap * sizeof(int));
  m->data_idx = NULL;
  m->data_idx_cap = 0;
}

static cl_status ensure_index(cl_model *m, int n) {
  if (n <= m->data_idx_cap) return CL_OK;
  int *p = NULL;
  CL_TRY(cl_model_alloc(m, CL_MEM_DATA, (size_t)n * sizeof(int), (void **)&p));
  free_index(m);
  m->data_idx = p;
  m->data_idx_cap = n;
  return CL_OK;
}

void cl_data_free(cl_data *d) {
  if (!d) return;
  cl_model *m = d->m;
  if (d->prev)
    d->prev->next = d->next;
  else
    m->data = d->next;
  if (d->next) d->next->prev = d->prev;
  cl_mem_free(&m->mem, CL_MEM_DATA, d->x, d->x_bytes);
  cl_mem_free(&m->mem, CL_MEM_DATA, d->y, d->y_bytes);
  if (!m->data) free_index(m);
  free(d);
  data_alive--;
}

void cl_data_free_all(cl_model *m) {
  while (m->data) cl_data_free(m->data);
  free_index(m);
}

/* Host staging of a non-host backend holds one piece of an upload at a
 * time: a few steps of the whole set, not all of it. */
#define CL_DATA_CHUNK ((size_t)64 << 20)

static cl_status upload(cl_model *m, void *dev, cl_dtype t, const cl_host_array *a, int N,
                        int T, size_t row, int frames) {
  size_t step = (size_t)N * row;
  int per = T;
  if (!m->be->iface->host_accessible) {
    size_t fit = CL_DATA_CHUNK / step;
    per = fit < 1 ? 1 : fit < (size_t)T ? (int)fit : T;
  }
  for (int t0 = 0; t0 < T; t0 += per) {
    cl_block k = {0, N, t0, T - t0 < per ? T - t0 : per};
    void *at = (char *)dev + (size_t)t0 * step;
    CL_TRY(frames ? cl_put_frames(m, at, t, a, k) : cl_put_host(m, at, t, a, k));
  }
  return CL_OK;
}

/* A data set of N sequences of T steps (y: K) of HxW for m, target and m's
 * storage dtype: its shape, and the row and total bytes of x (storage
 * dtype) and y (float32); 0 bytes on overflow. An encoder-forecaster's y
 * holds frames (a patched row has the same bytes as a frame's). */
static void describe(const cl_model *m, cl_data *d, int N, int T, int K, int H, int W,
                     cl_target target) {
  d->N = N; d->T = T; d->K = K; d->H = H; d->W = W;
  d->frames = cl_arch_runs_target(&m->arch);
  d->C = m->cfg.input_dim;
  d->Cy = d->frames ? m->cfg.input_dim : cl_output_channels(m);
  d->target = target;
  d->dtype = m->cfg.dtype;
  size_t P = cl_mul_size((size_t)H, (size_t)W);
  int Ty = target == CL_TARGET_SEQUENCE ? K : 1;
  d->row_x = cl_mul_size(cl_mul_size(P, (size_t)d->C), cl_dtype_size(d->dtype));
  d->row_y = cl_mul_size(cl_mul_size(P, (size_t)d->Cy), sizeof(float));
  d->x_bytes = cl_mul_size(cl_mul_size(d->row_x, (size_t)N), (size_t)T);
  d->y_bytes = cl_mul_size(cl_mul_size(d->row_y, (size_t)N), (size_t)Ty);
}

/* x and y of a data set, as a step on them would check them; *K: y's steps.
 * An encoder-forecaster's: frames the patch divides, y [N, K, C, H, W]. */
static cl_status check_arrays(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                              cl_target target, int *K) {
  *K = x->ndim == 5 ? x->dims[1] : 0;
  if (!cl_arch_runs_target(&m->arch)) {
    CL_TRY(cl_check_sequence(m, x, "x", m->cfg.input_dim));
    return cl_check_target(m, y, target, "y", x->dims[0], x->dims[1], x->dims[3], x->dims[4]);
  }
  CL_TRY(cl_check_frames(m, x, "x"));
  CL_TRY(cl_check_frames(m, y, "y"));
  if (y->dims[0] != x->dims[0] || y->dims[3] != x->dims[3] || y->dims[4] != x->dims[4])
    return cl_fail(m, CL_E_INVALID, "y must have x's sequences and frame size [%d, ., %d, %d, %d]",
                   x->dims[0], x->dims[2], x->dims[3], x->dims[4]);
  *K = y->dims[1];
  return CL_OK;
}

cl_status cl_data_create(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                         cl_target target, cl_data **out) {
  *out = NULL;
  m->err[0] = '\0';
  if (target != CL_TARGET_SEQUENCE && target != CL_TARGET_LAST_STATE)
    return cl_fail(m, CL_E_INVALID, "unknown target %d", (int)target);
  CL_TRY(cl_cap_require(m, CL_CAP_DATA_SET)); /* before a byte is uploaded */
  if (target == CL_TARGET_LAST_STATE) CL_TRY(cl_cap_require(m, CL_CAP_TARGET_LAST));
  int K;
  CL_TRY(check_arrays(m, x, y, target, &K));
  int N = x->dims[0], T = x->dims[1], H = x->dims[3], W = x->dims[4];
  cl_data *d = calloc(1, sizeof *d);
  if (!d) return cl_fail(m, CL_E_OOM, "out of host memory creating a data set");
  d->m = m;
  describe(m, d, N, T, K, H, W, target);
  int Ty = target == CL_TARGET_SEQUENCE ? K : 1;
  if (d->x_bytes == 0 || d->y_bytes == 0) {
    free(d);
    return cl_fail(m, CL_E_INVALID, "a data set of %d sequences of %d steps of %dx%d: sizes overflow",
                   N, T, H, W);
  }
  cl_status s = cl_model_alloc(m, CL_MEM_DATA, d->x_bytes, &d->x);
  if (s == CL_OK)
    s = cl_model_alloc(m, CL_MEM_DATA, d->y_bytes, (void **)&d->y);
  /* the index buffer of a step over every row, so that training seldom
   * allocates (only for more rows than the data set has, with repeats) */
  if (s == CL_OK) s = ensure_index(m, N);
  if (s == CL_OK) s = upload(m, d->x, d->dtype, x, N, T, d->row_x, d->frames);
  if (s == CL_OK) s = upload(m, d->y, CL_F32, y, N, Ty, d->row_y, d->frames);
  /* linked before a failure is cleaned up, so cl_data_free unlinks and
   * gives the index buffer back when this was to be the first data set */
  d->next = m->data;
  if (m->data) m->data->prev = d;
  m->data = d;
  data_alive++;
  if (s != CL_OK) {
    char msg[CL_ERRMSG_LEN];
    memcpy(msg, m->err, sizeof msg);
    cl_data_free(d);
    memcpy(m->err, msg, sizeof msg);
    return s;
  }
  *out = d;
  return CL_OK;
}

void cl_data_shape(const cl_data *d, int *N, int *T, int *H, int *W) {
  *N = d->N;
  *T = d->T;
  *H = d->H;
  *W = d->W;
}

cl_target cl_data_target(const cl_data *d) { return d->target; }
cl_dtype cl_data_dtype(const cl_data *d) { return d->dtype; }
size_t cl_data_bytes(const cl_data *d) { return d->x_bytes + d->y_bytes; }

size_t cl_data_bytes_for(const cl_model *m, int N, int T, int H, int W, cl_target target) {
  return cl_data_bytes_for_steps(m, N, T, T, H, W, target);
}

size_t cl_data_bytes_for_steps(const cl_model *m, int N, int T, int K, int H, int W,
                               cl_target target) {
  if (N < 1 || T < 1 || K < 1 || H < 1 || W < 1) return 0;
  cl_data d;
  describe(m, &d, N, T, K, H, W, target);
  /* the index buffer too, when this data set would be the one to grow it */
  size_t idx = N > m->data_idx_cap ? (size_t)N * sizeof(int) : 0, total = d.x_bytes + d.y_bytes;
  if (d.x_bytes == 0 || d.y_bytes == 0 || total < d.x_bytes || total + idx < total) return 0;
  return total + idx;
}


cl_status cl_model_train_step_data(cl_model *m, const cl_data *d, const int *idx, int n,
                                   const cl_optim *opt, const cl_step_options *opts,
                                   double *loss) {
  m->err[0] = '\0';
  *loss = 0;
  if (!d) return cl_fail(m, CL_E_INVALID, "no data set");
  if (d->m != m) return cl_fail(m, CL_E_INVALID, "the data set belongs to another model");
  CL_TRY(cl_check_optim(m, opt));
  CL_TRY(cl_cap_require(m, CL_CAP_DATA_SET));
  CL_TRY(cl_cap_check(m, opts, 1, d->target, d->dtype));
  if (n < 1 || !idx)
    return cl_fail(m, CL_E_INVALID, "a step needs at least one row of the data set (n = %d)", n);
  for (int i = 0; i < n; i++)
    if (idx[i] < 0 || idx[i] >= d->N)
      return cl_fail(m, CL_E_INVALID,
                     "row %d of the step is %d, outside the data set's rows 0..%d (0-based)", i + 1,
                     idx[i], d->N - 1);
  /* Converting would need the host copy that a data set does not keep. */
  if (d->dtype != m->cfg.dtype)
    return cl_fail(m, CL_E_STATE,
                   "the data set was uploaded as %s but the model now stores %s: create the data "
                   "set again after changing the dtype",
                   cl_dtype_name(d->dtype), cl_dtype_name(m->cfg.dtype));
  CL_TRY(ensure_index(m, n));
  CL_KERNEL(m, m->be->iface->upload(m->be, m->data_idx, idx, (size_t)n * sizeof(int)));
  cl_source xs = {NULL, d->x, d->N, d->row_x, d->dtype, idx, m->data_idx, NULL, NULL};
  cl_source ys = {NULL, d->y, d->N, d->row_y, CL_F32, idx, m->data_idx, NULL, NULL};
  if (!d->frames)
    return cl_train_sources(m, &xs, &ys, d->target, n, d->T, d->H, d->W, opt, opts, loss);
  /* an encoder-forecaster's step, as cl_model_train_step's: at the patched
   * size, the target's frames its horizon */
  static const cl_step_options none;
  cl_step_options o = opts ? *opts : none;
  o.horizon = d->K;
  int p = cl_host_patch(m);
  return cl_train_sources(m, &xs, &ys, d->target, n, d->T, d->H / p, d->W / p, opt, &o, loss);
}
