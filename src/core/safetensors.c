/*
 * core/safetensors.c -- the safetensors container: reading a file's header
 * into a table of tensors and metadata, checking its layout, reading its
 * tensors' elements (safetensors_write.c writes one).
 *
 * The format (as the safetensors project specifies it): 8 bytes, a
 * little-endian unsigned length N; N bytes of UTF-8 JSON, an object mapping
 * each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]} plus
 * an optional "__metadata__" object of string values; then the data, every
 * tensor little-endian and row-major at its offsets, the tensors covering the
 * data exactly.
 *
 * Why a file of its own: the container is a format with its own rules, and
 * files are untrusted input. Everything about one is checked here before any
 * of it is used (header length, UTF-8 and strict JSON through json.c,
 * dtypes, shapes, offsets, sizes and their overflow, duplicate names), and
 * every failure is a message, never a crash. What convlstm keeps in the
 * container (architecture, optimizer, which tensors a model needs) is
 * model_file_read.c's; a libFuzzer target (tests/fuzz/) drives both.
 *
 * It is not a general safetensors library: it reads floating tensors only
 * (other dtypes are known by name and refused by the caller), and writes
 * float32 only. Writing goes to a temporary file in the destination's
 * directory that is renamed over the destination once complete and flushed,
 * so a crash never leaves a half-written file there. The destination is
 * where path's symbolic links lead (the links stay links), and only a
 * regular file, or nothing, may be there: a directory, device, FIFO or
 * socket is refused before anything is written and again just before the
 * rename, which would otherwise replace it.
 */
#define _POSIX_C_SOURCE 200809L /* open(O_EXCL), fsync, getpid, lstat, readlink */

#include "safetensors.h"
#include "internal.h" /* CL_TRY */
#include "../host/half.h" /* float16 / bfloat16 -> float32 for files PyTorch wrote */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <locale.h> /* localeconv: the decimal point strtod reads */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

cl_status cl_st_fail(char *err, size_t errlen, cl_status s, const char *fmt, ...) {
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

const char *cl_st_dtype_name(int dtype) { return DTYPES[dtype].name; }
unsigned cl_st_dtype_size(int dtype) { return DTYPES[dtype].size; }
int cl_st_dtype_is_float(int dt) {
  return dt == DT_F32 || dt == DT_F64 || dt == DT_F16 || dt == DT_BF16;
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

float cl_st_elem(const cl_st_file *f, const cl_st_tensor *t, size_t i) {
  return read_elem(f->data + t->begin, t->dtype, i);
}

void cl_st_read_f32(const cl_st_file *f, const cl_st_tensor *t, float *dst, size_t n) {
  for (size_t e = 0; e < n; e++) dst[e] = read_elem(f->data + t->begin, t->dtype, e);
}

void cl_st_free(cl_st_file *f) {
  if (f->t)
    for (int i = 0; i < f->nt; i++) free(f->t[i].name);
  if (f->meta)
    for (int i = 0; i < f->nmeta; i++) {
      free(f->meta[i].key);
      free(f->meta[i].value);
    }
  free(f->t);
  free(f->meta);
  free(f->by_name);
  free(f->bytes);
}

/* ---- the header ------------------------------------------------------- */

static cl_status grow(void **arr, int *cap, int n, size_t elem, char *err, size_t errlen) {
  if (n < *cap) return CL_OK;
  if (*cap > INT32_MAX / 2)
    return cl_st_fail(err, errlen, CL_E_INVALID, "the header has too many entries");
  int nc = *cap ? *cap * 2 : 16;
  void *a = realloc(*arr, (size_t)nc * elem);
  if (!a) return cl_st_fail(err, errlen, CL_E_OOM, "out of host memory reading the header");
  *arr = a;
  *cap = nc;
  return CL_OK;
}

/* {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, keys in any
 * order, each exactly once, no others. */
static cl_status jtensor(cl_json *p, cl_st_tensor *t) {
  CL_TRY(cl_json_object_open(p, "a tensor's entry must be an object"));
  int seen_dtype = 0, seen_shape = 0, seen_off = 0;
  while (!cl_json_object_end(p)) {
    char *key = NULL;
    size_t at = p->i;
    CL_TRY(cl_json_key(p, &key));
    int which = strcmp(key, "dtype") == 0 ? 0 : strcmp(key, "shape") == 0 ? 1
              : strcmp(key, "data_offsets") == 0 ? 2 : -1;
    free(key);
    int *seen = which == 0 ? &seen_dtype : which == 1 ? &seen_shape : &seen_off;
    if (which < 0 || *seen) {
      p->i = at;
      return cl_json_fail(p, which < 0 ? "a tensor's entry may only have dtype, shape and data_offsets"
                                       : "a key appears twice in a tensor's entry");
    }
    *seen = 1;
    if (which == 0) {
      char *dt = NULL;
      size_t dat = p->i;
      CL_TRY(cl_json_string(p, &dt));
      t->dtype = dtype_index(dt);
      if (t->dtype < 0) {
        cl_status r = cl_st_fail(p->err, p->errlen, CL_E_INVALID,
                                 "header byte %zu: unknown dtype \"%.40s\"", dat, dt);
        free(dt);
        return r;
      }
      free(dt);
    } else if (which == 1) {
      CL_TRY(cl_json_uint_array(p, t->shape, CL_ST_MAX_RANK, &t->ndim,
                                "shape must be an array of integers",
                                "a shape has more than 8 dimensions"));
    } else {
      uint64_t off[2];
      int n;
      CL_TRY(cl_json_uint_array(p, off, 2, &n, "data_offsets must be an array of two integers",
                                "data_offsets must have exactly 2 entries"));
      if (n != 2) return cl_json_fail(p, "data_offsets must have exactly 2 entries");
      t->begin = off[0];
      t->end = off[1];
    }
    CL_TRY(cl_json_member_end(p, "expected ',' or '}' in a tensor's entry"));
  }
  if (!seen_dtype || !seen_shape || !seen_off)
    return cl_st_fail(p->err, p->errlen, CL_E_INVALID, "tensor \"%.80s\" lacks %s", t->name,
                      !seen_dtype ? "its dtype" : !seen_shape ? "its shape" : "its data_offsets");
  return CL_OK;
}

static cl_status jmetadata(cl_json *p, cl_st_file *f, int *cap) {
  CL_TRY(cl_json_object_open(p, "__metadata__ must be an object"));
  while (!cl_json_object_end(p)) {
    CL_TRY(grow((void **)&f->meta, cap, f->nmeta, sizeof *f->meta, p->err, p->errlen));
    cl_st_meta *m = &f->meta[f->nmeta];
    m->key = m->value = NULL;
    f->nmeta++;
    CL_TRY(cl_json_key(p, &m->key));
    if (!cl_json_peek(p, '"')) return cl_json_fail(p, "__metadata__ values must be strings");
    CL_TRY(cl_json_string(p, &m->value));
    CL_TRY(cl_json_member_end(p, "expected ',' or '}' in __metadata__"));
  }
  return CL_OK;
}

static cl_status parse_header(cl_st_file *f, const unsigned char *h, size_t n, char *err,
                              size_t errlen) {
  cl_json p;
  CL_TRY(cl_json_open(&p, h, n, "header", err, errlen));
  int tcap = 0, mcap = 0, seen_meta = 0;
  cl_json_ws(&p);
  CL_TRY(cl_json_object_open(&p, "the header must be a JSON object"));
  while (!cl_json_object_end(&p)) {
    char *key = NULL;
    CL_TRY(cl_json_key(&p, &key));
    if (strcmp(key, "__metadata__") == 0) {
      free(key);
      if (seen_meta) return cl_json_fail(&p, "__metadata__ appears twice");
      seen_meta = 1;
      CL_TRY(jmetadata(&p, f, &mcap));
    } else {
      cl_status st = grow((void **)&f->t, &tcap, f->nt, sizeof *f->t, err, errlen);
      if (st != CL_OK) {
        free(key);
        return st;
      }
      cl_st_tensor *t = &f->t[f->nt++];
      memset(t, 0, sizeof *t);
      t->name = key;
      CL_TRY(jtensor(&p, t));
    }
    CL_TRY(cl_json_member_end(&p, "expected ',' or '}' after an entry of the header"));
  }
  /* writers pad the header with spaces to align the data */
  return cl_json_end(&p, "unexpected bytes after the header's JSON object");
}

/* ---- layout checks ---------------------------------------------------- */

/* Sorting works on pointers to tensors, so no comparator needs a context. */
static int cmp_name(const void *a, const void *b) {
  return strcmp((*(const cl_st_tensor *const *)a)->name, (*(const cl_st_tensor *const *)b)->name);
}

static int cmp_offset(const void *a, const void *b) {
  const cl_st_tensor *x = *(const cl_st_tensor *const *)a, *y = *(const cl_st_tensor *const *)b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return 0;
}

static int cmp_meta(const void *a, const void *b) {
  return strcmp(((const cl_st_meta *)a)->key, ((const cl_st_meta *)b)->key);
}

/* Sizes agree with shapes and dtypes, names and keys are unique, and the
 * tensors tile the data: in offset order, each begins where the previous
 * ended, the first at 0 and the last at the data's end. */
static cl_status check_layout(cl_st_file *s, char *err, size_t errlen) {
  for (int i = 0; i < s->nt; i++) {
    cl_st_tensor *t = &s->t[i];
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] != 0 && numel > CL_ST_MAX_INT / t->shape[d])
        return cl_st_fail(err, errlen, CL_E_INVALID, "tensor \"%.80s\": its shape's size overflows",
                          t->name);
      numel *= t->shape[d];
    }
    uint64_t bytes = numel * DTYPES[t->dtype].size; /* < 2^56: no overflow */
    if (t->end < t->begin)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "tensor \"%.80s\": data_offsets [%llu, %llu] end before they begin", t->name,
                        (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end - t->begin != bytes)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "tensor \"%.80s\": data_offsets [%llu, %llu] hold %llu bytes, but %s of "
                        "%llu elements needs %llu",
                        t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
                        (unsigned long long)(t->end - t->begin), DTYPES[t->dtype].name,
                        (unsigned long long)numel, (unsigned long long)bytes);
  }
  cl_st_tensor **order = malloc((size_t)(s->nt > 0 ? s->nt : 1) * sizeof *order);
  s->by_name = malloc((size_t)(s->nt > 0 ? s->nt : 1) * sizeof *s->by_name);
  if (!order || !s->by_name) {
    free(order);
    return cl_st_fail(err, errlen, CL_E_OOM, "out of host memory reading the header");
  }
  for (int i = 0; i < s->nt; i++) order[i] = s->by_name[i] = &s->t[i];
  qsort(s->by_name, (size_t)s->nt, sizeof *s->by_name, cmp_name);
  qsort(order, (size_t)s->nt, sizeof *order, cmp_offset);
  cl_status st = CL_OK;
  for (int i = 1; i < s->nt && st == CL_OK; i++)
    if (strcmp(s->by_name[i]->name, s->by_name[i - 1]->name) == 0)
      st = cl_st_fail(err, errlen, CL_E_INVALID, "tensor \"%.80s\" appears twice",
                      s->by_name[i]->name);
  uint64_t at = 0;
  for (int i = 0; i < s->nt && st == CL_OK; i++) {
    const cl_st_tensor *t = order[i];
    if (t->begin != at)
      st = cl_st_fail(err, errlen, CL_E_INVALID,
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
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "the tensors cover %llu bytes of data but the file holds %zu after the header",
                      (unsigned long long)at, s->data_len);
  if (s->nmeta > 1) {
    qsort(s->meta, (size_t)s->nmeta, sizeof *s->meta, cmp_meta);
    for (int i = 1; i < s->nmeta; i++)
      if (strcmp(s->meta[i].key, s->meta[i - 1].key) == 0)
        return cl_st_fail(err, errlen, CL_E_INVALID, "__metadata__ key \"%.80s\" appears twice",
                          s->meta[i].key);
  }
  return CL_OK;
}

/* A header length n is possible in a file of size bytes. */
static int header_len_ok(uint64_t n, uint64_t size) {
  return !(n < 2 || n > CL_ST_MAX_HEADER || n > size - 8);
}

cl_status cl_st_check_length(const unsigned char *bytes, size_t len, char *err, size_t errlen) {
  if (len < 8)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "%zu bytes are too few for a safetensors file (it starts with an 8-byte header "
                      "length)", len);
  uint64_t n = le_u64(bytes);
  if (!header_len_ok(n, len))
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "the header length %llu is impossible for a file of %zu bytes (it must lie "
                      "between 2 and %s)",
                      (unsigned long long)n, len, n > CL_ST_MAX_HEADER ? "100 MB" : "the file size - 8");
  return CL_OK;
}

cl_status cl_st_parse(cl_st_file *f, unsigned char *bytes, size_t len, char *err, size_t errlen) {
  uint64_t n = le_u64(bytes);
  f->bytes = bytes;
  f->len = len;
  f->data = bytes + 8 + n;
  f->data_len = len - 8 - (size_t)n;
  CL_TRY(parse_header(f, bytes + 8, (size_t)n, err, errlen));
  return check_layout(f, err, errlen);
}

int cl_st_find_tensor(const cl_st_file *s, const char *name) {
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

const char *cl_st_find_meta(const cl_st_file *s, const char *key) {
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

/* path opened for reading only if it is a regular file. A FIFO with no
 * writer (or a device) would block a plain open() for ever, deaf to
 * interrupts, so the file is opened without blocking, refused unless
 * fstat says regular (what was opened, not a name that could change in
 * between), and only then put back to blocking reads. NULL with err set. */
static FILE *open_regular(const char *path, char *err, size_t errlen) {
  int fd = open(path, O_RDONLY | O_NONBLOCK);
  if (fd < 0) {
    cl_st_fail(err, errlen, CL_E_INVALID, "cannot open '%s': %s", path, strerror(errno));
    return NULL;
  }
  struct stat sb;
  const char *what = NULL;
  if (fstat(fd, &sb) != 0) what = strerror(errno);
  else if (S_ISDIR(sb.st_mode)) what = "it is a directory";
  else if (S_ISFIFO(sb.st_mode)) what = "it is a FIFO (named pipe)";
  else if (S_ISSOCK(sb.st_mode)) what = "it is a socket";
  else if (S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode)) what = "it is a device";
  else if (!S_ISREG(sb.st_mode)) what = "it is not a regular file";
  int flags = what ? 0 : fcntl(fd, F_GETFL);
  if (!what && (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)) what = strerror(errno);
  FILE *f = what ? NULL : fdopen(fd, "rb");
  if (!f) {
    if (!what) what = strerror(errno);
    close(fd);
    cl_st_fail(err, errlen, CL_E_INVALID, "cannot read '%s': %s", path, what);
  }
  return f;
}

cl_status cl_st_read_file(const char *path, unsigned char **bytes, size_t *len, char *err,
                          size_t errlen) {
  *bytes = NULL;
  *len = 0;
  FILE *f = open_regular(path, err, errlen);
  if (!f) return CL_E_INVALID;
  long size = -1;
  if (fseek(f, 0, SEEK_END) == 0) size = ftell(f);
  if (size < 0 || fseek(f, 0, SEEK_SET) != 0) {
    fclose(f);
    return cl_st_fail(err, errlen, CL_E_INVALID, "cannot read '%s': not a regular file", path);
  }
  /* Check the declared header length before reading a large file whole. */
  unsigned char head[8];
  if (size >= 8) {
    if (fread(head, 1, 8, f) != 8 || fseek(f, 0, SEEK_SET) != 0) {
      fclose(f);
      return cl_st_fail(err, errlen, CL_E_INVALID, "cannot read '%s'", path);
    }
    uint64_t n = le_u64(head);
    if (!header_len_ok(n, (uint64_t)size)) {
      fclose(f);
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "'%s' is not a safetensors file: its first 8 bytes give a header length of "
                        "%llu, impossible for a file of %ld bytes",
                        path, (unsigned long long)n, size);
    }
  }
  if ((unsigned long)size > SIZE_MAX - 1) {
    fclose(f);
    return cl_st_fail(err, errlen, CL_E_INVALID, "'%s' is too large to read", path);
  }
  unsigned char *buf = malloc((size_t)size > 0 ? (size_t)size : 1);
  if (!buf) {
    fclose(f);
    return cl_st_fail(err, errlen, CL_E_OOM, "out of host memory reading '%s' (%ld bytes)", path,
                      size);
  }
  size_t got = fread(buf, 1, (size_t)size, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != (size_t)size || extra) {
    free(buf);
    return cl_st_fail(err, errlen, CL_E_INVALID, "'%s' changed size while it was read", path);
  }
  *bytes = buf;
  *len = (size_t)size;
  return CL_OK;
}

/* ---- metadata values -------------------------------------------------- */

int cl_st_meta_int(const char *v, long long lo, long long hi, long long *out) {
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

/* strtod of a JSON number v whatever LC_NUMERIC says: strtod reads the
 * locale's decimal point (a comma in many), so the '.' the writer always
 * writes is given to it as that. strtod rounds correctly, so the value is
 * the one the writer's "%.17g" printed, exactly. 0 when not finite. */
static int c_locale_strtod(const char *v, double *out) {
  const char *dp = localeconv()->decimal_point;
  size_t dpn = dp && *dp ? strlen(dp) : 1;
  size_t n = strlen(v);
  char small[128];
  char *buf = n * dpn < sizeof small ? small : malloc(n * dpn + 1);
  if (!buf) return 0;
  size_t k = 0;
  for (const char *q = v; *q; q++) {
    if (*q == '.' && dp && *dp) {
      memcpy(buf + k, dp, dpn);
      k += dpn;
    } else {
      buf[k++] = *q;
    }
  }
  buf[k] = '\0';
  char *end = NULL;
  double d = strtod(buf, &end);
  int ok = end != NULL && *end == '\0' && isfinite(d);
  if (buf != small) free(buf);
  if (ok) *out = d;
  return ok;
}

/* JSON's number grammar, so that strtod's hex forms and infinities never
 * pass, read whatever the locale's decimal point. */
int cl_st_meta_double(const char *v, double *out) {
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
  return c_locale_strtod(v, out);
}

int cl_st_meta_double_list(const char *v, double *out, int max) {
  char item[64];
  const char *q = v;
  int n = 0;
  if (*q++ != '[') return -1;
  if (*q == ']') return q[1] == '\0' ? 0 : -1;
  for (;;) { /* items as cl_st_header_meta_nums writes them: ", " apart */
    size_t k = strcspn(q, ",]");
    if (n >= max || k == 0 || k >= sizeof item) return -1;
    memcpy(item, q, k);
    item[k] = '\0';
    if (!cl_st_meta_double(item, &out[n++])) return -1;
    q += k;
    if (*q == ']') return q[1] == '\0' ? n : -1;
    if (*++q != ' ') return -1;
    q++;
  }
}

int cl_st_meta_int_list(const char *v, int *out, int max) {
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
