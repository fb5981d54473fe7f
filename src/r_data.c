/*
 * r_data.c -- data sets on the device from R: a classed external pointer to
 * a cl_data (core/data.c), with a finalizer and an explicit release, and the
 * training step on its rows.
 *
 * Lifetime: the core's model owns its data sets (cl_model_free frees them),
 * so the data set's pointer keeps the model's pointer in its protected slot.
 * That keeps the model from being collected while a data set refers to it,
 * and lets every use see when the model was released (which freed the data
 * set): the model's pointer is then cleared, and the data set's address is
 * never followed again. Serialisation drops both addresses; the slot then
 * tells a restored data set from one released on purpose ("released").
 *
 * It is not where arguments are checked for the user (R/data.R does, with
 * 1-based rows); the core's checks are the backstop.
 */
#include <string.h>

#include "r_convlstm.h"

static SEXP data_tag(void) { return Rf_install("convlstm_data"); }

static int is_data_ptr(SEXP ptr) {
  return TYPEOF(ptr) == EXTPTRSXP && R_ExternalPtrTag(ptr) == data_tag();
}

/* The model pointer in the protected slot; R_NilValue after a release. */
static SEXP owner_of(SEXP ptr) {
  SEXP p = R_ExternalPtrProtected(ptr);
  return TYPEOF(p) == EXTPTRSXP ? p : R_NilValue;
}

static int owner_live(SEXP ptr) {
  SEXP owner = owner_of(ptr);
  return owner != R_NilValue && R_ExternalPtrAddr(owner) != NULL;
}

static void data_finalize(SEXP ptr) {
  cl_data *d = (cl_data *)R_ExternalPtrAddr(ptr);
  if (d == NULL) return;
  /* a released (or collected) model has freed d already */
  if (owner_live(ptr)) cl_data_free(d);
  R_ClearExternalPtr(ptr);
}

/* The live data set behind ptr, or a state error that says why there is
 * none. */
static cl_data *r_data(SEXP ptr) {
  if (!is_data_ptr(ptr)) r_raise_invalid("`data` is not a data set made by convlstm_data()");
  cl_data *d = (cl_data *)R_ExternalPtrAddr(ptr);
  if (d != NULL && owner_live(ptr)) return d;
  if (d == NULL && owner_of(ptr) == R_NilValue)
    r_raise(CL_E_STATE,
            "This data set was released and holds no memory any more; create it again with "
            "convlstm_data().");
  if (d == NULL)
    r_raise(CL_E_STATE,
            "This data set has no device memory: it was restored by readRDS(), load() or a "
            "saved workspace, which cannot store it. Create it again with convlstm_data().");
  r_raise(CL_E_STATE,
          "The model of this data set was released with convlstm_release(), which freed the data "
          "set too; create the model and the data set again.");
}

SEXP ffi_data_create(SEXP ptr, SEXP x, SEXP y, SEXP target) {
  cl_model *m = r_model(ptr);
  cl_target tg = r_target(target);
  cl_host_array hx, hy;
  r_host_array(x, 5, "x", &hx);
  r_host_array(y, tg == CL_TARGET_SEQUENCE ? 5 : 4, "y", &hy);
  int nprotect = 0;
  SEXP dptr = PROTECT(r_new_handle(data_tag(), ptr, data_finalize, "convlstm_data_ptr"));
  nprotect++;
  cl_data *d = NULL;
  cl_status st = cl_data_create(m, &hx, &hy, tg, &d);
  R_CL_CHECK_FREE(m, st, UNPROTECT(nprotect));
  R_SetExternalPtrAddr(dptr, d);
  UNPROTECT(nprotect);
  return dptr;
}

/* TRUE when this call freed device memory. */
SEXP ffi_data_release(SEXP ptr) {
  if (!is_data_ptr(ptr)) r_raise_invalid("`data` is not a data set made by convlstm_data()");
  cl_data *d = (cl_data *)R_ExternalPtrAddr(ptr);
  int freed = d != NULL && owner_live(ptr);
  if (freed) cl_data_free(d);
  if (d != NULL || owner_of(ptr) != R_NilValue) {
    R_ClearExternalPtr(ptr);
    R_SetExternalPtrProtected(ptr, R_NilValue);
  }
  return Rf_ScalarLogical(freed);
}

/* "live", "released", "model released" or "restored", without raising. */
SEXP ffi_data_status(SEXP ptr) {
  if (!is_data_ptr(ptr)) r_raise_invalid("`data` is not a data set made by convlstm_data()");
  cl_data *d = (cl_data *)R_ExternalPtrAddr(ptr);
  if (d != NULL) return Rf_mkString(owner_live(ptr) ? "live" : "model released");
  return Rf_mkString(owner_of(ptr) == R_NilValue ? "released" : "restored");
}

/* list(bytes, dtype): what the print method shows beside the shapes. */
SEXP ffi_data_info(SEXP ptr) {
  cl_data *d = r_data(ptr);
  cl_dtype t = cl_data_dtype(d);
  const char *const names[] = {"bytes", "dtype"};
  SEXP out = PROTECT(r_named_list(names, 2));
  SET_VECTOR_ELT(out, 0, Rf_ScalarReal((double)cl_data_bytes(d)));
  SET_VECTOR_ELT(out, 1, Rf_mkString(cl_dtype_name(t)));
  UNPROTECT(1);
  return out;
}

SEXP ffi_data_alive(void) { return Rf_ScalarInteger(cl_data_alive()); }

/* shape: c(N, T, H, W), or c(N, T, H, W, K) for y of K steps (an
 * encoder-forecaster's frames); target: 0 last state, 1 sequence. Bytes as
 * a double (exact up to 2^53); 0 when the sizes overflow. */
SEXP ffi_data_bytes_for(SEXP ptr, SEXP shape, SEXP target) {
  cl_model *m = r_model(ptr);
  if (TYPEOF(shape) != INTSXP || (Rf_length(shape) != 4 && Rf_length(shape) != 5))
    r_raise_invalid("internal: ffi_data_bytes_for() needs c(rows, time, height, width[, K])");
  const int *s = INTEGER(shape);
  cl_target tg = r_target(target);
  int K = Rf_length(shape) == 5 ? s[4] : s[1];
  return Rf_ScalarReal((double)cl_data_bytes_for_steps(m, s[0], s[1], K, s[2], s[3], tg));
}

/* rows: 0-based integer row indices (R/ffi.R converts from R's 1-based). */
SEXP ffi_train_step_data(SEXP ptr, SEXP dptr, SEXP rows, SEXP opt, SEXP opts) {
  cl_model *m = r_model(ptr);
  cl_data *d = r_data(dptr);
  if (R_ExternalPtrAddr(owner_of(dptr)) != m)
    r_raise_invalid("this data set was made by convlstm_data() for another model");
  if (TYPEOF(rows) != INTSXP) r_raise_invalid("internal: `rows` must be an integer vector");
  R_xlen_t n = XLENGTH(rows);
  if (n > INT32_MAX) r_raise_invalid("`rows` is too long (%.0f)", (double)n);
  cl_optim o;
  r_optim(opt, &o);
  cl_step_options so;
  cl_host_array sb[R_OPT_ARRAYS];
  r_step_options(opts, &so, sb);
  int N, T, H, W;
  cl_data_shape(d, &N, &T, &H, &W);
  r_dropout_masks(m, opts, (int)n, H, W, &so);
  double loss = 0;
  cl_status st = cl_model_train_step_data(m, d, INTEGER(rows), (int)n, &o, &so, &loss);
  R_CL_CHECK(m, st);
  return r_step_loss(m, loss);
}
