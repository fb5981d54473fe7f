/*
 * core/model_file.h -- what model_file_read.c (reading a model file) and
 * model_file_write.c (writing one) agree on: the roles a stored tensor plays
 * and their name prefixes, and the prefix of convlstm's own metadata.
 */
#ifndef CL_CHECKPOINT_H
#define CL_CHECKPOINT_H

/* Tensor roles: the parameter itself and the optimizer states. */
enum {
  R_PARAM = 0,
  R_EXP_AVG,
  R_EXP_AVG_SQ,
  R_MOMENTUM,
  R_MAX_EXP_AVG_SQ,
  R_SQUARE_AVG, /* RMSprop's */
  R_GRAD_AVG,   /* centered RMSprop's */
  N_ROLES
};
/* The role of the model's state buffer `which` (CL_OPT_STATE_M, _V, _VMAX
 * of internal.h) under optimizer kind k, as torch names it. */
static inline int cl_state_role(cl_optim_kind k, int which) {
  static const int ROLE[3][3] = {/* Adam, AdamW */ {R_EXP_AVG, R_EXP_AVG_SQ, R_MAX_EXP_AVG_SQ},
                                 /* SGD */ {R_MOMENTUM, -1, -1},
                                 /* RMSprop */ {R_MOMENTUM, R_SQUARE_AVG, R_GRAD_AVG}};
  const int row = k == CL_OPTIM_SGD ? 1 : k == CL_OPTIM_RMSPROP ? 2 : 0;
  return ROLE[row][which];
}
/* A role's prefix before the tensor's state-dict name ("" for parameters). */
extern const char *const cl_role_prefix[N_ROLES];

#define META_PREFIX "convlstm."

#endif
