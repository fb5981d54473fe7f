/*
 * cpu/cpu_winograd.c -- Winograd convolutions for the CPU backend: fewer
 * products than im2col + GEMM for 3 x 3 and 5 x 5 kernels (float32, stride
 * 1, "same" padding, dilation 1, no groups).
 *
 * F(m x m, r x r) computes an m x m output tile from an n x n input tile
 * (n = m + r - 1) as Y = A^T [ (G g G^T) .* (B^T d B) ] A: per tile and
 * channel pair n^2 products instead of m^2 r^2. Over channels the
 * elementwise stage is n^2 GEMMs, one per tile element e:
 *   M[e][K x T] = U[e][K x C] V[e][C x T]
 * with U = G w G^T (the filters), V = B^T d B (T input tiles), then the
 * output transform A^T M A per tile. The GEMMs run on the backend's own
 * kernel (cl_cpu_sgemm). Forms (matrices from the Cook-Toom construction
 * with points 0, 1, -1, 2, -2 and infinity; derived exactly in rationals
 * and checked to reproduce correlation, see doc/speed.md):
 *   F(2x2,3x3): 16 products per tile against 36 (2.25x fewer);
 *   F(4x4,3x3): 36 against 144 (4x), larger float32 error;
 *   F(2x2,5x5): 36 against 100 (2.8x).
 * Backward data is the forward convolution of dy with the filters flipped
 * and transposed (stride 1, odd kernel, "same" padding), so it runs the
 * same code on a flipped copy of w.
 *
 * Which algorithm runs, from CONVLSTM_CONV_ALGO as it was when the backend
 * was created (calls of WINO_MIN_FLOP or more; smaller ones always take
 * cpu_conv.c's paths): unset or =gemm, cpu_conv.c's paths and no Winograd
 * workspace (the default: Winograd lost on every step shape measured here,
 * 3.4x to 47x, doc/speed.md); =winograd the Winograd form of the kernel size
 * (F(2x2,3x3) for 3 x 3), =winograd4 F(4x4,3x3) for 3 x 3; =auto, the first
 * calls of each shape and direction in a process alternate between the two,
 * WINO_ROUNDS each, timed in the process's CPU seconds, and the faster runs
 * every later call (the results of those first calls then differ in the
 * last bits from one process to another). Whenever Winograd may run, the
 * workspace reported (cpu_conv.c's conv_workspace) covers both algorithms
 * and every form; read once per backend, the variable cannot change between
 * a plan and its calls.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime under -std=c11 */
#include "cpu_clock.h" /* cl_cpu_process_seconds */
#include "cpu_kernels.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WMAX = 6 }; /* largest tile side n */

typedef struct wino_form {
  int m, r, n;
  const char *name;
  float AT[4][WMAX], G[WMAX][5], BT[WMAX][WMAX];
} wino_form;

static const wino_form FORMS[3] = {
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
};

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }

/* CONVLSTM_CONV_ALGO: unset or "gemm" 1 (Winograd off: it lost on every
 * step shape measured, doc/speed.md), "auto" 0 (timed per shape),
 * "winograd" 2, "winograd4" 3. */
int cl_cpu_conv_algo_env(void) {
  const char *e = getenv("CONVLSTM_CONV_ALGO");
  if (!e || strcmp(e, "gemm") == 0) return 1;
  if (strcmp(e, "auto") == 0) return 0;
  if (strcmp(e, "winograd") == 0) return 2;
  if (strcmp(e, "winograd4") == 0) return 3;
  return 1;
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

/* The form for s (NULL: none handles it). */
static const wino_form *form_of(const cl_backend *be, const cl_conv_shape *s) {
  if (s->dtype != CL_F32 || cl_conv_groups(s) != 1 || s->dh != 1 || s->dw != 1 || s->kh != s->kw)
    return NULL;
  const cl_cpu_ctx *ctx = (const cl_cpu_ctx *)be->context;
  if (!ctx->conv_algo && ctx->conv_algo_env == 1) return NULL; /* the default: no workspace */
  if (!ctx->conv_algo && 2.0 * s->N * s->K * s->C * s->kh * s->kw * s->H * s->W < WINO_MIN_FLOP)
    return NULL;
  if (s->kh == 3) return &FORMS[algo_env(be) == 3 ? 1 : 0];
  if (s->kh == 5) return &FORMS[2];
  return NULL;
}

/* The shape the Winograd code convolves: backward data swaps C and K. */
static cl_conv_shape dir_shape(const cl_conv_shape *s, int dir) {
  cl_conv_shape t = *s;
  if (dir == 1) t.C = s->K, t.K = s->C;
  return t;
}

/* The layout of one call's workspace. */
typedef struct wino_plan {
  const wino_form *f;
  int th, tw, T1; /* tiles down, across, per image */
  int nb;         /* images per chunk */
  int threads;
  size_t off_wf, off_u, off_slices, v_bytes, m_bytes, scratch_bytes, slice_bytes, total;
} wino_plan;

static wino_plan plan_form(const cl_backend *be, const cl_conv_shape *s, int dir,
                           const wino_form *f) {
  wino_plan p;
  memset(&p, 0, sizeof p);
  p.f = f;
  if (!p.f || dir == 2 || s->N < 1) return p;
  const cl_conv_shape t = dir_shape(s, dir);
  const int m = p.f->m, nn = p.f->n * p.f->n;
  p.th = (t.H + m - 1) / m, p.tw = (t.W + m - 1) / m, p.T1 = p.th * p.tw;
  p.threads = be->n_threads < 1 ? 1 : be->n_threads < t.N ? be->n_threads : t.N;
  int per = (t.N + p.threads - 1) / p.threads;
  p.nb = 256 / p.T1 < 1 ? 1 : 256 / p.T1;
  if (p.nb > per) p.nb = per;
  const int T = p.nb * p.T1;
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_of(be);
  p.off_wf = 0;
  p.off_u = dir == 1 ? round64(sizeof(float) * (size_t)t.K * t.C * t.kh * t.kw) : 0;
  p.off_slices = p.off_u + round64(sizeof(float) * (size_t)nn * t.K * t.C);
  p.v_bytes = round64(sizeof(float) * (size_t)nn * t.C * T);
  p.m_bytes = round64(sizeof(float) * (size_t)nn * t.K * T);
  p.scratch_bytes = round64(cl_cpu_sgemm_scratch_bytes(kind, t.K, T, t.C));
  p.slice_bytes = p.v_bytes + p.m_bytes + p.scratch_bytes;
  p.total = p.off_slices + p.slice_bytes * (size_t)p.threads + 64;
  return p;
}

static wino_plan plan_of(const cl_backend *be, const cl_conv_shape *s, int dir) {
  return plan_form(be, s, dir, form_of(be, s));
}

/* The largest over the forms CONVLSTM_CONV_ALGO may pick for s, whatever it
 * says now: the plan's workspace is sized once and the variable (or the
 * timed choice) decides at each call. */
size_t cl_cpu_wino_workspace(const cl_backend *be, const cl_conv_shape *s, int dir) {
  const wino_form *f = form_of(be, s);
  if (!f) return 0;
  size_t b = plan_form(be, s, dir, f).total;
  if (s->kh == 3) {
    size_t b4 = plan_form(be, s, dir, &FORMS[1]).total, b2 = plan_form(be, s, dir, &FORMS[0]).total;
    b = b4 > b2 ? b4 : b2;
  }
  return b;
}

/* U[e][k][c] = (G w[k][c] G^T)[e]. */
static void filter_transform(const wino_form *f, const float *w, int K, int C, float *U) {
  const int n = f->n, r = f->r;
  const size_t KC = (size_t)K * C;
  for (int k = 0; k < K; k++)
    for (int c = 0; c < C; c++) {
      const float *g = w + ((size_t)k * C + c) * r * r;
      float t[WMAX][5], u;
      for (int i = 0; i < n; i++)
        for (int j = 0; j < r; j++) {
          float a = 0;
          for (int l = 0; l < r; l++) a += f->G[i][l] * g[l * r + j];
          t[i][j] = a;
        }
      for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
          u = 0;
          for (int l = 0; l < r; l++) u += t[i][l] * f->G[j][l];
          U[(size_t)(i * n + j) * KC + (size_t)k * C + c] = u;
        }
    }
}

/* V[e][c][q] = (B^T d B)[e] for the tiles of images n0 .. n0+nb-1 (q =
 * image-in-chunk T1 + tile), d read from x with zeros outside the image. */
static void input_transform(const wino_plan *p, const cl_conv_shape *t, const float *x, int n0,
                            int nb, float *V) {
  const wino_form *f = p->f;
  const int n = f->n, m = f->m, pad = (f->r - 1) / 2, H = t->H, W = t->W;
  const size_t T = (size_t)p->nb * p->T1, CT = (size_t)t->C * T;
  for (int b = 0; b < nb; b++)
    for (int c = 0; c < t->C; c++) {
      const float *img = x + ((size_t)(n0 + b) * t->C + c) * H * W;
      for (int ty = 0; ty < p->th; ty++)
        for (int tx = 0; tx < p->tw; tx++) {
          float d[WMAX][WMAX], u[WMAX][WMAX];
          const int y0 = ty * m - pad, x0 = tx * m - pad;
          for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
              int yy = y0 + i, xx = x0 + j;
              d[i][j] = yy >= 0 && yy < H && xx >= 0 && xx < W ? img[yy * W + xx] : 0.0f;
            }
          for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
              float a = 0;
              for (int l = 0; l < n; l++) a += f->BT[i][l] * d[l][j];
              u[i][j] = a;
            }
          const size_t q = (size_t)b * p->T1 + (size_t)ty * p->tw + tx;
          for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
              float a = 0;
              for (int l = 0; l < n; l++) a += u[i][l] * f->BT[j][l];
              V[(size_t)(i * n + j) * CT + (size_t)c * T + q] = a;
            }
        }
    }
}

/* y[k] (+)= A^T M A + bias over the chunk's tiles, cropped to H x W. */
static void output_transform(const wino_plan *p, const cl_conv_shape *t, const float *M,
                             const float *bias, int accumulate, float *y, int n0, int nb) {
  const wino_form *f = p->f;
  const int n = f->n, m = f->m, H = t->H, W = t->W;
  const size_t T = (size_t)p->nb * p->T1, KT = (size_t)t->K * T;
  for (int b = 0; b < nb; b++)
    for (int k = 0; k < t->K; k++) {
      float *img = y + ((size_t)(n0 + b) * t->K + k) * H * W;
      const float bk = bias ? bias[k] : 0.0f;
      for (int ty = 0; ty < p->th; ty++)
        for (int tx = 0; tx < p->tw; tx++) {
          const size_t q = (size_t)b * p->T1 + (size_t)ty * p->tw + tx;
          float mt[WMAX][WMAX], u[4][WMAX];
          for (int e = 0; e < n * n; e++) mt[e / n][e % n] = M[(size_t)e * KT + (size_t)k * T + q];
          for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
              float a = 0;
              for (int l = 0; l < n; l++) a += f->AT[i][l] * mt[l][j];
              u[i][j] = a;
            }
          for (int i = 0; i < m; i++)
            for (int j = 0; j < m; j++) {
              int yy = ty * m + i, xx = tx * m + j;
              if (yy >= H || xx >= W) continue;
              float a = 0;
              for (int l = 0; l < n; l++) a += u[i][l] * f->AT[j][l];
              float *o = img + yy * W + xx;
              *o = accumulate ? *o + a + bk : a + bk;
            }
        }
    }
}

/* One call's operands, shared by the team's threads. */
typedef struct wino_job {
  const cl_backend *be;
  const wino_plan *p;
  const cl_conv_shape *t;
  const float *x, *U, *bias;
  float *y;
  int accumulate;
  char *base;
} wino_job;

/* Thread tid's images [n0, n1) (cl_cpu_blocks) in chunks of p->nb, in its
 * own slice of the workspace. */
static void run_images(void *arg, long long n0, long long n1, int tid) {
  const wino_job *j = arg;
  const wino_plan *p = j->p;
  const cl_conv_shape *t = j->t;
  char *slice = j->base + p->off_slices + p->slice_bytes * tid;
  float *V = (float *)slice, *M = (float *)(slice + p->v_bytes);
  void *scratch = slice + p->v_bytes + p->m_bytes;
  const int nn = p->f->n * p->f->n, T = p->nb * p->T1;
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_of(j->be);
  for (int c0 = (int)n0; c0 < (int)n1; c0 += p->nb) {
    int nb = (int)n1 - c0 < p->nb ? (int)n1 - c0 : p->nb;
    input_transform(p, t, j->x, c0, nb, V);
    for (int e = 0; e < nn; e++)
      cl_cpu_sgemm(kind, 0, 0, t->K, T, t->C, 1.0f, j->U + (size_t)e * t->K * t->C, t->C,
                   V + (size_t)e * t->C * T, T, 0.0f, M + (size_t)e * t->K * T, T, scratch);
    output_transform(p, t, M, j->bias, j->accumulate, j->y, c0, nb);
  }
}

/* wf[c][k][i][j] = w[k][c][r-1-i][r-1-j]. */
static void flip_transpose(const float *w, int K, int C, int kk, float *wf) {
  for (int k = 0; k < K; k++)
    for (int c = 0; c < C; c++) {
      const float *src = w + ((size_t)k * C + c) * kk;
      float *dst = wf + ((size_t)c * K + k) * kk;
      for (int q = 0; q < kk; q++) dst[q] = src[kk - 1 - q];
    }
}

/* dir 0: y (+)= conv(x, w) + bias; dir 1: dx (+)= conv_transpose(dy, w). */
static void wino_run(cl_backend *be, const cl_conv_shape *s, int dir, const float *x,
                     const float *w, const float *bias, float *y, int accumulate, void *ws) {
  const wino_plan p = plan_of(be, s, dir);
  const cl_conv_shape t = dir_shape(s, dir);
  char *base = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  if (dir == 1) {
    flip_transpose(w, s->K, s->C, s->kh * s->kw, (float *)(base + p.off_wf));
    w = (const float *)(base + p.off_wf);
  }
  float *U = (float *)(base + p.off_u);
  filter_transform(p.f, w, t.K, t.C, U);
  wino_job j = {be, &p, &t, x, U, bias, y, accumulate, base};
  cl_cpu_blocks(p.threads, t.N, run_images, &j);
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
  if (!form_of(be, s) || dir == 2) return 0;
  return choice_of(be, s, dir, NULL);
}

const char *cl_cpu_wino_name(const cl_backend *be, const cl_conv_shape *s) {
  const wino_form *f = form_of(be, s);
  return f ? f->name : "";
}

/* The algorithm of this call: 1 Winograd (run cl_cpu_wino_conv), 0 the
 * GEMM paths; tk then times the call between here and cl_cpu_wino_done. */
int cl_cpu_wino_pick(const cl_backend *be, const cl_conv_shape *s, int dir, const void *ws,
                     cl_cpu_wino_ticket *tk) {
  memset(tk, 0, sizeof *tk);
  if (!form_of(be, s) || dir == 2 || s->N < 1 || !ws) return 0;
  wino_slot *timed;
  tk->use = choice_of(be, s, dir, &timed);
  tk->slot = timed;
  if (timed) tk->t0 = cl_cpu_process_seconds();
  return tk->use;
}

void cl_cpu_wino_done(const cl_cpu_wino_ticket *tk) {
  if (tk->slot) record((wino_slot *)tk->slot, tk->use, cl_cpu_process_seconds() - tk->t0);
}

void cl_cpu_wino_conv(cl_backend *be, const cl_conv_shape *s, int dir, const float *x,
                      const float *w, const float *bias, float *y, int accumulate, void *ws) {
  wino_run(be, s, dir, x, w, bias, y, accumulate, ws);
}

/* backend.h's conv_algo: Winograd's form when it runs (or may still run,
 * while the shape is being timed: "gemm/..."), else "gemm" for cpu_conv.c's
 * im2col + GEMM and direct paths (float32 products, direct sums). */
const char *cl_cpu_conv_algo(cl_backend *be, const cl_conv_shape *s, int dir) {
  static _Thread_local char buf[64];
  int c = cl_cpu_wino_chosen(be, s, dir);
  if (c == 0) return "gemm";
  snprintf(buf, sizeof buf, "%s%s", c < 0 ? "gemm/" : "", cl_cpu_wino_name(be, s));
  return buf;
}
