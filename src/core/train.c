/*
 * core/train.c -- the training step: zero_grad, forward, MSE, backward and
 * the update in one call. Its micro-batches (accumulation: each loss
 * weighted by its share of the batch, so the summed gradients are the
 * whole batch's) each run their program (program.c: checkpoint segments,
 * tbptt windows, free running or scheduled sampling, stacks handing states
 * on -- the ops in order; execute.c runs them); besides:
 *  - float16: the loss scaled up for backward, the gradients unscaled and
 *    checked before the update, which is skipped on inf/NaN (GradScaler);
 *  - max_grad_norm: the gradients clipped by their global norm (grad_norm.c)
 *    after unscaling, before the update and its guard;
 *  - data parallel (dist.c): each layer's gradients summed over the ranks
 *    from the last backward pass on, waited for, and the loss summed, before
 *    all of the above, so that every rank makes the same decisions;
 *  - split by batch (split.c, a CPU model asked for it): the micro-batches
 *    of ceil(B / threads) sequences run at once, one a thread, in place of
 *    launch_step, and the same update after.
 * The step's device work is a pure stream of launches (launch_step): the
 * loss accumulates on the device, and the float16 overflow check, the
 * clipping norm, the guard and the decision to skip the update are made
 * there too (backend.h, cl_update_args), so nothing waits mid-step (but for
 * data parallel, whose reduction the host waits for: no graph then). The
 * host reads their results once, after the update (cl_vals_read), and
 * only then keeps the books: the loss scaler, the step count, the errors.
 * A backend may record that stream as one graph and replay it (graph_begin,
 * graph_end: CUDA graphs); the core calls the same slots either way.
 */
#include "plan.h"    /* cl_schedule_make, cl_plan_build; internal.h */
#include "program.h" /* the step as ops */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define CL_SCALE_INIT 65536.0
#define CL_SCALE_GROWTH_INTERVAL 2000
/* Below 1 the gradients overflow float16 even unscaled: halving further
 * cannot help, and skipping on would train nothing without a word. */
#define CL_SCALE_FLOOR 1.0

void cl_scaler_defaults(cl_loss_scale *s) {
  s->init_scale = CL_SCALE_INIT;
  s->growth_factor = 2.0;
  s->backoff_factor = 0.5;
  s->growth_interval = CL_SCALE_GROWTH_INTERVAL;
  cl_scaler_reset(s);
}

void cl_scaler_reset(cl_loss_scale *s) {
  s->scale = s->init_scale;
  s->clean_steps = 0;
  s->skipped_steps = 0;
  s->skipped_in_a_row = 0;
}

/* float16, after the step: GradScaler.update. The device skipped the update
 * when a gradient overflowed (found_inf): the scale backs off; else the
 * update was applied (or refused by its guard) and clean steps grow it. */
static cl_status scaler_update(cl_model *m, const cl_optim *opt, const cl_step_vals *v) {
  cl_loss_scale *sc = &m->scaler;
  if (v->found_inf) {
    sc->scale *= sc->backoff_factor;
    sc->clean_steps = 0;
    sc->skipped_steps++;
    sc->skipped_in_a_row++;
    if (sc->scale < CL_SCALE_FLOOR)
      return cl_fail(m, CL_E_INVALID,
                     "float16: %d steps in a row overflowed and were skipped, and the loss scale "
                     "fell to %g: the gradients overflow float16 even unscaled. Parameters are "
                     "unchanged. Inputs or targets beyond float16's range (65504), or a diverging "
                     "model (lower the learning rate), cause this; train in bfloat16 or float32, "
                     "or normalise the data",
                     sc->skipped_in_a_row, sc->scale);
    return CL_OK;
  }
  if (v->fault != CL_FAULT_NONE) return cl_optim_refuse(m, opt->kind, v->fault);
  cl_optim_applied(m);
  sc->skipped_in_a_row = 0;
  if (++sc->clean_steps >= sc->growth_interval) {
    sc->scale *= sc->growth_factor;
    sc->clean_steps = 0;
  }
  return CL_OK;
}

/* The step's device work (its ops, cl_step_run): zeroed gradients and
 * results, every micro-batch's forward, loss and backward, and the update
 * with its decisions, through the backend's graph of it when it keeps one.
 * No synchronisation and no device allocation happen in it (the arena,
 * the optimizer state and the staging buffers exist before), so that a
 * backend can record it as a graph; it runs twice when graph_end asks, and
 * so changes no host state that a second run would see differently. */
static cl_status launch_step(cl_model *m, cl_call *c, const cl_source *x, const cl_source *y,
                             cl_target target, float ls, const cl_update_args *u,
                             const cl_step_options *opts, const cl_program *prog) {
  cl_status s = CL_OK;
  /* a communicator's reduction is work outside the backend's stream (a host
   * sum, a wait): a graph cannot hold it, and a dry pass must not start it */
  const int comm = cl_dist_active(c);
  /* a dry pass that found no graph, a capture, and as a last resort plain */
  for (int pass = 0; pass < 3; pass++) {
    cl_graph_mode mode = comm ? CL_GRAPH_OFF_COMM : pass < 2 ? CL_GRAPH_AUTO : CL_GRAPH_PLAIN;
    CL_KERNEL(m, cl_backend_graph_begin(m->be, mode));
    s = cl_step_run(m, c, &prog[2], prog, x, y, target, ls, u, opts);
    int redo = 0;
    cl_status e = cl_backend_graph_end(m->be, s, &redo);
    if (redo) continue; /* nothing ran: again, as plain launches */
    if (s == CL_OK && e != CL_OK) return cl_fail_backend(m, e, "graph_end");
    return s;
  }
  return s;
}

static cl_status train_step(cl_model *m, cl_call *c, const cl_source *x, const cl_source *y,
                            cl_target target, const cl_optim *opt, const cl_schedule *gp,
                            const cl_step_options *opts, double *loss) {
  double max_norm = opts ? opts->max_grad_norm : 0;
  const cl_schedule g = *gp;
  m->grad_norm = NAN; /* until this step's norm is read */
  cl_schedule gm; /* a step split by batch: its threads' micro-batches */
  const int can = cl_split_schedule(m, &g, &gm);
  const int split = cl_split_use(m, can) ? can : 0;
  const double t0 = can ? cl_seconds() : 0;
  if (split) {
    CL_TRY(cl_grads_ensure(m)); /* the twins' arenas stand in for the step's (split.c) */
  } else {
    CL_TRY(cl_step_prepare(m, &g));
    CL_TRY(cl_state_upload(m, opts, 0));
  }
  m->step.outputs_kept = 0;
  m->phase = CL_PHASE_CONSUMED;
  int half = g.dtype == CL_F16;
  float ls = half ? (float)m->scaler.scale : 1.0f;
  cl_update_args u;
  cl_optim_args(m, opt, 1, &u); /* the state exists: cl_train_sources made it */
  u.unscale = half;
  u.inv_scale = (float)(1.0 / m->scaler.scale);
  u.max_norm = max_norm;
  /* float16 skips an overflowing step by the scaler's rule instead; a
   * finite loss can still carry inf/NaN gradients (an overflow inside the
   * cell): the update's guard refuses them, after clipping */
  u.check_loss = !half;
  if (split) {
    CL_TRY(cl_split_step(m, c, x, y, target, ls, &u, opts, &g, &gm, split));
  } else {
    const cl_program *prog = NULL;
    CL_TRY(cl_step_programs(m, target, &prog));
    CL_TRY(launch_step(m, c, x, y, target, ls, &u, opts, prog));
  }
  /* layers running the target's steps beside the input's hold two lengths: read none */
  m->step.outputs_kept = !split && g.Bm == g.B && g.nseg == 1 && !g.tbptt &&
                         !cl_arch_runs_target(&m->arch) && !m->poison; /* NaN after their last use */
  cl_step_vals v;
  CL_TRY(cl_vals_read(m, &v)); /* the step's one synchronisation */
  if (can) cl_split_timed(m, cl_seconds() - t0);
  *loss = v.loss;
  const int lost = !half && !isfinite(v.loss);
  if (max_norm > 0 && !lost) m->grad_norm = sqrt(v.sumsq);
  if (half) return scaler_update(m, opt, &v);
  if (lost)
    return cl_fail(m, CL_E_INVALID, "the loss is not finite (%g): parameters left unchanged", *loss);
  if (v.fault != CL_FAULT_NONE) return cl_optim_refuse(m, opt->kind, v.fault);
  cl_optim_applied(m);
  return CL_OK;
}

cl_status cl_train_arrays(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                          const cl_source *xs, const cl_source *ys, cl_target target,
                          const cl_optim *opt, const cl_step_options *opts, double *loss) {
  int d[5]; /* B, T, H, W; a wired step's target steps K */
  if (cl_arch_runs_target(&m->arch)) { /* the target's steps are the plan's horizon */
    static const cl_step_options none;
    CL_TRY(cl_call_check_forecast(m, x, y, target, opt, opts, d));
    cl_step_options o = opts ? *opts : none;
    o.horizon = d[4];
    return cl_train_sources(m, xs, ys, target, d[0], d[1], d[2], d[3], opt, &o, loss);
  }
  CL_TRY(cl_call_check_arrays(m, x, y, target, opt, opts, d));
  return cl_train_sources(m, xs, ys, target, d[0], d[1], d[2], d[3], opt, opts, loss);
}

cl_status cl_model_train_step(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                              cl_target target, const cl_optim *opt,
                              const cl_step_options *opts, double *loss) {
  m->err[0] = '\0';
  *loss = 0;
  cl_source xs = cl_source_host(x), ys = cl_source_host(y);
  return cl_train_arrays(m, x, y, &xs, &ys, target, opt, opts, loss);
}

cl_status cl_train_sources(cl_model *m, const cl_source *x, const cl_source *y, cl_target target,
                           int B, int T, int H, int W, const cl_optim *opt,
                           const cl_step_options *opts, double *loss) {
  cl_schedule g;
  cl_call c;
  CL_TRY(cl_call_make(m, x, B, T, H, W, opts, &g, &c));
  cl_schedule_target(m, target, &g);
  m->phase = CL_PHASE_NONE;
  /* every model buffer before the step's arena, so that nothing is
   * allocated once the step has begun; a state made for a step that fails
   * goes back, leaving the model as it was */
  int created;
  CL_TRY(cl_optim_ensure(m, opt, &created));
  cl_status s = cl_state_prepare(m, &g);
  if (s == CL_OK) s = train_step(m, &c, x, y, target, opt, &g, opts, loss);
  if (s != CL_OK && created) cl_model_optimizer_reset(m);
  if (s == CL_OK) s = cl_guard_check(m);
  return s;
}

cl_status cl_model_set_dtype(cl_model *m, cl_dtype dtype) {
  m->err[0] = '\0';
  if (dtype != CL_F32 && dtype != CL_F16 && dtype != CL_BF16)
    return cl_fail(m, CL_E_INVALID, "unknown dtype %d", (int)dtype);
  if (dtype == m->cfg.dtype) return CL_OK;
  cl_step_release(m); /* activations were planned in the old dtype */
  cl_state_free(m);    /* and the carried state stored in it */
  m->cfg.dtype = dtype;
  cl_scaler_reset(&m->scaler);
  return CL_OK;
}

cl_status cl_scaler_check(const cl_loss_scale *s, char *err, size_t errlen) {
  if (!((float)s->init_scale > 0) || !isfinite((float)s->init_scale))
    snprintf(err, errlen, "`init_scale` must be > 0 and finite as a 32-bit float, not %.17g",
             s->init_scale);
  else if (!(s->growth_factor > 1) || !isfinite((float)s->growth_factor))
    snprintf(err, errlen, "`growth_factor` must be a finite number > 1, not %.17g",
             s->growth_factor);
  else if (!(s->backoff_factor > 0 && s->backoff_factor < 1))
    snprintf(err, errlen, "`backoff_factor` must lie in (0, 1), not %.17g", s->backoff_factor);
  else if (s->growth_interval < 1)
    snprintf(err, errlen, "`growth_interval` must be at least 1, not %d", s->growth_interval);
  else
    return CL_OK;
  return CL_E_INVALID;
}

cl_status cl_model_set_loss_scale(cl_model *m, double init_scale, double growth_factor,
                                  double backoff_factor, int growth_interval) {
  m->err[0] = '\0';
  cl_loss_scale s = m->scaler;
  s.init_scale = init_scale;
  s.growth_factor = growth_factor;
  s.backoff_factor = backoff_factor;
  s.growth_interval = growth_interval;
  char err[CL_ERRMSG_LEN];
  if (cl_scaler_check(&s, err, sizeof err) != CL_OK) return cl_fail(m, CL_E_INVALID, "%s", err);
  cl_scaler_reset(&s);
  m->scaler = s;
  return CL_OK;
}

cl_status cl_model_get_loss_scale(const cl_model *m, cl_loss_scale *out) {
  *out = m->scaler;
  if (m->cfg.dtype != CL_F16) out->scale = 1.0;
  return CL_OK;
}
