/*
 * tests/c/bench_batch_split.c -- a training step split by batch elements
 * between threads against the step that splits each call: two
 * data-parallel ranks in one process (threads joined by comm_threads.h, the
 * path test_core_dist.c checks against one model), each a model on one
 * thread stepping on half the batch, their gradients summed before both
 * update alike; and, in the same process and alternated round by round,
 * one model on the whole batch on one thread and on two (each call split
 * across the team, as the step runs by default).
 *
 *   bench_batch_split [batch T H W input_dim hidden1,hidden2,... kernel steps rounds]
 *   bench_batch_split forecaster [batch steps rounds]
 *   defaults: the plain stack of issue 39, 4 20 16 16 16 48,48 5 10 3 (the
 *   last state's target); the encoder-forecaster of issue 39 (hidden 48-48
 *   a stack, 5x5, peepholes by channel, 4x4 patches of 64x64 frames, 10 +
 *   10 frames), batch 4, 10 steps, 3 rounds
 *
 * Beside them, the step split by batch inside one model (core/split.c,
 * CONVLSTM_SPLIT=batch), and auto, which probes both ways first.
 * BENCH_ACCUMULATION=a runs every step with accumulation_steps = a (each
 * rank on its half; the split step's threads on their shares).
 *
 * Prints per round the medians (s/step, after one warm-up step) and the
 * speed-ups over one thread; then the bytes (the ranks hold the
 * parameters, gradients and optimizer state twice, and half the
 * activations each; the split step holds the model's once). It checks
 * that each trains the same model: the first step's loss within 1e-5 of
 * one thread's (exit 1 if not).
 */
#define _POSIX_C_SOURCE 200809L /* pthread_barrier_t, clock_gettime */
#include "comm_threads.h"       /* the ranks' communicator */
#include "bench_common.h"       /* bench_now, bench_median, bench_uniform01, bench_hidden */
#include "convlstm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { RANKS = 2 };

static const cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};

typedef struct bench {
  cl_config cfg;
  int B, T, H, W, steps;
  int accumulation; /* accumulation_steps of every step */
  int K; /* an encoder-forecaster's target frames; 0: a plain stack */
  float *x, *y;
} bench;

/* A model on threads, its steps each call split (how 0), split by batch
 * (1, core/split.c) or whichever its probe finds faster (2, auto). */
static cl_model *model(const bench *b, int threads, int how) {
  static const char *const name[] = {"call", "batch", "auto"};
  cl_config c = b->cfg;
  c.n_threads = threads;
  setenv("CONVLSTM_SPLIT", name[how], 1);
  cl_model *m = bench_model(&c, "bench_batch_split");
  bench_rng = 42; /* the same weights in every model */
  cl_model_init_params(m, bench_uniform01, NULL);
  return m;
}

/* rows [r0, r0 + rows) of x and y, as the public API takes them */
static void arrays(const bench *b, int r0, int rows, cl_host_array *xa, cl_host_array *ya) {
  const int C = b->cfg.input_dim, top = b->cfg.hidden_dims[b->cfg.n_layers - 1];
  *xa = (cl_host_array){b->x + (size_t)r0 * b->T * C * b->H * b->W, CL_HOST_TORCH_F32, 5,
                        {rows, b->T, C, b->H, b->W}};
  if (b->K) /* the target frames */
    *ya = (cl_host_array){b->y + (size_t)r0 * b->K * C * b->H * b->W, CL_HOST_TORCH_F32, 5,
                          {rows, b->K, C, b->H, b->W}};
  else
    *ya = (cl_host_array){b->y + (size_t)r0 * top * b->H * b->W, CL_HOST_TORCH_F32, 4,
                          {rows, top, b->H, b->W, 0}};
}

static cl_target target_of(const bench *b) {
  return b->K ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
}

/* The plan of a step of rows sequences (a forecaster's horizon: its target frames). */
static size_t plan_bytes(cl_model *m, const bench *b, int rows) {
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.horizon = b->K;
  o.accumulation_steps = b->accumulation;
  cl_plan p;
  if (cl_model_plan(m, rows, b->T, b->H, b->W, 1, &adam, &o, &p) != CL_OK) return 0;
  const size_t total = p.total;
  cl_plan_free(&p);
  return total;
}

/* One model on the whole batch (how: model's): median s/step after one
 * warm-up step (auto: after its probe's 12); its first step's loss; the
 * most its statistics counted (the plan's bytes, test_core_split checks). */
static double whole(const bench *b, int threads, int how, double *first_loss, size_t *plan) {
  cl_model *m = model(b, threads, how);
  cl_host_array xa, ya;
  arrays(b, 0, b->B, &xa, &ya);
  double *sec = malloc((size_t)b->steps * sizeof *sec), loss = 0;
  const int warm = how == 2 ? 12 : 1;
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.accumulation_steps = b->accumulation;
  for (int s = -warm; s < b->steps; s++) {
    double t0 = bench_now();
    if (cl_model_train_step(m, &xa, &ya, target_of(b), &adam, &o, &loss) != CL_OK) {
      fprintf(stderr, "bench_batch_split: train_step: %s\n", cl_model_error(m));
      exit(2);
    }
    if (s == -warm) *first_loss = loss;
    if (s >= 0) sec[s] = bench_now() - t0;
  }
  cl_mem_stats st;
  cl_model_memory_stats(m, &st);
  *plan = st.peak_allocated;
  cl_model_free(m);
  double med = bench_median(sec, b->steps);
  free(sec);
  return med;
}

typedef struct rank_job {
  const bench *b;
  cl_model *m; /* made before the threads start: init_params draws from one generator */
  cl_comm *comm;
  int r0, rows;
  double *sec, first_loss;
  size_t plan_bytes;
  cl_status status;
} rank_job;

/* A rank's steps, each timed on rank 0 from a barrier before it to one
 * after it: the step's wall time, whichever rank is slower. */
static void *rank_main(void *arg) {
  rank_job *j = arg;
  const bench *b = j->b;
  cl_model *m = j->m;
  cl_host_array xa, ya;
  arrays(b, j->r0, j->rows, &xa, &ya);
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.comm = j->comm;
  o.comm_share = (double)j->rows / b->B;
  o.accumulation_steps = b->accumulation;
  double loss = 0;
  j->status = cl_model_broadcast_params(m, j->comm, 0);
  for (int s = -1; s < b->steps && j->status == CL_OK; s++) {
    cl_comm_barrier(j->comm);
    double t0 = bench_now();
    j->status = cl_model_train_step(m, &xa, &ya, target_of(b), &adam, &o, &loss);
    if (j->status != CL_OK) break;
    cl_comm_barrier(j->comm);
    if (s < 0) j->first_loss = loss;
    else j->sec[s] = bench_now() - t0;
  }
  if (j->status != CL_OK) {
    fprintf(stderr, "bench_batch_split: rank %d: %s\n", j->comm->rank, cl_model_error(m));
    cl_comm_abort(j->comm, 1); /* the other rank would wait forever */
  }
  j->plan_bytes = plan_bytes(m, b, j->rows);
  cl_model_free(m);
  return NULL;
}

static double split(const bench *b, double *first_loss, size_t *plan) {
  comm_threads_shared sh = {.size = RANKS};
  pthread_barrier_init(&sh.bar, NULL, RANKS);
  rank_job j[RANKS];
  pthread_t th[RANKS];
  double *sec = malloc((size_t)RANKS * b->steps * sizeof *sec);
  for (int r = 0; r < RANKS; r++) {
    const int r0 = b->B * r / RANKS, r1 = b->B * (r + 1) / RANKS;
    j[r] = (rank_job){b, model(b, 1, 0), comm_threads_create(&sh, r), r0, r1 - r0,
                      sec + (size_t)r * b->steps, 0, 0, CL_OK};
  }
  for (int r = 0; r < RANKS; r++) pthread_create(&th[r], NULL, rank_main, &j[r]);
  for (int r = 0; r < RANKS; r++) pthread_join(th[r], NULL);
  *first_loss = j[0].first_loss;
  *plan = 0;
  for (int r = 0; r < RANKS; r++) {
    *plan += j[r].plan_bytes;
    cl_comm_free(j[r].comm);
  }
  pthread_barrier_destroy(&sh.bar);
  double med = bench_median(sec, b->steps); /* rank 0's: the barriers make them the step's */
  free(sec);
  return med;
}

/* The plain stack from the arguments (argv[1] on). */
static void plain_args(int argc, char **argv, bench *b, int *rounds) {
  b->B = argc > 1 ? atoi(argv[1]) : 4, b->T = argc > 2 ? atoi(argv[2]) : 20;
  b->H = argc > 3 ? atoi(argv[3]) : 16, b->W = argc > 4 ? atoi(argv[4]) : 16;
  b->cfg.input_dim = argc > 5 ? atoi(argv[5]) : 16;
  const char *hid = argc > 6 ? argv[6] : "48,48";
  const int k = argc > 7 ? atoi(argv[7]) : 5;
  b->steps = argc > 8 ? atoi(argv[8]) : 10;
  *rounds = argc > 9 ? atoi(argv[9]) : 3;
  bench_hidden(&b->cfg, hid, k);
  b->cfg.bias = 1;
}

/* Issue 39's encoder-forecaster, as bench/bench_convlstm.R --model=forecaster makes it. */
static void forecaster_args(int argc, char **argv, bench *b, int *rounds) {
  b->B = argc > 2 ? atoi(argv[2]) : 4;
  b->steps = argc > 3 ? atoi(argv[3]) : 10;
  *rounds = argc > 4 ? atoi(argv[4]) : 3;
  b->T = 10, b->K = 10, b->H = b->W = 64;
  b->cfg.input_dim = 1;
  b->cfg.forecaster = 1;
  b->cfg.patch = 4;
  b->cfg.n_layers = 4; /* the encoder's two, the forecaster's two */
  for (int l = 0; l < 4; l++) b->cfg.hidden_dims[l] = 48, b->cfg.kernel_sizes[l] = 5;
  b->cfg.peephole = CL_PEEP_CHANNEL;
  b->cfg.bias = 1;
}

int main(int argc, char **argv) {
  bench b;
  memset(&b, 0, sizeof b);
  int rounds = 3;
  if (argc > 1 && strcmp(argv[1], "forecaster") == 0) forecaster_args(argc, argv, &b, &rounds);
  else plain_args(argc, argv, &b, &rounds);
  const char *acc = getenv("BENCH_ACCUMULATION");
  b.accumulation = acc ? atoi(acc) : 1;
  if (b.B < RANKS || b.steps < 1 || rounds < 1 || b.cfg.n_layers < 1 || b.accumulation < 1) {
    fprintf(stderr, "bench_batch_split: a batch of %d rows or more, steps and rounds >= 1, "
            "BENCH_ACCUMULATION >= 1\n", RANKS);
    return 2;
  }
  const int top = b.cfg.hidden_dims[b.cfg.n_layers - 1];
  const size_t nx = (size_t)b.B * b.T * b.cfg.input_dim * b.H * b.W;
  const size_t ny = b.K ? (size_t)b.B * b.K * b.cfg.input_dim * b.H * b.W
                       : (size_t)b.B * top * b.H * b.W;
  b.x = malloc(nx * sizeof *b.x), b.y = malloc(ny * sizeof *b.y);
  bench_rng = 7;
  for (size_t i = 0; i < nx; i++) b.x[i] = (float)bench_uniform01(NULL);
  for (size_t i = 0; i < ny; i++) b.y[i] = (float)bench_uniform01(NULL);
  printf("%s, batch %d, T %d (+ %d), %dx%d, input %d, hidden %d (layers %d), kernel %d, "
         "accumulation %d: median s/step of %d steps\n", b.K ? "encoder-forecaster" : "plain stack",
         b.B, b.T, b.K, b.H, b.W, b.cfg.input_dim, b.cfg.hidden_dims[0], b.cfg.n_layers,
         b.cfg.kernel_sizes[0], b.accumulation, b.steps);
  int rc = 0;
  size_t plan1 = 0, plan2 = 0, plans = 0, plane = 0, plana = 0;
  for (int r = 1; r <= rounds; r++) {
    double l1, l2, ls, le, la;
    const double t1 = whole(&b, 1, 0, &l1, &plan1), t2 = whole(&b, 2, 0, &l2, &plan2);
    const double ts = split(&b, &ls, &plans), te = whole(&b, 2, 1, &le, &plane);
    const double ta = whole(&b, 2, 2, &la, &plana);
    printf("round %d: 1 thread %.4f; 2 threads %.4f (%.2fx); ranks 2 x 1 thread %.4f (%.2fx); "
           "step split by batch, 2 threads %.4f (%.2fx); auto %.4f (%.2fx)\n", r, t1, t2, t1 / t2,
           ts, t1 / ts, te, t1 / te, ta, t1 / ta);
    const double other[4] = {l2, ls, le, la};
    const char *who[4] = {"2 threads'", "the ranks'", "the step split by batch's", "auto's"};
    for (int k = 0; k < 4; k++) {
      const double d = fabs(other[k] - l1) / fabs(l1);
      if (d <= 1e-5) continue;
      printf("%s first loss %.9g is not one thread's %.9g (%.2e)\n", who[k], other[k], l1, d);
      rc = 1;
    }
  }
  printf("bytes at most: 1 thread %zu, 2 threads %zu, step split by batch %zu, auto %zu; ranks' "
         "plans (both) %zu\n", plan1, plan2, plane, plana, plans);
  free(b.x);
  free(b.y);
  return rc;
}
