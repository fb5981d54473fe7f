/*
 * tests/c/test_cudnn_algo_cache.c -- the file of cuDNN algorithm choices
 * stored per machine (src/cuda/cudnn_algo_cache.h,
 * CONVLSTM_CUDNN_ALGO_CACHE), on the CPU: no GPU is needed to read, write
 * and validate it. Checked: the key names every part that makes a choice
 * another's (device, capability, driver, cuDNN, storage type, direction,
 * TF32, determinism, each number of the shape); records written come back
 * equal; a save merges over what another process stored meanwhile; a
 * missing file, a foreign one (not our header: never written) and each
 * kind of corrupt line (ignored whole, the line named, replaced by the
 * next save) load nothing and say why, without a crash. Where a GPU is
 * usable, the CUDA backend end to end: a first model's step times its
 * algorithms and stores one choice per direction; a second model's step
 * reuses them (no new records) and, deterministic, gives the first's loss
 * bit for bit; a foreign file at the path is left alone and the step runs
 * (timed). Without a GPU that part says "skip cuda".
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* mkdtemp, strtok_r */
#endif
#include "core/backend.h" /* cl_backend_cuda_available */
#include "ctest.h"
#include "cuda/cudnn_algo_cache.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* rmdir */

static char dir[64], path[128];

static void write_file(const char *text) {
  FILE *f = fopen(path, "w");
  CHECK(f != NULL, "open %s", path);
  if (!f) return;
  fputs(text, f);
  fclose(f);
}

static char *read_all(void) {
  static char buf[8192];
  FILE *f = fopen(path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = '\0';
  return buf;
}

static const int shape[10] = {32, 64, 64, 64, 256, 3, 3, 1, 1, 1};

static void key_of(char *out, int field, int value) {
  int s[10];
  memcpy(s, shape, sizeof s);
  const char *dev = field == 100 ? "NVIDIA H100" : "NVIDIA H200";
  int cc = field == 101 ? 80 : 90, drv = field == 102 ? 12040 : 12080;
  int cudnn = field == 103 ? 90100 : 91000, dirn = field == 104 ? 2 : 0;
  int tf32 = field == 105 ? 0 : 1, det = field == 106 ? 1 : 0;
  const char *dt = field == 107 ? "f32" : "f16";
  if (field >= 0 && field < 10) s[field] = value;
  cl_algo_key(out, CL_ALGO_KEY_LEN, dev, cc, drv, cudnn, dt, dirn, tf32, det, s);
}

static void test_keys(void) {
  char base[CL_ALGO_KEY_LEN], other[CL_ALGO_KEY_LEN];
  key_of(base, -1, 0);
  CHECK(strstr(base, "NVIDIA H200|sm90|driver12080|cudnn91000|f16|fwd|tf32=1|det=0|") == base,
        "key: %s", base);
  int distinct = 1;
  for (int f = 0; f < 10; f++) { /* each number of the shape */
    key_of(other, f, shape[f] + 1);
    distinct &= strcmp(base, other) != 0;
  }
  for (int f = 100; f <= 107; f++) { /* each part of the machine and the call */
    key_of(other, f, 0);
    distinct &= strcmp(base, other) != 0;
  }
  CHECK(distinct, "every part of the key makes another key");
  int s[10] = {1, 2, 3, 4, 5, 3, 3, 1, 1, 1};
  cl_algo_key(other, sizeof other, "odd\tname\n", 90, 1, 2, "bf16", 1, 1, 0, s);
  cl_algo_rec rec;
  char line[CL_ALGO_LINE_LEN];
  snprintf(line, sizeof line, "%s\t1\t0\t0\t0.5", other);
  CHECK(cl_algo_parse(line, &rec) == NULL && strstr(rec.key, "odd name ") == rec.key,
        "a device name's tab and newline become spaces: the key stays one field (%s)", other);
}

static void test_round_trip(void) {
  cl_algo_file f, g;
  memset(&f, 0, sizeof f), memset(&g, 0, sizeof g);
  CHECK(cl_algo_file_load(&f, path) == 0 && strstr(f.note, "made by the first save"),
        "no file yet: nothing loaded (%s)", f.note);
  char k1[CL_ALGO_KEY_LEN], k2[CL_ALGO_KEY_LEN];
  key_of(k1, -1, 0), key_of(k2, 104, 0);
  CHECK(cl_algo_file_put(&f, k1, 1, 1, 123456789ull, 0.25), "put");
  CHECK(cl_algo_file_put(&f, k2, 6, 3, 0, 1.5), "put");
  CHECK(cl_algo_file_put(&f, k1, 7, 2, 42, 0.125) && f.n == 2, "a key stored again is replaced");
  CHECK(cl_algo_file_save(&f, path) && f.note[0] == '\0', "save: %s", f.note);
  CHECK(cl_algo_file_load(&g, path) == 2, "load: %d records (%s)", g.n, g.note);
  const cl_algo_rec *a = cl_algo_file_find(&g, k1), *b = cl_algo_file_find(&g, k2);
  CHECK(a && a->algo == 7 && a->math == 2 && a->workspace == 42 && a->ms == 0.125,
        "record 1 back as stored");
  CHECK(b && b->algo == 6 && b->math == 3 && b->workspace == 0 && b->ms == 1.5,
        "record 2 back as stored");
  CHECK(cl_algo_file_find(&g, "no such key") == NULL, "an unknown key finds nothing");
  /* another process stored its own meanwhile: a save keeps both */
  cl_algo_file h;
  memset(&h, 0, sizeof h);
  char k3[CL_ALGO_KEY_LEN];
  key_of(k3, 0, 8);
  cl_algo_file_put(&h, k3, 2, 0, 7, 3.0);
  cl_algo_file_put(&h, k1, 0, 0, 0, 9.0); /* and its own choice for k1 wins in the file */
  CHECK(cl_algo_file_save(&h, path), "second save: %s", h.note);
  CHECK(cl_algo_file_load(&g, path) == 3, "merged: %d records", g.n);
  a = cl_algo_file_find(&g, k1);
  CHECK(a && a->algo == 0 && a->ms == 9.0 && cl_algo_file_find(&g, k2) &&
            cl_algo_file_find(&g, k3),
        "the merge keeps the other's records and the saver's choices");
  cl_algo_file_free(&f), cl_algo_file_free(&g), cl_algo_file_free(&h);
}

/* A file with our header and one bad line: nothing loaded, the line named;
 * a save replaces it. */
static void check_corrupt(const char *what, const char *body, int bad_line) {
  char text[2048];
  snprintf(text, sizeof text, "%s\nNVIDIA H200|k\t1\t1\t0\t0.5\n%s", CL_ALGO_HEADER, body);
  write_file(text);
  cl_algo_file f;
  memset(&f, 0, sizeof f);
  char want[64];
  snprintf(want, sizeof want, "ignored: line %d: ", bad_line);
  const int n = cl_algo_file_load(&f, path);
  CHECK(n == 0 && f.n == 0 && !f.foreign && strstr(f.note, want),
        "corrupt (%s): %d records, note \"%s\"", what, n, f.note);
  cl_algo_file_put(&f, "fresh", 1, 0, 0, 0.0);
  CHECK(cl_algo_file_save(&f, path) && cl_algo_file_load(&f, path) == 1 &&
            cl_algo_file_find(&f, "fresh"),
        "corrupt (%s): the next save replaces it", what);
  cl_algo_file_free(&f);
}

static void test_corrupt(void) {
  check_corrupt("a field missing", "key\t1\t1\t0\n", 3);
  check_corrupt("a field too many", "key\t1\t1\t0\t0.5\t9\n", 3);
  check_corrupt("an algorithm out of range", "key\t16\t1\t0\t0.5\n", 3);
  check_corrupt("a negative algorithm", "key\t-1\t1\t0\t0.5\n", 3);
  check_corrupt("a math type out of range", "key\t1\t4\t0\t0.5\n", 3);
  check_corrupt("a negative workspace", "key\t1\t1\t-5\t0.5\n", 3);
  check_corrupt("a huge workspace", "key\t1\t1\t99999999999999999999\t0.5\n", 3);
  check_corrupt("a time that is not a number", "key\t1\t1\t0\tnan\n", 3);
  check_corrupt("trailing garbage in a number", "key\t1x\t1\t0\t0.5\n", 3);
  check_corrupt("an empty line", "\n", 3);
  check_corrupt("a carriage return", "key\t1\t1\t0\t0.5\r\n", 3);
  check_corrupt("a control character in the key", "ke\001y\t1\t1\t0\t0.5\n", 3);
  char longl[CL_ALGO_LINE_LEN + 100];
  memset(longl, 'x', sizeof longl - 1);
  longl[sizeof longl - 1] = '\0';
  check_corrupt("a line too long", longl, 3);
  /* bytes of no text at all after the header: no crash either */
  char junk[300];
  for (int i = 0; i < 299; i++) junk[i] = (char)(1 + (i * 37) % 254);
  junk[299] = '\0';
  check_corrupt("binary junk", junk, 3);
}

static void test_foreign(void) {
  const char *texts[] = {"something else entirely\nkey\t1\t1\t0\t0.5\n",
                         "convlstm-cudnn-algos 2\nkey\t1\t1\t0\t0.5\n", ""};
  const char *names[] = {"another file", "a later format version", "an empty file"};
  for (int i = 0; i < 3; i++) {
    write_file(texts[i]);
    cl_algo_file f;
    memset(&f, 0, sizeof f);
    const int n = cl_algo_file_load(&f, path);
    CHECK(n == 0 && f.foreign && strstr(f.note, "ignored") && strstr(f.note, "left alone"),
          "%s: nothing loaded, said so: \"%s\"", names[i], f.note);
    cl_algo_file_put(&f, "mine", 1, 0, 0, 0.0);
    CHECK(!cl_algo_file_save(&f, path) && strcmp(read_all(), texts[i]) == 0,
          "%s: never written (%s)", names[i], f.note);
    cl_algo_file_free(&f);
  }
  remove(path);
}

/* One training step of a small CUDA model (float16: tensor-core
 * algorithms) with the cache at `path`; its loss, NAN when it failed. */
static double cuda_step(void) {
  cl_config c = ctest_config(2, 8, 4, 3, 3, 1, 1);
  c.device = CL_DEVICE_CUDA;
  c.dtype = CL_F16;
  ctest_rng = 88172645463325252ull;
  cl_model *m = ctest_model(&c);
  if (!m) return NAN;
  enum { B = 2, T = 3, H = 8, W = 8 };
  float x[B * T * 2 * H * W], y[B * 4 * H * W];
  for (size_t i = 0; i < sizeof x / sizeof *x; i++) x[i] = (float)sin(0.3 * i);
  for (size_t i = 0; i < sizeof y / sizeof *y; i++) y[i] = (float)cos(0.2 * i);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, 2, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {B, 4, H, W, 0}};
  cl_optim sgd = {CL_OPTIM_SGD, 0.01, 0, 0, 0, 0, 0, 0, 0, 0};
  double loss = NAN;
  cl_status st = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &sgd, NULL, &loss);
  CHECK(st == CL_OK, "cuda train_step with the cache: %s", cl_model_error(m));
  cl_model_free(m);
  return st == CL_OK ? loss : NAN;
}

static void test_cuda(void) {
  if (!cl_backend_cuda_available()) {
    printf("skip cuda: no usable GPU\n");
    return;
  }
  setenv("CONVLSTM_CUDNN_ALGO_CACHE", path, 1);
  setenv("CONVLSTM_CUDNN_DETERMINISTIC", "1", 1);
  remove(path);
  const double l1 = cuda_step();
  cl_algo_file f;
  memset(&f, 0, sizeof f);
  const int n1 = cl_algo_file_load(&f, path);
  int dirs[3] = {0, 0, 0};
  for (int i = 0; i < f.n; i++) {
    dirs[0] += strstr(f.r[i].key, "|fwd|") != NULL;
    dirs[1] += strstr(f.r[i].key, "|data|") != NULL;
    dirs[2] += strstr(f.r[i].key, "|filter|") != NULL;
  }
  /* every key names this machine alike: device, capability, driver, cuDNN */
  int same_machine = f.n > 0 && f.r[0].key[0] != '|' && !strstr(f.r[0].key, "|sm0|") &&
                     !strstr(f.r[0].key, "|driver0|") && !strstr(f.r[0].key, "|cudnn0|");
  const char *end = f.n > 0 ? strstr(f.r[0].key, "|f16|") : NULL;
  for (int i = 0; end && i < f.n; i++)
    same_machine &= strncmp(f.r[i].key, f.r[0].key, (size_t)(end - f.r[0].key)) == 0;
  CHECK(same_machine && end, "cuda: every key names the machine (%s)", f.n ? f.r[0].key : "none");
  CHECK(n1 > 0 && dirs[0] > 0 && dirs[1] > 0 && dirs[2] > 0,
        "cuda: the first step stored its choices: %d records (%d forward, %d data, %d filter) %s",
        n1, dirs[0], dirs[1], dirs[2], f.note);
  const double l2 = cuda_step();
  const int n2 = cl_algo_file_load(&f, path);
  CHECK(n2 == n1, "cuda: the second step reused them: %d records after, %d before", n2, n1);
  CHECK(l1 == l2 && isfinite(l1), "cuda: the same algorithms, the same loss: %.9g, %.9g", l1, l2);
  const char *foreign = "not ours\n";
  write_file(foreign);
  const double l3 = cuda_step();
  CHECK(isfinite(l3) && strcmp(read_all(), foreign) == 0,
        "cuda: a foreign file is left alone and the step runs (loss %.9g)", l3);
  cl_algo_file_free(&f);
  unsetenv("CONVLSTM_CUDNN_ALGO_CACHE");
  remove(path);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/cl-algo-XXXXXX");
  if (!mkdtemp(dir)) {
    printf("test_cudnn_algo_cache: no temporary folder\n");
    return 1;
  }
  snprintf(path, sizeof path, "%s/algos.txt", dir);
  test_keys();
  test_round_trip();
  test_corrupt();
  test_foreign();
  test_cuda();
  remove(path);
  rmdir(dir);
  return ctest_done("test_cudnn_algo_cache");
}
