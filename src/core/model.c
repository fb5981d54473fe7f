/*
 * core/model.c -- a model's lifetime as users see it: made (model_make.c)
 * with its loss scaler, freed with its data sets and a split step's twins;
 * its memory statistics, plan, list of convolution calls and the algorithm
 * each runs. Parameters by name are in params.c, the step in step.c,
 * forward.c and backward.c.
 */
#include "capability.h" /* cl_cap_check, cl_cap_check_config */
#include "conv_calls.h" /* cl_conv_calls */
#include "plan.h"       /* cl_schedule_make, cl_plan_build; internal.h */

#include <limits.h> /* INT_MAX */
#include <math.h>   /* NAN */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *cl_model_error(const cl_model *m) { return m ? m->err : ""; }
const cl_config *cl_model_config(const cl_model *m) { return &m->cfg; }
const char *cl_model_backend_name(const cl_model *m) { return m->be->iface->name; }
const char *cl_model_conv_math(const cl_model *m) {
  return m->be->conv_math ? m->be->conv_math : "";
}

cl_status cl_model_create_with(const cl_config *cfg, cl_backend_ctor make_backend, cl_model **out,
                               char *err, size_t errlen) {
  CL_TRY(cl_model_make(cfg, make_backend, out, err, errlen));
  cl_scaler_defaults(&(*out)->scaler);
  return CL_OK;
}

/* What a model gathers on top of what model_make.c made, then the rest. */
void cl_model_free(cl_model *m) {
  if (m && m->be) {
    cl_data_free_all(m);
    cl_ahead_free(m);
    cl_split_free(m);
  }
  cl_model_unmake(m);
}

cl_status cl_model_memory_stats(cl_model *m, cl_mem_stats *s) {
  memset(s, 0, sizeof *s);
  cl_allocator *a = &m->mem;
  for (int c = 0; c < CL_MEM_NCAT; c++) {
    s->current[c] = a->current[c];
    s->peak[c] = a->peak[c];
    s->n_alloc[c] = a->n_alloc[c];
    s->n_free[c] = a->n_free[c];
  }
  s->allocated = a->allocated;
  s->peak_allocated = a->peak_allocated;
  s->reserved = a->reserved;
  s->peak_reserved = a->peak_reserved;
  s->limit = a->limit;
  cl_mem_capacity(a, &s->device_total, &s->device_free);
  return CL_OK;
}

cl_status cl_model_measured_memory(cl_model *m, cl_measured_mem *out) {
  memset(out, 0, sizeof *out);
  char why[sizeof out->why] = "";
  out->have_process =
      cl_os_process_memory(&out->process_rss, &out->process_peak, why, sizeof why);
  out->have_device = m->have_device_used && cl_model_device_used(m, &out->device_used);
  out->device_used_at_create = out->have_device ? m->device_used_at_create : 0;
  out->runtime = cl_backend_runtime_bytes(m->be);
  if (!out->have_device && !m->be->iface->host_accessible && why[0] == '\0')
    snprintf(why, sizeof why, "the %s backend did not report its device memory",
             m->be->iface->name);
  snprintf(out->why, sizeof out->why, "%s", why);
  return CL_OK;
}

cl_status cl_model_graph_info(cl_model *m, cl_graph_info *out) {
  cl_backend_graph_info(m->be, out);
  return CL_OK;
}

void cl_model_reset_peak(cl_model *m) { cl_mem_reset_peak(&m->mem); }

cl_status cl_model_bind_thread(cl_model *m) {
  m->err[0] = '\0';
  CL_KERNEL(m, cl_backend_bind_thread(m->be));
  return CL_OK;
}

cl_status cl_model_empty_cache(cl_model *m) {
  cl_step_release(m);
  cl_split_release(m); /* a split step's twins and their arenas */
  return CL_OK;
}

cl_status cl_model_set_memory_limit(cl_model *m, size_t bytes) {
  m->mem.limit = bytes;
  m->cfg.memory_limit = bytes;
  return CL_OK;
}

/* The geometry of a call planned from outside, refusing what the call
 * would refuse (the capability table, as train_step and predict). An
 * encoder-forecaster's frame is H x W pixels (patched inside) and its
 * forecaster runs opts' horizon steps (train_step's dim(y)[2]); the
 * target is the one asked for (plan_target), else the sequence. */
static cl_status public_geom(cl_model *m, int B, int T, int H, int W, int training,
                             const cl_step_options *o, cl_schedule *g) {
  static const cl_step_options none;
  cl_step_options asked = o ? *o : none;
  int runs = cl_arch_runs_target(&m->arch); /* a stack runs the target's steps */
  if (runs) asked.horizon = 0; /* those steps, not train_step's horizon */
  int pd = asked.plan_dtype; /* its range: cl_schedule_make's check */
  cl_dtype t = pd > 0 && pd <= 1 + CL_BF16 ? (cl_dtype)(pd - 1) : m->cfg.dtype;
  cl_target target =
      asked.plan_target ? (cl_target)(asked.plan_target - 1) : CL_TARGET_SEQUENCE;
  CL_TRY(cl_cap_check(m, &asked, training, target, t));
  int p = m->arch.patch; /* frames cut into p x p patches as channels (arch.h) */
  if (p > 1 && (H < 1 || W < 1 || H % p || W % p))
    return cl_fail(m, CL_E_INVALID, "frames of %d x %d pixels: the patch size %d must divide both",
                   H, W, p);
  if (runs && (!o || o->horizon < 1))
    return cl_fail(m, CL_E_INVALID,
                   "an encoder-forecaster's plan needs its horizon (the forecaster's steps) >= 1");
  return cl_schedule_make(m, B, T, H / p, W / p, training, o, g);
}

cl_status cl_model_plan(cl_model *m, int B, int T, int H, int W, int training,
                        const cl_optim *opt, const cl_step_options *opts, cl_plan *out) {
  memset(out, 0, sizeof *out);
  cl_schedule g;
  CL_TRY(public_geom(m, B, T, H, W, training, opts, &g));
  if (opts && opts->plan_target) cl_schedule_target(m, (cl_target)(opts->plan_target - 1), &g);
  char err[CL_ERRMSG_LEN];
  cl_schedule gm; /* a step split by batch: its threads' buffers are the plan (split.c) */
  const int split = training ? cl_split_schedule(m, &g, &gm) : 0;
  if (split) CL_TRY(cl_split_twins(m, split));
  cl_status st = split ? cl_plan_build_split(m, cl_split_twin(m), &gm, split, opt, out, err,
                                             sizeof err)
                       : cl_plan_build(m, &g, opt, out, err, sizeof err);
  if (st == CL_OK && split && m->split_mode == CL_SPLIT_AUTO) {
    /* either way may run, one at a time (the other's buffers given back): the larger */
    cl_plan usual;
    st = cl_plan_build(m, &g, opt, &usual, err, sizeof err);
    if (st != CL_OK) cl_plan_free(out);
    if (st == CL_OK && usual.reserved > out->reserved) {
      cl_plan_free(out);
      *out = usual;
    } else if (st == CL_OK) {
      cl_plan_free(&usual);
    }
  }
  if (st != CL_OK) return cl_fail(m, st, "%s", err);
  return CL_OK;
}

cl_status cl_model_conv_calls(cl_model *m, int B, int T, int H, int W, int training,
                              const cl_step_options *opts, cl_target target,
                              cl_conv_call_info **out, int *n) {
  *out = NULL;
  *n = 0;
  cl_schedule g;
  CL_TRY(public_geom(m, B, T, H, W, training, opts, &g));
  cl_conv_list l = {0};
  cl_status st = cl_conv_calls(m, &g, target, opts ? opts->truth : NULL, &l);
  if (st != CL_OK) {
    cl_conv_list_free(&l);
    return cl_fail(m, st, "a step of batch %d, %d steps: out of host memory listing its "
                   "convolutions", B, T);
  }
  if (l.n > 0 && !(*out = malloc((size_t)l.n * sizeof **out))) {
    cl_conv_list_free(&l);
    return cl_fail(m, CL_E_OOM, "listing a step's convolution calls: out of host memory");
  }
  for (int i = 0; i < l.n; i++) {
    const cl_conv_shape *s = &l.v[i].s;
    cl_conv_call_info r = {l.v[i].dir, l.v[i].layer, l.v[i].half, l.v[i].images, s->C,
                           s->H,       s->W,         s->K,        s->kh, s->kw,
                           s->dh,      s->dw,        cl_conv_groups(s),  l.v[i].count};
    (*out)[i] = r;
  }
  *n = l.n;
  cl_conv_list_free(&l);
  return CL_OK;
}

cl_status cl_model_conv_algo(cl_model *m, const cl_conv_call_info *c, char *buf, size_t len) {
  if (!buf || len == 0) return cl_fail(m, CL_E_INVALID, "conv_algo: no buffer for the name");
  buf[0] = '\0';
  if (!c || c->dir < CL_CONV_FORWARD || c->dir > CL_CONV_BACKWARD_FILTER || c->N < 1 ||
      c->N > INT_MAX)
    return cl_fail(m, CL_E_INVALID, "conv_algo: a call of cl_model_conv_calls' list expected "
                   "(direction 0-2, 1 to %d images)", INT_MAX);
  cl_conv_shape s = {(int)c->N, c->C, c->H,         c->W,      c->K,      c->kh, c->kw,
                     c->dh,     c->dw, m->cfg.dtype, c->groups, m->layout, 0};
  if (!cl_conv_shape_ok(&s))
    return cl_fail(m, CL_E_INVALID, "conv_algo: not a convolution the backends take: [%lld, %d, "
                   "%d, %d] -> %d, %dx%d, dilation %dx%d, groups %d", (long long)c->N, c->C,
                   c->H, c->W, c->K, c->kh, c->kw, c->dh, c->dw, c->groups);
  const char *a = m->be->iface->conv_algo ? m->be->iface->conv_algo(m->be, &s, (int)c->dir) : NULL;
  snprintf(buf, len, "%s", a ? a : "");
  return CL_OK;
}

int64_t cl_model_optimizer_steps(const cl_model *m) { return m->opt_steps; }
