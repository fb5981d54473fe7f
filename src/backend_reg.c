/*
 * backend_reg.c -- the backend registry: the one file that knows every
 * backend's constructor (CPU in src/cpu/, CUDA in src/cuda/), as ggml's
 * ggml-backend-reg stands above ggml's core and its backends. It defines
 * convlstm.h's three model constructors, cl_model_create,
 * cl_saved_create_model and cl_model_load, by handing the core's (model.c,
 * model_file_read.c) the constructor of the device the config names; so
 * every arrow between the core and the backends points down, and a new
 * backend is a line here, not a change to the core.
 *
 * Plain C like the core (no R header): the standalone library holds it too.
 */
#include "core/internal.h" /* the core's constructors that take a cl_backend_ctor */

#include <stdio.h>

/* The backend of cfg->device: CUDA's, or the CPU's with cfg->n_threads. */
static cl_status make_backend(const cl_config *cfg, cl_backend **out, char *err, size_t errlen) {
  if (cfg->device == CL_DEVICE_CUDA) return cl_backend_cuda_create(out, err, errlen);
  cl_status s = cl_backend_cpu_create(cfg->n_threads, out);
  if (s != CL_OK) snprintf(err, errlen, "could not create the CPU backend");
  return s;
}

cl_status cl_model_create(const cl_config *cfg, cl_model **out, char *err, size_t errlen) {
  return cl_model_create_with(cfg, make_backend, out, err, errlen);
}

cl_status cl_saved_create_model(const cl_saved *s, const cl_config *runtime, int with_optimizer,
                                cl_model **out, char *err, size_t errlen) {
  return cl_saved_create_model_with(s, runtime, with_optimizer, make_backend, out, err, errlen);
}

cl_status cl_model_load(const char *path, const cl_config *runtime, int with_optimizer,
                        cl_model **out, char *err, size_t errlen) {
  return cl_model_load_with(path, runtime, with_optimizer, make_backend, out, err, errlen);
}
