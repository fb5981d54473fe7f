/*
 * tests/c/test_cpu_wino_chunks.c -- how cpu_winograd.c's plan cuts a call
 * into chunks of images, checked by value against the bounds its comments
 * state (plan_form), on teams of 1 to 4 threads and both tile sizes:
 *  - a chunk holds at most 256 tiles (WINO_TILES), its V (every input
 *    channel's n^2 transformed planes) at most 8 MiB, and backward filter's
 *    DY (every output channel's) at most 4 MiB, unless one image alone is
 *    more; and it is the widest chunk within them;
 *  - backward filter's chunks hold an even number of images (1 or 2 where
 *    the bounds leave no more), the same on every team, so that its dw
 *    has the same bits on any team;
 *  - forward and backward data split the images among the threads, and a
 *    thread's images into the fewest chunks within the bounds, all of one
 *    width give or take an image;
 *  - a batch that fits one chunk (256 tiles, its M and V each in 4 MiB) is
 *    one chunk split by channels, on two threads or more (backward filter:
 *    on any), unless (forward and backward data) its images split evenly
 *    among the threads: then each thread its share of the images.
 * The instrument is the arithmetic of those bounds on the shape, written
 * here from the comments, not read from the plan.
 */
#include "cpu/cpu_kernels.h" /* cl_cpu_wino_chunks_of, cl_cpu_ctx */
#include "ctest.h"           /* CHECK, ctest_done */

#include <stdio.h>
#include <stdlib.h>

#define TILES 256
#define MIB ((size_t)1 << 20)

static cl_backend *backend(int team) {
  cl_backend *be = NULL;
  if (cl_backend_cpu_create(team, &be) != CL_OK) {
    fprintf(stderr, "test_cpu_wino_chunks: cannot create the cpu backend\n");
    exit(2);
  }
  be->n_threads = team; /* the plan only: no call runs */
  ((cl_cpu_ctx *)be->context)->conv_algo = 3; /* Winograd on every shape */
  return be;
}

static int min_i(int a, int b) { return a < b ? a : b; }

/* The most images a chunk may hold by its bounds: tiles, V, and (backward
 * filter) DY; at least one. */
static int widest(const cl_conv_shape *s, int dir, int n, int tiles) {
  const int C = dir == 1 ? s->K : s->C, K = dir == 1 ? s->C : s->K;
  const size_t plane = sizeof(float) * (size_t)n * n * tiles; /* one channel, one image */
  int most = TILES / tiles;
  most = min_i(most, (int)(8 * MIB / (plane * C)));
  if (dir == 2) most = min_i(most, (int)(4 * MIB / (plane * K)));
  return most < 1 ? 1 : most;
}

static int fits_one_chunk(const cl_conv_shape *s, int n, int tiles) {
  const size_t plane = sizeof(float) * (size_t)n * n * tiles * s->N;
  return s->N * tiles <= TILES && plane * s->C <= 4 * MIB && plane * s->K <= 4 * MIB;
}

static void check_case(const char *name, const cl_conv_shape *s, int m) {
  int filter_images = -1;
  for (int team = 1; team <= 4; team++) {
    cl_backend *be = backend(team);
    for (int dir = 0; dir < 3; dir++) {
      cl_cpu_wino_chunks k;
      char what[160];
      snprintf(what, sizeof what, "%s, F(%dx%d), dir %d, %d threads", name, m, m, dir, team);
      const int has = cl_cpu_wino_chunks_of(be, s, dir, m, &k);
      CHECK(has, "%s: a form", what);
      if (!has) continue;
      CHECK(k.n == m + s->kh - 1, "%s: tiles of %d, not %d", what, m + s->kh - 1, k.n);
      const int tiles = ((s->H + m - 1) / m) * ((s->W + m - 1) / m);
      CHECK(k.tiles == tiles, "%s: %d tiles an image, not %d", what, tiles, k.tiles);
      const int even = dir < 2 && s->N % team == 0;
      if ((team > 1 || dir == 2) && !even && fits_one_chunk(s, k.n, tiles)) {
        CHECK(k.small && k.images == s->N && k.threads == team,
              "%s: one chunk of %d images on %d threads, not %s %d on %d", what, s->N, team,
              k.small ? "one of" : "chunks of", k.images, k.threads);
        if (dir == 2) filter_images = filter_images < 0 ? k.images : filter_images;
        continue;
      }
      CHECK(!k.small, "%s: chunks, not one chunk split by channels", what);
      const int most = widest(s, dir, k.n, tiles);
      if (dir == 2) {
        int want = min_i(most, s->N);
        if (want > 2) want -= want % 2;
        CHECK(k.images == want, "%s: %d images a chunk (the widest even count within 256 tiles, "
                                "V in 8 MiB, DY in 4, %d), not %d", what, want, most, k.images);
        CHECK(k.threads == team, "%s: every thread on each chunk", what);
        if (filter_images < 0) filter_images = k.images;
        CHECK(k.images == filter_images, "%s: %d images a chunk as on other teams, not %d", what,
              filter_images, k.images);
      } else {
        const int threads = min_i(team, s->N);
        const int per = (s->N + threads - 1) / threads;
        const int cap = min_i(most, per), chunks = (per + cap - 1) / cap;
        const int want = (per + chunks - 1) / chunks;
        CHECK(k.threads == threads, "%s: %d threads, not %d", what, threads, k.threads);
        CHECK(k.images == want, "%s: %d of a thread's %d images a chunk (%d chunks within the "
                                "bounds' %d), not %d", what, want, per, chunks, most, k.images);
        CHECK(k.images <= most, "%s: %d images over the bounds' %d", what, k.images, most);
      }
    }
    cl_backend_destroy(be);
  }
}

int main(void) {
  typedef struct chunk_case {
    const char *name;
    cl_conv_shape s;
  } chunk_case;
  const chunk_case cases[] = {
      /* the steps' shapes (bench/cpu_shapes.tsv) */
      {"plain input half 16 -> 192, 5x5", {80, 16, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      {"plain input half 48 -> 192, 5x5", {80, 48, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      {"hidden half 48 -> 192, 5x5", {4, 48, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      {"forecaster 64 -> 192, 5x5", {40, 64, 16, 16, 192, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      {"tutorial 64 -> 256, 3x3", {100, 64, 24, 24, 256, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      /* DY's bound binds backward filter at 3 images (300 channels of 64
       * planes of 16 tiles: 1.2 MB an image), the even rule then at 2; the
       * plain input halves' 192 (0.79 MB) at 5, then 4 */
      {"DY bound 48 -> 300, 5x5", {80, 48, 16, 16, 300, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      /* V's at 3 images (600 channels), the even rule then at 2 */
      {"V bound 600 -> 16, 5x5", {12, 600, 16, 16, 16, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      /* one image's DY is over 4 MiB (8.6 MB): chunks of one */
      {"one image 8 -> 2100, 5x5", {3, 8, 16, 16, 2100, 5, 5, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      /* an odd batch that fits one chunk, and one that nearly does */
      {"one chunk of 5, 32 -> 32, 3x3", {5, 32, 8, 8, 32, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      {"odd batch 7, 32 -> 128, 3x3", {7, 32, 24, 24, 128, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      /* the one-chunk limit at its edge: F(4x4,3x3) on 8x8 maps is 4 tiles
       * an image, so 64 images are 256 tiles (one chunk) and 65 are not */
      {"one chunk edge 64, 32 -> 32, 3x3", {64, 32, 8, 8, 32, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}},
      {"one chunk edge 65, 32 -> 32, 3x3", {65, 32, 8, 8, 32, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0}},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    for (int m = 2; m <= 4; m += 2) check_case(cases[i].name, &cases[i].s, m);
  return ctest_done("test_cpu_wino_chunks");
}
