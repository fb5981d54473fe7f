/*
 * tests/c/test_cpu_wino_fixed.c -- cpu_winograd.c's unrolled transforms
 * (WINO_2D_FIXED: F(4x4,3x3), F(4x4,5x5) and F(6x6,3x3), each matrix in
 * each role, one per instruction set) and the vector untile (the output
 * tiles back into images) do the same operations in the same order as the
 * generic loop wino_2d they replace, and the vector gather of the filter
 * pairs (wino_gather) and the transposes of backward filter's operands
 * with their bias sums (wino_chlast) move and add the same values as the
 * scalar loops, so a
 * convolution gives the same bits
 * whichever runs: a model's results must not depend on whether its form
 * happened to be unrolled. test_backend_ops holds both to the convolution
 * within a tolerance; this holds them to each other exactly.
 *
 * The instrument is the results' bits: each call on a backend with the
 * unrolled kernels against the same call on one with cl_cpu_ctx's
 * wino_generic set, for every internal GEMM kind this machine runs (each
 * has its own transform loops), both F(4x4, r) forms and F(6x6,3x3), the three directions,
 * one and two threads (two split a batch of one chunk by channels and tile
 * elements), on shapes whose tiles and filter pairs leave a tail past the
 * last whole vector.
 */
#define _POSIX_C_SOURCE 200112L
#include "bench_conv.h"      /* bench_conv_result: one call's output */
#include "cpu/cpu_kernels.h" /* cl_cpu_ctx */
#include "ctest.h"           /* CHECK, ctest_done */

#include <stdlib.h>
#include <string.h>

static cl_backend *backend(int threads, cl_cpu_gemm_kind kind, int generic, int algo) {
  cl_backend *be = NULL;
  if (cl_backend_cpu_create(threads, &be) != CL_OK) {
    fprintf(stderr, "test_cpu_wino_fixed: cannot create the cpu backend\n");
    exit(2);
  }
  cl_cpu_ctx *ctx = be->context;
  ctx->gemm = kind;
  ctx->conv_algo = algo; /* 3: Winograd F(4x4, r) on every shape it handles; 5: F(6x6,3x3) */
  ctx->wino_generic = generic;
  return be;
}

static float *randoms(size_t n, unsigned seed) {
  float *a = malloc(n * sizeof *a);
  for (size_t i = 0; i < n; i++) {
    seed = seed * 1664525u + 1013904223u;
    a[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
  }
  return a;
}

/* Direction dir (0 forward, 1 backward data) of s with weights w into out,
 * on the workspace ws, same_w as given. */
static void call(cl_backend *be, cl_conv_shape s, int dir, int same_w, const float *in,
                 const float *w, float *out, void *ws) {
  s.same_w = same_w;
  cl_status st = dir == 0 ? be->iface->conv_forward(be, &s, in, w, NULL, out, 0, ws)
                          : be->iface->conv_backward_data(be, &s, in, w, out, 0, ws);
  CHECK(st == CL_OK, "same_w: the call failed: %s", be->err);
}

/* A call with same_w reuses the filter transform the call before it left
 * in the workspace (the time loops' hidden halves): the same bits as
 * computing it again, and only with the same w, shape, direction and
 * workspace, and no convolution between. Reuse is seen by breaking the
 * promise: w changed in place under same_w gives the old values' result;
 * each case that must recompute breaks it too, and must not show it. */
static void test_same_w(void) {
  const cl_conv_shape s = {4, 24, 16, 16, 96, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0};
  const cl_conv_shape other = {2, 7, 8, 8, 40, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0};
  const size_t img = (size_t)s.N * s.K * s.H * s.W; /* the larger side: K > C */
  const size_t nw = (size_t)s.K * s.C * s.kh * s.kw, no = (size_t)other.N * 40 * 64;
  for (int dir = 0; dir <= 1; dir++) {
    cl_backend *be = NULL;
    CHECK(cl_backend_cpu_create(2, &be) == CL_OK, "cpu backend");
    ((cl_cpu_ctx *)be->context)->conv_algo = 3;
    size_t ws_bytes = 0, wx = 0, wf = 0, wo = 0;
    CHECK(cl_backend_conv_workspace(be, &s, CL_CONV_FORWARD, &ws_bytes) == CL_OK &&
              cl_backend_conv_workspace(be, &s, CL_CONV_BACKWARD_DATA, &wx) == CL_OK &&
              cl_backend_conv_workspace(be, &s, CL_CONV_BACKWARD_FILTER, &wf) == CL_OK &&
              cl_backend_conv_workspace(be, &other, CL_CONV_FORWARD, &wo) == CL_OK,
          "workspace queries");
    ws_bytes = ws_bytes > wx ? ws_bytes : wx;
    ws_bytes = ws_bytes > wf ? ws_bytes : wf;
    ws_bytes = ws_bytes > wo ? ws_bytes : wo;
    float *in = randoms(img, 1), *v1 = randoms(nw, 2), *v2 = randoms(nw, 3);
    float *w = malloc(nw * 4), *w_at = malloc(nw * 4), *oin = randoms(no, 4);
    float *ow = randoms((size_t)40 * 7 * 25, 5), *oy = malloc(no * 4);
    float *ref1 = malloc(img * 4), *ref2 = malloc(img * 4), *y = malloc(img * 4);
    float *spare = malloc(img * 4);
    void *ws = malloc(ws_bytes), *ws2 = malloc(ws_bytes);
    const size_t nout = (size_t)s.N * (dir ? s.C : s.K) * s.H * s.W;
    call(be, s, dir, 0, in, v2, ref2, ws);
    call(be, s, dir, 0, in, v1, ref1, ws);
    call(be, s, dir, 1, in, v1, y, ws);
    CHECK(memcmp(y, ref1, nout * 4) == 0, "dir %d: a reused transform gives the same bits", dir);

    memcpy(w, v1, nw * 4);
    call(be, s, dir, 0, in, w, y, ws);
    memcpy(w, v2, nw * 4);
    call(be, s, dir, 1, in, w, y, ws);
    CHECK(memcmp(y, ref1, nout * 4) == 0, "dir %d: same_w reuses the transform left there", dir);

    memcpy(w, v1, nw * 4);
    call(be, s, dir, 0, in, w, y, ws);
    memcpy(w_at, v2, nw * 4);
    call(be, s, dir, 1, in, w_at, y, ws);
    CHECK(memcmp(y, ref2, nout * 4) == 0, "dir %d: same_w with another w recomputes", dir);

    memcpy(w, v1, nw * 4);
    call(be, s, dir, 0, in, w, y, ws);
    memcpy(w, v2, nw * 4);
    call(be, s, dir, 1, in, w, y, ws2);
    CHECK(memcmp(y, ref2, nout * 4) == 0, "dir %d: same_w on another workspace recomputes", dir);

    memcpy(w, v1, nw * 4);
    call(be, s, dir, 0, in, w, y, ws);
    call(be, other, 0, 0, oin, ow, oy, ws);
    memcpy(w, v2, nw * 4);
    call(be, s, dir, 1, in, w, y, ws);
    CHECK(memcmp(y, ref2, nout * 4) == 0, "dir %d: same_w after another convolution recomputes",
          dir);

    memcpy(w, v1, nw * 4);
    call(be, s, dir, 0, in, w, y, ws);
    memset(spare, 0, nw * 4); /* backward filter overwrites ws and leaves no transform */
    CHECK(be->iface->conv_backward_filter(be, &s, in, in, spare, NULL, ws) == CL_OK, "filter");
    memcpy(w, v2, nw * 4);
    call(be, s, dir, 1, in, w, y, ws);
    CHECK(memcmp(y, ref2, nout * 4) == 0, "dir %d: same_w after a backward filter recomputes",
          dir);

    memcpy(w, v1, nw * 4);
    call(be, s, dir, 0, in, w, y, ws);
    call(be, s, 1 - dir, 0, in, w, spare, ws2); /* the other direction, elsewhere */
    memcpy(w, v2, nw * 4);
    call(be, s, dir, 1, in, w, y, ws);
    CHECK(memcmp(y, ref2, nout * 4) == 0, "dir %d: same_w after the other direction recomputes",
          dir);
    free(in), free(v1), free(v2), free(w), free(w_at), free(oin), free(ow), free(oy);
    free(ref1), free(ref2), free(y), free(spare), free(ws), free(ws2);
    cl_backend_destroy(be);
  }
  printf("  same_w: reuse, and each case that recomputes\n");
}

int main(void) {
  /* N C H W K kh kw: 18 tiles of F(4x4, r) and 30 filter pairs (tails on
   * 8- and 16-float vectors); a hidden half of the steps' 5x5 models cut
   * to 24 channels; a 3x3 one with more images than a chunk holds; 40
   * output channels of 7 inputs: the gather's runs of 40 (and of 7) pairs,
   * whole vectors and a tail, a block of 256 pairs ending within a run */
  const cl_conv_shape shapes[] = {
      {3, 5, 7, 9, 6, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {3, 5, 7, 9, 6, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {4, 24, 16, 16, 96, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {20, 8, 13, 11, 12, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {2, 7, 8, 8, 40, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {3, 9, 24, 23, 20, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
  };
  const char *ops[] = {"forward", "backward data", "backward filter"};
  int compared = 0;
  for (int kind = CL_CPU_GEMM_GENERIC; kind <= CL_CPU_GEMM_AVX512; kind++) {
    if (!cl_cpu_gemm_available((cl_cpu_gemm_kind)kind)) continue;
    for (int v = 0; v < 4; v++) { /* F(4x4, r), then F(6x6,3x3), on 1 and 2 threads */
      const int algo = v < 2 ? 3 : 5, t = v % 2 + 1;
      cl_backend *fixed = backend(t, (cl_cpu_gemm_kind)kind, 0, algo);
      cl_backend *loop = backend(t, (cl_cpu_gemm_kind)kind, 1, algo);
      for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const cl_conv_shape *s = &shapes[i];
        if (algo == 5 && s->kh != 3) continue; /* F(6x6,3x3): 3 x 3 only */
        for (int op = 0; op < 3; op++) {
          size_t n = 0, m = 0;
          float *da = NULL, *db = NULL; /* backward filter's bias gradients */
          float *a = bench_conv_result(fixed, s, op, 11, &n, &da);
          float *b = bench_conv_result(loop, s, op, 11, &m, &db);
          size_t differ = 0;
          for (size_t q = 0; q < n; q++) differ += memcmp(&a[q], &b[q], sizeof(float)) != 0;
          CHECK(n == m && differ == 0,
                "%s, %d thread(s), N%d C%d %dx%d K%d k%d, %s (%s): %zu of %zu values differ "
                "between the unrolled transforms and wino_2d",
                cl_cpu_gemm_name((cl_cpu_gemm_kind)kind), t, s->N, s->C, s->H, s->W, s->K,
                s->kh, ops[op], cl_cpu_conv_algo(fixed, s, op), differ, n);
          CHECK(op < 2 || memcmp(da, db, sizeof(float) * s->K) == 0,
                "%s, %d thread(s), N%d C%d %dx%d K%d k%d: backward filter's bias gradient "
                "differs between wino_chlast's vectors and its scalar loop",
                cl_cpu_gemm_name((cl_cpu_gemm_kind)kind), t, s->N, s->C, s->H, s->W, s->K,
                s->kh);
          compared++;
          free(a), free(b), free(da), free(db);
        }
      }
      cl_backend_destroy(fixed), cl_backend_destroy(loop);
    }
  }
  printf("  %d calls compared bit for bit\n", compared);
  test_same_w();
  return ctest_done("test_cpu_wino_fixed");
}
