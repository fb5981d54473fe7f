/*
 * cuda/cuda_graph.cu -- one training step as one CUDA graph
 * (CONVLSTM_CUDA_GRAPHS=1; off by default until a GPU has shown the replayed
 * step equal to the launched one bit for bit).
 *
 * The core runs a step's device work between graph_begin and graph_end as a
 * pure stream of launches (core/train.c, step_launches): the arena fixes
 * every address, x and y are packed into regions of the pinned stage, the
 * update's constants go through a pinned block (cuda_optim.cu), and the
 * step's results stay on the device until the core reads them after
 * graph_end. This file puts a table in front of the backend's (be->iface)
 * whose slots, inside a step, add each call -- the slot and every argument
 * but the bytes it reads -- into a 64-bit key, and then:
 *   plain    launch as without graphs (warm-up: cuDNN chooses its algorithms;
 *            a shape not seen before);
 *   capture  launch into cudaStreamBeginCapture; graph_end instantiates the
 *            graph, keeps it under the key and launches it;
 *   dry      launch nothing, only stage (x, y, the constants): graph_end
 *            launches the graph kept under the key, or, when none is (a
 *            new shape, a new loss scale, another optimizer state), says
 *            "redo" and the core calls the slots again, plainly or captured.
 * A step is captured once its key has been seen in a plain step before.
 * Because the key is made of the calls themselves, a graph replays only
 * the very launches it recorded, with the bytes the core has just staged.
 * A capture that fails (a slot that waits for the device inside a step, a
 * call cuDNN cannot record, an upload outside the pinned stage) turns
 * graphs off for this backend with the reason (graph_info), and the step
 * runs plainly: the fallback.
 */
#include <stdio.h>  /* snprintf */
#include <stdlib.h> /* calloc, free */
#include <string.h> /* memset */

#include "cuda_common.h" /* context, check macros */

#define MAX_GRAPHS 4 /* steps of different shapes alternating: train, validation, a last batch */
#define MAX_SEEN 8

enum walk { WALK_NONE = 0, WALK_PLAIN, WALK_DRY, WALK_CAPTURE };

typedef struct graph_entry {
  uint64_t key;
  cudaGraphExec_t exec;
  size_t bytes;
  long long used; /* the tick of its last launch, for eviction */
} graph_entry;

struct cl_cuda_graphs {
  int walk;
  uint64_t key;
  const char *bad;  /* why this walk cannot become a graph, or NULL */
  int capture_next; /* the next pass captures */
  int force_plain;  /* the next pass runs plainly */
  int pass;         /* passes of the step under way */
  size_t stage_mark; /* the pinned stage's use when the step began: each pass starts there */
  uint64_t seen[MAX_SEEN];
  int n_seen;
  graph_entry g[MAX_GRAPHS];
  int n;
  long long captured, replayed, plain, tick;
  int failed_captures;
  char off[200];
};

typedef struct cl_cuda_graphs cl_cuda_graphs;

/* The backend's own table, and the recording one put in front of it. */
static struct cl_backend_i real_iface, graph_iface;
static int tables_ready;

static cl_cuda_graphs *graphs_of(cl_backend *be) { return cl_cuda_ctx_of(be)->graphs; }

/* ---- the key: FNV-1a over the walk's calls ------------------------------ */

static void mix(cl_cuda_graphs *G, const void *p, size_t n) {
  const unsigned char *b = (const unsigned char *)p;
  uint64_t h = G->key;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  G->key = h;
}
#define MIX(G, v) mix((G), &(v), sizeof(v))

/* In a walk: the slot's number into the key, and 1. */
static int walking(cl_cuda_graphs *G, int slot) {
  if (G->walk == WALK_NONE) return 0;
  MIX(G, slot);
  return 1;
}

static int dry(const cl_cuda_graphs *G) { return G->walk == WALK_DRY; }

static void mark_bad(cl_cuda_graphs *G, const char *why) {
  if (!G->bad) G->bad = why;
}

/* A slot that waits for the device (or allocates) was called inside a
 * step: a dry or captured walk cannot go on; a plain one can, but is never
 * captured. */
static cl_status refuse(cl_backend *be, cl_cuda_graphs *G, const char *why) {
  mark_bad(G, why);
  if (G->walk != WALK_DRY && G->walk != WALK_CAPTURE) return CL_OK;
  snprintf(be->err, sizeof be->err, "cuda graphs: %s inside a training step", why);
  return CL_E_BACKEND;
}

/* ---- the recording slots ---------------------------------------------- */

/* A graph reads an upload's source when it replays: only the pinned stage,
 * where the core packs the step's arrays anew before each replay, will do. */
static cl_status staged(cl_backend *be, cl_cuda_graphs *G, const void *src, size_t bytes) {
  const cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  const char *s = (const char *)src, *b = (const char *)ctx->h_stage;
  if (b && s >= b && s + bytes <= b + ctx->h_stage_bytes) return CL_OK;
  return refuse(be, G, "an upload from outside the pinned stage (CONVLSTM_CUDA_PINNED_MB)");
}

static void mix_loss_fn(cl_cuda_graphs *G, const cl_loss_fn *f) {
  if (f) MIX(G, f->kind), MIX(G, f->delta), MIX(G, f->pos_weight);
}

/* The hyper-parameters are not part of the key: they reach the kernels
 * through the pinned constants, staged in a dry walk too. */
static void mix_update(cl_cuda_graphs *G, const cl_update_args *u, const cl_step_vals *vals) {
  const int ams = u->ahp.amsgrad, mom = u->shp.momentum != 0.0f;
  MIX(G, u->p), MIX(G, u->g), MIX(G, u->m), MIX(G, u->v), MIX(G, u->vmax), MIX(G, u->n);
  MIX(G, u->adam), MIX(G, ams), MIX(G, mom), MIX(G, u->unscale), MIX(G, u->inv_scale);
  MIX(G, u->max_norm), MIX(G, u->check_loss), MIX(G, vals);
}

/* The slots a step records, one row each: the slot, its number in the key
 * (fixed: a graph's key is made of them), its parameters, the arguments it
 * passes on, what a dry walk returns, then what goes into the key (the
 * slot's arguments but the bytes they point to; a shape by its fields),
 * run in every walk; a dry walk stops after it, the others call the
 * backend's slot. */
#define RECORDED_SLOTS(X)                                                                          \
  X(memset0, 1, (cl_backend *be, void *p, size_t bytes), (be, p, bytes), CL_OK, MIX(G, p),         \
    MIX(G, bytes))                                                                                 \
  X(upload, 2, (cl_backend *be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes),  \
    CL_OK, MIX(G, dst), MIX(G, src), MIX(G, bytes);                                                \
    cl_status st = staged(be, G, src, bytes); if (st != CL_OK) return st)                          \
  X(copy, 3, (cl_backend *be, void *dst, const void *src, size_t bytes), (be, dst, src, bytes),    \
    CL_OK, MIX(G, dst), MIX(G, src), MIX(G, bytes))                                                \
  X(conv_forward, 4,                                                                               \
    (cl_backend *be, const cl_conv_shape *s, const void *x, const float *w, const float *bias,     \
     void *y, int accumulate, void *ws),                                                           \
    (be, s, x, w, bias, y, accumulate, ws), CL_OK, mix(G, s, sizeof *s), MIX(G, x), MIX(G, w),     \
    MIX(G, bias), MIX(G, y), MIX(G, accumulate), MIX(G, ws))                                       \
  X(conv_backward_data, 5,                                                                         \
    (cl_backend *be, const cl_conv_shape *s, const void *dy, const float *w, float *dx,            \
     int accumulate, void *ws),                                                                    \
    (be, s, dy, w, dx, accumulate, ws), CL_OK, mix(G, s, sizeof *s), MIX(G, dy), MIX(G, w),        \
    MIX(G, dx), MIX(G, accumulate), MIX(G, ws))                                                    \
  X(conv_backward_filter, 6,                                                                       \
    (cl_backend *be, const cl_conv_shape *s, const void *dy, const void *x, float *dw,             \
     float *dbias, void *ws),                                                                      \
    (be, s, dy, x, dw, dbias, ws), CL_OK, mix(G, s, sizeof *s), MIX(G, dy), MIX(G, x),             \
    MIX(G, dw), MIX(G, dbias), MIX(G, ws))                                                         \
  X(gates_forward, 7,                                                                              \
    (cl_backend *be, const cl_gates_shape *s, void *z, const void *c_prev, const float *wp,        \
     void *c, void *h),                                                                            \
    (be, s, z, c_prev, wp, c, h), CL_OK, mix(G, s, sizeof *s), MIX(G, z), MIX(G, c_prev),          \
    MIX(G, wp), MIX(G, c), MIX(G, h))                                                              \
  X(gates_backward, 8,                                                                             \
    (cl_backend *be, const cl_gates_shape *s, void *gates, const void *c, const void *c_prev,      \
     const float *wp, const float *dh, float *dc),                                                 \
    (be, s, gates, c, c_prev, wp, dh, dc), CL_OK, mix(G, s, sizeof *s), MIX(G, gates), MIX(G, c),  \
    MIX(G, c_prev), MIX(G, wp), MIX(G, dh), MIX(G, dc))                                            \
  X(gather_rows, 9,                                                                                \
    (cl_backend *be, void *dst, const void *src, const int *idx, int nb, int N, int t0, int nt,    \
     size_t row_bytes),                                                                            \
    (be, dst, src, idx, nb, N, t0, nt, row_bytes), CL_OK, MIX(G, dst), MIX(G, src), MIX(G, idx),   \
    MIX(G, nb), MIX(G, N), MIX(G, t0), MIX(G, nt), MIX(G, row_bytes))                              \
  X(loss_acc, 10,                                                                                  \
    (cl_backend *be, const cl_loss_fn *f, const void *pred, const float *target,                   \
     const float *weight, size_t n, cl_dtype dtype, float scale, float *grad, double share,        \
     double *acc),                                                                                 \
    (be, f, pred, target, weight, n, dtype, scale, grad, share, acc), CL_OK, mix_loss_fn(G, f),    \
    MIX(G, pred), MIX(G, target), MIX(G, weight), MIX(G, n), MIX(G, dtype), MIX(G, scale),         \
    MIX(G, grad), MIX(G, share), MIX(G, acc))                                                      \
  X(update_step, 11, (cl_backend *be, const cl_update_args *u, cl_step_vals *vals),                \
    (be, u, vals), cl_cuda_update_stage(be, u), mix_update(G, u, vals))                            \
  X(mask_mul, 12,                                                                                  \
    (cl_backend *be, const cl_mask_shape *s, const void *in, const float *mask, void *out),        \
    (be, s, in, mask, out), CL_OK, mix(G, s, sizeof *s), MIX(G, in), MIX(G, mask), MIX(G, out))    \
  X(peephole_filter, 13,                                                                           \
    (cl_backend *be, const cl_gates_shape *s, const void *dz, const void *c, const void *c_prev,   \
     float *dwp),                                                                                  \
    (be, s, dz, c, c_prev, dwp), CL_OK, mix(G, s, sizeof *s), MIX(G, dz), MIX(G, c),               \
    MIX(G, c_prev), MIX(G, dwp))

#define RECORDING_SLOT(name, num, params, args, dry_result, ...)                                   \
  static cl_status w_##name params {                                                               \
    cl_cuda_graphs *G = graphs_of(be);                                                             \
    if (walking(G, num)) {                                                                         \
      __VA_ARGS__;                                                                                 \
      if (dry(G)) return dry_result;                                                               \
    }                                                                                              \
    return real_iface.name args;                                                                   \
  }
RECORDED_SLOTS(RECORDING_SLOT)
#undef RECORDING_SLOT

/* Slots that wait for the device (they read a result) and so never belong
 * inside a step: the slot, why, its parameters, the arguments it passes on. */
#define WAITING_SLOTS(X)                                                                           \
  X(download, "a download", (cl_backend *be, void *host_dst, const void *src, size_t bytes),       \
    (be, host_dst, src, bytes))                                                                    \
  X(synchronize, "a synchronize", (cl_backend *be), (be))                                          \
  X(mse, "mse (it reads the loss)",                                                                \
    (cl_backend *be, const void *pred, const float *target, size_t n, cl_dtype dtype,              \
     float scale, float *grad, double *loss),                                                      \
    (be, pred, target, n, dtype, scale, grad, loss))                                               \
  X(loss, "loss (it reads the loss)",                                                              \
    (cl_backend *be, const cl_loss_fn *f, const void *pred, const float *target,                   \
     const float *weight, size_t n, cl_dtype dtype, float scale, float *grad, double *loss),       \
    (be, f, pred, target, weight, n, dtype, scale, grad, loss))

#define WAITING_SLOT(name, why, params, args)                                                      \
  static cl_status w_##name params {                                                               \
    cl_status st = graphs_of(be)->walk ? refuse(be, graphs_of(be), why) : CL_OK;                   \
    return st != CL_OK ? st : real_iface.name args;                                                \
  }
WAITING_SLOTS(WAITING_SLOT)
#undef WAITING_SLOT

/* Allocation: never inside a step (refused, or in a plain walk marked). */
static cl_status w_alloc(cl_backend *be, size_t bytes, void **out) {
  cl_status st = refuse(be, graphs_of(be), "an allocation");
  if (st != CL_OK) return (*out = NULL), st;
  return real_iface.alloc(be, bytes, out);
}

static void w_free(cl_backend *be, void *p) {
  (void)refuse(be, graphs_of(be), "a free");
  real_iface.free(be, p);
}

/* Inside a step the stage must not wait for the stream to make room. */
static cl_status w_host_stage(cl_backend *be, size_t bytes, void **host) {
  cl_cuda_graphs *G = graphs_of(be);
  const cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  if (G->walk != WALK_NONE && !(ctx->h_stage && ctx->h_stage_used + bytes <= ctx->h_stage_bytes)) {
    *host = NULL;
    cl_status st = refuse(be, G, "the pinned stage filling up (CONVLSTM_CUDA_PINNED_MB)");
    if (st != CL_OK) return CL_E_UNSUPPORTED; /* the core stages through malloc; upload refuses */
  }
  return real_iface.host_stage(be, bytes, host);
}

/* ---- the graphs --------------------------------------------------------- */

static void drop(graph_entry *e) {
  if (e->exec) (void)cudaGraphExecDestroy(e->exec);
  memset(e, 0, sizeof *e);
}

static void turn_off(cl_cuda_graphs *G, const char *why) {
  if (!G->off[0]) snprintf(G->off, sizeof G->off, "%s", why && *why ? why : "capture failed");
  for (int i = 0; i < G->n; i++) drop(&G->g[i]);
  G->n = 0;
}

static int known(const cl_cuda_graphs *G, uint64_t key) {
  for (int i = 0; i < G->n_seen; i++)
    if (G->seen[i] == key) return 1;
  return 0;
}

/* Whether key was seen before; it is from now on. */
static int seen(cl_cuda_graphs *G, uint64_t key) {
  if (known(G, key)) return 1;
  G->seen[G->n_seen < MAX_SEEN ? G->n_seen++ : (int)(G->plain % MAX_SEEN)] = key;
  return 0;
}

static graph_entry *find(cl_cuda_graphs *G, uint64_t key) {
  for (int i = 0; i < G->n; i++)
    if (G->g[i].key == key) return &G->g[i];
  return NULL;
}

/* A slot for a new graph: a free one, else the least recently launched. */
static graph_entry *slot_for(cl_cuda_graphs *G) {
  if (G->n < MAX_GRAPHS) return &G->g[G->n++];
  graph_entry *e = &G->g[0];
  for (int i = 1; i < G->n; i++)
    if (G->g[i].used < e->used) e = &G->g[i];
  drop(e);
  return e;
}

static cl_status launch(cl_backend *be, cl_cuda_graphs *G, graph_entry *e) {
  e->used = ++G->tick;
  CL_CUDA_CHECK(be, cudaGraphLaunch(e->exec, cl_cuda_ctx_of(be)->stream));
  return CL_OK;
}

static cl_status g_begin(cl_backend *be, cl_graph_mode mode) {
  cl_cuda_graphs *G = graphs_of(be);
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  if (G->pass++ == 0) {
    cl_cuda_stage_prepare(be); /* a growth it owes, before any capture */
    G->stage_mark = ctx->h_stage_used;
  }
  else /* nothing of the last pass is queued: its regions are free again */
    ctx->h_stage_used = G->stage_mark;
  G->key = 14695981039346656037ull;
  G->bad = NULL;
  G->walk = WALK_PLAIN;
  if (mode == CL_GRAPH_OFF_COMM)
    turn_off(G, "data-parallel training: the gradients' reduction over the ranks (a "
                "communicator's wait and host sum) cannot be captured");
  const int plain = mode != CL_GRAPH_AUTO || G->off[0] || G->force_plain;
  G->force_plain = 0;
  if (plain) return CL_OK;
  if (G->capture_next) {
    G->capture_next = 0;
    cudaError_t e = cudaStreamBeginCapture(ctx->stream, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
      G->walk = WALK_CAPTURE;
    } else {
      (void)cudaGetLastError();
      turn_off(G, cudaGetErrorString(e));
    }
    return CL_OK;
  }
  if (G->n) G->walk = WALK_DRY;
  return CL_OK;
}

/* The capture ended well: instantiate, keep and launch it. The device
 * memory instantiation takes is measured as the driver's free memory
 * before and after (cudaMemGetInfo), as the runtime line is. */
static cl_status keep_capture(cl_backend *be, cl_cuda_graphs *G, cudaGraph_t graph, int *redo) {
  size_t f0 = 0, f1 = 0, total = 0;
  (void)cudaMemGetInfo(&f0, &total);
  cudaGraphExec_t exec = NULL;
  cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaMemGetInfo(&f1, &total);
  (void)cudaGraphDestroy(graph);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    turn_off(G, cudaGetErrorString(e));
    *redo = 1;
    return CL_OK;
  }
  graph_entry *s = slot_for(G);
  s->key = G->key;
  s->exec = exec;
  s->bytes = f0 > f1 ? f0 - f1 : 0;
  G->captured++;
  return launch(be, G, s);
}

static cl_status g_end(cl_backend *be, cl_status failed, int *redo) {
  cl_cuda_graphs *G = graphs_of(be);
  const int walk = G->walk;
  G->walk = WALK_NONE;
  *redo = 0;
  cl_status st = CL_OK;
  if (walk == WALK_PLAIN) {
    G->plain++;
    if (failed == CL_OK && !G->bad && !G->off[0] && seen(G, G->key)) G->capture_next = 1;
  } else if (walk == WALK_CAPTURE) {
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(cl_cuda_ctx_of(be)->stream, &graph);
    if (failed != CL_OK || G->bad || e != cudaSuccess || !graph) {
      /* a step of a shape never run plainly (capture_next was set by
       * another) may fail for want of a warm-up (cudnnFind): tried once
       * more later; a warmed-up one, or a second failure, cannot be */
      if (known(G, G->key) || ++G->failed_captures > 1)
        turn_off(G, G->bad ? G->bad : failed != CL_OK ? be->err : cudaGetErrorString(e));
      else
        G->force_plain = 1;
      if (graph) (void)cudaGraphDestroy(graph);
      (void)cudaGetLastError();
      *redo = 1; /* nothing captured ran */
    } else {
      st = keep_capture(be, G, graph, redo);
    }
  } else if (walk == WALK_DRY) {
    graph_entry *g = failed == CL_OK && !G->bad ? find(G, G->key) : NULL;
    if (g) {
      G->replayed++;
      st = launch(be, G, g);
    } else {
      *redo = 1; /* nothing ran: a shape without a graph yet */
      if (failed == CL_OK && !G->bad && seen(G, G->key))
        G->capture_next = 1;
      else
        G->force_plain = 1;
    }
  }
  if (!*redo) G->pass = 0;
  return st;
}

static void g_info(cl_backend *be, cl_graph_info *out) {
  const cl_cuda_graphs *G = graphs_of(be);
  memset(out, 0, sizeof *out);
  out->asked = 1;
  out->on = !G->off[0];
  out->held = G->n;
  out->captured = G->captured;
  out->replayed = G->replayed;
  out->plain = G->plain;
  for (int i = 0; i < G->n; i++) out->bytes += G->g[i].bytes;
  snprintf(out->off, sizeof out->off, "%s", G->off);
}

cl_status cl_cuda_graphs_attach(cl_backend *be) {
  if (!tables_ready) {
    real_iface = *be->iface;
    graph_iface = real_iface;
#define INSTALL(name, ...) graph_iface.name = w_##name;
    RECORDED_SLOTS(INSTALL)
    WAITING_SLOTS(INSTALL)
#undef INSTALL
    graph_iface.alloc = w_alloc;
    graph_iface.free = w_free;
    graph_iface.host_stage = w_host_stage;
    graph_iface.graph_begin = g_begin;
    graph_iface.graph_end = g_end;
    graph_iface.graph_info = g_info;
    tables_ready = 1;
  }
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  ctx->graphs = (cl_cuda_graphs *)calloc(1, sizeof *ctx->graphs);
  if (!ctx->graphs) {
    snprintf(be->err, sizeof be->err, "cuda graphs: out of host memory");
    return CL_E_OOM;
  }
  be->iface = &graph_iface;
  return CL_OK;
}

void cl_cuda_graphs_free(cl_backend *be) {
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  if (!ctx->graphs) return;
  for (int i = 0; i < ctx->graphs->n; i++) drop(&ctx->graphs->g[i]);
  free(ctx->graphs);
  ctx->graphs = NULL;
}
