/*
 * tests/fuzz/fuzz_json.c -- a libFuzzer target for the strict JSON reader
 * alone (src/core/json.c), built with AddressSanitizer and
 * UndefinedBehaviorSanitizer by tests/fuzz/run.sh.
 *
 * Each input is a whole document, walked by tests/c/json_walk.h (objects
 * nested up to 8 deep, strings, integers, arrays of integers) with and
 * without a message buffer. A refusal must come with a message, the same
 * status either way, and what is read must keep the reader's invariants
 * (decoded strings UTF-8 without NUL, integers below 2^53, never past the
 * end); any crash, sanitizer report, leak or broken invariant aborts, and
 * libFuzzer keeps the input. Seeds: tests/fuzz/corpus_json/.
 */
#include "../c/json_walk.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[512];
  err[0] = '\0';
  int r = json_walk(data, size, "doc", err, sizeof err, NULL);
  if (r < 0) abort();                     /* an invariant broke */
  if (r != 0 && err[0] == '\0') abort();  /* a refusal says why */
  if (json_walk(data, size, "doc", NULL, 0, NULL) != r) abort();
  return 0;
}
