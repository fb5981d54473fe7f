/*
 * comm/comm_mpi.c -- the MPI communicator (core/comm.h) over MPI_COMM_WORLD:
 * gradient buckets summed in place with MPI_Iallreduce (host buffers: CPU
 * models), progressed with MPI_Testall while backward goes on, waited for
 * with MPI_Waitall; small blocking collectives for the rest. Built only when
 * configure finds MPI (CL_HAVE_MPI); core/comm.c stands in otherwise.
 *
 * Determinism: for a given number of ranks and bucket sizes Open MPI picks
 * the same reduction algorithm and order every run, so a run repeats bit for
 * bit; every rank receives the same sums (the tests compare the weights of
 * all ranks after training).
 *
 * Faults: MPI's default error handler aborts the job on a failed call, and a
 * rank that dies is seen by mpirun, which ends the others; a rank that fails
 * in R calls abort (MPI_Abort) itself. No rank waits for a dead one.
 */
#define _GNU_SOURCE /* dladdr, RTLD_NOLOAD */
#include "core/comm.h"

#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MPI_MAX_BUCKETS 64 /* > CL_MAX_LAYERS: one bucket per layer and step */

typedef struct mpi_ctx {
  MPI_Request req[MPI_MAX_BUCKETS];
  int n_req;
  int we_initialized; /* MPI_Finalize is ours to call */
} mpi_ctx;

static mpi_ctx *ctx_of(cl_comm *c) { return (mpi_ctx *)c->ctx; }

static cl_status mpi_failed(cl_comm *c, const char *what, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  return cl_comm_fail(c, CL_E_BACKEND, "%s failed: %s", what, msg);
}

static cl_status mpi_allreduce_start(cl_comm *c, cl_backend *be, float *buf, size_t n,
                                     float scale) {
  (void)be; /* CPU kernels have finished when they return */
  mpi_ctx *x = ctx_of(c);
  if (scale != 1.0f)
    for (size_t i = 0; i < n; i++) buf[i] *= scale;
  if (x->n_req >= MPI_MAX_BUCKETS)
    return cl_comm_fail(c, CL_E_INTERNAL, "more than %d buckets in flight", MPI_MAX_BUCKETS);
  if (n > (size_t)0x7fffffff)
    return cl_comm_fail(c, CL_E_UNSUPPORTED, "a bucket of %zu floats exceeds MPI's int count", n);
  int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                          &x->req[x->n_req]);
  if (rc != MPI_SUCCESS) return mpi_failed(c, "MPI_Iallreduce", rc);
  x->n_req++;
  return CL_OK;
}

/* Open MPI moves a non-blocking collective on only inside MPI calls (no
 * progress thread): a test after each layer's backward keeps it going. */
static cl_status mpi_progress(cl_comm *c) {
  mpi_ctx *x = ctx_of(c);
  int done = 0;
  int rc = MPI_Testall(x->n_req, x->req, &done, MPI_STATUSES_IGNORE);
  return rc == MPI_SUCCESS ? CL_OK : mpi_failed(c, "MPI_Testall", rc);
}

static cl_status mpi_wait_all(cl_comm *c) {
  mpi_ctx *x = ctx_of(c);
  int rc = MPI_Waitall(x->n_req, x->req, MPI_STATUSES_IGNORE);
  x->n_req = 0;
  return rc == MPI_SUCCESS ? CL_OK : mpi_failed(c, "MPI_Waitall", rc);
}

static cl_status mpi_broadcast(cl_comm *c, void *buf, size_t bytes, int root, int on_device) {
  if (on_device)
    return cl_comm_fail(c, CL_E_UNSUPPORTED, "the MPI communicator broadcasts host memory only");
  char *p = buf;
  while (bytes > 0) { /* MPI counts are int */
    int chunk = bytes > (size_t)1 << 30 ? 1 << 30 : (int)bytes;
    int rc = MPI_Bcast(p, chunk, MPI_BYTE, root, MPI_COMM_WORLD);
    if (rc != MPI_SUCCESS) return mpi_failed(c, "MPI_Bcast", rc);
    p += chunk;
    bytes -= (size_t)chunk;
  }
  return CL_OK;
}

static cl_status mpi_sum_host(cl_comm *c, double *v, int n) {
  int rc = MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? CL_OK : mpi_failed(c, "MPI_Allreduce", rc);
}

static cl_status mpi_barrier(cl_comm *c) {
  int rc = MPI_Barrier(MPI_COMM_WORLD);
  return rc == MPI_SUCCESS ? CL_OK : mpi_failed(c, "MPI_Barrier", rc);
}

static void mpi_abort(cl_comm *c, int code) {
  (void)c;
  MPI_Abort(MPI_COMM_WORLD, code);
}

static void mpi_destroy(cl_comm *c) {
  mpi_ctx *x = ctx_of(c);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (x->we_initialized && !finalized) MPI_Finalize();
  free(x);
  free(c);
}

static const struct cl_comm_i mpi_iface = {
    /* .name = */ "mpi",
    /* .device_buffers = */ 0,
    /* .allreduce_start = */ mpi_allreduce_start,
    /* .progress = */ mpi_progress,
    /* .wait_all = */ mpi_wait_all,
    /* .broadcast = */ mpi_broadcast,
    /* .sum_host = */ mpi_sum_host,
    /* .barrier = */ mpi_barrier,
    /* .abort = */ mpi_abort,
    /* .destroy = */ mpi_destroy,
};

/* R loads a package's library with RTLD_LOCAL, which hides libmpi's
 * symbols from the plugins Open MPI opens at MPI_Init; made global again
 * here (as Rmpi does) so they resolve. */
static void promote_libmpi(void) {
  Dl_info info;
  if (dladdr((void *)&MPI_Init, &info) && info.dli_fname)
    (void)dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

cl_status cl_comm_mpi_create(cl_comm **out, char *err, size_t errlen) {
  *out = NULL;
  cl_comm *c = calloc(1, sizeof *c);
  mpi_ctx *x = calloc(1, sizeof *x);
  if (!c || !x) {
    free(c), free(x);
    snprintf(err, errlen, "out of host memory for a communicator");
    return CL_E_OOM;
  }
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (finalized) {
    free(c), free(x);
    snprintf(err, errlen, "MPI was finalized in this process; start a new one");
    return CL_E_STATE;
  }
  if (!inited) {
    promote_libmpi();
    int provided = 0;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided);
    if (rc != MPI_SUCCESS) {
      free(c), free(x);
      snprintf(err, errlen, "MPI_Init_thread failed (code %d)", rc);
      return CL_E_BACKEND;
    }
    x->we_initialized = 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &c->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c->size);
  c->iface = &mpi_iface;
  c->ctx = x;
  *out = c;
  return CL_OK;
}
