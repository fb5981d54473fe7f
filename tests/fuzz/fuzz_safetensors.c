/*
 * tests/fuzz/fuzz_safetensors.c -- a libFuzzer target for the model file
 * loader (src/core/model_file_read.c over safetensors.c and json.c), built with
 * AddressSanitizer and UndefinedBehaviorSanitizer by tests/fuzz/run.sh;
 * tests/fuzz/fuzz_json.c fuzzes the JSON reader alone.
 *
 * Each input is a whole file. It is parsed; when it parses, every accessor
 * is read, a CPU model (and its optimizer state) is created from it, saved
 * again and the saved file parsed again, which must succeed: what the loader
 * accepts, the writer reproduces. Any crash, sanitizer report, leak or
 * failed round trip aborts, and libFuzzer keeps the input.
 *
 * It is not a test of the values: tests/c/test_core_safetensors.c checks
 * those, and feeds it the inputs this target once crashed on
 * (tests/fuzz/regressions/).
 */
#define _POSIX_C_SOURCE 200809L /* getpid */
#include "convlstm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void touch_strings(const cl_saved *s) {
  volatile size_t sum = 0;
  for (int i = 0; i < cl_saved_n_metadata(s); i++) {
    const char *k, *v;
    if (cl_saved_metadata(s, i, &k, &v) != CL_OK) abort();
    sum += strlen(k) + strlen(v);
  }
  for (int i = 0; i < cl_saved_n_tensors(s); i++) {
    const char *name, *dtype;
    int nd;
    int64_t dims[8];
    if (cl_saved_tensor_info(s, i, &name, &dtype, &nd, dims) != CL_OK || nd < 0 || nd > 8) abort();
    sum += strlen(name) + strlen(dtype);
  }
  (void)sum;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[CL_ERRMSG_LEN];
  cl_saved *s = NULL;
  err[0] = '\0';
  if (cl_saved_parse(data, size, &s, err, sizeof err) != CL_OK) {
    if (s != NULL || err[0] == '\0') abort(); /* a failure leaves nothing and says why */
    return 0;
  }
  touch_strings(s);
  cl_optim opt;
  int64_t steps;
  int has_opt = cl_saved_optimizer(s, &opt, &steps);
  cl_config rt;
  memset(&rt, 0, sizeof rt);
  rt.device = CL_DEVICE_CPU;
  rt.n_threads = 1;
  rt.memory_limit = 64u << 20;
  cl_model *m = NULL;
  if (cl_saved_create_model(s, &rt, 1, &m, err, sizeof err) == CL_OK) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/fuzz_safetensors_%ld.st", (long)getpid());
    if (cl_model_save(m, path, has_opt ? &opt : NULL, 0, NULL, NULL) != CL_OK) abort();
    cl_saved *again = NULL;
    if (cl_saved_read(path, &again, err, sizeof err) != CL_OK) {
      fprintf(stderr, "round trip failed: %s\n", err);
      abort();
    }
    int64_t steps2;
    if (cl_saved_optimizer(again, NULL, &steps2) != has_opt || (has_opt && steps2 != steps)) abort();
    cl_saved_free(again);
    remove(path);
    cl_model_free(m);
  }
  cl_saved_free(s);
  if (cl_models_alive() != 0) abort();
  return 0;
}
