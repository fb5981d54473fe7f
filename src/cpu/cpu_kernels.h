/*
 * cpu/cpu_kernels.h -- what the CPU backend's kernel files share: the
 * backend's private context and the kernel entry points that
 * cpu_backend.c puts in its function table.
 *
 * Not part of the backend interface (core/backend.h is); nothing outside
 * src/cpu/ and its unit tests includes this header.
 */
#ifndef CONVLSTM_CPU_KERNELS_H
#define CONVLSTM_CPU_KERNELS_H

#include "../core/backend.h" /* cl_backend, shapes, hyperparameters */
#include "cpu_gemm.h"        /* cl_cpu_gemm_kind */
#include "cpu_threads.h"     /* cl_cpu_threads: the size of every OpenMP team */

/* be->context of a CPU backend. */
typedef struct cl_cpu_ctx {
  cl_cpu_gemm_kind gemm; /* chosen once in cl_backend_cpu_create */
  int conv_path;         /* tests and benchmarks: 0 auto, 1 im2col + GEMM, 2 direct */
} cl_cpu_ctx;

static inline cl_cpu_gemm_kind cl_cpu_gemm_of(const cl_backend *be) {
  return ((const cl_cpu_ctx *)be->context)->gemm;
}

/* The instruction set the vector kernels of a backend use: its GEMM kind,
 * or the best internal one when the GEMM is BLAS. */
static inline cl_cpu_gemm_kind cl_cpu_isa_of(const cl_backend *be) {
  cl_cpu_gemm_kind k = cl_cpu_gemm_of(be);
  return k == CL_CPU_GEMM_BLAS ? cl_cpu_gemm_best_internal() : k;
}

/* Writes a message into be->err and returns st. */
cl_status cl_cpu_fail(cl_backend *be, cl_status st, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* cpu_half.c: dtype storage <-> float32. load: dst[i] = src[off + i];
 * store: dst[off + i] = src[i] (+ dst[off + i] when accumulating), rounded
 * to nearest even once. */
void cl_cpu_load(cl_dtype t, const void *src, size_t off, float *dst, size_t n);
void cl_cpu_store(cl_dtype t, const float *src, void *dst, size_t off, size_t n, int accumulate);

/* cpu_conv.c */
cl_status cl_cpu_conv_workspace(cl_backend *be, const cl_conv_shape *s, size_t *bytes);
cl_status cl_cpu_conv_forward(cl_backend *be, const cl_conv_shape *s, const void *x, const float *w,
                              const float *bias, void *y, int accumulate, void *ws);
cl_status cl_cpu_conv_backward_data(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                    const float *w, float *dx, int accumulate, void *ws);
cl_status cl_cpu_conv_backward_filter(cl_backend *be, const cl_conv_shape *s, const void *dy,
                                      const void *x, float *dw, float *dbias, void *ws);

/* cpu_cell.c */
cl_status cl_cpu_gates_forward(cl_backend *be, const cl_gates_shape *s, void *z, const void *c_prev,
                               const float *wp, void *c, void *h);
cl_status cl_cpu_gates_backward(cl_backend *be, const cl_gates_shape *s, void *gates, const void *c,
                                const void *c_prev, const float *wp, const float *dh, float *dc);

/* cpu_peephole.c */
cl_status cl_cpu_peephole_filter(cl_backend *be, const cl_gates_shape *s, const void *dz,
                                 const void *c, const void *c_prev, float *dwp);

/* cpu_optim.c */
cl_status cl_cpu_grad_unscale(cl_backend *be, float *g, size_t n, float inv_scale,
                              int *found_nonfinite);
cl_status cl_cpu_adam_update(cl_backend *be, float *p, const float *g, float *m, float *v,
                             float *vmax, size_t n, const cl_adam_hp *hp);
cl_status cl_cpu_sgd_update(cl_backend *be, float *p, const float *g, float *buf, size_t n,
                            const cl_sgd_hp *hp);
cl_status cl_cpu_adam_check(cl_backend *be, const float *p, const float *g, const float *m,
                            const float *v, const float *vmax, size_t n, const cl_adam_hp *hp,
                            uint64_t *fault);
cl_status cl_cpu_sgd_check(cl_backend *be, const float *p, const float *g, const float *buf,
                           size_t n, const cl_sgd_hp *hp, uint64_t *fault);

/* cpu_gather.c */
cl_status cl_cpu_gather_rows(cl_backend *be, void *dst, const void *src, const int *idx, int nb,
                             int N, int t0, int nt, size_t row_bytes);

/* cpu_loss.c */
cl_status cl_cpu_mse(cl_backend *be, const void *pred, const float *target, size_t n,
                     cl_dtype dtype, float scale, float *grad, double *loss);
cl_status cl_cpu_loss(cl_backend *be, const cl_loss_fn *f, const void *pred, const float *target,
                      const float *weight, size_t n, cl_dtype dtype, float scale, float *grad,
                      double *loss);

/* cpu_sum.c: f(0) + ... + f(chunks - 1) in double, on n_threads when
 * parallel, in an order fixed by the team's size (not by the threads'
 * timing) */
typedef double (*cl_cpu_chunk_fn)(long long chunk, void *ctx);
double cl_cpu_sum_chunks(int n_threads, long long chunks, int parallel, cl_cpu_chunk_fn f,
                         void *ctx);

/* cpu_clip.c */
cl_status cl_cpu_sum_squares(cl_backend *be, const float *g, size_t n, double *sum);

/* cpu_dropout.c */
cl_status cl_cpu_mask_mul(cl_backend *be, const cl_mask_shape *s, const void *in,
                          const float *mask, void *out);

#endif
