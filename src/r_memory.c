/*
 * r_memory.c -- the model's memory accounting as R values: per category
 * current and peak bytes and allocation counts, what the allocator reserves,
 * and what the device reports free and in total; the model's memory limit.
 *
 * It is not the planner's estimate (r_plan.c): the per-category numbers are
 * the allocator's counts of what the plan took; process_rss / process_peak
 * (VmRSS / VmHWM) and device_used (the driver's total - free) are measured
 * outside it. Byte counts are returned as
 * doubles, exact up to 2^53 bytes.
 */
#include "r_convlstm.h"

SEXP ffi_memory_stats(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_mem_stats s;
  cl_status st = cl_model_memory_stats(m, &s);
  R_CL_CHECK(m, st);
  cl_measured_mem mm;
  (void)cl_model_measured_memory(m, &mm);

  int nprotect = 0;
  const int K = CL_MEM_NCAT;
  SEXP cats = PROTECT(Rf_allocVector(STRSXP, K));
  nprotect++;
  SEXP cur = PROTECT(Rf_allocVector(REALSXP, K));
  nprotect++;
  SEXP peak = PROTECT(Rf_allocVector(REALSXP, K));
  nprotect++;
  SEXP nal = PROTECT(Rf_allocVector(REALSXP, K));
  nprotect++;
  SEXP nfr = PROTECT(Rf_allocVector(REALSXP, K));
  nprotect++;
  for (int c = 0; c < K; c++) {
    SET_STRING_ELT(cats, c, Rf_mkChar(cl_mem_category_name((cl_mem_category)c)));
    REAL(cur)[c] = (double)s.current[c];
    REAL(peak)[c] = (double)s.peak[c];
    REAL(nal)[c] = (double)s.n_alloc[c];
    REAL(nfr)[c] = (double)s.n_free[c];
  }
  const char *const names[] = {"category",       "current",  "peak",          "n_alloc",
                         "n_free",         "allocated", "peak_allocated", "reserved",
                         "peak_reserved",  "limit",    "device_free",   "device_total",
                         "process_rss",    "process_peak", "device_used", "device_used_change",
                         "measured_note",  "runtime", "cuda_graphs"};
  SEXP out = PROTECT(r_named_list(names, (int)(sizeof names / sizeof names[0])));
  nprotect++;
  SET_VECTOR_ELT(out, 0, cats);
  SET_VECTOR_ELT(out, 1, cur);
  SET_VECTOR_ELT(out, 2, peak);
  SET_VECTOR_ELT(out, 3, nal);
  SET_VECTOR_ELT(out, 4, nfr);
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal((double)s.allocated));
  SET_VECTOR_ELT(out, 6, Rf_ScalarReal((double)s.peak_allocated));
  SET_VECTOR_ELT(out, 7, Rf_ScalarReal((double)s.reserved));
  SET_VECTOR_ELT(out, 8, Rf_ScalarReal((double)s.peak_reserved));
  SET_VECTOR_ELT(out, 9, Rf_ScalarReal((double)s.limit));
  SET_VECTOR_ELT(out, 10, Rf_ScalarReal((double)s.device_free));
  SET_VECTOR_ELT(out, 11, Rf_ScalarReal((double)s.device_total));
  /* measured by the OS and the driver; NA where they cannot say */
  SET_VECTOR_ELT(out, 12, Rf_ScalarReal(mm.have_process ? (double)mm.process_rss : NA_REAL));
  SET_VECTOR_ELT(out, 13, Rf_ScalarReal(mm.have_process ? (double)mm.process_peak : NA_REAL));
  SET_VECTOR_ELT(out, 14, Rf_ScalarReal(mm.have_device ? (double)mm.device_used : NA_REAL));
  SET_VECTOR_ELT(out, 15, Rf_ScalarReal(mm.have_device ? (double)mm.device_used -
                                                             (double)mm.device_used_at_create
                                                       : NA_REAL));
  SET_VECTOR_ELT(out, 16, Rf_mkString(mm.why));
  SET_VECTOR_ELT(out, 17, Rf_ScalarReal((double)mm.runtime));
  /* one training step as one CUDA graph (CONVLSTM_CUDA_GRAPHS=1): what it did */
  cl_graph_info gi;
  cl_model_graph_info(m, &gi);
  const char *const gnames[] = {"asked", "on", "captured", "replayed", "plain", "held", "bytes",
                                "off"};
  SEXP g = PROTECT(r_named_list(gnames, (int)(sizeof gnames / sizeof gnames[0])));
  nprotect++;
  SET_VECTOR_ELT(g, 0, Rf_ScalarLogical(gi.asked));
  SET_VECTOR_ELT(g, 1, Rf_ScalarLogical(gi.on));
  SET_VECTOR_ELT(g, 2, Rf_ScalarReal((double)gi.captured));
  SET_VECTOR_ELT(g, 3, Rf_ScalarReal((double)gi.replayed));
  SET_VECTOR_ELT(g, 4, Rf_ScalarReal((double)gi.plain));
  SET_VECTOR_ELT(g, 5, Rf_ScalarInteger(gi.held));
  SET_VECTOR_ELT(g, 6, Rf_ScalarReal((double)gi.bytes));
  SET_VECTOR_ELT(g, 7, Rf_mkString(gi.off));
  SET_VECTOR_ELT(out, 18, g);
  UNPROTECT(nprotect);
  return out;
}

SEXP ffi_memory_reset_peak(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_model_reset_peak(m);
  return R_NilValue;
}

SEXP ffi_empty_cache(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_empty_cache(m);
  R_CL_CHECK(m, st);
  return R_NilValue;
}

/* Test-only (CONVLSTM_GUARD=1 models): a deliberate write past a step
 * buffer, so that tests see the guard bands catch it. */
SEXP ffi_test_overrun(SEXP ptr, SEXP buffer) {
  cl_model *m = r_model(ptr);
  if (TYPEOF(buffer) != STRSXP || Rf_length(buffer) != 1 || STRING_ELT(buffer, 0) == NA_STRING)
    r_raise_invalid("internal: ffi_test_overrun() needs a buffer name");
  cl_status st = cl_model_test_overrun(m, CHAR(STRING_ELT(buffer, 0)));
  R_CL_CHECK(m, st);
  return R_NilValue;
}

/* Test-only: c(address, bytes) of the step arena, as doubles (exact below
 * 2^53, above any user-space address), for tests/testthat/scripts/hwm-probe.R. */
SEXP ffi_test_arena(SEXP ptr) {
  cl_model *m = r_model(ptr);
  size_t base = 0, bytes = 0;
  cl_status st = cl_model_test_arena(m, &base, &bytes);
  R_CL_CHECK(m, st);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(out)[0] = (double)base;
  REAL(out)[1] = (double)bytes;
  UNPROTECT(1);
  return out;
}

/* bytes <= 0: no limit beyond the device's capacity. */
SEXP ffi_set_memory_limit(SEXP ptr, SEXP bytes) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_set_memory_limit(m, r_bytes(bytes, "bytes"));
  R_CL_CHECK(m, st);
  return R_NilValue;
}
