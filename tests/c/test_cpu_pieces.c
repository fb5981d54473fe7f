/*
 * tests/c/test_cpu_pieces.c -- cl_cpu_pieces (cpu_sum.c) runs every index
 * once, in pieces no longer than asked, each thread its own block from the
 * front; a thread done early takes pieces of a slower thread's block; a
 * team smaller than asked still runs them all. And the Winograd batch it
 * splits (run_images) gives the same bits whichever images a chunk holds,
 * which is what lets a piece run on either thread; backward filter, whose
 * output channels it hands out in pieces, gives the same dw on any team.
 *
 * The instruments: a per-index record of the thread and piece that ran it
 * (written by the callback, read after the region), a wait planted in
 * one thread, and the convolutions' output bits on one, two and three
 * threads, whose chunks hold different images.
 */
#define _POSIX_C_SOURCE 200112L
#include "cpu/cpu_kernels.h" /* cl_cpu_pieces, cl_cpu_ctx */
#include "ctest.h"           /* CHECK, ctest_done */

#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef struct record {
  int *runs, *tid;
  long long piece, longest, calls;
  volatile int slow_tid; /* -1, or a thread that waits in its first piece */
  long long slow_end;  /* the end of slow_tid's block */
  volatile int stolen; /* another thread ran an index of that block */
  int wait_ms;         /* slow_tid's longest wait; 0: 5000 */
} record;

/* slow_tid waits in its first piece until a thief shows itself, at most
 * wait_ms (a thief that never comes fails the test and does not hang it) */
static void wait_for_thief(volatile int *stolen, int wait_ms) {
  const struct timespec d = {0, 1000000};
  for (int ms = 0; ms < (wait_ms ? wait_ms : 5000) && !*stolen; ms++) nanosleep(&d, NULL);
}

static void note(void *arg, long long lo, long long hi, int tid) {
  record *r = arg;
  if (tid == r->slow_tid) {
    wait_for_thief(&r->stolen, r->wait_ms);
    r->slow_tid = -1;
  } else if (r->slow_tid >= 0 && lo < r->slow_end) {
    r->stolen = 1;
  }
#ifdef _OPENMP
#pragma omp atomic
#endif
  r->calls++;
  if (hi - lo > r->longest) {
#ifdef _OPENMP
#pragma omp critical(test_pieces_longest)
#endif
    if (hi - lo > r->longest) r->longest = hi - lo;
  }
  for (long long i = lo; i < hi; i++) {
#ifdef _OPENMP
#pragma omp atomic
#endif
    r->runs[i]++;
    r->tid[i] = tid;
  }
}

static void test_cover(void) {
  static const long long ns[] = {0, 1, 7, 100, 1001};
  static const long long pieces[] = {1, 3, 16, 5000};
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
    for (size_t b = 0; b < sizeof pieces / sizeof pieces[0]; b++)
      for (int threads = 1; threads <= 4; threads++) {
        const long long n = ns[a];
        record r = {calloc((size_t)n + 1, sizeof(int)), calloc((size_t)n + 1, sizeof(int)),
                    pieces[b], 0, 0, -1, 0, 0, 0};
        cl_cpu_pieces(threads, n, pieces[b], note, &r);
        int once = 1;
        for (long long i = 0; i < n; i++) once &= r.runs[i] == 1;
        CHECK(once, "n %lld, piece %lld, %d threads: every index runs once", n, pieces[b], threads);
        CHECK(r.longest <= pieces[b], "n %lld, piece %lld, %d threads: no piece longer (%lld)", n,
              pieces[b], threads, r.longest);
        free(r.runs), free(r.tid);
      }
}

/* Thread 0 waits in its first piece: thread 1, done with its own block,
 * must take pieces of thread 0's (else the wait runs out), and still every
 * index once. */
static void test_steal(void) {
  enum { N = 64 };
  int runs[N] = {0}, tid[N] = {0};
  record r = {runs, tid, 2, 0, 0, 0, N / 2, 0, 0};
  const int team = cl_cpu_pieces(2, N, 2, note, &r);
  if (team < 2) {
    printf("(one thread only here: no stealing to see)\n");
    return;
  }
  int once = 1, taken = 0, suffix = 1;
  for (int i = 0; i < N; i++) once &= runs[i] == 1, taken += i < N / 2 && tid[i] == 1;
  for (int i = 1; i < N / 2; i++) suffix &= !(tid[i - 1] == 1 && tid[i] == 0);
  CHECK(once, "a slow thread: every index still runs once");
  CHECK(taken > 0, "thread 1 takes %d of slow thread 0's %d indices", taken, N / 2);
  CHECK(suffix, "thread 0 runs its block's front, thread 1 its back");
  CHECK(r.calls == N / 2, "pieces of 2: %lld calls for %d indices", r.calls, N);
}

/* The ranges are a stack array of CL_CPU_PIECES_MAX_TEAM (64): a team of
 * 64 takes pieces (thread 0 slow, another takes part of its block), a team
 * of 65 runs static blocks (thread 0 slow for 200 ms, and still each index
 * on the thread whose block holds it). */
static void test_team_limit(void) {
  enum { N = 4 * 65 };
  for (int threads = 64; threads <= 65; threads++) {
    int runs[N] = {0}, tid[N] = {0};
    record r = {runs, tid, 1, 0, 0, 0, N / threads, 0, threads == 64 ? 0 : 200};
    const int team = cl_cpu_pieces(threads, N, 1, note, &r);
    if (team != threads) {
      printf("(a team of %d, not %d: the limit is not reached)\n", team, threads);
      continue;
    }
    int once = 1, owner = 1, taken = 0;
    for (int t = 0; t < threads; t++) /* cl_cpu_blocks' block t */
      for (int i = N * t / threads; i < N * (t + 1) / threads; i++) owner &= tid[i] == t;
    for (int i = 0; i < N; i++) once &= runs[i] == 1, taken += i < N / threads && tid[i] != 0;
    CHECK(once, "%d threads, thread 0 slow: every index runs once", threads);
    if (threads == 64)
      CHECK(taken > 0, "64 threads: others take %d of slow thread 0's indices", taken);
    else
      CHECK(owner, "65 threads (over the ranges' 64): each index on its block's thread");
  }
}

/* The ranges pack [lo, hi) in 32 bits each: n up to 2^31 - 1 takes pieces,
 * more runs static blocks. Two threads, pieces of n / 16 recorded as
 * ranges: they must tile [0, n) exactly, none longer than asked; thread 0
 * slow, thread 1 takes part of its block at 2^31 - 1 and none above. */
typedef struct spans {
  long long lo[64], hi[64], piece, n;
  int tid[64];
  int count, bad;
  volatile int slow, stolen;
  int wait_ms;
} spans;

static void span_note(void *arg, long long lo, long long hi, int tid) {
  spans *s = arg;
  if (tid == 0 && s->slow) wait_for_thief(&s->stolen, s->wait_ms), s->slow = 0;
  if (tid != 0 && lo < s->n / 2) s->stolen = 1;
  int at;
#ifdef _OPENMP
#pragma omp atomic capture
#endif
  at = s->count++;
  if (at >= 64) {
    s->bad = 1;
    return;
  }
  s->lo[at] = lo, s->hi[at] = hi, s->tid[at] = tid;
}

static int by_lo(const void *a, const void *b) {
  const long long x = *(const long long *)a, y = *(const long long *)b;
  return (x > y) - (x < y);
}

static void test_n_limit(void) {
  static const long long ns[] = {0x7FFFFFFFLL, 0x80000000LL, 0x100000005LL};
  for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++) {
    spans s;
    memset(&s, 0, sizeof s);
    s.n = ns[a], s.piece = ns[a] / 16, s.slow = 1, s.wait_ms = a == 0 ? 0 : 200;
    if (cl_cpu_pieces(2, s.n, s.piece, span_note, &s) < 2) {
      printf("(one thread only here: no limit to see)\n");
      return;
    }
    long long pair[64][2], covered = 0;
    int tiled = !s.bad && s.count > 0, longest = 1, taken = 0;
    for (int i = 0; tiled && i < s.count; i++) {
      pair[i][0] = s.lo[i], pair[i][1] = s.hi[i];
      longest &= s.hi[i] - s.lo[i] <= s.piece;
      taken += s.tid[i] != 0 && s.lo[i] < s.n / 2;
    }
    if (tiled) qsort(pair, (size_t)s.count, sizeof pair[0], by_lo);
    for (int i = 0; tiled && i < s.count; i++) {
      tiled &= pair[i][0] == covered && pair[i][1] > pair[i][0];
      covered = pair[i][1];
    }
    tiled &= covered == s.n;
    CHECK(tiled, "n %lld: %d pieces tile [0, n)", s.n, s.count);
    CHECK(longest, "n %lld: no piece longer than %lld", s.n, s.piece);
    if (a == 0)
      CHECK(taken > 0, "n 2^31 - 1 takes pieces: thread 1 ran %d of thread 0's", taken);
    else
      CHECK(taken == 0, "n %lld (over 2^31 - 1) runs static blocks: thread 1 ran %d of "
            "thread 0's", s.n, taken);
  }
}

/* Inside a parallel region the team is one thread: it runs every block. */
static void test_nested(void) {
  enum { N = 50 };
  int runs[N] = {0}, tid[N] = {0}, team = 0;
  record r = {runs, tid, 4, 0, 0, -1, 0, 0, 0};
#ifdef _OPENMP
#pragma omp parallel num_threads(2)
#pragma omp single
#endif
  team = cl_cpu_pieces(3, N, 4, note, &r);
  int once = 1;
  for (int i = 0; i < N; i++) once &= runs[i] == 1;
  CHECK(team == 1 && once, "nested (team %d of 3 asked): every index runs once", team);
}

/* n values in [-0.5, 0.5) (ctest.h's generator) */
static float *randoms(size_t n) {
  float *a = malloc(n * sizeof *a);
  for (size_t i = 0; i < n; i++) a[i] = (float)uniform01(NULL) - 0.5f;
  return a;
}

/* Direction dir (0 forward, 1 backward data, 2 backward filter: in x,
 * w dy, out dw then dbias) of s on a fresh backend of `threads`, Winograd
 * form algo, GEMM kind. */
static float *conv(int threads, cl_cpu_gemm_kind kind, int algo, cl_conv_shape s, int dir,
                   const float *in, const float *w, size_t nout) {
  static const cl_conv_dir dirs[] = {CL_CONV_FORWARD, CL_CONV_BACKWARD_DATA,
                                     CL_CONV_BACKWARD_FILTER};
  cl_backend *be = NULL;
  CHECK(cl_backend_cpu_create(threads, &be) == CL_OK, "cpu backend");
  cl_cpu_ctx *ctx = be->context;
  ctx->gemm = kind, ctx->conv_algo = algo;
  size_t ws_bytes = 0;
  CHECK(cl_backend_conv_workspace(be, &s, dirs[dir], &ws_bytes) == CL_OK, "workspace");
  void *ws = malloc(ws_bytes ? ws_bytes : 1);
  float *out = calloc(nout, sizeof(float));
  const cl_status st = dir == 0   ? be->iface->conv_forward(be, &s, in, w, NULL, out, 0, ws)
                       : dir == 1 ? be->iface->conv_backward_data(be, &s, in, w, out, 0, ws)
                                  : be->iface->conv_backward_filter(be, &s, w, in, out,
                                                                    out + nout - s.K, ws);
  CHECK(st == CL_OK, "conv: %s", be->err);
  free(ws);
  cl_backend_destroy(be);
  return out;
}

/* A batch of many chunks: forward and backward data (run_images) start
 * their chunks at each thread's block, so one, two and three threads put
 * different images together; backward filter's dU is summed over the
 * chunks in order whichever thread takes a piece of its rows (output
 * channels: wgrad_chunk_pieces), each row over a chunk's tiles in their
 * order, and dbias image by image in their order, so its dw and dbias are
 * the same on any team. A batch of one chunk (4 images): one thread runs
 * it whole, two each their two images (run_images), three split it by
 * channels and tile elements (small_inputs); the same bits. */
static void test_chunk_bits(cl_conv_shape s) {
  const size_t nx = (size_t)s.N * s.C * s.H * s.W, ny = (size_t)s.N * s.K * s.H * s.W;
  const size_t nw = (size_t)s.K * s.C * s.kh * s.kw;
  float *x = randoms(nx), *dy = randoms(ny), *w = randoms(nw);
  for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_AVX512; kind++) {
    if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
    for (int algo = 2; algo <= 3; algo++)
      for (int dir = 0; dir <= 2; dir++) {
        const size_t nout = dir == 0 ? ny : dir == 1 ? nx : nw + (size_t)s.K;
        const float *in = dir == 1 ? dy : x, *with = dir == 2 ? dy : w;
        float *one = conv(1, (cl_cpu_gemm_kind)kind, algo, s, dir, in, with, nout);
        for (int threads = 2; threads <= 3; threads++) {
          float *more = conv(threads, (cl_cpu_gemm_kind)kind, algo, s, dir, in, with, nout);
          CHECK(memcmp(one, more, nout * sizeof(float)) == 0,
                "N %d, %s, algo %d, dir %d: %d threads give one thread's bits", s.N,
                cl_cpu_gemm_name((cl_cpu_gemm_kind)kind), algo, dir, threads);
          free(more);
        }
        free(one);
      }
  }
  free(x), free(dy), free(w);
}

int main(void) {
  test_cover();
  test_steal();
  test_nested();
  test_team_limit();
  test_n_limit();
  test_chunk_bits((cl_conv_shape){30, 16, 16, 16, 48, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0});
  test_chunk_bits((cl_conv_shape){4, 24, 12, 12, 40, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0});
  return ctest_done("test_cpu_pieces");
}
