/*
 * tests/c/test_core_comm.c -- the communicator front and what data-parallel
 * training rests on, in one process (the 2- and 3-rank jobs are
 * tests/testthat/test-distributed.R's, under mpirun):
 *  - the one-process communicator: rank 0 of 1, and a step through it is the
 *    step without one, bit for bit;
 *  - a build without MPI / NCCL says what to install;
 *  - NCCL with one rank on a GPU is the step without it, bit for bit (the
 *    GPU session's check of the NCCL path; "skip nccl" elsewhere);
 *  - the gradient buckets: one per layer, last layer first, summing to the
 *    gradients;
 *  - the shares: the gradient of a batch is the sum over any split of it of
 *    (rows / batch) x the split's own mean gradient (what dist.c sums over
 *    the ranks), for equal and unequal splits.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* setenv */
#endif
#include "core/backend.h" /* cl_backend_cuda_available */
#include "ctest.h"         /* CHECK, uniform01, ctest_config, ctest_flat */

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { B = 6, T = 3, C = 2, H = 5, W = 4 };
static float xs[B * T * C * H * W], ys[B * 3 * H * W];
#define MAXG (1 << 15)
static float g_full[MAXG], g_part[MAXG], g_sum[MAXG];

static cl_config config(void) {
  return ctest_config(C, 4, 3, 3, 3, 1, 1);
}

static cl_model *model(void) {
  cl_config c = config();
  ctest_rng = 11;
  return ctest_model(&c);
}

/* Gradients of rows [r0, r0 + n) after one step at lr 0 on dev, flattened. */
static size_t grads_on(cl_device dev, int r0, int n, float *g, const cl_step_options *o) {
  cl_config c = config();
  c.device = dev;
  ctest_rng = 11;
  cl_model *m = ctest_model(&c);
  if (!m) return 0;
  cl_host_array xa = {xs + (size_t)r0 * T * C * H * W, CL_HOST_TORCH_F32, 5, {n, T, C, H, W}};
  cl_host_array ya = {ys + (size_t)r0 * 3 * H * W, CL_HOST_TORCH_F32, 4, {n, 3, H, W, 0}};
  cl_optim sgd = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  double loss;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &sgd, o, &loss) == CL_OK,
        "train_step: %s", cl_model_error(m));
  size_t k = ctest_flat(m, 1, g, MAXG);
  cl_model_free(m);
  return k;
}

static size_t grads_of(int r0, int n, float *g, const cl_step_options *o) {
  return grads_on(CL_DEVICE_CPU, r0, n, g, o);
}

static void test_local(void) {
  cl_comm *c = NULL;
  char err[256];
  CHECK(cl_comm_local_create(&c, err, sizeof err) == CL_OK, "local: %s", err);
  CHECK(cl_comm_rank(c) == 0 && cl_comm_size(c) == 1, "local: rank %d of %d", cl_comm_rank(c),
        cl_comm_size(c));
  CHECK(strcmp(cl_comm_name(c), "local") == 0, "name %s", cl_comm_name(c));
  int v = 3;
  CHECK(cl_comm_broadcast_host(c, &v, sizeof v, 1) == CL_E_INVALID, "root 1 of 1 accepted");
  CHECK(strstr(cl_comm_error(c), "root 1") != NULL, "error: %s", cl_comm_error(c));
  CHECK(cl_comm_barrier(c) == CL_OK, "barrier");
  /* a step through the one-process communicator is the plain step */
  cl_step_options o;
  memset(&o, 0, sizeof o);
  o.comm = c;
  o.comm_share = 1;
  size_t n = grads_of(0, B, g_full, NULL);
  grads_of(0, B, g_part, &o);
  CHECK(memcmp(g_full, g_part, n * sizeof(float)) == 0, "local communicator changed the step");
  o.comm_share = 0; /* no share of the batch: refused, nothing trained */
  cl_model *bad = model();
  cl_host_array xa = {xs, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  cl_host_array ya = {ys, CL_HOST_TORCH_F32, 4, {B, 3, H, W, 0}};
  cl_optim sgd = {CL_OPTIM_SGD, 0.1, 0, 0, 0, 0, 0, 0, 0, 0};
  double loss;
  CHECK(cl_model_train_step(bad, &xa, &ya, CL_TARGET_LAST_STATE, &sgd, &o, &loss) == CL_E_INVALID &&
            strstr(cl_model_error(bad), "comm_share"),
        "share 0: %s", cl_model_error(bad));
  cl_model_free(bad);
  cl_model *m = model();
  CHECK(cl_model_broadcast_params(m, c, 0) == CL_OK, "broadcast: %s", cl_model_error(m));
  cl_model_free(m);
  cl_comm_free(c);
}

static void test_stand_ins(void) {
  cl_comm *c = NULL;
  char err[256] = "";
  if (!cl_comm_available("mpi")) {
    CHECK(cl_comm_mpi_create(&c, err, sizeof err) == CL_E_UNSUPPORTED && !c, "no MPI: created");
    CHECK(strstr(err, "no MPI") && strstr(err, "libopenmpi-dev"), "no MPI: '%s'", err);
    printf("without MPI: %s\n", err);
  }
  if (!cl_comm_available("nccl")) {
    CHECK(cl_comm_nccl_create(NULL, 0, &c, err, sizeof err) == CL_E_UNSUPPORTED && !c, "no NCCL");
    CHECK(strstr(err, "no NCCL") != NULL, "no NCCL: '%s'", err);
  }
}

static void test_buckets(void) {
  cl_model *m = model();
  int layer[CL_MAX_LAYERS];
  size_t bytes[CL_MAX_LAYERS], sum = 0;
  int n = cl_model_grad_buckets(m, layer, bytes);
  CHECK(n == 2 && layer[0] == 1 && layer[1] == 0, "buckets: %d, first layer %d", n, layer[0]);
  for (int k = 0; k < n; k++) sum += bytes[k];
  CHECK(sum == cl_model_n_params(m) * sizeof(float), "buckets %zu bytes, gradients %zu", sum,
        cl_model_n_params(m) * sizeof(float));
  /* layer 1: 4 * 3 gates x (4 + 3) x 3 x 3 weights and 12 biases */
  CHECK(bytes[0] == (12 * 7 * 9 + 12) * sizeof(float), "layer 1's bucket %zu", bytes[0]);
  cl_model_free(m);
}

/* The most buckets an encoder-forecaster has: the most layers it holds
 * (CL_MAX_LAYERS - 2, arch.c), each its own, and its head's (a head over
 * 15 layers): one more than the layers, each gradient in one of them. */
static void test_most_buckets(void) {
  cl_config c = config();
  c.forecaster = 1;
  c.n_layers = CL_MAX_LAYERS - 2;
  for (int l = 0; l < c.n_layers; l++) c.hidden_dims[l] = 1, c.kernel_sizes[l] = 1;
  cl_model *m = ctest_model(&c);
  if (!m) return;
  int layer[CL_MAX_LAYERS];
  size_t bytes[CL_MAX_LAYERS], sum = 0;
  int n = cl_model_grad_buckets(m, layer, bytes);
  for (int k = 0; k < n; k++) sum += bytes[k];
  CHECK(n == c.n_layers + 1 && sum == cl_model_n_params(m) * sizeof(float),
        "%d layers: %d buckets of %zu bytes, gradients %zu", c.n_layers, n, sum,
        cl_model_n_params(m) * sizeof(float));
  cl_model_free(m);
}

static void test_shares(void) {
  int splits[][2] = {{3, 3}, {1, 5}, {4, 2}};
  size_t n = grads_of(0, B, g_full, NULL);
  for (int s = 0; s < 3; s++) {
    memset(g_sum, 0, sizeof g_sum);
    int r0 = 0;
    for (int part = 0; part < 2; part++) {
      int rows = splits[s][part];
      grads_of(r0, rows, g_part, NULL);
      for (size_t i = 0; i < n; i++) g_sum[i] += (float)rows / B * g_part[i];
      r0 += rows;
    }
    double d = 0, big = 0;
    for (size_t i = 0; i < n; i++) {
      d = fmax(d, fabs((double)g_sum[i] - g_full[i]));
      big = fmax(big, fabs((double)g_full[i]));
    }
    CHECK(d <= 1e-6 * big, "split %d + %d: gradients differ by %.2e of %.2e", splits[s][0],
          splits[s][1], d, big);
    printf("split %d + %d of %d: shares x the parts' gradients within %.2e (relative) of the "
           "batch's\n", splits[s][0], splits[s][1], B, d / big);
  }
}

/* NCCL with one rank (over the one-process communicator, which carries
 * its id) on the GPU: a step through it is the step without one, bit for
 * bit (deterministic cuDNN algorithms; a sum over one rank is its own
 * gradient). Needs a GPU and a build with NCCL; says "skip nccl" else. */
static void test_nccl_one_rank(void) {
  if (!cl_comm_available("nccl") || !cl_backend_cuda_available()) {
    printf("skip nccl: %s\n", cl_comm_available("nccl") ? "no usable GPU" : "no NCCL in this build");
    return;
  }
  setenv("CONVLSTM_CUDNN_DETERMINISTIC", "1", 1);
  cl_comm *local = NULL, *c = NULL;
  char err[256] = "";
  CHECK(cl_comm_local_create(&local, err, sizeof err) == CL_OK, "local: %s", err);
  CHECK(local && cl_comm_nccl_create(local, 0, &c, err, sizeof err) == CL_OK && c,
        "nccl over the local communicator: %s", err);
  if (c) {
    CHECK(cl_comm_rank(c) == 0 && cl_comm_size(c) == 1, "nccl: rank %d of %d", cl_comm_rank(c),
          cl_comm_size(c));
    cl_step_options o;
    memset(&o, 0, sizeof o);
    o.comm = c;
    o.comm_share = 1;
    size_t n = grads_on(CL_DEVICE_CUDA, 0, B, g_full, NULL);
    size_t k = grads_on(CL_DEVICE_CUDA, 0, B, g_part, &o);
    CHECK(n > 0 && n == k && memcmp(g_full, g_part, n * sizeof(float)) == 0,
          "nccl, one rank: the step differs from the step without it (max diff / max %.2e)",
          n == k ? rel_diff(g_part, g_full, n) : INFINITY);
    printf("nccl, one rank on the GPU: %zu gradients, the same bits as without it\n", n);
  }
  cl_comm_free(c);
  cl_comm_free(local);
}

int main(void) {
  for (size_t i = 0; i < sizeof xs / sizeof *xs; i++) xs[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < sizeof ys / sizeof *ys; i++) ys[i] = (float)uniform01(NULL);
  test_local();
  test_stand_ins();
  test_buckets();
  test_most_buckets();
  test_shares();
  test_nccl_one_rank();
  return ctest_done("test_core_comm");
}
