/*
 * cpu/cpu_winograd.c -- Winograd convolutions for the CPU backend: fewer
 * products than im2col + GEMM for 3 x 3 and 5 x 5 kernels (stride 1, "same"
 * padding, dilation 1, no groups). The arithmetic is float32 whatever the
 * storage: float16 and bfloat16 activations are converted as an image is
 * padded, and a forward's output is rounded once, as it is stored.
 *
 * F(m x m, r x r) computes an m x m output tile from an n x n input tile
 * (n = m + r - 1) as Y = A^T [ (G g G^T) .* (B^T d B) ] A: per tile and
 * channel pair n^2 products instead of m^2 r^2. Over channels the
 * elementwise stage is n^2 GEMMs, one per tile element e:
 *   M[e][K x T] = U[e][K x C] V[e][C x T]
 * with U = G w G^T (the filters), V = B^T d B (T input tiles), then the
 * output transform A^T M A per tile. The GEMMs run on the backend's own
 * kernel (cl_cpu_sgemm), U[e] stored in its slivers (cl_cpu_sgemm_panels)
 * or, where the products are timed among tiles, as its transpose. Forms
 * (matrices from the Cook-Toom construction with points 0, 1, -1, 2, -2
 * (and 1/2, -1/2 for F(4x4,5x5)) and infinity; derived exactly in
 * rationals and checked to reproduce correlation, see doc/speed.md):
 *   F(2x2,3x3): 16 products per tile against 36 (2.25x fewer);
 *   F(4x4,3x3): 36 against 144 (4x), larger float32 error;
 *   F(2x2,5x5): 36 against 100 (2.8x);
 *   F(4x4,5x5): 64 against 400 (6.25x), float32 error like F(4x4,3x3)'s;
 *   F(6x6,3x3): 64 against 324 (5.06x), on F(4x4,5x5)'s points, its error
 *   up to four times F(4x4,3x3)'s (test_backend_ops: 2.4e-5 of the largest
 *   result on one backward data case).
 * Backward data is the forward convolution of dy with the filters flipped
 * and transposed (stride 1, odd kernel, "same" padding), so it runs the
 * same code, the flip done in the filter transform. Backward filter is the
 * same product's gradient: dU[e] = sum over tiles of (A dY A^T)[e] V[e]^T,
 * then dw += G^T dU G (wgrad_run below).
 *
 * Which algorithm runs, from CONVLSTM_CONV_ALGO as it was when the backend
 * was created (calls of WINO_MIN_FLOP or more; smaller ones always take
 * cpu_conv.c's paths): unset (or =rule), the default, Winograd where both
 * channel counts are WINO_MIN_CHANNELS or more (F(4x4,5x5); F(4x4,3x3), or
 * F(6x6,3x3) forward and backward filter where rule_six says it pays),
 * and for 5 x 5 of 16 and 64 in every direction (rule_runs),
 * cpu_conv.c's paths elsewhere: a fixed rule, so every process computes the
 * same bits; =gemm, cpu_conv.c's paths and no Winograd workspace;
 * =winograd F(2x2, r) for the kernel size r, =winograd4 F(4x4, r),
 * =winograd6 F(6x6,3x3) for 3 x 3 (F(4x4,5x5) for 5 x 5); =auto
 * (with F(2x2, r)), the first calls of each shape and
 * direction in a process alternate between the two, WINO_ROUNDS each, timed
 * in the process's CPU seconds, and the faster runs every later call (the
 * results of those first calls then differ in the last bits from one
 * process to another). Whenever Winograd may run, the workspace reported
 * (cpu_conv.c's conv_workspace) covers both algorithms and every form; read
 * once per backend, the variable cannot change between a plan and its
 * calls.
 *
 * The layout that makes the transforms cheap: every transform is a linear
 * combination of planes, each holding one tile element of a chunk's tiles
 * (or of a block of filter pairs) side by side, so it runs along contiguous
 * memory in vectors (cpu_wino_tmpl.h); an image is padded once and cut
 * into tiles with permutes, and output tiles are interleaved back the same
 * way. A chunk is WINO_TILES tiles, the GEMMs' width.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "cpu_clock.h" /* cl_cpu_process_seconds */
#include "cpu_kernels.h"
#include "../host/x86.h"   /* CL_CPU_X86 */

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WMAX = 8 }; /* largest tile side n */

typedef struct wino_form {
  int m, r, n;
  const char *name;
  float AT[6][WMAX], G[WMAX][5], BT[WMAX][WMAX];
} wino_form;

/* B^T of the eight points 0, 1, -1, 2, -2, 1/2, -1/2 and infinity: the
 * same for every form on them (F(4x4,5x5), F(6x6,3x3)) */
#define BT_8                                                                                      \
  {{-1, 0, 5.25f, 0, -5.25f, 0, 1, 0},                                                            \
   {0, 1, 1, -4.25f, -4.25f, 1, 1, 0},                                                            \
   {0, -1, 1, 4.25f, -4.25f, -1, 1, 0},                                                           \
   {0, 0.5f, 0.25f, -2.5f, -1.25f, 2, 1, 0},                                                      \
   {0, -0.5f, 0.25f, 2.5f, -1.25f, -2, 1, 0},                                                     \
   {0, 2, 4, -2.5f, -5, 0.5f, 1, 0},                                                              \
   {0, -2, 4, 2.5f, -5, -0.5f, 1, 0},                                                             \
   {0, -1, 0, 5.25f, 0, -5.25f, 0, 1}}

static const wino_form FORMS[5] = {
    {2, 3, 4, "winograd F(2x2,3x3)",
     {{1, 1, 1, 0}, {0, 1, -1, 1}},
     {{-1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}},
     {{-1, 0, 1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, -1, 0, 1}}},
    {4, 3, 6, "winograd F(4x4,3x3)",
     {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}},
     {{0.25f, 0, 0},
      {-1.0f / 6, -1.0f / 6, -1.0f / 6},
      {-1.0f / 6, 1.0f / 6, -1.0f / 6},
      {1.0f / 24, 1.0f / 12, 1.0f / 6},
      {1.0f / 24, -1.0f / 12, 1.0f / 6},
      {0, 0, 1}},
     {{4, 0, -5, 0, 1, 0},
      {0, -4, -4, 1, 1, 0},
      {0, 4, -4, -1, 1, 0},
      {0, -2, -1, 2, 1, 0},
      {0, 2, -1, -2, 1, 0},
      {0, 4, 0, -5, 0, 1}}},
    {2, 5, 6, "winograd F(2x2,5x5)",
     {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 1}},
     {{0.25f, 0, 0, 0, 0},
      {-1.0f / 6, -1.0f / 6, -1.0f / 6, -1.0f / 6, -1.0f / 6},
      {-1.0f / 6, 1.0f / 6, -1.0f / 6, 1.0f / 6, -1.0f / 6},
      {1.0f / 24, 1.0f / 12, 1.0f / 6, 1.0f / 3, 2.0f / 3},
      {1.0f / 24, -1.0f / 12, 1.0f / 6, -1.0f / 3, 2.0f / 3},
      {0, 0, 0, 0, 1}},
     {{4, 0, -5, 0, 1, 0},
      {0, -4, -4, 1, 1, 0},
      {0, 4, -4, -1, 1, 0},
      {0, -2, -1, 2, 1, 0},
      {0, 2, -1, -2, 1, 0},
      {0, 4, 0, -5, 0, 1}}},
    /* the points 0, 1, -1, 2, -2, 1/2, -1/2 and infinity */
    {4, 5, 8, "winograd F(4x4,5x5)",
     {{1, 1, 1, 1, 1, 1, 1, 0},
      {0, 1, -1, 2, -2, 0.5f, -0.5f, 0},
      {0, 1, 1, 4, 4, 0.25f, 0.25f, 0},
      {0, 1, -1, 8, -8, 0.125f, -0.125f, 1}},
     {{-1, 0, 0, 0, 0},
      {-2.0f / 9, -2.0f / 9, -2.0f / 9, -2.0f / 9, -2.0f / 9},
      {-2.0f / 9, 2.0f / 9, -2.0f / 9, 2.0f / 9, -2.0f / 9},
      {1.0f / 90, 1.0f / 45, 2.0f / 45, 4.0f / 45, 8.0f / 45},
      {1.0f / 90, -1.0f / 45, 2.0f / 45, -4.0f / 45, 8.0f / 45},
      {32.0f / 45, 16.0f / 45, 8.0f / 45, 4.0f / 45, 2.0f / 45},
      {32.0f / 45, -16.0f / 45, 8.0f / 45, -4.0f / 45, 2.0f / 45},
      {0, 0, 0, 0, 1}},
     BT_8},
    /* the same points: 64 products for 36 outputs (F(4x4,3x3): 36 for 16) */
    {6, 3, 8, "winograd F(6x6,3x3)",
     {{1, 1, 1, 1, 1, 1, 1, 0},
      {0, 1, -1, 2, -2, 0.5f, -0.5f, 0},
      {0, 1, 1, 4, 4, 0.25f, 0.25f, 0},
      {0, 1, -1, 8, -8, 0.125f, -0.125f, 0},
      {0, 1, 1, 16, 16, 0.0625f, 0.0625f, 0},
      {0, 1, -1, 32, -32, 0.03125f, -0.03125f, 1}},
     {{-1, 0, 0},
      {-2.0f / 9, -2.0f / 9, -2.0f / 9},
      {-2.0f / 9, 2.0f / 9, -2.0f / 9},
      {1.0f / 90, 1.0f / 45, 2.0f / 45},
      {1.0f / 90, -1.0f / 45, 2.0f / 45},
      {32.0f / 45, 16.0f / 45, 8.0f / 45},
      {32.0f / 45, -16.0f / 45, 8.0f / 45},
      {0, 0, 1}},
     BT_8},
};
#undef BT_8

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

/* CONVLSTM_CONV_ALGO: unset (or "rule") 4, Winograd where WINO_MIN_CHANNELS
 * says it pays; "gemm" 1 (Winograd off); "auto" 0 (timed per shape);
 * "winograd" 2; "winograd4" 3; "winograd6" 5. */
int cl_cpu_conv_algo_env(void) {
  const char *e = getenv("CONVLSTM_CONV_ALGO");
  if (!e || strcmp(e, "rule") == 0) return 4;
  if (strcmp(e, "gemm") == 0) return 1;
  if (strcmp(e, "auto") == 0) return 0;
  if (strcmp(e, "winograd") == 0) return 2;
  if (strcmp(e, "winograd4") == 0) return 3;
  if (strcmp(e, "winograd6") == 0) return 5;
  return 4;
}

/* The backend's forced algorithm (tests, benchmarks), else the variable as
 * it was when the backend was created. */
static int algo_env(const cl_backend *be) {
  const cl_cpu_ctx *ctx = (const cl_cpu_ctx *)be->context;
  return ctx->conv_algo ? ctx->conv_algo : ctx->conv_algo_env;
}

/* Below this many flops (2 N K C k^2 H W) a call never runs Winograd,
 * timed or forced by CONVLSTM_CONV_ALGO (only a backend's conv_algo, set by
 * the conformance test, forces it there): its transforms' fixed costs
 * dominate, and its workspace would grow small plans past the memory limits
 * that tests set just above them (a step under 40-64 KiB). */
#define WINO_MIN_FLOP 1e8

/* The default rule: Winograd (F(4x4,5x5), F(4x4,3x3)) where both the
 * channels in and the channels out are this many or more, in either
 * direction (backward data swaps them): its n^2 GEMMs then have work
 * enough. Measured on the step's shapes (doc/speed.md, one thread): 48 ->
 * 192 and 64 -> 256 ran 1.1-1.6x faster than the GEMM paths; 16 -> 192
 * (and back), 1 -> 256 and 64 -> 4 slower, 0.6-0.9x down to 0.2x. */
#define WINO_MIN_CHANNELS 32

/* The rule's second case, after F(4x4,5x5) came: 5 x 5 where both
 * channel counts are WINO_MIN_CHANNELS_5 or more and one of them
 * WINO_WIDE_5 or more (the 16-channel frames of issue 39's models into 4h
 * = 192 gates). Measured, one thread, ms, GEMM paths against F(4x4,5x5)
 * (doc/speed.md): 16 -> 192 at 16x16, batch 80, forward 24.3 / 13.6,
 * backward data 29.7 / 21.1; 16 -> 64 forward 5.1 / 2.5; 24 -> 96 11.2 /
 * 4.7; but 16 -> 16 at 32x32 forward 3.9 / 4.8, and 3 x 3 with 16
 * channels (16 -> 64, 16 -> 128 at 24x24) forward 0.79-0.85x. Backward
 * filter was left out (27.9 / 30.1 at 16 -> 192) until its transforms ran
 * channels last on shared chunks; then (2026-12-01, CPU ms, two runs):
 * 16 -> 192 27.7 / 18.8-21.6, 16 -> 64 12.7 / 7.7, 24 -> 96 28.0 / 17.0,
 * 64 -> 16 12.3-12.7 / 6.5-7.7, 16 -> 64 at 8 x 8 16.8 / 5.0-5.4, 16 ->
 * 128 at 64 x 64 28.5-37.6 / 20.1-30.6; 16 -> 16 at 32 x 32 still 4.4 /
 * 4.7. */
#define WINO_MIN_CHANNELS_5 16
#define WINO_WIDE_5 64

/* Whether the default rule runs Winograd for s (in any direction: backward
 * data swaps C and K, the rule is symmetric in them). */
static int rule_runs(const cl_conv_shape *s) {
  const int lo = s->C < s->K ? s->C : s->K, hi = s->C < s->K ? s->K : s->C;
  if (lo >= WINO_MIN_CHANNELS) return 1;
  return s->kh == 5 && lo >= WINO_MIN_CHANNELS_5 && hi >= WINO_WIDE_5;
}

/* Whether the rule's 3 x 3 form in direction dir is F(6x6,3x3): where its
 * tiles, padded, take at most 0.8 of F(4x4,3x3)'s products (the map a
 * multiple of 6, or near one) and 3 or more of them fit across and down.
 * Measured, one thread, ms, F(4x4,3x3) / F(6x6,3x3) forward, backward
 * data, backward filter (64 -> 256; doc/speed.md): 24 x 24 54.7 / 50.2,
 * 61.9 / 50.8, 55.3 / 51.2; 18 x 18, 30 x 30, 36 x 36, 48 x 48 0.77-0.97x;
 * but 12 x 12 (2 tiles across) 1.19x / 1.21x / 0.93x, and where F(6x6,3x3)
 * pads more (16, 32, 40, 64) 1.09-1.50x forward. Not backward data: its
 * sums over the 4h gate channels reached 2.4e-5 of the largest result
 * (256 -> 64 at 24 x 24), past the 2e-5 test_backend_ops holds every
 * algorithm to (F(4x4,3x3): 1.4e-5). */
static int rule_six(const cl_conv_shape *s, int dir) {
  const int t6 = ((s->H + 5) / 6) * ((s->W + 5) / 6), t4 = ((s->H + 3) / 4) * ((s->W + 3) / 4);
  return dir != 1 && s->H >= 18 && s->W >= 18 && 64.0 * t6 <= 0.8 * 36.0 * t4;
}

/* The form for s in direction dir (NULL: none handles it). */
static const wino_form *form_of(const cl_backend *be, const cl_conv_shape *s, int dir) {
  if (cl_conv_groups(s) != 1 || s->dh != 1 || s->dw != 1 || s->kh != s->kw) return NULL;
  const cl_cpu_ctx *ctx = (const cl_cpu_ctx *)be->context;
  if (!ctx->conv_algo && ctx->conv_algo_env == 1) return NULL; /* off: no workspace */
  if (!ctx->conv_algo && 2.0 * s->N * s->K * s->C * s->kh * s->kw * s->H * s->W < WINO_MIN_FLOP)
    return NULL;
  const int env = algo_env(be);
  if (env == 4 && !rule_runs(s)) return NULL;
  if (s->kh == 3)
    return &FORMS[env == 5 || (env == 4 && rule_six(s, dir)) ? 4 : env >= 3 ? 1 : 0];
  if (s->kh == 5) return &FORMS[env >= 3 ? 3 : 2];
  return NULL;
}

/* The shape the Winograd code convolves: backward data swaps C and K. */
static cl_conv_shape dir_shape(const cl_conv_shape *s, int dir) {
  cl_conv_shape t = *s;
  if (dir == 1) t.C = s->K, t.K = s->C;
  return t;
}

/* The layout of one call's workspace: the filters' transform U (forward
 * and backward data), then one slice per thread (slice_of): a tag, V
 * (input tiles), M (products, or dy's transform), the GEMM's scratch and
 * tmp (the planes a transform works in, the filter pairs' blocks too). A
 * forward or backward data call of one chunk (small) shares one V and one
 * M after U; every backward filter shares one DY (M), one dU and its
 * images' dbias sums, each thread keeping its own V. */
typedef struct wino_plan {
  const wino_form *f;
  int th, tw, T1; /* tiles down, across, per image */
  int nb;         /* images per chunk */
  int T;          /* tiles per chunk, nb T1: the planes' length */
  int kb;         /* output channels per block of M (backward filter: a piece's) */
  int pieces;     /* backward filter: the pieces of kb channels a chunk (1 elsewhere) */
  int np;         /* filter pairs per block of the filter-side work */
  int P, Kp;      /* U[e]'s slivers of P output channels, Kp of them in all (K padded) */
  int small;      /* one chunk, split by channels and tile elements (small_*, wgrad_small_*) */
  size_t vs, ms;  /* floats from one tile element's planes of V, of M (or DY), to the next's */
  int threads;
  size_t off_v, off_m, off_du; /* small, dir 2: the shared V, M (or DY), backward filter's dU */
  size_t off_db;               /* dir 2: dbias, a chunk's images' sums, then the call's */
  size_t off_slices, v_bytes, m_bytes, scratch_bytes, tmp_bytes;
  size_t slice_bytes, total;
} wino_plan;

/* Tiles per chunk: the GEMMs' width. Measured on the 5x5 hidden half (48
 * -> 192, N 4, forward, before the permutes cut tiles): 64 tiles 3.9 ms,
 * 128 2.9, 256 2.8. Wider GEMMs pack each U[e] fewer times; WINO_M_BYTES
 * then bounds what the wider chunk holds. */
enum { WINO_TILES = 256, WINO_PAIRS = 256 };
/* cl_transform's channels turned channels last together */
enum { WINO_ROWS = 8 };
/* a slice's first cache line: its tag (wino_slice's chunk) */
enum { WINO_TAG_BYTES = 64 };
/* About the bytes of M (products, or dy's transform) a thread holds at
 * once, a core's L2 here (a block is rounded up to whole 12-row tiles, and
 * one image's tiles are the least a chunk holds). Tried at 2 MiB: the
 * plain stack's step ran 4-9 % slower (its 192 channels in four blocks)
 * for 1.3 MiB less peak. */
#define WINO_M_BYTES ((size_t)4 << 20)
/* About the bytes of V (every input channel's transform) a thread holds at
 * once. Backward data of the 5 x 5 hidden-to-gates layers reads 192 and 256
 * channels (4h): at 256 tiles a chunk its V was 12.6 MB a thread for the
 * plain stack's 48 <- 192. Bounded, one thread (ms, WINO_V_BYTES at 2, 4, 8,
 * 16 MiB, none): the plain stack's 48 <- 192 at 16x16 37.6, 31.2, 27.6,
 * 34.5, 34.9; the tutorial's 64 <- 256 at 24x24 (3 x 3) 122, 106, 81.5,
 * 86.2, 86.2. */
#define WINO_V_BYTES ((size_t)8 << 20)

/* The floats from one tile element's planes to the next's, for n floats of
 * them: whole cache lines, an odd count. A transform writes (or reads) the
 * n^2 elements of a vector of tiles at once, one plane apart; at the
 * steps' strides (48 or 192 channels of 64 tiles: 12 and 48 KiB) all of
 * them fell in one set of the 12-way L1 and evicted one another. */
static size_t plane_floats(size_t n) {
  const size_t lines = (n + 15) / 16;
  return (lines | 1) * 16;
}

/* The fewest chunks of at most nb images that hold per images, all of
 * one width (give or take an image). */
static int even_chunks(int per, int nb) {
  const int chunks = (per + nb - 1) / nb;
  return (per + chunks - 1) / chunks;
}

/* Backward filter's output channels a piece on a team of threads: dy's
 * transform and the GEMMs into dU go by pieces of them (wgrad_chunk_pieces),
 * one a thread, in whole 16-row tiles. Two a thread (64 of the tutorial's
 * 256 channels), the GEMMs of 64 rows took 1.2x the time of 128 rows'. */
static int wgrad_piece(int K, int team) {
  const int per = (K + team - 1) / team;
  return (per + 15) / 16 * 16;
}

static wino_plan plan_form(const cl_backend *be, const cl_conv_shape *s, int dir,
                           const wino_form *f) {
  wino_plan p;
  memset(&p, 0, sizeof p);
  p.f = f;
  if (!p.f || s->N < 1) return p;
  const cl_conv_shape t = dir_shape(s, dir);
  const int m = p.f->m, nn = p.f->n * p.f->n;
  p.th = (t.H + m - 1) / m, p.tw = (t.W + m - 1) / m, p.T1 = p.th * p.tw;
  const int team = be->n_threads < 1 ? 1 : be->n_threads;
  /* backward filter's threads share each chunk (wgrad_chunk_inputs) */
  p.threads = dir == 2 || team < t.N ? team : t.N;
  int per = dir == 2 ? t.N : (t.N + p.threads - 1) / p.threads;
  p.nb = WINO_TILES / p.T1 < 1 ? 1 : WINO_TILES / p.T1;
  /* backward filter's M, dy's transform, holds every channel (its GEMMs
   * sum over the tiles, so fewer tiles a chunk pack nothing twice; at 36
   * tiles a chunk the tutorial's 3x3 backward filter ran 1.25x slower).
   * V holds every input channel in every direction (WINO_V_BYTES). */
  const size_t plane1 = sizeof(float) * (size_t)nn * t.K * p.T1;
  const size_t vplane1 = sizeof(float) * (size_t)nn * t.C * p.T1;
  /* backward filter's DY is shared, each thread writing and reading its
   * pieces' planes (wgrad_chunk_pieces); its bound is the same on every team
   * (the chunks fix dw's sums). The plain stack's input halves (80 images,
   * 16 and 48 -> 192, 5 x 5) on a Zen 4 whose L3 the host's neighbours
   * share, bench_cpu_peak alternated, 4 MiB against 8: 48 -> 192 took
   * 23.3-24.8 ms against 24.1-34.9 on one thread (five runs), 13.5-26.7
   * against 15.0-24.2 on two (six, four under 14.1 against none); 16 ->
   * 192 11.6-14.7 against 11.5-20.5, and 7.3-18.7 against 9.2-17.7. On a
   * Zen 5 (two threads, best of three) 8 MiB had been 2-6 % ahead. */
  const size_t dy_bytes = WINO_M_BYTES;
  if (dir == 2 && p.nb > (int)(dy_bytes / plane1)) p.nb = (int)(dy_bytes / plane1);
  if (p.nb > (int)(WINO_V_BYTES / vplane1)) p.nb = (int)(WINO_V_BYTES / vplane1);
  if (p.nb < 1) p.nb = 1;
  if (p.nb > per) p.nb = per;
  /* backward filter's chunks an even number of images, whatever the team
   * (its dw then has the same bits on any): at 5 a chunk (the plain
   * stack's input halves), one of two threads transformed 3 and waited
   * 40 % longer than the other */
  if (dir == 2 && p.nb > 2) p.nb -= p.nb % 2;
  /* a thread's images in chunks of one width: the forecaster's 20 a
   * thread at 16 a chunk ran 16 and then 4 (a narrow GEMM, and no piece
   * left for a thread done early to take); as 10 and 10, forward of 40
   * images (16 and 48 -> 192, 5 x 5) on two threads, best of three, took
   * 2.67 -> 2.45 and 5.45 -> 5.04 ms */
  if (dir < 2) p.nb = even_chunks(per, p.nb);
  /* A batch that is one chunk (the hidden halves' few images), its M in
   * WINO_M_BYTES, is split by channels and tile elements (small_inputs)
   * where its images do not split evenly among the threads (never on one
   * thread; backward filter: always). Where they do, forward and backward
   * data keep each
   * thread on its own images, as the cell kernels keep theirs (image rows
   * in static blocks, cpu_cell.c): a thread transforms the h or dz its own
   * core wrote, and the cell kernel reads the gates its core summed. Alone,
   * the plain stack's hidden half (4 images, 48 -> 192) ran 3-22 % slower
   * that way (half-width GEMMs); in its step, on two threads with the
   * vCPUs far apart, 0.086-0.089 s against 0.095-0.098 in 7 rounds of 8
   * (1.64-1.79x one thread against 1.50-1.62x), the forecaster's
   * 0.093-0.095 against 0.100-0.102; near, 0.95-1.04x (doc/speed.md). */
  p.small = (dir == 2 || t.N % team != 0) && t.N * p.T1 <= WINO_TILES &&
            (size_t)t.N * plane1 <= WINO_M_BYTES && (size_t)t.N * vplane1 <= WINO_M_BYTES;
  if (p.small) p.nb = t.N, p.threads = team; /* fewer images than threads too */
  p.T = p.nb * p.T1;
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_of(be);
  /* U[e] in the slivers the GEMM kernels read (cl_cpu_sgemm_panels), or
   * where no tile can, transposed: one sliver of all K rows */
  p.P = dir == 2 ? 0 : cl_cpu_sgemm_panel_rows(kind, t.K, p.T, t.C);
  if (p.P == 0) p.P = t.K;
  p.Kp = (t.K + p.P - 1) / p.P * p.P;
  /* U (the filters' transform) first; backward filter has none */
  p.off_slices = dir == 2 ? 0 : round64(sizeof(float) * (size_t)nn * p.Kp * t.C);
  p.vs = plane_floats((size_t)t.C * p.T);
  p.v_bytes = round64(sizeof(float) * (size_t)nn * p.vs);
  /* forward and backward data: M holds the products of kb output channels
   * at a time, the channels cut into as few blocks (of whole slivers of
   * U[e], or 12-row register tiles) as keep it near WINO_M_BYTES
   * (backward filter: fewer tiles instead) */
  const size_t m_all = sizeof(float) * (size_t)nn * t.K * p.T;
  const int blocks = dir == 2 || p.small ? 1 : (int)((m_all + WINO_M_BYTES - 1) / WINO_M_BYTES);
  p.kb = (t.K + blocks - 1) / blocks;
  const int align = p.P < t.K ? p.P : 12; /* whole slivers of U[e], or 12-row tiles */
  if (blocks > 1) p.kb = (p.kb + align - 1) / align * align;
  if (dir == 2 && team > 1) p.kb = wgrad_piece(t.K, team);
  if (p.kb > t.K) p.kb = t.K;
  p.ms = plane_floats((size_t)p.kb * p.T);
  /* backward filter's DY: every piece's planes, one after another */
  p.pieces = dir == 2 ? (t.K + p.kb - 1) / p.kb : 1;
  p.m_bytes = round64(sizeof(float) * (size_t)nn * p.ms * (size_t)p.pieces);
  p.scratch_bytes = round64(dir == 2 ? cl_cpu_sgemm_scratch_bytes(kind, t.K, t.C, p.T)
                                     : cl_cpu_sgemm_scratch_bytes(kind, t.K, p.T, t.C));
  /* two sets of n^2 planes of T: an input tile's d and B^T d, or the
   * filters' r^2 + n r planes of np pairs, whichever is more; then an image
   * padded to whole tiles, and the 32 floats wino_tiles may read past */
  const size_t padded = (size_t)(p.th * m + p.f->n - m) * (p.tw * m + p.f->n - m) + 32;
  /* filter pairs a block: the filter-side transforms' planes as long as a
   * chunk's, and never short (at 32 pairs, two threads' tiles of the
   * hidden half, a transform call per plane cost more than its sums) */
  p.np = p.T > WINO_PAIRS ? p.T : WINO_PAIRS;
  const size_t pairs = (size_t)(p.f->r * p.f->r + p.f->n * p.f->r) * p.np;
  const size_t planes = 2 * (size_t)nn * p.T > pairs ? 2 * (size_t)nn * p.T : pairs;
  p.tmp_bytes = round64(sizeof(float) * (planes + padded));
  if (dir == 2) { /* cl_transform's image channels last, and its rows */
    const size_t rows = (size_t)WINO_ROWS * t.W;
    const size_t xs = (size_t)(p.th * m + p.f->n - m) * (p.tw * m + p.f->n - m) * t.C + rows;
    const size_t ds = (size_t)p.th * m * p.tw * m * t.K + rows;
    const size_t most = xs > ds ? xs : ds;
    if (sizeof(float) * most > p.tmp_bytes) p.tmp_bytes = round64(sizeof(float) * most);
  }
  if (p.small && dir < 2) /* shared, after U: V; backward filter's is each thread's own */
    p.off_v = p.off_slices, p.off_slices += p.v_bytes, p.v_bytes = 0;
  if (p.small || dir == 2) /* and M (or DY) */
    p.off_m = p.off_slices, p.off_slices += p.m_bytes, p.m_bytes = 0;
  if (dir == 2) { /* and the sum dU (n^2 K C), dbias's nb + 1 rows of K */
    p.off_du = p.off_slices, p.off_slices += round64(sizeof(float) * (size_t)nn * t.K * t.C);
    p.off_db = p.off_slices, p.off_slices += round64(sizeof(double) * (size_t)(p.nb + 1) * t.K);
  }
  p.slice_bytes = WINO_TAG_BYTES + p.v_bytes + p.m_bytes + p.scratch_bytes + p.tmp_bytes;
  p.total = p.off_slices + p.slice_bytes * (size_t)p.threads + 64;
  return p;
}

static wino_plan plan_of(const cl_backend *be, const cl_conv_shape *s, int dir) {
  return plan_form(be, s, dir, form_of(be, s, dir));
}

/* Thread tid's slice of the workspace (base: its 64-byte aligned start),
 * carved as plan_form sized it. M: backward filter's DY. */
typedef struct wino_slice {
  int *chunk; /* backward filter: the chunk whose x V holds now */
  float *V, *M;
  void *scratch;
  float *tmp;
} wino_slice;

static wino_slice slice_of(const wino_plan *p, char *base, int tid) {
  char *at = base + p->off_slices + p->slice_bytes * tid;
  wino_slice sl;
  sl.chunk = (int *)at, at += WINO_TAG_BYTES;
  sl.V = (float *)at, at += p->v_bytes;
  sl.M = (float *)at, at += p->m_bytes;
  sl.scratch = at, at += p->scratch_bytes;
  sl.tmp = (float *)at;
  return sl;
}

/* The largest over the forms CONVLSTM_CONV_ALGO may pick for s, whatever it
 * says now: the plan's workspace is sized once and the variable (or the
 * timed choice) decides at each call. */
size_t cl_cpu_wino_workspace(const cl_backend *be, const cl_conv_shape *s, int dir) {
  const wino_form *f = form_of(be, s, dir);
  if (!f) return 0;
  size_t b = plan_form(be, s, dir, f).total;
  if (s->kh == 3 || s->kh == 5) {
    const int two = s->kh == 3 ? 0 : 2; /* F(2x2, r), then F(4x4, r) */
    size_t b2 = plan_form(be, s, dir, &FORMS[two]).total;
    size_t b4 = plan_form(be, s, dir, &FORMS[two + 1]).total;
    b = b4 > b2 ? b4 : b2;
    if (s->kh == 3) { /* and F(6x6,3x3) */
      const size_t b6 = plan_form(be, s, dir, &FORMS[4]).total;
      if (b6 > b) b = b6;
    }
  }
  return b;
}

int cl_cpu_wino_chunks_of(const cl_backend *be, const cl_conv_shape *s, int dir, int m,
                          cl_cpu_wino_chunks *out) {
  memset(out, 0, sizeof *out);
  if ((s->kh != 3 && s->kh != 5) || (m != 2 && m != 4 && (m != 6 || s->kh != 3)) ||
      !form_of(be, s, dir))
    return 0;
  const wino_plan p =
      plan_form(be, s, dir, &FORMS[m == 6 ? 4 : (s->kh == 5) * 2 + (m == 4)]);
  out->n = p.f->n, out->images = p.nb, out->tiles = p.T1, out->kb = p.kb;
  out->threads = p.threads, out->small = p.small;
  out->P = p.P < dir_shape(s, dir).K ? p.P : 0; /* P = K: transposed */
  return 1;
}

/* ---- the transforms, plane by plane ------------------------------------ */

/* A transform's matrix (R x C) as its nonzero coefficients, row by row:
 * row i has nz[i] of them, c[i][l] in column at[i][l]. */
typedef struct wino_side {
  int rows, cols;
  int nz[WMAX], at[WMAX][WMAX];
  float c[WMAX][WMAX];
  int form, role; /* FORMS[form]'s matrix in role (wino_role) */
} wino_side;

/* A form's matrices, as its transforms use them. */
typedef enum wino_role { ROLE_BT, ROLE_AT, ROLE_A, ROLE_G, ROLE_GT, ROLES } wino_role;

/* The matrix of f in role. */
static wino_side side_of(const wino_form *f, wino_role role) {
  const int n = f->n, m = f->m, r = f->r;
  const float *x = role == ROLE_BT ? &f->BT[0][0] : role <= ROLE_A ? &f->AT[0][0] : &f->G[0][0];
  const int rows[] = {n, m, n, n, r}, cols[] = {n, n, m, r, n};
  const int si[] = {WMAX, WMAX, 1, 5, 1}, sj[] = {1, 1, WMAX, 1, 5};
  wino_side M;
  memset(&M, 0, sizeof M);
  M.rows = rows[role], M.cols = cols[role], M.form = (int)(f - FORMS), M.role = role;
  for (int i = 0; i < M.rows; i++)
    for (int j = 0; j < M.cols; j++) {
      const float v = x[i * si[role] + j * sj[role]];
      if (v != 0.0f) M.at[i][M.nz[i]] = j, M.c[i][M.nz[i]++] = v;
    }
  return M;
}

#define CL_SIMD 1
#include "cpu_simd.h"
#include "cpu_wino_tmpl.h" /* wino_2d_generic, wino_tiles_generic, ... */
#if CL_CPU_X86
#define CL_SIMD 512
#include "cpu_simd.h"
#include "cpu_wino_tmpl.h" /* wino_2d_avx512, ... */
#define CL_SIMD 256
#include "cpu_simd.h"
#include "cpu_wino_tmpl.h" /* wino_2d_avx2, ... */
#endif

/* The transforms' loops of one instruction set. */
typedef void (*wino_t2d_fn)(float *d, size_t ds, const float *s, size_t rs, size_t ss,
                            const wino_side *M, size_t len);
typedef struct wino_fns {
  wino_t2d_fn t2d, fixed[5][ROLES]; /* fixed: per form and role, or NULL */
  void (*gather)(float *g, size_t gs, const float *s, size_t ss, int rr, int rev, size_t n);
  void (*tiles)(float *D, size_t ds, const float *P, int Wp, int n, int m, int th, int tw);
  void (*untile)(float *img, int H, int W, const float *Y, size_t ys, int m, int th, int tw,
                 float bk, int acc);
  void (*chlast)(float *d, size_t pix, const float *s, size_t rs, int g, int W, double (*sum)[4]);
} wino_fns;

#define FIXED_OF(ISA)                                                                             \
  {{NULL}, {wino_2d_43_bt_##ISA, wino_2d_43_at_##ISA, wino_2d_43_a_##ISA, wino_2d_43_g_##ISA,     \
            wino_2d_43_gt_##ISA},                                                                  \
   {NULL}, {wino_2d_45_bt_##ISA, wino_2d_45_at_##ISA, wino_2d_45_a_##ISA, wino_2d_45_g_##ISA,     \
            wino_2d_45_gt_##ISA},                                                                  \
   {wino_2d_45_bt_##ISA, wino_2d_63_at_##ISA, wino_2d_63_a_##ISA, wino_2d_63_g_##ISA,             \
    wino_2d_63_gt_##ISA}}

static wino_fns isa_fns(const cl_backend *be) {
  static const wino_fns generic = {wino_2d_generic, FIXED_OF(generic), wino_gather_generic,
                                   wino_tiles_generic, wino_untile_generic, wino_chlast_generic};
#if CL_CPU_X86
  static const wino_fns avx512 = {wino_2d_avx512, FIXED_OF(avx512), wino_gather_avx512,
                                  wino_tiles_avx512, wino_untile_avx512, wino_chlast_avx512};
  static const wino_fns avx2 = {wino_2d_avx2, FIXED_OF(avx2), wino_gather_avx2, wino_tiles_avx2,
                                wino_untile_avx2, wino_chlast_avx2};
  cl_cpu_gemm_kind isa = cl_cpu_isa_of(be);
  if (isa == CL_CPU_GEMM_AVX512) return avx512;
  if (isa == CL_CPU_GEMM_AVX2) return avx2;
#endif
  (void)be;
  return generic;
}

static wino_fns fns_of(const cl_backend *be) {
  wino_fns f = isa_fns(be);
  if (((const cl_cpu_ctx *)be->context)->wino_generic) { /* the plain loops, for the tests */
    memset(f.fixed, 0, sizeof f.fixed);
    f.gather = wino_gather_generic, f.chlast = wino_chlast_generic;
    f.untile = wino_untile_generic;
  }
  return f;
}
#undef FIXED_OF

/* d = the transform of s by M's role (wino_2d), unrolled for M's form where
 * one is compiled. */
static void t2d(const wino_fns *fns, float *d, size_t ds, const float *s, size_t rs, size_t ss,
                const wino_side *M, size_t len) {
  const wino_t2d_fn fx = fns->fixed[M->form][M->role];
  (fx ? fx : fns->t2d)(d, ds, s, rs, ss, M, len);
}

/* U[e][k / P][c][k % P] = (G g G^T)[e], g = w[k][c] (dir 0) or, for
 * backward data, w[c][k] flipped (a pair of the transposed shape t), zero
 * for the padding k >= K, for the len pairs from p0 (at most p->np) in U's
 * order, in tmp: g's r^2 planes, then G g's n r. U[e] is laid out as the
 * GEMM kernels read op(A) = its [K x C] (cl_cpu_sgemm_panels: slivers of P
 * output channels), or transposed (P = K) where no tile reads slivers;
 * never [K x C] row by row: packing that took 8 x 8 transposes of 2 MB of
 * planes at every GEMM, as long as the products on two threads of the
 * hidden half. */
static void filter_transform(const wino_fns *fns, const wino_plan *p, const cl_conv_shape *t,
                             int dir, const float *w, float *U, size_t p0, size_t len,
                             float *tmp) {
  const wino_form *f = p->f;
  const int r = f->r, rr = r * r;
  const size_t P = (size_t)p->P, KC = (size_t)p->Kp * t->C, np = (size_t)p->np;
  float *g = tmp;
  /* runs of one c within a sliver: their k's w[k][c] lie C rr floats
   * apart (dir 0); t's pair (k, c) is the layer's (c, k), t->K its C: rr
   * apart, flipped */
  const size_t ss = dir == 0 ? (size_t)t->C * rr : (size_t)rr;
  for (size_t q = 0, u = p0; q < len;) {
    const size_t c = u % (P * t->C) / P, i = u % P, k = u / (P * t->C) * P + i;
    const size_t n = P - i < len - q ? P - i : len - q;
    const size_t real = k >= (size_t)t->K ? 0 : t->K - k < n ? t->K - k : n;
    if (real)
      fns->gather(g + q, np, w + (dir == 0 ? k * t->C + c : c * t->K + k) * rr, ss, rr, dir != 0,
                  real);
    for (int e = 0; real < n && e < rr; e++)
      memset(g + (size_t)e * np + q + real, 0, sizeof(float) * (n - real));
    q += n, u += n;
  }
  const wino_side Gs = side_of(f, ROLE_G);
  t2d(fns, U + p0, KC, g, r * np, np, &Gs, len); /* G g G^T */
}

/* V[e][c][q] = (B^T d B)[e] for the tiles of images n0 .. n0+nb-1 (q =
 * image-in-chunk T1 + tile), d read from x with zeros outside the image. */
static void input_transform(const wino_fns *fns, const wino_plan *p, const cl_conv_shape *t,
                            const void *x, int c0, int c1, int n0, int nb, float *V,
                            float *tmp) {
  const wino_form *f = p->f;
  const int n = f->n, m = f->m, pad = (f->r - 1) / 2, H = t->H, W = t->W, nn = n * n;
  const size_t T = (size_t)p->T, len = (size_t)nb * p->T1;
  float *D = tmp, *P = tmp + 2 * nn * T;
  const int Hp = p->th * m + n - m, Wp = p->tw * m + n - m;
  const wino_side Bs = side_of(f, ROLE_BT);
  /* the border, and beyond a cropped tile: each image below overwrites
   * only its own H x W inside it */
  memset(P, 0, sizeof(float) * Hp * Wp);
  for (int c = c0; c < c1; c++) {
    for (int b = 0; b < nb; b++) {
      const size_t img = ((size_t)(n0 + b) * t->C + c) * H * W;
      /* the next plane this loop reads, fetched while this one's tiles are
       * cut: x comes from L3 or memory, and its copy had waited on it */
      const size_t next = b + 1 < nb ? img + (size_t)t->C * H * W
                                     : ((size_t)n0 * t->C + c + 1) * H * W;
      for (int l = 0; t->dtype == CL_F32 && (b + 1 < nb || c + 1 < c1) && l < H * W; l += 16)
        __builtin_prefetch((const float *)x + next + l);
      cl_cpu_load_rows(t->dtype, x, img, W, P + pad * Wp + pad, Wp, W, H);
      fns->tiles(D + (size_t)b * p->T1, T, P, Wp, n, m, p->th, p->tw);
    }
    t2d(fns, V + (size_t)c * T, p->vs, D, n * T, T, &Bs, len); /* B^T d B */
  }
}

/* y[k] (+)= A^T M A + bias over the chunk's tiles, cropped to H x W, for
 * the kn channels from k0, whose products M holds (a plane of T per
 * channel from k0's, tile element e's ms floats after e - 1's). */
static void output_transform(const wino_fns *fns, const wino_plan *p, const cl_conv_shape *t,
                             const float *M, size_t ms, int k0, int kn, const float *bias,
                             int accumulate, cl_dtype yt, void *y, int n0, int nb, float *tmp) {
  const wino_form *f = p->f;
  const int n = f->n, m = f->m, H = t->H, W = t->W;
  const size_t T = (size_t)p->T, len = (size_t)nb * p->T1;
  float *Y = tmp, *img = tmp + 2 * (size_t)n * n * T; /* img: where the tiles' image was */
  const wino_side As = side_of(f, ROLE_AT);
  for (int k = k0; k < k0 + kn; k++) {
    /* The next channel's planes of y, which a hidden half adds onto, fetched
     * while this channel's A^T M A runs: they were written by the input
     * half before the time loop and are in L3 or memory by now, and untile
     * had waited on them (11 % of the plain stack's step; 0.95x the step's
     * time with this, one thread, doc/speed.md). */
    for (int b = 0; accumulate && yt == CL_F32 && k + 1 < k0 + kn && b < nb; b++) {
      const float *next = (const float *)y + ((size_t)(n0 + b) * t->K + k + 1) * H * W;
      for (int l = 0; l < H * W; l += 16) __builtin_prefetch(next + l, 1);
    }
    t2d(fns, Y, T, M + (size_t)(k - k0) * T, n * ms, ms, &As, len); /* A^T M A */
    const float bk = bias ? bias[k] : 0.0f;
    for (int b = 0; b < nb; b++) {
      const size_t at = ((size_t)(n0 + b) * t->K + k) * H * W;
      if (yt == CL_F32) {
        fns->untile((float *)y + at, H, W, Y + (size_t)b * p->T1, T, m, p->th, p->tw, bk,
                    accumulate);
        continue;
      }
      /* half storage: the image in float32, rounded once (+ y's own) */
      fns->untile(img, H, W, Y + (size_t)b * p->T1, T, m, p->th, p->tw, bk, 0);
      cl_cpu_store(yt, img, y, at, (size_t)H * W, accumulate);
    }
  }
}

/* One call's operands, shared by the team's threads: dir 0 forward, 1
 * backward data (x is dy, y is dx), 2 backward filter; c0, nc: backward
 * filter's chunk, its first image and its images. */
typedef struct wino_job {
  const cl_backend *be;
  const wino_plan *p;
  const cl_conv_shape *t;
  int dir, accumulate;
  const void *x, *dy; /* in the shape's dtype */
  const float *w, *bias;
  float *U;
  void *y; /* forward: the dtype; backward data: float32 */
  float *dw, *dbias;
  float *dU; /* backward filter: the sum over the chunks */
  char *base;
  int c0, nc;
} wino_job;

/* Me (tile element e's plane of M) = U[e]^T V[e] for the kn output
 * channels from k0 over the chunk's first len tiles. */
static void element_products(const wino_job *j, long long e, int k0, int kn, int len,
                             const float *V, float *Me, void *scratch) {
  const cl_conv_shape *t = j->t;
  const wino_plan *p = j->p;
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_of(j->be);
  const float *U = j->U + (size_t)e * p->Kp * t->C, *Ve = V + (size_t)e * p->vs;
  if (p->P == t->K) /* transposed */
    cl_cpu_sgemm(kind, 1, 0, kn, len, t->C, 1.0f, U + k0, t->K, Ve, p->T, 0.0f, Me, p->T, scratch);
  else /* k0 a whole number of slivers (plan_form's kb) */
    cl_cpu_sgemm_panels(kind, p->P, kn, len, t->C, 1.0f, U + (size_t)k0 * t->C, Ve, p->T, 0.0f,
                        Me, p->T, scratch);
}

/* y (+)= A^T M A + bias for the kn channels from k0 of the nb images from
 * n0 (output_transform), y in the call's output type. */
static void outputs(const wino_job *j, const wino_fns *fns, const float *M, size_t ms, int k0,
                    int kn, int n0, int nb, float *tmp) {
  output_transform(fns, j->p, j->t, M, ms, k0, kn, j->bias, j->accumulate,
                   j->dir == 0 ? j->t->dtype : CL_F32, j->y, n0, nb, tmp);
}

/* y (+)= the output channels [k0, k1) of the chunk of nb images from n0
 * whose input transform V holds: kb channels at a time, their n^2 GEMMs
 * into M, then the output transform, in the thread's slice sl. */
static void products(const wino_job *j, const wino_fns *fns, const float *V, int k0, int k1, int n0,
                     int nb, wino_slice sl) {
  const wino_plan *p = j->p;
  const int nn = p->f->n * p->f->n, len = nb * p->T1;
  for (int kb0 = k0; kb0 < k1; kb0 += p->kb) {
    const int kn = k1 - kb0 < p->kb ? k1 - kb0 : p->kb;
    for (int e = 0; e < nn; e++)
      element_products(j, e, kb0, kn, len, V, sl.M + (size_t)e * p->ms, sl.scratch);
    outputs(j, fns, sl.M, p->ms, kb0, kn, n0, nb, sl.tmp);
  }
}

/* Images [n0, n1) in chunks of p->nb, in thread tid's slice of the
 * workspace: one piece of cl_cpu_pieces, taken by whichever thread is free
 * (an image's outputs do not depend on the others in its chunk:
 * test_cpu_pieces). */
static void run_images(void *arg, long long n0, long long n1, int tid) {
  const wino_job *j = arg;
  const wino_plan *p = j->p;
  const wino_slice sl = slice_of(p, j->base, tid);
  const wino_fns fns = fns_of(j->be);
  for (int c0 = (int)n0; c0 < (int)n1; c0 += p->nb) {
    const int nb = (int)n1 - c0 < p->nb ? (int)n1 - c0 : p->nb;
    input_transform(&fns, p, j->t, j->x, 0, j->t->C, c0, nb, sl.V, sl.tmp);
    products(j, &fns, sl.V, 0, j->t->K, c0, nb, sl);
  }
}


/* One chunk (p->small), in three regions after the filter transform: the
 * threads transform their blocks of input channels into the shared V
 * (small_inputs), compute their tile elements' GEMMs over every tile and
 * channel into the shared M (small_products), then their blocks of output
 * channels' output transforms (small_outputs). Split by output channels
 * instead, each thread packed all of V for its GEMMs: on two threads the
 * hidden half's backward data ran 1.55x faster than on one. */
static void small_inputs(void *arg, long long c0, long long c1, int tid) {
  const wino_job *j = arg;
  const wino_fns fns = fns_of(j->be);
  float *V = (float *)(j->base + j->p->off_v);
  input_transform(&fns, j->p, j->t, j->x, (int)c0, (int)c1, 0, j->t->N, V,
                  slice_of(j->p, j->base, tid).tmp);
}

static void small_products(void *arg, long long e0, long long e1, int tid) {
  const wino_job *j = arg;
  const float *V = (const float *)(j->base + j->p->off_v);
  float *M = (float *)(j->base + j->p->off_m);
  void *scratch = slice_of(j->p, j->base, tid).scratch;
  for (long long e = e0; e < e1; e++)
    element_products(j, e, 0, j->t->K, j->p->T, V, M + e * j->p->ms, scratch);
}

static void small_outputs(void *arg, long long k0, long long k1, int tid) {
  const wino_job *j = arg;
  const wino_fns fns = fns_of(j->be);
  const float *M = (const float *)(j->base + j->p->off_m);
  const size_t T = (size_t)j->p->T;
  if (k1 <= k0) return;
  outputs(j, &fns, M + k0 * T, j->p->ms, (int)k0, (int)(k1 - k0), 0, j->t->N,
          slice_of(j->p, j->base, tid).tmp);
}

/* ---- backward filter ---------------------------------------------------
 * The gradient of Y = A^T [U .* V] A with respect to U is, per tile,
 * (A dY A^T) .* V: so dU[e] (K x C) = the sum over tiles of DY[e] V[e]^T,
 * n^2 GEMMs whose inner dimension is the tiles (the long one), and dw =
 * G^T dU G per filter pair. dY: the tile's m x m output gradients, zeros
 * past the image. */

/* Backward filter's operands, channels last: out[e plane + q cn + c] = (S d S^T)[e],
 * d the nt x nt window of tile q (image-in-chunk T1 + tile) of channel c0
 * + c, c < cn, of the nb images from n0 (src: C channels of the shape's
 * dtype, zeros past its border `pad` and past its last tile). Each image is
 * turned channels last once ([y][x][c]), so that a tile's element is cn
 * floats side by side and the transform runs along them. The GEMMs then
 * read both operands by rows (op(A) = DY^T copied in runs, B = V as it
 * is): planes [e][c][q] made every GEMM transpose both, nt^2 / m^2 (dy's)
 * and nt^2 (x's) times the images they come from. dbias (may be NULL) +=
 * each channel's sum over the images, in double, image by image, in four
 * chains (one chain's add latency was a few per cent of a step). */
static void cl_transform(const wino_fns *fns, const wino_plan *p, const cl_conv_shape *t,
                         const wino_side *S, int nt, int pad, const void *src, int C, int c0,
                         int cn, int n0, int nb, float *out, size_t plane, double *dbias,
                         float *tmp) {
  const int m = p->f->m, H = t->H, W = t->W;
  const int Hq = p->th * m + nt - m, Wq = p->tw * m + nt - m;
  const size_t pix = (size_t)cn;
  float *Pc = tmp, *rows = Pc + (size_t)Hq * Wq * pix;
  /* no border to clear when the tiles cover the image exactly (dy's); once
   * a call: each image overwrites only its own H x W pixels */
  if (pad > 0 || Hq != H || Wq != W) memset(Pc, 0, sizeof(float) * Hq * Wq * pix);
  for (int b = 0; b < nb; b++) {
    /* WINO_ROWS channels at a time, row by row: each pixel's channels
     * then go out side by side (one channel at a time, each of its stores
     * was a cache line of its own, pix floats from the last) */
    for (int cg = 0; cg < cn; cg += WINO_ROWS) {
      const int g = cn - cg < WINO_ROWS ? cn - cg : WINO_ROWS;
      double s[WINO_ROWS][4] = {{0.0}};
      for (int y = 0; y < H; y++) {
        const size_t img = ((size_t)(n0 + b) * C + c0 + cg) * H * W + (size_t)y * W;
        /* float32 rows are read where they lie (a copy of 64 bytes a row
         * was a memcpy call each, 3 % of a step); halves are widened */
        const float *at = (const float *)src + img;
        size_t rs = (size_t)H * W;
        if (t->dtype != CL_F32) {
          cl_cpu_load_rows(t->dtype, src, img, (size_t)H * W, rows, W, W, g);
          at = rows, rs = (size_t)W;
        }
        /* the next group's row y, fetched while this one's goes out: the
         * rows come from L3 or memory (x saved by forward, dy by the cell),
         * and their loads had held the transposes up */
        for (int k = cg + WINO_ROWS; t->dtype == CL_F32 && k < cn && k < cg + 2 * WINO_ROWS; k++)
          for (int x = 0; x < W; x += 16) __builtin_prefetch(at + (size_t)(k - cg) * rs + x);
        fns->chlast(Pc + ((size_t)(y + pad) * Wq + pad) * pix + cg, pix, at, rs, g, W,
                    dbias ? s : NULL);
      }
      for (int k = 0; dbias && k < g; k++)
        dbias[c0 + cg + k] += (s[k][0] + s[k][1]) + (s[k][2] + s[k][3]);
    }
    for (int q = 0; q < p->T1; q++) { /* its window's rows Wq pixels of cn floats apart */
      const int ty = q / p->tw, tx = q % p->tw;
      t2d(fns, out + ((size_t)b * p->T1 + q) * pix, plane,
          Pc + ((size_t)ty * m * Wq + (size_t)tx * m) * pix, Wq * pix, pix, S, pix);
    }
  }
}

/* dw[pair] += G^T dU G for the len pairs from p0 (at most p->np), in tmp:
 * (G^T dU)'s r n planes, then the r^2 of the result. */
static void filter_grad_transform(const wino_fns *fns, const wino_plan *p, const cl_conv_shape *t,
                                  const float *dU, float *dw, size_t p0, size_t len, float *tmp) {
  const wino_form *f = p->f;
  const int r = f->r, rr = r * r;
  const size_t KC = (size_t)t->K * t->C, np = (size_t)p->np;
  const wino_side Gt = side_of(f, ROLE_GT);
  float *dg = tmp;
  t2d(fns, dg, np, dU + p0, p->f->n * KC, KC, &Gt, len); /* G^T dU G */
  for (size_t q = 0; q < len; q++)
    for (int e = 0; e < rr; e++) dw[(p0 + q) * rr + e] += dg[e * np + q];
}

/* Backward filter, a chunk at a time in one region: the threads take
 * pieces of p->kb output channels as they come free. A thread's first
 * piece of a chunk transforms the chunk's x into its own V (each thread
 * its own: a V shared by the threads was written by one core and read by
 * the other, and the tutorial's 64 -> 256 backward filter ran 1.4x
 * faster on two threads than on one where forward ran 1.8x); every piece
 * transforms its channels of the chunk's dy into its own planes of DY
 * (summing that dy into the images' dbias rows, which wgrad_run adds in
 * image order), then dU[e]'s rows of those channels (+)= DY[e]^T V[e]
 * over the chunk's tiles. Each dU element is summed over the chunks in
 * their order whichever thread runs it, and over a chunk's tiles in their
 * order whatever rows its GEMM holds, so the bits are the same on any
 * team. Split by images (each thread its own dU, added at the end), a
 * core running slower for a while held the other at the end of the call
 * and the sum of the dU cost as much as a fifth of a one-chunk call on
 * two threads. */
static void wgrad_inputs(const wino_job *j, const wino_fns *fns, float *V, float *tmp) {
  const wino_plan *p = j->p;
  const cl_conv_shape *t = j->t;
  const wino_side Bs = side_of(p->f, ROLE_BT);
  cl_transform(fns, p, t, &Bs, p->f->n, (p->f->r - 1) / 2, j->x, t->C, 0, t->C, j->c0, j->nc, V,
               p->vs, NULL, tmp);
}

static void wgrad_piece_run(const wino_job *j, const wino_fns *fns, int piece, const float *V,
                            void *scratch, float *tmp) {
  const wino_plan *p = j->p;
  const cl_conv_shape *t = j->t;
  const int nn = p->f->n * p->f->n, k0 = piece * p->kb;
  const int cn = t->K - k0 < p->kb ? t->K - k0 : p->kb;
  const wino_side As = side_of(p->f, ROLE_A); /* A = (A^T)^T */
  float *DY = (float *)(j->base + p->off_m) + (size_t)piece * nn * p->ms;
  double *db = (double *)(j->base + p->off_db); /* row b: image c0 + b's sums */
  for (int b = 0; b < j->nc; b++) {
    if (j->dbias) memset(db + (size_t)b * t->K + k0, 0, sizeof(double) * cn);
    cl_transform(fns, p, t, &As, p->f->m, 0, j->dy, t->K, k0, cn, j->c0 + b, 1,
                 DY + (size_t)b * p->T1 * cn, p->ms, j->dbias ? db + (size_t)b * t->K : NULL, tmp);
  }
  const float beta = j->c0 == 0 ? 0.0f : 1.0f;
  for (int e = 0; e < nn; e++)
    cl_cpu_sgemm(cl_cpu_gemm_of(j->be), 1, 0, cn, t->C, j->nc * p->T1, 1.0f, DY + e * p->ms, cn,
                 V + e * p->vs, t->C, beta, j->dU + ((size_t)e * t->K + k0) * t->C, t->C,
                 scratch);
}

static void wgrad_chunk_pieces(void *arg, long long i0, long long i1, int tid) {
  const wino_job *j = arg;
  const wino_fns fns = fns_of(j->be);
  const wino_slice sl = slice_of(j->p, j->base, tid);
  if (*sl.chunk != j->c0) {
    wgrad_inputs(j, &fns, sl.V, sl.tmp);
    *sl.chunk = j->c0;
  }
  for (long long i = i0; i < i1; i++) wgrad_piece_run(j, &fns, (int)i, sl.V, sl.scratch, sl.tmp);
}

/* The filter pairs' work, T pairs a block, blocks over the team (each
 * thread in its slice's tmp): the filter transform (dir 0, 1) or, for
 * backward filter (dir 2), dw += G^T dU G. */

/* The filter pairs: U's (its padding too) or dw's */
static size_t pairs_of(const wino_job *j) {
  return (size_t)(j->dir < 2 ? j->p->Kp : j->t->K) * j->t->C;
}

static void pair_blocks(void *arg, long long b0, long long b1, int tid) {
  const wino_job *j = arg;
  const wino_plan *p = j->p;
  const size_t KC = pairs_of(j), np = (size_t)p->np;
  const wino_fns fns = fns_of(j->be);
  float *tmp = slice_of(p, j->base, tid).tmp;
  for (long long b = b0; b < b1; b++) {
    const size_t p0 = (size_t)b * np, len = KC - p0 < np ? KC - p0 : np;
    if (j->dir < 2)
      filter_transform(&fns, p, j->t, j->dir, j->w, j->U, p0, len, tmp);
    else
      filter_grad_transform(&fns, p, j->t, j->dU, j->dw, p0, len, tmp);
  }
}

static void run_pairs(const wino_job *j) {
  const long long KC = (long long)pairs_of(j);
  cl_cpu_pieces(j->p->threads, (KC + j->p->np - 1) / j->p->np, 1, pair_blocks, (void *)j);
}

/* A one-chunk region's channels in WINO_PIECES pieces a thread: a thread
 * done early takes the rest of a slower one's (cl_cpu_pieces); its tile
 * elements and filter pairs go one at a time, as their loops ran them. */
enum { WINO_PIECES = 4 };

static long long channel_piece(long long channels, int threads) {
  const long long pieces = (long long)WINO_PIECES * threads;
  return (channels + pieces - 1) / pieces;
}

/* dir 0: y (+)= conv(x, w) + bias; dir 1: dx (+)= conv_transpose(dy, w).
 * U, the filters' transform, starts the workspace; held: what the call
 * before left there (cl_cpu_wino_claim), U of this w when it matches. */
static void wino_run(cl_backend *be, const cl_conv_shape *s, int dir, const void *x,
                     const float *w, const float *bias, void *y, int accumulate, void *ws,
                     const cl_cpu_wino_u *held) {
  const wino_plan p = plan_of(be, s, dir);
  const cl_conv_shape t = dir_shape(s, dir);
  char *base = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  float *U = (float *)base;
  wino_job j = {be, &p, &t, dir, accumulate, x, NULL, w, bias, U, y, NULL, NULL, NULL, base, 0, 0};
  const cl_cpu_wino_u now = {ws, p.f, w, dir, s->K, s->C, p.P};
  if (!held || held->ws != ws || held->form != p.f || held->w != w || held->dir != dir ||
      held->K != s->K || held->C != s->C || held->P != p.P)
    run_pairs(&j);
  ((cl_cpu_ctx *)be->context)->wino_u = now;
  if (p.small) {
    cl_cpu_pieces(p.threads, t.C, channel_piece(t.C, p.threads), small_inputs, &j);
    cl_cpu_pieces(p.threads, (long long)p.f->n * p.f->n, 1, small_products, &j);
    cl_cpu_pieces(p.threads, t.K, channel_piece(t.K, p.threads), small_outputs, &j);
    return;
  }
  cl_cpu_pieces(p.threads, t.N, p.nb, run_images, &j);
}

/* dw += correlate(dy, x) through Winograd; dbias += the sum of dy, in
 * double image by image in their order (whichever thread summed each). */
static void wgrad_run(cl_backend *be, const cl_conv_shape *s, const void *x, const void *dy,
                      float *dw, float *dbias, void *ws) {
  const wino_plan p = plan_of(be, s, 2);
  char *base = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  wino_job j = {be, &p, s, 2, 0, x, dy, NULL, NULL, NULL, NULL, dw, dbias,
                (float *)(base + p.off_du), base, 0, 0};
  const double *img = (const double *)(base + p.off_db);
  double *sum = (double *)(base + p.off_db) + (size_t)p.nb * s->K;
  if (dbias) memset(sum, 0, sizeof(double) * s->K);
  for (int t = 0; t < p.threads; t++) *slice_of(&p, base, t).chunk = -1;
  for (; j.c0 < s->N; j.c0 += p.nb) {
    j.nc = s->N - j.c0 < p.nb ? s->N - j.c0 : p.nb;
    cl_cpu_pieces(p.threads, p.pieces, 1, wgrad_chunk_pieces, &j);
    for (int b = 0; dbias && b < j.nc; b++)
      for (int k = 0; k < s->K; k++) sum[k] += img[(size_t)b * s->K + k];
  }
  run_pairs(&j);
  for (int k = 0; dbias && k < s->K; k++) dbias[k] += (float)sum[k];
}

/* ---- choosing per shape, by timing ------------------------------------- */

enum { WINO_ROUNDS = 2, WINO_SLOTS = 128 };

typedef struct wino_slot {
  int used, dir, N, C, K, H, W, k;
  int calls, choice; /* choice: -1 while timing, 0 gemm, 1 winograd */
  double best[2];
} wino_slot;

static wino_slot wino_table[WINO_SLOTS]; /* only inside the critical section */

static wino_slot *slot_find(const cl_conv_shape *s, int dir) {
  unsigned h = (unsigned)s->C * 2654435761u ^ (unsigned)s->K * 40503u ^ (unsigned)s->H * 97u ^
               (unsigned)s->N * 31u ^ (unsigned)s->kh ^ (unsigned)dir << 7;
  for (int probe = 0; probe < WINO_SLOTS; probe++) {
    wino_slot *t = &wino_table[(h + (unsigned)probe) % WINO_SLOTS];
    if (!t->used) {
      *t = (wino_slot){1, dir, s->N, s->C, s->K, s->H, s->W, s->kh, 0, -1, {1e30, 1e30}};
      return t;
    }
    if (t->dir == dir && t->N == s->N && t->C == s->C && t->K == s->K && t->H == s->H &&
        t->W == s->W && t->k == s->kh)
      return t;
  }
  return NULL;
}

/* The algorithm of s in dir: CONVLSTM_CONV_ALGO's, else the table's (1
 * Winograd, 0 GEMM, -1 still timing). With timed (a call about to run), a
 * shape still being timed alternates the two (1 Winograd) and *timed is its
 * slot, to record the call's time in. */
static int choice_of(const cl_backend *be, const cl_conv_shape *s, int dir, wino_slot **timed) {
  if (timed) *timed = NULL;
  const int env = algo_env(be);
  if (env) return env >= 2;
  int choice = 0;
#ifdef _OPENMP
#pragma omp critical(cl_wino_tune)
#endif
  {
    wino_slot *t = slot_find(s, dir);
    if (t) choice = t->choice;
    if (t && choice < 0 && timed) {
      choice = t->calls++ % 2;
      *timed = t;
    }
  }
  return choice;
}

static void record(wino_slot *t, int choice, double seconds) {
#ifdef _OPENMP
#pragma omp critical(cl_wino_tune)
#endif
  {
    if (seconds < t->best[choice]) t->best[choice] = seconds;
    if (t->choice < 0 && t->calls >= 2 * WINO_ROUNDS && t->best[0] < 1e30 && t->best[1] < 1e30)
      t->choice = t->best[1] < t->best[0];
  }
}

int cl_cpu_wino_chosen(const cl_backend *be, const cl_conv_shape *s, int dir) {
  if (!form_of(be, s, dir)) return 0;
  return choice_of(be, s, dir, NULL);
}

const char *cl_cpu_wino_name(const cl_backend *be, const cl_conv_shape *s, int dir) {
  const wino_form *f = form_of(be, s, dir);
  return f ? f->name : "";
}

/* The algorithm of this call: 1 Winograd (run cl_cpu_wino_conv), 0 the
 * GEMM paths; tk then times the call between here and cl_cpu_wino_done. */
int cl_cpu_wino_pick(const cl_backend *be, const cl_conv_shape *s, int dir, const void *ws,
                     cl_cpu_wino_ticket *tk) {
  memset(tk, 0, sizeof *tk);
  if (!form_of(be, s, dir) || s->N < 1 || !ws) return 0;
  wino_slot *timed;
  tk->use = choice_of(be, s, dir, &timed);
  tk->slot = timed;
  if (timed) tk->t0 = cl_cpu_process_seconds();
  return tk->use;
}

void cl_cpu_wino_done(const cl_cpu_wino_ticket *tk) {
  if (tk->slot) record((wino_slot *)tk->slot, tk->use, cl_cpu_process_seconds() - tk->t0);
}

cl_cpu_wino_u cl_cpu_wino_claim(cl_backend *be, const cl_conv_shape *s) {
  cl_cpu_ctx *ctx = be->context;
  cl_cpu_wino_u held = ctx->wino_u;
  memset(&ctx->wino_u, 0, sizeof ctx->wino_u);
  if (!s->same_w) memset(&held, 0, sizeof held);
  return held;
}

void cl_cpu_wino_conv(cl_backend *be, const cl_conv_shape *s, int dir, const void *x,
                      const float *w, const float *bias, void *y, int accumulate, void *ws,
                      const cl_cpu_wino_u *held) {
  wino_run(be, s, dir, x, w, bias, y, accumulate, ws, held);
}

void cl_cpu_wino_filter(cl_backend *be, const cl_conv_shape *s, const void *dy, const void *x,
                        float *dw, float *dbias, void *ws) {
  wgrad_run(be, s, x, dy, dw, dbias, ws);
}

/* backend.h's conv_algo: Winograd's form when it runs (or may still run,
 * while the shape is being timed: "gemm/..."), else "gemm" for cpu_conv.c's
 * im2col + GEMM and direct paths (float32 products, direct sums). */
const char *cl_cpu_conv_algo(cl_backend *be, const cl_conv_shape *s, int dir) {
  static _Thread_local char buf[64];
  int c = cl_cpu_wino_chosen(be, s, dir);
  if (c == 0) return "gemm";
  snprintf(buf, sizeof buf, "%s%s", c < 0 ? "gemm/" : "", cl_cpu_wino_name(be, s, dir));
  return buf;
}
