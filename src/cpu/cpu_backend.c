/*
 * cpu/cpu_backend.c -- the CPU backend's function table (core/backend.h)
 * and its memory functions: "device" memory is host memory, so copies are
 * memcpy and there is no queue to wait for.
 *
 * The kernels live in cpu_conv.c, cpu_cell.c and cpu_optim.c; the GEMM they
 * share in cpu_gemm.c. Creating a backend decides, once, the thread count
 * and which GEMM the convolutions use.
 *
 * Not here: accounting of what is allocated (core/alloc.c does it for every
 * backend alike).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* posix_memalign, sysconf under -std=c11 */
#endif
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS */
#endif
#include "cpu_kernels.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h> /* mmap */
#include <unistd.h>   /* sysconf */
#ifdef _OPENMP
#include <omp.h>
#endif

cl_status cl_cpu_fail(cl_backend *be, cl_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(be->err, sizeof be->err, fmt, ap);
  va_end(ap);
  return st;
}

/* Every block starts with a header of CPU_ALIGN bytes saying how it was
 * obtained, so that the user's pointer is 64-byte aligned (a cache line and
 * an AVX-512 register: packed kernels never split a load across lines).
 * Large blocks are mapped pages of their own: like device memory they go
 * back to the system when freed. From malloc, glibc's dynamic mmap threshold
 * would serve a block freed once from its heap next time, and a model's
 * parameters, gradients and arena would stay resident after the model is
 * released, growing with every model created and dropped. */
#define CPU_ALIGN 64
#define CPU_MAP_MIN ((size_t)1 << 20)

typedef struct cpu_block {
  size_t mapped; /* bytes mapped, header included; 0: from posix_memalign */
} cpu_block;

cl_status cl_cpu_alloc(cl_backend *be, size_t bytes, void **out) {
  *out = NULL;
  if (bytes == 0) return CL_OK;
  if (bytes > SIZE_MAX - CPU_ALIGN)
    return cl_cpu_fail(be, CL_E_OOM, "cpu backend: could not allocate %zu bytes", bytes);
  size_t total = bytes + CPU_ALIGN;
  void *base = NULL;
  if (bytes >= CPU_MAP_MIN) {
    base = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) base = NULL;
  } else if (posix_memalign(&base, CPU_ALIGN, total) != 0) {
    base = NULL;
  }
  if (!base) return cl_cpu_fail(be, CL_E_OOM, "cpu backend: could not allocate %zu bytes", bytes);
  ((cpu_block *)base)->mapped = bytes >= CPU_MAP_MIN ? total : 0;
  *out = (char *)base + CPU_ALIGN;
  return CL_OK;
}

void cl_cpu_free(cl_backend *be, void *p) {
  (void)be;
  if (!p) return;
  cpu_block *b = (cpu_block *)((char *)p - CPU_ALIGN);
  if (b->mapped)
    munmap(b, b->mapped);
  else
    free(b);
}

cl_status cl_cpu_memset0(cl_backend *be, void *p, size_t bytes) {
  (void)be;
  if (bytes) memset(p, 0, bytes);
  return CL_OK;
}

/* upload, download and copy alike: "device" memory is host memory. */
static cl_status cpu_copy(void *dst, const void *src, size_t bytes) {
  if (bytes && dst != src) memcpy(dst, src, bytes);
  return CL_OK;
}

cl_status cl_cpu_upload(cl_backend *be, void *dst, const void *host_src, size_t bytes) {
  (void)be;
  return cpu_copy(dst, host_src, bytes);
}

cl_status cl_cpu_download(cl_backend *be, void *host_dst, const void *src, size_t bytes) {
  (void)be;
  return cpu_copy(host_dst, src, bytes);
}

cl_status cl_cpu_store_f32(cl_backend *be, void *dst, const float *src, size_t n, cl_dtype dtype) {
  (void)be;
  cl_cpu_store(dtype, src, dst, 0, n, 0);
  return CL_OK;
}

cl_status cl_cpu_copy(cl_backend *be, void *dst, const void *src, size_t bytes) {
  (void)be;
  return cpu_copy(dst, src, bytes);
}

/* Linux's MemAvailable counts reclaimable page cache, which
 * _SC_AVPHYS_PAGES (MemFree) does not; fall back to sysconf elsewhere. */
static int meminfo_available(size_t *bytes) {
  FILE *f = fopen("/proc/meminfo", "r");
  if (!f) return 0;
  char line[128];
  unsigned long long kib = 0;
  int found = 0;
  while (!found && fgets(line, sizeof line, f))
    found = sscanf(line, "MemAvailable: %llu kB", &kib) == 1;
  fclose(f);
  if (found) *bytes = (size_t)kib * 1024u;
  return found;
}

cl_status cl_cpu_mem_info(cl_backend *be, size_t *free_bytes, size_t *total_bytes) {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0) {
    *total_bytes = (size_t)pages * (size_t)page;
    *free_bytes = *total_bytes;
#ifdef _SC_AVPHYS_PAGES
    long avail = sysconf(_SC_AVPHYS_PAGES);
    if (avail > 0) *free_bytes = (size_t)avail * (size_t)page;
#endif
    meminfo_available(free_bytes);
    return CL_OK;
  }
#endif
  *free_bytes = *total_bytes = 0;
  return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: physical memory size unknown");
}

/* A batch sent ahead (core/ahead.c) is copied at once, on the calling
 * thread: while a step runs on another, the overlap is the threads'. */
cl_status cl_cpu_ahead_upload(cl_backend *be, int slot, void *dst, const void *host_src,
                              size_t bytes) {
  (void)be;
  (void)slot;
  return cpu_copy(dst, host_src, bytes);
}

void cl_cpu_destroy(cl_backend *be) {
  if (!be) return;
  free(be->context);
  free(be);
}

/* The optional slots, each decided by name: the CPU's function, or NULL
 * for the core's default (backend.c). */
#define CPU_HAS_bind_thread NULL   /* host memory: every thread reaches it */
#define CPU_HAS_synchronize NULL   /* kernels return when done */
#define CPU_HAS_set_scratch NULL   /* reductions run in host variables: no scratch */
#define CPU_HAS_host_stage NULL    /* host_accessible: nothing is staged */
#define CPU_HAS_host_alloc NULL    /* malloc's memory is the device's */
#define CPU_HAS_host_free NULL
#define CPU_HAS_ahead_upload cl_cpu_ahead_upload
#define CPU_HAS_ahead_acquire NULL /* the copy was done when it returned */
#define CPU_HAS_ahead_release NULL
#define CPU_HAS_ahead_sync NULL
#define CPU_HAS_gather_rows cl_cpu_gather_rows
#define CPU_HAS_conv_workspace cl_cpu_conv_workspace
#define CPU_HAS_peephole_filter cl_cpu_peephole_filter
#define CPU_HAS_step_vals NULL     /* the core's block, in host memory */
#define CPU_HAS_graph_begin NULL   /* no graphs: steps run as calls */
#define CPU_HAS_graph_end NULL
#define CPU_HAS_graph_info NULL
#define CPU_HAS_mem_info cl_cpu_mem_info
#define CPU_HAS_runtime_bytes NULL /* 0: see backend.h */
#define CPU_HAS_conv_algo cl_cpu_conv_algo /* cpu_winograd.c */
#define CPU_HAS_grad_add cl_cpu_grad_add   /* cpu_clip.c */

#define CPU_SLOT_(step, opt, ret, name, params, args)                                              \
  .name = CL_SLOT_PICK_##opt(cl_cpu_##name, CPU_HAS_##name),
static const struct cl_backend_i cpu_iface = {
    .name = "cpu",
    .host_accessible = 1,
    .scratch_bytes = 0,
    CL_BACKEND_SLOTS(CPU_SLOT_)
};
#undef CPU_SLOT_

cl_status cl_backend_cpu_create(int n_threads, cl_backend **out) {
  *out = NULL;
  cl_cpu_fork_guard(); /* registered at load already where constructors run */
  if (n_threads <= 0) {
#ifdef _OPENMP
    /* Reads a setting only, no team: safe in a forked child too, where
     * cl_cpu_threads() then runs every region on one thread anyway. */
    n_threads = omp_get_max_threads();
#else
    n_threads = 1;
#endif
  }
#ifndef _OPENMP
  n_threads = 1; /* nothing would run them */
#endif
  cl_backend *be = calloc(1, sizeof *be);
  cl_cpu_ctx *ctx = calloc(1, sizeof *ctx);
  if (!be || !ctx) {
    free(be);
    free(ctx);
    return CL_E_OOM;
  }
  be->iface = &cpu_iface;
  be->context = ctx;
  be->n_threads = n_threads;
  /* Chosen here, once (a rule, not a timing): the choice changes the
   * convolution workspace size, which must stay fixed for the plans made
   * with this backend. */
  ctx->gemm = cl_cpu_gemm_choose(n_threads);
  ctx->conv_algo_env = cl_cpu_conv_algo_env(); /* the same reason: it sizes the workspace */
  *out = be;
  return CL_OK;
}
