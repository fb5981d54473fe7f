/*
 * r_io.c -- model files from R: convlstm_save() writes a model (and its
 * optimizer) to a safetensors file, convlstm_file_info() reads what a file
 * holds, and convlstm_load() fills a freshly created model from one.
 *
 * It is not where files are checked (core/model_file_read.c, core/safetensors.c
 * and core/json.c check every byte of them) nor where R arguments are
 * (R/save.R). A parsed file is C memory, so it lives in an external
 * pointer with a finalizer for as long as R allocates around it: an R error
 * can never leak it, and it is freed explicitly before returning.
 */
#include <string.h>

#include "r_convlstm.h"

/* A path the R layer has checked to be one string, ~ expanded. */
static const char *r_path(SEXP path) {
  if (TYPEOF(path) != STRSXP || Rf_length(path) != 1 || STRING_ELT(path, 0) == NA_STRING)
    r_raise_invalid("`path` must be a single string");
  return R_ExpandFileName(Rf_translateChar(STRING_ELT(path, 0)));
}

SEXP ffi_model_save(SEXP ptr, SEXP path, SEXP optimizer, SEXP metadata) {
  cl_model *m = r_model(ptr);
  const char *p = r_path(path);
  cl_optim o;
  const cl_optim *po = r_optim_or_null(optimizer, &o);
  int n = 0;
  const char **keys = NULL, **values = NULL;
  if (metadata != R_NilValue) {
    SEXP names = Rf_getAttrib(metadata, R_NamesSymbol);
    if (TYPEOF(metadata) != STRSXP || TYPEOF(names) != STRSXP)
      r_raise_invalid("`metadata` must be a named character vector");
    n = Rf_length(metadata);
    /* R_alloc: reclaimed when the call returns or raises */
    keys = (const char **)R_alloc((size_t)(n > 0 ? n : 1), sizeof *keys);
    values = (const char **)R_alloc((size_t)(n > 0 ? n : 1), sizeof *values);
    for (int i = 0; i < n; i++) {
      if (STRING_ELT(names, i) == NA_STRING || STRING_ELT(metadata, i) == NA_STRING)
        r_raise_invalid("`metadata` must not contain NA");
      keys[i] = Rf_translateCharUTF8(STRING_ELT(names, i));
      values[i] = Rf_translateCharUTF8(STRING_ELT(metadata, i));
    }
  }
  cl_status st = cl_model_save(m, p, po, n, keys, values);
  R_CL_CHECK(m, st);
  return R_NilValue;
}

/* NULL when a save may write to path, else the core's reason why not (for
 * R/save.R to word as an argument error; the save checks again itself). */
SEXP ffi_save_target_check(SEXP path) {
  char err[CL_ERRMSG_LEN] = "";
  if (cl_save_target_check(r_path(path), err, sizeof err) == CL_OK) return R_NilValue;
  return Rf_mkString(err);
}

/* ---- a parsed file, owned by an external pointer ---------------------- */

static void saved_finalize(SEXP holder) {
  cl_saved *s = (cl_saved *)R_ExternalPtrAddr(holder);
  if (s == NULL) return;
  cl_saved_free(s);
  R_ClearExternalPtr(holder);
}

/* Reads path into a new protected holder (one PROTECT for the caller to
 * balance); raises with nothing held when the file is refused. */
static SEXP read_saved(SEXP path, cl_saved **out) {
  const char *p = r_path(path);
  SEXP holder = PROTECT(r_new_handle(R_NilValue, R_NilValue, saved_finalize, NULL));
  char err[CL_ERRMSG_LEN] = "";
  cl_saved *s = NULL;
  cl_status st = cl_saved_read(p, &s, err, sizeof err);
  R_CL_CHECK_MSG_FREE(err, st, UNPROTECT(1));
  R_SetExternalPtrAddr(holder, s);
  *out = s;
  return holder;
}

static void done_saved(SEXP holder) {
  saved_finalize(holder);
}

static SEXP saved_info(const cl_saved *s) {
  int nprotect = 0;
  const char *top[] = {"config", "optimizer", "optimizer_steps", "loss_scale", "metadata", "tensors"};
  SEXP out = PROTECT(r_named_list(top, 6));
  nprotect++;

  const cl_config *c = cl_saved_config(s);
  const char *cn[] = {"input_dim", "hidden_dims", "kernel_sizes", "n_layers", "bias",
                      "dtype",     "geometry",    "peephole",     "dropout",  "recurrent_dropout",
                      "dropout_masks", "forecaster", "patch", "head"};
  SEXP cfg = r_named_list(cn, 14);
  SET_VECTOR_ELT(out, 0, cfg);
  SET_VECTOR_ELT(cfg, 0, Rf_ScalarInteger(c->input_dim));
  SEXP hd = Rf_allocVector(INTSXP, c->n_layers);
  SET_VECTOR_ELT(cfg, 1, hd);
  SEXP ks = Rf_allocVector(INTSXP, c->n_layers);
  SET_VECTOR_ELT(cfg, 2, ks);
  for (int l = 0; l < c->n_layers; l++) {
    INTEGER(hd)[l] = c->hidden_dims[l];
    INTEGER(ks)[l] = c->kernel_sizes[l];
  }
  SET_VECTOR_ELT(cfg, 3, Rf_ScalarInteger(c->n_layers));
  SET_VECTOR_ELT(cfg, 4, Rf_ScalarLogical(c->bias != 0));
  SET_VECTOR_ELT(cfg, 5, Rf_mkString(cl_dtype_name(c->dtype)));
  SET_VECTOR_ELT(cfg, 6, r_geometry(c));
  SET_VECTOR_ELT(cfg, 7, r_peephole(c));
  SEXP dx = Rf_allocVector(REALSXP, c->n_layers);
  SET_VECTOR_ELT(cfg, 8, dx);
  SEXP dr = Rf_allocVector(REALSXP, c->n_layers);
  SET_VECTOR_ELT(cfg, 9, dr);
  for (int l = 0; l < c->n_layers; l++) {
    REAL(dx)[l] = c->dropout[l];
    REAL(dr)[l] = c->recurrent_dropout[l];
  }
  SET_VECTOR_ELT(cfg, 10, Rf_mkString(cl_dropout_masks_name(c->dropout_masks)));
  SET_VECTOR_ELT(cfg, 11, Rf_ScalarLogical(c->forecaster != 0));
  SET_VECTOR_ELT(cfg, 12, Rf_ScalarInteger(c->forecaster && c->patch > 1 ? c->patch : 1));
  SET_VECTOR_ELT(cfg, 13, Rf_ScalarLogical(c->head != 0));

  cl_optim o;
  int64_t steps = 0;
  if (cl_saved_optimizer(s, &o, &steps)) SET_VECTOR_ELT(out, 1, r_optim_list(&o));
  SET_VECTOR_ELT(out, 2, Rf_ScalarReal((double)steps));

  cl_loss_scale ls;
  if (cl_saved_loss_scale(s, &ls)) {
    const char *ln[] = {"scale", "growth_interval", "clean_steps", "skipped_steps"};
    SEXP l = r_named_list(ln, 4);
    SET_VECTOR_ELT(out, 3, l);
    SET_VECTOR_ELT(l, 0, Rf_ScalarReal(ls.scale));
    SET_VECTOR_ELT(l, 1, Rf_ScalarInteger(ls.growth_interval));
    SET_VECTOR_ELT(l, 2, Rf_ScalarInteger(ls.clean_steps));
    SET_VECTOR_ELT(l, 3, Rf_ScalarReal((double)ls.skipped_steps));
  }

  int nm = cl_saved_n_metadata(s);
  SEXP meta = PROTECT(Rf_allocVector(STRSXP, nm));
  nprotect++;
  SEXP mnames = PROTECT(Rf_allocVector(STRSXP, nm));
  nprotect++;
  for (int i = 0; i < nm; i++) {
    const char *k, *v;
    cl_saved_metadata(s, i, &k, &v);
    SET_STRING_ELT(mnames, i, Rf_mkCharCE(k, CE_UTF8));
    SET_STRING_ELT(meta, i, Rf_mkCharCE(v, CE_UTF8));
  }
  Rf_setAttrib(meta, R_NamesSymbol, mnames);
  SET_VECTOR_ELT(out, 4, meta);

  int nt = cl_saved_n_tensors(s);
  const char *tn[] = {"name", "dtype", "shape"};
  SEXP tens = r_named_list(tn, 3);
  SET_VECTOR_ELT(out, 5, tens);
  SEXP names = Rf_allocVector(STRSXP, nt);
  SET_VECTOR_ELT(tens, 0, names);
  SEXP dtypes = Rf_allocVector(STRSXP, nt);
  SET_VECTOR_ELT(tens, 1, dtypes);
  SEXP shapes = Rf_allocVector(VECSXP, nt);
  SET_VECTOR_ELT(tens, 2, shapes);
  for (int i = 0; i < nt; i++) {
    const char *name, *dt;
    int nd;
    int64_t dims[8];
    cl_saved_tensor_info(s, i, &name, &dt, &nd, dims);
    SET_STRING_ELT(names, i, Rf_mkCharCE(name, CE_UTF8));
    SET_STRING_ELT(dtypes, i, Rf_mkChar(dt));
    SEXP d = Rf_allocVector(REALSXP, nd);
    SET_VECTOR_ELT(shapes, i, d);
    for (int k = 0; k < nd; k++) REAL(d)[k] = (double)dims[k];
  }
  UNPROTECT(nprotect);
  return out;
}

SEXP ffi_file_info(SEXP path) {
  cl_saved *s = NULL;
  SEXP holder = read_saved(path, &s); /* protected */
  SEXP info = PROTECT(saved_info(s));
  done_saved(holder);
  UNPROTECT(2);
  return info;
}

/* Fills ptr's model (created by R with the file's architecture) from path;
 * returns what the file holds, as ffi_file_info() does. */
SEXP ffi_model_load_into(SEXP ptr, SEXP path, SEXP with_optimizer) {
  cl_model *m = r_model(ptr);
  int with_opt = Rf_asLogical(with_optimizer) == TRUE;
  cl_saved *s = NULL;
  SEXP holder = read_saved(path, &s); /* protected */
  SEXP info = PROTECT(saved_info(s));
  cl_status st = cl_saved_load_into(s, m, with_opt);
  done_saved(holder);
  UNPROTECT(2);
  R_CL_CHECK(m, st);
  return info;
}
