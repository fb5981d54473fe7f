/*
 * r_model.c -- a model's creation and configuration for R: the model made
 * into a new handle (r_handle.c), its configuration read back, parameter
 * initialisation from R's random number generator, the storage dtype and
 * the float16 loss scaler.
 *
 * It is not the R-visible model: R/model.R wraps the handle in a callable
 * closure.
 */
#include <string.h>

#include "r_convlstm.h"

static int int_at(SEXP x, int i) { return INTEGER(x)[i]; }

/* structure: integer c(forecaster, patch, head) (cl_config: an
 * encoder-forecaster whose n_layers are its encoder's then its
 * forecaster's; c(0, 0, 0): a plain stack, c(0, 0, 1) with a head). geometry: integer [CL_R_GEOMETRY_ROWS, n_layers]: kernel height, width,
 * dilation height, width, recurrent kernel height, width of each layer
 * (column). peephole: integer c(kind, height, width),
 * as r_peephole() returns it. dropout: double [2, n_layers]: dropout and
 * recurrent_dropout of each layer (column). dropout_masks: "per_gate" or
 * "shared". */
SEXP ffi_model_create(SEXP input_dim, SEXP hidden_dims, SEXP geometry, SEXP bias, SEXP device,
                      SEXP dtype, SEXP threads, SEXP memory_limit, SEXP peephole,
                      SEXP dropout, SEXP dropout_masks, SEXP structure) {
  int nprotect = 0;
  if (TYPEOF(input_dim) != INTSXP || TYPEOF(hidden_dims) != INTSXP ||
      TYPEOF(geometry) != INTSXP || TYPEOF(bias) != LGLSXP || TYPEOF(threads) != INTSXP ||
      TYPEOF(memory_limit) != REALSXP || TYPEOF(peephole) != INTSXP ||
      Rf_length(peephole) != 3 || TYPEOF(dropout) != REALSXP || TYPEOF(dropout_masks) != STRSXP ||
      Rf_length(dropout_masks) != 1 || TYPEOF(structure) != INTSXP || Rf_length(structure) != 3)
    r_raise_invalid("internal: ffi_model_create() got arguments of the wrong type");
  int n_layers = Rf_length(hidden_dims);
  if (n_layers < 1 || n_layers > CL_MAX_LAYERS || Rf_length(geometry) != CL_R_GEOMETRY_ROWS * n_layers ||
      Rf_length(dropout) != 2 * n_layers)
    r_raise_invalid("`n_layers` must be between 1 and %d", CL_MAX_LAYERS);

  cl_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.input_dim = int_at(input_dim, 0);
  cfg.n_layers = n_layers;
  for (int l = 0; l < n_layers; l++) {
    cfg.hidden_dims[l] = int_at(hidden_dims, l);
    const int g = CL_R_GEOMETRY_ROWS * l;
    cfg.kernel_sizes[l] = int_at(geometry, g);
    cfg.kernel_widths[l] = int_at(geometry, g + 1);
    cfg.dilation_h[l] = int_at(geometry, g + 2);
    cfg.dilation_w[l] = int_at(geometry, g + 3);
    cfg.recurrent_kernel_sizes[l] = int_at(geometry, g + 4);
    cfg.recurrent_kernel_widths[l] = int_at(geometry, g + 5);
    cfg.dropout[l] = REAL(dropout)[2 * l];
    cfg.recurrent_dropout[l] = REAL(dropout)[2 * l + 1];
  }
  cfg.bias = LOGICAL(bias)[0] ? 1 : 0;
  cfg.device = r_device(device);
  cfg.dtype = r_dtype(dtype);
  cfg.n_threads = int_at(threads, 0);
  cfg.memory_limit = r_bytes(memory_limit, "memory_limit");
  cfg.peephole = int_at(peephole, 0);
  cfg.peephole_h = int_at(peephole, 1);
  cfg.peephole_w = int_at(peephole, 2);
  cfg.forecaster = int_at(structure, 0);
  cfg.patch = int_at(structure, 1);
  cfg.head = int_at(structure, 2);
  const char *masks = CHAR(STRING_ELT(dropout_masks, 0));
  if (strcmp(masks, cl_dropout_masks_name(CL_MASKS_PER_GATE)) == 0)
    cfg.dropout_masks = CL_MASKS_PER_GATE;
  else if (strcmp(masks, cl_dropout_masks_name(CL_MASKS_SHARED)) == 0)
    cfg.dropout_masks = CL_MASKS_SHARED;
  else
    r_raise_invalid("internal: dropout_masks \"%s\" is neither \"per_gate\" nor \"shared\"",
                    masks);

  SEXP ptr = PROTECT(r_model_handle());
  nprotect++;

  char err[CL_ERRMSG_LEN] = "";
  cl_model *m = NULL;
  cl_status st = cl_model_create(&cfg, &m, err, sizeof err);
  /* cl_model_free: m is NULL on failure by contract; harmless otherwise */
  R_CL_CHECK_MSG_FREE(err, st, (cl_model_free(m), UNPROTECT(nprotect)));
  R_SetExternalPtrAddr(ptr, m);
  UNPROTECT(nprotect);
  return ptr;
}

/* The storage types' names in cl_dtype order, from the core's one table. */
SEXP ffi_dtype_names(void) {
  SEXP out = PROTECT(Rf_allocVector(STRSXP, CL_N_DTYPES));
  for (int i = 0; i < CL_N_DTYPES; i++)
    SET_STRING_ELT(out, i, Rf_mkChar(cl_dtype_name((cl_dtype)i)));
  UNPROTECT(1);
  return out;
}

SEXP ffi_model_config(SEXP ptr) {
  cl_model *m = r_model(ptr);
  const cl_config *cfg = cl_model_config(m);
  int nprotect = 0;
  const char *const names[] = {"input_dim", "hidden_dims", "kernel_sizes", "n_layers",
                         "bias",      "device",      "dtype",        "threads",
                         "memory_limit", "backend",  "n_params",     "peephole",
                         "conv_math",    "dropout",  "recurrent_dropout", "dropout_masks",
                         "forecaster",   "patch",    "head",     "thread_split", "geometry"};
  SEXP out = PROTECT(r_named_list(names, (int)(sizeof names / sizeof names[0])));
  nprotect++;

  SEXP hd = PROTECT(Rf_allocVector(INTSXP, cfg->n_layers));
  nprotect++;
  SEXP ks = PROTECT(Rf_allocVector(INTSXP, cfg->n_layers));
  nprotect++;
  SEXP dx = PROTECT(Rf_allocVector(REALSXP, cfg->n_layers));
  nprotect++;
  SEXP dr = PROTECT(Rf_allocVector(REALSXP, cfg->n_layers));
  nprotect++;
  for (int l = 0; l < cfg->n_layers; l++) {
    INTEGER(hd)[l] = cfg->hidden_dims[l];
    INTEGER(ks)[l] = cfg->kernel_sizes[l];
    REAL(dx)[l] = cfg->dropout[l];
    REAL(dr)[l] = cfg->recurrent_dropout[l];
  }
  SET_VECTOR_ELT(out, 13, dx);
  SET_VECTOR_ELT(out, 14, dr);
  SET_VECTOR_ELT(out, 15, Rf_mkString(cl_dropout_masks_name(cfg->dropout_masks)));
  SET_VECTOR_ELT(out, 16, Rf_ScalarLogical(cfg->forecaster != 0));
  SET_VECTOR_ELT(out, 17, Rf_ScalarInteger(cfg->forecaster && cfg->patch > 1 ? cfg->patch : 1));
  SET_VECTOR_ELT(out, 18, Rf_ScalarLogical(cfg->head != 0));
  SET_VECTOR_ELT(out, 19, Rf_mkString(cl_model_thread_split(m)));
  SET_VECTOR_ELT(out, 0, Rf_ScalarInteger(cfg->input_dim));
  SET_VECTOR_ELT(out, 1, hd);
  SET_VECTOR_ELT(out, 2, ks);
  SET_VECTOR_ELT(out, 3, Rf_ScalarInteger(cfg->n_layers));
  SET_VECTOR_ELT(out, 4, Rf_ScalarLogical(cfg->bias != 0));
  SET_VECTOR_ELT(out, (int)(sizeof names / sizeof names[0]) - 1, r_geometry(cfg));
  SET_VECTOR_ELT(out, 5, Rf_mkString(cl_device_name(cfg->device)));
  SET_VECTOR_ELT(out, 6, Rf_mkString(cl_dtype_name(cfg->dtype)));
  SET_VECTOR_ELT(out, 7, Rf_ScalarInteger(cfg->n_threads));
  SET_VECTOR_ELT(out, 8, Rf_ScalarReal((double)cfg->memory_limit));
  const char *be = cl_model_backend_name(m);
  SET_VECTOR_ELT(out, 9, Rf_mkString(be != NULL ? be : ""));
  SET_VECTOR_ELT(out, 10, Rf_ScalarReal((double)cl_model_n_params(m)));
  SET_VECTOR_ELT(out, 11, r_peephole(cfg));
  SET_VECTOR_ELT(out, 12, Rf_mkString(cl_model_conv_math(m)));
  UNPROTECT(nprotect);
  return out;
}

static double r_uniform01(void *ctx) {
  (void)ctx;
  return unif_rand();
}

SEXP ffi_model_init_params(SEXP ptr) {
  cl_model *m = r_model(ptr);
  GetRNGstate();
  cl_status st = cl_model_init_params(m, r_uniform01, NULL);
  /* The draws happened either way; R's seed must move on before raising. */
  PutRNGstate();
  R_CL_CHECK(m, st);
  return R_NilValue;
}

SEXP ffi_models_alive(void) { return Rf_ScalarInteger(cl_models_alive()); }

/* dtype: a storage type's name. */
SEXP ffi_set_dtype(SEXP ptr, SEXP dtype) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_set_dtype(m, r_dtype(dtype));
  R_CL_CHECK(m, st);
  return R_NilValue;
}

SEXP ffi_set_loss_scale(SEXP ptr, SEXP init_scale, SEXP growth_factor, SEXP backoff_factor,
                        SEXP growth_interval) {
  cl_model *m = r_model(ptr);
  cl_status st = cl_model_set_loss_scale(m, Rf_asReal(init_scale), Rf_asReal(growth_factor),
                                         Rf_asReal(backoff_factor), Rf_asInteger(growth_interval));
  R_CL_CHECK(m, st);
  return R_NilValue;
}

SEXP ffi_loss_scale(SEXP ptr) {
  cl_model *m = r_model(ptr);
  cl_loss_scale ls;
  memset(&ls, 0, sizeof ls);
  cl_status st = cl_model_get_loss_scale(m, &ls);
  R_CL_CHECK(m, st);
  const char *const names[] = {"scale",          "growth_interval", "clean_steps",
                               "skipped_steps",  "skipped_in_a_row", "init_scale",
                               "growth_factor",  "backoff_factor"};
  SEXP out = PROTECT(r_named_list(names, 8));
  SET_VECTOR_ELT(out, 0, Rf_ScalarReal(ls.scale));
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger(ls.growth_interval));
  SET_VECTOR_ELT(out, 2, Rf_ScalarInteger(ls.clean_steps));
  SET_VECTOR_ELT(out, 3, Rf_ScalarReal((double)ls.skipped_steps));
  SET_VECTOR_ELT(out, 4, Rf_ScalarInteger(ls.skipped_in_a_row));
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal(ls.init_scale));
  SET_VECTOR_ELT(out, 6, Rf_ScalarReal(ls.growth_factor));
  SET_VECTOR_ELT(out, 7, Rf_ScalarReal(ls.backoff_factor));
  UNPROTECT(1);
  return out;
}
