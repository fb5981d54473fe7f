/*
 * core/call.c -- a training call's arguments, checked once, and the context
 * (cl_call, internal.h) the engine reads them from. train.c and data.c
 * check their arrays and rows here and call cl_call_make once per step;
 * forward.c, backward.c, loss.c and dist.c then read the call from their
 * arguments, never from the model. The checks of arrays (cl_check_sequence,
 * cl_check_target) serve the separate forward, loss and backward too.
 */
#include "capability.h" /* cl_cap_check */
#include "plan.h"       /* cl_schedule_make; internal.h */

#include <stdint.h>

cl_status cl_check_sequence(cl_model *m, const cl_host_array *x, const char *what, int channels) {
  if (x->ndim != 5)
    return cl_fail(m, CL_E_INVALID,
                   "%s must have 5 dimensions [batch, time, channels, height, width]", what);
  for (int i = 0; i < 5; i++)
    if (x->dims[i] < 1) return cl_fail(m, CL_E_INVALID, "%s has an empty dimension %d", what, i + 1);
  if (x->dims[2] != channels)
    return cl_fail(m, CL_E_INVALID, "%s has %d channels (dimension 3), the model expects %d", what,
                   x->dims[2], channels);
  return CL_OK;
}

cl_status cl_check_frames(cl_model *m, const cl_host_array *x, const char *what) {
  CL_TRY(cl_check_sequence(m, x, what, m->cfg.input_dim));
  int p = cl_cfg_patch(&m->cfg);
  if (x->dims[3] % p || x->dims[4] % p)
    return cl_fail(m, CL_E_INVALID,
                   "%s has frames of %d x %d pixels: the patch size %d must divide both", what,
                   x->dims[3], x->dims[4], p);
  return CL_OK;
}

cl_status cl_check_target(cl_model *m, const cl_host_array *a, cl_target target, const char *what,
                          int B, int T, int H, int W) {
  int C = cl_output_channels(m);
  int seq[5] = {B, T, C, H, W}, last[4] = {B, C, H, W};
  const int *want = target == CL_TARGET_SEQUENCE ? seq : last;
  int nd = target == CL_TARGET_SEQUENCE ? 5 : 4;
  const char *tn = target == CL_TARGET_SEQUENCE ? "sequence" : "last_state";
  if (a->ndim != nd)
    return cl_fail(m, CL_E_INVALID, "%s must have %d dimensions for target '%s'", what, nd, tn);
  for (int i = 0; i < nd; i++)
    if (a->dims[i] != want[i])
      return cl_fail(m, CL_E_INVALID,
                     "%s has dimension %d of size %d; target '%s' of this batch needs %d", what,
                     i + 1, a->dims[i], tn, want[i]);
  return CL_OK;
}

cl_status cl_call_check_arrays(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                               cl_target target, const cl_optim *opt,
                               const cl_step_options *opts, int *shape) {
  CL_TRY(cl_check_optim(m, opt));
  CL_TRY(cl_cap_check(m, opts, 1, target, m->cfg.dtype));
  CL_TRY(cl_check_sequence(m, x, "x", m->cfg.input_dim));
  int B = x->dims[0], T = x->dims[1], H = x->dims[3], W = x->dims[4];
  int K = opts ? opts->horizon : 0;
  if (K > 0 && target != CL_TARGET_SEQUENCE)
    return cl_fail(m, CL_E_INVALID, "a training horizon needs the target \"sequence\"");
  if (opts && opts->truth && !opts->free_run)
    return cl_fail(m, CL_E_INVALID,
                   "truth flags (scheduled sampling) apply to a free-running horizon only");
  if (K > 0 && opts->free_run) { /* x is the input only: the step runs K - 1 more */
    if (T > INT32_MAX - K)
      return cl_fail(m, CL_E_INVALID, "horizon: %d + %d steps overflow", T, K);
    T += K - 1;
  }
  CL_TRY(cl_check_target(m, y, target, "y", B, K > 0 && K <= T ? K : T, H, W));
  if (opts && opts->weight) {
    CL_TRY(cl_check_target(m, opts->weight, target, "weight", B, K > 0 && K <= T ? K : T, H, W));
    CL_TRY(cl_loss_weight_check(m, opts->weight));
  }
  shape[0] = B;
  shape[1] = T;
  shape[2] = H;
  shape[3] = W;
  return CL_OK;
}

cl_status cl_call_check_forecast(cl_model *m, const cl_host_array *x, const cl_host_array *y,
                                 cl_target target, const cl_optim *opt,
                                 const cl_step_options *opts, int *shape) {
  CL_TRY(cl_check_optim(m, opt));
  CL_TRY(cl_cap_check(m, opts, 1, target, m->cfg.dtype)); /* what its schedule does not run */
  CL_TRY(cl_check_frames(m, x, "x"));
  CL_TRY(cl_check_frames(m, y, "y"));
  int p = cl_cfg_patch(&m->cfg);
  if (y->dims[0] != x->dims[0] || y->dims[3] != x->dims[3] || y->dims[4] != x->dims[4])
    return cl_fail(m, CL_E_INVALID,
                   "y [%d, %d, %d, %d, %d] must have x's batch and frame size [%d, ., %d, %d, %d]",
                   y->dims[0], y->dims[1], y->dims[2], y->dims[3], y->dims[4], x->dims[0],
                   x->dims[2], x->dims[3], x->dims[4]);
  if (opts && opts->weight) { /* a weight per element of y */
    const cl_host_array *w = opts->weight;
    int same = w->ndim == 5;
    for (int i = 0; same && i < 5; i++) same = w->dims[i] == y->dims[i];
    if (!same)
      return cl_fail(m, CL_E_INVALID, "weight must have y's dimensions [%d, %d, %d, %d, %d]",
                     y->dims[0], y->dims[1], y->dims[2], y->dims[3], y->dims[4]);
    CL_TRY(cl_loss_weight_check(m, w));
  }
  shape[0] = x->dims[0];
  shape[1] = x->dims[1];
  shape[2] = x->dims[3] / p;
  shape[3] = x->dims[4] / p;
  shape[4] = y->dims[1];
  return CL_OK;
}

cl_status cl_call_make(cl_model *m, const cl_source *x, int B, int T, int H, int W,
                       const cl_step_options *opts, cl_schedule *g, cl_call *c) {
  CL_TRY(cl_schedule_make(m, B, T, H, W, 1, opts, g));
  CL_TRY(cl_state_check(m, opts, B, H, W));
  CL_TRY(cl_dropout_check(m, opts));
  if (g->horizon && !x->host && !cl_arch_runs_target(&m->arch)) /* a forecaster's is y's */
    return cl_fail(m, CL_E_INVALID, "a training horizon applies to arrays, not to data sets");
  if (g->weight_steps && !x->host)
    return cl_fail(m, CL_E_INVALID, "a loss weight applies to arrays, not to data sets");
  *c = cl_call_plain();
  if (!opts) return CL_OK;
  char why[CL_ERRMSG_LEN];
  if (cl_loss_check(&opts->loss, why, sizeof why) != CL_OK)
    return cl_fail(m, CL_E_INVALID, "%s", why);
  c->loss = opts->loss;
  if (g->weight_steps) c->weight = cl_source_host(opts->weight);
  c->truth = g->free_run ? opts->truth : NULL;
  c->comm = opts->comm;
  if (c->comm) c->comm_share = opts->comm_share;
  CL_TRY(cl_dist_check(m, c->comm));
  if (c->comm && !(c->comm_share > 0 && c->comm_share <= 1))
    return cl_fail(m, CL_E_INVALID, "comm_share must lie in (0, 1], not %g", c->comm_share);
  /* the ranks' sums add up; means (and batchmeans) are weighed by sequences */
  if (c->comm) c->comm_share = cl_loss_rank_share(&c->loss, c->comm_share);
  return CL_OK;
}
