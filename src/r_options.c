/*
 * r_options.c -- the one place where options that cross .Call are decoded:
 * named lists (an optimizer, a step's options) and enums passed by name
 * (dtype, device, target, what a forward returns). R/ffi.R builds them with
 * the same names; a missing or mistyped element is an internal error that
 * names it, since the exported R functions have checked the user's values.
 *
 * It is not where user arguments are checked (R/errors.R and the exported
 * functions do that, naming the argument).
 */
#include <string.h>

#include "r_convlstm.h"

/* The element `name` of list x, or R_NilValue (r_arrays.c). */
static SEXP field(SEXP x, const char *name) { return r_option(x, name); }

static double num(SEXP x, const char *name, const char *what) {
  SEXP v = field(x, name);
  if ((TYPEOF(v) != REALSXP && TYPEOF(v) != INTSXP) || Rf_length(v) != 1)
    r_raise_invalid("internal: %s needs a number `%s`", what, name);
  return Rf_asReal(v);
}

/* The position of string s in names[0..n), for an enum passed by name. */
static int choice(SEXP s, const char *const *names, int n, const char *what) {
  if (TYPEOF(s) == STRSXP && Rf_length(s) == 1 && STRING_ELT(s, 0) != NA_STRING) {
    const char *v = CHAR(STRING_ELT(s, 0));
    for (int i = 0; i < n; i++)
      if (strcmp(v, names[i]) == 0) return i;
  }
  r_raise_invalid("internal: %s must be one of its names", what);
  return -1; /* not reached */
}

/* A byte count from R's double: 0 (no limit) for 0, NA or below; beyond
 * size_t an error naming the argument (the cast would be undefined). */
size_t r_bytes(SEXP s, const char *arg) {
  double b = Rf_asReal(s);
  if (!(b > 0)) return 0;
  if (b >= (double)SIZE_MAX) /* 2^64 as a double */
    r_raise_invalid("`%s` must be at most %.4g bytes (16 EiB), not %.4g", arg, (double)SIZE_MAX,
                    b);
  return (size_t)b;
}

cl_dtype r_dtype(SEXP s) {
  const char *names[CL_N_DTYPES];
  for (int i = 0; i < CL_N_DTYPES; i++) names[i] = cl_dtype_name((cl_dtype)i);
  return (cl_dtype)choice(s, names, CL_N_DTYPES, "dtype");
}

cl_device r_device(SEXP s) {
  const char *names[2] = {cl_device_name(CL_DEVICE_CPU), cl_device_name(CL_DEVICE_CUDA)};
  return choice(s, names, 2, "device") == 1 ? CL_DEVICE_CUDA : CL_DEVICE_CPU;
}

cl_target r_target(SEXP s) {
  static const char *const names[] = {"last_state", "sequence"};
  return choice(s, names, 2, "target") == 1 ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
}

r_forward_what r_forward_mode(SEXP s) {
  static const char *const names[] = {"all",  "sequence",    "last_state",
                                      "none", "last_states", "frames"};
  return (r_forward_what)choice(s, names, 6, "what a forward returns");
}

/* list(kind = "adam" | "sgd" | "adamw" | "rmsprop", lr, beta1, beta2, eps,
 * momentum, weight_decay, amsgrad = NULL | TRUE | FALSE, alpha = NULL | a
 * number, centered = NULL | TRUE | FALSE): c_optim() in R/ffi.R. The
 * kinds' names are the core's (cl_optim_kind_name), the one table. */
void r_optim(SEXP opt, cl_optim *out) {
  if (TYPEOF(opt) != VECSXP)
    r_raise_invalid("`optimizer` must be made by convlstm_optimizer_adam(), convlstm_optimizer_adamw(), "
                    "convlstm_optimizer_sgd() or convlstm_optimizer_rmsprop()");
  memset(out, 0, sizeof *out);
  const char *names[CL_N_OPTIM_KINDS];
  for (int k = 0; k < CL_N_OPTIM_KINDS; k++) names[k] = cl_optim_kind_name((cl_optim_kind)(k + 1));
  out->kind = (cl_optim_kind)(1 + choice(field(opt, "kind"), names, CL_N_OPTIM_KINDS,
                                         "optimizer kind"));
  SEXP ams = field(opt, "amsgrad");
  out->amsgrad = ams != R_NilValue && Rf_asLogical(ams) == TRUE;
  out->lr = num(opt, "lr", "an optimizer");
  out->beta1 = num(opt, "beta1", "an optimizer");
  out->beta2 = num(opt, "beta2", "an optimizer");
  out->eps = num(opt, "eps", "an optimizer");
  out->momentum = num(opt, "momentum", "an optimizer");
  out->weight_decay = num(opt, "weight_decay", "an optimizer");
  SEXP alpha = field(opt, "alpha"), cen = field(opt, "centered");
  if (alpha != R_NilValue) out->alpha = num(opt, "alpha", "an optimizer");
  out->centered = cen != R_NilValue && Rf_asLogical(cen) == TRUE;
}

const cl_optim *r_optim_or_null(SEXP opt, cl_optim *buf) {
  if (opt == R_NilValue) return NULL;
  r_optim(opt, buf);
  return buf;
}

/* The inverse of r_optim (an unprotected new list). */
SEXP r_optim_list(const cl_optim *o) {
  const char *const names[] = {"kind",         "lr",      "beta1", "beta2",   "eps", "momentum",
                               "weight_decay", "amsgrad", "alpha", "centered"};
  SEXP out = PROTECT(r_named_list(names, 10));
  SET_VECTOR_ELT(out, 0, Rf_mkString(cl_optim_kind_name(o->kind)));
  const double v[6] = {o->lr, o->beta1, o->beta2, o->eps, o->momentum, o->weight_decay};
  for (int i = 0; i < 6; i++) SET_VECTOR_ELT(out, i + 1, Rf_ScalarReal(v[i]));
  SET_VECTOR_ELT(out, 7, Rf_ScalarLogical(o->amsgrad != 0));
  SET_VECTOR_ELT(out, 8, Rf_ScalarReal(o->alpha));
  SET_VECTOR_ELT(out, 9, Rf_ScalarLogical(o->centered != 0));
  UNPROTECT(1);
  return out;
}

/* list(checkpoint, recompute_gates, tbptt, accumulation_steps, outputs = "all" | "last_state",
 * dtype = NULL | a dtype's name for cl_model_plan, target = NULL |
 * "last_state" | "sequence" (cl_model_plan only), state_mode = "zero" |
 * "given" | "carry", state = NULL | h and c of every layer, flat, horizon,
 * free_run = NULL | 1 (train_step with a horizon, no teacher forcing),
 * truth = NULL | horizon - 1 integer flags (scheduled sampling, with
 * free_run: 1 feeds that fed-back step the true frame),
 * max_grad_norm = NULL | a number, comm_share = NULL | a number, loss = NULL
 * | a loss's name with delta
 * and pos_weight (and reduction = NULL | its name), weight = NULL | an array shaped as the target | for
 * cl_model_plan only, its number of dimensions): c_step_options() in
 * R/ffi.R. NULL: the plain step. state_buf: R_OPT_ARRAYS of them. */
void r_step_options(SEXP opts, cl_step_options *out, cl_host_array *state_buf) {
  static const char *const modes[] = {"zero", "given", "carry"};
  static const char *const outputs[] = {"all", "last_state"};
  memset(out, 0, sizeof *out);
  if (opts == R_NilValue) return;
  if (TYPEOF(opts) != VECSXP) r_raise_invalid("internal: step options must be a named list");
  out->checkpoint = (int)num(opts, "checkpoint", "step options");
  /* optional: absent or NULL, every step's gates kept */
  if (field(opts, "recompute_gates") != R_NilValue)
    out->recompute_gates = (int)num(opts, "recompute_gates", "step options");
  out->tbptt = (int)num(opts, "tbptt", "step options");
  out->accumulation_steps = (int)num(opts, "accumulation_steps", "step options");
  out->outputs = choice(field(opts, "outputs"), outputs, 2, "outputs") == 1 ? CL_OUTPUTS_LAST
                                                                            : CL_OUTPUTS_ALL;
  SEXP dt = field(opts, "dtype");
  out->plan_dtype = dt == R_NilValue ? 0 : 1 + (int)r_dtype(dt);
  /* optional: absent or NULL, a plan for either target (cl_model_plan only) */
  static const char *const targets[] = {"last_state", "sequence"};
  SEXP tg = field(opts, "target");
  if (tg != R_NilValue) out->plan_target = 1 + choice(tg, targets, 2, "target");
  /* optional: absent or NULL, no clipping */
  SEXP clip = field(opts, "max_grad_norm");
  out->max_grad_norm = clip == R_NilValue ? 0 : num(opts, "max_grad_norm", "step options");
  /* optional: absent or NULL, MSE; names are the core's (cl_loss_name) */
  SEXP loss = field(opts, "loss");
  if (loss != R_NilValue) {
    const char *names[CL_N_LOSSES];
    for (int k = 0; k < CL_N_LOSSES; k++) names[k] = cl_loss_name((cl_loss_kind)k);
    out->loss.kind = (cl_loss_kind)choice(loss, names, CL_N_LOSSES, "loss");
    out->loss.delta = num(opts, "delta", "step options");
    out->loss.pos_weight = num(opts, "pos_weight", "step options");
    /* optional: absent or NULL, the mean */
    SEXP red = field(opts, "reduction");
    if (red != R_NilValue) {
      const char *reds[CL_N_REDUCTIONS];
      for (int k = 0; k < CL_N_REDUCTIONS; k++)
        reds[k] = cl_loss_reduction_name((cl_loss_reduction)k);
      out->loss.reduction = (cl_loss_reduction)choice(red, reds, CL_N_REDUCTIONS, "reduction");
    }
  }
  /* optional: absent or NULL, one process; a number, this rank's share of
   * the global batch, summed over the process's communicator (r_comm.c) */
  SEXP share = field(opts, "comm_share");
  if (share != R_NilValue) {
    out->comm = r_dist_comm();
    out->comm_share = num(opts, "comm_share", "step options");
  }
  out->horizon = (int)num(opts, "horizon", "step options");
  /* optional: absent or NULL, teacher forcing */
  out->free_run =
      field(opts, "free_run") != R_NilValue && num(opts, "free_run", "step options") != 0;
  SEXP truth = field(opts, "truth");
  if (truth != R_NilValue) {
    if (TYPEOF(truth) != INTSXP || Rf_xlength(truth) != (R_xlen_t)out->horizon - 1 ||
        !out->free_run)
      r_raise_invalid("internal: truth must be horizon - 1 integer flags, with free_run");
    out->truth = INTEGER(truth);
  }
  out->state_mode = (cl_state_mode)choice(field(opts, "state_mode"), modes, 3, "state_mode");
  SEXP w = field(opts, "weight");
  if (w != R_NilValue && state_buf) {
    cl_host_array *wb = &state_buf[2 * CL_MAX_LAYERS];
    if (TYPEOF(w) == INTSXP && Rf_length(w) == 1) { /* a plan: the shape's rank only */
      memset(wb, 0, sizeof *wb);
      wb->ndim = INTEGER(w)[0];
    } else {
      r_host_array(w, Rf_length(Rf_getAttrib(w, R_DimSymbol)), "weight", wb);
    }
    out->weight = wb;
  }
  SEXP st = field(opts, "state");
  if (st == R_NilValue) return;
  if (TYPEOF(st) != VECSXP || Rf_length(st) > 2 * CL_MAX_LAYERS || !state_buf)
    r_raise_invalid("internal: a given state must be a list of h and c arrays");
  for (int i = 0; i < Rf_length(st); i++)
    r_host_array(VECTOR_ELT(st, i), 4, "state", &state_buf[i]);
  out->state = state_buf;
}

/* A training step's loss, with attribute grad_norm (the norm before
 * clipping) when the step measured it (an unprotected new vector). */
SEXP r_step_loss(const cl_model *m, double loss) {
  SEXP out = PROTECT(Rf_ScalarReal(loss));
  double norm = cl_model_grad_norm(m);
  if (!ISNAN(norm)) Rf_setAttrib(out, Rf_install("grad_norm"), Rf_ScalarReal(norm));
  UNPROTECT(1);
  return out;
}
