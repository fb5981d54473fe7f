/*
 * tests/c/test_cpu_fork.c -- the CPU backend in a forked child, without R:
 * after the parent trained with two threads (libgomp's pool now exists), a
 * child trains the parent's model and a model of its own, and its loss for
 * the step equals the parent's for the same step from the same state. The
 * child runs under alarm(), so a child hung in an OpenMP region (the bug the
 * fork guard in cpu_backend.c fixes) fails the test instead of hanging it.
 * Exits nonzero on any failure.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* fork, pipe, alarm under -std=c11 */
#endif
#include "convlstm.h"
#include "ctest.h" /* CHECK, uniform01, ctest_model */

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

enum { B = 2, T = 3, C = 2, H = 6, W = 6, CL = 2, CHILD_SECONDS = 120 };

static float x[B * T * C * H * W], y[B * CL * H * W];

static cl_model *make_model(void) {
  /* 2 threads: with B = 2 the convolutions run a team of two per image pair */
  cl_config c = ctest_config(C, 4, CL, 3, 3, 1, 2);
  return ctest_model(&c);
}

static double step(cl_model *m) {
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {B, CL, H, W, 0}};
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  double loss = NAN;
  cl_status s = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, NULL, &loss);
  CHECK(s == CL_OK, "train_step: %s", m ? cl_model_error(m) : "no model");
  return loss;
}

/* In the child: the parent's model's next step, then a model of its own.
 * Writes the first loss to fd; exits 0 when every check passed. */
static void child(cl_model *parent, int fd) {
  alarm(CHILD_SECONDS); /* SIGALRM ends a hung child */
  double loss = step(parent);
  cl_model *own = make_model();
  double l1 = step(own), l2 = step(own);
  CHECK(isfinite(l1) && isfinite(l2), "child's own model: losses %g, %g", l1, l2);
  cl_model_free(own);
  CHECK(write(fd, &loss, sizeof loss) == (ssize_t)sizeof loss, "write to the pipe");
  /* the child's copy of the parent's model is the child's to free (valgrind
   * follows the child and counts it as lost otherwise) */
  cl_model_free(parent);
  fflush(stdout);
  _exit(ctest_failures ? 1 : 0);
}

int main(void) {
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = (float)(2 * uniform01(NULL) - 1);
  cl_model *m = make_model();
  if (!m) return ctest_done("test_cpu_fork");
  double before = step(m);
  step(m);
  CHECK(isfinite(before), "parent: loss %g", before);

  int fds[2];
  CHECK(pipe(fds) == 0, "pipe");
  fflush(stdout);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    close(fds[0]);
    child(m, fds[1]);
  }
  close(fds[1]);
  double in_child = NAN;
  ssize_t got = read(fds[0], &in_child, sizeof in_child);
  close(fds[0]);
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(!WIFSIGNALED(status), "child killed by signal %d%s", WTERMSIG(status),
        WTERMSIG(status) == SIGALRM ? " (hung past the alarm: an OpenMP team in a forked child?)"
                                    : "");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child's checks failed");
  CHECK(got == (ssize_t)sizeof in_child, "child's loss not received");

  /* The parent's copy of the state is untouched by the child's step. */
  double in_parent = step(m);
  CHECK(fabs(in_child - in_parent) <= 1e-6 * fmax(1.0, fabs(in_parent)),
        "same step from the same state: child %.9g, parent %.9g", in_child, in_parent);
  printf("step after the fork: child %.9g, parent %.9g\n", in_child, in_parent);
  cl_model_free(m);
  return ctest_done("test_cpu_fork");
}
