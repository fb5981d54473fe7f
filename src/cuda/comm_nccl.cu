/*
 * cuda/comm_nccl.cu -- the NCCL communicator (core/comm.h) for GPU models:
 * gradient buckets summed in place with ncclAllReduce on a stream of its
 * own, which first waits (an event) for the backend's stream to have
 * produced the bucket, so the reduction of a layer overlaps the backward of
 * the layers below it; wait_all synchronises that stream once before the
 * update. The unique id travels over the parent communicator (MPI, or the
 * one-process one for a single rank), as Horovod and torch.distributed do.
 * Host-side collectives (the loss, barriers, abort) are the parent's.
 *
 * Built only with NCCL (CL_HAVE_NCCL, from configure); core/comm.c stands in
 * otherwise. NCCL refuses two ranks on one GPU: one rank per device.
 */
#ifdef CL_HAVE_NCCL

#include "cuda_common.h"

#include <nccl.h>

#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "../core/comm.h"
}

#define NCCL_MAX_EVENTS 64 /* one per bucket in flight; > CL_MAX_LAYERS */

typedef struct nccl_ctx {
  ncclComm_t comm;
  cudaStream_t stream;
  cudaEvent_t ready[NCCL_MAX_EVENTS]; /* a bucket's gradients are written */
  int n_inflight;
  cl_comm *parent; /* host collectives; not owned */
} nccl_ctx;

static nccl_ctx *ctx_of(cl_comm *c) { return (nccl_ctx *)c->ctx; }

static cl_status nccl_failed(cl_comm *c, const char *what, ncclResult_t r) {
  return cl_comm_fail(c, CL_E_BACKEND, "%s failed: %s", what, ncclGetErrorString(r));
}
static cl_status cuda_failed(cl_comm *c, const char *what, cudaError_t e) {
  return cl_comm_fail(c, CL_E_BACKEND, "%s failed: %s", what, cudaGetErrorString(e));
}

static cl_status nccl_allreduce_start(cl_comm *c, cl_backend *be, float *buf, size_t n,
                                      float scale) {
  nccl_ctx *x = ctx_of(c);
  if (x->n_inflight >= NCCL_MAX_EVENTS)
    return cl_comm_fail(c, CL_E_INTERNAL, "more than %d buckets in flight", NCCL_MAX_EVENTS);
  cudaEvent_t ev = x->ready[x->n_inflight];
  cudaError_t e = cudaEventRecord(ev, cl_cuda_ctx_of(be)->stream);
  if (e == cudaSuccess) e = cudaStreamWaitEvent(x->stream, ev, 0);
  if (e != cudaSuccess) return cuda_failed(c, "cudaEventRecord/cudaStreamWaitEvent", e);
  /* the share applied inside the reduction: ncclAvg for equal shares, else
   * a pre-multiplied sum with the scalar from the host */
  ncclRedOp_t op = ncclSum;
  int custom = 0;
  ncclResult_t r = ncclSuccess;
  if (scale == 1.0f / (float)c->size) {
    op = ncclAvg;
  } else if (scale != 1.0f) {
    r = ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat, ncclScalarHostImmediate, x->comm);
    if (r != ncclSuccess) return nccl_failed(c, "ncclRedOpCreatePreMulSum", r);
    custom = 1;
  }
  r = ncclAllReduce(buf, buf, n, ncclFloat, op, x->comm, x->stream);
  if (custom) ncclRedOpDestroy(op, x->comm); /* after the call that uses it, as NCCL allows */
  if (r != ncclSuccess) return nccl_failed(c, "ncclAllReduce", r);
  x->n_inflight++;
  return CL_OK;
}

static cl_status nccl_wait_all(cl_comm *c) {
  nccl_ctx *x = ctx_of(c);
  x->n_inflight = 0;
  cudaError_t e = cudaStreamSynchronize(x->stream);
  if (e != cudaSuccess) return cuda_failed(c, "cudaStreamSynchronize (NCCL stream)", e);
  ncclResult_t async = ncclSuccess;
  ncclResult_t r = ncclCommGetAsyncError(x->comm, &async);
  if (r == ncclSuccess) r = async;
  return r == ncclSuccess ? CL_OK : nccl_failed(c, "NCCL (asynchronous)", r);
}

static cl_status parent_result(cl_comm *c, cl_status s) {
  if (s != CL_OK) return cl_comm_fail(c, s, "%s", ctx_of(c)->parent->err);
  return CL_OK;
}

static cl_status nccl_broadcast(cl_comm *c, void *buf, size_t bytes, int root, int on_device) {
  nccl_ctx *x = ctx_of(c);
  if (!on_device)
    return parent_result(c, x->parent->iface->broadcast(x->parent, buf, bytes, root, 0));
  /* whatever wrote buf (a load, the initialisation) ran on the backend's
   * stream, which this communicator does not know: the device's order */
  cudaError_t e0 = cudaDeviceSynchronize();
  if (e0 != cudaSuccess) return cuda_failed(c, "cudaDeviceSynchronize", e0);
  ncclResult_t r = ncclBroadcast(buf, buf, bytes, ncclUint8, root, x->comm, x->stream);
  if (r != ncclSuccess) return nccl_failed(c, "ncclBroadcast", r);
  cudaError_t e = cudaStreamSynchronize(x->stream);
  return e == cudaSuccess ? CL_OK : cuda_failed(c, "cudaStreamSynchronize (NCCL stream)", e);
}

static cl_status nccl_sum_host(cl_comm *c, double *v, int n) {
  return parent_result(c, ctx_of(c)->parent->iface->sum_host(ctx_of(c)->parent, v, n));
}
static cl_status nccl_barrier(cl_comm *c) {
  return parent_result(c, ctx_of(c)->parent->iface->barrier(ctx_of(c)->parent));
}
static void nccl_abort(cl_comm *c, int code) {
  nccl_ctx *x = ctx_of(c);
  ncclCommAbort(x->comm); /* frees its peers from any collective in flight */
  x->comm = NULL;
  x->parent->iface->abort(x->parent, code);
}

static void nccl_destroy(cl_comm *c) {
  nccl_ctx *x = ctx_of(c);
  if (x->comm) ncclCommDestroy(x->comm);
  for (int i = 0; i < NCCL_MAX_EVENTS; i++)
    if (x->ready[i]) cudaEventDestroy(x->ready[i]);
  if (x->stream) cudaStreamDestroy(x->stream);
  free(x);
  free(c);
}

static const struct cl_comm_i nccl_iface = {
    /* .name = */ "nccl",
    /* .device_buffers = */ 1,
    /* .allreduce_start = */ nccl_allreduce_start,
    /* .progress = */ NULL, /* NCCL's kernels run by themselves */
    /* .wait_all = */ nccl_wait_all,
    /* .broadcast = */ nccl_broadcast,
    /* .sum_host = */ nccl_sum_host,
    /* .barrier = */ nccl_barrier,
    /* .abort = */ nccl_abort,
    /* .destroy = */ nccl_destroy,
};

extern "C" cl_status cl_comm_nccl_create(cl_comm *mpi, int device, cl_comm **out, char *err,
                                         size_t errlen) {
  *out = NULL;
  cl_comm *c = (cl_comm *)calloc(1, sizeof *c);
  nccl_ctx *x = (nccl_ctx *)calloc(1, sizeof *x);
  if (!c || !x) {
    free(c), free(x);
    snprintf(err, errlen, "out of host memory for a communicator");
    return CL_E_OOM;
  }
  c->iface = &nccl_iface;
  c->ctx = x;
  c->rank = mpi->rank;
  c->size = mpi->size;
  x->parent = mpi;
  ncclUniqueId id;
  ncclResult_t r = ncclSuccess;
  cl_status s = CL_OK;
  int n_dev = 0; /* ranks beyond the devices share them round robin; NCCL
                   * then refuses two ranks on one device with its own error */
  cudaError_t e = cudaGetDeviceCount(&n_dev);
  if (e == cudaSuccess && n_dev > 0) e = cudaSetDevice(device % n_dev);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking);
  for (int i = 0; e == cudaSuccess && i < NCCL_MAX_EVENTS; i++)
    e = cudaEventCreateWithFlags(&x->ready[i], cudaEventDisableTiming);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "rank %d, device %d: %s", c->rank, device, cudaGetErrorString(e));
    nccl_destroy(c);
    return CL_E_BACKEND;
  }
  if (c->rank == 0) r = ncclGetUniqueId(&id);
  if (r != ncclSuccess) { /* still take part in the broadcast others wait in */
    snprintf(err, errlen, "ncclGetUniqueId failed: %s", ncclGetErrorString(r));
    mpi->iface->abort(mpi, 1);
    nccl_destroy(c);
    return CL_E_BACKEND;
  }
  s = mpi->iface->broadcast(mpi, &id, sizeof id, 0, 0);
  if (s != CL_OK) {
    snprintf(err, errlen, "the NCCL id's broadcast failed: %s", mpi->err);
    nccl_destroy(c);
    return s;
  }
  r = ncclCommInitRank(&x->comm, c->size, id, c->rank);
  if (r != ncclSuccess) {
    x->comm = NULL;
    snprintf(err, errlen, "rank %d, device %d: ncclCommInitRank failed: %s", c->rank, device,
             ncclGetErrorString(r));
    nccl_destroy(c);
    return CL_E_BACKEND;
  }
  *out = c;
  return CL_OK;
}

#endif /* CL_HAVE_NCCL */
