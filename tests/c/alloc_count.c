/*
 * tests/c/alloc_count.c -- a test-only LD_PRELOAD interposer: it counts
 * every malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign and
 * mmap of more than 64 KiB that the process makes while counting is on, and
 * every cudaMalloc, cudaMallocAsync, cudaMallocHost and cudaHostAlloc of any
 * size (the CUDA runtime is linked as a shared library, so its entry points
 * can be interposed; calls inside the runtime to the driver cannot), and
 * passes every call on unchanged. test_step_allocs.c turns counting
 * on around training steps through the two functions below, found with
 * dlsym, so that "no allocation inside a step" is seen from outside the
 * library, not from its own counters.
 *
 * glibc only (its __libc_* entry points avoid calling dlsym from malloc).
 * It is never part of the package or of libconvlstm.so.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/types.h>

#define CL_COUNT_MIN ((size_t)64 << 10)

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_int counting;
static atomic_long n_big;
static atomic_size_t bytes_big;
static char last_what[64];

static void note_any(const char *what, size_t bytes) {
  if (!atomic_load(&counting)) return;
  atomic_fetch_add(&n_big, 1);
  atomic_fetch_add(&bytes_big, bytes);
  snprintf(last_what, sizeof last_what, "%s(%zu)", what, bytes);
}

static void note(const char *what, size_t bytes) {
  if (!atomic_load(&counting) || bytes <= CL_COUNT_MIN) return;
  atomic_fetch_add(&n_big, 1);
  atomic_fetch_add(&bytes_big, bytes);
  snprintf(last_what, sizeof last_what, "%s(%zu)", what, bytes);
}

/* The driver's side: start counting; stop and read what was counted. */
void cl_alloc_count_start(void) {
  atomic_store(&n_big, 0);
  atomic_store(&bytes_big, 0);
  last_what[0] = '\0';
  atomic_store(&counting, 1);
}

long cl_alloc_count_stop(size_t *bytes, const char **last) {
  atomic_store(&counting, 0);
  if (bytes) *bytes = atomic_load(&bytes_big);
  if (last) *last = last_what;
  return atomic_load(&n_big);
}

void *malloc(size_t n) {
  note("malloc", n);
  return __libc_malloc(n);
}

void *calloc(size_t k, size_t n) {
  note("calloc", k * n);
  return __libc_calloc(k, n);
}

void *realloc(void *p, size_t n) {
  note("realloc", n);
  return __libc_realloc(p, n);
}

void *memalign(size_t a, size_t n) {
  note("memalign", n);
  return __libc_memalign(a, n);
}

void *aligned_alloc(size_t a, size_t n) {
  note("aligned_alloc", n);
  return __libc_memalign(a, n);
}

int posix_memalign(void **out, size_t a, size_t n) {
  note("posix_memalign", n);
  void *p = __libc_memalign(a, n);
  if (!p && n) return 12; /* ENOMEM */
  *out = p;
  return 0;
}

typedef void *(*mmap_fn)(void *, size_t, int, int, int, off_t);

void *mmap(void *addr, size_t n, int prot, int flags, int fd, off_t off) {
  static mmap_fn next;
  if (!next) next = (mmap_fn)dlsym(RTLD_NEXT, "mmap");
  note("mmap", n);
  return next(addr, n, prot, flags, fd, off);
}

/* The CUDA runtime's allocators, declared without its headers (cudaError_t
 * is an int-sized enum; a stream is a pointer). Where the process has no
 * CUDA runtime they are never called. */
typedef int (*cuda_malloc_fn)(void **, size_t);
typedef int (*cuda_malloc_async_fn)(void **, size_t, void *);
typedef int (*cuda_host_alloc_fn)(void **, size_t, unsigned int);

#define CL_CUDA_NO_RUNTIME 2 /* cudaErrorMemoryAllocation */

int cudaMalloc(void **p, size_t n) {
  static cuda_malloc_fn next;
  if (!next) next = (cuda_malloc_fn)dlsym(RTLD_NEXT, "cudaMalloc");
  note_any("cudaMalloc", n);
  return next ? next(p, n) : CL_CUDA_NO_RUNTIME;
}

int cudaMallocAsync(void **p, size_t n, void *stream) {
  static cuda_malloc_async_fn next;
  if (!next) next = (cuda_malloc_async_fn)dlsym(RTLD_NEXT, "cudaMallocAsync");
  note_any("cudaMallocAsync", n);
  return next ? next(p, n, stream) : CL_CUDA_NO_RUNTIME;
}

int cudaMallocHost(void **p, size_t n) {
  static cuda_malloc_fn next;
  if (!next) next = (cuda_malloc_fn)dlsym(RTLD_NEXT, "cudaMallocHost");
  note_any("cudaMallocHost", n);
  return next ? next(p, n) : CL_CUDA_NO_RUNTIME;
}

int cudaHostAlloc(void **p, size_t n, unsigned int flags) {
  static cuda_host_alloc_fn next;
  if (!next) next = (cuda_host_alloc_fn)dlsym(RTLD_NEXT, "cudaHostAlloc");
  note_any("cudaHostAlloc", n);
  return next ? next(p, n, flags) : CL_CUDA_NO_RUNTIME;
}
