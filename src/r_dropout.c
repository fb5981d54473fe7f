/*
 * r_dropout.c -- the dropout masks of a training call: a seed drawn here
 * from R's random number generator (so set.seed() reproduces a run, as it
 * does the initial weights), from which the core draws every mask straight
 * into its planned buffers (cl_step_options draw_masks / dropout_seed;
 * core/dropout_rng.h), so the masks take no memory outside the plan. A
 * call with dropout takes two uniforms from R's stream, whatever the
 * model's size: the seed's high and low 32 bits.
 *
 * Tests pass masks instead (opts$dropout_masks, R arrays [B, C, H, W], or
 * [B, 4, C, H, W] per gate), to compare with a reference that takes the
 * same masks; those are R_alloc'ed (R frees them when the .Call returns,
 * also on an error) and uploaded by the core.
 */
#include <string.h>

#include "r_convlstm.h"

/* Masks per image: 4 with per-gate masks, else 1. */
static int mask_groups(const cl_config *c) {
  return c->dropout_masks == CL_MASKS_PER_GATE ? 4 : 1;
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

/* A call's seed: two of R's uniforms as 32-bit halves (Mersenne-Twister's
 * unif_rand() is a 32-bit word times 2^-32, so each half is that word). */
static uint64_t draw_seed(void) {
  GetRNGstate();
  double hi = unif_rand(), lo = unif_rand();
  PutRNGstate();
  return (uint64_t)(hi * 4294967296.0) << 32 | (uint64_t)(lo * 4294967296.0);
}

static int has_dropout(const cl_config *c) {
  int any = 0;
  for (int l = 0; l < c->n_layers; l++) any |= c->dropout[l] > 0 || c->recurrent_dropout[l] > 0;
  return any;
}

/* The given masks of opts$dropout_masks into o. */
static void given_masks(const cl_config *c, SEXP fixed, int B, int H, int W,
                        cl_step_options *o) {
  if (TYPEOF(fixed) != VECSXP || Rf_length(fixed) != 2 * c->n_layers)
    r_raise_invalid("internal: dropout_masks must be a list of 2 * n_layers masks");
  const int G = mask_groups(c);
  /* an encoder-forecaster's frames enter as patches: its masks are of the
   * patched frame (a forecaster stack's first layer has no input, and so
   * no input dropout: convlstm_forecaster() gives it none) */
  const int p = c->patch > 1 ? c->patch : 1, wired = c->forecaster != 0;
  H /= p;
  W /= p;
  for (int l = 0; l < c->n_layers; l++) {
    const int first = l == 0 || (wired && l == c->n_layers / 2);
    const int C[2] = {l == 0 ? c->input_dim * p * p : first ? 0 : c->hidden_dims[l - 1],
                      c->hidden_dims[l]};
    const double p[2] = {c->dropout[l], c->recurrent_dropout[l]};
    const float **dst[2] = {&o->mask_x[l], &o->mask_h[l]};
    for (int k = 0; k < 2; k++) {
      if (!(p[k] > 0)) continue;
      int dims[5], nd = mask_dims(B, G, C[k], H, W, dims);
      *dst[k] = given(VECTOR_ELT(fixed, 2 * l + k), dims, nd,
                      (size_t)B * G * C[k] * (size_t)H * (size_t)W, l, k ? "recurrent" : "input");
    }
  }
}

void r_dropout_masks(cl_model *m, SEXP opts, int B, int H, int W, cl_step_options *o) {
  const cl_config *c = cl_model_config(m);
  SEXP fixed = opts == R_NilValue ? R_NilValue : r_option(opts, "dropout_masks");
  if (!has_dropout(c) || B < 1 || H < 1 || W < 1) return; /* the core refuses bad shapes itself */
  if (fixed != R_NilValue) {
    given_masks(c, fixed, B, H, W, o);
    return;
  }
  o->draw_masks = 1;
  o->dropout_seed = draw_seed();
}

/* Test-only: the masks a training call of shape c(B, H, W) would draw now
 * (the same seed from R's stream, the core's host copy of the draw), as R
 * arrays [B, C, H, W] ([B, 4, C, H, W] per gate): per layer the input
 * mask, then the h mask; NULL where that rate is 0. */
SEXP ffi_dropout_draw(SEXP ptr, SEXP shape) {
  cl_model *m = r_model(ptr);
  if (TYPEOF(shape) != INTSXP || Rf_length(shape) != 3)
    r_raise_invalid("internal: ffi_dropout_draw() needs c(batch, height, width)");
  const int B = INTEGER(shape)[0], H = INTEGER(shape)[1], W = INTEGER(shape)[2];
  const cl_config *c = cl_model_config(m);
  const int G = mask_groups(c);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2 * c->n_layers));
  if (!has_dropout(c) || B < 1 || H < 1 || W < 1) {
    UNPROTECT(1);
    return out;
  }
  const uint64_t seed = draw_seed();
  for (int l = 0; l < c->n_layers; l++) {
    const int C[2] = {l == 0 ? c->input_dim : c->hidden_dims[l - 1], c->hidden_dims[l]};
    const double p[2] = {c->dropout[l], c->recurrent_dropout[l]};
    for (int k = 0; k < 2; k++) {
      if (!(p[k] > 0)) continue;
      int dims[5], nd = mask_dims(B, G, C[k], H, W, dims);
      size_t n = (size_t)B * G * C[k] * (size_t)H * (size_t)W;
      float *mask = (float *)R_alloc(n ? n : 1, sizeof(float));
      R_CL_CHECK(m, cl_model_dropout_mask(m, seed, l, k, B, H, W, mask));
      SEXP a = r_alloc_array(nd, dims);
      SET_VECTOR_ELT(out, 2 * l + k, a);
      r_row_major_to_r(mask, nd, dims, REAL(a));
    }
  }
  UNPROTECT(1);
  return out;
}
