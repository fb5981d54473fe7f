/*
 * client.c -- a package's C code calling convlstm through its C interface
 * (convlstm_api.h, found through LinkingTo: convlstm), as convlstm's
 * tests/testthat/test-api-linkingto.R builds and runs it.
 *
 * It shows the rules the header states: check the interface first; a model
 * made in C belongs to the caller, here to an external pointer whose
 * finalizer frees it (or client_free(), explicitly); failures come back as a
 * status and a message, which this file turns into R errors after it has
 * let go of what it holds.
 */
#define R_NO_REMAP
#define STRICT_R_HEADERS
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>
#include <R_ext/Visibility.h>

#include <stdint.h>
#include <string.h>

#include <convlstm_api.h>

/* ---- the model behind an external pointer ---------------------------- */

static void model_finalize(SEXP ptr) {
  cl_model *m = (cl_model *)R_ExternalPtrAddr(ptr);
  if (m == NULL) return;
  convlstm_model_free(m);
  R_ClearExternalPtr(ptr);
}

/* An empty handle, made before the model so that no R allocation can fail
 * while a model nobody owns is held. */
static SEXP new_handle(void) {
  return R_MakeExternalPtr(NULL, Rf_install("convlstmclient_model"), R_NilValue);
}

/* What convlstm_model_create or convlstm_model_load answered (s, m, err):
 * the core's message as an R error, or m owned by ptr, whose finalizer
 * frees it from here on. */
static void own_model(SEXP ptr, cl_status s, cl_model *m, const char *err, const char *what) {
  if (s != CL_OK) Rf_error("%s: %s (%s)", what, err, convlstm_status_name(s));
  R_SetExternalPtrAddr(ptr, m);
  R_RegisterCFinalizerEx(ptr, model_finalize, TRUE);
}

/* Float32 on the CPU with this many threads: both ways of making a model
 * start from it. */
static cl_config cpu_config(SEXP threads) {
  cl_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.device = CL_DEVICE_CPU;
  cfg.dtype = CL_F32;
  cfg.n_threads = Rf_asInteger(threads);
  return cfg;
}

static cl_model *get_model(SEXP ptr) {
  if (TYPEOF(ptr) != EXTPTRSXP || R_ExternalPtrTag(ptr) != Rf_install("convlstmclient_model"))
    Rf_error("not a model of convlstmclient");
  cl_model *m = (cl_model *)R_ExternalPtrAddr(ptr);
  if (m == NULL) Rf_error("this model has been freed");
  return m;
}

/* The core never jumps: a failure is a status and the model's message. */
static void check(cl_status s, cl_model *m, const char *what) {
  if (s != CL_OK)
    Rf_error("%s: %s (%s)", what, convlstm_model_error(m), convlstm_status_name(s));
}

/* ---- entry points ----------------------------------------------------- */

static SEXP c_api_check(void) {
  char err[512];
  convlstm_api_check(err, sizeof err);
  return Rf_mkString(err);
}

/* A small seeded generator (splitmix64) for the core's initialiser: the
 * point is that the caller supplies the randomness, not which one. */
static double uniform01(void *ctx) {
  uint64_t *state = (uint64_t *)ctx;
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (double)(z >> 11) * (1.0 / 9007199254740992.0);
}

static SEXP c_model(SEXP input_dim, SEXP hidden_dims, SEXP kernel_sizes, SEXP bias,
                    SEXP threads, SEXP seed) {
  cl_config cfg = cpu_config(threads);
  cfg.input_dim = Rf_asInteger(input_dim);
  cfg.n_layers = Rf_length(hidden_dims);
  if (cfg.n_layers > CL_MAX_LAYERS || Rf_length(kernel_sizes) != cfg.n_layers)
    Rf_error("hidden_dims and kernel_sizes: one per layer, at most %d", CL_MAX_LAYERS);
  for (int l = 0; l < cfg.n_layers; l++) {
    cfg.hidden_dims[l] = INTEGER(hidden_dims)[l];
    cfg.kernel_sizes[l] = INTEGER(kernel_sizes)[l];
  }
  cfg.bias = Rf_asLogical(bias) == TRUE;

  SEXP ptr = PROTECT(new_handle());
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN];
  cl_status s = convlstm_model_create(&cfg, &m, err, sizeof err);
  own_model(ptr, s, m, err, "model_create");
  uint64_t state = (uint64_t)Rf_asReal(seed);
  check(convlstm_model_init_params(m, uniform01, &state), m, "model_init_params");
  UNPROTECT(1);
  return ptr;
}

static SEXP c_load(SEXP path, SEXP threads) {
  cl_config runtime = cpu_config(threads);
  SEXP ptr = PROTECT(new_handle());
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN];
  cl_status s = convlstm_model_load(CHAR(STRING_ELT(path, 0)), &runtime, 0, &m, err, sizeof err);
  own_model(ptr, s, m, err, "model_load");
  UNPROTECT(1);
  return ptr;
}

static SEXP c_free(SEXP ptr) {
  model_finalize(ptr);
  return R_NilValue;
}

static SEXP c_alive(void) { return Rf_ScalarInteger(convlstm_models_alive()); }

static cl_optim adam(double lr) {
  cl_optim o;
  memset(&o, 0, sizeof o);
  o.kind = CL_OPTIM_ADAM;
  o.lr = lr;
  o.beta1 = 0.9;
  o.beta2 = 0.999;
  o.eps = 1e-8;
  return o;
}

static SEXP category_vector(const size_t *bytes) {
  SEXP out = PROTECT(Rf_allocVector(REALSXP, CL_MEM_NCAT));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, CL_MEM_NCAT));
  for (int c = 0; c < CL_MEM_NCAT; c++) {
    REAL(out)[c] = (double)bytes[c];
    SET_STRING_ELT(names, c, Rf_mkChar(convlstm_mem_category_name((cl_mem_category)c)));
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

/* The plan of a step: bytes per category, then total, arena and reserved. */
static SEXP c_plan(SEXP ptr, SEXP shape, SEXP training, SEXP lr) {
  cl_model *m = get_model(ptr);
  const int *d = INTEGER(shape);
  cl_optim opt = adam(Rf_asReal(lr));
  cl_plan plan;
  memset(&plan, 0, sizeof plan);
  check(convlstm_model_plan(m, d[0], d[1], d[2], d[3], Rf_asLogical(training), &opt, NULL,
                            &plan),
        m, "model_plan");
  size_t bytes[CL_MEM_NCAT];
  memcpy(bytes, plan.by_category, sizeof bytes);
  double total = (double)plan.total, arena = (double)plan.arena,
         reserved = (double)plan.reserved;
  convlstm_plan_free(&plan); /* before any R allocation can fail */
  SEXP by = PROTECT(category_vector(bytes));
  SEXP out = PROTECT(Rf_allocVector(REALSXP, CL_MEM_NCAT + 3));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, CL_MEM_NCAT + 3));
  SEXP by_names = Rf_getAttrib(by, R_NamesSymbol);
  for (int c = 0; c < CL_MEM_NCAT; c++) {
    REAL(out)[c] = REAL(by)[c];
    SET_STRING_ELT(names, c, STRING_ELT(by_names, c));
  }
  const char *extra[] = {"total", "arena", "reserved"};
  const double values[] = {total, arena, reserved};
  for (int i = 0; i < 3; i++) {
    REAL(out)[CL_MEM_NCAT + i] = values[i];
    SET_STRING_ELT(names, CL_MEM_NCAT + i, Rf_mkChar(extra[i]));
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(3);
  return out;
}

/* An R array [B, T, C, H, W] or [B, C, H, W] (double, column-major) is a
 * host array as it is: no copy. */
static cl_host_array host_array(SEXP x) {
  cl_host_array a;
  memset(&a, 0, sizeof a);
  SEXP dim = Rf_getAttrib(x, R_DimSymbol);
  if (TYPEOF(x) != REALSXP || (Rf_length(dim) != 4 && Rf_length(dim) != 5))
    Rf_error("x and y must be double arrays of 4 or 5 dimensions");
  a.data = REAL(x);
  a.format = CL_HOST_R_F64;
  a.ndim = Rf_length(dim);
  for (int i = 0; i < a.ndim; i++) a.dims[i] = INTEGER(dim)[i];
  return a;
}

/* One Adam step on MSE against the last state: what convlstm's
 * convlstm_train_step(model, x, y, convlstm_optimizer_adam(lr)) does. */
static SEXP c_train_step(SEXP ptr, SEXP x, SEXP y, SEXP lr) {
  cl_model *m = get_model(ptr);
  cl_host_array hx = host_array(x), hy = host_array(y);
  cl_optim opt = adam(Rf_asReal(lr));
  double loss = 0;
  check(convlstm_model_train_step(m, &hx, &hy, CL_TARGET_LAST_STATE, &opt, NULL, &loss), m,
        "model_train_step");
  return Rf_ScalarReal(loss);
}

static SEXP c_memory_stats(SEXP ptr) {
  cl_model *m = get_model(ptr);
  cl_mem_stats s;
  check(convlstm_model_memory_stats(m, &s), m, "model_memory_stats");
  const char *names[] = {"current", "peak", "allocated", "peak_allocated", "reserved",
                         "peak_reserved"};
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 6));
  SEXP nm = PROTECT(Rf_allocVector(STRSXP, 6));
  for (int i = 0; i < 6; i++) SET_STRING_ELT(nm, i, Rf_mkChar(names[i]));
  SET_VECTOR_ELT(out, 0, category_vector(s.current));
  SET_VECTOR_ELT(out, 1, category_vector(s.peak));
  SET_VECTOR_ELT(out, 2, Rf_ScalarReal((double)s.allocated));
  SET_VECTOR_ELT(out, 3, Rf_ScalarReal((double)s.peak_allocated));
  SET_VECTOR_ELT(out, 4, Rf_ScalarReal((double)s.reserved));
  SET_VECTOR_ELT(out, 5, Rf_ScalarReal((double)s.peak_reserved));
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}

static SEXP c_params(SEXP ptr) {
  cl_model *m = get_model(ptr);
  int n = convlstm_model_n_tensors(m);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n));
  for (int i = 0; i < n; i++) {
    const char *name = NULL;
    int ndim = 0, dims[4] = {0, 0, 0, 0};
    check(convlstm_model_tensor_info(m, i, &name, &ndim, dims), m, "model_tensor_info");
    R_xlen_t len = 1;
    for (int k = 0; k < ndim; k++) len *= dims[k];
    SET_STRING_ELT(names, i, Rf_mkChar(name));
    SEXP v = PROTECT(Rf_allocVector(REALSXP, len));
    float *buf = (float *)R_alloc((size_t)len, sizeof(float));
    check(convlstm_model_get_param(m, name, buf, (size_t)len), m, "model_get_param");
    for (R_xlen_t k = 0; k < len; k++) REAL(v)[k] = buf[k];
    SET_VECTOR_ELT(out, i, v);
    UNPROTECT(1);
  }
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

#define CALLDEF(name, n) {#name, (DL_FUNC)(void (*)(void))&name, n}
static const R_CallMethodDef call_entries[] = {
    CALLDEF(c_api_check, 0),   CALLDEF(c_model, 6),        CALLDEF(c_load, 2),
    CALLDEF(c_free, 1),        CALLDEF(c_alive, 0),        CALLDEF(c_plan, 4),
    CALLDEF(c_train_step, 4),  CALLDEF(c_memory_stats, 1), CALLDEF(c_params, 1),
    {NULL, NULL, 0}};

void attribute_visible R_init_convlstmclient(DllInfo *dll) {
  R_registerRoutines(dll, NULL, call_entries, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  R_forceSymbols(dll, TRUE);
}
