/*
 * core/model_make.c -- a model made and unmade: its configuration checked,
 * the layers and the flat parameter buffer laid out, its backend created
 * with the constructor it is handed, its scratch and parameters allocated;
 * and all of it given back. model.c makes the models users see from it
 * (with what belongs to training: the loss scaler) and frees what they
 * gather on top (data sets, a split step's twins); split.c makes the twins
 * from it directly.
 */
#include "capability.h" /* cl_cap_check_config */
#include "internal.h"

#include <math.h> /* NAN */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int models_alive = 0;

int cl_models_alive(void) { return models_alive; }

static cl_status check_config(const cl_config *c, char *err, size_t errlen) {
  if (c->input_dim < 1) {
    snprintf(err, errlen, "input_dim must be a positive integer, not %d", c->input_dim);
    return CL_E_INVALID;
  }
  if (c->n_layers < 1 || c->n_layers > CL_MAX_LAYERS) {
    snprintf(err, errlen, "n_layers must be between 1 and %d, not %d", CL_MAX_LAYERS,
             c->n_layers);
    return CL_E_INVALID;
  }
  for (int l = 0; l < c->n_layers; l++) {
    if (c->hidden_dims[l] < 1) {
      snprintf(err, errlen, "hidden_dims[%d] must be a positive integer, not %d", l + 1,
               c->hidden_dims[l]);
      return CL_E_INVALID;
    }
    int k = c->kernel_sizes[l], kw = c->kernel_widths[l];
    if (k < 1 || k % 2 == 0 || kw < 0 || (kw > 0 && kw % 2 == 0)) {
      snprintf(err, errlen, "kernel_sizes[%d] must be positive odd integers, not %d x %d", l + 1, k,
               kw ? kw : k);
      return CL_E_INVALID;
    }
    int rk = c->recurrent_kernel_sizes[l], rkw = c->recurrent_kernel_widths[l];
    if (rk < 0 || (rk > 0 && rk % 2 == 0) || rkw < 0 || (rkw > 0 && rkw % 2 == 0) ||
        (rk == 0 && rkw != 0)) {
      snprintf(err, errlen,
               "recurrent_kernel_sizes[%d] must be positive odd integers (0: the input kernel), "
               "not %d x %d", l + 1, rk, rkw);
      return CL_E_INVALID;
    }
    if (c->dilation_h[l] < 0 || c->dilation_w[l] < 0) {
      snprintf(err, errlen, "dilation[%d] must be positive integers, not %d x %d", l + 1,
               c->dilation_h[l], c->dilation_w[l]);
      return CL_E_INVALID;
    }
    /* written so that NaN fails too */
    if (!(c->dropout[l] >= 0 && c->dropout[l] < 1) ||
        !(c->recurrent_dropout[l] >= 0 && c->recurrent_dropout[l] < 1)) {
      snprintf(err, errlen,
               "dropout[%d] and recurrent_dropout[%d] must lie in [0, 1), not %g and %g",
               l + 1, l + 1, c->dropout[l], c->recurrent_dropout[l]);
      return CL_E_INVALID;
    }
  }
  if (c->dropout_masks != CL_MASKS_SHARED && c->dropout_masks != CL_MASKS_PER_GATE) {
    snprintf(err, errlen, "dropout_masks must be shared (0) or per gate (1), not %d",
             c->dropout_masks);
    return CL_E_INVALID;
  }
  if (c->peephole < CL_PEEP_NONE || c->peephole > CL_PEEP_POSITION) {
    snprintf(err, errlen, "peephole must be none (0), channel (1) or position (2), not %d",
             c->peephole);
    return CL_E_INVALID;
  }
  int pos = c->peephole == CL_PEEP_POSITION;
  if (pos ? c->peephole_h < 1 || c->peephole_w < 1 : c->peephole_h != 0 || c->peephole_w != 0) {
    snprintf(err, errlen,
             "peephole_h and peephole_w must be the frame size (positive) with per-position "
             "peepholes and 0 otherwise, not %d x %d",
             c->peephole_h, c->peephole_w);
    return CL_E_INVALID;
  }
  if (c->n_threads < 0 || c->n_threads > CL_MAX_THREADS) {
    snprintf(err, errlen, "threads must be between 1 and %d (0: the default), not %d",
             CL_MAX_THREADS, c->n_threads);
    return CL_E_INVALID;
  }
  if (c->dtype != CL_F32 && c->dtype != CL_F16 && c->dtype != CL_BF16) {
    snprintf(err, errlen, "unknown dtype %d", (int)c->dtype);
    return CL_E_INVALID;
  }
  CL_TRY(cl_arch_check(c, err, errlen));
  return cl_cap_check_config(c, err, errlen);
}

/* The head after the layers (cl_head): its weight, then its bias (the
 * head always has one). Returns the end. */
static size_t layout_head(cl_model *m, size_t off) {
  cl_layer *H = &m->layer[m->cfg.n_layers];
  memset(H, 0, sizeof *H);
  for (int l = m->arch.head_lo; l < m->arch.head_hi; l++) H->in += m->layer[l].hidden;
  H->kh = H->kw = 1; /* 1x1: its fan-in is sum h (params.c) */
  H->n_b = (size_t)m->arch.frame_dim;
  H->n_wx = cl_mul_size(H->n_b, (size_t)H->in);
  H->off_wx = off;
  H->off_b = off + H->n_wx;
  return H->off_b + H->n_b;
}

/* Flat parameter layout, layer by layer: wx, wh, bias, peepholes. */
static cl_status layout_layers(cl_model *m) {
  size_t off = 0;
  const size_t pp = (size_t)cl_cfg_peephole_pixels(&m->cfg);
  for (int l = 0; l < m->cfg.n_layers; l++) {
    cl_layer *L = &m->layer[l];
    L->in = cl_cfg_layer_in(&m->cfg, l);
    L->hidden = m->cfg.hidden_dims[l];
    /* the defaults made explicit, so the configuration reads back whole */
    cl_config *c = &m->cfg;
    c->kernel_widths[l] = cl_cfg_kernel_w(c, l);
    c->dilation_h[l] = cl_cfg_dilation_h(c, l);
    c->dilation_w[l] = cl_cfg_dilation_w(c, l);
    c->recurrent_kernel_widths[l] = cl_cfg_rkernel_w(c, l); /* before the height: it reads it */
    c->recurrent_kernel_sizes[l] = cl_cfg_rkernel_h(c, l);
    if (L->in == 0) { /* no input half: its one kernel is the recurrent one */
      c->kernel_sizes[l] = c->recurrent_kernel_sizes[l];
      c->kernel_widths[l] = c->recurrent_kernel_widths[l];
    }
    L->kh = c->kernel_sizes[l];
    L->kw = c->kernel_widths[l];
    L->rkh = c->recurrent_kernel_sizes[l];
    L->rkw = c->recurrent_kernel_widths[l];
    L->dh = c->dilation_h[l];
    L->dw = c->dilation_w[l];
    int per_gate = c->dropout_masks == CL_MASKS_PER_GATE;
    L->groups_x = per_gate && cl_layer_drops_input(m, l) ? 4 : 1;
    L->groups_h = per_gate && cl_layer_drops_hidden(m, l) ? 4 : 1;
    size_t kk = cl_mul_size((size_t)L->kh, (size_t)L->kw), g = 4 * (size_t)L->hidden;
    size_t rkk = cl_mul_size((size_t)L->rkh, (size_t)L->rkw);
    L->n_wx = cl_mul_size(cl_mul_size(g, (size_t)L->in), kk);
    L->n_wh = cl_mul_size(cl_mul_size(g, (size_t)L->hidden), rkk);
    L->n_b = m->cfg.bias ? g : 0;
    L->n_pc = cl_mul_size(cl_mul_size(3, (size_t)L->hidden), pp);
    if ((L->in && L->n_wx == 0) || L->n_wh == 0 || L->n_wx > SIZE_MAX / 8 || L->n_wh > SIZE_MAX / 8 ||
        (pp && (L->n_pc == 0 || L->n_pc > SIZE_MAX / 8)))
      return cl_fail(m, CL_E_INVALID, "layer %d: parameter count overflows", l + 1);
    L->off_wx = off;
    L->off_wh = L->off_wx + L->n_wx;
    L->off_b = L->off_wh + L->n_wh;
    L->off_pc = L->off_b + L->n_b;
    off = L->off_pc + L->n_pc;
  }
  if (cl_arch_has_head(&m->arch)) off = layout_head(m, off);
  m->n_tensors = cl_cfg_n_tensors(&m->cfg);
  for (int i = 0; i < m->n_tensors; i++) {
    cl_tensor_spec t = cl_cfg_tensor(&m->cfg, i);
    cl_tensor_name(m->tensor_name[i], sizeof m->tensor_name[0], "", &t, &m->cfg);
  }
  m->n_params = off;
  if (cl_mul_size(off, sizeof(float)) == 0)
    return cl_fail(m, CL_E_INVALID, "parameter count overflows");
  return CL_OK;
}

/* The backend comes from the constructor the caller hands down (the
 * registry, src/backend_reg.c): the core calls no backend by name. */
static cl_status create_backend(cl_model *m, cl_backend_ctor make_backend) {
  return make_backend(&m->cfg, &m->be, m->err, sizeof m->err);
}

/* The layout of m's activations: channels last where the backend asks for
 * it (be->channels_last) and the model allows it. Dropout's masks are drawn
 * in NCHW order (mask_draw numbers the elements of a [J, G, C H W] mask),
 * so a model with dropout keeps NCHW, where the same seed gives the same
 * masks on every backend; per-position peepholes, whose weights the cell
 * reads along the pixels, keep it too. */
static cl_layout layout_of(const cl_model *m) {
  if (!m->be->channels_last || m->cfg.peephole == CL_PEEP_POSITION) return CL_NCHW;
  for (int l = 0; l < m->cfg.n_layers; l++)
    if (m->cfg.dropout[l] > 0 || m->cfg.recurrent_dropout[l] > 0) return CL_NCHW;
  return CL_NHWC;
}

/* The backend's own scratch, from the accounting allocator like every other
 * device byte (plan.c names it "backend_scratch"). */
static cl_status alloc_backend_scratch(cl_model *m) {
  const struct cl_backend_i *f = m->be->iface;
  if (!f->scratch_bytes || !f->set_scratch) return CL_OK;
  CL_TRY(cl_mem_alloc(&m->mem, CL_MEM_WORKSPACE, f->scratch_bytes, &m->be_scratch, m->err,
                      sizeof m->err));
  f->set_scratch(m->be, m->be_scratch);
  return CL_OK;
}

/* A device with memory of its own (not the host's): total - free as the
 * driver says, which counts every process's allocations. */
int cl_model_device_used(cl_model *m, size_t *used) {
  size_t fr = 0, tot = 0;
  *used = 0;
  if (m->be->iface->host_accessible || !m->be->iface->mem_info) return 0;
  if (m->be->iface->mem_info(m->be, &fr, &tot) != CL_OK || tot < fr) return 0;
  *used = tot - fr;
  return 1;
}

cl_status cl_model_make(const cl_config *cfg, cl_backend_ctor make_backend, cl_model **out,
                        char *err, size_t errlen) {
  *out = NULL;
  char scratch[CL_ERRMSG_LEN];
  if (!err) {
    err = scratch;
    errlen = sizeof scratch;
  }
  cl_status s = check_config(cfg, err, errlen);
  if (s != CL_OK) return s;
  cl_model *m = calloc(1, sizeof *m);
  if (!m) {
    snprintf(err, errlen, "out of host memory creating a model");
    return CL_E_OOM;
  }
  m->cfg = *cfg;
  m->cfg.bias = cfg->bias ? 1 : 0;
  m->arch = cl_arch_of(&m->cfg);
  m->grad_norm = NAN; /* no step has measured it */
  models_alive++;
  s = layout_layers(m);
  if (s == CL_OK) s = create_backend(m, make_backend);
  if (s == CL_OK) {
    m->mem.be = m->be;
    m->mem.limit = cfg->memory_limit;
    m->layout = layout_of(m);
    m->have_device_used = cl_model_device_used(m, &m->device_used_at_create);
    const char *guard = getenv("CONVLSTM_GUARD");
    m->guard = guard && strcmp(guard, "1") == 0;
    const char *poison = getenv("CONVLSTM_POISON");
    m->poison = poison && strcmp(poison, "1") == 0;
    const char *split = getenv("CONVLSTM_SPLIT");
    m->split_mode = !split                       ? CL_SPLIT_CALL
                    : strcmp(split, "batch") == 0 ? CL_SPLIT_BATCH
                    : strcmp(split, "auto") == 0  ? CL_SPLIT_AUTO
                                                  : CL_SPLIT_CALL;
    const char *join = getenv("CONVLSTM_JOIN");
    m->join_off = join && strcmp(join, "0") == 0;
    m->make_backend = make_backend;
    s = alloc_backend_scratch(m);
  }
  if (s == CL_OK) {
    s = cl_mem_alloc(&m->mem, CL_MEM_PARAMETERS, m->n_params * sizeof(float),
                     (void **)&m->params, m->err, sizeof m->err);
  }
  if (s == CL_OK) s = m->be->iface->memset0(m->be, m->params, m->n_params * sizeof(float));
  if (s != CL_OK) {
    snprintf(err, errlen, "%s", m->err[0] ? m->err : (m->be ? m->be->err : "model creation failed"));
    cl_model_unmake(m);
    return s;
  }
  *out = m;
  return CL_OK;
}

void cl_model_unmake(cl_model *m) {
  if (!m) return;
  if (m->be) {
    cl_step_release(m);
    cl_optim_free(m);
    cl_state_free(m);
    cl_mem_free(&m->mem, CL_MEM_GRADIENTS, m->grads, m->n_params * sizeof(float));
    cl_mem_free(&m->mem, CL_MEM_PARAMETERS, m->params, m->n_params * sizeof(float));
    if (m->be->iface->synchronize) (void)m->be->iface->synchronize(m->be);
    cl_mem_free(&m->mem, CL_MEM_WORKSPACE, m->be_scratch, m->be->iface->scratch_bytes);
    cl_backend_destroy(m->be);
  }
  models_alive--;
  free(m);
}
