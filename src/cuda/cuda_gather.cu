/*
 * cuda/cuda_gather.cu -- the gather_rows slot (core/backend.h), twin of
 * cpu/cpu_gather.c: a training step on a data set copies its batch's rows
 * out of the time-major data set on the device, [T, N, row] -> [nt, nb, row],
 * in one launch on the backend's stream, so no batch crosses the PCIe bus.
 *
 * One block per destination row (grid-striding when there are more rows
 * than blocks), its threads striding along the row in the widest word that
 * the row length and both pointers allow: 16 bytes (uint4) for the usual
 * float32 and float16 images, else 4 bytes, else single bytes.
 *
 * Not here: index checks (core/data.c refuses rows outside [0, N) before it
 * uploads the indices).
 */
#include <stdint.h> /* uintptr_t */
#include <stdio.h>  /* snprintf */

#include "cuda_common.h" /* context, CL_CUDA_CHECK, CL_CUDA_THREADS */

template <typename V>
__global__ void gather_rows_kernel(V *__restrict__ dst, const V *__restrict__ src,
                                   const int *__restrict__ idx, int nb, int N, int t0,
                                   size_t rows, size_t row_words) {
  for (size_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const size_t t = r / (size_t)nb, j = r % (size_t)nb;
    const V *from = src + ((size_t)(t0 + t) * (size_t)N + (size_t)idx[j]) * row_words;
    V *to = dst + r * row_words;
    for (size_t e = threadIdx.x; e < row_words; e += blockDim.x) to[e] = from[e];
  }
}

template <typename V>
static cl_status launch(cl_backend *be, void *dst, const void *src, const int *idx, int nb, int N,
                        int t0, size_t rows, size_t row_bytes) {
  const size_t words = row_bytes / sizeof(V);
  /* a block per row up to a cap; short rows need fewer threads */
  const unsigned blocks = (unsigned)(rows < ((size_t)1 << 16) ? rows : ((size_t)1 << 16));
  const unsigned threads = words >= CL_CUDA_THREADS ? CL_CUDA_THREADS
                           : words >= 64            ? 128
                                                    : 32;
  gather_rows_kernel<V><<<blocks, threads, 0, cl_cuda_ctx_of(be)->stream>>>(
      (V *)dst, (const V *)src, idx, nb, N, t0, rows, words);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

static bool aligned(const void *p, size_t a) { return ((uintptr_t)p % a) == 0; }

cl_status cl_cuda_gather_rows(cl_backend *be, void *dst, const void *src, const int *idx, int nb,
                              int N, int t0, int nt, size_t row_bytes) {
  if (nb < 0 || nt < 0 || N < 1 || t0 < 0) {
    snprintf(be->err, sizeof be->err, "gather_rows: bad shape nb %d, N %d, t0 %d, nt %d", nb, N,
             t0, nt);
    return CL_E_INVALID;
  }
  const size_t rows = (size_t)nb * (size_t)nt;
  if (rows == 0 || row_bytes == 0) return CL_OK;
  if (row_bytes % 16 == 0 && aligned(dst, 16) && aligned(src, 16))
    return launch<uint4>(be, dst, src, idx, nb, N, t0, rows, row_bytes);
  if (row_bytes % 4 == 0 && aligned(dst, 4) && aligned(src, 4))
    return launch<unsigned>(be, dst, src, idx, nb, N, t0, rows, row_bytes);
  return launch<unsigned char>(be, dst, src, idx, nb, N, t0, rows, row_bytes);
}
