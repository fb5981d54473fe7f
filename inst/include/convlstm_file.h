/*
 * convlstm_file.h -- file-backed frame series (src/core/filearray.c): a raw
 * binary file of frames [time, channels, height, width] in float32, float16
 * or uint8 (with a scale and an offset), memory-mapped and read window by
 * window, and its writer. The R glue (src/r_filearray.c) calls only this.
 *
 * The file: a 128-byte little-endian header, then the frames one after the
 * other, each frame's values with channels varying fastest, then rows, then
 * columns (R's column-major order of a [channels, height, width] frame).
 *
 *   0  char[8]  magic "CLFRAME1"
 *   8  uint32   0x01020304 (the writer's byte order)
 *  12  uint32   dtype (CL_FA_FLOAT32, CL_FA_FLOAT16, CL_FA_UINT8)
 *  16  int64[4] time, channels, height, width
 *  48  double   scale   (uint8: value = offset + scale * q; else 1)
 *  56  double   offset  (else 0)
 *  64  uint64   checksum of the data bytes (cl_fa_checksum)
 *  72  uint64   data bytes (time * channels * height * width * size)
 *  80  zeros up to 128
 *
 * Plain C11 and POSIX (mmap, threads); no R header.
 */
#ifndef CONVLSTM_FILE_H
#define CONVLSTM_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "convlstm.h" /* cl_status */

#ifdef __cplusplus
extern "C" {
#endif

#define CL_FA_HEADER_BYTES 128

typedef enum { CL_FA_FLOAT32 = 0, CL_FA_FLOAT16 = 1, CL_FA_UINT8 = 2 } cl_fa_dtype;

typedef struct {
  int dtype;          /* cl_fa_dtype */
  int64_t dims[4];    /* time, channels, height, width */
  double scale, offset;
  uint64_t checksum;  /* as the header records it */
  uint64_t data_bytes;
} cl_fa_info;

typedef struct cl_fa cl_fa;
typedef struct cl_fa_writer cl_fa_writer;

/* The checksum the header records, continued over n more bytes (start
 * with CL_FA_CHECKSUM_SEED); the writer and the reader share it. */
#define CL_FA_CHECKSUM_SEED 0xcbf29ce484222325ull
uint64_t cl_fa_checksum(uint64_t h, const unsigned char *p, size_t n);

/* Opens and maps path. CL_E_INVALID, with a message naming the file, when it
 * is not such a file, is shorter or longer than its header says
 * (truncated), or (verify) its data no longer match the header's checksum
 * (changed). Nothing is read besides the header unless verify. */
cl_status cl_fa_open(const char *path, int verify, cl_fa **out, char *err, size_t errlen);
void cl_fa_get_info(const cl_fa *a, cl_fa_info *out);
/* n windows of len frames, window i starting at frame starts[i] (0-based),
 * decoded into out as R's column-major double array [n, len, channels,
 * height, width]. The file is checked first (still its size and time of
 * modification: a file truncated or rewritten under the map is an error,
 * never a SIGBUS); the pages read are given back to the OS afterwards, so
 * what stays resident does not grow with the file. */
cl_status cl_fa_read_windows(cl_fa *a, const int64_t *starts, int64_t n, int64_t len,
                             double *out, char *err, size_t errlen);
/* CL_OK while the file is still the one opened (its size and time of
 * modification), else CL_E_INVALID naming it, as a read would say. */
cl_status cl_fa_check(const cl_fa *a, char *err, size_t errlen);
/* Closes the file, first waiting for a read ahead of it still in flight. */
void cl_fa_close(cl_fa *a);

/* Reading ahead: the windows of one batch, x's (n windows of len_x frames
 * from starts_x) and y's (n of len_y from starts_y), read as
 * cl_fa_read_windows() reads them into out_x and out_y, on a thread of
 * their own (POSIX threads), so that the caller's training step runs
 * meanwhile. The thread touches nothing but the file, the starts (copied)
 * and the two buffers, which must stay untouched until cl_fa_async_finish;
 * a cl_fa has one read in flight at most (closing it waits for that
 * read). CL_E_OOM / CL_E_INVALID (with
 * err) when the thread cannot start: then nothing runs. */
typedef struct cl_fa_async cl_fa_async;
cl_status cl_fa_async_start(cl_fa *a, const int64_t *starts_x, int64_t len_x,
                            const int64_t *starts_y, int64_t len_y, int64_t n, double *out_x,
                            double *out_y, cl_fa_async **out, char *err, size_t errlen);
/* Waits for the read and frees it: its status, its message in err (a
 * file truncated or changed before it read, a window outside the file). */
cl_status cl_fa_async_finish(cl_fa_async *job, char *err, size_t errlen);

/* A writer of path's file: it writes to a temporary name beside path and
 * renames it to path only in cl_fa_writer_finish, once the header holds the
 * checksum, so no reader ever sees half a file. */
cl_status cl_fa_writer_open(const char *path, int dtype, const int64_t dims[4], double scale,
                            double offset, cl_fa_writer **out, char *err, size_t errlen);
/* k frames, R's column-major [k, channels, height, width]. CL_E_INVALID for
 * a value that is not finite, or that the dtype cannot hold (beyond
 * float16's 65504, outside uint8's offset + scale * [0, 255]), and for more
 * frames than the header's time. */
cl_status cl_fa_writer_append(cl_fa_writer *w, const double *x, int64_t k, char *err,
                              size_t errlen);
/* Every frame written: the header, flushed to disk, renamed. Frees w,
 * whatever it returns (on failure the temporary file is removed). */
cl_status cl_fa_writer_finish(cl_fa_writer *w, char *err, size_t errlen);
/* Closes and removes the temporary file; frees w. */
void cl_fa_writer_abort(cl_fa_writer *w);

#ifdef __cplusplus
}
#endif
#endif
