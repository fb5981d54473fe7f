/*
 * r_params.c -- parameters and their gradients as R arrays, under torch's
 * state-dict names and shapes (cell_list.<l>.conv.weight [4h, in+h, k, k],
 * cell_list.<l>.conv.bias [4h]).
 *
 * The core hands out row-major float tensors; R arrays are column-major
 * doubles with the same logical dims, so torch's w[o, i, kh, kw] equals R's
 * w[o + 1, i + 1, kh + 1, kw + 1] and weights move between this package, R
 * torch and PyTorch unchanged. It is not where names and shapes of a
 * user-supplied state dict are checked: R/state_dict.R does that, with
 * messages that name the offending entry.
 */
#include <string.h>

#include "r_convlstm.h"

/* Host staging buffers come from R_alloc: R reclaims them when the .Call
 * returns or raises, so no error path can leak them. */
static float *stage(size_t n) { return (float *)R_alloc(n > 0 ? n : 1, sizeof(float)); }

static size_t n_elements(int ndim, const int *dims) {
  size_t n = 1;
  for (int d = 0; d < ndim; d++) n *= (size_t)dims[d];
  return n;
}

/* Name and shape of tensor i; on failure releases the caller's nprotect
 * protections and raises. */
static const char *tensor_info(cl_model *m, int i, int *ndim, int dims[4], int nprotect) {
  const char *name = NULL;
  *ndim = 0;
  dims[0] = dims[1] = dims[2] = dims[3] = 0;
  cl_status st = cl_model_tensor_info(m, i, &name, ndim, dims);
  R_CL_CHECK_FREE(m, st, UNPROTECT(nprotect));
  return name;
}

SEXP ffi_tensor_info(SEXP ptr) {
  cl_model *m = r_model(ptr);
  int nprotect = 0;
  int n = cl_model_n_tensors(m);
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
  nprotect++;
  SEXP shapes = PROTECT(Rf_allocVector(VECSXP, n));
  nprotect++;
  for (int i = 0; i < n; i++) {
    int ndim, dims[4];
    const char *name = tensor_info(m, i, &ndim, dims, nprotect);
    SET_STRING_ELT(names, i, Rf_mkChar(name));
    SEXP d = Rf_allocVector(INTSXP, ndim);
    SET_VECTOR_ELT(shapes, i, d);
    for (int k = 0; k < ndim; k++) INTEGER(d)[k] = dims[k];
  }
  Rf_setAttrib(shapes, R_NamesSymbol, names);
  UNPROTECT(nprotect);
  return shapes;
}

SEXP ffi_get_tensors(SEXP ptr, SEXP grad) {
  cl_model *m = r_model(ptr);
  int want_grad = Rf_asLogical(grad) == TRUE;
  int nprotect = 0;
  int n = cl_model_n_tensors(m);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n));
  nprotect++;
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
  nprotect++;
  for (int i = 0; i < n; i++) {
    int ndim, dims[4];
    const char *name = tensor_info(m, i, &ndim, dims, nprotect);
    SET_STRING_ELT(names, i, Rf_mkChar(name));
    size_t len = n_elements(ndim, dims);
    float *buf = stage(len);
    cl_status st = want_grad ? cl_model_get_grad(m, name, buf, len) : cl_model_get_param(m, name, buf, len);
    R_CL_CHECK_FREE(m, st, UNPROTECT(nprotect));
    /* A 1-d tensor (a bias) becomes a plain vector, as torch's as_array()
     * gives it; higher ranks keep their dims. */
    SEXP arr = ndim == 1 ? Rf_allocVector(REALSXP, (R_xlen_t)len) : r_alloc_array(ndim, dims);
    SET_VECTOR_ELT(out, i, arr);
    r_row_major_to_r(buf, ndim, dims, REAL(arr));
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(nprotect);
  return out;
}

/* tensors: a named list of double vectors/arrays whose names and lengths
 * the R layer has already matched against ffi_tensor_info(). */
SEXP ffi_set_tensors(SEXP ptr, SEXP tensors) {
  cl_model *m = r_model(ptr);
  if (TYPEOF(tensors) != VECSXP) r_raise_invalid("`state_dict` must be a list");
  SEXP names = Rf_getAttrib(tensors, R_NamesSymbol);
  if (TYPEOF(names) != STRSXP) r_raise_invalid("`state_dict` must be a named list");
  int n = cl_model_n_tensors(m);
  for (int j = 0; j < Rf_length(tensors); j++) {
    const char *want = CHAR(STRING_ELT(names, j));
    SEXP val = VECTOR_ELT(tensors, j);
    int ndim = 0, dims[4] = {0, 0, 0, 0}, found = 0;
    for (int i = 0; i < n && !found; i++) found = strcmp(tensor_info(m, i, &ndim, dims, 0), want) == 0;
    if (!found) r_raise_invalid("`state_dict` has an unknown entry \"%s\"", want);
    size_t len = n_elements(ndim, dims);
    if (TYPEOF(val) != REALSXP || (size_t)XLENGTH(val) != len)
      r_raise_invalid("`state_dict$%s` must be a double array of %zu elements", want, len);
    float *buf = stage(len);
    r_r_to_row_major(REAL(val), ndim, dims, buf);
    cl_status st = cl_model_set_param(m, want, buf, len);
    R_CL_CHECK(m, st);
  }
  return R_NilValue;
}
