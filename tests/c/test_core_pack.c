/*
 * tests/c/test_core_pack.c -- the core's conversion at its boundary
 * (core/pack.c) against a reference written here element by element. Every
 * element of a block of R's column-major doubles and of torch's row-major
 * floats must land where cl_act_at puts it, with 1 x 1 and 2 x 2 patches
 * (pixel_unshuffle, the encoder-forecaster's frames), NCHW and channels
 * last, stored as float32, float16 and bfloat16 with the bits of
 * host/half.h's scalar reference; and come back (cl_get_frames) as those
 * values widened. Rows are wider than pack.c's chunks and not a multiple
 * of them, and values cover float16's subnormals, ties and overflow; a
 * block of some sequences and steps is what micro-batches upload. On models
 * of 1 and 3 threads: a whole batch converts on a team of that many (split
 * unevenly with 3), the small block on one. The CPU backend is
 * host-accessible, so the frames are packed straight into the buffer given
 * here. Then the same in a child forked after those teams ran.
 */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L /* fork, alarm under -std=c11 */
#endif
#include "convlstm.h"
#include "host/half.h"     /* the scalar reference conversions */
#include "core/internal.h" /* cl_put_frames, cl_get_frames, cl_block, cl_model_create_with */
#include "ctest.h"         /* CHECK, ctest_config, uniform01 */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

/* N above pack.c's PACK_MIN_ELEMS, so that a whole batch converts on a
 * team; the block below it, on one thread */
enum { B = 3, T = 4, C = 2, H = 14, W = 136, N = B * T * C * H * W };

static double vals[N]; /* element (b, t, c, y, x) at torch's index */

static size_t torch_at(size_t b, size_t t, size_t c, size_t y, size_t x) {
  return (((b * T + t) * C + c) * H + y) * W + x;
}

static size_t r_at(size_t b, size_t t, size_t c, size_t y, size_t x) {
  return b + B * (t + T * (c + C * (y + H * x)));
}

/* Where the core keeps element (c, y, x) of image n: its own statement of
 * pixel_unshuffle and of the two layouts. */
static size_t core_at(cl_layout l, int p, size_t n, size_t c, size_t y, size_t x) {
  size_t cp = (size_t)C * p * p, hw = (size_t)(H / p) * (W / p);
  size_t ch = (c * p + y % p) * p + x % p, pix = (y / p) * (W / p) + x / p;
  return l == CL_NHWC ? (n * hw + pix) * cp + ch : (n * cp + ch) * hw + pix;
}

static uint32_t stored(cl_dtype t, float v) {
  if (t == CL_F16) return cl_f32_to_f16(v);
  if (t == CL_BF16) return cl_f32_to_bf16(v);
  return cl_f32_bits(v);
}

static float widened(cl_dtype t, uint32_t bits) {
  if (t == CL_F16) return cl_f16_to_f32((uint16_t)bits);
  if (t == CL_BF16) return cl_bf16_to_f32((uint16_t)bits);
  return cl_bits_f32(bits);
}

static void put_bits(void *buf, cl_dtype t, size_t i, uint32_t bits) {
  if (t == CL_F32)
    memcpy((float *)buf + i, &bits, 4);
  else
    ((uint16_t *)buf)[i] = (uint16_t)bits;
}

static int want_nhwc;
static cl_status cpu_backend(const cl_config *cfg, cl_backend **out, char *err, size_t errlen) {
  cl_status s = cl_backend_cpu_create(cfg->n_threads, out);
  if (s != CL_OK) {
    snprintf(err, errlen, "could not create the CPU backend");
    return s;
  }
  (*out)->channels_last = want_nhwc;
  return CL_OK;
}

static cl_model *model_of(int p, cl_layout l, int threads) {
  cl_config c = ctest_config(C, 3, 3, 3, 3, 1, threads);
  if (p > 1) c.forecaster = 1, c.patch = p;
  want_nhwc = l == CL_NHWC;
  cl_model *m = NULL;
  char err[CL_ERRMSG_LEN] = "";
  cl_status st = cl_model_create_with(&c, cpu_backend, &m, err, sizeof err);
  CHECK(st == CL_OK, "create p %d: %s", p, err);
  if (st != CL_OK) return NULL;
  CHECK(m->layout == l, "p %d: the model's layout is %d, not %d", p, (int)m->layout, (int)l);
  return m;
}

/* Values that exercise the conversions: random magnitudes from float16's
 * subnormals to past its largest, both signs, and some exact ties. */
static void fill_values(void) {
  for (size_t i = 0; i < N; i++) {
    double u = uniform01(NULL), e = floor(uniform01(NULL) * 46) - 28; /* 2^-28 .. 2^17 */
    vals[i] = (u < 0.5 ? -1 : 1) * (0.5 + u) * pow(2.0, e);
    if (i % 97 == 0) vals[i] = 1.0 + ldexp(1.0, -11); /* a float16 tie, to even */
    if (i % 89 == 0) vals[i] = 1.0 + ldexp(1.0, -8);  /* a bfloat16 tie, to even */
  }
}

static void check_case(cl_model *m, int p, cl_layout l, int r_fmt, cl_dtype t, cl_block k) {
  static double rx[N];
  static float tx[N];
  for (size_t b = 0; b < B; b++)
    for (size_t s = 0; s < T; s++)
      for (size_t c = 0; c < C; c++)
        for (size_t y = 0; y < H; y++)
          for (size_t x = 0; x < W; x++) {
            double v = vals[torch_at(b, s, c, y, x)];
            rx[r_at(b, s, c, y, x)] = v;
            tx[torch_at(b, s, c, y, x)] = (float)v;
          }
  cl_host_array a = {r_fmt ? (void *)rx : (void *)tx, r_fmt ? CL_HOST_R_F64 : CL_HOST_TORCH_F32,
                     5, {B, T, C, H, W}};
  const size_t n = (size_t)k.nb * k.nt * C * H * W, es = t == CL_F32 ? 4 : 2;
  unsigned char *got = malloc(n * es), *want = malloc(n * es);
  memset(got, 0xab, n * es);
  memset(want, 0xab, n * es);
  for (size_t s = 0; s < (size_t)k.nt; s++)
    for (size_t j = 0; j < (size_t)k.nb; j++)
      for (size_t c = 0; c < C; c++)
        for (size_t y = 0; y < H; y++)
          for (size_t x = 0; x < W; x++) {
            float v = (float)vals[torch_at(k.b0 + j, k.t0 + s, c, y, x)];
            put_bits(want, t, core_at(l, p, s * k.nb + j, c, y, x), stored(t, v));
          }
  const int full = k.nb == B && k.nt == T;
  const char *fmt = r_fmt ? "R doubles" : "torch floats";
  cl_status st = cl_put_frames(m, got, t, &a, k);
  CHECK(st == CL_OK && memcmp(got, want, n * es) == 0,
        "pack %s p %d %s dtype %d block b0 %d nb %d t0 %d nt %d, %d thread(s): not the reference's "
        "bits", fmt, p, l == CL_NHWC ? "NHWC" : "NCHW", (int)t, k.b0, k.nb, k.t0, k.nt,
        m->be->n_threads);
  if (full) { /* and back: the stored values widened */
    static double ro[N];
    static float to[N];
    cl_host_array o = {r_fmt ? (void *)ro : (void *)to, a.format, 5, {B, T, C, H, W}};
    st = cl_get_frames(m, &o, want, t);
    int same = st == CL_OK;
    for (size_t b = 0; b < B && same; b++)
      for (size_t s = 0; s < T; s++)
        for (size_t c = 0; c < C; c++)
          for (size_t y = 0; y < H; y++)
            for (size_t x = 0; x < W; x++) {
              float w = widened(t, stored(t, (float)vals[torch_at(b, s, c, y, x)]));
              double g = r_fmt ? ro[r_at(b, s, c, y, x)] : (double)to[torch_at(b, s, c, y, x)];
              same &= g == (double)w;
            }
    CHECK(same, "unpack %s p %d %s dtype %d, %d thread(s): not the stored values widened", fmt, p,
          l == CL_NHWC ? "NHWC" : "NCHW", (int)t, m->be->n_threads);
  }
  free(got);
  free(want);
}

/* The team's size at its limits: the results are the same bits on any
 * team, so only the size itself shows a limit moved. */
static void check_team_edges(int in_child) {
  const int threads[] = {3, 8, 9};
  const int want[] = {3, 8, 8};
  for (int i = 0; i < 3; i++) {
    cl_model *m = model_of(1, CL_NCHW, threads[i]);
    if (!m) continue;
    int below = cl_pack_threads(m, ((size_t)1 << 15) - 1), at = cl_pack_threads(m, (size_t)1 << 15);
#ifdef _OPENMP
    int w = in_child ? 1 : want[i]; /* host/threads.h's fork guard */
#else
    int w = want[i];
#endif
    CHECK(below == 1, "%d threads: 32767 elements convert on %d threads, not 1", threads[i], below);
    CHECK(at == w, "%d threads%s: 32768 elements convert on %d threads, not %d", threads[i],
          in_child ? " in a forked child" : "", at, w);
    cl_model_free(m);
  }
}

static void run(int threads) {
  const cl_block blocks[] = {{0, B, 0, T}, {1, 2, 1, 2}};
  for (int p = 1; p <= 2; p++)
    for (int l = CL_NCHW; l <= CL_NHWC; l++) {
      cl_model *m = model_of(p, (cl_layout)l, threads);
      if (!m) continue;
      for (int r_fmt = 0; r_fmt <= 1; r_fmt++)
        for (int t = CL_F32; t <= CL_BF16; t++)
          for (size_t k = 0; k < sizeof blocks / sizeof *blocks; k++)
            check_case(m, p, (cl_layout)l, r_fmt, (cl_dtype)t, blocks[k]);
      cl_model_free(m);
    }
}

/* After the parent's teams (libgomp's pool exists), a forked child's
 * conversion must run on one thread (host/threads.h) and finish, right: a
 * child left waiting for the pool's lost threads is killed by alarm(). */
static void run_in_forked_child(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(120);
    ctest_failures = 0; /* the child's own checks, not the parent's */
    run(3);
    check_team_edges(1);
    fflush(stdout);
    _exit(ctest_failures ? 1 : 0);
  }
  int status = 0;
  CHECK(pid > 0 && waitpid(pid, &status, 0) == pid, "fork or wait failed");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0,
        "the conversion in a forked child %s", WIFSIGNALED(status) ? "hung or crashed" : "failed");
}

int main(void) {
  fill_values();
  run(1);
  run(3);
  check_team_edges(0);
  run_in_forked_child();
  return ctest_done("test_core_pack");
}
