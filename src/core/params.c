/*
 * core/params.c -- parameters by torch name and layout. Inside, a layer's
 * weight is two packed halves (wx, wh; see internal.h); outside, it is torch's
 * cell_list.<l>.conv.weight [4h, in+h, kh, kw] (or, with two different
 * kernels, conv_x.weight and conv_h.weight, the halves as they are), so
 * weights move between this package, R torch and PyTorch unchanged.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cl_model_n_tensors(const cl_model *m) { return m->n_tensors; }
size_t cl_model_n_params(const cl_model *m) { return m->n_params; }

cl_status cl_model_tensor_info(const cl_model *m, int i, const char **name, int *ndim,
                               int dims[4]) {
  if (i < 0 || i >= m->n_tensors) return CL_E_INVALID;
  cl_tensor_spec t = cl_cfg_tensor(&m->cfg, i);
  *name = m->tensor_name[i];
  *ndim = t.ndim;
  for (int d = 0; d < 4; d++) dims[d] = (int)t.dims[d]; /* the layout checked them */
  return CL_OK;
}

static int find_tensor(const cl_model *m, const char *name) {
  for (int i = 0; i < m->n_tensors; i++)
    if (strcmp(m->tensor_name[i], name) == 0) return i;
  return -1;
}

size_t cl_tensor_numel(const cl_model *m, int i) {
  cl_tensor_spec t = cl_cfg_tensor(&m->cfg, i);
  const cl_layer *L = &m->layer[t.layer];
  return t.role == CL_TR_WEIGHT ? L->n_wx + L->n_wh : cl_whole_numel(L, t.role);
}

/* Where element j of torch's head.weight [C p p, sum h, 1, 1] lies in the
 * flat buffer: column j % sum h belongs to one layer the head reads, whose
 * filter [C p p, h] is a block of its own there (internal.h, cl_head). */
static size_t head_flat(const cl_model *m, size_t j) {
  size_t S = (size_t)cl_head(m)->in, o = j / S, col = j % S;
  int l = m->arch.head_lo;
  while (col >= (size_t)m->layer[l].hidden) col -= (size_t)m->layer[l++].hidden;
  return cl_head_offset(m, l) + o * (size_t)m->layer[l].hidden + col;
}

/* Copy between torch layout (t) and the flat buffer (flat), either way.
 * Row o of the torch weight is wx row o followed by wh row o; the bias and
 * the peepholes are stored as torch lays them out. */
void cl_convert_tensor(const cl_model *m, int i, float *flat, float *t, int to_torch) {
  cl_tensor_spec ts = cl_cfg_tensor(&m->cfg, i);
  const cl_layer *L = &m->layer[ts.layer];
  if (ts.role == CL_TR_HEAD_W) {
    for (size_t j = 0, n = cl_tensor_numel(m, i); j < n; j++) {
      float *at = flat + head_flat(m, j);
      if (to_torch)
        t[j] = *at;
      else
        *at = t[j];
    }
    return;
  }
  if (ts.role != CL_TR_WEIGHT) {
    float *at = flat + cl_whole_offset(L, ts.role);
    size_t bytes = cl_tensor_numel(m, i) * sizeof(float);
    if (to_torch)
      memcpy(t, at, bytes);
    else
      memcpy(at, t, bytes);
    return;
  }
  size_t kk = (size_t)L->kh * L->kw, rx = L->in * kk, rh = L->hidden * kk;
  for (size_t o = 0; o < 4 * (size_t)L->hidden; o++) {
    float *wx = flat + L->off_wx + o * rx, *wh = flat + L->off_wh + o * rh;
    float *row = t + o * (rx + rh);
    if (to_torch) {
      memcpy(row, wx, rx * sizeof(float));
      memcpy(row + rx, wh, rh * sizeof(float));
    } else {
      memcpy(wx, row, rx * sizeof(float));
      memcpy(wh, row + rx, rh * sizeof(float));
    }
  }
}

/* The flat buffer on the host: the device buffer itself on the CPU, a
 * downloaded copy otherwise. */
static cl_status host_view(cl_model *m, float *dev, float **host) {
  if (m->be->iface->host_accessible) {
    *host = dev;
    return CL_OK;
  }
  *host = malloc(m->n_params * sizeof(float));
  if (!*host) return cl_fail(m, CL_E_OOM, "out of host memory copying parameters");
  CL_KERNEL(m, m->be->iface->download(m->be, *host, dev, m->n_params * sizeof(float)));
  return CL_OK;
}

static cl_status host_view_done(cl_model *m, float *dev, float *host, int write_back) {
  if (host == dev) return CL_OK;
  cl_status s = CL_OK;
  if (write_back) s = m->be->iface->upload(m->be, dev, host, m->n_params * sizeof(float));
  free(host);
  if (s != CL_OK) return cl_fail_backend(m, s, "upload of parameters");
  return CL_OK;
}

static cl_status lookup(cl_model *m, const char *name, size_t n, int *idx) {
  *idx = find_tensor(m, name);
  if (*idx < 0) return cl_fail(m, CL_E_INVALID, "no parameter named '%s'", name);
  size_t want = cl_tensor_numel(m, *idx);
  if (n != want)
    return cl_fail(m, CL_E_INVALID, "parameter '%s' has %zu elements, not %zu", name, want, n);
  return CL_OK;
}

static cl_status copy_out(cl_model *m, float *dev, const char *name, float *out, size_t n) {
  int i;
  CL_TRY(lookup(m, name, n, &i));
  float *host;
  CL_TRY(host_view(m, dev, &host));
  cl_convert_tensor(m, i, host, out, 1);
  return host_view_done(m, dev, host, 0);
}

cl_status cl_model_get_param(cl_model *m, const char *name, float *out, size_t n) {
  return copy_out(m, m->params, name, out, n);
}

cl_status cl_model_get_grad(cl_model *m, const char *name, float *out, size_t n) {
  if (!m->grads) {
    int i;
    CL_TRY(lookup(m, name, n, &i));
    memset(out, 0, n * sizeof(float)); /* no backward yet: zero, as after zero_grad */
    return CL_OK;
  }
  return copy_out(m, m->grads, name, out, n);
}

cl_status cl_model_set_param(cl_model *m, const char *name, const float *in, size_t n) {
  int i;
  CL_TRY(lookup(m, name, n, &i));
  /* checked as the floats they are: a double beyond float's range arrives
   * here as inf, and one such weight makes every later loss NaN */
  for (size_t j = 0; j < n; j++)
    if (!isfinite(in[j]))
      return cl_fail(m, CL_E_INVALID,
                     "%s: element %zu is %g as a 32-bit float; weights must be finite and within "
                     "float's range (3.4e38)",
                     name, j + 1, (double)in[j]);
  float *host;
  CL_TRY(host_view(m, m->params, &host));
  cl_convert_tensor(m, i, host, (float *)in, 0);
  /* a kept training forward was computed with the old weights */
  if (m->phase == CL_PHASE_TRAINING || m->phase == CL_PHASE_LOSS) m->phase = CL_PHASE_STALE;
  return host_view_done(m, m->params, host, 1);
}

/* Offset in the flat buffer of element j of tensor t in torch's layout (t
 * read once per tensor by the caller: its spec costs a walk of the layers). */
static size_t flat_index(const cl_model *m, const cl_tensor_spec *t, size_t j) {
  const cl_layer *L = &m->layer[t->layer];
  if (t->role == CL_TR_HEAD_W) return head_flat(m, j);
  if (t->role != CL_TR_WEIGHT) return cl_whole_offset(L, t->role) + j;
  size_t kk = (size_t)L->kh * L->kw, rx = L->in * kk, rh = L->hidden * kk;
  size_t o = j / (rx + rh), r = j % (rx + rh);
  return r < rx ? L->off_wx + o * rx + r : L->off_wh + o * rh + (r - rx);
}

/* Drawn in torch's order straight into place: no tensor-sized temporary,
 * which at 8 M parameters would be 33 MB of heap that outlives the model.
 * Peepholes start at zero, drawing nothing: the cell starts as the one
 * without them (the tutorial's, whose training is known to work) and
 * learns how much of c to look at, and a seed gives the convolutions the
 * same weights with and without peepholes. */
cl_status cl_model_init_params(cl_model *m, double (*uniform01)(void *), void *ctx) {
  float *host;
  CL_TRY(host_view(m, m->params, &host));
  for (int i = 0; i < m->n_tensors; i++) {
    cl_tensor_spec t = cl_cfg_tensor(&m->cfg, i);
    const cl_layer *L = &m->layer[t.layer];
    if (cl_role_is_peephole(t.role)) {
      memset(host + cl_whole_offset(L, t.role), 0, cl_tensor_numel(m, i) * sizeof(float));
      continue;
    }
    /* kaiming_uniform(a = sqrt(5)) and torch's bias rule both give this bound;
     * two convolutions (different kernels) each have their own fan-in, the
     * bias the input one's */
    double fan_in = t.role == CL_TR_WEIGHT_H ? (double)L->hidden * L->rkh * L->rkw
                    : t.split               ? (double)L->in * L->kh * L->kw
                                            : (double)(L->in + L->hidden) * L->kh * L->kw;
    double bound = 1.0 / sqrt(fan_in);
    size_t n = cl_tensor_numel(m, i);
    for (size_t j = 0; j < n; j++)
      host[flat_index(m, &t, j)] = (float)((2.0 * uniform01(ctx) - 1.0) * bound);
  }
  return host_view_done(m, m->params, host, 1);
}
