/*
 * tests/c/test_core_reduction.c -- a loss's reduction (mean, sum, batchmean)
 * over a batch split into parts: micro-batches (accumulation_steps, uneven:
 * 3 + 2) and data-parallel ranks (unequal shares), each part weighted as
 * loss.c says (a segment of n elements: n / N for the mean, n for the sum,
 * n / B for batchmean; a rank: its share of the sequences, 1 for the sum).
 * The parts' gradients and losses must add up to the whole batch's.
 *
 * The ranks run one after the other in this process, through a
 * communicator of size 2 that applies the rank's weight to its own buffers
 * and adds nothing (the other rank's contribution is the other call's):
 * what dist.c hands an engine, without an engine. The step of a rank is the
 * real step; only the sum over ranks is done here.
 */
#include "core/comm.h" /* struct cl_comm, cl_comm_i: the test's communicator */
#include "ctest.h"     /* CHECK, uniform01, ctest_config */

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 5, T = 3, C = 2, H = 5, W = 4, OUT = 3 };
static float xs[B * T * C * H * W], ys[B * T * OUT * H * W];
#define G_MAX (1 << 15)
static float g_full[G_MAX], g_part[G_MAX], g_sum[G_MAX];

/* ---- a communicator of size 2 that weighs this rank's part only ---- */
static cl_status one_allreduce(cl_comm *c, cl_backend *be, float *buf, size_t n, float scale) {
  (void)c, (void)be;
  for (size_t i = 0; i < n; i++) buf[i] *= scale;
  return CL_OK;
}
static cl_status one_ok(cl_comm *c) { return (void)c, CL_OK; }
static cl_status one_broadcast(cl_comm *c, void *buf, size_t bytes, int root, int dev) {
  return (void)c, (void)buf, (void)bytes, (void)root, (void)dev, CL_OK;
}
static cl_status one_sum(cl_comm *c, double *v, int n) { return (void)c, (void)v, (void)n, CL_OK; }
static void one_abort(cl_comm *c, int code) { (void)c, (void)code; }
static void one_destroy(cl_comm *c) { (void)c; }
static const struct cl_comm_i one_iface = {"one-of-two", 0,       one_allreduce, NULL,
                                           one_ok,       one_broadcast, one_sum, one_ok,
                                           one_abort,    one_destroy};

/* Gradients (flattened, into g) and loss of rows [r0, r0 + n) after one step at
 * lr 0, with the loss `red` and the step options o (may be NULL). */
static size_t step_of(int r0, int n, cl_target tg, cl_loss_reduction red, cl_step_options *o,
                      float *g, double *loss) {
  cl_config cfg = ctest_config(C, 4, OUT, 3, 3, 1, 1);
  ctest_rng = 7;
  cl_model *m = ctest_model(&cfg);
  const int seq = tg == CL_TARGET_SEQUENCE;
  const size_t ty = (size_t)(seq ? T : 1) * OUT * H * W;
  cl_host_array xa = {xs + (size_t)r0 * T * C * H * W, CL_HOST_TORCH_F32, 5, {n, T, C, H, W}};
  cl_host_array ya = {ys + (size_t)r0 * ty, CL_HOST_TORCH_F32, seq ? 5 : 4,
                      {n, seq ? T : OUT, seq ? OUT : H, seq ? H : W, seq ? W : 0}};
  cl_optim sgd = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_step_options plain;
  if (!o) {
    memset(&plain, 0, sizeof plain);
    o = &plain;
  }
  o->loss.kind = CL_LOSS_BCE_LOGITS;
  o->loss.pos_weight = 1;
  o->loss.reduction = red;
  CHECK(cl_model_train_step(m, &xa, &ya, tg, &sgd, o, loss) == CL_OK, "train_step: %s",
        cl_model_error(m));
  const size_t k = ctest_flat(m, 1, g, G_MAX);
  cl_model_free(m);
  return k;
}

/* Two ranks of rows {split, B - split}, each with accumulation_steps acc. */
static void check_split(cl_target tg, cl_loss_reduction red, int split, int acc) {
  double whole, part, sum = 0;
  const size_t n = step_of(0, B, tg, red, NULL, g_full, &whole);
  memset(g_sum, 0, sizeof g_sum);
  cl_comm comm;
  memset(&comm, 0, sizeof comm);
  comm.iface = &one_iface;
  comm.size = 2;
  const int rows[2] = {split, B - split};
  for (int r = 0, r0 = 0; r < 2; r0 += rows[r], r++) {
    cl_step_options o;
    memset(&o, 0, sizeof o);
    o.accumulation_steps = acc <= rows[r] ? acc : 1;
    o.comm = split < B ? &comm : NULL;
    o.comm_share = (double)rows[r] / B;
    comm.rank = r;
    step_of(r0, rows[r], tg, red, &o, g_part, &part);
    for (size_t i = 0; i < n; i++) g_sum[i] += g_part[i];
    sum += part;
    if (split == B) break;
  }
  const double dg = rel_diff(g_sum, g_full, n), dl = fabs(sum - whole) / fabs(whole);
  static const char *const names[] = {"mean", "sum", "batchmean"};
  CHECK(dg <= 1e-6 && dl <= 1e-12, "%s, %s: ranks of %d + %d rows, accumulation %d: gradients "
        "%.2e, loss %.2e (relative) from the whole batch's",
        names[red], tg == CL_TARGET_SEQUENCE ? "sequence" : "last state", rows[0], rows[1], acc,
        dg, dl);
  printf("%-9s %-10s ranks %d + %d, accumulation %d: the parts add up to the batch's "
         "(gradients %.1e, loss %.1e)\n", names[red],
         tg == CL_TARGET_SEQUENCE ? "sequence" : "last state", rows[0], split == B ? 0 : rows[1],
         acc, dg, dl);
}

/* The sum is n times the mean and batchmean n / B times it, gradient too. */
static void check_scale(cl_loss_reduction red) {
  double mean, other;
  const size_t n = step_of(0, B, CL_TARGET_LAST_STATE, CL_REDUCE_MEAN, NULL, g_full, &mean);
  step_of(0, B, CL_TARGET_LAST_STATE, red, NULL, g_part, &other);
  const double k = red == CL_REDUCE_SUM ? (double)B * OUT * H * W : (double)OUT * H * W;
  for (size_t i = 0; i < n; i++) g_sum[i] = (float)(k * g_full[i]);
  CHECK(fabs(other - k * mean) <= 1e-12 * fabs(k * mean) && rel_diff(g_part, g_sum, n) <= 1e-6,
        "reduction %d: loss %.17g, want %.17g times the mean %.17g", (int)red, other, k, mean);
}

int main(void) {
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) xs[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < sizeof ys / sizeof *ys; i++) ys[i] = uniform01(NULL) > 0.5 ? 1.0f : 0.0f;
  check_scale(CL_REDUCE_SUM);
  check_scale(CL_REDUCE_BATCHMEAN);
  for (int red = CL_REDUCE_MEAN; red < CL_N_REDUCTIONS; red++) {
    for (int tg = 0; tg < 2; tg++) {
      const cl_target t = tg ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
      check_split(t, (cl_loss_reduction)red, B, 2); /* one process, micro-batches 3 + 2 */
      check_split(t, (cl_loss_reduction)red, 2, 1); /* ranks of 2 + 3 */
      check_split(t, (cl_loss_reduction)red, 4, 2); /* 4 (2 + 2) + 1 */
    }
  }
  return ctest_done("test_core_reduction");
}
