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
#include "bench_conv.h" /* buffers, one call, best time */

#include <time.h>

static double now_seconds(void) {
  struct timespec ts;
  timespec_get(&ts, TIME_UTC);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bench(cl_backend *be, cl_conv_shape s) {
  size_t P = (size_t)s.H * s.W, kk = (size_t)s.kh * s.kw;
  bench_bufs B = bench_bufs_make(be, &s);
  double flop = 2.0 * s.N * s.K * (s.C / cl_conv_groups(&s)) * kk * P;
  int reps = (int)(2e10 / flop) + 3;
  static const char *names[] = {"fwd", "bwd-data", "bwd-filter"};
  printf("N=%4d C=%3d K=%3d G%d %dx%d k=%dx%d ws=%6.1f MiB:", s.N, s.C, s.K, cl_conv_groups(&s),
         s.H, s.W, s.kh, s.kw, B.ws_bytes / 1048576.0);
  for (int op = 0; op < 3; op++) {
    double t = bench_conv_best(be, &s, &B, op, reps, now_seconds);
    printf(" | %s %8.2f ms %6.1f GF/s", names[op], t * 1e3, flop / t / 1e9);
  }
  printf("\n");
  bench_bufs_free(be, &B);
}

int main(int argc, char **argv) {
  cl_backend *be;
  if (cl_backend_cpu_create(argc > 1 ? atoi(argv[1]) : 0, &be) != CL_OK) return 1;
  printf("threads %d, gemm %s\n", be->n_threads, cl_cpu_gemm_name(cl_cpu_gemm_of(be)));
  /* argv[2]: the path forced (1 im2col + GEMM, 2 direct; 0 or absent: chosen per shape) */
  if (argc > 2) ((cl_cpu_ctx *)be->context)->conv_path = atoi(argv[2]);
  /* (N, C, H, W, K, k): hidden and input parts of layer 1, then of layer 2. */
  static const cl_conv_shape shapes[] = {
      {100, 64, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {500, 1, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {500, 64, 24, 24, 4, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {100, 1, 24, 24, 4, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      /* per-gate dropout: the same halves over 4 masked copies in 4 groups
       * (the FLOPs of the row above), then the row it replaces */
      {50, 256, 24, 24, 256, 3, 3, 1, 1, CL_F32, 4, CL_NCHW, 0},
      {50, 64, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {50, 4, 24, 24, 256, 3, 3, 1, 1, CL_F32, 4, CL_NCHW, 0},
      {50, 1, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {50, 256, 24, 24, 4, 3, 3, 1, 1, CL_F32, 4, CL_NCHW, 0},
      {50, 64, 24, 24, 4, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
  };
  for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bench(be, shapes[i]);
  be->iface->destroy(be);
  return 0;
}
