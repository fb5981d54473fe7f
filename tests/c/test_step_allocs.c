/*
 * tests/c/test_step_allocs.c -- no allocation inside a training step, as an
 * outside instrument sees it: alloc_count.so (LD_PRELOAD) counts every
 * malloc / calloc / realloc / memalign / mmap above 64 KiB of the process.
 * The first step of a shape plans and reserves (allowed to allocate); every
 * later step of the same shape must make none, for each option the step has
 * (checkpoint, accumulation, tbptt, recompute_gates, float16, SGD). Prints the counts.
 *
 * Started without the interposer, it runs itself again under it (the .so
 * lies beside it in the build folder). Exits 77 (skipped) where LD_PRELOAD
 * cannot work: a sanitizer build (ASan must be the first library loaded),
 * or no alloc_count.so.
 */
#define _GNU_SOURCE
#include "ctest.h" /* CHECK, uniform01, ctest_model */

#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define CL_UNDER_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CL_UNDER_SANITIZER 1
#endif
#endif

typedef void (*start_fn)(void);
typedef long (*stop_fn)(size_t *, const char **);

static int reexec_under_interposer(char **argv) {
  char self[4096], so[4200];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return 77;
  self[n] = '\0';
  snprintf(so, sizeof so, "%s/alloc_count.so", dirname(self));
  if (access(so, R_OK) != 0) {
    printf("skip: %s not built\n", so);
    return 77;
  }
  if (getenv("CL_ALLOC_COUNT_CHILD")) {
    printf("skip: alloc_count.so did not load through LD_PRELOAD here\n");
    return 77;
  }
  setenv("LD_PRELOAD", so, 1);
  setenv("CL_ALLOC_COUNT_CHILD", "1", 1);
  n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n] = '\0';
  execv(self, argv);
  printf("skip: could not run again under LD_PRELOAD\n");
  return 77;
}

typedef struct step_case {
  const char *name;
  int B, T, H, W;
  cl_dtype dtype;
  cl_step_options opts;
  cl_optim_kind optim;
  cl_device device;
  cl_peephole peephole; /* per position: for the case's H x W */
  double dropout; /* > 0: every layer's input and h dropped; masks the caller's, or with
                     opts.draw_masks drawn by the core into its planned buffers */
} step_case;

/* per_gate: dropout masks one per gate ([B, 4, C, H, W]; grouped convolutions) */
static void run_case(const step_case *sc, int per_gate, start_fn start, stop_fn stop) {
  cl_config c = ctest_config(2, 16, 1, 3, 3, 1, 1);
  c.dtype = sc->dtype;
  c.device = sc->device;
  c.peephole = sc->peephole;
  if (sc->peephole == CL_PEEP_POSITION) c.peephole_h = sc->H, c.peephole_w = sc->W;
  for (int l = 0; l < c.n_layers; l++) c.dropout[l] = c.recurrent_dropout[l] = sc->dropout;
  c.dropout_masks = per_gate ? CL_MASKS_PER_GATE : CL_MASKS_SHARED;
  cl_model *m = ctest_model(&c);
  if (!m) return;
  cl_step_options opts = sc->opts;
  float *masks[4] = {0}; /* drawn once, before the instrument starts */
  for (int k = 0; sc->dropout > 0 && !opts.draw_masks && k < 4; k++) {
    int ch = k == 0 ? c.input_dim : k == 3 ? c.hidden_dims[1] : c.hidden_dims[0];
    size_t n = (size_t)sc->B * ch * sc->H * sc->W * (per_gate ? 4 : 1);
    masks[k] = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) masks[k][i] = uniform01(NULL) < sc->dropout ? 0.0f : 2.0f;
    if (k % 2) opts.mask_h[k / 2] = masks[k];
    else opts.mask_x[k / 2] = masks[k];
  }
  size_t nx = (size_t)sc->B * sc->T * c.input_dim * sc->H * sc->W;
  size_t ny = (size_t)sc->B * sc->H * sc->W;
  float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y);
  for (size_t i = 0; i < nx; i++) x[i] = (float)uniform01(NULL);
  for (size_t i = 0; i < ny; i++) y[i] = (float)uniform01(NULL);
  cl_host_array xa = {x, CL_HOST_TORCH_F32, 5, {sc->B, sc->T, c.input_dim, sc->H, sc->W}};
  cl_host_array ya = {y, CL_HOST_TORCH_F32, 4, {sc->B, 1, sc->H, sc->W, 0}};
  cl_optim opt = {sc->optim, 1e-3, 0.9, 0.999, 1e-8, 0, 0, 0, 0, 0};
  if (sc->optim == CL_OPTIM_SGD) opt.momentum = 0.9;
  double loss = 0;
  size_t bytes = 0;
  const char *last = "";
  start();
  cl_status st = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &opt, &opts, &loss);
  long first = stop(&bytes, &last);
  CHECK(st == CL_OK, "%s: first step: %s", sc->name, cl_model_error(m));
  long later = 0;
  for (int s = 0; s < 3 && st == CL_OK; s++) {
    start();
    st = cl_model_train_step(m, &xa, &ya, CL_TARGET_LAST_STATE, &opt, &opts, &loss);
    later += stop(&bytes, &last);
    CHECK(st == CL_OK, "%s: step %d: %s", sc->name, s + 2, cl_model_error(m));
  }
  printf("  %-28s%s first step: %ld allocation(s) > 64 KiB; steps 2-4: %ld%s%s\n", sc->name,
         per_gate ? " per gate" : "", first, later, later ? ", last " : "", later ? last : "");
  /* the instrument sees the library: the first step reserves its arena */
  CHECK(first >= 1, "%s: the interposer saw no allocation at the first step", sc->name);
  CHECK(later == 0, "%s: %ld allocation(s) above 64 KiB inside steps 2-4 (last: %s)", sc->name,
        later, last);
  for (int k = 0; k < 4; k++) free(masks[k]);
  free(x);
  free(y);
  cl_model_free(m);
}

int main(int argc, char **argv) {
  (void)argc;
#ifdef CL_UNDER_SANITIZER
  (void)argv;
  (void)ctest_done;
  (void)run_case;
  (void)reexec_under_interposer;
  printf("skip: a sanitizer build (ASan must be the first library; LD_PRELOAD cannot go before it)\n");
  return 77;
#else
  start_fn start = (start_fn)dlsym(RTLD_DEFAULT, "cl_alloc_count_start");
  stop_fn stop = (stop_fn)dlsym(RTLD_DEFAULT, "cl_alloc_count_stop");
  if (!start || !stop) return reexec_under_interposer(argv);
  static const step_case cases[] = {
      {"plain", 4, 6, 16, 16, CL_F32, {0}, CL_OPTIM_ADAM, CL_DEVICE_CPU, CL_PEEP_NONE, 0},
      {"checkpoint 2", 4, 6, 16, 16, CL_F32, {.checkpoint = 2}, CL_OPTIM_ADAM, CL_DEVICE_CPU,
       CL_PEEP_NONE, 0},
      {"accumulation 2", 4, 6, 16, 16, CL_F32, {.accumulation_steps = 2}, CL_OPTIM_ADAM,
       CL_DEVICE_CPU, CL_PEEP_NONE, 0},
      {"tbptt 4", 4, 6, 16, 16, CL_F32, {.tbptt = 4}, CL_OPTIM_ADAM, CL_DEVICE_CPU, CL_PEEP_NONE,
       0},
      {"float16", 4, 6, 16, 16, CL_F16, {0}, CL_OPTIM_ADAM, CL_DEVICE_CPU, CL_PEEP_NONE, 0},
      {"bfloat16, sgd", 4, 6, 16, 16, CL_BF16, {0}, CL_OPTIM_SGD, CL_DEVICE_CPU, CL_PEEP_NONE, 0},
      {"large image", 2, 3, 64, 64, CL_F32, {0}, CL_OPTIM_ADAM, CL_DEVICE_CPU, CL_PEEP_NONE, 0},
      {"peepholes per position", 4, 6, 16, 16, CL_F32, {0}, CL_OPTIM_ADAM, CL_DEVICE_CPU,
       CL_PEEP_POSITION, 0},
      {"peepholes per channel, f16", 4, 6, 16, 16, CL_F16, {.checkpoint = 2}, CL_OPTIM_ADAM,
       CL_DEVICE_CPU, CL_PEEP_CHANNEL, 0},
      {"dropout 0.5", 4, 6, 16, 16, CL_F32, {0}, CL_OPTIM_ADAM, CL_DEVICE_CPU, CL_PEEP_NONE, 0.5},
      {"dropout, checkpoint 2", 4, 6, 16, 16, CL_F16, {.checkpoint = 2}, CL_OPTIM_ADAM,
       CL_DEVICE_CPU, CL_PEEP_NONE, 0.5},
      {"dropout, peepholes per position", 4, 6, 16, 16, CL_F32, {.checkpoint = 3}, CL_OPTIM_ADAM,
       CL_DEVICE_CPU, CL_PEEP_POSITION, 0.5},
      {"dropout drawn", 4, 6, 16, 16, CL_F32, {.draw_masks = 1, .dropout_seed = 7}, CL_OPTIM_ADAM,
       CL_DEVICE_CPU, CL_PEEP_NONE, 0.5},
      {"dropout drawn, accumulation 2", 4, 6, 16, 16, CL_F16,
       {.accumulation_steps = 2, .checkpoint = 2, .draw_masks = 1, .dropout_seed = 9},
       CL_OPTIM_ADAM, CL_DEVICE_CPU, CL_PEEP_NONE, 0.5},
      {"recompute_gates 2", 4, 6, 16, 16, CL_F32, {.recompute_gates = 2}, CL_OPTIM_ADAM,
       CL_DEVICE_CPU, CL_PEEP_NONE, 0},
      {"recompute 4, ckpt 3, dropout, peep, f16", 4, 7, 16, 16, CL_F16,
       {.recompute_gates = 4, .checkpoint = 3}, CL_OPTIM_ADAM, CL_DEVICE_CPU, CL_PEEP_CHANNEL, 0.5},
  };
  printf("test_step_allocs (interposer: malloc/calloc/realloc/memalign/mmap > 64 KiB)\n");
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    run_case(&cases[i], 0, start, stop);
    if (cases[i].dropout > 0) run_case(&cases[i], 1, start, stop);
  }
  /* on a GPU the same, counting cudaMalloc & co. of any size as well */
  if (cl_device_available(CL_DEVICE_CUDA)) {
    printf("on the GPU (cudaMalloc, cudaMallocAsync, cudaMallocHost, cudaHostAlloc: any size)\n");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
      step_case g = cases[i];
      g.device = CL_DEVICE_CUDA;
      run_case(&g, 0, start, stop);
      if (g.dropout > 0) run_case(&g, 1, start, stop);
    }
  } else {
    printf("skip cuda: no usable GPU, the CUDA cases did not run\n");
  }
  return ctest_done("test_step_allocs");
#endif
}
