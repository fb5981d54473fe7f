/*
 * core/loss.c -- the loss a training step minimises: MSE, MAE, Huber and
 * binary cross-entropy on logits, through the backend's loss slots (the
 * kind in cl_loss_fn; zeros: MSE). Each fuses the mean and its gradient
 * into one pass over the target segment; backward.c calls
 * cl_loss_run, which adds the mean into a device double (loss_acc), so that
 * a training step never waits for its loss.
 *
 * The reduction (mean, sum, batchmean) is a weight on that segment mean,
 * applied here (cl_loss_share) and in a data-parallel step's ranks
 * (cl_loss_rank_share): a segment of n of the batch's elements weighs
 * share = n / N for the mean, n for the sum, n / B for batchmean (B the
 * rank's batch). Across ranks the mean and batchmean are averages of the
 * ranks' values, weighted by their sequences; the sum is their sum.
 */
#include "internal.h"

#include <math.h>
#include <stdio.h>

static const char *const LOSS_NAME[CL_N_LOSSES] = {"mse", "mae", "huber", "bce_logits"};

const char *cl_loss_name(cl_loss_kind k) {
  return k >= CL_LOSS_MSE && k < CL_N_LOSSES ? LOSS_NAME[k] : NULL;
}

static const char *const REDUCTION_NAME[CL_N_REDUCTIONS] = {"mean", "sum", "batchmean"};

const char *cl_loss_reduction_name(cl_loss_reduction r) {
  return r >= CL_REDUCE_MEAN && r < CL_N_REDUCTIONS ? REDUCTION_NAME[r] : NULL;
}

double cl_loss_share(const cl_loss_fn *f, double share, size_t n, int B) {
  if (f->reduction == CL_REDUCE_SUM) return (double)n;
  if (f->reduction == CL_REDUCE_BATCHMEAN) return (double)n / B;
  return share;
}

double cl_loss_rank_share(const cl_loss_fn *f, double comm_share) {
  return f->reduction == CL_REDUCE_SUM ? 1.0 : comm_share;
}

static int pos_float(double v) { return (float)v > 0 && isfinite((float)v); }

cl_status cl_loss_check(const cl_loss_fn *f, char *err, size_t errlen) {
  if (f->kind < CL_LOSS_MSE || f->kind >= CL_N_LOSSES)
    snprintf(err, errlen, "unknown loss %d", (int)f->kind);
  else if (!cl_loss_reduction_name(f->reduction))
    snprintf(err, errlen, "unknown loss reduction %d", (int)f->reduction);
  else if (f->kind == CL_LOSS_HUBER && !pos_float(f->delta))
    snprintf(err, errlen, "`delta` must be > 0 and finite as a 32-bit float, not %.17g",
             f->delta);
  else if (f->kind == CL_LOSS_BCE_LOGITS && !pos_float(f->pos_weight))
    snprintf(err, errlen, "`pos_weight` must be > 0 and finite as a 32-bit float, not %.17g",
             f->pos_weight);
  else
    return CL_OK;
  return CL_E_INVALID;
}

cl_status cl_loss_weight_check(cl_model *m, const cl_host_array *w) {
  size_t n = 1;
  for (int i = 0; i < w->ndim; i++) n *= (size_t)w->dims[i];
  for (size_t i = 0; i < n; i++) {
    const double v = w->format == CL_HOST_R_F64 ? ((const double *)w->data)[i]
                                                : ((const float *)w->data)[i];
    /* as the float the kernels read: a double beyond float's range is inf */
    if (!((float)v >= 0) || !isfinite((float)v))
      return cl_fail(m, CL_E_INVALID,
                     "weight must be finite and >= 0 (as 32-bit floats); element %zu is %.17g",
                     i + 1, v);
  }
  return CL_OK;
}

cl_status cl_loss_run(cl_model *m, const cl_loss_fn *f, const void *pred, const float *target,
                      const float *weight, size_t n, float scale, float *grad, double share,
                      double *acc) {
  CL_KERNEL(m, cl_backend_loss_acc(m->be, f, pred, target, weight, n, m->step.g.dtype, scale, grad,
                                   share, acc));
  return CL_OK;
}
