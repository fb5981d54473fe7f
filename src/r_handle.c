/*
 * r_handle.c -- the glue's external pointers: a model's handle (a classed
 * external pointer to a cl_model, with a finalizer: rm(model); gc() frees
 * it), its explicit release and status, the check every entry point runs
 * before touching a model (r_model), and new handles of any kind
 * (r_new_handle: data sets, files being read).
 *
 * The pointer's "protected" slot records whether the model was released on
 * purpose, so that a pointer restored by readRDS (address NULL, never
 * released) can be told apart and explained.
 */
#include <string.h>

#include "r_convlstm.h"

/* The protected slot: "live" while the model exists, "released" after
 * convlstm_release(), "stepping" while its training step runs on a thread of
 * its own. Serialisation keeps the slot but drops the address, so a NULL
 * address next to "live" means the pointer came back from readRDS. */
static const char *const LIVE = "live";
static const char *const RELEASED = "released";
static const char *const STEPPING = "stepping";

static SEXP model_tag(void) { return Rf_install("convlstm_model"); }

static int is_model_ptr(SEXP ptr) {
  return TYPEOF(ptr) == EXTPTRSXP && R_ExternalPtrTag(ptr) == model_tag();
}

static const char *ptr_mark(SEXP ptr) {
  SEXP prot = R_ExternalPtrProtected(ptr);
  if (TYPEOF(prot) == STRSXP && Rf_length(prot) == 1) return CHAR(STRING_ELT(prot, 0));
  return "";
}

static void model_finalize(SEXP ptr) {
  cl_model *m = (cl_model *)R_ExternalPtrAddr(ptr);
  if (m == NULL) return;
  /* collected with the handle of a step still running on its thread (the
   * fit waits for the step before any error or interrupt leaves it, so
   * only a handle dropped without that wait gets here): leaked rather
   * than freed under the step */
  if (strcmp(ptr_mark(ptr), STEPPING) == 0) return;
  cl_model_free(m);
  R_ClearExternalPtr(ptr);
}

static void refuse_stepping(SEXP ptr) {
  if (strcmp(ptr_mark(ptr), STEPPING) == 0)
    r_raise(CL_E_STATE,
            "This model's training step is running on a thread of its own while the fit reads "
            "the next batch, so it cannot be used or released until that step ends. Use it in a "
            "callback (convlstm_callback()), or set options(convlstm.prefetch = FALSE) so that "
            "a data source's function is called between steps.");
}

const cl_model *r_model_beside_step(SEXP ptr) {
  if (!is_model_ptr(ptr) || !R_ExternalPtrAddr(ptr)) return r_model(ptr); /* its error */
  return (const cl_model *)R_ExternalPtrAddr(ptr);
}

cl_model *r_model(SEXP ptr) {
  if (!is_model_ptr(ptr)) r_raise_invalid("`model` is not a convlstm model");
  cl_model *m = (cl_model *)R_ExternalPtrAddr(ptr);
  if (m != NULL) {
    refuse_stepping(ptr);
    return m;
  }
  if (strcmp(ptr_mark(ptr), RELEASED) == 0)
    r_raise(CL_E_STATE,
            "This model was released with convlstm_release() and holds no memory any more; "
            "create a new model with convlstm().");
  r_raise(CL_E_STATE,
          "This model has no C memory: it was restored by readRDS(), load() or a saved "
          "workspace, and saveRDS cannot store a model's C memory. Save models with "
          "convlstm_save() and restore them with convlstm_load().");
}

SEXP r_new_handle(SEXP tag, SEXP prot, R_CFinalizer_t finalize, const char *cls) {
  SEXP ptr = PROTECT(R_MakeExternalPtr(NULL, tag, prot));
  R_RegisterCFinalizerEx(ptr, finalize, TRUE);
  if (cls) Rf_setAttrib(ptr, R_ClassSymbol, Rf_mkString(cls)); /* setAttrib protects it */
  UNPROTECT(1);
  return ptr;
}

SEXP r_model_handle(void) {
  SEXP mark = PROTECT(Rf_mkString(LIVE));
  SEXP ptr = r_new_handle(model_tag(), mark, model_finalize, "convlstm_ptr");
  UNPROTECT(1);
  return ptr;
}

void r_model_step_begin(SEXP ptr) { R_SetExternalPtrProtected(ptr, Rf_mkString(STEPPING)); }

void r_model_step_end(SEXP ptr, SEXP mark) { R_SetExternalPtrProtected(ptr, mark); }

SEXP ffi_model_release(SEXP ptr) {
  if (!is_model_ptr(ptr)) r_raise_invalid("`model` is not a convlstm model");
  refuse_stepping(ptr);
  cl_model *m = (cl_model *)R_ExternalPtrAddr(ptr);
  int had = m != NULL;
  if (had) {
    cl_model_free(m);
    R_ClearExternalPtr(ptr);
    R_SetExternalPtrProtected(ptr, Rf_mkString(RELEASED));
  }
  return Rf_ScalarLogical(had);
}

/* "live", "released" or "restored", without raising: print() of a dead
 * model should still print. */
SEXP ffi_model_status(SEXP ptr) {
  if (!is_model_ptr(ptr)) r_raise_invalid("`model` is not a convlstm model");
  if (R_ExternalPtrAddr(ptr) != NULL) return Rf_mkString(LIVE);
  return Rf_mkString(strcmp(ptr_mark(ptr), RELEASED) == 0 ? RELEASED : "restored");
}
