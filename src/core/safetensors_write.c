/*
 * core/safetensors_write.c -- writing a safetensors container: the JSON
 * header built in a buffer (its metadata and float32 tensor entries), and
 * the file itself, written to a temporary file in the destination's
 * directory, flushed, and renamed over the destination once complete, so a
 * crash never leaves a half-written file there. The destination is where
 * path's symbolic links lead (the links stay links), and only a regular
 * file, or nothing, may be there: a directory, device, FIFO or socket is
 * refused before anything is written and again just before the rename,
 * which would otherwise replace it. The format is described in
 * safetensors.c, which reads it.
 */
#define _POSIX_C_SOURCE 200809L /* open(O_EXCL), fsync, getpid, lstat, readlink */

#include "safetensors.h"
#include "internal.h" /* CL_TRY */
#include "../host/half.h" /* cl_f32_bits: float32 bytes as written */

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- writing: the header ---------------------------------------------- */

void cl_st_buf_put(cl_st_buf *b, const char *s, size_t len) {
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

void cl_st_buf_str(cl_st_buf *b, const char *s) { cl_st_buf_put(b, s, strlen(s)); }

void cl_st_buf_printf(cl_st_buf *b, const char *fmt, ...) {
  char tmp[256];
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (k < 0 || (size_t)k >= sizeof tmp) b->oom = 1;
  else cl_st_buf_put(b, tmp, (size_t)k);
}

/* A JSON string: quotes, backslashes and control characters escaped; the
 * caller has checked the text is UTF-8. */
static void buf_json(cl_st_buf *b, const char *s) {
  cl_st_buf_str(b, "\"");
  for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
    if (*q == '"') cl_st_buf_str(b, "\\\"");
    else if (*q == '\\') cl_st_buf_str(b, "\\\\");
    else if (*q < 0x20) cl_st_buf_printf(b, "\\u%04x", *q);
    else cl_st_buf_put(b, (const char *)q, 1);
  }
  cl_st_buf_str(b, "\"");
}

/* A double that reads back exactly, in JSON's number grammar. */
static void buf_double(cl_st_buf *b, double d) {
  char t[64];
  snprintf(t, sizeof t, "%.17g", d);
  for (char *q = t; *q; q++)
    if (*q == ',') *q = '.'; /* a locale's decimal comma */
  cl_st_buf_str(b, t);
}

void cl_st_header_begin(cl_st_buf *h) { cl_st_buf_str(h, "{\"__metadata__\":{"); }

void cl_st_header_meta(cl_st_buf *b, int *first, const char *key, const char *value) {
  cl_st_buf_str(b, *first ? "" : ",");
  *first = 0;
  buf_json(b, key);
  cl_st_buf_str(b, ":");
  buf_json(b, value);
}

void cl_st_header_meta_num(cl_st_buf *b, int *first, const char *key, double d) {
  cl_st_buf v = {0};
  buf_double(&v, d);
  if (v.oom) b->oom = 1;
  else cl_st_header_meta(b, first, key, v.p);
  free(v.p);
}

void cl_st_header_meta_int(cl_st_buf *b, int *first, const char *key, long long x) {
  char t[32];
  snprintf(t, sizeof t, "%lld", x);
  cl_st_header_meta(b, first, key, t);
}

void cl_st_header_meta_list(cl_st_buf *b, int *first, const char *key, const int *x, int n) {
  cl_st_buf v = {0};
  cl_st_buf_str(&v, "[");
  for (int i = 0; i < n; i++) cl_st_buf_printf(&v, "%s%d", i ? ", " : "", x[i]);
  cl_st_buf_str(&v, "]");
  if (v.oom) b->oom = 1;
  else cl_st_header_meta(b, first, key, v.p);
  free(v.p);
}

void cl_st_header_meta_nums(cl_st_buf *b, int *first, const char *key, const double *x, int n) {
  cl_st_buf v = {0};
  cl_st_buf_str(&v, "[");
  for (int i = 0; i < n; i++) {
    if (i) cl_st_buf_str(&v, ", ");
    buf_double(&v, x[i]);
  }
  cl_st_buf_str(&v, "]");
  if (v.oom) b->oom = 1;
  else cl_st_header_meta(b, first, key, v.p);
  free(v.p);
}

void cl_st_header_end_meta(cl_st_buf *h) { cl_st_buf_str(h, "}"); }

void cl_st_header_tensor_f32(cl_st_buf *h, const char *name, int nd, const int *dims,
                             uint64_t begin, uint64_t end) {
  cl_st_buf_str(h, ",");
  buf_json(h, name);
  cl_st_buf_str(h, ":{\"dtype\":\"F32\",\"shape\":[");
  for (int d = 0; d < nd; d++) cl_st_buf_printf(h, "%s%d", d ? "," : "", dims[d]);
  cl_st_buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)begin,
                   (unsigned long long)end);
}

void cl_st_header_end(cl_st_buf *h) {
  cl_st_buf_str(h, "}");
  while (!h->oom && (8 + h->n) % 8 != 0) cl_st_buf_str(h, " "); /* data starts 8-aligned */
}

/* ---- writing: where the file goes ------------------------------------ */

#define MAX_LINKS 40 /* as Linux's ELOOP bound */

/* NULL for a regular file, else what stands there. */
static const char *not_regular(mode_t mode) {
  if (S_ISREG(mode)) return NULL;
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "an unknown kind of file";
}

static cl_status refuse(char *err, size_t errlen, const char *path, const char *target,
                        const char *what) {
  if (strcmp(path, target) == 0)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "cannot save to '%s': it is %s, not a regular file", path, what);
  return cl_st_fail(err, errlen, CL_E_INVALID,
                    "cannot save to '%s': it links to '%s', %s, not a regular file", path,
                    target, what);
}

/* The length of p's directory part: up to its last '/' (kept when it is
 * the root's), 0 when p has none (the working directory). */
static size_t dir_len(const char *p) {
  const char *slash = strrchr(p, '/');
  if (!slash) return 0;
  return slash == p ? 1 : (size_t)(slash - p);
}

cl_status cl_st_save_target(const char *path, char *target, size_t len, char *err,
                            size_t errlen) {
  char cur[CL_ST_MAX_TARGET + 1], link[CL_ST_MAX_TARGET + 1];
  size_t n = strlen(path);
  if (n > CL_ST_MAX_TARGET || n >= len)
    return cl_st_fail(err, errlen, CL_E_INVALID, "the path is too long");
  memcpy(cur, path, n + 1);
  for (int hops = 0;; hops++) {
    struct stat sb;
    /* Nothing there (or no way there): a new file, and creating the
     * temporary file beside it reports why not. */
    if (lstat(cur, &sb) != 0) break;
    if (!S_ISLNK(sb.st_mode)) {
      const char *what = not_regular(sb.st_mode);
      if (what) return refuse(err, errlen, path, cur, what);
      break;
    }
    if (hops == MAX_LINKS)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "cannot save to '%s': more than %d symbolic links", path, MAX_LINKS);
    ssize_t k = readlink(cur, link, sizeof link);
    if (k < 0)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "cannot save to '%s': cannot read the link '%s': %s", path, cur,
                        strerror(errno));
    if ((size_t)k >= sizeof link)
      return cl_st_fail(err, errlen, CL_E_INVALID, "the path is too long");
    link[k] = '\0';
    /* A relative link is read from the link's own directory. */
    size_t d = link[0] == '/' ? 0 : dir_len(cur);
    int slash = d > 0 && cur[d - 1] != '/';
    if (d + slash + (size_t)k > CL_ST_MAX_TARGET || d + slash + (size_t)k >= len)
      return cl_st_fail(err, errlen, CL_E_INVALID, "the path is too long");
    if (slash) cur[d] = '/';
    memcpy(cur + d + slash, link, (size_t)k + 1);
  }
  memcpy(target, cur, strlen(cur) + 1);
  return CL_OK;
}

/* Flushes the directory entry the rename made: the new name survives a
 * crash. A file system that cannot sync a directory (EINVAL) is let be. */
static int sync_dir(const char *target) {
  char d[CL_ST_MAX_TARGET + 1];
  size_t n = dir_len(target);
  if (n == 0) d[n++] = '.';
  else memcpy(d, target, n);
  d[n] = '\0';
  int fd = open(d, O_RDONLY);
  if (fd < 0) return 1; /* a directory that cannot be read (no permission) cannot be synced */
  int ok = fsync(fd) == 0 || errno == EINVAL;
  int e = errno;
  close(fd);
  errno = e;
  return ok;
}

/* ---- writing: the file ------------------------------------------------ */

#define WRITE_CHUNK 16384 /* floats converted per write */

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

/* The file a save replaces keeps its owner's intent: the temporary file
 * that is renamed over it gets its owner and group (where this process may
 * give them: root, or a group it is in) and then its permission bits (after
 * the owner, as chown clears set-id bits), so a 0600 checkpoint stays 0600.
 * A new file gets the umask's mode, as any file the process creates. */
static void keep_owner_and_mode(int fd, const char *target) {
  struct stat sb;
  if (stat(target, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
  if (sb.st_uid != geteuid() || sb.st_gid != getegid()) {
    if (fchown(fd, sb.st_uid, sb.st_gid) != 0 && fchown(fd, (uid_t)-1, sb.st_gid) != 0) {
      /* not allowed to give it: the file is this process's, the mode kept below */
    }
  }
  if (fchmod(fd, sb.st_mode & 07777) != 0) {
    /* fchmod on a file this process just created fails only on exotic file
     * systems; the umask's mode is left then */
  }
}

cl_status cl_st_write_open(cl_st_writer *w, const char *path, char *err, size_t errlen) {
  w->fd = -1;
  w->ok = 0;
  w->chunk = NULL;
  CL_TRY(cl_st_save_target(path, w->target, sizeof w->target, err, errlen));
  w->fd = open_temp(w->target, w->tmp, sizeof w->tmp);
  if (w->fd < 0)
    return cl_st_fail(err, errlen, CL_E_INVALID, "cannot create a file beside '%s': %s", path,
                      strerror(errno));
  keep_owner_and_mode(w->fd, w->target);
  w->chunk = malloc(4 * WRITE_CHUNK);
  if (!w->chunk) {
    cl_status st = cl_st_fail(err, errlen, CL_E_OOM, "out of host memory writing '%s'", path);
    return cl_st_write_close(w, path, st, err, errlen);
  }
  w->ok = 1;
  return CL_OK;
}

int cl_st_write_header(cl_st_writer *w, const cl_st_buf *h) {
  unsigned char len8[8];
  for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h->n >> (8 * i));
  w->ok = w->ok && write_all(w->fd, len8, 8) && write_all(w->fd, h->p, h->n);
  return w->ok;
}

/* Float32 little-endian bytes of v[0..n). */
int cl_st_write_f32(cl_st_writer *w, const float *v, size_t n) {
  for (size_t i = 0; i < n && w->ok; i += WRITE_CHUNK) {
    size_t k = n - i < WRITE_CHUNK ? n - i : WRITE_CHUNK;
    unsigned char *bytes = w->chunk;
    for (size_t j = 0; j < k; j++) {
      uint32_t u = cl_f32_bits(v[i + j]);
      bytes[4 * j] = (unsigned char)u;
      bytes[4 * j + 1] = (unsigned char)(u >> 8);
      bytes[4 * j + 2] = (unsigned char)(u >> 16);
      bytes[4 * j + 3] = (unsigned char)(u >> 24);
    }
    w->ok = write_all(w->fd, bytes, 4 * k);
  }
  return w->ok;
}

cl_status cl_st_write_close(cl_st_writer *w, const char *path, cl_status st, char *err,
                            size_t errlen) {
  free(w->chunk);
  w->chunk = NULL;
  if (st == CL_OK && !w->ok)
    st = cl_st_fail(err, errlen, CL_E_INVALID, "cannot write '%s': %s", w->tmp, strerror(errno));
  /* The data reaches the disk before the name points at it. */
  if (st == CL_OK && fsync(w->fd) != 0)
    st = cl_st_fail(err, errlen, CL_E_INVALID, "cannot write '%s': %s", w->tmp, strerror(errno));
  if (close(w->fd) != 0 && st == CL_OK)
    st = cl_st_fail(err, errlen, CL_E_INVALID, "cannot write '%s': %s", w->tmp, strerror(errno));
  w->fd = -1;
  /* Again just before the rename: what stands at the target now must still
   * be a regular file or nothing (not even a link: it was resolved). */
  struct stat sb;
  const char *what = NULL;
  if (st == CL_OK && lstat(w->target, &sb) == 0 && (what = not_regular(sb.st_mode)) != NULL)
    st = refuse(err, errlen, path, w->target, what);
  if (st == CL_OK && rename(w->tmp, w->target) != 0)
    st = cl_st_fail(err, errlen, CL_E_INVALID, "cannot rename '%s' to '%s': %s", w->tmp,
                    w->target, strerror(errno));
  if (st != CL_OK) {
    remove(w->tmp);
    return st;
  }
  if (!sync_dir(w->target))
    st = cl_st_fail(err, errlen, CL_E_INVALID, "saved '%s', but cannot flush its directory: %s",
                    w->target, strerror(errno));
  return st;
}
