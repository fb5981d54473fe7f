/*
 * r_arrays.c -- R arrays at the boundary: describing an R double array as a
 * core host array (no copy: the core converts batch-first column-major
 * doubles to its own layout in one pass), allocating result arrays, and the
 * row-major <-> column-major transposition that parameter tensors need, and
 * the element of a named list by name (r_option: what crosses .Call as
 * names, decoded by r_options.c and r_dropout.c).
 *
 * It is not where types are coerced: the R layer hands over double arrays
 * only (storage.mode<- in R), so a wrong type here is a bug in the R layer
 * and is reported as an invalid argument rather than silently copied.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "r_convlstm.h"

/* 1 when every v[i] is finite and within a float's range: what crosses to
 * the core as a float stays a number. A NaN fails the comparison. In
 * blocks, so that a bad value stops the scan soon, and so that the loop
 * inside is one the compiler vectorizes. */
static int doubles_in_float(const double *v, R_xlen_t n) {
  enum { BLOCK = 4096 };
  for (R_xlen_t b = 0; b < n; b += BLOCK) {
    const R_xlen_t e = n - b < BLOCK ? n : b + BLOCK;
    int bad = 0;
    for (R_xlen_t i = b; i < e; i++) bad |= !(fabs(v[i]) <= (double)FLT_MAX);
    if (bad) return 0;
  }
  return 1;
}

static int ints_not_na(const int *v, R_xlen_t n) {
  for (R_xlen_t i = 0; i < n; i++)
    if (v[i] == NA_INTEGER) return 0;
  return 1;
}

/* check_finite()'s fast path (R/errors.R), one pass over x in place: TRUE
 * when a double, integer or logical x has no NA, NaN or Inf and no value
 * beyond a float's range; FALSE otherwise (and for other types), and R
 * then finds what is wrong and says so. min(), max() and anyNA() read a
 * batch three times: 3.6 ms of each training step of the plain stack. */
SEXP ffi_float_finite(SEXP x) {
  const R_xlen_t n = Rf_xlength(x);
  switch (TYPEOF(x)) {
  case REALSXP: return Rf_ScalarLogical(doubles_in_float(REAL_RO(x), n));
  case INTSXP: return Rf_ScalarLogical(ints_not_na(INTEGER_RO(x), n));
  case LGLSXP: return Rf_ScalarLogical(ints_not_na(LOGICAL_RO(x), n));
  default: return Rf_ScalarLogical(0);
  }
}

SEXP r_option(SEXP x, const char *name) {
  SEXP names = Rf_getAttrib(x, R_NamesSymbol);
  if (TYPEOF(x) != VECSXP || TYPEOF(names) != STRSXP) return R_NilValue;
  for (R_xlen_t i = 0; i < Rf_xlength(x); i++)
    if (strcmp(CHAR(STRING_ELT(names, i)), name) == 0) return VECTOR_ELT(x, i);
  return R_NilValue;
}

void r_host_array(SEXP x, int ndim, const char *arg, cl_host_array *out) {
  if (TYPEOF(x) != REALSXP)
    r_raise_invalid("`%s` must be a double array", arg);
  SEXP dim = Rf_getAttrib(x, R_DimSymbol);
  if (TYPEOF(dim) != INTSXP || Rf_length(dim) != ndim)
    r_raise_invalid("`%s` must be an array with %d dimensions", arg, ndim);
  out->data = REAL(x);
  out->format = CL_HOST_R_F64;
  out->ndim = ndim;
  for (int i = 0; i < 5; i++) out->dims[i] = i < ndim ? INTEGER(dim)[i] : 0;
}

/* A configuration's kernels and dilations, integer [CL_R_GEOMETRY_ROWS,
 * n_layers] (rows: kernel height, width, dilation height, width, recurrent
 * kernel height, width), as ffi_model_create takes them; defaults (0)
 * resolved. */
SEXP r_geometry(const cl_config *c) {
  SEXP out = PROTECT(Rf_allocMatrix(INTSXP, CL_R_GEOMETRY_ROWS, c->n_layers));
  for (int l = 0; l < c->n_layers; l++) {
    int *col = INTEGER(out) + CL_R_GEOMETRY_ROWS * l;
    int kw = c->kernel_widths[l] ? c->kernel_widths[l] : c->kernel_sizes[l];
    int rk = c->recurrent_kernel_sizes[l], rkw = c->recurrent_kernel_widths[l];
    col[0] = c->kernel_sizes[l];
    col[1] = kw;
    col[2] = c->dilation_h[l] ? c->dilation_h[l] : 1;
    col[3] = c->dilation_w[l] ? c->dilation_w[l] : 1;
    col[4] = rk ? rk : c->kernel_sizes[l];
    col[5] = rk ? (rkw ? rkw : rk) : kw;
  }
  UNPROTECT(1);
  return out;
}

SEXP r_peephole(const cl_config *c) {
  SEXP out = Rf_allocVector(INTSXP, 3);
  INTEGER(out)[0] = c->peephole;
  INTEGER(out)[1] = c->peephole_h;
  INTEGER(out)[2] = c->peephole_w;
  return out;
}

SEXP r_alloc_array(int ndim, const int *dims) {
  R_xlen_t n = 1;
  for (int i = 0; i < ndim; i++) n *= dims[i];
  SEXP x = PROTECT(Rf_allocVector(REALSXP, n));
  SEXP dim = PROTECT(Rf_allocVector(INTSXP, ndim));
  for (int i = 0; i < ndim; i++) INTEGER(dim)[i] = dims[i];
  Rf_setAttrib(x, R_DimSymbol, dim);
  UNPROTECT(2);
  return x;
}

/* Column-major offset of the row-major element whose multi-index is idx:
 * both orders walk the same logical index, only the strides differ. Walking
 * the row-major source in order and keeping an odometer of the index costs
 * one add per element in the common case. */
static void transpose_walk(int ndim, const int *dims, const float *fsrc, float *fdst,
                           const double *dsrc, double *ddst) {
  size_t cstride[8];
  int idx[8] = {0};
  size_t n = 1, s = 1;
  for (int d = 0; d < ndim; d++) {
    cstride[d] = s;
    s *= (size_t)dims[d];
    n *= (size_t)dims[d];
  }
  size_t off = 0; /* column-major offset of idx */
  for (size_t r = 0; r < n; r++) {
    if (fsrc != NULL)
      ddst[off] = (double)fsrc[r];
    else
      fdst[r] = (float)dsrc[off];
    /* advance the row-major odometer: the last index moves fastest */
    for (int d = ndim - 1; d >= 0; d--) {
      if (++idx[d] < dims[d]) {
        off += cstride[d];
        break;
      }
      off -= cstride[d] * (size_t)(dims[d] - 1);
      idx[d] = 0;
    }
  }
}

void r_row_major_to_r(const float *src, int ndim, const int *dims, double *dst) {
  transpose_walk(ndim, dims, src, NULL, NULL, dst);
}

void r_r_to_row_major(const double *src, int ndim, const int *dims, float *dst) {
  transpose_walk(ndim, dims, NULL, dst, src, NULL);
}

SEXP r_named_list(const char *const *names, int n) {
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n));
  SEXP nms = PROTECT(Rf_allocVector(STRSXP, n));
  for (int i = 0; i < n; i++) SET_STRING_ELT(nms, i, Rf_mkChar(names[i]));
  Rf_setAttrib(out, R_NamesSymbol, nms);
  UNPROTECT(2);
  return out;
}
