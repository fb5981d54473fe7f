/*
 * tests/c/bench_cpu_conv.c -- times the CPU backend's convolutions at the
 * tutorial ConvLSTM's shapes and prints GFLOP/s (2 N K C k^2 H W per call),
 * to set beside tests/c/bench_torch_conv.py (same shapes, same formula).
 *
 * Not a test: it checks nothing. Build from the package root, with every
 * .c file of src/cpu:
 *   gcc -std=c11 -O2 -fopenmp -Isrc src/cpu/[all .c] tests/c/bench_cpu_conv.c -lm \
 *       -o /tmp/bench_cpu_conv
 * Arguments: [threads] (default: all) [path] (1 im2col + GEMM, 2 direct; default:
 * chosen per shape). CONVLSTM_GEMM picks the GEMM.
 */
#include "cpu/cpu_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *random_floats(size_t n) {
  float *p = malloc(sizeof(float) * (n ? n : 1));
  if (!p) {
    fprintf(stderr, "out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
  return p;
}

typedef struct bufs {
  float *x, *w, *b, *y, *dy, *dx, *dw, *db;
  void *ws;
} bufs;

/* op 0: forward, 1: backward data, 2: backward filter. */
static cl_status run_op(cl_backend *be, const cl_conv_shape *s, bufs *B, int op) {
  const struct cl_backend_i *f = be->iface;
  if (op == 0) return f->conv_forward(be, s, B->x, B->w, B->b, B->y, 0, B->ws);
  if (op == 1) return f->conv_backward_data(be, s, B->dy, B->w, B->dx, 0, B->ws);
  return f->conv_backward_filter(be, s, B->dy, B->x, B->dw, B->db, B->ws);
}

/* Best time of a few calls after one warm-up, as the torch script does. */
static double best_time(cl_backend *be, const cl_conv_shape *s, bufs *B, int op, int reps) {
  double best = 1e30;
  for (int r = 0; r <= reps; r++) {
    double t0 = now_seconds();
    if (run_op(be, s, B, op) != CL_OK) {
      fprintf(stderr, "conv failed: %s\n", be->err);
      exit(1);
    }
    double t = now_seconds() - t0;
    if (r > 0 && t < best) best = t;
  }
  return best;
}

static void bench(cl_backend *be, cl_conv_shape s) {
  size_t P = (size_t)s.H * s.W, kk = (size_t)s.kh * s.kw;
  bufs B;
  B.x = random_floats(s.N * s.C * P);
  B.dx = random_floats(s.N * s.C * P);
  B.y = random_floats(s.N * s.K * P);
  B.dy = random_floats(s.N * s.K * P);
  B.w = random_floats(s.K * s.C * kk);
  B.dw = random_floats(s.K * s.C * kk);
  B.b = random_floats(s.K);
  B.db = random_floats(s.K);
  size_t wsb = 0;
  if (cl_backend_conv_workspace_any(be, &s, &wsb) != CL_OK) {
    fprintf(stderr, "conv_workspace: %s\n", be->err);
    exit(1);
  }
  be->iface->alloc(be, wsb, &B.ws);
  double flop = 2.0 * s.N * s.K * (s.C / cl_conv_groups(&s)) * kk * P;
  int reps = (int)(2e10 / flop) + 3;
  static const char *names[] = {"fwd", "bwd-data", "bwd-filter"};
  printf("N=%4d C=%3d K=%3d G%d %dx%d k=%dx%d ws=%6.1f MiB:", s.N, s.C, s.K, cl_conv_groups(&s),
         s.H, s.W, s.kh, s.kw, wsb / 1048576.0);
  for (int op = 0; op < 3; op++) {
    double t = best_time(be, &s, &B, op, reps);
    printf(" | %s %8.2f ms %6.1f GF/s", names[op], t * 1e3, flop / t / 1e9);
  }
  printf("\n");
  be->iface->free(be, B.ws);
  free(B.x), free(B.dx), free(B.y), free(B.dy), free(B.w), free(B.dw), free(B.b), free(B.db);
}

int main(int argc, char **argv) {
  cl_backend *be;
  if (cl_backend_cpu_create(argc > 1 ? atoi(argv[1]) : 0, &be) != CL_OK) return 1;
  printf("threads %d, gemm %s\n", be->n_threads, cl_cpu_gemm_name(cl_cpu_gemm_of(be)));
  /* argv[2]: the path forced (1 im2col + GEMM, 2 direct; 0 or absent: chosen per shape) */
  if (argc > 2) ((cl_cpu_ctx *)be->context)->conv_path = atoi(argv[2]);
  /* (N, C, H, W, K, k): hidden and input parts of layer 1, then of layer 2. */
  static const cl_conv_shape shapes[] = {
      {100, 64, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0},
      {500, 1, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0},
      {500, 64, 24, 24, 4, 3, 3, 1, 1, CL_F32, 0},
      {100, 1, 24, 24, 4, 3, 3, 1, 1, CL_F32, 0},
      /* per-gate dropout: the same halves over 4 masked copies in 4 groups
       * (the FLOPs of the row above), then the row it replaces */
      {50, 256, 24, 24, 256, 3, 3, 1, 1, CL_F32, 4},
      {50, 64, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0},
      {50, 4, 24, 24, 256, 3, 3, 1, 1, CL_F32, 4},
      {50, 1, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0},
      {50, 256, 24, 24, 4, 3, 3, 1, 1, CL_F32, 4},
      {50, 64, 24, 24, 4, 3, 3, 1, 1, CL_F32, 0},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bench(be, shapes[i]);
  be->iface->destroy(be);
  return 0;
}
