/*
 * cuda/cuda_step.cu -- the CUDA backend's part of the sync-free training
 * step (core/backend.h, cl_step_vals), twin of src/cpu/cpu_step.c: the
 * loss of each segment added into a double on the device (loss_acc), where
 * the step's results live (step_vals), and the step's end (update_step:
 * its constants staged, then the guarded update decided on the device by
 * cuda_optim.cu's kernels, the clipping by cuda_clip.cu's). Nothing here
 * waits for the stream.
 */
#include "cuda_common.h" /* context, check macros */

/* One thread: the loss kernel's partial sums added in order, divided by n
 * and times share, then added into *acc: the operations, order and
 * rounding of cl_cuda_sum_partials and the core's sum on the host (the _rn
 * intrinsics keep them from being fused), so the loss has the bits of the
 * synchronising slots'. */
__global__ void loss_acc_kernel(const double *partials, unsigned blocks, double n, double share,
                                double *acc) {
  double s = 0.0;
  for (unsigned b = 0; b < blocks; b++) s = __dadd_rn(s, partials[b]);
  *acc = __dadd_rn(*acc, __dmul_rn(share, __ddiv_rn(s, n)));
}

cl_status cl_cuda_loss_acc(cl_backend *be, const cl_loss_fn *f, const void *pred,
                           const float *target, const float *weight, size_t n, cl_dtype dtype,
                           float scale, float *grad, double share, double *acc) {
  unsigned blocks = 0;
  const cl_status st =
      cl_cuda_loss_launch(be, f, pred, target, weight, n, dtype, scale, grad, &blocks);
  if (st != CL_OK) return st;
  cl_cuda_ctx *ctx = cl_cuda_ctx_of(be);
  loss_acc_kernel<<<1, 1, 0, ctx->stream>>>(ctx->d_partials, blocks, (double)n, share, acc);
  CL_CUDA_LAUNCH_CHECK(be);
  return CL_OK;
}

cl_step_vals *cl_cuda_step_vals(cl_backend *be) { return cl_cuda_ctx_of(be)->d_vals; }

cl_status cl_cuda_update_step(cl_backend *be, const cl_update_args *u, cl_step_vals *vals) {
  const cl_status st = cl_cuda_update_stage(be, u);
  return st == CL_OK ? cl_cuda_update_launch(be, u, vals) : st;
}
