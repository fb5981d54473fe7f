/*
 * core/checkpoint.h -- what checkpoint.c (reading a model file) and
 * checkpoint_save.c (writing one) agree on: the roles a stored tensor plays
 * and their name prefixes, and the prefix of convlstm's own metadata.
 */
#ifndef CL_CHECKPOINT_H
#define CL_CHECKPOINT_H

/* Tensor roles: the parameter itself and the optimizer states. */
enum { R_PARAM = 0, R_EXP_AVG, R_EXP_AVG_SQ, R_MOMENTUM, R_MAX_EXP_AVG_SQ, N_ROLES };
/* A role's prefix before the tensor's state-dict name ("" for parameters). */
extern const char *const cl_role_prefix[N_ROLES];

#define META_PREFIX "convlstm."

#endif
