/*
 * core/train.c -- the training step: zero_grad, forward, MSE, backward and
 * the update in one call, scheduled by the step's geometry (plan.c):
 *  - accumulation: micro-batches in turn, each loss weighted by its share of
 *    the batch, so the summed gradients are the whole batch's;
 *  - checkpointing: forward segment by segment keeping only the states at
 *    segment ends, then backward from the last segment, recomputing each
 *    earlier one from its checkpoint first -- the same gradients as without;
 *  - truncated BPTT: window by window, forward then backward, the state
 *    handed on detached;
 *  - float16: the loss scaled up for backward, the gradients unscaled and
 *    checked before the update, which is skipped on inf/NaN (GradScaler);
 *  - max_grad_norm: the gradients clipped by their global norm (clip.c)
 *    after unscaling, before the update and its guard.
 */
#include "plan.h" /* cl_geom_make, cl_plan_build; internal.h */

#include <math.h>
#include <stdio.h>
#include <string.h>

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

static int seg_len(const cl_geom *g, int s) {
  int left = g->T - s * g->S;
  return left < g->S ? left : g->S;
}

/* Share of the whole batch's loss elements held by b sequences, steps t0 ..
 * t0 + len - 1 (with a horizon, only its last steps have a target). */
static double share_of(const cl_geom *g, cl_target tg, int b, int t0, int len) {
  if (tg != CL_TARGET_SEQUENCE) return (double)b / g->B;
  int first = g->horizon ? g->T - g->horizon : 0, from = t0 > first ? t0 : first;
  int steps = t0 + len > from ? t0 + len - from : 0;
  return ((double)b * steps) / ((double)g->B * (g->T - first));
}

/* Pointers to checkpoint slot s of every layer, for b sequences. */
static void ckpt_slot(cl_model *m, int b, int s, void **h, void **c) {
  const cl_step *st = &m->step;
  for (int l = 0; l < m->cfg.n_layers; l++) {
    size_t bh = (size_t)b * m->layer[l].hidden * st->g.H * st->g.W;
    h[l] = cl_at(st->ckpt_h[l], (size_t)s * bh, st->g.dtype);
    c[l] = cl_at(st->ckpt_c[l], (size_t)s * bh, st->g.dtype);
  }
}

/* The whole sequence of one micro-batch, in checkpoint segments (one
 * segment without checkpointing). */
static cl_status run_segments(cl_model *m, const cl_source *x, const cl_source *y,
                              cl_target tg, int b0, int b, float ls, double *loss) {
  cl_step *st = &m->step;
  const cl_geom *g = &st->g;
  size_t xstep = (size_t)b * m->cfg.input_dim * g->H * g->W;
  void *ph[CL_MAX_LAYERS], *pc[CL_MAX_LAYERS], *eh[CL_MAX_LAYERS], *ec[CL_MAX_LAYERS];
  void *ih[CL_MAX_LAYERS], *ic[CL_MAX_LAYERS];
  int from = cl_state_initial(m, b0, ih, ic);
  cl_block all = {b0, b, 0, g->T};
  CL_TRY(cl_put_source(m, st->x, g->dtype, x, all));
  for (int s = 0; s < g->nseg; s++) {
    int len = seg_len(g, s);
    if (s > 0) ckpt_slot(m, b, s - 1, ph, pc);
    int start = s > 0 || from;
    CL_TRY(cl_forward_segment(m, b, len, cl_at(st->x, (size_t)s * g->S * xstep, g->dtype),
                              !start ? NULL : s > 0 ? ph : ih, !start ? NULL : s > 0 ? pc : ic));
    if (s < g->nseg - 1) {
      ckpt_slot(m, b, s, eh, ec);
      CL_TRY(cl_save_segment_end(m, b, len, eh, ec));
    } else if (g->nseg > 1 && g->state == CL_STATE_CARRY) { /* planned for this */
      CL_TRY(cl_save_segment_end(m, b, len, st->carry_h, st->carry_c));
    }
  }
  for (int s = g->nseg - 1; s >= 0; s--) {
    int len = seg_len(g, s), last = s == g->nseg - 1, start = s > 0 || from;
    void *xs = cl_at(st->x, (size_t)s * g->S * xstep, g->dtype);
    if (s > 0) ckpt_slot(m, b, s - 1, ph, pc);
    void **sh = !start ? NULL : s > 0 ? ph : ih, **sc = !start ? NULL : s > 0 ? pc : ic;
    if (!last) /* recompute what the later segments overwrote */
      CL_TRY(cl_forward_segment(m, b, len, xs, sh, sc));
    double part;
    double share = share_of(g, tg, b, s * g->S, len);
    CL_TRY(cl_loss_segment(m, y, tg, b0, b, s * g->S, len, share, ls, 1, &part));
    *loss += part;
    CL_TRY(cl_backward_segment(m, b, len, xs, sh, sc, last, !last, s > 0));
  }
  /* the state this micro-batch started from is read no more: hand on its
   * last one (still in the buffers when there is a single segment) */
  if (g->state != CL_STATE_CARRY) return CL_OK;
  if (g->nseg > 1) return cl_state_keep(m, b0, b, st->carry_h, st->carry_c);
  return cl_save_segment_end(m, b, g->T, ih, ic); /* ih, ic: the carried state itself */
}

/* Truncated BPTT over one micro-batch: windows of S steps. */
static cl_status run_windows(cl_model *m, const cl_source *x, const cl_source *y,
                             cl_target tg, int b0, int b, float ls, double *loss) {
  cl_step *st = &m->step;
  const cl_geom *g = &st->g;
  int nwin = (g->T + g->S - 1) / g->S;
  void *ih[CL_MAX_LAYERS], *ic[CL_MAX_LAYERS];
  int from = cl_state_initial(m, b0, ih, ic);
  for (int w = 0; w < nwin; w++) {
    int t0 = w * g->S, len = seg_len(g, w), first = w == 0;
    void **sh = !first ? st->carry_h : from ? ih : NULL;
    void **sc = !first ? st->carry_c : from ? ic : NULL;
    cl_block k = {b0, b, t0, len};
    CL_TRY(cl_put_source(m, st->x, g->dtype, x, k));
    CL_TRY(cl_forward_segment(m, b, len, st->x, sh, sc));
    if (tg == CL_TARGET_SEQUENCE || w == nwin - 1) {
      double part;
      CL_TRY(cl_loss_segment(m, y, tg, b0, b, t0, len, share_of(g, tg, b, t0, len), ls, 1, &part));
      *loss += part;
      CL_TRY(cl_backward_segment(m, b, len, st->x, sh, sc, 1, 0, 0));
    }
    /* after backward, which still reads the incoming state; the last
     * window's end is the state a carrying step hands on */
    if (w < nwin - 1) CL_TRY(cl_save_segment_end(m, b, len, st->carry_h, st->carry_c));
    else if (g->state == CL_STATE_CARRY) CL_TRY(cl_save_segment_end(m, b, len, ih, ic));
  }
  return CL_OK;
}

/* float16: unscale, clip (GradScaler.unscale_ comes before clip_grad_norm_)
 * and update only when every gradient is finite. */
static cl_status scaled_update(cl_model *m, const cl_optim *opt, double max_norm) {
  cl_loss_scale *sc = &m->scaler;
  int bad = 0;
  CL_KERNEL(m, m->be->iface->grad_unscale(m->be, m->grads, m->n_params, (float)(1.0 / sc->scale),
                                          &bad));
  CL_TRY(cl_clip_grads(m, max_norm)); /* measures only when bad: the norm is not finite */
  if (bad) {
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
  CL_TRY(cl_model_optimizer_step(m, opt));
  sc->skipped_in_a_row = 0;
  if (++sc->clean_steps >= sc->growth_interval) {
    sc->scale *= sc->growth_factor;
    sc->clean_steps = 0;
  }
  return CL_OK;
}

static cl_status train_step(cl_model *m, const cl_source *x, const cl_source *y,
                            cl_target target, const cl_optim *opt, const cl_geom *gp,
                            const cl_step_options *opts, double *loss) {
  double max_norm = opts ? opts->max_grad_norm : 0;
  const cl_geom g = *gp;
  m->grad_norm = NAN; /* until clip.c measures this step's */
  int B = g.B;
  CL_TRY(cl_step_prepare(m, &g));
  CL_TRY(cl_state_upload(m, opts));
  CL_TRY(cl_model_zero_grad(m));
  m->step.outputs_kept = 0;
  m->phase = CL_PHASE_CONSUMED;
  int half = g.dtype == CL_F16;
  float ls = half ? (float)m->scaler.scale : 1.0f;
  for (int b0 = 0; b0 < B; b0 += g.Bm) {
    int b = B - b0 < g.Bm ? B - b0 : g.Bm;
    CL_TRY(cl_dropout_upload(m, opts, b0, b)); /* these sequences' masks */
    CL_TRY(g.tbptt ? run_windows(m, x, y, target, b0, b, ls, loss)
                   : run_segments(m, x, y, target, b0, b, ls, loss));
  }
  m->step.outputs_kept = g.Bm == B && g.nseg == 1 && !g.tbptt;
  if (half) return scaled_update(m, opt, max_norm);
  if (!isfinite(*loss))
    return cl_fail(m, CL_E_INVALID, "the loss is not finite (%g): parameters left unchanged", *loss);
  /* a finite loss can still carry inf/NaN gradients (an overflow inside the
   * cell): the update's guard refuses them, in the pass that checks the
   * update's own results (optim.c), after clipping */
  CL_TRY(cl_clip_grads(m, max_norm));
  return cl_model_optimizer_step(m, opt);
}

cl_status cl_model_train_step(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                              cl_target target, const cl_optim *opt,
                              const cl_step_options *opts, double *loss) {
  m->err[0] = '\0';
  *loss = 0;
  CL_TRY(cl_check_optim(m, opt));
  CL_TRY(cl_check_sequence(m, x, "x", m->cfg.input_dim));
  int B = x->dims[0], T = x->dims[1], H = x->dims[3], W = x->dims[4];
  int K = opts ? opts->horizon : 0;
  if (K > 0 && target != CL_TARGET_SEQUENCE)
    return cl_fail(m, CL_E_INVALID, "a training horizon needs the target \"sequence\"");
  CL_TRY(cl_check_target(m, y, target, "y", B, K > 0 && K <= T ? K : T, H, W));
  if (opts && opts->weight) {
    CL_TRY(cl_check_target(m, opts->weight, target, "weight", B, K > 0 && K <= T ? K : T, H, W));
    CL_TRY(cl_loss_weight_check(m, opts->weight));
  }
  cl_source xs = cl_source_host(x), ys = cl_source_host(y);
  return cl_train_sources(m, &xs, &ys, target, B, T, H, W, opt, opts, loss);
}

cl_status cl_train_sources(cl_model *m, const cl_source *x, const cl_source *y, cl_target target,
                           int B, int T, int H, int W, const cl_optim *opt,
                           const cl_step_options *opts, double *loss) {
  cl_geom g;
  CL_TRY(cl_geom_make(m, B, T, H, W, 1, opts, &g));
  CL_TRY(cl_state_check(m, opts, B, H, W));
  CL_TRY(cl_dropout_check(m, opts));
  if (g.horizon && !x->host)
    return cl_fail(m, CL_E_INVALID, "a training horizon applies to arrays, not to data sets");
  if (g.weight_steps && !x->host)
    return cl_fail(m, CL_E_INVALID, "a loss weight applies to arrays, not to data sets");
  m->phase = CL_PHASE_NONE;
  /* every model buffer before the step's arena, so that nothing is
   * allocated once the step has begun; a state made for a step that fails
   * goes back, leaving the model as it was */
  char why[CL_ERRMSG_LEN];
  if (opts && cl_loss_check(&opts->loss, why, sizeof why) != CL_OK)
    return cl_fail(m, CL_E_INVALID, "%s", why);
  int created;
  CL_TRY(cl_optim_ensure(m, opt, &created));
  if (opts) m->loss_fn = opts->loss;
  cl_source ws;
  if (g.weight_steps) {
    ws = cl_source_host(opts->weight);
    m->loss_weight = &ws;
  }
  cl_status s = cl_state_prepare(m, &g);
  if (s == CL_OK) s = train_step(m, x, y, target, opt, &g, opts, loss);
  memset(&m->loss_fn, 0, sizeof m->loss_fn); /* back to MSE, cl_model_mse's */
  m->loss_weight = NULL;
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
