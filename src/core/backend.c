/*
 * core/backend.c -- the backend registry: defaults for the optional slots of
 * the backend interface (backend.h), and the CUDA constructors of a build
 * without CUDA (they say so instead of failing to link).
 *
 * Not here: any backend's own work. The CPU's step end, which composes its
 * synchronising slots on the host, is src/cpu/cpu_step.c (twin of
 * src/cuda/cuda_step.cu).
 */
#include "backend.h"

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

cl_status cl_backend_bind_thread(cl_backend *be) {
  return be->iface->bind_thread ? be->iface->bind_thread(be) : CL_OK;
}

cl_status cl_backend_conv_workspace(cl_backend *be, const cl_conv_shape *s, cl_conv_dir dir,
                                    size_t *bytes) {
  *bytes = 0;
  return be->iface->conv_workspace ? be->iface->conv_workspace(be, s, dir, bytes) : CL_OK;
}

cl_status cl_backend_conv_workspace_any(cl_backend *be, const cl_conv_shape *s, size_t *bytes) {
  *bytes = 0;
  for (int d = CL_CONV_FORWARD; d <= CL_CONV_BACKWARD_FILTER; d++) {
    size_t w;
    cl_status st = cl_backend_conv_workspace(be, s, (cl_conv_dir)d, &w);
    if (st != CL_OK) return st;
    if (w > *bytes) *bytes = w;
  }
  return CL_OK;
}

size_t cl_backend_runtime_bytes(cl_backend *be) {
  size_t bytes = 0;
  if (be->iface->runtime_bytes && be->iface->runtime_bytes(be, &bytes) != CL_OK) bytes = 0;
  return bytes;
}

cl_step_vals *cl_backend_step_vals(cl_backend *be, cl_step_vals *host_vals) {
  return be->iface->step_vals ? be->iface->step_vals(be) : host_vals;
}

cl_status cl_backend_loss_acc(cl_backend *be, const cl_loss_fn *f, const void *pred,
                              const float *target, const float *weight, size_t n, cl_dtype dtype,
                              float scale, float *grad, double share, double *acc) {
  return be->iface->loss_acc(be, f, pred, target, weight, n, dtype, scale, grad, share, acc);
}

cl_status cl_backend_update_step(cl_backend *be, const cl_update_args *u, cl_step_vals *vals) {
  return be->iface->update_step(be, u, vals);
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
