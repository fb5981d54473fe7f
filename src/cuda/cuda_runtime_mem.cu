/*
 * cuda/cuda_runtime_mem.cu -- what the process holds on the GPU for the CUDA
 * backend that no model owns: the CUDA context, the cuDNN handle, the
 * stream and the kernels loaded with them. Measured once per process, at the
 * first backend's creation, and reported as the `runtime` line of
 * memory_estimate() and memory_stats(), so that a budget leaves room for it.
 *
 * The device's used memory is read before the context exists and after the
 * set-up, through NVML (loaded with dlopen when present: it answers without
 * a context, which cudaMemGetInfo cannot). Without NVML only what follows the
 * context's creation is seen (cudaMemGetInfo), and the context itself is
 * missing from the figure. Other processes allocating on the same device at
 * that moment would be counted too.
 */
#include "cuda_common.h"

#include <dlfcn.h>
#include <string.h>

typedef struct nvml_memory {
  unsigned long long total, free, used;
} nvml_memory;
typedef int (*nvml_init_fn)(void);
typedef int (*nvml_handle_fn)(const char *, void **);
typedef int (*nvml_mem_fn)(void *, nvml_memory *);

static int measured = 0, began = 0, have_nvml0 = 0;
static unsigned long long nvml_used0 = 0;
static size_t cuda_used0 = 0, runtime_bytes = 0;

/* The device's used bytes as NVML says; 0 when NVML cannot answer. */
static int nvml_used(int dev, unsigned long long *used) {
  static void *lib = NULL;
  static nvml_handle_fn by_bus = NULL;
  static nvml_mem_fn mem = NULL;
  if (!lib) {
    lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return 0;
    nvml_init_fn init = (nvml_init_fn)dlsym(lib, "nvmlInit_v2");
    by_bus = (nvml_handle_fn)dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
    mem = (nvml_mem_fn)dlsym(lib, "nvmlDeviceGetMemoryInfo");
    if (!init || !by_bus || !mem || init() != 0) by_bus = NULL;
  }
  if (!by_bus) return 0;
  char bus[32];
  void *handle = NULL;
  nvml_memory m;
  if (cudaDeviceGetPCIBusId(bus, (int)sizeof bus, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (by_bus(bus, &handle) != 0 || mem(handle, &m) != 0) return 0;
  *used = m.used;
  return 1;
}

static size_t cuda_used(void) {
  size_t fr = 0, tot = 0;
  if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return tot - fr;
}

void cl_cuda_runtime_before_context(int dev) {
  if (measured || began) return;
  began = 1;
  have_nvml0 = nvml_used(dev, &nvml_used0);
}

void cl_cuda_runtime_after_context(void) {
  if (measured) return;
  cuda_used0 = cuda_used();
}

void cl_cuda_runtime_after_setup(int dev) {
  if (measured || !began) return;
  measured = 1;
  unsigned long long used1 = 0;
  if (have_nvml0 && nvml_used(dev, &used1) && used1 >= nvml_used0) {
    runtime_bytes = (size_t)(used1 - nvml_used0);
    return;
  }
  size_t c1 = cuda_used();
  runtime_bytes = c1 > cuda_used0 ? c1 - cuda_used0 : 0;
}

cl_status cl_cuda_runtime_bytes(cl_backend *be, size_t *bytes) {
  (void)be;
  *bytes = runtime_bytes;
  return CL_OK;
}
