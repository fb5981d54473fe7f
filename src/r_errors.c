/*
 * r_errors.c -- turns a core status and message into a classed R condition.
 *
 * The condition is built in R (signal_core_error() in R/errors.R), as curl
 * does with raise_libcurl_error, so that its classes and wording live next to
 * the R layer's own argument errors and users can catch
 * convlstm_error_oom, convlstm_error_invalid, ... with tryCatch().
 *
 * It is not a cleanup mechanism: the error longjmps, so every caller frees
 * whatever C memory it owns before calling r_raise*().
 */
#include <stdarg.h>
#include <stdio.h>

#include "r_convlstm.h"

void r_raise(cl_status s, const char *msg) {
  int nprotect = 0;
  SEXP ns = PROTECT(R_FindNamespace(PROTECT(Rf_mkString("convlstm"))));
  nprotect += 2;
  SEXP status = PROTECT(Rf_mkString(cl_status_name(s)));
  nprotect++;
  SEXP message = PROTECT(Rf_mkString(msg != NULL ? msg : ""));
  nprotect++;
  SEXP call = PROTECT(Rf_lang3(Rf_install("signal_core_error"), status, message));
  nprotect++;
  Rf_eval(call, ns);
  /* signal_core_error() always signals; this is only reached if it was
   * redefined to return. */
  UNPROTECT(nprotect);
  Rf_error("%s", msg != NULL ? msg : "convlstm: unknown error");
}

void r_raise_model(cl_status s, const cl_model *m) {
  const char *msg = m != NULL ? cl_model_error(m) : "";
  r_raise(s, msg);
}

void r_raise_invalid(const char *fmt, ...) {
  char buf[CL_ERRMSG_LEN];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  r_raise(CL_E_INVALID, buf);
}
