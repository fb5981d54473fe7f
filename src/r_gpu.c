/*
 * r_gpu.c -- gpu_info(): a description of the CUDA device as an R list
 * (name, compute capability, memory free and total, driver, runtime and cuDNN
 * versions), asked afresh of the driver at every call through the core's
 * cl_gpu_info_get.
 *
 * gpu_available() is here too: it asks the core, which also probes that this
 * build holds code for the device. Nothing here holds device state. A
 * CPU-only build answers available = FALSE with the reason, and every other
 * field NA, so the R side never needs to know how the package was built.
 */
#include <stdio.h> /* snprintf */

#include "r_convlstm.h"

/* Field order of the list; R/gpu.R documents each. */
static const char *const gpu_fields[] = {
    "available",       "reason",          "cuda_build",          "device",
    "n_devices",       "name",            "compute_capability",  "multiprocessors",
    "memory_free",     "memory_total",    "driver_version",      "runtime_version",
    "cudnn_version",   "cudnn_build_version"};
#define N_GPU_FIELDS ((int)(sizeof gpu_fields / sizeof gpu_fields[0]))

static SEXP na_string(void) { return Rf_ScalarString(NA_STRING); }

/* Every field NA except available, reason and cuda_build. */
static SEXP gpu_list(int available, const char *reason, int cuda_build, int *nprotect) {
  SEXP out = PROTECT(r_named_list(gpu_fields, N_GPU_FIELDS));
  (*nprotect)++;
  SET_VECTOR_ELT(out, 0, Rf_ScalarLogical(available != 0));
  SET_VECTOR_ELT(out, 1, Rf_mkString(reason));
  SET_VECTOR_ELT(out, 2, Rf_ScalarLogical(cuda_build != 0));
  SET_VECTOR_ELT(out, 3, Rf_ScalarInteger(NA_INTEGER));
  SET_VECTOR_ELT(out, 4, Rf_ScalarInteger(NA_INTEGER));
  for (int i = 5; i < N_GPU_FIELDS; i++) {
    if (i == 7)
      SET_VECTOR_ELT(out, i, Rf_ScalarInteger(NA_INTEGER));
    else if (i == 8 || i == 9)
      SET_VECTOR_ELT(out, i, Rf_ScalarReal(NA_REAL));
    else
      SET_VECTOR_ELT(out, i, na_string());
  }
  return out;
}

/* CUDA numbers its versions 1000 major + 10 minor: 13000 is "13.0". */
static SEXP cuda_version(int v) {
  if (v <= 0) return na_string();
  char buf[32];
  snprintf(buf, sizeof buf, "%d.%d", v / 1000, (v % 1000) / 10);
  return Rf_mkString(buf);
}

/* cuDNN 9 numbers 10000 major + 100 minor + patch (91900 is "9.19.0"); cuDNN
 * 8 used 1000 major + 100 minor + patch. */
static SEXP cudnn_version(size_t v) {
  if (v == 0) return na_string();
  char buf[32];
  if (v >= 90000)
    snprintf(buf, sizeof buf, "%zu.%zu.%zu", v / 10000, (v % 10000) / 100, v % 100);
  else
    snprintf(buf, sizeof buf, "%zu.%zu.%zu", v / 1000, (v % 1000) / 100, v % 100);
  return Rf_mkString(buf);
}

SEXP ffi_gpu_info(void) {
  int nprotect = 0;
  cl_gpu_info info;
  char err[CL_ERRMSG_LEN];
  err[0] = '\0';
  cl_status st = cl_gpu_info_get(-1, &info, err, sizeof err);
  if (!cl_build_has_cuda()) {
    SEXP out = gpu_list(0, err, 0, &nprotect);
    UNPROTECT(nprotect);
    return out;
  }
  /* The probe of gpu_available(): a device can be described and still lack
   * code in this build (an older architecture than it was compiled for). */
  int usable = st == CL_OK && cl_device_available(CL_DEVICE_CUDA);
  char reason[CL_ERRMSG_LEN + 128];
  if (st != CL_OK)
    snprintf(reason, sizeof reason, "%s", err[0] ? err : "no usable CUDA device");
  else if (!usable)
    snprintf(reason, sizeof reason,
             "device %d (compute capability %d.%d) is visible, but this build of convlstm "
             "has no GPU code for it; reinstall with CONVLSTM_CUDA_GENCODE naming its "
             "architecture",
             info.device, info.cc_major, info.cc_minor);
  else
    reason[0] = '\0';
  SEXP out = gpu_list(usable, reason, 1, &nprotect);
  /* What the driver answered is worth showing even when no device is usable:
   * an old driver is the usual reason. */
  SET_VECTOR_ELT(out, 10, cuda_version(info.driver_version));
  SET_VECTOR_ELT(out, 11, cuda_version(info.runtime_version));
  SET_VECTOR_ELT(out, 12, cudnn_version(info.cudnn_version));
  SET_VECTOR_ELT(out, 13, cudnn_version(info.cudnn_build_version));
  if (st == CL_OK) {
    char cc[32];
    snprintf(cc, sizeof cc, "%d.%d", info.cc_major, info.cc_minor);
    SET_VECTOR_ELT(out, 3, Rf_ScalarInteger(info.device));
    SET_VECTOR_ELT(out, 4, Rf_ScalarInteger(info.n_devices));
    SET_VECTOR_ELT(out, 5, Rf_mkString(info.name));
    SET_VECTOR_ELT(out, 6, Rf_mkString(cc));
    SET_VECTOR_ELT(out, 7, Rf_ScalarInteger(info.multiprocessors));
    SET_VECTOR_ELT(out, 8, Rf_ScalarReal((double)info.mem_free));
    SET_VECTOR_ELT(out, 9, Rf_ScalarReal((double)info.mem_total));
  } else if (info.n_devices > 0) {
    SET_VECTOR_ELT(out, 4, Rf_ScalarInteger(info.n_devices));
  }
  UNPROTECT(nprotect);
  return out;
}

SEXP ffi_gpu_available(void) { return Rf_ScalarLogical(cl_device_available(CL_DEVICE_CUDA) != 0); }
