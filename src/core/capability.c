/*
 * core/capability.c -- the capability table (capability.h): one row per
 * option and model kind, and the checks that read it. Nothing else in the
 * core refuses an option for a kind of model: a new capability is a row
 * turned to supported here.
 */
#include "capability.h"

#include <stdio.h>
#include <string.h>

#define FC "an encoder-forecaster "
#define WHOLE "its step runs the whole sequence in one pass"
#define HEAD "a model with a head "

/* Per option: its name as R users write it, then the encoder-forecaster's
 * verdict and reason, and a plain stack with a head's refusal (none: it
 * supports the option); the plain stack supports every option. */
static const struct {
  const char *option;
  int forecaster;     /* 1: supported */
  const char *reason; /* the refusal's whole message */
  const char *head_refusal; /* NULL: supported */
} OPTIONS[CL_N_CAPS] = {
    [CL_CAP_HALF_TRAINING] = {"dtype = float16/bfloat16 training", 1, NULL, NULL},
    [CL_CAP_CHECKPOINT] = {"checkpoint", 1, NULL, NULL},
    [CL_CAP_TBPTT] = {"tbptt", 0, FC "does not support tbptt: " WHOLE, NULL},
    [CL_CAP_RECOMPUTE_GATES] = {"recompute_gates", 1, NULL, NULL},
    [CL_CAP_ACCUMULATION] = {"accumulation_steps", 1, NULL, NULL},
    [CL_CAP_HORIZON] = {"horizon", 0,
                        FC "takes no horizon in training: its horizon is the target's steps, "
                           "dim(y)[2]",
                        NULL},
    [CL_CAP_FREE_RUN] = {"teacher_forcing < 1 (free running)", 0,
                         FC "does not support teacher_forcing below 1 (free running, scheduled "
                            "sampling): its forecaster reads no frames",
                         HEAD "trains a horizon with teacher forcing only: its fed-back steps "
                              "do not run the head"},
    [CL_CAP_STATE_GIVEN] = {"state = given", 0,
                            FC "does not support a given state: it starts from zero states",
                            NULL},
    [CL_CAP_STATE_CARRY] = {"state = carry", 0,
                            FC "does not support state = \"carry\": it starts from zero states",
                            NULL},
    [CL_CAP_WEIGHT] = {"weight", 1, NULL, NULL},
    [CL_CAP_TARGET_LAST] = {"target = last_state", 0,
                            FC "does not support target = \"last_state\": its target is the "
                               "sequence of frames",
                            HEAD "does not support target = \"last_state\": its target is the "
                                 "sequence of its outputs"},
    [CL_CAP_DROPOUT] = {"dropout", 1, NULL, NULL},
    [CL_CAP_DROPOUT_MASKS] = {"dropout_masks", 1, NULL, NULL},
    [CL_CAP_PEEP_POSITION] = {"peephole = position", 0,
                              FC "supports peepholes \"none\" and \"channel\", "
                                 "not \"position\"",
                              NULL},
    [CL_CAP_DATA_PARALLEL] = {"data parallel", 1, NULL, NULL},
    [CL_CAP_DATA_SET] = {"data set on the device (convlstm_data)", 1, NULL, NULL},
    [CL_CAP_SEPARATE] = {"separate forward/backward", 0,
                         FC "trains through train_step only (no separate forward, loss and "
                            "backward)",
                         HEAD "trains through train_step only (its separate forward keeps the "
                              "layers' outputs, not the head's)"},
    /* R's fit loop (convlstm_fit()): one loop for every kind of model */
    [CL_CAP_CALLBACKS] = {"callbacks", 1, NULL, NULL},
    [CL_CAP_LR_SCHEDULER] = {"lr_scheduler", 1, NULL, NULL},
    [CL_CAP_VALIDATION_SPLIT] = {"validation_split", 1, NULL, NULL},
    [CL_CAP_RESUME] = {"resume", 1, NULL, NULL},
    [CL_CAP_MEMORY_BUDGET] = {"memory_budget", 1, NULL, NULL},
    [CL_CAP_METRICS] = {"metrics", 1, NULL, NULL},
};

static const char *const KIND_NAME[CL_N_MODEL_KINDS] = {"convlstm", "encoder_forecaster",
                                                         "convlstm_head"};

/* The kind, asked of the architecture (arch.h) here, and only here:
 * stacks handing states on (the encoder-forecaster), or one stack with or
 * without a head. */
cl_model_kind cl_cfg_kind(const cl_config *c) {
  cl_arch a = cl_arch_of(c);
  if (cl_arch_is_wired(&a)) return CL_KIND_FORECASTER;
  return cl_arch_has_head(&a) ? CL_KIND_HEAD : CL_KIND_STACK;
}

/* Kind k's refusal of option c (NULL: supported). */
static const char *refusal(int c, int k) {
  if (k == CL_KIND_FORECASTER) return OPTIONS[c].forecaster ? NULL : OPTIONS[c].reason;
  return k == CL_KIND_HEAD ? OPTIONS[c].head_refusal : NULL;
}

int cl_capability_count(void) { return CL_N_CAPS * CL_N_MODEL_KINDS; }

/* Row i: option i / kinds, kind i % kinds. */
cl_status cl_capability_row(int i, cl_capability *out) {
  memset(out, 0, sizeof *out);
  if (i < 0 || i >= cl_capability_count()) return CL_E_INVALID;
  int c = i / CL_N_MODEL_KINDS, k = i % CL_N_MODEL_KINDS;
  const char *no = refusal(c, k);
  out->option = OPTIONS[c].option;
  out->model = KIND_NAME[k];
  out->kind = (cl_model_kind)k;
  out->supported = !no;
  out->status = no ? CL_E_UNSUPPORTED : CL_OK;
  out->reason = no ? no : "";
  return CL_OK;
}

static cl_status row_of(const cl_config *cfg, cl_cap c, const char **reason) {
  cl_capability r;
  cl_capability_row((int)c * CL_N_MODEL_KINDS + (int)cl_cfg_kind(cfg), &r);
  *reason = r.reason;
  return r.status;
}

cl_status cl_cap_require(cl_model *m, cl_cap c) {
  const char *why;
  cl_status s = row_of(&m->cfg, c, &why);
  return s == CL_OK ? CL_OK : cl_fail(m, s, "%s", why);
}

cl_status cl_model_capability(cl_model *m, const char *option) {
  m->err[0] = '\0';
  for (int c = 0; c < CL_N_CAPS; c++)
    if (option && strcmp(option, OPTIONS[c].option) == 0) return cl_cap_require(m, (cl_cap)c);
  return cl_fail(m, CL_E_INVALID, "no capability is named \"%s\"", option ? option : "");
}

cl_status cl_cap_check_config(const cl_config *c, char *err, size_t errlen) {
  int dropout = 0;
  for (int l = 0; l < c->n_layers && l < CL_MAX_LAYERS; l++)
    dropout |= c->dropout[l] > 0 || c->recurrent_dropout[l] > 0;
  const char *why = "";
  cl_status s = CL_OK;
  if (dropout) s = row_of(c, CL_CAP_DROPOUT, &why);
  if (s == CL_OK && c->peephole == CL_PEEP_POSITION) s = row_of(c, CL_CAP_PEEP_POSITION, &why);
  if (s != CL_OK) snprintf(err, errlen, "%s", why);
  return s;
}

static int has_masks(const cl_step_options *o) {
  int any = o->draw_masks != 0;
  for (int l = 0; l < CL_MAX_LAYERS; l++) any |= o->mask_x[l] || o->mask_h[l];
  return any;
}

cl_status cl_cap_check(cl_model *m, const cl_step_options *o, int training, cl_target target,
                       cl_dtype dtype) {
  static const cl_step_options none;
  if (!o) o = &none;
  /* which rows this call asks for, in the table's order */
  int asks[CL_N_CAPS] = {
      [CL_CAP_HALF_TRAINING] = training && dtype != CL_F32,
      [CL_CAP_CHECKPOINT] = training && o->checkpoint != 0,
      [CL_CAP_TBPTT] = training && o->tbptt != 0,
      [CL_CAP_RECOMPUTE_GATES] = training && o->recompute_gates != 0,
      [CL_CAP_ACCUMULATION] = training && o->accumulation_steps > 1,
      [CL_CAP_HORIZON] = training && o->horizon != 0,
      [CL_CAP_FREE_RUN] = training && (o->free_run || o->truth),
      [CL_CAP_STATE_GIVEN] = o->state_mode == CL_STATE_GIVEN,
      [CL_CAP_STATE_CARRY] = o->state_mode == CL_STATE_CARRY,
      [CL_CAP_WEIGHT] = training && o->weight,
      [CL_CAP_TARGET_LAST] = training && target == CL_TARGET_LAST_STATE,
      [CL_CAP_DROPOUT_MASKS] = training && has_masks(o),
      [CL_CAP_DATA_PARALLEL] = training && o->comm,
  };
  for (int c = 0; c < CL_N_CAPS; c++)
    if (asks[c]) CL_TRY(cl_cap_require(m, (cl_cap)c));
  return CL_OK;
}
