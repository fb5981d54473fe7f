/*
 * tests/c/bench_step_bits.c -- not a test: a witness of bit equality
 * between two builds. Trains ten configurations five steps each on the CPU
 * (float32, float16 with a loss scale that overflows, bfloat16; Adam, AdamW,
 * amsgrad, SGD; checkpointing, accumulation, tbptt, clipping, Huber, a
 * weighted BCE loss, a non-finite loss and a refused update; peepholes per
 * position and per channel, their weights drawn nonzero) and prints
 * every status, loss, gradient norm and loss scale in hex and a hash of
 * every parameter tensor. Built against two versions of libconvlstm, the
 * outputs must be the same file:
 *
 *   build/bench_step_bits > a.txt; OTHER/build/bench_step_bits > b.txt; cmp a.txt b.txt
 *
 * (the sync-free training step was checked so against main).
 */
#define _POSIX_C_SOURCE 200112L
#include "convlstm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static unsigned long long rng = 7;
static double u01(void *c) {
  (void)c;
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (double)(rng >> 11) / 9007199254740992.0;
}
typedef struct cs {
  const char *name;
  cl_dtype dt;
  cl_optim_kind ok;
  int ckpt, tbptt, accum;
  double clip, lr, scale;
  int loss;
  double xmul;
  int weight;
  int peep; /* cl_peephole */
} cs;
int main(void) {
  cs cases[] = {
      {"f32 adam", CL_F32, CL_OPTIM_ADAM, 0, 0, 0, 0, 1e-2, 0, 0, 1, 0, 0},
      {"f32 adam clip ckpt", CL_F32, CL_OPTIM_ADAM, 2, 0, 0, 0.05, 1e-2, 0, 0, 1, 0, 0},
      {"f32 sgd clip accum", CL_F32, CL_OPTIM_SGD, 0, 0, 2, 0.5, 1e-1, 0, 0, 1, 0, 0},
      {"f32 adamw tbptt huber", CL_F32, CL_OPTIM_ADAMW, 0, 2, 0, 0, 1e-2, 0, CL_LOSS_HUBER, 1, 0, 0},
      {"f32 adam weighted bce", CL_F32, CL_OPTIM_ADAM, 0, 0, 0, 1.0, 1e-2, 0, CL_LOSS_BCE_LOGITS, 1,
       1, 0},
      {"f16 adam scaler", CL_F16, CL_OPTIM_ADAM, 0, 0, 0, 0, 1e-2, 0, 0, 1, 0, 0},
      {"f16 adam overflow clip ckpt", CL_F16, CL_OPTIM_ADAM, 2, 0, 0, 0.1, 1e-2, 1e30, 0, 1, 0, 0},
      {"bf16 sgd ckpt accum", CL_BF16, CL_OPTIM_SGD, 2, 0, 2, 0, 1e-1, 0, 0, 1, 0, 0},
      {"f32 nonfinite loss", CL_F32, CL_OPTIM_ADAM, 0, 0, 0, 1.0, 1e-2, 0, 0, INFINITY, 0, 0},
      {"f32 guard refuses (lr huge)", CL_F32, CL_OPTIM_SGD, 0, 0, 0, 0, 1e38, 0, 0, 1e3, 0, 0},
      {"f32 adam peephole position", CL_F32, CL_OPTIM_ADAM, 0, 0, 0, 0, 1e-2, 0, 0, 1, 0,
       CL_PEEP_POSITION},
      {"f16 adam peephole channel ckpt", CL_F16, CL_OPTIM_ADAM, 2, 0, 0, 0, 1e-2, 0, 0, 1, 0,
       CL_PEEP_CHANNEL},
      {"bf16 sgd peephole position", CL_BF16, CL_OPTIM_SGD, 0, 0, 0, 0, 1e-1, 0, 0, 1, 0,
       CL_PEEP_POSITION},
  };
  enum { B = 4, T = 4, C = 2, H = 7, W = 6, STEPS = 5 };
  static float x[B * T * C * H * W], y[B * T * 1 * H * W], w[B * T * 1 * H * W];
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    cs *c = &cases[k];
    cl_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.input_dim = C;
    cfg.n_layers = 2;
    cfg.hidden_dims[0] = 8;
    cfg.hidden_dims[1] = 1;
    cfg.kernel_sizes[0] = cfg.kernel_sizes[1] = 3;
    cfg.bias = 1;
    cfg.dtype = c->dt;
    cfg.n_threads = 1;
    cfg.peephole = c->peep;
    if (c->peep == CL_PEEP_POSITION) cfg.peephole_h = H, cfg.peephole_w = W;
    cl_model *m;
    char err[512];
    if (cl_model_create(&cfg, &m, err, sizeof err) != CL_OK) {
      printf("create: %s\n", err);
      return 1;
    }
    rng = 7 + k;
    cl_model_init_params(m, u01, NULL);
    for (int i = 0; c->peep && i < cl_model_n_tensors(m); i++) {
      const char *nm; /* peephole weights start at zero: draw them */
      int nd, d[4];
      cl_model_tensor_info(m, i, &nm, &nd, d);
      if (!strstr(nm, ".w_c")) continue;
      size_t n = 1;
      for (int j = 0; j < nd; j++) n *= d[j];
      float *p = malloc(n * 4);
      for (size_t j = 0; j < n; j++) p[j] = (float)(u01(0) - 0.5);
      cl_model_set_param(m, nm, p, n);
      free(p);
    }
    if (c->scale > 0)
      cl_model_set_loss_scale(m, c->scale, 2.0, 0.5, 2);
    cl_optim o;
    memset(&o, 0, sizeof o);
    o.kind = c->ok;
    o.beta1 = .9;
    o.beta2 = .999;
    o.eps = 1e-8;
    o.momentum = .9;
    o.weight_decay = 0.01;
    o.amsgrad = c->ok == CL_OPTIM_ADAM && k % 2;
    cl_step_options op;
    memset(&op, 0, sizeof op);
    op.checkpoint = c->ckpt;
    op.tbptt = c->tbptt;
    op.accumulation_steps = c->accum;
    op.max_grad_norm = c->clip;
    op.loss.kind = c->loss;
    op.loss.delta = 0.7;
    op.loss.pos_weight = 1.5;
    cl_host_array wa = {w, CL_HOST_TORCH_F32, 5, {B, T, 1, H, W}};
    if (c->weight)
      op.weight = &wa;
    for (int s = 0; s < STEPS; s++) {
      for (size_t i = 0; i < sizeof x / 4; i++)
        x[i] = (float)((u01(0) * 2 - 1) * c->xmul);
      for (size_t i = 0; i < sizeof y / 4; i++) {
        y[i] = (float)u01(0);
        w[i] = (float)(2 * u01(0));
      }
      cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, C, H, W}},
                    ya = {y, CL_HOST_TORCH_F32, 5, {B, T, 1, H, W}};
      o.lr = c->lr * (1 + 0.1 * s);
      double loss = 0;
      cl_status st = cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &o, &op, &loss);
      cl_loss_scale ls;
      cl_model_get_loss_scale(m, &ls);
      printf("%s step %d: st %d loss %a norm %a scale %a skipped %lld steps %lld err '%s'\n",
             c->name, s, (int)st, loss, cl_model_grad_norm(m), ls.scale,
             (long long)ls.skipped_steps, (long long)cl_model_optimizer_steps(m),
             st ? cl_model_error(m) : "");
    }
    for (int i = 0; i < cl_model_n_tensors(m); i++) {
      const char *nm;
      int nd, d[4];
      cl_model_tensor_info(m, i, &nm, &nd, d);
      size_t n = 1;
      for (int j = 0; j < nd; j++)
        n *= d[j];
      float *p = malloc(n * 4);
      cl_model_get_param(m, nm, p, n);
      unsigned long long h = 1469598103934665603ull;
      const unsigned char *b = (const unsigned char *)p;
      for (size_t j = 0; j < n * 4; j++)
        h = (h ^ b[j]) * 1099511628211ull;
      printf("  %s %zu params fnv %016llx\n", nm, n, h);
      free(p);
    }
    cl_model_free(m);
  }
  return 0;
}
