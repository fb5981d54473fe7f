/*
 * r_train.c -- forward, loss, backward and optimizer calls from R, one
 * .Call each, and train_step, which runs all of them in one.
 *
 * Inputs go to the core as R double arrays, untouched (the core converts
 * batch-first column-major to its layout in one pass). Outputs are allocated
 * here as R arrays first and then filled by the core, so no C buffer is held
 * while R allocates. It is not where shapes are checked for the user: the R
 * layer does that with messages naming the argument; the core's own checks
 * are the backstop.
 */
#include <string.h>

#include "r_convlstm.h"

/* Optimizer hyperparameters travel as c(kind, lr, beta1, beta2, eps,
 * momentum, weight_decay) -- see c_optim() in R/ffi.R. */
void r_optim(SEXP opt, cl_optim *out) {
  if (TYPEOF(opt) != REALSXP || Rf_length(opt) != 7)
    r_raise_invalid("`optimizer` must be made by optimizer_adam() or optimizer_sgd()");
  const double *v = REAL(opt);
  memset(out, 0, sizeof *out);
  out->kind = (int)v[0] == CL_OPTIM_SGD ? CL_OPTIM_SGD : CL_OPTIM_ADAM;
  out->lr = v[1];
  out->beta1 = v[2];
  out->beta2 = v[3];
  out->eps = v[4];
  out->momentum = v[5];
  out->weight_decay = v[6];
}

const cl_optim *r_optim_or_null(SEXP opt, cl_optim *buf) {
  if (opt == R_NilValue) return NULL;
  r_optim(opt, buf);
  return buf;
}

/* The inverse of r_optim (an unprotected new vector). */
SEXP r_optim_vector(const cl_optim *o) {
  SEXP v = Rf_allocVector(REALSXP, 7);
  double *d = REAL(v);
  d[0] = o->kind;
  d[1] = o->lr;
  d[2] = o->beta1;
  d[3] = o->beta2;
  d[4] = o->eps;
  d[5] = o->momentum;
  d[6] = o->weight_decay;
  return v;
}

/* Step options travel as c(checkpoint, tbptt, accumulation_steps, outputs,
 * plan_dtype) -- see c_step_options() in R/ffi.R; plan_dtype 0 is the
 * model's own storage, 1 + a cl_dtype another one. */
void r_step_options(SEXP opts, cl_step_options *out) {
  memset(out, 0, sizeof *out);
  if (opts == R_NilValue) return;
  if (TYPEOF(opts) != INTSXP || Rf_length(opts) != 5)
    r_raise_invalid("internal: step options must be c(checkpoint, tbptt, accumulation_steps, "
                    "outputs, plan_dtype)");
  const int *v = INTEGER(opts);
  out->checkpoint = v[0];
  out->tbptt = v[1];
  out->accumulation_steps = v[2];
  out->outputs = v[3] == 1 ? CL_OUTPUTS_LAST : CL_OUTPUTS_ALL;
  out->plan_dtype = v[4];
}

static cl_target r_target(SEXP target) {
  return Rf_asInteger(target) == 1 ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
}

static SEXP read_output(cl_model *m, int layer, int B, int T, int C, int H, int W) {
  int dims[5] = {B, T, C, H, W};
  SEXP arr = PROTECT(r_alloc_array(5, dims));
  cl_host_array h = {REAL(arr), CL_HOST_R_F64, 5, {B, T, C, H, W}};
  cl_status st = cl_model_read_output(m, layer, &h);
  if (st != CL_OK) {
    UNPROTECT(1);
    r_raise_model(st, m);
  }
  UNPROTECT(1);
  return arr;
}

static SEXP read_state(cl_model *m, int layer, int which, int B, int C, int H, int W) {
  int dims[4] = {B, C, H, W};
  SEXP arr = PROTECT(r_alloc_array(4, dims));
  cl_host_array h = {REAL(arr), CL_HOST_R_F64, 4, {B, C, H, W, 0}};
  cl_status st = cl_model_read_state(m, layer, which, &h);
  if (st != CL_OK) {
    UNPROTECT(1);
    r_raise_model(st, m);
  }
  UNPROTECT(1);
  return arr;
}

/* what: 0 = list(layer_outputs, layer_last_states) for every layer, as the
 * R torch tutorial's model returns; 1 = the last layer's output sequence;
 * 2 = the last layer's last h; 3 = nothing (the caller only wants the
 * activations kept for backward); 4 = list(layer_outputs = list(),
 * layer_last_states) (for an inference forward that kept only the last
 * states, opts outputs = CL_OUTPUTS_LAST). */
SEXP ffi_forward(SEXP ptr, SEXP x, SEXP training, SEXP what, SEXP opts) {
  cl_model *m = r_model(ptr);
  cl_host_array hx;
  r_host_array(x, 5, "x", &hx);
  int train = Rf_asLogical(training) == TRUE;
  int mode = Rf_asInteger(what);
  cl_step_options so;
  r_step_options(opts, &so);
  cl_status st = cl_model_forward(m, &hx, train, &so);
  if (st != CL_OK) r_raise_model(st, m);
  if (mode == 3) return R_NilValue;

  int B = 0, T = 0, H = 0, W = 0;
  st = cl_model_last_shape(m, &B, &T, &H, &W);
  if (st != CL_OK) r_raise_model(st, m);
  const cl_config *cfg = cl_model_config(m);
  int L = cfg->n_layers;
  if (mode == 1) return read_output(m, L - 1, B, T, cfg->hidden_dims[L - 1], H, W);
  if (mode == 2) return read_state(m, L - 1, 0, B, cfg->hidden_dims[L - 1], H, W);

  int nprotect = 0;
  SEXP outputs = PROTECT(Rf_allocVector(VECSXP, mode == 4 ? 0 : L));
  nprotect++;
  SEXP states = PROTECT(Rf_allocVector(VECSXP, L));
  nprotect++;
  SEXP hc_names = PROTECT(Rf_allocVector(STRSXP, 2));
  nprotect++;
  SET_STRING_ELT(hc_names, 0, Rf_mkChar("h"));
  SET_STRING_ELT(hc_names, 1, Rf_mkChar("c"));
  for (int l = 0; l < L; l++) {
    int C = cfg->hidden_dims[l];
    if (mode != 4) SET_VECTOR_ELT(outputs, l, read_output(m, l, B, T, C, H, W));
    SEXP hc = Rf_allocVector(VECSXP, 2);
    SET_VECTOR_ELT(states, l, hc);
    Rf_setAttrib(hc, R_NamesSymbol, hc_names);
    SET_VECTOR_ELT(hc, 0, read_state(m, l, 0, B, C, H, W));
    SET_VECTOR_ELT(hc, 1, read_state(m, l, 1, B, C, H, W));
  }
  const char *const out_names[] = {"layer_outputs", "layer_last_states"};
  SEXP out = PROTECT(r_named_list(out_names, 2));
  nprotect++;
  SET_VECTOR_ELT(out, 0, outputs);
  SET_VECTOR_ELT(out, 1, states);
  UNPROTECT(nprotect);
  return out;
}

SEXP ffi_last_shape(SEXP ptr) {
  cl_model *m = r_model(ptr);
  int B = 0, T = 0, H = 0, W = 0;
  cl_status st = cl_model_last_shape(m, &B, &T, &H, &W);
  if (st != CL_OK) r_raise_model(st, m);
  SEXP out = PROTECT(Rf_allocVector(INTSXP, 4));
  INTEGER(out)[0] = B;
  INTEGER(out)[1] = T;
  INTEGER(out)[2] = H;
  INTEGER(out)[3] = W;
  UNPROTECT(1);
  return out;
}

/* grad NULL: backpropagate the gradient stored by the last ffi_mse(). */
SEXP ffi_backward(SEXP ptr, SEXP grad, SEXP target) {
  cl_model *m = r_model(ptr);
  cl_target tg = r_target(target);
  cl_host_array hg;
  const cl_host_array *pg = NULL;
  if (grad != R_NilValue) {
    r_host_array(grad, tg == CL_TARGET_SEQUENCE ? 5 : 4, "grad_output", &hg);
    pg = &hg;
  }
  cl_status st = cl_model_backward(m, tg, pg);
  if (st != CL_OK) r_raise_model(st, m);
  return R_NilValue;
}

SEXP ffi_mse(SEXP ptr, SEXP y, SEXP target) {
  cl_model *m = r_model(ptr);
  cl_target tg = r_target(target);
  cl_host_array hy;
  r_host_array(y, tg == CL_TARGET_SEQUENCE ? 5 : 4, "y", &hy);
  double loss = 0;
  cl_status st = cl_model_mse(m, &hy, tg, &loss);
  if (st != CL_OK) r_raise_model(st, m);
  return Rf_ScalarReal(loss);
}

SEXP ffi_zero_grad(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_zero_grad(m);
  if (st != CL_OK) r_raise_model(st, m);
  return R_NilValue;
}

SEXP ffi_optimizer_step(SEXP ptr, SEXP opt) {
  cl_model *m = r_model(ptr);
  cl_optim o;
  r_optim(opt, &o);
  cl_status st = cl_model_optimizer_step(m, &o);
  if (st != CL_OK) r_raise_model(st, m);
  return R_NilValue;
}

SEXP ffi_optimizer_steps(SEXP ptr) {
  cl_model *m = r_model(ptr);
  return Rf_ScalarReal((double)cl_model_optimizer_steps(m));
}

SEXP ffi_optimizer_reset(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_optimizer_reset(m);
  if (st != CL_OK) r_raise_model(st, m);
  return R_NilValue;
}

SEXP ffi_train_step(SEXP ptr, SEXP x, SEXP y, SEXP target, SEXP opt, SEXP opts) {
  cl_model *m = r_model(ptr);
  cl_target tg = r_target(target);
  cl_host_array hx, hy;
  r_host_array(x, 5, "x", &hx);
  r_host_array(y, tg == CL_TARGET_SEQUENCE ? 5 : 4, "y", &hy);
  cl_optim o;
  r_optim(opt, &o);
  cl_step_options so;
  r_step_options(opts, &so);
  double loss = 0;
  cl_status st = cl_model_train_step(m, &hx, &hy, tg, &o, &so, &loss);
  if (st != CL_OK) r_raise_model(st, m);
  return Rf_ScalarReal(loss);
}
