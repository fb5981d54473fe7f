/*
 * tests/c/test_core_fc_memory.c -- checkpoint and recompute_gates on Shi et
 * al.'s encoder-forecaster (program.c), against the same forecaster trained
 * without them, on the CPU backend (one thread, so that a convolution's
 * sums run in one order whatever the call's size).
 *
 * What must hold, for float32, float16 and bfloat16 training, with and without
 * accumulation:
 *  - the first step's loss bit for bit: neither option changes a value of
 *    the forward (a recomputed segment or chunk repeats its calls);
 *  - where the schedule does not change (checkpoint >= every stack's steps,
 *    a chunk as long as the longest stack) the parameters after 3 Adam
 *    steps bit for bit;
 *  - otherwise the gradients within float32 rounding (1e-6 relative: the
 *    weight gradients are summed segment by segment or chunk by chunk, the
 *    plain stack's guarantee, test_core_options.c) and the losses and
 *    parameters of 3 Adam steps within 1e-5;
 *  - the allocator's peak equal to cl_model_plan's total to the byte, and
 *    checkpointing and recompute_gates below the plain step's peak.
 */
#include "ctest.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAXP = 20000 };

typedef struct fcase {
  const char *what;
  int L, hid[2], peep, B, T, K, acc;
  cl_dtype dt;
} fcase;

static cl_model *make(const fcase *k) {
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = 1;
  c.n_layers = 2 * k->L;
  for (int l = 0; l < 2 * k->L; l++) {
    c.hidden_dims[l] = k->hid[l % k->L];
    c.kernel_sizes[l] = 3;
  }
  c.bias = 1;
  c.device = CL_DEVICE_CPU;
  c.n_threads = 1;
  c.peephole = k->peep ? CL_PEEP_CHANNEL : CL_PEEP_NONE;
  c.forecaster = 1;
  c.patch = 2;
  ctest_rng = 88172645463325252ULL; /* the same parameters for every run */
  cl_model *m = ctest_model(&c);
  if (m && k->dt != CL_F32) CHECK(cl_model_set_dtype(m, k->dt) == CL_OK, "set_dtype");
  return m;
}

typedef struct run_out {
  double loss[3];
  float grads[MAXP], params[MAXP];
  size_t n, peak, plan;
  int ok;
} run_out;

enum { H = 6, W = 8 };
static float X[4 * 6 * 1 * H * W], Y[4 * 5 * 1 * H * W];

/* One SGD step (lr 0: its gradients), then 3 Adam steps on a fresh model. */
static void run(const fcase *k, int ck, int rc, run_out *r) {
  memset(r, 0, sizeof *r);
  cl_host_array xa = {X, CL_HOST_TORCH_F32, 5, {k->B, k->T, 1, H, W}};
  cl_host_array ya = {Y, CL_HOST_TORCH_F32, 5, {k->B, k->K, 1, H, W}};
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.checkpoint = ck, o.recompute_gates = rc, o.accumulation_steps = k->acc;
  cl_optim sgd = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  cl_model *m = make(k);
  if (!m) return;
  double l0;
  cl_status s = cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd, &o, &l0);
  CHECK(s == CL_OK, "%s ck %d rc %d: %s", k->what, ck, rc, cl_model_error(m));
  r->n = ctest_flat(m, 1, r->grads, MAXP);
  cl_mem_stats ms;
  cl_model_memory_stats(m, &ms);
  r->peak = ms.peak_allocated;
  cl_plan p;
  cl_step_options po = o;
  po.horizon = k->K;
  s = cl_model_plan(m, k->B, k->T, H, W, 1, &sgd, &po, &p);
  CHECK(s == CL_OK, "%s: plan: %s", k->what, cl_model_error(m));
  r->plan = p.total;
  cl_plan_free(&p);
  cl_model_free(m);
  m = make(k);
  if (!m) return;
  for (int i = 0; i < 3; i++) {
    s = cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &adam, &o, &r->loss[i]);
    CHECK(s == CL_OK, "%s ck %d rc %d, Adam step %d: %s", k->what, ck, rc, i + 1,
          cl_model_error(m));
  }
  CHECK(r->loss[0] == l0, "%s: the first loss differs between SGD and Adam runs", k->what);
  ctest_flat(m, 0, r->params, MAXP);
  cl_model_free(m);
  r->ok = s == CL_OK;
}

static double loss_diff(const run_out *a, const run_out *b) {
  double d = 0;
  for (int i = 0; i < 3; i++) d = fmax(d, fabs(a->loss[i] - b->loss[i]) / fabs(b->loss[i]));
  return d;
}

static void check_case(const fcase *k) {
  static run_out base, r;
  int most = k->T > k->K ? k->T : k->K;
  /* checkpoint, recompute_gates; same: the schedule is the plain one's */
  const int opts[][3] = {{1, 0, 0}, {2, 0, 0}, {3, 0, 0}, {0, 1, 0}, {0, 2, 0},
                         {2, 1, 0}, {3, 2, 0}, {most, 0, 1}, {0, most, 1}};
  run(k, 0, 0, &base);
  if (!base.ok) return;
  CHECK(base.peak == base.plan, "%s, plain: peak %zu, plan %zu", k->what, base.peak, base.plan);
  double worst_g = 0, worst_p = 0;
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
    int ck = opts[i][0], rc = opts[i][1], same = opts[i][2];
    run(k, ck, rc, &r);
    if (!r.ok) continue;
    CHECK(r.loss[0] == base.loss[0], "%s ck %d rc %d: first loss %.9g, plain %.9g", k->what, ck,
          rc, r.loss[0], base.loss[0]);
    CHECK(r.peak == r.plan, "%s ck %d rc %d: peak %zu, plan %zu", k->what, ck, rc, r.peak,
          r.plan);
    if (same) {
      CHECK(memcmp(r.params, base.params, base.n * sizeof(float)) == 0 &&
                memcmp(r.loss, base.loss, sizeof r.loss) == 0,
            "%s ck %d rc %d: not bit for bit the plain step's", k->what, ck, rc);
      continue;
    }
    double g = rel_diff(r.grads, base.grads, base.n), p = rel_diff(r.params, base.params, base.n);
    double tol = k->dt == CL_F32 ? 1e-6 : 1e-5;
    CHECK(g <= tol, "%s ck %d rc %d: gradients differ by %.2e", k->what, ck, rc, g);
    CHECK(p <= 1e-5 && loss_diff(&r, &base) <= 1e-5, "%s ck %d rc %d: params %.2e, losses %.2e",
          k->what, ck, rc, p, loss_diff(&r, &base));
    CHECK(r.peak < base.peak, "%s ck %d rc %d: peak %zu not below the plain %zu", k->what, ck,
          rc, r.peak, base.peak);
    worst_g = fmax(worst_g, g);
    worst_p = fmax(worst_p, p);
    if (ck == 1 && rc == 0) printf("  %-40s peak: plain %zu, checkpoint 1 %zu", k->what, base.peak,
                                   r.peak);
    if (ck == 0 && rc == 1) printf(", recompute_gates 1 %zu\n", r.peak);
  }
  printf("  %-40s gradients within %.1e, Adam's parameters within %.1e\n", k->what, worst_g,
         worst_p);
}

int main(void) {
  for (size_t i = 0; i < sizeof X / sizeof X[0]; i++) X[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < sizeof Y / sizeof Y[0]; i++) Y[i] = (float)uniform01(NULL);
  static const fcase cases[] = {
      /* what                         L  hidden  peep B  T  K  acc dtype */
      {"L1, T 5, K 3", 1, {4, 0}, 0, 2, 5, 3, 1, CL_F32},
      {"L2 6-3, peepholes, T 3, K 5", 2, {6, 3}, 1, 3, 3, 5, 1, CL_F32},
      {"L2 3-5, T 6, K 4, accumulation 2", 2, {3, 5}, 1, 4, 6, 4, 2, CL_F32},
      {"L2 4-4, float16, T 5, K 4", 2, {4, 4}, 0, 2, 5, 4, 1, CL_F16},
      {"L1, float16, accumulation 3, T 4, K 5", 1, {5, 0}, 1, 3, 4, 5, 3, CL_F16},
      {"L2 5-3, bfloat16, accumulation 2, T 6, K 3", 2, {5, 3}, 1, 4, 6, 3, 2, CL_BF16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
  return ctest_done("test_core_fc_memory");
}
