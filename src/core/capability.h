/*
 * core/capability.h -- the one capability table: for each option of a
 * training call (or of a model's configuration, or of R's fit loop) and
 * each kind of model, whether it is supported and, if not, why. Training,
 * planning, inference, data sets and model creation ask it here; R reads
 * it through cl_capability_row and cl_model_capability (convlstm.h). A
 * refusal is the row's status with the row's reason as the whole message,
 * so every entry point says the same thing.
 */
#ifndef CONVLSTM_CORE_CAPABILITY_H
#define CONVLSTM_CORE_CAPABILITY_H

#include "internal.h" /* cl_model, cl_config, cl_step_options */

/* The options the table has a row for (per model kind), in the table's
 * order: the first refused one in this order is the one a call reports. */
typedef enum cl_cap {
  CL_CAP_HALF_TRAINING, /* training in the storage dtype float16 or bfloat16 */
  CL_CAP_CHECKPOINT,
  CL_CAP_TBPTT,
  CL_CAP_RECOMPUTE_GATES,
  CL_CAP_ACCUMULATION,
  CL_CAP_HORIZON,       /* train_step's horizon (x: inputs then true frames) */
  CL_CAP_FREE_RUN,      /* teacher_forcing < 1: free running, truth flags */
  CL_CAP_STATE_GIVEN,
  CL_CAP_STATE_CARRY,
  CL_CAP_WEIGHT,
  CL_CAP_TARGET_LAST,   /* target = "last_state" */
  CL_CAP_DROPOUT,       /* the configuration's dropout rates */
  CL_CAP_DROPOUT_MASKS, /* a call's masks, given or drawn */
  CL_CAP_PEEP_POSITION, /* the configuration's per-position peepholes */
  CL_CAP_DATA_PARALLEL,
  CL_CAP_DATA_SET,      /* data sets on the device (convlstm_data) */
  CL_CAP_SEPARATE,      /* a training forward, then a separate loss and backward */
  CL_CAP_CALLBACKS,     /* R's fit loop, from here on: checked by R */
  CL_CAP_LR_SCHEDULER,
  CL_CAP_VALIDATION_SPLIT,
  CL_CAP_RESUME,
  CL_CAP_MEMORY_BUDGET,
  CL_CAP_METRICS,
  CL_N_CAPS
} cl_cap;

/* The model's kind, the one place the core reads it for the table. */
cl_model_kind cl_cfg_kind(const cl_config *c);
/* CL_OK when m's kind supports option c; else the row's status, its reason
 * the model's error. */
cl_status cl_cap_require(cl_model *m, cl_cap c);
/* A configuration's options (dropout rates, per-position peepholes) before
 * a model exists: the refusal's reason in err. */
cl_status cl_cap_check_config(const cl_config *c, char *err, size_t errlen);
/* A call's options against the table: with training, o (may be NULL), the
 * target and the step's storage dtype; without (inference), the state o
 * starts from. Fails with the first refused row in the table's order. */
cl_status cl_cap_check(cl_model *m, const cl_step_options *o, int training, cl_target target,
                       cl_dtype dtype);

#endif
