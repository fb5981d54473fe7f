/*
 * cuda/cuda_info.h -- the CUDA backend's description of a device, which the
 * core's cl_gpu_info_get (core/backend.c) passes on to callers of
 * convlstm.h. Plain C, callable from C files when CL_HAVE_CUDA is defined;
 * cuda_backend.cu defines it.
 *
 * It is not the backend interface (core/backend.h) and holds no device state:
 * every call asks the driver afresh.
 */
#ifndef CONVLSTM_CUDA_INFO_H
#define CONVLSTM_CUDA_INFO_H

#include <stddef.h>

#include "../convlstm.h" /* cl_status, cl_gpu_info */

#ifdef __cplusplus
extern "C" {
#endif

/* The description is the public one (convlstm.h); this is the backend's
 * name for it. */
typedef cl_gpu_info cl_cuda_info;

/* Describe device `device` (-1: the current one). CL_E_UNSUPPORTED when no
 * device is usable, with the reason in err. */
cl_status cl_cuda_device_info(int device, cl_cuda_info *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
