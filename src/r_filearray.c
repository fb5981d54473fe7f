/*
 * r_filearray.c -- frame files from R (core/filearray.c through
 * convlstm_file.h): an open, mapped file as a classed external pointer
 * (closed by its finalizer or ffi_fa_close), windows read into new R
 * arrays; and a writer as another pointer whose finalizer removes the
 * temporary file of a write that never finished.
 *
 * It is not where arguments are checked for the user (R/source_file.R
 * does, with 1-based frames); the core's checks are the backstop.
 */
#include <limits.h>

#include "r_convlstm.h"
#include "convlstm_file.h"

#define ERR_LEN 1024

static SEXP fa_tag(void) { return Rf_install("convlstm_frame_file"); }
static SEXP writer_tag(void) { return Rf_install("convlstm_frame_writer"); }

static void fa_finalize(SEXP ptr) {
  cl_fa_close((cl_fa *)R_ExternalPtrAddr(ptr));
  R_ClearExternalPtr(ptr);
}

static void writer_finalize(SEXP ptr) {
  cl_fa_writer_abort((cl_fa_writer *)R_ExternalPtrAddr(ptr));
  R_ClearExternalPtr(ptr);
}

static cl_fa *r_fa(SEXP ptr) {
  if (TYPEOF(ptr) != EXTPTRSXP || R_ExternalPtrTag(ptr) != fa_tag())
    r_raise_invalid("not an open frame file");
  cl_fa *a = (cl_fa *)R_ExternalPtrAddr(ptr);
  if (!a) r_raise(CL_E_STATE, "This frame file was closed (or restored by readRDS()); open it again.");
  return a;
}

static cl_fa_writer *r_writer(SEXP ptr) {
  if (TYPEOF(ptr) != EXTPTRSXP || R_ExternalPtrTag(ptr) != writer_tag())
    r_raise_invalid("not a frame file writer");
  cl_fa_writer *w = (cl_fa_writer *)R_ExternalPtrAddr(ptr);
  if (!w) r_raise(CL_E_STATE, "This frame file writer has finished or failed.");
  return w;
}

SEXP ffi_fa_open(SEXP path, SEXP verify) {
  SEXP ptr = PROTECT(r_new_handle(fa_tag(), R_NilValue, fa_finalize, NULL));
  char err[ERR_LEN] = "";
  cl_fa *a = NULL;
  cl_status st = cl_fa_open(Rf_translateCharUTF8(STRING_ELT(path, 0)), Rf_asLogical(verify) == 1,
                            &a, err, sizeof err);
  R_CL_CHECK_MSG_FREE(err, st, UNPROTECT(1));
  R_SetExternalPtrAddr(ptr, a);
  UNPROTECT(1);
  return ptr;
}

SEXP ffi_fa_close(SEXP ptr) {
  r_fa(ptr);
  fa_finalize(ptr);
  return R_NilValue;
}

/* list(dtype, dims, scale, offset, checksum (16 hex digits), bytes) */
SEXP ffi_fa_info(SEXP ptr) {
  cl_fa_info in;
  cl_fa_get_info(r_fa(ptr), &in);
  const char *const names[] = {"dtype", "dims", "scale", "offset", "checksum", "bytes"};
  const char *const dtypes[] = {"float32", "float16", "uint8"};
  SEXP out = PROTECT(r_named_list(names, 6));
  SET_VECTOR_ELT(out, 0, Rf_mkString(dtypes[in.dtype]));
  SEXP dims = Rf_allocVector(REALSXP, 4);
  SET_VECTOR_ELT(out, 1, dims);
  for (int i = 0; i < 4; i++) REAL(dims)[i] = (double)in.dims[i];
  SET_VECTOR_ELT(out, 2, Rf_ScalarReal(in.scale));
  SET_VECTOR_ELT(out, 3, Rf_ScalarReal(in.offset));
  char hex[17];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)in.checksum);
  SET_VECTOR_ELT(out, 4, Rf_mkString(hex));
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal((double)in.data_bytes));
  UNPROTECT(1);
  return out;
}

/* starts: 1-based first frames (double); len frames each. A new array
 * [n, len, channels, height, width]. */
SEXP ffi_fa_read(SEXP ptr, SEXP starts, SEXP len) {
  cl_fa *a = r_fa(ptr);
  cl_fa_info in;
  cl_fa_get_info(a, &in);
  R_xlen_t n = XLENGTH(starts);
  int64_t L = (int64_t)Rf_asReal(len);
  if (n < 1 || n > INT_MAX || L < 1 || L > INT_MAX || in.dims[1] > INT_MAX ||
      in.dims[2] > INT_MAX || in.dims[3] > INT_MAX)
    r_raise_invalid("windows to read: at least one, of at least one frame");
  int dims[5] = {(int)n, (int)L, (int)in.dims[1], (int)in.dims[2], (int)in.dims[3]};
  SEXP out = PROTECT(r_alloc_array(5, dims));
  int64_t *s = (int64_t *)R_alloc((size_t)n, sizeof(int64_t));
  for (R_xlen_t i = 0; i < n; i++) s[i] = (int64_t)REAL(starts)[i] - 1;
  char err[ERR_LEN] = "";
  cl_status st = cl_fa_read_windows(a, s, (int64_t)n, L, REAL(out), err, sizeof err);
  R_CL_CHECK_MSG_FREE(err, st, UNPROTECT(1));
  UNPROTECT(1);
  return out;
}

SEXP ffi_fa_writer_open(SEXP path, SEXP dtype, SEXP dims, SEXP scale_offset) {
  SEXP ptr = PROTECT(r_new_handle(writer_tag(), R_NilValue, writer_finalize, NULL));
  int64_t d[4];
  for (int i = 0; i < 4; i++) d[i] = (int64_t)REAL(dims)[i];
  char err[ERR_LEN] = "";
  cl_fa_writer *w = NULL;
  cl_status st = cl_fa_writer_open(Rf_translateCharUTF8(STRING_ELT(path, 0)), Rf_asInteger(dtype),
                                   d, REAL(scale_offset)[0], REAL(scale_offset)[1], &w, err,
                                   sizeof err);
  R_CL_CHECK_MSG_FREE(err, st, UNPROTECT(1));
  R_SetExternalPtrAddr(ptr, w);
  UNPROTECT(1);
  return ptr;
}

/* x: a double array [k, channels, height, width]. On failure the write is
 * abandoned (its temporary file removed): no half file stays behind. */
SEXP ffi_fa_writer_append(SEXP ptr, SEXP x) {
  cl_fa_writer *w = r_writer(ptr);
  SEXP d = Rf_getAttrib(x, R_DimSymbol);
  char err[ERR_LEN] = "";
  cl_status st = cl_fa_writer_append(w, REAL(x), (int64_t)INTEGER(d)[0], err, sizeof err);
  if (st != CL_OK) writer_finalize(ptr);
  R_CL_CHECK_MSG(err, st);
  return R_NilValue;
}

SEXP ffi_fa_writer_finish(SEXP ptr) {
  cl_fa_writer *w = r_writer(ptr);
  R_ClearExternalPtr(ptr); /* finish frees w, whatever it returns */
  char err[ERR_LEN] = "";
  cl_status st = cl_fa_writer_finish(w, err, sizeof err);
  R_CL_CHECK_MSG(err, st);
  return R_NilValue;
}

SEXP ffi_fa_writer_abort(SEXP ptr) {
  if (TYPEOF(ptr) == EXTPTRSXP && R_ExternalPtrTag(ptr) == writer_tag()) writer_finalize(ptr);
  return R_NilValue;
}

/* ---- reading ahead (R/source_prefetch.R) ----
 *
 * A reader ahead of an open frame file: two staging slots, each list(x, y)
 * of R arrays made here, on R's thread, and kept in the handle's protected
 * list (with the file's handle, so that the file outlives it), and the one
 * read in flight, whose C thread (cl_fa_async) writes only into its slot's
 * two arrays. R reads a slot only after the read into it finished
 * (ffi_fa_ahead_take), and a slot is written again only for the batch
 * after next, when the step that read it is done. */
typedef struct {
  cl_fa_async *job;
  int slot;           /* the slot of the read in flight, or of the last one */
  cl_status status;   /* the last read's, kept from its wait to its take */
  char err[ERR_LEN];
} fa_ahead;

static SEXP ahead_tag(void) { return Rf_install("convlstm_frame_ahead"); }

static void ahead_wait(fa_ahead *h) {
  if (!h->job) return;
  h->status = cl_fa_async_finish(h->job, h->err, sizeof h->err);
  h->job = NULL;
}

static void ahead_finalize(SEXP ptr) {
  fa_ahead *h = (fa_ahead *)R_ExternalPtrAddr(ptr);
  if (h) ahead_wait(h);
  free(h);
  R_ClearExternalPtr(ptr);
}

static fa_ahead *r_ahead(SEXP ptr) {
  if (TYPEOF(ptr) != EXTPTRSXP || R_ExternalPtrTag(ptr) != ahead_tag())
    r_raise_invalid("not a frame file's reader ahead");
  fa_ahead *h = (fa_ahead *)R_ExternalPtrAddr(ptr);
  if (!h) r_raise(CL_E_STATE, "This reader ahead was closed; read the batch again.");
  return h;
}

SEXP ffi_fa_ahead_new(SEXP fa) {
  r_fa(fa);
  SEXP prot = PROTECT(Rf_allocVector(VECSXP, 3)); /* the file, slot 0, slot 1 */
  SET_VECTOR_ELT(prot, 0, fa);
  SEXP ptr = PROTECT(r_new_handle(ahead_tag(), prot, ahead_finalize, NULL));
  fa_ahead *h = calloc(1, sizeof *h);
  if (!h) r_raise(CL_E_OOM, "out of host memory for a reader ahead");
  R_SetExternalPtrAddr(ptr, h);
  UNPROTECT(2);
  return ptr;
}

/* The slot's array of these dims: the one it holds when its dims are
 * these, else a new one put in its place. */
static SEXP slot_array(SEXP slot, int at, int ndim, const int *dims) {
  SEXP v = VECTOR_ELT(slot, at);
  int same = v != R_NilValue;
  if (same) {
    SEXP d = Rf_getAttrib(v, R_DimSymbol);
    same = Rf_length(d) == ndim;
    for (int i = 0; same && i < ndim; i++) same = INTEGER(d)[i] == dims[i];
  }
  if (!same) SET_VECTOR_ELT(slot, at, v = r_alloc_array(ndim, dims));
  return v;
}

/* Starts reading n windows into slot (0 or 1): x's of len_x frames from the
 * 1-based frames starts_x, y's of len_y from starts_y. */
SEXP ffi_fa_ahead_start(SEXP ptr, SEXP slot, SEXP starts_x, SEXP len_x, SEXP starts_y,
                        SEXP len_y) {
  fa_ahead *h = r_ahead(ptr);
  SEXP prot = R_ExternalPtrProtected(ptr);
  cl_fa *a = r_fa(VECTOR_ELT(prot, 0));
  int s = Rf_asInteger(slot);
  R_xlen_t n = XLENGTH(starts_x);
  int64_t Lx = (int64_t)Rf_asReal(len_x), Ly = (int64_t)Rf_asReal(len_y);
  cl_fa_info in;
  cl_fa_get_info(a, &in);
  if (h->job || (s != 0 && s != 1) || n < 1 || n > INT_MAX || XLENGTH(starts_y) != n || Lx < 1 ||
      Lx > INT_MAX || Ly < 1 || Ly > INT_MAX || in.dims[1] > INT_MAX || in.dims[2] > INT_MAX ||
      in.dims[3] > INT_MAX)
    r_raise_invalid("a read ahead: slot 0 or 1, no read in flight, windows of one frame or more");
  SEXP pair = VECTOR_ELT(prot, 1 + s);
  if (pair == R_NilValue) {
    pair = Rf_allocVector(VECSXP, 2);
    SET_VECTOR_ELT(prot, 1 + s, pair);
  }
  int dx[5] = {(int)n, (int)Lx, (int)in.dims[1], (int)in.dims[2], (int)in.dims[3]};
  int dy[5] = {(int)n, (int)Ly, (int)in.dims[1], (int)in.dims[2], (int)in.dims[3]};
  double *out_x = REAL(slot_array(pair, 0, 5, dx));
  double *out_y = REAL(slot_array(pair, 1, 5, dy));
  int64_t *sx = (int64_t *)R_alloc((size_t)n, sizeof(int64_t));
  int64_t *sy = (int64_t *)R_alloc((size_t)n, sizeof(int64_t));
  for (R_xlen_t i = 0; i < n; i++) {
    sx[i] = (int64_t)REAL(starts_x)[i] - 1;
    sy[i] = (int64_t)REAL(starts_y)[i] - 1;
  }
  char err[ERR_LEN] = "";
  cl_status st = cl_fa_async_start(a, sx, Lx, sy, Ly, (int64_t)n, out_x, out_y, &h->job, err,
                                   sizeof err);
  R_CL_CHECK_MSG(err, st);
  h->slot = s;
  h->status = CL_OK;
  return R_NilValue;
}

/* Waits for the read in flight, if any, keeping its outcome for the take:
 * after a step, so that nothing reads the file while R's callbacks run. */
SEXP ffi_fa_ahead_wait(SEXP ptr) {
  ahead_wait(r_ahead(ptr));
  return R_NilValue;
}

/* The last read's slot, list(x, y), once it finished: its error raised
 * (the file truncated or changed before it read), and then the file
 * checked again (changed since: what it read is not the file's now). */
SEXP ffi_fa_ahead_take(SEXP ptr) {
  fa_ahead *h = r_ahead(ptr);
  ahead_wait(h);
  SEXP prot = R_ExternalPtrProtected(ptr);
  char err[ERR_LEN] = "";
  cl_status st = h->status;
  h->status = CL_OK;
  if (st != CL_OK) r_raise(st, h->err);
  st = cl_fa_check(r_fa(VECTOR_ELT(prot, 0)), err, sizeof err);
  R_CL_CHECK_MSG(err, st);
  SEXP pair = VECTOR_ELT(prot, 1 + h->slot);
  if (pair == R_NilValue) r_raise(CL_E_STATE, "nothing was read ahead");
  const char *const names[] = {"x", "y"};
  SEXP out = PROTECT(r_named_list(names, 2));
  SET_VECTOR_ELT(out, 0, VECTOR_ELT(pair, 0));
  SET_VECTOR_ELT(out, 1, VECTOR_ELT(pair, 1));
  UNPROTECT(1);
  return out;
}
