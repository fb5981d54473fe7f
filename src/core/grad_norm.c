/*
 * core/grad_norm.c -- what R asks of gradient clipping by global norm. The
 * clipping itself, torch's torch.nn.utils.clip_grad_norm_ (norm_type 2:
 * the gradients scaled by max_norm / (norm + 1e-6) when that is below 1),
 * runs inside the training step's end on the device (backend.h,
 * cl_update_args: after the float16 loss scale is divided out, before the
 * update's guard; a host backend's in backend.c), so that the step need not
 * wait for the norm. train.c reads the squared norm with the step's other
 * results once the step is done, and keeps its square root here.
 */
#include "internal.h"

double cl_model_grad_norm(const cl_model *m) { return m->grad_norm; }
