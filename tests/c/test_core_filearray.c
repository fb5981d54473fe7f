/*
 * tests/c/test_core_filearray.c -- frame files (src/core/filearray.c, the
 * format in inst/include/convlstm_file.h) on their own: written and read
 * back in each dtype against values computed here, the checksum the same
 * however the frames are cut into appends, and each damage found with a
 * message naming the file: a truncated or longer file, changed data
 * (verify), a file cut under the map after it was opened (an error, not a
 * SIGBUS), a window outside the series; a write that does not finish
 * leaves no file; a read ahead on its own thread (cl_fa_async) gives the
 * same bits as the read, finds a file truncated before it starts (an
 * error, not a SIGBUS), and a file closed with one in flight waits for
 * it. Exits nonzero on any failure.
 */
#define _POSIX_C_SOURCE 200809L /* truncate, mkstemp */
#include "convlstm_file.h"
#include "ctest.h" /* CHECK */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { T = 7, C = 2, H = 3, W = 2, FV = C * H * W };

static char dir[64];
static char err[1024];

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", dir, name); }

/* The series: frame t, value i of R's [C, H, W] order. */
static double value_of(int t, int i) { return (t * FV + i) * 0.25 - 5; }

/* Frames a..b-1 as R's column-major [k, C, H, W]. */
static void frames_r(int a, int b, double *out) {
  int k = b - a;
  for (int t = a; t < b; t++)
    for (int i = 0; i < FV; i++) out[(t - a) + k * i] = value_of(t, i);
}

/* The series written to path in appends of `step` frames. */
static cl_status write_series(const char *path, int dtype, int step, double scale, double offset) {
  const int64_t dims[4] = {T, C, H, W};
  cl_fa_writer *w = NULL;
  cl_status st = cl_fa_writer_open(path, dtype, dims, scale, offset, &w, err, sizeof err);
  if (st != CL_OK) return st;
  double buf[T * FV];
  for (int a = 0; a < T; a += step) {
    int b = a + step < T ? a + step : T;
    frames_r(a, b, buf);
    if ((st = cl_fa_writer_append(w, buf, b - a, err, sizeof err)) != CL_OK) {
      cl_fa_writer_abort(w);
      return st;
    }
  }
  return cl_fa_writer_finish(w, err, sizeof err);
}

static void test_round_trip(void) {
  char p[128];
  const int dtypes[3] = {CL_FA_FLOAT32, CL_FA_FLOAT16, CL_FA_UINT8};
  for (int d = 0; d < 3; d++) {
    path_of(p, sizeof p, "round.frames");
    CHECK(write_series(p, dtypes[d], 3, 0.25, -5) == CL_OK, "write dtype %d: %s", d, err);
    cl_fa *a = NULL;
    CHECK(cl_fa_open(p, 1, &a, err, sizeof err) == CL_OK, "open dtype %d: %s", d, err);
    if (!a) continue;
    cl_fa_info in;
    cl_fa_get_info(a, &in);
    CHECK(in.dims[0] == T && in.dims[1] == C && in.dims[3] == W, "dims");
    CHECK(in.data_bytes == (uint64_t)T * FV * (d == 0 ? 4 : d == 1 ? 2 : 1), "bytes %llu",
          (unsigned long long)in.data_bytes);
    /* windows 2 (frames 3..5) and 0 (frames 1..3), [n = 2, len = 3, C, H, W] */
    int64_t starts[2] = {2, 0};
    double out[2 * 3 * FV];
    CHECK(cl_fa_read_windows(a, starts, 2, 3, out, err, sizeof err) == CL_OK, "read: %s", err);
    int bad = 0;
    for (int i = 0; i < 2; i++)
      for (int s = 0; s < 3; s++)
        for (int v = 0; v < FV; v++) {
          double want = value_of((int)starts[i] + s, v); /* a quarter step: exact in every dtype */
          if (out[i + 2 * s + 6 * v] != want) bad++;
        }
    CHECK(bad == 0, "dtype %d: %d values differ", d, bad);
    cl_fa_close(a);
    remove(p);
  }
}

static uint64_t header_checksum(const char *path) {
  FILE *f = fopen(path, "rb");
  unsigned char h[CL_FA_HEADER_BYTES] = {0};
  size_t got = f ? fread(h, 1, sizeof h, f) : 0;
  if (f) fclose(f);
  uint64_t c = 0;
  if (got == sizeof h) memcpy(&c, h + 64, 8);
  return c;
}

static void test_checksum_chunks(void) {
  char p1[128], p2[128];
  path_of(p1, sizeof p1, "one.frames");
  path_of(p2, sizeof p2, "all.frames");
  /* float16 frames of 24 bytes: appends of 1 frame cut the 8-byte words */
  CHECK(write_series(p1, CL_FA_FLOAT16, 1, 1, 0) == CL_OK, "write 1: %s", err);
  CHECK(write_series(p2, CL_FA_FLOAT16, T, 1, 0) == CL_OK, "write all: %s", err);
  CHECK(header_checksum(p1) == header_checksum(p2), "checksum depends on the appends");
  CHECK(header_checksum(p1) != 0, "no checksum");
  remove(p1);
  remove(p2);
}

static void test_damage(void) {
  char p[128];
  path_of(p, sizeof p, "damage.frames");
  CHECK(write_series(p, CL_FA_FLOAT32, 2, 1, 0) == CL_OK, "write: %s", err);
  long size = CL_FA_HEADER_BYTES + T * FV * 4;
  cl_fa *a = NULL;
  /* changed data: found with verify, not without */
  FILE *f = fopen(p, "r+b");
  fseek(f, CL_FA_HEADER_BYTES + 10, SEEK_SET);
  fputc(0x5a, f);
  fclose(f);
  CHECK(cl_fa_open(p, 1, &a, err, sizeof err) == CL_E_INVALID && a == NULL, "changed data opened");
  CHECK(strstr(err, "changed since it was written") && strstr(err, p), "message: %s", err);
  CHECK(cl_fa_open(p, 0, &a, err, sizeof err) == CL_OK, "no verify: %s", err);
  /* cut under the map: the next read is an error naming the file */
  CHECK(truncate(p, size - 40) == 0, "truncate");
  int64_t s0 = 0;
  double out[FV];
  CHECK(cl_fa_read_windows(a, &s0, 1, 1, out, err, sizeof err) == CL_E_INVALID, "read after cut");
  CHECK(strstr(err, "truncated") && strstr(err, p), "message: %s", err);
  cl_fa_close(a);
  /* truncated when opened */
  a = NULL;
  CHECK(cl_fa_open(p, 0, &a, err, sizeof err) == CL_E_INVALID && a == NULL, "truncated opened");
  CHECK(strstr(err, "truncated") && strstr(err, p), "message: %s", err);
  remove(p);
  /* a window outside the series */
  CHECK(write_series(p, CL_FA_FLOAT32, 2, 1, 0) == CL_OK, "write: %s", err);
  CHECK(cl_fa_open(p, 1, &a, err, sizeof err) == CL_OK, "open: %s", err);
  int64_t s5 = T - 2;
  double out3[3 * FV];
  CHECK(cl_fa_read_windows(a, &s5, 1, 3, out3, err, sizeof err) == CL_E_INVALID, "outside read");
  cl_fa_close(a);
  remove(p);
}

static void test_unfinished(void) {
  char p[128];
  path_of(p, sizeof p, "half.frames");
  const int64_t dims[4] = {T, C, H, W};
  cl_fa_writer *w = NULL;
  CHECK(cl_fa_writer_open(p, CL_FA_FLOAT32, dims, 1, 0, &w, err, sizeof err) == CL_OK, "open");
  double buf[2 * FV];
  frames_r(0, 2, buf);
  CHECK(cl_fa_writer_append(w, buf, 2, err, sizeof err) == CL_OK, "append");
  CHECK(cl_fa_writer_finish(w, err, sizeof err) == CL_E_INVALID, "finished with 2 of 7 frames");
  CHECK(access(p, F_OK) != 0, "a half file exists");
  /* a value uint8 cannot hold */
  w = NULL;
  CHECK(cl_fa_writer_open(p, CL_FA_UINT8, dims, 1, 0, &w, err, sizeof err) == CL_OK, "open u8");
  buf[0] = 300;
  CHECK(cl_fa_writer_append(w, buf, 1, err, sizeof err) == CL_E_INVALID, "300 in uint8");
  cl_fa_writer_abort(w);
  CHECK(access(p, F_OK) != 0, "an aborted file exists");
}

static void test_async(void) {
  char p[128];
  path_of(p, sizeof p, "ahead.frames");
  CHECK(write_series(p, CL_FA_FLOAT16, 2, 1, 0) == CL_OK, "write: %s", err);
  cl_fa *a = NULL;
  CHECK(cl_fa_open(p, 1, &a, err, sizeof err) == CL_OK, "open: %s", err);
  if (!a) return;
  /* windows 3, 0, 1 of 2 frames (x) and the frame after each (y) */
  int64_t sx[3] = {3, 0, 1}, sy[3] = {5, 2, 3};
  double want_x[3 * 2 * FV], want_y[3 * FV], got_x[3 * 2 * FV], got_y[3 * FV];
  CHECK(cl_fa_read_windows(a, sx, 3, 2, want_x, err, sizeof err) == CL_OK, "read x: %s", err);
  CHECK(cl_fa_read_windows(a, sy, 3, 1, want_y, err, sizeof err) == CL_OK, "read y: %s", err);
  memset(got_x, 0, sizeof got_x);
  memset(got_y, 0, sizeof got_y);
  cl_fa_async *j = NULL;
  CHECK(cl_fa_async_start(a, sx, 2, sy, 1, 3, got_x, got_y, &j, err, sizeof err) == CL_OK,
        "start: %s", err);
  cl_fa_async *second = NULL; /* one in flight at most */
  CHECK(cl_fa_async_start(a, sx, 2, sy, 1, 3, got_x, got_y, &second, err, sizeof err) ==
            CL_E_INVALID && !second, "a second read in flight started");
  CHECK(j && cl_fa_async_finish(j, err, sizeof err) == CL_OK, "finish: %s", err);
  CHECK(memcmp(got_x, want_x, sizeof got_x) == 0, "x read ahead differs from x read");
  CHECK(memcmp(got_y, want_y, sizeof got_y) == 0, "y read ahead differs from y read");
  /* closed with a read in flight: the close waits for it, the finish frees it */
  j = NULL;
  CHECK(cl_fa_async_start(a, sx, 2, sy, 1, 3, got_x, got_y, &j, err, sizeof err) == CL_OK,
        "start: %s", err);
  cl_fa_close(a);
  CHECK(j && cl_fa_async_finish(j, err, sizeof err) == CL_OK, "finish after close: %s", err);
  /* the header alone left: the thread must find it before touching the map */
  CHECK(cl_fa_open(p, 0, &a, err, sizeof err) == CL_OK, "reopen: %s", err);
  CHECK(truncate(p, CL_FA_HEADER_BYTES) == 0, "truncate");
  j = NULL;
  CHECK(cl_fa_async_start(a, sx, 2, sy, 1, 3, got_x, got_y, &j, err, sizeof err) == CL_OK,
        "start on a cut file: %s", err);
  err[0] = 0;
  CHECK(j && cl_fa_async_finish(j, err, sizeof err) == CL_E_INVALID, "read ahead of a cut file");
  CHECK(strstr(err, "truncated") && strstr(err, p), "message: %s", err);
  cl_fa_close(a);
  remove(p);
}

int main(void) {
  (void)uniform01;
  snprintf(dir, sizeof dir, "/tmp/cl_fa_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_round_trip();
  test_checksum_chunks();
  test_damage();
  test_unfinished();
  test_async();
  rmdir(dir);
  return ctest_done("test_core_filearray");
}
