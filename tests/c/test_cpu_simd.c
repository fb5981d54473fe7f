/*
 * tests/c/test_cpu_simd.c -- the CPU backend's vector kernels below its
 * slots, which tests/c/test_backend_ops.c reaches only through them: the
 * GEMM of every instruction set (all four transpose combinations, odd and
 * blocked sizes, padded leading dimensions, C not read when beta is 0, its
 * packing scratch used to the byte it reports, threads calling it at once)
 * against a naive product in double, a transposed A read in place equal bit
 * for bit to the same A packed, and the float16 / bfloat16 load and
 * store against host/half.h bit for bit; a kind with several register tiles
 * (AVX-512) with each tile forced, all tiles equal bit for bit, and the
 * per-shape timing that chooses among them settling. Below the GEMM:
 * the row sums and the rows plus a bias that the convolutions sum and
 * store their bias with, on every instruction set, bit for bit against
 * scalar loops.
 *
 * A standalone program: prints one line per check (-q: failures only) and
 * exits 1 on any failure. Not a benchmark (bench_cpu_conv.c).
 */
#define _POSIX_C_SOURCE 200112L /* setenv */
#define _DEFAULT_SOURCE         /* MAP_ANONYMOUS */
#include "host/half.h"       /* the reference float16 / bfloat16 conversions */
#include "cpu/cpu_kernels.h" /* cl_cpu_sgemm*, cl_cpu_load, cl_cpu_store */
#include "ctest.h"           /* the one RNG of the C tests (uniform01) */

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int verbose = 1;
/* Under valgrind (50x slower) the largest products are left out. */
static int under_valgrind;

static double uniform(void) { return 2.0 * uniform01(NULL) - 1.0; } /* in [-1, 1) */

static int rand_int(int lo, int hi) { /* in [lo, hi] */
  return lo + (int)(uniform01(NULL) * (hi - lo + 1)) % (hi - lo + 1);
}

static void *xmalloc(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) {
    fprintf(stderr, "test_cpu_simd: out of memory\n");
    exit(2);
  }
  return p;
}

static float *rand_floats(size_t n) {
  float *p = xmalloc(sizeof(float) * n);
  for (size_t i = 0; i < n; i++) p[i] = (float)uniform();
  return p;
}

/* max |got - ref| <= tol * max |ref|, all finite. */
static int check_close(const char *what, const float *got, const double *ref, size_t n,
                       double tol) {
  double scale = 0.0, max_abs = 0.0;
  int finite = 1;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  for (size_t i = 0; i < n; i++) {
    if (!isfinite(got[i])) finite = 0;
    max_abs = fmax(max_abs, fabs((double)got[i] - ref[i]));
  }
  const double err = max_abs / (scale > 0 ? scale : 1.0);
  const int ok = finite && err <= tol;
#ifdef _OPENMP
#pragma omp critical(test_report)
#endif
  {
    ctest_checks++;
    if (!ok) ctest_failures++;
    if (verbose || !ok)
      printf("%s %-58s max abs %.2e (scaled %.2e, tol %.0e)\n", ok ? "ok  " : "FAIL", what, max_abs,
             err, tol);
  }
  return ok;
}

static void check_true(int cond, const char *fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ctest_checks++;
  if (!cond) ctest_failures++;
  if (verbose || !cond) printf("%s %s\n", cond ? "ok  " : "FAIL", msg);
}

static const char *dtype_name(cl_dtype t) {
  return t == CL_F32 ? "float32" : t == CL_F16 ? "float16" : "bfloat16";
}

/* ---- GEMM ----------------------------------------------------------------- */

static void ref_gemm(int tA, int tB, int M, int N, int K, double alpha, const float *A, int lda,
                     const float *B, int ldb, double beta, const float *C0, int ldc, double *out) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0.0;
      for (int p = 0; p < K; p++)
        s += (double)(tA ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p]) *
             (double)(tB ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j]);
      out[(size_t)i * N + j] = alpha * s + (beta != 0.0 ? beta * C0[(size_t)i * ldc + j] : 0.0);
    }
}

enum { CANARY = 256 };

static void fill_canary(unsigned char *p) { memset(p, 0xA5, CANARY); }

static int canary_intact(const unsigned char *p) {
  for (int i = 0; i < CANARY; i++)
    if (p[i] != 0xA5) return 0;
  return 1;
}

/* One product: scratch sized exactly with a canary behind it, C padded by
 * ldc and, for beta == 0, filled with NaN to prove it is not read. */
static void gemm_case(cl_cpu_gemm_kind kind, int threads, int tA, int tB, int M, int N, int K,
                      float alpha, float beta, int pad, int quiet) {
  int lda = (tA ? M : K) + pad, ldb = (tB ? K : N) + pad, ldc = N + pad;
  float *A = rand_floats((size_t)(tA ? K : M) * lda), *B = rand_floats((size_t)(tB ? N : K) * ldb);
  float *C = rand_floats((size_t)M * ldc);
  if (beta == 0.0f)
    for (size_t i = 0; i < (size_t)M * ldc; i++) C[i] = NAN;
  double *ref = xmalloc(sizeof(double) * M * N);
  ref_gemm(tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, ref);
  size_t sb = threads > 1 ? cl_cpu_sgemm_threaded_scratch_bytes(kind, threads, M, N, K)
                          : cl_cpu_sgemm_scratch_bytes(kind, M, N, K);
  unsigned char *scratch = xmalloc(sb + CANARY);
  fill_canary(scratch + sb);
  int rc = threads > 1
               ? cl_cpu_sgemm_threaded(kind, threads, tA, tB, M, N, K, alpha, A, lda, B, ldb, beta,
                                       C, ldc, scratch)
               : cl_cpu_sgemm(kind, tA, tB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, scratch);
  float *got = xmalloc(sizeof(float) * M * N);
  for (int i = 0; i < M; i++) memcpy(got + (size_t)i * N, C + (size_t)i * ldc, sizeof(float) * N);
  char what[160];
  snprintf(what, sizeof what, "sgemm %s t%d %c%c M=%d N=%d K=%d a=%g b=%g", cl_cpu_gemm_name(kind),
           threads, tA ? 'T' : 'N', tB ? 'T' : 'N', M, N, K, alpha, beta);
  int v = verbose;
  verbose = v && !quiet;
  check_close(what, got, ref, (size_t)M * N, 1e-5);
  check_true(rc == 0 && canary_intact(scratch + sb), "%s: scratch within %zu bytes", what, sb);
  verbose = v;
  free(A), free(B), free(C), free(ref), free(got), free(scratch);
}

static void test_gemm_kind(cl_cpu_gemm_kind kind) {
  printf("-- sgemm, %s\n", cl_cpu_gemm_name(kind));
  /* Small and odd sizes in all four transpose combinations, printed as one
   * summary line per combination unless one fails. */
  for (int t = 0; t < 4; t++) {
    int before = ctest_failures;
    for (int rep = 0; rep < 40; rep++) {
      int M = rand_int(1, 70), N = rand_int(1, 70), K = rand_int(1, 70);
      float beta = (rep % 3 == 0) ? 0.0f : (rep % 3 == 1 ? 1.0f : -0.5f);
      gemm_case(kind, 1, t & 1, t >> 1, M, N, K, rep % 4 == 0 ? 2.0f : 1.0f, beta, rep % 5, 1);
    }
    check_true(ctest_failures == before, "sgemm %s %c%c: 40 random sizes in 1..70",
               cl_cpu_gemm_name(kind), (t & 1) ? 'T' : 'N', (t >> 1) ? 'T' : 'N');
  }
  gemm_case(kind, 1, 0, 0, 1, 1, 1, 1.0f, 0.0f, 0, 0);
  gemm_case(kind, 1, 0, 0, 5, 7, 0, 1.0f, 0.5f, 0, 0); /* K == 0: C = beta C */
  if (!under_valgrind) {
    gemm_case(kind, 1, 0, 0, 256, 576, 576, 1.0f, 0.0f, 0, 0);
    gemm_case(kind, 1, 1, 0, 576, 576, 256, 1.0f, 1.0f, 0, 0);
    gemm_case(kind, 1, 0, 1, 256, 576, 576, 1.0f, 1.0f, 0, 0);
  }
  gemm_case(kind, 1, 1, 1, 300, 1000, 600, 0.5f, 0.25f, 3, 0); /* several blocks each way */
  gemm_case(kind, 2, 0, 0, 256, 576, 300, 1.0f, 0.0f, 0, 0);
  gemm_case(kind, 3, 0, 1, 37, 500, 77, 1.0f, 1.0f, 1, 0);
  gemm_case(kind, 2, 1, 0, 700, 20, 33, 1.0f, 0.0f, 0, 0);
}

/* Threads calling the single-threaded GEMM at once, and the threaded one
 * from inside a parallel region, must agree with the serial result. */
static void test_gemm_reentrant(cl_cpu_gemm_kind kind) {
  enum { M = 70, N = 90, K = 110, T = 4 };
  float *A = rand_floats(M * K), *B = rand_floats(K * N), *C = xmalloc(sizeof(float) * T * M * N);
  double *ref = xmalloc(sizeof(double) * M * N);
  ref_gemm(0, 0, M, N, K, 1.0, A, K, B, N, 0.0, NULL, N, ref);
  int rc = 0;
#ifdef _OPENMP
#pragma omp parallel for num_threads(T) reduction(| : rc)
#endif
  for (int t = 0; t < T; t++)
    rc |= t % 2 ? cl_cpu_sgemm(kind, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C + t * M * N, N, NULL)
                : cl_cpu_sgemm_threaded(kind, 2, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f,
                                        C + t * M * N, N, NULL);
  int before = ctest_failures;
  for (int t = 0; t < T; t++) check_close("(thread)", C + t * M * N, ref, M * N, 1e-5);
  check_true(rc == 0 && ctest_failures == before, "sgemm %s from %d threads at once",
             cl_cpu_gemm_name(kind), T);
  free(A), free(B), free(C), free(ref);
}

/* C = A B with the named tile forced (CONVLSTM_GEMM_TILE), on `threads`. */
static void gemm_with_tile(cl_cpu_gemm_kind kind, const char *tile, int threads, int tA, int tB,
                           int M, int N, int K, const float *A, const float *B, float *C) {
  setenv("CONVLSTM_GEMM_TILE", tile, 1);
  int lda = tA ? M : K, ldb = tB ? K : N;
  if (threads > 1)
    cl_cpu_sgemm_threaded(kind, threads, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, 0.5f, C, N, NULL);
  else
    cl_cpu_sgemm(kind, tA, tB, M, N, K, 1.0f, A, lda, B, ldb, 0.5f, C, N, NULL);
  unsetenv("CONVLSTM_GEMM_TILE");
}

/* The index of the tile named `name`, or -1. */
static int tile_index(cl_cpu_gemm_kind kind, const char *name) {
  for (int t = 0; t < cl_cpu_gemm_tiles(kind); t++)
    if (strcmp(cl_cpu_gemm_tile_name(kind, t), name) == 0) return t;
  return -1;
}

/* A product too short to time (under 2 MFLOP) takes the tile that pads C
 * least, 16 x 16's area weighed 5/4, worked out here by hand for AVX-512's
 * 8 x 48, 12 x 32 and 16 x 16: a Winograd forward GEMM of a 16x16 map's 64
 * tiles (192 x 64: 8 x 48 pads 64 columns to 96, 12 x 32 not at all, 16 x
 * 16 not at all but weighs more), its backward filter (192 x 48: 12 x 32
 * pads 48 to 64, 8 x 48 not at all), a tie (the first tile), a view in
 * place, whose tie with 12 x 32 goes to the earlier, packed tile, and a
 * first layer's 16 channels: backward filter's 192 x 16, which 8 x 48 pads
 * to 48 columns and 12 x 32 to 32 (16 x 16's 3072 elements weigh 3840,
 * less than 6144), and backward data's 16 x 160 (16 x 16's 2560 weigh
 * 3200, more than 8 x 48's 3072). Its timed twin is test_gemm_tiles's
 * settling check above. */
static void test_gemm_short_tiles(cl_cpu_gemm_kind kind) {
  if (tile_index(kind, "16x16") < 0) return;
  static const struct {
    int tA, tB, view, M, N, K;
    const char *tile;
  } cases[] = {{1, 0, 0, 192, 64, 48, "12x32"}, {1, 0, 0, 48, 64, 192, "12x32"},
               {0, 1, 0, 192, 48, 64, "8x48"},  {0, 0, 0, 24, 96, 100, "8x48"},
               {0, 0, 2, 36, 32, 100, "12x32"}, {0, 0, 1, 16, 16, 9, "16x16"},
               {0, 1, 0, 192, 16, 160, "16x16"}, {1, 0, 0, 16, 160, 192, "8x48"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    int got = cl_cpu_gemm_tile_chosen(kind, cases[i].tA, cases[i].tB, cases[i].view, cases[i].M,
                                      cases[i].N, cases[i].K);
    check_true(got == tile_index(kind, cases[i].tile),
               "sgemm %s: a %d x %d x %d product, too short to time, takes the %s tile (got %s)",
               cl_cpu_gemm_name(kind), cases[i].M, cases[i].N, cases[i].K, cases[i].tile,
               cl_cpu_gemm_tile_name(kind, got));
  }
  /* The edge: 2 * 192 * 64 * 81 = 1,990,656 flops is under TUNE_MIN_FLOP and
   * takes its tile untimed; one more k (2,015,232) is timed, so before any
   * call it has none; and so is a product of exactly 2 MFLOP (16 x 250 x
   * 250, called nowhere else). */
  int under = cl_cpu_gemm_tile_chosen(kind, 1, 0, 0, 192, 64, 81);
  int over = cl_cpu_gemm_tile_chosen(kind, 1, 0, 0, 192, 64, 82);
  int at = cl_cpu_gemm_tile_chosen(kind, 1, 0, 0, 16, 250, 250);
  check_true(under == tile_index(kind, "12x32") && over == -1 && at == -1,
             "sgemm %s: 192 x 64 x 81 (just under 2 MFLOP) takes 12x32 untimed (got %s), "
             "192 x 64 x 82 (just over) and 16 x 250 x 250 (2 MFLOP) wait for their timing "
             "(got %s, %s)",
             cl_cpu_gemm_name(kind), cl_cpu_gemm_tile_name(kind, under),
             cl_cpu_gemm_tile_name(kind, over), cl_cpu_gemm_tile_name(kind, at));
}

/* Where a block's B sliver is short (cpu_gemm.c's jr_outer: 16 KiB or
 * less), a tile that packs B at depth, 8 x 48, reads a row-major B in
 * place, one sliver in L1 across the row tiles: a product of 64 deep (a
 * sliver of 12 KiB) or 85 (16,320 bytes, the last depth within the
 * bound) writes nothing into its scratch (A^T read in place, 16 rows: no
 * sliver of A packed either), one of 86 (16,512 bytes, the first past
 * it) or 256 deep (48 KiB) packs B there; all give the bits of the 12 x
 * 32 tile. The scratch starts filled with a pattern no packed float of
 * these operands has. */
static void test_gemm_b_in_place(cl_cpu_gemm_kind kind) {
  if (tile_index(kind, "8x48") < 0) return;
  const int M = 16, N = 96, depths[4] = {64, 85, 86, 256};
  for (int d = 0; d < 4; d++) {
    const int K = depths[d], in_place = 48 * K * (int)sizeof(float) <= 16 * 1024;
    float *A = rand_floats((size_t)K * M), *B = rand_floats((size_t)K * N);
    float *C = xmalloc(sizeof(float) * M * N), *C2 = xmalloc(sizeof(float) * M * N);
    const size_t bytes = cl_cpu_sgemm_scratch_bytes(kind, M, N, K);
    unsigned char *scratch = xmalloc(bytes);
    memset(scratch, 0xA5, bytes);
    setenv("CONVLSTM_GEMM_TILE", "8x48", 1);
    cl_cpu_sgemm(kind, 1, 0, M, N, K, 1.0f, A, M, B, N, 0.0f, C, N, scratch);
    setenv("CONVLSTM_GEMM_TILE", "12x32", 1);
    cl_cpu_sgemm(kind, 1, 0, M, N, K, 1.0f, A, M, B, N, 0.0f, C2, N, NULL);
    unsetenv("CONVLSTM_GEMM_TILE");
    size_t touched = 0;
    for (size_t i = 0; i < bytes; i++) touched += scratch[i] != 0xA5;
    check_true(in_place ? touched == 0 : touched > 0,
               "sgemm %s: 8x48 at K = %d %s (%zu of %zu scratch bytes written)",
               cl_cpu_gemm_name(kind), K, in_place ? "reads B in place" : "packs B", touched,
               bytes);
    check_true(memcmp(C, C2, sizeof(float) * M * N) == 0,
               "sgemm %s: 8x48 at K = %d gives 12x32's bits", cl_cpu_gemm_name(kind), K);
    free(A), free(B), free(C), free(C2), free(scratch);
  }
}

/* A kind with several register tiles (AVX-512: 8x48, 12x32, 16x16) times them per
 * shape and keeps the faster, so the floats must not depend on the tile:
 * each forced tile passes the whole GEMM suite, and all give the same bits
 * (each element of C summed over k in one order). Then the timing settles:
 * after its rounds a shape class has a tile, before them it has none. */
static void test_gemm_tiles(cl_cpu_gemm_kind kind) {
  const int n = cl_cpu_gemm_tiles(kind);
  if (n < 2) return;
  for (int t = 0; t < n; t++) {
    printf("-- sgemm, %s, tile %s forced\n", cl_cpu_gemm_name(kind), cl_cpu_gemm_tile_name(kind, t));
    setenv("CONVLSTM_GEMM_TILE", cl_cpu_gemm_tile_name(kind, t), 1);
    test_gemm_kind(kind);
    unsetenv("CONVLSTM_GEMM_TILE");
  }
  int same = 1;
  for (int rep = 0; rep < 30; rep++) {
    int big = rep < 4 && !under_valgrind;
    int M = big ? 192 : rand_int(1, 100), N = big ? 256 : rand_int(1, 300);
    int K = big ? 1200 : rand_int(1, 600), tA = rep % 2, tB = (rep / 2) % 2;
    int threads = rep % 3 == 2 ? 2 : 1;
    float *A = rand_floats((size_t)M * K), *B = rand_floats((size_t)K * N);
    float *C0 = rand_floats((size_t)M * N), *C = xmalloc(sizeof(float) * M * N);
    float *first = xmalloc(sizeof(float) * M * N);
    for (int t = 0; t < n; t++) {
      memcpy(C, C0, sizeof(float) * M * N);
      gemm_with_tile(kind, cl_cpu_gemm_tile_name(kind, t), threads, tA, tB, M, N, K, A, B, C);
      if (t == 0) memcpy(first, C, sizeof(float) * M * N);
      else same &= memcmp(first, C, sizeof(float) * M * N) == 0;
    }
    free(A), free(B), free(C0), free(C), free(first);
  }
  check_true(same, "sgemm %s: every tile gives the same floats bit for bit (30 shapes)",
             cl_cpu_gemm_name(kind));
  enum { M = 96, N = 160, K = 300 };
  float *A = rand_floats(M * K), *B = rand_floats(K * N), *C = xmalloc(sizeof(float) * M * N);
  int before = cl_cpu_gemm_tile_chosen(kind, 1, 1, 0, M, N, K), calls = 0, after;
  while ((after = cl_cpu_gemm_tile_chosen(kind, 1, 1, 0, M, N, K)) < 0 && calls < 100) {
    cl_cpu_sgemm(kind, 1, 1, M, N, K, 1.0f, A, M, B, K, 0.0f, C, N, NULL);
    calls++;
  }
  /* AVX-512's 8x48, 12x32 and 16x16: the in-place tile cannot read a plain matrix B */
  check_true(before == -1 && after >= 0 && after < 3 && calls == 9,
             "sgemm %s: a new shape is timed (no tile before), then settles on %s after %d calls "
             "(3 per tile)",
             cl_cpu_gemm_name(kind), cl_cpu_gemm_tile_name(kind, after), calls);
  free(A), free(B), free(C);
  test_gemm_short_tiles(kind);
  test_gemm_b_in_place(kind);
}

/* n random floats that end where an unreadable page begins; *map and *len
 * are for munmap. */
static float *fenced_floats(size_t n, void **map, size_t *len) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t body = (n * sizeof(float) + page - 1) / page * page;
  *len = body + page;
  *map = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (*map == MAP_FAILED || mprotect((char *)*map + body, page, PROT_NONE) != 0) {
    fprintf(stderr, "fenced_floats: mmap/mprotect failed\n");
    exit(2);
  }
  float *f = (float *)((char *)*map + body) - n;
  for (size_t i = 0; i < n; i++) f[i] = (float)uniform();
  return f;
}

/* A transposed A is read where it lies (each k step of a sliver is a row
 * segment of A), only a last sliver short of a tile's rows packed: its
 * products must be those of the same A written out untransposed and
 * packed, bit for bit, with each tile forced, over shapes whose rows end
 * on a tile and past one, K and M in several blocks (256 deep, 240 tall),
 * and a padded lda. A ends where an unreadable page begins (fenced_floats),
 * so that a read past its last row stops the test. */
static void test_gemm_a_in_place(cl_cpu_gemm_kind kind) {
  static const int shapes[][5] = {/* M N K pad threads */
                                  {192, 64, 48, 0, 1}, {192, 48, 64, 0, 1}, {48, 100, 30, 5, 1},
                                  {49, 33, 300, 0, 1}, {9, 576, 4, 0, 1},   {250, 70, 520, 3, 1},
                                  {491, 40, 17, 0, 1}, {96, 300, 64, 1, 2}, {37, 500, 77, 0, 3}};
  const int tiles = cl_cpu_gemm_tiles(kind), n = sizeof shapes / sizeof shapes[0];
  int same = 1;
  for (int t = 0; t < tiles; t++) {
    if (tiles > 1) setenv("CONVLSTM_GEMM_TILE", cl_cpu_gemm_tile_name(kind, t), 1);
    for (int i = 0; i < n; i++) {
      const int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], pad = shapes[i][3];
      const int th = shapes[i][4], lda = M + pad;
      void *map;
      size_t len;
      float *At = fenced_floats((size_t)(K - 1) * lda + M, &map, &len);
      float *A = xmalloc(sizeof(float) * M * K);
      for (int r = 0; r < M; r++)
        for (int p = 0; p < K; p++) A[(size_t)r * K + p] = At[(size_t)p * lda + r];
      float *B = rand_floats((size_t)K * N), *C0 = rand_floats((size_t)M * N);
      float *C1 = xmalloc(sizeof(float) * M * N);
      memcpy(C1, C0, sizeof(float) * M * N);
      if (th > 1) {
        cl_cpu_sgemm_threaded(kind, th, 1, 0, M, N, K, 1.0f, At, lda, B, N, 0.5f, C0, N, NULL);
        cl_cpu_sgemm_threaded(kind, th, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.5f, C1, N, NULL);
      } else {
        cl_cpu_sgemm(kind, 1, 0, M, N, K, 1.0f, At, lda, B, N, 0.5f, C0, N, NULL);
        cl_cpu_sgemm(kind, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.5f, C1, N, NULL);
      }
      same &= memcmp(C0, C1, sizeof(float) * M * N) == 0;
      munmap(map, len), free(A), free(B), free(C0), free(C1);
    }
  }
  unsetenv("CONVLSTM_GEMM_TILE");
  check_true(same, "sgemm %s: A^T read in place gives the bits of A packed (%d shapes x %d tiles)",
             cl_cpu_gemm_name(kind), n, tiles);
}

/* op(A) kept in slivers of P rows (cl_cpu_sgemm_panels, the Winograd
 * filters' transform): for each tile's P, over rows ending on a sliver and
 * past one, K up to one packing block, with and without beta, the bits of
 * cl_cpu_sgemm on the same A written out, that tile forced. A's last
 * sliver ends where an unreadable page begins. Then the cases without a
 * layout: BLAS, K past the block, a P no tile has, a product long enough to
 * be timed. */
static void test_gemm_panels(cl_cpu_gemm_kind kind) {
  static const int shapes[][4] = {/* M N K beta != 0 */
                                  {192, 64, 48, 0}, {48, 64, 192, 1}, {16, 160, 192, 0},
                                  {37, 33, 256, 1}, {5, 17, 3, 0},     {256, 70, 64, 1}};
  const int tiles = cl_cpu_gemm_tiles(kind), n = sizeof shapes / sizeof shapes[0];
  int same = 1, ran = 0;
  for (int t = 0; t < tiles; t++) {
    const char *name = cl_cpu_gemm_tile_name(kind, t);
    const int P = atoi(name); /* "12x32": 12 rows */
    if (tiles > 1) setenv("CONVLSTM_GEMM_TILE", name, 1);
    for (int i = 0; i < n; i++) {
      const int M = shapes[i][0], N = shapes[i][1], K = shapes[i][2], Mp = (M + P - 1) / P * P;
      const float beta = shapes[i][3] ? 0.5f : 0.0f;
      void *map;
      size_t len;
      float *Ap = fenced_floats((size_t)Mp * K, &map, &len), *A = xmalloc(sizeof(float) * M * K);
      for (int r = 0; r < Mp; r++)
        for (int p = 0; p < K; p++) {
          float *at = Ap + (size_t)(r / P) * P * K + (size_t)p * P + r % P;
          if (r >= M) *at = 0.0f;
          else A[(size_t)r * K + p] = *at;
        }
      float *B = rand_floats((size_t)K * N), *C0 = rand_floats((size_t)M * N);
      float *C1 = xmalloc(sizeof(float) * M * N);
      void *scratch = xmalloc(cl_cpu_sgemm_scratch_bytes(kind, M, N, K) + 64);
      memcpy(C1, C0, sizeof(float) * M * N);
      int rc = cl_cpu_sgemm_panels(kind, P, M, N, K, 1.0f, Ap, B, N, beta, C0, N, scratch);
      cl_cpu_sgemm(kind, 0, 0, M, N, K, 1.0f, A, K, B, N, beta, C1, N, NULL);
      same &= rc == 0 && memcmp(C0, C1, sizeof(float) * M * N) == 0;
      ran += rc == 0;
      munmap(map, len), free(A), free(B), free(C0), free(C1), free(scratch);
    }
  }
  unsetenv("CONVLSTM_GEMM_TILE");
  check_true(same && ran == n * tiles,
             "sgemm %s: A in slivers gives the bits of A packed (%d shapes x %d tiles)",
             cl_cpu_gemm_name(kind), n, tiles);
  float a = 1.0f, b = 1.0f, c = 0.0f, scratch[64];
  const int P = atoi(cl_cpu_gemm_tile_name(kind, 0));
  check_true(cl_cpu_sgemm_panels(kind, P, 1, 1, 257, 1.0f, &a, &b, 1, 0.0f, &c, 1, scratch) == -1 &&
                 cl_cpu_sgemm_panels(kind, 5, 1, 1, 1, 1.0f, &a, &b, 1, 0.0f, &c, 1, scratch) == -1 &&
                 cl_cpu_sgemm_panels(CL_CPU_GEMM_BLAS, P, 1, 1, 1, 1.0f, &a, &b, 1, 0.0f, &c, 1,
                                     scratch) == -1,
             "sgemm %s: slivers refused past one block of K, for a P no tile has, and for BLAS",
             cl_cpu_gemm_name(kind));
  /* every product up to a block of K takes slivers, short or long (one
   * layout forgoes the timing, so tile_panel's rule chooses); past a block
   * of K, and for BLAS, none */
  const int short_p = cl_cpu_sgemm_panel_rows(kind, 192, 64, 48);
  check_true(short_p > 0 && cl_cpu_sgemm_panel_rows(kind, 192, 64, 300) == 0 &&
                 cl_cpu_sgemm_panel_rows(kind, 256, 256, 256) > 0 &&
                 cl_cpu_sgemm_panel_rows(CL_CPU_GEMM_BLAS, 192, 64, 48) == 0,
             "sgemm %s: slivers of %d rows for short products, slivers for long ones, none "
             "too deep or for BLAS", cl_cpu_gemm_name(kind), short_p);
  /* the rule, where there are tiles to choose from (AVX-512: 8 x 48, 12 x
   * 32 and 16 x 16, weighed 100, 100, 125): the tutorial's backward data
   * (64 x 216 x 256: 8 x 48's B sliver, 48 KiB, is past two thirds of L1;
   * 12 x 32's 16,128 against 16 x 16's 17,920), its forward (72 x 240 x
   * 64: 8 x 48 pads none), 96 x 256 x 64 (12 x 32 pads less), 96 x 240 x 128
   * (8 x 48), the plain stack's backward data (48 x 160 x 192: 8 x 48's 36
   * KiB past the bound, 12 x 32 pads none) and its first layer's (16 x 160
   * x 192: 16 x 16's 3,200 against 12 x 32's 3,840; padding alone chose 8
   * x 48), 64 x 256 x 64 (8 x 48 and 12 x 32 both 18,432: the narrower);
   * and the bound's edge, 96 x 240 at K 170 (8 x 48's sliver 32,640 bytes,
   * within 32 KiB: 8 x 48) and 171 (32,832, past it: 12 x 32) */
  if (tiles > 1) {
    const int rule[9][4] = {{64, 216, 256, 12}, {72, 240, 64, 8},   {96, 256, 64, 12},
                            {96, 240, 128, 8},  {48, 160, 192, 12}, {16, 160, 192, 16},
                            {64, 256, 64, 12},  {96, 240, 170, 8},  {96, 240, 171, 12}};
    for (int i = 0; i < 9; i++) {
      const int got = cl_cpu_sgemm_panel_rows(kind, rule[i][0], rule[i][1], rule[i][2]);
      check_true(got == rule[i][3], "sgemm %s: a %d x %d x %d product's slivers: %d rows, "
                 "expected %d", cl_cpu_gemm_name(kind), rule[i][0], rule[i][1], rule[i][2], got,
                 rule[i][3]);
    }
  }
}

/* ---- GEMM on an im2col view ----------------------------------------------- */

/* One image of C channels, H x W, k x k taps, zero-bordered; its im2col
 * matrix written out (B, K = C k k rows of H W) for the reference. */
typedef struct view_img {
  int C, H, W, k, Wp, K, N;
  float *xp, *B;
  ptrdiff_t *boff;
} view_img;

static view_img view_make(int C, int H, int W, int k) {
  int pad = k / 2, Hp = H + 2 * pad, Wp = W + 2 * pad;
  view_img v = {C, H, W, k, Wp, C * k * k, H * W, NULL, NULL, NULL};
  v.xp = calloc((size_t)C * Hp * Wp, sizeof(float));
  v.boff = xmalloc(sizeof(ptrdiff_t) * v.K);
  v.B = xmalloc(sizeof(float) * (size_t)v.K * v.N);
  for (int c = 0; c < C; c++)
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++) v.xp[((size_t)c * Hp + y + pad) * Wp + x + pad] = (float)uniform();
  for (int r = 0; r < v.K; r++) {
    int c = r / (k * k), t = r % (k * k);
    v.boff[r] = (ptrdiff_t)c * Hp * Wp + (t / k) * Wp + t % k;
    for (int q = 0; q < v.N; q++)
      v.B[(size_t)r * v.N + q] = v.xp[v.boff[r] + (q / W) * Wp + q % W];
  }
  return v;
}

static void view_free(view_img *v) { free(v->xp), free(v->boff), free(v->B); }

/* C = A op(view) + 0.5 C0 with one tile forced ("" for the timed choice),
 * through ap when given; checked against the double reference, scratch and
 * the packed A within their sizes. tB: op(view) = view^T, [pixels, taps]. */
static void view_case(cl_cpu_gemm_kind kind, const char *tile, const view_img *v, int tB, int M,
                      const float *A, const float *C0, const double *ref, cl_cpu_apack *ap,
                      size_t ap_bytes, float *C, const char *what) {
  if (*tile) setenv("CONVLSTM_GEMM_TILE", tile, 1);
  const int N = tB ? v->K : v->N, K = tB ? v->N : v->K;
  size_t sb = cl_cpu_sgemm_scratch_bytes(cl_cpu_gemm_internal_of(kind), M, N, K);
  unsigned char *scratch = xmalloc(sb + CANARY);
  fill_canary(scratch + sb);
  if (ap) fill_canary((unsigned char *)ap->buf + ap_bytes);
  memcpy(C, C0, sizeof(float) * M * N);
  cl_cpu_im2col_view view = {v->xp, v->boff, v->W, v->Wp};
  int rc = cl_cpu_sgemm_im2col(kind, tB, M, N, K, 1.0f, A, K, &view, 0.5f, C, N, scratch, ap);
  unsetenv("CONVLSTM_GEMM_TILE");
  int q = verbose;
  verbose = 0;
  check_close(what, C, ref, (size_t)M * N, 1e-5);
  verbose = q;
  check_true(rc == 0 && canary_intact(scratch + sb) &&
                 (!ap || canary_intact((unsigned char *)ap->buf + ap_bytes)),
             "%s: scratch within %zu bytes, packed A within %zu", what, sb, ap ? ap_bytes : 0);
  free(scratch);
}

/* cl_cpu_sgemm_im2col against the reference on the written-out im2col
 * matrix, for images 16 and 32 wide (the in-place tile reads them where
 * they lie) and 24 and 13 wide (it cannot; forced, it packs as 12x32), the
 * view and (tB) its transpose: every tile forced, with and without A kept
 * packed, all bit for bit equal to cl_cpu_sgemm on the written-out matrix;
 * a kept A reused, and repacked when the caller says its values changed. */
static void test_gemm_views_op(cl_cpu_gemm_kind kind, int tB) {
  static const int shapes[][5] = {{3, 5, 16, 3, 40}, {24, 4, 16, 5, 192}, {2, 3, 32, 5, 13},
                                  {12, 3, 24, 3, 50}, {5, 2, 13, 3, 7},   {20, 1, 16, 5, 12}};
  const cl_cpu_gemm_kind inner = cl_cpu_gemm_internal_of(kind);
  const int n = cl_cpu_gemm_tiles(inner);
  for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
    view_img v = view_make(shapes[sh][0], shapes[sh][1], shapes[sh][2], shapes[sh][3]);
    const int M = shapes[sh][4], N = tB ? v.K : v.N, K = tB ? v.N : v.K;
    float *A = rand_floats((size_t)M * K), *C0 = rand_floats((size_t)M * N);
    float *C = xmalloc(sizeof(float) * M * N), *first = xmalloc(sizeof(float) * M * N);
    double *ref = xmalloc(sizeof(double) * M * N);
    ref_gemm(0, tB, M, N, K, 1.0, A, K, v.B, v.N, 0.5, C0, N, ref);
    size_t apb = cl_cpu_sgemm_apack_bytes(kind, M, K);
    cl_cpu_apack ap = {xmalloc(apb + CANARY), NULL, -1};
    int same = 1;
    for (int t = 0; t <= n; t++) {
      const char *tile = t < n ? cl_cpu_gemm_tile_name(inner, t) : "";
      char what[160];
      for (int kept = 0; kept < 3; kept++) { /* none, packed by this call, reused */
        snprintf(what, sizeof what, "im2col%s %s C%d %dx%d k%d M=%d tile %s, A %s", tB ? "^T" : "",
                 cl_cpu_gemm_name(kind), v.C, v.H, v.W, v.k, M, *tile ? tile : "timed",
                 kept == 0 ? "packed per call" : kept == 1 ? "kept, packed" : "kept, reused");
        view_case(kind, tile, &v, tB, M, A, C0, ref, kept ? &ap : NULL, apb, C, what);
        if (t == 0 && kept == 0) {
          /* the same tile on the written-out matrix */
          setenv("CONVLSTM_GEMM_TILE", tile, 1);
          float *D = xmalloc(sizeof(float) * M * N);
          memcpy(D, C0, sizeof(float) * M * N);
          cl_cpu_sgemm(inner, 0, tB, M, N, K, 1.0f, A, K, v.B, v.N, 0.5f, D, N, NULL);
          unsetenv("CONVLSTM_GEMM_TILE");
          same &= memcmp(D, C, sizeof(float) * M * N) == 0;
          memcpy(first, C, sizeof(float) * M * N);
          free(D);
        } else if (t < n) {
          same &= memcmp(first, C, sizeof(float) * M * N) == 0;
        }
      }
    }
    check_true(same, "im2col%s %s C%d %dx%d k%d M=%d: every tile, A packed or kept, the floats "
               "of sgemm on the written-out matrix", tB ? "^T" : "", cl_cpu_gemm_name(kind), v.C,
               v.H, v.W, v.k, M);
    /* A changed in place: with of reset the next call repacks; without, it
     * would not (the caller's contract), which the result shows. */
    for (size_t i = 0; i < (size_t)M * K; i++) A[i] = -A[i];
    for (size_t i = 0; i < (size_t)M * N; i++) ref[i] = ref[i] - 2.0 * (ref[i] - 0.5 * C0[i]);
    ap.of = NULL;
    char what[160];
    snprintf(what, sizeof what, "im2col%s %s C%d %dx%d: A changed, kept A reset, repacked",
             tB ? "^T" : "", cl_cpu_gemm_name(kind), v.C, v.H, v.W);
    view_case(kind, "", &v, tB, M, A, C0, ref, &ap, apb, C, what);
    free(A), free(C0), free(C), free(first), free(ref), free(ap.buf);
    view_free(&v);
  }
}

static void test_gemm_views(cl_cpu_gemm_kind kind) {
  test_gemm_views_op(kind, 0);
  test_gemm_views_op(kind, 1);
  if (kind != CL_CPU_GEMM_AVX512) {
    if (cl_cpu_gemm_internal_of(kind) != CL_CPU_GEMM_AVX512)
      check_true(!cl_cpu_sgemm_inplace_of(kind, 48, 16), "%s reads no view in place",
                 cl_cpu_gemm_name(kind));
    return;
  }
  /* Backward data's flipped path is taken where M rows fill 4/5 of the
   * in-place tile's 12-row tiles: 20 of 24 do, 19 do not. */
  static const int fit[][3] = {{12, 16, 1}, {20, 16, 1}, {19, 16, 0}, {13, 32, 0},
                               {48, 32, 1}, {48, 24, 0}, {10, 16, 1}, {9, 16, 0}};
  for (size_t i = 0; i < sizeof fit / sizeof fit[0]; i++)
    check_true(cl_cpu_sgemm_inplace_of(kind, fit[i][0], fit[i][1]) == fit[i][2],
               "%s: %d rows of a %d-wide view %s in place", cl_cpu_gemm_name(kind), fit[i][0],
               fit[i][1], fit[i][2] ? "read" : "not read");
  /* The timed choice: a 16-wide image's view is timed over AVX-512's four
   * tiles, a 24-wide one's over the three that pack it. */
  for (int w = 16; w <= 24; w += 8) {
    view_img v = view_make(8, 8, w, 3);
    const int M = 192, view = w == 16 ? 2 : 1, tiles = w == 16 ? 4 : 3;
    float *A = rand_floats((size_t)M * v.K), *C = xmalloc(sizeof(float) * M * v.N);
    cl_cpu_im2col_view view_ = {v.xp, v.boff, v.W, v.Wp};
    int before = cl_cpu_gemm_tile_chosen(kind, 0, 0, view, M, v.N, v.K), calls = 0, after;
    while ((after = cl_cpu_gemm_tile_chosen(kind, 0, 0, view, M, v.N, v.K)) < 0 && calls < 100) {
      cl_cpu_sgemm_im2col(kind, 0, M, v.N, v.K, 1.0f, A, v.K, &view_, 0.0f, C, v.N, NULL, NULL);
      calls++;
    }
    check_true(before == -1 && after >= 0 && after < tiles && calls == 3 * tiles,
               "im2col %s %d wide: timed over %d tiles, settles on %s after %d calls", 
               cl_cpu_gemm_name(kind), w, tiles, cl_cpu_gemm_tile_name(kind, after), calls);
    free(A), free(C);
    view_free(&v);
  }
}

/* Rows loaded at once (cl_cpu_load_rows): each of 5 rows of 19 values (a
 * vector and a scalar tail) from 23 apart into 21 apart, the same as host/half.h's
 * scalar conversions one by one; nothing written between the rows. */
static void test_load_rows(void) {
  enum { ROWS = 5, N = 19, SS = 23, DS = 21 };
  for (int t = CL_F32; t <= CL_BF16; t++) {
    float src[ROWS * SS], dst[ROWS * DS];
    uint16_t bits[ROWS * SS];
    for (int i = 0; i < ROWS * SS; i++) {
      src[i] = (float)(uniform() * 8.0 - 4.0);
      bits[i] = t == CL_F16 ? cl_f32_to_f16(src[i]) : cl_f32_to_bf16(src[i]);
    }
    for (int i = 0; i < ROWS * DS; i++) dst[i] = -99.0f;
    const void *from = t == CL_F32 ? (const void *)src : (const void *)bits;
    cl_cpu_load_rows((cl_dtype)t, from, 2, SS, dst, DS, N, ROWS);
    int same = 1;
    for (int r = 0; r < ROWS; r++)
      for (int i = 0; i < DS; i++) {
        const int k = r * SS + 2 + i;
        const float want = i >= N ? -99.0f
                           : t == CL_F32 ? src[k]
                           : t == CL_F16 ? cl_f16_to_f32(bits[k])
                                         : cl_bf16_to_f32(bits[k]);
        same &= memcmp(&dst[r * DS + i], &want, sizeof want) == 0;
      }
    check_true(same, "%s: %d rows of %d loaded at once, as one by one, nothing past a row",
               dtype_name((cl_dtype)t), ROWS, N);
  }
}

/* A convolution's bias on every instruction set: row sums (cl_cpu_row_sums)
 * of 6 rows (a block of four and two more) of 0, 16, 37 and 624 floats
 * (no vector, one, two and a tail, the tutorial's padded rows) equal bit
 * for bit to sixteen float lanes summed in order and then in double, added
 * onto what s held; rows of 21 and 48 floats (cl_cpu_rows_plus) set to
 * or added the bias, with or without a source row, exactly as in scalars,
 * nothing past a row touched. */
static void test_bias_kernels(void) {
  enum { M = 6, LDA = 640, LDC = 53 };
  static const int lens[] = {0, 16, 37, 624};
  float *A = rand_floats((size_t)M * LDA);
  for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_AVX512; kind++) {
    if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
    const char *name = cl_cpu_gemm_name((cl_cpu_gemm_kind)kind);
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
      const int K = lens[l];
      double got[M], want[M];
      int same = 1;
      for (int i = 0; i < M; i++) {
        float lane[16] = {0};
        int p = 0;
        for (; p + 16 <= K; p += 16)
          for (int t = 0; t < 16; t++) lane[t] += A[(size_t)i * LDA + p + t];
        double t = 0.0;
        for (int q = 0; q < 16; q++) t += lane[q];
        for (; p < K; p++) t += A[(size_t)i * LDA + p];
        got[i] = 0.25 * i, want[i] = 0.25 * i + t;
      }
      cl_cpu_row_sums((cl_cpu_gemm_kind)kind, M, K, A, LDA, got);
      for (int i = 0; i < M; i++) same &= memcmp(&got[i], &want[i], sizeof got[i]) == 0;
      check_true(same, "%s: row sums of %d rows of %d floats, as sixteen lanes then double", name, M,
                 K);
    }
    /* rows_plus: 3 rows of 21 and 48 floats (a vector or three and a tail),
     * from s (rows 59 apart) or from the bias alone, written or added */
    for (int n = 21; n <= 48; n += 27)
      for (int mode = 0; mode < 4; mode++) {
        enum { R = 3, LDS = 59 };
        const int acc = mode & 1, with_s = mode >> 1;
        const float b = (float)uniform();
        float d[R * LDC], d0[R * LDC];
        for (int i = 0; i < R * LDC; i++) d[i] = d0[i] = (float)uniform();
        const float *src = with_s ? A : NULL;
        cl_cpu_rows_plus((cl_cpu_gemm_kind)kind, R, n, d, LDC, src, LDS, b, acc);
        int same = 1;
        for (int r = 0; r < R; r++)
          for (int q = 0; q < LDC; q++) {
            const float add = with_s ? A[r * LDS + q] + b : b;
            const float want = q >= n ? d0[r * LDC + q] : acc ? d0[r * LDC + q] + add : add;
            same &= memcmp(&d[r * LDC + q], &want, sizeof want) == 0;
          }
        check_true(same, "%s: rows of %d floats %s %s, nothing past a row", name, n,
                   acc ? "+=" : "=", with_s ? "s + b" : "b");
      }
  }
  free(A);
}

/* Conversions of the kernels against host/half.h on awkward values:
 * subnormals, overflow, ties, NaN, through the vector and the scalar path. */
static void test_half_conversions(void) {
  static const float special[] = {
      0.0f,     -0.0f, 1.0f,    65504.0f, 65520.0f,       1e-7f,          6.1e-5f,  5.96e-8f,
      2.98e-8f, 1e30f, -1e-40f, 3.14159f, 1.00048828125f, 1.00146484375f, INFINITY, -INFINITY};
  /* bfloat16 ties: 1 + 2^-8 rounds down to even 1, 1 + 3 2^-8 up to 1 + 2^-6 */
  static const float ties[] = {1.00390625f, 1.01171875f, -1.00390625f};
  /* NaNs: quiet, signalling with a payload only in the low bits (made
   * quiet, not infinite, by the cut to 16 bits), negative; the largest
   * float, which bfloat16 rounds up to infinity */
  static const uint32_t special_bits[] = {0x7fc00000u, 0x7f800001u, 0xffc00123u, 0x7f7fffffu};
  enum {
    N = 1000,
    NS = sizeof special / sizeof *special,
    NB = sizeof special_bits / sizeof *special_bits
  };
  float x[N], y[N];
  for (int i = 0; i < N; i++) {
    x[i] = i < NS ? special[i] : (float)(uniform() * pow(2.0, rand_int(-30, 17)));
    y[i] = (float)(uniform() * pow(2.0, rand_int(-30, 17)));
  }
  for (int i = 0; i < NB; i++) memcpy(&x[NS + i], &special_bits[i], sizeof(float));
  for (int i = 0; i < 3; i++) x[NS + NB + i] = ties[i];
  memcpy(&x[N - 3], &special_bits[1], sizeof(float)); /* the scalar tail (1000 = 62 16 + 8) too */
  for (int t = CL_F16; t <= CL_BF16; t++) {
    uint16_t bits[N];
    float back[N], want[N];
    cl_cpu_store((cl_dtype)t, x, bits, 0, N, 0);
    int same = 1;
    for (int i = 0; i < N; i++)
      same &= bits[i] == (t == CL_F16 ? cl_f32_to_f16(x[i]) : cl_f32_to_bf16(x[i]));
    cl_cpu_load((cl_dtype)t, bits, 0, back, N);
    for (int i = 0; i < N; i++)
      want[i] = t == CL_F16 ? cl_f16_to_f32(bits[i]) : cl_bf16_to_f32(bits[i]);
    same &= memcmp(back, want, sizeof back) == 0;
    check_true(same, "%s store and load bit-identical to host/half.h", dtype_name((cl_dtype)t));
    /* accumulating: the stored value widened, y added, the sum rounded once */
    uint16_t acc[N];
    memcpy(acc, bits, sizeof acc);
    cl_cpu_store((cl_dtype)t, y, acc, 0, N, 1);
    same = 1;
    for (int i = 0; i < N; i++)
      same &= acc[i] == (t == CL_F16 ? cl_f32_to_f16(cl_f16_to_f32(bits[i]) + y[i])
                                     : cl_f32_to_bf16(cl_bf16_to_f32(bits[i]) + y[i]));
    check_true(same, "%s accumulating store bit-identical to host/half.h", dtype_name((cl_dtype)t));
  }
}

/* Adam's update on each instruction set this machine runs (the GEMM kind's)
 * gives the plain-float kind's bits, p, m, v and max_exp_avg_sq, after three
 * steps of 40,009 elements (9 past the last whole vector; two threads, so
 * in parallel blocks): with L2 decay, as AdamW, with amsgrad. Each of its
 * operations is rounded once in one order (cpu_adam_tmpl.h), so a lane and
 * a float cannot differ; a fused multiply-add or a reordered sum would. */
static void test_adam_bits(void) {
  enum { N = 40009, STEPS = 3 };
  static const struct {
    float wd;
    int decoupled, amsgrad;
    const char *what;
  } cfg[] = {{0.01f, 0, 0, "adam, L2 decay"}, {0.1f, 1, 0, "adamw"}, {0.0f, 0, 1, "amsgrad"}};
  float *p0 = xmalloc(sizeof(float) * N), *g[STEPS];
  for (int i = 0; i < N; i++) p0[i] = (float)uniform();
  for (int k = 0; k < STEPS; k++) {
    g[k] = xmalloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) g[k][i] = (float)uniform();
  }
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    float *ref = NULL;
    for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_AVX512; kind++) {
      if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
      cl_backend *be = NULL;
      if (cl_backend_cpu_create(2, &be) != CL_OK) {
        fprintf(stderr, "test_cpu_simd: cannot create the cpu backend\n");
        exit(2);
      }
      ((cl_cpu_ctx *)be->context)->gemm = (cl_cpu_gemm_kind)kind;
      float *st = calloc(4 * (size_t)N, sizeof(float)); /* p, m, v, vmax */
      memcpy(st, p0, sizeof(float) * N);
      cl_adam_hp hp = {1e-2f, 0.9f, 0.999f, 1e-8f, cfg[c].wd, 0, cfg[c].decoupled, cfg[c].amsgrad};
      int ok = 1;
      for (int k = 0; k < STEPS; k++) {
        hp.step = k + 1;
        ok &= be->iface->adam_update(be, st, g[k], st + N, st + 2 * N, st + 3 * N, N, &hp) == CL_OK;
      }
      cl_backend_destroy(be);
      check_true(ok && memcmp(st, p0, sizeof(float) * N) != 0,
                 "adam_update, %s: %s accepts every step and moves p", cfg[c].what,
                 cl_cpu_gemm_name((cl_cpu_gemm_kind)kind));
      if (!ref) {
        ref = st;
        continue;
      }
      check_true(memcmp(ref, st, sizeof(float) * 4 * N) == 0,
                 "adam_update, %s: %s gives the generic kind's p, m, v and vmax bit for bit",
                 cfg[c].what, cl_cpu_gemm_name((cl_cpu_gemm_kind)kind));
      free(st);
    }
    free(ref);
  }
  for (int k = 0; k < STEPS; k++) free(g[k]);
  free(p0);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "-q") == 0) verbose = 0;
  under_valgrind = ctest_under_valgrind();
  if (under_valgrind) printf("(under valgrind: a reduced set of sizes)\n");
  for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_BLAS; kind++)
    if (cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) {
      test_gemm_kind((cl_cpu_gemm_kind)kind);
      test_gemm_reentrant((cl_cpu_gemm_kind)kind);
      test_gemm_tiles((cl_cpu_gemm_kind)kind);
      if (kind != CL_CPU_GEMM_BLAS) test_gemm_a_in_place((cl_cpu_gemm_kind)kind);
      if (kind != CL_CPU_GEMM_BLAS) test_gemm_panels((cl_cpu_gemm_kind)kind);
      test_gemm_views((cl_cpu_gemm_kind)kind);
    }
  printf("-- float16 / bfloat16 load and store\n");
  test_half_conversions();
  test_load_rows();
  printf("-- a convolution's bias and stores: row sums, rows plus a bias\n");
  test_bias_kernels();
  printf("-- adam on every instruction set\n");
  test_adam_bits();
  return ctest_done("test_cpu_simd");
}
