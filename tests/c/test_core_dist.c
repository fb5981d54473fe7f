/*
 * tests/c/test_core_dist.c -- data-parallel training in one process: two
 * ranks, each a model stepping in its own thread, joined by a communicator
 * of threads over shared memory and a barrier (comm_threads.h, filling
 * core/comm.h's slot table as comm_mpi.c does), must train as one model on
 * the whole batch. The split is uneven (3 + 5 of 8 sequences), so a rank's
 * share of the gradients or of the loss (dist.c) that is wrong shows in
 * the loss, the gradients and the parameters after the steps; rank 1
 * starts from other weights and takes rank 0's by cl_model_broadcast_params.
 * Cases: the last state's target under SGD with momentum (two steps), and a
 * sequence target with gradient accumulation (uneven micro-batches on each
 * rank: a bucket sent before its layer's last pass would be summed short),
 * and an encoder-forecaster of 1 + 1 layers (its head, reading the top
 * layer alone, rides in that layer's bucket) and of 2 + 2 with accumulation
 * (its head a bucket of its own): the communicator's bytes count each
 * gradient once.
 * Last, each rank a model of two threads with its step split by batch
 * (core/split.c): its threads' gradients summed, then the ranks'.
 * test_core_comm.c has the one-process communicator and the shares' algebra;
 * tests/testthat/test-distributed.R the MPI engine under mpirun.
 */
#define _POSIX_C_SOURCE 200809L /* pthread_barrier_t, setenv */
#include "comm_threads.h"       /* the communicator: threads of one process */
#include "core/internal.h"      /* cl_split_ran */
#include "ctest.h"              /* CHECK, uniform01, ctest_config, ctest_flat, rel_diff */

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum { RANKS = 2, B = 8, T = 3, C = 2, H = 5, W = 4 };
static const int rows_of[RANKS] = {3, 5};

/* ---- the ranks and the one-model reference -------------------------------- */

static float xs[B * T * C * H * W], ys[B * T * 3 * H * W];

typedef struct rank_job {
  cl_model *m;
  cl_comm *comm;
  int r0, rows, steps;
  cl_target target;
  const cl_optim *opt;
  int accumulation;
  double loss[2];
  cl_status status;
} rank_job;

enum { K = 2 };      /* an encoder-forecaster's target frames */
static int fc_layers; /* 0: a plain stack; n: an encoder-forecaster of n layers a stack */
static int rank_threads = 1; /* 2: each rank's step split by batch across two threads */

static cl_model *model(unsigned long long seed, int threads) {
  cl_config c = ctest_config(C, 4, 3, 3, 3, 1, threads);
  setenv("CONVLSTM_SPLIT", threads > 1 ? "batch" : "call", 1);
  if (fc_layers) {
    c.forecaster = 1;
    c.n_layers = 2 * fc_layers;
    for (int l = 0; l < c.n_layers; l++) c.hidden_dims[l] = 4 - l % fc_layers % 2, c.kernel_sizes[l] = 3;
  }
  ctest_rng = seed;
  return ctest_model(&c);
}

static cl_status steps_on(cl_model *m, int r0, int rows, const rank_job *j, cl_comm *comm,
                          double share, double *loss) {
  int seq = j->target == CL_TARGET_SEQUENCE;
  cl_host_array xa = {xs + (size_t)r0 * T * C * H * W, CL_HOST_TORCH_F32, 5, {rows, T, C, H, W}};
  cl_host_array ya = {ys + (size_t)r0 * (seq ? T : 1) * 3 * H * W, CL_HOST_TORCH_F32, seq ? 5 : 4,
                      {rows, seq ? T : 3, seq ? 3 : H, seq ? H : W, seq ? W : 0}};
  cl_host_array yf = {ys + (size_t)r0 * K * C * H * W, CL_HOST_TORCH_F32, 5, {rows, K, C, H, W}};
  if (fc_layers) ya = yf;
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.accumulation_steps = j->accumulation;
  o.comm = comm;
  o.comm_share = share;
  for (int k = 0; k < j->steps; k++) {
    cl_status s = cl_model_train_step(m, &xa, &ya, j->target, j->opt, &o, &loss[k]);
    if (s != CL_OK) return s;
    if (comm && cl_split_ran(m) != (rank_threads > 1 ? 2 : 0))
      return cl_fail(m, CL_E_INTERNAL, "the step ran split on %d threads", cl_split_ran(m));
  }
  return CL_OK;
}

static void *rank_main(void *arg) {
  rank_job *j = arg;
  j->status = cl_model_broadcast_params(j->m, j->comm, 0);
  if (j->status == CL_OK)
    j->status = steps_on(j->m, j->r0, j->rows, j, j->comm, (double)j->rows / B, j->loss);
  if (j->status != CL_OK) {
    printf("rank %d: %s\n", j->comm->rank, cl_model_error(j->m));
    cl_comm_abort(j->comm, 1); /* the other rank would wait forever */
  }
  return NULL;
}

#define MAXV (1 << 14)
static float ref_v[MAXV], got_v[MAXV], other_v[MAXV];

static void compare(const char *label, rank_job *ref, rank_job *jobs) {
  for (int k = 0; k < ref->steps; k++)
    for (int r = 0; r < RANKS; r++) {
      double d = fabs(jobs[r].loss[k] - ref->loss[k]) / fabs(ref->loss[k]);
      CHECK(d <= 1e-6, "%s: step %d, rank %d's loss %.9g, the whole batch's %.9g", label, k + 1, r,
            jobs[r].loss[k], ref->loss[k]);
    }
  for (int what = 0; what < 2; what++) {
    const char *kind = what ? "gradients" : "parameters";
    size_t n = ctest_flat(ref->m, what, ref_v, MAXV);
    ctest_flat(jobs[0].m, what, got_v, MAXV);
    ctest_flat(jobs[1].m, what, other_v, MAXV);
    double d = rel_diff(got_v, ref_v, n);
    CHECK(d <= 1e-5, "%s: rank 0's %s differ from the whole batch's by %.2e", label, kind, d);
    /* the ranks sum the same floats in the same order and update alike */
    CHECK(memcmp(got_v, other_v, n * sizeof *got_v) == 0, "%s: the ranks' %s differ", label, kind);
    printf("%s: %s of ranks 3 + 5 within %.2e (relative) of one model on 8\n", label, kind, d);
  }
  printf("%s: loss %.9g (rank 0) and %.9g (the whole batch)\n", label, jobs[0].loss[ref->steps - 1],
         ref->loss[ref->steps - 1]);
}

static void run_case(const char *label, cl_target target, const cl_optim *opt, int accumulation,
                     int steps) {
  rank_job ref = {model(5, 1), NULL, 0, B, steps, target, opt, accumulation, {0, 0}, CL_OK};
  CHECK(steps_on(ref.m, 0, B, &ref, NULL, 0, ref.loss) == CL_OK, "%s: the whole batch: %s",
        label, cl_model_error(ref.m));
  comm_threads_shared sh = {.size = RANKS};
  pthread_barrier_init(&sh.bar, NULL, RANKS);
  rank_job jobs[RANKS];
  pthread_t th[RANKS];
  for (int r = 0, r0 = 0; r < RANKS; r0 += rows_of[r], r++) {
    /* rank 1 from other weights: the broadcast must bring rank 0's */
    jobs[r] = (rank_job){model(r ? 77 : 5, rank_threads), comm_threads_create(&sh, r), r0,
                         rows_of[r], steps,
                         target, opt, accumulation, {0, 0}, CL_OK};
  }
  for (int r = 0; r < RANKS; r++) pthread_create(&th[r], NULL, rank_main, &jobs[r]);
  for (int r = 0; r < RANKS; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < RANKS; r++) CHECK(jobs[r].status == CL_OK, "%s: rank %d failed", label, r);
  compare(label, &ref, jobs);
  cl_comm_stats st;
  cl_comm_get_stats(jobs[1].comm, &st, 0);
  CHECK(st.steps == steps && st.bytes == (double)steps * cl_model_n_params(ref.m) * sizeof(float),
        "%s: stats %ld steps, %.0f bytes", label, st.steps, st.bytes);
  /* the buckets listed (the advisor's time model reads them) hold each gradient once */
  int layer[CL_MAX_LAYERS + 1];
  size_t bytes[CL_MAX_LAYERS + 1], sum = 0;
  int nb = cl_model_grad_buckets(ref.m, layer, bytes);
  for (int i = 0; i < nb; i++) sum += bytes[i];
  CHECK(sum == cl_model_n_params(ref.m) * sizeof(float), "%s: %d buckets of %zu bytes, want %zu",
        label, nb, sum, (size_t)cl_model_n_params(ref.m) * sizeof(float));
  for (int r = 0; r < RANKS; r++) {
    cl_model_free(jobs[r].m);
    cl_comm_free(jobs[r].comm);
  }
  pthread_barrier_destroy(&sh.bar);
  cl_model_free(ref.m);
}

int main(void) {
  ctest_rng = 3;
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) xs[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < sizeof ys / sizeof *ys; i++) ys[i] = (float)uniform01(NULL);
  cl_optim sgd = {.kind = CL_OPTIM_SGD, .lr = 0.5, .momentum = 0.9};
  run_case("last state, SGD with momentum, 2 steps", CL_TARGET_LAST_STATE, &sgd, 0, 2);
  run_case("sequence, accumulation 2 (2 + 1 and 3 + 2)", CL_TARGET_SEQUENCE, &sgd, 2, 1);
  fc_layers = 1;
  run_case("encoder-forecaster 1 + 1, 2 steps", CL_TARGET_SEQUENCE, &sgd, 0, 2);
  fc_layers = 2;
  run_case("encoder-forecaster 2 + 2, accumulation 2", CL_TARGET_SEQUENCE, &sgd, 2, 1);
  rank_threads = 2;
  run_case("encoder-forecaster 2 + 2, ranks split by batch", CL_TARGET_SEQUENCE, &sgd, 0, 2);
  fc_layers = 0;
  run_case("last state, ranks split by batch, 2 steps", CL_TARGET_LAST_STATE, &sgd, 0, 2);
  run_case("sequence, ranks split by batch, accumulation 2", CL_TARGET_SEQUENCE, &sgd, 2, 1);
  unsetenv("CONVLSTM_SPLIT");
  return ctest_done("test_core_dist");
}
