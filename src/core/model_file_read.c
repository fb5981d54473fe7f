/*
 * core/model_file_read.c -- what convlstm keeps in a safetensors file: a model's
 * parameters, and optionally its optimizer's state and hyperparameters, so
 * that training resumes exactly and the weights open in PyTorch: reading
 * one. It holds cl_model_load and the cl_saved_* functions of convlstm.h,
 * where what a file holds is documented; model_file_write.c writes it.
 *
 * Why a file of its own: the container (safetensors.c, below it) knows
 * tensors and string metadata; this file knows what they mean to convlstm:
 * the architecture (from "convlstm.*" metadata, or else from the weights'
 * shapes, as in a state dict PyTorch or R torch saved), the optimizer kind,
 * hyperparameters and step count, the float16 loss scale, and which tensors
 * a model needs by name and shape (tensors.c's table: "cell_list.<l>.
 * conv.weight|bias", "cell_list.<l>.w_ci|w_cf|w_co", and the optimizer
 * states under "optimizer.<state>." prefixes).
 *
 * A file is refused, with a message, unless it holds exactly the tensors
 * its architecture and optimizer need, each with its shape, a floating
 * dtype and finite values. Loading into a model allocates the optimizer
 * state first, so that running out of memory leaves the model as it was.
 */
#include "internal.h"
#include "model_file.h"  /* tensor roles, the metadata prefix */
#include "safetensors.h" /* the container, and through it json.h */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const cl_role_prefix[N_ROLES] = {"", "optimizer.exp_avg.", "optimizer.exp_avg_sq.",
                                                 "optimizer.momentum_buffer.",
                                                 "optimizer.max_exp_avg_sq.",
                                                 "optimizer.square_avg.", "optimizer.grad_avg."};

struct cl_saved {
  cl_st_file f; /* the container: tensors and metadata */
  cl_config cfg;
  int n_params_tensors; /* 1 to 6 per layer (tensors.c) */
  /* tensor index for [role][state-dict position], -1 when absent */
  int idx[N_ROLES][CL_MAX_TENSORS];
  int has_opt;
  cl_optim opt;
  int64_t opt_steps;
  int has_scale;
  cl_loss_scale scale;
};

void cl_saved_free(cl_saved *s) {
  if (!s) return;
  cl_st_free(&s->f);
  free(s);
}

/* ---- what convlstm keeps in the metadata ------------------------------ */

/* A tensor's name for role r and state-dict position i of cfg. */
static void tensor_name(char *buf, size_t len, int r, int i, const cl_config *c) {
  cl_tensor_spec t = cl_cfg_tensor(c, i);
  cl_tensor_name(buf, len, cl_role_prefix[r], &t, c);
}

static void shape_text(char *buf, size_t len, const uint64_t *d, int nd) {
  size_t o = 0;
  o += (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < nd && o < len; i++)
    o += (size_t)snprintf(buf + o, len - o, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
  if (o < len) snprintf(buf + o, len - o, "]");
}

/* Architecture from the metadata (convlstm wrote it), or else from the
 * weights' shapes (a state dict PyTorch or R torch saved). */
/* The optional per-layer lists of non-square or dilated models
 * (convlstm.kernel_widths, .dilation_h, .dilation_w) and of models whose
 * two kernels differ (.recurrent_kernel_sizes, .recurrent_kernel_widths):
 * absent, the defaults. */
static cl_status read_layer_lists(cl_saved *s, int nh, char *err, size_t errlen) {
  static const char *const keys[5] = {META_PREFIX "kernel_widths", META_PREFIX "dilation_h",
                                      META_PREFIX "dilation_w",
                                      META_PREFIX "recurrent_kernel_sizes",
                                      META_PREFIX "recurrent_kernel_widths"};
  int *dst[5] = {s->cfg.kernel_widths, s->cfg.dilation_h, s->cfg.dilation_w,
                 s->cfg.recurrent_kernel_sizes, s->cfg.recurrent_kernel_widths};
  for (int i = 0; i < 5; i++) {
    const char *v = cl_st_find_meta(&s->f, keys[i]);
    if (!v) continue;
    int n = cl_st_meta_int_list(v, dst[i], CL_MAX_LAYERS), ok = n == nh;
    for (int l = 0; ok && l < nh; l++) ok = dst[i][l] >= 1 && dst[i][l] <= 46339;
    if (!ok)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "metadata %s must be a list of %d positive integers (one per layer), not "
                        "\"%.60s\"",
                        keys[i], nh, v);
  }
  return CL_OK;
}

/* Peepholes from convlstm.peephole ("channel", or "position" with
 * convlstm.peephole_size [H, W]); without the metadata, from the shape of
 * cell_list.0.w_ci, as a state dict PyTorch saved has it: [h, 1, 1] per
 * channel (a 1 x 1 frame reads as that too: the same numbers), [h, H, W]
 * per position. */
static cl_status read_peephole(cl_saved *s, char *err, size_t errlen) {
  cl_config *c = &s->cfg;
  const char *v = cl_st_find_meta(&s->f, META_PREFIX "peephole");
  const char *sz = cl_st_find_meta(&s->f, META_PREFIX "peephole_size");
  if (v) {
    int kind = strcmp(v, "channel") == 0 ? CL_PEEP_CHANNEL
               : strcmp(v, "position") == 0 ? CL_PEEP_POSITION
                                            : -1;
    int hw[2] = {0, 0};
    int n = sz ? cl_st_meta_int_list(sz, hw, 2) : 0;
    if (kind < 0 || (kind == CL_PEEP_POSITION) != (sz != NULL) ||
        (sz && (n != 2 || hw[0] < 1 || hw[1] < 1)))
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "metadata convlstm.peephole must be \"channel\", or \"position\" with "
                        "convlstm.peephole_size [height, width], not \"%.40s\" with \"%.40s\"",
                        v, sz ? sz : "(none)");
    c->peephole = kind;
    c->peephole_h = hw[0];
    c->peephole_w = hw[1];
    return CL_OK;
  }
  if (sz)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.peephole_size without convlstm.peephole");
  int i = cl_st_find_tensor(&s->f, "cell_list.0.w_ci");
  if (i < 0) return CL_OK;
  const cl_st_tensor *t = &s->f.t[i];
  if (t->ndim != 3 || t->shape[1] < 1 || t->shape[2] < 1 || t->shape[1] > INT32_MAX ||
      t->shape[2] > INT32_MAX)
    return CL_OK; /* match_tensors names the shape it wants */
  int per_channel = t->shape[1] == 1 && t->shape[2] == 1;
  c->peephole = per_channel ? CL_PEEP_CHANNEL : CL_PEEP_POSITION;
  c->peephole_h = per_channel ? 0 : (int)t->shape[1];
  c->peephole_w = per_channel ? 0 : (int)t->shape[2];
  return CL_OK;
}

/* The optional rates of a model with dropout (convlstm.dropout,
 * .recurrent_dropout): absent, 0; and its masks (convlstm.dropout_masks):
 * absent, shared, what every file from before per-gate masks trained with. */
static cl_status read_rates(cl_saved *s, int nh, char *err, size_t errlen) {
  static const char *const keys[2] = {META_PREFIX "dropout", META_PREFIX "recurrent_dropout"};
  double *dst[2] = {s->cfg.dropout, s->cfg.recurrent_dropout};
  for (int i = 0; i < 2; i++) {
    const char *v = cl_st_find_meta(&s->f, keys[i]);
    if (!v) continue;
    int ok = cl_st_meta_double_list(v, dst[i], CL_MAX_LAYERS) == nh;
    for (int l = 0; ok && l < nh; l++) ok = dst[i][l] >= 0 && dst[i][l] < 1;
    if (!ok)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "metadata %s must be a list of %d numbers in [0, 1) (one per layer), not "
                        "\"%.60s\"", keys[i], nh, v);
  }
  const char *v = cl_st_find_meta(&s->f, META_PREFIX "dropout_masks");
  s->cfg.dropout_masks = CL_MASKS_SHARED;
  if (v && strcmp(v, cl_dropout_masks_name(CL_MASKS_SHARED)) != 0) {
    if (strcmp(v, cl_dropout_masks_name(CL_MASKS_PER_GATE)) != 0)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "metadata convlstm.dropout_masks must be \"per_gate\" or \"shared\", "
                        "not \"%.40s\"", v);
    s->cfg.dropout_masks = CL_MASKS_PER_GATE;
  }
  return CL_OK;
}

/* The architecture from the "convlstm.*" metadata (in, hd, ks, bi: the four
 * keys that go together, all present). */
static cl_status arch_from_metadata(cl_saved *s, const char *in, const char *hd, const char *ks,
                                    const char *bi, char *err, size_t errlen) {
  cl_config *c = &s->cfg;
  long long x;
  if (!in || !hd || !ks || !bi)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "the metadata describes the architecture only in part: convlstm.input_dim, "
                      "convlstm.hidden_dims, convlstm.kernel_sizes and convlstm.bias go together");
  if (!cl_st_meta_int(in, 1, INT32_MAX, &x))
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.input_dim must be a positive integer, not \"%.40s\"", in);
  c->input_dim = (int)x;
  int nh = cl_st_meta_int_list(hd, c->hidden_dims, CL_MAX_LAYERS);
  int nk = cl_st_meta_int_list(ks, c->kernel_sizes, CL_MAX_LAYERS);
  if (nh < 1)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.hidden_dims must be a list of 1 to %d positive integers "
                      "such as [8, 1], not \"%.60s\"", CL_MAX_LAYERS, hd);
  if (nk != nh)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.kernel_sizes must be a list of %d positive integers "
                      "(one per layer), not \"%.60s\"", nh, ks);
  c->n_layers = nh;
  CL_TRY(read_layer_lists(s, nh, err, errlen));
  CL_TRY(read_rates(s, nh, err, errlen));
  if (strcmp(bi, "true") != 0 && strcmp(bi, "false") != 0)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.bias must be \"true\" or \"false\", not \"%.40s\"", bi);
  c->bias = bi[0] == 't';
  return CL_OK;
}

/* Layer l of a state dict without metadata, from its weight t (named name):
 * cell_list.<l>.conv.weight [4h, in + h, k, k]; or, with th (conv_h.weight
 * [4h, h, rk, rk]), t is conv_x.weight [4h, in, k, k]. */
static cl_status arch_layer_from_weight(cl_config *c, int l, const char *name,
                                        const cl_st_tensor *t, const cl_st_tensor *th,
                                        char *err, size_t errlen) {
  char sh[160];
  shape_text(sh, sizeof sh, t->shape, t->ndim);
  uint64_t hh = th ? 0 : t->shape[0] / 4; /* the hidden columns of a whole weight */
  if (t->ndim != 4 || t->shape[0] == 0 || t->shape[0] % 4 != 0 ||
      t->shape[0] / 4 > INT32_MAX / 4 || t->shape[1] <= hh ||
      t->shape[1] > INT32_MAX || t->shape[2] % 2 == 0 || t->shape[3] % 2 == 0 ||
      t->shape[2] > INT32_MAX || t->shape[3] > INT32_MAX)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "tensor %s has shape %s; a ConvLSTM layer's weight is [4 * hidden, "
                      "input + hidden, kh, kw] (conv_x.weight: [4 * hidden, input, kh, kw]) "
                      "with kh, kw odd",
                      name, sh);
  int h = (int)(t->shape[0] / 4), inl = (int)(t->shape[1] - hh);
  if (th) {
    char shh[160];
    shape_text(shh, sizeof shh, th->shape, th->ndim);
    if (th->ndim != 4 || th->shape[0] != t->shape[0] || th->shape[1] != (uint64_t)h ||
        th->shape[2] % 2 == 0 || th->shape[3] % 2 == 0 || th->shape[2] > 46339 ||
        th->shape[3] > 46339)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "layer %d's conv_h.weight has shape %s; with conv_x.weight %s it must be "
                        "[4 * hidden, hidden, kh, kw] with kh, kw odd",
                        l, shh, sh);
    c->recurrent_kernel_sizes[l] = (int)th->shape[2];
    c->recurrent_kernel_widths[l] = (int)th->shape[3];
  }
  if (l == 0) c->input_dim = inl;
  else if (inl != c->hidden_dims[l - 1])
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "tensor %s has shape %s: layer %d reads %d channels, but layer %d has "
                      "hidden dimension %d",
                      name, sh, l, inl, l - 1, c->hidden_dims[l - 1]);
  c->hidden_dims[l] = h;
  c->kernel_sizes[l] = (int)t->shape[2];
  c->kernel_widths[l] = (int)t->shape[3];
  c->n_layers = l + 1;
  return CL_OK;
}

/* The architecture from the weights' shapes, as in a state dict PyTorch or
 * R torch saved (no metadata): layers 0, 1, ... while their weight exists. */
static cl_status arch_from_weights(cl_saved *s, char *err, size_t errlen) {
  cl_config *c = &s->cfg;
  char name[64];
  for (int l = 0; l < CL_MAX_LAYERS; l++) {
    snprintf(name, sizeof name, "cell_list.%d.conv.weight", l);
    int i = cl_st_find_tensor(&s->f, name), ih = -1;
    if (i < 0) { /* a cell of two convolutions */
      char hname[64];
      snprintf(name, sizeof name, "cell_list.%d.conv_x.weight", l);
      snprintf(hname, sizeof hname, "cell_list.%d.conv_h.weight", l);
      i = cl_st_find_tensor(&s->f, name);
      ih = cl_st_find_tensor(&s->f, hname);
      if ((i < 0) != (ih < 0))
        return cl_st_fail(err, errlen, CL_E_INVALID,
                          "the file has %s but not %s: a layer of two convolutions needs both",
                          i < 0 ? hname : name, i < 0 ? name : hname);
    }
    if (i < 0) break;
    CL_TRY(arch_layer_from_weight(c, l, name, &s->f.t[i], ih < 0 ? NULL : &s->f.t[ih], err,
                                  errlen));
  }
  if (c->n_layers == 0)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "no tensor cell_list.0.conv.weight and no convlstm metadata: this is not a "
                      "convlstm model's file");
  c->bias = cl_st_find_tensor(&s->f, "cell_list.0.conv.bias") >= 0 ||
            cl_st_find_tensor(&s->f, "cell_list.0.conv_x.bias") >= 0;
  return CL_OK;
}

/* convlstm.dtype (dt, may be NULL: float32) by name. */
static cl_status arch_dtype(cl_config *c, const char *dt, char *err, size_t errlen) {
  if (!dt) return CL_OK;
  int t = 0;
  while (t < CL_N_DTYPES && strcmp(dt, cl_dtype_name((cl_dtype)t)) != 0) t++;
  if (t < CL_N_DTYPES) {
    c->dtype = (cl_dtype)t;
    return CL_OK;
  }
  return cl_st_fail(err, errlen, CL_E_INVALID,
                    "metadata convlstm.dtype must be \"float32\", \"float16\" or \"bfloat16\", "
                    "not \"%.40s\"", dt);
}

/* Each layer's sizes within what the model's int arithmetic holds. */
static cl_status arch_sizes_ok(const cl_config *c, char *err, size_t errlen) {
  for (int l = 0; l < c->n_layers; l++) {
    int in_l = l == 0 ? c->input_dim : c->hidden_dims[l - 1];
    int kw = cl_cfg_kernel_w(c, l), rkh = cl_cfg_rkernel_h(c, l), rkw = cl_cfg_rkernel_w(c, l);
    if (c->hidden_dims[l] > INT32_MAX / 4 || in_l > INT32_MAX - c->hidden_dims[l] ||
        c->kernel_sizes[l] % 2 == 0 || c->kernel_sizes[l] > 46339 || kw % 2 == 0 || kw > 46339 ||
        (double)c->kernel_sizes[l] * kw > 46339.0 * 46339.0 || rkh % 2 == 0 || rkw % 2 == 0 ||
        (double)rkh * rkw > 46339.0 * 46339.0 || (c->recurrent_kernel_widths[l] &&
                                                  !c->recurrent_kernel_sizes[l]))
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "layer %d's sizes (hidden %d, kernel %dx%d, recurrent kernel %dx%d) are "
                        "out of range (kernels are odd)",
                        l, c->hidden_dims[l], c->kernel_sizes[l], kw, rkh, rkw);
  }
  return CL_OK;
}

/* An encoder-forecaster (convlstm.model "encoder_forecaster", with
 * convlstm.patch; absent: a plain stack, patch 1); a plain stack's head
 * (convlstm.head "top"; absent: none). */
static cl_status read_model_kind(cl_saved *s, char *err, size_t errlen) {
  const char *v = cl_st_find_meta(&s->f, META_PREFIX "model");
  const char *p = cl_st_find_meta(&s->f, META_PREFIX "patch");
  const char *hd = cl_st_find_meta(&s->f, META_PREFIX "head");
  long long x = 1;
  if (hd && strcmp(hd, "top") != 0)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.head must be \"top\", not \"%.40s\"", hd);
  s->cfg.head = hd != NULL;
  if (!v && !p) return CL_OK;
  if (!v || strcmp(v, "encoder_forecaster") != 0 || (p && !cl_st_meta_int(p, 1, 4096, &x)))
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.model must be \"encoder_forecaster\" with convlstm.patch "
                      "a positive integer, not \"%.40s\" with \"%.40s\"",
                      v ? v : "(absent)", p ? p : "(absent)");
  s->cfg.forecaster = 1;
  s->cfg.patch = (int)x;
  return CL_OK;
}

/* Format version 2 lists an encoder-forecaster's layers once, as the user
 * gave them (model_file_write.c's one_stack_listed): its forecaster stack
 * repeats the encoder's. */
static cl_status repeat_stack(cl_config *c, char *err, size_t errlen) {
  const int L = c->n_layers;
  if (!c->forecaster)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "convlstm format version 2 is an encoder-forecaster's, but the metadata "
                      "convlstm.model is absent");
  if (2 * L > CL_MAX_LAYERS - 2)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "an encoder-forecaster has at most %d layers per stack, not %d",
                      (CL_MAX_LAYERS - 2) / 2, L);
  int *ints[] = {c->hidden_dims, c->kernel_sizes, c->kernel_widths, c->dilation_h, c->dilation_w,
                 c->recurrent_kernel_sizes, c->recurrent_kernel_widths};
  for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
    memcpy(ints[i] + L, ints[i], (size_t)L * sizeof(int));
  memcpy(c->dropout + L, c->dropout, (size_t)L * sizeof(double));
  memcpy(c->recurrent_dropout + L, c->recurrent_dropout, (size_t)L * sizeof(double));
  c->n_layers = 2 * L;
  return CL_OK;
}

static cl_status read_architecture(cl_saved *s, char *err, size_t errlen) {
  cl_config *c = &s->cfg;
  memset(c, 0, sizeof *c);
  c->device = CL_DEVICE_CPU;
  c->dtype = CL_F32;
  const char *v = cl_st_find_meta(&s->f, META_PREFIX "format_version");
  if (v && strcmp(v, "1") != 0 && strcmp(v, "2") != 0)
    return cl_st_fail(err, errlen, CL_E_UNSUPPORTED,
                      "the file is convlstm format version \"%.20s\"; this build reads versions 1 "
                      "and 2", v);
  const int per_stack = v && strcmp(v, "2") == 0;
  const char *in = cl_st_find_meta(&s->f, META_PREFIX "input_dim");
  const char *hd = cl_st_find_meta(&s->f, META_PREFIX "hidden_dims");
  const char *ks = cl_st_find_meta(&s->f, META_PREFIX "kernel_sizes");
  const char *bi = cl_st_find_meta(&s->f, META_PREFIX "bias");
  if (in || hd || ks || bi)
    CL_TRY(arch_from_metadata(s, in, hd, ks, bi, err, errlen));
  else
    CL_TRY(arch_from_weights(s, err, errlen));
  CL_TRY(read_peephole(s, err, errlen));
  CL_TRY(read_model_kind(s, err, errlen));
  if (per_stack) CL_TRY(repeat_stack(c, err, errlen));
  CL_TRY(arch_dtype(c, cl_st_find_meta(&s->f, META_PREFIX "dtype"), err, errlen));
  return arch_sizes_ok(c, err, errlen);
}

static cl_status read_optimizer(cl_saved *s, char *err, size_t errlen) {
  const char *kind = cl_st_find_meta(&s->f, META_PREFIX "optimizer");
  if (!kind) {
    for (int i = 0; i < s->f.nmeta; i++)
      if (strncmp(s->f.meta[i].key, META_PREFIX "optimizer.", 19) == 0)
        return cl_st_fail(err, errlen, CL_E_INVALID,
                          "metadata %.80s is there but convlstm.optimizer (the kind) is not",
                          s->f.meta[i].key);
    return CL_OK;
  }
  cl_optim *o = &s->opt;
  memset(o, 0, sizeof *o);
  o->kind = cl_optim_kind_of(kind);
  if (!o->kind)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.optimizer must be \"adam\", \"adamw\", \"sgd\" or "
                      "\"rmsprop\", not \"%.40s\"", kind);
  /* absent in files of before amsgrad: off */
  const char *ams = cl_st_find_meta(&s->f, META_PREFIX "optimizer.amsgrad");
  if (ams && strcmp(ams, "true") != 0 && strcmp(ams, "false") != 0)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.optimizer.amsgrad must be \"true\" or \"false\", not "
                      "\"%.40s\"", ams);
  o->amsgrad = ams && strcmp(ams, "true") == 0;
  const char *cen = cl_st_find_meta(&s->f, META_PREFIX "optimizer.centered");
  if (cen && strcmp(cen, "true") != 0 && strcmp(cen, "false") != 0)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.optimizer.centered must be \"true\" or \"false\", not "
                      "\"%.40s\"", cen);
  o->centered = cen && strcmp(cen, "true") == 0;
  struct {
    const char *key;
    double *dst;
    double lo, hi; /* lo <= x < hi, or x == 0 allowed when lo is 0 */
    int open_lo;   /* x > lo */
  } hp[] = {{META_PREFIX "optimizer.lr", &o->lr, 0, INFINITY, 0},
            {META_PREFIX "optimizer.weight_decay", &o->weight_decay, 0, INFINITY, 0},
            {META_PREFIX "optimizer.beta1", &o->beta1, 0, 1, 0},
            {META_PREFIX "optimizer.beta2", &o->beta2, 0, 1, 0},
            {META_PREFIX "optimizer.eps", &o->eps, 0, INFINITY, 1},
            {META_PREFIX "optimizer.momentum", &o->momentum, 0, INFINITY, 0},
            {META_PREFIX "optimizer.alpha", &o->alpha, 0, 1, 0}};
  const int adam = cl_optim_is_adam(o->kind), rms = o->kind == CL_OPTIM_RMSPROP;
  /* lr, weight_decay: all; betas: Adam; eps: Adam, RMSprop; momentum: SGD,
   * RMSprop; alpha: RMSprop */
  const int needs[7] = {1, 1, adam, adam, adam || rms, !adam, rms};
  for (int i = 0; i < 7; i++) {
    if (!needs[i]) continue;
    const char *v = cl_st_find_meta(&s->f, hp[i].key);
    double d;
    if (!v)
      return cl_st_fail(err, errlen, CL_E_INVALID, "metadata %s is missing (the %s optimizer needs it)",
                        hp[i].key, kind);
    if (!cl_st_meta_double(v, &d) || d < hp[i].lo || (hp[i].open_lo && d <= hp[i].lo) || d >= hp[i].hi)
      return cl_st_fail(err, errlen, CL_E_INVALID, "metadata %s is out of range or not a number: \"%.40s\"",
                        hp[i].key, v);
    *hp[i].dst = d;
  }
  const char *st = cl_st_find_meta(&s->f, META_PREFIX "optimizer.steps");
  long long steps;
  if (!st || !cl_st_meta_int(st, 0, (long long)CL_ST_MAX_INT, &steps))
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.optimizer.steps must be a whole number >= 0, not %s%.40s%s",
                      st ? "\"" : "", st ? st : "missing", st ? "\"" : "");
  char why[CL_ERRMSG_LEN];
  if (cl_optim_check(o, why, sizeof why) != CL_OK)
    return cl_st_fail(err, errlen, CL_E_INVALID, "the file's optimizer: %s", why);
  s->opt_steps = steps;
  s->has_opt = 1;
  return CL_OK;
}

static cl_status read_loss_scale(cl_saved *s, char *err, size_t errlen) {
  const char *sc = cl_st_find_meta(&s->f, META_PREFIX "loss_scale.scale");
  const char *gi = cl_st_find_meta(&s->f, META_PREFIX "loss_scale.growth_interval");
  const char *cs = cl_st_find_meta(&s->f, META_PREFIX "loss_scale.clean_steps");
  const char *sk = cl_st_find_meta(&s->f, META_PREFIX "loss_scale.skipped_steps");
  if (!sc && !gi && !cs && !sk) return CL_OK;
  double d;
  long long g, c, k;
  if (!sc || !gi || !cs || !sk || !cl_st_meta_double(sc, &d) || !((float)d > 0) ||
      !isfinite((float)d) ||
      !cl_st_meta_int(gi, 1, INT32_MAX, &g) || !cl_st_meta_int(cs, 0, INT32_MAX, &c) ||
      !cl_st_meta_int(sk, 0, (long long)CL_ST_MAX_INT, &k))
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.loss_scale.* must hold scale (> 0), growth_interval (>= 1), "
                      "clean_steps and skipped_steps (>= 0), all four");
  cl_scaler_defaults(&s->scale); /* settings a file may lack: GradScaler's */
  s->scale.scale = d;
  s->scale.growth_interval = (int)g;
  s->scale.clean_steps = (int)c;
  s->scale.skipped_steps = k;
  /* optional: files written before it was kept have no run of skips */
  const char *row = cl_st_find_meta(&s->f, META_PREFIX "loss_scale.skipped_in_a_row");
  long long r = 0;
  if (row && !cl_st_meta_int(row, 0, INT32_MAX, &r))
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "metadata convlstm.loss_scale.skipped_in_a_row must be a whole number >= 0, "
                      "not \"%.40s\"", row);
  s->scale.skipped_in_a_row = (int)r;
  /* optional too: the settings of cl_model_set_loss_scale */
  const char *keys[3] = {META_PREFIX "loss_scale.init_scale", META_PREFIX "loss_scale.growth_factor",
                         META_PREFIX "loss_scale.backoff_factor"};
  double *dst[3] = {&s->scale.init_scale, &s->scale.growth_factor, &s->scale.backoff_factor};
  for (int i = 0; i < 3; i++) {
    const char *v = cl_st_find_meta(&s->f, keys[i]);
    if (v && !cl_st_meta_double(v, dst[i]))
      return cl_st_fail(err, errlen, CL_E_INVALID, "metadata %s must be a number, not \"%.40s\"",
                        keys[i], v);
  }
  char why[CL_ERRMSG_LEN];
  if (cl_scaler_check(&s->scale, why, sizeof why) != CL_OK)
    return cl_st_fail(err, errlen, CL_E_INVALID, "the file's loss scaler: %s", why);
  s->has_scale = 1;
  return CL_OK;
}

/* The shape tensor i of cfg has in torch (tensors.c). */
static int expected_shape(const cl_config *c, int i, uint64_t d[4]) {
  cl_tensor_spec t = cl_cfg_tensor(c, i);
  for (int j = 0; j < 4; j++) d[j] = (uint64_t)t.dims[j];
  return t.ndim;
}

/* Tensor t (named name, role r, state-dict position i): the shape the model
 * needs, a floating dtype, finite values (second moments >= 0). */
static cl_status check_tensor(const cl_saved *s, const cl_st_tensor *t, const char *name, int r,
                              int i, char *err, size_t errlen) {
  char sh[160], want[160];
  uint64_t d[4];
  int nd = expected_shape(&s->cfg, i, d);
  int same = t->ndim == nd;
  for (int j = 0; same && j < nd; j++) same = t->shape[j] == d[j];
  if (!same) {
    shape_text(sh, sizeof sh, t->shape, t->ndim);
    shape_text(want, sizeof want, d, nd);
    return cl_st_fail(err, errlen, CL_E_INVALID, "tensor %s has shape %s; the model needs %s", name,
                      sh, want);
  }
  if (!cl_st_dtype_is_float(t->dtype))
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "tensor %s has dtype %s; parameters must be F32 (or F64, F16, BF16)", name,
                      cl_st_dtype_name(t->dtype));
  size_t n = (size_t)((t->end - t->begin) / cl_st_dtype_size(t->dtype)), bad = 0;
  size_t negative = 0;
  for (size_t e = 0; e < n; e++) {
    float v = cl_st_elem(&s->f, t, e);
    bad += !isfinite(v);
    negative += v < 0;
  }
  if (bad)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "tensor %s holds %zu non-finite value%s (NaN or Inf) of %zu", name, bad,
                      bad == 1 ? "" : "s", n);
  /* Adam divides by sqrt(exp_avg_sq), RMSprop by sqrt(square_avg): a
   * negative one is NaN at the next step */
  if ((r == R_EXP_AVG_SQ || r == R_MAX_EXP_AVG_SQ || r == R_SQUARE_AVG) && negative)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "tensor %s holds %zu negative value%s of %zu: second moments are >= 0",
                      name, negative, negative == 1 ? "" : "s", n);
  return CL_OK;
}

/* Role r's tensors found and checked (s->idx[r], *matched counts them): the
 * parameters all needed; an optimizer state all or none. */
static cl_status match_role(cl_saved *s, int r, int *matched, char *err, size_t errlen) {
  const cl_config *c = &s->cfg;
  char name[96];
  int found = 0;
  for (int i = 0; i < s->n_params_tensors; i++) {
    tensor_name(name, sizeof name, r, i, c);
    int k = cl_st_find_tensor(&s->f, name);
    s->idx[r][i] = k;
    if (k < 0) {
      if (r == R_PARAM)
        return cl_st_fail(err, errlen, CL_E_INVALID, "tensor %s is missing (the architecture needs it)",
                          name);
      continue;
    }
    found++;
    (*matched)++;
    CL_TRY(check_tensor(s, &s->f.t[k], name, r, i, err, errlen));
  }
  if (r != R_PARAM && found != 0 && found != s->n_params_tensors) {
    for (int i = 0; i < s->n_params_tensors; i++)
      if (s->idx[r][i] < 0) tensor_name(name, sizeof name, r, i, c);
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "the optimizer state is incomplete: tensor %s is missing", name);
  }
  return CL_OK;
}

/* No tensor of the file beyond the matched ones. */
static cl_status no_extra_tensor(const cl_saved *s, int matched, char *err, size_t errlen) {
  if (matched == s->f.nt) return CL_OK;
  for (int i = 0; i < s->f.nt; i++) {
    int used = 0;
    for (int r = 0; r < N_ROLES && !used; r++)
      for (int j = 0; j < s->n_params_tensors && !used; j++) used = s->idx[r][j] == i;
    if (!used)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "unexpected tensor \"%.80s\" (%d of the file's %d tensors are not part of "
                        "this %d-layer model)",
                        s->f.t[i].name, s->f.nt - matched, s->f.nt, s->cfg.n_layers);
  }
  return CL_OK;
}

/* The optimizer states present agree with the optimizer the metadata names. */
static cl_status states_fit_optimizer(const cl_saved *s, char *err, size_t errlen) {
  int have_m = s->idx[R_EXP_AVG][0] >= 0, have_v = s->idx[R_EXP_AVG_SQ][0] >= 0,
      have_b = s->idx[R_MOMENTUM][0] >= 0, have_x = s->idx[R_MAX_EXP_AVG_SQ][0] >= 0,
      have_sq = s->idx[R_SQUARE_AVG][0] >= 0, have_ga = s->idx[R_GRAD_AVG][0] >= 0;
  const int rms = s->has_opt && s->opt.kind == CL_OPTIM_RMSPROP;
  if ((have_m || have_v || have_b || have_x || have_sq || have_ga) && !s->has_opt)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "the file holds optimizer state but no convlstm.optimizer metadata");
  /* without it, an amsgrad state starts its maximum at zeros */
  if (have_x && !(s->has_opt && s->opt.amsgrad && have_v))
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "max_exp_avg_sq goes with exp_avg_sq of an optimizer with amsgrad, and only "
                      "there");
  if ((have_sq || have_ga) && !rms)
    return cl_st_fail(err, errlen, CL_E_INVALID,
                      "square_avg and grad_avg are RMSprop's state, and the file's optimizer is %s",
                      s->has_opt ? cl_optim_kind_name(s->opt.kind) : "none");
  if (rms) {
    if (have_m || have_v || have_x)
      return cl_st_fail(err, errlen, CL_E_INVALID, "an RMSprop optimizer has no exp_avg state");
    if (have_ga && !(s->opt.centered && have_sq))
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "grad_avg goes with square_avg of a centered RMSprop, and only there");
    if (s->opt_steps > 0 && !have_sq)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "the optimizer took %lld steps but its state (square_avg) is missing",
                        (long long)s->opt_steps);
  }
  if (s->has_opt && cl_optim_is_adam(s->opt.kind)) {
    if (have_b)
      return cl_st_fail(err, errlen, CL_E_INVALID, "an Adam optimizer has no momentum_buffer state");
    if (have_m != have_v)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "Adam's state needs both exp_avg and exp_avg_sq, or neither");
    if (s->opt_steps > 0 && !have_m)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "the optimizer took %lld steps but its state (exp_avg, exp_avg_sq) is missing",
                        (long long)s->opt_steps);
  }
  if (s->has_opt && s->opt.kind == CL_OPTIM_SGD) {
    if (have_m || have_v)
      return cl_st_fail(err, errlen, CL_E_INVALID, "an SGD optimizer has no exp_avg state");
    if (s->opt_steps > 0 && s->opt.momentum != 0 && !have_b)
      return cl_st_fail(err, errlen, CL_E_INVALID,
                        "SGD with momentum took %lld steps but its momentum_buffer state is missing",
                        (long long)s->opt_steps);
  }
  return CL_OK;
}

/* Every tensor the configuration and optimizer need, with its shape, a
 * floating dtype and finite values; no tensor beyond them. */
static cl_status match_tensors(cl_saved *s, char *err, size_t errlen) {
  s->n_params_tensors = cl_cfg_n_tensors(&s->cfg);
  int matched = 0;
  for (int r = 0; r < N_ROLES; r++) CL_TRY(match_role(s, r, &matched, err, errlen));
  CL_TRY(no_extra_tensor(s, matched, err, errlen));
  return states_fit_optimizer(s, err, errlen);
}

/* Parses and checks; takes ownership of bytes (freed on failure too). */
static cl_status parse_owned(unsigned char *bytes, size_t len, cl_saved **out, char *err,
                             size_t errlen) {
  *out = NULL;
  cl_status st = cl_st_check_length(bytes, len, err, errlen);
  if (st != CL_OK) {
    free(bytes);
    return st;
  }
  cl_saved *s = calloc(1, sizeof *s);
  if (!s) {
    free(bytes);
    return cl_st_fail(err, errlen, CL_E_OOM, "out of host memory reading a file");
  }
  st = cl_st_parse(&s->f, bytes, len, err, errlen);
  if (st == CL_OK) st = read_architecture(s, err, errlen);
  if (st == CL_OK) st = read_optimizer(s, err, errlen);
  if (st == CL_OK) st = read_loss_scale(s, err, errlen);
  if (st == CL_OK) st = match_tensors(s, err, errlen);
  if (st != CL_OK) {
    cl_saved_free(s);
    return st;
  }
  *out = s;
  return CL_OK;
}

cl_status cl_saved_parse(const void *bytes, size_t len, cl_saved **out, char *err,
                         size_t errlen) {
  *out = NULL;
  unsigned char *copy = malloc(len > 0 ? len : 1);
  if (!copy) return cl_st_fail(err, errlen, CL_E_OOM, "out of host memory reading a file");
  if (len) memcpy(copy, bytes, len);
  return parse_owned(copy, len, out, err, errlen);
}

cl_status cl_saved_read(const char *path, cl_saved **out, char *err, size_t errlen) {
  *out = NULL;
  char why[CL_ERRMSG_LEN];
  unsigned char *buf;
  size_t size;
  CL_TRY(cl_st_read_file(path, &buf, &size, err, errlen));
  cl_status st = parse_owned(buf, size, out, why, sizeof why);
  if (st != CL_OK)
    return cl_st_fail(err, errlen, st, "'%s' is not a valid convlstm safetensors file: %s", path, why);
  return CL_OK;
}

/* ---- accessors -------------------------------------------------------- */

const cl_config *cl_saved_config(const cl_saved *s) { return &s->cfg; }

int cl_saved_optimizer(const cl_saved *s, cl_optim *opt, int64_t *steps) {
  if (!s->has_opt) return 0;
  if (opt) *opt = s->opt;
  if (steps) *steps = s->opt_steps;
  return 1;
}

int cl_saved_loss_scale(const cl_saved *s, cl_loss_scale *out) {
  if (!s->has_scale) return 0;
  if (out) *out = s->scale;
  return 1;
}

int cl_saved_n_metadata(const cl_saved *s) { return s->f.nmeta; }

cl_status cl_saved_metadata(const cl_saved *s, int i, const char **key, const char **value) {
  if (i < 0 || i >= s->f.nmeta) return CL_E_INVALID;
  *key = s->f.meta[i].key;
  *value = s->f.meta[i].value;
  return CL_OK;
}

int cl_saved_n_tensors(const cl_saved *s) { return s->f.nt; }

cl_status cl_saved_tensor_info(const cl_saved *s, int i, const char **name, const char **dtype,
                               int *ndim, int64_t dims[8]) {
  if (i < 0 || i >= s->f.nt) return CL_E_INVALID;
  const cl_st_tensor *t = s->f.by_name[i];
  *name = t->name;
  *dtype = cl_st_dtype_name(t->dtype);
  *ndim = t->ndim;
  for (int d = 0; d < CL_ST_MAX_RANK; d++) dims[d] = d < t->ndim ? (int64_t)t->shape[d] : 0;
  return CL_OK;
}


/* ---- creating a model from a file ------------------------------------- */

/* A flat optimizer-state buffer for m, allocated here, from role r's
 * tensors. */
static cl_status restore_state(cl_model *m, const cl_saved *s, int r, float **dst, float *tmp) {
  size_t pb = m->n_params * sizeof(float);
  CL_TRY(cl_model_alloc(m, CL_MEM_OPTIMIZER, pb, (void **)dst));
  const struct cl_backend_i *be = m->be->iface;
  float *flat = be->host_accessible ? *dst : malloc(pb);
  if (!flat) return cl_fail(m, CL_E_OOM, "out of host memory restoring the optimizer state");
  for (int i = 0; i < s->n_params_tensors; i++) {
    const cl_st_tensor *t = &s->f.t[s->idx[r][i]];
    size_t n = cl_tensor_numel(m, i);
    cl_st_read_f32(&s->f, t, tmp, n);
    cl_convert_tensor(m, i, flat, tmp, 0);
  }
  if (flat != *dst) {
    cl_status st = be->upload(m->be, *dst, flat, pb);
    free(flat);
    if (st != CL_OK) return cl_fail_backend(m, st, "upload of the optimizer state");
  }
  return CL_OK;
}

cl_status cl_saved_load_into(const cl_saved *s, cl_model *m, int with_optimizer) {
  m->err[0] = '\0';
  const cl_config *c = &m->cfg, *f = &s->cfg;
  int same = c->input_dim == f->input_dim && c->n_layers == f->n_layers && c->bias == f->bias &&
             c->peephole == f->peephole && c->peephole_h == f->peephole_h &&
             c->peephole_w == f->peephole_w && c->forecaster == f->forecaster &&
             cl_cfg_patch(c) == cl_cfg_patch(f) && c->head == f->head;
  if (c->head != f->head)
    return cl_fail(m, CL_E_INVALID, "the file's model %s a head, the model %s",
                   f->head ? "has" : "has no", c->head ? "has one" : "has none");
  if (c->forecaster != f->forecaster)
    return cl_fail(m, CL_E_INVALID, "the file holds %s, the model is %s",
                   f->forecaster ? "an encoder-forecaster" : "a plain ConvLSTM stack",
                   c->forecaster ? "an encoder-forecaster" : "a plain ConvLSTM stack");
  for (int l = 0; same && l < c->n_layers; l++)
    same = c->hidden_dims[l] == f->hidden_dims[l] && c->kernel_sizes[l] == f->kernel_sizes[l] &&
           cl_cfg_kernel_w(c, l) == cl_cfg_kernel_w(f, l) &&
           cl_cfg_dilation_h(c, l) == cl_cfg_dilation_h(f, l) &&
           cl_cfg_dilation_w(c, l) == cl_cfg_dilation_w(f, l) &&
           cl_cfg_rkernel_h(c, l) == cl_cfg_rkernel_h(f, l) &&
           cl_cfg_rkernel_w(c, l) == cl_cfg_rkernel_w(f, l);
  if (!same)
    return cl_fail(m, CL_E_INVALID,
                   "the file's architecture (input %d, %d layers, bias %s, peepholes %s) is not "
                   "the model's (input %d, %d layers, bias %s, peepholes %s) or its hidden dims, "
                   "kernels, dilations or peephole frame size differ",
                   f->input_dim, f->n_layers, f->bias ? "yes" : "no",
                   cl_peephole_name(f->peephole), c->input_dim, c->n_layers,
                   c->bias ? "yes" : "no", cl_peephole_name(c->peephole));
  size_t maxn = 1;
  for (int i = 0; i < s->n_params_tensors; i++)
    if (cl_tensor_numel(m, i) > maxn) maxn = cl_tensor_numel(m, i);
  float *tmp = malloc(maxn * sizeof(float));
  if (!tmp) return cl_fail(m, CL_E_OOM, "out of host memory loading parameters");
  /* The optimizer state is allocated first, so that running out of memory
   * leaves the model as it was. */
  int opt = with_optimizer && s->has_opt;
  float *state[3] = {NULL, NULL, NULL}; /* opt_m, opt_v, opt_vmax */
  size_t pb = m->n_params * sizeof(float);
  cl_status st = CL_OK;
  for (int w = 0; w < 3 && opt && st == CL_OK; w++) {
    const int r = cl_state_role(s->opt.kind, w);
    if (r >= 0 && s->idx[r][0] >= 0) st = restore_state(m, s, r, &state[w], tmp);
  }
  float *om = state[0], *ov = state[1], *ox = state[2];
  char name[96];
  for (int i = 0; i < s->n_params_tensors && st == CL_OK; i++) {
    const cl_st_tensor *t = &s->f.t[s->idx[R_PARAM][i]];
    size_t n = cl_tensor_numel(m, i);
    cl_st_read_f32(&s->f, t, tmp, n);
    tensor_name(name, sizeof name, R_PARAM, i, c);
    st = cl_model_set_param(m, name, tmp, n);
  }
  free(tmp);
  if (st != CL_OK) {
    cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, om, om ? pb : 0);
    cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, ov, ov ? pb : 0);
    cl_mem_free(&m->mem, CL_MEM_OPTIMIZER, ox, ox ? pb : 0);
    return st;
  }
  if (opt) {
    cl_model_optimizer_reset(m);
    m->opt_kind = s->opt.kind;
    m->opt_m = om;
    m->opt_v = ov;
    m->opt_vmax = ox;
    m->opt_steps = s->opt_steps;
    /* The float16 loss scaler resumes where it was: with a fresh scale the
     * first steps after loading would differ from an uninterrupted run. */
    if (s->has_scale && c->dtype == CL_F16) m->scaler = s->scale;
  }
  return CL_OK;
}

cl_status cl_saved_create_model_with(const cl_saved *s, const cl_config *runtime,
                                     int with_optimizer, cl_backend_ctor make_backend,
                                     cl_model **out, char *err, size_t errlen) {
  *out = NULL;
  cl_config cfg = s->cfg;
  if (runtime) {
    cfg.device = runtime->device;
    cfg.dtype = runtime->dtype;
    cfg.n_threads = runtime->n_threads;
    cfg.memory_limit = runtime->memory_limit;
  }
  cl_model *m = NULL;
  CL_TRY(cl_model_create_with(&cfg, make_backend, &m, err, errlen));
  cl_status st = cl_saved_load_into(s, m, with_optimizer);
  if (st != CL_OK) {
    cl_st_fail(err, errlen, st, "%s", cl_model_error(m));
    cl_model_free(m);
    return st;
  }
  *out = m;
  return CL_OK;
}

cl_status cl_model_load_with(const char *path, const cl_config *runtime, int with_optimizer,
                             cl_backend_ctor make_backend, cl_model **out, char *err,
                             size_t errlen) {
  *out = NULL;
  cl_saved *s = NULL;
  CL_TRY(cl_saved_read(path, &s, err, errlen));
  cl_status st = cl_saved_create_model_with(s, runtime, with_optimizer, make_backend, out, err,
                                            errlen);
  cl_saved_free(s);
  return st;
}
