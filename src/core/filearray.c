/*
 * core/filearray.c -- file-backed frame series (inst/include/convlstm_file.h
 * has the format): opened and memory-mapped, checked against its header
 * (size always, checksum on request), windows of frames decoded from it
 * into a caller's double buffer; and its writer, which writes frame chunks
 * to a temporary name and renames it once the header holds the checksum.
 *
 * Why the pages are given back after each read (madvise MADV_DONTNEED): a
 * mapped page that was read counts in the process's resident set until the
 * kernel needs it, so an epoch over a file larger than memory would show a
 * high-water mark as large as the file. Given back, what is resident is the
 * windows being decoded, whatever the file's size; the page cache still
 * holds them, so a second read is a minor fault, not a disk read.
 *
 * Reading ahead (cl_fa_async_*): a batch's windows read on a thread of
 * their own while the caller's step runs, by the same cl_fa_read_windows,
 * so the values are the same bits; one thread per batch (started and
 * joined around the step: a thread's start costs microseconds, a step
 * milliseconds), so there is no queue, no lock and nothing to stop.
 *
 * Plain C11 and POSIX: no R header, no model. Not here: which windows an
 * epoch reads (R/source_file.R), the staging buffers (the caller's: R
 * arrays made on R's thread, src/r_filearray.c).
 */
#define _DEFAULT_SOURCE /* madvise, MADV_DONTNEED on glibc */
#define _POSIX_C_SOURCE 200809L

#include "convlstm_file.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../host/half.h"

static const char MAGIC[8] = {'C', 'L', 'F', 'R', 'A', 'M', 'E', '1'};
#define ORDER_MARK 0x01020304u
#define CHUNK_BYTES ((size_t)64 << 20) /* verify and give back 64 MiB at a time */

struct cl_fa {
  char *path;
  int fd;
  unsigned char *map; /* the whole file, read-only */
  size_t map_bytes;
  cl_fa_info info;
  size_t frame_values; /* channels * height * width */
  size_t value_bytes;
  struct stat opened; /* size and time of modification when opened */
  struct cl_fa_async *busy; /* the read ahead in flight, joined before the file closes */
};

struct cl_fa_writer {
  char *path, *tmp;
  FILE *f;
  cl_fa_info info;
  size_t frame_values, value_bytes;
  int64_t frames_written;
  unsigned char *buf; /* one frame, encoded */
  unsigned char pend[8]; /* bytes not yet in the checksum: it runs over whole */
  size_t npend;          /* 8-byte words of the file's data, however it is cut */
};

static size_t dtype_bytes(int dtype) {
  return dtype == CL_FA_FLOAT32 ? 4 : dtype == CL_FA_FLOAT16 ? 2 : dtype == CL_FA_UINT8 ? 1 : 0;
}

/* FNV-1a over 8-byte words, then the tail bytes: one multiply per word,
 * so checking a file runs at memory speed rather than a byte at a time. */
uint64_t cl_fa_checksum(uint64_t h, const unsigned char *p, size_t n) {
  const uint64_t prime = 0x100000001b3ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * prime;
  }
  for (; i < n; i++) h = (h ^ p[i]) * prime;
  return h;
}

static char *dup_string(const char *s) {
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

/* ---- the header ---- */

static void put_u32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(unsigned char *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const unsigned char *p) {
  uint32_t v;
  memcpy(&v, p, 4);
  return v;
}
static uint64_t get_u64(const unsigned char *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

static void header_write(unsigned char h[CL_FA_HEADER_BYTES], const cl_fa_info *in) {
  memset(h, 0, CL_FA_HEADER_BYTES);
  memcpy(h, MAGIC, 8);
  put_u32(h + 8, ORDER_MARK);
  put_u32(h + 12, (uint32_t)in->dtype);
  for (int i = 0; i < 4; i++) put_u64(h + 16 + 8 * i, (uint64_t)in->dims[i]);
  memcpy(h + 48, &in->scale, 8);
  memcpy(h + 56, &in->offset, 8);
  put_u64(h + 64, in->checksum);
  put_u64(h + 72, in->data_bytes);
}

/* The data bytes dims and dtype give, or 0 when they are not sizes. */
static uint64_t data_bytes_of(const int64_t dims[4], int dtype) {
  uint64_t total = dtype_bytes(dtype);
  if (total == 0) return 0;
  for (int i = 0; i < 4; i++) {
    if (dims[i] < 1 || (uint64_t)dims[i] > UINT64_MAX / 2 / total) return 0;
    total *= (uint64_t)dims[i];
  }
  return total;
}

static cl_status header_read(const unsigned char *h, const char *path, cl_fa_info *out,
                             char *err, size_t errlen) {
  if (memcmp(h, MAGIC, 8) != 0 || get_u32(h + 8) != ORDER_MARK) {
    snprintf(err, errlen, "'%s' is not a convlstm frame file (no CLFRAME1 header in this byte order).",
             path);
    return CL_E_INVALID;
  }
  out->dtype = (int)get_u32(h + 12);
  for (int i = 0; i < 4; i++) out->dims[i] = (int64_t)get_u64(h + 16 + 8 * i);
  memcpy(&out->scale, h + 48, 8);
  memcpy(&out->offset, h + 56, 8);
  out->checksum = get_u64(h + 64);
  out->data_bytes = get_u64(h + 72);
  if (data_bytes_of(out->dims, out->dtype) != out->data_bytes) {
    snprintf(err, errlen, "'%s' has a damaged header: its dtype and dims do not give its data size.",
             path);
    return CL_E_INVALID;
  }
  return CL_OK;
}

/* ---- reading ---- */

/* The pages of [from, to) and of the blocks of FAULT_AROUND bytes they
 * touch: a page fault maps the cached pages around the faulting one too
 * (Linux's fault-around, 64 KiB by default), so pages of a neighbouring
 * window, given back already, would come back resident with it and stay
 * (shuffled windows: one such block per window read). */
#define FAULT_AROUND ((size_t)64 << 10)
static void give_back(unsigned char *map, size_t map_bytes, size_t from, size_t to) {
#ifdef MADV_DONTNEED
  size_t lo = from - from % FAULT_AROUND;
  size_t hi = to + (FAULT_AROUND - to % FAULT_AROUND) % FAULT_AROUND;
  if (hi > map_bytes) hi = map_bytes;
  if (hi > lo) madvise(map + lo, hi - lo, MADV_DONTNEED);
#else
  (void)map, (void)map_bytes, (void)from, (void)to;
#endif
}

static cl_status verify_checksum(cl_fa *a, char *err, size_t errlen) {
  uint64_t h = CL_FA_CHECKSUM_SEED;
  for (size_t at = 0; at < a->info.data_bytes; at += CHUNK_BYTES) {
    size_t n = a->info.data_bytes - at < CHUNK_BYTES ? a->info.data_bytes - at : CHUNK_BYTES;
    h = cl_fa_checksum(h, a->map + CL_FA_HEADER_BYTES + at, n);
    give_back(a->map, a->map_bytes, CL_FA_HEADER_BYTES + at, CL_FA_HEADER_BYTES + at + n);
  }
  if (h == a->info.checksum) return CL_OK;
  snprintf(err, errlen,
           "'%s' has changed since it was written: its data no longer match the checksum in its "
           "header. Write it again (convlstm_frame_file_write()).",
           a->path);
  return CL_E_INVALID;
}

static void async_join(struct cl_fa_async *j);

void cl_fa_close(cl_fa *a) {
  if (!a) return;
  if (a->busy) async_join(a->busy); /* its thread reads the map */
  if (a->map) munmap(a->map, a->map_bytes);
  if (a->fd >= 0) close(a->fd);
  free(a->path);
  free(a);
}

static cl_status open_fail(cl_fa *a, cl_status st) {
  cl_fa_close(a);
  return st;
}

cl_status cl_fa_open(const char *path, int verify, cl_fa **out, char *err, size_t errlen) {
  *out = NULL;
  cl_fa *a = calloc(1, sizeof *a);
  if (!a || !(a->path = dup_string(path))) {
    free(a);
    snprintf(err, errlen, "out of host memory opening '%s'", path);
    return CL_E_OOM;
  }
  a->fd = open(path, O_RDONLY);
  if (a->fd < 0 || fstat(a->fd, &a->opened) != 0) {
    snprintf(err, errlen, "cannot open '%s': %s.", path, strerror(errno));
    return open_fail(a, CL_E_INVALID);
  }
  unsigned char h[CL_FA_HEADER_BYTES];
  if (a->opened.st_size < CL_FA_HEADER_BYTES ||
      pread(a->fd, h, sizeof h, 0) != (ssize_t)sizeof h) {
    snprintf(err, errlen, "'%s' is truncated: %lld bytes, shorter than the %d-byte header.", path,
             (long long)a->opened.st_size, CL_FA_HEADER_BYTES);
    return open_fail(a, CL_E_INVALID);
  }
  cl_status st = header_read(h, path, &a->info, err, errlen);
  if (st != CL_OK) return open_fail(a, st);
  uint64_t want = CL_FA_HEADER_BYTES + a->info.data_bytes;
  if ((uint64_t)a->opened.st_size != want) {
    snprintf(err, errlen, "'%s' is %s: %lld bytes where its header says %llu.", path,
             (uint64_t)a->opened.st_size < want ? "truncated" : "longer than written",
             (long long)a->opened.st_size, (unsigned long long)want);
    return open_fail(a, CL_E_INVALID);
  }
  a->map_bytes = (size_t)want;
  void *m = mmap(NULL, a->map_bytes, PROT_READ, MAP_SHARED, a->fd, 0);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "cannot map '%s': %s.", path, strerror(errno));
    return open_fail(a, CL_E_INVALID);
  }
  a->map = m;
  a->value_bytes = dtype_bytes(a->info.dtype);
  a->frame_values = (size_t)(a->info.dims[1] * a->info.dims[2] * a->info.dims[3]);
  if (verify && (st = verify_checksum(a, err, errlen)) != CL_OK) return open_fail(a, st);
  *out = a;
  return CL_OK;
}

void cl_fa_get_info(const cl_fa *a, cl_fa_info *out) { *out = a->info; }

/* Still the file that was opened: same size, not modified since. */
static cl_status still_same(const cl_fa *a, char *err, size_t errlen) {
  struct stat now;
  if (fstat(a->fd, &now) != 0 || now.st_size != a->opened.st_size ||
      now.st_mtim.tv_sec != a->opened.st_mtim.tv_sec ||
      now.st_mtim.tv_nsec != a->opened.st_mtim.tv_nsec) {
    snprintf(err, errlen,
             "'%s' was %s after it was opened (now %lld bytes, was %lld); nothing was read from "
             "it. Open it again.",
             a->path, now.st_size < a->opened.st_size ? "truncated" : "changed",
             (long long)now.st_size, (long long)a->opened.st_size);
    return CL_E_INVALID;
  }
  return CL_OK;
}

cl_status cl_fa_check(const cl_fa *a, char *err, size_t errlen) { return still_same(a, err, errlen); }

/* One frame's values into out[0], out[stride], ... */
static void decode_frame(const cl_fa *a, const unsigned char *src, double *out, size_t stride) {
  size_t n = a->frame_values;
  switch (a->info.dtype) {
  case CL_FA_FLOAT32:
    for (size_t i = 0; i < n; i++) {
      float v;
      memcpy(&v, src + 4 * i, 4);
      out[i * stride] = (double)v;
    }
    break;
  case CL_FA_FLOAT16:
    for (size_t i = 0; i < n; i++) {
      uint16_t v;
      memcpy(&v, src + 2 * i, 2);
      out[i * stride] = (double)cl_f16_to_f32(v);
    }
    break;
  default:
    for (size_t i = 0; i < n; i++) out[i * stride] = a->info.offset + a->info.scale * src[i];
  }
}

cl_status cl_fa_read_windows(cl_fa *a, const int64_t *starts, int64_t n, int64_t len,
                             double *out, char *err, size_t errlen) {
  cl_status st = still_same(a, err, errlen);
  if (st != CL_OK) return st;
  int64_t T = a->info.dims[0];
  for (int64_t i = 0; i < n; i++) {
    if (len < 1 || starts[i] < 0 || starts[i] > T - len) {
      snprintf(err, errlen, "window %lld (frames %lld to %lld) is outside '%s' (%lld frames).",
               (long long)(i + 1), (long long)starts[i] + 1, (long long)(starts[i] + len),
               a->path, (long long)T);
      return CL_E_INVALID;
    }
  }
  size_t frame_bytes = a->frame_values * a->value_bytes;
  size_t stride = (size_t)n * (size_t)len; /* between one value and the next of a frame */
  for (int64_t i = 0; i < n; i++) {
    size_t from = CL_FA_HEADER_BYTES + (size_t)starts[i] * frame_bytes;
    for (int64_t s = 0; s < len; s++) {
      decode_frame(a, a->map + from + (size_t)s * frame_bytes, out + i + (size_t)n * (size_t)s,
                   stride);
    }
    give_back(a->map, a->map_bytes, from, from + (size_t)len * frame_bytes);
  }
  return CL_OK;
}

/* ---- reading ahead ---- */

struct cl_fa_async {
  cl_fa *a;
  int64_t *starts; /* x's n, then y's n */
  int64_t n, len_x, len_y;
  double *out_x, *out_y;
  pthread_t thread;
  int joined;
  cl_status status;
  char err[1024];
};

static void *async_read(void *arg) {
  cl_fa_async *j = arg;
  j->status = cl_fa_read_windows(j->a, j->starts, j->n, j->len_x, j->out_x, j->err, sizeof j->err);
  if (j->status == CL_OK) {
    j->status = cl_fa_read_windows(j->a, j->starts + j->n, j->n, j->len_y, j->out_y, j->err,
                                   sizeof j->err);
  }
  return NULL;
}

static void async_join(cl_fa_async *j) {
  if (j->joined) return;
  pthread_join(j->thread, NULL);
  j->joined = 1;
  if (j->a && j->a->busy == j) j->a->busy = NULL;
}

cl_status cl_fa_async_start(cl_fa *a, const int64_t *starts_x, int64_t len_x,
                            const int64_t *starts_y, int64_t len_y, int64_t n, double *out_x,
                            double *out_y, cl_fa_async **out, char *err, size_t errlen) {
  *out = NULL;
  if (n < 1 || a->busy) {
    snprintf(err, errlen, "a read ahead of '%s' needs at least one window, and no other in flight.",
             a->path);
    return CL_E_INVALID;
  }
  cl_fa_async *j = calloc(1, sizeof *j);
  if (j) j->starts = malloc(2 * (size_t)n * sizeof *j->starts);
  if (!j || !j->starts) {
    free(j);
    snprintf(err, errlen, "out of host memory reading ahead from '%s'", a->path);
    return CL_E_OOM;
  }
  memcpy(j->starts, starts_x, (size_t)n * sizeof *j->starts);
  memcpy(j->starts + n, starts_y, (size_t)n * sizeof *j->starts);
  j->a = a;
  j->n = n;
  j->len_x = len_x;
  j->len_y = len_y;
  j->out_x = out_x;
  j->out_y = out_y;
  int rc = pthread_create(&j->thread, NULL, async_read, j);
  if (rc != 0) {
    snprintf(err, errlen, "cannot start a thread to read '%s' ahead: %s.", a->path, strerror(rc));
    free(j->starts);
    free(j);
    return CL_E_INVALID;
  }
  a->busy = j;
  *out = j;
  return CL_OK;
}

cl_status cl_fa_async_finish(cl_fa_async *j, char *err, size_t errlen) {
  async_join(j);
  cl_status st = j->status;
  if (st != CL_OK) snprintf(err, errlen, "%s", j->err);
  free(j->starts);
  free(j);
  return st;
}

/* ---- writing ---- */

void cl_fa_writer_abort(cl_fa_writer *w) {
  if (!w) return;
  if (w->f) fclose(w->f);
  if (w->tmp) remove(w->tmp);
  free(w->path);
  free(w->tmp);
  free(w->buf);
  free(w);
}

cl_status cl_fa_writer_open(const char *path, int dtype, const int64_t dims[4], double scale,
                            double offset, cl_fa_writer **out, char *err, size_t errlen) {
  *out = NULL;
  uint64_t bytes = data_bytes_of(dims, dtype);
  if (bytes == 0) {
    snprintf(err, errlen, "a frame file needs a dtype of float32, float16 or uint8 and four "
                          "positive dims.");
    return CL_E_INVALID;
  }
  if (dtype == CL_FA_UINT8 && !(isfinite(scale) && scale > 0 && isfinite(offset))) {
    snprintf(err, errlen, "uint8 needs a finite positive scale and a finite offset.");
    return CL_E_INVALID;
  }
  cl_fa_writer *w = calloc(1, sizeof *w);
  size_t tmp_len = strlen(path) + 32;
  if (w) {
    w->path = dup_string(path);
    w->tmp = malloc(tmp_len);
    w->frame_values = (size_t)(dims[1] * dims[2] * dims[3]);
    w->value_bytes = dtype_bytes(dtype);
    w->buf = malloc(w->frame_values * w->value_bytes);
  }
  if (!w || !w->path || !w->tmp || !w->buf) {
    if (w) free(w->tmp), w->tmp = NULL; /* nothing on disk yet */
    cl_fa_writer_abort(w);
    snprintf(err, errlen, "out of host memory for a writer of '%s'", path);
    return CL_E_OOM;
  }
  snprintf(w->tmp, tmp_len, "%s.part-%ld", path, (long)getpid());
  w->info.dtype = dtype;
  memcpy(w->info.dims, dims, sizeof w->info.dims);
  w->info.scale = dtype == CL_FA_UINT8 ? scale : 1;
  w->info.offset = dtype == CL_FA_UINT8 ? offset : 0;
  w->info.checksum = CL_FA_CHECKSUM_SEED;
  w->info.data_bytes = bytes;
  w->f = fopen(w->tmp, "wb");
  unsigned char h[CL_FA_HEADER_BYTES] = {0}; /* zeros until finish: no magic, no reader */
  if (!w->f || fwrite(h, 1, sizeof h, w->f) != sizeof h) {
    snprintf(err, errlen, "cannot write '%s': %s.", w->tmp, strerror(errno));
    cl_fa_writer_abort(w);
    return CL_E_INVALID;
  }
  *out = w;
  return CL_OK;
}

/* The stored form of v, or -1 (with err) when the dtype cannot hold it. */
static int encode_value(const cl_fa_writer *w, double v, unsigned char *dst, char *err,
                        size_t errlen) {
  if (!isfinite(v)) {
    snprintf(err, errlen, "a frame file stores finite values only, not %g.", v);
    return -1;
  }
  if (w->info.dtype == CL_FA_FLOAT32) {
    float f = (float)v;
    if (!isfinite(f)) {
      snprintf(err, errlen, "%g is beyond float32's range.", v);
      return -1;
    }
    memcpy(dst, &f, 4);
  } else if (w->info.dtype == CL_FA_FLOAT16) {
    uint16_t hbits = cl_f32_to_f16((float)v);
    if ((hbits & 0x7c00u) == 0x7c00u) {
      snprintf(err, errlen, "%g is beyond float16's range (65504).", v);
      return -1;
    }
    memcpy(dst, &hbits, 2);
  } else {
    double q = nearbyint((v - w->info.offset) / w->info.scale);
    if (!(q >= 0 && q <= 255)) {
      snprintf(err, errlen, "%g is outside what uint8 with scale %g and offset %g holds ([%g, %g]).",
               v, w->info.scale, w->info.offset, w->info.offset,
               w->info.offset + 255 * w->info.scale);
      return -1;
    }
    dst[0] = (unsigned char)q;
  }
  return 0;
}

/* The checksum continued over n bytes, as if the data were one stream
 * (the reader hashes it in chunks of CHUNK_BYTES, a multiple of 8). */
static void checksum_feed(cl_fa_writer *w, const unsigned char *p, size_t n) {
  if (w->npend > 0) {
    size_t take = 8 - w->npend < n ? 8 - w->npend : n;
    memcpy(w->pend + w->npend, p, take);
    w->npend += take;
    p += take;
    n -= take;
    if (w->npend < 8) return;
    w->info.checksum = cl_fa_checksum(w->info.checksum, w->pend, 8);
    w->npend = 0;
  }
  size_t whole = n - n % 8;
  w->info.checksum = cl_fa_checksum(w->info.checksum, p, whole);
  memcpy(w->pend, p + whole, n - whole);
  w->npend = n - whole;
}

cl_status cl_fa_writer_append(cl_fa_writer *w, const double *x, int64_t k, char *err,
                              size_t errlen) {
  if (k < 0 || k > w->info.dims[0] - w->frames_written) {
    snprintf(err, errlen, "%lld more frames would pass the %lld the file was opened for.",
             (long long)k, (long long)w->info.dims[0]);
    return CL_E_INVALID;
  }
  for (int64_t t = 0; t < k; t++) {
    for (size_t i = 0; i < w->frame_values; i++) {
      double v = x[(size_t)t + (size_t)k * i]; /* R's [k, channels, height, width] */
      if (encode_value(w, v, w->buf + i * w->value_bytes, err, errlen) != 0) return CL_E_INVALID;
    }
    size_t nb = w->frame_values * w->value_bytes;
    if (fwrite(w->buf, 1, nb, w->f) != nb) {
      snprintf(err, errlen, "cannot write '%s': %s.", w->tmp, strerror(errno));
      return CL_E_INVALID;
    }
    checksum_feed(w, w->buf, nb);
    w->frames_written++;
  }
  return CL_OK;
}

cl_status cl_fa_writer_finish(cl_fa_writer *w, char *err, size_t errlen) {
  if (w->frames_written != w->info.dims[0]) {
    snprintf(err, errlen, "only %lld of the %lld frames were written; '%s' was not created.",
             (long long)w->frames_written, (long long)w->info.dims[0], w->path);
    cl_fa_writer_abort(w);
    return CL_E_INVALID;
  }
  w->info.checksum = cl_fa_checksum(w->info.checksum, w->pend, w->npend); /* the tail */
  unsigned char h[CL_FA_HEADER_BYTES];
  header_write(h, &w->info);
  int ok = fseek(w->f, 0, SEEK_SET) == 0 && fwrite(h, 1, sizeof h, w->f) == sizeof h &&
           fflush(w->f) == 0 && fsync(fileno(w->f)) == 0;
  ok = (fclose(w->f) == 0) && ok;
  w->f = NULL;
  if (!ok || rename(w->tmp, w->path) != 0) {
    snprintf(err, errlen, "cannot write '%s': %s.", w->path, strerror(errno));
    cl_fa_writer_abort(w);
    return CL_E_INVALID;
  }
  free(w->tmp);
  w->tmp = NULL; /* renamed: abort must not remove it */
  cl_fa_writer_abort(w);
  return CL_OK;
}
