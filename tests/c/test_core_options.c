/*
 * tests/c/test_core_options.c -- the step options against the plain step,
 * through the public header on the CPU backend: checkpointed and accumulated
 * gradients equal the plain ones; truncation keeps the forward exact and its
 * memory independent of T, and a window of 1 gives the gradients of one step
 * from the detached state; last-state inference gives the same states in
 * memory independent of T; and for random shapes and options the plan equals
 * what the allocator counts while the step runs, per category, to the byte,
 * with and without guard bands after every arena buffer (CONVLSTM_GUARD=1: a
 * kernel writing past its planned slot fails the step with the buffer's
 * name). The counts are the plan read back (step.c charges each buffer its
 * planned size), so equality shows that the options reach the plan and the
 * arena, not that the plan is right; the guard bands and
 * tests/c/test_plan_bytes.c (bytes from the shapes) check that. Exits nonzero
 * on any failure.
 */
#define _POSIX_C_SOURCE 200112L /* setenv, unsetenv */
#include "convlstm.h"
#include "ctest.h" /* CHECK, uniform01, ctest_flat */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXG (1 << 16) /* gradients of the largest problem here */

static int randint(int lo, int hi) { return lo + (int)(uniform01(NULL) * (hi - lo + 1)); }

typedef struct problem {
  cl_config cfg;
  int B, T, H, W;
  float *x, *y_last, *y_seq;
} problem;

static problem make_problem(int B, int T, int H, int W, int layers) {
  problem p;
  memset(&p, 0, sizeof p);
  p.cfg.input_dim = 2;
  p.cfg.n_layers = layers;
  for (int l = 0; l < layers; l++) {
    p.cfg.hidden_dims[l] = 2 + l % 2;
    p.cfg.kernel_sizes[l] = l % 2 ? 1 : 3;
  }
  p.cfg.bias = 1;
  p.cfg.n_threads = 2;
  p.B = B; p.T = T; p.H = H; p.W = W;
  int top = p.cfg.hidden_dims[layers - 1];
  size_t nx = (size_t)B * T * 2 * H * W, ny = (size_t)B * top * H * W;
  p.x = malloc(nx * sizeof *p.x);
  p.y_last = malloc(ny * sizeof *p.y_last);
  p.y_seq = malloc(ny * T * sizeof *p.y_seq);
  for (size_t i = 0; i < nx; i++) p.x[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < ny; i++) p.y_last[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < ny * T; i++) p.y_seq[i] = (float)uniform01(NULL);
  return p;
}

static void free_problem(problem *p) {
  free(p->x);
  free(p->y_last);
  free(p->y_seq);
}

static cl_model *model_of(const problem *p, unsigned long long seed) {
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN];
  CHECK(cl_model_create(&p->cfg, &m, err, sizeof err) == CL_OK, "create: %s", err);
  ctest_rng = seed;
  cl_model_init_params(m, uniform01, NULL);
  return m;
}

/* One train_step with SGD at lr 0 (parameters stay), returning the loss and
 * every gradient flattened. */
static double step_grads(const problem *p, cl_target tg, const cl_step_options *o, float *g,
                         size_t *ng) {
  cl_model *m = model_of(p, 7);
  int top = p->cfg.hidden_dims[p->cfg.n_layers - 1];
  cl_host_array xa = {p->x, CL_HOST_TORCH_F32, 5, {p->B, p->T, 2, p->H, p->W}};
  cl_host_array ya = tg == CL_TARGET_SEQUENCE
                       ? (cl_host_array){p->y_seq, CL_HOST_TORCH_F32, 5, {p->B, p->T, top, p->H, p->W}}
                       : (cl_host_array){p->y_last, CL_HOST_TORCH_F32, 4, {p->B, top, p->H, p->W, 0}};
  cl_optim sgd = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  double loss = NAN;
  cl_status s = cl_model_train_step(m, &xa, &ya, tg, &sgd, o, &loss);
  CHECK(s == CL_OK, "train_step: %s", cl_model_error(m));
  *ng = ctest_flat(m, 1, g, MAXG);
  cl_model_free(m);
  return loss;
}

static float g0[MAXG], g1[MAXG];

static void test_equal_gradients(void) {
  problem p = make_problem(6, 7, 5, 4, 3);
  for (int tg = 0; tg < 2; tg++) {
    size_t n0, n1;
    double l0 = step_grads(&p, (cl_target)tg, NULL, g0, &n0), worst = 0;
    int ks[] = {1, 2, 3, 6};
    for (int i = 0; i < 4; i++) {
      cl_step_options o = {0};
      o.checkpoint = ks[i];
      double l1 = step_grads(&p, (cl_target)tg, &o, g1, &n1), r = rel_diff(g1, g0, n0);
      CHECK(n1 == n0 && r <= 1e-6, "checkpoint %d, target %d: gradients differ by %.2e", ks[i], tg, r);
      CHECK(fabs(l1 - l0) <= 1e-7 * fabs(l0), "checkpoint %d: loss %.9g vs %.9g", ks[i], l1, l0);
      worst = fmax(worst, r);
    }
    printf("checkpoint (target %s): gradients within %.2e of the plain step\n",
           tg ? "sequence" : "last_state", worst);
    worst = 0;
    int ms[] = {2, 3, 4, 6};
    for (int i = 0; i < 4; i++) {
      cl_step_options o = {0};
      o.accumulation_steps = ms[i];
      double l1 = step_grads(&p, (cl_target)tg, &o, g1, &n1), r = rel_diff(g1, g0, n0);
      CHECK(r <= 1e-5, "accumulation %d, target %d: gradients differ by %.2e", ms[i], tg, r);
      CHECK(fabs(l1 - l0) <= 1e-6 * fabs(l0), "accumulation %d: loss %.9g vs %.9g", ms[i], l1, l0);
      worst = fmax(worst, r);
    }
    printf("accumulation (target %s): gradients within %.2e of the full batch\n",
           tg ? "sequence" : "last_state", worst);
    /* recompute_gates: the same gates from the same calls; the weight
     * gradients summed chunk by chunk in another order (float32 rounding),
     * a chunk of the whole sequence bit for bit the plain step */
    worst = 0;
    int rcs[][2] = {{1, 0}, {2, 0}, {3, 0}, {7, 0}, {2, 3}, {1, 1}, {4, 6}};
    for (int i = 0; i < 7; i++) {
      cl_step_options o = {0};
      o.recompute_gates = rcs[i][0];
      o.checkpoint = rcs[i][1];
      if (i == 6) o.accumulation_steps = 2; /* accumulation's own order: its tolerance */
      double l1 = step_grads(&p, (cl_target)tg, &o, g1, &n1), r = rel_diff(g1, g0, n0);
      double tol = i == 6 ? 1e-5 : 1e-6;
      CHECK(n1 == n0 && r <= tol, "recompute_gates %d, checkpoint %d, target %d: gradients "
            "differ by %.2e", rcs[i][0], rcs[i][1], tg, r);
      CHECK(fabs(l1 - l0) <= 1e-6 * fabs(l0), "recompute_gates %d: loss %.9g vs %.9g", rcs[i][0],
            l1, l0);
      if (rcs[i][0] >= p.T && !rcs[i][1]) CHECK(r == 0, "recompute_gates = T differs: %.2e", r);
      worst = fmax(worst, r);
    }
    printf("recompute_gates (target %s): gradients within %.2e of the plain step\n",
           tg ? "sequence" : "last_state", worst);
    /* truncation changes gradients, never the forward: same loss; a window
     * as long as the sequence is the plain step */
    for (int k = 1; k <= 7; k++) {
      cl_step_options o = {0};
      o.tbptt = k;
      double l1 = step_grads(&p, (cl_target)tg, &o, g1, &n1);
      CHECK(fabs(l1 - l0) <= 1e-6 * fabs(l0), "tbptt %d: loss %.9g vs %.9g", k, l1, l0);
      if (k == 7) CHECK(rel_diff(g1, g0, n0) == 0, "tbptt = T differs from the plain step");
    }
  }
  free_problem(&p);
}

/* tbptt with target last_state and window 1: only the last step sees the
 * loss, and the state it starts from is a constant (detached). So every
 * gradient of that step is the gradient of a one-step sequence x[, T] started
 * from the state the first T - 1 steps leave, given as a constant
 * (CL_STATE_GIVEN): that reference is built here, from a plain forward of
 * the first T - 1 steps and a plain step on the last one. The truncated
 * gradients also differ from the full ones (the cut is real). The
 * window-by-window reference for longer windows and a PyTorch fixture are
 * test_core_tbptt.c's. */
static void test_tbptt_truncates(void) {
  enum { B = 2, T = 5, C = 2, H = 4, W = 4 };
  problem p = make_problem(B, T, H, W, 1);
  size_t n0, n1;
  step_grads(&p, CL_TARGET_LAST_STATE, NULL, g0, &n0);
  cl_step_options o = {0};
  o.tbptt = 1;
  step_grads(&p, CL_TARGET_LAST_STATE, &o, g1, &n1);
  CHECK(rel_diff(g1, g0, n0) > 1e-4, "tbptt 1 should cut the gradient through time");

  int hid = p.cfg.hidden_dims[0];
  size_t frame = (size_t)C * H * W, nh = (size_t)B * hid * H * W;
  float head[B * (T - 1) * C * H * W], tail[B * C * H * W], h[B * 2 * H * W], c[B * 2 * H * W];
  for (int b = 0; b < B; b++) {
    memcpy(head + (size_t)b * (T - 1) * frame, p.x + (size_t)b * T * frame,
           (T - 1) * frame * sizeof(float));
    memcpy(tail + (size_t)b * frame, p.x + ((size_t)b * T + T - 1) * frame, frame * sizeof(float));
  }
  CHECK(nh <= sizeof h / sizeof *h, "state buffers too small");
  cl_model *m = model_of(&p, 7); /* step_grads' parameters */
  cl_host_array xh = {head, CL_HOST_TORCH_F32, 5, {B, T - 1, C, H, W}};
  cl_host_array st[2] = {{h, CL_HOST_TORCH_F32, 4, {B, hid, H, W, 0}},
                         {c, CL_HOST_TORCH_F32, 4, {B, hid, H, W, 0}}};
  CHECK(cl_model_forward(m, &xh, 0, NULL) == CL_OK, "forward: %s", cl_model_error(m));
  CHECK(cl_model_read_state(m, 0, 0, &st[0]) == CL_OK && cl_model_read_state(m, 0, 1, &st[1]) ==
            CL_OK, "read state: %s", cl_model_error(m));
  cl_host_array xt = {tail, CL_HOST_TORCH_F32, 5, {B, 1, C, H, W}};
  cl_host_array ya = {p.y_last, CL_HOST_TORCH_F32, 4, {B, hid, H, W, 0}};
  cl_step_options og = {0};
  og.state_mode = CL_STATE_GIVEN;
  og.state = st;
  cl_optim sgd0 = {CL_OPTIM_SGD, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  double loss;
  CHECK(cl_model_train_step(m, &xt, &ya, CL_TARGET_LAST_STATE, &sgd0, &og, &loss) == CL_OK,
        "one step from the given state: %s", cl_model_error(m));
  size_t at = ctest_flat(m, 1, g0, MAXG);
  double r = rel_diff(g1, g0, n1);
  CHECK(at == n1 && r <= 1e-6, "tbptt 1: gradients %.2e from one step on the state detached", r);
  printf("tbptt 1 (target last_state): gradients within %.1e of one step from the detached "
         "state\n", r);
  cl_model_free(m);
  free_problem(&p);
}

static size_t plan_peak(cl_model *m, int B, int T, int training, const cl_step_options *o) {
  cl_plan p;
  cl_model_plan(m, B, T, 6, 5, training, NULL, o, &p);
  size_t t = p.total - p.by_category[CL_MEM_PARAMETERS];
  cl_plan_free(&p);
  return t;
}

static void test_memory_independent_of_T(void) {
  problem p = make_problem(2, 3, 6, 5, 2);
  cl_model *m = model_of(&p, 3);
  cl_step_options last = {0};
  last.outputs = CL_OUTPUTS_LAST;
  CHECK(plan_peak(m, 4, 10, 0, &last) == plan_peak(m, 4, 1000, 0, &last),
        "last-state inference grows with T");
  cl_step_options tb = {0};
  tb.tbptt = 4;
  CHECK(plan_peak(m, 4, 10, 1, &tb) == plan_peak(m, 4, 1000, 1, &tb), "tbptt grows with T");
  cl_step_options ck = {0};
  ck.checkpoint = 10;
  size_t c100 = plan_peak(m, 4, 100, 1, &ck), plain100 = plan_peak(m, 4, 100, 1, NULL);
  CHECK(c100 * 3 < plain100, "checkpoint 10 of 100 steps: %zu vs plain %zu", c100, plain100);
  printf("T = 100, batch 4: plain training %zu bytes, checkpoint 10: %zu bytes\n", plain100, c100);

  /* and measured: last states of the step-major schedule */
  int top = p.cfg.hidden_dims[1];
  enum { T1 = 9 };
  size_t nx = (size_t)2 * T1 * 2 * 6 * 5;
  float *x = malloc(nx * sizeof *x), h1[2 * 3 * 30], h2[2 * 3 * 30], c1[2 * 3 * 30], c2[2 * 3 * 30];
  for (size_t i = 0; i < nx; i++) x[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {2, T1, 2, 6, 5}};
  cl_host_array ha = {h1, CL_HOST_TORCH_F32, 4, {2, top, 6, 5, 0}}, ca = ha;
  ca.data = c1;
  CHECK(cl_model_forward(m, &xa, 0, NULL) == CL_OK, "forward all");
  cl_model_read_state(m, 1, 0, &ha);
  cl_model_read_state(m, 1, 1, &ca);
  CHECK(cl_model_forward(m, &xa, 0, &last) == CL_OK, "forward last");
  ha.data = h2;
  ca.data = c2;
  cl_model_read_state(m, 1, 0, &ha);
  cl_model_read_state(m, 1, 1, &ca);
  size_t n = (size_t)2 * top * 30;
  CHECK(memcmp(h1, h2, n * sizeof(float)) == 0 && memcmp(c1, c2, n * sizeof(float)) == 0,
        "last-state inference gives other states");
  cl_host_array oa = {x, CL_HOST_TORCH_F32, 5, {2, T1, top, 6, 5}};
  CHECK(cl_model_read_output(m, 1, &oa) == CL_E_STATE, "outputs after last-state inference");
  free(x);
  cl_model_free(m);
  free_problem(&p);
}

/* For random problems and options: the allocator's peak per category ==
 * plan (accounting, not a measurement); with guard = 1 every arena buffer
 * is followed by a guard band that the step checks, so a buffer planned
 * smaller than what a kernel writes fails the case. */
static void test_plan_equals_accounting(int cases, int guard) {
  int bad = 0;
  if (guard)
    setenv("CONVLSTM_GUARD", "1", 1); /* read when a model is created */
  else
    unsetenv("CONVLSTM_GUARD");
  for (int c = 0; c < cases; c++) {
    int layers = randint(1, 3), B = randint(1, 5), T = randint(1, 8);
    problem p = make_problem(B, T, randint(1, 7), randint(1, 7), layers);
    cl_model *m = model_of(&p, (unsigned long long)c + 11);
    cl_step_options o = {0};
    int which = randint(0, 4), training = which != 4;
    if (which == 1) o.checkpoint = randint(1, T);
    if (which == 2) o.tbptt = randint(1, T);
    if (training && randint(0, 1)) o.recompute_gates = randint(1, T);
    if (which == 3 || randint(0, 1)) o.accumulation_steps = randint(1, B);
    if (!training) o.outputs = randint(0, 1) ? CL_OUTPUTS_LAST : CL_OUTPUTS_ALL;
    cl_target tg = randint(0, 1) ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
    if (training) o.plan_target = 1 + (int)tg; /* the plan of train_step's target */
    cl_optim opt = randint(0, 1) ? (cl_optim){CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0}
                                 : (cl_optim){CL_OPTIM_SGD, 1e-2, 0, 0, 0, 0.9 * randint(0, 1), 0, 0, 0, 0};
    cl_plan plan;
    CHECK(cl_model_plan(m, B, T, p.H, p.W, training, training ? &opt : NULL, &o, &plan) == CL_OK,
          "plan: %s", cl_model_error(m));
    int top = p.cfg.hidden_dims[layers - 1];
    cl_host_array xa = {p.x, CL_HOST_TORCH_F32, 5, {B, T, 2, p.H, p.W}};
    cl_host_array ya = tg == CL_TARGET_SEQUENCE
                         ? (cl_host_array){p.y_seq, CL_HOST_TORCH_F32, 5, {B, T, top, p.H, p.W}}
                         : (cl_host_array){p.y_last, CL_HOST_TORCH_F32, 4, {B, top, p.H, p.W, 0}};
    double loss;
    cl_status s = training ? cl_model_train_step(m, &xa, &ya, tg, &opt, &o, &loss)
                           : cl_model_forward(m, &xa, 0, &o);
    CHECK(s == CL_OK, "case %d (guard %d): %s", c, guard, cl_model_error(m));
    cl_mem_stats st;
    cl_model_memory_stats(m, &st);
    if (st.peak_allocated != plan.total || st.peak_reserved != plan.reserved ||
        st.reserved != plan.reserved || st.reserved < st.allocated) {
      bad++;
      CHECK(0, "case %d: plan total %zu reserved %zu; accounted peak %zu, reserved %zu (peak %zu)",
            c, plan.total, plan.reserved, st.peak_allocated, st.reserved, st.peak_reserved);
    }
    for (int k = 0; k < CL_MEM_NCAT; k++)
      if (st.peak[k] != plan.by_category[k]) {
        bad++;
        CHECK(0, "case %d (B %d T %d, ck %d tb %d acc %d rc %d train %d) %s: plan %zu, accounted %zu",
              c, B, T, o.checkpoint, o.tbptt, o.accumulation_steps, o.recompute_gates, training,
              cl_mem_category_name((cl_mem_category)k), plan.by_category[k], st.peak[k]);
      }
    cl_plan_free(&plan);
    cl_model_free(m);
    free_problem(&p);
  }
  unsetenv("CONVLSTM_GUARD");
  printf("plan == accounted peak per category%s: %d of %d random cases\n",
         guard ? ", guard bands checked after every step" : "", cases - (bad > 0), cases);
}

/* Flattened parameters of m into a new buffer. */
static float *params_of(cl_model *m) {
  size_t n = cl_model_n_params(m);
  float *out = malloc(n * sizeof *out);
  if (out) ctest_flat(m, 0, out, n);
  return out;
}

/* The arena: a larger step grows it, a smaller one reuses it without a
 * device allocation, and what a larger step left in it changes nothing. */
static void test_arena_reuse(void) {
  problem big = make_problem(5, 6, 7, 6, 3), small = make_problem(2, 3, 7, 6, 3);
  cl_model *used = model_of(&small, 3), *fresh = model_of(&small, 3);
  cl_host_array xb = {big.x, CL_HOST_TORCH_F32, 5, {5, 6, 2, 7, 6}};
  cl_host_array xs = {small.x, CL_HOST_TORCH_F32, 5, {2, 3, 2, 7, 6}};
  int top = small.cfg.hidden_dims[2];
  cl_host_array ys = {small.y_seq, CL_HOST_TORCH_F32, 5, {2, 3, top, 7, 6}};
  cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  cl_plan pb, ps;
  CHECK(cl_model_plan(used, 5, 6, 7, 6, 1, &adam, NULL, &pb) == CL_OK, "plan big");
  CHECK(cl_model_plan(used, 2, 3, 7, 6, 1, &adam, NULL, &ps) == CL_OK, "plan small");
  CHECK(pb.arena > ps.arena, "the larger step needs a larger arena");
  for (int i = 0; i < pb.n; i++) /* views do not overlap and fit */
    for (int j = 0; j < pb.n; j++) {
      const cl_plan_entry *a = &pb.entries[i], *b = &pb.entries[j];
      if (!a->in_arena || !b->in_arena) continue;
      CHECK(a->offset % CL_ARENA_ALIGN == 0 && a->offset + a->bytes <= pb.arena, "%s placed",
            a->name);
      if (i != j && a->bytes && b->bytes)
        CHECK(a->offset + a->bytes <= b->offset || b->offset + b->bytes <= a->offset,
              "%s overlaps %s", a->name, b->name);
    }
  double l_used = 0, l_fresh = 0;
  cl_mem_stats st;
  for (int round = 0; round < 3; round++) {
    CHECK(cl_model_forward(used, &xb, 1, NULL) == CL_OK, "big training forward");
    cl_step_options last = {.outputs = CL_OUTPUTS_LAST};
    CHECK(cl_model_forward(used, &xb, 0, &last) == CL_OK, "big inference");
    cl_model_memory_stats(used, &st);
    size_t before = st.reserved;
    uint64_t takes = st.n_alloc[CL_MEM_ACTIVATIONS];
    CHECK(cl_model_train_step(used, &xs, &ys, CL_TARGET_SEQUENCE, &adam, NULL, &l_used) == CL_OK,
          "small step: %s", cl_model_error(used));
    CHECK(cl_model_train_step(fresh, &xs, &ys, CL_TARGET_SEQUENCE, &adam, NULL, &l_fresh) ==
              CL_OK, "fresh step");
    CHECK(l_used == l_fresh, "round %d: loss %.9g after a larger step, %.9g fresh", round, l_used,
          l_fresh);
    cl_model_memory_stats(used, &st);
    size_t opt_state = round == 0 ? st.current[CL_MEM_OPTIMIZER] : 0; /* Adam's, at its first step */
    CHECK(st.reserved == before + opt_state, "a smaller step reserved more (%zu -> %zu)", before,
          st.reserved);
    CHECK(st.n_alloc[CL_MEM_ACTIVATIONS] > takes, "the smaller step's buffers are counted");
    CHECK(st.allocated == ps.total && st.reserved == pb.reserved,
          "allocated %zu (plan %zu), reserved %zu (plan of the largest %zu)", st.allocated,
          ps.total, st.reserved, pb.reserved);
  }
  float *pu = params_of(used), *pf = params_of(fresh);
  CHECK(memcmp(pu, pf, cl_model_n_params(used) * sizeof *pu) == 0,
        "parameters differ after three steps in a reused arena");
  CHECK(cl_model_empty_cache(used) == CL_OK, "empty_cache");
  cl_model_memory_stats(used, &st);
  CHECK(st.reserved == st.allocated && st.current[CL_MEM_ACTIVATIONS] == 0,
        "empty_cache keeps %zu reserved beyond %zu allocated", st.reserved, st.allocated);
  free(pu);
  free(pf);
  cl_plan_free(&pb);
  cl_plan_free(&ps);
  cl_model_free(used);
  cl_model_free(fresh);
  free_problem(&big);
  free_problem(&small);
}

/* A limit that holds the small arena but not the large one: the large step
 * fails with nothing left reserved for it, and the small one runs after. */
static void test_arena_oom(void) {
  problem p = make_problem(4, 5, 6, 6, 2);
  cl_model *m = model_of(&p, 5);
  cl_optim sgd = {CL_OPTIM_SGD, 1e-2, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_plan pb, ps;
  cl_model_plan(m, 4, 5, 6, 6, 1, &sgd, NULL, &pb);
  cl_model_plan(m, 1, 5, 6, 6, 1, &sgd, NULL, &ps);
  cl_model_set_memory_limit(m, (pb.reserved + ps.reserved) / 2);
  cl_host_array xa = {p.x, CL_HOST_TORCH_F32, 5, {4, 5, 2, 6, 6}};
  int top = p.cfg.hidden_dims[1];
  cl_host_array ya = {p.y_seq, CL_HOST_TORCH_F32, 5, {4, 5, top, 6, 6}};
  cl_host_array x1 = {p.x, CL_HOST_TORCH_F32, 5, {1, 5, 2, 6, 6}};
  cl_host_array y1 = {p.y_seq, CL_HOST_TORCH_F32, 5, {1, 5, top, 6, 6}};
  double loss;
  CHECK(cl_model_train_step(m, &x1, &y1, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_OK,
        "small step under the limit: %s", cl_model_error(m));
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_E_OOM,
        "the large step fits under a limit below its plan");
  CHECK(strstr(cl_model_error(m), "out of memory: tried to allocate") != NULL, "message: %s",
        cl_model_error(m));
  cl_mem_stats st;
  cl_model_memory_stats(m, &st);
  CHECK(st.reserved == st.allocated && st.reserved == pb.reserved - pb.arena,
        "after the OOM: reserved %zu, allocated %zu, model buffers %zu", st.reserved,
        st.allocated, pb.reserved - pb.arena);
  CHECK(cl_model_train_step(m, &x1, &y1, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_OK,
        "small step after the OOM: %s", cl_model_error(m));
  cl_plan_free(&pb);
  cl_plan_free(&ps);
  cl_model_free(m);
  free_problem(&p);
}

/* A model buffer the limit refuses is retried after the cached arena of an
 * earlier, larger step goes back: Adam's state after SGD steps at a larger
 * batch fits where the arena stood. */
static void test_arena_evicted_for_model_buffers(void) {
  problem p = make_problem(6, 4, 6, 6, 2);
  cl_model *m = model_of(&p, 9);
  int top = p.cfg.hidden_dims[1];
  cl_host_array xa = {p.x, CL_HOST_TORCH_F32, 5, {6, 4, 2, 6, 6}};
  cl_host_array ya = {p.y_seq, CL_HOST_TORCH_F32, 5, {6, 4, top, 6, 6}};
  cl_host_array x1 = {p.x, CL_HOST_TORCH_F32, 5, {1, 4, 2, 6, 6}};
  cl_host_array y1 = {p.y_seq, CL_HOST_TORCH_F32, 5, {1, 4, top, 6, 6}};
  cl_optim sgd = {CL_OPTIM_SGD, 1e-2, 0, 0, 0, 0, 0, 0, 0, 0};
  cl_optim adam = {CL_OPTIM_ADAM, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  double loss;
  CHECK(cl_model_train_step(m, &xa, &ya, CL_TARGET_SEQUENCE, &sgd, NULL, &loss) == CL_OK,
        "large SGD step: %s", cl_model_error(m));
  cl_plan small;
  cl_model_plan(m, 1, 4, 6, 6, 1, &adam, NULL, &small);
  cl_mem_stats st;
  cl_model_memory_stats(m, &st);
  CHECK(st.reserved + small.by_category[CL_MEM_OPTIMIZER] > small.reserved,
        "the test needs the large arena to crowd out Adam's state");
  cl_model_set_memory_limit(m, small.reserved);
  CHECK(cl_model_train_step(m, &x1, &y1, CL_TARGET_SEQUENCE, &adam, NULL, &loss) == CL_OK,
        "Adam at batch 1 under its own plan's reserved bytes: %s", cl_model_error(m));
  cl_model_memory_stats(m, &st);
  CHECK(st.reserved == small.reserved && st.peak_reserved >= st.reserved,
        "reserved %zu, the small plan's %zu", st.reserved, small.reserved);
  cl_plan_free(&small);
  cl_model_free(m);
  free_problem(&p);
}

int main(void) {
  test_equal_gradients();
  test_tbptt_truncates();
  test_memory_independent_of_T();
  test_plan_equals_accounting(60, 0);
  /* under valgrind (make valgrind: its vgpreload in LD_PRELOAD) fewer
   * guarded cases, as test_backend_ops runs fewer there */
  test_plan_equals_accounting(ctest_under_valgrind() ? 20 : 60, 1);
  test_arena_reuse();
  test_arena_oom();
  test_arena_evicted_for_model_buffers();
  return ctest_done("test_core_options");
}
