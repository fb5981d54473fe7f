/*
 * cuda/cuda_info.h -- what the R glue may ask of the CUDA backend directly:
 * a description of a device (gpu_info()). Plain C, callable from C files when
 * CL_HAVE_CUDA is defined; cuda_backend.cu defines it.
 *
 * It is not the backend interface (core/backend.h) and holds no device state:
 * every call asks the driver afresh.
 */
#ifndef CONVLSTM_CUDA_INFO_H
#define CONVLSTM_CUDA_INFO_H

#include <stddef.h>

#include "../convlstm.h" /* cl_status */

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cl_cuda_info {
  int device;           /* index as CUDA numbers it (after CUDA_VISIBLE_DEVICES) */
  int n_devices;        /* devices visible to this process */
  char name[256];       /* e.g. "NVIDIA H100 80GB HBM3" */
  int cc_major, cc_minor; /* compute capability */
  int multiprocessors;
  size_t mem_free;      /* bytes, as cudaMemGetInfo reports them now */
  size_t mem_total;
  int driver_version;   /* CUDA driver API version, e.g. 13000 for 13.0 */
  int runtime_version;  /* CUDA runtime this package was built with and runs */
  size_t cudnn_version; /* cuDNN loaded at run time, e.g. 91900 for 9.19.0 */
  size_t cudnn_build_version; /* CUDNN_VERSION of the headers it was built with */
} cl_cuda_info;

/* Describe device `device` (-1: the current one). CL_E_UNSUPPORTED when no
 * device is usable, with the reason in err. */
cl_status cl_cuda_device_info(int device, cl_cuda_info *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
