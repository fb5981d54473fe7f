/*
 * tests/c/test_plan_bytes.c -- the memory plan against bytes derived here
 * from the shapes and the model's math, written apart from src/core/plan.c:
 * for a set of configurations (layers, kernels, dtype, optimizer,
 * checkpointing, truncation, accumulation, recomputed gates, inference),
 * each category's bytes are computed below from what a ConvLSTM step must
 * hold, and compared with the plan (cl_model_plan) and with the allocator's
 * peak after a real step (cl_model_memory_stats). A planner a few bytes
 * short or long in any buffer fails here, where comparing the plan with the
 * allocator's counters (test_core_options.c) cannot: step.c charges each
 * buffer its planned size.
 *
 * What the formulas cover: parameters, gradients, optimizer state, the
 * batch's input, the per-step saved gates, cell and hidden states,
 * checkpointed states, the state carried between truncation windows,
 * inference's running states and outputs, and the backward's gradient
 * buffers (dL/dh over a segment, dL/dc of one step). Not covered: the
 * convolution workspace (conv_workspace: the CPU backend sizes it from its
 * GEMM choice, thread count and lowering, cpu_conv.c) and the backend's own
 * scratch (backend_scratch); the workspace category is compared without
 * those two entries.
 *
 * The encoder-forecaster (cl_config.forecaster) row by row: every row of its
 * plan, by name, against bytes computed from the shapes (training in float32
 * with each optimizer, prediction in float32, float16 and bfloat16, patches
 * of 1, 2 and 4, horizons shorter and longer than the input, batches of 1 to
 * 5, state kernels and peepholes), none skipped, and each category against
 * the allocator's peak after a real step: an input row counted over T + K
 * steps instead of T fails here by exactly K frames.
 */
#include "convlstm.h"
#include "ctest.h" /* CHECK, uniform01 */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXL 3

typedef struct pcase {
  const char *name;
  int n_layers, in, hidden[MAXL], k[MAXL];
  cl_dtype dtype;
  int B, T, H, W;
  int training;     /* 0: inference forward */
  cl_optim optim;   /* training */
  int checkpoint, tbptt, accumulation, recompute;
  cl_outputs outputs; /* inference */
  int rk[MAXL];       /* state-to-state kernels; 0: k */
} pcase;

static size_t esize(cl_dtype t) { return t == CL_F32 ? 4 : 2; }
static size_t cdiv(size_t a, size_t b) { return (a + b - 1) / b; }

/* Every weight of a layer: one convolution over cat(x_t, h_{t-1}) to the
 * four gates, [4 h, in + h, k, k], and its bias [4 h]; with a state kernel
 * rk of its own, [4 h, in, k, k] and [4 h, h, rk, rk]. */
static size_t n_params(const pcase *c) {
  size_t n = 0, in = (size_t)c->in;
  for (int l = 0; l < c->n_layers; l++) {
    size_t h = (size_t)c->hidden[l], k = (size_t)c->k[l];
    size_t rk = c->rk[l] ? (size_t)c->rk[l] : k;
    n += 4 * h * in * k * k + 4 * h * h * rk * rk + 4 * h;
    in = h;
  }
  return n;
}

/* Bytes per category a step of case c must hold (want), the workspace
 * without the convolution's workspace and the backend's scratch. */
static void expected(const pcase *c, size_t want[CL_MEM_NCAT]) {
  memset(want, 0, CL_MEM_NCAT * sizeof want[0]);
  const size_t e = esize(c->dtype), f = sizeof(float), P = (size_t)c->H * c->W;
  const size_t T = (size_t)c->T, B = (size_t)c->B;
  size_t hmax = 0;
  for (int l = 0; l < c->n_layers; l++)
    if ((size_t)c->hidden[l] > hmax) hmax = (size_t)c->hidden[l];
  /* float32 master weights, whatever the storage dtype */
  want[CL_MEM_PARAMETERS] = f * n_params(c);
  if (!c->training) {
    /* the input batch [B, C, H, W] of the step being run, in storage dtype */
    want[CL_MEM_DATA] = e * B * (size_t)c->in * P;
    /* one step's gate pre-activations [B, 4 h, H, W], any layer's */
    want[CL_MEM_WORKSPACE] = e * B * 4 * hmax * P;
    for (int l = 0; l < c->n_layers; l++) {
      size_t h = (size_t)c->hidden[l];
      want[CL_MEM_STATES] += 2 * e * B * h * P; /* c_{t-1} and c_t */
      if (c->outputs == CL_OUTPUTS_ALL)
        want[CL_MEM_ACTIVATIONS] += e * T * B * h * P; /* every h_t: the output */
      else
        want[CL_MEM_STATES] += 2 * e * B * h * P; /* h_{t-1} and h_t */
    }
    return;
  }
  want[CL_MEM_GRADIENTS] = want[CL_MEM_PARAMETERS];
  const cl_optim *o = &c->optim;
  int adam = o->kind == CL_OPTIM_ADAM || o->kind == CL_OPTIM_ADAMW;
  size_t moments = adam ? 2 + (o->amsgrad != 0) : o->momentum != 0;
  /* RMSprop: square_avg, then momentum_buffer and grad_avg as asked */
  if (o->kind == CL_OPTIM_RMSPROP) moments = 1 + (o->momentum != 0) + (o->centered != 0);
  want[CL_MEM_OPTIMIZER] = moments * want[CL_MEM_PARAMETERS];
  /* a micro-batch of ceil(B / m) sequences at a time */
  size_t Bm = c->accumulation > 1 ? cdiv(B, (size_t)c->accumulation) : B;
  /* steps held at once: a checkpoint segment, a truncation window, or all */
  size_t S = T, nseg = 1;
  int ck = c->checkpoint > 0 && (size_t)c->checkpoint < T;
  int tb = c->tbptt > 0 && (size_t)c->tbptt < T;
  if (ck) S = (size_t)c->checkpoint, nseg = cdiv(T, S);
  if (tb) S = (size_t)c->tbptt;
  size_t rc = c->recompute ? ((size_t)c->recompute < S ? (size_t)c->recompute : S) : 0;
  /* the input of the steps held: all T, or a truncation window's */
  want[CL_MEM_DATA] = e * (tb ? S : T) * Bm * (size_t)c->in * P;
  for (int l = 0; l < c->n_layers; l++) {
    size_t h = (size_t)c->hidden[l];
    /* saved for backward, per step: the 4 gates (unless recomputed), c_t, h_t */
    if (!rc) want[CL_MEM_ACTIVATIONS] += e * S * Bm * 4 * h * P;
    want[CL_MEM_ACTIVATIONS] += 2 * e * S * Bm * h * P;
    if (nseg > 1) {
      /* h and c at each segment boundary but the last */
      want[CL_MEM_ACTIVATIONS] += 2 * e * (nseg - 1) * Bm * h * P;
      /* across a boundary: the gates' gradient of the step after it, and
       * dL/dc of one step, per layer */
      want[CL_MEM_WORKSPACE] += e * Bm * 4 * h * P + f * Bm * h * P;
    }
    /* truncation: h and c handed (detached) from one window to the next */
    if (tb) want[CL_MEM_STATES] += 2 * e * Bm * h * P;
  }
  /* recomputed gates: one chunk of rc steps, any layer's */
  if (rc) want[CL_MEM_ACTIVATIONS] += e * rc * Bm * 4 * hmax * P;
  /* dL/dh_t of a layer over the steps held, float32, any layer's (the
   * cases with recompute_gates have equal hidden sizes); one layer trained
   * on its last state (every case trains so) gets the loss's gradient at
   * the last step only and none from a layer above: one step, each step's
   * flowing back into the one before */
  size_t dh_steps = c->n_layers == 1 ? 1 : S;
  want[CL_MEM_WORKSPACE] += f * dh_steps * hmax * Bm * P;
  /* dL/dc of one step, float32, any layer's (checkpointing: per layer, above) */
  if (nseg == 1) want[CL_MEM_WORKSPACE] += f * Bm * hmax * P;
}

/* The planned bytes of the entries named conv_workspace and backend_scratch. */
static size_t excluded(const cl_plan *p) {
  size_t n = 0;
  for (int i = 0; i < p->n; i++)
    if (!strcmp(p->entries[i].name, "conv_workspace") ||
        !strcmp(p->entries[i].name, "backend_scratch"))
      n += p->entries[i].bytes;
  return n;
}

/* Each category of a plan, and of the allocator's peaks after the step, equals
 * want (bytes from the shapes); the convolution workspace (skip bytes, the
 * backend's choice) is left out of both. */
static void expect_categories(const char *name, const cl_plan *plan, const cl_mem_stats *st,
                              const size_t want[CL_MEM_NCAT], size_t skip) {
  for (int k = 0; k < CL_MEM_NCAT; k++) {
    size_t planned = plan->by_category[k], held = st->peak[k];
    if (k == CL_MEM_WORKSPACE) planned -= skip, held -= skip;
    const char *cat = cl_mem_category_name((cl_mem_category)k);
    CHECK(planned == want[k], "%s: %s planned %zu bytes, from the shapes %zu (%+lld)", name, cat,
          planned, want[k], (long long)planned - (long long)want[k]);
    CHECK(held == want[k], "%s: %s held %zu bytes at the step's peak, from the shapes %zu", name,
          cat, held, want[k]);
  }
}

static void run_case(const pcase *c) {
  cl_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.input_dim = c->in;
  cfg.n_layers = c->n_layers;
  for (int l = 0; l < c->n_layers; l++) {
    cfg.hidden_dims[l] = c->hidden[l];
    cfg.kernel_sizes[l] = c->k[l];
    cfg.recurrent_kernel_sizes[l] = c->rk[l];
  }
  cfg.bias = 1;
  cfg.device = CL_DEVICE_CPU;
  cfg.dtype = c->dtype;
  cfg.n_threads = 1;
  cl_model *m = ctest_model(&cfg);
  if (!m) return;
  CHECK(cl_model_n_params(m) == n_params(c), "%s: %zu parameters, want %zu", c->name,
        (size_t)cl_model_n_params(m), n_params(c));
  cl_step_options o = {.checkpoint = c->checkpoint, .tbptt = c->tbptt,
                       .accumulation_steps = c->accumulation, .recompute_gates = c->recompute,
                       .outputs = c->outputs};
  const cl_optim *opt = c->training ? &c->optim : NULL;
  cl_plan plan, any;
  /* a plan for either target (a separate forward and backward) holds every
   * step of d_hidden: S - 1 more of one layer's than train_step's */
  if (c->training && c->n_layers == 1 && cl_model_plan(m, c->B, c->T, c->H, c->W, 1, opt, &o,
                                                       &any) == CL_OK) {
    size_t S = (size_t)c->T, Bm = (size_t)c->B;
    if (c->checkpoint > 0 && c->checkpoint < c->T) S = (size_t)c->checkpoint;
    if (c->tbptt > 0 && c->tbptt < c->T) S = (size_t)c->tbptt;
    if (c->accumulation > 1) Bm = cdiv(Bm, (size_t)c->accumulation);
    size_t more = sizeof(float) * (S - 1) * Bm * (size_t)c->hidden[0] * c->H * c->W;
    o.plan_target = 1 + CL_TARGET_LAST_STATE;
    if (cl_model_plan(m, c->B, c->T, c->H, c->W, 1, opt, &o, &plan) == CL_OK) {
      CHECK(any.total == plan.total + more,
            "%s: a plan for either target holds %zu bytes, train_step's %zu, want %zu more",
            c->name, any.total, plan.total, more);
      cl_plan_free(&plan);
    }
    cl_plan_free(&any);
  }
  o.plan_target = 1 + CL_TARGET_LAST_STATE; /* train_step's below */
  if (cl_model_plan(m, c->B, c->T, c->H, c->W, c->training, opt, &o, &plan) != CL_OK) {
    CHECK(0, "%s: plan: %s", c->name, cl_model_error(m));
    cl_model_free(m);
    return;
  }
  /* a real step, so the allocator's peak is what the step held */
  int top = c->hidden[c->n_layers - 1];
  size_t nx = (size_t)c->B * c->T * c->in * c->H * c->W, ny = (size_t)c->B * top * c->H * c->W;
  float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
  for (size_t i = 0; i < nx; i++) x[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < ny; i++) y[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {c->B, c->T, c->in, c->H, c->W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {c->B, top, c->H, c->W, 0}};
  double loss;
  cl_status s = c->training
                    ? cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, opt, &o, &loss)
                    : cl_model_forward(m, &xa, 0, &o);
  CHECK(s == CL_OK, "%s: step: %s", c->name, cl_model_error(m));
  cl_mem_stats st;
  cl_model_memory_stats(m, &st);
  size_t want[CL_MEM_NCAT], skip = excluded(&plan);
  expected(c, want);
  expect_categories(c->name, &plan, &st, want, skip);
  printf("%-44s params %zu, activations %zu, workspace %zu (+ %zu convolution), data %zu\n",
         c->name, want[CL_MEM_PARAMETERS], want[CL_MEM_ACTIVATIONS], want[CL_MEM_WORKSPACE], skip,
         want[CL_MEM_DATA]);
  free(x);
  free(y);
  cl_plan_free(&plan);
  cl_model_free(m);
}

/* ---- the encoder-forecaster (cl_config.forecaster) ------------------------
 * Row by row: every row of the plan, by name, against bytes computed here
 * from the shapes, and each category's sum against the allocator's peak
 * after a real step (a train_step, or a prediction with the horizon). The
 * model works on patched frames: C = input_dim p^2 channels of
 * (H / p) x (W / p) pixels. */

typedef struct fcase {
  const char *name;
  int L, in, hidden[MAXL], k[MAXL], rk[MAXL]; /* per stack; rk 0: k */
  int patch, peephole;
  cl_dtype dtype;
  int B, T, K, H, W; /* T input frames, K predicted */
  int training;      /* 0: a prediction */
  cl_optim optim;
} fcase;

typedef struct frow {
  char name[48];
  cl_mem_category cat;
  size_t bytes;
} frow;

/* Parameters: encoder layer l over its input (C frames' channels, then the
 * layer below's h), forecaster layer 0 over h only (no input), forecaster
 * layer l > 0 over the forecaster layer below's h; each [4 h, in, k, k] +
 * [4 h, h, rk, rk] + bias [4 h], peepholes per channel 3 h; the head a 1x1
 * convolution from every forecaster h to the C frame channels, with bias. */
static size_t fc_params(const fcase *c) {
  size_t C = (size_t)c->in * c->patch * c->patch, n = 0, sum_h = 0;
  for (int s = 0; s < 2; s++)
    for (int l = 0; l < c->L; l++) {
      size_t h = (size_t)c->hidden[l], k = (size_t)c->k[l];
      size_t rk = c->rk[l] ? (size_t)c->rk[l] : k;
      size_t in = l ? (size_t)c->hidden[l - 1] : s ? 0 : C;
      n += 4 * h * in * k * k + 4 * h * h * rk * rk + 4 * h;
      if (c->peephole) n += 3 * h;
      if (s) sum_h += h;
    }
  return n + C * sum_h + C;
}

static int fc_rows(const fcase *c, frow *r) {
  int n = 0;
  const size_t e = esize(c->dtype), f = sizeof(float);
  const size_t C = (size_t)c->in * c->patch * c->patch;
  const size_t P = (size_t)(c->H / c->patch) * (size_t)(c->W / c->patch);
  const size_t B = (size_t)c->B, T = (size_t)c->T, K = (size_t)c->K, pb = f * fc_params(c);
  size_t hmax = 0;
  for (int l = 0; l < c->L; l++)
    if ((size_t)c->hidden[l] > hmax) hmax = (size_t)c->hidden[l];
#define ROWF(cat_, bytes_, ...)                                  \
  do {                                                           \
    snprintf(r[n].name, sizeof r[n].name, __VA_ARGS__);          \
    r[n].cat = cat_;                                             \
    r[n].bytes = bytes_;                                         \
    n++;                                                         \
  } while (0)
  ROWF(CL_MEM_PARAMETERS, pb, "parameters");
  if (!c->training) {
    /* one step's input frame, one step's gates (any layer's), the K frames
     * predicted; each layer's c and h of two steps (before, after) */
    ROWF(CL_MEM_DATA, e * B * C * P, "x");
    ROWF(CL_MEM_WORKSPACE, e * B * 4 * hmax * P, "gates");
    ROWF(CL_MEM_ACTIVATIONS, e * K * B * C * P, "frames");
    for (int l = 0; l < 2 * c->L; l++) {
      size_t h = (size_t)c->hidden[l % c->L];
      ROWF(CL_MEM_STATES, 2 * e * B * h * P, "cell[%d]", l);
      ROWF(CL_MEM_STATES, 2 * e * B * h * P, "hidden[%d]", l);
    }
    return n;
  }
  ROWF(CL_MEM_GRADIENTS, pb, "gradients");
  const cl_optim *o = &c->optim;
  if (o->kind == CL_OPTIM_ADAM || o->kind == CL_OPTIM_ADAMW) {
    ROWF(CL_MEM_OPTIMIZER, pb, "adam.exp_avg");
    ROWF(CL_MEM_OPTIMIZER, pb, "adam.exp_avg_sq");
    if (o->amsgrad) ROWF(CL_MEM_OPTIMIZER, pb, "adam.max_exp_avg_sq");
  } else if (o->kind == CL_OPTIM_RMSPROP) {
    if (o->momentum != 0) ROWF(CL_MEM_OPTIMIZER, pb, "rmsprop.momentum_buffer");
    ROWF(CL_MEM_OPTIMIZER, pb, "rmsprop.square_avg");
    if (o->centered) ROWF(CL_MEM_OPTIMIZER, pb, "rmsprop.grad_avg");
  } else if (o->momentum != 0) {
    ROWF(CL_MEM_OPTIMIZER, pb, "sgd.momentum_buffer");
  }
  /* the T input frames (the K target frames go to d_head, not here) */
  ROWF(CL_MEM_DATA, e * T * B * C * P, "x");
  /* saved for backward: each layer's gates, c and h over its stack's steps
   * (the encoder's T, the forecaster's K) */
  for (int l = 0; l < 2 * c->L; l++) {
    size_t h = (size_t)c->hidden[l % c->L], S = l < c->L ? T : K;
    ROWF(CL_MEM_ACTIVATIONS, e * S * B * 4 * h * P, "gates[%d]", l);
    ROWF(CL_MEM_ACTIVATIONS, e * S * B * h * P, "cell[%d]", l);
    ROWF(CL_MEM_ACTIVATIONS, e * S * B * h * P, "hidden[%d]", l);
  }
  /* dL/dc of each forecaster layer's initial state, handed to its encoder
   * layer's last step */
  for (int l = 0; l < c->L; l++)
    ROWF(CL_MEM_WORKSPACE, f * B * (size_t)c->hidden[l] * P, "d_cell_handover[%d]", l);
  /* dL/dh over the longer stack's steps and dL/dc of one step, any layer's */
  ROWF(CL_MEM_WORKSPACE, f * (T > K ? T : K) * B * hmax * P, "d_hidden");
  ROWF(CL_MEM_WORKSPACE, f * B * hmax * P, "d_cell");
  /* the head's K frames, and the target then its gradient in float */
  ROWF(CL_MEM_ACTIVATIONS, e * K * B * C * P, "head_output");
  ROWF(CL_MEM_WORKSPACE, f * K * B * C * P, "d_head");
#undef ROWF
  return n;
}

static void run_forecaster(const fcase *c) {
  cl_config cfg;
  memset(&cfg, 0, sizeof cfg);
  cfg.input_dim = c->in;
  cfg.n_layers = 2 * c->L;
  for (int l = 0; l < 2 * c->L; l++) {
    cfg.hidden_dims[l] = c->hidden[l % c->L];
    cfg.kernel_sizes[l] = c->k[l % c->L];
    cfg.recurrent_kernel_sizes[l] = c->rk[l % c->L];
  }
  cfg.bias = 1;
  cfg.device = CL_DEVICE_CPU;
  cfg.dtype = c->dtype;
  cfg.n_threads = 1;
  cfg.forecaster = 1;
  cfg.patch = c->patch;
  cfg.peephole = c->peephole ? CL_PEEP_CHANNEL : CL_PEEP_NONE;
  cl_model *m = ctest_model(&cfg);
  if (!m) return;
  CHECK(cl_model_n_params(m) == fc_params(c), "%s: %zu parameters, want %zu", c->name,
        (size_t)cl_model_n_params(m), fc_params(c));
  cl_step_options o = {0};
  o.horizon = c->K;
  const cl_optim *opt = c->training ? &c->optim : NULL;
  cl_plan plan;
  if (cl_model_plan(m, c->B, c->T, c->H, c->W, c->training, opt, &o, &plan) != CL_OK) {
    CHECK(0, "%s: plan: %s", c->name, cl_model_error(m));
    cl_model_free(m);
    return;
  }
  frow want[64];
  int nw = fc_rows(c, want);
  int used[64] = {0};
  size_t skip = 0, cat[CL_MEM_NCAT] = {0};
  for (int i = 0; i < nw; i++) cat[want[i].cat] += want[i].bytes;
  for (int i = 0; i < plan.n; i++) {
    const cl_plan_entry *p = &plan.entries[i];
    if (!strcmp(p->name, "conv_workspace") || !strcmp(p->name, "backend_scratch")) {
      CHECK(p->category == CL_MEM_WORKSPACE, "%s: %s is not workspace", c->name, p->name);
      skip += p->bytes;
      continue;
    }
    int j = 0;
    while (j < nw && strcmp(want[j].name, p->name)) j++;
    if (j == nw) {
      CHECK(0, "%s: the plan has a row %s (%zu bytes) the shapes do not", c->name, p->name,
            p->bytes);
      continue;
    }
    used[j]++;
    CHECK(p->bytes == want[j].bytes && p->category == want[j].cat,
          "%s: row %s planned %zu bytes (%s), from the shapes %zu (%s) (%+lld)", c->name,
          p->name, p->bytes, cl_mem_category_name(p->category), want[j].bytes,
          cl_mem_category_name(want[j].cat), (long long)p->bytes - (long long)want[j].bytes);
  }
  for (int j = 0; j < nw; j++)
    CHECK(used[j] == 1, "%s: row %s appears %d times in the plan, want once", c->name,
          want[j].name, used[j]);
  /* a real step: what the allocator held at its peak, per category */
  size_t frame = (size_t)c->in * c->H * c->W;
  size_t nx = (size_t)c->B * c->T * frame, ny = (size_t)c->B * c->K * frame;
  float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
  for (size_t i = 0; i < nx; i++) x[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < ny; i++) y[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {c->B, c->T, c->in, c->H, c->W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {c->B, c->K, c->in, c->H, c->W}};
  double loss;
  cl_step_options none = {0};
  cl_status s = c->training
                    ? cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, opt, &none, &loss)
                    : cl_model_forward(m, &xa, 0, &o);
  CHECK(s == CL_OK, "%s: step: %s", c->name, cl_model_error(m));
  cl_mem_stats st;
  cl_model_memory_stats(m, &st);
  expect_categories(c->name, &plan, &st, cat, skip);
  printf("%-44s %d rows, activations %zu, workspace %zu (+ %zu convolution), data %zu\n",
         c->name, nw, cat[CL_MEM_ACTIVATIONS], cat[CL_MEM_WORKSPACE], skip, cat[CL_MEM_DATA]);
  free(x);
  free(y);
  cl_plan_free(&plan);
  cl_model_free(m);
}

int main(void) {
  const cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  const cl_optim amsgrad = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 1, 0, 0};
  const cl_optim sgd = {CL_OPTIM_SGD, 1e-2, 0, 0, 0, 0, 0, 0, 0, 0};
  const cl_optim momentum = {CL_OPTIM_SGD, 1e-2, 0, 0, 0, 0.9, 0, 0, 0, 0};
  /* RMSprop with momentum and centered: square_avg, momentum_buffer, grad_avg */
  const cl_optim rmsprop = {CL_OPTIM_RMSPROP, 1e-2, 0, 0, 1e-8, 0.9, 0, 0, 0.99, 1};
  const cl_optim rms_plain = {CL_OPTIM_RMSPROP, 1e-2, 0, 0, 1e-8, 0, 0, 0, 0.99, 0};
  const pcase cases[] = {
      /* name, layers, in, hidden, kernels, dtype, B, T, H, W, training, optim,
       * checkpoint, tbptt, accumulation, recompute, outputs, state kernels (0: the kernels) */
      {"1 layer adam", 1, 2, {3}, {3}, CL_F32, 2, 4, 5, 6, 1, adam, 0, 0, 0, 0, 0, {0}},
      {"2 layers sgd", 2, 1, {4, 2}, {3, 5}, CL_F32, 3, 3, 6, 4, 1, sgd, 0, 0, 0, 0, 0, {0}},
      {"2 layers momentum checkpoint 2 of 5", 2, 2, {4, 3}, {3, 1}, CL_F32, 2, 5, 4, 4, 1,
       momentum, 2, 0, 0, 0, 0, {0}},
      {"3 layers amsgrad float16 accumulation 2", 3, 1, {3, 5, 2}, {3, 3, 1}, CL_F16, 3, 4, 5, 3,
       1, amsgrad, 0, 0, 2, 0, 0, {0}},
      {"2 layers adam bfloat16 tbptt 3 of 7", 2, 3, {2, 4}, {3, 3}, CL_BF16, 2, 7, 4, 5, 1, adam,
       0, 3, 0, 0, 0, {0}},
      {"2 layers adam recompute_gates 2 of 5", 2, 1, {4, 4}, {3, 3}, CL_F32, 2, 5, 5, 5, 1, adam,
       0, 0, 0, 2, 0, {0}},
      {"1 layer adam checkpoint 3 accumulation 3", 1, 2, {5}, {5}, CL_F32, 5, 7, 6, 6, 1, adam, 3,
       0, 3, 0, 0, {0}},
      {"2 layers rmsprop momentum centered", 2, 2, {4, 3}, {3, 3}, CL_F32, 2, 4, 5, 4, 1,
       rmsprop, 0, 0, 0, 0, 0, {0}},
      {"1 layer rmsprop bfloat16 accumulation 2", 1, 1, {5}, {3}, CL_BF16, 4, 3, 4, 4, 1,
       rms_plain, 0, 0, 2, 0, 0, {0}},
      {"inference, every output", 2, 2, {3, 5}, {3, 3}, CL_F32, 2, 6, 5, 4, 0, adam, 0, 0, 0, 0,
       CL_OUTPUTS_ALL, {0}},
      {"inference float16, last state", 2, 1, {6, 2}, {3, 5}, CL_F16, 3, 9, 4, 6, 0, adam, 0, 0, 0,
       0, CL_OUTPUTS_LAST, {0}},
      {"2 layers adam, kernels 9-1 and 3-5", 2, 2, {4, 3}, {9, 3}, CL_F32, 2, 4, 6, 5, 1, adam, 0,
       0, 0, 0, 0, {1, 5}},
      {"2 layers sgd checkpoint 2 recompute 1, kernels 5-1", 2, 1, {3, 2}, {5, 5}, CL_F32, 2, 5, 5,
       4, 1, sgd, 2, 0, 0, 1, 0, {1, 1}},
      {"inference, kernels 1-3", 1, 2, {3}, {1}, CL_F16, 2, 3, 4, 4, 0, adam, 0, 0, 0, 0,
       CL_OUTPUTS_ALL, {3}},
      {"1 layer sgd tbptt 2 of 5 recompute 1", 1, 1, {4}, {3}, CL_F32, 2, 5, 4, 5, 1, sgd, 0, 2,
       0, 1, 0, {0}},
      {"1 layer adam float16 checkpoint 2 recompute 2", 1, 2, {3}, {3}, CL_F16, 3, 6, 5, 4, 1,
       adam, 2, 0, 0, 2, 0, {0}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
  const cl_optim adamw = {CL_OPTIM_ADAMW, 1e-3, 0.9, 0.999, 1e-8, 0, 0.01, 0, 0, 0};
  const fcase fcases[] = {
      /* name, L (layers per stack), in, hidden, kernels, state kernels (0: the kernels),
       * patch, peephole, dtype, B, T, K, H, W, training, optim */
      {"forecaster 1+1 adam, patch 1, T 3 K 2", 1, 1, {3}, {3}, {0}, 1, 0, CL_F32, 2, 3, 2, 4, 5,
       1, adam},
      {"forecaster 2+2 sgd, patch 2, T 2 < K 4", 2, 1, {4, 2}, {3, 5}, {0}, 2, 0, CL_F32, 3, 2, 4,
       6, 4, 1, sgd},
      {"forecaster 2+2 rmsprop centered, patch 4, T 5 > K 2", 2, 2, {3, 3}, {3, 3}, {0}, 4, 0,
       CL_F32, 1, 5, 2, 8, 12, 1, rmsprop},
      {"forecaster 3+3 amsgrad, patch 2, kernels 1-3-3", 3, 1, {2, 3, 2}, {1, 3, 3}, {0}, 2, 0,
       CL_F32, 2, 3, 3, 4, 4, 1, amsgrad},
      {"forecaster 2+2 adamw, kernels 5-3 / 3-1, peepholes", 2, 1, {3, 4}, {5, 3}, {3, 1}, 2, 1,
       CL_F32, 2, 4, 3, 6, 6, 1, adamw},
      {"forecaster 1+1 sgd momentum, batch 1, K 1", 1, 3, {2}, {3}, {0}, 1, 0, CL_F32, 1, 2, 1, 3,
       3, 1, momentum},
      {"forecaster 1+1 rmsprop, batch 5, patch 4", 1, 1, {4}, {3}, {0}, 4, 0, CL_F32, 5, 2, 3, 8,
       4, 1, rms_plain},
      {"forecaster prediction, patch 2, K 5", 2, 1, {3, 4}, {3, 3}, {0}, 2, 0, CL_F32, 2, 3, 5, 6,
       6, 0, adam},
      {"forecaster prediction float16, patch 4", 1, 1, {5}, {3}, {0}, 4, 0, CL_F16, 3, 2, 3, 8, 4,
       0, adam},
      {"forecaster prediction bfloat16, patch 1, peepholes", 2, 2, {2, 3}, {3, 1}, {1, 3}, 1, 1,
       CL_BF16, 1, 4, 2, 5, 3, 0, adam},
  };
  for (size_t i = 0; i < sizeof fcases / sizeof fcases[0]; i++) run_forecaster(&fcases[i]);
  return ctest_done("test_plan_bytes");
}
