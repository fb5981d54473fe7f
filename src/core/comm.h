/*
 * core/comm.h -- the communicator interface for data-parallel training: a
 * table of function pointers, as the backend's (backend.h), with one
 * implementation per engine:
 *   local  (core/comm.c)       one process, size 1: every slot a no-op
 *   MPI    (comm/comm_mpi.c)   host buffers, MPI_Iallreduce; built with MPI
 *   NCCL   (cuda/comm_nccl.cu) device buffers on its own stream, the unique
 *                              id broadcast over MPI; built with CUDA + NCCL
 * No transport of our own: the engines move the bytes.
 *
 * The training step (train.c) hands each layer's gradient bucket to
 * allreduce_start as soon as that layer's last backward is done (backward.c,
 * through cl_comm_bucket_ready) and waits for all of them before the update,
 * so the reduction of the later layers runs under the backward of the
 * earlier ones.
 */
#ifndef CONVLSTM_CORE_COMM_H
#define CONVLSTM_CORE_COMM_H

#include "convlstm.h"
#include "backend.h" /* cl_backend: the stream a device reduction must follow */

#include <stddef.h>

#define CL_COMM_ERRLEN 512

struct cl_comm_i {
  const char *name;
  /* 1: the buffers of allreduce_start and broadcast(on_device) live on the
   * GPU; 0: host memory (a CPU model's) */
  int device_buffers;
  /* Starts buf = the sum over ranks of scale x buf (n floats, in place),
   * not blocking; be is the model's backend, whose work on buf must finish
   * first. The engine applies the scale (NCCL inside its reduction, with no
   * wait of the host). Every rank starts the same buckets in the same order. */
  cl_status (*allreduce_start)(cl_comm *c, cl_backend *be, float *buf, size_t n, float scale);
  /* Lets started reductions advance (optional: NULL when the engine
   * progresses by itself). */
  cl_status (*progress)(cl_comm *c);
  /* Returns when every started reduction has finished and its result is
   * visible to the backend's next work. */
  cl_status (*wait_all)(cl_comm *c);
  /* bytes from root's buf into every rank's; on_device: buf is device memory */
  cl_status (*broadcast)(cl_comm *c, void *buf, size_t bytes, int root, int on_device);
  /* Sums n host doubles across ranks in place, blocking. */
  cl_status (*sum_host)(cl_comm *c, double *v, int n);
  cl_status (*barrier)(cl_comm *c);
  /* Ends every rank's process (MPI_Abort): what a failing rank calls so that
   * no other rank waits forever. Does not return for size > 1. */
  void (*abort)(cl_comm *c, int code);
  void (*destroy)(cl_comm *c);
};

struct cl_comm {
  const struct cl_comm_i *iface;
  void *ctx;
  int rank, size;
  cl_comm_stats stats; /* kept by dist.c */
  char err[CL_COMM_ERRLEN];
};

/* A failure of a communicator slot: the message in c->err, the status back. */
cl_status cl_comm_fail(cl_comm *c, cl_status s, const char *fmt, ...)
#if defined(__GNUC__)
  __attribute__((format(printf, 3, 4)))
#endif
  ;

#endif
