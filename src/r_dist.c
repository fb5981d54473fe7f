/*
 * r_dist.c -- the process's communicator for R (convlstm_distributed()):
 * one per process, as MPI_Init is once per process; the MPI one when
 * started by mpirun, the one-process one otherwise, NCCL's on top for GPU
 * ranks; a broadcast for R (the random number generator's state), a
 * barrier, and the abort a failing rank calls so that no other rank waits
 * for it, and rank 0's parameters to all. The communicators themselves are
 * r_comm.c's.
 */
#include <stdio.h>
#include <string.h>

#include "r_convlstm.h"


static void raise_comm(cl_status s, const char *what, const char *msg) {
  char buf[CL_ERRMSG_LEN];
  snprintf(buf, sizeof buf, "%s: %s", what, msg);
  r_raise(s, buf);
}

/* engine: "local", "mpi" or "nccl" (over MPI when mpi is TRUE, else over
 * the local one: a single GPU rank); device: the GPU of this rank. */
SEXP ffi_dist_init(SEXP engine, SEXP device) {
  const char *e = CHAR(STRING_ELT(engine, 0));
  char err[CL_ERRMSG_LEN] = "";
  int nccl = strncmp(e, "nccl", 4) == 0, mpi = strcmp(e, "mpi") == 0 || strcmp(e, "nccl_mpi") == 0;
  if ((nccl && !cl_comm_available("nccl")) || (mpi && !cl_comm_available("mpi"))) {
    cl_comm *none = NULL; /* the stand-in says what to install */
    cl_status s = nccl ? cl_comm_nccl_create(NULL, 0, &none, err, sizeof err)
                       : cl_comm_mpi_create(&none, err, sizeof err);
    raise_comm(s, "convlstm_distributed()", err);
  }
  const char *want = nccl ? "nccl" : mpi ? "mpi" : "local";
  const char *host_want = mpi ? "mpi" : "local";
  cl_comm *host = r_dist_host(), *grad = r_dist_grad();
  if (grad && strcmp(cl_comm_name(grad), want) == 0) return ffi_dist_info();
  if (grad || (host && strcmp(cl_comm_name(host), host_want) != 0)) {
    snprintf(err, sizeof err, "this process has the '%s' communicator already, not '%s': one "
             "per process", cl_comm_name(grad ? grad : host), want);
    r_raise(CL_E_STATE, err);
  }
  if (!host) { /* kept when NCCL failed on top of it: MPI starts once */
    cl_status s = mpi ? cl_comm_mpi_create(&host, err, sizeof err)
                      : cl_comm_local_create(&host, err, sizeof err);
    if (s != CL_OK) raise_comm(s, "convlstm_distributed()", err);
    r_dist_set(host, NULL);
  }
  if (nccl) {
    cl_comm *g = NULL;
    cl_status s = cl_comm_nccl_create(host, Rf_asInteger(device), &g, err, sizeof err);
    if (s != CL_OK) raise_comm(s, "convlstm_distributed(backend = \"nccl\")", err);
    r_dist_set(host, g);
  } else {
    r_dist_set(host, host);
  }
  return ffi_dist_info();
}

SEXP ffi_dist_info(void) {
  static const char *const names[] = {"rank", "size", "backend"};
  SEXP out = PROTECT(r_named_list(names, 3));
  cl_comm *g = r_dist_grad();
  SET_VECTOR_ELT(out, 0, Rf_ScalarInteger(g ? cl_comm_rank(g) : 0));
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger(g ? cl_comm_size(g) : 1));
  SET_VECTOR_ELT(out, 2, g ? Rf_mkString(cl_comm_name(g)) : R_NilValue);
  UNPROTECT(1);
  return out;
}

SEXP ffi_dist_available(void) {
  static const char *const names[] = {"mpi", "nccl"};
  SEXP out = PROTECT(r_named_list(names, 2));
  SET_VECTOR_ELT(out, 0, Rf_ScalarLogical(cl_comm_available("mpi")));
  SET_VECTOR_ELT(out, 1, Rf_ScalarLogical(cl_comm_available("nccl")));
  UNPROTECT(1);
  return out;
}

SEXP ffi_dist_broadcast_ints(SEXP x, SEXP root) {
  r_dist_comm();
  SEXP out = PROTECT(Rf_duplicate(x));
  cl_status s = cl_comm_broadcast_host(r_dist_host(), INTEGER(out),
                                       (size_t)XLENGTH(out) * sizeof(int), Rf_asInteger(root));
  if (s != CL_OK) raise_comm(s, "broadcast", cl_comm_error(r_dist_host()));
  UNPROTECT(1);
  return out;
}

SEXP ffi_dist_barrier(void) {
  r_dist_comm();
  cl_status s = cl_comm_barrier(r_dist_host());
  if (s != CL_OK) raise_comm(s, "barrier", cl_comm_error(r_dist_host()));
  return R_NilValue;
}

/* Says which rank failed and why on stderr, then ends every rank. Returns
 * only for one process. */
SEXP ffi_dist_abort(SEXP msg) {
  cl_comm *g = r_dist_grad();
  if (!g || cl_comm_size(g) == 1) return R_NilValue;
  REprintf("convlstm: rank %d of %d failed: %s\nconvlstm: stopping all %d ranks (abort)\n",
           cl_comm_rank(g), cl_comm_size(g), CHAR(STRING_ELT(msg, 0)), cl_comm_size(g));
  R_FlushConsole();
  cl_comm_abort(g, 1);
  return R_NilValue;
}

SEXP ffi_dist_finalize(void) {
  cl_comm *host = r_dist_host(), *grad = r_dist_grad();
  if (grad && grad != host) cl_comm_free(grad);
  cl_comm_free(host);
  r_dist_set(NULL, NULL);
  return R_NilValue;
}

/* list(steps, bytes, wait_seconds) of the gradient communicator; reset:
 * start counting again. */
SEXP ffi_dist_stats(SEXP reset) {
  cl_comm_stats st;
  cl_comm_get_stats(r_dist_comm(), &st, Rf_asLogical(reset) == TRUE);
  static const char *const names[] = {"steps", "bytes", "wait_seconds"};
  SEXP out = PROTECT(r_named_list(names, 3));
  SET_VECTOR_ELT(out, 0, Rf_ScalarReal((double)st.steps));
  SET_VECTOR_ELT(out, 1, Rf_ScalarReal(st.bytes));
  SET_VECTOR_ELT(out, 2, Rf_ScalarReal(st.wait_seconds));
  UNPROTECT(1);
  return out;
}

/* Rank root's parameters into every rank's model, over the process's
 * communicator: what a data-parallel fit starts with. */
SEXP ffi_dist_broadcast_params(SEXP ptr, SEXP root) {
  cl_model *m = r_model(ptr);
  cl_status s = cl_model_broadcast_params(m, r_dist_comm(), Rf_asInteger(root));
  R_CL_CHECK(m, s);
  return R_NilValue;
}
