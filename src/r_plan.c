/*
 * r_plan.c -- the memory planner from R: a step's plan (every buffer, its
 * category, bytes and offset in the step arena) computed without
 * allocating.
 *
 * It is not where estimates are shaped into tables or where a batch size is
 * searched for: R/estimate.R does that from the plan returned here. Byte
 * counts travel as doubles, exact up to 2^53 bytes.
 */
#include <stdlib.h> /* free */
#include <string.h>

#include "r_convlstm.h"

/* The plan is malloc'ed by the core; copying it into R vectors allocates, and
 * an allocation failure longjmps. R_UnwindProtect runs the cleanup on that
 * path as on the normal one, so the plan is never leaked. */
typedef struct plan_copy {
  cl_plan plan;
} plan_copy;

static SEXP plan_to_r(void *data) {
  const cl_plan *p = &((plan_copy *)data)->plan;
  int nprotect = 0;
  const char *const names[] = {"name",     "category", "bytes",    "layer",
                               "offset",   "by_category", "total", "arena",
                               "reserved", "runtime",  "first_op", "last_op"};
  SEXP out = PROTECT(r_named_list(names, 12));
  nprotect++;
  SEXP name = Rf_allocVector(STRSXP, p->n);
  SET_VECTOR_ELT(out, 0, name);
  SEXP cat = Rf_allocVector(STRSXP, p->n);
  SET_VECTOR_ELT(out, 1, cat);
  SEXP bytes = Rf_allocVector(REALSXP, p->n);
  SET_VECTOR_ELT(out, 2, bytes);
  SEXP layer = Rf_allocVector(INTSXP, p->n);
  SET_VECTOR_ELT(out, 3, layer);
  SEXP offset = Rf_allocVector(REALSXP, p->n);
  SET_VECTOR_ELT(out, 4, offset);
  SEXP first = Rf_allocVector(INTSXP, p->n);
  SET_VECTOR_ELT(out, 10, first);
  SEXP last = Rf_allocVector(INTSXP, p->n);
  SET_VECTOR_ELT(out, 11, last);
  for (int i = 0; i < p->n; i++) {
    const cl_plan_entry *e = &p->entries[i];
    SET_STRING_ELT(name, i, Rf_mkChar(e->name));
    SET_STRING_ELT(cat, i, Rf_mkChar(cl_mem_category_name(e->category)));
    REAL(bytes)[i] = (double)e->bytes;
    /* from 0, as in the buffer names and the state dict; NA: model-wide */
    INTEGER(layer)[i] = e->layer >= 0 ? e->layer : NA_INTEGER;
    /* NA: a model buffer, its own device allocation outside the arena */
    REAL(offset)[i] = e->in_arena ? (double)e->offset : NA_REAL;
    /* from 1, as R counts; NA: it lives the whole call */
    INTEGER(first)[i] = e->first_op >= 0 ? e->first_op + 1 : NA_INTEGER;
    INTEGER(last)[i] = e->last_op >= 0 ? e->last_op + 1 : NA_INTEGER;
  }
  SEXP by = Rf_allocVector(REALSXP, CL_MEM_NCAT);
  SET_VECTOR_ELT(out, 5, by);
  SEXP by_names = Rf_allocVector(STRSXP, CL_MEM_NCAT);
  Rf_setAttrib(by, R_NamesSymbol, by_names);
  for (int c = 0; c < CL_MEM_NCAT; c++) {
    REAL(by)[c] = (double)p->by_category[c];
    SET_STRING_ELT(by_names, c, Rf_mkChar(cl_mem_category_name((cl_mem_category)c)));
  }
  SET_VECTOR_ELT(out, 6, Rf_ScalarReal((double)p->total));
  SET_VECTOR_ELT(out, 7, Rf_ScalarReal((double)p->arena));
  SET_VECTOR_ELT(out, 8, Rf_ScalarReal((double)p->reserved));
  SET_VECTOR_ELT(out, 9, Rf_ScalarReal((double)p->runtime));
  UNPROTECT(nprotect);
  return out;
}

/* A step's c(B, T, H, W), as R/ffi.R passes it to `fn`. */
static const int *step_shape(SEXP shape, const char *fn) {
  if (TYPEOF(shape) != INTSXP || Rf_length(shape) != 4)
    r_raise_invalid("internal: %s() needs c(batch, time, height, width)", fn);
  return INTEGER(shape);
}

/* to_r(data) with cleanup(data) run after it, on R's error path as on the
 * normal one: the core's malloc'ed result is freed either way. */
static SEXP copy_then_free(SEXP (*to_r)(void *), void (*cleanup)(void *, Rboolean), void *data) {
  SEXP cont = PROTECT(R_MakeUnwindCont());
  SEXP out = R_UnwindProtect(to_r, data, cleanup, data, cont);
  UNPROTECT(1);
  return out;
}

static void plan_cleanup(void *data, Rboolean jump) {
  (void)jump;
  cl_plan_free(&((plan_copy *)data)->plan);
}

/* shape: c(B, T, H, W); opt: NULL (the optimizer state the model holds) or
 * the vector r_optim() reads; opts: the vector r_step_options() reads. */
SEXP ffi_model_plan(SEXP ptr, SEXP shape, SEXP training, SEXP opt, SEXP opts) {
  cl_model *m = r_model(ptr);
  const int *s = step_shape(shape, "ffi_model_plan");
  cl_optim o;
  const cl_optim *po = r_optim_or_null(opt, &o);
  cl_step_options so;
  cl_host_array sb[R_OPT_ARRAYS];
  r_step_options(opts, &so, sb);

  plan_copy pc;
  memset(&pc, 0, sizeof pc);
  cl_status st =
      cl_model_plan(m, s[0], s[1], s[2], s[3], Rf_asLogical(training) == TRUE, po, &so, &pc.plan);
  R_CL_CHECK_FREE(m, st, cl_plan_free(&pc.plan));
  return copy_then_free(plan_to_r, plan_cleanup, &pc);
}

/* list(layer, bytes): the gradient buckets of a data-parallel step
 * (cl_model_grad_buckets), in the order they are reduced. */
SEXP ffi_grad_buckets(SEXP ptr) {
  cl_model *m = r_model(ptr);
  int layer[CL_MAX_LAYERS];
  size_t bytes[CL_MAX_LAYERS];
  int n = cl_model_grad_buckets(m, layer, bytes);
  static const char *const names[] = {"layer", "bytes"};
  SEXP out = PROTECT(r_named_list(names, 2));
  SEXP l = Rf_allocVector(INTSXP, n);
  SET_VECTOR_ELT(out, 0, l);
  SEXP b = Rf_allocVector(REALSXP, n);
  SET_VECTOR_ELT(out, 1, b);
  for (int k = 0; k < n; k++) {
    INTEGER(l)[k] = layer[k];
    REAL(b)[k] = (double)bytes[k];
  }
  UNPROTECT(1);
  return out;
}

/* The core's table of buffers (cl_buffer_name): per kind, in kind order,
 * its identifier, the name of its plan rows and its other name (NA: none). */
SEXP ffi_buffer_names(void) {
  int n = 0;
  while (cl_buffer_name(n, CL_BUFNAME_ROW)) n++;
  const char *const names[] = {"kind", "name", "other"};
  const cl_bufname which[] = {CL_BUFNAME_KIND, CL_BUFNAME_ROW, CL_BUFNAME_OTHER};
  SEXP out = PROTECT(r_named_list(names, 3));
  for (int j = 0; j < 3; j++) {
    SEXP col = Rf_allocVector(STRSXP, n);
    SET_VECTOR_ELT(out, j, col);
    for (int i = 0; i < n; i++) {
      const char *s = cl_buffer_name(i, which[j]);
      SET_STRING_ELT(col, i, s ? Rf_mkChar(s) : NA_STRING);
    }
  }
  UNPROTECT(1);
  return out;
}

/* The convolution calls of a step (cl_model_conv_calls), malloc'ed by the
 * core: freed on R's error path as on the normal one, as the plan is. */
typedef struct calls_copy {
  cl_conv_call_info *rows;
  int n;
} calls_copy;

static SEXP calls_to_r(void *data) {
  const calls_copy *cc = data;
  static const char *const dirs[] = {"forward", "backward_data", "backward_filter"};
  const char *const names[] = {"layer", "half", "direction", "N", "C", "K",     "kh",
                               "kw",    "dh",   "dw",        "groups", "H", "W", "count"};
  SEXP out = PROTECT(r_named_list(names, 14));
  SET_VECTOR_ELT(out, 2, Rf_allocVector(STRSXP, cc->n));
  for (int j = 0; j < 13; j++)
    if (j != 2) SET_VECTOR_ELT(out, j, Rf_allocVector(j == 3 ? REALSXP : INTSXP, cc->n));
  SET_VECTOR_ELT(out, 13, Rf_allocVector(REALSXP, cc->n));
  for (int i = 0; i < cc->n; i++) {
    const cl_conv_call_info *r = &cc->rows[i];
    const int v[13] = {r->layer, r->half, 0,     0,         r->C, r->K, r->kh,
                       r->kw,    r->dh,   r->dw, r->groups, r->H, r->W};
    for (int j = 0; j < 13; j++)
      if (j != 2 && j != 3) INTEGER(VECTOR_ELT(out, j))[i] = v[j];
    REAL(VECTOR_ELT(out, 3))[i] = (double)r->N; /* may exceed an int */
    SET_STRING_ELT(VECTOR_ELT(out, 2), i, Rf_mkChar(dirs[r->dir]));
    REAL(VECTOR_ELT(out, 13))[i] = (double)r->count; /* exact below 2^53 */
  }
  UNPROTECT(1);
  return out;
}

static void calls_cleanup(void *data, Rboolean jump) {
  (void)jump;
  free(((calls_copy *)data)->rows);
}

/* shape: c(B, T, H, W); opts: the vector r_step_options() reads;
 * sequence: the target is the sequence (else the last state). */
SEXP ffi_conv_calls(SEXP ptr, SEXP shape, SEXP training, SEXP opts, SEXP sequence) {
  cl_model *m = r_model(ptr);
  const int *s = step_shape(shape, "ffi_conv_calls");
  cl_step_options so;
  cl_host_array sb[R_OPT_ARRAYS];
  r_step_options(opts, &so, sb);
  calls_copy cc = {NULL, 0};
  cl_target tg = Rf_asLogical(sequence) == TRUE ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
  R_CL_CHECK(m, cl_model_conv_calls(m, s[0], s[1], s[2], s[3], Rf_asLogical(training) == TRUE,
                                    &so, tg, &cc.rows, &cc.n));
  return copy_then_free(calls_to_r, calls_cleanup, &cc);
}
