/*
 * tests/c/test_cpu_wino_rule.c -- the CPU backend's default convolution
 * algorithm is a fixed rule (cpu_winograd.c's rule_runs): for calls of
 * 1e8 flops or more, Winograd where both channel counts are 32 or more,
 * and for 5x5 where both are 16 or more and one 64 or more (backward
 * filter too, since 2026-12-01); the GEMM paths elsewhere, in every process. The cases are
 * the steps' shapes (bench/cpu_shapes.tsv) cut to just over 1e8 flops, the
 * rule's edges, and one under 1e8 flops.
 *
 * The instrument is the results' bits: each call of a backend created
 * without CONVLSTM_CONV_ALGO must give exactly the bits of the same call on
 * a backend that forces the algorithm the rule names (conv_algo 3:
 * Winograd's F(4x4,3x3) or F(4x4,5x5), 5: F(6x6,3x3) forward and backward
 * filter where cpu_winograd.c's rule_six says so, 1: the GEMM paths), and differ from
 * the other algorithm's.
 * CONVLSTM_CONV_ALGO=gemm must give the GEMM paths' bits everywhere, and
 * Winograd's results must match the GEMM paths' within 2e-5 of the largest
 * (among them a shape whose products run in blocks of output channels).
 */
#define _POSIX_C_SOURCE 200112L
#include "bench_conv.h"      /* bench_conv_result: one call's output */
#include "cpu/cpu_kernels.h" /* cl_cpu_ctx */
#include "ctest.h"           /* CHECK, ctest_done */

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct rule_case {
  const char *name;
  cl_conv_shape s;
  int algo[3]; /* what the default runs forward, backward data, backward filter: 1 the
                  GEMM paths, 3 Winograd F(4x4, r), 5 F(6x6,3x3) */
} rule_case;

static cl_backend *backend(int conv_algo) {
  cl_backend *be = NULL;
  if (cl_backend_cpu_create(1, &be) != CL_OK) {
    fprintf(stderr, "test_cpu_wino_rule: cannot create the cpu backend\n");
    exit(2);
  }
  ((cl_cpu_ctx *)be->context)->conv_algo = conv_algo;
  return be;
}

static int same_bits(const float *a, const float *b, size_t n) {
  return memcmp(a, b, sizeof(float) * n) == 0;
}

int main(void) {
  const rule_case cases[] = {
      {"hidden half 48 -> 192, 5x5", {1, 48, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      /* the second case of the rule: 5x5, 16 and 64 channels or more */
      {"input half 16 -> 192, 5x5", {6, 16, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"hidden half 64 -> 256, 3x3", {1, 64, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {5, 3, 5}},
      /* F(6x6,3x3)'s edges: 18 x 18 pads to 20 x 20 for F(4x4,3x3) (0.64 of
       * its products), 16 x 16 pads more, 32 x 32 as many products (over the
       * 0.8), 12 x 12 is two tiles across */
      {"six 64 -> 64, 3x3 at 18x18", {5, 64, 18, 18, 64, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {5, 3, 5}},
      {"six 64 -> 64, 3x3 at 16x16", {6, 64, 16, 16, 64, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"six 64 -> 64, 3x3 at 32x32", {2, 64, 32, 32, 64, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"six 64 -> 64, 3x3 at 12x12", {10, 64, 12, 12, 64, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      /* and at the edges themselves: 17 x 17 also pads to three tiles of 6
       * but is under the 18 (F(4x4,3x3)); 64 x 64 takes 0.84 of F(4x4,3x3)'s
       * products, just over the 0.8 */
      {"six 64 -> 64, 3x3 at 17x17", {5, 64, 17, 17, 64, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"six 64 -> 64, 3x3 at 64x64", {1, 64, 64, 64, 64, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"input half 64 -> 4, 3x3", {40, 64, 24, 24, 4, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {1, 1, 1}},
      {"input half 16 -> 128, 3x3", {6, 16, 24, 24, 128, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}, {1, 1, 1}},
      {"small 48 -> 192, 5x5 (under 1e8 flops)",
       {1, 48, 8, 8, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0},
       {1, 1, 1}},
      /* the rule's edges: WINO_MIN_CHANNELS in channels in and out, and
       * the 5x5 case's 16 and 64 */
      {"edge 32 -> 192, 5x5", {2, 32, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"edge 31 -> 192, 5x5", {2, 31, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"edge 48 -> 32, 5x5", {6, 48, 16, 16, 32, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"edge 48 -> 31, 5x5", {6, 48, 16, 16, 31, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {1, 1, 1}},
      {"edge 16 -> 64, 5x5", {8, 16, 16, 16, 64, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      {"edge 15 -> 64, 5x5", {9, 15, 16, 16, 64, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {1, 1, 1}},
      {"edge 16 -> 63, 5x5", {8, 16, 16, 16, 63, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {1, 1, 1}},
      {"edge 64 -> 16, 5x5", {8, 64, 16, 16, 16, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
      /* 4 images of 192 channels: the products (7 MB) exceed WINO_M_BYTES,
       * so forward and backward data run in blocks of output channels */
      {"blocked 48 -> 192, 5x5", {4, 48, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}, {3, 3, 3}},
  };
  /* Under valgrind (its preload in LD_PRELOAD) only the small case: the
   * rule's cases are 1e8 flops or more by definition, minutes there, and
   * test_backend_ops's Winograd variants run the same code on small shapes
   * under it. */
  const int under_valgrind = ctest_under_valgrind();
  if (under_valgrind) printf("  under valgrind: the small case only\n");
  unsetenv("CONVLSTM_CONV_ALGO");
  cl_backend *def = backend(0), *gemm = backend(1);
  setenv("CONVLSTM_CONV_ALGO", "gemm", 1);
  cl_backend *off = backend(0);
  unsetenv("CONVLSTM_CONV_ALGO");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const rule_case *c = &cases[i];
    const cl_conv_shape *z = &c->s;
    if (under_valgrind && 2.0 * z->N * z->K * z->C * z->kh * z->kw * z->H * z->W >= 1e8) continue;
    for (int op = 0; op < 3; op++) {
      /* the form the rule names: F(4x4,3x3) or F(4x4,5x5), or F(6x6,3x3) */
      cl_backend *wino = backend(c->algo[op] == 5 ? 5 : 3);
      size_t n = 0, nw = 0, ng = 0, no = 0;
      float *d = bench_conv_result(def, &c->s, op, 7, &n, NULL);
      float *w = bench_conv_result(wino, &c->s, op, 7, &nw, NULL);
      float *g = bench_conv_result(gemm, &c->s, op, 7, &ng, NULL);
      float *o = bench_conv_result(off, &c->s, op, 7, &no, NULL);
      const int is_wino = same_bits(d, w, n), is_gemm = same_bits(d, g, n);
      printf("  %s, op %d: the default ran %s\n", c->name, op,
             is_wino && !is_gemm   ? "Winograd"
             : is_gemm && !is_wino ? "the GEMM paths"
                                   : "neither (or both gave the same bits)");
      CHECK(!same_bits(w, g, n), "%s, op %d: Winograd and the GEMM paths gave the same bits: "
            "the instrument cannot tell them apart", c->name, op);
      if (c->algo[op] == 1)
        CHECK(is_gemm, "%s, op %d: the default should run the GEMM paths", c->name, op);
      else
        CHECK(is_wino, "%s, op %d: the default should run Winograd", c->name, op);
      CHECK(same_bits(o, g, n), "%s, op %d: CONVLSTM_CONV_ALGO=gemm should run the GEMM paths",
            c->name, op);
      /* and Winograd's values are the convolution's: within the 2e-5 of
       * the largest result that test_backend_ops holds every algorithm to,
       * the GEMM paths (another algorithm) the reference */
      double big = 0, worst = 0;
      for (size_t q = 0; q < n; q++) {
        if (fabs(g[q]) > big) big = fabs(g[q]);
        if (fabs(w[q] - g[q]) > worst) worst = fabs(w[q] - g[q]);
      }
      printf("  %s, op %d: Winograd within %.2g of the largest\n", c->name, op,
             big > 0 ? worst / big : worst);
      CHECK(worst <= 2e-5 * big, "%s, op %d: Winograd differs from the GEMM paths by %.3g of "
            "the largest result", c->name, op, big > 0 ? worst / big : worst);
      free(d), free(w), free(g), free(o);
      cl_backend_destroy(wino);
    }
  }
  cl_backend_destroy(def), cl_backend_destroy(gemm), cl_backend_destroy(off);
  return ctest_done("test_cpu_wino_rule");
}
