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

/* ---- what goes into the key: each argument but be, by value; a shape,
 * a loss function and the update's arguments by what they hold ---------- */

static void mix_arg(cl_cuda_graphs *G, const cl_conv_shape *s) { mix(G, s, sizeof *s); }
static void mix_arg(cl_cuda_graphs *G, const cl_gates_shape *s) { mix(G, s, sizeof *s); }
static void mix_arg(cl_cuda_graphs *G, const cl_mask_shape *s) { mix(G, s, sizeof *s); }
/* a drawn mask's seed is not in it: the kernel reads the seed's device word,
 * uploaded from the pinned stage before the draws, so a step whose masks the
 * core draws (a new seed each call) replays its graph */
static void mix_arg(cl_cuda_graphs *G, const cl_mask_draw *d) { mix(G, d, sizeof *d); }
static void mix_arg(cl_cuda_graphs *G, const cl_loss_fn *f) {
  if (f) MIX(G, f->kind), MIX(G, f->delta), MIX(G, f->pos_weight);
}
/* The hyper-parameters are not part of the key: they reach the kernels
 * through the pinned constants, staged in a dry walk too (slot_hook). */
static void mix_arg(cl_cuda_graphs *G, const cl_update_args *u) {
  const int ams = u->ahp.amsgrad, mom = u->shp.momentum != 0.0f;
  const int rmom = u->rhp.momentum != 0.0f, cen = u->rhp.centered; /* RMSprop's variant */
  MIX(G, u->p), MIX(G, u->g), MIX(G, u->m), MIX(G, u->v), MIX(G, u->vmax), MIX(G, u->n);
  MIX(G, u->adam), MIX(G, ams), MIX(G, mom), MIX(G, u->unscale), MIX(G, u->inv_scale);
  MIX(G, u->rmsprop), MIX(G, rmom), MIX(G, cen);
  MIX(G, u->max_norm), MIX(G, u->check_loss);
}
/* anything else: a pointer, a size, a flag, a scale */
template <typename T> static void mix_arg(cl_cuda_graphs *G, T v) { MIX(G, v); }

/* key_of{G}(be, a, b, ...) mixes a, b, ...: called with a slot's argument
 * list from backend.h as it stands. */
struct key_of {
  cl_cuda_graphs *G;
  template <typename... A> void operator()(cl_backend *, A... a) const {
    int unused[] = {0, (mix_arg(G, a), 0)...};
    (void)unused;
  }
};

/* What a recorded slot does beyond its key, by slot: check (every walk,
 * after the key) and, in a dry walk, the result instead of the call. Most
 * slots: nothing, and CL_OK. */
template <int S> struct slot_hook {
  template <typename... A> static cl_status check(cl_backend *, A...) { return CL_OK; }
  template <typename... A> static cl_status dry(cl_backend *, A...) { return CL_OK; }
};
/* A graph reads an upload's source when it replays: only the pinned stage,
 * where the core packs the step's arrays anew before each replay, will do. */
template <> struct slot_hook<CL_SLOT_upload> {
  static cl_status check(cl_backend *be, void *, const void *src, size_t bytes) {
    const cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
    const char *s = (const char *)src, *b = (const char *)ctx->h_stage;
    if (b && s >= b && s + bytes <= b + ctx->h_stage_bytes) return CL_OK;
    return refuse(be, graphs_of(be),
                  "an upload from outside the pinned stage (CONVLSTM_CUDA_PINNED_MB)");
  }
  static cl_status dry(cl_backend *, void *, const void *, size_t) { return CL_OK; }
};
/* The update's constants are staged in a dry walk too: the graph reads them. */
template <> struct slot_hook<CL_SLOT_update_step> {
  static cl_status check(cl_backend *, const cl_update_args *, cl_step_vals *) { return CL_OK; }
  static cl_status dry(cl_backend *be, const cl_update_args *u, cl_step_vals *) {
    return cl_cuda_update_stage(be, u);
  }
};

/* ---- the recording table, from backend.h's one list --------------------
 * STEP slots are recorded: in a walk the slot's number and arguments go
 * into the key; a dry walk stops there, the others call the backend's
 * slot. SYNC slots wait for the device (or allocate) and so never belong
 * inside a step: refused in a dry or captured walk, marked in a plain one
 * (which is then never captured). NONE slots pass through; of them,
 * host_stage and the graph slots are written out below. */

/* A SYNC slot's call unless refused; a void one (free) runs either way. */
template <typename R> struct unless_refused {
  template <typename F> static R run(cl_status st, F call) { return st != CL_OK ? st : call(); }
};
template <> struct unless_refused<void> {
  template <typename F> static void run(cl_status, F call) { call(); }
};

#define GRAPH_STEP_(ret, name, params, args)                                                       \
  static ret w_##name params {                                                                     \
    cl_cuda_graphs *G = graphs_of(be);                                                             \
    if (walking(G, CL_SLOT_##name)) {                                                              \
      key_of{G} args;                                                                              \
      const cl_status st = slot_hook<CL_SLOT_##name>::check args;                                 \
      if (st != CL_OK) return st;                                                                  \
      if (dry(G)) return slot_hook<CL_SLOT_##name>::dry args;                                      \
    }                                                                                              \
    return real_iface.name args;                                                                   \
  }
#define GRAPH_SYNC_(ret, name, params, args)                                                       \
  static ret w_##name params {                                                                     \
    cl_cuda_graphs *G = graphs_of(be);                                                             \
    const cl_status st = G->walk ? refuse(be, G, #name " (it waits for the device)") : CL_OK;      \
    return unless_refused<ret>::run(st, [&]() { return real_iface.name args; });                   \
  }
#define GRAPH_NONE_(ret, name, params, args)
#define GRAPH_WRAPPER_(step, opt, ret, name, params, args) GRAPH_##step##_(ret, name, params, args)
CL_BACKEND_SLOTS(GRAPH_WRAPPER_)
#undef GRAPH_WRAPPER_
#undef GRAPH_STEP_
#undef GRAPH_SYNC_
#undef GRAPH_NONE_

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
  if (!G->off[0]) /* (a longer reason is cut at the field's end) */
    snprintf(G->off, sizeof G->off, "%.*s", (int)sizeof G->off - 1,
             why && *why ? why : "capture failed");
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
#define INSTALL_STEP_(name) graph_iface.name = w_##name;
#define INSTALL_SYNC_(name) graph_iface.name = w_##name;
#define INSTALL_NONE_(name)
#define INSTALL_(step, opt, ret, name, params, args) INSTALL_##step##_(name)
    CL_BACKEND_SLOTS(INSTALL_)
#undef INSTALL_
#undef INSTALL_STEP_
#undef INSTALL_SYNC_
#undef INSTALL_NONE_
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
