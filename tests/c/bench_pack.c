/*
 * tests/c/bench_pack.c -- what the core's conversion at its boundary
 * (core/pack.c) costs per batch: a batch of frames packed from the user's
 * layout (R's doubles, torch's floats) into the core's time-major layout and
 * storage dtype, the work a GPU step does on the host before its upload
 * (and a CPU step into its own buffers). Shapes of bench/gpu/bench_gpu.py's
 * configurations and of the encoder-forecaster's 4 x 4 patches, NCHW (the
 * CUDA backend's default layout); on --threads (default 1: the model's threads,
 * which a CPU model's conversion uses; 0: OpenMP's default). Best of --reps
 * (default 7), in ms and ns per element.
 *
 *   build/nocuda/bench_pack [--reps=N] [--threads=N]
 */
#include "convlstm.h"
#include "core/internal.h" /* cl_put_frames, cl_block_all */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct shape {
  const char *name;
  int B, T, C, H, W, patch;
} shape;

int main(int argc, char **argv) {
  int reps = 7, threads = 1;
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--reps=", 7) == 0) reps = atoi(argv[i] + 7);
    if (strncmp(argv[i], "--threads=", 10) == 0) threads = atoi(argv[i] + 10);
  }
  const shape shapes[] = {{"tutorial 100x5x1x24x24", 100, 5, 1, 24, 24, 1},
                          {"video64 16x10x3x64x64", 16, 10, 3, 64, 64, 1},
                          {"mnist64 32x10x1x64x64", 32, 10, 1, 64, 64, 1},
                          {"forecaster 4x10x1x64x64 p4", 4, 10, 1, 64, 64, 4}};
  const char *dt_name[] = {"float32", "float16", "bfloat16"};
  printf("%-28s %-6s %-8s %10s %8s\n", "shape", "host", "dtype", "ms", "ns/elem");
  for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
    const shape *h = &shapes[s];
    cl_config c; /* two layers: only the frames' patch and layout matter here */
    memset(&c, 0, sizeof c);
    c.input_dim = h->C, c.n_layers = 2, c.hidden_dims[0] = c.hidden_dims[1] = 3;
    c.kernel_sizes[0] = c.kernel_sizes[1] = 3;
    c.bias = 1, c.device = CL_DEVICE_CPU, c.n_threads = threads;
    if (h->patch > 1) c.forecaster = 1, c.patch = h->patch;
    cl_model *m = NULL;
    char err[CL_ERRMSG_LEN] = "";
    if (cl_model_create(&c, &m, err, sizeof err) != CL_OK) {
      fprintf(stderr, "%s: %s\n", h->name, err);
      return 1;
    }
    size_t n = (size_t)h->B * h->T * h->C * h->H * h->W;
    double *rd = malloc(n * sizeof *rd);
    float *tf = malloc(n * sizeof *tf);
    void *dst = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) tf[i] = (float)(rd[i] = (double)(i % 1009) / 1009.0);
    for (int fmt = 0; fmt < 2; fmt++)
      for (int t = CL_F32; t <= CL_BF16; t++) {
        cl_host_array a = {fmt ? (void *)rd : (void *)tf, fmt ? CL_HOST_R_F64 : CL_HOST_TORCH_F32,
                           5, {h->B, h->T, h->C, h->H, h->W}};
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
          double t0 = now();
          if (cl_put_frames(m, dst, (cl_dtype)t, &a, cl_block_all(&a)) != CL_OK) return 1;
          double el = now() - t0;
          if (el < best) best = el;
        }
        printf("%-28s %-6s %-8s %10.3f %8.2f\n", h->name, fmt ? "R" : "torch", dt_name[t],
               1e3 * best, 1e9 * best / (double)n);
      }
    free(rd);
    free(tf);
    free(dst);
    cl_model_free(m);
  }
  return 0;
}
