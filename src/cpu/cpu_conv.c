/*
 * cpu/cpu_conv.c -- the CPU backend's convolutions (backend.h: conv_forward,
 * conv_backward_data, conv_backward_filter, conv_workspace): stride 1,
 * "same" padding (cl_conv_pad_h / _w), odd kernels kh x kw with dilation
 * dh x dw, NCHW, weight [K, C, kh, kw], float32. Below, k k stands for the
 * kh kw taps, each an offset of (i dh, j dw) into the padded image.
 *
 * Most shapes lower each image to one GEMM on its im2col matrix (skipped for
 * 1 x 1 kernels, where the image already is that matrix):
 *   forward      y[K, P]   = w[K, Ckk] col(x)[Ckk, P]             (+ bias)
 *   bwd data     dcol      = w^T dy, then col2im             (when K > C)
 *                dx[C, P]  = wflip[C, Kkk] col(dy)[Kkk, P]   (when K <= C)
 *   bwd filter   dw[K, Ckk] += dy[K, P] col(x)^T
 * with P = H W and Ckk = C k k. Backward data picks whichever lowering needs
 * the smaller column buffer: col2im's is Ckk x P, the flipped-kernel one
 * (a forward convolution with weights transposed and rotated 180 degrees)
 * Kkk x P; or the flipped kernel whenever the GEMM can read dy's image in
 * place (below), which needs no column buffer and no col2im pass.
 *
 * When each image runs one GEMM on one thread, no column matrix is written
 * at all: the GEMM packs col(x) (forward), col(dy) (flipped backward data)
 * or col(x)^T (backward filter) straight from a zero-bordered copy of the
 * image (cl_cpu_sgemm_im2col), and for images a multiple of 16 pixels wide
 * its 12 x 32 tile reads col(x) and col(dy) where they lie, packing only
 * the weights, once per thread and call rather than once per image.
 *
 * When the GEMM is thin (few output channels forward; few output channels or
 * a small C k k in backward filter) im2col and packing would cost more than
 * the arithmetic, so the "direct" path copies the image once into a
 * zero-bordered buffer of width Wp = W + 2 pad instead: in that layout the
 * im2col row of (c, i, j) is the buffer itself shifted by c Hp Wp + i Wp + j,
 * so the unpacked kernels cl_cpu_sgemm_rows / cl_cpu_sgemm_dot read the
 * shifted views directly. Outputs are then computed at H Wp positions, the
 * 2 pad columns per row past W being discarded (forward) or multiplied by
 * zeros (backward filter, whose padded dy has zero columns there).
 *
 * OpenMP threads take contiguous runs of images, each with its own slice of
 * the workspace. When the images do not share out evenly (few images),
 * GEMM-path images run one after another and the threads split each GEMM
 * instead. Backward filter splits dw, not the images: each thread adds
 * every image, in order, into its piece of dw (plan_filter_pieces), so its
 * bits do not depend on the team. conv_plan_of() decides all of this and
 * the workspace layout from the shape alone, so cl_cpu_conv_workspace() reports exactly
 * the bytes a call may touch.
 *
 * float16 / bfloat16 storage takes the paths that copy each image into a
 * padded float32 buffer, the direct path and the GEMM path's view, and
 * converts it there; results are rounded back where rows are written out
 * (the view's forward computes an image of y in float32 first, its
 * backward filter reads dy's image converted to float32), so the kernels
 * compute in float32 as the CUDA backend does. Where the view cannot run
 * (1 x 1 kernels, a GEMM split over threads) half storage takes the direct
 * path. On a CPU with AVX512_BF16 whose dot products pay
 * (cl_cpu_bf16_dot_of; CONVLSTM_BF16_DOT forces either way) bfloat16
 * storage runs bfloat16 dot products on the direct path instead
 * (cl_cpu_bf16_rows / _dot): the padded images pass unchanged, the weights
 * are rounded to bfloat16 as PyTorch's bfloat16 autocast rounds them,
 * products are exact and sums float32. dx and the weight gradients are
 * float32 whatever the storage (backend.h).
 *
 * Groups (per-gate dropout): image n of G groups is G images of C/G
 * channels to K/G outputs, each through its group's weight rows; in NCHW
 * those are N G consecutive images of the ungrouped shape C/G -> K/G
 * (inner_shape), so every path above runs them unchanged, image n' taking
 * the weights, bias and weight gradient of group n' mod G.
 *
 * Not here: other strides.
 */
#include "cpu_kernels.h"

#include <stdint.h>
#include <string.h>

typedef enum conv_op { OP_FORWARD, OP_BWD_DATA, OP_BWD_FILTER } conv_op;

/* How one call of one op runs and where its workspace pieces lie. Offsets
 * are from the workspace rounded up to 64 bytes; the shared regions come
 * first, then one slice per thread. */
typedef struct conv_plan {
  int threads;      /* image-parallel threads (1: images in sequence); backward
                     * filter: the threads of its dw pieces */
  int gemm_threads; /* threads inside each GEMM (> 1 only when threads == 1) */
  int prow, pch;    /* backward filter: dw's rows and input channels a piece */
  int pieces;       /* backward filter: how many */
  int direct;       /* padded-image kernels instead of im2col + GEMM */
  int bf16;         /* direct, bfloat16 storage: bfloat16 dot products (vdpbf16ps) */
  int view;         /* GEMM path: B packed straight from the padded image */
  int flip;         /* backward data through flipped weights */
  int gM, gN, gK;   /* the per-image GEMM (direct: the rows / dot product) */
  int pad_h, pad_w; /* direct and view: the zero-bordered image copy */
  int Hp, Wp;
  size_t plane;     /* Hp * Wp */
  int nq;           /* direct: outputs (or products) per channel, H Wp rounded up */
  size_t off_wflip, off_boff, off_dbias, off_slices;
  size_t buf_bytes; /* per slice: im2col columns, or the padded image */
  size_t aux_bytes; /* per slice: GEMM scratch, or the padded y / dy */
  size_t bf16_bytes; /* per slice: the bfloat16 kernels' packed operands */
  size_t apack_bytes; /* per slice, view: the weights packed once for all its images */
  size_t half_bytes;  /* per slice, view of half storage: y's or dy's image in float32 */
  size_t slice_bytes;
  size_t total; /* bytes including 64 of alignment slack; 0 when none is used */
} conv_plan;

/* A grouped shape as the ungrouped one of its N G group-images. */
static cl_conv_shape inner_shape(const cl_conv_shape *s) {
  cl_conv_shape i = *s;
  const int G = cl_conv_groups(s);
  i.N = s->N * G, i.C = s->C / G, i.K = s->K / G, i.groups = 1;
  return i;
}

static size_t round64(size_t b) { return (b + 63) & ~(size_t)63; }
static int imax(int a, int b) { return a > b ? a : b; }
static int imin(int a, int b) { return a < b ? a : b; }
static int round_up(int n, int m) { return (n + m - 1) / m * m; }

/* Bytes of the im2col buffer the GEMM path would use for one image. */
static size_t im2col_bytes(conv_op op, const cl_conv_shape *s) {
  if (cl_conv_taps(s) == 1) return 0;
  int ch = op == OP_BWD_DATA && s->K <= s->C ? s->K : s->C; /* flipped kernel: col(dy) */
  return sizeof(float) * (size_t)ch * cl_conv_taps(s) * s->H * s->W;
}

/* Direct or im2col + GEMM, from measurements on AVX-512 and AVX2 cores
 * (tests/c/bench_cpu_conv.c): the direct kernels win by far when the GEMM
 * would be one tile high or wide (few output channels; backward filter with
 * a small C k k), and by 15-30% up to K = 128 and whenever the im2col
 * buffer outgrows L2 (~2 MiB: large images); the packed GEMM wins by ~6% on
 * wide layers of small images (K = 256 at 24 x 24), where the direct path's
 * 2 pad columns per row are 8% extra work. A BLAS GEMM (only when
 * CONVLSTM_GEMM=blas forces it) keeps everything but the thin cases. */
static int use_direct(conv_op op, const cl_conv_shape *s, cl_cpu_gemm_kind kind) {
  const int thin_fwd = s->K <= 8, thin_filter = s->K <= 16 || s->C * cl_conv_taps(s) <= 32;
  const int big = im2col_bytes(op, s) > ((size_t)2 << 20);
  if (kind == CL_CPU_GEMM_BLAS)
    return op == OP_FORWARD ? thin_fwd : op == OP_BWD_FILTER && thin_filter;
  switch (op) {
    case OP_FORWARD: return s->K <= 128 || big;
    case OP_BWD_FILTER: return thin_filter || s->K <= 128 || big;
    case OP_BWD_DATA: return big && s->C >= 16 && s->K >= 16;
  }
  return 0;
}

/* Images run in parallel when they share out evenly enough among threads;
 * otherwise a thread would idle for a whole image, and splitting each GEMM
 * wastes less. The direct kernels are single-threaded: always by image; so
 * is half storage, whose GEMM path needs the view (one GEMM a thread): on
 * the direct path instead its sums would run in another order than on one
 * thread (float16 on 3 threads of 2 images did, test_cpu_team_bits). */
static void plan_threads(conv_plan *pl, const cl_conv_shape *s, int nt) {
  const int N = s->N;
  if (nt < 1) nt = 1;
  pl->threads = 1;
  pl->gemm_threads = 1;
  if (nt == 1 || N < 1) return;
  if (pl->direct || s->dtype != CL_F32 || N % nt == 0 || N >= 4 * nt)
    pl->threads = imin(nt, N);
  else
    pl->gemm_threads = nt;
}

/* Backward filter's dw, K rows of C k k, in pieces over the team: whole
 * 16-row tiles of rows where they share out evenly (the layers' 4 h
 * gates), else input channels (a layer of few output channels: the
 * tutorial's second, the forecaster's head). Each thread runs every image
 * in order on its piece, adding straight into dw: an element of dw is
 * summed over the images in one order, by one thread, whatever the team,
 * so its bits are one thread's (the images split over threads each summed
 * a partial dw of its own, added at the end in an order the team decided,
 * and gave 2 threads other bits than 1). A piece's x and dy are read by
 * its thread alone; the price is each image's x prepared once a piece,
 * 1 / (rows a piece) of its products. */
static void plan_filter_pieces(conv_plan *pl, const cl_conv_shape *s, int nt) {
  const int team = nt < 1 ? 1 : nt, tiles = (s->K + 15) / 16;
  pl->prow = s->K, pl->pch = s->C;
  if (team > 1 && tiles % team == 0)
    pl->prow = tiles / team * 16;
  else if (team > 1 && s->C >= team)
    pl->pch = (s->C + team - 1) / team;
  else if (team > 1)
    pl->prow = round_up((s->K + team - 1) / team, 16);
  pl->pieces = ((s->K + pl->prow - 1) / pl->prow) * ((s->C + pl->pch - 1) / pl->pch);
  pl->threads = imin(team, pl->pieces);
  pl->gemm_threads = 1;
}

/* The per-image GEMM of the im2col path; returns its column buffer bytes.
 * Backward data goes through flipped weights when that needs the smaller
 * column buffer, or when the GEMM reads dy's image in place (inplace: then
 * it needs none, and runs as fast as the forward). */
static size_t plan_gemm(conv_plan *pl, conv_op op, const cl_conv_shape *s, int inplace) {
  int kk = cl_conv_taps(s), P = s->H * s->W;
  pl->flip = op == OP_BWD_DATA && kk > 1 && (s->K <= s->C || inplace);
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
  if (kk == 1) return 0;
  return sizeof(float) * (size_t)(pl->flip ? s->K : s->C) * kk * P;
}

/* Rows of the zero-bordered copy of an image: W + 2 pad_w floats. */
static void plan_padding(conv_plan *pl, const cl_conv_shape *s) {
  pl->pad_h = cl_conv_pad_h(s);
  pl->pad_w = cl_conv_pad_w(s);
  pl->Hp = s->H + 2 * pl->pad_h;
  pl->Wp = s->W + 2 * pl->pad_w;
  pl->plane = (size_t)pl->Hp * pl->Wp;
}

/* Floats of the padded buffer that the direct path's views of `channels`
 * channels read: the most shifted view starts here and reads nq. */
static size_t direct_reach(const conv_plan *pl, const cl_conv_shape *s, int channels) {
  return (size_t)(channels - 1) * pl->plane + (size_t)(s->kh - 1) * s->dh * pl->Wp +
         (size_t)(s->kw - 1) * s->dw + (size_t)pl->nq;
}

/* The direct path's geometry: forward (and backward data) compute nq = H Wp
 * outputs per channel, rounded up to the rows kernel's multiple; backward
 * filter sums over H Wp rounded up to the dot kernel's. The padded image
 * keeps slack behind its last plane so the most shifted view can read nq
 * floats. */
static void plan_direct(conv_plan *pl, conv_op op, const cl_conv_shape *s) {
  int kk = cl_conv_taps(s);
  plan_padding(pl, s);
  int mult = op != OP_BWD_FILTER ? CL_CPU_ROWS_PAD : pl->bf16 ? CL_CPU_BF16_DOT_PAD : CL_CPU_DOT_PAD;
  pl->nq = round_up(s->H * pl->Wp, mult);
  /* Backward data pads dy (K channels) and produces C rows of dx. */
  int in = op == OP_BWD_DATA ? s->K : s->C, out = op == OP_BWD_DATA ? s->C : s->K;
  pl->flip = op == OP_BWD_DATA;
  pl->buf_bytes = round64(sizeof(float) * direct_reach(pl, s, in));
  pl->aux_bytes = round64(sizeof(float) * (size_t)out * pl->nq);
  if (op == OP_BWD_FILTER)
    pl->gM = s->K, pl->gN = s->C * kk, pl->gK = pl->nq;
  else
    pl->gM = out, pl->gN = pl->nq, pl->gK = in * kk;
  if (pl->bf16)
    pl->bf16_bytes = round64(
        op == OP_BWD_FILTER
            ? cl_cpu_bf16_dot_scratch_bytes(pl->gM, pl->nq, pl->buf_bytes / sizeof(float))
            : cl_cpu_bf16_rows_scratch_bytes(pl->gM, in, kk, pl->buf_bytes / sizeof(float)));
}

/* The im2col + GEMM path. The internal GEMM can pack the im2col matrix (or
 * its transpose) straight from a padded copy of the image (C Hp Wp floats
 * instead of C k^2 H W), when each image runs one GEMM on one thread. */
static void plan_gemm_path(conv_plan *pl, conv_op op, const cl_conv_shape *s,
                           cl_cpu_gemm_kind kind) {
  const int viewable = cl_conv_taps(s) > 1 && kind != CL_CPU_GEMM_BLAS && pl->gemm_threads == 1;
  /* In place through flipped weights: the C rows of dx must fill the
   * in-place tile's rows */
  const int inplace = viewable && cl_cpu_sgemm_inplace_of(kind, s->C, s->W);
  pl->buf_bytes = round64(plan_gemm(pl, op, s, inplace));
  pl->view = viewable && (op != OP_BWD_DATA || pl->flip);
  if (pl->view) {
    plan_padding(pl, s);
    pl->buf_bytes = round64(sizeof(float) * (size_t)(pl->flip ? s->K : s->C) * pl->plane);
    /* backward filter's A is dy, a new one for every image */
    if (op != OP_BWD_FILTER)
      pl->apack_bytes = round64(sizeof(cl_cpu_apack)) +
                        round64(cl_cpu_sgemm_apack_bytes(kind, pl->gM, pl->gK));
  }
  /* half storage: forward writes y, backward filter reads dy, through an
   * image in float32 (backward data's dx is float32 whatever the storage) */
  if (pl->view && s->dtype != CL_F32 && op != OP_BWD_DATA)
    pl->half_bytes = round64(sizeof(float) * (size_t)s->K * s->H * s->W);
  pl->aux_bytes =
      round64(pl->gemm_threads > 1 ? cl_cpu_sgemm_threaded_scratch_bytes(kind, pl->gemm_threads,
                                                                         pl->gM, pl->gN, pl->gK)
                                   : cl_cpu_sgemm_scratch_bytes(kind, pl->gM, pl->gN, pl->gK));
}

/* Shared regions (flipped weights, view offsets, backward filter's bias
 * sums) first, then one slice per thread. */
static void plan_regions(conv_plan *pl, conv_op op, const cl_conv_shape *s, int G) {
  const size_t kk = (size_t)cl_conv_taps(s);
  const int in = op == OP_BWD_DATA ? s->K : s->C;
  /* flipped weights, dw and dbias hold every group's */
  size_t wflip = pl->flip ? round64(sizeof(float) * s->C * s->K * kk * G) : 0;
  size_t boff = pl->direct || pl->view ? round64(sizeof(ptrdiff_t) * in * kk) : 0;
  size_t dbias = 0;
  if (op == OP_BWD_FILTER) dbias = round64(sizeof(double) * (size_t)s->K * G);
  pl->slice_bytes =
      pl->buf_bytes + pl->aux_bytes + pl->bf16_bytes + pl->apack_bytes + pl->half_bytes;
  pl->off_wflip = 0;
  pl->off_boff = wflip;
  pl->off_dbias = pl->off_boff + boff;
  pl->off_slices = pl->off_dbias + dbias;
  size_t used = pl->off_slices + pl->slice_bytes * (size_t)pl->threads;
  pl->total = used ? used + 64 : 0;
}

/* The direct or GEMM path's threads and geometry. */
static conv_plan plan_path(conv_op op, const cl_conv_shape *s, cl_cpu_gemm_kind kind, int direct,
                           int bf16, int nt) {
  conv_plan pl;
  memset(&pl, 0, sizeof pl);
  pl.direct = direct;
  pl.bf16 = bf16;
  if (op == OP_BWD_FILTER)
    plan_filter_pieces(&pl, s, nt);
  else
    plan_threads(&pl, s, nt);
  if (pl.direct)
    plan_direct(&pl, op, s);
  else
    plan_gemm_path(&pl, op, s, kind);
  return pl;
}

/* s: the grouped shape (the plan is of its inner_shape). */
static conv_plan conv_plan_of(conv_op op, const cl_conv_shape *grouped, const cl_backend *be) {
  const cl_cpu_gemm_kind kind = cl_cpu_gemm_of(be);
  const cl_conv_shape inner = inner_shape(grouped), *s = &inner;
  const int forced = ((const cl_cpu_ctx *)be->context)->conv_path;
  /* bfloat16 storage: bfloat16 products where the CPU has them and they pay */
  const int bf16 = s->dtype == CL_BF16 && cl_cpu_bf16_dot_of(kind);
  conv_plan pl = plan_path(op, s, kind, bf16 || (forced ? forced == 2 : use_direct(op, s, kind)),
                           bf16, be->n_threads);
  /* Half storage is converted where an image is copied into a padded
   * buffer: the direct path's or the view's. The other GEMM paths read
   * float32 in place. */
  if (s->dtype != CL_F32 && !pl.direct && !pl.view)
    pl = plan_path(op, s, kind, 1, 0, be->n_threads);
  plan_regions(&pl, op, s, cl_conv_groups(grouped));
  return pl;
}

static cl_status check_shape(cl_backend *be, const cl_conv_shape *s) {
  if (s->dtype != CL_F32 && s->dtype != CL_F16 && s->dtype != CL_BF16)
    return cl_cpu_fail(be, CL_E_UNSUPPORTED, "cpu backend: unknown storage dtype %d",
                       (int)s->dtype);
  if (!cl_conv_shape_ok(s))
    return cl_cpu_fail(be, CL_E_INVALID,
                       "cpu backend: bad convolution shape N=%d C=%d K=%d H=%d W=%d kernel %dx%d "
                       "dilation %dx%d groups %d",
                       s->N, s->C, s->K, s->H, s->W, s->kh, s->kw, s->dh, s->dw, s->groups);
  return CL_OK;
}

/* ---- channels last: the NCHW kernels between moves ------------------------
 * A channels-last shape (backend.h: cl_layout) moves its inputs into NCHW
 * copies in the workspace, runs the NCHW kernels there and moves the result
 * back (cpu_layout.c): the reference the CUDA backend's channels-last calls
 * and the core's conversions are tested against, not a fast path. Its
 * workspace, aligned to 64 bytes by the call:
 *   [a] x (forward, backward filter) or the float32 dx (backward data)
 *   [b] y (forward) or dy (backward data, backward filter)
 *   [the NCHW call's own workspace] */
typedef struct nhwc_ws {
  size_t a, b; /* bytes of each part, multiples of 64 */
} nhwc_ws;

static nhwc_ws nhwc_ws_of(const cl_conv_shape *s, cl_conv_dir dir) {
  const size_t P = (size_t)s->H * s->W, es = cl_dtype_size(s->dtype);
  const size_t in = (size_t)s->N * s->C * P, out = (size_t)s->N * s->K * P;
  nhwc_ws w = {round64(in * (dir == CL_CONV_BACKWARD_DATA ? 4 : es)), round64(out * es)};
  return w;
}

static cl_conv_shape nchw_of(const cl_conv_shape *s) {
  cl_conv_shape in = *s;
  in.layout = CL_NCHW;
  return in;
}

static cl_status nhwc_workspace(cl_backend *be, const cl_conv_shape *s, cl_conv_dir dir,
                                size_t *bytes) {
  const cl_conv_shape in = nchw_of(s);
  cl_status st = cl_cpu_conv_workspace(be, &in, dir, bytes);
  const nhwc_ws w = nhwc_ws_of(s, dir);
  *bytes += 64 + w.a + w.b;
  return st;
}

/* A channels-last call's NCHW twin: its shape, the parts of ws (a, b, and
 * the inner call's workspace after them) and the sizes the moves take. */
typedef struct nhwc_call {
  cl_conv_shape in;
  char *a, *b, *inner;
  size_t N, C, K, P, es;
} nhwc_call;

static cl_status nhwc_begin(cl_backend *be, const cl_conv_shape *s, cl_conv_dir dir, void *ws,
                            nhwc_call *c) {
  cl_status st = check_shape(be, s);
  if (st != CL_OK) return st;
  if (!ws)
    return cl_cpu_fail(be, CL_E_INTERNAL, "cpu backend: a channels-last convolution without "
                                          "its workspace (conv_workspace was not planned)");
  const nhwc_ws w = nhwc_ws_of(s, dir);
  c->in = nchw_of(s);
  c->a = (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
  c->b = c->a + w.a;
  c->inner = c->b + w.b;
  c->N = (size_t)s->N, c->C = (size_t)s->C, c->K = (size_t)s->K;
  c->P = (size_t)s->H * s->W, c->es = cl_dtype_size(s->dtype);
  return CL_OK;
}

cl_status cl_cpu_conv_workspace(cl_backend *be, const cl_conv_shape *s, cl_conv_dir dir,
                                size_t *bytes) {
  *bytes = 0;
  cl_status st = check_shape(be, s);
  if (st != CL_OK) return st;
  if (s->layout == CL_NHWC) return nhwc_workspace(be, s, dir, bytes);
  /* The backend's GEMM is a fixed rule (cl_cpu_gemm_choose), so the plan
   * is sized for the kind that will run, the same in every process: no
   * margin for a kind that might have been chosen instead. */
  const conv_op op = dir == CL_CONV_FORWARD         ? OP_FORWARD
                     : dir == CL_CONV_BACKWARD_DATA ? OP_BWD_DATA
                                                    : OP_BWD_FILTER;
  *bytes = conv_plan_of(op, s, be).total;
  /* room for either algorithm: the choice is timed at the first calls */
  size_t wino = cl_cpu_wino_workspace(be, s, (int)op);
  if (wino > *bytes) *bytes = wino;
  return CL_OK;
}

/* ---- im2col / col2im ----------------------------------------------------- */

/* The columns [x0, x1) of an output row whose input x + dx lies inside [0, W). */
static void valid_cols(int W, int dx, int *x0, int *x1) {
  *x0 = imax(0, -dx);
  *x1 = imin(W, W - dx);
}

/* One im2col row: out[q] = src[q + dy W + dx] for the pixels q = y W + x
 * whose source lies inside the image, 0 elsewhere. In flattened pixel order
 * the valid sources form one shifted block, so a single memcpy moves them
 * (the stray pixels it carries across row ends are zeroed after), which is
 * several times faster than copying row by row for 24-pixel rows. */
static void shifted_row(const float *src, int H, int W, int dy, int dx, float *out) {
  const int P = H * W;
  int y0 = imax(0, -dy), y1 = imin(H, H - dy), x0, x1;
  valid_cols(W, dx, &x0, &x1);
  if (y1 <= y0 || x1 <= x0) {
    memset(out, 0, sizeof(float) * P);
    return;
  }
  int q0 = y0 * W + x0, q1 = (y1 - 1) * W + x1; /* first and one past last valid */
  memset(out, 0, sizeof(float) * q0);
  memcpy(out + q0, src + q0 + dy * W + dx, sizeof(float) * (q1 - q0));
  memset(out + q1, 0, sizeof(float) * (P - q1));
  for (int y = y0; y < y1; y++) {
    float *r = out + (size_t)y * W;
    for (int x = 0; x < x0; x++) r[x] = 0.0f;
    for (int x = x1; x < W; x++) r[x] = 0.0f;
  }
}

/* col[(c kh + i) kw + j][y W + x] = img[c][y + i dh - pad_h][x + j dw - pad_w],
 * 0 outside. */
static void im2col(const float *img, int C, const cl_conv_shape *s, float *col) {
  const int ph = cl_conv_pad_h(s), pw = cl_conv_pad_w(s), H = s->H, W = s->W;
  const size_t P = (size_t)H * W;
  for (int c = 0; c < C; c++)
    for (int i = 0; i < s->kh; i++)
      for (int j = 0; j < s->kw; j++, col += P)
        shifted_row(img + c * P, H, W, i * s->dh - ph, j * s->dw - pw, col);
}

/* The adjoint of shifted_row: dst[q + dy W + dx] += row[q] over the valid
 * pixels. The entries of invalid columns are zeroed in `row` (scratch) first,
 * so that one flat loop over the valid block can add them harmlessly where
 * they wrap onto a neighbouring row's edge. */
static void shifted_row_add(float *row, int H, int W, int dy, int dx, float *dst) {
  int y0 = imax(0, -dy), y1 = imin(H, H - dy), x0, x1;
  valid_cols(W, dx, &x0, &x1);
  if (y1 <= y0 || x1 <= x0) return;
  for (int y = y0; y < y1; y++) {
    float *r = row + (size_t)y * W;
    for (int x = 0; x < x0; x++) r[x] = 0.0f;
    for (int x = x1; x < W; x++) r[x] = 0.0f;
  }
  int q0 = y0 * W + x0, q1 = (y1 - 1) * W + x1, shift = dy * W + dx;
  for (int q = q0; q < q1; q++) dst[q + shift] += row[q];
}

/* The adjoint of im2col: img[c][y + i dh - pad_h][x + j dw - pad_w] +=
 * col[...][y W + x]. Overwrites the invalid entries of col. */
static void col2im_add(float *col, int C, const cl_conv_shape *s, float *img) {
  const int ph = cl_conv_pad_h(s), pw = cl_conv_pad_w(s), H = s->H, W = s->W;
  const size_t P = (size_t)H * W;
  for (int c = 0; c < C; c++)
    for (int i = 0; i < s->kh; i++)
      for (int j = 0; j < s->kw; j++, col += P)
        shifted_row_add(col, H, W, i * s->dh - ph, j * s->dw - pw, img + c * P);
}

/* wf[c][o][i][j] = w[o][c][kh-1-i][kw-1-j]: backward data as a forward
 * convolution of dy (stride 1, odd kernels and "same" padding d (k - 1) / 2
 * keep the padding and dilation the same). */
static void flip_weights(const float *w, int K, int C, int kk, float *wf) {
  for (int c = 0; c < C; c++)
    for (int o = 0; o < K; o++) {
      const float *src = w + ((size_t)o * C + c) * kk;
      float *dst = wf + ((size_t)c * K + o) * kk;
      for (int t = 0; t < kk; t++) dst[t] = src[kk - 1 - t];
    }
}

/* ---- the direct path's padded layout ---------------------------------------- */

/* Where the im2col row (c, i, j) starts in the padded image. */
static void fill_offsets(const conv_plan *pl, int C, const cl_conv_shape *s, ptrdiff_t *boff) {
  for (int c = 0; c < C; c++)
    for (int i = 0; i < s->kh; i++)
      for (int j = 0; j < s->kw; j++)
        *boff++ = (ptrdiff_t)(c * pl->plane) + (ptrdiff_t)i * s->dh * pl->Wp + (ptrdiff_t)j * s->dw;
}

/* Channels [c0, c0 + cn) of image n (C channels, stored in dtype t) into
 * the interior of the padded float buffer's first cn planes; the border
 * and the slack were zeroed once per call and are never written. */
static void fill_padded(const conv_plan *pl, cl_dtype t, const void *img, int n, int C, int c0,
                        int cn, int H, int W, float *xp) {
  const size_t first = ((size_t)n * C + c0) * H * W;
  for (int c = 0; c < cn; c++)
    cl_cpu_load_rows(t, img, first + (size_t)c * H * W, (size_t)W,
                     xp + c * pl->plane + (size_t)pl->pad_h * pl->Wp + pl->pad_w, pl->Wp,
                     (size_t)W, (size_t)H);
}

/* ---- per-image work ------------------------------------------------------- */

/* Everything a per-image function needs; shared read-only by the threads. */
typedef struct conv_job {
  const cl_conv_shape *s; /* &inner: the ungrouped shape of the group-images */
  cl_conv_shape inner;
  int G;     /* groups: image n takes group n mod G's weights */
  size_t wg; /* floats of one group's weights */
  const conv_plan *pl;
  cl_cpu_gemm_kind kind;
  char *ws;           /* 64-byte aligned */
  const void *x, *dy; /* in s->dtype */
  void *y;            /* in s->dtype */
  const float *w, *bias;
  float *dx, *dw, *dbias;
  int accumulate;
} conv_job;

static float *slice_buf(const conv_job *j, int tid) {
  return (float *)(j->ws + j->pl->off_slices + j->pl->slice_bytes * (size_t)tid);
}

static float *slice_aux(const conv_job *j, int tid) {
  return slice_buf(j, tid) + j->pl->buf_bytes / sizeof(float);
}

static void *slice_bf16(const conv_job *j, int tid) {
  return (char *)slice_aux(j, tid) + j->pl->aux_bytes;
}

/* The thread's packed weights: the record, then the floats. */
static cl_cpu_apack *slice_apack(const conv_job *j, int tid) {
  return (cl_cpu_apack *)((char *)slice_bf16(j, tid) + j->pl->bf16_bytes);
}

/* The view's image of y or dy in float32, for half storage. */
static float *slice_half(const conv_job *j, int tid) {
  return (float *)((char *)slice_apack(j, tid) + j->pl->apack_bytes);
}

static const ptrdiff_t *job_offsets(const conv_job *j) {
  return (const ptrdiff_t *)(j->ws + j->pl->off_boff);
}

/* The per-image GEMM, threaded or not as the plan says. */
static void job_gemm(const conv_job *j, int tid, int tA, int tB, const float *A, int lda,
                     const float *B, int ldb, float beta, float *C, int ldc) {
  const conv_plan *pl = j->pl;
  if (pl->gemm_threads > 1)
    cl_cpu_sgemm_threaded(j->kind, pl->gemm_threads, tA, tB, pl->gM, pl->gN, pl->gK, 1.0f, A, lda,
                          B, ldb, beta, C, ldc, slice_aux(j, tid));
  else
    cl_cpu_sgemm(j->kind, tA, tB, pl->gM, pl->gN, pl->gK, 1.0f, A, lda, B, ldb, beta, C, ldc,
                 slice_aux(j, tid));
}

/* Group-image n's slice of a per-group array of `per` floats each. */
static size_t grp(const conv_job *j, int n, size_t per) { return (size_t)(n % j->G) * per; }
static const float *w_of(const conv_job *j, int n) { return j->w + grp(j, n, j->wg); }
static const float *wflip_of(const conv_job *j, int n) {
  return (const float *)(j->ws + j->pl->off_wflip) + grp(j, n, j->wg);
}
static const float *bias_of(const conv_job *j, int n) {
  return j->bias ? j->bias + grp(j, n, (size_t)j->s->K) : NULL;
}

static size_t img_floats(const cl_conv_shape *s, int channels) {
  return (size_t)channels * s->H * s->W;
}

/* C (+)= A op(im2col(img)), op the transpose for tB (backward filter):
 * img padded into the thread's buffer, whose border stays zero from
 * view_init; A packed once per call where the plan keeps it. */
static void view_gemm(const conv_job *j, int tid, int tB, const float *A, int lda, const void *img,
                      int n, int channels, float beta, float *C) {
  const conv_plan *pl = j->pl;
  fill_padded(pl, j->s->dtype, img, n, channels, 0, channels, j->s->H, j->s->W, slice_buf(j, tid));
  cl_cpu_im2col_view v = {slice_buf(j, tid), job_offsets(j), j->s->W, pl->Wp};
  cl_cpu_sgemm_im2col(j->kind, tB, pl->gM, pl->gN, pl->gK, 1.0f, A, lda, &v, beta, C, pl->gN,
                      slice_aux(j, tid), pl->apack_bytes ? slice_apack(j, tid) : NULL);
}

/* One row of y (+)= src + b, y in a half dtype t, at element `at`:
 * through a float chunk, so that each element is rounded once. */
static void store_row_half(cl_dtype t, const float *src, float b, int W, int accumulate, void *y,
                           size_t at) {
  float tmp[256];
  for (int x0 = 0; x0 < W; x0 += 256) {
    int n = imin(256, W - x0);
    for (int x = 0; x < n; x++) tmp[x] = src[x0 + x] + b;
    cl_cpu_store(t, tmp, y, at + x0, (size_t)n, accumulate);
  }
}

/* Image n of y (+)= src + bias, y holding `channels` channels in dtype t,
 * src channel o's row r at src + o ldo + r lds (the direct path computes
 * rows of Wp >= W outputs). */
static void store_rows(const conv_job *j, int channels, const float *src, size_t ldo, size_t lds,
                       const float *bias, int accumulate, cl_dtype t, void *y, int n) {
  const cl_conv_shape *s = j->s;
  const size_t first = (size_t)n * channels * s->H * s->W;
  for (int o = 0; o < channels; o++) {
    const float b = bias ? bias[o] : 0.0f, *so = src + (size_t)o * ldo;
    const size_t at = first + (size_t)o * s->H * s->W;
    if (t == CL_F32) {
      cl_cpu_rows_plus(j->kind, s->H, s->W, (float *)y + at, (size_t)s->W, so, lds, b, accumulate);
      continue;
    }
    for (int r = 0; r < s->H; r++)
      store_row_half(t, so + (size_t)r * lds, b, s->W, accumulate, y, at + (size_t)r * s->W);
  }
}

/* The direct path's C = A (shifted views of the padded image xp), in
 * bfloat16 products when the plan says so. */
static void direct_rows(const conv_job *j, int tid, const float *A, const float *xp, float *C) {
  const conv_plan *pl = j->pl;
  if (pl->bf16)
    cl_cpu_bf16_rows(pl->gM, pl->gN, pl->gK / cl_conv_taps(j->s), cl_conv_taps(j->s), A, pl->gK,
                     xp, pl->plane, pl->buf_bytes / sizeof(float), job_offsets(j), C, pl->nq,
                     slice_bf16(j, tid));
  else
    cl_cpu_sgemm_rows(j->kind, pl->gM, pl->gN, pl->gK, A, pl->gK, xp, job_offsets(j), C, pl->nq);
}

static void forward_image_direct(const conv_job *j, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const conv_plan *pl = j->pl;
  float *xp = slice_buf(j, tid), *yp = slice_aux(j, tid);
  fill_padded(pl, s->dtype, j->x, n, s->C, 0, s->C, s->H, s->W, xp);
  direct_rows(j, tid, w_of(j, n), xp, yp);
  store_rows(j, s->K, yp, (size_t)pl->nq, (size_t)pl->Wp, bias_of(j, n), j->accumulate, s->dtype,
             j->y, n);
}

/* Backward data as the forward convolution of dy with flipped weights. */
static void backward_data_image_direct(const conv_job *j, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const conv_plan *pl = j->pl;
  float *dyp = slice_buf(j, tid), *dxp = slice_aux(j, tid);
  const float *wf = wflip_of(j, n);
  fill_padded(pl, s->dtype, j->dy, n, s->K, 0, s->K, s->H, s->W, dyp);
  direct_rows(j, tid, wf, dyp, dxp);
  store_rows(j, s->C, dxp, (size_t)pl->nq, (size_t)pl->Wp, NULL, j->accumulate, CL_F32, j->dx, n);
}

/* Half storage through the view: image n of y in float32 first, then
 * rounded once where the bias (and y, accumulating) is added. */
static void forward_image_half(const conv_job *j, int n, int tid) {
  const cl_conv_shape *s = j->s;
  float *yf = slice_half(j, tid);
  view_gemm(j, tid, 0, w_of(j, n), j->pl->gK, j->x, n, s->C, 0.0f, yf);
  store_rows(j, s->K, yf, (size_t)s->H * s->W, (size_t)s->W, bias_of(j, n), j->accumulate,
             s->dtype, j->y, n);
}

static void forward_image(const conv_job *j, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const int P = s->H * s->W;
  if (s->dtype != CL_F32) {
    forward_image_half(j, n, tid);
    return;
  }
  const float *xn = (const float *)j->x + img_floats(s, s->C) * n;
  float *yn = (float *)j->y + img_floats(s, s->K) * n;
  const float *B = xn;
  if (cl_conv_taps(s) > 1 && !j->pl->view) {
    im2col(xn, s->C, s, slice_buf(j, tid));
    B = slice_buf(j, tid);
  }
  float beta = j->accumulate ? 1.0f : 0.0f;
  const float *bias = bias_of(j, n);
  /* Writing the bias first lets the GEMM add onto it while the rows of y
   * are still in cache, instead of a second pass over y. */
  if (bias) {
    for (int o = 0; o < s->K; o++)
      cl_cpu_rows_plus(j->kind, 1, P, yn + (size_t)o * P, 0, NULL, 0, bias[o], j->accumulate);
    beta = 1.0f;
  }
  if (j->pl->view)
    view_gemm(j, tid, 0, w_of(j, n), j->pl->gK, j->x, n, s->C, beta, yn);
  else
    job_gemm(j, tid, 0, 0, w_of(j, n), j->pl->gK, B, P, beta, yn, P);
}

static void backward_data_image(const conv_job *j, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const int P = s->H * s->W;
  float *dxn = j->dx + img_floats(s, s->C) * n;
  float beta = j->accumulate ? 1.0f : 0.0f;
  if (j->pl->view) { /* through flipped weights; reads dy in its storage */
    view_gemm(j, tid, 0, wflip_of(j, n), j->pl->gK, j->dy, n, s->K, beta, dxn);
    return;
  }
  const float *dyn = (const float *)j->dy + img_floats(s, s->K) * n;
  if (cl_conv_taps(s) == 1) {
    job_gemm(j, tid, 1, 0, w_of(j, n), s->C, dyn, P, beta, dxn, P);
  } else if (j->pl->flip) {
    im2col(dyn, s->K, s, slice_buf(j, tid));
    job_gemm(j, tid, 0, 0, wflip_of(j, n), j->pl->gK, slice_buf(j, tid), P, beta, dxn, P);
  } else {
    float *col = slice_buf(j, tid);
    job_gemm(j, tid, 1, 0, w_of(j, n), j->pl->gM, dyn, P, 0.0f, col, P);
    if (!j->accumulate) memset(dxn, 0, sizeof(float) * img_floats(s, s->C));
    col2im_add(col, s->C, s, dxn);
  }
}

/* ---- backward filter: dw by pieces (plan_filter_pieces) ------------------ */

/* Rows [k0, k0 + kn) of dw and its input channels [c0, c0 + cn). */
typedef struct filter_piece {
  int k0, kn, c0, cn;
} filter_piece;

static filter_piece piece_of(const conv_plan *pl, const cl_conv_shape *s, int i) {
  const int across = (s->C + pl->pch - 1) / pl->pch;
  filter_piece p = {i / across * pl->prow, 0, i % across * pl->pch, 0};
  p.kn = imin(pl->prow, s->K - p.k0);
  p.cn = imin(pl->pch, s->C - p.c0);
  return p;
}

/* Group-image n's block of dw for piece p (row stride gN). */
static float *piece_dw(const conv_job *j, const filter_piece *p, int n) {
  return j->dw + grp(j, n, j->wg) + (size_t)p->k0 * j->pl->gN +
         (size_t)p->c0 * cl_conv_taps(j->s);
}

/* dbias sums += the sums of the piece's rows of dy (group-image n): rows
 * `ld` floats apart from dy's row k0, `len` long (any padding in them is
 * zero). Only the pieces of the first channels sum them. */
static void add_dbias(const conv_job *j, const filter_piece *p, const float *dy, size_t ld,
                      int len, int n) {
  if (!j->dbias || p->c0 != 0) return;
  double *db = (double *)(j->ws + j->pl->off_dbias) + grp(j, n, (size_t)j->s->K) + p->k0;
  cl_cpu_row_sums(j->kind, p->kn, len, dy, ld, db);
}

/* The piece's channels of x padded in the thread's buffer (its first cn
 * planes, so the view offsets of channels 0.. serve), its rows of dy in
 * rows of Wp whose last 2 pad columns stay zero: products with the
 * shifted views there vanish. */
static void filter_image_direct(const conv_job *j, const filter_piece *p, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const conv_plan *pl = j->pl;
  const int kk = cl_conv_taps(s);
  const size_t first = img_floats(s, s->K) * n + (size_t)p->k0 * s->H * s->W;
  float *xp = slice_buf(j, tid), *dyp = slice_aux(j, tid);
  fill_padded(pl, s->dtype, j->x, n, s->C, p->c0, p->cn, s->H, s->W, xp);
  for (int o = 0; o < p->kn; o++)
    cl_cpu_load_rows(s->dtype, j->dy, first + (size_t)o * s->H * s->W, (size_t)s->W,
                     dyp + (size_t)o * pl->nq, pl->Wp, (size_t)s->W, (size_t)s->H);
  if (pl->bf16) {
    cl_cpu_bf16_dot(p->kn, p->cn * kk, pl->gK, dyp, pl->nq, xp, direct_reach(pl, s, p->cn),
                    job_offsets(j), piece_dw(j, p, n), pl->gN, slice_bf16(j, tid));
  } else {
    cl_cpu_sgemm_dot(j->kind, p->kn, p->cn * kk, pl->gK, dyp, pl->nq, xp, job_offsets(j),
                     piece_dw(j, p, n), pl->gN);
  }
  add_dbias(j, p, dyp, (size_t)pl->nq, pl->nq, n);
}

/* dw += dy col(x)^T on the GEMM path: col(x) of the piece's channels as
 * a view of the padded image (their planes first in the thread's buffer),
 * as their im2col, or x itself (1 x 1). Half storage reads dy's rows
 * converted to float32. */
static void filter_image_gemm(const conv_job *j, const filter_piece *p, int n, int tid) {
  const cl_conv_shape *s = j->s;
  const conv_plan *pl = j->pl;
  const int P = s->H * s->W, kk = cl_conv_taps(s), N = p->cn * kk;
  const size_t at = img_floats(s, s->K) * n + (size_t)p->k0 * P;
  const float *dyn = (const float *)j->dy + at;
  if (s->dtype != CL_F32) {
    float *dyf = slice_half(j, tid);
    cl_cpu_load(s->dtype, j->dy, at, dyf, (size_t)p->kn * P);
    dyn = dyf;
  }
  float *dw = piece_dw(j, p, n);
  if (pl->view) {
    fill_padded(pl, s->dtype, j->x, n, s->C, p->c0, p->cn, s->H, s->W, slice_buf(j, tid));
    cl_cpu_im2col_view v = {slice_buf(j, tid), job_offsets(j), s->W, pl->Wp};
    cl_cpu_sgemm_im2col(j->kind, 1, p->kn, N, P, 1.0f, dyn, P, &v, 1.0f, dw, pl->gN,
                        slice_aux(j, tid), NULL);
  } else {
    const float *B = (const float *)j->x + img_floats(s, s->C) * n + (size_t)p->c0 * P;
    if (kk > 1) {
      im2col(B, p->cn, s, slice_buf(j, tid));
      B = slice_buf(j, tid);
    }
    cl_cpu_sgemm(j->kind, 0, 1, p->kn, N, P, 1.0f, dyn, P, B, P, 1.0f, dw, pl->gN,
                 slice_aux(j, tid));
  }
  add_dbias(j, p, dyn, (size_t)P, P, n);
}

/* ---- driving the images over threads ------------------------------------- */

typedef void (*image_fn)(const conv_job *j, int n, int tid);
typedef void (*init_fn)(const conv_job *j, int tid);

typedef struct image_run {
  const conv_job *j;
  image_fn fn;
  init_fn init;
} image_run;

static void run_block(void *arg, long long lo, long long hi, int tid) {
  const image_run *r = arg;
  if (r->init) r->init(r->j, tid);
  for (int n = (int)lo; n < (int)hi; n++) r->fn(r->j, n, tid);
}

/* Thread tid of the team takes its block of images (cl_cpu_blocks), after
 * init(j, tid). Returns the team size. One thread in a forked child: it
 * takes every image, whatever the plan. */
static int for_each_image(const conv_job *j, image_fn fn, init_fn init) {
  image_run r = {j, fn, init};
  return cl_cpu_blocks(j->pl->threads, j->s->N, run_block, &r);
}

/* Direct path: zero the thread's padded buffers once (borders, slack and
 * dy's pad columns stay zero for every image). First touch by the thread
 * that uses them. */
static void direct_init(const conv_job *j, int tid) {
  memset(slice_buf(j, tid), 0, j->pl->slice_bytes);
}

/* GEMM path with an im2col view: only the padded image needs zero borders,
 * and the weights, which may have changed since the last call, are packed
 * afresh by the first image. */
static void view_init(const conv_job *j, int tid) {
  memset(slice_buf(j, tid), 0, j->pl->buf_bytes);
  if (!j->pl->apack_bytes) return;
  cl_cpu_apack *ap = slice_apack(j, tid);
  *ap = (cl_cpu_apack){(float *)((char *)ap + round64(sizeof *ap)), NULL, -1};
}

static cl_status begin(cl_backend *be, conv_op op, const cl_conv_shape *s, void *ws, conv_plan *pl,
                       conv_job *j) {
  cl_status st = check_shape(be, s);
  if (st != CL_OK) return st;
  *pl = conv_plan_of(op, s, be);
  /* the caller's bug, as in cudnn_conv.cu: the core sizes every
   * workspace from conv_workspace() */
  if (pl->total > 0 && !ws)
    return cl_cpu_fail(be, CL_E_INTERNAL, "cpu backend: convolution needs a workspace of %zu bytes",
                       pl->total);
  memset(j, 0, sizeof *j);
  j->inner = inner_shape(s);
  j->s = &j->inner;
  j->G = cl_conv_groups(s);
  j->wg = (size_t)j->inner.K * j->inner.C * cl_conv_taps(s);
  j->pl = pl;
  j->kind = cl_cpu_gemm_of(be);
  j->ws = ws ? (char *)(((uintptr_t)ws + 63) & ~(uintptr_t)63) : NULL;
  if (pl->direct || pl->view)
    fill_offsets(pl, op == OP_BWD_DATA ? j->s->K : j->s->C, j->s,
                 (ptrdiff_t *)(j->ws + pl->off_boff));
  return CL_OK;
}

static cl_status forward_nchw(cl_backend *be, const cl_conv_shape *s, const void *x, const float *w,
                              const float *bias, void *y, int accumulate, void *ws) {
  conv_plan pl;
  conv_job j;
  cl_cpu_wino_ticket tk;
  if (s->N == 0) return check_shape(be, s);
  const cl_cpu_wino_u held = cl_cpu_wino_claim(be, s);
  cl_status st = check_shape(be, s);
  if (st != CL_OK) return st;
  if (cl_cpu_wino_pick(be, s, 0, ws, &tk)) { /* before begin, which writes into ws */
    cl_cpu_wino_conv(be, s, 0, x, w, bias, y, accumulate, ws, &held);
    cl_cpu_wino_done(&tk);
    return CL_OK;
  }
  if ((st = begin(be, OP_FORWARD, s, ws, &pl, &j)) != CL_OK) return st;
  j.x = x, j.w = w, j.bias = bias, j.y = y, j.accumulate = accumulate;
  if (pl.direct)
    for_each_image(&j, forward_image_direct, direct_init);
  else
    for_each_image(&j, forward_image, pl.view ? view_init : NULL);
  cl_cpu_wino_done(&tk);
  return CL_OK;
}

static cl_status backward_data_nchw(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                    const float *w, float *dx, int accumulate, void *ws) {
  conv_plan pl;
  conv_job j;
  cl_cpu_wino_ticket tk;
  if (s->N == 0) return check_shape(be, s);
  const cl_cpu_wino_u held = cl_cpu_wino_claim(be, s);
  cl_status st = check_shape(be, s);
  if (st != CL_OK) return st;
  if (cl_cpu_wino_pick(be, s, 1, ws, &tk)) { /* before begin, which writes into ws */
    cl_cpu_wino_conv(be, s, 1, dy, w, NULL, dx, accumulate, ws, &held);
    cl_cpu_wino_done(&tk);
    return CL_OK;
  }
  if ((st = begin(be, OP_BWD_DATA, s, ws, &pl, &j)) != CL_OK) return st;
  j.dy = dy, j.w = w, j.dx = dx, j.accumulate = accumulate;
  for (int g = 0; pl.flip && g < j.G; g++)
    flip_weights(w + (size_t)g * j.wg, j.s->K, j.s->C, cl_conv_taps(s),
                 (float *)(j.ws + pl.off_wflip) + (size_t)g * j.wg);
  if (pl.direct)
    for_each_image(&j, backward_data_image_direct, direct_init);
  else
    for_each_image(&j, backward_data_image, pl.view ? view_init : NULL);
  cl_cpu_wino_done(&tk);
  return CL_OK;
}

/* A thread's pieces: its slice's buffers zeroed (borders, slack and dy's
 * pad columns stay zero), then every image in order on each piece. */
static void filter_pieces(void *arg, long long i0, long long i1, int tid) {
  const conv_job *j = arg;
  if (j->pl->direct) direct_init(j, tid);
  if (j->pl->view) view_init(j, tid);
  for (long long i = i0; i < i1; i++) {
    const filter_piece p = piece_of(j->pl, j->s, (int)i);
    for (int n = 0; n < j->s->N; n++)
      (j->pl->direct ? filter_image_direct : filter_image_gemm)(j, &p, n, tid);
  }
}

static cl_status backward_filter_nchw(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                      const void *x, float *dw, float *dbias, void *ws) {
  conv_plan pl;
  conv_job j;
  cl_cpu_wino_ticket tk;
  if (s->N == 0) return check_shape(be, s);
  (void)cl_cpu_wino_claim(be, s); /* its workspace is overwritten */
  cl_status st = begin(be, OP_BWD_FILTER, s, ws, &pl, &j);
  if (st != CL_OK) return st;
  if (cl_cpu_wino_pick(be, s, 2, ws, &tk)) {
    cl_cpu_wino_filter(be, s, dy, x, dw, dbias, ws);
    cl_cpu_wino_done(&tk);
    return CL_OK;
  }
  j.dy = dy, j.x = x, j.dw = dw, j.dbias = dbias;
  const size_t K = (size_t)j.s->K * j.G;
  double *db = (double *)(j.ws + pl.off_dbias);
  if (dbias) memset(db, 0, sizeof(double) * K);
  cl_cpu_blocks(pl.threads, pl.pieces, filter_pieces, &j);
  for (size_t o = 0; dbias && o < K; o++) dbias[o] += (float)db[o];
  cl_cpu_wino_done(&tk);
  return CL_OK;
}

/* ---- the slots: NCHW as it is, channels last between moves ---------------- */

cl_status cl_cpu_conv_forward(cl_backend *be, const cl_conv_shape *s, const void *x, const float *w,
                              const float *bias, void *y, int accumulate, void *ws) {
  if (s->layout != CL_NHWC || s->N == 0) return forward_nchw(be, s, x, w, bias, y, accumulate, ws);
  nhwc_call c;
  cl_status st = nhwc_begin(be, s, CL_CONV_FORWARD, ws, &c);
  if (st != CL_OK) return st;
  cl_cpu_relayout(c.a, CL_NCHW, x, c.N, c.C, c.P, c.es);
  if (accumulate) cl_cpu_relayout(c.b, CL_NCHW, y, c.N, c.K, c.P, c.es);
  if ((st = forward_nchw(be, &c.in, c.a, w, bias, c.b, accumulate, c.inner)) == CL_OK)
    cl_cpu_relayout(y, CL_NHWC, c.b, c.N, c.K, c.P, c.es);
  return st;
}

cl_status cl_cpu_conv_backward_data(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                    const float *w, float *dx, int accumulate, void *ws) {
  if (s->layout != CL_NHWC || s->N == 0)
    return backward_data_nchw(be, s, dy, w, dx, accumulate, ws);
  nhwc_call c;
  cl_status st = nhwc_begin(be, s, CL_CONV_BACKWARD_DATA, ws, &c);
  if (st != CL_OK) return st;
  cl_cpu_relayout(c.b, CL_NCHW, dy, c.N, c.K, c.P, c.es);
  if (accumulate) cl_cpu_relayout(c.a, CL_NCHW, dx, c.N, c.C, c.P, 4);
  if ((st = backward_data_nchw(be, &c.in, c.b, w, (float *)c.a, accumulate, c.inner)) == CL_OK)
    cl_cpu_relayout(dx, CL_NHWC, c.a, c.N, c.C, c.P, 4);
  return st;
}

cl_status cl_cpu_conv_backward_filter(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                      const void *x, float *dw, float *dbias, void *ws) {
  if (s->layout != CL_NHWC || s->N == 0) return backward_filter_nchw(be, s, dy, x, dw, dbias, ws);
  nhwc_call c;
  cl_status st = nhwc_begin(be, s, CL_CONV_BACKWARD_FILTER, ws, &c);
  if (st != CL_OK) return st;
  cl_cpu_relayout(c.a, CL_NCHW, x, c.N, c.C, c.P, c.es);
  cl_cpu_relayout(c.b, CL_NCHW, dy, c.N, c.K, c.P, c.es);
  return backward_filter_nchw(be, &c.in, c.b, c.a, dw, dbias, c.inner);
}
