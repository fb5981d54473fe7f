/*
 * r_dropout.c -- the dropout masks of a training call, drawn here from R's
 * random number generator (so set.seed() reproduces a run, as it does the
 * initial weights) and handed to the core in cl_step_options. Per layer
 * and kind one mask [B, G, C, H, W] in the core's row-major order, G = 4
 * with per-gate masks (cfg.dropout_masks; gates i, f, o, g), else 1. The
 * draw order, as Keras's ConvLSTMCell draws them: layer 0's input masks
 * (per gate: the whole [B, C, H, W] mask of gate i, then of f, o and g),
 * then its h masks likewise, then layer 1's; a kind only where its rate is
 * above 0; within a mask, batch-major over [B, C, H, W] row-major. An
 * element is kept (1 / (1 - p)) when its uniform draw is at least p, else 0
 * (the draws: r_unif.c, unif_rand()'s numbers in bulk).
 *
 * Tests pass masks instead (opts$dropout_masks, R arrays [B, C, H, W], or
 * [B, 4, C, H, W] per gate), to compare with a reference that takes the
 * same masks. The buffers are R_alloc'ed: R frees them when the .Call
 * returns, also on an error.
 */
#include <string.h>

#include "r_convlstm.h"

/* Masks per image: 4 with per-gate masks, else 1. */
static int mask_groups(const cl_config *c) {
  return c->dropout_masks == CL_MASKS_PER_GATE ? 4 : 1;
}

/* One mask [B, G, CP] (CP = C H W), drawn gate by gate as Keras does. */
static float *draw(r_unif *u, int B, int G, size_t CP, double p) {
  size_t n = (size_t)B * (size_t)G * CP;
  float *mask = (float *)R_alloc(n ? n : 1, sizeof(float));
  const float keep = (float)(1.0 / (1.0 - p));
  for (int g = 0; g < G; g++)
    for (int b = 0; b < B; b++) r_unif_mask(u, mask + ((size_t)b * G + g) * CP, CP, p, keep);
  return mask;
}

/* The R dims of a mask: [B, C, H, W], or [B, G, C, H, W] per gate. */
static int mask_dims(int B, int G, int C, int H, int W, int *dims) {
  int k = 0;
  dims[k++] = B;
  if (G > 1) dims[k++] = G;
  dims[k++] = C, dims[k++] = H, dims[k++] = W;
  return k;
}

/* A given mask: an R double array of mask_dims(), to row-major float. */
static float *given(SEXP a, const int *dims, int nd, size_t n, int layer, const char *kind) {
  SEXP dim = Rf_getAttrib(a, R_DimSymbol);
  int ok = TYPEOF(a) == REALSXP && TYPEOF(dim) == INTSXP && Rf_length(dim) == nd;
  for (int i = 0; ok && i < nd; i++) ok = INTEGER(dim)[i] == dims[i];
  if (!ok)
    r_raise_invalid("internal: the %s dropout mask of layer %d must be a double array of %d "
                    "dimensions [%d, %d, %d, %d%s]", kind, layer + 1, nd, dims[0], dims[1],
                    dims[2], dims[3], nd == 5 ? ", ..." : "");
  float *mask = (float *)R_alloc(n ? n : 1, sizeof(float));
  r_r_to_row_major(REAL(a), nd, dims, mask);
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
  const int G = mask_groups(c);
  r_unif u = {R_NilValue, NULL, 0};
  if (fixed == R_NilValue) r_unif_begin(&u);
  for (int l = 0; l < c->n_layers; l++) {
    const int C[2] = {l == 0 ? c->input_dim : c->hidden_dims[l - 1], c->hidden_dims[l]};
    const double p[2] = {c->dropout[l], c->recurrent_dropout[l]};
    const float **dst[2] = {&o->mask_x[l], &o->mask_h[l]};
    for (int k = 0; k < 2; k++) {
      if (!(p[k] > 0)) continue;
      size_t CP = (size_t)C[k] * (size_t)H * (size_t)W;
      int dims[5], nd = mask_dims(B, G, C[k], H, W, dims);
      *dst[k] = fixed != R_NilValue ? given(VECTOR_ELT(fixed, 2 * l + k), dims, nd,
                                            (size_t)B * G * CP, l, k ? "recurrent" : "input")
                                    : draw(&u, B, G, CP, p[k]);
    }
  }
  if (fixed == R_NilValue) r_unif_end(&u);
}

/* Test-only: the masks a training call of shape c(B, H, W) would draw now,
 * as R arrays [B, C, H, W] ([B, 4, C, H, W] per gate): per layer the input
 * mask, then the h mask; NULL where that rate is 0. */
SEXP ffi_dropout_draw(SEXP ptr, SEXP shape) {
  cl_model *m = r_model(ptr);
  if (TYPEOF(shape) != INTSXP || Rf_length(shape) != 3)
    r_raise_invalid("internal: ffi_dropout_draw() needs c(batch, height, width)");
  const int B = INTEGER(shape)[0], H = INTEGER(shape)[1], W = INTEGER(shape)[2];
  const cl_config *c = cl_model_config(m);
  const int G = mask_groups(c);
  cl_step_options o;
  memset(&o, 0, sizeof o);
  r_dropout_masks(m, R_NilValue, B, H, W, &o);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2 * c->n_layers));
  for (int l = 0; l < c->n_layers; l++) {
    const int C[2] = {l == 0 ? c->input_dim : c->hidden_dims[l - 1], c->hidden_dims[l]};
    const float *mask[2] = {o.mask_x[l], o.mask_h[l]};
    for (int k = 0; k < 2; k++) {
      if (!mask[k]) continue;
      int dims[5], nd = mask_dims(B, G, C[k], H, W, dims);
      SEXP a = r_alloc_array(nd, dims);
      SET_VECTOR_ELT(out, 2 * l + k, a);
      r_row_major_to_r(mask[k], nd, dims, REAL(a));
    }
  }
  UNPROTECT(1);
  return out;
}
