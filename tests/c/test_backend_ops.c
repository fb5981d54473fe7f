/*
 * tests/c/test_backend_ops.c -- the twin backends' conformance test, in the
 * manner of ggml's test-backend-ops: one table (ops[] below) with a row for
 * every slot of core/backend.h, its cases (shapes, sizes, dtypes) and its
 * tolerance with the reason, run on every backend present against the plain
 * C references of tests/c/backend_ref.h.
 *
 * The backends: the CPU backend in each of its configurations (every GEMM
 * kind this machine runs, 1 to 3 threads, each convolution path forced), and
 * where a GPU is usable the CUDA backend three ways (as created, with
 * backward data in slices of few images, with algorithms timed by
 * cudnnFind). Each case's inputs and reference are made once and every
 * backend gets the same bytes; results come back through download(). A
 * backend asking for scratch (scratch_bytes: CUDA's reductions) gets it
 * through its own alloc and set_scratch before any row runs, as a model
 * gets it from the core.
 *
 * Errors are judged relative to the largest reference value of the array
 * (sums whose terms cancel are judged by their scale): a row passes when
 * max |got - ref| <= tol * max |ref| and every value is finite.
 *
 * Without a usable GPU the CUDA part is reported as skipped ("skip cuda:
 * ..."), unless this build has CUDA and CONVLSTM_REQUIRE_GPU=1 is set or
 * `nvidia-smi -L` lists a GPU: then it is a failure. Exit status: 0 when
 * every check passed, 1 when one failed, 77 when no backend could run.
 * `-v` prints every check, not only failures and one line per row; `-b
 * NAME` keeps the backends whose name contains NAME (e.g. -b cuda; without
 * -b, CONVLSTM_TEST_BACKENDS=NAME does, as the GPU session's ctest); `-x`
 * exits at the first failed check (tools/mutate.sh: a killed mutant need
 * not run the other rows).
 *
 * Not here: the CPU backend's GEMM and half conversions below the slots
 * (tests/c/test_cpu_simd.c); the core above the backends (test_core_*.c).
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* popen, setenv */
#endif
#include "backend_ref.h"
#include "host/half.h"       /* the storage conversions the backends must match */
#include "cpu/cpu_kernels.h" /* the CPU backend's configurations (GEMM kind, path) */
#include "ctest.h"           /* the one RNG of the C tests (uniform01) */

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef CL_HAVE_CUDA
#include <cuda_runtime_api.h> /* host_stage: is the buffer page-locked? */
#endif

/* A dtype no backend knows, for the error paths. */
#define BAD_DTYPE ((cl_dtype)7)
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static int verbose, under_valgrind, fail_fast;

/* ---- the backends under test ---------------------------------------------- */

typedef struct variant {
  char name[64];
  cl_backend *be;
  /* 1 << dtype for each half type whose convolutions the backend runs in
   * the storage type. cudnn_conv.cu does for both on tensor cores: weights
   * cast, and dx, dw written in the storage type before they are added into
   * float32 (the rounding autocast applies). The CPU computes them in
   * float32 from the stored inputs, except bfloat16 on a CPU with
   * AVX512_BF16 (cl_cpu_bf16_dot_of): weights cast to bfloat16 there. */
  unsigned half_conv_in_storage;
  /* The backend's scratch_bytes, handed over with set_scratch before any
   * row runs, as the core does when it creates a model (model.c) */
  void *scratch;
  int checks, failed;
} variant;

/* every variant add_cpu_variants, add_cpu_winograd_variants and the CUDA
 * ways can add on a host that has every GEMM kind: auto at 1-3 threads,
 * im2col and direct at 2, two Winograd forms at 2 and 3, four CUDA ways
 * (an H200's host has all four kinds: 34 variants, where 32 were room) */
enum {
  CPU_KINDS = CL_CPU_GEMM_BLAS + 1,
  MAX_VARIANTS = 3 * CPU_KINDS + 2 * CPU_KINDS + 2 * 2 * CPU_KINDS + 4
};
static variant vs[MAX_VARIANTS];
static int n_vs;

static const char *status_str(cl_status st) {
  static const char *names[] = {"CL_OK",        "CL_E_INVALID", "CL_E_OOM",     "CL_E_UNSUPPORTED",
                                "CL_E_BACKEND", "CL_E_STATE",   "CL_E_INTERNAL"};
  return (unsigned)st < sizeof names / sizeof names[0] ? names[st] : "?";
}

static const char *dtype_str(cl_dtype t) {
  return t == CL_F32 ? "f32" : t == CL_F16 ? "f16" : t == CL_BF16 ? "bf16" : "?";
}

/* ---- the table's row type and tolerances ------------------------------------ */

typedef struct tol {
  double f32;                 /* results in float32 (also float32 results of half inputs) */
  double f16, bf16;           /* results stored in float16 / bfloat16 */
  double f16_cast, bf16_cast; /* every result of a half op on a backend with
                               * half_conv_in_storage; 0: as f16 / bf16 */
  double scalar;              /* a scalar result (the loss), relative */
  const char *why;
} tol;

typedef struct row {
  const char *slot; /* the slots it calls */
  void (*run)(const struct row *r);
  const void *cases;
  int n_cases;
  unsigned dtypes; /* 1 << dtype for each dtype it runs at */
  int offset;      /* conv: activations this many elements into their buffers */
  tol tol;
} row;

#define F32 (1u << CL_F32)
#define HALF ((1u << CL_F16) | (1u << CL_BF16))
#define ALL (F32 | HALF)
#define CASES(a) (a), COUNT(a)

static double tol_of(const row *r, const variant *v, cl_dtype op, cl_dtype result) {
  if (op != CL_F32 && (v->half_conv_in_storage >> op & 1u) && r->tol.f16_cast > 0)
    return op == CL_F16 ? r->tol.f16_cast : r->tol.bf16_cast;
  return result == CL_F32 ? r->tol.f32 : result == CL_F16 ? r->tol.f16 : r->tol.bf16;
}

/* ---- reporting ---------------------------------------------------------------- */

/* The worst error / tolerance of the current row, and where. */
static double row_worst;
static char row_worst_at[200];
static int row_checks, row_failed;

static int expect(variant *v, int ok, const char *fmt, ...) {
  char msg[300];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  v->checks++, row_checks++, ctest_checks++;
  if (!ok) v->failed++, row_failed++, ctest_failures++;
  if (verbose || !ok) printf("%s [%s] %s\n", ok ? "ok  " : "FAIL", v->name, msg);
  if (!ok && fail_fast) { /* -x: a mutant is killed, the rest would take minutes */
    printf("-x: stopped at the first failed check\n");
    exit(1);
  }
  return ok;
}

/* max |got - ref| <= tol * max |ref|, all finite. */
static int compare(variant *v, const char *what, const float *got, const double *ref, size_t n,
                   double tol) {
  double scale = 0.0, max_abs = 0.0, max_rel = 0.0;
  int finite = 1;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) finite = 0;
    const double d = fabs((double)got[i] - ref[i]);
    max_abs = fmax(max_abs, d);
    if (fabs(ref[i]) > 1e-3 * scale) max_rel = fmax(max_rel, d / fabs(ref[i]));
  }
  const double err = max_abs / (scale > 0 ? scale : 1.0);
  const int ok = finite && err <= tol;
  const double ratio = !finite ? INFINITY : tol > 0 ? err / tol : (err > 0 ? INFINITY : 0.0);
  if (ratio > row_worst || row_worst_at[0] == '\0') {
    row_worst = ratio;
    snprintf(row_worst_at, sizeof row_worst_at, "[%s] %s: %.2e", v->name, what, err);
  }
  return expect(v, ok, "%-62s max abs %.2e rel %.2e (scaled %.2e, tol %.0e)%s", what, max_abs,
                max_rel, err, tol, finite ? "" : " NOT FINITE");
}

/* ---- host data ------------------------------------------------------------------- */

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_backend_ops: out of memory\n");
    exit(2);
  }
  return p;
}

static float urand(float lo, float hi) { return lo + (hi - lo) * (float)uniform01(NULL); }

static float *rand_floats(size_t n, float lo, float hi) {
  float *p = xmalloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) p[i] = urand(lo, hi);
  return p;
}

static double *to_double(const float *p, size_t n) {
  double *d = xmalloc(sizeof(double) * n);
  for (size_t i = 0; i < n; i++) d[i] = p[i];
  return d;
}

/* The bytes of x stored in dtype t; x itself is rounded in place to the
 * stored values, so that references computed from x see what backends read. */
static void *to_storage(cl_dtype t, float *x, size_t n) {
  void *out = xmalloc(cl_dtype_size(t) * n);
  for (size_t i = 0; i < n; i++) {
    if (t == CL_F32) {
      ((float *)out)[i] = x[i];
    } else {
      uint16_t h = t == CL_F16 ? cl_f32_to_f16(x[i]) : cl_f32_to_bf16(x[i]);
      ((uint16_t *)out)[i] = h;
      x[i] = t == CL_F16 ? cl_f16_to_f32(h) : cl_bf16_to_f32(h);
    }
  }
  return out;
}

static float *from_storage(cl_dtype t, const void *p, size_t n) {
  float *x = xmalloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++)
    x[i] = t == CL_F32   ? ((const float *)p)[i]
           : t == CL_F16 ? cl_f16_to_f32(((const uint16_t *)p)[i])
                         : cl_bf16_to_f32(((const uint16_t *)p)[i]);
  return x;
}

/* Under valgrind (50x slower) the largest cases are left out; every code
 * path still runs. */
static int too_big(double work) { return under_valgrind && work > 2e6; }

/* ---- device memory of one case ----------------------------------------------------- */

/* Buffers of one case on one backend, freed together when the case ends,
 * whichever call failed. */
typedef struct scope {
  variant *v;
  void *p[16];
  int n;
  int ok; /* 0 after a failed call: the case stops there */
} scope;

static scope scope_of(variant *v) {
  scope sc;
  memset(&sc, 0, sizeof sc);
  sc.v = v;
  sc.ok = 1;
  return sc;
}

static void scope_end(scope *sc) {
  for (int i = 0; i < sc->n; i++) sc->v->be->iface->free(sc->v->be, sc->p[i]);
  sc->n = 0;
}

/* A status that must be CL_OK; the case stops after a failed one. */
static int call_ok(scope *sc, cl_status st, const char *what) {
  if (!sc->ok) return 0;
  if (st == CL_OK) return 1;
  sc->ok = 0;
  expect(sc->v, 0, "%s -> %s: %s", what, status_str(st), sc->v->be->err);
  return 0;
}

#define CALL(sc, call) call_ok((sc), (call), #call)

static void *dev_alloc(scope *sc, size_t bytes) {
  void *p = NULL;
  if (!CALL(sc, sc->v->be->iface->alloc(sc->v->be, bytes, &p))) return NULL;
  sc->p[sc->n++] = p;
  return p;
}

static void dev_put(scope *sc, void *dst, const void *src, size_t bytes) {
  CALL(sc, sc->v->be->iface->upload(sc->v->be, dst, src, bytes));
}

/* Downloads n values stored in dtype t as floats (NULL after a failure). */
static float *dev_get(scope *sc, cl_dtype t, const void *src, size_t n) {
  void *raw = xmalloc(cl_dtype_size(t) * n);
  if (!CALL(sc, sc->v->be->iface->download(sc->v->be, raw, src, cl_dtype_size(t) * n))) {
    free(raw);
    return NULL;
  }
  float *x = from_storage(t, raw, n);
  free(raw);
  return x;
}

/* A device copy of n host bytes. */
static void *dev_of(scope *sc, const void *host, size_t bytes) {
  void *p = dev_alloc(sc, bytes);
  if (p) dev_put(sc, p, host, bytes);
  return p;
}

/* The workspace guard: GUARD bytes of a known pattern right after the
 * conv_workspace() bytes, which no call may touch. */
enum { GUARD = 4096 };

/* ---- channels last (backend.h: cl_layout) --------------------------------
 * A row run channels last (the *_nhwc runners) keeps its data and its
 * references in NCHW and moves each activation into NHWC on its way to the
 * device and back on its way out. The index is written out here, not asked
 * of cl_act_at: the code under test must agree with torch's channels_last,
 * [N, H, W, C], not with itself. */
static cl_layout layout_now;

/* NCHW [N, C, P] of es-byte elements as a new copy in layout_now. */
static void *to_layout(const void *src, size_t N, size_t C, size_t P, size_t es) {
  char *dst = xmalloc(N * C * P * es + 1);
  const char *from = src;
  for (size_t n = 0; n < N; n++)
    for (size_t c = 0; c < C; c++)
      for (size_t p = 0; p < P; p++) {
        const size_t i = (n * C + c) * P + p;
        const size_t o = layout_now == CL_NHWC ? (n * P + p) * C + c : i;
        memcpy(dst + o * es, from + i * es, es);
      }
  return dst;
}

/* Floats in layout_now back into NCHW (got freed; NULL stays NULL). */
static float *from_layout(float *got, size_t N, size_t C, size_t P) {
  if (!got || layout_now == CL_NCHW) return got;
  float *out = xmalloc(N * C * P * 4 + 1);
  for (size_t n = 0; n < N; n++)
    for (size_t c = 0; c < C; c++)
      for (size_t p = 0; p < P; p++) out[(n * C + c) * P + p] = got[(n * P + p) * C + c];
  free(got);
  return out;
}

/* dev_of and dev_get of an activation [N, C, P] in layout_now. */
static void *dev_of_act(scope *sc, const void *host, size_t N, size_t C, size_t P, size_t es) {
  void *moved = to_layout(host, N, C, P, es);
  void *d = dev_of(sc, moved, N * C * P * es);
  free(moved);
  return d;
}
static float *dev_get_act(scope *sc, cl_dtype t, const void *src, size_t N, size_t C, size_t P) {
  return from_layout(dev_get(sc, t, src, N * C * P), N, C, P);
}

static void guard_set(scope *sc, unsigned char *at) {
  unsigned char g[GUARD];
  for (int i = 0; i < GUARD; i++) g[i] = (unsigned char)(0xA5 ^ i);
  dev_put(sc, at, g, GUARD);
}

static int guard_intact(scope *sc, const unsigned char *at) {
  unsigned char g[GUARD];
  if (!CALL(sc, sc->v->be->iface->download(sc->v->be, g, at, GUARD))) return 0;
  for (int i = 0; i < GUARD; i++)
    if (g[i] != (unsigned char)(0xA5 ^ i)) return 0;
  return 1;
}

/* ---- memory slots ----------------------------------------------------------------- */

static void run_memory(const row *r) {
  (void)r;
  enum { N = 100003 };
  float *h = rand_floats(N, -1, 1);
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_backend *be = v->be;
    const struct cl_backend_i *f = be->iface;
    scope sc = scope_of(v);
    void *a = dev_alloc(&sc, 1000), *b = dev_alloc(&sc, 1000), *z = (void *)1;
    cl_status st = f->alloc(be, 0, &z);
    expect(v, sc.ok && st == CL_OK && z == NULL && (uintptr_t)a % 64 == 0 && (uintptr_t)b % 64 == 0,
           "alloc: 64-byte aligned blocks, size 0 gives NULL");
    float *d1 = dev_alloc(&sc, N * 4), *d2 = dev_alloc(&sc, N * 4);
    float *back = xmalloc(N * 4);
    if (sc.ok) {
      dev_put(&sc, d1, h, N * 4);
      CALL(&sc, f->copy(be, d2, d1, N * 4));
      CALL(&sc, f->download(be, back, d2, N * 4));
      expect(v, sc.ok && memcmp(back, h, N * 4) == 0, "upload, copy, download: %d floats", N);
      CALL(&sc, f->memset0(be, (char *)d2 + 4, (N - 2) * 4));
      CALL(&sc, f->download(be, back, d2, N * 4));
      CALL(&sc, cl_backend_synchronize(be));
      int inner = sc.ok && back[0] == h[0] && back[N - 1] == h[N - 1];
      for (size_t i = 1; inner && i + 1 < N; i++) inner = back[i] == 0.0f;
      expect(v, inner, "memset0 of the inner part only, then synchronize");
    }
    size_t fr = 0, tot = 0;
    st = cl_backend_mem_info(be, &fr, &tot);
    expect(v, st == CL_OK && tot > 0 && fr <= tot, "mem_info: %.1f GiB free of %.1f GiB",
           fr / 1073741824.0, tot / 1073741824.0);
#ifndef __SANITIZE_ADDRESS__ /* ASan aborts on a refused allocation by default */
    static const size_t absurd[] = {(size_t)1 << 50, SIZE_MAX / 2};
    for (int i = 0; i < 2; i++) {
      void *huge = (void *)1;
      be->err[0] = '\0';
      st = f->alloc(be, absurd[i], &huge);
      expect(v, st == CL_E_OOM && huge == NULL && be->err[0], "alloc(%zu) -> %s, out NULL: %s",
             absurd[i], status_str(st), be->err);
    }
#endif
    f->free(be, NULL);
    scope_end(&sc);
    free(back);
  }
  free(h);
}

#ifdef CL_HAVE_CUDA
static int page_locked(const void *p) {
  struct cudaPointerAttributes attr;
  int ok = cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeHost;
  (void)cudaGetLastError();
  return ok;
}
#endif

/* The staging buffer (an optional slot): reused while large enough,
 * replaced by a larger one, refused above its cap (the core then stages
 * through malloc), and a working source and destination of upload and
 * download. */
static void run_host_stage(const row *r) {
  (void)r;
  const size_t n = (size_t)3 << 20; /* 12 MiB of floats: more than the first buffer */
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_backend *be = v->be;
    const struct cl_backend_i *f = be->iface;
    if (!f->host_stage) {
      expect(v, f->host_accessible, "host_stage absent: the backend's memory is host memory");
      continue;
    }
    scope sc = scope_of(v);
    void *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL, *huge = (void *)1;
    CALL(&sc, f->host_stage(be, 1000, &p1));
    CALL(&sc, f->host_stage(be, 10, &p2));
    /* an upload from p1 may still be queued: p2 must not overlap it */
    expect(v, sc.ok && p1 && p2 && (char *)p2 >= (char *)p1 + 1000,
           "host_stage: a second region follows the first, which stays untouched");
    CALL(&sc, cl_backend_synchronize(be));
    CALL(&sc, f->host_stage(be, 10, &p2));
    expect(v, sc.ok && p2 == p1, "host_stage: after a synchronize the regions start over");
    CALL(&sc, f->host_stage(be, n * 4, &p3));
    expect(v, sc.ok && p3, "host_stage: a larger request gets a buffer");
    if (!sc.ok) continue;
#ifdef CL_HAVE_CUDA
    if (strcmp(f->name, "cuda") == 0)
      expect(v, page_locked(p3), "host_stage: the buffer is page-locked host memory");
#endif
    float *h = p3, *want = rand_floats(n, -1, 1);
    memcpy(h, want, n * 4);
    float *d = dev_alloc(&sc, n * 4);
    dev_put(&sc, d, h, n * 4);
    CALL(&sc, cl_backend_synchronize(be));
    memset(h, 0, n * 4);
    CALL(&sc, f->download(be, h, d, n * 4));
    expect(v, sc.ok && memcmp(h, want, n * 4) == 0,
           "upload from and download into the staging buffer");
    cl_status st = f->host_stage(be, (size_t)1 << 44, &huge);
    expect(v, st != CL_OK && huge == NULL, "host_stage(16 TiB) is refused, out NULL");
    CALL(&sc, f->host_stage(be, 100, &p4));
    expect(v, p4 == p3, "host_stage: the buffer survives a refused request");
    scope_end(&sc);
    free(want);
  }
}

#ifdef CL_HAVE_CUDA
/* CUDA's host_alloc at its cap (CONVLSTM_CUDA_PINNED_MB, here 1 MiB, on a
 * backend of its own): exactly the cap is page-locked memory, one byte more
 * is refused with out NULL, so the caller falls back to malloc. */
static void host_alloc_cap(variant *v) {
  const size_t cap = (size_t)1 << 20;
  char err[256] = "";
  cl_backend *be = NULL;
  setenv("CONVLSTM_CUDA_PINNED_MB", "1", 1);
  cl_status st = cl_backend_cuda_create(&be, err, sizeof err);
  unsetenv("CONVLSTM_CUDA_PINNED_MB");
  expect(v, st == CL_OK, "a backend with a 1 MiB pinned cap: %s", err);
  if (st != CL_OK) return;
  void *at = NULL, *over = (void *)1;
  st = be->iface->host_alloc(be, cap, &at);
  expect(v, st == CL_OK && at && page_locked(at), "host_alloc at the cap: page-locked memory");
  st = be->iface->host_alloc(be, cap + 1, &over);
  expect(v, st != CL_OK && over == NULL, "host_alloc one byte over the cap is refused, out NULL");
  be->iface->host_free(NULL, at);
  cl_backend_destroy(be);
}
#endif

/* Host memory for the caller to keep (optional slots, staged batches): a
 * working source of upload and destination of download, page-locked on
 * CUDA, two allocations apart, a request beyond the cap refused with out
 * NULL, and host_free without the backend (be NULL: a staged batch may
 * outlive its model). */
static void run_host_alloc(const row *r) {
  (void)r;
  const size_t n = (size_t)3 << 20;
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_backend *be = v->be;
    const struct cl_backend_i *f = be->iface;
    if (!f->host_alloc || !f->host_free) {
      expect(v, f->host_accessible && !f->host_alloc && !f->host_free,
             "host_alloc and host_free absent together, where memory is host memory");
      continue;
    }
    scope sc = scope_of(v);
    void *p1 = NULL, *p2 = NULL, *huge = (void *)1;
    CALL(&sc, f->host_alloc(be, n * 4, &p1));
    CALL(&sc, f->host_alloc(be, 64, &p2));
    expect(v, sc.ok && p1 && p2 && p1 != p2, "host_alloc: two allocations, apart");
    if (!sc.ok || !p1 || !p2) continue;
#ifdef CL_HAVE_CUDA
    if (strcmp(f->name, "cuda") == 0)
      expect(v, page_locked(p1), "host_alloc: page-locked host memory");
    static int cap_tested = 0; /* once: the cap is the backend's, not a variant's */
    if (strcmp(f->name, "cuda") == 0 && !cap_tested++) host_alloc_cap(v);
#endif
    float *h = p1, *want = rand_floats(n, -1, 1);
    memcpy(h, want, n * 4);
    float *d = dev_alloc(&sc, n * 4);
    CALL(&sc, f->upload(be, d, h, n * 4));
    CALL(&sc, cl_backend_synchronize(be));
    memset(h, 0, n * 4);
    CALL(&sc, f->download(be, h, d, n * 4));
    expect(v, sc.ok && memcmp(h, want, n * 4) == 0,
           "upload from and download into host_alloc's memory");
    cl_status st = f->host_alloc(be, (size_t)1 << 44, &huge);
    expect(v, st != CL_OK && huge == NULL, "host_alloc(16 TiB) is refused, out NULL");
    scope_end(&sc);
    f->host_free(NULL, p1);
    f->host_free(NULL, p2);
    f->host_free(NULL, NULL);
    free(want);
  }
}

/* Batches sent ahead (optional slots, core/ahead.c): bytes uploaded into
 * either slot's buffer arrive once the stream acquires the slot; an upload
 * into a slot comes after the stream's work released before it (a memset0
 * queued ahead of the release does not land over the batch); after
 * ahead_sync the host memory may change without changing the buffer. The
 * waiting slots come only with ahead_upload. */
static void run_ahead(const row *r) {
  (void)r;
  const size_t n = (size_t)1 << 18;
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_backend *be = v->be;
    const struct cl_backend_i *f = be->iface;
    if (!f->ahead_upload) {
      expect(v, !f->ahead_acquire && !f->ahead_release && !f->ahead_sync,
             "ahead_acquire, _release and _sync only with ahead_upload");
      continue;
    }
    scope sc = scope_of(v);
    void *pinned = NULL;
    float *h = f->host_alloc && f->host_alloc(be, n * 4, &pinned) == CL_OK ? pinned : NULL;
    if (!h) h = malloc(n * 4);
    float *want[2] = {rand_floats(n, -1, 1), rand_floats(n, -1, 1)}, *back = malloc(n * 4);
    float *d[2] = {dev_alloc(&sc, n * 4), dev_alloc(&sc, n * 4)};
    for (int k = 0; k < 2 && sc.ok; k++) {
      memcpy(h, want[k], n * 4);
      CALL(&sc, f->memset0(be, d[k], n * 4));
      if (f->ahead_release) CALL(&sc, f->ahead_release(be, k));
      CALL(&sc, f->ahead_upload(be, k, d[k], h, n * 4));
      if (f->ahead_sync) CALL(&sc, f->ahead_sync(be, k));
      memset(h, 0, n * 4); /* the upload is done: the buffer keeps the batch */
      if (f->ahead_acquire) CALL(&sc, f->ahead_acquire(be, k));
      CALL(&sc, f->download(be, back, d[k], n * 4));
      expect(v, sc.ok && memcmp(back, want[k], n * 4) == 0,
             "slot %d: the batch sent ahead, after the memset released before it", k);
    }
    scope_end(&sc);
    if (pinned)
      f->host_free(NULL, pinned);
    else
      free(h);
    free(want[0]), free(want[1]), free(back);
  }
}

/* ---- convolutions ---------------------------------------------------------------- */

/* One case: inputs, and references, shared by every backend. Backward
 * data depends on acc only and backward filter (which always accumulates)
 * on bias only, so a case runs the first where bias is set and the second
 * where acc is: the four (acc, bias) cases of a shape run forward four ways
 * and each backward two ways. */
typedef struct conv_data {
  cl_conv_shape s;
  int acc, bias;
  int run_data, run_filter;
  size_t nx, ny, nw;
  float *x, *dy, *w, *b, *y0, *dx0, *dw0, *db0; /* x, dy, y0 rounded to dtype */
  void *xs, *dys, *y0s;                         /* the same in storage bytes */
  double *ry, *rdx, *rdw, *rdb;
} conv_data;

static conv_data conv_make(const cl_conv_shape *s, int acc, int bias) {
  conv_data d;
  d.s = *s, d.acc = acc, d.bias = bias, d.run_data = bias, d.run_filter = acc;
  d.nx = (size_t)s->N * s->C * s->H * s->W, d.ny = (size_t)s->N * s->K * s->H * s->W;
  d.nw = (size_t)s->K * (s->C / cl_conv_groups(s)) * cl_conv_taps(s);
  d.x = rand_floats(d.nx, -1, 1), d.dy = rand_floats(d.ny, -1, 1);
  d.w = rand_floats(d.nw, -0.5f, 0.5f), d.b = rand_floats(s->K, -0.5f, 0.5f);
  d.y0 = rand_floats(d.ny, -1, 1), d.dx0 = rand_floats(d.nx, -1, 1);
  d.dw0 = rand_floats(d.nw, -1, 1), d.db0 = rand_floats(s->K, -1, 1);
  d.xs = to_storage(s->dtype, d.x, d.nx), d.dys = to_storage(s->dtype, d.dy, d.ny);
  d.y0s = to_storage(s->dtype, d.y0, d.ny);
  d.ry = xmalloc(sizeof(double) * d.ny), d.rdx = xmalloc(sizeof(double) * d.nx);
  d.rdw = xmalloc(sizeof(double) * d.nw), d.rdb = xmalloc(sizeof(double) * s->K);
  ref_conv_forward(s, d.x, d.w, bias ? d.b : NULL, acc ? d.y0 : NULL, d.ry);
  if (d.run_data) ref_conv_backward_data(s, d.dy, d.w, acc ? d.dx0 : NULL, d.rdx);
  if (d.run_filter)
    ref_conv_backward_filter(s, d.dy, d.x, d.dw0, d.db0, d.rdw, bias ? d.rdb : NULL);
  return d;
}

static void conv_free(conv_data *d) {
  free(d->x), free(d->dy), free(d->w), free(d->b), free(d->y0), free(d->dx0), free(d->dw0);
  free(d->db0), free(d->xs), free(d->dys), free(d->y0s), free(d->ry), free(d->rdx), free(d->rdw);
  free(d->rdb);
}

/* The float32 tolerance of a convolution result by the algorithm that
 * computed it (the backend's conv_algo slot; CONV_TOL's 2e-5 is that of
 * direct and GEMM algorithms: float32 products, summed in another order):
 *   TF32 (cuDNN's float32 on tensor cores, PyTorch's default): both operands
 *     of every product rounded to 10 mantissa bits, 2^-11 relative each, so
 *     a product is off by up to 2^-10 = 9.8e-4 of itself; summed with mixed
 *     signs and scaled by the largest result, 3e-3 (3x that) bounds it;
 *   FFT, FFT_TILING: the transforms' rounding is eps log2(n) relative to the
 *     whole tile's norm, not to each output's, so an output much smaller
 *     than its tile's largest carries the tile's error: 2e-4 (10x direct);
 *   WINOGRAD, WINOGRAD_NONFUSED: the input, filter and output transforms
 *     (entries up to 2, 16-36 terms per output tile) amplify the products'
 *     rounding some 5x over direct (Lavin and Gray, 2016): 1e-4.
 * The loosest family named wins (a "/" list has one per chunk). */
static double algo_tol(double base, const char *algo) {
  if (strstr(algo, "tf32")) return fmax(base, 3e-3);
  if (strstr(algo, "winograd F(6x6")) return fmax(base, 5e-5); /* see add_cpu_winograd_variants */
  if (strstr(algo, "FFT")) return fmax(base, 2e-4);
  if (strstr(algo, "WINOGRAD")) return fmax(base, 1e-4);
  return base;
}

/* The algorithm be reports for s in direction dir ("" without the slot). */
static const char *algo_of(cl_backend *be, const cl_conv_shape *s, int dir, char *buf,
                           size_t n) {
  const char *a = be->iface->conv_algo ? be->iface->conv_algo(be, s, dir) : "";
  snprintf(buf, n, "%s", a ? a : "");
  return buf;
}

/* Two calls on one workspace with the weights changed in place between
 * them (an optimizer step between two training steps): the second sees the
 * new weights, -w, whatever the first left in the workspace (the CPU
 * backend keeps its packed weights there across a call's images); within
 * the tolerance of the algorithm each direction runs (algo[dir]). */
static void conv_weights_changed(const row *r, variant *v, const conv_data *d, scope *sc, void *X,
                                 void *DY, float *W, float *B, void *Y, void *DX, void *WS,
                                 const char algo[][160], const char *label) {
  const cl_conv_shape *s = &d->s;
  const struct cl_backend_i *f = v->be->iface;
  float *neg = xmalloc(d->nw * 4);
  for (size_t i = 0; i < d->nw; i++) neg[i] = -d->w[i];
  const size_t P = (size_t)s->H * s->W;
  double *want = xmalloc(sizeof(double) * (d->ny > d->nx ? d->ny : d->nx));
  for (int dir = 0; dir < 2 && sc->ok; dir++) {
    if (dir == 1 && !d->run_data) continue;
    for (int pass = 0; pass < 2 && sc->ok; pass++) {
      dev_put(sc, W, pass ? neg : d->w, d->nw * 4);
      if (dir == 0)
        CALL(sc, f->conv_forward(v->be, s, X, W, d->bias ? B : NULL, Y, 0, WS));
      else
        CALL(sc, f->conv_backward_data(v->be, s, DY, W, (float *)DX, 0, WS));
    }
    const size_t n = dir ? d->nx : d->ny;
    for (size_t i = 0; i < n; i++) {
      const double b = dir == 0 && d->bias ? d->b[(i / P) % (size_t)s->K] : 0.0;
      want[i] = 2.0 * b - (dir ? d->rdx[i] : d->ry[i]);
    }
    float *got =
        sc->ok ? dev_get_act(sc, CL_F32, dir ? DX : Y, (size_t)s->N, (size_t)(dir ? s->C : s->K), P)
               : NULL;
    char what[240];
    snprintf(what, sizeof what, "%s: %s again after the weights changed in place", label,
             dir ? "backward data" : "forward");
    if (got) compare(v, what, got, want, n, algo_tol(tol_of(r, v, CL_F32, CL_F32), algo[dir]));
    free(got);
  }
  dev_put(sc, W, d->w, d->nw * 4);
  free(neg), free(want);
}

/* The three convolution calls on one backend. Outputs that are not
 * accumulated start as all-one bytes (NaN in every storage type): they must
 * be written, not read. Each call gets exactly conv_workspace() bytes; on a
 * host-accessible backend they start 4 or 12 bytes past an aligned address
 * (the CPU aligns its workspace itself; the core gives device backends an
 * aligned one). */
static void conv_on(const row *r, variant *v, const conv_data *d, const char *label) {
  cl_backend *be = v->be;
  const struct cl_backend_i *f = be->iface;
  const cl_conv_shape *s = &d->s;
  const cl_dtype t = s->dtype;
  const size_t es = cl_dtype_size(t), off = (size_t)r->offset;
  const size_t nmax = d->nx > d->ny ? d->nx : d->ny;
  scope sc = scope_of(v);
  size_t ws = 0;
  CALL(&sc, cl_backend_conv_workspace_any(be, s, &ws));
  char *X = dev_alloc(&sc, (d->nx + off) * es), *DY = dev_alloc(&sc, (d->ny + off) * es);
  char *Y = dev_alloc(&sc, (d->ny + off) * es), *DX = dev_alloc(&sc, (d->nx + off) * 4);
  float *W = dev_of(&sc, d->w, d->nw * 4), *B = dev_of(&sc, d->b, s->K * 4);
  float *DW = dev_of(&sc, d->dw0, d->nw * 4), *DB = dev_of(&sc, d->db0, s->K * 4);
  unsigned char *WS = ws ? dev_alloc(&sc, ws + 16 + GUARD) : NULL;
  if (!sc.ok) goto out;
  X += off * es, DY += off * es, Y += off * es, DX += off * 4;
  {
    const size_t N = (size_t)s->N, P = (size_t)s->H * s->W;
    unsigned char *nan = xmalloc(nmax * 4);
    memset(nan, 0xFF, nmax * 4);
    const void *in[4] = {d->xs, d->dys, d->acc ? d->y0s : nan, d->acc ? (const void *)d->dx0 : nan};
    void *at[4] = {X, DY, Y, DX};
    const size_t ch[4] = {(size_t)s->C, (size_t)s->K, (size_t)s->K, (size_t)s->C};
    for (int k = 0; k < 4; k++) { /* each in the row's layout */
      void *moved = to_layout(in[k], N, ch[k], P, k == 3 ? 4 : es);
      dev_put(&sc, at[k], moved, N * ch[k] * P * (k == 3 ? 4 : es));
      free(moved);
    }
    free(nan);
  }
  static const int skew[3] = {4, 12, 0};
  int guards = 1;
  for (int dir = 0; dir < 3 && sc.ok; dir++) {
    if ((dir == 1 && !d->run_data) || (dir == 2 && !d->run_filter)) continue;
    unsigned char *wsp = WS ? WS + (f->host_accessible ? skew[dir] : 0) : NULL;
    if (wsp) guard_set(&sc, wsp + ws);
    if (dir == 0)
      CALL(&sc, f->conv_forward(be, s, X, W, d->bias ? B : NULL, Y, d->acc, wsp));
    else if (dir == 1)
      CALL(&sc, f->conv_backward_data(be, s, DY, W, (float *)DX, d->acc, wsp));
    else
      CALL(&sc, f->conv_backward_filter(be, s, DY, X, DW, d->bias ? DB : NULL, wsp));
    if (wsp) guards &= guard_intact(&sc, wsp + ws);
  }
  if (!sc.ok) goto out;
  expect(v, guards, "%s: nothing written past the %zu workspace bytes", label, ws);
  /* the algorithm of each direction goes into the label: recorded with
   * the result (-v prints every one), and its tolerance for float32 */
  char what[240], algo[3][160];
  for (int dir = 0; dir < 3; dir++) algo_of(be, s, dir, algo[dir], sizeof algo[dir]);
  if (f->conv_algo && s->N > 0)
    expect(v, algo[0][0] && (!d->run_data || algo[1][0]) && (!d->run_filter || algo[2][0]),
           "%s: conv_algo names the algorithm of each direction that ran", label);
  const int f32 = t == CL_F32;
  const size_t N = (size_t)s->N, P = (size_t)s->H * s->W;
  float *got = dev_get_act(&sc, t, Y, N, (size_t)s->K, P);
  snprintf(what, sizeof what, "%s: forward%s%s", label, algo[0][0] ? " " : "", algo[0]);
  if (got)
    compare(v, what, got, d->ry, d->ny,
            f32 ? algo_tol(tol_of(r, v, t, t), algo[0]) : tol_of(r, v, t, t));
  free(got);
  got = d->run_data ? dev_get_act(&sc, CL_F32, DX, N, (size_t)s->C, P) : NULL;
  snprintf(what, sizeof what, "%s: backward data (float32 dx)%s%s", label, algo[1][0] ? " " : "",
           algo[1]);
  if (got)
    compare(v, what, got, d->rdx, d->nx,
            algo_tol(tol_of(r, v, t, CL_F32), algo[1])); /* a float32 result, any t */
  free(got);
  got = d->run_filter ? dev_get(&sc, CL_F32, DW, d->nw) : NULL;
  snprintf(what, sizeof what, "%s: backward filter dw%s%s", label, algo[2][0] ? " " : "",
           algo[2]);
  if (got)
    compare(v, what, got, d->rdw, d->nw,
            algo_tol(tol_of(r, v, t, CL_F32), algo[2])); /* a float32 result, any t */
  free(got);
  got = d->run_filter ? dev_get(&sc, CL_F32, DB, s->K) : NULL;
  snprintf(what, sizeof what, "%s: bias gradient", label);
  if (got && d->bias) compare(v, what, got, d->rdb, s->K, tol_of(r, v, t, CL_F32));
  if (got && !d->bias)
    expect(v, memcmp(got, d->db0, s->K * 4) == 0, "%s: dbias NULL leaves it alone", label);
  free(got);
  if (f32 && !d->acc && s->N > 0) conv_weights_changed(r, v, d, &sc, X, DY, W, B, Y, DX, WS, algo,
                                                     label);
out:
  scope_end(&sc);
}

static void run_conv(const row *r) {
  const cl_conv_shape *shapes = r->cases;
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++) {
      if (!(r->dtypes & (1u << t))) continue;
      cl_conv_shape s = shapes[i];
      s.dtype = (cl_dtype)t;
      s.layout = layout_now;
      if (too_big((double)s.N * s.H * s.W * s.C * s.K * cl_conv_taps(&s))) continue;
      if (layout_now == CL_NHWC && cl_conv_groups(&s) > 1) continue; /* NCHW only */
      for (int acc = 0; acc < 2; acc++)
        for (int bias = 0; bias < 2; bias++) {
          conv_data d = conv_make(&s, acc, bias);
          char label[160];
          snprintf(label, sizeof label, "%s N%d C%d %dx%d K%d k%dx%d d%dx%d G%d acc%d bias%d%s%s",
                   dtype_str(s.dtype), s.N, s.C, s.H, s.W, s.K, s.kh, s.kw, s.dh, s.dw,
                   cl_conv_groups(&s), acc, bias, r->offset ? " off+1" : "",
                   layout_now == CL_NHWC ? " nhwc" : "");
          for (int vi = 0; vi < n_vs; vi++) conv_on(r, &vs[vi], &d, label);
          conv_free(&d);
        }
    }
}

/* How many of n stored values differ from host/half.h's rounding of b
 * (NaN must stay NaN, its payload may differ); *first: the first. */
static size_t rounding_bad(cl_dtype t, const float *b, const uint16_t *got, size_t n,
                           size_t *first) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    const uint16_t want = t == CL_F16 ? cl_f32_to_f16(b[i]) : cl_f32_to_bf16(b[i]);
    const float wv = t == CL_F16 ? cl_f16_to_f32(want) : cl_bf16_to_f32(want);
    const float gv = t == CL_F16 ? cl_f16_to_f32(got[i]) : cl_bf16_to_f32(got[i]);
    if (!(isnan(wv) ? isnan(gv) : got[i] == want) && bad++ == 0) *first = i;
  }
  return bad;
}

/* store_f32 of the n floats b in dtype t (float32: a copy, bit for bit). */
static void check_store_f32(variant *v, scope *sc, cl_dtype t, const float *b, size_t n) {
  size_t e = t == CL_F32 ? 4 : 2, bad = 0, first = 0;
  void *S = dev_of(sc, b, n * 4), *D = dev_alloc(sc, n * e);
  unsigned char *got = xmalloc(n * e);
  if (sc->ok) CALL(sc, v->be->iface->store_f32(v->be, D, S, n, t));
  if (sc->ok) CALL(sc, v->be->iface->download(v->be, got, D, n * e));
  if (sc->ok && t == CL_F32)
    bad = memcmp(got, b, n * 4) != 0;
  else if (sc->ok)
    bad = rounding_bad(t, b, (const uint16_t *)got, n, &first);
  if (sc->ok)
    expect(v, bad == 0, "store_f32 of %zu values as %s, bit for bit%s (first %.9g)", n,
           dtype_str(t), bad ? ": differs" : "", bad ? (double)b[first] : 0.0);
  free(got);
}

/* The device's float32 -> storage rounding against host/half.h, bit for
 * bit, on special values (ties, subnormals, overflow, inf, NaN) and random
 * bit patterns: y = 0 + bias rounds bias[k] into channel k of a 1x1
 * convolution of zeros, and store_f32 rounds them straight. */
static void run_rounding(const row *r) {
  static const float special[] = {
      0.0f, 1.0f, -1.0f, 0.1f, 1.0f / 3.0f, 65504.0f, 65519.0f, 65520.0f, 65536.0f, 1e5f,
      -1e5f, 1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f,
      0x1p-14f, 0x1p-15f + 0x1p-25f, 0x1p-24f, 0x1p-25f, 3 * 0x1p-25f, 0x1.8p-25f, 0x1p-26f,
      6e-8f, 1e-8f, 6.1e-5f, 5.96e-8f, 2.98e-8f, 1e-7f, 3.14159f, 1e30f, -1e-40f, 3.0e38f,
      3.389e38f, 3.4028235e38f, -3.4028235e38f, 1e-39f, 1e-45f, INFINITY, -INFINITY, NAN};
  const size_t n_special = COUNT(special), n = n_special + 4096;
  float *b = xmalloc(n * 4);
  memcpy(b, special, sizeof special);
  for (size_t i = n_special; i < n; i++) {
    uint32_t u = (uint32_t)(uniform01(NULL) * 4294967296.0);
    if (u == 0x80000000u) u = 0; /* 0 + -0 is +0: the sum would not carry -0 through */
    memcpy(&b[i], &u, 4);
  }
  for (int t = CL_F16; t <= CL_BF16; t++) {
    if (!(r->dtypes & (1u << t))) continue;
    cl_conv_shape s = {1, 1, 1, 1, (int)n, 1, 1, 1, 1, (cl_dtype)t, 0, CL_NCHW, 0};
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      scope sc = scope_of(v);
      size_t ws = 0;
      const uint16_t zero16 = 0;
      CALL(&sc, cl_backend_conv_workspace_any(v->be, &s, &ws));
      void *X = dev_of(&sc, &zero16, 2), *B = dev_of(&sc, b, n * 4), *Y = dev_alloc(&sc, n * 2);
      float *W = dev_alloc(&sc, n * 4);
      void *WS = ws ? dev_alloc(&sc, ws) : NULL;
      if (sc.ok) CALL(&sc, v->be->iface->memset0(v->be, W, n * 4));
      if (sc.ok) CALL(&sc, v->be->iface->conv_forward(v->be, &s, X, W, B, Y, 0, WS));
      uint16_t *got = xmalloc(n * 2);
      if (sc.ok) CALL(&sc, v->be->iface->download(v->be, got, Y, n * 2));
      size_t bad = 0, first = 0;
      if (sc.ok) bad = rounding_bad((cl_dtype)t, b, got, n, &first);
      if (sc.ok)
        expect(v, bad == 0, "float32 -> %s rounding of %zu values, bit for bit%s (first %.9g)",
               dtype_str((cl_dtype)t), n, bad ? ": differs" : "", bad ? (double)b[first] : 0.0);
      free(got);
      check_store_f32(v, &sc, (cl_dtype)t, b, n);
      if (t == CL_F16) check_store_f32(v, &sc, CL_F32, b, n);
      scope_end(&sc);
    }
  }
  free(b);
}

/* Calls that must be refused, and calls that must do nothing. */
static void run_conv_errors(const row *r) {
  (void)r;
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_backend *be = v->be;
    const struct cl_backend_i *f = be->iface;
    cl_conv_shape s = {2, 3, 4, 4, 5, 3, 3, 1, 1, BAD_DTYPE, 0, CL_NCHW, 0};
    be->err[0] = '\0';
    cl_status st = f->conv_forward(be, &s, NULL, NULL, NULL, NULL, 0, NULL);
    expect(v, st == CL_E_UNSUPPORTED && be->err[0], "unknown dtype: %s (%s)", status_str(st),
           be->err);
    /* Shapes backend.h rules out (even kernels, dilation < 1): every call
     * refuses them before touching a pointer. */
    static const struct {
      int kh, kw, dh, dw;
      const char *what;
    } bad[] = {{2, 3, 1, 1, "even kernel height"}, {3, 2, 1, 1, "even kernel width"},
               {4, 4, 1, 1, "even kernel"},        {3, 3, 0, 1, "dilation 0 in height"},
               {3, 3, 1, 0, "dilation 0 in width"}, {1, 3, -2, 1, "negative dilation"},
               {0, 3, 1, 1, "kernel height 0"}};
    s.dtype = CL_F32;
    for (int i = 0; i < COUNT(bad); i++) {
      s.kh = bad[i].kh, s.kw = bad[i].kw, s.dh = bad[i].dh, s.dw = bad[i].dw;
      size_t ws = 0;
      cl_status s0 =
          f->conv_workspace ? f->conv_workspace(be, &s, CL_CONV_FORWARD, &ws) : CL_E_INVALID;
      cl_status s1 = f->conv_forward(be, &s, NULL, NULL, NULL, NULL, 0, NULL);
      cl_status s2 = f->conv_backward_data(be, &s, NULL, NULL, NULL, 0, NULL);
      cl_status s3 = f->conv_backward_filter(be, &s, NULL, NULL, NULL, NULL, NULL);
      expect(v, s0 == CL_E_INVALID && s1 == CL_E_INVALID && s2 == CL_E_INVALID &&
                    s3 == CL_E_INVALID && be->err[0],
             "%s (k%dx%d d%dx%d) refused: workspace %s, forward %s, data %s, filter %s (%s)",
             bad[i].what, s.kh, s.kw, s.dh, s.dw, status_str(s0), status_str(s1),
             status_str(s2), status_str(s3), be->err);
    }
    s.kh = 3, s.kw = 3, s.dh = 1, s.dw = 1, s.N = 0;
    st = f->conv_forward(be, &s, NULL, NULL, NULL, NULL, 0, NULL);
    st |= f->conv_backward_data(be, &s, NULL, NULL, NULL, 0, NULL);
    st |= f->conv_backward_filter(be, &s, NULL, NULL, NULL, NULL, NULL);
    expect(v, st == CL_OK, "N = 0: the three calls do nothing (%s)", status_str(st));
    /* A workspace asked for and not given is the caller's bug: refused,
     * whichever call it is, not a crash. */
    for (int t = CL_F32; t <= CL_BF16; t++) {
      cl_conv_shape h = {1, 2, 4, 4, 4, 3, 3, 1, 1, (cl_dtype)t, 0, CL_NCHW, 0};
      size_t ws = 0;
      scope sc = scope_of(v);
      CALL(&sc, cl_backend_conv_workspace_any(be, &h, &ws));
      void *X = dev_alloc(&sc, 4 * 32 * 4), *Y = dev_alloc(&sc, 4 * 64 * 4);
      void *W = dev_alloc(&sc, 4 * 72 * 4), *DB = dev_alloc(&sc, 16 * 4);
      if (sc.ok && ws > 0) {
        cl_status s1 = f->conv_forward(be, &h, X, W, NULL, Y, 0, NULL);
        cl_status s2 = f->conv_backward_data(be, &h, Y, W, X, 0, NULL);
        cl_status s3 = f->conv_backward_filter(be, &h, Y, X, W, DB, NULL);
        expect(v, s1 == CL_E_INTERNAL && s2 == CL_E_INTERNAL && s3 == CL_E_INTERNAL && be->err[0],
               "%s without the %zu workspace bytes asked for: %s, %s, %s (%s)",
               dtype_str(h.dtype), ws, status_str(s1), status_str(s2), status_str(s3), be->err);
      }
      scope_end(&sc);
    }
  }
}

/* ---- the fused cell ---------------------------------------------------------------- */

/* A cell's activations in layout_now: gates [N, 4 hidden, P], states
 * [N, hidden, P] (backend.h: cl_gates_shape). */
static void *dev_gates(scope *sc, const void *host, const cl_gates_shape *s, size_t es) {
  return dev_of_act(sc, host, (size_t)s->N, 4 * (size_t)s->hidden, (size_t)s->P, es);
}
static void *dev_cells(scope *sc, const void *host, const cl_gates_shape *s, size_t es) {
  return dev_of_act(sc, host, (size_t)s->N, (size_t)s->hidden, (size_t)s->P, es);
}
static float *get_gates(scope *sc, cl_dtype t, const void *dev, const cl_gates_shape *s) {
  return dev_get_act(sc, t, dev, (size_t)s->N, 4 * (size_t)s->hidden, (size_t)s->P);
}
static float *get_cells(scope *sc, cl_dtype t, const void *dev, const cl_gates_shape *s) {
  return dev_get_act(sc, t, dev, (size_t)s->N, (size_t)s->hidden, (size_t)s->P);
}
static const char *layout_tag(void) { return layout_now == CL_NHWC ? " nhwc" : ""; }

/* The shape of case i at dtype t in layout_now; 0 where that layout has no
 * such cell (channels last takes peepholes per channel only). */
static int gates_case(const row *r, int i, int t, cl_gates_shape *s) {
  *s = ((const cl_gates_shape *)r->cases)[i];
  s->dtype = (cl_dtype)t;
  s->layout = layout_now;
  return layout_now == CL_NCHW || s->peep != CL_PEEP_POSITION;
}

static void run_gates_forward(const row *r) {
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++)
      for (int with_cp = 0; with_cp < 2; with_cp++) {
        if (!(r->dtypes & (1u << t))) continue;
        cl_gates_shape s;
        if (!gates_case(r, i, t, &s)) continue;
        const size_t ns = (size_t)s.N * s.hidden * s.P, nz = 4 * ns, es = cl_dtype_size(s.dtype);
        float *z = rand_floats(nz, -4, 4), *cp = rand_floats(ns, -2, 2);
        const size_t nw = ref_peep_numel(&s);
        float *wp = nw ? rand_floats(nw, -1, 1) : NULL;
        void *zs = to_storage(s.dtype, z, nz), *cps = to_storage(s.dtype, cp, ns);
        double *ra = xmalloc(nz * 8), *rc = xmalloc(ns * 8), *rh = xmalloc(ns * 8);
        ref_gates_forward(&s, z, with_cp ? cp : NULL, wp, ra, rc, rh);
        char label[120], what[200];
        snprintf(label, sizeof label, "%s N%d hidden%d P%d c_prev%s peep%d%s", dtype_str(s.dtype),
                 s.N, s.hidden, s.P, with_cp ? "" : "=NULL", (int)s.peep, layout_tag());
        for (int vi = 0; vi < n_vs; vi++) {
          variant *v = &vs[vi];
          scope sc = scope_of(v);
          void *Z = dev_gates(&sc, zs, &s, es), *CP = dev_cells(&sc, cps, &s, es);
          void *C = dev_alloc(&sc, ns * es), *H = dev_alloc(&sc, ns * es);
          float *WP = nw ? dev_of(&sc, wp, nw * 4) : NULL;
          if (sc.ok)
            CALL(&sc, v->be->iface->gates_forward(v->be, &s, Z, with_cp ? CP : NULL, WP, NULL, C, H));
          const double tl = tol_of(r, v, s.dtype, s.dtype);
          float *got = sc.ok ? get_gates(&sc, s.dtype, Z, &s) : NULL;
          snprintf(what, sizeof what, "%s: activations", label);
          if (got) compare(v, what, got, ra, nz, tl);
          free(got);
          got = sc.ok ? get_cells(&sc, s.dtype, C, &s) : NULL;
          snprintf(what, sizeof what, "%s: c", label);
          if (got) compare(v, what, got, rc, ns, tl);
          free(got);
          got = sc.ok ? get_cells(&sc, s.dtype, H, &s) : NULL;
          snprintf(what, sizeof what, "%s: h", label);
          if (got) compare(v, what, got, rh, ns, tl);
          free(got);
          scope_end(&sc);
        }
        free(z), free(cp), free(wp), free(zs), free(cps), free(ra), free(rc), free(rh);
      }
}

/* Per-element relative accuracy of the activations over pre-activations of
 * magnitude 1e-7 .. 1e2, both signs: tiny ones where tanh(x) ~ x must stay
 * relative, huge ones where the sigmoid saturates. */
static void run_activation_accuracy(const row *r) {
  enum { P = 4096 };
  cl_gates_shape s = {1, 1, P, CL_F32, CL_PEEP_NONE, CL_NCHW};
  float *z = xmalloc(sizeof(float) * 4 * P);
  for (int p = 0; p < P; p++) {
    const double t = (double)p / (P - 1);
    z[p] = (float)((p % 2 ? -1 : 1) * pow(10.0, -7.0 + 9.0 * t));
  }
  for (int q = 1; q < 4; q++) memcpy(z + q * P, z, sizeof(float) * P);
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    scope sc = scope_of(v);
    void *Z = dev_of(&sc, z, 4 * P * 4), *C = dev_alloc(&sc, P * 4), *H = dev_alloc(&sc, P * 4);
    if (sc.ok) CALL(&sc, v->be->iface->gates_forward(v->be, &s, Z, NULL, NULL, NULL, C, H));
    float *a = sc.ok ? dev_get(&sc, CL_F32, Z, 4 * P) : NULL;
    if (a) {
      double max_sig = 0.0, max_tanh = 0.0;
      for (int p = 0; p < P; p++) {
        const double sg = ref_sigmoid(z[p]), th = tanh((double)z[p]);
        if (sg > 1e-37) max_sig = fmax(max_sig, fabs(a[p] - sg) / sg);
        max_tanh = fmax(max_tanh, fabs(a[3 * P + p] - th) / fabs(th));
      }
      expect(v, max_sig < r->tol.f32 && max_tanh < r->tol.f32,
             "activations: sigmoid rel %.2e, tanh rel %.2e (tol %.0e; float eps 1.19e-07)",
             max_sig, max_tanh, r->tol.f32);
    }
    free(a);
    scope_end(&sc);
  }
  free(z);
}

/* Backward from stored activations, c and c_prev drawn independently of
 * any forward (plausible ranges), against the formulas of backend.h. */
static void run_gates_backward(const row *r) {
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++)
      for (int with_cp = 0; with_cp < 2; with_cp++) {
        if (!(r->dtypes & (1u << t))) continue;
        cl_gates_shape s;
        if (!gates_case(r, i, t, &s)) continue;
        const size_t ns = (size_t)s.N * s.hidden * s.P, nz = 4 * ns, es = cl_dtype_size(s.dtype);
        float *act = xmalloc(nz * 4);
        for (size_t e = 0; e < ns; e++)
          for (int q = 0; q < 4; q++)
            act[ref_gate_at(&s, e, q)] = q < 3 ? urand(0.01f, 0.99f) : urand(-0.99f, 0.99f);
        float *c = rand_floats(ns, -2, 2), *cp = rand_floats(ns, -2, 2);
        float *dh = rand_floats(ns, -1, 1), *dc = rand_floats(ns, -1, 1);
        const size_t nw = ref_peep_numel(&s);
        float *wp = nw ? rand_floats(nw, -1, 1) : NULL;
        void *as = to_storage(s.dtype, act, nz), *cs = to_storage(s.dtype, c, ns);
        void *cps = to_storage(s.dtype, cp, ns);
        double *rdz = xmalloc(nz * 8), *rdc = xmalloc(ns * 8);
        ref_gates_backward(&s, act, c, with_cp ? cp : NULL, wp, dh, dc, rdz, rdc);
        char label[120], what[200];
        snprintf(label, sizeof label, "%s N%d hidden%d P%d c_prev%s peep%d%s", dtype_str(s.dtype),
                 s.N, s.hidden, s.P, with_cp ? "" : "=NULL", (int)s.peep, layout_tag());
        for (int vi = 0; vi < n_vs; vi++) {
          variant *v = &vs[vi];
          scope sc = scope_of(v);
          void *A = dev_gates(&sc, as, &s, es), *C = dev_cells(&sc, cs, &s, es);
          void *CP = dev_cells(&sc, cps, &s, es);
          float *DH = dev_cells(&sc, dh, &s, 4), *DC = dev_cells(&sc, dc, &s, 4);
          float *WP = nw ? dev_of(&sc, wp, nw * 4) : NULL;
          if (sc.ok)
            CALL(&sc, v->be->iface->gates_backward(v->be, &s, A, C, with_cp ? CP : NULL, WP, DH,
                                                   DC, NULL));
          float *got = sc.ok ? get_gates(&sc, s.dtype, A, &s) : NULL;
          snprintf(what, sizeof what, "%s: d pre-activations (stored)", label);
          if (got) compare(v, what, got, rdz, nz, tol_of(r, v, s.dtype, s.dtype));
          free(got);
          got = sc.ok ? get_cells(&sc, CL_F32, DC, &s) : NULL;
          snprintf(what, sizeof what, "%s: dc_prev (float32)", label);
          if (got) compare(v, what, got, rdc, ns, tol_of(r, v, s.dtype, CL_F32));
          free(got);
          scope_end(&sc);
        }
        free(act), free(c), free(cp), free(dh), free(dc), free(as), free(cs), free(cps);
        free(rdz), free(rdc), free(wp);
      }
}

/* Forward then backward with dh = a and incoming dc = b is the gradient of
 * L = sum a h + sum b c: dz and dc_prev (and, with peepholes, the weights'
 * gradient from peephole_filter, added to a nonzero dw0) against central
 * differences of L (step 1e-6, in double). With c_prev NULL nothing depends
 * on it, and the returned dc must merely be finite. */
static void run_gates_fd(const row *r) {
  const cl_gates_shape *shapes = r->cases;
  for (int i = 0; i < r->n_cases; i++)
    for (int with_cp = 0; with_cp < 2; with_cp++) {
      const cl_gates_shape s = shapes[i];
      const size_t ns = (size_t)s.N * s.hidden * s.P, nz = 4 * ns, nw = ref_peep_numel(&s);
      float *z = rand_floats(nz, -3, 3), *cp = rand_floats(ns, -1, 1);
      float *a = rand_floats(ns, -1, 1), *b = rand_floats(ns, -1, 1);
      float *wp = nw ? rand_floats(nw, -1, 1) : NULL, *dw0 = nw ? rand_floats(nw, -1, 1) : NULL;
      double *zd = to_double(z, nz), *cpd = to_double(cp, ns), *wd = nw ? to_double(wp, nw) : NULL;
      double *dz = xmalloc(nz * 8), *dcp = xmalloc(ns * 8), *dw = xmalloc((nw + 1) * 8);
      const double eps = 1e-6;
      for (size_t k = 0; k < nz + ns + nw; k++) {
        double *x = k < nz ? &zd[k] : k < nz + ns ? &cpd[k - nz] : &wd[k - nz - ns], x0 = *x;
        *x = x0 + eps;
        const double lp = ref_cell_loss(&s, zd, with_cp ? cpd : NULL, wd, a, b);
        *x = x0 - eps;
        const double lm = ref_cell_loss(&s, zd, with_cp ? cpd : NULL, wd, a, b);
        *x = x0;
        const double d = (lp - lm) / (2 * eps);
        if (k < nz) dz[k] = d;
        else if (k < nz + ns) dcp[k - nz] = d;
        else dw[k - nz - ns] = dw0[k - nz - ns] + d;
      }
      char label[120], what[200];
      snprintf(label, sizeof label, "f32 N%d hidden%d P%d c_prev%s peep%d", s.N, s.hidden, s.P,
               with_cp ? "" : "=NULL", (int)s.peep);
      for (int vi = 0; vi < n_vs; vi++) {
        variant *v = &vs[vi];
        scope sc = scope_of(v);
        void *Z = dev_of(&sc, z, nz * 4), *CP = dev_of(&sc, cp, ns * 4);
        void *C = dev_alloc(&sc, ns * 4), *H = dev_alloc(&sc, ns * 4);
        float *DH = dev_of(&sc, a, ns * 4), *DC = dev_of(&sc, b, ns * 4);
        float *WP = nw ? dev_of(&sc, wp, nw * 4) : NULL, *DW = nw ? dev_of(&sc, dw0, nw * 4) : NULL;
        const void *cpp = with_cp ? CP : NULL;
        if (sc.ok) CALL(&sc, v->be->iface->gates_forward(v->be, &s, Z, cpp, WP, NULL, C, H));
        if (sc.ok) CALL(&sc, v->be->iface->gates_backward(v->be, &s, Z, C, cpp, WP, DH, DC, NULL));
        if (sc.ok && nw) CALL(&sc, v->be->iface->peephole_filter(v->be, &s, Z, C, cpp, DW));
        float *got = sc.ok ? dev_get(&sc, CL_F32, Z, nz) : NULL;
        snprintf(what, sizeof what, "%s: dz vs finite differences", label);
        if (got) compare(v, what, got, dz, nz, r->tol.f32);
        free(got);
        got = sc.ok ? get_cells(&sc, CL_F32, DC, &s) : NULL;
        snprintf(what, sizeof what, "%s: dc_prev vs finite differences", label);
        if (got && with_cp) compare(v, what, got, dcp, ns, r->tol.f32);
        int finite = got != NULL;
        for (size_t e = 0; got && e < ns; e++) finite &= isfinite(got[e]) != 0;
        if (got && !with_cp) expect(v, finite, "%s: dc_prev finite", label);
        free(got);
        got = sc.ok && nw ? dev_get(&sc, CL_F32, DW, nw) : NULL;
        snprintf(what, sizeof what, "%s: dw_peep (+= dw0) vs finite differences", label);
        if (got) compare(v, what, got, dw, nw, r->tol.f32);
        free(got);
        scope_end(&sc);
      }
      free(z), free(cp), free(a), free(b), free(zd), free(cpd), free(dz), free(dcp);
      free(wp), free(dw0), free(wd), free(dw);
    }
}

/* peephole_filter alone, from dz, c and c_prev drawn independently, onto a
 * nonzero dw0 (it accumulates), against the double sums. */
static void run_peephole_filter(const row *r) {
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++)
      for (int with_cp = 0; with_cp < 2; with_cp++) {
        if (!(r->dtypes & (1u << t))) continue;
        cl_gates_shape s;
        if (!gates_case(r, i, t, &s)) continue;
        const size_t ns = (size_t)s.N * s.hidden * s.P, nz = 4 * ns, nw = ref_peep_numel(&s);
        const size_t es = cl_dtype_size(s.dtype);
        float *dz = rand_floats(nz, -1, 1), *c = rand_floats(ns, -2, 2);
        float *cp = rand_floats(ns, -2, 2), *dw0 = rand_floats(nw, -1, 1);
        /* (rounds dz, c, cp to the stored values the device reads) */
        void *dzs = to_storage(s.dtype, dz, nz), *cs = to_storage(s.dtype, c, ns);
        void *cps = to_storage(s.dtype, cp, ns);
        double *rdw = xmalloc(nw * 8);
        ref_peephole_filter(&s, dz, c, with_cp ? cp : NULL, dw0, rdw);
        char label[120], what[200];
        snprintf(label, sizeof label, "%s N%d hidden%d P%d c_prev%s peep%d%s", dtype_str(s.dtype),
                 s.N, s.hidden, s.P, with_cp ? "" : "=NULL", (int)s.peep, layout_tag());
        for (int vi = 0; vi < n_vs; vi++) {
          variant *v = &vs[vi];
          scope sc = scope_of(v);
          void *DZ = dev_gates(&sc, dzs, &s, es), *C = dev_cells(&sc, cs, &s, es);
          void *CP = dev_cells(&sc, cps, &s, es);
          float *DW = dev_of(&sc, dw0, nw * 4);
          if (sc.ok)
            CALL(&sc, v->be->iface->peephole_filter(v->be, &s, DZ, C, with_cp ? CP : NULL, DW));
          float *got = sc.ok ? dev_get(&sc, CL_F32, DW, nw) : NULL;
          snprintf(what, sizeof what, "%s: dw_peep", label);
          if (got) compare(v, what, got, rdw, nw, r->tol.f32);
          free(got);
          scope_end(&sc);
        }
        free(dz), free(c), free(cp), free(dw0), free(dzs), free(cs), free(cps), free(rdw);
      }
}

/* ---- the fused bias (backend.h: gates_forward's bias, gates_backward's
 * dbias; be->fused_bias) ---------------------------------------------------- */

/* The unfused path's slot on the same backend, as the core runs it
 * without fusion: a 1x1 convolution over [N, 1, 1, P] images with zero
 * weights and the bias, accumulating into y = z (forward: y += 0 + bias),
 * or its filter gradient with dbias (backward: dbias += sum of dy).
 * Returns the device buffers' scope status. */
static cl_conv_shape bias_conv_shape(const cl_gates_shape *s) {
  cl_conv_shape c = {s->N, 1, 1, s->P, 4 * s->hidden, 1, 1, 1, 1, s->dtype, 0, s->layout, 0};
  return c;
}

/* gates_forward with the bias against the reference of z + bias (the sum
 * in float, as backends form it) and against the unfused slots on the same
 * backend (conv_forward adds the bias, then gates_forward without it). */
static void run_gates_forward_bias(const row *r) {
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++)
      for (int with_cp = 0; with_cp < 2; with_cp++) {
        if (!(r->dtypes & (1u << t))) continue;
        cl_gates_shape s;
        if (!gates_case(r, i, t, &s)) continue;
        const size_t ns = (size_t)s.N * s.hidden * s.P, nz = 4 * ns, es = cl_dtype_size(s.dtype);
        const size_t nb = 4 * (size_t)s.hidden, nw = ref_peep_numel(&s);
        float *z = rand_floats(nz, -3, 3), *cp = rand_floats(ns, -2, 2);
        float *bias = rand_floats(nb, -1, 1), *zb = xmalloc(nz * 4);
        float *wp = nw ? rand_floats(nw, -1, 1) : NULL;
        void *zs = to_storage(s.dtype, z, nz), *cps = to_storage(s.dtype, cp, ns);
        for (size_t e = 0; e < ns; e++) /* gate q of channel ch: bias[q hidden + ch] */
          for (int q = 0; q < 4; q++) {
            const size_t k = ref_gate_at(&s, e, q);
            zb[k] = z[k] + bias[(size_t)q * s.hidden + e / s.P % s.hidden];
          }
        double *ra = xmalloc(nz * 8), *rc = xmalloc(ns * 8), *rh = xmalloc(ns * 8);
        ref_gates_forward(&s, zb, with_cp ? cp : NULL, wp, ra, rc, rh);
        cl_conv_shape cs = bias_conv_shape(&s);
        char label[120], what[200];
        snprintf(label, sizeof label, "%s N%d hidden%d P%d c_prev%s peep%d bias%s",
                 dtype_str(s.dtype), s.N, s.hidden, s.P, with_cp ? "" : "=NULL", (int)s.peep,
                 layout_tag());
        for (int vi = 0; vi < n_vs; vi++) {
          variant *v = &vs[vi];
          const struct cl_backend_i *f = v->be->iface;
          scope sc = scope_of(v);
          size_t wsb = 0;
          CALL(&sc, cl_backend_conv_workspace_any(v->be, &cs, &wsb));
          void *Z = dev_gates(&sc, zs, &s, es), *Z2 = dev_gates(&sc, zs, &s, es);
          void *CP = dev_cells(&sc, cps, &s, es), *X = dev_alloc(&sc, ns * es);
          void *C = dev_alloc(&sc, ns * es), *H = dev_alloc(&sc, ns * es);
          void *C2 = dev_alloc(&sc, ns * es), *H2 = dev_alloc(&sc, ns * es);
          float *B = dev_of(&sc, bias, nb * 4), *W0 = dev_alloc(&sc, nb * 4);
          void *WS = wsb ? dev_alloc(&sc, wsb) : NULL;
          float *WP = nw ? dev_of(&sc, wp, nw * 4) : NULL;
          const void *cpp = with_cp ? CP : NULL;
          if (sc.ok) CALL(&sc, f->memset0(v->be, W0, nb * 4));
          if (sc.ok) CALL(&sc, f->memset0(v->be, X, ns * es));
          if (sc.ok) CALL(&sc, f->gates_forward(v->be, &s, Z, cpp, WP, B, C, H));
          if (sc.ok) CALL(&sc, f->conv_forward(v->be, &cs, X, W0, B, Z2, 1, WS));
          if (sc.ok) CALL(&sc, f->gates_forward(v->be, &s, Z2, cpp, WP, NULL, C2, H2));
          const double tl = tol_of(r, v, s.dtype, s.dtype);
          void *outs[3][2] = {{Z, Z2}, {C, C2}, {H, H2}};
          const double *refs[3] = {ra, rc, rh};
          const char *names[3] = {"activations", "c", "h"};
          const size_t counts[3] = {nz, ns, ns};
          for (int o = 0; o < 3 && sc.ok; o++) {
            float *got = o ? get_cells(&sc, s.dtype, outs[o][0], &s)
                           : get_gates(&sc, s.dtype, outs[o][0], &s);
            float *un = !got ? NULL
                        : o  ? get_cells(&sc, s.dtype, outs[o][1], &s)
                             : get_gates(&sc, s.dtype, outs[o][1], &s);
            if (!got || !un) {
              free(got), free(un);
              break;
            }
            snprintf(what, sizeof what, "%s: %s", label, names[o]);
            compare(v, what, got, refs[o], counts[o], tl);
            /* the unfused path rounds z + bias to the storage type once more */
            double *und = to_double(un, counts[o]);
            snprintf(what, sizeof what, "%s: %s vs the unfused slots", label, names[o]);
            compare(v, what, got, und, counts[o], 2 * tl);
            free(got), free(un), free(und);
          }
          scope_end(&sc);
        }
        free(z), free(cp), free(bias), free(zb), free(wp), free(zs), free(cps);
        free(ra), free(rc), free(rh);
      }
}

/* gates_backward with dbias (onto a nonzero db0: it accumulates): dz and
 * dc_prev as without it, dbias against db0 + the double sum of the dz it
 * stored (downloaded), and against conv_backward_filter's bias gradient of
 * those same dz on the same backend (the unfused slot). */
static void run_gates_backward_bias(const row *r) {
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++)
      for (int with_cp = 0; with_cp < 2; with_cp++) {
        if (!(r->dtypes & (1u << t))) continue;
        cl_gates_shape s;
        if (!gates_case(r, i, t, &s)) continue;
        const size_t ns = (size_t)s.N * s.hidden * s.P, nz = 4 * ns, es = cl_dtype_size(s.dtype);
        const size_t nb = 4 * (size_t)s.hidden, nw = ref_peep_numel(&s);
        float *act = xmalloc(nz * 4);
        for (size_t e = 0; e < ns; e++)
          for (int q = 0; q < 4; q++)
            act[ref_gate_at(&s, e, q)] = q < 3 ? urand(0.01f, 0.99f) : urand(-0.99f, 0.99f);
        float *c = rand_floats(ns, -2, 2), *cp = rand_floats(ns, -2, 2);
        float *dh = rand_floats(ns, -1, 1), *dc = rand_floats(ns, -1, 1);
        float *db0 = rand_floats(nb, -1, 1);
        float *wp = nw ? rand_floats(nw, -1, 1) : NULL;
        void *as = to_storage(s.dtype, act, nz), *cs = to_storage(s.dtype, c, ns);
        void *cps = to_storage(s.dtype, cp, ns);
        double *rdz = xmalloc(nz * 8), *rdc = xmalloc(ns * 8), *rdb = xmalloc(nb * 8);
        ref_gates_backward(&s, act, c, with_cp ? cp : NULL, wp, dh, dc, rdz, rdc);
        cl_conv_shape fs = bias_conv_shape(&s);
        char label[120], what[200];
        snprintf(label, sizeof label, "%s N%d hidden%d P%d c_prev%s peep%d dbias%s",
                 dtype_str(s.dtype), s.N, s.hidden, s.P, with_cp ? "" : "=NULL", (int)s.peep,
                 layout_tag());
        for (int vi = 0; vi < n_vs; vi++) {
          variant *v = &vs[vi];
          const struct cl_backend_i *f = v->be->iface;
          scope sc = scope_of(v);
          size_t wsb = 0;
          CALL(&sc, cl_backend_conv_workspace_any(v->be, &fs, &wsb));
          void *A = dev_gates(&sc, as, &s, es), *C = dev_cells(&sc, cs, &s, es);
          void *CP = dev_cells(&sc, cps, &s, es), *X = dev_alloc(&sc, ns * es);
          float *DH = dev_cells(&sc, dh, &s, 4), *DC = dev_cells(&sc, dc, &s, 4);
          float *DB = dev_of(&sc, db0, nb * 4), *DBU = dev_of(&sc, db0, nb * 4);
          float *DW = dev_alloc(&sc, nb * 4);
          void *WS = wsb ? dev_alloc(&sc, wsb) : NULL;
          float *WP = nw ? dev_of(&sc, wp, nw * 4) : NULL;
          if (sc.ok) CALL(&sc, f->memset0(v->be, X, ns * es));
          if (sc.ok)
            CALL(&sc, f->gates_backward(v->be, &s, A, C, with_cp ? CP : NULL, WP, DH, DC, DB));
          if (sc.ok) CALL(&sc, f->conv_backward_filter(v->be, &fs, A, X, DW, DBU, WS));
          float *got = sc.ok ? get_gates(&sc, s.dtype, A, &s) : NULL;
          snprintf(what, sizeof what, "%s: d pre-activations (stored)", label);
          if (got) compare(v, what, got, rdz, nz, tol_of(r, v, s.dtype, s.dtype));
          float *gdc = got ? get_cells(&sc, CL_F32, DC, &s) : NULL;
          snprintf(what, sizeof what, "%s: dc_prev (float32)", label);
          if (gdc) compare(v, what, gdc, rdc, ns, tol_of(r, v, s.dtype, CL_F32));
          float *gdb = gdc ? dev_get(&sc, CL_F32, DB, nb) : NULL;
          float *gdu = gdb ? dev_get(&sc, CL_F32, DBU, nb) : NULL;
          if (gdu) {
            for (size_t k = 0; k < nb; k++) rdb[k] = db0[k];
            for (size_t e = 0; e < ns; e++) /* the sums of what it stored */
              for (int q = 0; q < 4; q++)
                rdb[(size_t)q * s.hidden + e / s.P % s.hidden] += got[ref_gate_at(&s, e, q)];
            snprintf(what, sizeof what, "%s: dbias (+= db0) vs the sums of its dz", label);
            compare(v, what, gdb, rdb, nb, r->tol.f32);
            double *und = to_double(gdu, nb);
            snprintf(what, sizeof what, "%s: dbias vs the unfused conv_backward_filter", label);
            compare(v, what, gdb, und, nb, r->tol.f32);
            free(und);
          }
          free(got), free(gdc), free(gdb), free(gdu);
          scope_end(&sc);
        }
        free(act), free(c), free(cp), free(dh), free(dc), free(db0), free(wp), free(as), free(cs);
        free(cps), free(rdz), free(rdc), free(rdb);
      }
}

static void run_gates_errors(const row *r) {
  (void)r;
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_gates_shape bad = {1, 1, 1, BAD_DTYPE, CL_PEEP_NONE, CL_NCHW};
    scope sc = scope_of(v);
    void *Z = dev_alloc(&sc, 64), *C = dev_alloc(&sc, 64), *H = dev_alloc(&sc, 64);
    if (sc.ok) {
      cl_status s1 = v->be->iface->gates_forward(v->be, &bad, Z, NULL, NULL, NULL, C, H);
      cl_status s2 = v->be->iface->gates_backward(v->be, &bad, Z, C, NULL, NULL, H, C, NULL);
      bad.peep = CL_PEEP_CHANNEL;
      cl_status s3 = v->be->iface->peephole_filter(v->be, &bad, Z, C, NULL, H);
      expect(v, s1 == CL_E_UNSUPPORTED && s2 == CL_E_UNSUPPORTED && s3 == CL_E_UNSUPPORTED,
             "unknown dtype: forward %s, backward %s, peephole_filter %s (%s)", status_str(s1),
             status_str(s2), status_str(s3), v->be->err);
      /* the filter of a shape without peepholes has nothing to compute */
      cl_gates_shape none = {1, 1, 1, CL_F32, CL_PEEP_NONE, CL_NCHW};
      cl_status s4 = v->be->iface->peephole_filter(v->be, &none, Z, C, NULL, H);
      expect(v, s4 == CL_E_INVALID, "peephole_filter without peepholes: %s (%s)",
             status_str(s4), v->be->err);
      /* a cell with peepholes and no weights is refused, not run without */
      cl_gates_shape peep = {1, 1, 1, CL_F32, CL_PEEP_CHANNEL, CL_NCHW};
      cl_status s5 = v->be->iface->gates_forward(v->be, &peep, Z, NULL, NULL, NULL, C, H);
      cl_status s6 = v->be->iface->gates_backward(v->be, &peep, Z, C, NULL, NULL, H, C, NULL);
      expect(v, s5 == CL_E_INVALID && s6 == CL_E_INVALID,
             "peepholes without weights: forward %s, backward %s (%s)", status_str(s5),
             status_str(s6), v->be->err);
    }
    scope_end(&sc);
  }
}

/* ---- loss and optimizers ------------------------------------------------------------ */

/* MSE's refusals, f NULL (MSE) and unweighted MSE by kind alike. */
static void run_mse_errors(const row *r) {
  (void)r;
  const cl_loss_fn mse = {CL_LOSS_MSE, 1, 1, 0};
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    scope sc = scope_of(v);
    float *P = dev_alloc(&sc, 64), *Y = dev_alloc(&sc, 64);
    double loss = -1.0;
    if (sc.ok) {
      const struct cl_backend_i *f = v->be->iface;
      cl_status s1 = f->loss(v->be, NULL, P, Y, NULL, 4, BAD_DTYPE, 1.0f, NULL, &loss);
      cl_status s2 = f->loss(v->be, NULL, P, Y, NULL, 0, CL_F32, 1.0f, NULL, &loss);
      cl_status s3 = f->loss(v->be, &mse, P, Y, NULL, 4, BAD_DTYPE, 1.0f, NULL, &loss);
      cl_status s4 = f->loss(v->be, &mse, P, Y, NULL, 0, CL_F32, 1.0f, NULL, &loss);
      expect(v, s1 == CL_E_UNSUPPORTED && s2 == CL_E_INVALID && s3 == s1 && s4 == s2,
             "unknown dtype: %s / %s; n = 0: %s / %s (%s)", status_str(s1), status_str(s3),
             status_str(s2), status_str(s4), v->be->err);
    }
    scope_end(&sc);
  }
}

/* The loss slot (MSE, MAE, Huber, BCE with logits), on every dtype of the
 * prediction, with the gradient in its own buffer, over
 * the target (as backward.c asks) or not at all. */
typedef struct loss_case {
  cl_loss_fn f;
  size_t n;
  float scale;
  int grad; /* 0: none; 1: its own buffer; 2: overwrites the target */
} loss_case;

static const char *loss_str(const cl_loss_fn *f) {
  return f->kind == CL_LOSS_MSE   ? "mse"
         : f->kind == CL_LOSS_MAE ? "mae"
         : f->kind == CL_LOSS_HUBER ? "huber"
                                    : "bce_logits";
}

/* Random inputs of a loss case: logits in (-6, 6) and BCE targets mostly
 * 0 or 1 with a few soft labels; others in (-2, 2). */
static void loss_inputs(const cl_loss_fn *f, size_t n, float **p, float **y) {
  const int bce = f->kind == CL_LOSS_BCE_LOGITS;
  *p = rand_floats(n, bce ? -6 : -2, bce ? 6 : 2);
  *y = rand_floats(n, -2, 2);
  if (bce)
    for (size_t k = 0; k < n; k++)
      (*y)[k] = k % 7 == 3 ? 0.25f + (*y)[k] / 8 : (float)((*y)[k] > 0.8f);
}

static void run_loss(const row *r) {
  const loss_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++) {
      if (!(r->dtypes & (1u << t))) continue;
      const loss_case *c = &cases[i];
      const size_t n = c->n, es = cl_dtype_size((cl_dtype)t);
      if (too_big((double)n * 20)) continue;
      float *p, *y;
      loss_inputs(&c->f, n, &p, &y);
      void *ps = to_storage((cl_dtype)t, p, n);
      double *rg = xmalloc(n * 8);
      const double rloss = ref_loss(&c->f, p, y, n, c->scale, rg);
      char label[160], what[240];
      snprintf(label, sizeof label, "%s delta=%g pos_weight=%g %s n=%zu scale=%g grad=%s",
               loss_str(&c->f), c->f.delta, c->f.pos_weight, dtype_str((cl_dtype)t), n,
               (double)c->scale, c->grad == 0 ? "none" : c->grad == 1 ? "own" : "in target");
      for (int vi = 0; vi < n_vs; vi++) {
        variant *v = &vs[vi];
        scope sc = scope_of(v);
        void *P = dev_of(&sc, ps, n * es);
        float *Y = dev_of(&sc, y, n * 4), *G = dev_alloc(&sc, n * 4);
        float *g = c->grad == 0 ? NULL : c->grad == 1 ? G : Y;
        double loss = -1.0;
        if (sc.ok)
          CALL(&sc, v->be->iface->loss(v->be, &c->f, P, Y, NULL, n, (cl_dtype)t, c->scale, g, &loss));
        if (!sc.ok) goto next;
        const double lr = fabs(loss - rloss) / rloss;
        expect(v, lr <= r->tol.scalar, "%-60s loss %.17g, want %.17g (rel %.1e, tol %.0e)", label,
               loss, rloss, lr, r->tol.scalar);
        if (g) {
          float *got = dev_get(&sc, CL_F32, g, n);
          snprintf(what, sizeof what, "%s: gradient (float32)", label);
          if (got) compare(v, what, got, rg, n, r->tol.f32);
          free(got);
        }
      next:
        scope_end(&sc);
      }
      free(p), free(y), free(ps), free(rg);
    }
}

/* The loss slot with a per-element weight (MSE too): in [0, 2] with every
 * fifth zero, against ref_loss_w; then a weight of ones, which must give
 * the unweighted call's loss and gradient bit for bit (for MSE: the plain
 * step's kernel's). */
static void run_weighted_loss(const row *r) {
  const loss_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++) {
      if (!(r->dtypes & (1u << t))) continue;
      const loss_case *c = &cases[i];
      const size_t n = c->n, es = cl_dtype_size((cl_dtype)t);
      if (too_big((double)n * 28)) continue;
      float *p, *y, *w = rand_floats(n, 0, 2), *ones = xmalloc(n * 4);
      loss_inputs(&c->f, n, &p, &y);
      for (size_t k = 0; k < n; k++) {
        if (k % 5 == 2) w[k] = 0.0f;
        ones[k] = 1.0f;
      }
      void *ps = to_storage((cl_dtype)t, p, n);
      double *rg = xmalloc(n * 8);
      const double rloss = ref_loss_w(&c->f, p, y, w, n, c->scale, rg);
      char label[160], what[240];
      snprintf(label, sizeof label, "weighted %s delta=%g pos_weight=%g %s n=%zu scale=%g",
               loss_str(&c->f), c->f.delta, c->f.pos_weight, dtype_str((cl_dtype)t), n,
               (double)c->scale);
      for (int vi = 0; vi < n_vs; vi++) {
        variant *v = &vs[vi];
        scope sc = scope_of(v);
        const struct cl_backend_i *f = v->be->iface;
        void *P = dev_of(&sc, ps, n * es);
        float *Y = dev_of(&sc, y, n * 4), *Wt = dev_of(&sc, w, n * 4);
        float *O = dev_of(&sc, ones, n * 4);
        float *G = dev_alloc(&sc, n * 4), *G1 = dev_alloc(&sc, n * 4), *G0 = dev_alloc(&sc, n * 4);
        double loss = -1.0, l1 = -1.0, l0 = -2.0;
        const cl_dtype dt = (cl_dtype)t;
        if (sc.ok) CALL(&sc, f->loss(v->be, &c->f, P, Y, Wt, n, dt, c->scale, G, &loss));
        if (sc.ok) CALL(&sc, f->loss(v->be, &c->f, P, Y, O, n, dt, c->scale, G1, &l1));
        if (sc.ok) CALL(&sc, v->be->iface->loss(v->be, &c->f, P, Y, NULL, n, dt, c->scale, G0, &l0));
        if (!sc.ok) goto next;
        const double lr = fabs(loss - rloss) / rloss;
        expect(v, lr <= r->tol.scalar, "%-60s loss %.17g, want %.17g (rel %.1e, tol %.0e)", label,
               loss, rloss, lr, r->tol.scalar);
        float *got = dev_get(&sc, CL_F32, G, n), *g1 = dev_get(&sc, CL_F32, G1, n),
              *g0 = dev_get(&sc, CL_F32, G0, n);
        snprintf(what, sizeof what, "%s: gradient (float32)", label);
        if (got) compare(v, what, got, rg, n, r->tol.f32);
        /* the CPU adds its threads' partial sums in OpenMP's order, which
         * varies from call to call above its parallel threshold (32768,
         * also for the unweighted slots): there the loss to 1e-15 */
        const int same_loss = n <= 32768 ? l1 == l0 : fabs(l1 - l0) <= 1e-15 * fabs(l0);
        if (g1 && g0)
          expect(v, same_loss && memcmp(g1, g0, n * 4) == 0,
                 "%-60s weight of ones: loss %.17g vs unweighted %.17g, gradient %s", label, l1,
                 l0, memcmp(g1, g0, n * 4) == 0 ? "the same bits" : "DIFFERS");
        free(got), free(g1), free(g0);
      next:
        scope_end(&sc);
      }
      free(p), free(y), free(w), free(ones), free(ps), free(rg);
    }
}

static void run_loss_errors(const row *r) {
  (void)r;
  const cl_loss_fn mse = {CL_LOSS_MSE, 1, 1, 0}, mae = {CL_LOSS_MAE, 1, 1, 0};
  const cl_loss_fn unknown = {CL_N_LOSSES, 1, 1, 0};
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    scope sc = scope_of(v);
    float *P = dev_alloc(&sc, 64), *Y = dev_alloc(&sc, 64);
    double loss = -1.0;
    if (sc.ok) {
      const struct cl_backend_i *f = v->be->iface;
      cl_status s1 = f->loss(v->be, &mae, P, Y, NULL, 4, BAD_DTYPE, 1.0f, NULL, &loss);
      cl_status s2 = f->loss(v->be, &mae, P, Y, NULL, 0, CL_F32, 1.0f, NULL, &loss);
      cl_status s3 = f->loss(v->be, &mse, Y, Y, Y, 0, CL_F32, 1.0f, NULL, &loss);
      cl_status s4 = f->loss(v->be, &unknown, P, Y, NULL, 4, CL_F32, 1.0f, NULL, &loss);
      expect(v, s1 == CL_E_UNSUPPORTED && s2 == CL_E_INVALID && s3 == CL_E_INVALID &&
                    s4 == CL_E_INVALID,
             "unknown dtype: %s; n = 0: %s; weighted MSE, n = 0: %s; unknown kind: %s",
             status_str(s1), status_str(s2), status_str(s3), status_str(s4));
    }
    scope_end(&sc);
  }
}

/* sum_squares (gradient clipping's squared norm): the sum in double, also
 * of squares beyond float's range, and inf / NaN when an element is. */
typedef struct sumsq_case {
  size_t n;
  long bad;     /* -1: none; else the index that gets `poison` */
  float poison; /* inf, NaN, or a finite value whose square overflows float */
} sumsq_case;

static void run_sum_squares(const row *r) {
  const sumsq_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const sumsq_case *c = &cases[i];
    float *g = rand_floats(c->n + 1, -1, 1);
    if (c->bad >= 0) g[c->bad] = c->poison;
    const double ref = ref_sum_squares(g, c->n);
    char label[160];
    snprintf(label, sizeof label, "n=%zu poison[%ld]=%g", c->n, c->bad, (double)c->poison);
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      scope sc = scope_of(v);
      float *G = c->n ? dev_of(&sc, g, c->n * 4) : NULL;
      double sum = -1.0;
      if (sc.ok) CALL(&sc, v->be->iface->sum_squares(v->be, G, c->n, &sum));
      if (sc.ok) {
        const int ok = isfinite(ref) ? fabs(sum - ref) <= r->tol.scalar * ref
                                     : isnan(ref) ? isnan(sum) : sum == ref;
        expect(v, ok, "%s: %.17g, want %.17g (tol %.0e)", label, sum, ref, r->tol.scalar);
      }
      scope_end(&sc);
    }
    free(g);
  }
}

/* grad_add (optional; a step split by batch sums its threads' gradients):
 * dst += src, one float32 addition per element, below and past the CPU's
 * parallel threshold and at lengths that are no multiple of a vector. */
static void run_grad_add(const row *r) {
  const size_t *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const size_t n = cases[i];
    float *d = rand_floats(n + 1, -1, 1), *s = rand_floats(n + 1, -1e3, 1e3);
    float *want = xmalloc((n + 1) * sizeof *want), *got = xmalloc((n + 1) * sizeof *got);
    for (size_t k = 0; k < n; k++) want[k] = d[k] + s[k];
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      if (!v->be->iface->grad_add) {
        expect(v, 1, "grad_add absent: no step split by batch");
        continue;
      }
      scope sc = scope_of(v);
      float *D = n ? dev_of(&sc, d, n * 4) : NULL, *S = n ? dev_of(&sc, s, n * 4) : NULL;
      if (sc.ok) CALL(&sc, v->be->iface->grad_add(v->be, D, S, n));
      if (sc.ok && n) CALL(&sc, v->be->iface->download(v->be, got, D, n * 4));
      if (sc.ok)
        expect(v, n == 0 || memcmp(got, want, n * 4) == 0, "n=%zu: not the float32 sums", n);
      scope_end(&sc);
    }
    free(d), free(s), free(want), free(got);
  }
}

/* mask_mul (dropout): one mask over reps blocks; in place (the gradient of
 * a layer's input), into another buffer (a masked copy) or accumulated (the
 * gradient of h_{t-1} onto what is there). n not a multiple of a CPU chunk
 * (2048) nor of a vector; a block over several chunks; reps past the CPU's
 * parallel threshold; a CUDA grid of many blocks. Per-gate masks (groups
 * 4): spread into 4 masked copies per image, and gather 4 gradients back
 * into one, accumulated or not, with an image row over several chunks. */
typedef struct mask_case {
  size_t n, reps;
  int in_place, accumulate;
  size_t row;
  int groups, gather;
} mask_case;

static void run_mask_mul(const row *r) {
  const mask_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++)
    for (int t = CL_F32; t <= CL_BF16; t++) {
      if (!(r->dtypes & (1u << t))) continue;
      const mask_case *c = &cases[i];
      const cl_dtype dt = (cl_dtype)t;
      const int G = c->groups > 1 ? c->groups : 1;
      cl_mask_shape ms = {c->n, c->row, c->reps, G, c->gather, dt, c->accumulate};
      /* elements of in and of out: the spread side holds G of each */
      const size_t nin = c->n * c->reps * (c->gather ? G : 1);
      const size_t nout = c->n * c->reps * (c->gather ? 1 : G), nm = c->n * G;
      const size_t es = cl_dtype_size(dt);
      float *x = rand_floats(nin, -3, 3), *y0 = rand_floats(nout, -3, 3);
      float *mask = xmalloc(sizeof(float) * (nm ? nm : 1));
      for (size_t k = 0; k < nm; k++) mask[k] = uniform01(NULL) < 0.3 ? 0.0f : 1.0f / 0.7f;
      void *xs = to_storage(dt, x, nin), *ys = to_storage(dt, y0, nout);
      double *ref = xmalloc(sizeof(double) * (nout ? nout : 1));
      ref_mask_mul(&ms, x, mask, c->accumulate ? y0 : NULL, ref);
      char label[200];
      snprintf(label, sizeof label, "%s n=%zu reps=%zu groups=%d row=%zu%s%s%s", dtype_str(dt),
               c->n, c->reps, G, c->row, G > 1 ? (c->gather ? " gather" : " spread") : "",
               c->in_place ? " in place" : "", c->accumulate ? " accumulate" : "");
      for (int vi = 0; vi < n_vs; vi++) {
        variant *v = &vs[vi];
        scope sc = scope_of(v);
        void *X = nin ? dev_of(&sc, xs, nin * es) : NULL;
        void *Y = c->in_place ? X : nout ? dev_of(&sc, ys, nout * es) : NULL;
        float *M = nm ? dev_of(&sc, mask, nm * sizeof(float)) : NULL;
        if (sc.ok) CALL(&sc, v->be->iface->mask_mul(v->be, &ms, X, M, Y));
        float *got = sc.ok && nout ? dev_get(&sc, dt, Y, nout) : NULL;
        if (got) compare(v, label, got, ref, nout, tol_of(r, v, dt, dt));
        else if (sc.ok) expect(v, 1, "%s: nothing to do", label);
        free(got);
        scope_end(&sc);
      }
      free(x), free(y0), free(mask), free(xs), free(ys), free(ref);
    }
}

/* mask_draw (dropout): against splitmix64 written out here as its author
 * publishes it (a state stepped by the golden gamma, each output the
 * finaliser of the state), itself checked first against the published
 * outputs for the seed 1234567; element e of a stream is output e + 1 of
 * the generator seeded with the key, the finaliser of (the call's seed xor
 * the finaliser of (2 layer + kind + 1) gammas); the slot reads the seed
 * from device memory. Offsets into a stream (a micro-batch's rows), a
 * rate's threshold at both ends, every element written (the buffer starts
 * at 7), past the CPU's parallel threshold and a CUDA grid. */
typedef struct draw_case {
  uint64_t seed;
  int layer, kind;
  uint64_t first, n;
  double p;
} draw_case;

static uint64_t sm64_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* splitmix64's finaliser (sm64_next's output of a state already stepped) */
static uint64_t sm64_fin(uint64_t z) {
  uint64_t s = z - 0x9e3779b97f4a7c15ull;
  return sm64_next(&s);
}

static void run_mask_draw(const row *r) {
  uint64_t st = 1234567;
  const uint64_t published[3] = {6457827717110365317ull, 3203168211198807973ull,
                                 9817491932198370423ull};
  int same = 1;
  for (int k = 0; k < 3; k++) same &= sm64_next(&st) == published[k];
  for (int vi = 0; vi < n_vs; vi++)
    expect(&vs[vi], same, "the reference splitmix64 gives the published outputs of seed 1234567");
  const draw_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const draw_case *c = &cases[i];
    const uint64_t cut = (uint64_t)ceil(c->p * 4294967296.0);
    const float keep = (float)(1.0 / (1.0 - c->p));
    double *ref = xmalloc(sizeof(double) * (c->n ? c->n : 1));
    float *seven = xmalloc(sizeof(float) * (c->n ? c->n : 1));
    const uint64_t key =
        sm64_fin(c->seed ^ sm64_fin((uint64_t)(2 * c->layer + c->kind + 1) * 0x9e3779b97f4a7c15ull));
    uint64_t state = key;
    for (uint64_t e = 0; e < c->first; e++) sm64_next(&state);
    size_t kept = 0;
    for (uint64_t e = 0; e < c->n; e++) {
      ref[e] = (sm64_next(&state) >> 32) >= cut ? keep : 0.0f;
      kept += ref[e] != 0, seven[e] = 7.0f;
    }
    char label[160];
    snprintf(label, sizeof label, "seed %llx layer %d kind %d first %llu n %llu p %g (%zu kept)",
             (unsigned long long)c->seed, c->layer, c->kind, (unsigned long long)c->first,
             (unsigned long long)c->n, c->p, kept);
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      scope sc = scope_of(v);
      float *M = dev_of(&sc, seven, (c->n ? c->n : 1) * sizeof(float));
      const uint64_t *S = dev_of(&sc, &c->seed, sizeof c->seed);
      cl_mask_draw d = {S, c->layer, c->kind, c->first, c->n, cut, keep, 0};
      if (sc.ok) CALL(&sc, v->be->iface->mask_draw(v->be, &d, M));
      float *got = sc.ok && c->n ? dev_get(&sc, CL_F32, M, c->n) : NULL;
      if (got) compare(v, label, got, ref, c->n, tol_of(r, v, CL_F32, CL_F32));
      else if (sc.ok) expect(v, 1, "%s: nothing to do", label);
      free(got);
      scope_end(&sc);
    }
    free(ref), free(seven);
  }
}

typedef struct unscale_case {
  size_t n;
  float inv_scale;
  long bad;     /* -1: none; else the index that gets `poison` */
  float poison; /* inf, NaN, or a finite value that overflows once scaled */
} unscale_case;

static void run_grad_unscale(const row *r) {
  const unscale_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const unscale_case *c = &cases[i];
    float *g = rand_floats(c->n + 1, -1000, 1000);
    if (c->bad >= 0) g[c->bad] = c->poison;
    double *ref = xmalloc((c->n + 1) * 8);
    const int rbad = ref_grad_unscale(g, c->n, c->inv_scale, ref);
    if (c->bad >= 0) ref[c->bad] = 0.0; /* inf or NaN there: the flag says it */
    char label[160];
    snprintf(label, sizeof label, "n=%zu inv_scale=%g poison[%ld]=%g", c->n, (double)c->inv_scale,
             c->bad, (double)c->poison);
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      scope sc = scope_of(v);
      float *G = c->n ? dev_of(&sc, g, c->n * 4) : NULL;
      int found = -1;
      if (sc.ok) CALL(&sc, v->be->iface->grad_unscale(v->be, G, c->n, c->inv_scale, &found));
      if (sc.ok) expect(v, found == rbad, "%s: found_nonfinite %d, want %d", label, found, rbad);
      float *got = sc.ok && c->n ? dev_get(&sc, CL_F32, G, c->n) : NULL;
      if (got) {
        if (c->bad >= 0) got[c->bad] = 0.0f;
        size_t diff = 0;
        for (size_t k = 0; k < c->n; k++) diff += (double)got[k] != ref[k];
        expect(v, diff == 0, "%s: every value g * inv_scale in float (%zu differ)", label, diff);
      }
      free(got);
      scope_end(&sc);
    }
    free(g), free(ref);
  }
}

typedef struct optim_case {
  size_t n;
  float lr, momentum, weight_decay; /* momentum: sgd only */
  int steps;
  int decoupled, amsgrad; /* adam only: AdamW; max_exp_avg_sq */
} optim_case;

/* New gradients at every step, one of them 0 after a nonzero one at step 2. */
static float **optim_grads(size_t n, int steps) {
  float **g = xmalloc(sizeof(float *) * steps);
  for (int k = 0; k < steps; k++) {
    g[k] = rand_floats(n, -1, 1);
    if (k == 1) g[k][0] = 0.0f;
  }
  return g;
}

static void free_grads(float **g, int steps) {
  for (int k = 0; k < steps; k++) free(g[k]);
  free(g);
}

static void run_adam(const row *r) {
  const optim_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const optim_case *c = &cases[i];
    const size_t n = c->n;
    if (too_big((double)n * c->steps * 20)) continue;
    float *p = rand_floats(n, -1, 1), **g = optim_grads(n, c->steps);
    double *rp = to_double(p, n), *rm = calloc(n, 8), *rv = calloc(n, 8), *rx = calloc(n, 8);
    cl_adam_hp hp = {c->lr, 0.9f, 0.999f, 1e-8f, c->weight_decay, 0, c->decoupled, c->amsgrad};
    for (int k = 1; k <= c->steps; k++) {
      hp.step = k;
      ref_adam_step(rp, g[k - 1], rm, rv, rx, n, &hp);
    }
    char label[160], what[240];
    snprintf(label, sizeof label, "%s%s n=%zu lr=%g weight_decay=%g, %d steps",
             c->decoupled ? "adamw" : "adam", c->amsgrad ? " amsgrad" : "", n, (double)c->lr,
             (double)c->weight_decay, c->steps);
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      cl_backend *be = v->be;
      scope sc = scope_of(v);
      float *P = dev_of(&sc, p, n * 4), *G = dev_alloc(&sc, n * 4);
      float *M = dev_alloc(&sc, n * 4), *V = dev_alloc(&sc, n * 4);
      float *X = c->amsgrad ? dev_alloc(&sc, n * 4) : NULL;
      if (sc.ok) CALL(&sc, be->iface->memset0(be, M, n * 4));
      if (sc.ok) CALL(&sc, be->iface->memset0(be, V, n * 4));
      if (sc.ok && X) CALL(&sc, be->iface->memset0(be, X, n * 4));
      for (int k = 1; k <= c->steps && sc.ok; k++) {
        dev_put(&sc, G, g[k - 1], n * 4);
        hp.step = k;
        if (sc.ok) CALL(&sc, be->iface->adam_update(be, P, G, M, V, X, n, &hp));
      }
      const float *outs[4] = {P, M, V, X};
      const double *refs[4] = {rp, rm, rv, rx};
      static const char *names[4] = {"parameters", "first moment", "second moment",
                                     "max_exp_avg_sq"};
      for (int o = 0; o < (X ? 4 : 3) && sc.ok; o++) {
        float *got = dev_get(&sc, CL_F32, outs[o], n);
        snprintf(what, sizeof what, "%s: %s", label, names[o]);
        if (got) compare(v, what, got, refs[o], n, r->tol.f32);
        free(got);
      }
      hp.step = 0;
      if (sc.ok)
        expect(v, be->iface->adam_update(be, P, G, M, V, X, n, &hp) == CL_E_INVALID,
               "%s: step 0 is refused", label);
      hp.step = 1;
      if (sc.ok && c->amsgrad)
        expect(v, be->iface->adam_update(be, P, G, M, V, NULL, n, &hp) == CL_E_INVALID,
               "%s: amsgrad without max_exp_avg_sq is refused", label);
      scope_end(&sc);
    }
    free(p), free(rp), free(rm), free(rv), free(rx);
    free_grads(g, c->steps);
  }
}

static void run_sgd(const row *r) {
  const optim_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const optim_case *c = &cases[i];
    const size_t n = c->n;
    if (too_big((double)n * c->steps * 20)) continue;
    /* garbage in the momentum buffer: the first step must not read it */
    float *p = rand_floats(n, -1, 1), *buf = rand_floats(n, -100, 100);
    float **g = optim_grads(n, c->steps);
    double *rp = to_double(p, n), *rb = to_double(buf, n);
    cl_sgd_hp hp = {c->lr, c->momentum, c->weight_decay, 0};
    for (int k = 1; k <= c->steps; k++) {
      hp.first = k == 1;
      ref_sgd_step(rp, g[k - 1], rb, n, &hp);
    }
    char label[120], what[200];
    snprintf(label, sizeof label, "n=%zu lr=%g momentum=%g weight_decay=%g, %d steps", n,
             (double)c->lr, (double)c->momentum, (double)c->weight_decay, c->steps);
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      cl_backend *be = v->be;
      scope sc = scope_of(v);
      float *P = dev_of(&sc, p, n * 4), *G = dev_alloc(&sc, n * 4), *B = dev_of(&sc, buf, n * 4);
      for (int k = 1; k <= c->steps && sc.ok; k++) {
        dev_put(&sc, G, g[k - 1], n * 4);
        hp.first = k == 1;
        if (sc.ok)
          CALL(&sc, be->iface->sgd_update(be, P, G, c->momentum != 0.0f ? B : NULL, n, &hp));
      }
      float *got = sc.ok ? dev_get(&sc, CL_F32, P, n) : NULL;
      snprintf(what, sizeof what, "%s: parameters", label);
      if (got) compare(v, what, got, rp, n, r->tol.f32);
      free(got);
      got = sc.ok && c->momentum != 0.0f ? dev_get(&sc, CL_F32, B, n) : NULL;
      snprintf(what, sizeof what, "%s: momentum buffer", label);
      if (got) compare(v, what, got, rb, n, r->tol.f32);
      free(got);
      scope_end(&sc);
    }
    free(p), free(buf), free(rp), free(rb);
    free_grads(g, c->steps);
  }
}

/* RMSprop: new gradients each step (optim_grads), the state from zeros as
 * torch starts it; every array it keeps against the double reference. */
typedef struct rms_case {
  size_t n;
  float lr, alpha, eps, weight_decay, momentum;
  int centered, steps;
} rms_case;

static void run_rmsprop(const row *r) {
  const rms_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const rms_case *c = &cases[i];
    const size_t n = c->n;
    if (too_big((double)n * c->steps * 20)) continue;
    float *p = rand_floats(n, -1, 1), **g = optim_grads(n, c->steps);
    double *rp = to_double(p, n), *rv = calloc(n, 8), *rb = calloc(n, 8), *ra = calloc(n, 8);
    const cl_rmsprop_hp hp = {c->lr, c->alpha, c->eps, c->weight_decay, c->momentum, c->centered};
    for (int k = 1; k <= c->steps; k++) ref_rmsprop_step(rp, g[k - 1], rv, rb, ra, n, &hp);
    char label[160], what[240];
    snprintf(label, sizeof label,
             "n=%zu lr=%g alpha=%g eps=%g wd=%g momentum=%g centered=%d, %d steps", n,
             (double)c->lr, (double)c->alpha, (double)c->eps, (double)c->weight_decay,
             (double)c->momentum, c->centered, c->steps);
    const int mom = c->momentum != 0.0f;
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      cl_backend *be = v->be;
      scope sc = scope_of(v);
      float *P = dev_of(&sc, p, n * 4), *G = dev_alloc(&sc, n * 4), *V = dev_alloc(&sc, n * 4);
      float *B = mom ? dev_alloc(&sc, n * 4) : NULL;
      float *A = c->centered ? dev_alloc(&sc, n * 4) : NULL;
      float *zero[3] = {V, B, A};
      for (int k = 0; k < 3; k++)
        if (sc.ok && zero[k]) CALL(&sc, be->iface->memset0(be, zero[k], n * 4));
      for (int k = 1; k <= c->steps && sc.ok; k++) {
        dev_put(&sc, G, g[k - 1], n * 4);
        if (sc.ok) CALL(&sc, be->iface->rmsprop_update(be, P, G, V, B, A, n, &hp));
      }
      const float *outs[4] = {P, V, B, A};
      const double *refs[4] = {rp, rv, rb, ra};
      static const char *names[4] = {"parameters", "square_avg", "momentum_buffer", "grad_avg"};
      for (int o = 0; o < 4 && sc.ok; o++) {
        if (!outs[o]) continue;
        float *got = dev_get(&sc, CL_F32, outs[o], n);
        snprintf(what, sizeof what, "%s: %s", label, names[o]);
        if (got) compare(v, what, got, refs[o], n, r->tol.f32);
        free(got);
      }
      if (sc.ok && (mom || c->centered))
        expect(v, be->iface->rmsprop_update(be, P, G, V, NULL, NULL, n, &hp) == CL_E_INVALID,
               "%s: the update without its momentum_buffer / grad_avg is refused", label);
      scope_end(&sc);
    }
    free(p), free(rp), free(rv), free(rb), free(ra);
    free_grads(g, c->steps);
  }
}

/* ---- the updates' guards ------------------------------------------------------------- */

/* One element's planted inputs (NaN, Inf or a huge finite value). */
typedef struct plant {
  size_t at;
  float p, g, m, v; /* m, v: adam's moments; m: sgd's buffer */
} plant;

/* A planted-fault case of adam_check / sgd_check over n random finite
 * elements. `want_*` is what the case is about, checked against the
 * reference first, so that a reference and a backend agreeing on a wrong
 * key fail too. want_part -1: no fault. */
typedef struct guard_case {
  const char *what;
  size_t n;
  float lr, wd, mom; /* mom: sgd's momentum */
  int first;         /* sgd: the buffer is not started (its contents ignored) */
  int no_state;      /* m, v / buf passed NULL: the state is about to be created */
  plant plants[2];
  int n_plants;
  int want_part, want_nan;
  size_t want_at;
  int decoupled, amsgrad; /* adam: AdamW; amsgrad with max_exp_avg_sq = v's values */
} guard_case;

static uint64_t guard_key(size_t at, int part, int is_nan) {
  return part < 0 ? CL_FAULT_NONE : (uint64_t)at * 8 + (uint64_t)part * 2 + (uint64_t)is_nan;
}

static void key_str(char *buf, size_t len, uint64_t k) {
  static const char *parts[] = {"gradient", "m", "v", "param"};
  if (k == CL_FAULT_NONE) snprintf(buf, len, "none");
  else
    snprintf(buf, len, "%llu (element %llu, %s%s)", (unsigned long long)k,
             (unsigned long long)(k / 8), parts[k / 2 % 4], k % 2 ? ", NaN" : "");
}

/* The inputs of a case: p, g, m in (-1, 1), v in [0, 1), then the plants. */
static void guard_inputs(const guard_case *c, float *h[4]) {
  for (int a = 0; a < 4; a++) {
    h[a] = rand_floats(c->n + 1, a == 3 ? 0 : -1, 1);
    for (int k = 0; k < c->n_plants; k++) {
      const plant *pl = &c->plants[k];
      h[a][pl->at] = a == 0 ? pl->p : a == 1 ? pl->g : a == 2 ? pl->m : pl->v;
    }
  }
}

/* The three guards' differences: which check, reference and update, and
 * the extra buffer (Adam's amsgrad max_exp_avg_sq starting as v's values;
 * RMSprop's centered grad_avg from zeros). For RMSprop mom is its momentum,
 * first says centered, m the momentum_buffer, v the square_avg. */
typedef enum { GUARD_ADAM, GUARD_SGD, GUARD_RMS } guard_opt;
typedef struct guard_hp {
  guard_opt opt;
  cl_adam_hp ah;
  cl_sgd_hp sh;
  cl_rmsprop_hp rh;
} guard_hp;

static guard_hp guard_hp_of(const row *r, const guard_case *c) {
  guard_hp g = {strcmp(r->slot, "adam_check") == 0  ? GUARD_ADAM
                : strcmp(r->slot, "sgd_check") == 0 ? GUARD_SGD
                                                    : GUARD_RMS,
                {c->lr, 0.9f, 0.999f, 1e-8f, c->wd, c->no_state ? 1 : 3, c->decoupled, c->amsgrad},
                {c->lr, c->mom, c->wd, c->first},
                {c->lr, 0.99f, 1e-8f, c->wd, c->mom, c->first}};
  return g;
}

static uint64_t guard_ref(const guard_hp *g, const guard_case *c, float *h[4]) {
  const float *hm = c->no_state ? NULL : h[2], *hv = c->no_state ? NULL : h[3];
  switch (g->opt) {
  case GUARD_ADAM: return ref_adam_fault(h[0], h[1], hm, hv, c->amsgrad ? hv : NULL, c->n, &g->ah);
  case GUARD_SGD: return ref_sgd_fault(h[0], h[1], hm, c->n, &g->sh);
  default: return ref_rmsprop_fault(h[0], h[1], hv, hm, NULL, c->n, &g->rh);
  }
}

static float *guard_extra(const guard_hp *g, scope *sc, const guard_case *c, float *h[4]) {
  const size_t bytes = c->n * 4;
  if (g->opt == GUARD_ADAM) return c->amsgrad && c->n ? dev_of(sc, h[3], bytes) : NULL;
  if (g->opt == GUARD_SGD || !c->first || !c->n) return NULL;
  float *a = dev_alloc(sc, bytes);
  if (sc->ok && a) CALL(sc, sc->v->be->iface->memset0(sc->v->be, a, bytes));
  return a;
}

static void guard_check(const guard_hp *g, scope *sc, const guard_case *c, float *d[4], float *x,
                        uint64_t *got) {
  cl_backend *be = sc->v->be;
  const float *M = c->no_state ? NULL : d[2], *V = c->no_state ? NULL : d[3];
  switch (g->opt) {
  case GUARD_ADAM:
    CALL(sc, be->iface->adam_check(be, d[0], d[1], M, V, c->no_state ? NULL : x, c->n, &g->ah,
                                   got));
    break;
  case GUARD_SGD: CALL(sc, be->iface->sgd_check(be, d[0], d[1], M, c->n, &g->sh, got)); break;
  default: CALL(sc, be->iface->rmsprop_check(be, d[0], d[1], V, M, x, c->n, &g->rh, got));
  }
}

/* After a pass: the update, then only finite numbers in what it writes. */
static void guard_update(const guard_hp *g, variant *v, scope *sc, const guard_case *c,
                         float *d[4], float *x, const char *label) {
  cl_backend *be = sc->v->be;
  const size_t n = c->n, bytes = n * 4;
  const int mom = g->opt != GUARD_SGD || c->mom != 0;
  if (c->no_state) { /* the state the core creates: zeros */
    CALL(sc, be->iface->memset0(be, d[2], bytes));
    CALL(sc, be->iface->memset0(be, d[3], bytes));
    if (x && g->opt == GUARD_ADAM) CALL(sc, be->iface->memset0(be, x, bytes));
  }
  if (sc->ok) switch (g->opt) {
    case GUARD_ADAM:
      CALL(sc, be->iface->adam_update(be, d[0], d[1], d[2], d[3], x, n, &g->ah));
      break;
    case GUARD_SGD:
      CALL(sc, be->iface->sgd_update(be, d[0], d[1], mom ? d[2] : NULL, n, &g->sh));
      break;
    default: CALL(sc, be->iface->rmsprop_update(be, d[0], d[1], d[3], d[2], x, n, &g->rh));
    }
  float *upd[3] = {d[0], mom ? d[2] : NULL, g->opt != GUARD_SGD ? d[3] : NULL};
  size_t bad = 0;
  for (int a = 0; a < 3 && sc->ok; a++) {
    float *back = upd[a] ? dev_get(sc, CL_F32, upd[a], n) : NULL;
    for (size_t k = 0; back && k < n; k++) bad += !isfinite(back[k]);
    free(back);
  }
  expect(v, sc->ok && bad == 0, "%s: then the update writes %zu non-finite values", label, bad);
}

/* adam_check, sgd_check, rmsprop_check over guard cases, on every backend:
 * the key equals the reference's (exact), the guard wrote nothing, and where
 * it found no fault the update then writes only finite numbers (so a pass of
 * the guard is worth something). */
static void run_guard(const row *r) {
  const guard_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const guard_case *c = &cases[i];
    const size_t n = c->n, bytes = n * 4;
    const guard_hp g = guard_hp_of(r, c);
    float *h[4];
    guard_inputs(c, h);
    const uint64_t ref = guard_ref(&g, c, h);
    const uint64_t want = guard_key(c->want_at, c->want_part, c->want_nan);
    char label[200], rs[80], gs[80];
    snprintf(label, sizeof label, "%s%s, n=%zu", g.opt == GUARD_RMS ? "rmsprop " : "", c->what, n);
    key_str(rs, sizeof rs, ref);
    if (ref != want) { /* the reference itself is wrong: every backend fails the case */
      key_str(gs, sizeof gs, want);
      printf("FAIL %s: the reference says %s, the case %s\n", label, rs, gs);
      ctest_checks++, ctest_failures++, row_checks++, row_failed++;
    }
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      scope sc = scope_of(v);
      float *d[4] = {NULL, NULL, NULL, NULL};
      for (int a = 0; a < 4 && n; a++) d[a] = dev_of(&sc, h[a], bytes);
      float *x = guard_extra(&g, &sc, c, h);
      uint64_t got = 0;
      if (sc.ok) guard_check(&g, &sc, c, d, x, &got);
      if (!sc.ok) {
        scope_end(&sc);
        continue;
      }
      key_str(gs, sizeof gs, got);
      expect(v, got == ref, "%s: key %s, reference %s", label, gs, rs);
      int same = 1;
      for (int a = 0; a < 4 && n && sc.ok; a++) {
        float *back = dev_get(&sc, CL_F32, d[a], n);
        same &= back && memcmp(back, h[a], bytes) == 0;
        free(back);
      }
      expect(v, sc.ok && same, "%s: the guard wrote nothing", label);
      if (ref == CL_FAULT_NONE && n && sc.ok) guard_update(&g, v, &sc, c, d, x, label);
      if (g.opt == GUARD_ADAM && i == 0 && sc.ok) {
        cl_adam_hp h0 = g.ah;
        h0.step = 0;
        const float *M = c->no_state ? NULL : d[2], *V = c->no_state ? NULL : d[3];
        expect(v,
               v->be->iface->adam_check(v->be, d[0], d[1], M, V, c->no_state ? NULL : x, n, &h0,
                                        &got) == CL_E_INVALID,
               "adam_check: step 0 is refused");
      }
      scope_end(&sc);
    }
    for (int a = 0; a < 4; a++) free(h[a]);
  }
}

/* ---- the backend's scratch and runtime memory --------------------------------------- */

/* ---- the sync-free step: loss_acc and update_step --------------------------------- */

/* update_step (cl_backend_update_step: the slot; the CPU's is cpu_step.c's host
 * composition) against that composition of the same backend's synchronising
 * slots: grad_unscale, sum_squares and the coefficient, the guard, the
 * decision, the update. On the CPU both are the same code (the default's
 * check); on CUDA the device's decisions against the host's, bit for bit:
 * parameters, gradients, moments and the step's results. */
typedef struct step_case {
  size_t n;
  int adam, unscale;
  float inv_scale;
  double max_norm;
  int check_loss;
  double loss;  /* vals->loss on entry */
  long bad;     /* -1: none; else the gradient index that gets `poison` */
  float poison;
  float lr;
} step_case;

static const step_case step_cases[] = {
    {1000, 1, 0, 1.0f, 0, 1, 0.5, -1, 0, 1e-3f},          /* plain Adam */
    {4097, 1, 1, 1.0f / 1024, 0, 0, 0.5, -1, 0, 1e-3f},   /* float16: unscaled, finite */
    {4097, 1, 1, 1.0f / 1024, 0.1, 0, 0.5, 17, INFINITY, 1e-3f}, /* overflow: skipped */
    {5000, 1, 0, 1.0f, 0.05, 1, 0.5, -1, 0, 1e-3f},       /* clipped */
    {5000, 1, 0, 1.0f, 1e9, 1, 0.5, -1, 0, 1e-3f},        /* measured, not clipped */
    {3000, 0, 0, 1.0f, 0.05, 1, 0.5, -1, 0, 0.1f},        /* SGD, clipped */
    {3000, 1, 0, 1.0f, 0.05, 1, NAN, -1, 0, 1e-3f},       /* the loss lost: nothing */
    {3000, 0, 0, 1.0f, 0, 1, 0.5, 2999, NAN, 0.1f},       /* a NaN gradient: refused */
    {3000, 1, 0, 1.0f, 0, 1, 0.5, -1, 0, 3e38f},          /* the update overflows: refused */
    {4097, 2, 1, 1.0f / 1024, 0.05, 1, 0.5, -1, 0, 1e-3f}, /* RMSprop, unscaled and clipped */
    {3000, 2, 0, 1.0f, 0, 1, 0.5, 5, NAN, 1e-3f},         /* RMSprop, a NaN gradient: refused */
};

typedef struct step_bufs {
  float *p, *g, *m, *v;
  cl_step_vals *vals;
} step_bufs;

static void step_put(scope *sc, step_bufs *b, const float *const h[4], size_t n, double loss) {
  float **d[4] = {&b->p, &b->g, &b->m, &b->v};
  for (int k = 0; k < 4; k++) *d[k] = dev_of(sc, h[k], n * 4);
  cl_step_vals z;
  memset(&z, 0, sizeof z);
  z.loss = loss;
  b->vals = dev_of(sc, &z, sizeof z);
}

/* The host's decisions, from the backend's synchronising slots. */
static void step_by_host(scope *sc, const step_case *c, const cl_update_args *u,
                         cl_step_vals *out) {
  const struct cl_backend_i *f = sc->v->be->iface;
  cl_backend *be = sc->v->be;
  int bad = 0, b2 = 0;
  memset(out, 0, sizeof *out);
  out->loss = c->loss;
  out->fault = CL_FAULT_NONE;
  if (c->unscale) CALL(sc, f->grad_unscale(be, u->g, c->n, c->inv_scale, &bad));
  out->found_inf = bad;
  const int lost = c->check_loss && !isfinite(c->loss);
  if (c->max_norm > 0 && !lost) {
    double sum = 0;
    CALL(sc, f->sum_squares(be, u->g, c->n, &sum));
    out->sumsq = sum;
    const double norm = sqrt(sum);
    const float coef = (float)(c->max_norm / (norm + 1e-6));
    if (isfinite(norm) && coef < 1.0f) CALL(sc, f->grad_unscale(be, u->g, c->n, coef, &b2));
  }
  uint64_t fault = CL_FAULT_NONE;
  if (!bad && !lost)
    CALL(sc, u->adam      ? f->adam_check(be, u->p, u->g, u->m, u->v, NULL, c->n, &u->ahp, &fault)
             : u->rmsprop ? f->rmsprop_check(be, u->p, u->g, u->v, u->m, NULL, c->n, &u->rhp,
                                             &fault)
                          : f->sgd_check(be, u->p, u->g, u->m, c->n, &u->shp, &fault));
  out->fault = fault;
  out->skipped = bad || lost || fault != CL_FAULT_NONE;
  if (!out->skipped)
    CALL(sc, u->adam      ? f->adam_update(be, u->p, u->g, u->m, u->v, NULL, c->n, &u->ahp)
             : u->rmsprop ? f->rmsprop_update(be, u->p, u->g, u->v, u->m, NULL, c->n, &u->rhp)
                          : f->sgd_update(be, u->p, u->g, u->m, c->n, &u->shp));
}

static cl_update_args step_args(const step_case *c, const step_bufs *b) {
  cl_update_args u;
  memset(&u, 0, sizeof u);
  u.p = b->p, u.g = b->g, u.m = b->m, u.v = b->v, u.n = c->n;
  u.adam = c->adam == 1, u.rmsprop = c->adam == 2; /* 0: SGD */
  cl_adam_hp ahp = {c->lr, 0.9f, 0.999f, 1e-8f, 0.01f, 3, 0, 0};
  cl_sgd_hp shp = {c->lr, 0.9f, 0.01f, 0};
  cl_rmsprop_hp rhp = {c->lr, 0.99f, 1e-8f, 0.01f, 0.9f, 0}; /* momentum_buffer in m */
  u.ahp = ahp, u.shp = shp, u.rhp = rhp;
  u.unscale = c->unscale, u.inv_scale = c->inv_scale, u.max_norm = c->max_norm;
  u.check_loss = c->check_loss;
  return u;
}

static int same_bits(scope *sc, const void *a, const void *b, size_t n) {
  void *x = xmalloc(n), *y = xmalloc(n);
  int same = CALL(sc, sc->v->be->iface->download(sc->v->be, x, a, n)) &&
             CALL(sc, sc->v->be->iface->download(sc->v->be, y, b, n)) && memcmp(x, y, n) == 0;
  free(x);
  free(y);
  return same;
}

static void run_update_step(const row *r) {
  (void)r;
  for (int i = 0; i < COUNT(step_cases); i++) {
    const step_case *c = &step_cases[i];
    float *h[4] = {rand_floats(c->n, -1, 1), rand_floats(c->n, -3000, 3000),
                   rand_floats(c->n, -0.1f, 0.1f), rand_floats(c->n, 0, 0.01f)};
    if (c->bad >= 0) h[1][c->bad] = c->poison;
    char label[200];
    snprintf(label, sizeof label, "%s n=%zu unscale=%d max_norm=%g loss=%g poison[%ld]=%g lr=%g",
             c->adam == 1 ? "adam" : c->adam == 2 ? "rmsprop" : "sgd", c->n, c->unscale, c->max_norm, c->loss, c->bad,
             (double)c->poison, (double)c->lr);
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      scope sc = scope_of(v);
      step_bufs a, b;
      step_put(&sc, &a, (const float *const *)h, c->n, c->loss);
      step_put(&sc, &b, (const float *const *)h, c->n, c->loss);
      cl_update_args ua = step_args(c, &a), ub = step_args(c, &b);
      cl_step_vals got, want;
      if (sc.ok) CALL(&sc, cl_backend_update_step(v->be, &ua, a.vals));
      if (sc.ok) CALL(&sc, v->be->iface->download(v->be, &got, a.vals, sizeof got));
      if (sc.ok) step_by_host(&sc, c, &ub, &want);
      if (sc.ok) {
        expect(v, got.found_inf == want.found_inf && got.skipped == want.skipped &&
                      got.fault == want.fault,
               "%s: found_inf %d skipped %d fault %llu, want %d %d %llu", label, got.found_inf,
               got.skipped, (unsigned long long)got.fault, want.found_inf, want.skipped,
               (unsigned long long)want.fault);
        expect(v, c->max_norm <= 0 || memcmp(&got.sumsq, &want.sumsq, 8) == 0,
               "%s: sumsq %.17g, want %.17g", label, got.sumsq, want.sumsq);
        expect(v, same_bits(&sc, a.p, b.p, c->n * 4) && same_bits(&sc, a.g, b.g, c->n * 4) &&
                      same_bits(&sc, a.m, b.m, c->n * 4) && same_bits(&sc, a.v, b.v, c->n * 4),
               "%s: parameters, gradients or moments differ from the host's decisions", label);
      }
      scope_end(&sc);
    }
    for (int k = 0; k < 4; k++) free(h[k]);
  }
}

/* loss_acc: share * the mean added into a device double, twice, bit for
 * bit the host's sum of mse's / loss's means (the core's sum before). */
static void run_loss_acc(const row *r) {
  (void)r;
  const size_t n = 70001;
  float *pred = rand_floats(n, -1, 1), *y = rand_floats(n, -1, 1), *w = rand_floats(n, 0, 2);
  const cl_loss_fn fns[] = {
      {CL_LOSS_MSE, 0, 0, 0}, {CL_LOSS_HUBER, 0.5, 0, 0}, {CL_LOSS_MSE, 0, 0, 0}};
  for (int k = 0; k < COUNT(fns); k++) {
    const float *wk = k == 2 ? w : NULL;
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      scope sc = scope_of(v);
      const struct cl_backend_i *f = v->be->iface;
      void *P = dev_of(&sc, pred, n * 4);
      float *Y = dev_of(&sc, y, n * 4), *Wt = wk ? dev_of(&sc, wk, n * 4) : NULL;
      double zero = 0, got = -1, m1 = 0, m2 = 0;
      double *acc = dev_of(&sc, &zero, 8);
      if (sc.ok)
        CALL(&sc, cl_backend_loss_acc(v->be, &fns[k], P, Y, Wt, n, CL_F32, 1, NULL, 0.25, acc));
      if (sc.ok)
        CALL(&sc,
             cl_backend_loss_acc(v->be, &fns[k], P, Y, Wt, n - 7, CL_F32, 1, NULL, 0.75, acc));
      if (sc.ok) CALL(&sc, f->download(v->be, &got, acc, 8));
      if (sc.ok) CALL(&sc, v->be->iface->loss(v->be, &fns[k], P, Y, Wt, n, CL_F32, 1, NULL, &m1));
      if (sc.ok) CALL(&sc, v->be->iface->loss(v->be, &fns[k], P, Y, Wt, n - 7, CL_F32, 1, NULL, &m2));
      double want = 0;
      const double p1 = 0.25 * m1, p2 = 0.75 * m2;
      want += p1;
      want += p2;
      if (sc.ok)
        expect(v, memcmp(&got, &want, 8) == 0, "loss %d weight %d: %.17g, want %.17g",
               (int)fns[k].kind, wk != NULL, got, want);
      scope_end(&sc);
    }
  }
  free(pred);
  free(y);
  free(w);
}

/* scratch_bytes and set_scratch come together; a backend with scratch
 * uses the memory it was handed for its reductions and no byte past
 * scratch_bytes: with a second scratch set, mse (more blocks than the
 * partial sums hold), grad_unscale and adam_check still give the reference
 * results, the first scratch is left alone, the second is written within
 * its bytes and not past them. runtime_bytes: 0 where the slot is absent,
 * else within the device and the same at every call (measured once). */
static void run_scratch(const row *r) {
  (void)r;
  enum { NM = (1 << 20) + 3, NA = 5001 };
  float *pred = rand_floats(NM, -1, 1), *target = rand_floats(NM, -1, 1);
  const cl_loss_fn mse = {CL_LOSS_MSE, 0, 0, 0};
  const double rloss = ref_loss(&mse, pred, target, NM, 1.0, NULL);
  guard_case gc = {"", NA, 1e-3f, 0, 0, 0, 0, {{4321, 0, NAN, 0, 0}}, 1, 0, 1, 4321, 0, 0};
  float *h[4];
  guard_inputs(&gc, h);
  const cl_adam_hp ah = {1e-3f, 0.9f, 0.999f, 1e-8f, 0, 3, 0, 0};
  const uint64_t rkey = ref_adam_fault(h[0], h[1], h[2], h[3], NULL, NA, &ah);
  /* the other reductions through the partial sums: a loss and sum_squares */
  const cl_loss_fn huber = {CL_LOSS_HUBER, 0.5, 1, 0};
  const double rhuber = ref_loss(&huber, pred, target, NM, 1.0, NULL);
  const double rsq = ref_sum_squares(pred, NM);
  size_t runtime0 = 0;
  int have_runtime0 = 0;
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_backend *be = v->be;
    const struct cl_backend_i *f = be->iface;
    const size_t sb = f->scratch_bytes;
    expect(v, (sb > 0) == (f->set_scratch != NULL), "scratch_bytes %zu, set_scratch %s", sb,
           f->set_scratch ? "given" : "absent");
    size_t rt = 0, fr = 0, tot = 0;
    cl_status st = f->runtime_bytes ? f->runtime_bytes(be, &rt) : CL_OK;
    cl_status st2 = cl_backend_mem_info(be, &fr, &tot);
    if (!f->runtime_bytes) {
      expect(v, cl_backend_runtime_bytes(be) == 0, "runtime_bytes absent: 0 bytes");
    } else {
      const int same = !have_runtime0 || rt == runtime0;
      if (!have_runtime0) runtime0 = rt, have_runtime0 = 1;
      expect(v, st == CL_OK && st2 == CL_OK && rt <= tot && same &&
                    cl_backend_runtime_bytes(be) == rt,
             "runtime_bytes %.1f MiB of %.1f MiB, the same at every call", rt / 1048576.0,
             tot / 1048576.0);
    }
    if (!sb || !f->set_scratch) continue;
    expect(v, v->scratch != NULL, "the scratch was handed over before the rows ran");
    scope sc = scope_of(v);
    unsigned char *alt = dev_alloc(&sc, sb + GUARD), *before = xmalloc(sb), *after = xmalloc(sb);
    unsigned char *fill = xmalloc(sb);
    for (size_t k = 0; k < sb; k++) fill[k] = (unsigned char)(0x5A ^ k);
    dev_put(&sc, alt, fill, sb);
    if (sc.ok) guard_set(&sc, alt + sb);
    if (sc.ok) CALL(&sc, f->download(be, before, v->scratch, sb));
    float *P = dev_of(&sc, pred, NM * 4), *T = dev_of(&sc, target, NM * 4);
    float *d[4];
    for (int a = 0; a < 4; a++) d[a] = dev_of(&sc, h[a], NA * 4);
    double loss = 0, lhuber = 0, sq = 0;
    int found = -1;
    uint64_t key = 0;
    if (sc.ok) {
      f->set_scratch(be, alt);
      CALL(&sc, f->loss(be, NULL, P, T, NULL, NM, CL_F32, 1.0f, NULL, &loss));
      CALL(&sc, f->grad_unscale(be, d[1], NA, 1.0f, &found));
      CALL(&sc, f->adam_check(be, d[0], d[1], d[2], d[3], NULL, NA, &ah, &key));
      CALL(&sc, f->loss(be, &huber, P, T, NULL, NM, CL_F32, 1.0f, NULL, &lhuber));
      CALL(&sc, f->sum_squares(be, P, NM, &sq));
      f->set_scratch(be, v->scratch);
    }
    if (sc.ok) {
      expect(v, fabs(loss - rloss) <= 1e-10 * rloss && found == 1 && key == rkey,
             "with another scratch: mse %.12g (reference %.12g), grad_unscale found %d, "
             "adam_check key %llu (reference %llu)",
             loss, rloss, found, (unsigned long long)key, (unsigned long long)rkey);
      expect(v, fabs(lhuber - rhuber) <= 1e-5 * rhuber && fabs(sq - rsq) <= 1e-12 * rsq,
             "with another scratch: huber loss %.12g (reference %.12g), sum_squares %.15g "
             "(reference %.15g)",
             lhuber, rhuber, sq, rsq);
      CALL(&sc, f->download(be, after, v->scratch, sb));
      expect(v, sc.ok && memcmp(before, after, sb) == 0, "the first scratch was left alone");
      CALL(&sc, f->download(be, after, alt, sb));
      expect(v, sc.ok && memcmp(fill, after, sb) != 0, "the second scratch was written");
      expect(v, sc.ok && guard_intact(&sc, alt + sb), "no byte past scratch_bytes (%zu) written",
             sb);
    }
    scope_end(&sc);
    free(before), free(after), free(fill);
  }
  for (int a = 0; a < 4; a++) free(h[a]);
  free(pred), free(target);
}

/* ---- data sets on the device ----------------------------------------------------------- */

typedef struct gather_case {
  size_t row_bytes, offset;
  int N, T, t0, nt, nb;
} gather_case;

/* Rows whose length and pointers allow 16-byte words, only 4-byte ones,
 * and neither; repeated and unordered rows; a window of steps; more rows
 * than one grid holds. */
static void run_gather(const row *r) {
  const gather_case *cases = r->cases;
  for (int i = 0; i < r->n_cases; i++) {
    const gather_case *c = &cases[i];
    const size_t src_bytes = (size_t)c->T * c->N * c->row_bytes;
    const size_t dst_bytes = (size_t)c->nt * c->nb * c->row_bytes;
    unsigned char *src = xmalloc(src_bytes), *want = xmalloc(dst_bytes), *got = xmalloc(dst_bytes);
    int *idx = xmalloc(sizeof(int) * c->nb);
    for (size_t k = 0; k < src_bytes; k++) src[k] = (unsigned char)(uniform01(NULL) * 256);
    for (int j = 0; j < c->nb; j++) idx[j] = (int)(uniform01(NULL) * c->N);
    if (c->nb > 1) idx[c->nb - 1] = idx[0]; /* a repeat */
    ref_gather_rows(want, src, idx, c->nb, c->N, c->t0, c->nt, c->row_bytes);
    for (int vi = 0; vi < n_vs; vi++) {
      variant *v = &vs[vi];
      cl_backend *be = v->be;
      if (!be->iface->gather_rows) {
        expect(v, 1, "gather_rows absent: the core copies row by row");
        continue;
      }
      scope sc = scope_of(v);
      unsigned char *S = dev_alloc(&sc, src_bytes + c->offset);
      unsigned char *D = dev_alloc(&sc, dst_bytes + c->offset);
      int *I = dev_of(&sc, idx, sizeof(int) * c->nb);
      if (sc.ok) {
        S += c->offset, D += c->offset;
        dev_put(&sc, S, src, src_bytes);
        if (sc.ok) CALL(&sc, be->iface->memset0(be, D, dst_bytes));
        if (sc.ok)
          CALL(&sc, be->iface->gather_rows(be, D, S, I, c->nb, c->N, c->t0, c->nt, c->row_bytes));
        if (sc.ok) CALL(&sc, be->iface->download(be, got, D, dst_bytes));
        if (sc.ok)
          expect(v, memcmp(got, want, dst_bytes) == 0,
                 "%zu-byte rows at offset %zu, N %d, steps %d..%d of %d, %d rows", c->row_bytes,
                 c->offset, c->N, c->t0, c->t0 + c->nt - 1, c->T, c->nb);
      }
      scope_end(&sc);
    }
    free(src), free(want), free(got), free(idx);
  }
}

/* ---- the step's block and graphs --------------------------------------------------------- */

/* step_vals: the backend's block (zeroed with memset0, read with download
 * like any device memory), or the core's host block where the slot is
 * absent. graph_begin / graph_end / graph_info through the core's
 * wrappers: a plain pass runs every call (nothing to redo) and a backend
 * that records counts it; without the slots, nothing is asked. */
static void run_step_graphs(const row *r) {
  (void)r;
  enum { N = 4099 };
  float *h = rand_floats(N, -1, 1), *back = xmalloc(N * 4);
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_backend *be = v->be;
    const struct cl_backend_i *f = be->iface;
    scope sc = scope_of(v);
    cl_step_vals host, got;
    memset(&got, 0xff, sizeof got);
    cl_step_vals *vals = cl_backend_step_vals(be, &host);
    expect(v, (vals == &host) == !f->step_vals && vals != NULL,
           "step_vals: %s block", f->step_vals ? "the backend's" : "the core's host");
    CALL(&sc, f->memset0(be, vals, sizeof *vals));
    CALL(&sc, f->download(be, &got, vals, sizeof got));
    expect(v, sc.ok && got.loss == 0 && got.sumsq == 0 && got.fault == 0 && !got.skipped,
           "step_vals: zeroed by memset0, read by download");
    cl_graph_info before, after;
    cl_backend_graph_info(be, &before);
    float *d1 = dev_alloc(&sc, N * 4), *d2 = dev_alloc(&sc, N * 4);
    if (sc.ok) dev_put(&sc, d1, h, N * 4);
    int redo = -1;
    if (sc.ok) CALL(&sc, cl_backend_graph_begin(be, CL_GRAPH_PLAIN));
    if (sc.ok) {
      CALL(&sc, f->copy(be, d2, d1, N * 4));
      CALL(&sc, f->memset0(be, d1, N * 4));
      CALL(&sc, cl_backend_graph_end(be, CL_OK, &redo));
    }
    if (sc.ok) CALL(&sc, f->download(be, back, d2, N * 4));
    cl_backend_graph_info(be, &after);
    expect(v, sc.ok && redo == 0 && memcmp(back, h, N * 4) == 0,
           "graph_begin(plain) .. graph_end: ran, nothing to redo (redo %d)", redo);
    expect(v, f->graph_info ? after.asked && after.plain == before.plain + 1 : !after.asked,
           "graph_info: %s (plain passes %lld -> %lld)",
           f->graph_info ? "one plain pass more" : "nothing asked", (long long)before.plain,
           (long long)after.plain);
    scope_end(&sc);
  }
  free(h), free(back);
}

/* destroy: a backend of each kind made, used (its staging buffer too, the
 * one thing a backend frees itself) and destroyed; a leak or a double free
 * is ASan's and valgrind's to see (make asan, make valgrind). */
static void run_destroy(const row *r) {
  (void)r;
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    cl_backend *be = NULL;
    char err[CL_ERRMSG_LEN] = "";
    const int cpu = strcmp(v->be->iface->name, "cpu") == 0;
    cl_status st = cpu ? cl_backend_cpu_create(1, &be) : cl_backend_cuda_create(&be, err, sizeof err);
    if (!expect(v, st == CL_OK && be, "create a second %s backend: %s %s", v->be->iface->name,
                status_str(st), err))
      continue;
    void *p = NULL, *stage = NULL;
    st = be->iface->alloc(be, 4096, &p);
    if (st == CL_OK && be->iface->host_stage) (void)be->iface->host_stage(be, 1 << 16, &stage);
    if (p) be->iface->free(be, p);
    expect(v, st == CL_OK && p, "alloc on the second backend: %s", status_str(st));
    be->iface->destroy(be);
  }
}

/* ---- bind_thread: a thread of its own reaches the backend's device ---------------------- */

/* What a training step on a thread of its own does first (src/r_train.c):
 * bind, then call the slots. The buffer was made on the main thread. */
typedef struct bind_job {
  cl_backend *be;
  void *dst;
  const float *src;
  float *back;
  size_t n;
  cl_status st;
  int device; /* the thread's CUDA device after binding; -1 on the CPU */
} bind_job;

static void *bind_run(void *arg) {
  bind_job *j = arg;
  const struct cl_backend_i *f = j->be->iface;
  j->st = cl_backend_bind_thread(j->be);
  if (j->st == CL_OK) j->st = f->upload(j->be, j->dst, j->src, j->n * sizeof(float));
  if (j->st == CL_OK) j->st = f->download(j->be, j->back, j->dst, j->n * sizeof(float));
#ifdef CL_HAVE_CUDA
  if (strcmp(f->name, "cuda") == 0) (void)cudaGetDevice(&j->device);
#endif
  return NULL;
}

static void run_bind_thread(const row *r) {
  (void)r;
  enum { N = 4099 };
  float *src = rand_floats(N, -1, 1);
  for (int vi = 0; vi < n_vs; vi++) {
    variant *v = &vs[vi];
    scope sc = scope_of(v);
    bind_job j = {v->be, dev_alloc(&sc, N * sizeof(float)), src, xmalloc(N * sizeof(float)), N,
                  CL_E_INVALID, -1};
    pthread_t t;
    if (sc.ok && expect(v, pthread_create(&t, NULL, bind_run, &j) == 0, "start a thread")) {
      pthread_join(t, NULL);
      expect(v, j.st == CL_OK && memcmp(j.back, src, N * sizeof(float)) == 0,
             "bind_thread, upload and download on a thread of its own: %s, bytes %s (%s)",
             status_str(j.st), j.st == CL_OK ? "compared" : "not read", v->be->err);
    }
#ifdef CL_HAVE_CUDA
    int here = -1;
    if (j.device >= 0 && cudaGetDevice(&here) == cudaSuccess)
      expect(v, j.device == here, "the thread's device %d is the backend's, %d", j.device, here);
#endif
    expect(v, cl_backend_bind_thread(v->be) == CL_OK, "bind_thread again on the main thread");
    scope_end(&sc);
    free(j.back);
  }
  free(src);
}

/* ---- the table --------------------------------------------------------------------------- */

/* {N, C, H, W, K, kh, kw, dh, dw}. Square kernels k = 1, 3, 5; H != W;
 * C = 1; K > C and K <= C (the CPU's backward data by col2im or a flipped
 * kernel); im2col + GEMM (K > 16, C k k > 32) and direct kernels (few
 * channels); N = 1 and 3, which do not share out evenly over 2 threads;
 * images smaller than the kernel; 24x24 tutorial images; N = 5 with C = 3
 * (cuDNN's backward data in slices of 2, 2 and 1 images under
 * CONVLSTM_CUDA_DX_SCRATCH_MB=0.0007). Then non-square kernels and
 * dilation: kh != kw either way, 1 x k, dilation in one direction or both,
 * on direct (few channels) and GEMM (C = 20, K = 24) sizes, and a dilated
 * extent larger than the image (5x3 by 3x2 over 4x5: 13 x 5 pixels). */
static const cl_conv_shape conv_shapes[] = {
    {3, 2, 5, 7, 4, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 1, 6, 6, 8, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {4, 3, 7, 5, 2, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 5, 4, 9, 6, 1, 1, 1, 1, 0, 0, CL_NCHW, 0},
    {4, 6, 8, 8, 20, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {4, 20, 6, 5, 4, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {1, 3, 5, 5, 4, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {5, 1, 9, 4, 3, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 9, 24, 24, 12, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 4, 3, 3, 5, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {4, 2, 1, 6, 3, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 17, 11, 13, 9, 1, 1, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 8, 7, 9, 24, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 40, 5, 6, 20, 1, 1, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 3, 6, 7, 18, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {1, 10, 9, 8, 40, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {1, 16, 24, 24, 64, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 1, 24, 24, 64, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 16, 24, 24, 4, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {1, 16, 61, 60, 16, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 3, 5, 7, 4, 1, 1, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 5, 6, 9, 8, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 4, 7, 5, 6, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {4, 17, 12, 10, 32, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {5, 3, 6, 9, 8, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    /* non-square and dilated */
    {3, 2, 6, 7, 4, 3, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 3, 7, 5, 6, 5, 1, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 2, 8, 9, 4, 3, 3, 2, 2, 0, 0, CL_NCHW, 0},
    {3, 4, 7, 8, 3, 3, 5, 2, 1, 0, 0, CL_NCHW, 0},
    {2, 20, 9, 8, 24, 3, 3, 1, 3, 0, 0, CL_NCHW, 0},
    {2, 3, 4, 5, 20, 5, 3, 3, 2, 0, 0, CL_NCHW, 0},
    {1, 6, 12, 10, 8, 1, 3, 1, 4, 0, 0, CL_NCHW, 0},
    {2, 3, 8, 9, 4, 3, 3, 2, 2, 0, 0, CL_NCHW, 0},
    {2, 20, 9, 8, 24, 5, 3, 1, 3, 0, 0, CL_NCHW, 0},
    /* grouped (per-gate dropout: 4 masked copies, each gate's rows on its
     * own): small groups, the tutorial's hidden half, dilated non-square,
     * groups of more than 128 outputs (the CPU's GEMM path), 1 x 1, two
     * groups */
    {3, 8, 5, 7, 12, 3, 3, 1, 1, 0, 4, CL_NCHW, 0},
    {2, 64, 12, 10, 64, 3, 3, 1, 1, 0, 4, CL_NCHW, 0},
    {2, 12, 6, 9, 32, 5, 3, 2, 1, 0, 4, CL_NCHW, 0},
    {4, 20, 8, 8, 160, 3, 3, 1, 1, 0, 4, CL_NCHW, 0},
    {1, 8, 6, 6, 544, 3, 3, 1, 1, 0, 4, CL_NCHW, 0},
    {3, 8, 5, 5, 8, 1, 1, 1, 1, 0, 2, CL_NCHW, 0},
    {2, 4, 9, 8, 12, 3, 3, 1, 2, 0, 2, CL_NCHW, 0},
    /* Shi et al.'s encoder-forecaster as bench_gpu.py's "paper" runs it:
     * the head (1 x 1 from all forecaster h, 128 + 64 + 64, to the patched
     * frame's 16 channels), and a 5 x 5 input half of the 16 patched
     * channels at 16 x 16 (fewer outputs than the paper's 512: CPU time) */
    {2, 256, 16, 16, 16, 1, 1, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 16, 16, 16, 64, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
};
/* The same slots in float16 / bfloat16 on fewer shapes: the storage paths
 * are per element, the arithmetic is the float32 one above. The CPU backend
 * runs half storage on its direct path and on the GEMM path's view (more
 * than 128 outputs; 16 pixels wide: read in place), converting images where
 * it pads them. */
static const cl_conv_shape conv_half_shapes[] = {
    {2, 12, 8, 16, 144, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 10, 7, 9, 136, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 2, 5, 7, 4, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 9, 12, 10, 24, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 17, 11, 13, 9, 1, 1, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 3, 6, 7, 18, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 3, 5, 7, 4, 1, 1, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 5, 6, 9, 8, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 4, 7, 5, 6, 5, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {4, 17, 12, 10, 32, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {5, 3, 6, 9, 8, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
    {3, 2, 6, 7, 4, 3, 5, 1, 1, 0, 0, CL_NCHW, 0},
    {2, 3, 8, 9, 4, 3, 3, 2, 2, 0, 0, CL_NCHW, 0},
    {2, 20, 9, 8, 24, 5, 3, 1, 3, 0, 0, CL_NCHW, 0},
    {2, 3, 4, 5, 20, 5, 3, 3, 2, 0, 0, CL_NCHW, 0},
    {3, 8, 5, 7, 12, 3, 3, 1, 1, 0, 4, CL_NCHW, 0},
    {2, 12, 6, 9, 32, 5, 3, 2, 1, 0, 4, CL_NCHW, 0},
    {2, 256, 16, 16, 16, 1, 1, 1, 1, 0, 0, CL_NCHW, 0}, /* the paper's head */
};
/* The core's per-step slices: activations one element past an aligned
 * start, square and dilated non-square. */
static const cl_conv_shape conv_offset_shapes[] = {{3, 5, 6, 9, 8, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
                                                   {4, 17, 12, 10, 32, 3, 3, 1, 1, 0, 0, CL_NCHW, 0},
                                                   {2, 20, 9, 8, 24, 5, 3, 1, 3, 0, 0, CL_NCHW, 0},
                                                   {3, 8, 5, 7, 12, 3, 3, 1, 1, 0, 4, CL_NCHW, 0}};
static const cl_conv_shape conv_rounding_cases[] = {{1, 1, 1, 1, 4136, 1, 1, 1, 1, 0, 0, CL_NCHW, 0}};

/* {N, hidden, P}: P = 35, 37 (a vector body and a scalar tail), 150 (a
 * full 128 chunk, a vector body and a tail), 576 (a 24x24 image); hidden
 * 136: channels last, a row (the channels) longer than the half types'
 * 128 chunks (cpu_cell.c). */
static const cl_gates_shape gates_shapes[] = {{2, 3, 37, 0, 0, CL_NCHW},
                                              {4, 16, 576, 0, 0, CL_NCHW},
                                              {3, 5, 150, 0, 0, CL_NCHW},
                                              {3, 4, 35, 0, 0, CL_NCHW},
                                              {2, 16, 63, 0, 0, CL_NCHW},
                                              {2, 136, 5, 0, 0, CL_NCHW}};
static const cl_gates_shape gates_fd_shapes[] = {{2, 3, 37, 0, 0, CL_NCHW}};
static const cl_gates_shape one_case[] = {{1, 1, 1, 0, 0, CL_NCHW}};
/* the same sizes with each kind of peephole: per channel (one weight
 * broadcast over a vector) and per position (a vector of weights) */
static const cl_gates_shape gates_peep_shapes[] = {{2, 3, 37, 0, CL_PEEP_CHANNEL, CL_NCHW},
                                                   {4, 16, 576, 0, CL_PEEP_POSITION, CL_NCHW},
                                                   {3, 5, 150, 0, CL_PEEP_POSITION, CL_NCHW},
                                                   {3, 4, 35, 0, CL_PEEP_CHANNEL, CL_NCHW},
                                                   {2, 16, 63, 0, CL_PEEP_POSITION, CL_NCHW}};
static const cl_gates_shape gates_peep_fd_shapes[] = {{2, 3, 37, 0, CL_PEEP_CHANNEL, CL_NCHW},
                                                      {2, 3, 37, 0, CL_PEEP_POSITION, CL_NCHW}};

/* 1 and 4099 elements; more blocks than the CUDA reduction's partials */
#define MSE {CL_LOSS_MSE, 1, 1, 0}
static const loss_case mse_cases[] = {
    {MSE, 1, 1.0f, 1},    {MSE, 1000, 1.0f, 0},    {MSE, (1u << 20) + 3, 1024.0f, 1},
    {MSE, 4099, 1.0f, 2}, {MSE, 100003, 0.75f, 1}, {MSE, 70001, 1.0f, 1}};
#undef MSE

/* every kind; Huber's two branches (delta inside the differences' range);
 * BCE with and without pos_weight; 1 element; more blocks than the CUDA
 * reduction's partials */
static const loss_case loss_cases[] = {
    {{CL_LOSS_MAE, 1, 1, 0}, 1, 1.0f, 1},
    {{CL_LOSS_MAE, 1, 1, 0}, 100003, 0.75f, 2},
    {{CL_LOSS_HUBER, 0.7, 1, 0}, (1u << 20) + 3, 1024.0f, 1},
    {{CL_LOSS_HUBER, 0.7, 1, 0}, 4099, 1.0f, 0},
    {{CL_LOSS_HUBER, 2.5, 1, 0}, 1000, 1.0f, 2},
    {{CL_LOSS_BCE_LOGITS, 1, 2.5, 0}, 70001, 1.0f, 2},
    {{CL_LOSS_BCE_LOGITS, 1, 1, 0}, 1000, 0.5f, 1},
    {{CL_LOSS_BCE_LOGITS, 1, 0.3, 0}, (1u << 20) + 3, 1.0f, 1},
};

static const loss_case weighted_loss_cases[] = {
    {{CL_LOSS_MSE, 1, 1, 0}, 1, 1.0f, 1},
    {{CL_LOSS_MSE, 1, 1, 0}, 100003, 0.75f, 1},
    {{CL_LOSS_MAE, 1, 1, 0}, 4099, 1024.0f, 1},
    {{CL_LOSS_HUBER, 0.7, 1, 0}, (1u << 20) + 3, 1.0f, 1},
    {{CL_LOSS_BCE_LOGITS, 1, 2.5, 0}, 70001, 0.5f, 1},
};

static const sumsq_case sumsq_cases[] = {
    {0, -1, 0.0f},           {1, -1, 0.0f},         {4099, -1, 0.0f},
    {(1u << 20) + 3, -1, 0.0f},
    {100003, 7, 3e38f},      /* its square overflows float, not the double sum */
    {100003, 99999, INFINITY}, {4099, 5, -INFINITY}, {4099, 4098, NAN},
};

static const size_t grad_add_cases[] = {0, 1, 4099, 32768, 32769, (1u << 20) + 3};

static const unscale_case unscale_cases[] = {
    {0, 0.5f, -1, 0.0f},
    {1000003, 1.0f / 1024.0f, -1, 0.0f},
    {1000003, 1.0f / 1024.0f, 777777, INFINITY},
    {4099, 1.0f / 65536.0f, 4098, NAN},
    {4099, 1.0f / 65536.0f, 0, -INFINITY},
    {4099, 4.0f, 17, 3e38f},           /* finite, but not once scaled */
    {4099, 1.0f / 3.0f, -1, 0.0f},     /* the flag from before was reset */
    {100003, 1.0f / 1024.0f, -1, 0.0f},
    {100003, 0.5f, 99998, INFINITY},
    {100003, 0.5f, 99998, NAN},
    {100003, 4.0f, 99998, 3e38f},
};

static const optim_case adam_cases[] = {{50001, 1e-2f, 0, 0.0f, 5, 0, 0},
                                        {50001, 1e-2f, 0, 0.01f, 5, 0, 0},
                                        {1007, 1e-3f, 0, 0.0f, 3, 0, 0},
                                        {300001, 1e-3f, 0, 0.01f, 3, 0, 0},
                                        /* AdamW, amsgrad, both */
                                        {50001, 1e-2f, 0, 0.01f, 5, 1, 0},
                                        {50001, 1e-2f, 0, 0.1f, 5, 1, 0},
                                        {50001, 1e-2f, 0, 0.0f, 5, 0, 1},
                                        {50001, 1e-2f, 0, 0.01f, 5, 0, 1},
                                        {300001, 1e-3f, 0, 0.01f, 3, 1, 1}};
static const rms_case rms_cases[] = {
    /* n, lr, alpha, eps, weight_decay, momentum, centered, steps */
    {50001, 1e-2f, 0.99f, 1e-8f, 0.0f, 0.0f, 0, 5},   /* torch's defaults */
    {50001, 1e-2f, 0.99f, 1e-8f, 0.0f, 0.9f, 0, 5},   /* momentum */
    {50001, 1e-2f, 0.9f, 1e-8f, 0.0f, 0.0f, 1, 5},    /* centered */
    {1007, 1e-3f, 0.9f, 1e-6f, 0.01f, 0.0f, 0, 3},    /* weight decay */
    {300001, 1e-3f, 0.8f, 1e-6f, 0.01f, 0.5f, 1, 3},  /* all of them, many blocks */
};
static const optim_case sgd_cases[] = {
    {40009, 0.05f, 0.0f, 0.0f, 4, 0, 0}, {40009, 0.05f, 0.9f, 0.0f, 4, 0, 0}, {40009, 0.05f, 0.9f, 1e-3f, 4, 0, 0},
    {1007, 0.05f, 0.0f, 0.0f, 3, 0, 0},  {1007, 0.05f, 0.9f, 0.0f, 3, 0, 0},  {300001, 0.05f, 0.9f, 0.01f, 3, 0, 0}};

/* The planted faults of the guards (from the guard branch's CPU and CUDA
 * tests): every array and NaN / Inf; a value finite on input that the
 * update's float32 arithmetic makes Inf (g*g, lr / (1 - beta1^t), momentum,
 * lr * g, weight decay * p); the first element and the last; both halves
 * of 2 and 3 threads' static split (n = 40009 > the CPU's parallel
 * threshold), a CUDA grid of many blocks (300001); two faults, where the
 * earlier element (and within one element the earlier array) wins; state
 * not yet created (NULL moments: zeros). */
#define NOPLANT {0, 0, 0, 0, 0}
static const guard_case adam_guard_cases[] = {
    /* what, n, lr, wd, mom, first, no_state, plants, n_plants, want part, nan, at,
     * decoupled (AdamW), amsgrad */
    {"all finite", 40009, 1e-3f, 0, 0, 0, 0, {{7, 0.5f, 0.5f, 0.1f, 0.1f}}, 1, -1, 0, 0, 0, 0},
    {"an Inf gradient", 40009, 1e-3f, 0, 0, 0, 0, {{777, 0, INFINITY, 0, 0}}, 1, CL_PART_GRAD, 0,
     777, 0, 0},
    {"a NaN gradient, last element", 40009, 1e-3f, 0, 0, 0, 0, {{40008, 0, NAN, 0, 0}}, 1,
     CL_PART_GRAD, 1, 40008, 0, 0},
    /* (1 - beta2) g^2 passes 3.4e38 from |g| = 5.8e20 */
    {"g*g overflows exp_avg_sq", 40009, 1e-3f, 0, 0, 0, 0, {{5, 0, 1e21f, 0, 0}}, 1, CL_PART_V, 0,
     5, 0, 0},
    {"exp_avg already Inf", 40009, 1e-3f, 0, 0, 0, 0, {{20000, 0, 0, INFINITY, 0}}, 1, CL_PART_M,
     0, 20000, 0, 0},
    {"a NaN exp_avg_sq", 40009, 1e-3f, 0, 0, 0, 0, {{3, 0, 0, 0, NAN}}, 1, CL_PART_V, 1, 3, 0, 0},
    {"lr / (1 - beta1^t) overflows: every parameter", 40009, 3e38f, 0, 0, 0, 0,
     {{0, 0.5f, 0.5f, 0.5f, 0.5f}}, 1, CL_PART_PARAM, 0, 0, 0, 0},
    {"two faults: the earlier element wins", 40009, 1e-3f, 0, 0, 0, 0,
     {{39000, 0, NAN, 0, 0}, {15000, 0, 0, 0, INFINITY}}, 2, CL_PART_V, 0, 15000, 0, 0},
    {"an Inf gradient and a NaN exp_avg: the gradient first", 40009, 1e-3f, 0, 0, 0, 0,
     {{30001, 0, -INFINITY, NAN, 0}}, 1, CL_PART_GRAD, 0, 30001, 0, 0},
    {"a NaN gradient, last element of many blocks", 300001, 1e-3f, 0, 0, 0, 0,
     {{300000, 0, NAN, 0, 0}}, 1, CL_PART_GRAD, 1, 300000, 0, 0},
    {"g*g overflows exp_avg_sq, many blocks", 300001, 1e-3f, 0, 0, 0, 0,
     {{250000, 0, 1e21f, 0, 0}}, 1, CL_PART_V, 0, 250000, 0, 0},
    {"no state yet, all finite", 1000, 1e-3f, 0, 0, 0, 1, {NOPLANT}, 0, -1, 0, 0, 0, 0},
    {"no state yet, g*g overflows", 1000, 1e-3f, 0, 0, 0, 1, {{400, 0, 1e21f, 0, 0}}, 1,
     CL_PART_V, 0, 400, 0, 0},
    {"n = 0", 0, 1e-3f, 0, 0, 0, 0, {NOPLANT}, 0, -1, 0, 0, 0, 0},
    /* AdamW and amsgrad: the decoupled decay, max_exp_avg_sq's denominator */
    {"adamw, all finite", 40009, 1e-3f, 0.01f, 0, 0, 0, {{7, 0.5f, 0.5f, 0.1f, 0.1f}}, 1, -1, 0,
     0, 1, 0},
    {"adamw, a NaN gradient", 40009, 1e-3f, 0.01f, 0, 0, 0, {{123, 0, NAN, 0, 0}}, 1,
     CL_PART_GRAD, 1, 123, 1, 0},
    {"adamw: lr / (1 - beta1^t) overflows", 40009, 3e38f, 1e-39f, 0, 0,
     0, {{0, 0.5f, 0.5f, 0.5f, 0.5f}}, 1, CL_PART_PARAM, 0, 0, 1, 0},
    {"amsgrad, all finite", 40009, 1e-3f, 0, 0, 0, 0, {{7, 0.5f, 0.5f, 0.1f, 0.1f}}, 1, -1, 0, 0,
     0, 1},
    {"amsgrad, g*g overflows exp_avg_sq", 40009, 1e-3f, 0, 0, 0, 0, {{5, 0, 1e21f, 0, 0}}, 1,
     CL_PART_V, 0, 5, 0, 1},
    {"adamw + amsgrad, no state yet, all finite", 1000, 1e-3f, 0.01f, 0, 0, 1, {NOPLANT}, 0, -1,
     0, 0, 1, 1},
    {"adamw + amsgrad, an Inf exp_avg", 300001, 1e-3f, 0.01f, 0, 0, 0,
     {{250000, 0, 0, INFINITY, 0}}, 1, CL_PART_M, 0, 250000, 1, 1},
};
/* RMSprop's guard: mom its momentum, first 1 centered (grad_avg from zeros) */
static const guard_case rms_guard_cases[] = {
    {"all finite", 40009, 1e-2f, 0, 0, 0, 0, {{7, 0.5f, 0.5f, 0.1f, 0.1f}}, 1, -1, 0, 0, 0, 0},
    {"momentum and centered, all finite", 40009, 1e-2f, 0.01f, 0.9f, 1, 0,
     {{7, 0.5f, 0.5f, 0.1f, 0.1f}}, 1, -1, 0, 0, 0, 0},
    {"an Inf gradient", 40009, 1e-2f, 0, 0.9f, 0, 0, {{777, 0, INFINITY, 0, 0}}, 1, CL_PART_GRAD,
     0, 777, 0, 0},
    /* (1 - alpha) g^2 passes 3.4e38 from |g| = 1.8e20 */
    {"g*g overflows square_avg", 40009, 1e-2f, 0, 0, 0, 0, {{5, 0, 1e21f, 0, 0}}, 1, CL_PART_V,
     0, 5, 0, 0},
    {"a NaN square_avg", 40009, 1e-2f, 0, 0, 0, 0, {{3, 0, 0, 0, NAN}}, 1, CL_PART_V, 1, 3, 0, 0},
    {"momentum overflows the buffer", 40009, 1e-2f, 0, 1e10f, 0, 0, {{123, 0, 0, 1e30f, 0}}, 1,
     CL_PART_M, 0, 123, 0, 0},
    /* square_avg 0: avg = 0.1 |g|, and 3e38 * g / avg passes 3.4e38 at once */
    {"lr * g / avg overflows the parameter", 300001, 3e38f, 0, 0, 0, 0,
     {{0, 0.5f, 0.5f, 0, 0}}, 1, CL_PART_PARAM, 0, 0, 0, 0},
    {"no state yet, all finite", 1000, 1e-2f, 0, 0.9f, 1, 1, {NOPLANT}, 0, -1, 0, 0, 0, 0},
    /* centered, grad_avg from zeros: the centered denominator alone makes the
     * update non-finite, the plain one sqrt(square_avg) + eps would not (so a
     * guard predicting the plain one fails): square_avg planted below 0 so
     * that v = 0.99 v0 + 0.01 g^2 lies under grad_avg^2 = (0.01 g)^2, NaN,
     * or 9.5e-10 above it (clear of an FMA's rounding), sqrt 3e-5: lr g / avg
     * passes 3.4e38 where the plain root's 1e-2 gives 1e37 */
    {"centered: square_avg < grad_avg^2, NaN", 40009, 1e-2f, 0, 0, 1, 0,
     {{11, 0.5f, 1.0f, 0, -0.0100505f}}, 1, CL_PART_PARAM, 1, 11, 0, 0},
    {"centered: square_avg - grad_avg^2 = 9.5e-10, Inf", 40009, 1e35f, 0, 0, 1, 0,
     {{20011, 0.5f, 1.0f, 0, -0.0099999899f}}, 1, CL_PART_PARAM, 0, 20011, 0, 0},
    {"two faults: the earlier element wins", 40009, 1e-2f, 0, 0, 0, 0,
     {{39000, 0, NAN, 0, 0}, {15000, 0, 0, 0, INFINITY}}, 2, CL_PART_V, 0, 15000, 0, 0},
};
static const guard_case sgd_guard_cases[] = {
    {"all finite", 40009, 0.1f, 0, 0.9f, 0, 0, {{7, 0.5f, 0.5f, 0.5f, 0}}, 1, -1, 0, 0, 0, 0},
    {"the first step ignores a NaN buffer", 40009, 0.1f, 0, 0.9f, 1, 0, {{7, 0.5f, 0.5f, NAN, 0}},
     1, -1, 0, 0, 0, 0},
    {"momentum overflows the buffer", 40009, 0.1f, 0, 1e10f, 0, 0, {{123, 0, 0, 1e30f, 0}}, 1,
     CL_PART_M, 0, 123, 0, 0},
    {"lr * g overflows the parameter", 40009, 10, 0, 0, 0, 0, {{31, 3e38f, -1e38f, 0, 0}}, 1,
     CL_PART_PARAM, 0, 31, 0, 0},
    {"weight decay * p overflows", 40009, 0.1f, 1e38f, 0, 0, 0, {{9, 10, 0, 0, 0}}, 1,
     CL_PART_PARAM, 0, 9, 0, 0},
    {"a NaN parameter", 40009, 0.1f, 0, 0, 0, 0, {{40000, NAN, 0, 0, 0}}, 1, CL_PART_PARAM, 1,
     40000, 0, 0},
    {"an Inf gradient", 40009, 0.1f, 0, 0.9f, 0, 0, {{20005, 0, INFINITY, 0, 0}}, 1,
     CL_PART_GRAD, 0, 20005, 0, 0},
    {"a NaN buffer without momentum is not read", 40009, 0.1f, 0, 0, 0, 0,
     {{11, 0.5f, 0.5f, NAN, 0}}, 1, -1, 0, 0, 0, 0},
    {"two faults: the earlier element wins", 40009, 0.1f, 0, 0.9f, 0, 0,
     {{35000, NAN, 0, 0, 0}, {12000, 0, 0, INFINITY, 0}}, 2, CL_PART_M, 0, 12000, 0, 0},
    {"momentum overflows, many blocks", 300001, 0.1f, 0, 1e10f, 0, 0, {{290000, 0, 0, 1e30f, 0}},
     1, CL_PART_M, 0, 290000, 0, 0},
    {"no buffer yet, first step, all finite", 1000, 0.1f, 0, 0.9f, 1, 1, {NOPLANT}, 0, -1, 0, 0, 0, 0},
    {"n = 0", 0, 0.1f, 0, 0.9f, 0, 0, {NOPLANT}, 0, -1, 0, 0, 0, 0},
};

/* n, reps, in place, accumulate */
static const mask_case mask_cases[] = {
    {1, 1, 0, 0, 1, 1, 0},         {37, 3, 1, 0, 37, 1, 0},
    {2048 * 2 + 5, 4, 0, 0, 2048 * 2 + 5, 1, 0}, {2048 * 2 + 5, 4, 0, 1, 2048 * 2 + 5, 1, 0},
    {9 * 64 * 24, 7, 1, 0, 64 * 24, 1, 0},       {300007, 2, 0, 1, 300007, 1, 0},
    {0, 3, 0, 0, 1, 1, 0},
    /* n, reps, in place, accumulate, row, groups, gather */
    {2 * 75, 3, 0, 0, 75, 4, 0},  {2 * 75, 3, 0, 0, 75, 4, 1},
    {2 * 75, 3, 0, 1, 75, 4, 1},  {3 * 2085, 2, 0, 1, 2085, 4, 0},
    {3 * 2085, 2, 0, 1, 2085, 4, 1}, {8 * 16 * 576, 5, 0, 0, 16 * 576, 4, 1},
    {8 * 16 * 576, 2, 0, 0, 16 * 576, 4, 0},
};

/* key, first, n, p */
static const draw_case draw_cases[] = {
    {1, 0, 0, 0, 1, 0.5},
    {0x0123456789abcdefull, 1, 1, 0, 1000, 0.3},
    {0x0123456789abcdefull, 1, 1, 777, 1000, 0.3}, /* a later micro-batch of the same stream */
    {42, 2, 0, 5, 300007, 0.9},                    /* parallel, many blocks */
    {42, 0, 1, 0, 4096, 1e-9},                     /* nearly everything kept */
    {42, 3, 1, 0, 4096, 0.999999},                 /* nearly nothing kept */
    {7, 0, 0, 0, 0, 0.5},
};

/* row_bytes, offset, N, T, t0, nt, nb */
static const gather_case gather_cases[] = {
    {24 * 24 * 4, 0, 100, 5, 0, 5, 10}, /* float32 images: 16-byte words */
    {8 * 10 * 2, 0, 7, 3, 1, 2, 9},     /* float16, 160 bytes */
    {6 * 4, 4, 9, 4, 2, 2, 5},          /* 4-byte words only */
    {5 * 3 * 2, 0, 11, 3, 0, 3, 4},     /* 30 bytes: single bytes */
    {4096, 1, 13, 2, 0, 2, 6},          /* misaligned pointers */
    {16, 0, 70000, 2, 0, 2, 70000},     /* more rows than blocks */
};

#define EXACT(why) {0, 0, 0, 0, 0, 0, why}

/* Tolerances of the convolutions: float32 sums of up to C kh kw (forward),
 * K kh kw (backward data) and N H W (filter) products, in another order than
 * the reference. */
#define CONV_TOL                                                                                 \
  {2e-5, 1e-3, 8e-3, 8e-3, 5e-2, 0,                                                              \
   "float32: sums of C kh kw, K kh kw or N H W products in another order; stored results: "      \
   "one rounding to float16 (2^-11) or bfloat16 (2^-8) of a float32 sum; a backend computing "   \
   "half convolutions in the storage type (cuDNN: weights cast, dx and dw rounded as autocast "  \
   "does) rounds x w products and results at 2^-11 / 2^-8 each: 8e-3 / 5e-2; float32 on a "     \
   "backend that names its algorithm (conv_algo): its family's, if looser (algo_tol: TF32 "     \
   "3e-3, FFT 2e-4, Winograd 1e-4)"}

/* The same rows channels last (layout_now, to_layout): every slot that
 * reads activations by channel, against the NCHW references. */
#define NHWC_RUNNER(fn)                 \
  static void fn##_nhwc(const row *r) { \
    layout_now = CL_NHWC;               \
    fn(r);                              \
    layout_now = CL_NCHW;               \
  }
NHWC_RUNNER(run_conv)
NHWC_RUNNER(run_gates_forward)
NHWC_RUNNER(run_gates_backward)
NHWC_RUNNER(run_peephole_filter)
NHWC_RUNNER(run_gates_forward_bias)
NHWC_RUNNER(run_gates_backward_bias)
#undef NHWC_RUNNER

static const row ops[] = {
    {"alloc free upload copy download memset0 mem_info synchronize", run_memory, NULL, 1, F32, 0,
     EXACT("bytes are moved, not computed: equal bit for bit")},
    {"host_stage (optional)", run_host_stage, NULL, 1, F32, 0, EXACT("bytes, bit for bit")},
    {"host_alloc host_free (optional)", run_host_alloc, NULL, 1, F32, 0, EXACT("bytes, bit for bit")},
    {"ahead_upload ahead_acquire ahead_release ahead_sync (optional)", run_ahead, NULL, 1, F32, 0,
     EXACT("bytes, bit for bit")},
    {"conv_workspace conv_forward conv_backward_data conv_backward_filter conv_algo", run_conv,
     CASES(conv_shapes), F32, 0, CONV_TOL},
    {"conv_workspace conv_forward conv_backward_data conv_backward_filter", run_conv,
     CASES(conv_half_shapes), HALF, 0, CONV_TOL},
    {"conv_* on activations at element offset 1", run_conv, CASES(conv_offset_shapes), ALL, 1,
     CONV_TOL},
    {"conv_forward store_f32 (float32 -> storage rounding)", run_rounding, CASES(conv_rounding_cases), HALF, 0,
     EXACT("0 + bias is bias; its rounding must be host/half.h's, bit for bit")},
    {"conv_* refusals and no-ops", run_conv_errors, NULL, 1, ALL, 0, EXACT("statuses")},
    {"gates_forward", run_gates_forward, CASES(gates_shapes), ALL, 0,
     {1e-6, 1e-3, 8e-3, 0, 0, 0,
      "float32: expf/tanhf within a few ulp and 3 roundings of c, h (values <= 3); stored: one "
      "rounding of a float32 result, 2^-11 (float16) or 2^-8 (bfloat16)"}},
    {"gates_forward activation accuracy", run_activation_accuracy, CASES(one_case), F32, 0,
     {6e-7, 0, 0, 0, 0, 0,
      "per element relative, |x| in 1e-7..1e2: sigmoid and tanh within 5 ulp (2^-23 = 1.2e-7) "
      "of the double functions"}},
    {"gates_backward", run_gates_backward, CASES(gates_shapes), ALL, 0,
     {1e-5, 1e-3, 8e-3, 0, 0, 0,
      "float32 from the stored activations: a few roundings of products of values <= 2 and "
      "tanhf's few ulp; dz stored: one rounding, 2^-11 / 2^-8; dc_prev float32 for every dtype"}},
    {"gates_forward + gates_backward vs finite differences", run_gates_fd, CASES(gates_fd_shapes),
     F32, 0,
     {1e-5, 0, 0, 0, 0, 0,
      "central differences of step 1e-6 in double are exact to ~1e-9; the rest is float32 "
      "rounding as in gates_backward"}},
    {"gates_forward with peepholes", run_gates_forward, CASES(gates_peep_shapes), ALL, 0,
     {2e-6, 1e-3, 8e-3, 0, 0, 0,
      "as gates_forward; w_ci c_prev, w_cf c_prev (|w| <= 1, |c_prev| <= 2) and w_co c add a "
      "rounding each to a pre-activation"}},
    {"gates_backward with peepholes", run_gates_backward, CASES(gates_peep_shapes), ALL, 0,
     {2e-5, 1e-3, 8e-3, 0, 0, 0,
      "as gates_backward; dz_o w_co into dc_t and dz_i w_ci + dz_f w_cf into dc_prev add a few "
      "float32 roundings of values <= 4"}},
    {"peephole_filter", run_peephole_filter, CASES(gates_peep_shapes), ALL, 0,
     {1e-5, 1e-5, 1e-5, 0, 0, 0,
      "a float32 sum of N products per position (per channel: N * P in double) from the "
      "stored values: only summation order differs; the result is float32 for every dtype"}},
    {"gates_forward + gates_backward + peephole_filter vs finite differences", run_gates_fd,
     CASES(gates_peep_fd_shapes), F32, 0,
     {2e-5, 0, 0, 0, 0, 0,
      "central differences of step 1e-6 in double are exact to ~1e-9; the rest is float32 "
      "rounding as in gates_backward, and a sum of up to N P = 74 float32 products"}},
    {"gates_forward with the fused bias", run_gates_forward_bias, CASES(gates_shapes), ALL, 0,
     {1e-6, 1e-3, 8e-3, 0, 0, 0,
      "as gates_forward, from z + bias summed in float (|z + bias| <= 4); against the unfused "
      "slots (conv_forward's bias, then the cell) twice that: they round z + bias to the "
      "storage type once more"}},
    {"gates_forward with peepholes and the fused bias", run_gates_forward_bias,
     CASES(gates_peep_shapes), ALL, 0,
     {2e-6, 1e-3, 8e-3, 0, 0, 0, "as gates_forward with peepholes, and the bias as above"}},
    {"gates_backward with the fused bias gradient", run_gates_backward_bias, CASES(gates_shapes),
     ALL, 0,
     {1e-5, 1e-3, 8e-3, 0, 0, 0,
      "dz, dc_prev as gates_backward; dbias (float32 for every dtype) sums the stored dz it "
      "wrote, N P <= 2304 terms <= 1 per channel, as conv_backward_filter's bias gradient "
      "does: only summation order differs (float32 partial sums on a GPU)"}},
    {"gates_backward with peepholes and the fused bias gradient", run_gates_backward_bias,
     CASES(gates_peep_shapes), ALL, 0,
     {2e-5, 1e-3, 8e-3, 0, 0, 0, "as gates_backward with peepholes, and dbias as above"}},
    {"conv_* channels last (NHWC)", run_conv_nhwc, CASES(conv_shapes), F32, 0, CONV_TOL},
    {"conv_* channels last (NHWC), half types", run_conv_nhwc, CASES(conv_half_shapes), HALF, 0,
     CONV_TOL},
    {"conv_* channels last (NHWC) at element offset 1", run_conv_nhwc, CASES(conv_offset_shapes),
     ALL, 1, CONV_TOL},
    {"gates_forward channels last (NHWC)", run_gates_forward_nhwc, CASES(gates_shapes), ALL, 0,
     {1e-6, 1e-3, 8e-3, 0, 0, 0, "as gates_forward, the elements in another order"}},
    {"gates_backward channels last (NHWC)", run_gates_backward_nhwc, CASES(gates_shapes), ALL, 0,
     {1e-5, 1e-3, 8e-3, 0, 0, 0, "as gates_backward"}},
    {"gates_forward channels last (NHWC) with peepholes per channel", run_gates_forward_nhwc,
     CASES(gates_peep_shapes), ALL, 0,
     {2e-6, 1e-3, 8e-3, 0, 0, 0, "as gates_forward with peepholes"}},
    {"gates_backward channels last (NHWC) with peepholes per channel", run_gates_backward_nhwc,
     CASES(gates_peep_shapes), ALL, 0,
     {2e-5, 1e-3, 8e-3, 0, 0, 0, "as gates_backward with peepholes"}},
    {"peephole_filter channels last (NHWC), per channel", run_peephole_filter_nhwc,
     CASES(gates_peep_shapes), ALL, 0, {1e-5, 1e-5, 1e-5, 0, 0, 0, "as peephole_filter"}},
    {"gates_forward channels last (NHWC) with the fused bias", run_gates_forward_bias_nhwc,
     CASES(gates_shapes), ALL, 0,
     {1e-6, 1e-3, 8e-3, 0, 0, 0, "as gates_forward with the fused bias"}},
    {"gates_backward channels last (NHWC) with the fused bias gradient",
     run_gates_backward_bias_nhwc, CASES(gates_shapes), ALL, 0,
     {1e-5, 1e-3, 8e-3, 0, 0, 0, "as gates_backward with the fused bias gradient"}},
    {"gates_* refusals", run_gates_errors, NULL, 1, ALL, 0, EXACT("statuses")},
    {"loss: MSE, unweighted (the plain step's)", run_loss, CASES(mse_cases), ALL, 0,
     {1e-6, 0, 0, 0, 0, 1e-10,
      "loss: the float32 differences squared and summed in double, so only summation order "
      "differs (1e-10 relative); gradient: scale * 2/n and the difference rounded to float32, "
      "a few ulp"}},
    {"loss refusals: MSE (f NULL or by kind)", run_mse_errors, NULL, 1, F32, 0,
     EXACT("statuses")},
    {"loss", run_loss, CASES(loss_cases), ALL, 0,
     {1e-5, 0, 0, 0, 0, 1e-5,
      "each element's loss in float32 (expf, logf within a few ulp; BCE's (1 - y) x + "
      "softplus(-x) cancels to ~1e-6 of the element's loss where x << 0), summed in double: "
      "1e-5 relative; gradient: sign, clamp or sigmoid in float32 times scale / n, a few ulp of "
      "the largest (1e-5, as torch's own CPU/CUDA agreement)"}},
    {"weighted loss", run_weighted_loss, CASES(weighted_loss_cases), ALL, 0,
     {1e-5, 0, 0, 0, 0, 1e-5,
      "as the loss row, each element's loss and gradient times its weight (a float32 product "
      "in the gradient); a weight of ones: the unweighted call's bits exactly"}},
    {"loss refusals", run_loss_errors, NULL, 1, F32, 0, EXACT("statuses")},
    {"sum_squares", run_sum_squares, CASES(sumsq_cases), F32, 0,
     {0, 0, 0, 0, 0, 1e-12,
      "squares of floats are exact in double; only the summation order differs (1e-12 "
      "relative); inf and NaN exactly"}},
    {"grad_add (optional)", run_grad_add, CASES(grad_add_cases), F32, 0,
     EXACT("one float32 addition per element: bit for bit")},
    {"grad_unscale", run_grad_unscale, CASES(unscale_cases), F32, 0,
     EXACT("g * inv_scale is one float32 rounding: equal bit for bit; the flag exactly")},
    {"adam_update", run_adam, CASES(adam_cases), F32, 0,
     {1e-6, 0, 0, 0, 0, 0,
      "float32 state against torch's update in double over a few steps: a few roundings of "
      "values <= 1"}},
    {"sgd_update", run_sgd, CASES(sgd_cases), F32, 0,
     {1e-6, 0, 0, 0, 0, 0, "float32 against torch's update in double: a few roundings"}},
    {"rmsprop_update", run_rmsprop, CASES(rms_cases), F32, 0,
     {1e-5, 0, 0, 0, 0, 0,
      "float32 state against torch's update in double over a few steps: the first step "
      "divides g by about |g| sqrt(1 - alpha), so a few roundings of values up to "
      "1 / sqrt(1 - alpha)"}},
    {"rmsprop_check", run_guard, CASES(rms_guard_cases), F32, 0,
     EXACT("the first fault's key is an integer: equal to the reference's, as adam_check")},
    {"adam_check", run_guard, CASES(adam_guard_cases), F32, 0,
     EXACT("the first fault's key (element, array, NaN) is an integer: equal to the "
           "reference's; each planted value is orders of magnitude from float32's overflow, so "
           "float32 operation order cannot move it")},
    {"sgd_check", run_guard, CASES(sgd_guard_cases), F32, 0,
     EXACT("the first fault's key is an integer: equal to the reference's, as adam_check")},
    {"scratch_bytes set_scratch runtime_bytes", run_scratch, NULL, 1, F32, 0,
     EXACT("bytes and keys exactly; the loss as MSE's 1e-10")},
    {"gather_rows (optional)", run_gather, CASES(gather_cases), F32, 0,
     EXACT("bytes, bit for bit")},
    {"mask_mul", run_mask_mul, CASES(mask_cases), ALL, 0,
     {2e-7, 1e-3, 8e-3, 0, 0, 0,
      "float32: a product and a sum, each rounded once (2^-24 each); stored: "
      "one rounding of the float32 result, 2^-11 (float16) or 2^-8 (bfloat16)"}},
    {"mask_draw", run_mask_draw, CASES(draw_cases), F32, 0,
     EXACT("integer arithmetic and a comparison: bit for bit, every backend")},
    {"update_step (the step's end, decided where it runs)", run_update_step, NULL, 1, F32, 0,
     EXACT("the same arithmetic as the synchronising slots, decided on the device: bit for "
           "bit")},
    {"loss_acc", run_loss_acc, NULL, 1, F32, 0,
     EXACT("the host's order and roundings of the partial sums: bit for bit")},
    {"step_vals graph_begin graph_end graph_info (optional)", run_step_graphs, NULL, 1, F32, 0,
     EXACT("bytes, bit for bit; counts exactly")},
    {"bind_thread", run_bind_thread, NULL, 1, F32, 0, EXACT("bytes, bit for bit")},
    {"destroy", run_destroy, NULL, 1, F32, 0, EXACT("statuses")},
};

/* Every slot of backend.h's list has a row: its name a word of some row's
 * label. A slot added to the list without a row fails here. */
static int slots_covered(void) {
  static const char *const slots[] = {
#define SLOT_NAME_(step, opt, ret, name, params, args) #name,
      CL_BACKEND_SLOTS(SLOT_NAME_)
#undef SLOT_NAME_
  };
  int missing = 0;
  for (int k = 0; k < COUNT(slots); k++) {
    const size_t len = strlen(slots[k]);
    int found = 0;
    for (int i = 0; i < COUNT(ops) && !found; i++)
      for (const char *at = ops[i].slot; !found && (at = strstr(at, slots[k])) != NULL; at += len)
        found = (at == ops[i].slot || at[-1] == ' ') && (at[len] == ' ' || at[len] == '\0');
    if (!found) printf("FAIL slot %s: no row of ops[] tests it\n", slots[k]);
    missing += !found;
  }
  ctest_checks++;
  ctest_failures += missing > 0;
  printf("%s every one of the %d slots of backend.h has a row\n", missing ? "FAIL" : "ok  ",
         COUNT(slots));
  return missing == 0;
}

/* ---- the CPU backend's own properties --------------------------------------------------- */

/* What only the CPU backend promises: its thread count, no queue and no
 * staging, and convolutions called from inside a parallel region (nested
 * regions are inactive: each runs on one thread) still right. */
static void cpu_own(variant *v) {
  cl_backend *be = v->be, *dflt = NULL;
  cl_status st0 = cl_backend_cpu_create(0, &dflt);
  expect(v, st0 == CL_OK && dflt->n_threads >= 1 && dflt->iface->host_accessible &&
                strcmp(dflt->iface->name, "cpu") == 0,
         "create(0 threads): %d threads (OpenMP's default), host-accessible",
         dflt ? dflt->n_threads : 0);
  cl_backend_destroy(dflt);
  expect(v, be->iface->synchronize == NULL && be->iface->host_stage == NULL,
         "no queue to wait for, nothing to stage (synchronize, host_stage NULL)");
  static const cl_conv_shape shapes[] = {{4, 6, 8, 8, 20, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
                                         {4, 20, 6, 5, 4, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
                                         {2, 20, 9, 8, 24, 3, 3, 1, 3, CL_F32, 0, CL_NCHW, 0}};
  enum { NS = COUNT(shapes), NT = 2 * NS }; /* each shape forward, then backward filter */
  conv_data d[NS];
  for (int i = 0; i < NS; i++) d[i] = conv_make(&shapes[i], 1, 1);
  float *y[NT], *dw[NT], *db[NT];
  unsigned char *ws[NT];
  cl_status st[NT];
  for (int t = 0; t < NT; t++) {
    const conv_data *c = &d[t % NS];
    size_t bytes = 0;
    cl_backend_conv_workspace_any(be, &c->s, &bytes);
    ws[t] = xmalloc(bytes + 64);
    y[t] = from_storage(CL_F32, c->y0s, c->ny);
    dw[t] = from_storage(CL_F32, c->dw0, c->nw);
    db[t] = from_storage(CL_F32, c->db0, c->s.K);
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(2) schedule(static, 1)
#endif
  for (int t = 0; t < NT; t++) {
    const conv_data *c = &d[t % NS];
    st[t] = t < NS ? be->iface->conv_forward(be, &c->s, c->xs, c->w, c->b, y[t], 1, ws[t])
                   : be->iface->conv_backward_filter(be, &c->s, c->dys, c->xs, dw[t], db[t], ws[t]);
  }
  for (int t = 0; t < NT; t++) {
    const conv_data *c = &d[t % NS];
    char what[120];
    snprintf(what, sizeof what, "inside a parallel region: %s N%d C%d K%d d%dx%d",
             t < NS ? "forward" : "backward filter", c->s.N, c->s.C, c->s.K, c->s.dh, c->s.dw);
    expect(v, st[t] == CL_OK, "%s: %s", what, status_str(st[t]));
    if (t < NS) compare(v, what, y[t], c->ry, c->ny, 2e-5);
    else
      compare(v, what, dw[t], c->rdw, c->nw, 2e-5), compare(v, what, db[t], c->rdb, c->s.K, 2e-5);
    free(y[t]), free(dw[t]), free(db[t]), free(ws[t]);
  }
  for (int i = 0; i < NS; i++) conv_free(&d[i]);
}

/* ---- finding the backends ---------------------------------------------------------------- */

static variant *add_variant(cl_backend *be, unsigned half_in_storage, const char *fmt, ...) {
  if (n_vs == MAX_VARIANTS) {
    fprintf(stderr, "test_backend_ops: more than %d backends\n", MAX_VARIANTS);
    exit(2);
  }
  variant *v = &vs[n_vs++];
  memset(v, 0, sizeof *v);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->name, sizeof v->name, fmt, ap);
  va_end(ap);
  v->be = be;
  v->half_conv_in_storage = half_in_storage;
  return v;
}

/* Winograd forced (cpu_winograd.c: every float32 3 x 3 and 5 x 5 case
 * without groups or dilation, forward and backward data, runs through it;
 * the others through cpu_conv.c's paths): F(2x2, r) and F(4x4, r) on each
 * internal GEMM kind at 2 and 3 threads (each kind has its own transform
 * loops; a batch of one chunk is split by channels and tile elements, in
 * parts that 3 threads make uneven).
 * The CPU's forms name themselves "winograd ..." (not cuDNN's "WINOGRAD"),
 * so algo_tol leaves them at the direct algorithms' 2e-5: measured over this
 * suite's cases the worst error scaled by the largest result was 4.2e-7
 * (F(2x2,3x3)), 3.1e-6 (F(2x2,5x5)) and 6.3e-6 (F(4x4,3x3)), the transforms'
 * entries (up to 8 in F(4x4,3x3)'s A^T, 1/24 in G) amplifying the products'
 * rounding some 10x over direct sums, still within 2e-5; F(4x4,5x5) (its
 * B^T's entries up to 21/4) is held to the same, and test_cpu_wino_rule
 * prints its error on the steps' shapes. F(6x6,3x3) (F(4x4,5x5)'s points,
 * A^T's entries up to 32) reached 2.4e-5 on backward data of a float16
 * case (N3 C10 7x9 K136) once a row ahead of this one drew other random
 * inputs: it is held to 5e-5 (the default rule runs it forward and backward
 * filter only). */
/* A CPU backend of `threads` on GEMM kind `kind`, its context for the
 * caller to force a path or an algorithm on. */
static cl_backend *cpu_backend(int threads, int kind) {
  cl_backend *be = NULL;
  if (cl_backend_cpu_create(threads, &be) != CL_OK) {
    fprintf(stderr, "test_backend_ops: cannot create the cpu backend\n");
    exit(2);
  }
  ((cl_cpu_ctx *)be->context)->gemm = (cl_cpu_gemm_kind)kind;
  return be;
}

static void add_cpu_winograd_variants(void) {
  static const char *names[] = {"", "", "winograd", "winograd4", "", "winograd6"};
  for (int algo = 2; algo <= 5; algo += algo == 3 ? 2 : 1)
    for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_AVX512; kind++)
      for (int t = 2; t <= (under_valgrind ? 2 : 3); t++) {
        if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
        cl_backend *be = cpu_backend(t, kind);
        cl_cpu_ctx *ctx = be->context;
        ctx->conv_algo = algo;
        add_variant(be, cl_cpu_bf16_dot_of(ctx->gemm) ? 1u << CL_BF16 : 0u, "cpu %s t%d %s",
                    cl_cpu_gemm_name(ctx->gemm), t, names[algo]);
      }
}

/* Each GEMM kind this machine runs at 1, 2 and 3 threads (the convolution
 * path chosen automatically), and each path forced at 2 threads for the
 * internal kinds. */
static void add_cpu_variants(void) {
  static const char *paths[] = {"auto", "im2col", "direct"};
  for (int path = 0; path <= 2; path++)
    for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_BLAS; kind++) {
      if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
      if (path > 0 && kind == CL_CPU_GEMM_BLAS) continue;
      for (int t = path == 0 ? 1 : 2; t <= (path == 0 && !under_valgrind ? 3 : 2); t++) {
        cl_backend *be = cpu_backend(t, kind);
        cl_cpu_ctx *ctx = be->context;
        ctx->conv_path = path;
        add_variant(be, cl_cpu_bf16_dot_of(ctx->gemm) ? 1u << CL_BF16 : 0u, "cpu %s t%d %s",
                    cl_cpu_gemm_name(ctx->gemm), t, paths[path]);
      }
    }
  add_cpu_winograd_variants();
}

#ifdef CL_HAVE_CUDA
/* Is a GPU known to be here: CONVLSTM_REQUIRE_GPU=1, or nvidia-smi lists one? */
static int gpu_expected(const char **why) {
  const char *req = getenv("CONVLSTM_REQUIRE_GPU");
  if (req && strcmp(req, "1") == 0) {
    *why = "CONVLSTM_REQUIRE_GPU=1";
    return 1;
  }
  FILE *p = popen("nvidia-smi -L 2>/dev/null", "r");
  if (!p) return 0;
  char line[256];
  int found = 0;
  while (fgets(line, sizeof line, p)) found |= strncmp(line, "GPU ", 4) == 0;
  pclose(p);
  *why = "nvidia-smi -L lists a GPU";
  return found;
}
#endif

/* The CUDA backend with strict float32 (CONVLSTM_CUDA_TF32=0), with
 * backward data in slices of few images (a scratch limit of 734 bytes
 * slices N5 C3 6x9 into 2, 2 and 1 images and 17-channel 12x10 images into
 * one each), with cuDNN's algorithms timed at the first call (their
 * workspace must still be within what conv_workspace() said), and as
 * created (TF32 allowed, PyTorch's default; its float32 convolutions held
 * to algo_tol's TF32 tolerance where cuDNN says it picked tensor cores).
 * Returns 0 when CUDA was required and could not start. */
static int add_cuda_variants(void) {
  cl_gpu_info info;
  char err[CL_ERRMSG_LEN] = "";
  cl_status is = cl_backend_cuda_device_info(-1, &info, err, sizeof err);
  if (!cl_backend_cuda_available()) {
    cl_backend *be = (cl_backend *)&info; /* any non-NULL value: create must reset it */
    char cerr[CL_ERRMSG_LEN] = "";
    cl_status st = cl_backend_cuda_create(&be, cerr, sizeof cerr);
    if (st == CL_OK || be != NULL) {
      printf("FAIL cuda: created without a usable GPU\n");
      ctest_checks++, ctest_failures++;
      return 0;
    }
#ifdef CL_HAVE_CUDA
    const char *why = "";
    if (gpu_expected(&why)) {
      printf("FAIL cuda: %s, but the CUDA backend cannot start: %s\n", why, cerr);
      ctest_checks++, ctest_failures++;
      return 0;
    }
#endif
    printf("skip cuda: %s (create: %s)\n", err[0] ? err : "no usable GPU", status_str(st));
    return 1;
  }
  if (is == CL_OK)
    printf("cuda: device %d of %d: %s, compute capability %d.%d, %d SMs, %.0f MiB; driver %d, "
           "runtime %d, cuDNN %zu\n",
           info.device, info.n_devices, info.name, info.cc_major, info.cc_minor,
           info.multiprocessors, info.mem_total / 1048576.0, info.driver_version,
           info.runtime_version, info.cudnn_version);
  static const struct {
    const char *env, *value, *name;
    int tf32;
  } ways[] = {{NULL, NULL, "cuda", 0},
              {"CONVLSTM_CUDA_DX_SCRATCH_MB", "0.0007", "cuda [dx slices]", 0},
              {"CONVLSTM_CUDNN_BENCHMARK", "1", "cuda [cudnnFindEx]", 0},
              {NULL, NULL, "cuda [tf32, default]", 1}};
  int ok = 1;
  for (int i = 0; i < COUNT(ways); i++) {
    if (ways[i].env) setenv(ways[i].env, ways[i].value, 1);
    if (!ways[i].tf32) setenv("CONVLSTM_CUDA_TF32", "0", 1);
    cl_backend *be = NULL;
    cl_status st = cl_backend_cuda_create(&be, err, sizeof err);
    if (ways[i].env) unsetenv(ways[i].env);
    unsetenv("CONVLSTM_CUDA_TF32");
    if (st != CL_OK) {
      printf("FAIL %s: cl_backend_cuda_create: %s: %s\n", ways[i].name, status_str(st), err);
      ctest_checks++, ctest_failures++;
      ok = 0;
      continue;
    }
    add_variant(be, HALF, "%s", ways[i].name);
  }
  return ok;
}

/* The scratch of the backends that ask for one (CUDA: the loss's partial
 * sums, grad_unscale's flag, the guards' fault word), allocated through the
 * backend's own alloc as core/model.c allocates it, and handed over before
 * any kernel runs; freed before the backend is destroyed. 0 when one could
 * not be had (a failure, reported). */
static int give_scratch(variant *v) {
  const struct cl_backend_i *f = v->be->iface;
  if (!f->scratch_bytes || !f->set_scratch) return 1;
  cl_status st = f->alloc(v->be, f->scratch_bytes, &v->scratch);
  if (st != CL_OK || !v->scratch)
    return expect(v, 0, "the backend's scratch (%zu bytes): %s: %s", f->scratch_bytes,
                  status_str(st), v->be->err);
  f->set_scratch(v->be, v->scratch);
  return 1;
}

static void variant_end(variant *v) {
  if (v->scratch) v->be->iface->free(v->be, v->scratch);
  v->scratch = NULL;
  cl_backend_destroy(v->be);
}

/* Keeps the backends whose name contains `only` (the -b option). */
static void keep_only(const char *only) {
  int kept = 0;
  for (int i = 0; i < n_vs; i++) {
    if (strstr(vs[i].name, only)) vs[kept++] = vs[i];
    else cl_backend_destroy(vs[i].be);
  }
  n_vs = kept;
}

int main(int argc, char **argv) {
  const char *only = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "-v") == 0) verbose = 1;
    else if (strcmp(argv[i], "-x") == 0) fail_fast = 1;
    else if (strcmp(argv[i], "-b") == 0 && i + 1 < argc) only = argv[++i];
    else {
      fprintf(stderr, "usage: %s [-v] [-x] [-b BACKEND_NAME_PART] (or CONVLSTM_TEST_BACKENDS)\n",
              argv[0]);
      return 2;
    }
  }
  /* the GPU session's ctest stage runs the CUDA variants only: the CPU ones
   * run in CI, and all 34 of an H200's host took its stage's time */
  const char *env_only = getenv("CONVLSTM_TEST_BACKENDS");
  if (!only && env_only && env_only[0]) only = env_only;
  under_valgrind = ctest_under_valgrind();
  /* the CPU's bfloat16 kernels are checked wherever the CPU has them, also
   * where they do not pay and would not run by default (cl_cpu_bf16_dot_of);
   * CONVLSTM_BF16_DOT=0 set by the caller still checks the float32 path */
  setenv("CONVLSTM_BF16_DOT", "1", 0);
  if (under_valgrind) printf("(under valgrind: fewer threads and no large cases)\n");
  slots_covered();
  add_cpu_variants();
  add_cuda_variants();
  if (only) keep_only(only);
  if (n_vs == 0) {
    printf("no backend to test: skipped\n");
    return ctest_failures ? 1 : 77;
  }
  for (int i = 0; i < n_vs; i++) give_scratch(&vs[i]);
  printf("%d backends:", n_vs);
  for (int i = 0; i < n_vs; i++) printf("%s %s", i ? "," : "", vs[i].name);
  printf("\n");

  for (int i = 0; i < COUNT(ops); i++) {
    const row *r = &ops[i];
    row_worst = 0.0, row_worst_at[0] = '\0', row_checks = row_failed = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    r->run(r);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    const tol *t = &r->tol;
    printf("%s %-64s %5d checks, %.1fs", row_failed ? "FAIL" : "ok  ", r->slot, row_checks,
           (t1.tv_sec - t0.tv_sec) + 1e-9 * (t1.tv_nsec - t0.tv_nsec));
    if (row_worst_at[0]) printf("; worst %.2f of tol %s", row_worst, row_worst_at);
    printf("\n     tol");
    if (t->f32 == 0 && t->f16 == 0 && t->scalar == 0) printf(" exact");
    else if (r->dtypes & F32) printf(" f32 %.0e", t->f32);
    if (r->dtypes & HALF && t->f16 > 0) printf(" f16 %.0e bf16 %.0e", t->f16, t->bf16);
    if (t->f16_cast > 0) printf(" (in storage: %.0e / %.0e)", t->f16_cast, t->bf16_cast);
    if (t->scalar > 0) printf(" loss %.0e", t->scalar);
    printf(": %s\n", t->why);
  }
  for (int i = 0; i < n_vs; i++)
    if (strcmp(vs[i].be->iface->name, "cpu") == 0) cpu_own(&vs[i]);

  for (int i = 0; i < n_vs; i++) {
    cl_status st = cl_backend_synchronize(vs[i].be);
    expect(&vs[i], st == CL_OK, "synchronize after all of the above: %s", status_str(st));
    printf("%s %-28s %5d checks, %d failed\n", vs[i].failed ? "FAIL" : "ok  ", vs[i].name,
           vs[i].checks, vs[i].failed);
    variant_end(&vs[i]);
  }
  return ctest_done("test_backend_ops");
}
