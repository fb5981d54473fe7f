/*
 * tests/c/bench_train_step.c -- the C benchmark driver: times whole training
 * steps (forward, MSE, backward, Adam) of a ConvLSTM through the public API,
 * without R, and prints the memory plan beside the measured peak.
 *
 *   bench_train_step [batch T H W input_dim hidden1,hidden2,... kernel steps device
 *                     dropout recurrent_dropout accumulation_steps]
 *   defaults: the R torch tutorial model, 100 5 24 24 1 64,1 3 5 cpu 0 0 1
 * With dropout, every layer gets the rates and each step fresh masks, drawn
 * inside the timed step as the R glue draws them for train_step().
 */
#define _POSIX_C_SOURCE 199309L
#include "bench_common.h" /* bench_now, bench_cmp, bench_uniform01 (seeded 42), bench_hidden */
#include "convlstm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

int main(int argc, char **argv) {
  int B = argc > 1 ? atoi(argv[1]) : 100, T = argc > 2 ? atoi(argv[2]) : 5;
  int H = argc > 3 ? atoi(argv[3]) : 24, W = argc > 4 ? atoi(argv[4]) : 24;
  cl_config c;
  memset(&c, 0, sizeof c);
  c.input_dim = argc > 5 ? atoi(argv[5]) : 1;
  const char *hid = argc > 6 ? argv[6] : "64,1";
  int k = argc > 7 ? atoi(argv[7]) : 3, steps = argc > 8 ? atoi(argv[8]) : 5;
  bench_hidden(&c, hid, k);
  c.bias = 1;
  c.device = argc > 9 && strcmp(argv[9], "cuda") == 0 ? CL_DEVICE_CUDA : CL_DEVICE_CPU;
  double pd = argc > 10 ? atof(argv[10]) : 0, pr = argc > 11 ? atof(argv[11]) : 0;
  for (int l = 0; l < c.n_layers; l++) c.dropout[l] = pd, c.recurrent_dropout[l] = pr;

  cl_model *m = bench_model(&c, "bench_train_step");
  cl_model_init_params(m, bench_uniform01, NULL);
  int top = c.hidden_dims[c.n_layers - 1];
  size_t nx = (size_t)B * T * c.input_dim * H * W, ny = (size_t)B * top * H * W;
  float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
  for (size_t i = 0; i < nx; i++) x[i] = (float)bench_uniform01(NULL);
  for (size_t i = 0; i < ny; i++) y[i] = (float)bench_uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {B, T, c.input_dim, H, W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {B, top, H, W, 0}};
  cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};

  /* dropout masks [B, C, H, W] per layer and kind, redrawn every step */
  cl_step_options so;
  memset(&so, 0, sizeof so);
  so.accumulation_steps = argc > 12 ? atoi(argv[12]) : 1;
  float *masks[2 * CL_MAX_LAYERS] = {0};
  size_t mn[2 * CL_MAX_LAYERS] = {0};
  for (int l = 0; l < c.n_layers; l++) {
    int C[2] = {l == 0 ? c.input_dim : c.hidden_dims[l - 1], c.hidden_dims[l]};
    double p[2] = {pd, pr};
    for (int k = 0; k < 2; k++) {
      if (!(p[k] > 0)) continue;
      mn[2 * l + k] = (size_t)B * C[k] * H * W;
      masks[2 * l + k] = malloc(mn[2 * l + k] * sizeof(float));
    }
    so.mask_x[l] = masks[2 * l];
    so.mask_h[l] = masks[2 * l + 1];
  }
  double *sec = malloc((size_t)steps * sizeof *sec), loss = 0;
  int rc = 0;
  for (int s = -1; s < steps && rc == 0; s++) { /* one warm-up step */
    double t0 = bench_now();
    for (int i = 0; i < 2 * c.n_layers; i++) {
      float keep = (float)(1.0 / (1.0 - (i % 2 ? pr : pd)));
      for (size_t e = 0; e < mn[i]; e++) masks[i][e] = bench_uniform01(NULL) >= (i % 2 ? pr : pd) ? keep : 0;
    }
    if (cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &adam, &so, &loss) != CL_OK) {
      fprintf(stderr, "train_step: %s\n", cl_model_error(m));
      rc = 1;
    }
    if (s >= 0) sec[s] = bench_now() - t0;
  }
  if (rc == 0) {
    qsort(sec, (size_t)steps, sizeof *sec, bench_cmp);
    cl_plan p;
    cl_model_plan(m, B, T, H, W, 1, &adam, NULL, &p);
    cl_mem_stats st;
    cl_model_memory_stats(m, &st);
    printf("backend %s, batch %d, T %d, %dx%d, layers %d: median %.4f s/step (min %.4f), loss %.6f\n",
           cl_model_backend_name(m), B, T, H, W, c.n_layers, sec[steps / 2], sec[0], loss);
    for (int i = 0; i < CL_MEM_NCAT; i++)
      printf("  %-12s plan %12zu  peak %12zu\n", cl_mem_category_name((cl_mem_category)i),
             p.by_category[i], st.peak[i]);
    printf("  %-12s plan %12zu  peak %12zu\n", "total", p.total, st.peak_allocated);
    cl_plan_free(&p);
  }
  for (int i = 0; i < 2 * CL_MAX_LAYERS; i++) free(masks[i]);
  free(sec);
  free(x);
  free(y);
  cl_model_free(m);
  return rc;
}
