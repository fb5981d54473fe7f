/*
 * core/comm.c -- the communicator's front (public cl_comm_* calls), the one
 * process communicator (size 1), and the stand-ins for engines this build
 * lacks: cl_comm_mpi_create without MPI (CL_HAVE_MPI, from configure) and
 * cl_comm_nccl_create without NCCL (CL_HAVE_NCCL) fail with what to install.
 * Floor 1: it knows no model (dist.c applies a communicator to one).
 */
#include "comm.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

cl_status cl_comm_fail(cl_comm *c, cl_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return s;
}

/* ---- one process ---------------------------------------------------------- */

static cl_status local_allreduce(cl_comm *c, cl_backend *be, float *buf, size_t n, float scale) {
  (void)c, (void)be, (void)buf, (void)n, (void)scale; /* size 1: the share is 1 */
  return CL_OK;
}
static cl_status local_wait(cl_comm *c) {
  (void)c;
  return CL_OK;
}
static cl_status local_broadcast(cl_comm *c, void *buf, size_t bytes, int root, int dev) {
  (void)c, (void)buf, (void)bytes, (void)root, (void)dev;
  return CL_OK;
}
static cl_status local_sum(cl_comm *c, double *v, int n) {
  (void)c, (void)v, (void)n;
  return CL_OK;
}
static void local_abort(cl_comm *c, int code) { (void)c, (void)code; }
static void local_destroy(cl_comm *c) { free(c); }

static const struct cl_comm_i local_iface = {
    /* .name = */ "local",
    /* .device_buffers = */ 0,
    /* .allreduce_start = */ local_allreduce,
    /* .progress = */ NULL,
    /* .wait_all = */ local_wait,
    /* .broadcast = */ local_broadcast,
    /* .sum_host = */ local_sum,
    /* .barrier = */ local_wait,
    /* .abort = */ local_abort,
    /* .destroy = */ local_destroy,
};

cl_status cl_comm_local_create(cl_comm **out, char *err, size_t errlen) {
  *out = calloc(1, sizeof **out);
  if (!*out) {
    snprintf(err, errlen, "out of host memory for a communicator");
    return CL_E_OOM;
  }
  (*out)->iface = &local_iface;
  (*out)->size = 1;
  return CL_OK;
}

/* ---- engines this build lacks -------------------------------------------- */

#ifndef CL_HAVE_MPI
cl_status cl_comm_mpi_create(cl_comm **out, char *err, size_t errlen) {
  *out = NULL;
  snprintf(err, errlen,
           "this build has no MPI: install Open MPI (Debian/Ubuntu: libopenmpi-dev openmpi-bin; "
           "Fedora: openmpi-devel) and reinstall convlstm");
  return CL_E_UNSUPPORTED;
}
#endif

#ifndef CL_HAVE_NCCL
cl_status cl_comm_nccl_create(cl_comm *mpi, int device, cl_comm **out, char *err,
                              size_t errlen) {
  (void)mpi, (void)device;
  *out = NULL;
  snprintf(err, errlen,
           "this build has no NCCL: install CUDA with NCCL (nccl.h and libnccl beside CUDA, "
           "or libnccl-dev) and reinstall convlstm");
  return CL_E_UNSUPPORTED;
}
#endif

int cl_comm_available(const char *engine) {
  if (strcmp(engine, "local") == 0) return 1;
#ifdef CL_HAVE_MPI
  if (strcmp(engine, "mpi") == 0) return 1;
#endif
#ifdef CL_HAVE_NCCL
  if (strcmp(engine, "nccl") == 0) return 1;
#endif
  return 0;
}

/* ---- the public front ---------------------------------------------------- */

int cl_comm_rank(const cl_comm *c) { return c->rank; }
int cl_comm_size(const cl_comm *c) { return c->size; }
const char *cl_comm_name(const cl_comm *c) { return c->iface->name; }
const char *cl_comm_error(const cl_comm *c) { return c->err; }

cl_status cl_comm_barrier(cl_comm *c) {
  c->err[0] = '\0';
  return c->iface->barrier(c);
}

cl_status cl_comm_broadcast_host(cl_comm *c, void *buf, size_t bytes, int root) {
  c->err[0] = '\0';
  if (root < 0 || root >= c->size)
    return cl_comm_fail(c, CL_E_INVALID, "root %d is not a rank of %d", root, c->size);
  return c->iface->broadcast(c, buf, bytes, root, 0);
}

void cl_comm_abort(cl_comm *c, int code) { c->iface->abort(c, code); }

void cl_comm_get_stats(cl_comm *c, cl_comm_stats *out, int reset) {
  *out = c->stats;
  if (reset) memset(&c->stats, 0, sizeof c->stats);
}

void cl_comm_free(cl_comm *c) {
  if (c) c->iface->destroy(c);
}
