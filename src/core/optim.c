/*
 * core/optim.c -- optimizer updates over the flat parameter buffer (one
 * kernel launch for all parameters) and the optimizer state they keep. The
 * update rules themselves are the backends' (adam_update, sgd_update,
 * rmsprop_update), written to match torch.optim (Adam with or without
 * amsgrad, AdamW, SGD, RMSprop). Every update is guarded: a dry run of it
 * (adam_check, sgd_check, rmsprop_check) first, and an update that would write Inf or NaN
 * into a parameter or a moment is refused with the model untouched. The
 * training step is in train.c.
 *
 * The state lives in three buffers of the parameters' size, by role:
 *   opt_m     Adam's exp_avg; SGD's and RMSprop's momentum_buffer (momentum > 0)
 *   opt_v     Adam's exp_avg_sq; RMSprop's square_avg
 *   opt_vmax  Adam's max_exp_avg_sq (amsgrad); RMSprop's grad_avg (centered)
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* v >= 0 and finite once it is the 32-bit float the update uses (a double
 * beyond float's range would become inf and write inf into the weights). */
static int float_nonneg(double v) { return v >= 0 && isfinite((float)v); }

/* The one table of optimizer names, by kind (files and R use these). */
static const char *const KIND_NAME[CL_N_OPTIM_KINDS + 1] = {NULL,    "adam", "sgd",
                                                           "adamw", "rmsprop"};

/* ... and as people write them, for messages. */
static const char *const KIND_TITLE[CL_N_OPTIM_KINDS + 1] = {"none",  "Adam", "SGD",
                                                            "AdamW", "RMSprop"};

const char *cl_optim_kind_name(cl_optim_kind k) {
  return k >= 1 && k <= CL_N_OPTIM_KINDS ? KIND_NAME[k] : NULL;
}

const char *cl_optim_kind_title(cl_optim_kind k) {
  return k >= 1 && k <= CL_N_OPTIM_KINDS ? KIND_TITLE[k] : KIND_TITLE[0];
}

cl_optim_kind cl_optim_kind_of(const char *name) {
  for (int k = 1; name && k <= CL_N_OPTIM_KINDS; k++)
    if (strcmp(name, KIND_NAME[k]) == 0) return (cl_optim_kind)k;
  return (cl_optim_kind)0;
}

cl_status cl_optim_check(const cl_optim *o, char *err, size_t errlen) {
  if (!cl_optim_kind_name(o->kind)) {
    snprintf(err, errlen, "unknown optimizer kind %d", (int)o->kind);
    return CL_E_INVALID;
  }
  const int adam = cl_optim_is_adam(o->kind), rms = o->kind == CL_OPTIM_RMSPROP;
  if (o->centered != 0 && (o->centered != 1 || !rms)) {
    snprintf(err, errlen, "`centered` must be 0 or 1, and 1 only for RMSprop, not %d",
             o->centered);
    return CL_E_INVALID;
  }
  if (o->amsgrad != 0 && (o->amsgrad != 1 || !adam)) {
    snprintf(err, errlen, "`amsgrad` must be 0 or 1, and 1 only for Adam or AdamW, not %d",
             o->amsgrad);
    return CL_E_INVALID;
  }
  const char *bad = NULL;
  double v = 0;
  if (!float_nonneg(o->lr))
    bad = "`lr` must be a number >= 0 within float's range (3.4e38)", v = o->lr;
  else if (!float_nonneg(o->weight_decay))
    bad = "`weight_decay` must be a number >= 0 within float's range (3.4e38)",
    v = o->weight_decay;
  else if (adam && !(o->beta1 >= 0 && (float)o->beta1 < 1.0f))
    bad = "`betas` must lie in [0, 1) as 32-bit floats (within 3e-8 of 1 a value rounds to 1): "
          "the first is wrong",
    v = o->beta1;
  else if (adam && !(o->beta2 >= 0 && (float)o->beta2 < 1.0f))
    bad = "`betas` must lie in [0, 1) as 32-bit floats (within 3e-8 of 1 a value rounds to 1): "
          "the second is wrong",
    v = o->beta2;
  else if (rms && !(o->alpha >= 0 && (float)o->alpha < 1.0f))
    bad = "`alpha` must lie in [0, 1) as a 32-bit float (within 3e-8 of 1 a value rounds to 1)",
    v = o->alpha;
  else if ((adam || rms) && !((float)o->eps > 0 && isfinite((float)o->eps)))
    bad = "`eps` must be > 0 and finite as a 32-bit float (from 1.4e-45 to 3.4e38)", v = o->eps;
  else if (!adam && !float_nonneg(o->momentum))
    bad = "`momentum` must be a number >= 0 within float's range (3.4e38)", v = o->momentum;
  if (!bad) return CL_OK;
  snprintf(err, errlen, "%s, not %.17g", bad, v);
  return CL_E_INVALID;
}

cl_status cl_check_optim(cl_model *m, const cl_optim *o) {
  char err[CL_ERRMSG_LEN];
  cl_status st = cl_optim_check(o, err, sizeof err);
  return st == CL_OK ? CL_OK : cl_fail(m, st, "%s", err);
}

static cl_status alloc_state(cl_model *m, float **p) {
  size_t pb = m->n_params * sizeof(float);
  CL_TRY(cl_model_alloc(m, CL_MEM_OPTIMIZER, pb, (void **)p));
  cl_status s = m->be->iface->memset0(m->be, *p, pb);
  if (s != CL_OK) {
    cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, *p, pb);
    *p = NULL;
    return cl_fail_backend(m, s, "memset");
  }
  return CL_OK;
}

/* amsgrad's maximum goes when a step no longer asks for it (so the state
 * held is what the plan counts); torch starts it at zeros, here too when
 * amsgrad is turned on later. */
static void drop_vmax(cl_model *m) {
  cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, m->opt_vmax, m->n_params * sizeof(float));
  m->opt_vmax = NULL;
}

cl_status cl_optim_ensure(cl_model *m, const cl_optim *o, int *created) {
  if (m->opt_kind != o->kind) cl_model_optimizer_reset(m);
  m->opt_kind = o->kind;
  const int need_x = cl_optim_keeps(o, CL_OPT_STATE_VMAX);
  if (!need_x && m->opt_vmax) drop_vmax(m);
  const float *had_m = m->opt_m, *had_v = m->opt_v, *had_x = m->opt_vmax;
  if (cl_optim_keeps(o, CL_OPT_STATE_M) && !m->opt_m) {
    CL_TRY(alloc_state(m, &m->opt_m));
    m->opt_m_fresh = 1;
  }
  cl_status s = CL_OK;
  if (cl_optim_keeps(o, CL_OPT_STATE_V) && !m->opt_v) s = alloc_state(m, &m->opt_v);
  if (s == CL_OK && need_x && !m->opt_vmax) s = alloc_state(m, &m->opt_vmax);
  if (s != CL_OK) { /* all or nothing: the model stays as it was */
    if (!had_x) drop_vmax(m);
    if (!had_v) cl_model_optimizer_reset(m);
    return s;
  }
  if (created) *created = m->opt_m != had_m || m->opt_v != had_v || m->opt_vmax != had_x;
  return CL_OK;
}

/* The state-dict tensor holding element i of the flat parameter buffer
 * (tensors.c's table; a weight is two halves, the rest whole). */
static const char *tensor_at(const cl_model *m, size_t i) {
  for (int k = 0; k < m->n_tensors; k++) {
    cl_tensor_spec t = cl_cfg_tensor(&m->cfg, k);
    const cl_layer *L = &m->layer[t.layer];
    int in;
    if (t.role == CL_TR_WEIGHT) {
      in = (i >= L->off_wx && i < L->off_wx + L->n_wx) ||
           (i >= L->off_wh && i < L->off_wh + L->n_wh);
    } else {
      size_t from = cl_whole_offset(L, t.role);
      in = i >= from && i < from + cl_whole_numel(L, t.role);
    }
    if (in) return m->tensor_name[k];
  }
  return "?";
}

/* The guard's refusal, naming the tensor (torch's state names) and why. */
cl_status cl_optim_refuse(cl_model *m, cl_optim_kind kind, uint64_t fault) {
  const char *name = tensor_at(m, (size_t)(fault / 8));
  const int part = (int)(fault / 2 % 4);
  const char *what = fault % 2 ? "NaN" : "Inf";
  if (part == CL_PART_GRAD)
    return cl_fail(m, CL_E_INVALID,
                   "the gradients are not finite (the gradient of `%s` holds %s): parameters left "
                   "unchanged",
                   name, what);
  const int rms = kind == CL_OPTIM_RMSPROP;
  const char *state = part == CL_PART_PARAM    ? "the parameter"
                      : part == CL_PART_V      ? (rms ? "square_avg of" : "exp_avg_sq of")
                      : cl_optim_is_adam(kind) ? "exp_avg of"
                                               : "momentum_buffer of";
  return cl_fail(m, CL_E_INVALID,
                 "the update would make %s `%s` %s (it overflows 32-bit floats, beyond 3.4e38), "
                 "so it was not applied: parameters and optimizer state left unchanged. A smaller "
                 "learning rate, weight decay or momentum, or inputs and targets of a smaller "
                 "scale, avoid it",
                 state, name, what);
}

void cl_optim_args(const cl_model *m, const cl_optim *o, int keep, cl_update_args *u) {
  memset(u, 0, sizeof *u);
  u->p = m->params;
  u->g = m->grads;
  u->m = keep ? m->opt_m : NULL;
  u->v = keep ? m->opt_v : NULL;
  u->vmax = keep && o->amsgrad ? m->opt_vmax : NULL;
  u->n = m->n_params;
  u->adam = cl_optim_is_adam(o->kind);
  u->rmsprop = o->kind == CL_OPTIM_RMSPROP;
  if (u->rmsprop) u->vmax = keep && o->centered ? m->opt_vmax : NULL;
  cl_adam_hp ahp = {(float)o->lr,           (float)o->beta1, (float)o->beta2, (float)o->eps,
                    (float)o->weight_decay, keep ? m->opt_steps + 1 : 1,
                    o->kind == CL_OPTIM_ADAMW, o->amsgrad};
  cl_sgd_hp shp = {(float)o->lr, (float)o->momentum, (float)o->weight_decay,
                   !u->m || m->opt_m_fresh};
  cl_rmsprop_hp rhp = {(float)o->lr,           (float)o->alpha,    (float)o->eps,
                       (float)o->weight_decay, (float)o->momentum, o->centered};
  u->ahp = ahp;
  u->shp = shp;
  u->rhp = rhp;
}

void cl_optim_applied(cl_model *m) {
  m->opt_m_fresh = 0;
  m->opt_steps++;
}

cl_status cl_model_optimizer_step(cl_model *m, const cl_optim *o) {
  m->err[0] = '\0';
  CL_TRY(cl_check_optim(m, o));
  if (!m->grads) return cl_fail(m, CL_E_STATE, "no gradients yet: run backward first");
  const struct cl_backend_i *be = m->be->iface;
  /* The state this step starts from, before cl_optim_ensure() makes it:
   * none (zeros) where it is to be created or the kind changes (ensure()
   * then resets the step count too). The guard runs on that, so a refused
   * step leaves even a switch of optimizer undone and allocates nothing; the
   * update gets the same arguments after ensure(). (A training step makes
   * the state first and runs both on the device: cl_backend_update_step.) */
  cl_update_args u;
  cl_optim_args(m, o, m->opt_kind == o->kind, &u);
  uint64_t fault = CL_FAULT_NONE;
  if (u.adam)
    CL_KERNEL(m, be->adam_check(m->be, u.p, u.g, u.m, u.v, u.vmax, u.n, &u.ahp, &fault));
  else if (u.rmsprop)
    CL_KERNEL(m, be->rmsprop_check(m->be, u.p, u.g, u.v, u.m, u.vmax, u.n, &u.rhp, &fault));
  else
    CL_KERNEL(m, be->sgd_check(m->be, u.p, u.g, u.m, u.n, &u.shp, &fault));
  if (fault != CL_FAULT_NONE) return cl_optim_refuse(m, o->kind, fault);
  CL_TRY(cl_optim_ensure(m, o, NULL));
  if (u.adam)
    CL_KERNEL(m, be->adam_update(m->be, m->params, m->grads, m->opt_m, m->opt_v, m->opt_vmax,
                                 m->n_params, &u.ahp));
  else if (u.rmsprop)
    CL_KERNEL(m, be->rmsprop_update(m->be, m->params, m->grads, m->opt_v, m->opt_m, m->opt_vmax,
                                    m->n_params, &u.rhp));
  else
    CL_KERNEL(m, be->sgd_update(m->be, m->params, m->grads, m->opt_m, m->n_params, &u.shp));
  cl_optim_applied(m);
  return CL_OK;
}

void cl_optim_free(cl_model *m) {
  size_t pb = m->n_params * sizeof(float);
  cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, m->opt_m, pb);
  cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, m->opt_v, pb);
  drop_vmax(m);
  m->opt_m = m->opt_v = NULL;
  m->opt_m_fresh = 0;
  m->opt_steps = 0;
  m->opt_kind = 0;
}

cl_status cl_model_optimizer_reset(cl_model *m) {
  cl_optim_free(m);
  return CL_OK;
}
