/*
 * cpu/cpu_conv.c -- the CPU backend's convolutions (backend.h: conv_forward,
 * conv_backward_data, conv_backward_filter, conv_workspace): stride 1,
 * "same" padding k / 2, odd k, NCHW, weight [K, C, k, k], float32.
 *
 * Each image is lowered to one GEMM on its im2col matrix (skipped for k == 1,
 * where the image already is that matrix):
 *   forward      y[K, P]   = w[K, Ckk] col(x)[Ckk, P]             (+ bias)
 *   bwd data     dcol      = w^T dy, then col2im             (when K > C)
 *                dx[C, P]  = wflip[C, Kkk] col(dy)[Kkk, P]   (when K <= C)
 *   bwd filter   dw[K, Ckk] += dy[K, P] col(x)^T
 * with P = H W and Ckk = C k k. Backward data picks whichever lowering needs
 * the smaller column buffer: col2im's is Ckk x P, the flipped-kernel one
 * (a forward convolution with weights transposed and rotated 180 degrees)
 * Kkk x P.
 *
 * OpenMP threads take contiguous runs of images, each with its own slice of
 * the workspace (column buffer and GEMM packing scratch); backward filter
 * gives every thread but the first a private dw to sum at the end. When the
 * images do not share out evenly (few images), they run one after another
 * and the threads split each GEMM instead. conv_plan_of() decides all of this
 * and the workspace size from the shape alone, so cl_cpu_conv_workspace()
 * reports exactly the bytes a call touches.
 *
 * Not here: other strides, dilation, groups, half precision (the CUDA
 * backend has those dtypes; this one reports CL_E_UNSUPPORTED).
 */
#include "cpu_kernels.h"

#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef enum conv_op { OP_FORWARD, OP_BWD_DATA, OP_BWD_FILTER } conv_op;

/* How one call of one op runs and where its workspace pieces lie. Offsets
 * are from the workspace rounded up to 64 bytes. */
typedef struct conv_plan {
  int threads;      /* image-parallel threads (1: images in sequence) */
  int gemm_threads; /* threads inside each GEMM (> 1 only when threads == 1) */
  int flip;         /* backward data through flipped weights */
  int gM, gN, gK;   /* the per-image GEMM */
  size_t off_wflip, off_dbias, off_dw, off_slices; /* offsets of the regions */
  size_t col_bytes, gemm_bytes, dw_bytes, slice_bytes;
  size_t total; /* bytes including the 64 of alignment slack; 0 when none is used */
} conv_plan;

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }
static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }

/* Images run in parallel when they share out evenly enough among threads;
 * otherwise a thread would idle for a whole image, and splitting each GEMM
 * wastes less. */
static void plan_threads(conv_plan *pl, int N, int nt) {
  if (nt < 1) nt = 1;
  pl->threads = 1;
  pl->gemm_threads = 1;
  if (nt == 1) return;
  if (N % nt == 0 || N >= 4 * nt)
    pl->threads = imin(nt, N);
  else
    pl->gemm_threads = nt;
}

/* The per-image GEMM of each op, and the size of its column buffer. */
static size_t plan_gemm(conv_plan *pl, conv_op op, const cl_conv_shape *s) {
  int kk = s->k * s->k, P = s->H * s->W;
  pl->flip = op == OP_BWD_DATA && s->k > 1 && s->K <= s->C;
  switch (op) {
  case OP_FORWARD: pl->gM = s->K, pl->gN = P, pl->gK = s->C * kk; break;
  case OP_BWD_DATA:
    if (pl->flip)
      pl->gM = s->C, pl->gN = P, pl->gK = s->K * kk;
    else
      pl->gM = s->C * kk, pl->gN = P, pl->gK = s->K;
    break;
  case OP_BWD_FILTER: pl->gM = s->K, pl->gN = s->C * kk, pl->gK = P; break;
  }
  if (s->k == 1) return 0;
  return sizeof(float) * (size_t)(pl->flip ? s->K : s->C) * kk * P;
}

static conv_plan conv_plan_of(conv_op op, const cl_conv_shape *s, int n_threads,
                              cl_cpu_gemm_kind kind) {
  conv_plan pl;
  memset(&pl, 0, sizeof pl);
  plan_threads(&pl, s->N, n_threads);
  pl.col_bytes = round64(plan_gemm(&pl, op, s));
  pl.gemm_bytes = round64(
      pl.gemm_threads > 1
          ? cl_cpu_sgemm_threaded_scratch_bytes(kind, pl.gemm_threads, pl.gM, pl.gN, pl.gK)
          : cl_cpu_sgemm_scratch_bytes(kind, pl.gM, pl.gN, pl.gK));
  pl.slice_bytes = pl.col_bytes + pl.gemm_bytes;
  size_t wflip = pl.flip ? round64(sizeof(float) * (size_t)s->C * s->K * s->k * s->k) : 0;
  size_t dbias = 0;
  if (op == OP_BWD_FILTER) {
    dbias = round64(sizeof(double) * (size_t)s->K * pl.threads);
    pl.dw_bytes = round64(sizeof(float) * (size_t)s->K * s->C * s->k * s->k);
  }
  pl.off_wflip = 0;
  pl.off_dbias = wflip;
  pl.off_dw = pl.off_dbias + dbias;
  /* The first thread adds straight into dw; the others keep partial sums. */
  pl.off_slices = pl.off_dw + pl.dw_bytes * (size_t)(pl.threads - 1);
  size_t used = pl.off_slices + pl.slice_bytes * (size_t)pl.threads;
  pl.total = used ? used + 64 : 0;
  return pl;
}

static cl_status check_shape(cl_backend *be, const cl_conv_shape *s) {
  if (s->dtype != CL_F32)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED,
                       "cpu backend: convolution supports float32 only (dtype %d)",
                       (int)s->dtype);
  if (s->N < 0 || s->C <= 0 || s->K <= 0 || s->H <= 0 || s->W <= 0 || s->k <= 0 ||
      s->k % 2 == 0)
    return cl_cpu_fail(be, CL_E_INVALID,
                       "cpu backend: bad convolution shape N=%d C=%d K=%d H=%d W=%d k=%d", s->N,
                       s->C, s->K, s->H, s->W, s->k);
  return CL_OK;
}

size_t cl_cpu_conv_workspace(cl_backend *be, const cl_conv_shape *s) {
  if (check_shape(be, s) != CL_OK) return 0;
  size_t best = 0;
  for (int op = OP_FORWARD; op <= OP_BWD_FILTER; op++) {
    conv_plan pl = conv_plan_of((conv_op)op, s, be->n_threads, cl_cpu_gemm_of(be));
    if (pl.total > best) best = pl.total;
  }
  return best;
}

/* ---- im2col / col2im ----------------------------------------------------- */

/* The columns [x0, x1) of an output row whose input x + dx lies inside [0, W). */
static void valid_cols(int W, int dx, int *x0, int *x1) {
  *x0 = imax(0, -dx);
  *x1 = imin(W, W - dx);
}

/* col[(c k + i) k + j][y W + x] = img[c][y + i - pad][x + j - pad], 0 outside. */
static void im2col(const float *img, int C, int H, int W, int k, float *col) {
  const int pad = k / 2;
  const size_t P = (size_t)H * W;
  for (int c = 0; c < C; c++) {
    const float *src = img + (size_t)c * P;
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++, col += P) {
        int dx = j - pad, x0, x1;
        valid_cols(W, dx, &x0, &x1);
        for (int y = 0; y < H; y++) {
          float *r = col + (size_t)y * W;
          int yy = y + i - pad;
          if (yy < 0 || yy >= H) {
            memset(r, 0, sizeof(float) * W);
            continue;
          }
          const float *sr = src + (size_t)yy * W + dx;
          for (int x = 0; x < x0; x++) r[x] = 0.0f;
          for (int x = x0; x < x1; x++) r[x] = sr[x];
          for (int x = x1; x < W; x++) r[x] = 0.0f;
        }
      }
  }
}

/* The adjoint of im2col: img[c][y + i - pad][x + j - pad] += col[...][y W + x]. */
static void col2im_add(const float *col, int C, int H, int W, int k, float *img) {
  const int pad = k / 2;
  const size_t P = (size_t)H * W;
  for (int c = 0; c < C; c++) {
    float *dst = img + (size_t)c * P;
    for (int i = 0; i < k; i++)
      for (int j = 0; j < k; j++, col += P) {
        int dx = j - pad, x0, x1;
        valid_cols(W, dx, &x0, &x1);
        for (int y = imax(0, pad - i); y < imin(H, H + pad - i); y++) {
          float *dr = dst + (size_t)(y + i - pad) * W + dx;
          const float *r = col + (size_t)y * W;
          for (int x = x0; x < x1; x++) dr[x] += r[x];
        }
      }
  }
}

/* wf[c][o][i][j] = w[o][c][k-1-i][k-1-j]: backward data as a forward
 * convolution of dy (stride 1, odd k, pad k / 2 keep the padding the same). */
static void flip_weights(const float *w, int K, int C, int k, float *wf) {
  const int kk = k * k;
  for (int c = 0; c < C; c++)
    for (int o = 0; o < K; o++) {
      const float *src = w + ((size_t)o * C + c) * kk;
      float *dst = wf + ((size_t)c * K + o) * kk;
      for (int t = 0; t < kk; t++) dst[t] = src[kk - 1 - t];
    }
}

/* ---- per-image work ------------------------------------------------------- */

/* Everything a per-image function needs; shared read-only by the threads. */
typedef struct conv_job {
  const cl_conv_shape *s;
  const conv_plan *pl;
  cl_cpu_gemm_kind kind;
  char *ws; /* 64-byte aligned */
  const float *x, *w, *bias, *dy;
  float *y, *dx, *dw, *dbias;
  int accumulate;
} conv_job;

static float *slice_col(const conv_job *j, int tid) {
  return (float *)(j->ws + j->pl->off_slices + j->pl->slice_bytes * (size_t)tid);
}

static void *slice_gemm(const conv_job *j, int tid) {
  return slice_col(j, tid) + j->pl->col_bytes / sizeof(float);
}

/* The per-image GEMM, threaded or not as the plan says. */
static void job_gemm(const conv_job *j, int tid, int tA, int tB, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
  const conv_plan *pl = j->pl;
  if (pl->gemm_threads > 1)
    cl_cpu_sgemm_threaded(j->kind, pl->gemm_threads, tA, tB, pl->gM, pl->gN, pl->gK, 1.0f, A,
                          lda, B, ldb, beta, C, ldc, slice_gemm(j, tid));
  else
    cl_cpu_sgemm(j->kind, tA, tB, pl->gM, pl->gN, pl->gK, 1.0f, A, lda, B, ldb, beta, C, ldc,
                 slice_gemm(j, tid));
}

static size_t img_floats(const cl_conv_shape *s, int channels) {
  return (size_t)channels * s->H * s->W;
}

static void forward_image(const conv_job *j, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const int P = s->H * s->W;
  const float *xn = j->x + img_floats(s, s->C) * n;
  float *yn = j->y + img_floats(s, s->K) * n;
  const float *B = xn;
  if (s->k > 1) {
    im2col(xn, s->C, s->H, s->W, s->k, slice_col(j, tid));
    B = slice_col(j, tid);
  }
  float beta = j->accumulate ? 1.0f : 0.0f;
  /* Writing the bias first lets the GEMM add onto it while the rows of y
   * are still in cache, instead of a second pass over y. */
  if (j->bias) {
    for (int o = 0; o < s->K; o++) {
      float *r = yn + (size_t)o * P, b = j->bias[o];
      if (j->accumulate)
        for (int p = 0; p < P; p++) r[p] += b;
      else
        for (int p = 0; p < P; p++) r[p] = b;
    }
    beta = 1.0f;
  }
  job_gemm(j, tid, 0, 0, j->w, j->pl->gK, B, P, beta, yn, P);
}

static void backward_data_image(const conv_job *j, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const int P = s->H * s->W;
  const float *dyn = j->dy + img_floats(s, s->K) * n;
  float *dxn = j->dx + img_floats(s, s->C) * n;
  float beta = j->accumulate ? 1.0f : 0.0f;
  if (s->k == 1) {
    job_gemm(j, tid, 1, 0, j->w, s->C, dyn, P, beta, dxn, P);
  } else if (j->pl->flip) {
    const float *wf = (const float *)(j->ws + j->pl->off_wflip);
    im2col(dyn, s->K, s->H, s->W, s->k, slice_col(j, tid));
    job_gemm(j, tid, 0, 0, wf, j->pl->gK, slice_col(j, tid), P, beta, dxn, P);
  } else {
    float *col = slice_col(j, tid);
    job_gemm(j, tid, 1, 0, j->w, j->pl->gM, dyn, P, 0.0f, col, P);
    if (!j->accumulate) memset(dxn, 0, sizeof(float) * img_floats(s, s->C));
    col2im_add(col, s->C, s->H, s->W, s->k, dxn);
  }
}

/* Sum of a row, with eight chains so the adds overlap. */
static double row_sum(const float *r, int n) {
  double a[8] = {0};
  int p = 0;
  for (; p + 8 <= n; p += 8)
    for (int t = 0; t < 8; t++) a[t] += r[p + t];
  for (; p < n; p++) a[0] += r[p];
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

static float *filter_dw_of(const conv_job *j, int tid) {
  if (tid == 0) return j->dw;
  return (float *)(j->ws + j->pl->off_dw + j->pl->dw_bytes * (size_t)(tid - 1));
}

static void backward_filter_image(const conv_job *j, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const int P = s->H * s->W;
  const float *dyn = j->dy + img_floats(s, s->K) * n;
  const float *B = j->x + img_floats(s, s->C) * n;
  if (s->k > 1) {
    im2col(B, s->C, s->H, s->W, s->k, slice_col(j, tid));
    B = slice_col(j, tid);
  }
  job_gemm(j, tid, 0, 1, dyn, P, B, P, 1.0f, filter_dw_of(j, tid), j->pl->gN);
  if (j->dbias) {
    double *db = (double *)(j->ws + j->pl->off_dbias) + (size_t)tid * s->K;
    for (int o = 0; o < s->K; o++) db[o] += row_sum(dyn + (size_t)o * P, P);
  }
}

/* ---- driving the images over threads ------------------------------------- */

typedef void (*image_fn)(const conv_job *j, int n, int tid);

/* Thread tid of a team of `team` takes images [N tid / team, N (tid+1) / team).
 * Returns the team size (smaller than planned inside a parallel region). */
static int for_each_image(const conv_job *j, image_fn fn, void (*init)(const conv_job *, int)) {
  int used = 1;
#ifdef _OPENMP
#pragma omp parallel num_threads(j->pl->threads) if (j->pl->threads > 1)
#endif
  {
    int tid = 0, team = 1;
#ifdef _OPENMP
    tid = omp_get_thread_num();
    team = omp_get_num_threads();
#endif
    if (tid == 0) used = team;
    if (init) init(j, tid);
    int n0 = (int)((int64_t)j->s->N * tid / team), n1 = (int)((int64_t)j->s->N * (tid + 1) / team);
    for (int n = n0; n < n1; n++) fn(j, n, tid);
  }
  return used;
}

static cl_status begin(cl_backend *be, conv_op op, const cl_conv_shape *s, void *ws,
                       conv_plan *pl, conv_job *j) {
  cl_status st = check_shape(be, s);
  if (st != CL_OK) return st;
  *pl = conv_plan_of(op, s, be->n_threads, cl_cpu_gemm_of(be));
  if (pl->total > 0 && !ws)
    return cl_cpu_fail(be, CL_E_INVALID, "cpu backend: convolution needs a workspace of %zu bytes",
                       pl->total);
  memset(j, 0, sizeof *j);
  j->s = s;
  j->pl = pl;
  j->kind = cl_cpu_gemm_of(be);
  j->ws = ws ? (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63) : NULL;
  return CL_OK;
}

cl_status cl_cpu_conv_forward(cl_backend *be, const cl_conv_shape *s, const void *x,
                              const float *w, const float *bias, void *y, int accumulate,
                              void *ws) {
  conv_plan pl;
  conv_job j;
  cl_status st = begin(be, OP_FORWARD, s, ws, &pl, &j);
  if (st != CL_OK || s->N == 0) return st;
  j.x = x, j.w = w, j.bias = bias, j.y = y, j.accumulate = accumulate;
  for_each_image(&j, forward_image, NULL);
  return CL_OK;
}

cl_status cl_cpu_conv_backward_data(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                    const float *w, void *dx, int accumulate, void *ws) {
  conv_plan pl;
  conv_job j;
  cl_status st = begin(be, OP_BWD_DATA, s, ws, &pl, &j);
  if (st != CL_OK || s->N == 0) return st;
  j.dy = dy, j.w = w, j.dx = dx, j.accumulate = accumulate;
  if (pl.flip) flip_weights(w, s->K, s->C, s->k, (float *)(j.ws + pl.off_wflip));
  for_each_image(&j, backward_data_image, NULL);
  return CL_OK;
}

/* Each thread clears its own partial sums (first touch stays on its core). */
static void filter_init(const conv_job *j, int tid) {
  if (tid > 0) memset(filter_dw_of(j, tid), 0, j->pl->dw_bytes);
  if (j->dbias)
    memset((double *)(j->ws + j->pl->off_dbias) + (size_t)tid * j->s->K, 0,
           sizeof(double) * j->s->K);
}

/* dw += the partials of threads 1..team-1; dbias += every thread's sums. */
static void filter_reduce(const conv_job *j, int team) {
  size_t n = (size_t)j->s->K * j->pl->gN;
  for (int t = 1; t < team; t++) {
    const float *part = filter_dw_of(j, t);
    for (size_t i = 0; i < n; i++) j->dw[i] += part[i];
  }
  if (!j->dbias) return;
  const double *db = (const double *)(j->ws + j->pl->off_dbias);
  for (int o = 0; o < j->s->K; o++) {
    double sum = 0.0;
    for (int t = 0; t < team; t++) sum += db[(size_t)t * j->s->K + o];
    j->dbias[o] += (float)sum;
  }
}

cl_status cl_cpu_conv_backward_filter(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                      const void *x, float *dw, float *dbias, void *ws) {
  conv_plan pl;
  conv_job j;
  cl_status st = begin(be, OP_BWD_FILTER, s, ws, &pl, &j);
  if (st != CL_OK || s->N == 0) return st;
  j.dy = dy, j.x = x, j.dw = dw, j.dbias = dbias;
  int team = for_each_image(&j, backward_filter_image, filter_init);
  filter_reduce(&j, team);
  return CL_OK;
}
