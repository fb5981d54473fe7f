/*
 * tests/c/test_cpu_image_bits.c -- a CPU convolution gives an image the
 * same bits whichever images share its call. Forward and backward data
 * compute each image from that image alone; the test pins that their
 * order of summation does not depend on the batch either: a call over all
 * N images, on one thread and on two, against the same images in two
 * calls of n and N - n on one thread (a step whose time loop a team splits
 * by images would make those calls, each thread its own images). Given the
 * algorithm (the backend's conv_algo), any choice a kernel made from N (the
 * GEMM path, chunks of images, their split over the team) that changed an
 * image's sums shows here. The algorithm itself may change with N: one
 * image of few channels falls under Winograd's size threshold and runs the
 * GEMM path, whose sums are in another order; a split step would have to
 * keep the whole batch's algorithm.
 *
 * Shapes: the step's own calls of issue 39's plain stack and the
 * tutorial (the hidden halves on Winograd, the input halves of few
 * channels on the GEMM and direct paths, a 1 x 1 head), in float32 and
 * both half storage types, split evenly and one image against the rest.
 */
#include "core/backend.h" /* cl_backend, cl_conv_shape, the conv slots */
#include "ctest.h"        /* CHECK, uniform01, ctest_done */
#include "host/half.h"    /* storage conversions */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct shape {
  const char *name;
  int N, C, H, W, K, k;
} shape;

/* n values of type t from uniform01 in [-1, 1) */
static void *draw(cl_dtype t, size_t n) {
  void *p = malloc(n * cl_dtype_size(t) + 1);
  for (size_t i = 0; i < n; i++) {
    float v = (float)(2 * uniform01(NULL) - 1);
    if (t == CL_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t == CL_F16 ? cl_f32_to_f16(v) : cl_f32_to_bf16(v);
  }
  return p;
}

static cl_backend *cpu(int threads) {
  cl_backend *be = NULL;
  if (cl_backend_cpu_create(threads, &be) != CL_OK) {
    fprintf(stderr, "test_cpu_image_bits: no cpu backend\n");
    exit(2);
  }
  return be;
}

/* One call of direction dir (0 forward, 1 backward data) over images
 * [i0, i0 + n) of the batch: x (forward) or dy (backward data) at those
 * images in, y or dx at those images out. */
static cl_status call(cl_backend *be, cl_conv_shape s, int dir, int i0, int n, const void *in,
                      const float *w, const float *b, void *out) {
  const size_t es = cl_dtype_size(s.dtype), P = (size_t)s.H * s.W;
  const size_t in_img = (size_t)(dir == 0 ? s.C : s.K) * P, out_img = (size_t)(dir == 0 ? s.K : s.C) * P;
  s.N = n;
  size_t bytes = 0;
  cl_status st = cl_backend_conv_workspace_any(be, &s, &bytes);
  if (st != CL_OK) return st;
  void *ws = malloc(bytes + 64);
  const char *src = (const char *)in + (size_t)i0 * in_img * es;
  st = dir == 0 ? be->iface->conv_forward(be, &s, src, w, b, (char *)out + (size_t)i0 * out_img * es,
                                         0, ws)
               : be->iface->conv_backward_data(be, &s, src, w, (float *)out + (size_t)i0 * out_img,
                                               0, ws);
  free(ws);
  return st;
}

static void check_shape(const shape *sh, cl_dtype t, int dir) {
  cl_conv_shape s = {sh->N, sh->C, sh->H, sh->W, sh->K, sh->k, sh->k, 1, 1, t, 0, CL_NCHW, 0};
  const size_t P = (size_t)s.H * s.W;
  const size_t n_in = (size_t)s.N * (dir == 0 ? s.C : s.K) * P;
  const size_t n_out = (size_t)s.N * (dir == 0 ? s.K : s.C) * P;
  /* backward data writes float32 dx for every storage type */
  const size_t out_bytes = n_out * (dir == 0 ? cl_dtype_size(t) : sizeof(float));
  void *in = draw(t, n_in);
  float *w = draw(CL_F32, (size_t)s.K * s.C * s.kh * s.kw), *b = draw(CL_F32, (size_t)s.K);
  void *whole[2] = {calloc(1, out_bytes), calloc(1, out_bytes)}, *parts = calloc(1, out_bytes);
  const char *dn = dir == 0 ? "forward" : "backward data";
  for (int team = 1; team <= 2; team++) {
    cl_backend *be = cpu(team);
    cl_status st = call(be, s, dir, 0, s.N, in, w, b, whole[team - 1]);
    CHECK(st == CL_OK, "%s %s %s: %d threads: status %d", sh->name, cl_dtype_name(t), dn, team,
          (int)st);
    cl_backend_destroy(be);
  }
  CHECK(memcmp(whole[0], whole[1], out_bytes) == 0, "%s %s %s: 1 and 2 threads differ", sh->name,
        cl_dtype_name(t), dn);
  const int cuts[2] = {s.N / 2, 1};
  for (int c = 0; c < 2; c++) {
    const int n = cuts[c];
    if (n < 1 || n >= s.N || (c == 1 && n == cuts[0])) continue;
    memset(parts, 0, out_bytes);
    cl_backend *be = cpu(1);
    /* the algorithm of each call, as the backend names it */
    char algo[3][64];
    const int sizes[3] = {s.N, n, s.N - n};
    for (int a = 0; a < 3; a++) {
      cl_conv_shape sa = s;
      sa.N = sizes[a];
      snprintf(algo[a], sizeof algo[a], "%s", be->iface->conv_algo(be, &sa, dir));
    }
    cl_status st = call(be, s, dir, 0, n, in, w, b, parts);
    if (st == CL_OK) st = call(be, s, dir, n, s.N - n, in, w, b, parts);
    cl_backend_destroy(be);
    CHECK(st == CL_OK, "%s %s %s: images split %d + %d: status %d", sh->name, cl_dtype_name(t),
          dn, n, s.N - n, (int)st);
    const int same_algo = strcmp(algo[0], algo[1]) == 0 && strcmp(algo[0], algo[2]) == 0;
    /* an even split keeps each shape's algorithm; one image may fall
     * under Winograd's size threshold (WINO_MIN_FLOP) and run the GEMM
     * path, whose sums are another order: compared only where it did not */
    CHECK(same_algo || c == 1, "%s %s %s: %d images run %s, %d run %s, %d run %s", sh->name,
          cl_dtype_name(t), dn, s.N, algo[0], n, algo[1], s.N - n, algo[2]);
    if (!same_algo) {
      printf("  %s %s %s: 1 image runs %s where %d run %s: not compared\n", sh->name,
             cl_dtype_name(t), dn, algo[1], s.N, algo[0]);
      continue;
    }
    CHECK(memcmp(whole[0], parts, out_bytes) == 0,
          "%s %s %s: images in calls of %d and %d differ from one call of %d (%s)", sh->name,
          cl_dtype_name(t), dn, n, s.N - n, s.N, algo[0]);
  }
  free(in), free(w), free(b), free(whole[0]), free(whole[1]), free(parts);
}

int main(void) {
  /* Not under valgrind (its preload in LD_PRELOAD): the tutorial's calls of
   * 100 images ran there for over 15 minutes; the plain and
   * AddressSanitizer runs check it, and these kernels are valgrind's in
   * test_backend_ops. */
  if (ctest_under_valgrind()) {
    printf("test_cpu_image_bits: skipped under valgrind (minutes of convolutions)\n");
    return 77;
  }
  static const shape shapes[] = {
      {"plain stack, hidden half", 4, 48, 16, 16, 192, 5},
      {"plain stack, layer 1 input half", 80, 16, 16, 16, 192, 5},
      {"tutorial, hidden half", 100, 64, 24, 24, 256, 3},
      {"tutorial, layer 2 hidden half", 100, 1, 24, 24, 4, 3},
      {"tutorial, layer 2 input half", 60, 64, 24, 24, 4, 3},
      {"direct, 1 -> 16", 6, 1, 8, 8, 64, 3},
      {"1 x 1 head", 40, 48, 16, 16, 16, 1},
  };
  static const cl_dtype types[] = {CL_F32, CL_F16, CL_BF16};
  for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
    for (int t = 0; t < 3; t++)
      for (int dir = 0; dir < 2; dir++) check_shape(&shapes[i], types[t], dir);
  return ctest_done("test_cpu_image_bits");
}
