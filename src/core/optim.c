/*
 * core/optim.c -- optimizer updates over the flat parameter buffer (one
 * kernel launch for all parameters) and the optimizer state they keep. The
 * update rules themselves are the backends' (adam_update, sgd_update),
 * written to match torch.optim. The training step is in train.c.
 */
#include "internal.h"

#include <math.h>

cl_status cl_check_optim(cl_model *m, const cl_optim *o) {
  if (o->kind != CL_OPTIM_ADAM && o->kind != CL_OPTIM_SGD)
    return cl_fail(m, CL_E_INVALID, "unknown optimizer kind %d", (int)o->kind);
  if (!(o->lr >= 0) || !isfinite(o->lr))
    return cl_fail(m, CL_E_INVALID, "lr must be a finite number >= 0");
  if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
    return cl_fail(m, CL_E_INVALID, "weight_decay must be a finite number >= 0");
  if (o->kind == CL_OPTIM_ADAM) {
    if (!(o->beta1 >= 0 && o->beta1 < 1) || !(o->beta2 >= 0 && o->beta2 < 1))
      return cl_fail(m, CL_E_INVALID, "betas must lie in [0, 1)");
    if (!(o->eps > 0) || !isfinite(o->eps))
      return cl_fail(m, CL_E_INVALID, "eps must be a finite number > 0");
  } else if (!(o->momentum >= 0) || !isfinite(o->momentum)) {
    return cl_fail(m, CL_E_INVALID, "momentum must be a finite number >= 0");
  }
  return CL_OK;
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

cl_status cl_optim_ensure(cl_model *m, const cl_optim *o, int *created) {
  if (m->opt_kind != o->kind) cl_model_optimizer_reset(m);
  m->opt_kind = o->kind;
  const float *had_m = m->opt_m, *had_v = m->opt_v;
  int need_m = o->kind == CL_OPTIM_ADAM || o->momentum != 0;
  if (need_m && !m->opt_m) {
    CL_TRY(alloc_state(m, &m->opt_m));
    m->opt_m_fresh = 1;
  }
  if (o->kind == CL_OPTIM_ADAM && !m->opt_v) {
    cl_status s = alloc_state(m, &m->opt_v);
    if (s != CL_OK) { /* all or nothing: the model stays as it was */
      cl_model_optimizer_reset(m);
      return s;
    }
  }
  if (created) *created = m->opt_m != had_m || m->opt_v != had_v;
  return CL_OK;
}

cl_status cl_model_optimizer_step(cl_model *m, const cl_optim *o) {
  m->err[0] = '\0';
  CL_TRY(cl_check_optim(m, o));
  if (!m->grads) return cl_fail(m, CL_E_STATE, "no gradients yet: run backward first");
  CL_TRY(cl_optim_ensure(m, o, NULL));
  const struct cl_backend_i *be = m->be->iface;
  if (o->kind == CL_OPTIM_ADAM) {
    cl_adam_hp hp = {(float)o->lr, (float)o->beta1, (float)o->beta2, (float)o->eps,
                     (float)o->weight_decay, m->opt_steps + 1};
    CL_KERNEL(m, be->adam_update(m->be, m->params, m->grads, m->opt_m, m->opt_v, m->n_params, &hp));
  } else {
    cl_sgd_hp hp = {(float)o->lr, (float)o->momentum, (float)o->weight_decay, m->opt_m_fresh};
    CL_KERNEL(m, be->sgd_update(m->be, m->params, m->grads, m->opt_m, m->n_params, &hp));
  }
  m->opt_m_fresh = 0;
  m->opt_steps++;
  return CL_OK;
}

void cl_optim_free(cl_model *m) {
  size_t pb = m->n_params * sizeof(float);
  cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, m->opt_m, pb);
  cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, m->opt_v, pb);
  m->opt_m = m->opt_v = NULL;
  m->opt_m_fresh = 0;
  m->opt_steps = 0;
  m->opt_kind = 0;
}

cl_status cl_model_optimizer_reset(cl_model *m) {
  cl_optim_free(m);
  return CL_OK;
}
