/*
 * tests/c/test_core_thread_step.c -- a training step run on a thread of its
 * own (as src/r_train.c runs it while R reads the next batch) gives the
 * bits of the same step on the thread that made the model: two models with
 * the same parameters train on the same batches, one on the main thread,
 * the other each step on a new POSIX thread that first calls
 * cl_model_bind_thread; every loss and, at the end, every parameter must be
 * equal as bits. On the CPU (one and two OpenMP threads: the step's thread
 * starts its own team) always; on CUDA where a GPU is usable, with cuDNN
 * held to its deterministic algorithms. A new thread's CUDA device is device
 * 0 whatever the model's; on a one-GPU machine that is the model's anyway,
 * so this shows the step runs from another thread, not that binding picks
 * another device (that needs two GPUs).
 *
 * The same with the batches staged (core/staged.c) as a fit on a GPU stages
 * them: batch s + 1 converted on the main thread into the second of two
 * staged batches while step s runs on its thread from the first (on CUDA
 * in page-locked memory); again every loss and parameter must be the bits
 * of the plain steps. And with each batch also sent ahead (core/ahead.c)
 * into the model's device buffers while the step before runs: on CUDA the
 * upload on the copy stream, beside the step's kernels.
 *
 * Without a GPU the CUDA part prints "cuda: skipped" and the CPU part still
 * decides; under CONVLSTM_REQUIRE_GPU=1 a GPU that cannot be used fails.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include "ctest.h"              /* CHECK, uniform01, ctest_model, ctest_same_params */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { B = 3, T = 4, H = 8, W = 8, STEPS = 4 };

typedef struct step_job {
  cl_model *m;
  const cl_host_array *x, *y;
  const cl_staged *staged; /* or NULL */
  const cl_optim *o;
  double loss;
  cl_status bind, st;
} step_job;

static void *step_run(void *arg) {
  step_job *j = arg;
  j->bind = cl_model_bind_thread(j->m);
  if (j->bind != CL_OK)
    j->st = j->bind;
  else if (j->staged)
    j->st = cl_model_train_staged(j->m, j->x, j->y, j->staged, CL_TARGET_SEQUENCE, j->o, NULL,
                                  &j->loss);
  else
    j->st = cl_model_train_step(j->m, j->x, j->y, CL_TARGET_SEQUENCE, j->o, NULL, &j->loss);
  return NULL;
}

/* Batch `step`: a smooth moving pattern and its next frame. */
static void batch(int step, float *x, float *y) {
  for (size_t k = 0; k < (size_t)B * T * H * W; k++) {
    const double u = 0.05 * (double)(k % W) + 0.07 * (double)(k / W % H) +
                     0.3 * (double)k / (H * W) + 0.5 * step;
    x[k] = (float)(0.5 + 0.4 * __builtin_sin(u));
    y[k] = (float)(0.5 + 0.4 * __builtin_sin(u + 0.3));
  }
}

static void run(cl_device device, int n_threads, const char *name) {
  cl_config c = ctest_config(1, 8, 1, 3, 3, 1, n_threads);
  c.device = device;
  ctest_rng = 88172645463325252ULL; /* the same parameters for both */
  cl_model *a = ctest_model(&c);
  ctest_rng = 88172645463325252ULL;
  cl_model *b = ctest_model(&c);
  const size_t n = (size_t)B * T * H * W;
  float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
  if (!a || !b || !x || !y) goto out;
  cl_optim o;
  memset(&o, 0, sizeof o);
  o.kind = CL_OPTIM_ADAM;
  o.lr = 1e-2, o.beta1 = 0.9, o.beta2 = 0.999, o.eps = 1e-8;
  int equal = 1;
  for (int s = 0; s < STEPS; s++) {
    batch(s, x, y);
    const cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 1, H, W}};
    const cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {B, T, 1, H, W}};
    double la = 0;
    const cl_status sa = cl_model_train_step(a, &xa, &ya, CL_TARGET_SEQUENCE, &o, NULL, &la);
    step_job j = {b, &xa, &ya, NULL, &o, 0, CL_E_INVALID, CL_E_INVALID};
    pthread_t t;
    const int started = pthread_create(&t, NULL, step_run, &j) == 0;
    if (started) pthread_join(t, NULL);
    CHECK(started && sa == CL_OK && j.bind == CL_OK && j.st == CL_OK,
          "%s step %d: main %d, thread started %d, bind %d, step %d (%s)", name, s, sa, started,
          j.bind, j.st, cl_model_error(b));
    equal &= memcmp(&la, &j.loss, sizeof la) == 0;
  }
  const int same = ctest_same_params(a, b);
  CHECK(equal, "%s: every step's loss the same bits on the main thread and on its own", name);
  CHECK(same, "%s: parameters the same bits after %d steps", name, STEPS);
  printf("%s: %d steps, each on a thread of its own: %s\n", name, STEPS,
         equal && same ? "same bits" : "DIFFERENT");
out:
  free(x);
  free(y);
  cl_model_free(a);
  cl_model_free(b);
}

/* Steps of b from staged batches, each next batch staged on this thread
 * while the step before runs on its own, against a's plain steps; with
 * ahead, also sent into b's device buffers then (core/ahead.c: on CUDA on
 * the copy stream while the step's kernels run), every batch sent. */
static void run_staged(cl_device device, int n_threads, int ahead, const char *name) {
  cl_config c = ctest_config(1, 8, 1, 3, 3, 1, n_threads);
  c.device = device;
  ctest_rng = 88172645463325252ULL;
  cl_model *a = ctest_model(&c);
  ctest_rng = 88172645463325252ULL;
  cl_model *b = ctest_model(&c);
  const size_t n = (size_t)B * T * H * W;
  float *x[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
  float *y[2] = {malloc(n * sizeof(float)), malloc(n * sizeof(float))};
  cl_staged *st[2] = {NULL, NULL};
  char err[256] = "";
  if (!a || !b || !x[0] || !x[1] || !y[0] || !y[1]) goto out;
  cl_optim o;
  memset(&o, 0, sizeof o);
  o.kind = CL_OPTIM_ADAM;
  o.lr = 1e-2, o.beta1 = 0.9, o.beta2 = 0.999, o.eps = 1e-8;
  cl_host_array xa[2], ya[2];
  for (int k = 0; k < 2; k++) {
    xa[k] = (cl_host_array){x[k], CL_HOST_TORCH_F32, 5, {B, T, 1, H, W}};
    ya[k] = (cl_host_array){y[k], CL_HOST_TORCH_F32, 5, {B, T, 1, H, W}};
  }
  batch(0, x[0], y[0]);
  int ok = cl_staged_fill(b, &st[0], &xa[0], &ya[0], err, sizeof err) == CL_OK, equal = 1;
  int sent = 0, n_sent = 0;
  CHECK(ok, "%s: staging batch 0: %s", name, err);
  if (ok && ahead) {
    ok = cl_staged_reserve(b, &xa[0], &ya[0]) == CL_OK &&
         cl_staged_send(b, st[0], &sent, err, sizeof err) == CL_OK;
    n_sent += sent;
  }
  for (int s = 0; s < STEPS && ok; s++) {
    const int k = s % 2, nx = 1 - k;
    step_job j = {b, &xa[k], &ya[k], st[k], &o, 0, CL_E_INVALID, CL_E_INVALID};
    pthread_t t;
    const int started = pthread_create(&t, NULL, step_run, &j) == 0;
    if (started && s + 1 < STEPS) { /* the next batch, staged while this step runs */
      batch(s + 1, x[nx], y[nx]);
      ok = cl_staged_fill(b, &st[nx], &xa[nx], &ya[nx], err, sizeof err) == CL_OK;
      if (ok && ahead) ok = cl_staged_send(b, st[nx], &sent, err, sizeof err) == CL_OK;
      n_sent += ok && ahead && sent;
    }
    if (started) pthread_join(t, NULL);
    double la = 0;
    const cl_status sa = cl_model_train_step(a, &xa[k], &ya[k], CL_TARGET_SEQUENCE, &o, NULL, &la);
    CHECK(started && ok && sa == CL_OK && j.st == CL_OK,
          "%s step %d: thread started %d, staging %d (%s), main %d, staged step %d (%s)", name, s,
          started, ok, err, sa, j.st, cl_model_error(b));
    equal &= memcmp(&la, &j.loss, sizeof la) == 0;
  }
  const int same = ctest_same_params(a, b);
  CHECK(equal, "%s: every step's loss the same bits from host arrays and staged", name);
  CHECK(same, "%s: parameters the same bits after %d staged steps", name, STEPS);
  CHECK(n_sent == (ahead ? STEPS : 0), "%s: %d of %d batches sent ahead", name, n_sent, STEPS);
  printf("%s: %d steps from batches staged during the step before: %s\n", name, STEPS,
         equal && same ? "same bits" : "DIFFERENT");
out:
  cl_staged_free(st[0]);
  cl_staged_free(st[1]);
  for (int k = 0; k < 2; k++) free(x[k]), free(y[k]);
  cl_model_free(a);
  cl_model_free(b);
}

int main(void) {
  run(CL_DEVICE_CPU, 1, "cpu 1 thread");
  run(CL_DEVICE_CPU, 2, "cpu 2 threads");
  run_staged(CL_DEVICE_CPU, 2, 0, "cpu 2 threads, staged");
  run_staged(CL_DEVICE_CPU, 2, 1, "cpu 2 threads, staged and sent ahead");
  const char *req = getenv("CONVLSTM_REQUIRE_GPU");
  const int required = req && strcmp(req, "1") == 0;
  if (cl_build_has_cuda() && cl_device_available(CL_DEVICE_CUDA)) {
    setenv("CONVLSTM_CUDNN_DETERMINISTIC", "1", 1); /* read when a model is made */
    run(CL_DEVICE_CUDA, 0, "cuda");
    run_staged(CL_DEVICE_CUDA, 0, 0, "cuda, staged");
    run_staged(CL_DEVICE_CUDA, 0, 1, "cuda, staged and sent ahead (copy stream)");
  } else {
    CHECK(!required, "CONVLSTM_REQUIRE_GPU=1 but %s",
          cl_build_has_cuda() ? "no CUDA device is usable" : "this build has no CUDA");
    printf("cuda: skipped (%s)\n",
           cl_build_has_cuda() ? "no usable CUDA device" : "no CUDA in this build");
  }
  return ctest_done("test_core_thread_step");
}
