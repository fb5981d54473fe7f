/*
 * cuda/cudnn_algo_cache.h -- the file of cuDNN algorithm choices stored per
 * machine (CONVLSTM_CUDNN_ALGO_CACHE=path): what CONVLSTM_CUDNN_BENCHMARK's
 * timing chose for a convolution, kept so that a later process reuses it
 * without timing, as R's memory advisor stores its measured rates per
 * machine (R/advise.R, advise-rates.rds).
 *
 * Plain C (and C++): cudnn_conv.cu includes it, and the CPU-only C test
 * tests/c/test_cudnn_algo_cache.c checks the format's reading, writing and
 * validation without a GPU. No CUDA or cuDNN header: the caller makes the
 * key and checks a stored choice against its own cuDNN before using it.
 *
 * The file is text, one header line and one record a line:
 *   convlstm-cudnn-algos 1
 *   KEY<TAB>ALGO<TAB>MATH<TAB>WORKSPACE<TAB>MS
 * KEY (cl_algo_key) names the device, its compute capability, the driver's
 * and cuDNN's versions, the storage type, the direction, TF32 and
 * determinism, and the shape of one cuDNN call; ALGO the algorithm's number
 * (cudnnConvolution*Algo_t), MATH the math type (cudnnMathType_t),
 * WORKSPACE its bytes, MS the time measured (for reading only). A file
 * whose first line is not that header is foreign: it is ignored and never
 * written. One whose header is ours but that has a bad line (a field
 * missing or out of range, a line too long, a key with a control
 * character) is corrupt: ignored whole, with the line named, and replaced
 * by the next save. Either way the process times its algorithms as without
 * a file: the note says why, nothing fails.
 */
#ifndef CONVLSTM_CUDNN_ALGO_CACHE_H
#define CONVLSTM_CUDNN_ALGO_CACHE_H

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h> /* getpid */

#define CL_ALGO_HEADER "convlstm-cudnn-algos 1"
enum { CL_ALGO_KEY_LEN = 256, CL_ALGO_LINE_LEN = 400, CL_ALGO_MAX_RECORDS = 100000 };
enum { CL_ALGO_MAX_ALGO = 16, CL_ALGO_MAX_MATH = 3 };

typedef struct cl_algo_rec {
  char key[CL_ALGO_KEY_LEN];
  int algo, math;
  unsigned long long workspace;
  double ms;
} cl_algo_rec;

typedef struct cl_algo_file {
  cl_algo_rec *r;
  int n, cap;
  int foreign; /* the file at the path is not ours: never written */
  char note[300]; /* what the last load or save found ("" when all went well) */
} cl_algo_file;

/* The key of one cuDNN call: dir 0 forward, 1 backward data, 2 backward
 * filter; det 1 deterministic algorithms only, plus 2 without FFT and
 * non-fused Winograd (CONVLSTM_CUDNN_NO_FFT); shape {N, C, H, W, K, kh,
 * kw, dh, dw, groups}. The device's name
 * is cut at 99 bytes and its tabs and control characters become spaces, so
 * a key is always one valid field. */
static inline void cl_algo_key(char *out, size_t n, const char *device, int cc, int driver,
                               int cudnn, const char *dtype, int dir, int tf32, int det,
                               const int shape[10]) {
  char dev[100];
  size_t i = 0;
  if (!device) device = "?";
  for (; device[i] && i + 1 < sizeof dev; i++)
    dev[i] = (unsigned char)device[i] < 32 || device[i] == 127 ? ' ' : device[i];
  dev[i] = '\0';
  static const char *dirs[3] = {"fwd", "data", "filter"};
  snprintf(out, n, "%s|sm%d|driver%d|cudnn%d|%s|%s|tf32=%d|det=%d|N%d C%d H%d W%d K%d k%dx%d d%dx%d g%d",
           dev, cc, driver, cudnn, dtype, dir >= 0 && dir < 3 ? dirs[dir] : "?", tf32, det, shape[0],
           shape[1], shape[2], shape[3], shape[4], shape[5], shape[6], shape[7], shape[8], shape[9]);
}

static inline void cl_algo_file_free(cl_algo_file *f) {
  free(f->r);
  f->r = NULL;
  f->n = f->cap = 0;
}

static inline const cl_algo_rec *cl_algo_file_find(const cl_algo_file *f, const char *key) {
  for (int i = f->n - 1; i >= 0; i--) /* the last one stored wins */
    if (strcmp(f->r[i].key, key) == 0) return &f->r[i];
  return NULL;
}

/* Adds or replaces key's record; 0 when out of memory or full. */
static inline int cl_algo_file_put(cl_algo_file *f, const char *key, int algo, int math,
                                   unsigned long long workspace, double ms) {
  cl_algo_rec *r = (cl_algo_rec *)cl_algo_file_find(f, key);
  if (!r) {
    if (f->n >= CL_ALGO_MAX_RECORDS || strlen(key) >= CL_ALGO_KEY_LEN) return 0;
    if (f->n == f->cap) {
      int cap = f->cap ? 2 * f->cap : 32;
      cl_algo_rec *grown = (cl_algo_rec *)realloc(f->r, (size_t)cap * sizeof *grown);
      if (!grown) return 0;
      f->r = grown, f->cap = cap;
    }
    r = &f->r[f->n++];
    snprintf(r->key, sizeof r->key, "%s", key);
  }
  r->algo = algo, r->math = math, r->workspace = workspace, r->ms = ms;
  return 1;
}

/* One record line (its newline removed) into rec; NULL or why not. */
static inline const char *cl_algo_parse(char *line, cl_algo_rec *rec) {
  char *f[5], *save = NULL;
  int n = 0;
  for (char *p = line; n < 5; p = NULL) {
    char *t = strtok_r(p, "\t", &save);
    if (!t) break;
    f[n++] = t;
  }
  if (n != 5 || strtok_r(NULL, "\t", &save)) return "not 5 tab-separated fields";
  if (!*f[0] || strlen(f[0]) >= CL_ALGO_KEY_LEN) return "a key empty or too long";
  for (const char *p = f[0]; *p; p++)
    if ((unsigned char)*p < 32 || *p == 127) return "a control character in the key";
  char *end;
  errno = 0;
  long a = strtol(f[1], &end, 10);
  if (errno || *end || end == f[1] || a < 0 || a >= CL_ALGO_MAX_ALGO) return "an algorithm out of range";
  long m = strtol(f[2], &end, 10);
  if (errno || *end || end == f[2] || m < 0 || m > CL_ALGO_MAX_MATH) return "a math type out of range";
  if (f[3][0] == '-') return "a negative workspace";
  unsigned long long w = strtoull(f[3], &end, 10);
  if (errno || *end || end == f[3] || w > (1ull << 48)) return "a workspace out of range";
  double ms = strtod(f[4], &end);
  if (*end || end == f[4] || !isfinite(ms) || ms < 0) return "a time out of range";
  snprintf(rec->key, sizeof rec->key, "%s", f[0]);
  rec->algo = (int)a, rec->math = (int)m, rec->workspace = w, rec->ms = ms;
  return NULL;
}

/* Reads path into f (emptied first): the number of records, or 0 with
 * the reason in f->note when there is no file yet, or it is foreign or
 * corrupt (then nothing of it is kept). */
static inline int cl_algo_file_load(cl_algo_file *f, const char *path) {
  cl_algo_file_free(f);
  f->foreign = 0;
  f->note[0] = '\0';
  FILE *in = fopen(path, "r");
  if (!in) {
    snprintf(f->note, sizeof f->note, "cudnn algorithm cache %s: %s (it is made by the first save)",
             path, strerror(errno));
    return 0;
  }
  char line[CL_ALGO_LINE_LEN + 2];
  int lineno = 0;
  const char *bad = NULL;
  while (!bad && fgets(line, sizeof line, in)) {
    size_t len = strlen(line);
    lineno++;
    if (len > 0 && line[len - 1] == '\n') line[--len] = '\0';
    else if (!feof(in)) bad = "a line too long";
    if (bad) break;
    if (lineno == 1) {
      if (strcmp(line, CL_ALGO_HEADER) != 0) {
        f->foreign = 1;
        bad = "not a convlstm cuDNN algorithm cache (its first line is not \"" CL_ALGO_HEADER
              "\"); it is left alone";
      }
      continue;
    }
    cl_algo_rec rec;
    bad = cl_algo_parse(line, &rec);
    if (!bad && !cl_algo_file_put(f, rec.key, rec.algo, rec.math, rec.workspace, rec.ms))
      bad = "too many records, or out of memory";
  }
  if (!bad && ferror(in)) bad = "a read error";
  if (!bad && lineno == 0) f->foreign = 1, bad = "an empty file, not a cache; it is left alone";
  fclose(in);
  if (bad) {
    cl_algo_file_free(f);
    snprintf(f->note, sizeof f->note, "cudnn algorithm cache %s ignored: line %d: %s", path,
             lineno, bad);
    return 0;
  }
  return f->n;
}

/* Writes f's records to path: merged over what the file holds now (another
 * process may have stored its own since this one read it; f's win), through
 * a temporary file renamed into place, so a reader never sees half a file.
 * A foreign file is not touched. 1 on success, else 0 with f->note. */
static inline int cl_algo_file_save(cl_algo_file *f, const char *path) {
  cl_algo_file now;
  memset(&now, 0, sizeof now);
  cl_algo_file_load(&now, path);
  if (now.foreign) {
    snprintf(f->note, sizeof f->note, "%s", now.note);
    f->foreign = 1;
    cl_algo_file_free(&now);
    return 0;
  }
  for (int i = 0; i < f->n; i++)
    if (!cl_algo_file_put(&now, f->r[i].key, f->r[i].algo, f->r[i].math, f->r[i].workspace,
                          f->r[i].ms))
      break;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid());
  FILE *out = fopen(tmp, "w");
  int ok = out != NULL;
  if (ok) {
    ok = fprintf(out, "%s\n", CL_ALGO_HEADER) > 0;
    for (int i = 0; ok && i < now.n; i++)
      ok = fprintf(out, "%s\t%d\t%d\t%llu\t%.6g\n", now.r[i].key, now.r[i].algo, now.r[i].math,
                   now.r[i].workspace, now.r[i].ms) > 0;
    ok = (fclose(out) == 0) && ok;
    ok = ok && rename(tmp, path) == 0;
    if (!ok) remove(tmp);
  }
  if (!ok)
    snprintf(f->note, sizeof f->note, "cudnn algorithm cache %s not written: %s", path,
             strerror(errno));
  else
    f->note[0] = '\0';
  cl_algo_file_free(&now);
  return ok;
}

#endif
