/*
 * r_comm.c -- the process's communicators for the glue: one per process, as
 * MPI_Init is once per process. r_dist.c makes and frees them
 * (convlstm_distributed()); step options (r_options.c) and a parameter
 * broadcast read the one gradients go over.
 */
#include "r_convlstm.h"

static cl_comm *host_comm; /* local or MPI: host collectives, abort */
static cl_comm *grad_comm; /* what gradients go over: host_comm or NCCL's */

cl_comm *r_dist_comm(void) {
  if (!grad_comm)
    r_raise(CL_E_STATE, "no communicator in this process: call convlstm_distributed() first");
  return grad_comm;
}

cl_comm *r_dist_host(void) { return host_comm; }

cl_comm *r_dist_grad(void) { return grad_comm; }

void r_dist_set(cl_comm *host, cl_comm *grad) {
  host_comm = host;
  grad_comm = grad;
}
