/*
 * core/model_file_write.c -- writing a model file: cl_model_save and
 * cl_save_target_check of convlstm.h. It writes what model_file_read.c reads
 * (the tensors by state-dict name and role, "convlstm.*" metadata for the
 * architecture, the optimizer and the loss scale), into a temporary file
 * renamed over the target only when complete, so a failed save never
 * loses the file that was there.
 */
#include "internal.h"
#include "model_file.h"  /* tensor roles, the metadata prefix */
#include "safetensors.h" /* the container's writer */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- writing ---------------------------------------------------------- */

/* Which buffers go into the file: the parameters and, with an optimizer,
 * the states the model holds for it. */
typedef struct save_plan {
  int roles[N_ROLES]; /* role present */
  float *src[N_ROLES];
} save_plan;

static cl_status check_user_meta(cl_model *m, int n, const char *const *keys,
                                 const char *const *values) {
  for (int i = 0; i < n; i++) {
    const char *k = keys[i], *v = values[i];
    if (!k || !v || !k[0])
      return cl_fail(m, CL_E_INVALID, "metadata entry %d has an empty or missing name or value", i + 1);
    if (strncmp(k, META_PREFIX, strlen(META_PREFIX)) == 0 || strcmp(k, "format") == 0)
      return cl_fail(m, CL_E_INVALID,
                     "metadata name \"%.60s\" is reserved (convlstm writes \"format\" and "
                     "\"convlstm.*\" itself)", k);
    if (cl_utf8_check((const unsigned char *)k, strlen(k)) != strlen(k) ||
        cl_utf8_check((const unsigned char *)v, strlen(v)) != strlen(v))
      return cl_fail(m, CL_E_INVALID, "metadata entry \"%.60s\" is not valid UTF-8", k);
    for (int j = 0; j < i; j++)
      if (strcmp(keys[j], k) == 0)
        return cl_fail(m, CL_E_INVALID, "metadata name \"%.60s\" appears twice", k);
  }
  return CL_OK;
}

static int square_undilated(const cl_config *c) {
  for (int l = 0; l < c->n_layers; l++)
    if (cl_cfg_kernel_w(c, l) != c->kernel_sizes[l] || cl_cfg_dilation_h(c, l) != 1 ||
        cl_cfg_dilation_w(c, l) != 1)
      return 0;
  return 1;
}

/* The layers' kernels, dilations and two kernels (each list only where a
 * model needs it: files of square, undilated models with one kernel per
 * layer stay as they were). */
static void meta_kernels(cl_st_buf *h, int *first, const cl_config *c) {
  cl_st_header_meta_list(h, first, META_PREFIX "kernel_sizes", c->kernel_sizes, c->n_layers);
  if (!square_undilated(c)) {
    cl_st_header_meta_list(h, first, META_PREFIX "kernel_widths", c->kernel_widths, c->n_layers);
    cl_st_header_meta_list(h, first, META_PREFIX "dilation_h", c->dilation_h, c->n_layers);
    cl_st_header_meta_list(h, first, META_PREFIX "dilation_w", c->dilation_w, c->n_layers);
  }
  int split = 0;
  for (int l = 0; l < c->n_layers; l++) split |= cl_cfg_split(c, l);
  if (split) {
    cl_st_header_meta_list(h, first, META_PREFIX "recurrent_kernel_sizes",
                           c->recurrent_kernel_sizes, c->n_layers);
    cl_st_header_meta_list(h, first, META_PREFIX "recurrent_kernel_widths",
                           c->recurrent_kernel_widths, c->n_layers);
  }
}

/* Dropout's rates and masks (files of models without dropout stay as they
 * were). */
static void meta_dropout(cl_st_buf *h, int *first, const cl_config *c) {
  int drops = 0;
  for (int l = 0; l < c->n_layers; l++) drops |= c->dropout[l] > 0 || c->recurrent_dropout[l] > 0;
  if (!drops) return;
  cl_st_header_meta_nums(h, first, META_PREFIX "dropout", c->dropout, c->n_layers);
  cl_st_header_meta_nums(h, first, META_PREFIX "recurrent_dropout", c->recurrent_dropout,
                         c->n_layers);
  cl_st_header_meta(h, first, META_PREFIX "dropout_masks", cl_dropout_masks_name(c->dropout_masks));
}

/* An encoder-forecaster whose forecaster stack repeats its encoder's layers
 * field for field (convlstm_forecaster() makes no other) is listed as the
 * user gave it: one stack's layers. */
static int one_stack_listed(const cl_config *c) {
  if (!c->forecaster) return 0;
  const int L = c->n_layers / 2;
  for (int l = 0, f = L; l < L; l++, f++)
    if (c->hidden_dims[f] != c->hidden_dims[l] || c->kernel_sizes[f] != c->kernel_sizes[l] ||
        c->kernel_widths[f] != c->kernel_widths[l] || c->dilation_h[f] != c->dilation_h[l] ||
        c->dilation_w[f] != c->dilation_w[l] ||
        c->recurrent_kernel_sizes[f] != c->recurrent_kernel_sizes[l] ||
        c->recurrent_kernel_widths[f] != c->recurrent_kernel_widths[l] ||
        c->dropout[f] != c->dropout[l] || c->recurrent_dropout[f] != c->recurrent_dropout[l])
      return 0;
  return 1;
}

/* The architecture: what model_file_read.c's read_architecture reads back.
 * Keys added since the first files are written only where they say
 * something, so that older files and newer ones of the same model agree.
 * Format version 2 is an encoder-forecaster's listed once per stack
 * (one_stack_listed; the reader repeats it); version 1 lists every layer,
 * as every file of a plain stack and every older file does. */
static void meta_architecture(cl_st_buf *h, int *first, const cl_config *c) {
  cl_config listed = *c;
  const int per_stack = one_stack_listed(c);
  if (per_stack) listed.n_layers = c->n_layers / 2;
  cl_st_header_meta(h, first, "format", "pt");
  cl_st_header_meta(h, first, META_PREFIX "format_version", per_stack ? "2" : "1");
  cl_st_header_meta_int(h, first, META_PREFIX "input_dim", c->input_dim);
  cl_st_header_meta_list(h, first, META_PREFIX "hidden_dims", c->hidden_dims, listed.n_layers);
  meta_kernels(h, first, &listed);
  meta_dropout(h, first, &listed);
  cl_st_header_meta(h, first, META_PREFIX "bias", c->bias ? "true" : "false");
  if (c->forecaster) { /* files of plain stacks stay as they were */
    cl_st_header_meta(h, first, META_PREFIX "model", "encoder_forecaster");
    cl_st_header_meta_int(h, first, META_PREFIX "patch", cl_cfg_patch(c));
  }
  if (c->head) cl_st_header_meta(h, first, META_PREFIX "head", "top"); /* else as they were */
  if (c->peephole) { /* files of models without stay as they were */
    cl_st_header_meta(h, first, META_PREFIX "peephole", cl_peephole_name(c->peephole));
    int hw[2] = {c->peephole_h, c->peephole_w};
    if (c->peephole == CL_PEEP_POSITION)
      cl_st_header_meta_list(h, first, META_PREFIX "peephole_size", hw, 2);
  }
  cl_st_header_meta(h, first, META_PREFIX "dtype", cl_dtype_name(c->dtype));
  cl_st_header_meta(h, first, META_PREFIX "device", cl_device_name(c->device));
}

/* The float16 loss scaler, so that a resumed run scales as the saved one
 * would have. */
static void meta_loss_scale(cl_st_buf *h, int *first, const cl_loss_scale *sc) {
  cl_st_header_meta_num(h, first, META_PREFIX "loss_scale.scale", sc->scale);
  cl_st_header_meta_int(h, first, META_PREFIX "loss_scale.growth_interval", sc->growth_interval);
  cl_st_header_meta_int(h, first, META_PREFIX "loss_scale.clean_steps", sc->clean_steps);
  cl_st_header_meta_int(h, first, META_PREFIX "loss_scale.skipped_steps",
                        (long long)sc->skipped_steps);
  cl_st_header_meta_int(h, first, META_PREFIX "loss_scale.skipped_in_a_row",
                        (long long)sc->skipped_in_a_row);
  cl_st_header_meta_num(h, first, META_PREFIX "loss_scale.init_scale", sc->init_scale);
  cl_st_header_meta_num(h, first, META_PREFIX "loss_scale.growth_factor", sc->growth_factor);
  cl_st_header_meta_num(h, first, META_PREFIX "loss_scale.backoff_factor", sc->backoff_factor);
}

/* The optimizer's kind, the hyperparameters its kind has, its step count
 * (0 when the model's state is another kind's) and, for float16, the loss
 * scaler. */
static void meta_optimizer(cl_st_buf *h, int *first, const cl_model *m, const cl_optim *opt) {
  cl_st_header_meta(h, first, META_PREFIX "optimizer", cl_optim_kind_name(opt->kind));
  cl_st_header_meta_num(h, first, META_PREFIX "optimizer.lr", opt->lr);
  cl_st_header_meta_num(h, first, META_PREFIX "optimizer.weight_decay", opt->weight_decay);
  if (cl_optim_is_adam(opt->kind)) {
    cl_st_header_meta_num(h, first, META_PREFIX "optimizer.beta1", opt->beta1);
    cl_st_header_meta_num(h, first, META_PREFIX "optimizer.beta2", opt->beta2);
    cl_st_header_meta_num(h, first, META_PREFIX "optimizer.eps", opt->eps);
    if (opt->amsgrad) cl_st_header_meta(h, first, META_PREFIX "optimizer.amsgrad", "true");
  } else if (opt->kind == CL_OPTIM_RMSPROP) {
    cl_st_header_meta_num(h, first, META_PREFIX "optimizer.alpha", opt->alpha);
    cl_st_header_meta_num(h, first, META_PREFIX "optimizer.eps", opt->eps);
    cl_st_header_meta_num(h, first, META_PREFIX "optimizer.momentum", opt->momentum);
    if (opt->centered) cl_st_header_meta(h, first, META_PREFIX "optimizer.centered", "true");
  } else {
    cl_st_header_meta_num(h, first, META_PREFIX "optimizer.momentum", opt->momentum);
  }
  cl_st_header_meta_int(h, first, META_PREFIX "optimizer.steps",
                        m->opt_kind == opt->kind ? (long long)m->opt_steps : 0);
  if (m->cfg.dtype == CL_F16) meta_loss_scale(h, first, &m->scaler);
}

/* Each saved tensor's entry, role by role (the parameters first), laid end
 * to end in the order write_file writes them. */
static cl_status header_tensors(cl_model *m, const save_plan *sp, cl_st_buf *h) {
  uint64_t off = 0;
  char name[96];
  for (int r = 0; r < N_ROLES; r++) {
    if (!sp->roles[r]) continue;
    for (int i = 0; i < m->n_tensors; i++) {
      const char *pname;
      int nd, dims[4];
      CL_TRY(cl_model_tensor_info(m, i, &pname, &nd, dims));
      snprintf(name, sizeof name, "%s%s", cl_role_prefix[r], pname);
      uint64_t bytes = 4 * (uint64_t)cl_tensor_numel(m, i);
      cl_st_header_tensor_f32(h, name, nd, dims, off, off + bytes);
      off += bytes;
    }
  }
  return CL_OK;
}

static cl_status build_header(cl_model *m, const cl_optim *opt, const save_plan *sp, int n_meta,
                              const char *const *keys, const char *const *values, cl_st_buf *h) {
  int first = 1;
  cl_st_header_begin(h);
  meta_architecture(h, &first, &m->cfg);
  if (opt) meta_optimizer(h, &first, m, opt);
  for (int i = 0; i < n_meta; i++) cl_st_header_meta(h, &first, keys[i], values[i]);
  cl_st_header_end_meta(h);
  CL_TRY(header_tensors(m, sp, h));
  cl_st_header_end(h);
  if (h->oom) return cl_fail(m, CL_E_OOM, "out of host memory writing the header");
  return CL_OK;
}

static cl_status write_file(cl_model *m, const char *path, const cl_st_buf *h,
                            const save_plan *sp) {
  cl_st_writer w;
  CL_TRY(cl_st_write_open(&w, path, m->err, sizeof m->err));
  size_t maxn = 1;
  for (int i = 0; i < m->n_tensors; i++)
    if (cl_tensor_numel(m, i) > maxn) maxn = cl_tensor_numel(m, i);
  float *t = malloc(maxn * sizeof(float));
  cl_status st = CL_OK;
  if (!t) st = cl_fail(m, CL_E_OOM, "out of host memory writing '%s'", path);
  int ok = st == CL_OK && cl_st_write_header(&w, h);
  for (int r = 0; r < N_ROLES && ok && st == CL_OK; r++) {
    if (!sp->roles[r]) continue;
    for (int i = 0; i < m->n_tensors && ok && st == CL_OK; i++) {
      size_t n = cl_tensor_numel(m, i);
      if (r == R_PARAM) {
        const char *pname;
        int nd, dims[4];
        st = cl_model_tensor_info(m, i, &pname, &nd, dims);
        if (st == CL_OK) st = cl_model_get_param(m, pname, t, n);
      } else {
        cl_convert_tensor(m, i, sp->src[r], t, 1);
      }
      if (st == CL_OK) ok = cl_st_write_f32(&w, t, n);
    }
  }
  free(t);
  return cl_st_write_close(&w, path, st, m->err, sizeof m->err);
}

cl_status cl_save_target_check(const char *path, char *err, size_t errlen) {
  char target[CL_ST_MAX_TARGET + 1];
  if (!path || !path[0]) return cl_st_fail(err, errlen, CL_E_INVALID, "the path is empty");
  return cl_st_save_target(path, target, sizeof target, err, errlen);
}

cl_status cl_model_save(cl_model *m, const char *path, const cl_optim *opt, int n_meta,
                        const char *const *meta_keys, const char *const *meta_values) {
  m->err[0] = '\0';
  if (!path || !path[0]) return cl_fail(m, CL_E_INVALID, "the path is empty");
  if (n_meta < 0 || (n_meta > 0 && (!meta_keys || !meta_values)))
    return cl_fail(m, CL_E_INVALID, "metadata names and values are missing");
  CL_TRY(check_user_meta(m, n_meta, meta_keys, meta_values));
  save_plan sp;
  memset(&sp, 0, sizeof sp);
  sp.roles[R_PARAM] = 1;
  if (opt) {
    CL_TRY(cl_check_optim(m, opt));
    if (m->opt_kind != 0 && m->opt_kind != opt->kind)
      return cl_fail(m, CL_E_INVALID,
                     "the model's optimizer state is %s's, but the optimizer to save is %s: "
                     "save with the optimizer the model was trained with",
                     cl_optim_kind_title(m->opt_kind), cl_optim_kind_title(opt->kind));
    if (m->opt_kind == opt->kind && opt->kind == CL_OPTIM_RMSPROP) {
      sp.roles[R_MOMENTUM] = m->opt_m != NULL;
      sp.src[R_MOMENTUM] = m->opt_m;
      sp.roles[R_SQUARE_AVG] = m->opt_v != NULL;
      sp.src[R_SQUARE_AVG] = m->opt_v;
      /* as amsgrad's maximum: saved only with centered (the loader wants it then) */
      sp.roles[R_GRAD_AVG] = opt->centered && m->opt_vmax && m->opt_v;
      sp.src[R_GRAD_AVG] = m->opt_vmax;
    } else if (m->opt_kind == opt->kind) {
      int adam = cl_optim_is_adam(opt->kind), mr = adam ? R_EXP_AVG : R_MOMENTUM;
      sp.roles[mr] = m->opt_m != NULL;
      sp.src[mr] = m->opt_m;
      sp.roles[R_EXP_AVG_SQ] = adam && m->opt_v != NULL;
      sp.src[R_EXP_AVG_SQ] = m->opt_v;
      /* a state without the maximum (amsgrad turned on after it) saves none:
       * the loader then wants none, and the next step starts it at zeros */
      sp.roles[R_MAX_EXP_AVG_SQ] = adam && opt->amsgrad && m->opt_vmax && m->opt_v;
      sp.src[R_MAX_EXP_AVG_SQ] = m->opt_vmax;
    }
  }
  /* Optimizer state on a device that is not host memory: one download. */
  const struct cl_backend_i *be = m->be->iface;
  float *host[N_ROLES] = {NULL};
  size_t pb = m->n_params * sizeof(float);
  cl_status st = CL_OK;
  for (int r = 1; r < N_ROLES && st == CL_OK; r++) {
    if (!sp.roles[r] || be->host_accessible) continue;
    host[r] = malloc(pb);
    if (!host[r]) st = cl_fail(m, CL_E_OOM, "out of host memory copying the optimizer state");
    else if ((st = be->download(m->be, host[r], sp.src[r], pb)) != CL_OK)
      st = cl_fail_backend(m, st, "download of the optimizer state");
    sp.src[r] = host[r];
  }
  cl_st_buf h = {0};
  if (st == CL_OK) st = build_header(m, opt, &sp, n_meta, meta_keys, meta_values, &h);
  if (st == CL_OK) st = write_file(m, path, &h, &sp);
  free(h.p);
  for (int r = 0; r < N_ROLES; r++) free(host[r]);
  return st;
}
