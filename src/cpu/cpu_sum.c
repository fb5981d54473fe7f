/*
 * cpu/cpu_sum.c -- work split over an OpenMP team in contiguous blocks
 * (cl_cpu_blocks: the convolutions' images, the sums' chunks), the same
 * blocks taken in pieces that a thread done early takes from the others'
 * (cl_cpu_pieces), and a sum in
 * double over chunks on such a team, the same bits at every run and on
 * every team: the chunks fall into CL_CPU_SUM_GROUPS fixed groups, each
 * summed in order by whichever thread holds it, and the groups' sums are
 * added in group order. An OpenMP reduction(+) adds partial sums as the
 * threads arrive, which with three or more threads moves the last bits
 * from run to run; partial sums per thread (as here until 2026-12-04) gave
 * each team size bits of its own, so the loss and the clipping norm, and
 * through it a clipped model's parameters, depended on the thread count.
 */
#include "cpu_kernels.h"

#include <stdatomic.h>
#include <stdint.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Groups of chunks, their sums on the stack; a team larger than this
 * leaves threads idle. */
#define CL_CPU_SUM_GROUPS 256

int cl_cpu_blocks(int n_threads, long long n, cl_cpu_block_fn fn, void *arg) {
  int used = 1;
  const int threads = cl_cpu_threads(n_threads);
  (void)threads;
#ifdef _OPENMP
#pragma omp parallel num_threads(threads) if (threads > 1)
#endif
  {
    int tid = 0, team = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    team = omp_get_num_threads();
#endif
    if (tid == 0) used = team;
    fn(arg, n * tid / team, n * (tid + 1) / team, tid);
  }
  return used;
}

/* One thread's block, unclaimed part [lo, hi) as lo | hi << 32, on a cache
 * line of its own (the owner and a thief write it). */
typedef struct piece_range {
  _Alignas(64) _Atomic uint64_t r;
} piece_range;

/* Ranges on the stack (a step allocates nothing): a larger team takes
 * static blocks. */
#define CL_CPU_PIECES_MAX_TEAM 64

/* Claims up to `piece` indices of *pr: from the front (the owner) or the
 * back (a thief). 0 when none are left. */
static int claim(piece_range *pr, long long piece, int back, long long *lo, long long *hi) {
  uint64_t r = atomic_load_explicit(&pr->r, memory_order_relaxed);
  for (;;) {
    const long long a = (long long)(r & 0xFFFFFFFFu), b = (long long)(r >> 32);
    if (a >= b) return 0;
    const long long take = b - a < piece ? b - a : piece;
    const uint64_t next = back ? (uint64_t)a | (uint64_t)(b - take) << 32
                               : (uint64_t)(a + take) | (uint64_t)b << 32;
    if (atomic_compare_exchange_weak_explicit(&pr->r, &r, next, memory_order_relaxed,
                                              memory_order_relaxed)) {
      *lo = back ? b - take : a, *hi = back ? b : a + take;
      return 1;
    }
  }
}

typedef struct piece_job {
  piece_range *ranges; /* NULL: static blocks (block_in_pieces) */
  int threads;
  long long piece;
  cl_cpu_block_fn fn;
  void *arg;
} piece_job;

/* A static block, piece by piece (one thread, or no room for the ranges). */
static void block_in_pieces(void *arg, long long lo, long long hi, int tid) {
  const piece_job *j = arg;
  for (long long a = lo; a < hi; a += j->piece)
    j->fn(j->arg, a, hi - a < j->piece ? hi : a + j->piece, tid);
}

/* Thread tid's own blocks [r0, r1) (one, or every block when the team is
 * smaller than asked), from the front; then the others' from the back,
 * the next thread's first. */
static void piece_worker(void *arg, long long r0, long long r1, int tid) {
  const piece_job *w = arg;
  long long lo, hi;
  for (long long r = r0; r < r1; r++)
    while (claim(&w->ranges[r], w->piece, 0, &lo, &hi)) w->fn(w->arg, lo, hi, tid);
  for (int k = 1; k < w->threads; k++) {
    piece_range *other = &w->ranges[(r0 + k) % w->threads];
    while (claim(other, w->piece, 1, &lo, &hi)) w->fn(w->arg, lo, hi, tid);
  }
}

int cl_cpu_pieces(int n_threads, long long n, long long piece, cl_cpu_block_fn fn, void *arg) {
  const int threads = cl_cpu_threads(n_threads);
  if (piece < 1) piece = 1;
  if (threads < 2 || n > 0x7FFFFFFFLL || threads > CL_CPU_PIECES_MAX_TEAM) {
    piece_job j = {NULL, threads, piece, fn, arg};
    return cl_cpu_blocks(threads, n, block_in_pieces, &j);
  }
  piece_range ranges[CL_CPU_PIECES_MAX_TEAM];
  for (int t = 0; t < threads; t++) {
    const uint64_t lo = (uint64_t)(n * t / threads), hi = (uint64_t)(n * (t + 1) / threads);
    atomic_init(&ranges[t].r, lo | hi << 32);
  }
  /* every block set before the team starts; a team of threads threads
   * gives each its own block (cl_cpu_blocks' share of the blocks) */
  piece_job w = {ranges, threads, piece, fn, arg};
  return cl_cpu_blocks(threads, threads, piece_worker, &w);
}

typedef struct sum_job {
  cl_cpu_chunk_fn f;
  void *ctx;
  long long chunks;
  double *part; /* one a group */
} sum_job;

/* Groups [lo, hi): group g holds chunks [chunks g / G, chunks (g + 1) / G). */
static void sum_groups(void *arg, long long lo, long long hi, int tid) {
  const sum_job *j = arg;
  (void)tid;
  for (long long g = lo; g < hi; g++) {
    double s = 0.0;
    const long long end = j->chunks * (g + 1) / CL_CPU_SUM_GROUPS;
    for (long long ch = j->chunks * g / CL_CPU_SUM_GROUPS; ch < end; ch++) s += j->f(ch, j->ctx);
    j->part[g] = s;
  }
}

double cl_cpu_sum_chunks(int n_threads, long long chunks, int parallel, cl_cpu_chunk_fn f,
                         void *ctx) {
  double part[CL_CPU_SUM_GROUPS];
  sum_job j = {f, ctx, chunks, part};
  cl_cpu_blocks(parallel ? n_threads : 1, CL_CPU_SUM_GROUPS, sum_groups, &j);
  double sum = 0.0;
  for (int g = 0; g < CL_CPU_SUM_GROUPS; g++) sum += part[g];
  return sum;
}
