/*
 * tests/c/fixture.h -- reads a PyTorch fixture folder written by the
 * tools/make_fixtures*.py generators (format: tests/testthat/fixtures/
 * README.md): manifest.txt's config and tensor records, and each tensor's
 * little-endian float32 values. Plain C, for the C tests; the R tests read
 * the same folders with helper-fixtures.R. A test runs from the repository
 * root (run.sh), so folders are relative paths.
 */
#ifndef CONVLSTM_TESTS_FIXTURE_H
#define CONVLSTM_TESTS_FIXTURE_H

#include "convlstm.h"
#include "ctest.h" /* ctest_numel */

#include <math.h> /* INFINITY */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_MAX_LINES 128
#define FX_LINE 512

typedef struct fixture {
  char dir[256];
  int n;
  char line[FX_MAX_LINES][FX_LINE];
} fixture;

/* 1 when dir/manifest.txt was read and has the format's first line. */
static inline int fx_open(fixture *f, const char *dir) {
  memset(f, 0, sizeof *f);
  snprintf(f->dir, sizeof f->dir, "%s", dir);
  char path[320];
  snprintf(path, sizeof path, "%s/manifest.txt", dir);
  FILE *in = fopen(path, "r");
  if (!in) return 0;
  char buf[FX_LINE];
  int ok = fgets(buf, sizeof buf, in) && strncmp(buf, "convlstm-fixture 1", 18) == 0;
  while (ok && f->n < FX_MAX_LINES && fgets(f->line[f->n], FX_LINE, in))
    f->line[f->n][strcspn(f->line[f->n], "\n")] = '\0', f->n++;
  fclose(in);
  return ok;
}

/* The values of record `kind key` (after "kind key "), or NULL. */
static inline const char *fx_record(const fixture *f, const char *kind, const char *key) {
  size_t lk = strlen(kind), lkey = strlen(key);
  for (int i = 0; i < f->n; i++) {
    const char *s = f->line[i];
    if (strncmp(s, kind, lk) == 0 && s[lk] == ' ' && strncmp(s + lk + 1, key, lkey) == 0 &&
        s[lk + 1 + lkey] == ' ')
      return s + lk + 1 + lkey + 1;
  }
  return NULL;
}

/* config key's integers into out (at most max); their number, 0 if absent. */
static inline int fx_ints(const fixture *f, const char *key, int *out, int max) {
  const char *s = fx_record(f, "config", key);
  int n = 0;
  char *end;
  while (s && n < max) {
    long v = strtol(s, &end, 10);
    if (end == s) break;
    out[n++] = (int)v;
    s = end;
  }
  return n;
}

static inline int fx_int(const fixture *f, const char *key) {
  int v = 0;
  fx_ints(f, key, &v, 1);
  return v;
}

/* config key's first word is word */
static inline int fx_is(const fixture *f, const char *key, const char *word) {
  const char *s = fx_record(f, "config", key);
  return s && strncmp(s, word, strlen(word)) == 0 && (s[strlen(word)] == '\0' || s[strlen(word)] == ' ');
}

static inline float *fx_tensor(const fixture *f, const char *name, size_t *n);

/* Opens tests/testthat/fixtures/<folder>/<name> (a failed check when it
 * cannot); 1 when it holds records. */
static inline int fx_open_in(fixture *f, const char *folder, const char *name) {
  char dir[sizeof f->dir];
  snprintf(dir, sizeof dir, "tests/testthat/fixtures/%s/%s", folder, name);
  CHECK(fx_open(f, dir), "%s: no fixture", dir);
  return f->n > 0;
}

/* config key's number, or dflt when absent */
static inline double fx_num(const fixture *f, const char *key, double dflt) {
  const char *s = fx_record(f, "config", key);
  return s ? strtod(s, NULL) : dflt;
}

/* The training fixtures' optimizer (tools/make_training_fixtures.py):
 * SGD, or RMSprop with torch's defaults where a record is absent. */
static inline cl_optim fx_optim(const fixture *f) {
  cl_optim o;
  memset(&o, 0, sizeof o);
  o.lr = fx_num(f, "lr", 0);
  o.weight_decay = fx_num(f, "weight_decay", 0);
  o.momentum = fx_num(f, "momentum", 0);
  if (fx_is(f, "optimizer", "sgd")) {
    o.kind = CL_OPTIM_SGD;
    return o;
  }
  o.kind = CL_OPTIM_RMSPROP;
  o.alpha = fx_num(f, "alpha", 0.99);
  o.eps = fx_num(f, "eps", 1e-8);
  o.centered = fx_is(f, "centered", "TRUE");
  return o;
}

/* The training fixtures' loss and its reduction (mean when absent). */
static inline cl_loss_fn fx_loss(const fixture *f) {
  cl_loss_fn l;
  memset(&l, 0, sizeof l);
  l.kind = fx_is(f, "loss", "bce_logits") ? CL_LOSS_BCE_LOGITS : CL_LOSS_MSE;
  l.delta = fx_num(f, "delta", 1);
  l.pos_weight = fx_num(f, "pos_weight", 1);
  l.reduction = fx_is(f, "reduction", "sum")         ? CL_REDUCE_SUM
                : fx_is(f, "reduction", "batchmean") ? CL_REDUCE_BATCHMEAN
                                                     : CL_REDUCE_MEAN;
  return l;
}

/* The fixture's architecture records as a config (CPU, float32). */
static inline cl_config fx_config(const fixture *f, int n_threads) {
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = fx_int(f, "input_dim");
  c.n_layers = fx_ints(f, "hidden_dims", c.hidden_dims, CL_MAX_LAYERS);
  fx_ints(f, "kernel_sizes", c.kernel_sizes, CL_MAX_LAYERS);
  fx_ints(f, "kernel_widths", c.kernel_widths, CL_MAX_LAYERS);
  fx_ints(f, "dilation_h", c.dilation_h, CL_MAX_LAYERS);
  fx_ints(f, "dilation_w", c.dilation_w, CL_MAX_LAYERS);
  fx_ints(f, "recurrent_kernel_sizes", c.recurrent_kernel_sizes, CL_MAX_LAYERS);
  fx_ints(f, "recurrent_kernel_widths", c.recurrent_kernel_widths, CL_MAX_LAYERS);
  if (fx_is(f, "peephole", "channel")) c.peephole = CL_PEEP_CHANNEL;
  c.bias = fx_is(f, "bias", "TRUE");
  c.device = CL_DEVICE_CPU;
  c.n_threads = n_threads;
  return c;
}

/* The largest rel_diff (ctest.h), tensor by tensor, between m's parameters
 * (grad = 0) or gradients (grad = 1) and the fixture's prefix/<name>; a
 * failed check, and INFINITY, when one is missing or of another size. */
static inline double fx_gap(const fixture *f, cl_model *m, const char *prefix, int grad) {
  double worst = 0;
  for (int i = 0; i < cl_model_n_tensors(m); i++) {
    const char *name;
    int nd, d[4];
    cl_model_tensor_info(m, i, &name, &nd, d);
    size_t n = ctest_numel(nd, d), nf = 0;
    char key[128];
    snprintf(key, sizeof key, "%s/%s", prefix, name);
    float *want = fx_tensor(f, key, &nf), *got = malloc(n * sizeof *got);
    cl_status s = !(want && got && nf == n) ? CL_E_INVALID
                  : grad                        ? cl_model_get_grad(m, name, got, n)
                                                : cl_model_get_param(m, name, got, n);
    const int ok = s == CL_OK;
    CHECK(ok, "%s: %s missing or of %zu elements, not %zu", f->dir, key, nf, n);
    const double r = ok ? rel_diff(got, want, n) : INFINITY;
    if (r > worst) worst = r;
    free(want);
    free(got);
    if (!ok) break;
  }
  return worst;
}

/* The fixture's prefix/<name> tensors, flattened in m's tensor order into
 * out (room for max floats); their number, or 0 (and a line saying which)
 * when one is missing, is not the model's tensor's size or does not fit. */
static inline size_t fx_flat(const fixture *f, cl_model *m, const char *prefix, float *out,
                             size_t max) {
  size_t at = 0;
  for (int i = 0; i < cl_model_n_tensors(m); i++) {
    const char *name;
    int nd, d[4];
    cl_model_tensor_info(m, i, &name, &nd, d);
    char key[128];
    snprintf(key, sizeof key, "%s/%s", prefix, name);
    size_t n = 0, want = ctest_numel(nd, d);
    float *v = fx_tensor(f, key, &n);
    if (!v || n != want || at + n > max) {
      printf("fixture %s: %s: %s\n", f->dir, key,
             !v ? "missing" : n != want ? "not the model's size" : "does not fit");
      free(v);
      return 0;
    }
    memcpy(out + at, v, n * sizeof *v);
    at += n;
    free(v);
  }
  return at;
}

/* m's parameters from the fixture's weights/<name>; 1, or 0 (and a line
 * saying which) when one is missing or refused. */
static inline int fx_set_weights(const fixture *f, cl_model *m) {
  for (int i = 0; i < cl_model_n_tensors(m); i++) {
    const char *name;
    int nd, d[4];
    cl_model_tensor_info(m, i, &name, &nd, d);
    char key[128];
    snprintf(key, sizeof key, "weights/%s", name);
    size_t n;
    float *v = fx_tensor(f, key, &n);
    if (!v || cl_model_set_param(m, name, v, n) != CL_OK) {
      printf("fixture %s: %s: %s\n", f->dir, key, v ? cl_model_error(m) : "missing");
      free(v);
      return 0;
    }
    free(v);
  }
  return 1;
}

/* The model of the fixture's architecture records, its parameters the
 * fixture's weights; NULL when that fails. */
static inline cl_model *fx_model(const fixture *f, int n_threads) {
  cl_config c = fx_config(f, n_threads);
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN];
  if (cl_model_create(&c, &m, err, sizeof err) != CL_OK) {
    printf("fixture %s: create: %s\n", f->dir, err);
    return NULL;
  }
  if (!fx_set_weights(f, m)) {
    cl_model_free(m);
    return NULL;
  }
  return m;
}

/* Tensor `name`'s values (malloc'd; *n their number) and its dims (ndim
 * returned through nd, when not NULL); NULL when absent or short. */
static inline float *fx_tensor_dims(const fixture *f, const char *name, size_t *n, int *nd, int *dims) {
  const char *s = fx_record(f, "tensor", name);
  if (!s) return NULL;
  char file[256];
  int k, used;
  if (sscanf(s, "%255s %d%n", file, &k, &used) != 2 || k < 0 || k > 8) return NULL;
  size_t count = 1;
  s += used;
  for (int i = 0; i < k; i++) {
    int d;
    if (sscanf(s, "%d%n", &d, &used) != 1) return NULL;
    s += used;
    count *= (size_t)d;
    if (dims) dims[i] = d;
  }
  if (nd) *nd = k;
  char path[600];
  snprintf(path, sizeof path, "%s/%s", f->dir, file);
  FILE *in = fopen(path, "rb");
  if (!in) return NULL;
  float *v = malloc(count * sizeof *v);
  unsigned char b[4];
  size_t i = 0;
  for (; v && i < count && fread(b, 1, 4, in) == 4; i++) { /* little-endian, whatever the host */
    uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    memcpy(&v[i], &u, 4);
  }
  fclose(in);
  if (i != count) {
    free(v);
    return NULL;
  }
  *n = count;
  return v;
}

static inline float *fx_tensor(const fixture *f, const char *name, size_t *n) {
  return fx_tensor_dims(f, name, n, NULL, NULL);
}

#endif
