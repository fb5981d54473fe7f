/*
 * r_dropout.c -- the dropout masks of a training call, drawn here from R's
 * random number generator (so set.seed() reproduces a run, as it does the
 * initial weights) and handed to the core in cl_step_options. One mask per
 * layer and kind, [B, C, H, W] in the core's row-major order: layer 0's
 * input mask, then its h mask, then layer 1's, each drawn only where its rate
 * is above 0; an element is kept (1 / (1 - p)) when its uniform draw is at
 * least p, else 0.
 *
 * Tests pass masks instead (opts$dropout_masks, R arrays [B, C, H, W]), to
 * compare with a reference that takes the same masks. The buffers are
 * R_alloc'ed: R frees them when the .Call returns, also on an error.
 */
#include <string.h>

#include "r_convlstm.h"

static float *draw(size_t n, double p) {
  float *mask = (float *)R_alloc(n ? n : 1, sizeof(float));
  const float keep = (float)(1.0 / (1.0 - p));
  for (size_t i = 0; i < n; i++) mask[i] = unif_rand() >= p ? keep : 0.0f;
  return mask;
}

/* A given mask: an R double array [B, C, H, W], to row-major float. */
static float *given(SEXP a, const int *dims, size_t n, int layer, const char *kind) {
  SEXP dim = Rf_getAttrib(a, R_DimSymbol);
  int ok = TYPEOF(a) == REALSXP && TYPEOF(dim) == INTSXP && Rf_length(dim) == 4;
  for (int i = 0; ok && i < 4; i++) ok = INTEGER(dim)[i] == dims[i];
  if (!ok)
    r_raise_invalid("internal: the %s dropout mask of layer %d must be a double array "
                    "[%d, %d, %d, %d]", kind, layer + 1, dims[0], dims[1], dims[2], dims[3]);
  float *mask = (float *)R_alloc(n ? n : 1, sizeof(float));
  r_r_to_row_major(REAL(a), 4, dims, mask);
  return mask;
}

void r_dropout_masks(cl_model *m, SEXP opts, int B, int H, int W, cl_step_options *o) {
  const cl_config *c = cl_model_config(m);
  SEXP fixed = opts == R_NilValue ? R_NilValue : r_option(opts, "dropout_masks");
  if (fixed != R_NilValue && (TYPEOF(fixed) != VECSXP || Rf_length(fixed) != 2 * c->n_layers))
    r_raise_invalid("internal: dropout_masks must be a list of 2 * n_layers masks");
  int any = 0;
  for (int l = 0; l < c->n_layers; l++)
    any |= c->dropout[l] > 0 || c->recurrent_dropout[l] > 0;
  if (!any || B < 1 || H < 1 || W < 1) return; /* the core refuses bad shapes itself */
  if (fixed == R_NilValue) GetRNGstate();
  for (int l = 0; l < c->n_layers; l++) {
    const int C[2] = {l == 0 ? c->input_dim : c->hidden_dims[l - 1], c->hidden_dims[l]};
    const double p[2] = {c->dropout[l], c->recurrent_dropout[l]};
    const float **dst[2] = {&o->mask_x[l], &o->mask_h[l]};
    for (int k = 0; k < 2; k++) {
      if (!(p[k] > 0)) continue;
      const int dims[4] = {B, C[k], H, W};
      size_t n = (size_t)B * (size_t)C[k] * (size_t)H * (size_t)W;
      *dst[k] = fixed != R_NilValue
                    ? given(VECTOR_ELT(fixed, 2 * l + k), dims, n, l, k ? "recurrent" : "input")
                    : draw(n, p[k]);
    }
  }
  if (fixed == R_NilValue) PutRNGstate();
}

/* Test-only: the masks a training call of shape c(B, H, W) would draw now,
 * as R arrays [B, C, H, W]: per layer the input mask, then the h mask;
 * NULL where that rate is 0. */
SEXP ffi_dropout_draw(SEXP ptr, SEXP shape) {
  cl_model *m = r_model(ptr);
  if (TYPEOF(shape) != INTSXP || Rf_length(shape) != 3)
    r_raise_invalid("internal: ffi_dropout_draw() needs c(batch, height, width)");
  const int B = INTEGER(shape)[0], H = INTEGER(shape)[1], W = INTEGER(shape)[2];
  const cl_config *c = cl_model_config(m);
  cl_step_options o;
  memset(&o, 0, sizeof o);
  r_dropout_masks(m, R_NilValue, B, H, W, &o);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2 * c->n_layers));
  for (int l = 0; l < c->n_layers; l++) {
    const int C[2] = {l == 0 ? c->input_dim : c->hidden_dims[l - 1], c->hidden_dims[l]};
    const float *mask[2] = {o.mask_x[l], o.mask_h[l]};
    for (int k = 0; k < 2; k++) {
      if (!mask[k]) continue;
      const int dims[4] = {B, C[k], H, W};
      SEXP a = r_alloc_array(4, dims);
      SET_VECTOR_ELT(out, 2 * l + k, a);
      r_row_major_to_r(mask[k], 4, dims, REAL(a));
    }
  }
  UNPROTECT(1);
  return out;
}
