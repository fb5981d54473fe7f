/*
 * core/split.c -- a training step split by batch across a CPU model's
 * threads (CONVLSTM_SPLIT=batch when the model is made), beside the usual
 * step that splits each call's work across the team.
 *
 * Why: where two cores share no cache, each call split across them hands
 * its results from one core to the other at every call; a thread that
 * keeps its own sequences through the whole step hands over only the
 * weight gradients at its end (doc/speed.md, "Two threads split by
 * batch"). Where the cores share a cache the call split is as fast or
 * faster, so this step is asked for, not the default; CONVLSTM_SPLIT=auto
 * times both ways in a probe of a few steps and runs the faster, probing
 * again every few hundred steps (a host may move its vCPUs).
 *
 * How: the step is run as accumulation runs it (train.c), its
 * micro-batches of ceil(B / threads) sequences each weighted by its share
 * of the batch, but each micro-batch on a thread of its own (with
 * accumulation's a micro-batches, each thread runs about a smaller ones in
 * turn, so that the threads' arenas together hold what the usual step's
 * does), in a twin: a model of the same configuration on one thread, with
 * its own step arena, its own gradients and the model's parameters (read,
 * never written, in a step). The twins' gradients and losses are summed
 * into the model's (and then, with a communicator, the ranks'), and the
 * model's own update runs once, as in any step: unscaling, clipping, the
 * finite guard and the optimizer state stay the model's, and nothing of a
 * twin can fall out of step with it. The twins' bytes count in the model's
 * statistics and against its memory limit (alloc.c, charge).
 *
 * Sums run in another order than one thread's, so the results are the
 * usual step's within float rounding, not its bits.
 */
#include "plan.h"    /* internal.h */
#include "program.h" /* cl_program_run, cl_micro_batches */
#include "../host/threads.h" /* cl_cpu_threads: teams of one in a forked child */

#include <stdlib.h>
#include <string.h>

/* CONVLSTM_SPLIT=auto: a probe of PROBE_ROUNDS rounds, each a step the
 * usual way and a step split, both after a step of their way untimed (the
 * first after a switch makes its buffers); then the faster way by the
 * median of its rounds, until the next probe, REPROBE_STEPS steps on (a
 * host may move the threads to other cores meanwhile). The counts are
 * internal.h's, which the tests read. */
#define PROBE_ROUNDS CL_SPLIT_PROBE_ROUNDS
#define PROBE_STEPS (4 * PROBE_ROUNDS)
#define REPROBE_STEPS CL_SPLIT_REPROBE_STEPS

struct cl_split {
  cl_config cfg;                /* the configuration the twins (m->twins) were made for */
  int ran;                      /* threads the last step ran on; 0: not split */
  int at;                       /* auto: this step's place since the probe began */
  double sec[2][PROBE_ROUNDS];  /* auto: the probe's timed steps, usual and split */
  int choice;                   /* auto: 1 split, 0 usual, after the probe */
};

/* m's configuration as a twin has it: one thread, no limit of its own. */
static cl_config twin_config(const cl_model *m) {
  cl_config c = m->cfg;
  c.n_threads = 1;
  c.memory_limit = 0;
  return c;
}

/* A twin's parameters are m's, and its carried state; the first twin's
 * gradients too. */
static void twin_free(cl_model *t, int first) {
  t->params = NULL;
  t->held = NULL;
  if (first) t->grads = NULL;
  cl_model_unmake(t);
}

static void drop_twins(cl_model *m) {
  for (int i = 0; i < m->twins.n; i++) twin_free(m->twins.m[i], i == 0);
  m->twins.n = 0;
}

void cl_split_release(cl_model *m) {
  drop_twins(m);
}

void cl_split_free(cl_model *m) {
  if (!m->split) return;
  drop_twins(m);
  free(m->split);
  m->split = NULL;
}

int cl_split_ran(const cl_model *m) { return m->split ? m->split->ran : 0; }

const char *cl_model_thread_split(const cl_model *m) {
  static const char *const name[] = {"call", "batch", "auto"};
  return name[m->split_mode];
}

static struct cl_split *split_state(cl_model *m) {
  if (!m->split) m->split = calloc(1, sizeof *m->split);
  return m->split;
}

_Static_assert(PROBE_ROUNDS == 3, "the probe's median is median3's");
static double median3(const double *v) {
  const double lo = v[0] < v[1] ? v[0] : v[1], hi = v[0] < v[1] ? v[1] : v[0];
  return v[2] < lo ? lo : v[2] > hi ? hi : v[2];
}

int cl_split_use(cl_model *m, int n) {
  if (n == 0 && m->split) m->split->ran = 0;
  if (n == 0 || m->split_mode == CL_SPLIT_BATCH) return n > 0;
  struct cl_split *sp = split_state(m);
  if (!sp) return 0; /* no host memory for the probe's books: the usual step */
  sp->ran = 0;
  if (sp->at == PROBE_STEPS)
    sp->choice = median3(sp->sec[1]) < median3(sp->sec[0]);
  const int use = sp->at < PROBE_STEPS ? sp->at % 4 >= 2 : sp->choice;
  if (!use) drop_twins(m); /* the usual step's arena takes their place */
  return use;
}

void cl_split_timed(cl_model *m, double seconds) {
  struct cl_split *sp = m->split;
  if (m->split_mode != CL_SPLIT_AUTO || !sp) return;
  if (sp->at < PROBE_STEPS && sp->at % 2 == 1) sp->sec[sp->at % 4 / 2][sp->at / 4] = seconds;
  sp->at = (sp->at + 1) % (PROBE_STEPS + REPROBE_STEPS);
}

/* Threads the step of g splits its batch across, and its micro-batch
 * schedule gm; 0 where it runs as usual: a model not asked, one thread, a
 * batch of one, a device of its own. Dropout's masks are drawn per
 * sequence (dropout.c): each thread draws its own. A carried state is the
 * model's, each thread reading and keeping its own rows; each thread's
 * planned buffers hold a given state's sequences of its micro-batches; a
 * communicator sums the model's gradients once the threads' are in. With
 * accumulation's a micro-batches, each thread runs about a of its own, so
 * that the threads' arenas together hold about what the usual step's one
 * does. */
int cl_split_schedule(const cl_model *m, const cl_schedule *g, cl_schedule *gm) {
  if (!m->split_mode || !g->training || !m->be->iface->host_accessible) return 0;
  int n = cl_cpu_threads(m->be->n_threads);
  if (n > g->B) n = g->B;
  if (n > CL_SPLIT_MAX) n = CL_SPLIT_MAX;
  if (n < 2) return 0;
  if (!m->be->iface->grad_add) return 0;
  const int a = cl_micro_batches(g, NULL);
  *gm = *g; /* accumulation's schedule, of about n a micro-batches */
  gm->Bm = (g->B + n * a - 1) / (n * a);
  const int k = cl_micro_batches(gm, NULL); /* fewer where n a does not divide B evenly */
  if (k < n) n = k;
  const int most = (k + n - 1) / n * gm->Bm; /* a thread's sequences (prepare_jobs' ranges) */
  gm->state_B = most < g->B ? most : g->B;
  return n;
}

/* n twins of m's configuration (made again when it changed), charged to m. */
cl_status cl_split_twins(cl_model *m, int n) {
  const cl_config want = twin_config(m);
  struct cl_split *sp = split_state(m);
  if (!sp) return cl_fail(m, CL_E_OOM, "out of host memory");
  if (m->twins.n >= n && memcmp(&sp->cfg, &want, sizeof want) == 0) return CL_OK;
  drop_twins(m);
  sp->cfg = want;
  for (int i = 0; i < n; i++) {
    cl_model *t;
    char err[CL_ERRMSG_LEN];
    cl_status s = cl_model_make(&want, m->make_backend, &t, err, sizeof err);
    if (s != CL_OK) {
      drop_twins(m);
      return cl_fail(m, s, "making thread %d's model of a split step: %s", i + 1, err);
    }
    cl_mem_free(&t->mem, CL_MEM_PARAMETERS, t->params, t->n_params * sizeof(float));
    t->params = NULL; /* borrowed at each step (prepare_jobs) */
    t->split_mode = CL_SPLIT_CALL;
    cl_mem_charge(&t->mem, &m->mem);
    m->twins.m[m->twins.n++] = t;
  }
  return CL_OK;
}

/* A thread's micro-batches j0 .. j1 - 1 of gm's schedule: each one's loss
 * times its share into its twin's results, its gradients into the twin's. */
typedef struct split_job {
  cl_model *t;
  cl_call c; /* each its own: a pass writes its last_pass */
  const cl_program *prog; /* the twin's: [0] a whole micro-batch's, [1] the last's */
  int j0, j1;
  cl_status s;
} split_job;

static cl_status run_job(split_job *j, const cl_schedule *gm, const cl_source *x,
                         const cl_source *y, cl_target tg, float ls, const cl_step_options *o) {
  int last;
  const int k = cl_micro_batches(gm, &last);
  CL_TRY(cl_model_zero_grad(j->t));
  CL_TRY(cl_vals_zero(j->t));
  CL_TRY(cl_state_upload(j->t, o, j->j0 * gm->Bm)); /* a given state: its sequences */
  for (int i = j->j0; i < j->j1; i++) {
    const int b0 = i * gm->Bm, b = i == k - 1 ? last : gm->Bm;
    CL_TRY(cl_dropout_upload(j->t, o, b0, b, i == j->j0)); /* its sequences' masks */
    CL_TRY(cl_program_run(j->t, &j->c, &j->prog[i == k - 1], x, y, tg, b0, b, ls,
                          &cl_vals(j->t)->loss));
  }
  return CL_OK;
}

/* Each twin's step buffers and programs for the micro-batch schedule, made
 * on this thread before any runs (nothing is allocated inside the step). */
static cl_status prepare_jobs(cl_model *m, const cl_call *c, const cl_schedule *gm,
                              cl_target tg, int n, split_job *job) {
  const int k = cl_micro_batches(gm, NULL);
  for (int i = 0; i < n; i++) {
    cl_model *t = m->twins.m[i];
    t->params = m->params;
    if (i == 0) t->grads = m->grads; /* the first thread's gradients are the model's */
    cl_state_borrow(t, m); /* a carried state: each thread reads and keeps its rows */
    const cl_program *prog;
    cl_status s = cl_step_prepare(t, gm);
    if (s == CL_OK) s = cl_step_programs(t, tg, &prog);
    if (s != CL_OK) return cl_fail(m, s, "thread %d of a split step: %s", i + 1, t->err);
    t->phase = CL_PHASE_CONSUMED;
    job[i] = (split_job){t, *c, prog, i * k / n, (i + 1) * k / n, CL_OK};
    job[i].c.comm = NULL; /* the ranks sum the model's gradients, once the threads' are in */
  }
  return CL_OK;
}

const cl_model *cl_split_twin(const cl_model *m) { return m->twins.n ? m->twins.m[0] : NULL; }

cl_status cl_split_step(cl_model *m, cl_call *c, const cl_source *x, const cl_source *y,
                        cl_target tg, float ls, const cl_update_args *u,
                        const cl_step_options *opts, const cl_schedule *g, const cl_schedule *gm,
                        int n) {
  cl_step_release(m); /* its arena would hold the whole batch's activations beside the twins' */
  CL_TRY(cl_split_twins(m, n));
  m->split->ran = 0;
  split_job job[CL_SPLIT_MAX];
  cl_status s = prepare_jobs(m, c, gm, tg, n, job);
  if (s != CL_OK) {
    drop_twins(m); /* nothing of a refused step stays reserved */
    return s;
  }
#ifdef _OPENMP
#pragma omp parallel for num_threads(n) schedule(static, 1)
#endif
  for (int i = 0; i < n; i++) job[i].s = run_job(&job[i], gm, x, y, tg, ls, opts);
  cl_step_vals *v = cl_vals(m);
  CL_TRY(cl_vals_zero(m));
  for (int i = 0; i < n; i++) {
    cl_model *t = job[i].t;
    if (job[i].s != CL_OK)
      return cl_fail(m, job[i].s, "thread %d of a split step: %s", i + 1, t->err);
    if (cl_guard_check(t) != CL_OK) return cl_fail(m, CL_E_INTERNAL, "%s", t->err);
    v->loss += cl_vals(t)->loss;
    if (i > 0) CL_KERNEL(m, m->be->iface->grad_add(m->be, m->grads, t->grads, m->n_params));
  }
  CL_TRY(cl_dist_reduce_all(m, c, &v->loss)); /* the buckets, without overlap */
  m->split->ran = n;
  m->step.g = *g; /* the shape the step ran (cl_model_last_shape) */
  m->phase = CL_PHASE_CONSUMED;
  CL_KERNEL(m, cl_backend_update_step(m->be, u, v));
  return CL_OK;
}
