/*
 * tests/c/test_core_split.c -- a training step split by batch across the
 * model's threads (core/split.c, CONVLSTM_SPLIT=batch) trains the model the
 * usual step trains: two models with the same parameters, both on two
 * threads, one made with the split asked for, take the same steps; their
 * losses, gradients and parameters must agree within float rounding (the
 * split sums the threads' gradients in another order), under each step
 * case of ctest.h (accumulation too: each thread runs its share of
 * smaller micro-batches), for a plain stack and an encoder-forecaster, with
 * an odd batch (threads of 3 and 2 sequences). Where the split cannot run
 * (one thread) the step must be the usual one, bit for bit.
 *
 * Its bytes: the threads' step buffers count in the model's statistics
 * while the model's own arena is given back, the plan made before a step
 * holds exactly what the step then reserves and allocates, and a memory
 * limit too small for them is an out-of-memory error that leaves the
 * parameters as they were and the model able to train on a smaller batch.
 * CONVLSTM_SPLIT=auto probes both ways in the order it states, then keeps
 * one, and probes again after CL_SPLIT_REPROBE_STEPS; it plans and holds
 * the larger way's bytes, never both at once. After split steps, the
 * model's own arena (a forward) and an allocation that meets the limit (a
 * data set) take the place of the twins' arenas.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include "core/internal.h"      /* cl_split_ran */
#include "ctest.h"              /* CHECK, uniform01, ctest_model, ctest_flat, rel_diff */

#include <stdlib.h>
#include <string.h>

enum { B = 5, T = 4, H = 6, W = 6, STEPS = 3, MAXP = 1 << 16 };

static const cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
/* Adam's first steps move a weight whose gradient is near 0 by about lr
 * times its sign, which rounding decides: where dropout zeroes a gate's
 * inputs, SGD with momentum compares the parameters instead. */
static const cl_optim sgd = {CL_OPTIM_SGD, 1e-2, 0, 0, 0, 0.9, 0, 0, 0, 0};

static float xs[B * (T + 3) * 4 * H * W * 4], ys[B * (T + 3) * 4 * H * W * 4];
static float pa[MAXP], pb[MAXP];

/* A model of c, its parameters drawn from the same seed: split 0 the usual
 * step, 1 split by batch, 2 whichever a probe finds faster. */
static cl_model *model(const cl_config *c, int split) {
  static const char *const how[] = {"call", "batch", "auto"};
  setenv("CONVLSTM_SPLIT", how[split], 1);
  ctest_rng = 88172645463325252ULL;
  return ctest_model(c);
}

typedef struct batch {
  cl_host_array x, y;
  cl_target tg;
} batch;

/* b sequences: a plain stack's x and last state's target, or a
 * forecaster's input frames and K target frames. */
static batch batch_of(const cl_config *c, int b) {
  batch k;
  memset(&k, 0, sizeof k);
  const int C = c->input_dim;
  if (c->forecaster) {
    const int K = 3;
    k.x = (cl_host_array){xs, CL_HOST_TORCH_F32, 5, {b, T, C, H, W}};
    k.y = (cl_host_array){ys, CL_HOST_TORCH_F32, 5, {b, K, C, H, W}};
    k.tg = CL_TARGET_SEQUENCE;
  } else {
    k.x = (cl_host_array){xs, CL_HOST_TORCH_F32, 5, {b, T, C, H, W}};
    k.y = (cl_host_array){ys, CL_HOST_TORCH_F32, 4, {b, c->hidden_dims[c->n_layers - 1], H, W, 0}};
    k.tg = CL_TARGET_LAST_STATE;
  }
  return k;
}

static void fill_data(void) {
  for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++) xs[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < sizeof ys / sizeof ys[0]; i++) ys[i] = (float)(uniform01(NULL) - 0.5);
}

/* Where the steps start (compare): zeros, given (the whole batch's h and c
 * of each layer, uploaded into each thread's buffers) or carried between
 * steps (each thread reading and keeping its own rows of the model's). */
static cl_state_mode state_mode = CL_STATE_ZERO;
static cl_host_array given[2 * CL_MAX_LAYERS];
static float given_v[2 * CL_MAX_LAYERS][B * 8 * H * W];

static void fill_given(const cl_config *c) {
  for (int l = 0; l < c->n_layers; l++)
    for (int w = 0; w < 2; w++) {
      const int hid = c->hidden_dims[l];
      CHECK(B * hid * H * W <= (int)(sizeof given_v[0] / sizeof(float)), "layer %d: hidden %d",
            l, hid);
      for (int i = 0; i < B * hid * H * W; i++)
        given_v[2 * l + w][i] = (float)(uniform01(NULL) - 0.5);
      given[2 * l + w] =
          (cl_host_array){given_v[2 * l + w], CL_HOST_TORCH_F32, 4, {B, hid, H, W, 0}};
    }
}

/* Bytes of a plan's entries initial_h[l] and initial_c[l], a thread's
 * named "thread k: initial_h[l]". */
static size_t given_bytes(const cl_plan *p) {
  size_t n = 0;
  for (int i = 0; i < p->n; i++)
    if (strstr(p->entries[i].name, "initial_h[") || strstr(p->entries[i].name, "initial_c["))
      n += p->entries[i].bytes;
  return n;
}

/* A given state under the split: each of n threads holds the sequences of
 * its share of the micro-batches, not the whole batch's (the usual plan u's
 * bytes for B sequences). With a micro-batches each of ceil(B / (n a)),
 * a thread runs at most ceil(k / n) of the k. */
static void given_share(const char *what, const char *name, const cl_plan *p, cl_model *u,
                        const cl_step_options *po, const cl_optim *opt, int n) {
  cl_plan usual;
  CHECK(cl_model_plan(u, B, T, H, W, 1, opt, po, &usual) == CL_OK, "%s", cl_model_error(u));
  const int a = po->accumulation_steps > 1 ? po->accumulation_steps : 1;
  const int bm = (B + n * a - 1) / (n * a), k = (B + bm - 1) / bm;
  const int rows = (k + n - 1) / n * bm < B ? (k + n - 1) / n * bm : B;
  const size_t whole = given_bytes(&usual), want = whole / B * (size_t)(rows * n);
  CHECK(whole > 0 && given_bytes(p) == want,
        "%s, %s: the threads' given state holds %zu bytes, %d threads of %d sequences %zu "
        "(the whole batch's %zu)", what, name, given_bytes(p), n, rows, want, whole);
  cl_plan_free(&usual);
}

/* The tolerance of the split against the usual step: float32's rounding,
 * or a 16-bit storage type's (activations rounded after sums that ran in
 * another order may round the other way). */
static double tolerance(cl_dtype dt) { return dt == CL_F32 ? 2e-5 : 2e-2; }

/* Case k of ctest.h on config c (k = CTEST_STEP_CASES: float16 without
 * accumulation): the usual step against the split. With c's dropout, the
 * masks drawn from one seed: each thread draws its own sequences'. */
static void compare(const char *what, cl_config c, int k) {
  const cl_optim *opt = c.dropout[0] > 0 ? &sgd : &adam;
  cl_step_options o;
  cl_dtype dt;
  const char *name = ctest_step_case(k, &o, &dt);
  o.draw_masks = 1;
  o.dropout_seed = 20261202u;
  o.state_mode = state_mode;
  if (state_mode == CL_STATE_GIVEN) o.state = given;
  if (k == CTEST_STEP_CASES) { /* and float16 alone, the loss scaled on each thread */
    dt = CL_F16;
    name = "float16";
  }
  c.dtype = dt;
  c.n_threads = 2;
  cl_model *a = model(&c, 0), *s = model(&c, 1);
  if (!a || !s) goto out;
  batch bt = batch_of(&c, B);
  const double tol = tolerance(dt);
  cl_plan p; /* the split's bytes, planned before it runs */
  cl_step_options po = o;
  if (c.forecaster) po.horizon = (int)bt.y.dims[1]; /* its plan's forecaster steps */
  CHECK(cl_model_plan(s, B, T, H, W, 1, opt, &po, &p) == CL_OK, "%s", cl_model_error(s));
  if (state_mode == CL_STATE_GIVEN) given_share(what, name, &p, a, &po, opt, 2);
  for (int step = 0; step < STEPS; step++) {
    double la = 0, ls = 0;
    CHECK(cl_model_train_step(a, &bt.x, &bt.y, bt.tg, opt, &o, &la) == CL_OK, "%s, %s: %s",
          what, name, cl_model_error(a));
    CHECK(cl_model_train_step(s, &bt.x, &bt.y, bt.tg, opt, &o, &ls) == CL_OK, "%s, %s: %s",
          what, name, cl_model_error(s));
    CHECK(cl_split_ran(s) == 2, "%s, %s: the step ran on %d threads split", what, name,
          cl_split_ran(s));
    CHECK(fabs(la - ls) <= tol * fabs(la), "%s, %s: step %d loss %.9g against %.9g", what, name,
          step, ls, la);
  }
  size_t n = ctest_flat(a, 1, pa, MAXP);
  ctest_flat(s, 1, pb, MAXP);
  double dg = rel_diff(pb, pa, n);
  CHECK(dg <= tol, "%s, %s: gradients differ by %.3g", what, name, dg);
  ctest_flat(a, 0, pa, MAXP);
  ctest_flat(s, 0, pb, MAXP);
  double dp = rel_diff(pb, pa, n);
  CHECK(dp <= tol, "%s, %s: parameters differ by %.3g", what, name, dp);
  cl_mem_stats st;
  cl_model_memory_stats(s, &st);
  CHECK(st.peak_reserved == p.reserved && st.peak_allocated == p.total,
        "%s, %s: reserved %zu and allocated %zu at most, planned %zu and %zu", what, name,
        st.peak_reserved, st.peak_allocated, p.reserved, p.total);
  printf("%-14s %-24s split %d: gradients %.2e, parameters %.2e apart; %zu bytes planned\n",
         what, name, cl_split_ran(s), dg, dp, p.reserved);
  cl_plan_free(&p);
out:
  cl_model_free(a);
  cl_model_free(s);
}

/* On one thread the split is not asked of the team: the usual step. */
static void one_thread(void) {
  cl_config c = ctest_config(3, 4, 3, 3, 3, 1, 1);
  cl_model *a = model(&c, 0), *s = model(&c, 1);
  batch bt = batch_of(&c, B);
  double la = 0, ls = 0;
  CHECK(cl_model_train_step(a, &bt.x, &bt.y, bt.tg, &adam, NULL, &la) == CL_OK, "%s",
        cl_model_error(a));
  CHECK(cl_model_train_step(s, &bt.x, &bt.y, bt.tg, &adam, NULL, &ls) == CL_OK, "%s",
        cl_model_error(s));
  CHECK(cl_split_ran(s) == 0 && la == ls && ctest_same_params(a, s),
        "one thread: split %d, loss %.9g against %.9g", cl_split_ran(s), ls, la);
  cl_model_free(a);
  cl_model_free(s);
}

/* Bytes a model of c reserves at most for a step of b sequences, checked
 * against what its plan said before the step ran. */
static size_t peak_of(const cl_config *c, int b) {
  cl_model *s = model(c, 1);
  batch bt = batch_of(c, b);
  double loss = 0;
  cl_mem_stats st;
  cl_plan p;
  memset(&p, 0, sizeof p);
  CHECK(cl_model_plan(s, b, T, H, W, 1, &adam, NULL, &p) == CL_OK, "%s", cl_model_error(s));
  CHECK(cl_model_train_step(s, &bt.x, &bt.y, bt.tg, &adam, NULL, &loss) == CL_OK, "%s",
        cl_model_error(s));
  cl_model_memory_stats(s, &st);
  CHECK(st.peak_reserved == p.reserved && st.peak_allocated == p.total,
        "batch %d, split on %d threads: reserved %zu and allocated %zu at most, planned %zu and "
        "%zu", b, cl_split_ran(s), st.peak_reserved, st.peak_allocated, p.reserved, p.total);
  printf("batch %d, split on %d threads: planned and reserved %zu bytes (arena %zu)\n", b,
         cl_split_ran(s), p.reserved, p.arena);
  cl_plan_free(&p);
  cl_model_free(s);
  return st.peak_reserved;
}

/* The threads' buffers in the model's statistics; a limit below them. */
static void memory(void) {
  cl_config c = ctest_config(3, 4, 3, 3, 3, 1, 2);
  cl_model *s = model(&c, 1);
  batch bt = batch_of(&c, B);
  double loss = 0;
  cl_mem_stats st;
  CHECK(cl_model_train_step(s, &bt.x, &bt.y, bt.tg, &adam, NULL, &loss) == CL_OK, "%s",
        cl_model_error(s));
  cl_model_memory_stats(s, &st);
  /* each thread holds the step buffers of the usual step's micro-batch of 3 */
  cl_step_options acc;
  memset(&acc, 0, sizeof acc);
  acc.accumulation_steps = 2;
  cl_plan p;
  cl_model *u = model(&c, 0);
  CHECK(cl_model_plan(u, B, T, H, W, 1, &adam, &acc, &p) == CL_OK, "%s", cl_model_error(u));
  cl_model_free(u);
  const size_t act = 2 * p.by_category[CL_MEM_ACTIVATIONS], arenas = 2 * p.arena;
  cl_plan_free(&p);
  CHECK(cl_split_ran(s) == 2, "the step ran split on %d threads", cl_split_ran(s));
  CHECK(s->arena == NULL, "the model's own arena is held beside the threads'");
  CHECK(act > 0 && st.current[CL_MEM_ACTIVATIONS] == act,
        "activations %zu counted, the threads' plans hold %zu", st.current[CL_MEM_ACTIVATIONS],
        act);
  CHECK(st.reserved >= arenas + s->n_params * sizeof(float),
        "reserved %zu does not hold the threads' arenas, %zu, and the parameters", st.reserved,
        arenas);
  CHECK(cl_model_empty_cache(s) == CL_OK, "%s", cl_model_error(s));
  cl_model_memory_stats(s, &st);
  CHECK(st.current[CL_MEM_ACTIVATIONS] == 0 && st.reserved < arenas,
        "after empty_cache: activations %zu, reserved %zu", st.current[CL_MEM_ACTIVATIONS],
        st.reserved);
  cl_model_free(s);
  /* a limit that holds the usual step of one sequence, not the split of B */
  const size_t one = peak_of(&c, 1);
  CHECK(peak_of(&c, B) > one, "the split step of %d needs no more than a step of one", B);
  c.memory_limit = one;
  s = model(&c, 1);
  ctest_flat(s, 0, pa, MAXP);
  cl_status r = cl_model_train_step(s, &bt.x, &bt.y, bt.tg, &adam, NULL, &loss);
  CHECK(r == CL_E_OOM, "a limit below the threads' buffers: status %d (%s)", (int)r,
        cl_model_error(s));
  size_t n = ctest_flat(s, 0, pb, MAXP);
  CHECK(memcmp(pa, pb, n * sizeof(float)) == 0, "a refused step changed the parameters");
  batch b1 = batch_of(&c, 1); /* one sequence: the usual step, which fits */
  r = cl_model_train_step(s, &b1.x, &b1.y, b1.tg, &adam, NULL, &loss);
  CHECK(r == CL_OK && cl_split_ran(s) == 0, "after the refusal, batch 1: %s", cl_model_error(s));
  cl_model_free(s);
}

/* CONVLSTM_SPLIT=auto: its probe runs each way, two steps at a time (the
 * first of each untimed), three rounds; then one way for the next 500
 * steps, and then the probe again; every step within float32 rounding of
 * the usual step's; the plan the larger way's, and the bytes held never
 * both ways' at once. */
static void automatic(void) {
  enum { PROBE = 4 * CL_SPLIT_PROBE_ROUNDS, AFTER = 4 };
  cl_config c = ctest_config(3, 4, 3, 3, 3, 1, 2);
  cl_model *a = model(&c, 0), *s = model(&c, 2);
  batch bt = batch_of(&c, B);
  cl_plan pa, ps, pb;
  cl_model *b = model(&c, 1);
  CHECK(cl_model_plan(a, B, T, H, W, 1, &adam, NULL, &pa) == CL_OK, "%s", cl_model_error(a));
  CHECK(cl_model_plan(b, B, T, H, W, 1, &adam, NULL, &pb) == CL_OK, "%s", cl_model_error(b));
  CHECK(cl_model_plan(s, B, T, H, W, 1, &adam, NULL, &ps) == CL_OK, "%s", cl_model_error(s));
  const size_t larger = pa.reserved > pb.reserved ? pa.reserved : pb.reserved;
  CHECK(ps.reserved == larger, "auto planned %zu, the larger way %zu", ps.reserved, larger);
  CHECK(strcmp(cl_model_thread_split(s), "auto") == 0, "%s", cl_model_thread_split(s));
  int ran[PROBE + AFTER];
  for (int step = 0; step < PROBE + AFTER; step++) {
    double la = 0, ls = 0;
    CHECK(cl_model_train_step(a, &bt.x, &bt.y, bt.tg, &adam, NULL, &la) == CL_OK, "%s",
          cl_model_error(a));
    CHECK(cl_model_train_step(s, &bt.x, &bt.y, bt.tg, &adam, NULL, &ls) == CL_OK, "%s",
          cl_model_error(s));
    ran[step] = cl_split_ran(s);
    CHECK(fabs(la - ls) <= 2e-5 * fabs(la), "auto, step %d: loss %.9g against %.9g", step, ls,
          la);
    if (step < PROBE)
      CHECK(ran[step] == (step % 4 >= 2 ? 2 : 0), "auto, probe step %d ran split on %d", step,
            ran[step]);
    else
      CHECK(ran[step] == ran[PROBE], "auto, step %d ran on %d, the choice %d", step, ran[step],
            ran[PROBE]);
  }
  /* the rest of the choice's steps, then a second probe, in the first's order */
  for (int step = PROBE + AFTER; step < 2 * PROBE + CL_SPLIT_REPROBE_STEPS; step++) {
    double ls = 0;
    CHECK(cl_model_train_step(s, &bt.x, &bt.y, bt.tg, &adam, NULL, &ls) == CL_OK, "%s",
          cl_model_error(s));
    const int want = step < PROBE + CL_SPLIT_REPROBE_STEPS ? ran[PROBE]
                     : (step - PROBE - CL_SPLIT_REPROBE_STEPS) % 4 >= 2 ? 2 : 0;
    if (cl_split_ran(s) != want) {
      CHECK(0, "auto, step %d ran split on %d, not %d", step, cl_split_ran(s), want);
      break;
    }
  }
  cl_mem_stats st;
  cl_model_memory_stats(s, &st);
  CHECK(st.peak_reserved == larger, "auto held %zu at most, the larger way %zu",
        st.peak_reserved, larger);
  printf("auto: chose %s; planned and held %zu bytes (usual %zu, split %zu)\n",
         ran[PROBE] ? "the split" : "the usual step", st.peak_reserved, pa.reserved,
         pb.reserved);
  cl_plan_free(&pa);
  cl_plan_free(&pb);
  cl_plan_free(&ps);
  cl_model_free(a);
  cl_model_free(b);
  cl_model_free(s);
}

/* A forward after split steps (a fit's validation, a prediction) makes the
 * model's own arena: the twins' arenas go first, so that the two never
 * stand together; what the twins keep is their gradients and scratch.
 * Measured against a model that never split, after the same calls. */
static void then_forward(void) {
  cl_config c = ctest_config(3, 4, 3, 3, 3, 1, 2);
  cl_model *a = model(&c, 0), *s = model(&c, 1);
  batch bt = batch_of(&c, B);
  cl_model *both[2] = {a, s};
  cl_mem_stats st[2];
  for (int i = 0; i < 2; i++) {
    double loss;
    CHECK(cl_model_train_step(both[i], &bt.x, &bt.y, bt.tg, &adam, NULL, &loss) == CL_OK, "%s",
          cl_model_error(both[i]));
    if (i == 0) cl_model_empty_cache(a); /* its training arena: the split's went with its step */
    CHECK(cl_model_forward(both[i], &bt.x, 0, NULL) == CL_OK, "%s", cl_model_error(both[i]));
    cl_model_memory_stats(both[i], &st[i]);
  }
  CHECK(cl_split_ran(s) == 2, "the split step ran on %d threads", cl_split_ran(s));
  const size_t kept = cl_model_n_params(s) * sizeof(float) + st[1].current[CL_MEM_WORKSPACE] -
                      st[0].current[CL_MEM_WORKSPACE]; /* the second twin's gradients, scratch */
  CHECK(st[1].reserved == st[0].reserved + kept,
        "after a forward, the split model holds %zu bytes, the usual one %zu + the twins' %zu",
        st[1].reserved, st[0].reserved, kept);
  cl_model_free(a);
  cl_model_free(s);
}

/* A limit met while the twins hold their arenas: a data set made after
 * split steps takes their place, as it would take the model's own
 * arena's (cl_model_alloc's retry), instead of failing for want of it. */
static void data_after_split(void) {
  cl_config c = ctest_config(3, 4, 3, 3, 3, 1, 2);
  cl_model *s = model(&c, 1);
  batch bt = batch_of(&c, B);
  double loss;
  CHECK(cl_model_train_step(s, &bt.x, &bt.y, bt.tg, &adam, NULL, &loss) == CL_OK &&
            cl_split_ran(s) == 2, "%s", cl_model_error(s));
  cl_mem_stats st;
  cl_model_memory_stats(s, &st);
  CHECK(cl_model_set_memory_limit(s, st.reserved + 1024) == CL_OK, "%s", cl_model_error(s));
  cl_data *d = NULL;
  cl_status r = cl_data_create(s, &bt.x, &bt.y, bt.tg, &d);
  CHECK(r == CL_OK && d, "a data set where the twins' arenas were: %s", cl_model_error(s));
  if (d) {
    CHECK(cl_data_bytes(d) > 1024, "a data set of %zu bytes fits the slack", cl_data_bytes(d));
    cl_data_free(d);
  }
  CHECK(cl_model_train_step(s, &bt.x, &bt.y, bt.tg, &adam, NULL, &loss) == CL_OK &&
            cl_split_ran(s) == 2, "split again after: %s", cl_model_error(s));
  cl_model_free(s);
}

int main(void) {
  fill_data();
  for (int k = 0; k <= CTEST_STEP_CASES; k++) {
    compare("stack", ctest_config(3, 4, 3, 3, 3, 1, 2), k);
    if (k != 2) compare("forecaster", ctest_forecaster_config(2, CL_F32), k); /* no tbptt */
  }
  for (int masks = 0; masks < 2; masks++) {
    cl_config c = ctest_config(3, 4, 3, 3, 3, 1, 2);
    c.dropout_masks = masks ? CL_MASKS_PER_GATE : CL_MASKS_SHARED;
    c.dropout[0] = c.recurrent_dropout[0] = 0.3;
    const char *what = masks ? "dropout, gates" : "dropout, shared";
    compare(what, c, 0);
    compare(what, c, 3); /* accumulation: each thread's micro-batches draw their own */
    compare(what, c, 5); /* checkpoint's recomputation reads the masks it drew */
  }
  cl_config stack = ctest_config(3, 4, 3, 3, 3, 1, 2);
  fill_given(&stack);
  state_mode = CL_STATE_GIVEN;
  compare("given state", stack, 0);
  compare("given state", stack, 3);
  compare("given state", stack, 5);
  state_mode = CL_STATE_CARRY; /* three steps, each from the state the one before kept */
  compare("carried state", stack, 0);
  compare("carried state", stack, 3);
  compare("carried state", stack, 5);
  state_mode = CL_STATE_ZERO;
  one_thread();
  memory();
  automatic();
  then_forward();
  data_after_split();
  unsetenv("CONVLSTM_SPLIT");
  return ctest_done("test_core_split");
}
