/*
 * r_capability.c -- the core's capability table (cl_capability_row) as R
 * columns, and one option asked of a model's kind (cl_model_capability),
 * its refusal the core's own status and message. R/capabilities.R reads
 * both; no R code writes a refusal of its own.
 */
#include "r_convlstm.h"

SEXP ffi_capabilities(void) {
  int n = cl_capability_count();
  const char *const names[] = {"option", "model", "supported", "status", "reason"};
  SEXP out = PROTECT(r_named_list(names, 5));
  SEXP col[5] = {Rf_allocVector(STRSXP, n), Rf_allocVector(STRSXP, n),
                 Rf_allocVector(LGLSXP, n), Rf_allocVector(STRSXP, n),
                 Rf_allocVector(STRSXP, n)};
  for (int j = 0; j < 5; j++) SET_VECTOR_ELT(out, j, col[j]);
  for (int i = 0; i < n; i++) {
    cl_capability r;
    if (cl_capability_row(i, &r) != CL_OK) r_raise(CL_E_INTERNAL, "capability row out of range");
    SET_STRING_ELT(col[0], i, Rf_mkChar(r.option));
    SET_STRING_ELT(col[1], i, Rf_mkChar(r.model));
    LOGICAL(col[2])[i] = r.supported;
    SET_STRING_ELT(col[3], i, Rf_mkChar(cl_status_name(r.status)));
    SET_STRING_ELT(col[4], i, Rf_mkChar(r.reason));
  }
  UNPROTECT(1);
  return out;
}

SEXP ffi_model_capability(SEXP ptr, SEXP option) {
  cl_model *m = r_model(ptr);
  if (!Rf_isString(option) || Rf_length(option) != 1 || STRING_ELT(option, 0) == NA_STRING)
    r_raise_invalid("`option` must be a single string");
  cl_status s = cl_model_capability(m, CHAR(STRING_ELT(option, 0)));
  if (s != CL_OK) r_raise_model(s, m);
  return R_NilValue;
}
