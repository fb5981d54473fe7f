/*
 * core/safetensors.c -- a model's parameters, and optionally its optimizer's
 * state and hyperparameters, saved to and loaded from a safetensors file, so
 * that training resumes exactly and the weights open in PyTorch.
 *
 * The format (as the safetensors project specifies it): 8 bytes, a
 * little-endian unsigned length N; N bytes of UTF-8 JSON, an object mapping
 * each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]} plus
 * an optional "__metadata__" object of string values; then the data, every
 * tensor little-endian and row-major at its offsets, the tensors covering the
 * data exactly. What convlstm stores in it is documented in convlstm.h.
 *
 * Files are untrusted input: everything about one is checked before any of
 * it is used (header length, UTF-8, strict JSON, dtypes, shapes, offsets,
 * sizes and their overflow, the names and shapes a model needs, the values'
 * finiteness), and every failure is a message, never a crash. A libFuzzer
 * target (tests/fuzz/) drives cl_saved_parse() to keep it so.
 *
 * It is not a general safetensors library: it reads only what a convlstm
 * model needs, and writes float32 only. Writing goes to a temporary file in
 * the destination's directory that is renamed over the destination once
 * complete and flushed, so a crash never leaves a half-written file there.
 */
#define _POSIX_C_SOURCE 200809L /* open(O_EXCL), fsync, getpid: the atomic write */

#include "internal.h"
#include "half.h" /* float16 / bfloat16 -> float32 for files PyTorch wrote */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The safetensors project's own bound on the header. */
#define ST_MAX_HEADER 100000000u
/* Ranks beyond what any convlstm tensor has are refused, not guessed at. */
#define ST_MAX_RANK 8
/* Integers in the header (shapes, offsets) stay below 2^53, as JSON readers
 * that hold numbers in doubles (Python's, R's) can represent them. */
#define ST_MAX_INT ((uint64_t)1 << 53)

static cl_status failf(char *err, size_t errlen, cl_status s, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;
static cl_status failf(char *err, size_t errlen, cl_status s, const char *fmt, ...) {
  if (err && errlen) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return s;
}

/* ---- dtypes ----------------------------------------------------------- */

typedef struct st_dtype {
  const char *name;
  unsigned size;
} st_dtype;

/* Every dtype safetensors defines; only the floating ones convert to
 * parameters, the others are known (and refused by name) but never read. */
static const st_dtype DTYPES[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1},
    {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},
    {"U32", 4},  {"F32", 4}, {"F64", 8}, {"I64", 8},     {"U64", 8}};
#define N_DTYPES ((int)(sizeof DTYPES / sizeof DTYPES[0]))
enum { DT_F16 = 7, DT_BF16 = 8, DT_F32 = 11, DT_F64 = 12 };

static int dtype_index(const char *name) {
  for (int i = 0; i < N_DTYPES; i++)
    if (strcmp(DTYPES[i].name, name) == 0) return i;
  return -1;
}

static uint64_t le_u64(const unsigned char *b) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
  return v;
}

static uint32_t le_u32(const unsigned char *b) {
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}

/* Element i of a floating tensor as float32. */
static float read_elem(const unsigned char *p, int dtype, size_t i) {
  switch (dtype) {
  case DT_F32: return cl_bits_f32(le_u32(p + 4 * i));
  case DT_F64: {
    uint64_t u = le_u64(p + 8 * i);
    double d;
    memcpy(&d, &u, sizeof d);
    return (float)d;
  }
  case DT_F16: return cl_f16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
  default: return cl_bf16_to_f32((uint16_t)(p[2 * i] | p[2 * i + 1] << 8));
  }
}

/* ---- the parsed file -------------------------------------------------- */

typedef struct st_tensor {
  char *name;
  int dtype;
  int ndim;
  uint64_t shape[ST_MAX_RANK];
  uint64_t begin, end; /* byte offsets into the data */
} st_tensor;

typedef struct st_meta {
  char *key, *value;
} st_meta;

/* Tensor roles: the parameter itself and the optimizer states. */
enum { R_PARAM = 0, R_EXP_AVG, R_EXP_AVG_SQ, R_MOMENTUM, N_ROLES };
static const char *const ROLE_PREFIX[N_ROLES] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq.",
                                                 "optimizer.momentum_buffer."};

struct cl_saved {
  unsigned char *bytes; /* the whole file */
  size_t len;
  const unsigned char *data; /* after the header */
  size_t data_len;
  st_tensor *t;
  int nt;
  st_meta *meta;
  int nmeta;
  st_tensor **by_name; /* sorted by name, for lookups */
  cl_config cfg;
  int n_params_tensors; /* 1 or 2 per layer */
  /* tensor index for [role][state-dict position], -1 when absent */
  int idx[N_ROLES][2 * CL_MAX_LAYERS];
  int has_opt;
  cl_optim opt;
  int64_t opt_steps;
  int has_scale;
  cl_loss_scale scale;
};

static void saved_free_parts(cl_saved *s) {
  if (s->t)
    for (int i = 0; i < s->nt; i++) free(s->t[i].name);
  if (s->meta)
    for (int i = 0; i < s->nmeta; i++) {
      free(s->meta[i].key);
      free(s->meta[i].value);
    }
  free(s->t);
  free(s->meta);
  free(s->by_name);
  free(s->bytes);
}

void cl_saved_free(cl_saved *s) {
  if (!s) return;
  saved_free_parts(s);
  free(s);
}

/* ---- UTF-8 and JSON --------------------------------------------------- */

/* Length of the well-formed UTF-8 sequence at p (at most n bytes), or 0:
 * no overlong forms, no surrogates, nothing above U+10FFFF (RFC 3629). */
static size_t utf8_len(const unsigned char *p, size_t n) {
  unsigned c = p[0];
  if (c < 0x80) return 1;
  size_t len;
  unsigned lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 0;
  if (n < len) return 0;
  if (p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; i++)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return len;
}

/* Offset of the first byte that is not well-formed UTF-8, or n. */
static size_t utf8_check(const unsigned char *p, size_t n) {
  size_t i = 0;
  while (i < n) {
    size_t l = utf8_len(p + i, n - i);
    if (l == 0) return i;
    i += l;
  }
  return n;
}

/* A strict reader for exactly the JSON a safetensors header holds. */
typedef struct jp {
  const unsigned char *s;
  size_t n, i;
  char *err;
  size_t errlen;
} jp;

static cl_status jfail(jp *p, const char *what) {
  if (p->i < p->n) {
    unsigned char c = p->s[p->i];
    if (c >= 0x20 && c < 0x7f)
      return failf(p->err, p->errlen, CL_E_INVALID, "header byte %zu ('%c'): %s", p->i, c, what);
    return failf(p->err, p->errlen, CL_E_INVALID, "header byte %zu (0x%02x): %s", p->i, c, what);
  }
  return failf(p->err, p->errlen, CL_E_INVALID, "the header ends early: %s", what);
}

static void jws(jp *p) {
  while (p->i < p->n) {
    unsigned char c = p->s[p->i];
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
    p->i++;
  }
}

static int jpeek(jp *p, unsigned char c) { return p->i < p->n && p->s[p->i] == c; }

static cl_status jexpect(jp *p, unsigned char c, const char *what) {
  jws(p);
  if (!jpeek(p, c)) return jfail(p, what);
  p->i++;
  jws(p);
  return CL_OK;
}

static int hexval(unsigned char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

static int read_hex4(jp *p, size_t at, unsigned *out) {
  if (at + 4 > p->n) return 0;
  unsigned v = 0;
  for (int k = 0; k < 4; k++) {
    int h = hexval(p->s[at + k]);
    if (h < 0) return 0;
    v = v << 4 | (unsigned)h;
  }
  *out = v;
  return 1;
}

/* A JSON string at p->i into a new NUL-terminated buffer. The header was
 * checked to be UTF-8 as a whole, so raw bytes copy as they are; escapes
 * decode, and a NUL (which no C string can hold) is refused. */
static cl_status jstring(jp *p, char **out) {
  *out = NULL;
  if (!jpeek(p, '"')) return jfail(p, "expected a string");
  size_t j = p->i + 1;
  while (j < p->n && p->s[j] != '"') j += p->s[j] == '\\' ? 2 : 1;
  if (j >= p->n) return jfail(p, "unterminated string");
  size_t raw = j - (p->i + 1);
  char *buf = malloc(raw + 1); /* decoding never lengthens */
  if (!buf) return failf(p->err, p->errlen, CL_E_OOM, "out of host memory reading the header");
  size_t o = 0;
  p->i++;
  while (p->i < j) {
    unsigned char c = p->s[p->i];
    if (c < 0x20) {
      free(buf);
      return jfail(p, "control character in a string (it must be escaped)");
    }
    if (c != '\\') {
      buf[o++] = (char)c;
      p->i++;
      continue;
    }
    unsigned char e = p->s[p->i + 1];
    p->i += 2;
    switch (e) {
    case '"': buf[o++] = '"'; continue;
    case '\\': buf[o++] = '\\'; continue;
    case '/': buf[o++] = '/'; continue;
    case 'b': buf[o++] = '\b'; continue;
    case 'f': buf[o++] = '\f'; continue;
    case 'n': buf[o++] = '\n'; continue;
    case 'r': buf[o++] = '\r'; continue;
    case 't': buf[o++] = '\t'; continue;
    case 'u': break;
    default:
      p->i -= 1;
      free(buf);
      return jfail(p, "invalid escape in a string");
    }
    unsigned cp, lo;
    if (p->i + 4 > j || !read_hex4(p, p->i, &cp)) {
      free(buf);
      return jfail(p, "\\u needs four hex digits");
    }
    p->i += 4;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
      if (p->i + 6 > j || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u' ||
          !read_hex4(p, p->i + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF) {
        free(buf);
        return jfail(p, "unpaired UTF-16 surrogate in a \\u escape");
      }
      p->i += 6;
      cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
      free(buf);
      return jfail(p, "unpaired UTF-16 surrogate in a \\u escape");
    }
    if (cp == 0) {
      free(buf);
      return jfail(p, "a string holds a NUL character (\\u0000)");
    }
    /* UTF-8 of cp: at most as long as the escape it came from */
    if (cp < 0x80) {
      buf[o++] = (char)cp;
    } else if (cp < 0x800) {
      buf[o++] = (char)(0xC0 | cp >> 6);
      buf[o++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      buf[o++] = (char)(0xE0 | cp >> 12);
      buf[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      buf[o++] = (char)(0x80 | (cp & 0x3F));
    } else {
      buf[o++] = (char)(0xF0 | cp >> 18);
      buf[o++] = (char)(0x80 | ((cp >> 12) & 0x3F));
      buf[o++] = (char)(0x80 | ((cp >> 6) & 0x3F));
      buf[o++] = (char)(0x80 | (cp & 0x3F));
    }
  }
  buf[o] = '\0';
  p->i = j + 1;
  *out = buf;
  return CL_OK;
}

/* A JSON number that must be a non-negative integer below ST_MAX_INT: the
 * full number grammar is read so that 1.5, -1 or 1e3 get a clear message. */
static cl_status juint(jp *p, const char *what, uint64_t *out) {
  size_t start = p->i;
  int neg = 0, frac = 0, expo = 0;
  if (jpeek(p, '-')) {
    neg = 1;
    p->i++;
  }
  if (!(p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')) {
    p->i = start;
    return jfail(p, what);
  }
  uint64_t v = 0;
  int big = 0;
  size_t digits0 = p->i;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
    v = v * 10 + (uint64_t)(p->s[p->i] - '0');
    if (v >= ST_MAX_INT) big = 1, v = ST_MAX_INT; /* saturate, keep reading */
    p->i++;
  }
  if (p->i - digits0 > 1 && p->s[digits0] == '0') {
    p->i = digits0;
    return jfail(p, "a number has a leading zero");
  }
  if (jpeek(p, '.')) {
    frac = 1;
    p->i++;
    size_t d = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i == d) return jfail(p, "a number needs digits after '.'");
  }
  if (jpeek(p, 'e') || jpeek(p, 'E')) {
    expo = 1;
    p->i++;
    if (jpeek(p, '+') || jpeek(p, '-')) p->i++;
    size_t d = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') p->i++;
    if (p->i == d) return jfail(p, "a number needs digits in its exponent");
  }
  if (neg || frac || expo) {
    p->i = start;
    return jfail(p, what);
  }
  if (big) {
    p->i = start;
    return jfail(p, "an integer is too large (2^53 or more)");
  }
  *out = v;
  return CL_OK;
}

/* [n, n, ...] into dims; returns the count in *nd. */
static cl_status juint_array(jp *p, uint64_t *dims, int maxn, int *nd, const char *what) {
  *nd = 0;
  if (!jpeek(p, '[')) return jfail(p, what);
  p->i++;
  jws(p);
  if (jpeek(p, ']')) {
    p->i++;
    return CL_OK;
  }
  for (;;) {
    if (*nd >= maxn) return jfail(p, maxn == 2 ? "data_offsets must have exactly 2 entries"
                                                : "a shape has more than 8 dimensions");
    CL_TRY(juint(p, "expected a non-negative integer", &dims[*nd]));
    (*nd)++;
    jws(p);
    if (jpeek(p, ',')) {
      p->i++;
      jws(p);
      continue;
    }
    if (jpeek(p, ']')) {
      p->i++;
      return CL_OK;
    }
    return jfail(p, "expected ',' or ']' in an array");
  }
}

static cl_status grow(void **arr, int *cap, int n, size_t elem, char *err, size_t errlen) {
  if (n < *cap) return CL_OK;
  if (*cap > INT32_MAX / 2) return failf(err, errlen, CL_E_INVALID, "the header has too many entries");
  int nc = *cap ? *cap * 2 : 16;
  void *a = realloc(*arr, (size_t)nc * elem);
  if (!a) return failf(err, errlen, CL_E_OOM, "out of host memory reading the header");
  *arr = a;
  *cap = nc;
  return CL_OK;
}

/* {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, keys in any
 * order, each exactly once, no others. */
static cl_status jtensor(jp *p, st_tensor *t) {
  if (!jpeek(p, '{')) return jfail(p, "a tensor's entry must be an object");
  p->i++;
  jws(p);
  int seen_dtype = 0, seen_shape = 0, seen_off = 0;
  while (!jpeek(p, '}')) {
    char *key = NULL;
    size_t at = p->i;
    CL_TRY(jstring(p, &key));
    cl_status s = jexpect(p, ':', "expected ':' after a key");
    if (s != CL_OK) {
      free(key);
      return s;
    }
    int which = strcmp(key, "dtype") == 0 ? 0 : strcmp(key, "shape") == 0 ? 1
              : strcmp(key, "data_offsets") == 0 ? 2 : -1;
    free(key);
    int *seen = which == 0 ? &seen_dtype : which == 1 ? &seen_shape : &seen_off;
    if (which < 0 || *seen) {
      p->i = at;
      return jfail(p, which < 0 ? "a tensor's entry may only have dtype, shape and data_offsets"
                                : "a key appears twice in a tensor's entry");
    }
    *seen = 1;
    if (which == 0) {
      char *dt = NULL;
      size_t dat = p->i;
      CL_TRY(jstring(p, &dt));
      t->dtype = dtype_index(dt);
      if (t->dtype < 0) {
        cl_status r = failf(p->err, p->errlen, CL_E_INVALID,
                            "header byte %zu: unknown dtype \"%.40s\"", dat, dt);
        free(dt);
        return r;
      }
      free(dt);
    } else if (which == 1) {
      CL_TRY(juint_array(p, t->shape, ST_MAX_RANK, &t->ndim, "shape must be an array of integers"));
    } else {
      uint64_t off[2];
      int n;
      CL_TRY(juint_array(p, off, 2, &n, "data_offsets must be an array of two integers"));
      if (n != 2) return jfail(p, "data_offsets must have exactly 2 entries");
      t->begin = off[0];
      t->end = off[1];
    }
    jws(p);
    if (jpeek(p, ',')) {
      p->i++;
      jws(p);
      if (jpeek(p, '}')) return jfail(p, "trailing comma in an object");
    } else if (!jpeek(p, '}')) {
      return jfail(p, "expected ',' or '}' in a tensor's entry");
    }
  }
  p->i++;
  if (!seen_dtype || !seen_shape || !seen_off)
    return failf(p->err, p->errlen, CL_E_INVALID, "tensor \"%.80s\" lacks %s", t->name,
                 !seen_dtype ? "its dtype" : !seen_shape ? "its shape" : "its data_offsets");
  return CL_OK;
}

static cl_status jmetadata(jp *p, cl_saved *s, int *cap) {
  if (!jpeek(p, '{')) return jfail(p, "__metadata__ must be an object");
  p->i++;
  jws(p);
  while (!jpeek(p, '}')) {
    CL_TRY(grow((void **)&s->meta, cap, s->nmeta, sizeof *s->meta, p->err, p->errlen));
    st_meta *m = &s->meta[s->nmeta];
    m->key = m->value = NULL;
    s->nmeta++;
    CL_TRY(jstring(p, &m->key));
    CL_TRY(jexpect(p, ':', "expected ':' after a key"));
    if (!jpeek(p, '"')) return jfail(p, "__metadata__ values must be strings");
    CL_TRY(jstring(p, &m->value));
    jws(p);
    if (jpeek(p, ',')) {
      p->i++;
      jws(p);
      if (jpeek(p, '}')) return jfail(p, "trailing comma in an object");
    } else if (!jpeek(p, '}')) {
      return jfail(p, "expected ',' or '}' in __metadata__");
    }
  }
  p->i++;
  return CL_OK;
}

static cl_status parse_header(cl_saved *s, const unsigned char *h, size_t n, char *err,
                              size_t errlen) {
  size_t bad = utf8_check(h, n);
  if (bad < n)
    return failf(err, errlen, CL_E_INVALID, "header byte %zu: not valid UTF-8", bad);
  jp p = {h, n, 0, err, errlen};
  int tcap = 0, mcap = 0, seen_meta = 0;
  jws(&p);
  if (!jpeek(&p, '{')) return jfail(&p, "the header must be a JSON object");
  p.i++;
  jws(&p);
  while (!jpeek(&p, '}')) {
    char *key = NULL;
    CL_TRY(jstring(&p, &key));
    cl_status st = jexpect(&p, ':', "expected ':' after a key");
    if (st == CL_OK && strcmp(key, "__metadata__") == 0) {
      free(key);
      if (seen_meta) return jfail(&p, "__metadata__ appears twice");
      seen_meta = 1;
      CL_TRY(jmetadata(&p, s, &mcap));
    } else if (st == CL_OK) {
      st = grow((void **)&s->t, &tcap, s->nt, sizeof *s->t, err, errlen);
      if (st != CL_OK) {
        free(key);
        return st;
      }
      st_tensor *t = &s->t[s->nt++];
      memset(t, 0, sizeof *t);
      t->name = key;
      CL_TRY(jtensor(&p, t));
    } else {
      free(key);
      return st;
    }
    jws(&p);
    if (jpeek(&p, ',')) {
      p.i++;
      jws(&p);
      if (jpeek(&p, '}')) return jfail(&p, "trailing comma in an object");
    } else if (!jpeek(&p, '}')) {
      return jfail(&p, "expected ',' or '}' after an entry of the header");
    }
  }
  p.i++;
  jws(&p); /* writers pad the header with spaces to align the data */
  if (p.i != n) return jfail(&p, "unexpected bytes after the header's JSON object");
  return CL_OK;
}

/* ---- layout checks ---------------------------------------------------- */

/* Sorting works on pointers to tensors, so no comparator needs a context. */
static int cmp_name(const void *a, const void *b) {
  return strcmp((*(const st_tensor *const *)a)->name, (*(const st_tensor *const *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
  const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int cmp_meta(const void *a, const void *b) {
  return strcmp(((const st_meta *)a)->key, ((const st_meta *)b)->key);
}

/* Sizes agree with shapes and dtypes, names and keys are unique, and the
 * tensors tile the data: in offset order, each begins where the previous
 * ended, the first at 0 and the last at the data's end. */
static cl_status check_layout(cl_saved *s, char *err, size_t errlen) {
  for (int i = 0; i < s->nt; i++) {
    st_tensor *t = &s->t[i];
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] != 0 && numel > ST_MAX_INT / t->shape[d])
        return failf(err, errlen, CL_E_INVALID, "tensor \"%.80s\": its shape's size overflows",
                     t->name);
      numel *= t->shape[d];
    }
    uint64_t bytes = numel * DTYPES[t->dtype].size; /* < 2^56: no overflow */
    if (t->end < t->begin)
      return failf(err, errlen, CL_E_INVALID,
                   "tensor \"%.80s\": data_offsets [%llu, %llu] end before they begin", t->name,
                   (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != bytes)
      return failf(err, errlen, CL_E_INVALID,
                   "tensor \"%.80s\": data_offsets [%llu, %llu] hold %llu bytes, but %s of "
                   "%llu elements needs %llu",
                   t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                   (unsigned long long)(t->end - t->begin), DTYPES[t->dtype].name,
                   (unsigned long long)numel, (unsigned long long)bytes);
  }
  st_tensor **order = malloc((size_t)(s->nt > 0 ? s->nt : 1) * sizeof *order);
  s->by_name = malloc((size_t)(s->nt > 0 ? s->nt : 1) * sizeof *s->by_name);
  if (!order || !s->by_name) {
    free(order);
    return failf(err, errlen, CL_E_OOM, "out of host memory reading the header");
  }
  for (int i = 0; i < s->nt; i++) order[i] = s->by_name[i] = &s->t[i];
  qsort(s->by_name, (size_t)s->nt, sizeof *s->by_name, cmp_name);
  qsort(order, (size_t)s->nt, sizeof *order, cmp_offset);
  cl_status st = CL_OK;
  for (int i = 1; i < s->nt && st == CL_OK; i++)
    if (strcmp(s->by_name[i]->name, s->by_name[i - 1]->name) == 0)
      st = failf(err, errlen, CL_E_INVALID, "tensor \"%.80s\" appears twice", s->by_name[i]->name);
  uint64_t at = 0;
  for (int i = 0; i < s->nt && st == CL_OK; i++) {
    const st_tensor *t = order[i];
    if (t->begin != at)
      st = failf(err, errlen, CL_E_INVALID,
                 t->begin < at ? "tensor \"%.80s\" overlaps another (its data begins at byte %llu, "
                                 "before %llu)"
                               : "tensor \"%.80s\": its data begins at byte %llu, leaving a gap "
                                 "after byte %llu",
                 t->name, (unsigned long long)t->begin, (unsigned long long)at);
    at = t->end;
  }
  free(order);
  if (st != CL_OK) return st;
  if (at != s->data_len)
    return failf(err, errlen, CL_E_INVALID,
                 "the tensors cover %llu bytes of data but the file holds %zu after the header",
                 (unsigned long long)at, s->data_len);
  if (s->nmeta > 1) {
    qsort(s->meta, (size_t)s->nmeta, sizeof *s->meta, cmp_meta);
    for (int i = 1; i < s->nmeta; i++)
      if (strcmp(s->meta[i].key, s->meta[i - 1].key) == 0)
        return failf(err, errlen, CL_E_INVALID, "__metadata__ key \"%.80s\" appears twice",
                     s->meta[i].key);
  }
  return CL_OK;
}

static int find_tensor(const cl_saved *s, const char *name) {
  int lo = 0, hi = s->nt - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(s->by_name[mid]->name, name);
    if (c == 0) return (int)(s->by_name[mid] - s->t);
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return -1;
}

static const char *find_meta(const cl_saved *s, const char *key) {
  int lo = 0, hi = s->nmeta - 1;
  while (lo <= hi) {
    int mid = lo + (hi - lo) / 2;
    int c = strcmp(s->meta[mid].key, key);
    if (c == 0) return s->meta[mid].value;
    if (c < 0) lo = mid + 1;
    else hi = mid - 1;
  }
  return NULL;
}

/* ---- what convlstm keeps in the metadata ------------------------------ */

#define META_PREFIX "convlstm."

/* A whole metadata value as an integer in [lo, hi]. */
static int meta_int(const char *v, long long lo, long long hi, long long *out) {
  const char *q = v;
  if (*q == '-') q++;
  if (*q < '0' || *q > '9' || (q[0] == '0' && q[1] != '\0')) return 0;
  long long x = 0;
  for (; *q; q++) {
    if (*q < '0' || *q > '9') return 0;
    if (x > (LLONG_MAX - 9) / 10) return 0;
    x = x * 10 + (*q - '0');
  }
  if (*v == '-') x = -x;
  if (x < lo || x > hi) return 0;
  *out = x;
  return 1;
}

/* A whole metadata value as a finite number in JSON's number grammar (so
 * that strtod's locale and hex forms never matter). */
static int meta_double(const char *v, double *out) {
  const char *q = v;
  if (*q == '-') q++;
  if (*q < '0' || *q > '9') return 0;
  if (*q == '0' && q[1] >= '0' && q[1] <= '9') return 0;
  while (*q >= '0' && *q <= '9') q++;
  if (*q == '.') {
    q++;
    if (*q < '0' || *q > '9') return 0;
    while (*q >= '0' && *q <= '9') q++;
  }
  if (*q == 'e' || *q == 'E') {
    q++;
    if (*q == '+' || *q == '-') q++;
    if (*q < '0' || *q > '9') return 0;
    while (*q >= '0' && *q <= '9') q++;
  }
  if (*q != '\0') return 0;
  char *end = NULL;
  double d = strtod(v, &end);
  if (end == NULL || *end != '\0' || !isfinite(d)) return 0;
  *out = d;
  return 1;
}

/* "[3, 2]" (JSON array of positive integers) into out; returns the count,
 * or -1 when malformed or longer than max. */
static int meta_int_list(const char *v, int *out, int max) {
  const char *q = v;
  int n = 0;
  while (*q == ' ') q++;
  if (*q++ != '[') return -1;
  while (*q == ' ') q++;
  if (*q == ']') return q[1] == '\0' ? 0 : -1;
  for (;;) {
    if (n >= max || *q < '1' || *q > '9') return -1;
    long long x = 0;
    while (*q >= '0' && *q <= '9') {
      x = x * 10 + (*q++ - '0');
      if (x > INT32_MAX) return -1;
    }
    out[n++] = (int)x;
    while (*q == ' ') q++;
    if (*q == ',') {
      q++;
      while (*q == ' ') q++;
      continue;
    }
    if (*q == ']') {
      q++;
      while (*q == ' ') q++;
      return *q == '\0' ? n : -1;
    }
    return -1;
  }
}

static const char *dtype_label(cl_dtype t) {
  return t == CL_F16 ? "float16" : t == CL_BF16 ? "bfloat16" : "float32";
}

/* A tensor's name for role r and state-dict position i of cfg. */
static void tensor_name(char *buf, size_t len, int r, int i, int bias) {
  int per = bias ? 2 : 1;
  snprintf(buf, len, "%scell_list.%d.conv.%s", ROLE_PREFIX[r], i / per,
           bias && i % 2 ? "bias" : "weight");
}

static void shape_text(char *buf, size_t len, const uint64_t *d, int nd) {
  size_t o = 0;
  o += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < nd && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
}

/* Architecture from the metadata (convlstm wrote it), or else from the
 * weights' shapes (a state dict PyTorch or R torch saved). */
static cl_status read_architecture(cl_saved *s, char *err, size_t errlen) {
  cl_config *c = &s->cfg;
  memset(c, 0, sizeof *c);
  c->device = CL_DEVICE_CPU;
  c->dtype = CL_F32;
  const char *v;
  if ((v = find_meta(s, META_PREFIX "format_version")) && strcmp(v, "1") != 0)
    return failf(err, errlen, CL_E_UNSUPPORTED,
                 "the file is convlstm format version \"%.20s\"; this build reads version 1", v);
  const char *in = find_meta(s, META_PREFIX "input_dim");
  const char *hd = find_meta(s, META_PREFIX "hidden_dims");
  const char *ks = find_meta(s, META_PREFIX "kernel_sizes");
  const char *bi = find_meta(s, META_PREFIX "bias");
  const char *dt = find_meta(s, META_PREFIX "dtype");
  if (in || hd || ks || bi) {
    long long x;
    if (!in || !hd || !ks || !bi)
      return failf(err, errlen, CL_E_INVALID,
                   "the metadata describes the architecture only in part: convlstm.input_dim, "
                   "convlstm.hidden_dims, convlstm.kernel_sizes and convlstm.bias go together");
    if (!meta_int(in, 1, INT32_MAX, &x))
      return failf(err, errlen, CL_E_INVALID,
                   "metadata convlstm.input_dim must be a positive integer, not \"%.40s\"", in);
    c->input_dim = (int)x;
    int nh = meta_int_list(hd, c->hidden_dims, CL_MAX_LAYERS);
    int nk = meta_int_list(ks, c->kernel_sizes, CL_MAX_LAYERS);
    if (nh < 1)
      return failf(err, errlen, CL_E_INVALID,
                   "metadata convlstm.hidden_dims must be a list of 1 to %d positive integers "
                   "such as [8, 1], not \"%.60s\"", CL_MAX_LAYERS, hd);
    if (nk != nh)
      return failf(err, errlen, CL_E_INVALID,
                   "metadata convlstm.kernel_sizes must be a list of %d positive integers "
                   "(one per layer), not \"%.60s\"", nh, ks);
    c->n_layers = nh;
    if (strcmp(bi, "true") != 0 && strcmp(bi, "false") != 0)
      return failf(err, errlen, CL_E_INVALID,
                   "metadata convlstm.bias must be \"true\" or \"false\", not \"%.40s\"", bi);
    c->bias = bi[0] == 't';
  } else {
    /* cell_list.<l>.conv.weight [4h, in + h, k, k] for l = 0, 1, ... */
    char name[64];
    for (int l = 0; l < CL_MAX_LAYERS; l++) {
      snprintf(name, sizeof name, "cell_list.%d.conv.weight", l);
      int i = find_tensor(s, name);
      if (i < 0) break;
      const st_tensor *t = &s->t[i];
      char sh[160];
      shape_text(sh, sizeof sh, t->shape, t->ndim);
      if (t->ndim != 4 || t->shape[0] == 0 || t->shape[0] % 4 != 0 ||
          t->shape[0] / 4 > INT32_MAX / 4 || t->shape[1] <= t->shape[0] / 4 ||
          t->shape[1] > INT32_MAX || t->shape[2] != t->shape[3] || t->shape[2] % 2 == 0 ||
          t->shape[2] > INT32_MAX)
        return failf(err, errlen, CL_E_INVALID,
                     "tensor %s has shape %s; a ConvLSTM layer's weight is [4 * hidden, "
                     "input + hidden, k, k] with k odd",
                     name, sh);
      int h = (int)(t->shape[0] / 4), inl = (int)(t->shape[1] - (uint64_t)h);
      if (l == 0) c->input_dim = inl;
      else if (inl != c->hidden_dims[l - 1])
        return failf(err, errlen, CL_E_INVALID,
                     "tensor %s has shape %s: layer %d reads %d channels, but layer %d has "
                     "hidden dimension %d",
                     name, sh, l, inl, l - 1, c->hidden_dims[l - 1]);
      c->hidden_dims[l] = h;
      c->kernel_sizes[l] = (int)t->shape[2];
      c->n_layers = l + 1;
    }
    if (c->n_layers == 0)
      return failf(err, errlen, CL_E_INVALID,
                   "no tensor cell_list.0.conv.weight and no convlstm metadata: this is not a "
                   "convlstm model's file");
    c->bias = find_tensor(s, "cell_list.0.conv.bias") >= 0;
  }
  if (dt) {
    if (strcmp(dt, "float32") == 0) c->dtype = CL_F32;
    else if (strcmp(dt, "float16") == 0) c->dtype = CL_F16;
    else if (strcmp(dt, "bfloat16") == 0) c->dtype = CL_BF16;
    else
      return failf(err, errlen, CL_E_INVALID,
                   "metadata convlstm.dtype must be \"float32\", \"float16\" or \"bfloat16\", "
                   "not \"%.40s\"", dt);
  }
  for (int l = 0; l < c->n_layers; l++) {
    int in_l = l == 0 ? c->input_dim : c->hidden_dims[l - 1];
    if (c->hidden_dims[l] > INT32_MAX / 4 || in_l > INT32_MAX - c->hidden_dims[l] ||
        c->kernel_sizes[l] % 2 == 0 || c->kernel_sizes[l] > 46339)
      return failf(err, errlen, CL_E_INVALID,
                   "layer %d's sizes (hidden %d, kernel %d) are out of range (kernels are odd)", l,
                   c->hidden_dims[l], c->kernel_sizes[l]);
  }
  return CL_OK;
}

static cl_status read_optimizer(cl_saved *s, char *err, size_t errlen) {
  const char *kind = find_meta(s, META_PREFIX "optimizer");
  if (!kind) {
    for (int i = 0; i < s->nmeta; i++)
      if (strncmp(s->meta[i].key, META_PREFIX "optimizer.", 19) == 0)
        return failf(err, errlen, CL_E_INVALID,
                     "metadata %.80s is there but convlstm.optimizer (the kind) is not",
                     s->meta[i].key);
    return CL_OK;
  }
  cl_optim *o = &s->opt;
  memset(o, 0, sizeof *o);
  if (strcmp(kind, "adam") == 0) o->kind = CL_OPTIM_ADAM;
  else if (strcmp(kind, "sgd") == 0) o->kind = CL_OPTIM_SGD;
  else
    return failf(err, errlen, CL_E_INVALID,
                 "metadata convlstm.optimizer must be \"adam\" or \"sgd\", not \"%.40s\"", kind);
  struct {
    const char *key;
    double *dst;
    double lo, hi; /* lo <= x < hi, or x == 0 allowed when lo is 0 */
    int open_lo;   /* x > lo */
  } hp[] = {{META_PREFIX "optimizer.lr", &o->lr, 0, INFINITY, 0},
            {META_PREFIX "optimizer.weight_decay", &o->weight_decay, 0, INFINITY, 0},
            {META_PREFIX "optimizer.beta1", &o->beta1, 0, 1, 0},
            {META_PREFIX "optimizer.beta2", &o->beta2, 0, 1, 0},
            {META_PREFIX "optimizer.eps", &o->eps, 0, INFINITY, 1},
            {META_PREFIX "optimizer.momentum", &o->momentum, 0, INFINITY, 0}};
  int n_hp = o->kind == CL_OPTIM_ADAM ? 5 : 6;
  for (int i = 0; i < n_hp; i++) {
    if (o->kind == CL_OPTIM_SGD && i >= 2 && i <= 4) continue;
    const char *v = find_meta(s, hp[i].key);
    double d;
    if (!v)
      return failf(err, errlen, CL_E_INVALID, "metadata %s is missing (the %s optimizer needs it)",
                   hp[i].key, kind);
    if (!meta_double(v, &d) || d < hp[i].lo || (hp[i].open_lo && d <= hp[i].lo) || d >= hp[i].hi)
      return failf(err, errlen, CL_E_INVALID, "metadata %s is out of range or not a number: \"%.40s\"",
                   hp[i].key, v);
    *hp[i].dst = d;
  }
  const char *st = find_meta(s, META_PREFIX "optimizer.steps");
  long long steps;
  if (!st || !meta_int(st, 0, (long long)ST_MAX_INT, &steps))
    return failf(err, errlen, CL_E_INVALID,
                 "metadata convlstm.optimizer.steps must be a whole number >= 0, not %s%.40s%s",
                 st ? "\"" : "", st ? st : "missing", st ? "\"" : "");
  s->opt_steps = steps;
  s->has_opt = 1;
  return CL_OK;
}

static cl_status read_loss_scale(cl_saved *s, char *err, size_t errlen) {
  const char *sc = find_meta(s, META_PREFIX "loss_scale.scale");
  const char *gi = find_meta(s, META_PREFIX "loss_scale.growth_interval");
  const char *cs = find_meta(s, META_PREFIX "loss_scale.clean_steps");
  const char *sk = find_meta(s, META_PREFIX "loss_scale.skipped_steps");
  if (!sc && !gi && !cs && !sk) return CL_OK;
  double d;
  long long g, c, k;
  if (!sc || !gi || !cs || !sk || !meta_double(sc, &d) || !(d > 0) ||
      !meta_int(gi, 1, INT32_MAX, &g) || !meta_int(cs, 0, INT32_MAX, &c) ||
      !meta_int(sk, 0, (long long)ST_MAX_INT, &k))
    return failf(err, errlen, CL_E_INVALID,
                 "metadata convlstm.loss_scale.* must hold scale (> 0), growth_interval (>= 1), "
                 "clean_steps and skipped_steps (>= 0), all four");
  s->scale.scale = d;
  s->scale.growth_interval = (int)g;
  s->scale.clean_steps = (int)c;
  s->scale.skipped_steps = k;
  s->has_scale = 1;
  return CL_OK;
}

/* The shape tensor i of cfg has in torch: weight [4h, in+h, k, k], bias [4h]. */
static int expected_shape(const cl_config *c, int i, uint64_t d[4]) {
  int per = c->bias ? 2 : 1, l = i / per;
  int in_l = l == 0 ? c->input_dim : c->hidden_dims[l - 1];
  d[0] = 4 * (uint64_t)c->hidden_dims[l];
  if (c->bias && i % 2) return 1;
  d[1] = (uint64_t)in_l + (uint64_t)c->hidden_dims[l];
  d[2] = d[3] = (uint64_t)c->kernel_sizes[l];
  return 4;
}

static int is_float_dtype(int dt) { return dt == DT_F32 || dt == DT_F64 || dt == DT_F16 || dt == DT_BF16; }

/* Every tensor the configuration and optimizer need, with its shape, a
 * floating dtype and finite values; no tensor beyond them. */
static cl_status match_tensors(cl_saved *s, char *err, size_t errlen) {
  const cl_config *c = &s->cfg;
  int per = c->bias ? 2 : 1;
  s->n_params_tensors = per * c->n_layers;
  int matched = 0;
  char name[96], sh[160], want[160];
  for (int r = 0; r < N_ROLES; r++) {
    int found = 0;
    for (int i = 0; i < s->n_params_tensors; i++) {
      tensor_name(name, sizeof name, r, i, c->bias);
      int k = find_tensor(s, name);
      s->idx[r][i] = k;
      if (k < 0) {
        if (r == R_PARAM)
          return failf(err, errlen, CL_E_INVALID, "tensor %s is missing (the architecture needs it)",
                       name);
        continue;
      }
      found++;
      matched++;
      const st_tensor *t = &s->t[k];
      uint64_t d[4];
      int nd = expected_shape(c, i, d);
      int same = t->ndim == nd;
      for (int j = 0; same && j < nd; j++) same = t->shape[j] == d[j];
      if (!same) {
        shape_text(sh, sizeof sh, t->shape, t->ndim);
        shape_text(want, sizeof want, d, nd);
        return failf(err, errlen, CL_E_INVALID, "tensor %s has shape %s; the model needs %s", name,
                     sh, want);
      }
      if (!is_float_dtype(t->dtype))
        return failf(err, errlen, CL_E_INVALID,
                     "tensor %s has dtype %s; parameters must be F32 (or F64, F16, BF16)", name,
                     DTYPES[t->dtype].name);
      size_t n = (size_t)((t->end - t->begin) / DTYPES[t->dtype].size), bad = 0;
      const unsigned char *p = s->data + t->begin;
      for (size_t e = 0; e < n; e++) bad += !isfinite(read_elem(p, t->dtype, e));
      if (bad)
        return failf(err, errlen, CL_E_INVALID,
                     "tensor %s holds %zu non-finite value%s (NaN or Inf) of %zu", name, bad,
                     bad == 1 ? "" : "s", n);
    }
    if (r != R_PARAM && found != 0 && found != s->n_params_tensors) {
      for (int i = 0; i < s->n_params_tensors; i++)
        if (s->idx[r][i] < 0) tensor_name(name, sizeof name, r, i, c->bias);
      return failf(err, errlen, CL_E_INVALID,
                   "the optimizer state is incomplete: tensor %s is missing", name);
    }
  }
  if (matched != s->nt) {
    for (int i = 0; i < s->nt; i++) {
      int used = 0;
      for (int r = 0; r < N_ROLES && !used; r++)
        for (int j = 0; j < s->n_params_tensors && !used; j++) used = s->idx[r][j] == i;
      if (!used)
        return failf(err, errlen, CL_E_INVALID,
                     "unexpected tensor \"%.80s\" (%d of the file's %d tensors are not part of "
                     "this %d-layer model)",
                     s->t[i].name, s->nt - matched, s->nt, c->n_layers);
    }
  }
  int have_m = s->idx[R_EXP_AVG][0] >= 0, have_v = s->idx[R_EXP_AVG_SQ][0] >= 0,
      have_b = s->idx[R_MOMENTUM][0] >= 0;
  if ((have_m || have_v || have_b) && !s->has_opt)
    return failf(err, errlen, CL_E_INVALID,
                 "the file holds optimizer state but no convlstm.optimizer metadata");
  if (s->has_opt && s->opt.kind == CL_OPTIM_ADAM) {
    if (have_b)
      return failf(err, errlen, CL_E_INVALID, "an Adam optimizer has no momentum_buffer state");
    if (have_m != have_v)
      return failf(err, errlen, CL_E_INVALID,
                   "Adam's state needs both exp_avg and exp_avg_sq, or neither");
    if (s->opt_steps > 0 && !have_m)
      return failf(err, errlen, CL_E_INVALID,
                   "the optimizer took %lld steps but its state (exp_avg, exp_avg_sq) is missing",
                   (long long)s->opt_steps);
  }
  if (s->has_opt && s->opt.kind == CL_OPTIM_SGD) {
    if (have_m || have_v)
      return failf(err, errlen, CL_E_INVALID, "an SGD optimizer has no exp_avg state");
    if (s->opt_steps > 0 && s->opt.momentum != 0 && !have_b)
      return failf(err, errlen, CL_E_INVALID,
                   "SGD with momentum took %lld steps but its momentum_buffer state is missing",
                   (long long)s->opt_steps);
  }
  return CL_OK;
}

/* Parses and checks; takes ownership of bytes (freed on failure too). */
static cl_status parse_owned(unsigned char *bytes, size_t len, cl_saved **out, char *err,
                             size_t errlen) {
  *out = NULL;
  if (len < 8) {
    free(bytes);
    return failf(err, errlen, CL_E_INVALID,
                 "%zu bytes are too few for a safetensors file (it starts with an 8-byte header "
                 "length)", len);
  }
  uint64_t n = le_u64(bytes);
  if (n < 2 || n > ST_MAX_HEADER || n > len - 8) {
    free(bytes);
    return failf(err, errlen, CL_E_INVALID,
                 "the header length %llu is impossible for a file of %zu bytes (it must lie "
                 "between 2 and %s)",
                 (unsigned long long)n, len, n > ST_MAX_HEADER ? "100 MB" : "the file size - 8");
  }
  cl_saved *s = calloc(1, sizeof *s);
  if (!s) {
    free(bytes);
    return failf(err, errlen, CL_E_OOM, "out of host memory reading a file");
  }
  s->bytes = bytes;
  s->len = len;
  s->data = bytes + 8 + n;
  s->data_len = len - 8 - (size_t)n;
  cl_status st = parse_header(s, bytes + 8, (size_t)n, err, errlen);
  if (st == CL_OK) st = check_layout(s, err, errlen);
  if (st == CL_OK) st = read_architecture(s, err, errlen);
  if (st == CL_OK) st = read_optimizer(s, err, errlen);
  if (st == CL_OK) st = read_loss_scale(s, err, errlen);
  if (st == CL_OK) st = match_tensors(s, err, errlen);
  if (st != CL_OK) {
    cl_saved_free(s);
    return st;
  }
  *out = s;
  return CL_OK;
}

cl_status cl_saved_parse(const void *bytes, size_t len, cl_saved **out, char *err,
                         size_t errlen) {
  *out = NULL;
  unsigned char *copy = malloc(len > 0 ? len : 1);
  if (!copy) return failf(err, errlen, CL_E_OOM, "out of host memory reading a file");
  if (len) memcpy(copy, bytes, len);
  return parse_owned(copy, len, out, err, errlen);
}

cl_status cl_saved_read(const char *path, cl_saved **out, char *err, size_t errlen) {
  *out = NULL;
  char why[CL_ERRMSG_LEN];
  FILE *f = fopen(path, "rb");
  if (!f) return failf(err, errlen, CL_E_INVALID, "cannot open '%s': %s", path, strerror(errno));
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return failf(err, errlen, CL_E_INVALID, "cannot read '%s': not a regular file", path);
  }
  /* Check the declared header length before reading a large file whole. */
  unsigned char head[8];
  if (size >= 8) {
    if (fread(head, 1, 8, f) != 8 || fseek(f, 0, SEEK_SET) != 0) {
      fclose(f);
      return failf(err, errlen, CL_E_INVALID, "cannot read '%s'", path);
    }
    uint64_t n = le_u64(head);
    if (n < 2 || n > ST_MAX_HEADER || n > (uint64_t)size - 8) {
      fclose(f);
      return failf(err, errlen, CL_E_INVALID,
                   "'%s' is not a safetensors file: its first 8 bytes give a header length of "
                   "%llu, impossible for a file of %ld bytes",
                   path, (unsigned long long)n, size);
    }
  }
  if ((unsigned long)size > SIZE_MAX - 1) {
    fclose(f);
    return failf(err, errlen, CL_E_INVALID, "'%s' is too large to read", path);
  }
  unsigned char *buf = malloc((size_t)size > 0 ? (size_t)size : 1);
  if (!buf) {
    fclose(f);
    return failf(err, errlen, CL_E_OOM, "out of host memory reading '%s' (%ld bytes)", path, size);
  }
  size_t got = fread(buf, 1, (size_t)size, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != (size_t)size || extra) {
    free(buf);
    return failf(err, errlen, CL_E_INVALID, "'%s' changed size while it was read", path);
  }
  cl_status st = parse_owned(buf, (size_t)size, out, why, sizeof why);
  if (st != CL_OK)
    return failf(err, errlen, st, "'%s' is not a valid convlstm safetensors file: %s", path, why);
  return CL_OK;
}

/* ---- accessors -------------------------------------------------------- */

const cl_config *cl_saved_config(const cl_saved *s) { return &s->cfg; }

int cl_saved_optimizer(const cl_saved *s, cl_optim *opt, int64_t *steps) {
  if (!s->has_opt) return 0;
  if (opt) *opt = s->opt;
  if (steps) *steps = s->opt_steps;
  return 1;
}

int cl_saved_loss_scale(const cl_saved *s, cl_loss_scale *out) {
  if (!s->has_scale) return 0;
  if (out) *out = s->scale;
  return 1;
}

int cl_saved_n_metadata(const cl_saved *s) { return s->nmeta; }

cl_status cl_saved_metadata(const cl_saved *s, int i, const char **key, const char **value) {
  if (i < 0 || i >= s->nmeta) return CL_E_INVALID;
  *key = s->meta[i].key;
  *value = s->meta[i].value;
  return CL_OK;
}

int cl_saved_n_tensors(const cl_saved *s) { return s->nt; }

cl_status cl_saved_tensor_info(const cl_saved *s, int i, const char **name, const char **dtype,
                               int *ndim, int64_t dims[8]) {
  if (i < 0 || i >= s->nt) return CL_E_INVALID;
  const st_tensor *t = s->by_name[i];
  *name = t->name;
  *dtype = DTYPES[t->dtype].name;
  *ndim = t->ndim;
  for (int d = 0; d < ST_MAX_RANK; d++) dims[d] = d < t->ndim ? (int64_t)t->shape[d] : 0;
  return CL_OK;
}


/* ---- creating a model from a file ------------------------------------- */

/* A flat optimizer-state buffer for m, allocated here, from role r's
 * tensors. */
static cl_status restore_state(cl_model *m, const cl_saved *s, int r, float **dst, float *tmp) {
  size_t pb = m->n_params * sizeof(float);
  CL_TRY(cl_model_alloc(m, CL_MEM_OPTIMIZER, pb, (void **)dst));
  const struct cl_backend_i *be = m->be->iface;
  float *flat = be->host_accessible ? *dst : malloc(pb);
  if (!flat) return cl_fail(m, CL_E_OOM, "out of host memory restoring the optimizer state");
  for (int i = 0; i < s->n_params_tensors; i++) {
    const st_tensor *t = &s->t[s->idx[r][i]];
    size_t n = cl_tensor_numel(m, i);
    for (size_t e = 0; e < n; e++) tmp[e] = read_elem(s->data + t->begin, t->dtype, e);
    cl_convert_tensor(m, i, flat, tmp, 0);
  }
  if (flat != *dst) {
    cl_status st = be->upload(m->be, *dst, flat, pb);
    free(flat);
    if (st != CL_OK) return cl_fail_backend(m, st, "upload of the optimizer state");
  }
  return CL_OK;
}

cl_status cl_saved_load_into(const cl_saved *s, cl_model *m, int with_optimizer) {
  m->err[0] = '\0';
  const cl_config *c = &m->cfg, *f = &s->cfg;
  int same = c->input_dim == f->input_dim && c->n_layers == f->n_layers && c->bias == f->bias;
  for (int l = 0; same && l < c->n_layers; l++)
    same = c->hidden_dims[l] == f->hidden_dims[l] && c->kernel_sizes[l] == f->kernel_sizes[l];
  if (!same)
    return cl_fail(m, CL_E_INVALID,
                   "the file's architecture (input %d, %d layers, bias %s) is not the model's "
                   "(input %d, %d layers, bias %s) or its hidden dims or kernels differ",
                   f->input_dim, f->n_layers, f->bias ? "yes" : "no", c->input_dim, c->n_layers,
                   c->bias ? "yes" : "no");
  size_t maxn = 1;
  for (int i = 0; i < s->n_params_tensors; i++)
    if (cl_tensor_numel(m, i) > maxn) maxn = cl_tensor_numel(m, i);
  float *tmp = malloc(maxn * sizeof(float));
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory loading parameters");
  /* The optimizer state is allocated first, so that running out of memory
   * leaves the model as it was. */
  int opt = with_optimizer && s->has_opt;
  int mr = s->opt.kind == CL_OPTIM_ADAM ? R_EXP_AVG : R_MOMENTUM;
  float *om = NULL, *ov = NULL;
  size_t pb = m->n_params * sizeof(float);
  cl_status st = CL_OK;
  if (opt && s->idx[mr][0] >= 0) st = restore_state(m, s, mr, &om, tmp);
  if (st == CL_OK && opt && s->opt.kind == CL_OPTIM_ADAM && s->idx[R_EXP_AVG_SQ][0] >= 0)
    st = restore_state(m, s, R_EXP_AVG_SQ, &ov, tmp);
  char name[96];
  for (int i = 0; i < s->n_params_tensors && st == CL_OK; i++) {
    const st_tensor *t = &s->t[s->idx[R_PARAM][i]];
    size_t n = cl_tensor_numel(m, i);
    for (size_t e = 0; e < n; e++) tmp[e] = read_elem(s->data + t->begin, t->dtype, e);
    tensor_name(name, sizeof name, R_PARAM, i, c->bias);
    st = cl_model_set_param(m, name, tmp, n);
  }
  free(tmp);
  if (st != CL_OK) {
    cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, om, om ? pb : 0);
    cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, ov, ov ? pb : 0);
    return st;
  }
  if (opt) {
    cl_model_optimizer_reset(m);
    m->opt_kind = s->opt.kind;
    m->opt_m = om;
    m->opt_v = ov;
    m->opt_steps = s->opt_steps;
    /* The float16 loss scaler resumes where it was: with a fresh scale the
     * first steps after loading would differ from an uninterrupted run. */
    if (s->has_scale && c->dtype == CL_F16) m->scaler = s->scale;
  }
  return CL_OK;
}

cl_status cl_saved_create_model(const cl_saved *s, const cl_config *runtime, int with_optimizer,
                                cl_model **out, char *err, size_t errlen) {
  *out = NULL;
  cl_config cfg = s->cfg;
  if (runtime) {
    cfg.device = runtime->device;
    cfg.dtype = runtime->dtype;
    cfg.n_threads = runtime->n_threads;
    cfg.memory_limit = runtime->memory_limit;
  }
  cl_model *m = NULL;
  CL_TRY(cl_model_create(&cfg, &m, err, errlen));
  cl_status st = cl_saved_load_into(s, m, with_optimizer);
  if (st != CL_OK) {
    failf(err, errlen, st, "%s", cl_model_error(m));
    cl_model_free(m);
    return st;
  }
  *out = m;
  return CL_OK;
}

cl_status cl_model_load(const char *path, const cl_config *runtime, int with_optimizer,
                        cl_model **out, char *err, size_t errlen) {
  *out = NULL;
  cl_saved *s = NULL;
  CL_TRY(cl_saved_read(path, &s, err, errlen));
  cl_status st = cl_saved_create_model(s, runtime, with_optimizer, out, err, errlen);
  cl_saved_free(s);
  return st;
}

/* ---- writing ---------------------------------------------------------- */

typedef struct sbuf {
  char *p;
  size_t n, cap;
  int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t len) {
  if (b->oom) return;
  if (b->n + len + 1 > b->cap) {
    size_t nc = b->cap ? b->cap : 1024;
    while (nc < b->n + len + 1) {
      if (nc > SIZE_MAX / 2) {
        b->oom = 1;
        return;
      }
      nc *= 2;
    }
    char *q = realloc(b->p, nc);
    if (!q) {
      b->oom = 1;
      return;
    }
    b->p = q;
    b->cap = nc;
  }
  memcpy(b->p + b->n, s, len);
  b->n += len;
  b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(sbuf *b, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0 || (size_t)k >= sizeof tmp) b->oom = 1;
  else sb_put(b, tmp, (size_t)k);
}

/* A JSON string: quotes, backslashes and control characters escaped; the
 * caller has checked the text is UTF-8. */
static void sb_json(sbuf *b, const char *s) {
  sb_str(b, "\"");
  for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
    if (*q == '"') sb_str(b, "\\\"");
    else if (*q == '\\') sb_str(b, "\\\\");
    else if (*q < 0x20) sb_printf(b, "\\u%04x", *q);
    else sb_put(b, (const char *)q, 1);
  }
  sb_str(b, "\"");
}

/* A double that reads back exactly, in JSON's number grammar. */
static void sb_double(sbuf *b, double d) {
  char t[64];
  snprintf(t, sizeof t, "%.17g", d);
  for (char *q = t; *q; q++)
    if (*q == ',') *q = '.'; /* a locale's decimal comma */
  sb_str(b, t);
}

static void sb_meta(sbuf *b, int *first, const char *key, const char *value) {
  sb_str(b, *first ? "" : ",");
  *first = 0;
  sb_json(b, key);
  sb_str(b, ":");
  sb_json(b, value);
}

static void sb_meta_num(sbuf *b, int *first, const char *key, double d) {
  sbuf v = {0};
  sb_double(&v, d);
  if (v.oom) b->oom = 1;
  else sb_meta(b, first, key, v.p);
  free(v.p);
}

static void sb_meta_int(sbuf *b, int *first, const char *key, long long x) {
  char t[32];
  snprintf(t, sizeof t, "%lld", x);
  sb_meta(b, first, key, t);
}

static void sb_meta_list(sbuf *b, int *first, const char *key, const int *x, int n) {
  sbuf v = {0};
  sb_str(&v, "[");
  for (int i = 0; i < n; i++) sb_printf(&v, "%s%d", i ? ", " : "", x[i]);
  sb_str(&v, "]");
  if (v.oom) b->oom = 1;
  else sb_meta(b, first, key, v.p);
  free(v.p);
}

static int write_all(int fd, const void *p, size_t n) {
  const char *c = p;
  while (n > 0) {
    ssize_t k = write(fd, c, n > 1u << 30 ? 1u << 30 : n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return 0;
    c += k;
    n -= (size_t)k;
  }
  return 1;
}

/* Float32 little-endian bytes of tmp[0..n) written to fd. */
static int write_f32(int fd, const float *v, size_t n, unsigned char *bytes, size_t chunk) {
  for (size_t i = 0; i < n; i += chunk) {
    size_t k = n - i < chunk ? n - i : chunk;
    for (size_t j = 0; j < k; j++) {
      uint32_t u = cl_f32_bits(v[i + j]);
      bytes[4 * j] = (unsigned char)u;
      bytes[4 * j + 1] = (unsigned char)(u >> 8);
      bytes[4 * j + 2] = (unsigned char)(u >> 16);
      bytes[4 * j + 3] = (unsigned char)(u >> 24);
    }
    if (!write_all(fd, bytes, 4 * k)) return 0;
  }
  return 1;
}

/* Which buffers go into the file: the parameters and, with an optimizer,
 * the states the model holds for it. */
typedef struct save_plan {
  int roles[N_ROLES]; /* role present */
  float *src[N_ROLES];
} save_plan;

static cl_status check_user_meta(cl_model *m, int n, const char *const *keys,
                                 const char *const *values) {
  for (int i = 0; i < n; i++) {
    const char *k = keys[i], *v = values[i];
    if (!k || !v || !k[0])
      return cl_fail(m, CL_E_INVALID, "metadata entry %d has an empty or missing name or value", i + 1);
    if (strncmp(k, META_PREFIX, strlen(META_PREFIX)) == 0 || strcmp(k, "format") == 0)
      return cl_fail(m, CL_E_INVALID,
                     "metadata name \"%.60s\" is reserved (convlstm writes \"format\" and "
                     "\"convlstm.*\" itself)", k);
    if (utf8_check((const unsigned char *)k, strlen(k)) != strlen(k) ||
        utf8_check((const unsigned char *)v, strlen(v)) != strlen(v))
      return cl_fail(m, CL_E_INVALID, "metadata entry \"%.60s\" is not valid UTF-8", k);
    for (int j = 0; j < i; j++)
      if (strcmp(keys[j], k) == 0)
        return cl_fail(m, CL_E_INVALID, "metadata name \"%.60s\" appears twice", k);
  }
  return CL_OK;
}

static cl_status build_header(cl_model *m, const cl_optim *opt, const save_plan *sp, int n_meta,
                              const char *const *keys, const char *const *values, sbuf *h) {
  const cl_config *c = &m->cfg;
  int first = 1;
  sb_str(h, "{\"__metadata__\":{");
  sb_meta(h, &first, "format", "pt");
  sb_meta(h, &first, META_PREFIX "format_version", "1");
  sb_meta_int(h, &first, META_PREFIX "input_dim", c->input_dim);
  sb_meta_list(h, &first, META_PREFIX "hidden_dims", c->hidden_dims, c->n_layers);
  sb_meta_list(h, &first, META_PREFIX "kernel_sizes", c->kernel_sizes, c->n_layers);
  sb_meta(h, &first, META_PREFIX "bias", c->bias ? "true" : "false");
  sb_meta(h, &first, META_PREFIX "dtype", dtype_label(c->dtype));
  sb_meta(h, &first, META_PREFIX "device", c->device == CL_DEVICE_CUDA ? "cuda" : "cpu");
  if (opt) {
    sb_meta(h, &first, META_PREFIX "optimizer", opt->kind == CL_OPTIM_ADAM ? "adam" : "sgd");
    sb_meta_num(h, &first, META_PREFIX "optimizer.lr", opt->lr);
    sb_meta_num(h, &first, META_PREFIX "optimizer.weight_decay", opt->weight_decay);
    if (opt->kind == CL_OPTIM_ADAM) {
      sb_meta_num(h, &first, META_PREFIX "optimizer.beta1", opt->beta1);
      sb_meta_num(h, &first, META_PREFIX "optimizer.beta2", opt->beta2);
      sb_meta_num(h, &first, META_PREFIX "optimizer.eps", opt->eps);
    } else {
      sb_meta_num(h, &first, META_PREFIX "optimizer.momentum", opt->momentum);
    }
    sb_meta_int(h, &first, META_PREFIX "optimizer.steps",
                m->opt_kind == opt->kind ? (long long)m->opt_steps : 0);
    if (c->dtype == CL_F16) {
      sb_meta_num(h, &first, META_PREFIX "loss_scale.scale", m->scaler.scale);
      sb_meta_int(h, &first, META_PREFIX "loss_scale.growth_interval", m->scaler.growth_interval);
      sb_meta_int(h, &first, META_PREFIX "loss_scale.clean_steps", m->scaler.clean_steps);
      sb_meta_int(h, &first, META_PREFIX "loss_scale.skipped_steps",
                  (long long)m->scaler.skipped_steps);
    }
  }
  for (int i = 0; i < n_meta; i++) sb_meta(h, &first, keys[i], values[i]);
  sb_str(h, "}");
  uint64_t off = 0;
  char name[96];
  for (int r = 0; r < N_ROLES; r++) {
    if (!sp->roles[r]) continue;
    for (int i = 0; i < m->n_tensors; i++) {
      const char *pname;
      int nd, dims[4];
      CL_TRY(cl_model_tensor_info(m, i, &pname, &nd, dims));
      snprintf(name, sizeof name, "%s%s", ROLE_PREFIX[r], pname);
      uint64_t bytes = 4 * (uint64_t)cl_tensor_numel(m, i);
      sb_str(h, ",");
      sb_json(h, name);
      sb_str(h, ":{\"dtype\":\"F32\",\"shape\":[");
      for (int d = 0; d < nd; d++) sb_printf(h, "%s%d", d ? "," : "", dims[d]);
      sb_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)off,
                (unsigned long long)(off + bytes));
      off += bytes;
    }
  }
  sb_str(h, "}");
  while (!h->oom && (8 + h->n) % 8 != 0) sb_str(h, " "); /* data starts 8-aligned */
  if (h->oom) return cl_fail(m, CL_E_OOM, "out of host memory writing the header");
  return CL_OK;
}

/* A fresh file beside path: path.tmp<pid>.<n>, created exclusively. */
static int open_temp(const char *path, char *tmp, size_t len) {
  static unsigned counter = 0;
  for (int attempt = 0; attempt < 100; attempt++) {
    snprintf(tmp, len, "%s.tmp%ld.%u", path, (long)getpid(), counter++);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;
}

static cl_status write_file(cl_model *m, const char *path, const sbuf *h, const save_plan *sp) {
  size_t plen = strlen(path);
  if (plen > 4000) return cl_fail(m, CL_E_INVALID, "the path is too long");
  char tmp[4100];
  int fd = open_temp(path, tmp, sizeof tmp);
  if (fd < 0)
    return cl_fail(m, CL_E_INVALID, "cannot create a file beside '%s': %s", path, strerror(errno));
  size_t maxn = 1;
  for (int i = 0; i < m->n_tensors; i++)
    if (cl_tensor_numel(m, i) > maxn) maxn = cl_tensor_numel(m, i);
  const size_t chunk = 16384;
  float *t = malloc(maxn * sizeof(float));
  unsigned char *bytes = malloc(4 * chunk);
  cl_status st = CL_OK;
  if (!t || !bytes) st = cl_fail(m, CL_E_OOM, "out of host memory writing '%s'", path);
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h->n >> (8 * i));
  int ok = st == CL_OK && write_all(fd, len8, 8) && write_all(fd, h->p, h->n);
  for (int r = 0; r < N_ROLES && ok && st == CL_OK; r++) {
    if (!sp->roles[r]) continue;
    for (int i = 0; i < m->n_tensors && ok && st == CL_OK; i++) {
      size_t n = cl_tensor_numel(m, i);
      if (r == R_PARAM) {
        const char *pname;
        int nd, dims[4];
        st = cl_model_tensor_info(m, i, &pname, &nd, dims);
        if (st == CL_OK) st = cl_model_get_param(m, pname, t, n);
      } else {
        cl_convert_tensor(m, i, sp->src[r], t, 1);
      }
      if (st == CL_OK) ok = write_f32(fd, t, n, bytes, chunk);
    }
  }
  free(t);
  free(bytes);
  if (st == CL_OK && !ok)
    st = cl_fail(m, CL_E_INVALID, "cannot write '%s': %s", tmp, strerror(errno));
  /* The data reaches the disk before the name points at it. */
  if (st == CL_OK && fsync(fd) != 0)
    st = cl_fail(m, CL_E_INVALID, "cannot write '%s': %s", tmp, strerror(errno));
  if (close(fd) != 0 && st == CL_OK)
    st = cl_fail(m, CL_E_INVALID, "cannot write '%s': %s", tmp, strerror(errno));
  if (st == CL_OK && rename(tmp, path) != 0)
    st = cl_fail(m, CL_E_INVALID, "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
  if (st != CL_OK) remove(tmp);
  return st;
}

cl_status cl_model_save(cl_model *m, const char *path, const cl_optim *opt, int n_meta,
                        const char *const *meta_keys, const char *const *meta_values) {
  m->err[0] = '\0';
  if (!path || !path[0]) return cl_fail(m, CL_E_INVALID, "the path is empty");
  if (n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_values)))
    return cl_fail(m, CL_E_INVALID, "metadata names and values are missing");
  CL_TRY(check_user_meta(m, n_meta, meta_keys, meta_values));
  save_plan sp;
  memset(&sp, 0, sizeof sp);
  sp.roles[R_PARAM] = 1;
  if (opt) {
    if (opt->kind != CL_OPTIM_ADAM && opt->kind != CL_OPTIM_SGD)
      return cl_fail(m, CL_E_INVALID, "unknown optimizer kind %d", (int)opt->kind);
    if (!(opt->lr >= 0) || !isfinite(opt->lr) || !(opt->weight_decay >= 0) ||
        !isfinite(opt->weight_decay) ||
        (opt->kind == CL_OPTIM_ADAM &&
         (!(opt->beta1 >= 0 && opt->beta1 < 1) || !(opt->beta2 >= 0 && opt->beta2 < 1) ||
          !(opt->eps > 0) || !isfinite(opt->eps))) ||
        (opt->kind == CL_OPTIM_SGD && (!(opt->momentum >= 0) || !isfinite(opt->momentum))))
      return cl_fail(m, CL_E_INVALID, "the optimizer's hyperparameters are out of range");
    if (m->opt_kind != 0 && m->opt_kind != opt->kind)
      return cl_fail(m, CL_E_INVALID,
                     "the model's optimizer state is %s's, but the optimizer to save is %s: "
                     "save with the optimizer the model was trained with",
                     m->opt_kind == CL_OPTIM_ADAM ? "Adam" : "SGD",
                     opt->kind == CL_OPTIM_ADAM ? "Adam" : "SGD");
    if (m->opt_kind == opt->kind) {
      int mr = opt->kind == CL_OPTIM_ADAM ? R_EXP_AVG : R_MOMENTUM;
      sp.roles[mr] = m->opt_m != NULL;
      sp.src[mr] = m->opt_m;
      sp.roles[R_EXP_AVG_SQ] = opt->kind == CL_OPTIM_ADAM && m->opt_v != NULL;
      sp.src[R_EXP_AVG_SQ] = m->opt_v;
    }
  }
  /* Optimizer state on a device that is not host memory: one download. */
  const struct cl_backend_i *be = m->be->iface;
  float *host[N_ROLES] = {NULL};
  size_t pb = m->n_params * sizeof(float);
  cl_status st = CL_OK;
  for (int r = 1; r < N_ROLES && st == CL_OK; r++) {
    if (!sp.roles[r] || be->host_accessible) continue;
    host[r] = malloc(pb);
    if (!host[r]) st = cl_fail(m, CL_E_OOM, "out of host memory copying the optimizer state");
    else if ((st = be->download(m->be, host[r], sp.src[r], pb)) != CL_OK)
      st = cl_fail_backend(m, st, "download of the optimizer state");
    sp.src[r] = host[r];
  }
  sbuf h = {0};
  if (st == CL_OK) st = build_header(m, opt, &sp, n_meta, meta_keys, meta_values, &h);
  if (st == CL_OK) st = write_file(m, path, &h, &sp);
  free(h.p);
  for (int r = 0; r < N_ROLES; r++) free(host[r]);
  return st;
}
