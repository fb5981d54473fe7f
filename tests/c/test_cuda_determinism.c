/*
 * tests/c/test_cuda_determinism.c -- every reduction of the CUDA training
 * step gives the same bits run after run: each slot that sums over elements
 * runs twice on the same input (the same device buffers, reset to the same
 * bytes in between) and its two results must be equal as bits. The slots:
 * conv_backward_filter's bias gradient (the sum of dy over N, H, W: block
 * partials, then a fixed-order pass; no float atomics), the loss slot
 * (every kind, weighted and not), loss_acc, sum_squares, peephole_filter
 * (per channel and per position) and mask_mul's gather (the gradient of
 * per-gate dropout's copies), in float32 and the half types, on shapes that
 * split into many blocks.
 *
 * cuDNN's weight gradient is compared too, with cuDNN held to its
 * deterministic algorithms (CONVLSTM_CUDNN_DETERMINISTIC=1, as
 * test_cuda_graphs): an algorithm with atomics would differ from itself.
 *
 * Whether the results are right is test_backend_ops' question (the same
 * slots against the CPU references); this one asks only whether they
 * repeat. Needs a GPU: without one it exits 77 (skipped); under
 * CONVLSTM_REQUIRE_GPU=1 a GPU that cannot be used fails.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include "ctest.h"        /* CHECK, uniform01 */
#include "core/backend.h" /* the slots */

#include <stdlib.h>
#include <string.h>

static cl_backend *be;

static void *dev(const void *host, size_t bytes) {
  void *p = NULL;
  if (be->iface->alloc(be, bytes, &p) != CL_OK || !p) {
    printf("FAIL alloc(%zu): %s\n", bytes, be->err);
    exit(1);
  }
  if (host && be->iface->upload(be, p, host, bytes) != CL_OK) {
    printf("FAIL upload: %s\n", be->err);
    exit(1);
  }
  return p;
}

static void *rand_bytes(size_t n, cl_dtype t) {
  const size_t es = cl_dtype_size(t);
  unsigned char *b = malloc(n * es);
  for (size_t i = 0; i < n; i++) {
    float v = (float)(uniform01(NULL) * 2 - 1);
    if (t == CL_F32) memcpy(b + 4 * i, &v, 4);
    else { /* the top 16 bits: a bfloat16, and some float16 of similar scale */
      uint32_t u;
      memcpy(&u, &v, 4);
      uint16_t h = t == CL_BF16 ? (uint16_t)(u >> 16) : (uint16_t)(0x3000u + (u >> 22) % 0x0c00u);
      memcpy(b + 2 * i, &h, 2);
    }
  }
  return b;
}

static void *get(const void *d, size_t bytes) {
  void *h = malloc(bytes);
  if (be->iface->download(be, h, d, bytes) != CL_OK) {
    printf("FAIL download: %s\n", be->err);
    exit(1);
  }
  return h;
}

/* out is reset to init (bytes) before each run; run_fn runs the slot once. */
typedef cl_status (*run_fn)(void *ctx);
static void twice(const char *what, run_fn run, void *ctx, void *out, const void *init,
                  size_t bytes) {
  void *r[2];
  for (int k = 0; k < 2; k++) {
    CHECK(be->iface->upload(be, out, init, bytes) == CL_OK, "%s: reset", what);
    cl_status st = run(ctx);
    CHECK(st == CL_OK, "%s: run %d: %s", what, k + 1, be->err);
    r[k] = get(out, bytes);
  }
  CHECK(memcmp(r[0], r[1], bytes) == 0, "%s: two runs, the same bits", what);
  free(r[0]), free(r[1]);
}

/* ---- conv_backward_filter: dw (cuDNN) and dbias (ours) ---------------- */

typedef struct conv_ctx {
  cl_conv_shape s;
  void *dy, *x, *ws;
  float *dw, *db;
} conv_ctx;

static cl_status conv_run(void *p) {
  conv_ctx *c = p;
  return be->iface->conv_backward_filter(be, &c->s, c->dy, c->x, c->dw, c->db, c->ws);
}

static void conv_case(cl_conv_shape s) {
  const size_t P = (size_t)s.H * s.W, ny = (size_t)s.N * s.K * P, nx = (size_t)s.N * s.C * P;
  const size_t nw = (size_t)s.K * (s.C / cl_conv_groups(&s)) * s.kh * s.kw;
  size_t wsb = 0;
  CHECK(cl_backend_conv_workspace_any(be, &s, &wsb) == CL_OK, "conv_workspace: %s", be->err);
  void *hdy = rand_bytes(ny, s.dtype), *hx = rand_bytes(nx, s.dtype);
  float *z = calloc(nw > (size_t)s.K ? nw : (size_t)s.K, 4);
  conv_ctx c = {s, dev(hdy, ny * cl_dtype_size(s.dtype)), dev(hx, nx * cl_dtype_size(s.dtype)),
                wsb ? dev(NULL, wsb) : NULL, dev(z, nw * 4), dev(z, (size_t)s.K * 4)};
  char what[160];
  snprintf(what, sizeof what, "conv_backward_filter N%d C%d K%d %dx%d dtype %d: bias gradient",
           s.N, s.C, s.K, s.H, s.W, (int)s.dtype);
  twice(what, conv_run, &c, c.db, z, (size_t)s.K * 4);
  snprintf(what, sizeof what, "conv_backward_filter N%d C%d K%d %dx%d dtype %d: weight gradient",
           s.N, s.C, s.K, s.H, s.W, (int)s.dtype);
  twice(what, conv_run, &c, c.dw, z, nw * 4);
  be->iface->free(be, c.dy), be->iface->free(be, c.x), be->iface->free(be, c.ws);
  be->iface->free(be, c.dw), be->iface->free(be, c.db);
  free(hdy), free(hx), free(z);
}

/* ---- losses, loss_acc and sum_squares --------------------------------- */

typedef struct loss_ctx {
  cl_loss_fn f;
  int use_f, weighted, acc;
  void *pred;
  float *target, *weight, *grad;
  double *out; /* a device double for loss_acc */
  size_t n;
  cl_dtype dtype;
  double host_loss;
} loss_ctx;

static cl_status loss_run(void *p) {
  loss_ctx *c = p;
  const cl_loss_fn *f = c->use_f ? &c->f : NULL;
  const float *w = c->weighted ? c->weight : NULL;
  if (c->acc)
    return be->iface->loss_acc(be, f, c->pred, c->target, w, c->n, c->dtype, 1.0f, c->grad, 0.5,
                               c->out);
  cl_status st =
      be->iface->loss(be, f, c->pred, c->target, w, c->n, c->dtype, 1.0f, c->grad, &c->host_loss);
  /* the host's double into the compared buffer */
  if (st == CL_OK) st = be->iface->upload(be, c->out, &c->host_loss, sizeof(double));
  return st;
}

typedef struct sumsq_ctx {
  float *g;
  size_t n;
  double *out, host;
} sumsq_ctx;

static cl_status sumsq_run(void *p) {
  sumsq_ctx *c = p;
  cl_status st = be->iface->sum_squares(be, c->g, c->n, &c->host);
  if (st == CL_OK) st = be->iface->upload(be, c->out, &c->host, sizeof(double));
  return st;
}

static void loss_cases(size_t n) {
  static const cl_loss_kind kinds[] = {CL_LOSS_MSE, CL_LOSS_MAE, CL_LOSS_HUBER,
                                       CL_LOSS_BCE_LOGITS};
  float *t = rand_bytes(n, CL_F32), *w = rand_bytes(n, CL_F32);
  for (size_t i = 0; i < n; i++) w[i] = w[i] < 0 ? -w[i] : w[i];
  const double zero = 0.0;
  for (int dt = CL_F32; dt <= CL_BF16; dt++) {
    void *hp = rand_bytes(n, (cl_dtype)dt);
    loss_ctx c = {{CL_LOSS_MSE, 1.0, 1.0, CL_REDUCE_MEAN}, 0, 0, 0,
                  dev(hp, n * cl_dtype_size((cl_dtype)dt)), dev(t, n * 4), dev(w, n * 4),
                  dev(NULL, n * 4), dev(&zero, 8), n, (cl_dtype)dt, 0};
    for (int k = 0; k < 4; k++)
      for (int weighted = 0; weighted <= 1; weighted++)
        for (int acc = 0; acc <= 1; acc++) {
          c.f.kind = kinds[k], c.use_f = k > 0 || weighted, c.weighted = weighted, c.acc = acc;
          char what[160];
          snprintf(what, sizeof what, "%s %s%s n=%zu dtype %d", acc ? "loss_acc" : "loss",
                   cl_loss_name(kinds[k]), weighted ? " weighted" : "", n, dt);
          twice(what, loss_run, &c, c.out, &zero, sizeof zero);
        }
    be->iface->free(be, c.pred), be->iface->free(be, c.target), be->iface->free(be, c.weight);
    be->iface->free(be, c.grad), be->iface->free(be, c.out);
    free(hp);
  }
  sumsq_ctx q = {dev(t, n * 4), n, dev(&zero, 8), 0};
  twice("sum_squares", sumsq_run, &q, q.out, &zero, sizeof zero);
  be->iface->free(be, q.g), be->iface->free(be, q.out);
  free(t), free(w);
}

/* ---- peephole_filter and mask_mul's gather ---------------------------- */

typedef struct peep_ctx {
  cl_gates_shape s;
  void *dz, *c, *c_prev;
  float *dwp;
} peep_ctx;

static cl_status peep_run(void *p) {
  peep_ctx *c = p;
  return be->iface->peephole_filter(be, &c->s, c->dz, c->c, c->c_prev, c->dwp);
}

static void peep_case(cl_gates_shape s) {
  const size_t hp = (size_t)s.hidden * s.P, nz = (size_t)s.N * 4 * hp, nc = (size_t)s.N * hp;
  const size_t nw = 3 * (size_t)s.hidden * cl_gates_peep_pixels(&s), es = cl_dtype_size(s.dtype);
  void *hz = rand_bytes(nz, s.dtype), *hc = rand_bytes(nc, s.dtype), *hcp = rand_bytes(nc, s.dtype);
  float *z = calloc(nw, 4);
  peep_ctx c = {s, dev(hz, nz * es), dev(hc, nc * es), dev(hcp, nc * es), dev(z, nw * 4)};
  char what[160];
  snprintf(what, sizeof what, "peephole_filter %s N%d hidden %d P%d dtype %d",
           s.peep == CL_PEEP_POSITION ? "per position" : "per channel", s.N, s.hidden, s.P,
           (int)s.dtype);
  twice(what, peep_run, &c, c.dwp, z, nw * 4);
  be->iface->free(be, c.dz), be->iface->free(be, c.c), be->iface->free(be, c.c_prev);
  be->iface->free(be, c.dwp);
  free(hz), free(hc), free(hcp), free(z);
}

typedef struct mask_ctx {
  cl_mask_shape s;
  void *in, *out;
  float *mask;
} mask_ctx;

static cl_status mask_run(void *p) {
  mask_ctx *c = p;
  return be->iface->mask_mul(be, &c->s, c->in, c->mask, c->out);
}

static void gather_case(cl_dtype t) {
  const size_t row = 3 * 17 * 19, J = 5, G = 4, reps = 7, n = J * row;
  const cl_mask_shape s = {n, row, reps, (int)G, 1, t, 1};
  void *hin = rand_bytes(reps * G * n, t), *hout = rand_bytes(reps * n, t);
  float *hm = rand_bytes(J * G * row, CL_F32);
  const size_t es = cl_dtype_size(t);
  mask_ctx c = {s, dev(hin, reps * G * n * es), dev(NULL, reps * n * es), dev(hm, J * G * row * 4)};
  char what[120];
  snprintf(what, sizeof what, "mask_mul gather of %zu groups, accumulated, dtype %d", G, (int)t);
  twice(what, mask_run, &c, c.out, hout, reps * n * es);
  be->iface->free(be, c.in), be->iface->free(be, c.out), be->iface->free(be, c.mask);
  free(hin), free(hout), free(hm);
}

int main(void) {
  setenv("CONVLSTM_CUDNN_DETERMINISTIC", "1", 1);
  char err[CL_ERRMSG_LEN] = "";
  const char *req = getenv("CONVLSTM_REQUIRE_GPU");
  if (!cl_backend_cuda_available() || cl_backend_cuda_create(&be, err, sizeof err) != CL_OK) {
    if (req && strcmp(req, "1") == 0) {
      printf("FAIL cuda: CONVLSTM_REQUIRE_GPU=1, but the CUDA backend cannot start: %s\n", err);
      return 1;
    }
    printf("skip cuda: %s\n", err[0] ? err : "no usable GPU");
    return 77;
  }
  void *scratch = NULL;
  if (be->iface->scratch_bytes && be->iface->set_scratch) {
    scratch = dev(NULL, be->iface->scratch_bytes);
    be->iface->set_scratch(be, scratch);
  }
  /* K small (many block rows per channel), K large (one row), half types */
  static const cl_conv_shape convs[] = {
      {97, 3, 33, 29, 8, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {40, 16, 16, 16, 256, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {2000, 2, 8, 8, 4, 3, 3, 1, 1, CL_F32, 0, CL_NCHW, 0},
      {97, 3, 33, 29, 8, 3, 3, 1, 1, CL_F16, 0, CL_NCHW, 0},
      {97, 3, 33, 29, 8, 3, 3, 1, 1, CL_BF16, 0, CL_NCHW, 0},
      {64, 8, 12, 12, 1024, 1, 1, 1, 1, CL_F32, 0, CL_NCHW, 0},
  };
  for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++) conv_case(convs[i]);
  loss_cases(1000003);
  static const cl_gates_shape peeps[] = {{37, 5, 41 * 43, CL_F32, CL_PEEP_CHANNEL, CL_NCHW},
                                         {37, 5, 41 * 43, CL_F32, CL_PEEP_POSITION, CL_NCHW},
                                         {37, 5, 41 * 43, CL_F16, CL_PEEP_CHANNEL, CL_NCHW}};
  for (size_t i = 0; i < sizeof peeps / sizeof peeps[0]; i++) peep_case(peeps[i]);
  for (int t = CL_F32; t <= CL_BF16; t++) gather_case((cl_dtype)t);
  if (scratch) be->iface->free(be, scratch);
  cl_backend_destroy(be);
  return ctest_done("test_cuda_determinism");
}
