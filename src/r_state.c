/*
 * r_state.c -- the state a model carries between train_step(state =
 * "carry") calls, from R: forgetting it (reset_state()) and asking its shape
 * (carried_state()). The state itself stays in the core (core/state.c).
 */
#include "r_convlstm.h"

SEXP ffi_reset_state(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_reset_state(m);
  R_CL_CHECK(m, st);
  return R_NilValue;
}

/* NULL, or c(batch, height, width) of the carried state. */
SEXP ffi_carried_state(SEXP ptr) {
  cl_model *m = r_model(ptr);
  int B, H, W;
  if (!cl_model_carried_state(m, &B, &H, &W)) return R_NilValue;
  SEXP out = Rf_allocVector(INTSXP, 3);
  INTEGER(out)[0] = B;
  INTEGER(out)[1] = H;
  INTEGER(out)[2] = W;
  return out;
}
