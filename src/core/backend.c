/*
 * core/backend.c -- defaults for the optional slots of the backend interface,
 * and the CUDA constructors of a build without CUDA (they say so instead of
 * failing to link).
 */
#include "backend.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

cl_status cl_backend_mem_info(cl_backend *be, size_t *free_bytes, size_t *total_bytes) {
  if (be->iface->mem_info) return be->iface->mem_info(be, free_bytes, total_bytes);
  long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  *total_bytes = pages > 0 && page > 0 ? (size_t)pages * (size_t)page : 0;
  *free_bytes = avail > 0 && page > 0 ? (size_t)avail * (size_t)page : 0;
  return CL_OK;
}

cl_status cl_backend_synchronize(cl_backend *be) {
  return be->iface->synchronize ? be->iface->synchronize(be) : CL_OK;
}

cl_status cl_backend_conv_workspace(cl_backend *be, const cl_conv_shape *s, size_t *bytes) {
  *bytes = 0;
  return be->iface->conv_workspace ? be->iface->conv_workspace(be, s, bytes) : CL_OK;
}

size_t cl_backend_runtime_bytes(cl_backend *be) {
  size_t bytes = 0;
  if (be->iface->runtime_bytes && be->iface->runtime_bytes(be, &bytes) != CL_OK) bytes = 0;
  return bytes;
}

/* ---- the sync-free step on a host backend --------------------------------
 * Where device memory is host memory, the slots that hand their result to
 * the host (mse, loss, grad_unscale, sum_squares, the guards) cost no
 * synchronisation, so the step's end is composed of them here, deciding on
 * the host exactly as a device backend's update_step decides on the device
 * (backend.h, cl_update_args). */

cl_step_vals *cl_backend_step_vals(cl_backend *be, cl_step_vals *host_vals) {
  return be->iface->step_vals ? be->iface->step_vals(be) : host_vals;
}

static cl_status host_only(cl_backend *be, const char *slot) {
  snprintf(be->err, sizeof be->err, "backend %s has no %s slot", be->iface->name, slot);
  return CL_E_UNSUPPORTED;
}

cl_status cl_backend_loss_acc(cl_backend *be, const cl_loss_fn *f, const void *pred,
                              const float *target, const float *weight, size_t n, cl_dtype dtype,
                              float scale, float *grad, double share, double *acc) {
  const struct cl_backend_i *b = be->iface;
  if (b->loss_acc)
    return b->loss_acc(be, f, pred, target, weight, n, dtype, scale, grad, share, acc);
  if (!b->host_accessible) return host_only(be, "loss_acc");
  double mean = 0;
  cl_status s = (!f || f->kind == CL_LOSS_MSE) && !weight
                    ? b->mse(be, pred, target, n, dtype, scale, grad, &mean)
                    : b->loss(be, f, pred, target, weight, n, dtype, scale, grad, &mean);
  if (s != CL_OK) return s;
  const double part = share * mean;
  *acc += part;
  return CL_OK;
}

/* clip_grad_norm_'s scaling: coef = max_norm / (norm + 1e-6) in float32,
 * skipped when not below 1 (a multiply by 1 changes nothing) and when the
 * norm is not finite (the guard then refuses the gradients by name). */
static cl_status host_clip(cl_backend *be, const cl_update_args *u, cl_step_vals *vals) {
  double sum = 0;
  cl_status s = be->iface->sum_squares(be, u->g, u->n, &sum);
  if (s != CL_OK) return s;
  vals->sumsq = sum;
  const double norm = sqrt(sum);
  if (!isfinite(norm)) return CL_OK;
  const float coef = (float)(u->max_norm / (norm + 1e-6));
  if (!(coef < 1.0f)) return CL_OK;
  int bad = 0;
  return be->iface->grad_unscale(be, u->g, u->n, coef, &bad);
}

cl_status cl_backend_update_step(cl_backend *be, const cl_update_args *u, cl_step_vals *vals) {
  const struct cl_backend_i *b = be->iface;
  if (b->update_step) return b->update_step(be, u, vals);
  if (!b->host_accessible) return host_only(be, "update_step");
  cl_status s = CL_OK;
  int bad = 0;
  if (u->unscale) s = b->grad_unscale(be, u->g, u->n, u->inv_scale, &bad);
  if (s != CL_OK) return s;
  vals->found_inf = bad;
  const int lost = u->check_loss && !isfinite(vals->loss);
  if (u->max_norm > 0 && !lost && (s = host_clip(be, u, vals)) != CL_OK) return s;
  uint64_t fault = CL_FAULT_NONE;
  if (!bad && !lost)
    s = u->adam ? b->adam_check(be, u->p, u->g, u->m, u->v, u->vmax, u->n, &u->ahp, &fault)
                : b->sgd_check(be, u->p, u->g, u->m, u->n, &u->shp, &fault);
  if (s != CL_OK) return s;
  vals->fault = fault;
  vals->skipped = bad || lost || fault != CL_FAULT_NONE;
  if (vals->skipped) return CL_OK;
  return u->adam ? b->adam_update(be, u->p, u->g, u->m, u->v, u->vmax, u->n, &u->ahp)
                 : b->sgd_update(be, u->p, u->g, u->m, u->n, &u->shp);
}

cl_status cl_backend_graph_begin(cl_backend *be, cl_graph_mode mode) {
  return be->iface->graph_begin ? be->iface->graph_begin(be, mode) : CL_OK;
}

cl_status cl_backend_graph_end(cl_backend *be, cl_status failed, int *redo) {
  *redo = 0;
  return be->iface->graph_end ? be->iface->graph_end(be, failed, redo) : CL_OK;
}

void cl_backend_graph_info(cl_backend *be, cl_graph_info *out) {
  memset(out, 0, sizeof *out);
  if (be->iface->graph_info) be->iface->graph_info(be, out);
}

int cl_build_has_cuda(void) {
#ifdef CL_HAVE_CUDA
  return 1;
#else
  return 0;
#endif
}

cl_status cl_gpu_info_get(int device, cl_gpu_info *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  return cl_backend_cuda_device_info(device, out, err, errlen);
}

int cl_device_available(cl_device d) {
  return d == CL_DEVICE_CPU ? 1 : cl_backend_cuda_available();
}

void cl_backend_destroy(cl_backend *be) {
  if (be) be->iface->destroy(be);
}

#ifndef CL_HAVE_CUDA
cl_status cl_backend_cuda_create(cl_backend **out, char *err, size_t errlen) {
  *out = NULL;
  if (err)
    snprintf(err, errlen,
             "device 'cuda' is not available: this build of convlstm has no CUDA backend "
             "(CUDA and cuDNN were not found when it was installed)");
  return CL_E_UNSUPPORTED;
}

int cl_backend_cuda_available(void) { return 0; }

cl_status cl_backend_cuda_device_info(int device, cl_gpu_info *out, char *err, size_t errlen) {
  (void)device;
  (void)out;
  if (err)
    snprintf(err, errlen,
             "this build of convlstm has no CUDA backend (CUDA and cuDNN were not found when it "
             "was installed)");
  return CL_E_UNSUPPORTED;
}
#endif
