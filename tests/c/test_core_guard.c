/*
 * tests/c/test_core_guard.c -- guard bands (CONVLSTM_GUARD=1): training and
 * inference with a canary after every arena buffer pass as without one --
 * under `make asan` the bands are also poisoned, so a kernel reading or
 * writing past its slot is reported by AddressSanitizer right where it
 * happens -- and a deliberate write past a buffer fails the next step with
 * that buffer's name, after which the model trains on.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "ctest.h"              /* CHECK, uniform01, ctest_model */

#include <stdlib.h>
#include <string.h>

static void train_with(const char *name, cl_dtype dtype, cl_step_options opts) {
  cl_config c = ctest_config(3, 5, 2, 3, 5, 1, 2);
  c.dtype = dtype;
  cl_model *m = ctest_model(&c);
  if (!m) return;
  enum { B = 3, T = 5, H = 7, W = 9 };
  static float x[B * T * 3 * H * W], y[B * 2 * H * W];
  for (size_t i = 0; i < sizeof x / sizeof x[0]; i++) x[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < sizeof y / sizeof y[0]; i++) y[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 3, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {B, 2, H, W, 0}};
  cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  double loss = 0;
  for (int s = 0; s < 2; s++) {
    cl_status st = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, &opts, &loss);
    CHECK(st == CL_OK, "%s: step %d: %s", name, s + 1, cl_model_error(m));
  }
  CHECK(cl_model_test_overrun(m, "gates[1]") == CL_OK, "%s: overrun hook: %s", name,
        cl_model_error(m));
  cl_status st = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, &opts, &loss);
  CHECK(st == CL_E_INTERNAL && strstr(cl_model_error(m), "past buffer 'gates[1]'"),
        "%s: overrun not named: status %d, '%s'", name, (int)st, cl_model_error(m));
  st = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, &opts, &loss);
  CHECK(st == CL_OK, "%s: a step after the report: %s", name, cl_model_error(m));
  cl_step_options inf = {0};
  inf.outputs = CL_OUTPUTS_LAST;
  CHECK(cl_model_forward(m, &xa, 0, &inf) == CL_OK, "%s: inference: %s", name, cl_model_error(m));
  cl_model_free(m);
}

int main(void) {
  setenv("CONVLSTM_GUARD", "1", 1);
  cl_step_options plain = {0}, ck = {0}, acc = {0}, tb = {0};
  ck.checkpoint = 2;
  acc.accumulation_steps = 2;
  tb.tbptt = 2;
  train_with("float32", CL_F32, plain);
  train_with("float32, checkpoint 2", CL_F32, ck);
  train_with("float16, accumulation 2", CL_F16, acc);
  train_with("bfloat16, tbptt 2", CL_BF16, tb);
  return ctest_done("test_core_guard");
}
