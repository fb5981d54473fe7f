/*
 * convlstm_api.h -- the convlstm core for the C code of other R packages.
 *
 * A package whose DESCRIPTION says
 *
 *     LinkingTo: convlstm
 *     Imports: convlstm
 *
 * (and whose NAMESPACE imports from convlstm, so that convlstm is loaded
 * before the package's own code runs) includes this header and calls
 * convlstm_model_create(), convlstm_model_train_step(), ...: one static
 * inline wrapper per function of the core's convlstm.h, named convlstm_
 * where the core says cl_, with the same arguments, results and rules (read
 * convlstm.h for what each one does). A wrapper looks up, once, the function
 * the installed convlstm registered with R_RegisterCCallable (src/init.c)
 * and calls it through that pointer: nothing links against convlstm's shared
 * library, whose own symbols stay hidden. Call the convlstm_* wrappers, never
 * the cl_* functions that convlstm.h declares: those are not exported.
 *
 * It is not an R interface: no SEXP crosses it, and models made through it
 * are plain C objects, not the models of convlstm's R functions.
 *
 * Rules for a caller:
 *  - Call convlstm_api_check() first, from R's main thread (a .Call, or
 *    .onLoad through one). It compares the interface this header describes
 *    with the installed convlstm's (CL_API_VERSION and the size of every
 *    struct that crosses it) and looks up every function, so that no later
 *    call can fail to find one. A mismatch means the package was compiled
 *    against another convlstm and must be reinstalled: it would misread the
 *    structs.
 *  - R_GetCCallable is R API: the first call of each wrapper in a
 *    translation unit (each unit looks up its own pointers) must come from
 *    R's main thread; convlstm_api_check() in that unit does them all.
 *    After that the wrappers are plain C calls: they never raise an R error
 *    or jump; a failure is a cl_status with a message (the err buffer, or
 *    convlstm_model_error()).
 *  - A model made here (convlstm_model_create, convlstm_model_load) belongs
 *    to the caller, not to R's garbage collector: free it exactly once with
 *    convlstm_model_free(), which gives back every byte it holds (device
 *    memory included) and the data sets made for it. To tie it to an R
 *    object, put it in an external pointer whose finalizer (registered with
 *    R_RegisterCFinalizerEx(ptr, fin, TRUE)) frees it and clears the
 *    pointer, as tests/testthat/linkingto/src/client.c in convlstm's sources
 *    does. A plan from convlstm_model_plan() is freed with
 *    convlstm_plan_free(); a data set with convlstm_data_free() before its
 *    model, or by freeing its model.
 *  - Strings that the wrappers return (messages, names) belong to convlstm:
 *    a model's message is valid until the next call on that model.
 *  - One model, one thread at a time.
 *  - convlstm must stay loaded while any model made here lives; a package
 *    that imports from convlstm keeps it loaded.
 */
#ifndef CONVLSTM_API_H
#define CONVLSTM_API_H

#include <stddef.h>
#include <stdio.h> /* snprintf */
#include <R_ext/Rdynload.h> /* R_GetCCallable, R_RegisterCCallable, DL_FUNC */

#include "convlstm.h" /* the types, the functions' documentation, CL_API_VERSION */

#ifdef __cplusplus
extern "C" {
#endif

/* Every function of the interface, once: F(return type, name, (parameters),
 * (arguments)) for those that return a value, V(name, (parameters),
 * (arguments)) for void ones. name is the core's without its cl_: the
 * wrapper is convlstm_<name>, the callable "cl_<name>". convlstm's init.c
 * registers this same list, and its compiler checks every entry against the
 * declaration in convlstm.h. */
#define CONVLSTM_API_FUNCTIONS(F, V)                                                          \
  /* lifetime */                                                                              \
  F(cl_status, model_create, (const cl_config *cfg, cl_model **out, char *err, size_t errlen), \
    (cfg, out, err, errlen))                                                                  \
  V(model_free, (cl_model *m), (m))                                                           \
  F(int, models_alive, (void), ())                                                            \
  F(const char *, model_error, (const cl_model *m), (m))                                      \
  F(const cl_config *, model_config, (const cl_model *m), (m))                                \
  F(const char *, model_backend_name, (const cl_model *m), (m))                               \
  F(int, device_available, (cl_device d), (d))                                                \
  F(int, build_has_cuda, (void), ())                                                          \
  F(cl_status, gpu_info_get, (int device, cl_gpu_info *out, char *err, size_t errlen),        \
    (device, out, err, errlen))                                                               \
  /* parameters, torch's layout and names */                                                  \
  F(int, model_n_tensors, (const cl_model *m), (m))                                           \
  F(cl_status, model_tensor_info,                                                             \
    (const cl_model *m, int i, const char **name, int *ndim, int dims[4]),                    \
    (m, i, name, ndim, dims))                                                                 \
  F(size_t, model_n_params, (const cl_model *m), (m))                                         \
  F(cl_status, model_get_param, (cl_model *m, const char *name, float *out, size_t n),        \
    (m, name, out, n))                                                                        \
  F(cl_status, model_set_param, (cl_model *m, const char *name, const float *in, size_t n),   \
    (m, name, in, n))                                                                         \
  F(cl_status, model_get_grad, (cl_model *m, const char *name, float *out, size_t n),         \
    (m, name, out, n))                                                                        \
  F(cl_status, model_init_params, (cl_model *m, double (*uniform01)(void *), void *ctx),      \
    (m, uniform01, ctx))                                                                      \
  /* forward, loss, backward */                                                               \
  F(cl_status, model_forward,                                                                 \
    (cl_model *m, const cl_host_array *x, int training, const cl_step_options *opts),         \
    (m, x, training, opts))                                                                   \
  F(cl_status, model_last_shape, (const cl_model *m, int *B, int *T, int *H, int *W),         \
    (m, B, T, H, W))                                                                          \
  F(cl_status, model_read_output, (cl_model *m, int layer, cl_host_array *out),               \
    (m, layer, out))                                                                          \
  F(cl_status, model_read_state, (cl_model *m, int layer, int which, cl_host_array *out),     \
    (m, layer, which, out))                                                                   \
  F(cl_status, model_mse,                                                                     \
    (cl_model *m, const cl_host_array *y, cl_target target, double *loss),                    \
    (m, y, target, loss))                                                                     \
  F(cl_status, model_backward, (cl_model *m, cl_target target, const cl_host_array *grad),    \
    (m, target, grad))                                                                        \
  F(cl_status, model_zero_grad, (cl_model *m), (m))                                           \
  /* optimizers and the training step */                                                      \
  F(cl_status, optim_check, (const cl_optim *o, char *err, size_t errlen), (o, err, errlen))  \
  F(const char *, optim_kind_name, (cl_optim_kind k), (k))                                    \
  F(cl_optim_kind, optim_kind_of, (const char *name), (name))                                 \
  F(cl_status, model_optimizer_step, (cl_model *m, const cl_optim *opt), (m, opt))            \
  F(int64_t, model_optimizer_steps, (const cl_model *m), (m))                                 \
  F(cl_status, model_optimizer_reset, (cl_model *m), (m))                                     \
  F(double, model_grad_norm, (const cl_model *m), (m))                                        \
  /* losses */                                                                                \
  F(cl_status, loss_check, (const cl_loss_fn *f, char *err, size_t errlen), (f, err, errlen)) \
  F(const char *, loss_name, (cl_loss_kind k), (k))                                           \
  F(const char *, dropout_masks_name, (int kind), (kind))                                     \
  F(cl_status, model_train_step,                                                              \
    (cl_model *m, const cl_host_array *x, const cl_host_array *y, cl_target target,           \
     const cl_optim *opt, const cl_step_options *opts, double *loss),                         \
    (m, x, y, target, opt, opts, loss))                                                       \
  /* precision */                                                                             \
  F(cl_status, model_set_dtype, (cl_model *m, cl_dtype dtype), (m, dtype))                    \
  F(cl_status, model_get_loss_scale, (const cl_model *m, cl_loss_scale *out), (m, out))       \
  F(cl_status, model_set_loss_scale,                                                          \
    (cl_model *m, double init_scale, double growth_factor, double backoff_factor,             \
     int growth_interval),                                                                    \
    (m, init_scale, growth_factor, backoff_factor, growth_interval))                          \
  /* memory: statistics, the plan of a step, the limit */                                     \
  F(cl_status, model_memory_stats, (cl_model *m, cl_mem_stats *s), (m, s))                    \
  V(model_reset_peak, (cl_model *m), (m))                                                     \
  F(cl_status, model_empty_cache, (cl_model *m), (m))                                         \
  F(cl_status, model_set_memory_limit, (cl_model *m, size_t bytes), (m, bytes))               \
  F(const char *, mem_category_name, (cl_mem_category c), (c))                                \
  F(cl_status, model_plan,                                                                    \
    (cl_model *m, int B, int T, int H, int W, int training, const cl_optim *opt,              \
     const cl_step_options *opts, cl_plan *out),                                              \
    (m, B, T, H, W, training, opt, opts, out))                                                \
  V(plan_free, (cl_plan *p), (p))                                                             \
  /* names */                                                                                 \
  F(const char *, status_name, (cl_status s), (s))                                            \
  F(const char *, dtype_name, (cl_dtype t), (t))                                              \
  F(const char *, device_name, (cl_device d), (d))                                            \
  /* files: safetensors, as convlstm_save() and convlstm_load() in R */                       \
  F(cl_status, model_save,                                                                    \
    (cl_model *m, const char *path, const cl_optim *opt, int n_meta,                          \
     const char *const *meta_keys, const char *const *meta_values),                           \
    (m, path, opt, n_meta, meta_keys, meta_values))                                           \
  F(cl_status, model_load,                                                                    \
    (const char *path, const cl_config *runtime, int with_optimizer, cl_model **out,          \
     char *err, size_t errlen),                                                               \
    (path, runtime, with_optimizer, out, err, errlen))                                        \
  /* data sets on the device */                                                               \
  F(cl_status, data_create,                                                                   \
    (cl_model *m, const cl_host_array *x, const cl_host_array *y, cl_target target,           \
     cl_data **out),                                                                          \
    (m, x, y, target, out))                                                                   \
  V(data_free, (cl_data *d), (d))                                                             \
  F(size_t, data_bytes_for, (const cl_model *m, int N, int T, int H, int W, cl_target target), \
    (m, N, T, H, W, target))                                                                  \
  F(cl_status, model_train_step_data,                                                         \
    (cl_model *m, const cl_data *d, const int *idx, int n, const cl_optim *opt,               \
     const cl_step_options *opts, double *loss),                                              \
    (m, d, idx, n, opt, opts, loss))                                                          \
  /* batches converted ahead (on another thread while a step runs) */                         \
  F(cl_status, staged_fill,                                                                   \
    (const cl_model *m, cl_staged **b, const cl_host_array *x, const cl_host_array *y,        \
     char *err, size_t errlen),                                                               \
    (m, b, x, y, err, errlen))                                                                \
  V(staged_free, (cl_staged *b), (b))                                                         \
  F(cl_status, model_train_staged,                                                            \
    (cl_model *m, const cl_host_array *x, const cl_host_array *y, const cl_staged *b,         \
     cl_target target, const cl_optim *opt, const cl_step_options *opts, double *loss),       \
    (m, x, y, b, target, opt, opts, loss))

/* The pointer to "cl_<name>", looked up once per translation unit. The
 * detour through void (*)(void) keeps -Wcast-function-type quiet. */
#define CONVLSTM_API_POINTER_(ret, name, params)                                              \
  static inline ret(*convlstm_fn_##name##_(void)) params {                                    \
    static ret(*fn) params = NULL;                                                            \
    if (fn == NULL) fn = (ret(*) params)(void (*)(void))R_GetCCallable("convlstm", "cl_" #name); \
    return fn;                                                                                \
  }
#define CONVLSTM_API_WRAP_(ret, name, params, args)                                           \
  CONVLSTM_API_POINTER_(ret, name, params)                                                    \
  static inline ret convlstm_##name params { return convlstm_fn_##name##_() args; }
#define CONVLSTM_API_WRAP_VOID_(name, params, args)                                           \
  CONVLSTM_API_POINTER_(void, name, params)                                                   \
  static inline void convlstm_##name params { convlstm_fn_##name##_() args; }

CONVLSTM_API_FUNCTIONS(CONVLSTM_API_WRAP_, CONVLSTM_API_WRAP_VOID_)

/* 0 when the installed convlstm serves the interface this header describes,
 * after looking up every function; else -1 with the difference in err.
 * Call it from R's main thread: R_GetCCallable raises an R error when the
 * installed convlstm lacks a function or is not loaded. */
static inline int convlstm_api_check(char *err, size_t errlen) {
#define CONVLSTM_API_SIZE_(type) sizeof(type),
#define CONVLSTM_API_NAME_(type) #type,
  static const size_t mine[] = {CL_API_STRUCTS(CONVLSTM_API_SIZE_)};
  static const char *const names[] = {CL_API_STRUCTS(CONVLSTM_API_NAME_)};
#undef CONVLSTM_API_SIZE_
#undef CONVLSTM_API_NAME_
  enum { n = (int)(sizeof mine / sizeof mine[0]) };
  size_t theirs[sizeof mine / sizeof mine[0]];
  int (*layout)(size_t *, int) =
      (int (*)(size_t *, int))(void (*)(void))R_GetCCallable("convlstm", "cl_api_layout");
  int version = layout(theirs, n);
  if (version != CL_API_VERSION) {
    if (err != NULL && errlen > 0)
      snprintf(err, errlen,
               "compiled against convlstm's C interface version %d, but the installed "
               "convlstm has version %d: reinstall this package from source",
               CL_API_VERSION, version);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    if (theirs[i] != mine[i]) {
      if (err != NULL && errlen > 0)
        snprintf(err, errlen,
                 "compiled against a convlstm.h whose %s has %zu bytes, but the installed "
                 "convlstm's has %zu: reinstall this package from source",
                 names[i], mine[i], theirs[i]);
      return -1;
    }
  }
#define CONVLSTM_API_LOOKUP_(ret, name, params, args) (void)convlstm_fn_##name##_();
#define CONVLSTM_API_LOOKUP_VOID_(name, params, args) (void)convlstm_fn_##name##_();
  CONVLSTM_API_FUNCTIONS(CONVLSTM_API_LOOKUP_, CONVLSTM_API_LOOKUP_VOID_)
#undef CONVLSTM_API_LOOKUP_
#undef CONVLSTM_API_LOOKUP_VOID_
  if (err != NULL && errlen > 0) err[0] = '\0';
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
