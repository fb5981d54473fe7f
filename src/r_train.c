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
#include <limits.h>
#include <string.h>

#include "r_convlstm.h"

static SEXP read_output(cl_model *m, int layer, int B, int T, int C, int H, int W) {
  int dims[5] = {B, T, C, H, W};
  SEXP arr = PROTECT(r_alloc_array(5, dims));
  cl_host_array h = {REAL(arr), CL_HOST_R_F64, 5, {B, T, C, H, W}};
  cl_status st = cl_model_read_output(m, layer, &h);
  R_CL_CHECK_FREE(m, st, UNPROTECT(1));
  UNPROTECT(1);
  return arr;
}

static SEXP read_state(cl_model *m, int layer, int which, int B, int C, int H, int W) {
  int dims[4] = {B, C, H, W};
  SEXP arr = PROTECT(r_alloc_array(4, dims));
  cl_host_array h = {REAL(arr), CL_HOST_R_F64, 4, {B, C, H, W, 0}};
  cl_status st = cl_model_read_state(m, layer, which, &h);
  R_CL_CHECK_FREE(m, st, UNPROTECT(1));
  UNPROTECT(1);
  return arr;
}

static SEXP read_frames(cl_model *m, int B, int K, int C, int H, int W) {
  int dims[5] = {B, K, C, H, W};
  SEXP arr = PROTECT(r_alloc_array(5, dims));
  cl_host_array h = {REAL(arr), CL_HOST_R_F64, 5, {B, K, C, H, W}};
  cl_status st = cl_model_read_frames(m, &h);
  R_CL_CHECK_FREE(m, st, UNPROTECT(1));
  UNPROTECT(1);
  return arr;
}

/* what: see r_forward_what (r_convlstm.h); last_states goes with opts
 * outputs = "last_state" (an inference forward that kept only them). */
SEXP ffi_forward(SEXP ptr, SEXP x, SEXP training, SEXP what, SEXP opts) {
  cl_model *m = r_model(ptr);
  cl_host_array hx;
  r_host_array(x, 5, "x", &hx);
  int train = Rf_asLogical(training) == TRUE;
  r_forward_what mode = r_forward_mode(what);
  cl_step_options so;
  cl_host_array sb[R_OPT_ARRAYS];
  r_step_options(opts, &so, sb);
  if (train) r_dropout_masks(m, opts, hx.dims[0], hx.dims[3], hx.dims[4], &so);
  cl_status st = cl_model_forward(m, &hx, train, &so);
  R_CL_CHECK(m, st);
  if (mode == R_FWD_NONE) return R_NilValue;

  int B = 0, T = 0, H = 0, W = 0;
  st = cl_model_last_shape(m, &B, &T, &H, &W);
  R_CL_CHECK(m, st);
  const cl_config *cfg = cl_model_config(m);
  int L = cfg->n_layers;
  if (mode == R_FWD_SEQUENCE && cfg->head) /* the model's outputs: the head's frames */
    return read_output(m, L, B, T, cfg->input_dim, H, W);
  if (mode == R_FWD_SEQUENCE) return read_output(m, L - 1, B, T, cfg->hidden_dims[L - 1], H, W);
  if (mode == R_FWD_LAST_STATE) return read_state(m, L - 1, 0, B, cfg->hidden_dims[L - 1], H, W);
  if (mode == R_FWD_FRAMES) return read_frames(m, B, so.horizon, cfg->input_dim, H, W);

  int nprotect = 0;
  SEXP outputs = PROTECT(Rf_allocVector(VECSXP, mode == R_FWD_LAST_STATES ? 0 : L));
  nprotect++;
  SEXP states = PROTECT(Rf_allocVector(VECSXP, L));
  nprotect++;
  SEXP hc_names = PROTECT(Rf_allocVector(STRSXP, 2));
  nprotect++;
  SET_STRING_ELT(hc_names, 0, Rf_mkChar("h"));
  SET_STRING_ELT(hc_names, 1, Rf_mkChar("c"));
  for (int l = 0; l < L; l++) {
    int C = cfg->hidden_dims[l];
    if (mode != R_FWD_LAST_STATES) SET_VECTOR_ELT(outputs, l, read_output(m, l, B, T, C, H, W));
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
  R_CL_CHECK(m, st);
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
  R_CL_CHECK(m, st);
  return R_NilValue;
}

SEXP ffi_mse(SEXP ptr, SEXP y, SEXP target) {
  cl_model *m = r_model(ptr);
  cl_target tg = r_target(target);
  cl_host_array hy;
  r_host_array(y, tg == CL_TARGET_SEQUENCE ? 5 : 4, "y", &hy);
  double loss = 0;
  cl_status st = cl_model_mse(m, &hy, tg, &loss);
  R_CL_CHECK(m, st);
  return Rf_ScalarReal(loss);
}

SEXP ffi_zero_grad(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_zero_grad(m);
  R_CL_CHECK(m, st);
  return R_NilValue;
}

SEXP ffi_optimizer_step(SEXP ptr, SEXP opt) {
  cl_model *m = r_model(ptr);
  cl_optim o;
  r_optim(opt, &o);
  cl_status st = cl_model_optimizer_step(m, &o);
  R_CL_CHECK(m, st);
  return R_NilValue;
}

SEXP ffi_optimizer_steps(SEXP ptr) {
  cl_model *m = r_model(ptr);
  return Rf_ScalarReal((double)cl_model_optimizer_steps(m));
}

/* The optimizer's hyperparameters as the core will use them (see
 * cl_optim_check); R's constructors call it so that the error comes when the
 * optimizer is made. */
SEXP ffi_optim_check(SEXP opt) {
  cl_optim o;
  r_optim(opt, &o);
  char err[CL_ERRMSG_LEN];
  cl_status st = cl_optim_check(&o, err, sizeof err);
  R_CL_CHECK_MSG(err, st);
  return R_NilValue;
}

SEXP ffi_optimizer_reset(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_optimizer_reset(m);
  R_CL_CHECK(m, st);
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
  cl_host_array sb[R_OPT_ARRAYS];
  r_step_options(opts, &so, sb);
  r_dropout_masks(m, opts, hx.dims[0], hx.dims[3], hx.dims[4], &so);
  double loss = 0;
  cl_status st = cl_model_train_step(m, &hx, &hy, tg, &o, &so, &loss);
  R_CL_CHECK(m, st);
  return r_step_loss(m, loss);
}

/* ---- a training step on a thread of its own (R/source_prefetch.R) ----
 *
 * ffi_train_step's step, its arguments read here on R's thread, run by a
 * POSIX thread while R calls an R function source for the next batch. The
 * core and the backend call no R API; x, y, the optimizer and the options
 * (whose arrays the step reads in place) are kept in the handle's
 * protected list, and R touches neither them nor the model until
 * ffi_train_step_finish (or _wait, or the handle's finalizer) has joined
 * the thread. Not for dropout masks given as arrays (R_alloc'ed: R frees
 * them when the .Call returns) nor a communicator (MPI from R's thread
 * only): the R side runs those steps as ffi_train_step. */
#include <pthread.h>

/* A batch converted ahead (core/staged.c) behind an R handle: filled on R's
 * thread while the step before runs, read by the next step on its thread.
 * in_use while a step reads it: a fill then makes a new batch instead of
 * refilling it, and the finalizer leaks it rather than free it under the
 * step (as a model's does). */
typedef struct {
  cl_staged *b;
  int in_use;
} staged_box;

static SEXP staged_tag(void) { return Rf_install("convlstm_staged"); }

static staged_box *staged_box_of(SEXP h) {
  return TYPEOF(h) == EXTPTRSXP && R_ExternalPtrTag(h) == staged_tag()
             ? (staged_box *)R_ExternalPtrAddr(h) : NULL;
}

static void staged_finalize(SEXP h) {
  staged_box *box = (staged_box *)R_ExternalPtrAddr(h);
  if (!box || box->in_use) return;
  cl_staged_free(box->b);
  free(box);
  R_ClearExternalPtr(h);
}

/* x and y of the next step converted for the model while its step runs:
 * a new handle holding the batch (and x, y: the step may pack them after
 * all), the batch of `spare` (a handle no step reads any more) refilled
 * when there is one; with send, also uploaded ahead into a device buffer
 * of the model that the running step does not read, when it has one
 * (reserved at the running step's start: ffi_train_step_start). */
SEXP ffi_staged_fill(SEXP ptr, SEXP x, SEXP y, SEXP target, SEXP spare, SEXP send) {
  const cl_model *m = r_model_beside_step(ptr);
  cl_host_array hx, hy;
  r_host_array(x, 5, "x", &hx);
  r_host_array(y, r_target(target) == CL_TARGET_SEQUENCE ? 5 : 4, "y", &hy);
  SEXP prot = PROTECT(Rf_allocVector(VECSXP, 3));
  SET_VECTOR_ELT(prot, 0, ptr);
  SET_VECTOR_ELT(prot, 1, x);
  SET_VECTOR_ELT(prot, 2, y);
  SEXP h = PROTECT(r_new_handle(staged_tag(), prot, staged_finalize, NULL));
  staged_box *box = calloc(1, sizeof *box);
  if (!box) r_raise(CL_E_OOM, "out of host memory for a staged batch");
  R_SetExternalPtrAddr(h, box); /* from here the finalizer frees it */
  staged_box *old = staged_box_of(spare);
  if (old && !old->in_use) { /* its batch moves here */
    box->b = old->b;
    old->b = NULL;
  }
  char err[CL_ERRMSG_LEN];
  cl_status st = cl_staged_fill(m, &box->b, &hx, &hy, err, sizeof err);
  if (st != CL_OK) r_raise(st, err);
  int sent = 0;
  if (Rf_asLogical(send) == TRUE && (st = cl_staged_send(m, box->b, &sent, err, sizeof err)) != CL_OK)
    r_raise(st, err);
  Rf_setAttrib(h, Rf_install("sent"), Rf_ScalarLogical(sent)); /* for the tests */
  UNPROTECT(2);
  return h;
}

/* A shape given as dims from R (whole numbers from 1 to INT_MAX, batch
 * first, ranks lo to 5) as a host array without data. */
static cl_host_array shape_of(SEXP dims, int lo, const char *arg) {
  cl_host_array a = {0};
  const int n = Rf_length(dims);
  if (!Rf_isNumeric(dims) || n < lo || n > 5)
    r_raise_invalid("`%s` must list %s dimensions", arg, lo == 5 ? "5" : "4 or 5");
  const double *d = REAL(PROTECT(Rf_coerceVector(dims, REALSXP)));
  for (int i = 0; i < n; i++) {
    if (!(d[i] >= 1 && d[i] <= INT_MAX && d[i] == (int)d[i]))
      r_raise_invalid("`%s` must hold whole numbers from 1 to %d", arg, INT_MAX);
    a.dims[i] = (int)d[i];
  }
  UNPROTECT(1);
  a.ndim = n;
  return a;
}

/* The bytes a batch of these dims takes staged in dtype, host or device
 * (cl_staged_layout_bytes), for the plan (R/source.R). */
SEXP ffi_staged_layout_bytes(SEXP dtype, SEXP x_dims, SEXP y_dims) {
  const cl_host_array x = shape_of(x_dims, 5, "x_dims"), y = shape_of(y_dims, 4, "y_dims");
  const size_t bytes = cl_staged_layout_bytes(r_dtype(dtype), &x, &y);
  if (!bytes) r_raise_invalid("a staged batch of these dims overflows (`x_dims`, `y_dims`)");
  return Rf_ScalarReal((double)bytes);
}

/* The model's buffers of batches sent ahead freed (a fit's epoch ended). */
SEXP ffi_staged_unreserve(SEXP ptr) {
  cl_staged_unreserve(r_model(ptr));
  return R_NilValue;
}

typedef struct {
  cl_model *m;
  staged_box *staged; /* or NULL: x and y converted by the step */
  cl_host_array hx, hy;
  cl_target tg;
  cl_optim o;
  cl_step_options so;
  cl_host_array sb[R_OPT_ARRAYS];
  double loss;
  cl_status st;
  pthread_t thread;
  int running, finished;
  SEXP ptr, mark; /* the model's handle, marked stepping while the thread runs (r_handle.c) */
} step_job;

static SEXP step_tag(void) { return Rf_install("convlstm_step_job"); }

static void *step_run(void *arg) {
  step_job *j = arg;
  j->st = cl_model_bind_thread(j->m); /* a GPU model's device, not this thread's device 0 */
  if (j->st == CL_OK && j->staged)
    j->st = cl_model_train_staged(j->m, &j->hx, &j->hy, j->staged->b, j->tg, &j->o, &j->so,
                                  &j->loss);
  else if (j->st == CL_OK)
    j->st = cl_model_train_step(j->m, &j->hx, &j->hy, j->tg, &j->o, &j->so, &j->loss);
  return NULL;
}

static void step_join(step_job *j) {
  if (!j->running) return;
  pthread_join(j->thread, NULL);
  j->running = 0;
  if (j->staged) j->staged->in_use = 0;
  r_model_step_end(j->ptr, j->mark);
}

static void step_finalize(SEXP h) {
  step_job *j = (step_job *)R_ExternalPtrAddr(h);
  if (j) step_join(j);
  free(j);
  R_ClearExternalPtr(h);
}

static step_job *r_step_job(SEXP h) {
  step_job *j = TYPEOF(h) == EXTPTRSXP && R_ExternalPtrTag(h) == step_tag()
                    ? (step_job *)R_ExternalPtrAddr(h) : NULL;
  if (!j) r_raise_invalid("internal: not a running training step");
  return j;
}

SEXP ffi_train_step_start(SEXP ptr, SEXP x, SEXP y, SEXP target, SEXP opt, SEXP opts,
                          SEXP staged, SEXP reserve) {
  cl_model *m = r_model(ptr);
  if (opts != R_NilValue && (r_option(opts, "dropout_masks") != R_NilValue ||
                             r_option(opts, "comm_share") != R_NilValue))
    r_raise_invalid("internal: a step on its own thread takes no given masks nor communicator");
  staged_box *box = staged_box_of(staged);
  if (staged != R_NilValue && (!box || !box->b || box->in_use))
    r_raise_invalid("internal: `staged` is not a staged batch that no step reads");
  SEXP prot = PROTECT(Rf_allocVector(VECSXP, 7)); /* and [6]: the model's mark */
  SEXP keep[6] = {ptr, x, y, opt, opts, staged};
  for (int i = 0; i < 6; i++) SET_VECTOR_ELT(prot, i, keep[i]);
  SEXP h = PROTECT(r_new_handle(step_tag(), prot, step_finalize, NULL));
  step_job *j = calloc(1, sizeof *j);
  if (!j) r_raise(CL_E_OOM, "out of host memory for a training step");
  R_SetExternalPtrAddr(h, j); /* from here the finalizer frees it */
  j->m = m;
  j->tg = r_target(target);
  r_host_array(x, 5, "x", &j->hx);
  r_host_array(y, j->tg == CL_TARGET_SEQUENCE ? 5 : 4, "y", &j->hy);
  r_optim(opt, &j->o);
  r_step_options(opts, &j->so, j->sb);
  r_dropout_masks(m, opts, j->hx.dims[0], j->hx.dims[3], j->hx.dims[4], &j->so); /* a seed */
  j->ptr = ptr;
  j->mark = R_ExternalPtrProtected(ptr);
  SET_VECTOR_ELT(prot, 6, j->mark); /* kept here while the model is marked stepping */
  /* with reserve, the buffers the next batch is sent into while this step
   * runs, for a batch of this one's shape; without device memory for them
   * batches upload at their steps, as before */
  if (Rf_asLogical(reserve) == TRUE) {
    cl_status rs = cl_staged_reserve(m, &j->hx, &j->hy);
    if (rs == CL_E_OOM) rs = CL_OK;
    R_CL_CHECK(m, rs);
  }
  j->staged = box;
  if (box) box->in_use = 1;
  r_model_step_begin(ptr);
  if (pthread_create(&j->thread, NULL, step_run, j) != 0) {
    r_model_step_end(ptr, j->mark);
    if (box) box->in_use = 0;
    r_raise(CL_E_INVALID, "cannot start a thread for the training step");
  }
  j->running = 1;
  UNPROTECT(2);
  return h;
}

/* Waits for the step, if it still runs (an interrupt or error in R while
 * it ran: the model is then the step's, complete). */
SEXP ffi_train_step_wait(SEXP h) {
  if (TYPEOF(h) == EXTPTRSXP && R_ExternalPtrTag(h) == step_tag() && R_ExternalPtrAddr(h))
    step_join((step_job *)R_ExternalPtrAddr(h));
  return R_NilValue;
}

/* The step's loss, as ffi_train_step returns it, once it finished; its
 * error raised as ffi_train_step raises it. */
SEXP ffi_train_step_finish(SEXP h) {
  step_job *j = r_step_job(h);
  step_join(j);
  if (j->finished) r_raise_invalid("internal: this training step was finished already");
  j->finished = 1;
  R_CL_CHECK(j->m, j->st);
  return r_step_loss(j->m, j->loss);
}
