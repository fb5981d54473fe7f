/*
 * core/safetensors.h -- the safetensors container: a file's header parsed
 * and checked into a table of tensors and a table of metadata, its tensors'
 * elements read as float32, and what writing one takes (a header built
 * piece by piece, float32 data, the atomic temp-file write). See
 * safetensors.c; what convlstm keeps in the container is model_file_read.c's.
 */
#ifndef CONVLSTM_CORE_SAFETENSORS_H
#define CONVLSTM_CORE_SAFETENSORS_H

#include "convlstm.h" /* cl_status */
#include "json.h"

#include <stddef.h>
#include <stdint.h>

/* The safetensors project's own bound on the header. */
#define CL_ST_MAX_HEADER 100000000u
/* Ranks beyond what any convlstm tensor has are refused, not guessed at. */
#define CL_ST_MAX_RANK 8
/* Integers in the header (shapes, offsets) stay below 2^53 (json.h). */
#define CL_ST_MAX_INT CL_JSON_MAX_UINT

/* Writes the message into err (when there is one) and returns s. */
cl_status cl_st_fail(char *err, size_t errlen, cl_status s, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 4, 5)))
#endif
  ;

/* ---- reading ---------------------------------------------------------- */

typedef struct cl_st_tensor {
  char *name;
  int dtype; /* see cl_st_dtype_name */
  int ndim;
  uint64_t shape[CL_ST_MAX_RANK];
  uint64_t begin, end; /* byte offsets into the data */
} cl_st_tensor;

typedef struct cl_st_meta {
  char *key, *value;
} cl_st_meta;

/* A parsed file. Tensors t[] are in the header's order, by_name[] sorted by
 * name; meta[] is sorted by key. */
typedef struct cl_st_file {
  unsigned char *bytes; /* the whole file */
  size_t len;
  const unsigned char *data; /* after the header */
  size_t data_len;
  cl_st_tensor *t;
  int nt;
  cl_st_meta *meta;
  int nmeta;
  cl_st_tensor **by_name;
} cl_st_file;

/* The dtype's name in the format ("F32"), its size in bytes, and whether
 * its elements can be read (F32, F64, F16, BF16). */
const char *cl_st_dtype_name(int dtype);
unsigned cl_st_dtype_size(int dtype);
int cl_st_dtype_is_float(int dtype);

/* Whether bytes[0..len) can hold a file: at least the 8-byte length, and
 * a header length that fits. */
cl_status cl_st_check_length(const unsigned char *bytes, size_t len, char *err, size_t errlen);
/* Parses bytes[0..len) (cl_st_check_length passed) into *f, which takes
 * the bytes over: cl_st_free(f) frees them, after a failure too. The header
 * is strict JSON, its tensors tile the data exactly, names and keys are
 * unique. */
cl_status cl_st_parse(cl_st_file *f, unsigned char *bytes, size_t len, char *err, size_t errlen);
/* Frees what *f holds (not f). */
void cl_st_free(cl_st_file *f);
/* A whole file read into a new buffer, after a check of its header length
 * (messages name the path). */
cl_status cl_st_read_file(const char *path, unsigned char **bytes, size_t *len, char *err,
                          size_t errlen);

/* Index into f->t of the tensor called name, or -1. */
int cl_st_find_tensor(const cl_st_file *f, const char *name);
/* The metadata value of key, or NULL. */
const char *cl_st_find_meta(const cl_st_file *f, const char *key);
/* Element i of a floating tensor as float32; the first n into dst. */
float cl_st_elem(const cl_st_file *f, const cl_st_tensor *t, size_t i);
void cl_st_read_f32(const cl_st_file *f, const cl_st_tensor *t, float *dst, size_t n);

/* Metadata values are strings; these read one whole as an integer in
 * [lo, hi], as a finite number in JSON's grammar, or as a list "[3, 2]" of
 * at most max positive integers (the count; -1 when malformed). */
int cl_st_meta_int(const char *v, long long lo, long long hi, long long *out);
int cl_st_meta_double(const char *v, double *out);
int cl_st_meta_int_list(const char *v, int *out, int max);
/* A list "[0.25, 0]" of at most max finite numbers: the count; -1 when
 * malformed. */
int cl_st_meta_double_list(const char *v, double *out, int max);

/* ---- writing ---------------------------------------------------------- */

/* A growing NUL-terminated text; oom is set (and it stops growing) when
 * memory runs out. Zero-initialized is empty. */
typedef struct cl_st_buf {
  char *p;
  size_t n, cap;
  int oom;
} cl_st_buf;

void cl_st_buf_put(cl_st_buf *b, const char *s, size_t len);
void cl_st_buf_str(cl_st_buf *b, const char *s);
void cl_st_buf_printf(cl_st_buf *b, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 2, 3)))
#endif
  ;

/* A header: begin, meta... (first starts at 1), end_meta, tensor_f32...
 * (consecutive offsets from 0), end. Keys, values and names must be UTF-8. */
void cl_st_header_begin(cl_st_buf *h);
void cl_st_header_meta(cl_st_buf *h, int *first, const char *key, const char *value);
void cl_st_header_meta_num(cl_st_buf *h, int *first, const char *key, double d);
void cl_st_header_meta_int(cl_st_buf *h, int *first, const char *key, long long x);
void cl_st_header_meta_list(cl_st_buf *h, int *first, const char *key, const int *x, int n);
void cl_st_header_meta_nums(cl_st_buf *h, int *first, const char *key, const double *x, int n);
void cl_st_header_end_meta(cl_st_buf *h);
void cl_st_header_tensor_f32(cl_st_buf *h, const char *name, int nd, const int *dims,
                             uint64_t begin, uint64_t end);
void cl_st_header_end(cl_st_buf *h); /* pads so that the data starts 8-aligned */

/* The longest target a save writes to (so that its temporary name fits). */
#define CL_ST_MAX_TARGET 4000

/* Where a save to path writes: path, or where its chain of symbolic links
 * ends (a relative link read from its own directory), into target. That
 * need not exist (a new file); CL_E_INVALID, with a message naming path, when
 * it is not a regular file (a directory, device, FIFO, socket), for more
 * than 40 links, or for a target longer than CL_ST_MAX_TARGET. */
cl_status cl_st_save_target(const char *path, char *target, size_t len, char *err,
                            size_t errlen);

/* The atomic write: open resolves path's target (cl_st_save_target) and
 * makes a temporary file beside it, header and f32 write to it (0 once a
 * write failed), close flushes it, checks the target again and renames the
 * temporary file over it (the links stay links) and flushes the directory
 * when st is CL_OK and every write succeeded, else removes it, and returns
 * the outcome. Messages go to err. */
typedef struct cl_st_writer {
  int fd, ok;
  char target[CL_ST_MAX_TARGET + 1];
  char tmp[4100];
  unsigned char *chunk; /* float32 -> little-endian bytes */
} cl_st_writer;

cl_status cl_st_write_open(cl_st_writer *w, const char *path, char *err, size_t errlen);
int cl_st_write_header(cl_st_writer *w, const cl_st_buf *h);
int cl_st_write_f32(cl_st_writer *w, const float *v, size_t n);
cl_status cl_st_write_close(cl_st_writer *w, const char *path, cl_status st, char *err,
                            size_t errlen);

#endif
