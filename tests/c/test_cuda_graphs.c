/*
 * tests/c/test_cuda_graphs.c -- one training step as one CUDA graph
 * (CONVLSTM_CUDA_GRAPHS=1, src/cuda/cuda_graph.cu) gives the launched
 * step's results bit for bit: two models with the same parameters, one
 * created with graphs and one without, train on the same batches, and
 * their losses, loss scales, step counts and every parameter must be equal
 * as bits, while the first model's graph_info says its steps were captured
 * and replayed (not fallen back). The tutorial model (1 -> 64 -> 1, 3x3),
 * in float32, bfloat16 and float16 (loss scaling, with a first scale of
 * 2^30 that overflows so that steps are skipped on the device), with checkpointing, clipping, a
 * learning rate that changes every step, SGD with momentum, and a smaller
 * last batch in between (a shape with no graph yet: plain launches, then
 * the graph again); with dropout (masks redrawn every step, staged through
 * the pinned stage as x and y are, applied by the recorded mask_mul), also
 * with checkpointing, with recompute_gates and with free-running training,
 * and drawn by the core from a new seed each step (the seed uploaded into
 * its planned device word, which the recorded mask_draw reads: the graph
 * replays; with the seed a kernel argument, it never did),
 * and with scheduled sampling (truth flags: the true frames staged as y
 * is, the forward's copy and backward's path skipped where they are set).
 * Shi et al.'s encoder-forecaster too (2 x 16 channels over 2x2 patches,
 * channel peepholes, K = 3 frames, BCE on logits per sequence): its
 * patching, second stack from the first's last states, head and its loss
 * recorded and replayed as the plain stack's are. Last, four of these with
 * the fused bias (CONVLSTM_CUDA_FUSED_BIAS=1 for both models).
 *
 * Both models keep to cuDNN's deterministic algorithms
 * (CONVLSTM_CUDNN_DETERMINISTIC=1): an algorithm with atomics differs from
 * itself run to run, which would say nothing of graphs.
 *
 * Needs a GPU: without one it prints "skip cuda: ..." and exits 77, so
 * tests/c/run.sh and tests/testthat/test-c.R count it as skipped, never as
 * passed (test-c.R accepts a "skip cuda:" skip under CONVLSTM_C_TESTS=require
 * on a machine without a GPU, and reports it as skipped); under
 * CONVLSTM_REQUIRE_GPU=1 (tools/device/gpu_session.sh) a GPU that cannot be
 * used fails.
 */
#define _POSIX_C_SOURCE 200112L /* setenv */
#include "ctest.h" /* CHECK, uniform01, ctest_model */

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { B = 12, T = 5, H = 24, W = 24, STEPS = 9 };

typedef struct gcase {
  const char *name;
  cl_dtype dtype;
  int checkpoint;
  double max_norm;
  cl_optim_kind optim;
  double init_scale; /* float16: 0 keeps the default */
  cl_peephole peep;  /* the cell's peepholes (their filter slot is recorded too) */
  double dropout;    /* > 0: every layer's input and h dropped, masks redrawn each step */
  int horizon;       /* > 1: free-running training over that many frames */
  int recompute;     /* > 0: recompute_gates, chunks of that many steps */
  int drawn;         /* with dropout: masks drawn by the core from a new seed each step */
  int forecast;      /* > 0: an encoder-forecaster trained on that many target frames */
} gcase;

static cl_model *make(const gcase *gc, int graphs) {
  cl_config c = ctest_config(1, 64, 1, 3, 3, 1, 0);
  if (gc->forecast) { /* one encoder and one forecaster layer of 16 */
    c.hidden_dims[0] = c.hidden_dims[1] = 16;
    c.forecaster = 1;
    c.patch = 2;
  }
  c.peephole = gc->peep;
  if (gc->peep == CL_PEEP_POSITION) {
    c.peephole_h = H;
    c.peephole_w = W;
  }
  c.dtype = gc->dtype;
  c.device = CL_DEVICE_CUDA;
  for (int l = 0; l < c.n_layers; l++) c.dropout[l] = c.recurrent_dropout[l] = gc->dropout;
  if (gc->forecast) c.dropout[1] = 0; /* the forecaster's first layer has no input */
  setenv("CONVLSTM_CUDA_GRAPHS", graphs ? "1" : "0", 1);
  ctest_rng = 88172645463325252ULL; /* the same parameters for both */
  cl_model *m = ctest_model(&c);
  unsetenv("CONVLSTM_CUDA_GRAPHS");
  if (m && gc->init_scale > 0)
    CHECK(cl_model_set_loss_scale(m, gc->init_scale, 2.0, 0.5, 2000) == CL_OK, "%s: loss scale",
          gc->name);
  return m;
}

/* Batch `step` of b sequences: a smooth moving pattern and its next frame. */
static void batch(int step, int b, float *x, float *y) {
  for (int i = 0; i < b; i++)
    for (int t = 0; t < T; t++)
      for (int p = 0; p < H * W; p++) {
        size_t k = ((size_t)i * T + t) * H * W + p;
        double u = 0.05 * (p % W) + 0.07 * (p / W) + 0.3 * t + 0.11 * i + 0.5 * step;
        x[k] = (float)(0.5 + 0.4 * __builtin_sin(u));
        y[k] = (float)(0.5 + 0.4 * __builtin_sin(u + 0.3));
      }
}

/* Step `step`'s dropout masks for b sequences, the same for both models:
 * per layer the input mask [b, in, H, W] then the h mask [b, hidden, H, W],
 * drawn anew each step (a graph must read them from the stage each time). */
static void draw_masks(const gcase *gc, int step, int b, float *buf, cl_step_options *o) {
  const int in[2] = {1, 64}, hid[2] = {64, 1};
  uint64_t r = 0x9E3779B97F4A7C15ULL * (uint64_t)(step + 1);
  const float keep = (float)(1.0 / (1.0 - gc->dropout));
  for (int l = 0; l < 2; l++)
    for (int k = 0; k < 2; k++) {
      size_t n = (size_t)b * (k ? hid[l] : in[l]) * H * W;
      for (size_t i = 0; i < n; i++) {
        r = r * 6364136223846793005ULL + 1442695040888963407ULL;
        buf[i] = (double)(r >> 11) / 9007199254740992.0 < gc->dropout ? 0.0f : keep;
      }
      if (k) o->mask_h[l] = buf;
      else o->mask_x[l] = buf;
      buf += n;
    }
}

/* Every parameter of a and b equal as bits. */
static int same_params(cl_model *a, cl_model *b, const char *what) {
  int same = 1;
  for (int i = 0; i < cl_model_n_tensors(a); i++) {
    const char *name;
    int nd, dims[4];
    cl_model_tensor_info(a, i, &name, &nd, dims);
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)dims[d];
    float *pa = malloc(n * sizeof *pa), *pb = malloc(n * sizeof *pb);
    CHECK(pa && pb && cl_model_get_param(a, name, pa, n) == CL_OK &&
              cl_model_get_param(b, name, pb, n) == CL_OK,
          "%s: read %s", what, name);
    if (pa && pb && memcmp(pa, pb, n * sizeof *pa) != 0) {
      size_t j = 0;
      while (j < n && memcmp(pa + j, pb + j, sizeof *pa) == 0) j++;
      CHECK(0, "%s: %s differs first at element %zu: %.9g (graphs) vs %.9g (launched)", what,
            name, j, (double)pa[j], (double)pb[j]);
      same = 0;
    }
    free(pa);
    free(pb);
  }
  return same;
}

/* truth: NULL, or horizon - 1 scheduled-sampling flags, the same each step */
static void run_case(const gcase *gc, const int *truth) {
  cl_model *a = make(gc, 1), *b = make(gc, 0);
  if (!a || !b) goto done;
  const size_t elems = (size_t)B * T * H * W;
  float *x = malloc(elems * sizeof *x), *y = malloc(elems * sizeof *y);
  const int given = gc->dropout > 0 && !gc->drawn;
  float *masks = given ? malloc((size_t)B * 130 * H * W * sizeof *masks) : NULL;
  if (!x || !y || (given && !masks)) goto out;
  cl_optim o;
  memset(&o, 0, sizeof o);
  o.kind = gc->optim;
  o.beta1 = 0.9, o.beta2 = 0.999, o.eps = 1e-8, o.momentum = 0.9;
  cl_step_options opts;
  memset(&opts, 0, sizeof opts);
  opts.checkpoint = gc->checkpoint;
  opts.recompute_gates = gc->recompute;
  opts.max_grad_norm = gc->max_norm;
  opts.horizon = gc->horizon;
  opts.free_run = gc->horizon > 1;
  opts.truth = truth;
  if (gc->forecast) /* the paper's loss; the K frames are y's (no horizon in training) */
    opts.loss = (cl_loss_fn){.kind = CL_LOSS_BCE_LOGITS, .pos_weight = 1.0,
                             .reduction = CL_REDUCE_BATCHMEAN};
  const int ty = gc->forecast ? gc->forecast : gc->horizon > 1 ? gc->horizon : T;
  int equal = 1;
  for (int s = 0; s < STEPS + 3; s++) {
    /* steps 4 and 5: a smaller last batch, a shape with no graph yet */
    const int bs = s == 4 || s == 5 ? B - 5 : B;
    batch(s, bs, x, y);
    cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {bs, T, 1, H, W}};
    cl_host_array ya = {y, CL_HOST_TORCH_F32, 5, {bs, ty, 1, H, W}};
    if (masks) draw_masks(gc, s, bs, masks, &opts);
    /* drawn: the seed is the call's, not the kernel's argument, so a graph
     * recorded at one seed must replay at the next (its device word) */
    opts.draw_masks = gc->drawn;
    opts.dropout_seed = 0x5eed5eedull + 7919ull * (uint64_t)s;
    o.lr = 1e-3 * (1.0 + 0.25 * s); /* a schedule: the graph must read it anew */
    double la = 0, lb = 0;
    cl_status sa = cl_model_train_step(a, &xa, &ya, CL_TARGET_SEQUENCE, &o, &opts, &la);
    cl_status sb = cl_model_train_step(b, &xa, &ya, CL_TARGET_SEQUENCE, &o, &opts, &lb);
    CHECK(sa == sb, "%s step %d: status %d (graphs: %s) vs %d (launched: %s)", gc->name, s,
          (int)sa, cl_model_error(a), (int)sb, cl_model_error(b));
    CHECK(memcmp(&la, &lb, sizeof la) == 0, "%s step %d: loss %.17g (graphs) vs %.17g", gc->name,
          s, la, lb);
    cl_loss_scale ka, kb;
    cl_model_get_loss_scale(a, &ka);
    cl_model_get_loss_scale(b, &kb);
    CHECK(ka.scale == kb.scale && ka.skipped_steps == kb.skipped_steps,
          "%s step %d: loss scale %g (%lld skipped) vs %g (%lld)", gc->name, s, ka.scale,
          (long long)ka.skipped_steps, kb.scale, (long long)kb.skipped_steps);
    CHECK(cl_model_optimizer_steps(a) == cl_model_optimizer_steps(b), "%s step %d: step counts",
          gc->name, s);
    if (s == 3 || s == STEPS + 2) equal &= same_params(a, b, gc->name);
  }
  cl_graph_info gi;
  cl_model_graph_info(a, &gi);
  printf("%-34s %s; captured %lld, replayed %lld, plain %lld, %d held, %.2f MiB%s%s\n", gc->name,
         equal ? "bit-equal" : "DIFFERENT", gi.captured, gi.replayed, gi.plain, gi.held,
         gi.bytes / 1048576.0, gi.off[0] ? "; off: " : "", gi.off);
  CHECK(gi.asked && gi.on, "%s: graphs turned off: %s", gc->name, gi.off);
  /* 2 plain warm-up steps, a capture, a replay; the small batch: plain, then
   * captured; the full batch's graph again. A loss scale that changes (a
   * skipped float16 step) is a new graph: there only some replays. A scale
   * of 2^30 overflows for most of the steps, halving at each, so the small
   * batch too comes while the scale still changes: the H200 (2026-12-04)
   * captured one graph there and replayed it once. */
  const int scaled = gc->dtype == CL_F16, overflows = gc->init_scale > 65536;
  CHECK(gi.captured >= (overflows ? 1 : 2) && gi.replayed >= (scaled ? 1 : STEPS + 3 - 7),
        "%s: %lld captured, %lld replayed", gc->name, gi.captured, gi.replayed);
  cl_graph_info none;
  cl_model_graph_info(b, &none);
  CHECK(!none.asked && none.captured == 0, "%s: graphs without asking", gc->name);
out:
  free(x);
  free(y);
  free(masks);
done:
  cl_model_free(a);
  cl_model_free(b);
}

int main(void) {
  setenv("CONVLSTM_CUDNN_DETERMINISTIC", "1", 1);
  const char *req = getenv("CONVLSTM_REQUIRE_GPU");
  const int required = req && strcmp(req, "1") == 0;
  if (!cl_build_has_cuda() || !cl_device_available(CL_DEVICE_CUDA)) {
    if (required) {
      printf("FAIL: CONVLSTM_REQUIRE_GPU=1 but %s\n",
             cl_build_has_cuda() ? "no CUDA device is usable" : "this build has no CUDA");
      return 1;
    }
    printf("skip cuda: %s\n",
           cl_build_has_cuda() ? "no usable CUDA device" : "this build has no CUDA");
    return 77;
  }
  const gcase cases[] = {
      {"float32 adam", CL_F32, 0, 0, CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0, 0, 0, 0, 0},
      {"float32 adam checkpoint=2 clip=0.05", CL_F32, 2, 0.05, CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0,
       0, 0, 0, 0},
      {"float32 sgd momentum clip=1e9", CL_F32, 0, 1e9, CL_OPTIM_SGD, 0, CL_PEEP_NONE, 0, 0, 0, 0,
       0},
      {"float16 adam scaler", CL_F16, 0, 0, CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0, 0, 0, 0, 0},
      {"float16 adam overflow checkpoint=2", CL_F16, 2, 0.05, CL_OPTIM_ADAM, 1073741824.0,
       CL_PEEP_NONE, 0, 0, 0, 0, 0},
      {"bfloat16 adamw", CL_BF16, 0, 0, CL_OPTIM_ADAMW, 0, CL_PEEP_NONE, 0, 0, 0, 0, 0},
      {"float32 adam dropout 0.3", CL_F32, 0, 0, CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0.3, 0, 0, 0, 0},
      {"float16 adam dropout 0.3 checkpoint=2", CL_F16, 2, 0, CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0.3,
       0, 0, 0, 0},
      {"float32 adam dropout 0.3 free-running 3", CL_F32, 0, 0, CL_OPTIM_ADAM, 0, CL_PEEP_NONE,
       0.3, 3, 0, 0, 0},
      {"float32 adam peepholes per position", CL_F32, 0, 0, CL_OPTIM_ADAM, 0, CL_PEEP_POSITION, 0,
       0, 0, 0, 0},
      {"float16 adam peepholes per channel checkpoint=2", CL_F16, 2, 0, CL_OPTIM_ADAM, 0,
       CL_PEEP_CHANNEL, 0, 0, 0, 0, 0},
      {"float16 adam peepholes per channel dropout 0.3 checkpoint=3 recompute_gates=1", CL_F16, 3,
       0, CL_OPTIM_ADAM, 0, CL_PEEP_CHANNEL, 0.3, 0, 1, 0, 0},
      {"float32 adam recompute_gates=2", CL_F32, 0, 0, CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0, 0, 2, 0,
       0},
      {"float32 adam peepholes per channel dropout 0.3 free-running 3", CL_F32, 0, 0,
       CL_OPTIM_ADAM, 0, CL_PEEP_CHANNEL, 0.3, 3, 0, 0, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], NULL);
  const gcase drawn[] = {
      {"float32 adam dropout 0.3 drawn", CL_F32, 0, 0, CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0.3, 0, 0,
       1, 0},
      {"float16 adam dropout 0.3 drawn checkpoint=2 recompute_gates=1", CL_F16, 2, 0,
       CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0.3, 0, 1, 1, 0},
      {"float32 adam dropout 0.3 drawn free-running 3", CL_F32, 0, 0, CL_OPTIM_ADAM, 0,
       CL_PEEP_NONE, 0.3, 3, 0, 1, 0},
  };
  for (size_t i = 0; i < sizeof drawn / sizeof drawn[0]; i++) run_case(&drawn[i], NULL);
  const gcase forecasters[] = {
      {"forecaster float32 adam", CL_F32, 0, 0, CL_OPTIM_ADAM, 0, CL_PEEP_CHANNEL, 0, 0, 0, 0, 3},
      {"forecaster float16 adam checkpoint=2 recompute_gates=1", CL_F16, 2, 0, CL_OPTIM_ADAM, 0,
       CL_PEEP_CHANNEL, 0, 0, 1, 0, 3},
      {"forecaster bfloat16 adamw dropout 0.3 drawn", CL_BF16, 0, 0, CL_OPTIM_ADAMW, 0,
       CL_PEEP_CHANNEL, 0.3, 0, 0, 1, 3},
  };
  for (size_t i = 0; i < sizeof forecasters / sizeof forecasters[0]; i++)
    run_case(&forecasters[i], NULL);
  const gcase sampled = {"float32 adam dropout 0.3 sampled 4 (1 0 1)", CL_F32, 0, 0,
                         CL_OPTIM_ADAM, 0, CL_PEEP_NONE, 0.3, 4, 0, 0, 0};
  const int truth[3] = {1, 0, 1};
  run_case(&sampled, truth);
  /* the fused bias (CONVLSTM_CUDA_FUSED_BIAS=1, both models): the cell's
   * kernels with the bias, its gradient's partial sums in the scratch and
   * their finishing kernel, recorded and replayed as the launches ran */
  setenv("CONVLSTM_CUDA_FUSED_BIAS", "1", 1);
  const gcase fused[] = {
      {"fused bias float32 adam checkpoint=2 clip=0.05", CL_F32, 2, 0.05, CL_OPTIM_ADAM, 0,
       CL_PEEP_NONE, 0, 0, 0, 0, 0},
      {"fused bias float16 adam peepholes per channel dropout 0.3 checkpoint=3 recompute_gates=1",
       CL_F16, 3, 0, CL_OPTIM_ADAM, 0, CL_PEEP_CHANNEL, 0.3, 0, 1, 0, 0},
      {"fused bias float32 adam dropout 0.3 drawn free-running 3", CL_F32, 0, 0, CL_OPTIM_ADAM, 0,
       CL_PEEP_NONE, 0.3, 3, 0, 1, 0},
      {"fused bias forecaster bfloat16 adamw dropout 0.3 drawn", CL_BF16, 0, 0, CL_OPTIM_ADAMW, 0,
       CL_PEEP_CHANNEL, 0.3, 0, 0, 1, 3},
  };
  for (size_t i = 0; i < sizeof fused / sizeof fused[0]; i++) run_case(&fused[i], NULL);
  unsetenv("CONVLSTM_CUDA_FUSED_BIAS");
  return ctest_done("test_cuda_graphs");
}
