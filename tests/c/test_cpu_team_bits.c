/*
 * tests/c/test_cpu_team_bits.c -- a CPU model trains to the same bits on
 * any number of threads: the step that splits each call across the team
 * (the default) computes every value in one order whatever the team.
 * Forward and the per-step backward are per image (an image's convolution
 * does not depend on which images share its chunk or thread, a cell row on
 * nothing but itself), and the sums over images (weight and bias
 * gradients) run in one order on any team (cpu_winograd.c; cpu_conv.c,
 * whose backward filter splits dw, not the images, among the threads;
 * cpu_cell.c). A split that broke this, as the step split by batch does
 * on purpose (core/split.c), would show here first; so would a sum of
 * the loss or of the gradients' norm (clipping's) in per-thread parts
 * (cpu_sum.c sums fixed groups of chunks in their order).
 *
 * The instrument: models with the same parameters and data on 1, 2 and 3
 * threads take Adam steps; their gradients, parameters and loss are
 * compared bit for bit with one thread's. Shapes: issue 39's plain stack (16 channels, hidden
 * 48-48, 5x5, 16x16 maps) at batch 4 (the hidden halves one Winograd
 * chunk, split by images on 2 threads and by channels on 3) under every
 * step case of ctest.h and at batch 5; a small stack whose convolutions
 * all take the direct path (1 -> 16-4, 3x3: dw split by rows and by input
 * channels) under every step case; a stack on the GEMM path's im2col view
 * (4 -> 48-48, 3x3, Winograd off); issue 39's encoder-forecaster (48-48 a
 * stack, its head a 1 x 1 GEMM) for one step.
 */
#define _POSIX_C_SOURCE 200809L /* setenv */
#include "ctest.h" /* CHECK, uniform01, ctest_model, ctest_flat, ctest_step_case */

#include <stdlib.h>
#include <string.h>

enum { STEPS = 3, TEAMS = 3 };

static const cl_optim adam = {CL_OPTIM_ADAM, 1e-2, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};

typedef struct run {
  float *grads, *params;
  size_t n;
  double loss;
} run;

static int steps = STEPS; /* how many steps to take */
static double clip;       /* max_grad_norm of every step (0: none) */

/* `steps` steps of config c on `threads`, its parameters and the data
 * drawn from fixed seeds; the last gradients, the parameters and the last
 * loss. */
static run train(cl_config c, int threads, int b, int T, int H, int W, int k) {
  run r = {NULL, NULL, 0, 0};
  cl_step_options o;
  cl_dtype dt;
  ctest_step_case(k, &o, &dt);
  o.max_grad_norm = clip;
  c.dtype = dt;
  c.n_threads = threads;
  ctest_rng = 88172645463325252ULL;
  cl_model *m = ctest_model(&c);
  if (!m) return r;
  const int C = c.input_dim, top = c.hidden_dims[c.n_layers - 1];
  const int frames = c.forecaster ? 2 : 0;
  const size_t nx = (size_t)b * T * C * H * W;
  const size_t ny = c.forecaster ? (size_t)b * frames * C * H * W : (size_t)b * top * H * W;
  float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float));
  size_t cap = 1 << 21;
  r.grads = malloc(cap * sizeof(float)), r.params = malloc(cap * sizeof(float));
  if (!x || !y || !r.grads || !r.params) goto out;
  for (size_t i = 0; i < nx; i++) x[i] = (float)(2 * uniform01(NULL) - 1);
  for (size_t i = 0; i < ny; i++) y[i] = (float)(uniform01(NULL) - 0.5);
  cl_host_array hx = {x, CL_HOST_TORCH_F32, 5, {b, T, C, H, W}};
  cl_host_array hy = c.forecaster ? (cl_host_array){y, CL_HOST_TORCH_F32, 5, {b, frames, C, H, W}}
                                  : (cl_host_array){y, CL_HOST_TORCH_F32, 4, {b, top, H, W, 0}};
  const cl_target tg = c.forecaster ? CL_TARGET_SEQUENCE : CL_TARGET_LAST_STATE;
  for (int s = 0; s < steps; s++)
    CHECK(cl_model_train_step(m, &hx, &hy, tg, &adam, &o, &r.loss) == CL_OK, "%d threads: %s",
          threads, cl_model_error(m));
  if (clip > 0)
    CHECK(cl_model_grad_norm(m) > 10 * clip, "%d threads: a norm of %g does not clip at %g",
          threads, cl_model_grad_norm(m), clip);
  r.n = ctest_flat(m, 1, r.grads, cap);
  ctest_flat(m, 0, r.params, cap);
out:
  free(x), free(y);
  cl_model_free(m);
  return r;
}

/* more's gradients and parameters one's bits, each tensor named. */
static void same(const char *what, const char *name, int threads, const cl_config *c,
                 const run *one, const run *more) {
  cl_model *m = ctest_model(c); /* for the tensors' names and sizes only */
  size_t at = 0;
  for (int i = 0; m && i < cl_model_n_tensors(m); i++) {
    const char *tn;
    int nd, d[4];
    cl_model_tensor_info(m, i, &tn, &nd, d);
    const size_t n = ctest_numel(nd, d);
    CHECK(memcmp(one->grads + at, more->grads + at, n * sizeof(float)) == 0,
          "%s, %s: %d threads' gradient of %s is not one thread's bits", what, name, threads, tn);
    at += n;
  }
  CHECK(at == one->n, "%s: %zu values, the tensors %zu", what, one->n, at);
  CHECK(memcmp(one->params, more->params, one->n * sizeof(float)) == 0,
        "%s, %s: %d threads' parameters are not one thread's bits", what, name, threads);
  cl_model_free(m);
}

static void compare(const char *what, cl_config c, int b, int T, int H, int W, int cases) {
  for (int k = 0; k < cases; k++) {
    cl_step_options o;
    cl_dtype dt;
    const char *name = ctest_step_case(k, &o, &dt);
    run one = train(c, 1, b, T, H, W, k);
    for (int threads = 2; threads <= TEAMS; threads++) {
      run more = train(c, threads, b, T, H, W, k);
      CHECK(one.n > 0 && more.n == one.n, "%s, %s: %zu values on %d threads, %zu on one", what,
            name, more.n, threads, one.n);
      if (one.n > 0 && more.n == one.n) same(what, name, threads, &c, &one, &more);
      CHECK(memcmp(&more.loss, &one.loss, sizeof one.loss) == 0,
            "%s, %s: loss %.17g on %d threads, %.17g on one", what, name, more.loss, threads,
            one.loss);
      free(more.grads), free(more.params);
    }
    printf("%-36s %-24s loss %.9g\n", what, name, one.loss);
    free(one.grads), free(one.params);
  }
}

/* issue 39's encoder-forecaster (hidden 48-48 a stack, 5x5, per-channel
 * peepholes, 4 x 4 patches of 32 x 32 frames: 8 x 8 maps) */
static cl_config forecaster_48(void) {
  cl_config c = ctest_forecaster_config(1, CL_F32);
  c.hidden_dims[0] = c.hidden_dims[1] = c.hidden_dims[2] = c.hidden_dims[3] = 48;
  for (int l = 0; l < 4; l++) c.kernel_sizes[l] = 5;
  c.patch = 4;
  return c;
}

int main(void) {
  /* Not under valgrind (its preload in LD_PRELOAD): these models' steps
   * took over five minutes there; the plain and AddressSanitizer runs
   * check it, and the kernels it runs are valgrind's in other tests. */
  if (ctest_under_valgrind()) {
    printf("test_cpu_team_bits: skipped under valgrind (minutes of steps)\n");
    return 77;
  }
  /* issue 39's plain stack: four sequences (one chunk a hidden half), and
   * five (an odd batch: the channel split on two threads) */
  const cl_config plain = ctest_config(16, 48, 48, 5, 5, 1, 1);
  compare("plain stack 16 -> 48-48, 5x5, B 4", plain, 4, 3, 16, 16, CTEST_STEP_CASES);
  compare("plain stack 16 -> 48-48, 5x5, B 5", plain, 5, 3, 16, 16, 1);
  clip = 1e-4; /* far below the gradients' norm (about 1e-2): every step clips */
  compare("plain stack, B 4, clipped to 1e-4", plain, 4, 3, 16, 16, 1);
  clip = 0;
  compare("direct path 1 -> 16-4, 3x3, B 4", ctest_config(1, 16, 4, 3, 3, 1, 1), 4, 3, 8, 8,
          CTEST_STEP_CASES);
  /* read when a backend is made: these models take no Winograd */
  setenv("CONVLSTM_CONV_ALGO", "gemm", 1);
  compare("im2col view 4 -> 48-48, 3x3, B 4", ctest_config(4, 48, 48, 3, 3, 1, 1), 4, 3, 8, 8,
          CTEST_STEP_CASES);
  unsetenv("CONVLSTM_CONV_ALGO");
  steps = 1;
  compare("forecaster 48-48, 5x5, B 4", forecaster_48(), 4, 3, 32, 32, 1);
  return ctest_done("test_cpu_team_bits");
}
