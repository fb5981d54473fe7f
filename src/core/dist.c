/*
 * core/dist.c -- a communicator applied to a model (data parallel, as
 * PyTorch DDP and Horovod do it): each layer's gradient bucket is weighted by
 * this rank's share of the global batch and summed over the ranks as soon as
 * its backward is complete, the loss likewise, and rank root's parameters
 * reach every rank before training starts.
 *
 * Why the sum of shares is the big batch: the loss is a mean over the
 * batch's elements, so the gradient of N ranks' global batch is
 * sum_r (b_r / B) * g_r, g_r being rank r's mean gradient over its b_r
 * samples -- with equal shards the average of the ranks' gradients. The
 * order of the update is then the one process's: unscale (float16), clip by
 * the global norm of the summed gradients, the finite guard, the update.
 *
 * Which buckets can go early: a layer's weight gradient sums over every time
 * step and every sequence, so it is complete only after the step's last
 * backward pass over that layer (the last micro-batch; with checkpointing,
 * the first segment, which is backpropagated last; with truncated BPTT, the
 * last window). Within that pass backward runs from the last layer to the
 * first, so layer L-1's bucket is reduced while layers L-2 .. 0 run their
 * backward, and only layer 0's is left to wait for. Earlier passes keep
 * adding to the buckets and cannot send them.
 */
#include "internal.h"
#include "comm.h"

cl_status cl_dist_check(cl_model *m, struct cl_comm *c) {
  if (!c) return CL_OK;
  if (m->cfg.device == CL_DEVICE_CUDA && !c->iface->device_buffers)
    return cl_fail(m, CL_E_UNSUPPORTED,
                   "a GPU model reduces its gradients with NCCL, not with the '%s' communicator "
                   "(convlstm_distributed(backend = \"nccl\"))",
                   c->iface->name);
  if (m->cfg.device != CL_DEVICE_CUDA && c->iface->device_buffers)
    return cl_fail(m, CL_E_UNSUPPORTED,
                   "the '%s' communicator reduces GPU buffers: a CPU model needs MPI",
                   c->iface->name);
  return CL_OK;
}

static cl_status comm_failed(cl_model *m, cl_comm *c, cl_status s) {
  return cl_fail(m, s, "rank %d of %d: %s", c->rank, c->size, c->err);
}

/* Layer l's bucket: its wx, wh, bias and peephole gradients, contiguous
 * (model.c); the top layer's also holds a head that reads it alone, laid
 * out after it and complete before it (arch.h). l = n_layers is the
 * head's pseudo-layer (cl_head) alone: a head over several layers. */
static size_t bucket_of(const cl_model *m, int l, size_t *offset) {
  const cl_layer *L = &m->layer[l];
  *offset = L->off_wx;
  size_t n = L->n_wx + L->n_wh + L->n_b + L->n_pc;
  if (l == m->cfg.n_layers - 1 && cl_arch_head_in_top_bucket(&m->arch))
    n += cl_head(m)->n_wx + cl_head(m)->n_b;
  return n;
}

/* A head of its own bucket, the pseudo-layer n_layers, goes once its
 * lowest layer's part is done: before that layer's own (program.c). */
int cl_model_grad_buckets(const cl_model *m, int *layer, size_t *bytes) {
  const cl_arch *a = &m->arch;
  int n = m->cfg.n_layers, k = 0, own = cl_arch_has_head(a) && !cl_arch_head_in_top_bucket(a);
  for (int l = n - 1; l >= 0; l--) { /* in the order backward completes them */
    if (own && l == a->head_lo) layer[k++] = n;
    layer[k++] = l;
  }
  for (int i = 0; i < k; i++) {
    size_t off;
    bytes[i] = bucket_of(m, layer[i], &off) * sizeof(float);
  }
  return k;
}

cl_status cl_dist_bucket_ready(cl_model *m, const cl_call *call, int l) {
  cl_comm *c = call->comm;
  if (!cl_dist_active(call) || !call->last_pass) return CL_OK;
  size_t off, n = bucket_of(m, l, &off);
  c->err[0] = '\0';
  c->stats.bytes += (double)(n * sizeof(float));
  cl_status s = c->iface->allreduce_start(c, m->be, m->grads + off, n, (float)call->comm_share);
  if (s == CL_OK && c->iface->progress) s = c->iface->progress(c);
  return s == CL_OK ? CL_OK : comm_failed(m, c, s);
}

int cl_dist_active(const cl_call *c) { return c->comm && c->comm->size > 1; }

/* The loss is in the step's results (cl_vals), device memory on a GPU: read
 * once, summed by the host collective, written back before the update reads
 * it (its finite check must decide alike on every rank). The host waits
 * here anyway, for the buckets. */
static cl_status sum_loss(cl_model *m, cl_comm *c, double share, double *loss) {
  const struct cl_backend_i *be = m->be->iface;
  double v;
  CL_KERNEL(m, be->download(m->be, &v, loss, sizeof v));
  v *= share;
  cl_status s = c->iface->sum_host(c, &v, 1);
  if (s != CL_OK) return comm_failed(m, c, s);
  /* from pageable memory: the copy has taken v when upload returns */
  CL_KERNEL(m, be->upload(m->be, loss, &v, sizeof v));
  return CL_OK;
}

cl_status cl_dist_finish(cl_model *m, cl_call *call, double *loss) {
  cl_comm *c = call->comm;
  call->last_pass = 0;
  if (!cl_dist_active(call)) return CL_OK;
  c->err[0] = '\0';
  double t0 = cl_seconds();
  cl_status s = c->iface->wait_all(c);
  c->stats.wait_seconds += cl_seconds() - t0;
  c->stats.steps++;
  if (s != CL_OK) return comm_failed(m, c, s);
  return sum_loss(m, c, call->comm_share, loss);
}

/* The buckets in the order backward completes them, as a step's
 * CL_OP_REDUCE sees them: the ranks then decide the update alike. */
cl_status cl_dist_reduce_all(cl_model *m, cl_call *c, double *loss) {
  if (!cl_dist_active(c)) return CL_OK;
  int layer[CL_MAX_LAYERS + 1];
  size_t bytes[CL_MAX_LAYERS + 1];
  const int nb = cl_model_grad_buckets(m, layer, bytes);
  c->last_pass = 1;
  for (int i = 0; i < nb; i++) CL_TRY(cl_dist_bucket_ready(m, c, layer[i]));
  return cl_dist_finish(m, c, loss);
}

cl_status cl_model_broadcast_params(cl_model *m, cl_comm *c, int root) {
  m->err[0] = '\0';
  CL_TRY(cl_dist_check(m, c));
  if (root < 0 || root >= c->size)
    return cl_fail(m, CL_E_INVALID, "root %d is not a rank of %d", root, c->size);
  if (c->size == 1) return CL_OK;
  c->err[0] = '\0';
  /* the same model everywhere, or the bytes below would not line up */
  double n[2] = {(double)m->n_params, (double)m->cfg.dtype}, mine[2] = {n[0], n[1]};
  cl_status s = c->iface->broadcast(c, n, sizeof n, root, 0);
  if (s != CL_OK) return comm_failed(m, c, s);
  if (n[0] != mine[0] || n[1] != mine[1])
    return cl_fail(m, CL_E_INVALID,
                   "rank %d's model has %.0f parameters in dtype %d, rank %d's %.0f in dtype "
                   "%d: every rank must build the same model",
                   c->rank, mine[0], (int)mine[1], root, n[0], (int)n[1]);
  s = c->iface->broadcast(c, m->params, m->n_params * sizeof(float), root,
                          c->iface->device_buffers);
  if (s == CL_OK) s = c->iface->broadcast(c, &m->scaler, sizeof m->scaler, root, 0);
  if (s != CL_OK) return comm_failed(m, c, s);
  /* a forward kept before holds the old weights' activations */
  if (m->phase == CL_PHASE_TRAINING || m->phase == CL_PHASE_LOSS) m->phase = CL_PHASE_STALE;
  return CL_OK;
}
